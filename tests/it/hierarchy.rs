//! Workload API hierarchy semantics through the real router, standalone
//! mode: the root CompositePodGroup's priority and preemption policy are
//! authoritative for every group and pod beneath it (filter's member check
//! and preempt), and the feature-gate-off rule for preemption policies.

use crate::common;

use common::{app, post};
use kruntimes_scheduler::cache::cluster_index::Semantics;
use kruntimes_scheduler::serve::Standalone;
use kruntimes_scheduler::testkit::{self, Obj};
use serde_json::{Value, json};
use std::collections::BTreeMap;

const PRIORITY_MISMATCH: &str =
    "all pods in a single pod group should have the same priority as the pod group";
const POLICY_MISMATCH: &str = "all pods in a single pod group should have the same preemption policy as the pod group's preemption policy";
const POLICY_SHARED: &str = "all pods in a single pod group should have the same preemption policy";

fn node(name: &str) -> Value {
    testkit::node(name).value()
}

fn pod(name: &str, group: Option<&str>, priority: i32, node: Option<&str>) -> Value {
    let mut p = testkit::pod(name).priority(priority);
    if let Some(g) = group {
        p = p.group(g);
    }
    match node {
        Some(n) => p.on_node(n),
        None => p.phase("Pending"),
    }
    .value()
}

fn composite(name: &str, parent: Option<&str>, priority: i32, policy: Option<&str>) -> Value {
    with_parent_and_policy(testkit::composite(name).priority(priority), parent, policy)
}

fn group(name: &str, parent: Option<&str>, priority: i32, policy: Option<&str>) -> Value {
    with_parent_and_policy(testkit::pod_group(name).priority(priority), parent, policy)
}

fn with_parent_and_policy(mut g: Obj, parent: Option<&str>, policy: Option<&str>) -> Value {
    if let Some(p) = parent {
        g = g.parent(p);
    }
    if let Some(p) = policy {
        g = g.preemption_policy(p);
    }
    g.value()
}

async fn cluster(objects: Vec<Value>) -> Standalone {
    let a = app("");
    let r = post(
        &a,
        "/v1/objects",
        &json!({"kind": "List", "apiVersion": "v1", "items": objects}).to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    a
}

/// Filter over n1 and n2: the one reason every node got, or `""` if both
/// passed. The pod exists while it is filtered, as for kube-scheduler
/// (the extender plans only for pods its cache holds), and is gone after.
async fn filter(a: &Standalone, pod: &Value) -> String {
    let r = post(a, "/v1/objects", &pod.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = post(
        a,
        "/scheduler/filter",
        &json!({"Pod": pod, "Nodes": null, "NodeNames": ["n1", "n2"]}).to_string(),
    )
    .await;
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let gone = common::call(
        a,
        axum::http::Method::DELETE,
        &format!("/v1/objects?kind=Pod&namespace=ml&name={name}"),
        None,
    )
    .await;
    assert_eq!(gone.status, 204, "{}", gone.text);
    assert_eq!(r.status, 200, "{}", r.text);
    let un: BTreeMap<String, String> =
        serde_json::from_value(r.body["FailedAndUnresolvableNodes"].clone()).unwrap_or_default();
    let passed: Vec<String> =
        serde_json::from_value(r.body["NodeNames"].clone()).unwrap_or_default();
    if passed.len() == 2 {
        return String::new();
    }
    assert_eq!(un.len(), 2, "{}", r.text);
    un["n1"].clone()
}

/// Preempt with one candidate per victim (its node): the nodes returned.
async fn preempt(a: &Standalone, preemptor: &Value, victims: &[(&str, &str)]) -> Vec<String> {
    let meta: serde_json::Map<String, Value> = victims
        .iter()
        .map(|(node, v)| {
            (
                (*node).to_owned(),
                json!({"Pods": [{"UID": format!("{v}-uid")}], "NumPDBViolations": 0}),
            )
        })
        .collect();
    let r = post(
        a,
        "/scheduler/preempt",
        &json!({"Pod": preemptor, "NodeNameToVictims": null, "NodeNameToMetaVictims": meta})
            .to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body["NodeNameToMetaVictims"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// root (priority 100) → mid (5) → leaf PodGroups `a`, `b` (5): every
/// level below the root says 5, the root 100.
fn three_levels(root_policy: Option<&str>) -> Vec<Value> {
    vec![
        node("n1"),
        node("n2"),
        composite("root", None, 100, root_policy),
        composite("mid", Some("root"), 5, None),
        group("a", Some("mid"), 5, None),
        group("b", Some("mid"), 5, None),
    ]
}

#[tokio::test]
async fn the_root_priority_is_authoritative_for_members_and_preemption() {
    let mut objs = three_levels(None);
    // Victims: a plain pod at 50 on n1; on n2 a pod of a hierarchy whose
    // leaf says 1 but whose root says 200.
    objs.push(pod("plain", None, 50, Some("n1")));
    objs.push(composite("high-root", None, 200, None));
    objs.push(group("low-leaf", Some("high-root"), 1, None));
    objs.push(pod("shielded", Some("low-leaf"), 200, Some("n2")));
    let a = cluster(objs).await;
    // A member at its leaf's priority differs from the root's.
    assert_eq!(
        filter(&a, &pod("m5", Some("a"), 5, None)).await,
        PRIORITY_MISMATCH
    );
    // At the root's, it passes, in either leaf.
    let member = pod("m100", Some("b"), 100, None);
    assert_eq!(filter(&a, &member).await, "");
    // Preempting at the root's 100: the plain 50 may go; the pod whose
    // leaf says 1 is at its root's 200 and may not.
    assert_eq!(
        preempt(&a, &member, &[("n1", "plain"), ("n2", "shielded")]).await,
        ["n1"]
    );
}

#[tokio::test]
async fn a_root_with_never_forbids_preemption_for_the_whole_hierarchy() {
    let mut objs = three_levels(Some("Never"));
    objs.push(pod("plain", None, 50, Some("n1")));
    let a = cluster(objs).await;
    // The leaf says nothing (PreemptLowerPriority): the root's Never wins,
    // so a member must say Never too.
    let loud = pod("loud", Some("a"), 100, None);
    assert_eq!(filter(&a, &loud).await, POLICY_MISMATCH);
    let mut quiet = pod("quiet", Some("a"), 100, None);
    quiet["spec"]["preemptionPolicy"] = json!("Never");
    assert_eq!(filter(&a, &quiet).await, "");
    assert!(preempt(&a, &quiet, &[("n1", "plain")]).await.is_empty());
    // The same pod under a root that may preempt gets its candidate.
    let b = cluster({
        let mut o = three_levels(None);
        o.push(pod("plain", None, 50, Some("n1")));
        o
    })
    .await;
    assert_eq!(preempt(&b, &loud, &[("n1", "plain")]).await, ["n1"]);
}

#[tokio::test]
async fn with_the_gate_off_members_share_one_preemption_policy_among_themselves() {
    let mut objs = three_levels(Some("Never"));
    objs.push(pod("plain", None, 50, Some("n1")));
    let mut first = pod("first", Some("a"), 100, None);
    first["spec"]["preemptionPolicy"] = json!("Never");
    objs.push(first);
    let a = cluster(objs).await;
    a.state.nodes.set_semantics(Semantics {
        group_preemption_policy: false,
        ..Semantics::default()
    });
    // The groups' policy is not there: a member differing from another
    // member is refused with upstream's gate-off message.
    let loud = pod("loud", Some("a"), 100, None);
    assert_eq!(filter(&a, &loud).await, POLICY_SHARED);
    // Members of another group are not compared.
    assert_eq!(filter(&a, &pod("other", Some("b"), 100, None)).await, "");
    // The priority is still the root's.
    assert_eq!(
        filter(&a, &pod("low", Some("b"), 5, None)).await,
        PRIORITY_MISMATCH
    );
    // The root's Never is not there either: the pod's own policy decides.
    assert_eq!(
        preempt(&a, &pod("p", Some("b"), 100, None), &[("n1", "plain")]).await,
        ["n1"]
    );
}

fn sized(mut p: Value, cpu: u32) -> Value {
    p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!(cpu.to_string());
    p
}

fn gang_group(name: &str, min: u32, priority: i32) -> Value {
    let mut g = group(name, None, priority, None);
    g["spec"]["schedulingPolicy"] = json!({"gang": {"minCount": min}});
    g
}

#[tokio::test]
async fn a_gang_that_cannot_fit_triggers_no_preemption() {
    // Two 4-cpu nodes, each full with a low-priority 4-cpu pod.
    let base = |min: u32, members: usize| {
        let mut objs = vec![node("n1"), node("n2"), gang_group("g", min, 100)];
        objs.push(sized(pod("low1", None, 1, Some("n1")), 4));
        objs.push(sized(pod("low2", None, 1, Some("n2")), 4));
        for i in 0..members {
            objs.push(sized(pod(&format!("g-{i}"), Some("g"), 100, None), 4));
        }
        objs
    };
    let victims = [("n1", "low1"), ("n2", "low2")];
    // Three 4-cpu members on two 4-cpu nodes: no eviction can help.
    let a = cluster(base(3, 3)).await;
    let p = sized(pod("g-0", Some("g"), 100, None), 4);
    assert!(preempt(&a, &p, &victims).await.is_empty());
    // Two members fit once both low pods are gone: both candidates stay.
    let a = cluster(base(2, 2)).await;
    assert_eq!(preempt(&a, &p, &victims).await, ["n1", "n2"]);
    // A pod the gang may not preempt blocks n2: one node is not enough.
    let mut objs = base(2, 2);
    objs[4] = sized(pod("low2", None, 500, Some("n2")), 4);
    let a = cluster(objs).await;
    assert!(preempt(&a, &p, &[("n1", "low1")]).await.is_empty());
    // A pod in no group is not held to any of this.
    let a = cluster(base(3, 3)).await;
    let plain = sized(pod("plain", None, 100, None), 4);
    assert_eq!(preempt(&a, &plain, &victims).await, ["n1", "n2"]);
}
