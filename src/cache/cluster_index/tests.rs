//! Unit tests of the cluster index.

use super::nodes::{Load, NAMES_SWEEP, PlainLoad};
use super::*;
use crate::pods::fit::{Amounts, ClaimRef};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use proptest::prelude::*;
use serde_json::json;

use crate::testkit;

// Fixtures from the test kit: namespace `ns`, nodes with 1Gi, 10 pods.

fn mk_node(name: &str, cpu: &str) -> Node {
    testkit::node(name)
        .allocatable(cpu, "1Gi")
        .set(&["status", "allocatable", "pods"], "10")
        .typed()
}

/// Pod `ns/name` requesting `cpu`, bound to `node`, whose container uses
/// claim `x` (ResourceClaim `claim`).
fn mk_pod(name: &str, node: Option<&str>, cpu: &str, claim: Option<&str>) -> Pod {
    let mut p = testkit::pod(name).namespace("ns").requests(&[("cpu", cpu)]);
    if let Some(n) = node {
        p = p.set(&["spec", "nodeName"], n);
    }
    let p = p.uses_claim("x", claim, None);
    match claim {
        Some(_) => p,
        // The container still names `x`; the pod lists no such claim.
        None => p.unset(&["spec", "resourceClaims"]),
    }
    .typed()
}

fn cpu(c: &ClusterIndex, node: &str) -> Option<u64> {
    c.read().used(node, "cpu")
}

/// A pod bound to `node` requesting one of an unusual resource.
fn unusual(i: usize, node: &str) -> Pod {
    let name = format!("u{i}");
    testkit::pod(&name)
        .namespace("ns")
        .uid(&name)
        .set(&["spec", "nodeName"], node)
        .requests(&[("cpu", "1m"), (&format!("example.com/r-{i}"), "1")])
        .typed()
}

#[test]
fn churned_resource_names_and_their_columns_are_freed() {
    let c = ClusterIndex::new();
    for n in 0..10 {
        c.apply_node(&mk_node(&format!("n{n}"), "100"));
    }
    let baseline = c.read().interned();
    // 100k pods, each requesting a resource of its own, created and
    // deleted with 100 alive at a time.
    let mut peak = baseline;
    for i in 0..100_000 {
        c.apply_pod(&unusual(i, &format!("n{}", i % 10)));
        if i >= 100 {
            c.delete_pod("ns", &format!("u{}", i - 100));
        }
        let now = c.read().interned();
        peak = (peak.0.max(now.0), peak.1.max(now.1));
        if i % 10_000 == 0 {
            c.read().assert_consistent();
        }
    }
    // Never more than what is alive plus the sweep's slack.
    assert!(peak.0 <= baseline.0 + 100 + NAMES_SWEEP, "{peak:?}");
    assert!(peak.1 <= baseline.1 + 100 + NAMES_SWEEP, "{peak:?}");
    // The 100 still alive are counted where they are.
    assert_eq!(c.read().used("n3", "example.com/r-99993"), Some(1));
    c.read().assert_consistent();
    for i in 99_900..100_000 {
        c.delete_pod("ns", &format!("u{i}"));
    }
    // A write after the churn: a pod of usual resources comes and goes.
    c.apply_pod(&mk_pod("p", Some("n1"), "1", None));
    c.delete_pod("ns", "p");
    let after = c.read().interned();
    assert!(
        after.0 <= baseline.0 + NAMES_SWEEP,
        "{after:?} vs {baseline:?}"
    );
    assert!(
        after.1 <= baseline.1 + NAMES_SWEEP,
        "{after:?} vs {baseline:?}"
    );
    c.read().assert_consistent();
    // Fit still reads the well-known resources right after the renumbering.
    let snap = c.read();
    assert_eq!(snap.used("n1", "cpu"), None);
    let [pods, cpu, _] = snap.well_known_ids();
    let slot = snap.find("n1").unwrap();
    assert_eq!(snap.amounts_at(cpu, slot), [100_000, 0]);
    assert_eq!(snap.amounts_at(pods, slot), [10, 0]);
}

#[test]
fn pods_count_on_their_node_and_assumptions_until_confirmed() {
    let c = ClusterIndex::new();
    c.apply_node(&mk_node("n1", "4"));
    c.apply_pod(&mk_pod("a", Some("n1"), "1", None));
    c.apply_pod(&mk_pod("b", None, "2", None));
    assert_eq!(cpu(&c, "n1"), Some(1000));
    assert!(c.assume("ns", "b", "b-uid", "n1"));
    assert_eq!(cpu(&c, "n1"), Some(3000));
    // Wrong uid: nothing assumed.
    assert!(!c.assume("ns", "a", "other", "n1"));
    // The watch still shows b unbound: the assumption stays.
    c.apply_pod(&mk_pod("b", None, "2", None));
    assert!(c.read().is_assumed("ns", "b"));
    // Bound by the watch: confirmed, counted once.
    c.apply_pod(&mk_pod("b", Some("n1"), "2", None));
    assert!(!c.read().is_assumed("ns", "b"));
    assert_eq!(cpu(&c, "n1"), Some(3000));
    // Forgetting an unconfirmed assumption releases it at once.
    c.apply_pod(&mk_pod("d", None, "1", None));
    c.assume("ns", "d", "", "n1");
    assert_eq!(cpu(&c, "n1"), Some(4000));
    c.forget("ns", "d");
    assert_eq!(cpu(&c, "n1"), Some(3000));
    // Relist without b: it no longer counts.
    c.reset_pods(vec![(
        ("ns".into(), "a".into()),
        PodEntry::from_pod(&mk_pod("a", Some("n1"), "1", None)),
    )]);
    assert_eq!(cpu(&c, "n1"), Some(1000));
    // A deleted node keeps its slot while pods are counted there.
    c.delete_node("n1");
    assert!(!c.read().has_node("n1"));
    assert_eq!(cpu(&c, "n1"), Some(1000));
    c.delete_pod("ns", "a");
    assert!(c.read().slot("n1").is_none());
    c.read().assert_consistent();
}

#[test]
fn the_reused_node_lists_are_bounded_in_bytes() {
    let c = ClusterIndex::new();
    c.apply_node(&mk_node("n1", "4"));
    // Lists of 200-byte names, each a little over a third of the budget.
    let list = |tag: char, count: usize| {
        let names: Vec<String> = (0..count)
            .map(|i| format!("{}{i:08}", tag.to_string().repeat(192)))
            .collect();
        serde_json::to_string(&names).unwrap()
    };
    let third = REFS_CACHED_BYTES / 3 / (2 * 200);
    let (a, b, d) = (list('a', third), list('b', third), list('d', third));
    let ra = c.read().resolve_names(&a).unwrap();
    assert!(ra.bytes() > REFS_CACHED_BYTES / 3 - REFS_CACHED_BYTES / 10);
    let rb = c.read().resolve_names(&b).unwrap();
    assert!(Arc::ptr_eq(&ra, &c.read().resolve_names(&a).unwrap()));
    // A third list does not fit beside the other two: the least
    // recently used (b) goes, though only three lists are kept.
    let rd = c.read().resolve_names(&d).unwrap();
    assert!(ra.bytes() + rb.bytes() + rd.bytes() > REFS_CACHED_BYTES);
    assert!(Arc::ptr_eq(&rd, &c.read().resolve_names(&d).unwrap()));
    assert!(Arc::ptr_eq(&ra, &c.read().resolve_names(&a).unwrap()));
    assert!(!Arc::ptr_eq(&rb, &c.read().resolve_names(&b).unwrap()));
    // A list larger than the whole budget is resolved but never kept.
    let huge = list('h', REFS_CACHED_BYTES / (200 + 24) + 1);
    let h1 = c.read().resolve_names(&huge).unwrap();
    assert!(h1.bytes() > REFS_CACHED_BYTES);
    assert_eq!(h1.len(), REFS_CACHED_BYTES / (200 + 24) + 1);
    assert!(!Arc::ptr_eq(&h1, &c.read().resolve_names(&huge).unwrap()));
    // ... and costs the lists kept nothing (b and a now).
    assert!(Arc::ptr_eq(&ra, &c.read().resolve_names(&a).unwrap()));
}

#[test]
fn resolved_node_names_are_reused_until_the_layout_changes() {
    let c = ClusterIndex::new();
    c.apply_node(&mk_node("n1", "4"));
    let raw = r#"["n1","n2"]"#;
    let a = c.read().resolve_names(raw).unwrap();
    let b = c.read().resolve_names(raw).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(
        a.iter().collect::<Vec<_>>(),
        vec![("n1", 0), ("n2", NO_SLOT)]
    );
    // A new node changes the layout: resolved again, n2 now found.
    c.apply_node(&mk_node("n2", "4"));
    let d = c.read().resolve_names(raw).unwrap();
    assert!(!Arc::ptr_eq(&a, &d));
    assert_eq!(d.iter().collect::<Vec<_>>(), vec![("n1", 0), ("n2", 1)]);
    // A pod counted there does not change the layout.
    c.apply_pod(&mk_pod("a", Some("n2"), "1", None));
    assert!(Arc::ptr_eq(&d, &c.read().resolve_names(raw).unwrap()));
    // Escaped names resolve to what they spell.
    let e = c.read().resolve_names(r#"["n\u0031", null]"#);
    assert!(e.is_err(), "null is not a node name");
    let e = c.read().resolve_names("[\"n\\u0031\"]").unwrap();
    assert_eq!(e.iter().collect::<Vec<_>>(), vec![("n1", 0)]);
    assert!(c.read().resolve_names("[1]").is_err());
}

#[derive(Debug, Clone)]
enum Op {
    Node(u8, u8),
    DeleteNode(u8),
    Pod(u8, Option<u8>, u8),
    DeletePod(u8),
    Assume(u8, u8),
    Forget(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4u8, 1..8u8).prop_map(|(n, cpu)| Op::Node(n, cpu)),
        (0..4u8).prop_map(Op::DeleteNode),
        (0..6u8, proptest::option::of(0..4u8), 1..4u8).prop_map(|(p, n, c)| Op::Pod(p, n, c)),
        (0..6u8).prop_map(Op::DeletePod),
        (0..6u8, 0..4u8).prop_map(|(p, n)| Op::Assume(p, n)),
        (0..6u8).prop_map(Op::Forget),
    ]
}

proptest! {
    /// Under any history the dense columns and the group member views
    /// match what they are derived from (the fit plugin checks that its
    /// per-slot step agrees with the named check under such histories).
    #[test]
    fn columns_follow_every_history(ops in proptest::collection::vec(op(), 1..40)) {
        let c = ClusterIndex::new();
        for op in ops {
            match op {
                Op::Node(n, cpu) => c.apply_node(&mk_node(&format!("n{n}"), &cpu.to_string())),
                Op::DeleteNode(n) => c.delete_node(&format!("n{n}")),
                Op::Pod(p, n, cpu) => {
                    let mut pod = mk_pod(
                        &format!("p{p}"),
                        n.map(|n| format!("n{n}")).as_deref(),
                        &cpu.to_string(),
                        None,
                    );
                    if p % 2 == 0 {
                        pod.spec.as_mut().unwrap().scheduling_group =
                            Some(serde_json::from_value(json!({"podGroupName": "g"})).unwrap());
                    }
                    // Some pending pods carry a nomination (kept by the
                    // index until they are bound, finish or go).
                    if cpu % 3 == 0 {
                        pod.status.get_or_insert_default().nominated_node_name =
                            Some(format!("n{}", p % 4));
                    }
                    c.apply_pod(&pod)
                }
                Op::DeletePod(p) => c.delete_pod("ns", &format!("p{p}")),
                Op::Assume(p, n) => {
                    c.assume("ns", &format!("p{p}"), "", &format!("n{n}"));
                }
                Op::Forget(p) => c.forget("ns", &format!("p{p}")),
            }
            let s = c.read();
            s.assert_consistent();
        }
    }
}

#[test]
fn claims_follow_allocation_and_slices() {
    let c = ClusterIndex::new();
    c.apply_node(&mk_node("n1", "16"));
    let slice: ResourceSlice = testkit::slice("s", "d", "n1", &["cpu0"])
        .set(&["spec", "pool", "name"], "p")
        .node_allocatable(0, json!({"cpu": {"mapping": {"deviceMultiplier": "4"}}}))
        .typed();
    let claim = |allocated: bool| -> ResourceClaim {
        let c = testkit::claim("cl", "c").namespace("ns");
        match allocated {
            true => c.allocated(&[("d", "p", "cpu0")]),
            false => c,
        }
        .typed()
    };
    c.apply_pod(&mk_pod("a", Some("n1"), "1", Some("cl")));
    c.apply_pod(&mk_pod("b", Some("n1"), "1", Some("cl")));
    assert_eq!(cpu(&c, "n1"), Some(2000));
    c.apply_slice(&slice);
    c.apply_claim(&claim(true));
    // Shared claim: mapped once.
    assert_eq!(cpu(&c, "n1"), Some(6000));
    c.apply_claim(&claim(false));
    assert_eq!(cpu(&c, "n1"), Some(2000));
    c.apply_claim(&claim(true));
    c.delete_slice("s");
    assert_eq!(cpu(&c, "n1"), Some(2000));
}

fn cpu_slice(name: &str, node: &str, per_pod: Option<&str>) -> ResourceSlice {
    let mut res = json!({"mapping": {"deviceMultiplier": "4"}});
    if let Some(o) = per_pod {
        res["overhead"] = json!({"perPod": o});
    }
    testkit::slice(name, "d", node, &["cpu0"])
        .node_allocatable(0, json!({"cpu": res}))
        .typed()
}

fn allocated(claim: &str, pool: &str) -> ResourceClaim {
    testkit::claim(claim, "c")
        .namespace("ns")
        .allocated(&[("d", pool, "cpu0")])
        .typed()
}

#[test]
fn a_device_takes_only_from_the_node_its_slice_is_on() {
    let c = ClusterIndex::new();
    c.apply_node(&mk_node("n1", "16"));
    c.apply_node(&mk_node("n2", "16"));
    c.apply_slice(&cpu_slice("s2", "n2", None));
    c.apply_claim(&allocated("cl", "n2"));
    // A pod on n1 referencing a claim whose device is on n2: its
    // request counts on n1, the device's mapping does not.
    c.apply_pod(&mk_pod("a", Some("n1"), "1", Some("cl")));
    assert_eq!(cpu(&c, "n1"), Some(1000));
    c.apply_pod(&mk_pod("b", Some("n2"), "1", Some("cl")));
    assert_eq!(cpu(&c, "n2"), Some(5000));
}

#[test]
fn a_pending_pods_claims_load_the_nodes_of_their_devices() {
    let c = ClusterIndex::new();
    c.apply_node(&mk_node("n1", "16"));
    c.apply_node(&mk_node("n2", "16"));
    c.apply_slice(&cpu_slice("s1", "n1", Some("500m")));
    c.apply_claim(&allocated("cl", "n1"));
    let claims = [ClaimRef {
        claim: "ns/cl".into(),
        refs: 1,
    }];
    let n1 = c.read().find("n1").unwrap();
    let cpu_of = |a: &Amounts| a.get("cpu").copied();
    // Nobody uses the claim yet: mapping and overhead on n1, nothing elsewhere.
    let load = c.read().pending_claims_load(&claims);
    assert_eq!(cpu_of(&load.everywhere), None);
    assert_eq!(load.on.len(), 1);
    assert_eq!((load.on[0].0, cpu_of(&load.on[0].1)), (n1, Some(4500)));
    // Shared with a pod already counted on n1: the mapping is counted
    // there once already; only this pod's overhead is added.
    c.apply_pod(&mk_pod("a", Some("n1"), "1", Some("cl")));
    assert_eq!(cpu(&c, "n1"), Some(5500));
    let load = c.read().pending_claims_load(&claims);
    assert_eq!((load.on[0].0, cpu_of(&load.on[0].1)), (n1, Some(500)));
    // Unallocated claims add nothing anywhere.
    let none = c.read().pending_claims_load(&[ClaimRef {
        claim: "ns/other".into(),
        refs: 1,
    }]);
    assert_eq!(none, ClaimsLoad::default());
}

#[test]
fn group_members_and_priority() {
    let c = ClusterIndex::new();
    let mut p = mk_pod("m", None, "1", None);
    p.spec.as_mut().unwrap().scheduling_group =
        Some(serde_json::from_value(json!({"podGroupName": "g"})).unwrap());
    c.apply_pod(&p);
    assert_eq!(c.read().members("ns", "g").map(|m| m.len()), Some(1));
    let g: PodGroup = serde_json::from_value(json!({"metadata": {"name": "g", "namespace": "ns"},
        "spec": {"priorityClassName": "hi", "schedulingPolicy": {"basic": {}}}}))
    .unwrap();
    c.apply_pod_group(&g);
    let pc: PriorityClass =
        serde_json::from_value(json!({"metadata": {"name": "hi"}, "value": 7})).unwrap();
    c.apply_priority_class(&pc);
    assert_eq!(
        c.read().group_priority("ns", "g").map(|e| e.priority),
        Some(7)
    );
    c.delete_pod("ns", "m");
    assert!(c.read().members("ns", "g").is_none());
}

#[cfg(test)]
impl ClusterState {
    /// Every derived index agrees with the slots it was derived from.
    fn assert_consistent(&self) {
        for ((ns, g), members) in &self.members {
            for (name, view) in members {
                let k = (ns.clone(), name.clone());
                let v = self.assumed.get(&k).or_else(|| self.pods.get(&k));
                assert_eq!(Some(view), v, "member view of {ns}/{name}");
                assert_eq!(view.group.as_deref(), Some(g.as_str()));
            }
        }
        let nominated: BTreeSet<Key> = self
            .pods
            .iter()
            .filter(|(_, p)| {
                p.nominated.is_some() && p.node.is_none() && !p.terminal && !p.deleting
            })
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(self.nominated, nominated, "nominated pods");
        let t = &self.nodes;
        for (name, &i) in &t.index {
            assert_eq!(&*t.slots[i as usize].name, &**name);
        }
        for (i, slot) in t.slots.iter().enumerate() {
            let mut plain = PlainLoad::default();
            let mut claimed = BTreeSet::new();
            for k in &slot.pods {
                let p = self.counted(k).expect("indexed pods are counted");
                assert_eq!(p.node.as_deref(), Some(&*slot.name), "{k:?}");
                if p.claims.is_empty() {
                    let mut load: Load = p
                        .requests
                        .iter()
                        .flatten()
                        .filter(|(_, a)| **a > 0)
                        .map(|(n, a)| (self.names.lookup(n).expect("interned"), *a))
                        .collect();
                    load.push((self.names.lookup(fit::PODS).expect("interned"), 1));
                    plain.add(&load);
                } else {
                    claimed.insert(k.clone());
                }
            }
            assert_eq!(slot.plain, plain, "plain load of slot {i}");
            assert_eq!(slot.claimed, claimed, "claimed pods of slot {i}");
            let live = !slot.name.is_empty();
            assert_eq!(live, t.find(&slot.name) == Some(i as u32) && live);
            assert_eq!(live, !t.free.contains(&(i as u32)), "slot {i}");
            let alloc = slot
                .node
                .as_ref()
                .map(|n| n.alloc.clone())
                .unwrap_or_default();
            for (id, col) in t.cols.iter().enumerate() {
                let id = id as ResId;
                assert_eq!(col.len(), t.slots.len());
                assert_eq!(
                    col[i],
                    [alloc.get(id), slot.used.get(id)],
                    "slot {i} id {id}"
                );
            }
        }
    }
}
