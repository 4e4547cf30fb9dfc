//! The hierarchy walk and quorum over three-level hierarchies, and broken
//! hierarchies (cycles, too deep).

use super::*;
use crate::cache::cluster_index::ClusterIndex;
use crate::testkit;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1alpha3::CompositePodGroup;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;

// Fixtures from the test kit: namespace `ns`, nodes with 8 cpu / 8Gi.

fn node(name: &str) -> Node {
    testkit::node(name).allocatable("8", "8Gi").typed()
}

/// Pod `ns/name` (uid `<name>-uid`, 1 cpu) in `group`, bound to `node`.
fn pod(name: &str, group: &str, node: Option<&str>) -> Pod {
    let p = testkit::pod(name).namespace("ns").group(group);
    match node {
        Some(n) => p.set(&["spec", "nodeName"], n),
        None => p,
    }
    .typed()
}

/// `gang` with `min`, else `basic`; under `parent`.
fn level(o: testkit::Obj, gang: bool, min: u32, parent: Option<&str>) -> testkit::Obj {
    let o = if gang { o.gang(min) } else { o };
    match parent {
        Some(p) => o.parent(p),
        None => o,
    }
}

/// Node `name` in rack `rack` with `cpu` cores and 8Gi.
fn rack_node(name: &str, rack: &str, cpu: &str) -> Node {
    testkit::node(name)
        .label("rack", rack)
        .allocatable(cpu, "8Gi")
        .typed()
}

/// A gang PodGroup `ns/name` of `min`, by rack, under `parent`.
fn rack_gang(name: &str, min: u32, parent: Option<&str>) -> PodGroup {
    level(
        testkit::pod_group(name).namespace("ns").topology("rack"),
        true,
        min,
        parent,
    )
    .typed()
}

/// Nodes of 2 cpu and 8Gi, each `(name, zone, rack)`.
fn zoned_racks(nodes: &[(&str, &str, &str)]) -> ClusterIndex {
    let c = ClusterIndex::new();
    for (n, z, r) in nodes {
        c.apply_node(
            &testkit::node(n)
                .label("zone", z)
                .label("rack", r)
                .allocatable("2", "8Gi")
                .typed(),
        );
    }
    c
}

fn group(name: &str, gang: bool, min: u32, parent: Option<&str>) -> PodGroup {
    level(testkit::pod_group(name).namespace("ns"), gang, min, parent).typed()
}

fn composite(name: &str, gang: bool, min: u32, parent: Option<&str>) -> CompositePodGroup {
    level(testkit::composite(name).namespace("ns"), gang, min, parent).typed()
}

/// root (composite) → mid (composite) → leaf (PodGroup of 2, pods l-0 and
/// l-1), each level gang or basic.
fn three_levels(root: bool, mid: bool, leaf: bool) -> ClusterIndex {
    let c = ClusterIndex::new();
    c.apply_node(&node("n1"));
    c.apply_composite(&composite("root", root, 1, None));
    c.apply_composite(&composite("mid", mid, 1, Some("root")));
    c.apply_pod_group(&group("leaf", leaf, 2, Some("mid")));
    c.apply_pod(&pod("l-0", "leaf", None));
    c.apply_pod(&pod("l-1", "leaf", None));
    c
}

#[test]
fn the_unit_is_the_outermost_gang_whatever_lies_between() {
    for mask in 0..8u8 {
        let (root, mid, leaf) = (mask & 4 != 0, mask & 2 != 0, mask & 1 != 0);
        let c = three_levels(root, mid, leaf);
        let want = if root {
            Some(GroupRef::composite("ns", "root"))
        } else if mid {
            Some(GroupRef::composite("ns", "mid"))
        } else if leaf {
            Some(GroupRef::group("ns", "leaf"))
        } else {
            None
        };
        let case = format!("root gang {root}, mid gang {mid}, leaf gang {leaf}");
        let levels = chain(&c.read(), "ns", "leaf").expect(&case);
        assert_eq!(levels.len(), 3, "{case}");
        assert_eq!(
            unit_of(&levels).map(|i| levels[i].group.clone()),
            want,
            "{case}"
        );
        // One member placed: a gang leaf is short of its 2, and every gang
        // above it waits for the leaf; a basic leaf completes with one.
        assert!(c.assume("ns", "l-0", "l-0-uid", "n1"), "{case}");
        let q = quorum(&c.read(), "ns", "l-0").expect(&case);
        match &want {
            None => assert_eq!(q, None, "{case}"),
            Some(unit) => {
                let q = q.expect(&case);
                assert_eq!(&q.unit, unit, "{case}");
                assert_eq!(q.reached, !leaf, "{case}: {q:?}");
            }
        }
        // Both placed: every unit is complete, and every level of the
        // hierarchy is reported satisfied.
        assert!(c.assume("ns", "l-1", "l-1-uid", "n1"), "{case}");
        let q = quorum(&c.read(), "ns", "l-1").expect(&case);
        if let Some(unit) = &want {
            let q = q.expect(&case);
            assert!(q.reached, "{case}: {q:?}");
            // A unit that is the leaf counts pods, a composite child groups.
            let want_counts = if unit.composite { (1, 1) } else { (2, 2) };
            assert_eq!((q.have, q.need), want_counts, "{case}");
            assert!(q.satisfied.contains(unit), "{case}: {q:?}");
            assert!(
                q.satisfied.contains(&GroupRef::group("ns", "leaf")),
                "{case}: {q:?}"
            );
        }
    }
}

#[test]
fn a_basic_middle_does_not_cut_off_a_gang_root_over_two_gang_leaves() {
    // root (gang, 2 groups) → mid (basic) → a, b (gang of 1 each): the
    // first member is held until the second completes the root.
    let c = ClusterIndex::new();
    c.apply_node(&node("n1"));
    c.apply_composite(&composite("root", true, 2, None));
    c.apply_composite(&composite("mid", false, 1, Some("root")));
    c.apply_composite(&composite("other", false, 1, Some("root")));
    c.apply_pod_group(&group("a", true, 1, Some("mid")));
    c.apply_pod_group(&group("b", true, 1, Some("other")));
    c.apply_pod(&pod("a-0", "a", None));
    c.apply_pod(&pod("b-0", "b", None));
    assert!(c.assume("ns", "a-0", "a-0-uid", "n1"));
    let q = quorum(&c.read(), "ns", "a-0").unwrap().unwrap();
    assert_eq!(q.unit, GroupRef::composite("ns", "root"));
    assert_eq!((q.reached, q.have, q.need), (false, 1, 2));
    assert!(c.assume("ns", "b-0", "b-0-uid", "n1"));
    for p in ["a-0", "b-0"] {
        let q = quorum(&c.read(), "ns", p).unwrap().unwrap();
        assert_eq!(q.unit, GroupRef::composite("ns", "root"), "{p}");
        assert_eq!((q.reached, q.have, q.need), (true, 2, 2), "{p}");
    }
}

#[test]
fn a_parent_cycle_is_unresolvable_and_named() {
    let c = ClusterIndex::new();
    c.apply_node(&node("n1"));
    c.apply_composite(&composite("a", true, 1, Some("b")));
    c.apply_composite(&composite("b", false, 1, Some("a")));
    c.apply_pod_group(&group("g", true, 1, Some("a")));
    c.apply_pod(&pod("g-0", "g", Some("n1")));
    let err = chain(&c.read(), "ns", "g").unwrap_err();
    assert!(err.unresolvable);
    assert_eq!(
        err.message,
        "parent cycle: composite pod group ns/a → composite pod group ns/b → composite pod group ns/a"
    );
    // Bind refuses it too, rather than binding it alone.
    assert_eq!(quorum(&c.read(), "ns", "g-0"), Err(err.message.clone()));
    // A group that is its own parent.
    c.apply_composite(&composite("self", true, 1, Some("self")));
    c.apply_pod_group(&group("h", true, 1, Some("self")));
    let err = chain(&c.read(), "ns", "h").unwrap_err();
    assert!(
        err.message
            .starts_with("parent cycle: composite pod group ns/self → composite pod group ns/self"),
        "{}",
        err.message
    );
}

#[test]
fn a_chain_deeper_than_the_limit_is_unresolvable() {
    let c = ClusterIndex::new();
    // g → c1 → c2 → c3 is four levels: fine. Under c4 it is five.
    c.apply_composite(&composite("c3", true, 1, None));
    c.apply_composite(&composite("c2", true, 1, Some("c3")));
    c.apply_composite(&composite("c1", true, 1, Some("c2")));
    c.apply_pod_group(&group("g", true, 1, Some("c1")));
    assert_eq!(chain(&c.read(), "ns", "g").unwrap().len(), MAX_DEPTH);
    c.apply_composite(&composite("c3", true, 1, Some("c4")));
    c.apply_composite(&composite("c4", true, 1, None));
    let err = chain(&c.read(), "ns", "g").unwrap_err();
    assert!(err.unresolvable);
    assert!(
        err.message
            .starts_with("group hierarchy deeper than 4 levels: pod group ns/g → ")
            && err.message.ends_with("composite pod group ns/c4"),
        "{}",
        err.message
    );
    // A missing parent is only waited for.
    c.apply_composite(&composite("c2", true, 1, Some("gone")));
    let err = chain(&c.read(), "ns", "g").unwrap_err();
    assert_eq!(
        err.message,
        "waiting for composite pod group ns/gone to exist"
    );
}

// === three keyed levels with repeated label values ===

/// Upstream's zone → block → rack nodes ("3-level CPG hierarchy: all
/// levels have topology constraints"): 2 cpu each; `rack-1` is in three
/// blocks, `block-1` in both zones.
const ZBR: [(&str, &str, &str, &str); 6] = [
    ("node1-z1-g1-r1", "zone-1", "block-1", "rack-1"),
    ("node2-z1-g1-r2", "zone-1", "block-1", "rack-2"),
    ("node3-z1-g2-r1", "zone-1", "block-2", "rack-1"),
    ("node4-z1-g2-r2", "zone-1", "block-2", "rack-2"),
    ("node5-z2-g1-r1", "zone-2", "block-1", "rack-1"),
    ("node6-z2-g1-r1", "zone-2", "block-1", "rack-1"),
];

/// root (zone, gang of 2) → sub1, sub2 (block, gang of 2) → pg1..pg4
/// (rack, gang of 2), pods p1..p8 of 1 cpu.
fn zone_block_rack() -> ClusterIndex {
    let c = ClusterIndex::new();
    for (n, z, b, r) in ZBR {
        c.apply_node(
            &testkit::node(n)
                .label("zone", z)
                .label("block", b)
                .label("rack", r)
                .allocatable("2", "8Gi")
                .typed(),
        );
    }
    c.apply_composite(
        &level(
            testkit::composite("root").namespace("ns").topology("zone"),
            true,
            2,
            None,
        )
        .typed(),
    );
    for sub in ["sub1", "sub2"] {
        c.apply_composite(
            &level(
                testkit::composite(sub).namespace("ns").topology("block"),
                true,
                2,
                Some("root"),
            )
            .typed(),
        );
    }
    for (pg, sub) in [
        ("pg1", "sub1"),
        ("pg2", "sub1"),
        ("pg3", "sub2"),
        ("pg4", "sub2"),
    ] {
        c.apply_pod_group(
            &level(
                testkit::pod_group(pg).namespace("ns").topology("rack"),
                true,
                2,
                Some(sub),
            )
            .typed(),
        );
    }
    for i in 1..=8 {
        c.apply_pod(&pod(&format!("p{i}"), &format!("pg{}", (i + 1) / 2), None));
    }
    c
}

/// Upstream "3-level CPG hierarchy: all levels have topology constraints
/// (root=zone, sub=block, leaf=rack)"
/// (`test/integration/scheduler/topologyawarescheduling`): one filter of
/// the first member plans every level, each domain identified by its whole
/// chain; every member then follows its own chain, and what the other
/// leaves' plans reserve (`rack-1` of block-2 is not `rack-1` of block-1)
/// never takes its own room.
#[test]
fn three_keyed_levels_plan_each_domain_by_its_whole_chain() {
    let c = zone_block_rack();
    let planner = GangPlanner::new();
    let names: Vec<&str> = ZBR.iter().map(|n| n.0).collect();
    let snap = c.read();
    let mut racks = BTreeSet::new();
    for i in 1..=8 {
        let p = pod(&format!("p{i}"), &format!("pg{}", (i + 1) / 2), None);
        let req = crate::pods::fit::pod_requests(p.spec.as_ref().expect("spec")).expect("req");
        let v = filter_gate(
            &snap,
            &planner,
            &p,
            &req,
            &names,
            tokio::time::Instant::now(),
        );
        assert!(v.wide.is_none(), "p{i}: {:?}", v.wide);
        let d = v.domain();
        let keys: Vec<&str> = d.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["zone", "block", "rack"], "p{i}");
        assert_eq!(d[0].1, "zone-1", "only zone-1 holds 8 pods (p{i})");
        let block = if i <= 4 { "sub1" } else { "sub2" };
        let planned = planner
            .get(&GroupRef::composite("ns", block))
            .expect("sub plan");
        assert_eq!(d[1].1, planned.value, "p{i}");
        // The nodes of the chain: exactly one, with room for the leaf.
        let chain: Vec<&str> = ZBR
            .iter()
            .filter(|n| (n.1, n.2, n.3) == (d[0].1.as_str(), d[1].1.as_str(), d[2].1.as_str()))
            .map(|n| n.0)
            .collect();
        assert_eq!(chain.len(), 1, "p{i}: {d:?}");
        racks.insert(chain[0]);
    }
    // Four leaves, four distinct racks of zone-1; the two blocks differ.
    assert_eq!(racks.len(), 4, "{racks:?}");
    let sub = |n| {
        planner
            .get(&GroupRef::composite("ns", n))
            .expect("plan")
            .value
    };
    assert_ne!(sub("sub1"), sub("sub2"));
}

#[test]
fn preemption_domains_are_chains_of_every_keyed_level() {
    let c = zone_block_rack();
    let snap = c.read();
    let levels = chain(&snap, "ns", "pg1").expect("chain");
    let mut domains = preemption::chained_domains(&snap, &levels).expect("domains");
    domains.sort();
    // rack-1 is three domains (two blocks of zone-1, block-1 of zone-2),
    // rack-2 two: five, not the two a rack value alone would give.
    assert_eq!(
        domains,
        [
            vec!["node1-z1-g1-r1"],
            vec!["node2-z1-g1-r2"],
            vec!["node3-z1-g2-r1"],
            vec!["node4-z1-g2-r2"],
            vec!["node5-z2-g1-r1", "node6-z2-g1-r1"],
        ]
    );
    // A placed member fixes its levels: pg1's rack and every level above.
    drop(snap);
    c.apply_pod(&pod("p1", "pg1", Some("node5-z2-g1-r1")));
    let snap = c.read();
    let levels = chain(&snap, "ns", "pg1").expect("chain");
    assert_eq!(
        preemption::chained_domains(&snap, &levels).expect("domains"),
        [vec!["node5-z2-g1-r1", "node6-z2-g1-r1"]]
    );
}

/// Composite `root` over zones in namespace `ns`, with one node per zone:
/// `z1-n` (8 cpu) in zone-1, the tighter fit a plan of its own would
/// choose, and `z2-n` (64 cpu) in zone-2.
fn zone_composite() -> ClusterIndex {
    let c = ClusterIndex::new();
    for (n, z, cpu) in [("z1-n", "zone-1", "8"), ("z2-n", "zone-2", "64")] {
        c.apply_node(
            &testkit::node(n)
                .label("zone", z)
                .allocatable(cpu, "64Gi")
                .typed(),
        );
    }
    c.apply_composite(
        &testkit::composite("root")
            .namespace("ns")
            .topology("zone")
            .typed(),
    );
    c
}

/// The domain the gang filter fixes for pod `b-0` (group `b`) over both
/// nodes of [`zone_composite`].
fn filter_b0(c: &ClusterIndex) -> Vec<(String, String)> {
    let p = pod("b-0", "b", None);
    let req = crate::pods::fit::pod_requests(p.spec.as_ref().expect("spec")).expect("req");
    let snap = c.read();
    let v = filter_gate(
        &snap,
        &GangPlanner::new(),
        &p,
        &req,
        &["z1-n", "z2-n"],
        tokio::time::Instant::now(),
    );
    assert!(v.wide.is_none(), "{:?}", v.wide);
    v.domain()
}

/// A composite over zones with children `a` and `b` (basic, 1 cpu pods):
/// `a`'s pod `a-0` is bound in zone-2 when `a` is deleted (to be created
/// again). Bound pods outlive their group, so `a-0` still fixes the
/// composite's zone: `b`'s pod is offered zone-2 alone, and once `a` comes
/// back the composite is in one zone. The memory goes with the last member.
#[test]
fn a_deleted_child_groups_bound_members_still_fix_the_composites_domain() {
    let c = zone_composite();
    let a = group("a", false, 1, Some("root"));
    c.apply_pod_group(&a);
    c.apply_pod_group(&group("b", false, 1, Some("root")));
    c.apply_pod(&pod("a-0", "a", Some("z2-n")));
    c.apply_pod(&pod("b-0", "b", None));
    c.delete_pod_group("ns", "a");
    assert_eq!(c.read().departed_groups("ns", "root"), ["a"]);

    let d = filter_b0(&c);
    assert_eq!(d, [("zone".to_owned(), "zone-2".to_owned())]);

    // A relist that no longer holds the group remembers it the same way.
    c.apply_pod_group(&a);
    assert!(!c.read().any_departed());
    c.reset_pod_groups(&[group("b", false, 1, Some("root"))]);
    assert_eq!(c.read().departed_groups("ns", "root"), ["a"]);

    // An update of the last member (a kubelet status write) keeps it.
    let mut running = pod("a-0", "a", Some("z2-n"));
    running.status = Some(k8s_openapi::api::core::v1::PodStatus {
        phase: Some("Running".into()),
        ..Default::default()
    });
    c.apply_pod(&running);
    assert_eq!(c.read().departed_groups("ns", "root"), ["a"]);

    // The last member gone, nothing is remembered and b may go anywhere.
    c.delete_pod("ns", "a-0");
    assert!(!c.read().any_departed());
    assert_ne!(filter_b0(&c), [("zone".to_owned(), "zone-2".to_owned())]);
}

/// The same composite, seen by an extender that never held group `a` (a
/// standby that took over after `a` was deleted): `a-0` carries the parent
/// its group named when it was bound (the Binding's annotation), which is
/// all that still ties it to `root`. It fixes the zone the same way, until
/// `a` comes back naming no parent. A pod not bound, or whose group is
/// cached, is not taken at its annotation's word.
#[test]
fn a_cold_cache_ties_a_missing_groups_bound_pods_to_the_parent_they_were_bound_under() {
    let c = zone_composite();
    c.apply_pod_group(&group("b", false, 1, Some("root")));
    let annotated = |name: &str, node: Option<&str>| {
        let mut p = pod(name, "a", node);
        p.metadata.annotations = Some(
            [(
                crate::model::refs::PARENT_COMPOSITE_ANNOTATION.to_owned(),
                "root".to_owned(),
            )]
            .into(),
        );
        p
    };
    // Pending, the annotation says nothing: the pod fixes no domain.
    c.apply_pod(&annotated("a-0", None));
    assert!(!c.read().any_departed());
    c.apply_pod(&annotated("a-0", Some("z2-n")));
    c.apply_pod(&pod("b-0", "b", None));
    assert_eq!(c.read().departed_groups("ns", "root"), ["a"]);

    assert_eq!(filter_b0(&c), [("zone".to_owned(), "zone-2".to_owned())]);

    // The group comes back naming no parent: the group's word wins.
    c.apply_pod_group(&group("a", false, 1, None));
    assert!(!c.read().any_departed());
    c.apply_pod(&annotated("a-0", Some("z2-n")));
    assert!(!c.read().any_departed());
    assert_ne!(filter_b0(&c), [("zone".to_owned(), "zone-2".to_owned())]);
}

/// A gang member kept when its unit reached quorum returns (kube-scheduler
/// retries it after its reservation was dropped): the room it held is its
/// own, and another group's plan does not take it. Rack r1 has one node of
/// 2 cpu; gang `b` (2 of 2) has b-0 bound there and b-1 returning; group
/// `a` planned the last cpu of r1 for a-0 meanwhile. (Simulation seed 167:
/// a gang bound 2 of its 4 because its kept members lost their room to
/// another gang's plan.)
#[test]
fn a_returning_member_keeps_its_room_against_other_plans() {
    let c = ClusterIndex::new();
    c.apply_node(&rack_node("n1", "r1", "2"));
    for (g, min) in [("a", 1), ("b", 2)] {
        c.apply_pod_group(&rack_gang(g, min, None));
    }
    c.apply_pod(&pod("b-0", "b", Some("n1")));
    let planner = GangPlanner::new();
    let now = tokio::time::Instant::now();
    let gate = |name: &str, group: &str, returning: bool| {
        let p = pod(name, group, None);
        c.apply_pod(&p);
        let req = crate::pods::fit::pod_requests(p.spec.as_ref().expect("spec")).expect("req");
        filter_gate_for(&c.read(), &planner, &p, &req, &["n1"], returning, now)
    };
    // a-0 plans r1: its cpu is held for it.
    let a = gate("a-0", "a", false);
    assert!(a.wide.is_none(), "{:?}", a.wide);
    assert!(planner.get(&GroupRef::group("ns", "a")).is_some());
    // b-1 as a new member: a's plan holds the room.
    let fresh = gate("b-1", "b", false);
    assert!(fresh.wide.is_some(), "another group's plan holds the room");
    // b-1 returning: the room is its own.
    let back = gate("b-1", "b", true);
    assert!(back.wide.is_none(), "{:?}", back.wide);
    assert_eq!(back.domain(), [("rack".to_owned(), "r1".to_owned())]);
}

/// A pending pod kube-scheduler nominated to a node (its preemption made
/// room there) holds that room against pods of no higher priority, as
/// kube-scheduler's own filter counts it (`RunFilterPluginsWithNominatedPods`);
/// a pod of higher priority does not see it. Rack r1 has one node of 2 cpu
/// with gang `g` (2 of 2) bound at g-0 and g-1 missing; `big` (1 cpu) is
/// nominated there. (Simulation seed 196: a scheduled gang's member stayed
/// pending, never reported, because the extender found room kube-scheduler
/// kept for a preemptor.)
#[test]
fn a_nominated_pod_holds_its_room_against_pods_of_no_higher_priority() {
    let c = ClusterIndex::new();
    c.apply_node(&rack_node("n1", "r1", "2"));
    c.apply_pod_group(&rack_gang("g", 2, None));
    c.apply_pod(&pod("g-0", "g", Some("n1")));
    let planner = GangPlanner::new();
    let now = tokio::time::Instant::now();
    let gate = |priority: i32| {
        let p: Pod = testkit::pod("g-1")
            .namespace("ns")
            .group("g")
            .priority(priority)
            .typed();
        c.apply_pod(&p);
        let req = crate::pods::fit::pod_requests(p.spec.as_ref().expect("spec")).expect("req");
        filter_gate_for(&c.read(), &planner, &p, &req, &["n1"], false, now)
    };
    let nominate = |priority: i32, on: Option<&str>| {
        let mut big: Pod = testkit::pod("big")
            .namespace("ns")
            .priority(priority)
            .typed();
        big.status.get_or_insert_default().nominated_node_name = on.map(str::to_owned);
        c.apply_pod(&big);
    };
    assert!(gate(0).wide.is_none(), "room for g-1");
    // `big` (priority 100) nominated on n1: g-1 at 0 finds no room left,
    // and the group's note says so (its below-minCount report).
    nominate(100, Some("n1"));
    let v = gate(0);
    let wide = v.wide.expect("the nomination holds the room");
    assert_eq!(
        wide.message,
        "pod group ns/g: 0 of the 1 pods it still needs fit in rack=r1"
    );
    assert_eq!(
        planner
            .take_notes()
            .get(&GroupRef::group("ns", "g"))
            .map(|n| n.message.clone()),
        Some(wide.message.clone())
    );
    // Of equal priority it still holds; of higher priority g-1 goes first.
    assert!(gate(100).wide.is_some());
    assert!(gate(101).wide.is_none());
    // A lower nominated pod holds nothing against g-1.
    nominate(-1, Some("n1"));
    assert!(gate(0).wide.is_none());
    // The nomination cleared, or `big` bound: nothing is held twice.
    nominate(100, None);
    assert!(gate(0).wide.is_none());
    assert!(c.read().nominated_pods().next().is_none());
}

/// A new gang's plan does not take room a nominated pod holds: of two
/// racks, the one whose only node is held is not chosen.
#[test]
fn a_plan_leaves_the_room_a_nominated_pod_holds() {
    let c = ClusterIndex::of(testkit::racks(&[("r1", 1, "2"), ("r2", 1, "4")]));
    let pods = c.apply_objects(testkit::gang("a", 2, "1", true));
    let planner = GangPlanner::new();
    let now = tokio::time::Instant::now();
    let verdict = |p: &Pod| {
        let req = crate::pods::fit::pod_requests(p.spec.as_ref().expect("spec")).expect("req");
        filter_gate_for(&c.read(), &planner, p, &req, &["r1-0", "r2-0"], false, now)
    };
    // Best fit picks r1 (exactly 2 cpu).
    assert_eq!(
        verdict(&pods[0]).domain(),
        [("rack".to_owned(), "r1".to_owned())]
    );
    planner.forget([GroupRef::group("ns", "a")]);
    let mut big: Pod = testkit::pod("big").namespace("ns").typed();
    big.status.get_or_insert_default().nominated_node_name = Some("r1-0".into());
    c.apply_pod(&big);
    assert_eq!(
        verdict(&pods[0]).domain(),
        [("rack".to_owned(), "r2".to_owned())]
    );
}

/// A child with no member placed does not plan into the room a sibling
/// whose placed members fix its domain still needs for the unit's quorum,
/// unless that sibling cannot complete there anyway. Rack r1 has one node
/// of 4 cpu, r2 one of 8; child `a` has a-0 (2 cpu) bound in r1 and needs
/// a-1 there; child `b` (one pod of 2 cpu) would fit r1 best. (Simulation
/// seed 344: a child's plan kept it in the room its sibling needed, and
/// the composite gathered and expired round after round.)
#[test]
fn a_planned_child_yields_the_room_a_fixed_sibling_still_needs() {
    let setup = |a_min: u32| {
        let c = ClusterIndex::new();
        for (n, rack, cpu) in [("r1-0", "r1", "4"), ("r2-0", "r2", "8")] {
            c.apply_node(&rack_node(n, rack, cpu));
        }
        c.apply_composite(&composite("root", true, 2, None));
        for (g, min) in [("a", a_min), ("b", 1)] {
            c.apply_pod_group(&rack_gang(g, min, Some("root")));
        }
        let two = |name: &str, g: &str, node: Option<&str>| {
            let p = testkit::pod(name)
                .namespace("ns")
                .group(g)
                .requests(&[("cpu", "2")]);
            match node {
                Some(n) => p.node_name(n),
                None => p,
            }
            .typed::<Pod>()
        };
        c.apply_pod(&two("a-0", "a", Some("r1-0")));
        for i in 1..a_min {
            c.apply_pod(&two(&format!("a-{i}"), "a", None));
        }
        let b = two("b-0", "b", None);
        c.apply_pod(&b);
        (c, b)
    };
    let domain = |c: &ClusterIndex, b: &Pod| {
        let planner = GangPlanner::new();
        let req = crate::pods::fit::pod_requests(b.spec.as_ref().expect("spec")).expect("req");
        let v = filter_gate_for(
            &c.read(),
            &planner,
            b,
            &req,
            &["r1-0", "r2-0"],
            false,
            tokio::time::Instant::now(),
        );
        assert!(v.wide.is_none(), "{:?}", v.wide);
        v.domain()[0].1.clone()
    };
    // a (2 of 2) needs a-1 in r1: b goes to r2.
    let (c, b) = setup(2);
    assert_eq!(domain(&c, &b), "r2");
    // a (3 of 3) needs two more in r1, where only one fits: it cannot
    // complete there, reserves nothing, and b fits r1 best.
    let (c, b) = setup(3);
    assert_eq!(domain(&c, &b), "r1");
}

/// A plan whose domain kube-scheduler offers no member for a whole
/// `PLAN_TTL` is forgotten (its own filters reject that domain: nominated
/// pods, devices, taints), and the group is planned among the nodes it
/// does offer; an offer in between restarts the count. (Simulation seed
/// 430: a composite's child kept a plan for a rack kube-scheduler never
/// offered, and the composite never placed.)
#[test]
fn a_plan_kube_scheduler_never_offers_is_made_again() {
    let c = ClusterIndex::of(testkit::racks(&[("r1", 1, "2"), ("r2", 1, "8")]));
    let pods = c.apply_objects(testkit::gang("a", 2, "1", true));
    let planner = GangPlanner::new();
    let t0 = tokio::time::Instant::now();
    let verdict = |p: &Pod, offered: &[&str], at: tokio::time::Instant| {
        let req = crate::pods::fit::pod_requests(p.spec.as_ref().expect("spec")).expect("req");
        filter_gate_for(&c.read(), &planner, p, &req, offered, false, at)
    };
    let rack = |v: &GroupVerdict| v.domain()[0].1.clone();
    // Best fit plans r1 for the gang.
    assert_eq!(rack(&verdict(&pods[0], &["r1-0", "r2-0"], t0)), "r1");
    // kube-scheduler offers only r2 from now on: the plan holds for a
    // while (a sample may miss it), an offer of r1 restarts the count ...
    let later = |s: u64| t0 + std::time::Duration::from_secs(s);
    assert_eq!(rack(&verdict(&pods[1], &["r2-0"], later(1))), "r1");
    assert_eq!(rack(&verdict(&pods[1], &["r2-0"], later(20))), "r1");
    assert_eq!(rack(&verdict(&pods[1], &["r1-0", "r2-0"], later(25))), "r1");
    assert_eq!(rack(&verdict(&pods[1], &["r2-0"], later(30))), "r1");
    assert_eq!(rack(&verdict(&pods[1], &["r2-0"], later(50))), "r1");
    // ... and a whole PLAN_TTL of misses since the last offer makes it again.
    assert_eq!(rack(&verdict(&pods[1], &["r2-0"], later(61))), "r2");
}

/// A member its own PodGroup does not need while its CompositePodGroup
/// gathers is rejected on every node (unresolvable: preemption cannot
/// help), so it never starts a binding cycle that holds room and a device
/// its siblings need; once the composite is placed it is filtered like any
/// pod. Composite `root` (gang of 2 children) over `a` (1 of 3) and `b`
/// (1 of 1); `a-0` is placed. (Simulation seed 20253: a child's surplus
/// members cycled through binds on the rack a sibling gang needed, and
/// the composite was never placed.)
#[test]
fn a_member_its_group_does_not_need_takes_no_node_while_the_composite_gathers() {
    let c = ClusterIndex::new();
    c.apply_node(&node("n1"));
    c.apply_composite(&composite("root", true, 2, None));
    c.apply_pod_group(&group("a", true, 1, Some("root")));
    c.apply_pod_group(&group("b", true, 1, Some("root")));
    c.apply_pod(&pod("a-0", "a", Some("n1")));
    c.apply_pod(&pod("b-0", "b", None));
    let planner = GangPlanner::new();
    let now = tokio::time::Instant::now();
    let gate = |name: &str, group: &str| {
        let p = pod(name, group, None);
        c.apply_pod(&p);
        let req = crate::pods::fit::pod_requests(p.spec.as_ref().expect("spec")).expect("req");
        filter_gate(&c.read(), &planner, &p, &req, &["n1"], now)
    };
    let surplus = gate("a-1", "a")
        .wide
        .expect("a has its minCount without a-1");
    assert!(surplus.unresolvable);
    assert_eq!(
        surplus.message,
        "composite pod group ns/root: quorum not reached yet (1 of 2 placed); pod group ns/a \
         has its minCount without this pod, so it holds no room the other groups need: retry it \
         once the unit is placed"
    );
    // b-0 is what the composite waits for: it passes.
    assert!(gate("b-0", "b").wide.is_none());
    // Once b-0 is placed the composite is at quorum: a-1 passes too.
    c.apply_pod(&pod("b-0", "b", Some("n1")));
    let after = gate("a-1", "a");
    assert!(after.wide.is_none(), "{:?}", after.wide);
}

/// A returning member keeps its room against other groups' plans, not
/// against a sibling in its own unit whose placed members fix its domain:
/// the unit's quorum needs that sibling, which cannot move. Composite
/// `root` (gang of 2) over `a` (1, by rack) and `b` (3, by rack, b-0 bound
/// in r1). (Simulation seed 62206: a returning member held the room its
/// fixed sibling needed, round after round, and the composite never
/// formed.)
#[test]
fn a_returning_member_yields_to_a_fixed_sibling_of_its_unit() {
    let c = ClusterIndex::new();
    c.apply_node(&rack_node("n1", "r1", "4"));
    c.apply_node(&rack_node("n2", "r2", "4"));
    c.apply_composite(&composite("root", true, 2, None));
    c.apply_pod_group(&rack_gang("a", 1, Some("root")));
    c.apply_pod_group(&rack_gang("b", 3, Some("root")));
    c.apply_pod(&pod("b-0", "b", Some("n1")));
    for p in ["b-1", "b-2"] {
        c.apply_pod(&pod(p, "b", None));
    }
    let planner = GangPlanner::new();
    let now = tokio::time::Instant::now();
    let gate = |offered: &[&str], returning: bool| {
        let p = pod("a-0", "a", None);
        c.apply_pod(&p);
        let req = crate::pods::fit::pod_requests(p.spec.as_ref().expect("spec")).expect("req");
        filter_gate_for(&c.read(), &planner, &p, &req, offered, returning, now)
    };
    // r1 holds a-0 and b's two: a plans r1.
    let first = gate(&["n1"], false);
    assert!(first.wide.is_none(), "{:?}", first.wide);
    assert_eq!(first.domain(), [("rack".to_owned(), "r1".to_owned())]);
    // Another pod takes a cpu there: r1 now holds b's two only.
    c.apply_pod(&testkit::pod("x").namespace("ns").on_node("n1").typed());
    // a-0 returns: its plan no longer holds once b's need is reserved, so
    // it is planned again (this cycle answers a resolvable rejection, as
    // any plan made again does) and its next filter goes to r2.
    let back = gate(&["n1", "n2"], true);
    assert!(
        back.wide.as_ref().is_some_and(|w| !w.unresolvable),
        "{:?}",
        back.wide
    );
    let next = gate(&["n1", "n2"], false);
    assert!(next.wide.is_none(), "{:?}", next.wide);
    assert_eq!(next.domain(), [("rack".to_owned(), "r2".to_owned())]);
}

/// A gang short in its domain only by room pods of lower priority hold
/// lets its members in where they fit as they are: each binds and is held
/// at the gang's Permit, its reservation keeping the room, while its
/// siblings preempt. Rejected instead, a member that fits as it is has no
/// victims, kube-scheduler clears its nomination, and the victims created
/// again take the room back (simulation seed 67445). Rack r1: n1 (2 cpu)
/// with g-0 bound, n2 (1 cpu) held by `low` at priority 0; gang `g` needs
/// g-1 and g-2 (1 cpu each) and only n1's last cpu is free.
#[test]
fn a_gang_short_only_by_lower_priority_room_lets_its_members_in() {
    let c = ClusterIndex::new();
    c.apply_node(&rack_node("n1", "r1", "2"));
    c.apply_node(&rack_node("n2", "r1", "1"));
    c.apply_pod(
        &testkit::pod("low")
            .namespace("ns")
            .priority(0)
            .set(&["spec", "nodeName"], "n2")
            .typed(),
    );
    let planner = GangPlanner::new();
    let now = tokio::time::Instant::now();
    // The group's priority is its members' (effective priority).
    let gate = |priority: i32, policy: Option<&str>| {
        let mut g = rack_gang("g", 3, None);
        g.spec.priority = Some(priority);
        g.spec.preemption_policy = policy.map(str::to_owned);
        c.apply_pod_group(&g);
        c.apply_pod(&pod("g-0", "g", Some("n1")));
        c.apply_pod(&pod("g-2", "g", None));
        let p = pod("g-1", "g", None);
        c.apply_pod(&p);
        let req = crate::pods::fit::pod_requests(p.spec.as_ref().expect("spec")).expect("req");
        filter_gate_for(&c.read(), &planner, &p, &req, &["n1"], false, now)
    };
    // Above `low`: its room counts, and g-1 may take n1's last cpu.
    let v = gate(100, None);
    assert!(v.wide.is_none(), "{:?}", v.wide);
    assert_eq!(v.domain(), [("rack".to_owned(), "r1".to_owned())]);
    // Of `low`'s priority, or not allowed to preempt: short, and said so.
    for (priority, policy) in [(0, None), (100, Some("Never"))] {
        let v = gate(priority, policy);
        let wide = v.wide.expect("short without preemption");
        assert_eq!(
            wide.message,
            "pod group ns/g: 1 of the 2 pods it still needs fit in rack=r1"
        );
    }
}

/// The room preemption would free counts for pods that claim devices only
/// up to the devices free on each node: preemption frees its victims' cpu
/// and memory, but a device only once their claims are deallocated
/// (simulation seed 67629: a rack with four free devices let in a gang of
/// six, whose members, held there, never completed). Rack r1: n1 (2 cpu,
/// g-0 bound with 1) and n2 (4 cpu, all held by `low` at priority 0); g
/// needs g-1..g-3, 1 cpu and one device each.
#[test]
fn room_freed_by_preemption_counts_only_the_free_devices() {
    let c = ClusterIndex::new();
    c.apply_node(&rack_node("n1", "r1", "2"));
    c.apply_node(&rack_node("n2", "r1", "4"));
    c.apply_pod(
        &testkit::pod("low")
            .namespace("ns")
            .priority(0)
            .requests(&[("cpu", "4")])
            .set(&["spec", "nodeName"], "n2")
            .typed(),
    );
    let mut g = rack_gang("g", 4, None);
    g.spec.priority = Some(100);
    c.apply_pod_group(&g);
    let member = |name: &str, node: Option<&str>| {
        let p = testkit::pod(name)
            .namespace("ns")
            .group("g")
            .requests(&[("cpu", "1")])
            .uses_claim("gpu", Some(&format!("{name}-gpu")), None);
        match node {
            Some(n) => p.set(&["spec", "nodeName"], n),
            None => p,
        }
        .typed::<Pod>()
    };
    c.apply_pod(&member("g-0", Some("n1")));
    for name in ["g-1", "g-2", "g-3"] {
        c.apply_pod(&member(name, None));
    }
    let publish = |node: &str, devices: &[&str]| {
        c.apply_slice(&testkit::slice(&format!("s-{node}"), "drv", node, devices).typed());
    };
    publish("n1", &["d0"]);
    publish("n2", &["d0"]);
    let planner = GangPlanner::new();
    let now = tokio::time::Instant::now();
    let gate = || {
        let p = member("g-1", None);
        let req = crate::pods::fit::pod_requests(p.spec.as_ref().expect("spec")).expect("req");
        filter_gate_for(&c.read(), &planner, &p, &req, &["n1"], false, now)
    };
    // One free device a node: two of the three fit, preempting or not
    // (the message counts the room free now: n1's one cpu).
    let v = gate();
    let wide = v.wide.expect("two devices for three members");
    assert_eq!(
        wide.message,
        "pod group ns/g: 1 of the 3 pods it still needs fit in rack=r1"
    );
    // Three on n2: preempting `low` frees room for the two n1 cannot hold.
    publish("n2", &["d0", "d1", "d2"]);
    let v = gate();
    assert!(v.wide.is_none(), "{:?}", v.wide);
    assert_eq!(v.domain(), [("rack".to_owned(), "r1".to_owned())]);
}

/// A composite whose domain only members still gathering fix (assumed,
/// none bound) rejects its members once its groups no longer fit there
/// and the whole unit fits in another domain, so none comes back to hold
/// the domain and the unit is planned again where it fits; fitting
/// nowhere else, or with a member bound, it stays. Composite `root` (gang of
/// 2, by zone) over `a` and `b` (gangs of 2, by rack); zone-1 has racks r1
/// (n1) and r2 (n2), 2 cpu each; `a-0` is assumed on n1. (Simulation seed
/// 603109: a child was held in a zone where its sibling no longer fitted,
/// its members held in turn so one always fixed the zone, and the
/// composite gathered and expired there round after round while another
/// zone stood empty.)
#[test]
fn a_composite_held_where_its_groups_no_longer_fit_lets_its_members_go() {
    let c = zoned_racks(&[
        ("n1", "zone-1", "r1"),
        ("n2", "zone-1", "r2"),
        ("n3", "zone-2", "r3"),
        ("n4", "zone-2", "r4"),
    ]);
    c.apply_composite(
        &level(
            testkit::composite("root").namespace("ns").topology("zone"),
            true,
            2,
            None,
        )
        .typed(),
    );
    c.apply_pod_group(&rack_gang("a", 2, Some("root")));
    c.apply_pod_group(&rack_gang("b", 2, Some("root")));
    for (p, g) in [("a-0", "a"), ("a-1", "a"), ("b-0", "b"), ("b-1", "b")] {
        c.apply_pod(&pod(p, g, None));
    }
    assert!(c.assume("ns", "a-0", "a-0-uid", "n1"));
    let planner = GangPlanner::new();
    let now = tokio::time::Instant::now();
    let gate_for = |name: &str, group: &str| {
        let p = pod(name, group, None);
        let req = crate::pods::fit::pod_requests(p.spec.as_ref().expect("spec")).expect("req");
        filter_gate_for(
            &c.read(),
            &planner,
            &p,
            &req,
            &["n1", "n2", "n3", "n4"],
            false,
            now,
        )
    };
    let gate = || gate_for("a-1", "a");
    // b is planned into r2, and a-1 goes to a-0's rack.
    let b = GroupRef::group("ns", "b");
    assert_eq!(gate_for("b-0", "b").domain()[1].1, "r2");
    assert_eq!(planner.planned(&b).as_deref(), Some("r2"));
    let fits = gate();
    assert!(fits.wide.is_none(), "{:?}", fits.wide);
    assert_eq!(
        fits.domain(),
        [
            ("zone".to_owned(), "zone-1".to_owned()),
            ("rack".to_owned(), "r1".to_owned())
        ]
    );
    // Another pod takes a cpu of r2: b fits nowhere in zone-1. Pods of
    // its own priority take a cpu of each zone-2 node too: the unit fits
    // nowhere else as the cluster stands, so its members stay held where
    // they are (kube-scheduler's preemption is its way in).
    for (p, n) in [("y3", "n3"), ("y4", "n4")] {
        c.apply_pod(&testkit::pod(p).namespace("ns").on_node(n).typed());
    }
    c.apply_pod(&testkit::pod("x").namespace("ns").on_node("n2").typed());
    let stays = gate();
    assert!(stays.wide.is_none(), "{:?}", stays.wide);
    assert_eq!(stays.domain()[0], ("zone".to_owned(), "zone-1".to_owned()));
    // Zone-2 is free again: the unit, a-0 moved too, fits there.
    for p in ["y3", "y4"] {
        c.delete_pod("ns", p);
    }
    assert_eq!(planner.planned(&b).as_deref(), Some("r2"));
    let held = gate().wide.expect("the unit no longer completes in zone-1");
    // Its plans name zone-1's racks: they go too, so no member follows
    // them back.
    assert_eq!(planner.planned(&b), None);
    assert_eq!(
        held.message,
        "composite pod group ns/root: its groups no longer fit in the zone domain its members waiting for quorum hold (zone-1), and they fit in zone-2; retry it once they are released"
    );
    assert!(held.unresolvable);
    // a-0 bound there: the domain is the unit's for good, and a-1 passes.
    c.apply_pod(&pod("a-0", "a", Some("n1")));
    assert!(gate().wide.is_none());
}

/// A composite held where its children that are free to move each fit on
/// their own, but not as one packing of them all, stays: the packing is
/// the planner's guess, kube-scheduler packs members its own way, and
/// only a child that fits nowhere in the domain even alone shows the unit
/// cannot complete there. Composite `root` (gang of 3, by zone) over `a`,
/// `b` and `c` (gangs of 2, by rack); zone-1 has racks r1 (n1) and r2
/// (n2), 2 cpu each, and zone-2 three empty racks; `a-0` is assumed on n1,
/// so `a-1` takes n1's last cpu, and `b` and `c` each fit r2 alone, not
/// together. (Simulation seed 1100518: such a unit was let go, planned
/// back into the same zone, and let go again, round after round, where
/// it had completed before.)
#[test]
fn a_composite_whose_free_children_each_fit_alone_stays_where_it_is_held() {
    let c = zoned_racks(&[
        ("n1", "zone-1", "r1"),
        ("n2", "zone-1", "r2"),
        ("n3", "zone-2", "r3"),
        ("n4", "zone-2", "r4"),
        ("n5", "zone-2", "r5"),
    ]);
    c.apply_composite(
        &level(
            testkit::composite("root").namespace("ns").topology("zone"),
            true,
            3,
            None,
        )
        .typed(),
    );
    for g in ["a", "b", "c"] {
        c.apply_pod_group(&rack_gang(g, 2, Some("root")));
        for i in 0..2 {
            c.apply_pod(&pod(&format!("{g}-{i}"), g, None));
        }
    }
    assert!(c.assume("ns", "a-0", "a-0-uid", "n1"));
    let planner = GangPlanner::new();
    let p = pod("a-1", "a", None);
    let req = crate::pods::fit::pod_requests(p.spec.as_ref().expect("spec")).expect("req");
    let v = filter_gate_for(
        &c.read(),
        &planner,
        &p,
        &req,
        &["n1", "n2", "n3", "n4", "n5"],
        false,
        tokio::time::Instant::now(),
    );
    assert!(v.wide.is_none(), "{:?}", v.wide);
    assert_eq!(
        v.domain(),
        [
            ("zone".to_owned(), "zone-1".to_owned()),
            ("rack".to_owned(), "r1".to_owned())
        ]
    );
}
