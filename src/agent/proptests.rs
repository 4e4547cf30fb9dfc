//! Property test of the agent's state over random histories: admissions
//! and releases by several peers, watch events with gaps, relists, sweeps
//! of the unseen bound, and restarts from the journal.
//!
//! The world (what the API server holds) is modelled beside the agent; a
//! gap drops watch events until the next relist, as a watch that expired
//! does. Invariants, after every step:
//! - reserved ≤ capacity, for every resource;
//! - the queue never exceeds its bound;
//! - a hold disappears through a `DELETE` only when its creator asked, and
//!   a re-`POST` by someone else changes nothing;
//! - after a sweep with the watch healthy, every hold is either younger
//!   than the bound (from its request, or the latest that asked for a
//!   later attempt) or has a live Run on this pod.

use super::journal::JournalHold;
use super::ledger::{Decision, Origin};
use super::source::{AgentConfig, AgentState};
use crate::crd::Run;
use crate::model::refs::RunRef;
use crate::model::resources::Requests;
use crate::testkit;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::Event;
use proptest::prelude::*;
use std::time::{Duration, Instant};

const POD: &str = "rp-1";
const RUNS: usize = 6;
const CAPACITY: u64 = 3;
const TTL: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
enum Op {
    /// runtimed (peer) asks for Run `run`; `body` passes requests.
    Admit {
        run: usize,
        peer: u32,
        body: bool,
    },
    /// DELETE by `peer`.
    Release {
        run: usize,
        peer: u32,
    },
    /// The Run is created (or moved), here or elsewhere, Scheduled.
    Assign {
        run: usize,
        here: bool,
    },
    /// runtimed starts it (only when it holds a reservation).
    Start {
        run: usize,
    },
    Finish {
        run: usize,
    },
    Delete {
        run: usize,
    },
    /// From now on watch events are lost, until the next relist.
    Gap,
    Relist,
    Advance {
        secs: u64,
    },
    Sweep,
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    let run = 0..RUNS;
    prop_oneof![
        4 => (run.clone(), 0u32..3, any::<bool>()).prop_map(|(run, peer, body)| Op::Admit { run, peer, body }),
        2 => (run.clone(), 0u32..3).prop_map(|(run, peer)| Op::Release { run, peer }),
        3 => (run.clone(), any::<bool>()).prop_map(|(run, here)| Op::Assign { run, here }),
        2 => run.clone().prop_map(|run| Op::Start { run }),
        1 => run.clone().prop_map(|run| Op::Finish { run }),
        1 => run.prop_map(|run| Op::Delete { run }),
        1 => Just(Op::Gap),
        1 => Just(Op::Relist),
        2 => (1u64..90).prop_map(|secs| Op::Advance { secs }),
        1 => Just(Op::Sweep),
        1 => Just(Op::Restart),
    ]
}

#[derive(Debug, Clone, PartialEq)]
struct Truth {
    phase: &'static str,
    here: bool,
}

fn uid(i: usize) -> String {
    format!("u{i}")
}

/// Run `default/r<i>` (uid `u<i>`) of runtime `python` with no requests,
/// in the truth's phase, assigned here or to another pod.
fn mk_run(i: usize, t: &Truth) -> Run {
    testkit::run(&format!("r{i}"), &[])
        .namespace("default")
        .uid(&uid(i))
        .runtime("python")
        .unset(&["metadata", "resourceVersion"])
        .unset(&["spec", "resources"])
        .status(t.phase, Some(if t.here { POD } else { "rp-2" }))
        .typed()
}

/// This agent's Runtime Pod `default/rp-1`, declaring [`CAPACITY`] runs.
fn pod() -> Pod {
    testkit::runtime_pod(
        POD,
        &[("runs", &CAPACITY.to_string())],
        "2026-01-01T00:00:00Z",
    )
    .namespace("default")
    .typed()
}

struct World {
    runs: Vec<Option<Truth>>,
    gap: bool,
    now: Instant,
}

fn config() -> AgentConfig {
    AgentConfig {
        max_queue: 2,
        unseen_ttl: TTL,
        ..AgentConfig::new(POD, "default")
    }
}

/// A fresh agent state: journal recovery, then a first list of the world.
fn boot(world: &World, journal: Vec<JournalHold>) -> AgentState {
    let mut s = AgentState::new(config());
    s.recover(journal, world.now);
    for e in [Event::Init, Event::InitApply(pod()), Event::InitDone] {
        s.apply_pod_event(e);
    }
    relist(&mut s, world);
    s
}

fn relist(s: &mut AgentState, world: &World) {
    s.apply_run_event(Event::Init);
    for (i, t) in world.runs.iter().enumerate() {
        if let Some(t) = t {
            s.apply_run_event(Event::InitApply(mk_run(i, t)));
        }
    }
    s.apply_run_event(Event::InitDone);
}

fn deliver(s: &mut AgentState, world: &World, e: Event<Run>) {
    if !world.gap {
        s.apply_run_event(e);
    }
}

fn check(s: &AgentState) -> Result<(), TestCaseError> {
    for (name, cap) in s.ledger.capacity() {
        let r = s.ledger.reserved().get(name).copied().unwrap_or(0);
        prop_assert!(r <= *cap, "{name}: reserved {r} > capacity {cap}");
    }
    prop_assert!(s.ledger.queue_len() <= config().max_queue);
    Ok(())
}

fn run_history(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut world = World {
        runs: vec![None; RUNS],
        gap: false,
        now: Instant::now(),
    };
    let mut s = boot(&world, Vec::new());
    for op in ops {
        match op {
            Op::Admit { run, peer, body } => {
                let u = uid(run);
                let requests = match s.known_run(&u) {
                    Some(k) => match &k.requests {
                        Ok(r) => r.clone(),
                        Err(_) => continue,
                    },
                    None if body => Requests::runs_only(),
                    None => continue,
                };
                let before = s.ledger.hold(&u).cloned();
                let queued_before = s.ledger.is_queued(&u);
                let r = RunRef {
                    namespace: "default".into(),
                    name: format!("r{run}"),
                    uid: u.clone(),
                };
                let (d, _) = s.request(r, requests, Some(peer), world.now);
                if let Decision::NotYours(_) = d {
                    prop_assert_eq!(s.ledger.hold(&u), before.as_ref());
                    prop_assert_eq!(s.ledger.is_queued(&u), queued_before);
                }
                if let Some(h) = &before
                    && h.creator.is_some()
                    && h.creator != Some(peer)
                {
                    prop_assert!(matches!(d, Decision::NotYours(_)), "{d:?}");
                }
            }
            Op::Release { run, peer } => {
                let u = uid(run);
                let before = s.ledger.hold(&u).cloned();
                let ok = s.release_by(&u, Some(peer)).is_ok();
                match before {
                    Some(h) if h.creator == Some(peer) => {
                        prop_assert!(ok);
                        prop_assert!(s.ledger.hold(&u).is_none());
                        // runtimed releases a Run it is done with.
                        if let Some(t) = world.runs[run].as_mut()
                            && t.phase == "Running"
                        {
                            t.phase = "Succeeded";
                            let t = t.clone();
                            deliver(&mut s, &world, Event::Apply(mk_run(run, &t)));
                        }
                    }
                    Some(h) => {
                        prop_assert!(!ok, "released a hold of {:?} as {peer}", h.creator);
                        prop_assert_eq!(s.ledger.hold(&u), Some(&h));
                    }
                    None => {}
                }
            }
            Op::Assign { run, here } => {
                let t = match &world.runs[run] {
                    Some(t) if t.phase != "Scheduled" => continue,
                    _ => Truth {
                        phase: "Scheduled",
                        here,
                    },
                };
                world.runs[run] = Some(t.clone());
                deliver(&mut s, &world, Event::Apply(mk_run(run, &t)));
            }
            Op::Start { run } => {
                let held = s
                    .ledger
                    .hold(&uid(run))
                    .is_some_and(|h| h.origin == Origin::Admitted);
                let Some(t) = world.runs[run].as_mut() else {
                    continue;
                };
                if !(held && t.here && t.phase == "Scheduled") {
                    continue;
                }
                t.phase = "Running";
                let t = t.clone();
                deliver(&mut s, &world, Event::Apply(mk_run(run, &t)));
            }
            Op::Finish { run } => {
                let Some(t) = world.runs[run].as_mut() else {
                    continue;
                };
                t.phase = "Succeeded";
                let t = t.clone();
                deliver(&mut s, &world, Event::Apply(mk_run(run, &t)));
            }
            Op::Delete { run } => {
                if let Some(t) = world.runs[run].take() {
                    deliver(&mut s, &world, Event::Delete(mk_run(run, &t)));
                }
            }
            Op::Gap => world.gap = true,
            Op::Relist => {
                world.gap = false;
                relist(&mut s, &world);
            }
            Op::Advance { secs } => world.now += Duration::from_secs(secs),
            Op::Sweep => {
                s.sweep(world.now);
                if !world.gap {
                    for h in s.ledger.holds() {
                        let live = world.runs[h.run.uid[1..].parse::<usize>().unwrap_or(0)]
                            .as_ref()
                            .is_some_and(|t| t.here && t.phase != "Succeeded");
                        // The bound counts from the request, or from the
                        // latest one that asked for a later attempt.
                        let young = s
                            .unseen_since(&h.run.uid)
                            .is_some_and(|at| world.now.saturating_duration_since(at) < TTL);
                        prop_assert!(live || young, "{} outlived its Run", h.run.uid);
                    }
                }
            }
            Op::Restart => {
                let journal: Vec<JournalHold> = s
                    .ledger
                    .holds()
                    .filter(|h| h.origin == Origin::Admitted)
                    .map(JournalHold::from)
                    .collect();
                world.gap = false;
                s = boot(&world, journal);
            }
        }
        check(&s)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn agent_random_histories_keep_the_invariants(ops in proptest::collection::vec(op(), 1..80)) {
        run_history(ops)?;
    }
}
