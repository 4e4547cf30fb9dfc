//! The kube-scheduler extender through the router, standalone mode: request
//! bodies exactly as kube-scheduler marshals them (`tests/data/extender`),
//! answers checked the way Go's `encoding/json` would decode them.

use crate::common;

use axum::http::StatusCode;
use common::{app, data, get, post};
use serde_json::{Value, json};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(data(&format!("extender/{name}"))).expect("fixture exists")
}

fn state() -> kruntimes_scheduler::serve::Standalone {
    app("extender/cluster.yaml")
}

// === Go decoding rules ===
//
// Go matches keys case-insensitively and ignores unknown ones, but a value
// of the wrong JSON type is an error (`json: cannot unmarshal ...`); `null`
// is accepted for pointers, maps, slices and strings (left zero).

fn go_string(v: Option<&Value>, what: &str) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => panic!("{what}: cannot unmarshal {other} into Go string"),
    }
}

fn go_int64(v: Option<&Value>, what: &str) -> i64 {
    match v {
        None | Some(Value::Null) => 0,
        Some(Value::Number(n)) => n
            .as_i64()
            .unwrap_or_else(|| panic!("{what}: cannot unmarshal number {n} into Go int64")),
        Some(other) => panic!("{what}: cannot unmarshal {other} into Go int64"),
    }
}

fn go_string_map(v: Option<&Value>, what: &str) -> std::collections::BTreeMap<String, String> {
    match v {
        None | Some(Value::Null) => Default::default(),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| (k.clone(), go_string(Some(v), what)))
            .collect(),
        Some(other) => panic!("{what}: cannot unmarshal {other} into Go map"),
    }
}

fn object<'a>(v: &'a Value, what: &str) -> &'a serde_json::Map<String, Value> {
    v.as_object()
        .unwrap_or_else(|| panic!("{what}: cannot unmarshal {v} into Go struct"))
}

/// `ExtenderFilterResult`; returns (NodeNames, node names of Nodes, failed, unresolvable, error).
#[allow(clippy::type_complexity)]
fn go_filter_result(
    v: &Value,
) -> (
    Option<Vec<String>>,
    Option<Vec<String>>,
    std::collections::BTreeMap<String, String>,
    std::collections::BTreeMap<String, String>,
    String,
) {
    let o = object(v, "ExtenderFilterResult");
    let names = match o.get("NodeNames") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|x| go_string(Some(x), "NodeNames[]"))
                .collect(),
        ),
        Some(other) => panic!("NodeNames: cannot unmarshal {other}"),
    };
    let nodes = match o.get("Nodes") {
        None | Some(Value::Null) => None,
        Some(Value::Object(l)) => Some(match l.get("items") {
            None | Some(Value::Null) => vec![],
            Some(Value::Array(items)) => items
                .iter()
                .map(|n| {
                    object(n, "Node");
                    go_string(n.pointer("/metadata/name"), "Node.metadata.name")
                })
                .collect(),
            Some(other) => panic!("Nodes.items: cannot unmarshal {other}"),
        }),
        Some(other) => panic!("Nodes: cannot unmarshal {other} into v1.NodeList"),
    };
    (
        names,
        nodes,
        go_string_map(o.get("FailedNodes"), "FailedNodes"),
        go_string_map(
            o.get("FailedAndUnresolvableNodes"),
            "FailedAndUnresolvableNodes",
        ),
        go_string(o.get("Error"), "Error"),
    )
}

/// `HostPriorityList`.
fn go_priorities(v: &Value) -> Vec<(String, i64)> {
    let a = v
        .as_array()
        .unwrap_or_else(|| panic!("cannot unmarshal {v} into HostPriorityList"));
    a.iter()
        .map(|h| {
            let o = object(h, "HostPriority");
            let score = go_int64(o.get("Score"), "Score");
            assert!((0..=10).contains(&score), "score {score} out of 0..10");
            (go_string(o.get("Host"), "Host"), score)
        })
        .collect()
}

/// `ExtenderPreemptionResult` → node → (UIDs, NumPDBViolations).
fn go_preemption(v: &Value) -> std::collections::BTreeMap<String, (Vec<String>, i64)> {
    let o = object(v, "ExtenderPreemptionResult");
    match o.get("NodeNameToMetaVictims") {
        None | Some(Value::Null) => Default::default(),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(node, mv)| {
                let mv = object(mv, "MetaVictims");
                let pods = match mv.get("Pods") {
                    None | Some(Value::Null) => vec![],
                    Some(Value::Array(a)) => a
                        .iter()
                        .map(|p| go_string(object(p, "MetaPod").get("UID"), "UID"))
                        .collect(),
                    Some(other) => panic!("Pods: cannot unmarshal {other}"),
                };
                (
                    node.clone(),
                    (
                        pods,
                        go_int64(mv.get("NumPDBViolations"), "NumPDBViolations"),
                    ),
                )
            })
            .collect(),
        Some(other) => panic!("NodeNameToMetaVictims: cannot unmarshal {other}"),
    }
}

fn go_binding(v: &Value) -> String {
    go_string(object(v, "ExtenderBindingResult").get("Error"), "Error")
}

// === filter ===

#[tokio::test]
async fn filter_cache_capable_answers_node_names() {
    let app = state();
    let r = post(
        &app,
        "/scheduler/filter",
        &fixture("filter-cache-capable.json"),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let (names, nodes, failed, unresolvable, error) = go_filter_result(&r.body);
    assert_eq!(error, "");
    assert_eq!(nodes, None, "cache-capable answers carry no Nodes");
    assert_eq!(names, Some(vec!["n2".to_owned(), "n3".to_owned()]));
    assert_eq!(
        failed.get("n1").map(String::as_str),
        Some("Insufficient cpu")
    );
    // Free memory on dra-node is eaten by the GPU's per-pod overhead.
    assert_eq!(
        failed.get("dra-node").map(String::as_str),
        Some("Insufficient memory")
    );
    assert!(
        unresolvable["ghost"].contains("not found"),
        "{unresolvable:?}"
    );
    assert_eq!(failed.len() + unresolvable.len() + 2, 5);
}

#[tokio::test]
async fn dra_overhead_per_pod_filters_a_node_the_pod_would_otherwise_fit() {
    let app = state();
    let body = json!({"Pod": {"metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"memory": "1Gi"}}}]}},
        "NodeNames": ["dra-node"]})
    .to_string();
    let r = post(&app, "/scheduler/filter", &body).await;
    let (names, _, failed, _, _) = go_filter_result(&r.body);
    assert_eq!(
        names,
        Some(vec![]),
        "NodeNames is [] when none pass, never null"
    );
    assert_eq!(failed["dra-node"], "Insufficient memory");
    assert!(r.text.contains("\"NodeNames\":[]"), "{}", r.text);
    // Without the device's overhead (slice gone), 512Mi + 1Gi fits in 4Gi.
    let d = common::call(
        &app,
        axum::http::Method::DELETE,
        "/v1/objects?kind=ResourceSlice&name=dra-node-gpus",
        None,
    )
    .await;
    assert_eq!(d.status, StatusCode::NO_CONTENT, "{}", d.text);
    let r = post(&app, "/scheduler/filter", &body).await;
    let (names, _, failed, _, _) = go_filter_result(&r.body);
    assert_eq!(names, Some(vec!["dra-node".to_owned()]), "{failed:?}");
}

#[tokio::test]
async fn a_pending_pods_own_allocated_claim_counts_on_the_node_of_its_device() {
    let app = state();
    // Shares gpu-claim (allocated on dra-node) with gpu-user. Its request
    // alone fits dra-node (3.5Gi of 4Gi used), but the device's per-pod
    // overhead is taken once more for this pod there; elsewhere the device
    // takes nothing.
    let body =
        json!({"Pod": {"metadata": {"name": "gpu-user-2", "namespace": "default", "uid": "u2"},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}],
            "containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"memory": "256Mi"}, "claims": [{"name": "gpu"}]}}]}},
        "NodeNames": ["dra-node", "n3"], "Nodes": null})
        .to_string();
    let r = post(&app, "/scheduler/filter", &body).await;
    let (names, _, failed, _, error) = go_filter_result(&r.body);
    assert_eq!(error, "");
    assert_eq!(names, Some(vec!["n3".to_owned()]), "{failed:?}");
    assert_eq!(failed["dra-node"], "Insufficient memory");
    // The same pod without the claim fits dra-node.
    let body = json!({"Pod": {"metadata": {"name": "plain", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"memory": "256Mi"}}}]}},
        "NodeNames": ["dra-node"]})
    .to_string();
    let r = post(&app, "/scheduler/filter", &body).await;
    let (names, ..) = go_filter_result(&r.body);
    assert_eq!(names, Some(vec!["dra-node".to_owned()]));
}

#[tokio::test]
async fn filter_full_mode_answers_the_given_node_objects() {
    let app = state();
    let req = fixture("filter-full.json");
    let r = post(&app, "/scheduler/filter", &req).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let (names, nodes, failed, _, error) = go_filter_result(&r.body);
    assert_eq!(error, "");
    assert_eq!(names, None);
    assert_eq!(nodes, Some(vec!["n2".to_owned(), "n3".to_owned()]));
    assert_eq!(failed["n1"], "Insufficient cpu");
    // The objects are echoed verbatim.
    let sent: Value = serde_json::from_str(&req).unwrap();
    assert_eq!(r.body["Nodes"]["items"][0], sent["Nodes"]["items"][1]);
}

#[tokio::test]
async fn group_priority_mismatch_is_unresolvable_everywhere() {
    let app = state();
    let r = post(
        &app,
        "/scheduler/filter",
        &fixture("filter-group-priority.json"),
    )
    .await;
    let (names, _, failed, unresolvable, _) = go_filter_result(&r.body);
    assert_eq!(names, Some(vec![]));
    assert!(failed.is_empty());
    for n in ["n1", "n2"] {
        assert_eq!(
            unresolvable[n],
            "all pods in a single pod group should have the same priority as the pod group"
        );
    }
    // Same priority, different preemption policy.
    let mut body: Value = serde_json::from_str(&fixture("filter-group-priority.json")).unwrap();
    body["Pod"]["spec"]["priority"] = json!(100);
    body["Pod"]["spec"]["priorityClassName"] = Value::Null;
    body["Pod"]["spec"]["preemptionPolicy"] = json!("Never");
    let r = post(&app, "/scheduler/filter", &body.to_string()).await;
    let (_, _, _, unresolvable, _) = go_filter_result(&r.body);
    assert_eq!(
        unresolvable["n1"],
        "all pods in a single pod group should have the same preemption policy as the pod group's preemption policy"
    );
    // Consistent member: passes.
    body["Pod"]["spec"]["preemptionPolicy"] = Value::Null;
    let r = post(&app, "/scheduler/filter", &body.to_string()).await;
    let (names, _, _, _, _) = go_filter_result(&r.body);
    assert_eq!(names, Some(vec!["n1".to_owned(), "n2".to_owned()]));
}

#[tokio::test]
async fn malformed_requests_get_clear_errors_not_crashes() {
    let app = state();
    for body in ["", "{", "1", r#"{"NodeNames": "n1"}"#] {
        let r = post(&app, "/scheduler/filter", body).await;
        assert!(r.status.is_client_error(), "{body}: {}", r.status);
        assert!(r.body["error"].is_string(), "{}", r.text);
    }
    // No Pod: an Error kube-scheduler can read.
    let r = post(
        &app,
        "/scheduler/filter",
        r#"{"Pod": null, "NodeNames": ["n1"]}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let (names, _, _, _, error) = go_filter_result(&r.body);
    assert_eq!(names, Some(vec![]));
    assert!(!error.is_empty());
    // A request quantity that does not parse: Error, HTTP 200.
    let body = json!({"Pod": {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "i", "resources": {"requests": {"cpu": "-1"}}}]}}, "NodeNames": ["n1"]});
    let r = post(&app, "/scheduler/filter", &body.to_string()).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(go_filter_result(&r.body).4.contains("cpu"), "{}", r.text);
}

// === prioritize ===

#[tokio::test]
async fn prioritize_scores_least_allocated_in_range() {
    let app = state();
    let r = post(
        &app,
        "/scheduler/prioritize",
        &fixture("prioritize-cache-capable.json"),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        go_priorities(&r.body),
        vec![("n2".into(), 3), ("n3".into(), 7), ("ghost".into(), 0)]
    );
    let full = post(&app, "/scheduler/prioritize", &fixture("filter-full.json")).await;
    let scores = go_priorities(&full.body);
    assert_eq!(scores.len(), 3);
}

// === bind ===

#[tokio::test]
async fn bind_writes_node_name_and_counts_the_pod() {
    let app = state();
    let r = post(&app, "/scheduler/bind", &fixture("bind.json")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(go_binding(&r.body), "");
    let pod = get(&app, "/v1/objects?kind=Pod&namespace=default&name=web-1").await;
    assert_eq!(pod.body["items"][0]["spec"]["nodeName"], "n3");
    // Counted on n3 now: 2 of 8 cpu used, so a 7-cpu pod no longer fits there.
    let body = json!({"Pod": {"metadata": {"name": "q", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "7"}}}]}},
        "NodeNames": ["n3"]});
    let r = post(&app, "/scheduler/filter", &body.to_string()).await;
    let (names, _, failed, _, _) = go_filter_result(&r.body);
    assert_eq!(names, Some(vec![]));
    assert_eq!(failed["n3"], "Insufficient cpu");
    // Binding again: already bound.
    let r = post(&app, "/scheduler/bind", &fixture("bind.json")).await;
    assert!(
        go_binding(&r.body).contains("already bound to node n3"),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn bind_failures_are_precise() {
    let app = state();
    let cases = [
        (
            json!({"PodName": "web-1", "PodNamespace": "default", "PodUID": "other", "Node": "n2"}),
            "has uid web-1-uid, not other",
        ),
        (
            json!({"PodName": "gone", "PodNamespace": "default", "PodUID": "u", "Node": "n2"}),
            "pod default/gone not found",
        ),
        (
            json!({"PodName": "web-1", "PodNamespace": "default", "PodUID": "web-1-uid", "Node": "ghost"}),
            "node ghost not found",
        ),
    ];
    for (body, want) in cases {
        let r = post(&app, "/scheduler/bind", &body.to_string()).await;
        assert_eq!(r.status, StatusCode::OK);
        let err = go_binding(&r.body);
        assert!(err.contains(want), "{body}: {err}");
    }
    // Nothing was bound and nothing stays assumed: n2 still takes a 2-cpu pod.
    let pod = get(&app, "/v1/objects?kind=Pod&namespace=default&name=web-1").await;
    assert!(pod.body["items"][0]["spec"].get("nodeName").is_none());
    let r = post(
        &app,
        "/scheduler/filter",
        &fixture("filter-cache-capable.json"),
    )
    .await;
    assert_eq!(
        go_filter_result(&r.body).0,
        Some(vec!["n2".into(), "n3".into()])
    );
}

// === preempt ===

#[tokio::test]
async fn preempt_keeps_existing_nodes_with_lower_priority_victims() {
    let app = state();
    // The preemptor (priority 0) may not preempt `big` (priority 0).
    for f in ["preempt-meta.json", "preempt-full.json"] {
        let r = post(&app, "/scheduler/preempt", &fixture(f)).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert!(go_preemption(&r.body).is_empty(), "{f}: {}", r.text);
    }
    // At priority 1000 it may; the node the cache does not know is dropped.
    let raised = |f: &str| {
        let mut body: Value = serde_json::from_str(&fixture(f)).unwrap();
        body["Pod"]["spec"]["priority"] = json!(1000);
        body.to_string()
    };
    let r = post(&app, "/scheduler/preempt", &raised("preempt-meta.json")).await;
    let got = go_preemption(&r.body);
    assert_eq!(got.len(), 1);
    assert_eq!(got["n1"], (vec!["big-uid".to_owned()], 1));
    let r = post(&app, "/scheduler/preempt", &raised("preempt-full.json")).await;
    let got = go_preemption(&r.body);
    assert_eq!(got.len(), 1);
    assert_eq!(got["n1"], (vec!["big-uid".to_owned()], 0));
}

#[tokio::test]
async fn cluster_scoped_kinds_have_no_namespace() {
    let app = state();
    let r = get(&app, "/v1/objects?kind=nodes&name=n1").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body["items"][0]["metadata"].get("namespace").is_none());
    let r = get(&app, "/v1/objects?kind=priorityclasses").await;
    assert_eq!(r.body["items"][0]["value"], 1000);
    let r = post(
        &app,
        "/v1/objects",
        r#"{"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n9"}, "status": {"allocatable": "x"}}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
}

#[tokio::test]
async fn large_requests_are_accepted_up_to_the_extender_limit() {
    let app = state();
    // ~5 MB of node names: above the general 4 MiB API limit.
    let names: Vec<String> = (0..400_000).map(|i| format!("node-{i:07}")).collect();
    let body =
        json!({"Pod": {"metadata": {"name": "p"}, "spec": {"containers": []}}, "NodeNames": names});
    let r = post(&app, "/scheduler/filter", &body.to_string()).await;
    assert_eq!(r.status, StatusCode::OK);
    let (names, _, _, unresolvable, _) = go_filter_result(&r.body);
    assert_eq!(names, Some(vec![]));
    assert_eq!(unresolvable.len(), 400_000);
}

/// Filter counts the pending pods kube-scheduler nominated to a node as
/// its own filter does (`RunFilterPluginsWithNominatedPods`: pods of at
/// least the filtered pod's priority, not the pod itself). kube-scheduler
/// cannot see the gang members this extender keeps reserved, and this
/// cache counted no nominations: each side passed a node both together
/// overfilled (simulation seed 8854).
#[tokio::test]
async fn filter_counts_pods_nominated_to_a_node_as_kube_scheduler_does() {
    use kruntimes_scheduler::testkit;
    let app = common::app("");
    let objects = testkit::list([
        testkit::node("n1").allocatable("2", "8Gi").value(),
        testkit::node("n2").allocatable("2", "8Gi").value(),
        testkit::pod("a").on_node("n1").value(),
        testkit::pod("big")
            .priority(100)
            .set(&["status", "nominatedNodeName"], "n1")
            .value(),
    ]);
    let r = post(&app, "/v1/objects", &objects.to_string()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let filter = |name: &str, priority: i32| {
        let pod = testkit::pod(name).priority(priority).value();
        json!({"Pod": pod, "NodeNames": ["n1", "n2"]}).to_string()
    };
    // Priority 0 and 100: `big` holds the cpu n1 has left.
    for (name, priority) in [("low", 0), ("peer", 100)] {
        let r = post(&app, "/scheduler/filter", &filter(name, priority)).await;
        let (names, _, failed, unresolvable, error) = go_filter_result(&r.body);
        assert_eq!(error, "");
        assert_eq!(names, Some(vec!["n2".to_owned()]), "{name}: {failed:?}");
        assert_eq!(
            failed["n1"],
            "Insufficient cpu (counting the pods kube-scheduler nominated to the node)"
        );
        assert!(unresolvable.is_empty(), "preemption may still help");
    }
    // A higher pod does not see it, nor does `big` itself.
    for (name, priority) in [("high", 101), ("big", 100)] {
        let r = post(&app, "/scheduler/filter", &filter(name, priority)).await;
        let (names, _, failed, ..) = go_filter_result(&r.body);
        assert_eq!(
            names,
            Some(vec!["n1".to_owned(), "n2".to_owned()]),
            "{name}: {failed:?}"
        );
    }
}
