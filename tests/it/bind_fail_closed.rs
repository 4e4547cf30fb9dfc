//! Bind fails closed, through the router in standalone mode: a pod whose
//! PodGroup, parent CompositePodGroup or ResourceClaims the cache does not
//! hold answers `Error` naming what is missing, is not bound and stays
//! unassumed; once the object is there the same bind goes through.

use crate::common;

use common::{app, get, post};
use kruntimes_scheduler::serve::Standalone;
use kruntimes_scheduler::testkit;
use serde_json::{Value, json};

fn pod(name: &str, group: Option<&str>, claim: Option<&str>) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "i",
        "resources": {"requests": {"cpu": "1"}}}]});
    if let Some(g) = group {
        spec["schedulingGroup"] = json!({"podGroupName": g});
    }
    if let Some(c) = claim {
        spec["resourceClaims"] = json!([{"name": c, "resourceClaimName": c}]);
    }
    json!({"kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("{name}-uid")}, "spec": spec})
}

fn group(name: &str, parent: Option<&str>) -> Value {
    let mut spec = json!({"schedulingPolicy": {"gang": {"minCount": 1}}});
    if let Some(p) = parent {
        spec["parentCompositePodGroupName"] = json!(p);
    }
    json!({"kind": "PodGroup", "apiVersion": "scheduling.k8s.io/v1beta1",
        "metadata": {"name": name, "namespace": "ml"}, "spec": spec})
}

fn composite(name: &str, parent: Option<&str>) -> Value {
    let mut spec = json!({"schedulingPolicy": {"gang": {"minGroupCount": 1}},
        "workloadRef": {"workloadName": "w", "templateName": name}});
    if let Some(p) = parent {
        spec["parentCompositePodGroupName"] = json!(p);
    }
    json!({"kind": "CompositePodGroup", "apiVersion": "scheduling.k8s.io/v1alpha3",
        "metadata": {"name": name, "namespace": "ml"}, "spec": spec})
}

/// Claim `name`, allocated with no binding conditions.
fn claim(name: &str) -> Value {
    json!({"kind": "ResourceClaim", "apiVersion": "resource.k8s.io/v1",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "c"}}]}},
        "status": {"allocation": {"devices": {"results": [{"request": "r", "driver": "drv",
            "pool": "n1", "device": "d0"}]}}}})
}

async fn upsert(a: &Standalone, items: Vec<Value>) {
    let r = post(
        a,
        "/v1/objects",
        &json!({"kind": "List", "apiVersion": "v1", "items": items}).to_string(),
    )
    .await;
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
