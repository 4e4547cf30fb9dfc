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

/// Pod `ml/name` of `priority` in `group`: Running on `node`, or Pending.
fn pod_obj(name: &str, group: Option<&str>, priority: i32, node: Option<&str>) -> Obj {
    let mut p = testkit::pod(name).priority(priority);
    if let Some(g) = group {
        p = p.group(g);
    }
    match node {
        Some(n) => p.on_node(n),
        None => p.phase("Pending"),
    }
}

fn pod(name: &str, group: Option<&str>, priority: i32, node: Option<&str>) -> Value {
    pod_obj(name, group, priority, node).value()
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
        testkit::node("n1").value(),
        testkit::node("n2").value(),
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
    a.state.extender.nodes.set_semantics(Semantics {
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

/// `p` requesting `cpu` cores.
fn sized(p: Obj, cpu: u32) -> Value {
    p.requests(&[("cpu", &cpu.to_string())]).value()
}

/// PodGroup `ml/name` of `priority`, a gang of `min`.
fn gang_group(name: &str, min: u32, priority: i32) -> Value {
    testkit::pod_group(name)
        .priority(priority)
        .gang(min)
        .value()
}

#[tokio::test]
async fn a_gang_that_cannot_fit_triggers_no_preemption() {
    // Two 4-cpu nodes, each full with a low-priority 4-cpu pod.
    let base = |min: u32, members: usize| {
        let mut objs = vec![
            testkit::node("n1").value(),
            testkit::node("n2").value(),
            gang_group("g", min, 100),
        ];
        objs.push(sized(pod_obj("low1", None, 1, Some("n1")), 4));
        objs.push(sized(pod_obj("low2", None, 1, Some("n2")), 4));
        for i in 0..members {
            objs.push(sized(pod_obj(&format!("g-{i}"), Some("g"), 100, None), 4));
        }
        objs
    };
    let victims = [("n1", "low1"), ("n2", "low2")];
    // Three 4-cpu members on two 4-cpu nodes: no eviction can help.
    let a = cluster(base(3, 3)).await;
    let p = sized(pod_obj("g-0", Some("g"), 100, None), 4);
    assert!(preempt(&a, &p, &victims).await.is_empty());
    // Two members fit once both low pods are gone: both candidates stay.
    let a = cluster(base(2, 2)).await;
    assert_eq!(preempt(&a, &p, &victims).await, ["n1", "n2"]);
    // A pod the gang may not preempt blocks n2: one node is not enough.
    let mut objs = base(2, 2);
    objs[4] = sized(pod_obj("low2", None, 500, Some("n2")), 4);
    let a = cluster(objs).await;
    assert!(preempt(&a, &p, &[("n1", "low1")]).await.is_empty());
    // A pod in no group is not held to any of this.
    let a = cluster(base(3, 3)).await;
    let plain = sized(pod_obj("plain", None, 100, None), 4);
    assert_eq!(preempt(&a, &plain, &victims).await, ["n1", "n2"]);
}

// === three nested topology levels ===

/// One scheduling cycle per pod as kube-scheduler runs it (filter over
/// every node, prioritize, pick the best, bind in the background), pods
/// that no node passed or whose bind failed retried, for `rounds` rounds.
/// With `preempt`, a pod no node passed runs kube-scheduler's PostFilter:
/// every node with pods of lower priority is a candidate (its victims those
/// pods), the extender's preempt verb narrows them, and the victims of the
/// first candidate it keeps are deleted. Returns the pods left unscheduled
/// with their last reason.
async fn schedule_all(
    a: &Standalone,
    pods: &[Value],
    rounds: usize,
    preempt: bool,
) -> BTreeMap<String, String> {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;
    let all: Vec<String> = {
        let r = common::get(a, "/v1/objects?kind=Node").await;
        r.body["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_owned))
            .collect()
    };
    let name = |p: &Value| {
        p["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let mut queue = pods.to_vec();
    let mut left = BTreeMap::new();
    for _ in 0..rounds {
        left.clear();
        let mut binds = Vec::new();
        for p in &queue {
            let f = post(
                a,
                "/scheduler/filter",
                &json!({"Pod": p, "Nodes": null, "NodeNames": all}).to_string(),
            )
            .await;
            let passed: Vec<String> =
                serde_json::from_value(f.body["NodeNames"].clone()).unwrap_or_default();
            if passed.is_empty() {
                let why = ["FailedNodes", "FailedAndUnresolvableNodes"]
                    .iter()
                    .find_map(|k| f.body[*k].as_object()?.values().next()?.as_str())
                    .unwrap_or_default()
                    .to_owned();
                left.insert(name(p), why);
                if preempt {
                    preempt_for(a, p).await;
                }
                continue;
            }
            let best = if passed.len() == 1 {
                passed[0].clone()
            } else {
                let s = post(
                    a,
                    "/scheduler/prioritize",
                    &json!({"Pod": p, "Nodes": null, "NodeNames": passed}).to_string(),
                )
                .await;
                let scores: Vec<(String, i64)> = s
                    .body
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|h| {
                        let host = h["Host"].as_str().unwrap_or_default().to_owned();
                        (host, h["Score"].as_i64().unwrap_or_default())
                    })
                    .collect();
                let max = scores.iter().map(|s| s.1).max().unwrap_or(0);
                scores
                    .into_iter()
                    .find(|s| s.1 == max)
                    .map(|s| s.0)
                    .unwrap_or_default()
            };
            let app = kruntimes_scheduler::http::router(a.state.clone());
            let body = json!({"PodName": p["metadata"]["name"], "PodNamespace": "ml",
                "PodUID": p["metadata"]["uid"], "Node": best})
            .to_string();
            let pod = p.clone();
            binds.push(tokio::spawn(async move {
                let req = Request::post("/scheduler/bind")
                    .header("content-type", "application/json")
                    .body(Body::from(body))
                    .expect("request");
                let resp = app.oneshot(req).await.expect("response");
                let b = axum::body::to_bytes(resp.into_body(), usize::MAX)
                    .await
                    .expect("body");
                let v: Value = serde_json::from_slice(&b).expect("json");
                (pod, v["Error"].as_str().unwrap_or_default().to_owned())
            }));
        }
        let mut retry: Vec<Value> = queue
            .iter()
            .filter(|p| left.contains_key(&name(p)))
            .cloned()
            .collect();
        for b in binds {
            let (p, err) = b.await.expect("bind task");
            if !err.is_empty() {
                left.insert(name(&p), err);
                retry.push(p);
            }
        }
        if retry.is_empty() {
            break;
        }
        queue = retry;
    }
    left
}

/// kube-scheduler's PostFilter for `p` through the extender's preempt
/// verb: the victims of the first candidate kept are deleted.
async fn preempt_for(a: &Standalone, p: &Value) {
    let priority = p["spec"]["priority"].as_i64().unwrap_or_default();
    let r = common::get(a, "/v1/objects?kind=Pod&namespace=ml").await;
    let mut victims: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for v in r.body["items"].as_array().into_iter().flatten() {
        let (Some(node), Some(name), Some(uid)) = (
            v["spec"]["nodeName"].as_str(),
            v["metadata"]["name"].as_str(),
            v["metadata"]["uid"].as_str(),
        ) else {
            continue;
        };
        if v["spec"]["priority"].as_i64().unwrap_or_default() < priority {
            victims
                .entry(node.to_owned())
                .or_default()
                .push((name.to_owned(), uid.to_owned()));
        }
    }
    let meta: serde_json::Map<String, Value> = victims
        .iter()
        .map(|(node, vs)| {
            let pods: Vec<Value> = vs.iter().map(|(_, uid)| json!({"UID": uid})).collect();
            (node.clone(), json!({"Pods": pods, "NumPDBViolations": 0}))
        })
        .collect();
    let r = post(
        a,
        "/scheduler/preempt",
        &json!({"Pod": p, "NodeNameToVictims": null, "NodeNameToMetaVictims": meta}).to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let Some(node) = r.body["NodeNameToMetaVictims"]
        .as_object()
        .and_then(|m| m.keys().next().cloned())
    else {
        return;
    };
    for (name, _) in victims.get(&node).into_iter().flatten() {
        let gone = common::call(
            a,
            axum::http::Method::DELETE,
            &format!("/v1/objects?kind=Pod&namespace=ml&name={name}"),
            None,
        )
        .await;
        assert_eq!(gone.status, 204, "{}", gone.text);
    }
}

/// Pod name → node of the bound pods of `ml`.
async fn bound(a: &Standalone) -> BTreeMap<String, String> {
    let r = common::get(a, "/v1/objects?kind=Pod&namespace=ml").await;
    r.body["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some((
                p["metadata"]["name"].as_str()?.to_owned(),
                p["spec"]["nodeName"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// Upstream's nodes for "3-level CPG hierarchy: all levels have topology
/// constraints (root=zone, sub=block, leaf=rack)": 2 cpu each; `rack-1`
/// exists in three blocks, `block-1` in both zones.
const ZBR_NODES: [(&str, &str, &str, &str); 6] = [
    ("node1-z1-g1-r1", "zone-1", "block-1", "rack-1"),
    ("node2-z1-g1-r2", "zone-1", "block-1", "rack-2"),
    ("node3-z1-g2-r1", "zone-1", "block-2", "rack-1"),
    ("node4-z1-g2-r2", "zone-1", "block-2", "rack-2"),
    ("node5-z2-g1-r1", "zone-2", "block-1", "rack-1"),
    ("node6-z2-g1-r1", "zone-2", "block-1", "rack-1"),
];

/// The hierarchy of that case: root (zone, gang of 2 sub-groups) → sub1,
/// sub2 (block, gang of 2 leaves) → pg1..pg4 (rack, gang of 2 pods), all
/// at priority 100; pods p1..p8 of 1 cpu, two per leaf. Also returns the
/// pods.
fn zone_block_rack() -> (Vec<Value>, Vec<Value>) {
    let mut objs: Vec<Value> = ZBR_NODES
        .iter()
        .map(|(n, z, b, r)| {
            testkit::node(n)
                .label("zone", z)
                .label("block", b)
                .label("rack", r)
                .allocatable("2", "8Gi")
                .value()
        })
        .collect();
    objs.push(
        testkit::composite("cpg-root")
            .gang(2)
            .topology("zone")
            .priority(100)
            .value(),
    );
    for sub in ["cpg-sub1", "cpg-sub2"] {
        objs.push(
            testkit::composite(sub)
                .gang(2)
                .topology("block")
                .parent("cpg-root")
                .priority(100)
                .value(),
        );
    }
    for (pg, sub) in [
        ("pg1", "cpg-sub1"),
        ("pg2", "cpg-sub1"),
        ("pg3", "cpg-sub2"),
        ("pg4", "cpg-sub2"),
    ] {
        objs.push(
            testkit::pod_group(pg)
                .gang(2)
                .topology("rack")
                .parent(sub)
                .priority(100)
                .value(),
        );
    }
    let pods: Vec<Value> = (1..=8)
        .map(|i| {
            let pg = format!("pg{}", (i + 1) / 2);
            testkit::pod(&format!("p{i}"))
                .group(&pg)
                .priority(100)
                .phase("Pending")
                .value()
        })
        .collect();
    objs.extend(pods.iter().cloned());
    (objs, pods)
}

/// Every pod of `pods` bound, and all on nodes sharing one value of the
/// label at `level` (1 zone, 2 block, 3 rack) of [`ZBR_NODES`] — the value
/// with its parents', as a domain is identified.
fn one_domain(b: &BTreeMap<String, String>, pods: &[&str], level: usize) -> bool {
    let chain = |node: &str| {
        ZBR_NODES
            .iter()
            .find(|n| n.0 == node)
            .map(|n| [n.1, n.2, n.3][..level].join("/"))
    };
    let domains: std::collections::BTreeSet<Option<String>> = pods
        .iter()
        .map(|p| b.get(*p).and_then(|n| chain(n)))
        .collect();
    domains.len() == 1 && !domains.contains(&None)
}

fn assert_zone_block_rack(b: &BTreeMap<String, String>) {
    let all = ["p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8"];
    assert!(one_domain(b, &all, 1), "one zone: {b:?}");
    assert!(one_domain(b, &all[..4], 2), "sub1 in one block: {b:?}");
    assert!(one_domain(b, &all[4..], 2), "sub2 in one block: {b:?}");
    for leaf in all.chunks(2) {
        assert!(one_domain(b, leaf, 3), "{leaf:?} in one rack: {b:?}");
    }
}

/// Upstream (`test/integration/scheduler/topologyawarescheduling`,
/// `TestCPGTopologyAwareScheduling`): "3-level CPG hierarchy: all levels
/// have topology constraints (root=zone, sub=block, leaf=rack)". Only
/// zone-1 holds all 8 pods; each sub-group takes a block of it, each leaf
/// a rack (one node) of its block.
#[tokio::test(start_paused = true)]
async fn three_constrained_levels_with_repeated_names_are_placed_as_a_whole() {
    let (objs, pods) = zone_block_rack();
    let a = cluster(objs).await;
    let left = schedule_all(&a, &pods, 4, false).await;
    assert!(left.is_empty(), "{left:?}");
    let b = bound(&a).await;
    assert_eq!(b.len(), 8, "{b:?}");
    assert_zone_block_rack(&b);
    assert!(b.values().all(|n| n.contains("-z1-")), "{b:?}");
}

/// Upstream: the same case "with preemption": low-priority pods (10) fill
/// every node of zone-1, where alone the hierarchy fits; they are
/// preempted and all 8 pods are placed there as before, zone-2 (too small
/// for the whole) is never used.
#[tokio::test(start_paused = true)]
async fn three_constrained_levels_preempt_for_the_whole_hierarchy() {
    let (mut objs, pods) = zone_block_rack();
    for (i, n) in ZBR_NODES[..4].iter().enumerate() {
        objs.push(
            testkit::pod(&format!("low-z1-{}", i + 1))
                .requests(&[("cpu", "2")])
                .priority(10)
                .on_node(n.0)
                .value(),
        );
    }
    let a = cluster(objs).await;
    let left = schedule_all(&a, &pods, 12, true).await;
    assert!(left.is_empty(), "{left:?}");
    let b = bound(&a).await;
    assert!(b.keys().all(|p| !p.starts_with("low-")), "preempted: {b:?}");
    assert_eq!(b.len(), 8, "{b:?}");
    assert_zone_block_rack(&b);
    assert!(b.values().all(|n| n.contains("-z1-")), "{b:?}");
}
