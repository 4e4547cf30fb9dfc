//! The shared cache of cluster state the Run scheduler decides on.
//!
//! ```text
//!   watchers / standalone store ──apply/delete/reset──▶ RunCache ◀── plan, views (read lock)
//!                                                        │  ▲
//!                          wakeups (Pending Runs) ◀──────┘  └── reserve / release (write lock)
//! ```
//!
//! One `RwLock` guards one [`State`], so every reader sees a consistent
//! snapshot and the check-and-reserve of a scheduling cycle is atomic.
//! Per namespace the state keeps Runtime Pod slots (facts, actual usage,
//! assumed usage), Run entries, assumed reservations keyed by Run uid, and an
//! index of unscheduled Runs per runtime for targeted wakeups.
//!
//! Watchers and the standalone store reach this cache and the cluster
//! index ([`cluster_index::ClusterIndex`]) through one trait, [`index::Index`]:
//! `apply` / `delete` / `reset` per kind.

pub mod cluster_index;
pub mod index;
mod runs;
pub mod views;

use crate::crd::{RunStatus, Runtime, phase};
use crate::metrics::{Metrics, WakeCause};
use crate::model::resources::{
    Interner, PodResources, RequestError, Requests, ResourceNames, ResourceVec,
};
use crate::model::runtime_pod::{Freshness, PodFacts, Unavailable};
use crate::runs::columns::Columns;
use crate::runs::queue::{RunKey, WorkQueue};
use crate::runs::targets::Targets;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use parking_lot::RwLock;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use runs::{DEFAULT_PLAN_LIMIT, Decision, PendingRuns, PlanOutcome, PlanResult};

/// Settings that change how objects are read.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Pod label whose value names the Runtime a pod serves.
    pub runtime_label_key: String,
    /// `runs` capacity of a pod without `kruntimes.io/capacity.runs`.
    pub default_runs_capacity: u64,
    /// Heartbeats older than this make a pod unavailable.
    pub heartbeat_stale_after: Duration,
    /// Run condition type that, when `True`, marks a released function:
    /// the Run no longer counts against its pod. `None`: no such condition.
    pub released_condition: Option<String>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            runtime_label_key: "runtime".into(),
            default_runs_capacity: 2,
            heartbeat_stale_after: Duration::from_secs(15),
            released_condition: Some(crate::crd::DEFAULT_RELEASED_CONDITION.to_owned()),
        }
    }
}

/// The cache. Share it behind an `Arc`.
pub struct RunCache {
    /// Read settings.
    config: CacheConfig,
    /// All state, behind one lock for consistent snapshots.
    state: RwLock<State>,
    /// Where wakeups go.
    queue: Arc<WorkQueue<RunKey>>,
    /// Wakeup and rejection counters.
    metrics: Arc<Metrics>,
    /// Initial lists are in (the Run loop waits for it: [`RunCache::synced`]).
    synced: tokio::sync::watch::Sender<bool>,
    /// Fresh lists of Runs asked for ([`RunCache::fresh_runs`]): the
    /// latest request, which the Run watcher follows.
    relists_asked: tokio::sync::watch::Sender<u64>,
    /// The latest request a completed list of Runs answers.
    relists_listed: tokio::sync::watch::Sender<u64>,
    /// Pods whose Runs plans with affinity terms checked, since start
    /// ([`RunCache::affinity_pods_examined`]).
    affinity_examined: AtomicU64,
}

/// Everything the cache knows.
#[derive(Default)]
pub struct State {
    /// Interned resource names.
    names: ResourceNames,
    /// Per-namespace state.
    namespaces: HashMap<String, NsState>,
    /// Runtimes by (namespace, name).
    runtimes: BTreeMap<(String, String), Runtime>,
    /// Interned runtime label values.
    runtime_values: Interner,
    /// Interned resource names the last sweep kept (see [`State::sweep`]).
    names_kept: usize,
    /// Interned runtime label values the last sweep kept.
    runtimes_kept: usize,
}

/// The fewest names (or runtime ids) interned since the last sweep that
/// start the next one.
const SWEEP_MIN: usize = 64;

impl State {
    /// Frees interned resource names and runtime ids nothing holds any
    /// more, so pods churning unusual resources
    /// (`kruntimes.io/capacity.example.com-r-<i>`) or runtime label values
    /// do not pile up names, ids and per-resource columns. A sweep is due
    /// once as many names (ids) were interned since the last one as it
    /// kept, and at least [`SWEEP_MIN`]: at most twice the live ones plus
    /// that many are ever held, and a sweep (a pass over pods, Runs and
    /// reservations) is paid for by as many new names. Runs under the
    /// write lock at the end of a write, when no id is held outside.
    fn sweep(&mut self) {
        let due = |len: usize, kept: usize| len.saturating_sub(kept) >= kept.max(SWEEP_MIN);
        if due(self.names.len(), self.names_kept) {
            self.sweep_names();
        }
        if due(self.runtime_values.len(), self.runtimes_kept) {
            self.sweep_runtimes();
        }
    }

    /// A name is live while a pod's ledger (capacity, actual, assumed), a
    /// counted Run or a reservation holds it; `runs` always is.
    fn sweep_names(&mut self) {
        let held = self.namespaces.values().flat_map(|nss| {
            let ledgers = nss
                .pods
                .values()
                .flat_map(|slot| slot.res.as_slice().iter().map(|l| l.id));
            let counted = nss
                .runs
                .values()
                .filter_map(|run| run.counted.as_ref())
                .flat_map(|(_, amounts)| amounts.iter().map(|(id, _)| id));
            let assumed = nss
                .assumed
                .values()
                .flat_map(|a| a.amounts.iter().map(|(id, _)| id));
            ledgers.chain(counted).chain(assumed)
        });
        let map = self.names.compact(held);
        for nss in self.namespaces.values_mut() {
            for slot in nss.pods.values_mut() {
                slot.res.remap(&map);
            }
            for run in nss.runs.values_mut() {
                if let Some((_, amounts)) = &mut run.counted {
                    amounts.remap(&map);
                }
            }
            for a in nss.assumed.values_mut() {
                a.amounts.remap(&map);
            }
            for cols in nss.columns.values_mut() {
                cols.remap(&map);
            }
        }
        self.names_kept = self.names.len();
    }

    /// A runtime id is live while a namespace has columns for it (a
    /// runtime's columns go when its last pod does).
    fn sweep_runtimes(&mut self) {
        let map = self.runtime_values.compact(
            self.namespaces
                .values()
                .flat_map(|n| n.columns.keys().copied()),
        );
        let new = |id: u32| map.get(id as usize).copied().flatten();
        for nss in self.namespaces.values_mut() {
            nss.columns = std::mem::take(&mut nss.columns)
                .into_iter()
                .filter_map(|(id, cols)| Some((new(id)?, cols)))
                .collect();
            for slot in nss.pods.values_mut() {
                if let Some(rp) = &mut slot.pod
                    && let Some(id) = new(rp.runtime_id)
                {
                    rp.runtime_id = id;
                }
            }
        }
        self.runtimes_kept = self.runtime_values.len();
    }
}

/// One namespace: accounting is namespace-local.
#[derive(Default)]
struct NsState {
    /// Pod slots by name: a Runtime Pod's facts and the usage on it. A slot
    /// exists while the pod exists or anything is counted on it.
    pods: BTreeMap<Arc<str>, PodSlot>,
    /// Runs by name.
    runs: HashMap<String, RunEntry>,
    /// Reservations written (or being written) but not yet observed, by Run uid.
    assumed: HashMap<String, Assumption>,
    /// Unscheduled Runs by runtime, for wakeups.
    pending: HashMap<String, BTreeSet<String>>,
    /// The Runtime Pods of each runtime (by interned id) as columns: what
    /// a decision scans. A copy of the slots' numbers, kept in step.
    columns: HashMap<u32, Columns>,
    /// The affinity targets (active and assumed Runs) by pod and label,
    /// kept in step with `runs` and `assumed` by
    /// [`sync_targets`](Self::sync_targets) once the first decision with
    /// affinity terms needs them ([`ensure_targets`](Self::ensure_targets));
    /// until then `None`, and Runs without affinity pay nothing for them.
    targets: Option<Targets>,
}

impl NsState {
    /// Brings the affinity targets of Run `name` in step with its entry
    /// and reservation: active on its `assignedPod` while Scheduled,
    /// Running or Ready (upstream's `isActiveAffinityTarget`), assumed on
    /// the pod of its reservation.
    fn sync_targets(&mut self, name: &str) {
        let Some(targets) = &mut self.targets else {
            return;
        };
        let entry = self.runs.get(name);
        let active = entry.and_then(|e| {
            let pod = e.status.assigned_pod.as_deref().filter(|p| !p.is_empty())?;
            if !phase::is_active(e.status.phase.as_deref()) {
                return None;
            }
            // The pod's name as the cache already holds it, when it does.
            let pod = match &e.counted {
                Some((p, _)) if **p == *pod => Arc::clone(p),
                _ => match self.pods.get_key_value(pod) {
                    Some((p, _)) => Arc::clone(p),
                    None => Arc::from(pod),
                },
            };
            Some((pod, &e.labels))
        });
        let assumed = entry.and_then(|e| {
            let a = self.assumed.get(&e.uid).filter(|a| a.run == name)?;
            Some((&a.pod, &e.labels))
        });
        targets.set(name, false, active.as_ref().map(|(p, l)| (p, *l)));
        targets.set(name, true, assumed);
    }

    /// Builds the affinity targets from every Run entry and reservation,
    /// if they are not kept yet; from then on they are kept in step.
    fn ensure_targets(&mut self) {
        if self.targets.is_some() {
            return;
        }
        self.targets = Some(Targets::default());
        let names: Vec<String> = self.runs.keys().cloned().collect();
        for name in names {
            self.sync_targets(&name);
        }
    }

    /// The affinity targets (empty while they are not kept).
    fn targets(&self) -> &Targets {
        static NONE: std::sync::LazyLock<Targets> = std::sync::LazyLock::new(Targets::default);
        self.targets.as_ref().unwrap_or(&NONE)
    }

    /// Copies a pod's capacity and usage to its columns (after any change
    /// to `slot.res`).
    fn sync_res(&mut self, pod: &str) {
        if let Some(slot) = self.pods.get(pod)
            && let Some(rp) = &slot.pod
            && let Some(cols) = self.columns.get_mut(&rp.runtime_id)
        {
            cols.set_res(rp.index, &slot.res);
        }
    }

    /// Removes position `index` from a runtime's columns (its pod already
    /// left), and tells the pod moved into that position.
    fn detach(&mut self, runtime_id: u32, index: u32) {
        let Some(cols) = self.columns.get_mut(&runtime_id) else {
            return;
        };
        if let Some(moved) = cols.swap_remove(index)
            && let Some(rp) = self.pods.get_mut(&moved).and_then(|s| s.pod.as_mut())
        {
            rp.index = index;
        }
        if cols.is_empty() {
            self.columns.remove(&runtime_id);
        }
    }
}

/// A Runtime Pod and the usage counted on it.
#[derive(Default)]
struct PodSlot {
    /// The pod, when it exists and carries the runtime label.
    pod: Option<RuntimePod>,
    /// Declared capacity (zero while the pod is absent), effective requests
    /// of active Runs assigned here, and reservations not yet observed.
    res: PodResources,
}

impl PodSlot {
    fn is_empty(&self) -> bool {
        self.pod.is_none() && self.res.is_empty()
    }
}

/// What the placement hot path reads about a pod, precomputed and inline;
/// the rest sits behind a box so slots stay small.
struct RuntimePod {
    /// Interned runtime label value.
    runtime_id: u32,
    /// Position in the runtime's [`Columns`].
    index: u32,
    /// The candidate rules that do not depend on the clock hold.
    base_ok: bool,
    /// The runtimed heartbeat.
    heartbeat: Option<Timestamp>,
    /// Facts and the clock-free verdict, for views and rejections.
    cold: Box<ColdPod>,
}

/// The parts of a Runtime Pod only views, rejection messages and status
/// writes read: the facts projected, not the pod (its capacity lives in
/// the slot's ledger, its heartbeat in [`RuntimePod`]).
struct ColdPod {
    /// `metadata.uid` (a Run's `status.assignedPodUID`).
    uid: Box<str>,
    /// The runtime label value, shared by every pod of the runtime.
    runtime: Arc<str>,
    /// The clock-free candidate rules' verdict.
    base: Result<(), Unavailable>,
}

impl RuntimePod {
    /// Whether the pod is a candidate in the window `w`.
    fn available_in(&self, w: &Freshness) -> Result<(), Unavailable> {
        self.cold
            .base
            .clone()
            .and_then(|()| w.check(self.heartbeat))
    }

    fn runtime(&self) -> &str {
        &self.cold.runtime
    }
}

/// What the cache keeps of a Run.
struct RunEntry {
    uid: String,
    resource_version: Option<String>,
    generation: Option<i64>,
    /// `creationTimestamp`, for the scheduling latency.
    created: Option<Timestamp>,
    runtime: String,
    deleting: bool,
    status: RunStatus,
    /// Effective request, or why the spec is invalid.
    requests: Result<Requests, RequestError>,
    /// The pod and amounts this Run adds to `actual`, while active.
    counted: Option<(Arc<str>, ResourceVec)>,
    /// Cancellation requested (`spec.termination.mode: Immediate` or
    /// `spec.cancelRequested`).
    cancel: bool,
    /// End of the retry backoff it is in, if any.
    retry_at: Option<Timestamp>,
    /// `metadata.labels`: what affinity selectors match (shared with the
    /// affinity target index).
    labels: crate::runs::targets::Labels,
    /// `spec.affinity`, when it has any term.
    affinity: Option<Box<crate::crd::RunAffinity>>,
}

impl RunEntry {
    /// Waiting for placement: not being deleted, phase unset or `Pending`,
    /// a runtime named. A stale `status.assignedPod` does not matter, as
    /// upstream ignores it.
    fn unscheduled(&self) -> bool {
        !self.deleting
            && phase::is_unscheduled(self.status.phase.as_deref())
            && !self.runtime.is_empty()
    }
}

/// A reservation made by a scheduling cycle.
struct Assumption {
    run: String,
    pod: Arc<str>,
    amounts: ResourceVec,
    /// The Run's `status.attempt` when it was placed: the Run back to
    /// Pending with a later attempt has moved on (it ran and failed while
    /// the watch was away), so the reservation goes.
    attempt: i32,
}

fn ns_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.namespace
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
}

// === impl RunCache ===

impl RunCache {
    pub fn new(config: CacheConfig, queue: Arc<WorkQueue<RunKey>>, metrics: Arc<Metrics>) -> Self {
        RunCache {
            config,
            state: RwLock::new(State::default()),
            queue,
            metrics,
            synced: tokio::sync::watch::Sender::new(false),
            relists_asked: tokio::sync::watch::Sender::new(0),
            relists_listed: tokio::sync::watch::Sender::new(0),
            affinity_examined: AtomicU64::new(0),
        }
    }

    /// How many pods plans with affinity terms (`POST /v1/runs/plan`,
    /// `explain run`) have checked the terms on since start: with a
    /// required term that narrows, only the fitting pods holding a Run it
    /// matches, never every pod. Tests hold the served plan to the indexed
    /// path with it.
    pub fn affinity_pods_examined(&self) -> u64 {
        self.affinity_examined.load(Ordering::Relaxed)
    }

    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    pub fn queue(&self) -> &Arc<WorkQueue<RunKey>> {
        &self.queue
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    pub fn set_synced(&self, v: bool) {
        self.synced.send_replace(v);
    }

    /// Completes once the initial lists are in (at once if they are).
    pub async fn synced(&self) {
        let mut rx = self.synced.subscribe();
        // The sender lives as long as `self`: `wait_for` cannot fail here.
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Completes once a list of Runs that started after this call is in:
    /// what a new leader's loop waits for before its first decision. Its
    /// watch may be lagging or down (failing, waiting out a backoff) and
    /// have missed the old leader's last placements, which no reservation
    /// of this replica's stands for; a list read after the Lease was taken
    /// shows every status the old leader wrote before it stopped. At once
    /// when nothing feeds the cache from a watch (the standalone store
    /// applies every write as it lands). The Run watcher follows the
    /// requests ([`RunCache::runs_relists`]) and reports each list
    /// ([`RunCache::runs_listed`]).
    pub async fn fresh_runs(&self) {
        if self.relists_asked.receiver_count() == 0 {
            return;
        }
        let mut asked = 0;
        self.relists_asked.send_modify(|a| {
            *a += 1;
            asked = *a;
        });
        let mut rx = self.relists_listed.subscribe();
        // The sender lives as long as `self`: `wait_for` cannot fail here.
        let _ = rx.wait_for(|l| *l >= asked).await;
    }

    /// The requests for a fresh list of Runs, for the watcher that feeds
    /// Runs: on a change it lists again at once (see
    /// [`RunCache::fresh_runs`]). Held for as long as that watcher lives.
    pub fn runs_relists(&self) -> tokio::sync::watch::Receiver<u64> {
        self.relists_asked.subscribe()
    }

    /// A list of Runs is in (reset) that started when the latest request
    /// was `asked` (read with [`RunCache::runs_relists`] before listing).
    pub fn runs_listed(&self, asked: u64) {
        self.relists_listed.send_if_modified(|l| {
            let newer = asked > *l;
            if newer {
                *l = asked;
            }
            newer
        });
    }

    /// Applies a Pod add/update. Pods without the runtime label are not
    /// Runtime Pods and are only remembered if usage is counted on them.
    pub fn apply_pod(&self, pod: &Pod, now: Timestamp) {
        let Some(name) = pod.metadata.name.as_deref() else {
            return;
        };
        let ns = ns_of(&pod.metadata);
        let facts = PodFacts::from_pod(
            pod,
            &self.config.runtime_label_key,
            self.config.default_runs_capacity,
        );
        let mut wake: Vec<String> = Vec::new();
        let mut st = self.state.write();
        let State {
            names,
            namespaces,
            runtime_values,
            ..
        } = &mut *st;
        let nss = namespaces.entry(ns.to_owned()).or_default();
        let old_slot = nss.pods.get(name);
        let old = old_slot.and_then(|s| s.pod.as_ref());
        let old_capacity = old_slot.map(|s| s.res.capacity()).unwrap_or_default();
        let window = Freshness::new(now, self.config.heartbeat_stale_after);
        let new = facts.runtime.as_deref().map(|rt| {
            let runtime_id = runtime_values.intern(rt);
            let capacity =
                ResourceVec::from_pairs(facts.capacity.iter().map(|(n, a)| (names.intern(n), *a)));
            let base = facts.static_availability();
            let pod = RuntimePod {
                runtime_id,
                index: 0,
                base_ok: base.is_ok(),
                heartbeat: facts.heartbeat,
                cold: Box::new(ColdPod {
                    uid: facts.uid.as_str().into(),
                    runtime: runtime_values
                        .shared(runtime_id)
                        .map_or_else(|| Arc::from(rt), Arc::clone),
                    base,
                }),
            };
            (pod, capacity)
        });
        let changed = match (old, &new) {
            (None, None) => false,
            (Some(o), Some((n, capacity))) => {
                old_capacity != *capacity
                    || o.runtime_id != n.runtime_id
                    || o.available_in(&window).is_ok() != n.available_in(&window).is_ok()
            }
            _ => true,
        };
        if changed {
            for rt in [
                old.map(RuntimePod::runtime),
                new.as_ref().map(|(n, _)| n.runtime()),
            ]
            .into_iter()
            .flatten()
            {
                if !wake.iter().any(|w| w == rt) {
                    wake.push(rt.to_owned());
                }
            }
        }
        match new {
            Some((mut n, capacity)) => {
                let key: Arc<str> = nss
                    .pods
                    .get_key_value(name)
                    .map(|(k, _)| Arc::clone(k))
                    .unwrap_or_else(|| Arc::from(name));
                let slot = nss.pods.entry(Arc::clone(&key)).or_default();
                if capacity != old_capacity {
                    slot.res.set_capacity(&capacity);
                }
                let old = slot.pod.take();
                let same_runtime = old.as_ref().is_some_and(|o| o.runtime_id == n.runtime_id);
                if let Some(o) = old.as_ref().filter(|_| !same_runtime) {
                    nss.detach(o.runtime_id, o.index);
                }
                #[allow(
                    clippy::expect_used,
                    reason = "the slot was inserted a few lines above, under the same lock"
                )]
                let slot = nss.pods.get_mut(&key).expect("inserted above");
                let cols = nss.columns.entry(n.runtime_id).or_default();
                match old.filter(|_| same_runtime) {
                    Some(o) => {
                        n.index = o.index;
                        cols.set_availability(n.index, n.base_ok, n.heartbeat);
                        cols.set_res(n.index, &slot.res);
                    }
                    None => n.index = cols.push(key, &slot.res, n.base_ok, n.heartbeat),
                }
                slot.pod = Some(n);
            }
            None => {
                if let Some(slot) = nss.pods.get_mut(name) {
                    let old = slot.pod.take();
                    slot.res.set_capacity(&ResourceVec::new());
                    if slot.is_empty() {
                        nss.pods.remove(name);
                    }
                    if let Some(o) = old {
                        nss.detach(o.runtime_id, o.index);
                    }
                }
            }
        }
        for rt in wake {
            self.wake_runtime(nss, ns, &rt, WakeCause::PodCapacity);
        }
        st.sweep();
    }

    /// How many resource names and runtime ids are interned, and how many
    /// per-resource columns the runtimes hold together (churn tests).
    pub fn interned(&self) -> (usize, usize, usize) {
        let st = self.state.read();
        let columns = st
            .namespaces
            .values()
            .flat_map(|n| n.columns.values())
            .map(Columns::columns)
            .sum();
        (st.names.len(), st.runtime_values.len(), columns)
    }

    /// Applies a Pod deletion.
    pub fn delete_pod(&self, namespace: &str, name: &str) {
        // Most Pods are not Runtime Pods: answer those under the read lock,
        // so their churn never blocks scheduling cycles.
        let known = {
            let st = self.state.read();
            st.namespaces
                .get(namespace)
                .is_some_and(|n| n.pods.get(name).is_some_and(|s| s.pod.is_some()))
        };
        if !known {
            return;
        }
        let mut st = self.state.write();
        let Some(nss) = st.namespaces.get_mut(namespace) else {
            return;
        };
        let Some(slot) = nss.pods.get_mut(name) else {
            return;
        };
        let old = slot.pod.take();
        slot.res.set_capacity(&ResourceVec::new());
        if slot.is_empty() {
            nss.pods.remove(name);
        }
        if let Some(o) = &old {
            nss.detach(o.runtime_id, o.index);
        }
        if let Some(o) = old {
            self.wake_runtime(nss, namespace, o.runtime(), WakeCause::PodCapacity);
        }
    }

    /// Keys (namespace, name) that the cache holds but a relist of
    /// `objects` no longer contains; `held` lists a namespace's names.
    fn absent<'a, K: kube::Resource + 'a>(
        &self,
        objects: impl IntoIterator<Item = &'a K>,
        held: impl Fn(&NsState) -> Vec<String>,
    ) -> Vec<(String, String)> {
        let keep: BTreeSet<(String, String)> = objects
            .into_iter()
            .filter_map(|o| Some((ns_of(o.meta()).to_owned(), o.meta().name.clone()?)))
            .collect();
        let st = self.state.read();
        st.namespaces
            .iter()
            .flat_map(|(ns, nss)| held(nss).into_iter().map(move |n| (ns.clone(), n)))
            .filter(|k| !keep.contains(k))
            .collect()
    }

    /// Replaces every Pod (a relist): pods absent from `pods` are deleted.
    pub fn reset_pods(&self, pods: &[Pod], now: Timestamp) {
        let gone = self.absent(pods, |nss| {
            nss.pods
                .iter()
                .filter(|(_, s)| s.pod.is_some())
                .map(|(n, _)| n.to_string())
                .collect()
        });
        for (ns, name) in gone {
            self.delete_pod(&ns, &name);
        }
        for p in pods {
            self.apply_pod(p, now);
        }
    }

    /// Deletes every Runtime Pod `keep` says no to (the end of a relist
    /// applied pod by pod).
    pub fn retain_pods(&self, keep: impl Fn(&str, &str) -> bool) {
        let gone: Vec<(String, String)> = {
            let st = self.state.read();
            st.namespaces
                .iter()
                .flat_map(|(ns, nss)| {
                    nss.pods
                        .iter()
                        .filter(|(_, s)| s.pod.is_some())
                        .map(move |(n, _)| (ns, n))
                })
                .filter(|(ns, n)| !keep(ns, n))
                .map(|(ns, n)| (ns.clone(), n.to_string()))
                .collect()
        };
        for (ns, name) in gone {
            self.delete_pod(&ns, &name);
        }
    }

    /// Applies a Runtime add/update.
    pub fn apply_runtime(&self, rt: &Runtime) {
        let Some(name) = rt.metadata.name.clone() else {
            return;
        };
        let ns = ns_of(&rt.metadata).to_owned();
        self.state.write().runtimes.insert((ns, name), rt.clone());
    }

    /// Applies a Runtime deletion.
    pub fn delete_runtime(&self, namespace: &str, name: &str) {
        self.state
            .write()
            .runtimes
            .remove(&(namespace.to_owned(), name.to_owned()));
    }

    /// Replaces every Runtime.
    pub fn reset_runtimes(&self, rts: &[Runtime]) {
        let mut st = self.state.write();
        st.runtimes.clear();
        for rt in rts {
            if let Some(name) = rt.metadata.name.clone() {
                st.runtimes
                    .insert((ns_of(&rt.metadata).to_owned(), name), rt.clone());
            }
        }
    }

    /// Enqueues every unscheduled Run of `runtime` in the namespace.
    fn wake_runtime(&self, nss: &NsState, ns: &str, runtime: &str, cause: WakeCause) {
        let Some(names) = nss.pending.get(runtime) else {
            return;
        };
        for n in names {
            self.queue.add(RunKey::new(ns, n.as_str()));
        }
        self.metrics.wake(cause, names.len());
    }

    /// Enqueues every unscheduled Run (the periodic fallback).
    pub fn resync(&self) -> usize {
        let st = self.state.read();
        let mut n = 0;
        for (ns, nss) in &st.namespaces {
            for names in nss.pending.values() {
                for name in names {
                    self.queue.add(RunKey::new(ns.as_str(), name.as_str()));
                    n += 1;
                }
            }
        }
        self.metrics.wake(WakeCause::Resync, n);
        n
    }
}

#[cfg(test)]
mod tests;
