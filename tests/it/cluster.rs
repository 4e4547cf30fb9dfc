//! Cluster mode against the test API server: the real `kube::Client`,
//! watchers, status patches, events and leases.

use crate::apiserver;

use apiserver::{FakeApi, Res};
use k8s_openapi::jiff::Timestamp;
use kruntimes_scheduler::cache::CacheConfig;
use kruntimes_scheduler::cluster::leader::LeaderConfig;
use kruntimes_scheduler::cluster::standalone::kube_time;
use kruntimes_scheduler::serve::{Cluster, cluster, lead};
use kruntimes_scheduler::testkit;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// A Ready Runtime Pod `ns/name` of runtime `py` declaring `caps`, its
/// runtimed heartbeat now.
fn pod(name: &str, caps: &[(&str, &str)]) -> Value {
    testkit::runtime_pod(name, caps, &kube_time(Timestamp::now())).value()
}

/// A Run `ns/name` of runtime `py` requesting `reqs`.
fn run(name: &str, reqs: &[(&str, &str)]) -> Value {
    testkit::run(name, reqs).value()
}

fn config() -> CacheConfig {
    CacheConfig {
        heartbeat_stale_after: Duration::from_secs(3600),
        ..CacheConfig::default()
    }
}

async fn wait_for(what: &str, cond: impl FnMut() -> bool) {
    testkit::wait_until(what, Duration::from_secs(10), cond).await;
}

fn phase(api: &FakeApi, name: &str) -> Option<String> {
    api.get(Res::Runs, "ns", name)?
        .pointer("/status/phase")?
        .as_str()
        .map(str::to_owned)
}

/// Starts a replica without leader election.
async fn replica(api: &FakeApi) -> (Cluster, tokio::task::JoinHandle<()>) {
    let c = cluster(config(), api.client(), "test").await;
    let task = tokio::spawn(Arc::clone(&c.controller).run(2, Duration::from_secs(3600)));
    wait_for("cache sync", || c.state.runs.cache.is_synced()).await;
    (c, task)
}

/// Usage per pod computed from the API server's objects alone.
fn usage_from_api(api: &FakeApi) -> BTreeMap<String, u64> {
    let mut used = BTreeMap::new();
    for r in api.list(Res::Runs) {
        let p = r
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("");
        if matches!(p, "Scheduled" | "Running" | "Ready") {
            let pod = r
                .pointer("/status/assignedPod")
                .and_then(Value::as_str)
                .unwrap()
                .to_owned();
            let n: u64 = r
                .pointer("/spec/resources/requests/runs")
                .and_then(Value::as_str)
                .map_or(1, |s| s.parse().unwrap());
            *used.entry(pod).or_default() += n.max(1);
        }
    }
    used
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_get_scheduled_pending_ones_explained_with_events() {
    let api = FakeApi::start().await;
    api.put(Res::Pods, pod("rp-1", &[("runs", "2")]));
    api.put(Res::Pods, pod("rp-2", &[("runs", "1")]));
    // A pod without the runtime label is not watched at all.
    api.put(
        Res::Pods,
        testkit::pod("web").namespace("ns").phase("Running").value(),
    );
    let (c, task) = replica(&api).await;
    for i in 0..4 {
        api.put(Res::Runs, run(&format!("r{i}"), &[]));
    }
    wait_for("3 scheduled and 1 pending", || {
        let phases: Vec<_> = (0..4)
            .filter_map(|i| phase(&api, &format!("r{i}")))
            .collect();
        phases.iter().filter(|p| *p == "Scheduled").count() == 3
            && phases.iter().any(|p| p == "Pending")
    })
    .await;
    let pending = (0..4)
        .map(|i| api.get(Res::Runs, "ns", &format!("r{i}")).unwrap())
        .find(|r| r["status"]["phase"] == "Pending")
        .unwrap();
    assert_eq!(pending["status"].get("reason"), None, "not upstream's");
    assert_eq!(
        pending["status"]["conditions"][0]["reason"],
        "InsufficientCapacity"
    );
    assert_eq!(
        pending["status"]["message"],
        "waiting for available runtime pods for runtime \"py\": 0/2 Runtime Pods can take this Run: 2 InsufficientCapacity"
    );
    assert_eq!(pending["status"]["conditions"][0]["type"], "Scheduled");
    let scheduled = (0..4)
        .map(|i| api.get(Res::Runs, "ns", &format!("r{i}")).unwrap())
        .find(|r| r["status"]["phase"] == "Scheduled")
        .unwrap();
    let pod_name = scheduled["status"]["assignedPod"].as_str().unwrap();
    assert_eq!(
        scheduled["status"]["assignedPodUID"],
        format!("uid-Pod-ns-{pod_name}")
    );
    assert_eq!(
        usage_from_api(&api),
        BTreeMap::from([("rp-1".into(), 2), ("rp-2".into(), 1)])
    );
    // A Warning event names the reason.
    wait_for("pending event", || {
        api.list(Res::Events)
            .iter()
            .any(|e| e["reason"] == "InsufficientCapacity" && e["type"] == "Warning")
    })
    .await;
    // Completion frees capacity: the Pending Run is woken and placed.
    let mut done = api
        .get(
            Res::Runs,
            "ns",
            scheduled["metadata"]["name"].as_str().unwrap(),
        )
        .unwrap();
    done["status"]["phase"] = json!("Succeeded");
    api.put(Res::Runs, done);
    let pname = pending["metadata"]["name"].as_str().unwrap().to_owned();
    wait_for("pending run scheduled", || {
        phase(&api, &pname).as_deref() == Some("Scheduled")
    })
    .await;
    c.state.runs.cache.check_invariants().unwrap();
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_on_bind_requeues_and_later_succeeds() {
    let api = FakeApi::start().await;
    api.put(Res::Pods, pod("rp-1", &[("runs", "1")]));
    let (c, task) = replica(&api).await;
    api.inner.lock().fail_status_patches = 2;
    api.put(Res::Runs, run("a", &[]));
    wait_for("a scheduled", || {
        phase(&api, "a").as_deref() == Some("Scheduled")
    })
    .await;
    let g = api.inner.lock();
    assert_eq!(g.conflicts, 2);
    let writes: Vec<_> = g
        .status_writes
        .iter()
        .filter(|(k, s)| k == "ns/a" && s["phase"] == "Scheduled")
        .collect();
    assert_eq!(writes.len(), 1, "bound exactly once");
    drop(g);
    let metrics = c.state.runs.metrics.encode();
    assert!(
        metrics.contains("kruntimes_reservation_conflicts_total 2"),
        "{metrics}"
    );
    c.state.runs.cache.check_invariants().unwrap();
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_watch_never_lets_a_second_run_overbook() {
    let api = FakeApi::start().await;
    api.put(Res::Pods, pod("rp-1", &[("runs", "1")]));
    let (c, task) = replica(&api).await;
    // Every Run watch event arrives 300ms late: after A is bound, the cache
    // keeps seeing A as Pending for a while.
    api.inner.lock().run_watch_lag = Duration::from_millis(300);
    api.put(Res::Runs, run("a", &[]));
    api.put(Res::Runs, run("b", &[]));
    wait_for("both decided", || {
        phase(&api, "a").is_some() && phase(&api, "b").is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let phases = [phase(&api, "a").unwrap(), phase(&api, "b").unwrap()];
    assert_eq!(
        phases.iter().filter(|p| *p == "Scheduled").count(),
        1,
        "{phases:?}"
    );
    assert_eq!(
        phases.iter().filter(|p| *p == "Pending").count(),
        1,
        "{phases:?}"
    );
    let g = api.inner.lock();
    assert_eq!(
        g.status_writes
            .iter()
            .filter(|(_, s)| s["phase"] == "Scheduled")
            .count(),
        1
    );
    drop(g);
    assert_eq!(usage_from_api(&api), BTreeMap::from([("rp-1".into(), 1)]));
    c.state.runs.cache.check_invariants().unwrap();
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_watch_relists_without_double_counting() {
    let api = FakeApi::start().await;
    api.put(Res::Pods, pod("rp-1", &[("runs", "4")]));
    let a = testkit::run("a", &[("runs", "2")]).status("Running", Some("rp-1"));
    let b = testkit::run("b", &[]).status("Running", Some("rp-1"));
    api.put(Res::Runs, a.value());
    api.put(Res::Runs, b.value());
    let (c, task) = replica(&api).await;
    let usage = |c: &Cluster| {
        c.state
            .runs
            .cache
            .runtime_pods(Some("ns"), None, Timestamp::now())[0]
            .usage
            .clone()
    };
    wait_for("usage 3", || {
        usage(&c).get("runs").map(String::as_str) == Some("3")
    })
    .await;
    // Disconnect every watch and compact history: resuming gets 410, so the
    // watchers must relist. Meanwhile b finishes and c appears.
    api.drop_watches_and_compact();
    let mut b = api.get(Res::Runs, "ns", "b").unwrap();
    b["status"]["phase"] = json!("Succeeded");
    api.put(Res::Runs, b);
    api.put(Res::Runs, run("c", &[]));
    wait_for("c scheduled", || {
        phase(&api, "c").as_deref() == Some("Scheduled")
    })
    .await;
    wait_for("usage 3 again", || {
        usage(&c).get("runs").map(String::as_str) == Some("3")
    })
    .await;
    // Another drop with nothing changed: usage stays exactly the same.
    api.drop_watches_and_compact();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(usage(&c).get("runs").map(String::as_str), Some("3"));
    let v = &c
        .state
        .runs
        .cache
        .runtime_pods(Some("ns"), None, Timestamp::now())[0];
    assert!(v.assumed.is_empty(), "{v:?}");
    c.state.runs.cache.check_invariants().unwrap();
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_handover_never_assigns_a_run_twice() {
    let api = FakeApi::start().await;
    api.put(Res::Pods, pod("rp-1", &[("runs", "3")]));
    api.put(Res::Pods, pod("rp-2", &[("runs", "3")]));
    let mut replicas = Vec::new();
    for id in ["one", "two"] {
        let c = cluster(config(), api.client(), id).await;
        let cfg = LeaderConfig {
            lease_name: "kruntimes-scheduler".into(),
            namespace: "ns".into(),
            identity: id.into(),
            lease_duration: Duration::from_secs(2),
            grace: Duration::from_secs(1),
        };
        let task = tokio::spawn(lead(
            api.client(),
            cfg,
            Arc::clone(&c.controller),
            2,
            Duration::from_secs(3600),
        ));
        replicas.push((id, c, task));
    }
    wait_for("a leader", || {
        api.get(Res::Leases, "ns", "kruntimes-scheduler")
            .and_then(|l| l.pointer("/spec/holderIdentity").cloned())
            .is_some_and(|h| h.is_string())
    })
    .await;
    for i in 0..3 {
        api.put(Res::Runs, run(&format!("first-{i}"), &[]));
    }
    wait_for("first runs scheduled", || {
        (0..3).all(|i| phase(&api, &format!("first-{i}")).as_deref() == Some("Scheduled"))
    })
    .await;
    let leader =
        api.get(Res::Leases, "ns", "kruntimes-scheduler").unwrap()["spec"]["holderIdentity"]
            .as_str()
            .unwrap()
            .to_owned();
    // The leader goes away; the standby takes over within the lease duration.
    let pos = replicas
        .iter()
        .position(|(id, _, _)| *id == leader)
        .unwrap();
    let (_, old, task) = replicas.remove(pos);
    task.abort();
    old.state.runs.cache.queue().shutdown();
    for w in &old.watchers {
        w.abort();
    }
    for i in 0..3 {
        api.put(Res::Runs, run(&format!("second-{i}"), &[]));
    }
    wait_for("second runs scheduled by the new leader", || {
        (0..3).all(|i| phase(&api, &format!("second-{i}")).as_deref() == Some("Scheduled"))
    })
    .await;
    let holder =
        api.get(Res::Leases, "ns", "kruntimes-scheduler").unwrap()["spec"]["holderIdentity"]
            .clone();
    assert_ne!(holder, json!(leader));
    let g = api.inner.lock();
    let mut per_run: BTreeMap<&str, usize> = BTreeMap::new();
    for (k, s) in &g.status_writes {
        if s["phase"] == "Scheduled" {
            *per_run.entry(k.as_str()).or_default() += 1;
        }
    }
    assert_eq!(per_run.len(), 6);
    assert!(
        per_run.values().all(|n| *n == 1),
        "a Run was assigned twice: {per_run:?}"
    );
    drop(g);
    assert!(usage_from_api(&api).values().all(|u| *u <= 3));
    for (_, c, task) in replicas {
        c.state.runs.cache.check_invariants().unwrap();
        task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unserved_api_groups_disable_features_without_blocking_readiness() {
    let api = FakeApi::start().await;
    api.inner.lock().unserved = vec![Res::Runs, Res::Runtimes];
    api.put(Res::Pods, pod("rp-1", &[("runs", "1")]));
    let c = cluster(config(), api.client(), "test").await;
    wait_for("ready without Runs", || c.state.runs.cache.is_synced()).await;
    wait_for("pods still watched", || {
        c.state
            .runs
            .cache
            .runtime_pods(Some("ns"), None, Timestamp::now())
            .len()
            == 1
    })
    .await;
    for w in c.watchers {
        w.abort();
    }
}

/// At start the service finds which APIs it reads are served: a missing
/// one is named, with the gate to enable, in the readiness detail (still
/// 200: the features that need it are off, the rest works) and in
/// `kruntimes_api_served{kind} 0`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_workload_api_is_named_in_readiness_and_a_metric() {
    let api = FakeApi::start().await;
    api.inner.lock().unserved = vec![Res::PodGroups, Res::CompositePodGroups];
    let c = cluster(config(), api.client(), "test").await;
    wait_for("ready without the Workload API", || {
        c.state.runs.cache.is_synced()
    })
    .await;
    let health = kruntimes_scheduler::http::health_router(c.state.clone());
    let r = testkit::get(health, "/readyz").await;
    assert_eq!(r.status, axum::http::StatusCode::OK, "{}", r.text);
    assert!(r.text.starts_with("ok\n"), "{}", r.text);
    assert!(
        r.text
            .contains("scheduling.k8s.io/v1beta1 PodGroup not served")
            && r.text.contains("GenericWorkload feature gate")
            && r.text
                .contains("--runtime-config=scheduling.k8s.io/v1beta1=true"),
        "{}",
        r.text
    );
    assert!(
        r.text
            .contains("scheduling.k8s.io/v1alpha3 CompositePodGroup not served")
            && r.text.contains("CompositePodGroup feature gates"),
        "{}",
        r.text
    );
    let m = c.state.runs.metrics.encode();
    assert!(
        m.contains("kruntimes_api_served{kind=\"PodGroup\"} 0"),
        "{m}"
    );
    assert!(m.contains("kruntimes_api_served{kind=\"Node\"} 1"), "{m}");
    for w in c.watchers {
        w.abort();
    }
}

/// Until its caches have synced (at start, and after a restart of the
/// extender container) every verb is an error kube-scheduler retries (a
/// non-200 answer), never a node marked failed on a cache that does not
/// know the nodes yet; once synced the same calls answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_is_a_retryable_error_until_the_caches_sync() {
    let api = FakeApi::start().await;
    api.put(Res::Nodes, testkit::node("n1").value());
    api.fail_lists(Res::Nodes, true);
    let c = cluster(config(), api.client(), "test").await;
    let app = || kruntimes_scheduler::http::router(c.state.clone());
    let pod = testkit::pod("p").namespace("ns").uid("p-uid").requests(&[]);
    let calls = [
        (
            "/scheduler/filter",
            json!({"Pod": pod, "NodeNames": ["n1"]}),
        ),
        (
            "/scheduler/prioritize",
            json!({"Pod": pod, "NodeNames": ["n1"]}),
        ),
        (
            "/scheduler/preempt",
            json!({"Pod": pod, "NodeNameToMetaVictims": {}}),
        ),
        (
            "/scheduler/bind",
            json!({"PodName": "p", "PodNamespace": "ns", "PodUID": "p-uid", "Node": "n1"}),
        ),
    ];
    assert!(!c.state.runs.cache.is_synced());
    for (path, body) in &calls {
        let r = testkit::post(app(), path, &body.to_string()).await;
        assert_eq!(
            r.status,
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "{path}: {}",
            r.text
        );
        assert!(r.text.contains("not synced yet"), "{path}: {}", r.text);
    }
    api.fail_lists(Res::Nodes, false);
    wait_for("synced", || c.state.runs.cache.is_synced()).await;
    let (path, body) = &calls[0];
    let r = testkit::post(app(), path, &body.to_string()).await;
    assert_eq!(r.status, axum::http::StatusCode::OK, "{}", r.text);
    for w in c.watchers {
        w.abort();
    }
}

#[tokio::test]
async fn a_tls_client_builds_without_a_crypto_provider_panic() {
    // Only one rustls provider is compiled in, so rustls can pick it.
    let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
    assert!(kube::Client::try_from(config).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extender_binds_through_the_api_with_the_uid_precondition() {
    let api = FakeApi::start().await;
    api.put(
        Res::Nodes,
        testkit::node("n1")
            .allocatable("4", "4Gi")
            .pod_slots("10")
            .value(),
    );
    api.put(
        Res::Pods,
        testkit::pod("web")
            .namespace("ns")
            .requests(&[("cpu", "3")])
            .value(),
    );
    let c = cluster(config(), api.client(), "test").await;
    // Groups the test server does not serve (scheduling, resource) do not block readiness.
    wait_for("ready", || c.state.runs.cache.is_synced()).await;
    wait_for("node and pod cached", || {
        let s = c.state.extender.nodes.read();
        s.has_node("n1") && s.pod("ns", "web").is_some()
    })
    .await;
    let app = kruntimes_scheduler::http::router(c.state.clone());
    let call = |body: Value| {
        let app = app.clone();
        async move {
            use tower::ServiceExt;
            let req = axum::http::Request::post("/scheduler/bind")
                .header("content-type", "application/json")
                .body(axum::body::Body::from(body.to_string()))
                .unwrap();
            let resp = app.oneshot(req).await.unwrap();
            assert_eq!(resp.status(), 200);
            let b = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .unwrap();
            serde_json::from_slice::<Value>(&b).unwrap()["Error"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let err =
        call(json!({"PodName": "web", "PodNamespace": "ns", "PodUID": "stale", "Node": "n1"}))
            .await;
    assert!(err.contains("replaced"), "{err}");
    assert!(api.inner.lock().bindings.is_empty());
    let err = call(
        json!({"PodName": "web", "PodNamespace": "ns", "PodUID": "uid-Pod-ns-web", "Node": "n1"}),
    )
    .await;
    assert_eq!(err, "");
    assert_eq!(
        api.inner.lock().bindings,
        vec![("ns/web".to_owned(), "n1".to_owned())]
    );
    // Counted on n1 at once (assumed), then confirmed by the watch.
    wait_for("binding observed", || {
        let s = c.state.extender.nodes.read();
        s.pod("ns", "web").and_then(|p| p.node.clone()).as_deref() == Some("n1")
            && !s.is_assumed("ns", "web")
    })
    .await;
    assert_eq!(c.state.extender.nodes.read().used("n1", "cpu"), Some(3000));
    let err = call(
        json!({"PodName": "web", "PodNamespace": "ns", "PodUID": "uid-Pod-ns-web", "Node": "n1"}),
    )
    .await;
    assert!(err.contains("already bound"), "{err}");
    let err =
        call(json!({"PodName": "gone", "PodNamespace": "ns", "PodUID": "", "Node": "n1"})).await;
    assert!(err.contains("not found"), "{err}");
    for w in c.watchers {
        w.abort();
    }
}

/// `POST /scheduler/bind` through the router; the answer's `Error`.
async fn bind_call(app: &axum::Router, body: Value) -> String {
    use tower::ServiceExt;
    let req = axum::http::Request::post("/scheduler/bind")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let b = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    serde_json::from_slice::<Value>(&b).unwrap()["Error"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Claim `gpu` allocated for pod `web`: device gpu-0 binds when `Attached`
/// is True and has failed when `AttachFailed` is; `conditions` are the
/// device's reported conditions.
fn gpu_claim(conditions: &[(&str, &str)]) -> Value {
    testkit::claim("gpu", "gpu.example.com")
        .namespace("ns")
        .allocated(&[("gpu.example.com", "n1", "gpu-0")])
        .binding_conditions(0, &["Attached"], &["AttachFailed"])
        .device_conditions(
            ("gpu.example.com", "n1", "gpu-0"),
            conditions,
            "2026-01-01T00:00:00Z",
        )
        .reserved_for(&[("web", "uid-Pod-ns-web")])
        .value()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extender_clears_a_failed_claim_allocation_through_the_api() {
    let api = FakeApi::start().await;
    api.put(
        Res::Nodes,
        testkit::node("n1")
            .allocatable("4", "4Gi")
            .pod_slots("10")
            .value(),
    );
    api.put(
        Res::Pods,
        testkit::pod("web")
            .namespace("ns")
            .requests(&[])
            .uses_claim("gpu", Some("gpu"), None)
            .value(),
    );
    api.put(
        Res::ResourceSlices,
        testkit::slice("n1-gpu", "gpu.example.com", "n1", &["gpu-0"]).value(),
    );
    let failed = api.put(
        Res::ResourceClaims,
        gpu_claim(&[("Attached", "False"), ("AttachFailed", "True")]),
    );
    let c = cluster(config(), api.client(), "test").await;
    wait_for("ready", || c.state.runs.cache.is_synced()).await;
    wait_for("pod and claim cached", || {
        let s = c.state.extender.nodes.read();
        s.has_node("n1") && s.pod("ns", "web").is_some() && s.claim_binding("ns/gpu").is_some()
    })
    .await;
    let app = kruntimes_scheduler::http::router(c.state.clone());
    let bind =
        json!({"PodName": "web", "PodNamespace": "ns", "PodUID": "uid-Pod-ns-web", "Node": "n1"});
    let err = bind_call(&app, bind.clone()).await;
    assert!(
        err.contains("binding failure condition AttachFailed is True"),
        "{err}"
    );
    assert!(err.contains("allocation cleared"), "{err}");
    assert!(api.inner.lock().bindings.is_empty());
    // One status patch, preconditioned on the claim as it was seen.
    let patches = api.inner.lock().claim_status_patches.clone();
    assert_eq!(patches.len(), 1);
    assert_eq!(patches[0].0, "ns/gpu");
    assert_eq!(
        patches[0].1["metadata"]["resourceVersion"],
        failed["metadata"]["resourceVersion"]
    );
    assert_eq!(patches[0].1["metadata"]["uid"], failed["metadata"]["uid"]);
    let stored = api.get(Res::ResourceClaims, "ns", "gpu").unwrap();
    for field in ["allocation", "devices", "reservedFor"] {
        assert!(stored["status"].get(field).is_none(), "{field}: {stored}");
    }
    // The watch brings the cleared claim back; nothing gates any more.
    wait_for("cleared claim observed", || {
        c.state
            .extender
            .nodes
            .read()
            .claim_binding("ns/gpu")
            .is_none()
    })
    .await;
    // Allocated again, and the driver reports the device attached: it binds.
    api.put(Res::ResourceClaims, gpu_claim(&[("Attached", "True")]));
    wait_for("reallocated claim observed", || {
        c.state
            .extender
            .nodes
            .read()
            .claim_binding("ns/gpu")
            .is_some()
    })
    .await;
    assert_eq!(bind_call(&app, bind).await, "");
    assert_eq!(
        api.inner.lock().bindings,
        vec![("ns/web".to_owned(), "n1".to_owned())]
    );
    assert_eq!(api.inner.lock().claim_status_patches.len(), 1);
    // Before it passed, the gate read the claim to check its cache was
    // current (a GET, not served from the watch).
    assert!(
        api.inner.lock().requests.iter().any(|r| r.verb == "get"
            && r.group == "resource.k8s.io"
            && r.resource == "resourceclaims"
            && r.namespace == "ns"
            && r.name == "gpu"),
        "no GET of the claim"
    );
    for w in c.watchers {
        w.abort();
    }
}

/// `GET uri` through the real router with an optional bearer token.
async fn get_with_token(
    app: &axum::Router,
    uri: &str,
    token: Option<&str>,
) -> (axum::http::StatusCode, String) {
    use tower::ServiceExt as _;
    let mut req = axum::http::Request::builder().uri(uri);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let resp = app
        .clone()
        .oneshot(req.body(axum::body::Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn read_api_and_metrics_authenticate_and_authorize_callers() {
    let api = FakeApi::start().await;
    {
        let mut g = api.inner.lock();
        g.tokens.insert("reader-token".into(), "alice".into());
        g.tokens.insert("nobody-token".into(), "bob".into());
        g.tokens.insert("prom-token".into(), "prometheus".into());
        g.grants
            .push(("alice".into(), "get runs.kruntimes.io".into()));
        g.grants.push(("prometheus".into(), "get /metrics".into()));
    }
    let mut c = cluster(config(), api.client(), "test").await;
    c.state.runs.access = Some(kruntimes_scheduler::http::auth::AccessControl::new(
        api.client(),
        Duration::from_secs(60),
    ));
    wait_for("ready", || c.state.runs.cache.is_synced()).await;
    let app = kruntimes_scheduler::http::router(c.state.clone());
    let health = kruntimes_scheduler::http::health_router(c.state.clone());

    // Anonymous and invalid callers: 401, with the challenge.
    let (s, body) = get_with_token(&app, "/v1/runs?namespace=ns", None).await;
    assert_eq!(s, 401, "{body}");
    assert!(body.contains("bearer token is required"), "{body}");
    let (s, body) = get_with_token(&app, "/v1/runs?namespace=ns", Some("forged")).await;
    assert_eq!(s, 401, "{body}");
    // Authenticated but not authorized: 403 naming what was checked.
    let (s, body) = get_with_token(&app, "/v1/runs?namespace=ns", Some("nobody-token")).await;
    assert_eq!(s, 403, "{body}");
    assert!(body.contains("runs.kruntimes.io"), "{body}");
    // Authorized: 200, for every Run API path.
    let (s, body) = get_with_token(&app, "/v1/runs?namespace=ns", Some("reader-token")).await;
    assert_eq!(s, 200, "{body}");
    let (s, _) = get_with_token(&app, "/v1/runtime-pods?namespace=ns", Some("reader-token")).await;
    assert_eq!(s, 200);
    // Metrics need their own grant, on both listeners.
    for router in [&app, &health] {
        let (s, _) = get_with_token(router, "/metrics", None).await;
        assert_eq!(s, 401);
        let (s, _) = get_with_token(router, "/metrics", Some("reader-token")).await;
        assert_eq!(s, 403);
        let (s, body) = get_with_token(router, "/metrics", Some("prom-token")).await;
        assert_eq!(s, 200);
        assert!(body.contains("# EOF"), "{body}");
        // Health stays open.
        let (s, _) = get_with_token(router, "/healthz", None).await;
        assert_eq!(s, 200);
        let (s, _) = get_with_token(router, "/readyz", None).await;
        assert_eq!(s, 200);
    }
    // Decisions are cached: asking again makes no API call.
    let reviews = |api: &FakeApi| {
        api.inner
            .lock()
            .requests
            .iter()
            .filter(|r| r.resource == "tokenreviews")
            .count()
    };
    let before = reviews(&api);
    let (s, _) = get_with_token(&app, "/v1/runs?namespace=ns", Some("reader-token")).await;
    assert_eq!(s, 200);
    assert_eq!(reviews(&api), before);
}

/// The Pod watcher lists in pages as an API server serves them (500 a
/// page): 1,203 Runtime Pods arrive in three pages and the cache holds
/// every one, none twice; a pod added after the list comes by the watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_listed_in_pages_and_all_arrive() {
    let api = FakeApi::start().await;
    for i in 0..1_203 {
        api.put(Res::Pods, pod(&format!("rp-{i:04}"), &[("runs", "1")]));
    }
    let (c, task) = replica(&api).await;
    let pod_lists = api
        .inner
        .lock()
        .requests
        .iter()
        .filter(|r| r.resource == "pods" && r.verb == "list")
        .count();
    assert!(
        pod_lists >= 3,
        "1,203 pods in pages of 500: {pod_lists} lists"
    );
    let names = |c: &Cluster| -> Vec<String> {
        c.state
            .runs
            .cache
            .runtime_pods(Some("ns"), None, Timestamp::now())
            .into_iter()
            .map(|p| p.name)
            .collect()
    };
    let want: Vec<String> = (0..1_203).map(|i| format!("rp-{i:04}")).collect();
    assert_eq!(names(&c), want);
    api.put(Res::Pods, pod("rp-9999", &[("runs", "1")]));
    wait_for("the watched pod", || names(&c).len() == 1_204).await;
    task.abort();
}
