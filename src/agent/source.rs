//! What feeds the ledger: the agent's own Pod (capacity annotations) and the
//! Runs assigned to it, as `kube::runtime::watcher` events.
//!
//! [`AgentState`] turns events into ledger updates; it is pure, so tests feed
//! it events directly. The cluster wiring ([`watch`]) and the standalone
//! loader ([`standalone_events`]) only produce events.

use super::ledger::{AdmissionLedger, Decision, NotYours};
use crate::crd::{Run, phase};
use crate::model::refs::RunRef;
use crate::model::resources::{RequestError, Requests, accounted_requests, effective_requests};
use crate::model::runtime_pod::capacity_from_annotations;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::Event;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Which pod the agent guards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    /// Name of the Runtime Pod the agent runs in.
    pub pod: String,
    /// Its namespace (accounting is namespace-local).
    pub namespace: String,
    /// `runs` capacity when the pod has no `kruntimes.io/capacity.runs`.
    pub default_runs_capacity: u64,
    /// Bypasses a queued Run tolerates (see [`super::ledger`]).
    pub max_bypass: u32,
    /// Longest queue; a newcomer beyond it is refused (429).
    pub max_queue: usize,
    /// How long a hold or queue entry made from the request body may wait
    /// for the watch to show its Run here, once the watches have synced.
    pub unseen_ttl: Duration,
    /// Run condition type that, when `True`, marks the Run's function
    /// released: its hold is released as for a terminal Run. `None`: no
    /// such condition.
    pub released_condition: Option<String>,
}

impl AgentConfig {
    /// A config with the default bounds (`max_queue` 1024, `unseen_ttl` 2m).
    pub fn new(pod: impl Into<String>, namespace: impl Into<String>) -> Self {
        AgentConfig {
            pod: pod.into(),
            namespace: namespace.into(),
            default_runs_capacity: 2,
            max_bypass: 4,
            max_queue: 1024,
            unseen_ttl: Duration::from_secs(120),
            released_condition: Some(crate::crd::DEFAULT_RELEASED_CONDITION.to_owned()),
        }
    }
}

/// What the agent keeps of a Run: stripped at the watch, so the cache never
/// holds whole objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFacts {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub phase: Option<String>,
    pub assigned_pod: Option<String>,
    /// Effective request, or why `spec.resources.requests` is invalid.
    pub requests: Result<Requests, RequestError>,
    /// The request used to account it if it is already executing.
    pub accounted: Requests,
    /// Its function is released (the configured condition is `True`): it
    /// holds nothing, as if terminal.
    pub released: bool,
    /// `status.attempt` (1-based; absent is the first).
    pub attempt: i32,
}

impl RunFacts {
    /// The facts of a Run, its function released when condition
    /// `released_condition` is `True`; `None` without `metadata.uid`.
    pub fn of(run: &Run, released_condition: Option<&str>) -> Option<Self> {
        let status = run.status.as_ref();
        Some(RunFacts {
            uid: run.metadata.uid.clone()?,
            namespace: run
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_owned()),
            name: run.metadata.name.clone().unwrap_or_default(),
            phase: status.and_then(|s| s.phase.clone()),
            assigned_pod: status.and_then(|s| s.assigned_pod.clone()),
            requests: effective_requests(run.requests()),
            accounted: accounted_requests(run.requests()),
            released: status.is_some_and(|s| s.is_released(released_condition)),
            attempt: status.and_then(|s| s.attempt).unwrap_or(1),
        })
    }
}

/// A request made through the API (held or queued): when, before which
/// relist, and for which attempt at least.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Requested {
    /// The first request.
    at: Instant,
    /// Where the unseen bound counts from: the first request, or the
    /// latest one that showed a later attempt than the earlier ones.
    last: Instant,
    /// The Run-list epoch when it was made: a relist that started later and
    /// does not show the Run here releases it.
    epoch: u64,
    /// The lowest attempt the caller can be asking for, from what the watch
    /// showed when it asked (see [`AgentState::floor`]); `None` when the
    /// watch did not show the Run here. An event showing the Run away from
    /// this pod at an attempt not above it is older than the request.
    floor: Option<i32>,
}

/// A Run assigned to this pod, as last seen by the watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownRun {
    pub run: RunRef,
    pub phase: Option<String>,
    /// Effective request, or why `spec.resources.requests` is invalid.
    pub requests: Result<Requests, RequestError>,
    /// The request used to account it if it is already executing.
    pub accounted: Requests,
    /// `status.attempt` (1-based).
    pub attempt: i32,
}

/// Why a queued Run left the queue without being admitted, or a held one
/// was released by the watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    Terminal,
    /// Its function was released (the configured condition is `True`).
    Released,
    Deleted,
    Reassigned,
    /// Taken out of the queue by `DELETE /v1/reservations/{uid}`.
    Withdrawn,
    /// Made from the request body, and the watch never showed the Run here
    /// within the bound.
    Unseen,
}

impl Gone {
    pub fn as_str(self) -> &'static str {
        match self {
            Gone::Terminal => "the Run finished",
            Gone::Released => "the Run's function was released",
            Gone::Deleted => "the Run was deleted",
            Gone::Reassigned => "the Run is assigned to another pod",
            Gone::Withdrawn => "its reservation request was withdrawn",
            Gone::Unseen => "the watch never showed the Run on this pod",
        }
    }
}

/// What an update did that waiters must hear about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effects {
    /// Uids admitted (from the queue, or adopted while queued).
    pub admitted: Vec<String>,
    /// Uids dropped from the queue by the watch, and why.
    pub dropped: Vec<(String, Gone)>,
}

impl Effects {
    fn admitted(admitted: Vec<String>) -> Self {
        Effects {
            admitted,
            dropped: Vec::new(),
        }
    }

    fn merge(&mut self, other: Effects) {
        self.admitted.extend(other.admitted);
        self.dropped.extend(other.dropped);
    }
}

/// The agent's whole state: the ledger and the watch-backed cache feeding
/// it. One owner ([`super::Agent`]) serialises every call.
#[derive(Debug)]
pub struct AgentState {
    /// Which pod, which namespace, defaults.
    pub config: AgentConfig,
    /// Capacity, reservations and the queue.
    pub ledger: AdmissionLedger,
    /// Runs assigned to this pod and not terminal, by uid.
    runs: HashMap<String, KnownRun>,
    /// Uids released by an explicit DELETE: not adopted again while the
    /// watch still shows them Running. The value is the lowest attempt a
    /// new request for the uid can be for (the released one's floor + 1),
    /// when known.
    released: HashMap<String, Option<i32>>,
    /// Creators of holds and queue entries the watch released because their
    /// Run left this pod (not terminal): if the watch then shows the Run
    /// executing here, the adopted hold is theirs.
    left: HashMap<String, u32>,
    /// Holds and queue entries made through the API, by uid.
    requested: HashMap<String, Requested>,
    /// Incremented at every `Init` of the Run watch.
    list_epoch: u64,
    /// Runs listed since the last `Init`, until `InitDone`.
    run_buffer: Option<Vec<RunFacts>>,
    /// The pod listed since the last `Init`, until `InitDone`.
    pod_buffer: Option<Option<Pod>>,
    /// The first Pod list has completed.
    pod_synced: bool,
    /// The first Run list has completed.
    runs_synced: bool,
}

impl AgentState {
    /// A state that knows nothing yet: no capacity, not synced.
    pub fn new(config: AgentConfig) -> Self {
        let ledger =
            AdmissionLedger::new(Vec::new(), config.max_bypass).with_max_queue(config.max_queue);
        AgentState {
            config,
            ledger,
            runs: HashMap::new(),
            released: HashMap::new(),
            left: HashMap::new(),
            requested: HashMap::new(),
            list_epoch: 0,
            run_buffer: None,
            pod_buffer: None,
            pod_synced: false,
            runs_synced: false,
        }
    }

    /// Both watches have listed once: the ledger knows every executing Run,
    /// so admitting cannot double-book.
    pub fn is_synced(&self) -> bool {
        self.pod_synced && self.runs_synced
    }

    /// The Run with this uid, if the watch shows it assigned here.
    pub fn known_run(&self, uid: &str) -> Option<&KnownRun> {
        self.runs.get(uid)
    }

    /// Asks the ledger for a reservation on behalf of `caller`, and
    /// remembers when, for the bounds on Runs the watch does not show.
    pub fn request(
        &mut self,
        run: RunRef,
        requests: Requests,
        caller: Option<u32>,
        now: Instant,
    ) -> (Decision, Effects) {
        let uid = run.uid.clone();
        let floor = self.floor(&uid);
        let (decision, admitted) = self.ledger.request(run, requests, caller);
        let mine = match &decision {
            Decision::Admitted(_) | Decision::Queued(_) => true,
            // The creator asking again, maybe for a later attempt.
            Decision::AlreadyHeld(h) => h.creator.is_some() && h.creator == caller,
            _ => false,
        };
        if mine {
            // A new request supersedes an earlier DELETE of the uid.
            self.released.remove(&uid);
            self.left.remove(&uid);
            let epoch = self.list_epoch;
            let r = self.requested.entry(uid).or_insert(Requested {
                at: now,
                last: now,
                epoch,
                floor,
            });
            if floor > r.floor {
                r.floor = floor;
                r.last = now;
            }
        }
        (decision, Effects::admitted(admitted))
    }

    /// The lowest attempt a request for `uid` made now can be for. runtimed
    /// asks only for a Run it sees `Scheduled` on this pod, so at least the
    /// attempt the watch shows here, and a later one when the watch shows
    /// that attempt already executing; and a later one than a hold of the
    /// uid its caller released. `None` when the watch does not show the Run
    /// here and nothing was released.
    fn floor(&self, uid: &str) -> Option<i32> {
        let seen = self.runs.get(uid).map(|k| {
            let executing = matches!(k.phase.as_deref(), Some(phase::RUNNING | phase::READY));
            k.attempt.saturating_add(i32::from(executing))
        });
        let released = self.released.get(uid).copied().flatten();
        seen.max(released)
    }

    /// When the uid was first asked for through the API, if it is held or
    /// queued from such a request.
    pub fn requested_at(&self, uid: &str) -> Option<Instant> {
        self.requested.get(uid).map(|r| r.at)
    }

    /// Where the unseen bound of the uid's request counts from: the first
    /// request, or the latest that asked for a later attempt.
    pub fn unseen_since(&self, uid: &str) -> Option<Instant> {
        self.requested.get(uid).map(|r| r.last)
    }

    /// Puts back holds recovered from the journal. They count as requests
    /// made before any list, so the first list drops those whose Run is
    /// terminal, deleted or assigned elsewhere.
    pub fn recover(&mut self, holds: Vec<super::journal::JournalHold>, now: Instant) {
        for h in holds {
            let uid = h.run.uid.clone();
            self.ledger.restore(h.run, h.requests, h.creator);
            self.requested.insert(
                uid,
                Requested {
                    at: now,
                    last: now,
                    epoch: 0,
                    floor: None,
                },
            );
        }
    }

    /// An explicit release by `caller`: refused when another caller created
    /// the hold or queue entry (or the watch did).
    pub fn release_by(&mut self, uid: &str, caller: Option<u32>) -> Result<Effects, NotYours> {
        self.ledger.check_owner(uid, caller)?;
        Ok(self.release(uid))
    }

    /// Releases what was made from the request body for a Run the watch
    /// has not shown here within `unseen_ttl`. Only once synced: before
    /// that the watch has not had its chance. Returns what it did.
    pub fn sweep(&mut self, now: Instant) -> Effects {
        // Not before the first sync, nor while a relist is under way: the
        // list about to complete may show these Runs.
        if !self.is_synced() || self.run_buffer.is_some() {
            return Effects::default();
        }
        let ttl = self.config.unseen_ttl;
        let stale: Vec<String> = self
            .requested
            .iter()
            .filter(|(uid, r)| {
                !self.runs.contains_key(uid.as_str())
                    && now.saturating_duration_since(r.last) >= ttl
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        let mut fx = Effects::default();
        for uid in stale {
            tracing::info!(%uid, ttl = ?ttl, "releasing a reservation whose Run the watch never showed on this pod");
            fx.merge(self.forget(&uid, Gone::Unseen));
        }
        fx
    }

    /// When the oldest pending unseen request reaches the bound (for the
    /// sweeper's timer).
    pub fn next_sweep(&self) -> Option<Instant> {
        self.requested
            .iter()
            .filter(|(uid, _)| !self.runs.contains_key(uid.as_str()))
            .map(|(_, r)| r.last + self.config.unseen_ttl)
            .min()
    }

    /// Remembers an explicit release (so the Run is not adopted again).
    pub fn release(&mut self, uid: &str) -> Effects {
        let floor = self.requested.remove(uid).and_then(|r| r.floor);
        let (r, admitted) = self.ledger.release(uid);
        if r.held || r.dequeued || self.runs.contains_key(uid) {
            self.released
                .insert(uid.to_owned(), floor.map(|f| f.saturating_add(1)));
        }
        let mut fx = Effects::admitted(admitted);
        if r.dequeued {
            fx.dropped.push((uid.to_owned(), Gone::Withdrawn));
        }
        fx
    }

    // === Pod events ===

    /// Applies one event of the watch on the agent's own Pod.
    pub fn apply_pod_event(&mut self, event: Event<Pod>) -> Effects {
        match event {
            Event::Apply(pod) => self.set_pod(Some(&pod)),
            Event::Delete(pod) => {
                if self.is_own_pod(&pod) {
                    self.set_pod(None)
                } else {
                    Effects::default()
                }
            }
            Event::Init => {
                self.pod_buffer = Some(None);
                Effects::default()
            }
            Event::InitApply(pod) => {
                if self.is_own_pod(&pod) {
                    self.pod_buffer = Some(Some(pod));
                }
                Effects::default()
            }
            Event::InitDone => {
                let pod = self.pod_buffer.take().flatten();
                self.pod_synced = true;
                self.set_pod(pod.as_ref())
            }
        }
    }

    fn is_own_pod(&self, pod: &Pod) -> bool {
        pod.metadata.name.as_deref() == Some(self.config.pod.as_str())
            && pod.metadata.namespace.as_deref().unwrap_or("default") == self.config.namespace
    }

    /// New capacity from the pod's annotations; a missing pod has none (no
    /// new admissions, nothing revoked).
    fn set_pod(&mut self, pod: Option<&Pod>) -> Effects {
        let capacity = match pod {
            Some(p) if self.is_own_pod(p) => capacity_from_annotations(
                p.metadata
                    .annotations
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.as_str(), v.as_str())),
                self.config.default_runs_capacity,
            ),
            Some(_) => return Effects::default(),
            None => Vec::new(),
        };
        Effects::admitted(self.ledger.set_capacity(capacity))
    }

    // === Run events ===

    /// Applies one event of the watch on the Runs of the namespace.
    pub fn apply_run_event(&mut self, event: Event<Run>) -> Effects {
        let fx = facts_event(event, self.config.released_condition.as_deref());
        self.apply_facts_event(fx)
    }

    /// [`Self::apply_run_event`] on facts already stripped from the Run.
    pub fn apply_facts_event(&mut self, event: Event<Option<RunFacts>>) -> Effects {
        match event {
            Event::Apply(Some(run)) => self.apply_run(&run, false),
            Event::Delete(Some(run)) => self.forget(&run.uid, Gone::Deleted),
            Event::Apply(None) | Event::Delete(None) | Event::InitApply(None) => Effects::default(),
            Event::Init => {
                self.list_epoch += 1;
                self.run_buffer = Some(Vec::new());
                Effects::default()
            }
            Event::InitApply(Some(run)) => {
                self.run_buffer.get_or_insert_with(Vec::new).push(run);
                Effects::default()
            }
            Event::InitDone => {
                let listed = self.run_buffer.take().unwrap_or_default();
                self.runs_synced = true;
                self.reset_runs(&listed)
            }
        }
    }

    /// A relist: Runs known before and absent now were deleted; every listed
    /// Run is applied, adopting those already executing here. A request
    /// made before this list started whose Run the list does not show here
    /// (missing, unassigned, or on another pod) is released too, whatever
    /// made it: the list is newer than the request.
    fn reset_runs(&mut self, listed: &[RunFacts]) -> Effects {
        let present: HashSet<&str> = listed.iter().map(|r| r.uid.as_str()).collect();
        let vanished: Vec<String> = self
            .runs
            .keys()
            .filter(|uid| !present.contains(uid.as_str()))
            .cloned()
            .collect();
        let mut fx = Effects::default();
        for uid in vanished {
            fx.merge(self.forget(&uid, Gone::Deleted));
        }
        for run in listed {
            fx.merge(self.apply_run(run, true));
        }
        let here: HashMap<&str, &RunFacts> = listed.iter().map(|r| (r.uid.as_str(), r)).collect();
        let epoch = self.list_epoch;
        let stale: Vec<(String, Gone)> = self
            .requested
            .iter()
            .filter(|(_, r)| r.epoch < epoch)
            .filter_map(|(uid, _)| match here.get(uid.as_str()) {
                None => Some((uid.clone(), Gone::Deleted)),
                Some(r) if !self.assigned_here(r) => Some((uid.clone(), Gone::Reassigned)),
                Some(_) => None,
            })
            .collect();
        for (uid, why) in stale {
            fx.merge(match why {
                Gone::Reassigned => self.leave(&uid),
                why => self.forget(&uid, why),
            });
        }
        fx
    }

    fn assigned_here(&self, run: &RunFacts) -> bool {
        run.namespace == self.config.namespace
            && run.assigned_pod.as_deref() == Some(self.config.pod.as_str())
    }

    fn apply_run(&mut self, run: &RunFacts, relist: bool) -> Effects {
        let uid = run.uid.clone();
        let phase = run.phase.clone();
        if phase::is_terminal(phase.as_deref()) {
            return self.forget(&uid, Gone::Terminal);
        }
        if run.released {
            return self.forget(&uid, Gone::Released);
        }
        if !self.assigned_here(run) {
            // An attempt waits unassigned, then is placed: a request made
            // when the watch showed this Run here is for an attempt of at
            // least `floor`, so the Run unassigned at an attempt not above
            // it, or on another pod at an earlier one, is an event older
            // than the request: it does not release the request. The
            // watch no longer shows the Run here, though: until it does
            // again, the unseen bound applies (and a relist that started
            // after the request).
            let older = |floor: i32| match run.assigned_pod {
                None => run.attempt <= floor,
                Some(_) => run.attempt < floor,
            };
            match self.requested.get(&uid).and_then(|r| r.floor) {
                Some(floor) if older(floor) => {
                    self.runs.remove(&uid);
                    return Effects::default();
                }
                Some(_) => return self.leave(&uid),
                None => {}
            }
            // Only a Run the watch has shown here can move away. A uid
            // reserved from the request body before the watch caught up
            // may still see older events (unassigned, or a previous
            // assignment): those must not release it.
            if self.runs.contains_key(&uid) {
                return self.leave(&uid);
            }
            return Effects::default();
        }
        let known = KnownRun {
            run: RunRef {
                namespace: self.config.namespace.clone(),
                name: run.name.clone(),
                uid: uid.clone(),
            },
            phase: phase.clone(),
            requests: run.requests.clone(),
            accounted: run.accounted.clone(),
            attempt: run.attempt,
        };
        let executing = matches!(phase.as_deref(), Some(phase::RUNNING | phase::READY));
        let mut fx = Effects::default();
        if executing && (relist || !self.released.contains_key(&uid)) {
            if relist {
                self.released.remove(&uid);
            }
            // A Run executing here was started by runtimed, which asked for
            // it: a hold the watch released when the Run left (an event it
            // could not tell from a stale one) goes back to its creator.
            let creator = self.left.remove(&uid);
            if self
                .ledger
                .adopt(known.run.clone(), known.accounted.clone(), creator)
            {
                fx.admitted.push(uid.clone());
            }
        }
        self.runs.insert(uid, known);
        fx
    }

    /// The watch shows the Run gone from this pod: release its reservation,
    /// take it out of the queue, forget it.
    fn forget(&mut self, uid: &str, why: Gone) -> Effects {
        self.runs.remove(uid);
        self.released.remove(uid);
        self.left.remove(uid);
        self.requested.remove(uid);
        let (r, admitted) = self.ledger.release(uid);
        let mut fx = Effects::admitted(admitted);
        if r.dequeued {
            fx.dropped.push((uid.to_owned(), why));
        }
        fx
    }
}

impl AgentState {
    /// The watch shows the Run away from this pod (not terminal): released
    /// as by [`Self::forget`], remembering who had asked for it (see
    /// `left`).
    fn leave(&mut self, uid: &str) -> Effects {
        let creator = match self.ledger.hold(uid) {
            Some(h) => h.creator,
            None => self
                .ledger
                .queue()
                .find(|w| w.run.uid == uid)
                .and_then(|w| w.creator),
        };
        let fx = self.forget(uid, Gone::Reassigned);
        if let Some(c) = creator {
            self.left.insert(uid.to_owned(), c);
        }
        fx
    }
}

/// A Run event stripped to the facts the agent keeps (`released_condition`
/// as in [`RunFacts::of`]).
pub fn facts_event(event: Event<Run>, released_condition: Option<&str>) -> Event<Option<RunFacts>> {
    let of = |r: &Run| RunFacts::of(r, released_condition);
    match event {
        Event::Apply(r) => Event::Apply(of(&r)),
        Event::Delete(r) => Event::Delete(of(&r)),
        Event::Init => Event::Init,
        Event::InitApply(r) => Event::InitApply(of(&r)),
        Event::InitDone => Event::InitDone,
    }
}

/// Standalone mode: the objects of a `--state` file as the events of a
/// first list — the agent's Pod (by name and namespace) and every Run.
/// A Run without `metadata.uid` gets `<namespace>.<name>` (the standalone
/// service would generate a random one; a stable one is easier to type).
pub fn standalone_events(objects: &[Value], config: &AgentConfig) -> Result<InitialList, String> {
    let mut pods = vec![Event::Init];
    let mut runs = vec![Event::Init];
    for (i, obj) in objects.iter().enumerate() {
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default");
        if ns != config.namespace {
            continue;
        }
        match kind {
            "Pod" if name == config.pod => {
                let mut pod: Pod = serde_json::from_value(obj.clone())
                    .map_err(|e| format!("object {i} (Pod {ns}/{name}): {e}"))?;
                pod.metadata.namespace = Some(ns.to_owned());
                pods.push(Event::InitApply(pod));
            }
            "Run" => {
                let mut run: Run = serde_json::from_value(obj.clone())
                    .map_err(|e| format!("object {i} (Run {ns}/{name}): {e}"))?;
                run.metadata.namespace = Some(ns.to_owned());
                if run.metadata.uid.as_deref().is_none_or(str::is_empty) {
                    run.metadata.uid = Some(format!("{ns}.{name}"));
                }
                runs.push(Event::InitApply(run));
            }
            _ => {}
        }
    }
    pods.push(Event::InitDone);
    runs.push(Event::InitDone);
    Ok(InitialList { pods, runs })
}

/// The events of a first list of both watches.
#[derive(Debug, Clone)]
pub struct InitialList {
    pub pods: Vec<Event<Pod>>,
    pub runs: Vec<Event<Run>>,
}

/// Cluster mode: watches the agent's own Pod (field selector on its name)
/// and the Runs of its namespace, feeding every event to `agent` until the
/// streams end. Watch errors are logged and retried with backoff.
///
/// Each Run is stripped to its [`RunFacts`] as it arrives: no store of
/// objects is kept, so memory grows with the number of Runs, not their
/// size. The Run watch cannot be narrowed by the server: Runs carry no
/// label naming their pod, and a field selector on `status.assignedPod`
/// needs the CRD to declare it in `selectableFields`, which the installed
/// CRD does not (and a selector the server rejects would stop the watch).
/// Lists are quorum reads (`ListSemantic::MostRecent`, the default), so a
/// relist is never older than the requests it releases.
pub async fn watch(agent: std::sync::Arc<super::Agent>, client: kube::Client) {
    use futures::StreamExt as _;
    use kube::runtime::{WatchStreamExt as _, watcher};
    let config = agent.config().clone();
    let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), &config.namespace);
    let runs: kube::Api<Run> = kube::Api::namespaced(client, &config.namespace);
    let pod_cfg = watcher::Config::default().fields(&format!("metadata.name={}", config.pod));
    let pod_agent = std::sync::Arc::clone(&agent);
    let pod_task = async move {
        let mut s = std::pin::pin!(watcher(pods, pod_cfg).default_backoff());
        while let Some(ev) = s.next().await {
            match ev {
                Ok(ev) => pod_agent.apply_pod_event(ev),
                Err(e) => tracing::warn!(error = %e, "pod watch failed; retrying"),
            }
        }
    };
    let released = config.released_condition.clone();
    let run_task = async move {
        let cfg = watcher::Config::default().list_semantic(watcher::ListSemantic::MostRecent);
        let mut s = std::pin::pin!(watcher(runs, cfg).default_backoff());
        while let Some(ev) = s.next().await {
            match ev {
                Ok(ev) => agent.apply_facts_event(facts_event(ev, released.as_deref())),
                Err(e) => tracing::warn!(error = %e, "run watch failed; retrying"),
            }
        }
    };
    futures::join!(pod_task, run_task);
}

#[cfg(test)]
mod tests {
    use super::super::ledger::Origin;
    use super::*;
    use crate::model::resources::Requests;
    use crate::testkit;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn state() -> AgentState {
        let mut s = AgentState::new(AgentConfig::new("rp-1", "default"));
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("rp-1".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        for e in [Event::Init, Event::InitApply(pod), Event::InitDone] {
            s.apply_pod_event(e);
        }
        for e in [Event::Init, Event::InitDone] {
            s.apply_run_event(e);
        }
        s
    }

    /// Run `default/name` (uid `uid-<name>`) of runtime `python` with no
    /// requests, in `phase`, assigned to `pod` (the test kit's Run).
    fn mk_run(name: &str, phase: Option<&str>, pod: Option<&str>) -> Run {
        let mut r = testkit::run(name, &[])
            .namespace("default")
            .runtime("python")
            .unset(&["spec", "resources"])
            .set(&["status"], serde_json::json!({}));
        if let Some(p) = phase {
            r = r.set(&["status", "phase"], p);
        }
        if let Some(p) = pod {
            r = r.set(&["status", "assignedPod"], p);
        }
        r.typed()
    }

    fn reserve(s: &mut AgentState, name: &str) {
        let run = RunRef {
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        };
        s.request(run, Requests::runs_only(), Some(1000), Instant::now());
    }

    #[test]
    fn agent_stale_events_do_not_release_a_reservation_the_watch_has_not_caught_up_with() {
        let mut s = state();
        assert!(s.is_synced());
        reserve(&mut s, "a");
        // Older events of the same Run: unassigned, then another pod.
        s.apply_run_event(Event::Apply(mk_run("a", Some("Pending"), None)));
        s.apply_run_event(Event::Apply(mk_run("a", Some("Scheduled"), Some("rp-2"))));
        // A relist that started before the request and does not show it
        // here yet keeps it (the list may predate the assignment)...
        s.apply_run_event(Event::Init);
        reserve(&mut s, "late");
        s.apply_run_event(Event::InitDone);
        assert!(s.ledger.hold("uid-late").is_some());
        assert!(
            s.ledger.hold("uid-a").is_none(),
            "...one that started after it releases it"
        );
        reserve(&mut s, "a");
        // Once the watch has shown it here, moving away releases it.
        s.apply_run_event(Event::Apply(mk_run("a", Some("Scheduled"), Some("rp-1"))));
        s.apply_run_event(Event::Apply(mk_run("a", Some("Scheduled"), Some("rp-2"))));
        assert!(s.ledger.hold("uid-a").is_none());
        // Terminal releases even a Run the watch never showed here.
        reserve(&mut s, "b");
        s.apply_run_event(Event::Apply(mk_run("b", Some("Failed"), Some("rp-1"))));
        assert!(s.ledger.hold("uid-b").is_none());
    }

    /// [`mk_run`] at `status.attempt` `attempt`.
    fn mk_attempt(name: &str, phase: &str, pod: Option<&str>, attempt: i32) -> Run {
        let mut r = mk_run(name, Some(phase), pod);
        r.status.get_or_insert_with(Default::default).attempt = Some(attempt);
        r
    }

    fn runs_reserved(s: &AgentState) -> u64 {
        s.ledger.reserved().get("runs").copied().unwrap_or(0)
    }

    /// Seed 2 of the runtime world: attempt 1 of a Run ran here under
    /// runtimed's hold and failed; attempt 2 was placed here again and
    /// runtimed reserved it at once, its view being current, while the
    /// agent's watch still showed attempt 1. The watch's older events of
    /// the Run back to Pending for attempt 2 must not release runtimed's
    /// hold, and runtimed releases it when attempt 2 ends.
    #[test]
    fn agent_a_retried_runs_older_pending_event_keeps_runtimeds_hold() {
        // released: runtimed released attempt 1's hold before asking for
        // attempt 2; seen_running: the watch showed attempt 1 Running
        // before that request (else it still showed it Scheduled).
        for (released, seen_running) in [(true, true), (false, true), (true, false)] {
            let case = format!("released {released}, seen running {seen_running}");
            let mut s = state();
            let uid = "uid-a";
            s.apply_run_event(Event::Apply(mk_attempt("a", "Scheduled", Some("rp-1"), 1)));
            reserve(&mut s, "a");
            if released {
                assert!(s.release_by(uid, Some(1000)).is_ok(), "{case}");
            }
            if seen_running {
                s.apply_run_event(Event::Apply(mk_attempt("a", "Running", Some("rp-1"), 1)));
            }
            // runtimed asks for attempt 2 (the body names no attempt).
            reserve(&mut s, "a");
            let held = |s: &AgentState| s.ledger.hold(uid).map(|h| (h.creator, h.origin));
            assert_eq!(held(&s), Some((Some(1000), Origin::Admitted)), "{case}");
            if !seen_running {
                s.apply_run_event(Event::Apply(mk_attempt("a", "Running", Some("rp-1"), 1)));
            }
            // The watch catches up: attempt 1 ended, attempt 2 waiting,
            // placed here, executing.
            s.apply_run_event(Event::Apply(mk_attempt("a", "Pending", None, 2)));
            assert_eq!(held(&s), Some((Some(1000), Origin::Admitted)), "{case}");
            assert_eq!(runs_reserved(&s), 1, "{case}");
            s.apply_run_event(Event::Apply(mk_attempt("a", "Scheduled", Some("rp-1"), 2)));
            s.apply_run_event(Event::Apply(mk_attempt("a", "Running", Some("rp-1"), 2)));
            assert_eq!(held(&s), Some((Some(1000), Origin::Admitted)), "{case}");
            assert_eq!(runs_reserved(&s), 1, "{case}");
            // Attempt 2 ends: runtimed's release is accepted.
            assert!(s.release_by(uid, Some(1000)).is_ok(), "{case}");
            assert!(s.ledger.hold(uid).is_none(), "{case}");
            assert_eq!(runs_reserved(&s), 0, "{case}");
        }
    }

    /// The hold of a Run that truly left is still released: by its next
    /// attempt's events, a terminal phase, a relist, or the unseen bound.
    #[test]
    fn agent_a_hold_kept_over_an_older_event_is_still_released_when_the_run_left() {
        // runtimed reserved attempt 1 and left the release to the watch:
        // attempt 2 back to Pending releases it, and so does attempt 2
        // placed elsewhere.
        for pod in [None, Some("rp-2")] {
            let mut s = state();
            s.apply_run_event(Event::Apply(mk_attempt("a", "Scheduled", Some("rp-1"), 1)));
            reserve(&mut s, "a");
            s.apply_run_event(Event::Apply(mk_attempt("a", "Running", Some("rp-1"), 1)));
            s.apply_run_event(Event::Apply(mk_attempt("a", "Scheduled", pod, 2)));
            assert!(s.ledger.hold("uid-a").is_none(), "{pod:?}");
        }
        // A request after the caller released the uid, with the watch
        // showing the Run executing, counts as one for the next attempt:
        // if it was not (a caller asking again for the attempt it
        // released), the next attempt's events keep the hold only until
        // the watch shows that attempt placed elsewhere, or a later one
        // away from this pod, ...
        let t0 = Instant::now();
        let setup = || {
            let mut s = state();
            s.apply_run_event(Event::Apply(mk_attempt("a", "Scheduled", Some("rp-1"), 1)));
            reserve(&mut s, "a");
            assert!(s.release_by("uid-a", Some(1000)).is_ok());
            s.apply_run_event(Event::Apply(mk_attempt("a", "Running", Some("rp-1"), 1)));
            let run = RunRef {
                namespace: "default".into(),
                name: "a".into(),
                uid: "uid-a".into(),
            };
            s.request(run, Requests::runs_only(), Some(1000), t0);
            s.apply_run_event(Event::Apply(mk_attempt("a", "Pending", None, 2)));
            // An earlier attempt elsewhere is older too.
            s.apply_run_event(Event::Apply(mk_attempt("a", "Running", Some("rp-2"), 1)));
            assert!(s.ledger.hold("uid-a").is_some(), "older than the request");
            s
        };
        let mut s = setup();
        s.apply_run_event(Event::Apply(mk_attempt("a", "Scheduled", Some("rp-2"), 2)));
        assert!(
            s.ledger.hold("uid-a").is_none(),
            "that attempt placed elsewhere"
        );
        let mut s = setup();
        s.apply_run_event(Event::Apply(mk_attempt("a", "Pending", None, 3)));
        assert!(s.ledger.hold("uid-a").is_none(), "a later attempt");
        // ...or placed elsewhere, or it ends, ...
        let mut s = setup();
        s.apply_run_event(Event::Apply(mk_attempt("a", "Succeeded", Some("rp-2"), 2)));
        assert!(s.ledger.hold("uid-a").is_none(), "terminal");
        // ...or a relist that started after the request does not show it
        // here, ...
        let mut s = setup();
        s.apply_run_event(Event::Init);
        s.apply_run_event(Event::InitApply(mk_attempt(
            "a",
            "Running",
            Some("rp-2"),
            2,
        )));
        s.apply_run_event(Event::InitDone);
        assert!(s.ledger.hold("uid-a").is_none(), "relisted elsewhere");
        // ...or the unseen bound passes: the watch no longer shows it here.
        let mut s = setup();
        let ttl = s.config.unseen_ttl;
        assert_eq!(s.next_sweep(), Some(t0 + ttl));
        s.sweep(t0 + ttl - Duration::from_millis(1));
        assert!(s.ledger.hold("uid-a").is_some(), "within the bound");
        s.sweep(t0 + ttl);
        assert!(s.ledger.hold("uid-a").is_none(), "unseen");
        assert_eq!(runs_reserved(&s), 0);
    }

    /// A Run executing here that a caller asked for is adopted as that
    /// caller's: it was queued, or the watch released its hold on an event
    /// it could not tell from an older one.
    #[test]
    fn agent_an_adopted_run_stays_its_callers() {
        // runtimed holds attempt 1 and asks for attempt 2 while the watch
        // still shows attempt 1 Scheduled: attempt 2 back to Pending
        // cannot be told from attempt 1 ending, and releases the hold.
        let mut s = state();
        s.apply_run_event(Event::Apply(mk_attempt("a", "Scheduled", Some("rp-1"), 1)));
        reserve(&mut s, "a");
        reserve(&mut s, "a");
        s.apply_run_event(Event::Apply(mk_attempt("a", "Running", Some("rp-1"), 1)));
        s.apply_run_event(Event::Apply(mk_attempt("a", "Pending", None, 2)));
        assert!(s.ledger.hold("uid-a").is_none());
        s.apply_run_event(Event::Apply(mk_attempt("a", "Scheduled", Some("rp-1"), 2)));
        s.apply_run_event(Event::Apply(mk_attempt("a", "Running", Some("rp-1"), 2)));
        let h = s.ledger.hold("uid-a").cloned();
        assert_eq!(
            h.map(|h| (h.creator, h.origin)),
            Some((Some(1000), Origin::Observed))
        );
        assert_eq!(
            s.release_by("uid-a", Some(1001)),
            Err(NotYours {
                creator: Some(1000)
            })
        );
        assert!(s.release_by("uid-a", Some(1000)).is_ok());
        assert!(s.ledger.hold("uid-a").is_none());
        // A queued Run found executing: its caller's.
        let mut s = state();
        for n in ["x", "y", "q"] {
            reserve(&mut s, n);
        }
        assert!(s.ledger.is_queued("uid-q"));
        s.apply_run_event(Event::Apply(mk_run("q", Some("Running"), Some("rp-1"))));
        assert_eq!(s.ledger.hold("uid-q").and_then(|h| h.creator), Some(1000));
        assert!(s.release_by("uid-q", Some(1000)).is_ok());
        // A Run no caller asked for stays the watch's.
        s.apply_run_event(Event::Apply(mk_run("o", Some("Running"), Some("rp-1"))));
        assert_eq!(s.ledger.hold("uid-o").map(|h| h.creator), Some(None));
    }

    fn released(mut r: Run, condition: &str) -> Run {
        let s = r.status.get_or_insert_with(Default::default);
        s.conditions
            .push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: condition.into(),
                status: "True".into(),
                reason: "Unregistered".into(),
                message: String::new(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
                observed_generation: None,
            });
        r
    }

    #[test]
    fn agent_released_function_run_frees_its_hold_and_admits_the_next() {
        let cond = crate::crd::DEFAULT_RELEASED_CONDITION;
        let mut s = state();
        // runs 2: a admitted through the API, o already executing (adopted).
        reserve(&mut s, "a");
        s.apply_run_event(Event::Apply(mk_run("a", Some("Running"), Some("rp-1"))));
        s.apply_run_event(Event::Apply(mk_run("o", Some("Ready"), Some("rp-1"))));
        reserve(&mut s, "c");
        assert!(s.ledger.is_queued("uid-c"));
        // a's function is released while a is still Ready: its hold goes,
        // and c, first in the queue, is admitted.
        let fx = s.apply_run_event(Event::Apply(released(
            mk_run("a", Some("Ready"), Some("rp-1")),
            cond,
        )));
        assert!(s.ledger.hold("uid-a").is_none());
        assert_eq!(fx.admitted, vec!["uid-c".to_owned()]);
        // The same for a hold the watch made; a relist does not adopt a
        // released Run again.
        s.apply_run_event(Event::Apply(released(
            mk_run("o", Some("Ready"), Some("rp-1")),
            cond,
        )));
        assert!(s.ledger.hold("uid-o").is_none());
        s.apply_run_event(Event::Init);
        s.apply_run_event(Event::InitApply(released(
            mk_run("o", Some("Ready"), Some("rp-1")),
            cond,
        )));
        s.apply_run_event(Event::InitApply(mk_run(
            "c",
            Some("Scheduled"),
            Some("rp-1"),
        )));
        s.apply_run_event(Event::InitDone);
        assert!(s.ledger.hold("uid-o").is_none());
        assert_eq!(s.ledger.reserved().get("runs"), Some(&1), "only c");
        // A queued Run whose function is released leaves the queue.
        reserve(&mut s, "x");
        reserve(&mut s, "y");
        assert!(s.ledger.is_queued("uid-y"));
        let fx = s.apply_run_event(Event::Apply(released(
            mk_run("y", Some("Scheduled"), Some("rp-1")),
            cond,
        )));
        assert_eq!(fx.dropped, vec![("uid-y".to_owned(), Gone::Released)]);
    }

    #[test]
    fn agent_released_condition_is_configurable_and_can_be_off() {
        for (configured, releases) in [(Some("example.com/Released"), true), (None, false)] {
            let mut s = state();
            s.config.released_condition = configured.map(str::to_owned);
            s.apply_run_event(Event::Apply(mk_run("o", Some("Running"), Some("rp-1"))));
            // The default type is not the configured one: still held.
            s.apply_run_event(Event::Apply(released(
                mk_run("o", Some("Running"), Some("rp-1")),
                crate::crd::DEFAULT_RELEASED_CONDITION,
            )));
            assert!(s.ledger.hold("uid-o").is_some(), "{configured:?}");
            s.apply_run_event(Event::Apply(released(
                mk_run("o", Some("Running"), Some("rp-1")),
                "example.com/Released",
            )));
            assert_eq!(s.ledger.hold("uid-o").is_none(), releases, "{configured:?}");
        }
    }

    #[test]
    fn agent_timeout_and_cancelled_are_terminal() {
        let mut s = state();
        for (n, p) in [("t", "Timeout"), ("k", "Cancelled")] {
            reserve(&mut s, n);
            s.apply_run_event(Event::Apply(mk_run(n, Some("Ready"), Some("rp-1"))));
            assert!(s.ledger.hold(&format!("uid-{n}")).is_some());
            s.apply_run_event(Event::Apply(mk_run(n, Some(p), Some("rp-1"))));
            assert!(s.ledger.hold(&format!("uid-{n}")).is_none(), "{p}");
        }
    }

    #[test]
    fn agent_unseen_holds_are_released_after_the_bound_once_synced() {
        let t0 = Instant::now();
        let mut s = AgentState::new(AgentConfig::new("rp-1", "default"));
        let ttl = s.config.unseen_ttl;
        let run = |n: &str| RunRef {
            namespace: "default".into(),
            name: n.into(),
            uid: format!("uid-{n}"),
        };
        // Recovered before any list: the bound waits for the sync.
        s.recover(
            vec![crate::agent::journal::JournalHold {
                run: run("j"),
                requests: Requests::runs_only(),
                creator: Some(7),
            }],
            t0,
        );
        assert!(s.sweep(t0 + ttl * 3).admitted.is_empty());
        assert!(s.ledger.hold("uid-j").is_some(), "not synced: kept");
        let s2 = state();
        s = AgentState {
            ledger: s.ledger,
            requested: s.requested,
            ..s2
        };
        s.ledger.set_capacity([("runs".to_owned(), 2)]);
        reserve(&mut s, "seen");
        reserve(&mut s, "ghost");
        s.apply_run_event(Event::Apply(mk_run(
            "seen",
            Some("Scheduled"),
            Some("rp-1"),
        )));
        let now = Instant::now();
        assert_eq!(s.next_sweep().map(|t| t >= t0 + ttl), Some(true));
        s.sweep(now + ttl / 2);
        // runs 2: j and seen hold, ghost waits in the queue.
        assert!(s.ledger.is_queued("uid-ghost"), "within the bound");
        s.sweep(now + ttl + Duration::from_millis(1));
        assert!(s.ledger.hold("uid-ghost").is_none() && !s.ledger.is_queued("uid-ghost"));
        assert!(s.ledger.hold("uid-j").is_none());
        assert!(s.ledger.hold("uid-seen").is_some(), "the watch shows it");
        assert_eq!(s.next_sweep(), None);
    }

    #[test]
    fn agent_only_the_creator_or_the_watch_releases() {
        let mut s = state();
        reserve(&mut s, "a");
        assert_eq!(
            s.release_by("uid-a", Some(1001)),
            Err(NotYours {
                creator: Some(1000)
            })
        );
        assert!(s.ledger.hold("uid-a").is_some());
        s.apply_run_event(Event::Apply(mk_run("o", Some("Running"), Some("rp-1"))));
        assert_eq!(
            s.release_by("uid-o", Some(1000)),
            Err(NotYours { creator: None })
        );
        assert!(s.release_by("uid-a", Some(1000)).is_ok());
        assert!(s.ledger.hold("uid-a").is_none());
        s.apply_run_event(Event::Delete(mk_run("o", Some("Running"), Some("rp-1"))));
        assert!(s.ledger.hold("uid-o").is_none());
    }

    #[test]
    fn agent_pod_capacity_and_relist_adoption() {
        let mut s = state();
        assert_eq!(s.ledger.capacity().get("runs"), Some(&2));
        let fx = s.apply_run_event(Event::Apply(mk_run("q", Some("Scheduled"), Some("rp-1"))));
        assert_eq!(fx, Effects::default());
        for n in ["x", "y"] {
            reserve(&mut s, n);
        }
        reserve(&mut s, "q");
        assert!(s.ledger.is_queued("uid-q"));
        // The queued Run turns out to be executing already: adopted, and its
        // waiters hear it is admitted.
        let fx = s.apply_run_event(Event::Apply(mk_run("q", Some("Running"), Some("rp-1"))));
        assert_eq!(fx.admitted, vec!["uid-q".to_owned()]);
        assert_eq!(s.ledger.reserved().get("runs"), Some(&3));
        // Pod gone: no capacity, nothing revoked.
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("rp-1".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        s.apply_pod_event(Event::Delete(pod));
        assert!(s.ledger.capacity().is_empty());
        assert_eq!(s.ledger.holds().count(), 3);
    }
}
