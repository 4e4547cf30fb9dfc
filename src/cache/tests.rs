//! Cache tests: `apply` objects built by the test kit (through the small
//! `mk_*` wrappers below), assert on decisions, usage and wakeups. No HTTP,
//! no cluster.

use super::*;
use crate::crd::Run;
use crate::model::resources::effective_requests;
use crate::runs::placement::PendingReason;
use crate::testkit;

const NOW: &str = "2026-03-01T12:00:00Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

fn mk_cache() -> RunCache {
    RunCache::new(
        CacheConfig::default(),
        Arc::new(WorkQueue::default()),
        Arc::new(Metrics::default()),
    )
}

/// A Ready Runtime Pod `ns/name` (uid `uid-<name>`) of `runtime` declaring
/// `caps`, heartbeat at [`NOW`] (the test kit's).
fn mk_pod(name: &str, runtime: &str, caps: &[(&str, &str)]) -> Pod {
    testkit::runtime_pod(name, caps, NOW)
        .runtime(runtime)
        .typed()
}

/// A Pending Run `ns/name` (uid `uid-<name>`, resourceVersion 1) of
/// `runtime` requesting `reqs` (the test kit's).
fn mk_run(name: &str, runtime: &str, reqs: &[(&str, &str)]) -> Run {
    testkit::run(name, reqs).runtime(runtime).typed()
}

/// `r` with its status replaced by `phase` on `pod` (the test kit's).
fn with_status(r: Run, phase: &str, pod: Option<&str>) -> Run {
    kit(&r).unset(&["status"]).status(phase, pod).typed()
}

/// A Run back in the test kit, to change it with the kit's setters.
fn kit(r: &Run) -> testkit::Obj {
    testkit::Obj(serde_json::to_value(r).expect("a Run serializes"))
}

fn key(name: &str) -> RunKey {
    RunKey::new("ns", name)
}

fn drain(c: &RunCache) -> Vec<String> {
    let mut v = Vec::new();
    while let Some(k) = c.queue().try_next() {
        c.queue().done(&k);
        v.push(k.name);
    }
    v.sort();
    v
}

fn usage(c: &RunCache, pod: &str) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let v = c.runtime_pods(Some("ns"), None, now());
    let p = v.into_iter().find(|p| p.name == pod).expect("pod listed");
    (p.usage, p.assumed)
}

fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn reserved_pod(d: &Decision) -> &str {
    match d {
        Decision::Reserved { pod, .. } => pod,
        other => panic!("expected a reservation, got {other:?}"),
    }
}

#[test]
fn active_runs_count_and_release_wakes_pending() {
    let c = mk_cache();
    c.apply_pod(&mk_pod("rp-1", "py", &[("runs", "2")]), now());
    c.apply_run(&with_status(
        mk_run("a", "py", &[("runs", "2")]),
        "Running",
        Some("rp-1"),
    ));
    assert_eq!(usage(&c, "rp-1").0, m(&[("runs", "2")]));
    c.apply_run(&mk_run("b", "py", &[]));
    assert_eq!(drain(&c), vec!["b"]);
    assert!(matches!(
        c.schedule_one(&key("b"), now()),
        Decision::Pending {
            reason: PendingReason::InsufficientCapacity,
            ..
        }
    ));
    // a finishes: usage released, b woken.
    c.apply_run(&with_status(
        mk_run("a", "py", &[("runs", "2")]),
        "Succeeded",
        Some("rp-1"),
    ));
    assert_eq!(usage(&c, "rp-1").0, m(&[]));
    assert_eq!(drain(&c), vec!["b"]);
    c.check_invariants().unwrap();
}

#[test]
fn reservation_blocks_double_booking_until_handoff() {
    let c = mk_cache();
    c.apply_pod(&mk_pod("rp-1", "py", &[("runs", "1")]), now());
    c.apply_run(&mk_run("a", "py", &[]));
    c.apply_run(&mk_run("b", "py", &[]));
    assert_eq!(reserved_pod(&c.schedule_one(&key("a"), now())), "rp-1");
    // a's write is in flight (the watch has not shown it): b must not fit.
    assert!(matches!(
        c.schedule_one(&key("b"), now()),
        Decision::Pending { .. }
    ));
    // a cycle for a again while its reservation stands is skipped.
    assert_eq!(c.schedule_one(&key("a"), now()), Decision::Skip);
    assert_eq!(usage(&c, "rp-1"), (m(&[]), m(&[("runs", "1")])));
    // Informer lag: an unrelated update of a (still Pending) keeps the reservation.
    c.apply_run(&with_status(mk_run("a", "py", &[]), "Pending", None));
    assert_eq!(usage(&c, "rp-1").1, m(&[("runs", "1")]));
    // The watch shows a Scheduled on rp-1: assumed becomes actual, exactly once.
    c.apply_run(&with_status(
        mk_run("a", "py", &[]),
        "Scheduled",
        Some("rp-1"),
    ));
    assert_eq!(usage(&c, "rp-1"), (m(&[("runs", "1")]), m(&[])));
    c.apply_run(&with_status(
        mk_run("a", "py", &[]),
        "Running",
        Some("rp-1"),
    ));
    assert_eq!(usage(&c, "rp-1"), (m(&[("runs", "1")]), m(&[])));
    assert!(matches!(
        c.schedule_one(&key("b"), now()),
        Decision::Pending { .. }
    ));
    c.check_invariants().unwrap();
}

#[test]
fn failed_write_releases_and_wakes() {
    let c = mk_cache();
    c.apply_pod(&mk_pod("rp-1", "py", &[("runs", "1")]), now());
    c.apply_run(&mk_run("a", "py", &[]));
    c.apply_run(&mk_run("b", "py", &[]));
    drain(&c);
    let Decision::Reserved { uid, pod, .. } = c.schedule_one(&key("a"), now()) else {
        panic!()
    };
    assert!(matches!(
        c.schedule_one(&key("b"), now()),
        Decision::Pending { .. }
    ));
    assert!(c.release("ns", &uid, &pod));
    assert!(!c.release("ns", &uid, &pod), "released once");
    assert_eq!(usage(&c, "rp-1"), (m(&[]), m(&[])));
    assert_eq!(drain(&c), vec!["a", "b"]);
    c.check_invariants().unwrap();
}

#[test]
fn assigned_elsewhere_terminal_or_deleted_drops_reservation() {
    let c = mk_cache();
    c.apply_pod(&mk_pod("rp-1", "py", &[("runs", "3")]), now());
    c.apply_pod(&mk_pod("rp-2", "py", &[("runs", "3")]), now());
    for n in ["a", "b", "c"] {
        c.apply_run(&mk_run(n, "py", &[]));
    }
    let pa = reserved_pod(&c.schedule_one(&key("a"), now())).to_owned();
    let other = if pa == "rp-1" { "rp-2" } else { "rp-1" };
    c.apply_run(&with_status(
        mk_run("a", "py", &[]),
        "Scheduled",
        Some(other),
    ));
    assert_eq!(usage(&c, &pa), (m(&[]), m(&[])));
    assert_eq!(usage(&c, other).0, m(&[("runs", "1")]));

    let pb = reserved_pod(&c.schedule_one(&key("b"), now())).to_owned();
    c.apply_run(&with_status(mk_run("b", "py", &[]), "Failed", None));
    assert_eq!(usage(&c, &pb).1, m(&[]));

    let pc = reserved_pod(&c.schedule_one(&key("c"), now())).to_owned();
    c.delete_run("ns", "c");
    assert_eq!(usage(&c, &pc).1, m(&[]));
    c.check_invariants().unwrap();
}

#[test]
fn least_loaded_with_exact_ties_by_name() {
    let c = mk_cache();
    c.apply_pod(&mk_pod("rp-b", "py", &[("runs", "4")]), now());
    c.apply_pod(&mk_pod("rp-a", "py", &[("runs", "4")]), now());
    c.apply_pod(&mk_pod("rp-c", "py", &[("runs", "8")]), now());
    c.apply_run(&with_status(
        mk_run("x", "py", &[("runs", "2")]),
        "Running",
        Some("rp-c"),
    ));
    let reqs = effective_requests(None).unwrap();
    let plan = c.plan("ns", "py", &reqs, now());
    let order: Vec<_> = plan
        .feasible
        .iter()
        .map(|(n, s)| (n.to_string(), s.max.to_string()))
        .collect();
    // rp-a and rp-b: 1/4; rp-c: 3/8 — a before b by name.
    assert_eq!(
        order,
        vec![
            ("rp-a".into(), "1/4".into()),
            ("rp-b".into(), "1/4".into()),
            ("rp-c".into(), "3/8".into())
        ]
    );
    c.apply_run(&mk_run("r", "py", &[]));
    assert_eq!(reserved_pod(&c.schedule_one(&key("r"), now())), "rp-a");
}

#[test]
fn sum_breaks_max_ties() {
    // rp-1: runs 2/4 and gpu 1/4 after placement → max 1/2, sum 3/4.
    // rp-2: runs 2/4 and gpu 0/2 → max 1/2, sum 1/2: wins despite its name.
    c_sum_case();
}

fn c_sum_case() {
    let c = mk_cache();
    c.apply_pod(&mk_pod("rp-1", "py", &[("runs", "4"), ("gpu", "4")]), now());
    c.apply_pod(&mk_pod("rp-2", "py", &[("runs", "4"), ("gpu", "2")]), now());
    c.apply_run(&with_status(
        mk_run("g", "py", &[("gpu", "1")]),
        "Running",
        Some("rp-1"),
    ));
    c.apply_run(&with_status(
        mk_run("h", "py", &[]),
        "Running",
        Some("rp-2"),
    ));
    let plan = c.plan("ns", "py", &effective_requests(None).unwrap(), now());
    let got: Vec<_> = plan
        .feasible
        .iter()
        .map(|(n, s)| (n.to_string(), s.max.to_string(), s.sum.to_string()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("rp-2".into(), "1/2".into(), "1/2".into()),
            ("rp-1".into(), "1/2".into(), "3/4".into())
        ]
    );
}

#[test]
fn capacity_changes_wake_only_that_runtime() {
    let c = mk_cache();
    c.apply_pod(&mk_pod("rp-1", "py", &[("runs", "1")]), now());
    c.apply_run(&mk_run("p", "py", &[("gpu", "1")]));
    c.apply_run(&mk_run("n", "node", &[]));
    drain(&c);
    // A heartbeat on a pod that is already fresh changes nothing.
    let mut p = mk_pod("rp-1", "py", &[("runs", "1")]);
    c.apply_pod(&p, now());
    assert!(drain(&c).is_empty());
    // Declaring gpu wakes the py Run only.
    p.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("kruntimes.io/capacity.gpu".into(), "1".into());
    c.apply_pod(&p, now());
    assert_eq!(drain(&c), vec!["p"]);
    // Not ready, then ready again: each is a capacity change.
    p.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
    c.apply_pod(&p, now());
    assert_eq!(drain(&c), vec!["p"]);
    // Stale heartbeat made fresh wakes.
    let stale: Pod = testkit::runtime_pod(
        "rp-1",
        &[("runs", "1"), ("gpu", "1")],
        "2026-03-01T11:00:00Z",
    )
    .typed();
    c.apply_pod(&stale, now());
    drain(&c);
    c.apply_pod(&mk_pod("rp-1", "py", &[("runs", "1"), ("gpu", "1")]), now());
    assert_eq!(drain(&c), vec!["p"]);
}

#[test]
fn pending_reasons_and_write_only_on_change() {
    let c = mk_cache();
    c.apply_run(&mk_run("a", "py", &[]));
    let Decision::Pending {
        reason,
        status,
        write,
        ..
    } = c.schedule_one(&key("a"), now())
    else {
        panic!()
    };
    assert_eq!(reason, PendingReason::NoRuntimePods);
    assert!(write);
    assert_eq!(
        status.message.as_deref(),
        Some(
            "waiting for available runtime pods for runtime \"py\": no Runtime Pods of this runtime in this namespace"
        )
    );
    // The written status comes back through the watch: same decision, no write.
    let mut r = mk_run("a", "py", &[]);
    r.status = Some(status);
    c.apply_run(&r);
    let Decision::Pending { write, .. } = c.schedule_one(&key("a"), now()) else {
        panic!()
    };
    assert!(!write);
    // A pod appears that does not declare gpu.
    c.apply_pod(&mk_pod("rp-1", "py", &[]), now());
    c.apply_run(&mk_run("g", "py", &[("gpu", "1")]));
    let Decision::Pending { reason, status, .. } = c.schedule_one(&key("g"), now()) else {
        panic!()
    };
    assert_eq!(reason, PendingReason::ResourceNotDeclared);
    assert_eq!(status.conditions[0].reason, "ResourceNotDeclared");
    assert_eq!(
        status.message.as_deref(),
        Some(
            "waiting for available runtime pods for runtime \"py\": 0/1 Runtime Pods can take this Run: 1 ResourceNotDeclared"
        )
    );
}

#[test]
fn invalid_requests_fail_in_prefilter() {
    let c = mk_cache();
    c.apply_pod(&mk_pod("rp-1", "py", &[("gpu", "4")]), now());
    c.apply_run(&mk_run("bad", "py", &[("gpu", "-1")]));
    let Decision::Invalid { status, write, .. } = c.schedule_one(&key("bad"), now()) else {
        panic!()
    };
    assert!(write);
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    assert!(status.completion_time.is_some(), "completionTime set");
    let completed = status.conditions.iter().find(|c| c.type_ == "Completed");
    assert_eq!(
        completed.map(|c| (c.status.as_str(), c.reason.as_str())),
        Some(("False", "InvalidResources"))
    );
    assert!(status.conditions.iter().all(|c| c.type_ != "Scheduled"));
    assert!(
        status
            .message
            .as_deref()
            .unwrap()
            .contains("spec.resources.requests[gpu]")
    );
    assert_eq!(usage(&c, "rp-1").1, m(&[]), "nothing reserved");
}

#[test]
fn unavailable_pods_are_rejected_with_their_reason() {
    let c = mk_cache();
    let p: Pod = testkit::runtime_pod("rp-1", &[], NOW)
        .set(&["metadata", "deletionTimestamp"], NOW)
        .typed();
    c.apply_pod(&p, now());
    let plan = c.plan("ns", "py", &effective_requests(None).unwrap(), now());
    assert_eq!(plan.reason(), Some(PendingReason::RuntimePodUnavailable));
    assert_eq!(
        plan.rejected[0].1,
        "RuntimePodUnavailable: pod is being deleted"
    );
    // Other namespaces and runtimes are never candidates.
    assert_eq!(
        c.plan("other", "py", &effective_requests(None).unwrap(), now())
            .reason(),
        Some(PendingReason::NoRuntimePods)
    );
    assert_eq!(
        c.plan("ns", "node", &effective_requests(None).unwrap(), now())
            .reason(),
        Some(PendingReason::NoRuntimePods)
    );
}

#[test]
fn recreated_run_with_same_name_replaces_the_old_one() {
    let c = mk_cache();
    c.apply_pod(&mk_pod("rp-1", "py", &[("runs", "2")]), now());
    c.apply_run(&with_status(
        mk_run("a", "py", &[("runs", "2")]),
        "Running",
        Some("rp-1"),
    ));
    let again: Run = testkit::run("a", &[]).uid("uid-a-2").typed();
    c.apply_run(&again);
    assert_eq!(usage(&c, "rp-1").0, m(&[]));
    assert_eq!(reserved_pod(&c.schedule_one(&key("a"), now())), "rp-1");
    c.check_invariants().unwrap();
}

#[test]
fn relist_reconciles_without_double_counting() {
    let c = mk_cache();
    c.apply_pod(&mk_pod("rp-1", "py", &[("runs", "4")]), now());
    let a = with_status(mk_run("a", "py", &[]), "Running", Some("rp-1"));
    let b = with_status(mk_run("b", "py", &[]), "Running", Some("rp-1"));
    c.apply_run(&a);
    c.apply_run(&b);
    // Relist: a is unchanged, b is gone, d is new.
    let d = with_status(mk_run("d", "py", &[("runs", "2")]), "Ready", Some("rp-1"));
    c.reset_runs(&[a.clone(), d]);
    assert_eq!(usage(&c, "rp-1").0, m(&[("runs", "3")]));
    c.reset_runs(&[a]);
    assert_eq!(usage(&c, "rp-1").0, m(&[("runs", "1")]));
    c.reset_pods(&[], now());
    assert!(c.runtime_pods(Some("ns"), None, now()).is_empty());
    c.check_invariants().unwrap();
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    /// One step of a random history.
    #[derive(Debug, Clone)]
    enum Op {
        /// A new Run asking for (runs, gpu).
        Create(u8, u8),
        /// A scheduling cycle for Run i; the write succeeds, conflicts, or
        /// succeeds but the watch lags (the cache does not see it yet).
        Cycle(usize, u8),
        /// The watch catches up on every lagged write.
        CatchUp,
        /// Run i finishes.
        Complete(usize),
        /// Run i is deleted.
        Delete(usize),
        /// Pod p's gpu capacity changes.
        Capacity(usize, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (1u8..3, 0u8..3).prop_map(|(r, g)| Op::Create(r, g)),
            6 => (0usize..40, 0u8..3).prop_map(|(i, w)| Op::Cycle(i, w)),
            2 => Just(Op::CatchUp),
            2 => (0usize..40).prop_map(Op::Complete),
            1 => (0usize..40).prop_map(Op::Delete),
            1 => (0usize..3, 0u8..4).prop_map(|(p, g)| Op::Capacity(p, g)),
        ]
    }

    fn pod(p: usize, gpu: u8) -> Pod {
        mk_pod(
            &format!("rp-{p}"),
            "py",
            &[("runs", "3"), ("gpu", &gpu.to_string())],
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Whatever the interleaving of creations, cycles, conflicts,
        /// informer lag, completions, deletions and capacity changes: the
        /// index matches a recount, and no pod is ever planned past capacity
        /// (actual + assumed <= capacity whenever capacity only grew).
        #[test]
        fn no_overbooking_under_random_histories(ops in proptest::collection::vec(op(), 1..120)) {
            let c = mk_cache();
            let mut gpus = [2u8; 3];
            for (p, g) in gpus.iter().enumerate() {
                c.apply_pod(&pod(p, *g), now());
            }
            let mut runs: Vec<Run> = Vec::new();
            let mut lagged: Vec<Run> = Vec::new();
            let mut shrunk = false;
            for op in ops {
                match op {
                    Op::Create(r, g) => {
                        let run = mk_run(&format!("r{}", runs.len()), "py", &[("runs", &r.to_string()), ("gpu", &g.to_string())]);
                        c.apply_run(&run);
                        runs.push(run);
                    }
                    Op::Cycle(i, w) if i < runs.len() => {
                        let key = key(runs[i].metadata.name.as_deref().unwrap());
                        if let Decision::Reserved { uid, pod, status, .. } = c.schedule_one(&key, now()) {
                            match w {
                                0 => { runs[i].status = Some(status); c.apply_run(&runs[i]); }
                                1 => { c.release("ns", &uid, &pod); }
                                _ => { runs[i].status = Some(status); lagged.push(runs[i].clone()); }
                            }
                        }
                    }
                    Op::CatchUp => {
                        for r in lagged.drain(..) { c.apply_run(&r); }
                    }
                    Op::Complete(i) if i < runs.len() => {
                        let pod = runs[i].status.as_ref().and_then(|s| s.assigned_pod.clone());
                        let r = with_status(runs[i].clone(), "Succeeded", pod.as_deref());
                        lagged.retain(|l| l.metadata.name != r.metadata.name);
                        c.apply_run(&r);
                        runs[i] = r;
                    }
                    Op::Delete(i) if i < runs.len() => {
                        lagged.retain(|l| l.metadata.name != runs[i].metadata.name);
                        c.delete_run("ns", runs[i].metadata.name.as_deref().unwrap());
                    }
                    Op::Capacity(p, g) => {
                        shrunk |= g < gpus[p];
                        gpus[p] = g;
                        c.apply_pod(&pod(p, g), now());
                    }
                    _ => {}
                }
                prop_assert_eq!(c.check_invariants(), Ok(()));
                if !shrunk {
                    for v in c.runtime_pods(Some("ns"), None, now()) {
                        for (res, cap) in &v.capacity {
                            let used: u64 = v.usage.get(res).map_or(0, |u| u.parse().unwrap())
                                + v.assumed.get(res).map_or(0, |u| u.parse().unwrap());
                            prop_assert!(used <= cap.parse::<u64>().unwrap(), "{} over capacity on {}: {:?}", v.name, res, v);
                        }
                    }
                }
            }
            // Quiesce: the watch catches up, then cycles run until nothing
            // more is placed. Every Run still unscheduled must fit nowhere.
            for r in lagged.drain(..) { c.apply_run(&r); }
            loop {
                let mut placed = false;
                for r in runs.iter_mut() {
                    let key = key(r.metadata.name.as_deref().unwrap());
                    if let Decision::Reserved { status, .. } = c.schedule_one(&key, now()) {
                        r.status = Some(status);
                        c.apply_run(r);
                        placed = true;
                    }
                }
                if !placed { break; }
            }
            prop_assert_eq!(c.check_invariants(), Ok(()));
            for v in c.runs(Some("ns")) {
                if v.phase.as_deref().is_none_or(|p| p == "Pending") && v.assigned_pod.is_none() {
                    let r = runs.iter().find(|r| r.metadata.name.as_deref() == Some(v.name.as_str())).unwrap();
                    let reqs = effective_requests(r.requests()).unwrap();
                    let plan = c.plan("ns", "py", &reqs, now());
                    prop_assert!(plan.feasible.is_empty(), "{} fits {:?} but was not scheduled", v.name, plan.selected());
                }
            }
        }
    }
}

// === Function release (kruntimes) ===

/// `r` with one more status condition (the test kit's).
fn released(r: Run, condition: &str, status: &str) -> Run {
    kit(&r)
        .condition(condition, status, "Unregistered", NOW)
        .typed()
}

#[test]
fn released_function_run_stops_counting_and_wakes_pending() {
    let c = mk_cache();
    c.apply_pod(&mk_pod("rp-1", "py", &[("runs", "1")]), now());
    let ready = with_status(mk_run("f", "py", &[]), "Ready", Some("rp-1"));
    c.apply_run(&ready);
    assert_eq!(usage(&c, "rp-1").0, m(&[("runs", "1")]));
    c.apply_run(&mk_run("b", "py", &[]));
    assert_eq!(drain(&c), vec!["b"]);
    assert!(matches!(
        c.schedule_one(&key("b"), now()),
        Decision::Pending { .. }
    ));
    // A False condition, or another type, changes nothing.
    c.apply_run(&released(ready.clone(), DEFAULT_RELEASED, "False"));
    c.apply_run(&released(ready.clone(), "example.com/Other", "True"));
    assert_eq!(usage(&c, "rp-1").0, m(&[("runs", "1")]));
    // Released while still Ready: usage goes, b is woken and fits.
    c.apply_run(&released(ready, DEFAULT_RELEASED, "True"));
    assert_eq!(usage(&c, "rp-1").0, m(&[]));
    assert_eq!(drain(&c), vec!["b"]);
    assert_eq!(reserved_pod(&c.schedule_one(&key("b"), now())), "rp-1");
    c.check_invariants().unwrap();
}

const DEFAULT_RELEASED: &str = crate::crd::DEFAULT_RELEASED_CONDITION;

#[test]
fn released_condition_is_configurable_and_can_be_off() {
    let mk = |released_condition: Option<&str>| {
        RunCache::new(
            CacheConfig {
                released_condition: released_condition.map(str::to_owned),
                ..CacheConfig::default()
            },
            Arc::new(WorkQueue::default()),
            Arc::new(Metrics::default()),
        )
    };
    let run = |cond: &str| {
        released(
            with_status(mk_run("f", "py", &[]), "Running", Some("rp-1")),
            cond,
            "True",
        )
    };
    let custom = mk(Some("example.com/Released"));
    custom.apply_pod(&mk_pod("rp-1", "py", &[("runs", "1")]), now());
    custom.apply_run(&run(DEFAULT_RELEASED));
    assert_eq!(
        usage(&custom, "rp-1").0,
        m(&[("runs", "1")]),
        "not the configured type"
    );
    custom.apply_run(&run("example.com/Released"));
    assert_eq!(usage(&custom, "rp-1").0, m(&[]));
    let off = mk(None);
    off.apply_pod(&mk_pod("rp-1", "py", &[("runs", "1")]), now());
    off.apply_run(&run(DEFAULT_RELEASED));
    assert_eq!(
        usage(&off, "rp-1").0,
        m(&[("runs", "1")]),
        "no condition configured"
    );
}

#[test]
fn released_or_timed_out_run_drops_its_assumed_reservation() {
    for (phase, cond) in [
        ("Scheduled", true),
        ("Timeout", false),
        ("Cancelled", false),
    ] {
        let c = mk_cache();
        c.apply_pod(&mk_pod("rp-1", "py", &[("runs", "1")]), now());
        c.apply_run(&mk_run("a", "py", &[]));
        assert_eq!(reserved_pod(&c.schedule_one(&key("a"), now())), "rp-1");
        assert_eq!(usage(&c, "rp-1").1, m(&[("runs", "1")]));
        // The watch shows a on rp-1 already released, or terminal with a
        // phase kruntimes writes after unregistering a function: nothing
        // is held, neither assumed nor actual.
        let mut seen = with_status(mk_run("a", "py", &[]), phase, Some("rp-1"));
        if cond {
            seen = released(seen, DEFAULT_RELEASED, "True");
        }
        c.apply_run(&seen);
        assert_eq!(usage(&c, "rp-1"), (m(&[]), m(&[])), "{phase}");
        c.check_invariants().unwrap();
    }
}

/// The watch was away while a placed Run ran, failed and went back to
/// Pending for its next attempt: the next object seen is that Pending one.
/// Its reservation goes (nothing would ever hand it over) and the Run is
/// placed again; an older Pending object of the same attempt keeps it.
#[test]
fn a_retried_run_seen_pending_again_drops_its_assumed_reservation() {
    let c = mk_cache();
    c.apply_pod(&mk_pod("rp-1", "py", &[("runs", "1")]), now());
    let mut first = with_status(mk_run("a", "py", &[]), "Pending", None);
    first.status.as_mut().unwrap().attempt = Some(1);
    c.apply_run(&first);
    assert_eq!(reserved_pod(&c.schedule_one(&key("a"), now())), "rp-1");
    // A late event of the same attempt: still reserved.
    c.apply_run(&first);
    assert_eq!(usage(&c, "rp-1").1, m(&[("runs", "1")]));
    assert_eq!(c.schedule_one(&key("a"), now()), Decision::Skip);
    // Attempt 2, Pending: the reservation is gone and a is placed again.
    let mut retried = first.clone();
    retried.status.as_mut().unwrap().attempt = Some(2);
    c.apply_run(&retried);
    assert_eq!(usage(&c, "rp-1"), (m(&[]), m(&[])));
    c.check_invariants().unwrap();
    assert_eq!(reserved_pod(&c.schedule_one(&key("a"), now())), "rp-1");
}

/// Upstream compares a fractional capacity exactly: `gpu: 1500m` takes one
/// Run of gpu 1, not two; `runs: 2500m` takes two Runs.
#[test]
fn fractional_capacity_admits_what_upstream_admits() {
    let c = mk_cache();
    c.apply_pod(
        &mk_pod("rp-1", "py", &[("gpu", "1500m"), ("runs", "2500m")]),
        now(),
    );
    c.apply_run(&mk_run("a", "py", &[("gpu", "1")]));
    assert_eq!(reserved_pod(&c.schedule_one(&key("a"), now())), "rp-1");
    c.apply_run(&mk_run("b", "py", &[("gpu", "1")]));
    let Decision::Pending { reason, .. } = c.schedule_one(&key("b"), now()) else {
        panic!("a second gpu of 1 does not fit 1.5")
    };
    assert_eq!(reason, PendingReason::InsufficientCapacity);
    c.apply_run(&mk_run("r2", "py", &[]));
    assert_eq!(reserved_pod(&c.schedule_one(&key("r2"), now())), "rp-1");
    c.apply_run(&mk_run("r3", "py", &[]));
    assert!(matches!(
        c.schedule_one(&key("r3"), now()),
        Decision::Pending { .. }
    ));
    assert_eq!(c.check_invariants(), Ok(()));
}

/// Affinity under concurrent placement: Runs decided from several threads
/// at once, each cohort with required affinity to itself (it seeds one pod
/// and the rest follow) and required anti-affinity to the other cohorts.
/// Whatever the interleaving: no pod is overcommitted, each cohort sits on
/// one pod, no two cohorts share a pod, and Runs that could not be placed
/// say why.
mod affinity_concurrency {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn term(cohort: &str, op: &str) -> serde_json::Value {
        serde_json::json!({"topologyKey": crate::crd::TOPOLOGY_RUNTIME_POD,
            "labelSelector": {"matchExpressions": [
                {"key": "cohort", "operator": op, "values": [cohort]},
                {"key": "cohort", "operator": "Exists"}]}})
    }

    fn cohort_run(name: &str, cohort: &str) -> Run {
        testkit::run(name, &[])
            .label("cohort", cohort)
            .requires(false, term(cohort, "In"))
            .requires(true, term(cohort, "NotIn"))
            .typed()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        #[test]
        fn cohorts_stay_together_and_apart(
            pods in 1usize..5,
            cap in 1u64..4,
            runs in proptest::collection::vec(0usize..3, 1..16),
            threads in 1usize..4,
        ) {
            let c = Arc::new(mk_cache());
            for p in 0..pods {
                c.apply_pod(&mk_pod(&format!("rp-{p}"), "py", &[("runs", &cap.to_string())]), now());
            }
            let names: Vec<(String, String)> = runs
                .iter()
                .enumerate()
                .map(|(i, k)| (format!("r{i}"), format!("c{k}")))
                .collect();
            for (n, k) in &names {
                c.apply_run(&cohort_run(n, k));
            }
            let decided: Vec<(String, String, Decision)> = std::thread::scope(|s| {
                let chunks: Vec<&[(String, String)]> =
                    names.chunks(names.len().div_ceil(threads)).collect();
                let handles: Vec<_> = chunks
                    .into_iter()
                    .map(|chunk| {
                        let c = Arc::clone(&c);
                        s.spawn(move || {
                            chunk
                                .iter()
                                .map(|(n, k)| (n.clone(), k.clone(), c.schedule_one(&key(n), now())))
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
            });
            prop_assert_eq!(c.check_invariants(), Ok(()));
            let mut pods_of: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            let mut per_pod: BTreeMap<String, u64> = BTreeMap::new();
            for (_, k, d) in &decided {
                match d {
                    Decision::Reserved { pod, .. } => {
                        pods_of.entry(k.clone()).or_default().insert(pod.clone());
                        *per_pod.entry(pod.clone()).or_default() += 1;
                    }
                    Decision::Pending { reason, .. } => prop_assert!(matches!(
                        reason,
                        PendingReason::InsufficientCapacity
                            | PendingReason::UnsatisfiedRunAffinity
                            | PendingReason::UnsatisfiedRunAntiAffinity
                    ), "{:?}", reason),
                    other => prop_assert!(false, "unexpected {:?}", other),
                }
            }
            for (pod, n) in &per_pod {
                prop_assert!(*n <= cap, "{} holds {} > {}", pod, n, cap);
            }
            let mut owner: BTreeMap<String, String> = BTreeMap::new();
            for (k, ps) in &pods_of {
                prop_assert_eq!(ps.len(), 1, "cohort {} spread over {:?}", k, ps);
                for p in ps {
                    if let Some(other) = owner.insert(p.clone(), k.clone()) {
                        prop_assert!(false, "cohorts {} and {} share {}", other, k, p);
                    }
                }
            }
        }
    }
}

/// Run affinity under the cache's concurrent decide-and-reserve path, on
/// random histories: random Runtime Pods and capacities, Runs already
/// active on them, and new Runs with random labels and random required
/// and preferred affinity and anti-affinity, decided from several threads
/// at once in rounds (a round's writes come back through the watch at once
/// or only after the round), until a round places nothing.
///
/// Then: the index matches a recount, no pod holds more than its capacity,
/// every Run still waiting fits nowhere, and the final assignment can be
/// explained by *some* order of the decisions in which every required term
/// held when its Run was placed. A decision the cache made on a stale or
/// torn view (two Runs seeding the same cohort on two pods, a Run placed
/// beside one its anti-affinity excludes) leaves no such order.
mod affinity_prop {
    use super::*;
    use crate::testkit::run_term;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    const KEYS: [&str; 2] = ["app", "tier"];
    const VALUES: [&str; 3] = ["a", "b", "c"];

    /// A label, or a term selecting it: (key, value) indices.
    type Label = (usize, usize);

    #[derive(Debug, Clone)]
    struct NewRun {
        labels: Vec<Label>,
        required: Option<Label>,
        required_anti: Option<Label>,
        preferred: Option<(i32, Label)>,
        preferred_anti: Option<(i32, Label)>,
        /// The write comes back through the watch only after the round.
        lagged: bool,
    }

    fn label() -> impl Strategy<Value = Label> {
        (0..KEYS.len(), 0..VALUES.len())
    }

    fn new_run() -> impl Strategy<Value = NewRun> {
        (
            proptest::collection::vec(label(), 0..3),
            proptest::option::weighted(0.5, label()),
            proptest::option::weighted(0.4, label()),
            proptest::option::of((1i32..100, label())),
            proptest::option::of((1i32..100, label())),
            any::<bool>(),
        )
            .prop_map(
                |(labels, required, required_anti, preferred, preferred_anti, lagged)| NewRun {
                    labels,
                    required,
                    required_anti,
                    preferred,
                    preferred_anti,
                    lagged,
                },
            )
    }

    fn labels_of(ls: &[Label]) -> BTreeMap<String, String> {
        ls.iter()
            .map(|(k, v)| (KEYS[*k].to_owned(), VALUES[*v].to_owned()))
            .collect()
    }

    fn matches(term: Label, labels: &BTreeMap<String, String>) -> bool {
        labels.get(KEYS[term.0]).map(String::as_str) == Some(VALUES[term.1])
    }

    fn term(l: Label) -> serde_json::Value {
        run_term(&[(KEYS[l.0], VALUES[l.1])])
    }

    fn labelled(mut o: testkit::Obj, ls: &[Label]) -> testkit::Obj {
        for (k, v) in labels_of(ls) {
            o = o.label(&k, &v);
        }
        o
    }

    fn build(name: &str, r: &NewRun) -> Run {
        let mut o = labelled(testkit::run(name, &[]), &r.labels);
        if let Some(l) = r.required {
            o = o.requires(false, term(l));
        }
        if let Some(l) = r.required_anti {
            o = o.requires(true, term(l));
        }
        if let Some((w, l)) = r.preferred {
            o = o.prefers(false, w, term(l));
        }
        if let Some((w, l)) = r.preferred_anti {
            o = o.prefers(true, w, term(l));
        }
        o.typed()
    }

    /// Whether a graph over `n` nodes (`before[a]` holds the nodes that
    /// come after `a`) has an order, i.e. no cycle.
    fn has_order(n: usize, before: &[BTreeSet<usize>]) -> bool {
        let mut indegree = vec![0usize; n];
        for succ in before {
            for s in succ {
                indegree[*s] += 1;
            }
        }
        let mut ready: Vec<usize> = (0..n).filter(|i| indegree[*i] == 0).collect();
        let mut seen = 0;
        while let Some(a) = ready.pop() {
            seen += 1;
            for s in &before[a] {
                indegree[*s] -= 1;
                if indegree[*s] == 0 {
                    ready.push(*s);
                }
            }
        }
        seen == n
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn concurrent_placements_never_break_affinity_or_capacity(
            caps in proptest::collection::vec(1u64..4, 1..5),
            existing in proptest::collection::vec((proptest::collection::vec(label(), 0..3), 0usize..5), 0..6),
            new in proptest::collection::vec(new_run(), 1..14),
            threads in 1usize..4,
        ) {
            let c = Arc::new(mk_cache());
            for (p, cap) in caps.iter().enumerate() {
                c.apply_pod(&mk_pod(&format!("rp-{p}"), "py", &[("runs", &cap.to_string())]), now());
            }
            // Node i: existing Runs first, then the new ones. `pod[i]`:
            // where Run i ended up; `labels[i]`: its labels.
            let mut pod: Vec<Option<usize>> = Vec::new();
            let mut labels: Vec<BTreeMap<String, String>> = Vec::new();
            let mut load = vec![0u64; caps.len()];
            for (i, (ls, p)) in existing.iter().enumerate() {
                let p = p % caps.len();
                if load[p] == caps[p] {
                    continue;
                }
                load[p] += 1;
                c.apply_run(&labelled(testkit::run(&format!("e{i}"), &[]), ls)
                    .status("Running", Some(&format!("rp-{p}")))
                    .typed());
                pod.push(Some(p));
                labels.push(labels_of(ls));
            }
            let first_new = pod.len();
            let mut runs: Vec<Run> = Vec::new();
            for (i, r) in new.iter().enumerate() {
                let run = build(&format!("r{i}"), r);
                c.apply_run(&run);
                runs.push(run);
                pod.push(None);
                labels.push(labels_of(&r.labels));
            }
            let n = pod.len();
            // Known order: (round, thread, position) of each placement.
            let mut placed_at: Vec<Option<(usize, usize, usize)>> = vec![None; n];

            for round in 0.. {
                let waiting: Vec<usize> = (0..runs.len()).filter(|i| pod[first_new + i].is_none()).collect();
                let chunk = waiting.len().div_ceil(threads).max(1);
                let outcomes: Vec<(usize, usize, Decision, bool)> = std::thread::scope(|s| {
                    let handles: Vec<_> = waiting
                        .chunks(chunk)
                        .enumerate()
                        .map(|(t, part)| {
                            let c = Arc::clone(&c);
                            let runs = &runs;
                            let new = &new;
                            s.spawn(move || {
                                let mut out = Vec::new();
                                let mut late = Vec::new();
                                for i in part {
                                    let name = runs[*i].metadata.name.clone().unwrap();
                                    let d = c.schedule_one(&key(&name), now());
                                    if let Decision::Reserved { status, .. } = &d {
                                        let mut seen = runs[*i].clone();
                                        seen.status = Some(status.clone());
                                        if new[*i].lagged {
                                            late.push(seen);
                                        } else {
                                            c.apply_run(&seen);
                                        }
                                    }
                                    out.push((t, *i, d, new[*i].lagged));
                                }
                                (out, late)
                            })
                        })
                        .collect();
                    let mut all = Vec::new();
                    for h in handles {
                        let (out, late) = h.join().unwrap();
                        for r in late {
                            c.apply_run(&r);
                        }
                        all.extend(out);
                    }
                    all
                });
                let mut progress = false;
                let mut position = vec![0usize; threads];
                for (t, i, d, _) in outcomes {
                    match d {
                        Decision::Reserved { pod: p, status, .. } => {
                            let p: usize = p.trim_start_matches("rp-").parse().unwrap();
                            pod[first_new + i] = Some(p);
                            placed_at[first_new + i] = Some((round, t, position[t]));
                            position[t] += 1;
                            runs[i].status = Some(status);
                            progress = true;
                        }
                        Decision::Pending { reason, .. } => prop_assert!(matches!(
                            reason,
                            PendingReason::InsufficientCapacity
                                | PendingReason::UnsatisfiedRunAffinity
                                | PendingReason::UnsatisfiedRunAntiAffinity
                        ), "{:?}", reason),
                        other => prop_assert!(false, "r{}: unexpected {:?}", i, other),
                    }
                }
                prop_assert_eq!(c.check_invariants(), Ok(()));
                if !progress {
                    break;
                }
            }

            // Capacity: the cache's ledger and a recount of the assignment.
            let mut count = vec![0u64; caps.len()];
            for p in pod.iter().flatten() {
                count[*p] += 1;
            }
            for (p, cap) in caps.iter().enumerate() {
                prop_assert!(count[p] <= *cap, "rp-{} holds {} > {}", p, count[p], cap);
            }
            for v in c.runtime_pods(Some("ns"), None, now()) {
                let used: u64 = v.usage.get("runs").map_or(0, |u| u.parse().unwrap())
                    + v.assumed.get("runs").map_or(0, |u| u.parse().unwrap());
                prop_assert!(used <= v.capacity["runs"].parse::<u64>().unwrap(), "{:?}", v);
            }

            // An order of the decisions: what is known, then what each
            // required term demands.
            let mut before: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
            let placed: Vec<usize> = (first_new..n).filter(|i| pod[*i].is_some()).collect();
            for succ in before.iter_mut().take(first_new) {
                succ.extend(placed.iter().copied());
            }
            for a in &placed {
                for b in &placed {
                    let (Some(x), Some(y)) = (placed_at[*a], placed_at[*b]) else { continue };
                    if x.0 < y.0 || (x.0 == y.0 && x.1 == y.1 && x.2 < y.2) {
                        before[*a].insert(*b);
                    }
                }
            }
            for r in &placed {
                let spec = &new[*r - first_new];
                let p = pod[*r];
                let others = |t: Label| -> Vec<usize> {
                    (0..n).filter(|s| *s != *r && pod[*s].is_some() && matches(t, &labels[*s])).collect()
                };
                if let Some(t) = spec.required {
                    let beside: Vec<usize> = others(t).into_iter().filter(|s| pod[*s] == p).collect();
                    if beside.is_empty() {
                        // It seeded the cohort: it needs its own labels to
                        // match, and every other member came after it.
                        prop_assert!(matches(t, &labels[*r]),
                            "r{} on rp-{:?} without its required cohort {:?}", *r - first_new, p, t);
                        for s in others(t) {
                            before[*r].insert(s);
                        }
                    }
                }
                if let Some(t) = spec.required_anti {
                    for s in others(t).into_iter().filter(|s| pod[*s] == p) {
                        before[*r].insert(s);
                    }
                }
            }
            prop_assert!(has_order(n, &before),
                "no order of the decisions satisfies every required term: pods {:?}, labels {:?}, runs {:?}, placed at {:?}",
                pod, labels, new, placed_at);

            // Whatever still waits fits nowhere now.
            for (i, r) in runs.iter().enumerate() {
                if pod[first_new + i].is_some() {
                    continue;
                }
                let reqs = effective_requests(r.requests()).unwrap();
                let plan = c.plan_top_for(
                    "ns", "py", &reqs, r.spec.affinity.as_ref(), &labels[first_new + i], now(), 0,
                ).unwrap();
                prop_assert!(plan.feasible.is_empty(), "r{} fits {:?} but waits", i, plan.selected());
            }
        }
    }
}
