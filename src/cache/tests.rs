//! Cache tests: `apply` objects built by small `mk_*` helpers, assert on
//! decisions, usage and wakeups. No HTTP, no cluster.

use super::*;
use crate::crd::{Run, RunStatus};
use crate::model::resources::effective_requests;
use crate::runs::placement::PendingReason;
use crate::testkit;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

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

fn with_status(mut r: Run, phase: &str, pod: Option<&str>) -> Run {
    r.status = Some(RunStatus {
        phase: Some(phase.into()),
        assigned_pod: pod.map(str::to_owned),
        ..Default::default()
    });
    r
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
    let mut stale = mk_pod("rp-1", "py", &[("runs", "1"), ("gpu", "1")]);
    stale.status.as_mut().unwrap().conditions.as_mut().unwrap()[1].last_probe_time =
        Some(Time("2026-03-01T11:00:00Z".parse().unwrap()));
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
    let mut p = mk_pod("rp-1", "py", &[]);
    p.metadata.deletion_timestamp = Some(Time(now()));
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
    let mut again = mk_run("a", "py", &[]);
    again.metadata.uid = Some("uid-a-2".into());
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
                        let mut r = runs[i].clone();
                        let pod = r.status.as_ref().and_then(|s| s.assigned_pod.clone());
                        r.status = Some(RunStatus { phase: Some("Succeeded".into()), assigned_pod: pod, ..Default::default() });
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

fn released(mut r: Run, condition: &str, status: &str) -> Run {
    let s = r.status.get_or_insert_with(Default::default);
    s.conditions
        .push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: condition.into(),
            status: status.into(),
            reason: "Unregistered".into(),
            message: String::new(),
            last_transition_time: Time(now()),
            observed_generation: None,
        });
    r
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
    use crate::crd::{RunAffinity, RunAffinityRules, RunAffinityTerm};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn term(cohort: &str, op: &str) -> RunAffinityTerm {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
        RunAffinityTerm {
            label_selector: Some(LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![
                    LabelSelectorRequirement {
                        key: "cohort".into(),
                        operator: op.into(),
                        values: Some(vec![cohort.into()]),
                    },
                    LabelSelectorRequirement {
                        key: "cohort".into(),
                        operator: "Exists".into(),
                        values: None,
                    },
                ]),
            }),
            topology_key: crate::crd::TOPOLOGY_RUNTIME_POD.into(),
        }
    }

    fn cohort_run(name: &str, cohort: &str) -> Run {
        let mut r = mk_run(name, "py", &[]);
        r.metadata.labels = Some(BTreeMap::from([("cohort".into(), cohort.into())]));
        r.spec.affinity = Some(RunAffinity {
            run_affinity: Some(RunAffinityRules {
                required_during_scheduling_ignored_during_execution: vec![term(cohort, "In")],
                ..Default::default()
            }),
            run_anti_affinity: Some(RunAffinityRules {
                required_during_scheduling_ignored_during_execution: vec![term(cohort, "NotIn")],
                ..Default::default()
            }),
        });
        r
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
