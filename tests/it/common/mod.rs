//! Shared helpers: build the real standalone service and call its router.
#![allow(dead_code)]

use axum::http::{Method, StatusCode};
use kruntimes_scheduler::cache::CacheConfig;
use kruntimes_scheduler::cluster::load::load_path;
use kruntimes_scheduler::http::router;
use kruntimes_scheduler::serve::{Standalone, standalone};
use kruntimes_scheduler::testkit;
use std::path::Path;

pub fn data(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The standalone service over `tests/data/<file>`.
pub fn app(file: &str) -> Standalone {
    let objects = if file.is_empty() {
        Vec::new()
    } else {
        load_path(&data(file)).expect("fixture loads")
    };
    standalone(CacheConfig::default(), objects).expect("fixture is valid")
}

pub use kruntimes_scheduler::testkit::Resp;

/// One request through the service's router.
pub async fn call(app: &Standalone, method: Method, uri: &str, body: Option<&str>) -> Resp {
    testkit::call(router(app.state.clone()), method, uri, body).await
}

pub async fn get(app: &Standalone, uri: &str) -> Resp {
    call(app, Method::GET, uri, None).await
}

pub async fn post(app: &Standalone, uri: &str, body: &str) -> Resp {
    call(app, Method::POST, uri, Some(body)).await
}

/// Freshens every Runtime Pod heartbeat in `ns`, as runtimed would.
pub async fn heartbeat(app: &Standalone, ns: &str) {
    let r = post(
        app,
        &format!("/v1/runtime-pods/heartbeat?namespace={ns}"),
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

/// kube-scheduler's own NodeResourcesFit (cpu) over its cache, for the
/// doubles of its scheduling loop. kube-scheduler assumes a pod on its node
/// when the scheduling cycle ends and counts it there until its informer
/// shows the pod bound or the bind fails; the extender learns of the pod
/// only when its bind arrives (after PreBind, or later for a member held
/// for quorum). A double without this offers the extender a node
/// kube-scheduler's own filter never would, and the two views each miss a
/// pod the other counts.
#[derive(Clone, Default)]
pub struct SchedulerCache(
    std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, (String, u64)>>>,
);

impl SchedulerCache {
    /// The scheduling cycle chose `node` for `pod` (`cpu` millicores).
    pub fn assume(&self, pod: &str, node: &str, cpu: u64) {
        self.lock().insert(pod.to_owned(), (node.to_owned(), cpu));
    }

    /// The bind answered: bound (the store shows it now) or failed
    /// (`ForgetPod`).
    pub fn forget(&self, pod: &str) {
        self.lock().remove(pod);
    }

    /// The nodes of `nodes` kube-scheduler's fit passes for `pod` of `cpu`
    /// millicores. Where it has pods assumed that the store does not show
    /// bound yet, the node must hold them, the pods bound there and this
    /// one; elsewhere its count is the extender's, which decides.
    pub fn fitting(
        &self,
        store: &kruntimes_scheduler::cluster::standalone::StandaloneStore,
        nodes: &[String],
        pod: &str,
        cpu: u64,
    ) -> Vec<String> {
        use kruntimes_scheduler::cluster::kinds::Kind;
        let pods = store.list(Kind::Pod, None, None);
        let bound: std::collections::BTreeMap<&str, &str> = pods
            .iter()
            .filter_map(|p| {
                Some((
                    p["metadata"]["name"].as_str()?,
                    p["spec"]["nodeName"].as_str()?,
                ))
            })
            .collect();
        let mut in_flight: std::collections::BTreeMap<String, u64> = Default::default();
        for (p, (node, c)) in self.lock().iter() {
            if p != pod && !bound.contains_key(p.as_str()) {
                *in_flight.entry(node.clone()).or_default() += c;
            }
        }
        nodes
            .iter()
            .filter(|n| {
                let Some(assumed) = in_flight.get(n.as_str()) else {
                    return true;
                };
                let used: u64 = pods
                    .iter()
                    .filter(|p| p["spec"]["nodeName"] == n.as_str())
                    .map(cpu_of)
                    .sum();
                let alloc = store
                    .list(Kind::Node, None, Some(n))
                    .first()
                    .map_or(0, |v| milli(&v["status"]["allocatable"]["cpu"]));
                used + assumed + cpu <= alloc
            })
            .cloned()
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<String, (String, u64)>> {
        self.0.lock().expect("scheduler cache")
    }
}

/// A pod's effective cpu request in millicores (0 when it cannot be read).
pub fn cpu_of(pod: &serde_json::Value) -> u64 {
    serde_json::from_value::<k8s_openapi::api::core::v1::PodSpec>(pod["spec"].clone())
        .ok()
        .and_then(|s| kruntimes_scheduler::pods::fit::pod_requests(&s).ok())
        .and_then(|r| r.get("cpu").copied())
        .unwrap_or(0)
}

fn milli(q: &serde_json::Value) -> u64 {
    q.as_str()
        .and_then(|s| {
            kruntimes_scheduler::pods::fit::amount(
                "cpu",
                &k8s_openapi::apimachinery::pkg::api::resource::Quantity(s.to_owned()),
            )
            .ok()
        })
        .unwrap_or(0)
}
