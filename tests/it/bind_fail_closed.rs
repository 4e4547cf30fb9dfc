//! Bind fails closed, through the router in standalone mode: a pod whose
//! PodGroup, parent CompositePodGroup or ResourceClaims the cache does not
//! hold answers `Error` naming what is missing, is not bound and stays
//! unassumed; once the object is there the same bind goes through.

use crate::common;

use common::{app, get, post};
use kruntimes_scheduler::serve::Standalone;
use kruntimes_scheduler::testkit;
use serde_json::{Value, json};

/// Pod `ml/name` requesting cpu 1, in `group`, with the pod claim `claim`
/// (a ResourceClaim of that name).
fn pod(name: &str, group: Option<&str>, claim: Option<&str>) -> Value {
    let mut p = testkit::pod(name);
    if let Some(g) = group {
        p = p.group(g);
    }
    if let Some(c) = claim {
        p = p.uses_claim(c, Some(c), None);
    }
    p.value()
}

/// PodGroup `ml/name`, a gang of one, under the composite `parent`.
fn group(name: &str, parent: Option<&str>) -> Value {
    let g = testkit::pod_group(name).gang(1);
    match parent {
        Some(p) => g.parent(p),
        None => g,
    }
    .value()
}

/// CompositePodGroup `ml/name`, a gang of one group, under `parent`.
fn composite(name: &str, parent: Option<&str>) -> Value {
    let c = testkit::composite(name).gang(1);
    match parent {
        Some(p) => c.parent(p),
        None => c,
    }
    .value()
}

/// Claim `ml/name`, allocated with no binding conditions.
fn claim(name: &str) -> Value {
    testkit::claim(name, "c")
        .namespace("ml")
        .allocated(&[("drv", "n1", "d0")])
        .value()
}

async fn upsert(a: &Standalone, items: Vec<Value>) {
    let r = post(a, "/v1/objects", &testkit::list(items).to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text);
}

async fn bind(a: &Standalone, pod: &str) -> String {
    let body =
        json!({"PodName": pod, "PodNamespace": "ml", "PodUID": format!("{pod}-uid"), "Node": "n1"});
    let r = post(a, "/scheduler/bind", &body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body["Error"].as_str().expect("Error").to_owned()
}

async fn node_name(a: &Standalone, pod: &str) -> Value {
    let r = get(a, &format!("/v1/objects?kind=Pod&namespace=ml&name={pod}")).await;
    r.body["items"][0]["spec"]["nodeName"].clone()
}

/// Not bound, not assumed, nothing counted on n1.
async fn assert_unbound(a: &Standalone, pod: &str) {
    assert_eq!(node_name(a, pod).await, Value::Null);
    assert!(!a.state.extender.nodes.read().is_assumed("ml", pod));
    assert_eq!(
        a.state.extender.nodes.read().used("n1", "cpu").unwrap_or(0),
        0
    );
}

#[tokio::test]
async fn a_pod_group_missing_from_the_cache_fails_the_bind() {
    let a = app("");
    upsert(
        &a,
        vec![
            testkit::node("n1").allocatable("8", "8Gi").value(),
            pod("p", Some("g"), None),
        ],
    )
    .await;
    assert_eq!(
        bind(&a, "p").await,
        "pod group ml/g is not in the cache yet"
    );
    assert_unbound(&a, "p").await;
    upsert(&a, vec![group("g", None)]).await;
    assert_eq!(bind(&a, "p").await, "");
    assert_eq!(node_name(&a, "p").await, "n1");
}

#[tokio::test]
async fn a_parent_composite_missing_at_any_level_fails_the_bind() {
    let a = app("");
    upsert(
        &a,
        vec![
            testkit::node("n1").allocatable("8", "8Gi").value(),
            pod("p", Some("g"), None),
            group("g", Some("mid")),
            composite("mid", Some("root")),
        ],
    )
    .await;
    assert_eq!(
        bind(&a, "p").await,
        "composite pod group ml/root is not in the cache yet"
    );
    assert_unbound(&a, "p").await;
    upsert(&a, vec![composite("root", None)]).await;
    assert_eq!(bind(&a, "p").await, "");
}

#[tokio::test]
async fn claims_missing_from_the_cache_fail_the_bind() {
    let a = app("");
    upsert(
        &a,
        vec![
            testkit::node("n1").allocatable("8", "8Gi").value(),
            pod("p", None, Some("gpu")),
        ],
    )
    .await;
    assert_eq!(
        bind(&a, "p").await,
        "resource claim ml/gpu is not allocated in the cache yet"
    );
    assert_unbound(&a, "p").await;
    upsert(&a, vec![claim("gpu")]).await;
    // Allocated, but to a device no slice in the cache publishes yet.
    assert_eq!(
        bind(&a, "p").await,
        "resource claim ml/gpu is allocated off node n1 in the cache: its allocation for n1 is not in the cache yet"
    );
    upsert(&a, vec![testkit::slice("s1", "drv", "n1", &["d0"]).value()]).await;
    assert_eq!(bind(&a, "p").await, "");
    assert_eq!(node_name(&a, "p").await, "n1");
}

#[tokio::test]
async fn failures_are_counted_by_cause() {
    let a = app("");
    upsert(
        &a,
        vec![
            testkit::node("n1").allocatable("8", "8Gi").value(),
            pod("p", Some("g"), None),
        ],
    )
    .await;
    bind(&a, "p").await;
    let m = get(&a, "/metrics").await.text;
    assert!(
        m.contains(r#"kruntimes_extender_bind_failures_total{cause="NotCached"} 1"#),
        "{m}"
    );
}
