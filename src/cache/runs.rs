//! Run entries, the usage index, reservations and placement over the cache.

use super::{Assumption, NsState, RunCache, RunEntry, State, ns_of};
use crate::crd::{Run, RunStatus, phase};
use crate::metrics::WakeCause;
use crate::model::resources::{
    Requests, ResourceNames, ResourceVec, accounted_requests, effective_requests,
};
use crate::model::runtime_pod::Freshness;
use crate::runs::affinity::{self, Bound, Terms};
use crate::runs::columns::Verdict;
use crate::runs::decide::{Choice, PodState, RunView, decide, selection_failed};
use crate::runs::placement::{PendingReason, Rejection, RejectionCounts, Score};
use crate::runs::queue::RunKey;
use crate::runs::retry;
use crate::runs::status;
use k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// Entries of each list `POST /v1/runs/plan` returns unless the request
/// names its own `limit`.
pub const DEFAULT_PLAN_LIMIT: usize = 20;

/// The outcome of one scheduling cycle's decision, taken under the write
/// lock. `Reserved` has already reserved capacity; the caller must write the
/// status and [`RunCache::release`] on failure.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Nothing to do: not unscheduled, gone, or a write is in flight.
    Skip,
    /// Capacity reserved on `pod`; write `status` with `resource_version`.
    Reserved {
        uid: String,
        pod: String,
        resource_version: Option<String>,
        status: RunStatus,
        /// The Run's `creationTimestamp`, for the scheduling latency.
        created: Option<Timestamp>,
        /// The pods the decision rejected, per reason (for the metrics).
        rejections: RejectionCounts,
    },
    /// Nothing fits; `write` says whether the status changes.
    Pending {
        uid: String,
        reason: PendingReason,
        resource_version: Option<String>,
        status: RunStatus,
        write: bool,
        /// The pods the decision rejected, per reason (for the metrics).
        rejections: RejectionCounts,
    },
    /// Invalid request: fail the Run.
    Invalid {
        uid: String,
        resource_version: Option<String>,
        status: RunStatus,
        write: bool,
    },
    /// Cancellation requested while Pending: mark it `Cancelled`.
    Cancelled {
        uid: String,
        resource_version: Option<String>,
        status: RunStatus,
        write: bool,
    },
    /// In a retry backoff until `until`: look again then, nothing written.
    BackingOff { until: Timestamp },
}

/// The unscheduled Runs, as `/metrics` reports them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PendingRuns {
    /// Counts by the reason of their `Scheduled` condition (`None`: not
    /// decided yet).
    pub by_reason: Vec<(Option<PendingReason>, usize)>,
    /// The `creationTimestamp` of the oldest one.
    pub oldest_created: Option<Timestamp>,
    /// Those in a retry backoff (not counted in `by_reason`).
    pub backing_off: usize,
    /// The earliest end of a retry backoff.
    pub next_retry: Option<Timestamp>,
}

/// A dry-run placement: every feasible pod best first, every rejected pod
/// with its `"<Reason>: <detail>"`.
#[derive(Debug, Clone)]
pub struct PlanResult {
    pub feasible: Vec<(String, Score)>,
    pub rejected: Vec<(String, String)>,
    pub counts: RejectionCounts,
    /// Each feasible pod's preferred-affinity score (0..100), in the order
    /// of `feasible`; empty for a Run without affinity (all 0).
    pub affinity_scores: Vec<i64>,
}

/// Whether a Run's affinity has any term at all.
pub fn has_terms(a: &crate::crd::RunAffinity) -> bool {
    [a.run_affinity.as_ref(), a.run_anti_affinity.as_ref()]
        .into_iter()
        .flatten()
        .any(|r| {
            !r.required_during_scheduling_ignored_during_execution
                .is_empty()
                || !r
                    .preferred_during_scheduling_ignored_during_execution
                    .is_empty()
        })
}

/// The affinity targets of a namespace recounted from its Run entries:
/// `(pod, labels)` of every Run active on a pod (Scheduled, Running or
/// Ready with an `assignedPod`, as upstream's `isActiveAffinityTarget`) and
/// of every assumed Run. The invariant check holds the index to it.
fn affinity_targets(nss: &NsState) -> Vec<(&str, &BTreeMap<String, String>)> {
    let mut out: Vec<(&str, &BTreeMap<String, String>)> = nss
        .runs
        .values()
        .filter(|e| phase::is_active(e.status.phase.as_deref()))
        .filter_map(|e| {
            let pod = e.status.assigned_pod.as_deref().filter(|p| !p.is_empty())?;
            Some((pod, &*e.labels))
        })
        .collect();
    for a in nss.assumed.values() {
        if let Some(e) = nss.runs.get(&a.run) {
            out.push((&*a.pod, &*e.labels));
        }
    }
    out
}

/// `"<Reason>: <detail>"` of a pod the affinity rejected.
fn describe_affinity(reason: &str) -> String {
    let detail = if reason == affinity::UNSATISFIED_AFFINITY {
        "no Run of the required cohort is on this pod"
    } else {
        "a Run the anti-affinity excludes is on this pod"
    };
    format!("{reason}: {detail}")
}

/// The rejection of a pod failing the clock-free rules: their reason, in
/// the pod's facts.
fn base_rejection(nss: &NsState, pod: &str) -> Rejection {
    let base = nss
        .pods
        .get(pod)
        .and_then(|s| s.pod.as_ref())
        .map(|p| p.cold.base.clone());
    match base {
        Some(Err(u)) => Rejection::Unavailable(u),
        _ => Rejection::Unavailable(crate::model::runtime_pod::Unavailable::NotReady),
    }
}

/// A dry-run placement borrowed from the cache snapshot.
pub struct PlanOutcome<'a> {
    /// Feasible pods, best first.
    pub feasible: Vec<(&'a str, Score)>,
    /// Rejected pods in name order.
    pub rejected: Vec<(&'a str, Rejection)>,
    pub counts: RejectionCounts,
    names: &'a ResourceNames,
    unknown: Vec<String>,
}

impl PlanOutcome<'_> {
    pub fn selected(&self) -> Option<&str> {
        self.feasible.first().map(|(n, _)| *n)
    }

    pub fn reason(&self) -> Option<PendingReason> {
        self.feasible
            .is_empty()
            .then(|| self.counts.pending_reason())
    }

    /// `"<Reason>: <detail>"` for a rejection.
    pub fn describe(&self, r: &Rejection) -> String {
        r.describe(self.names, &self.unknown)
    }
}

impl PlanResult {
    pub fn selected(&self) -> Option<&str> {
        self.feasible.first().map(|(n, _)| &**n)
    }

    pub fn reason(&self) -> Option<PendingReason> {
        self.feasible
            .is_empty()
            .then(|| self.counts.pending_reason())
    }
}

// === impl RunCache (Runs) ===

impl RunCache {
    /// Unscheduled Runs by why they are pending: the reason of their
    /// `Scheduled` condition, `None` before their first decision (for
    /// `kruntimes_runs_pending`); those in a retry backoff at `now` apart,
    /// with the earliest end of one; and the creation time of the oldest.
    pub fn pending_runs(&self, now: Timestamp) -> PendingRuns {
        let st = self.state.read();
        let mut counts: Vec<(Option<PendingReason>, usize)> = Vec::new();
        let mut oldest: Option<Timestamp> = None;
        let mut backing_off = 0;
        let mut next_retry: Option<Timestamp> = None;
        for entry in st.namespaces.values().flat_map(|n| n.runs.values()) {
            if !entry.unscheduled() {
                continue;
            }
            if let Some(c) = entry.created {
                oldest = Some(oldest.map_or(c, |o| o.min(c)));
            }
            if let Some(at) = entry.retry_at.filter(|at| *at > now)
                && !entry.cancel
            {
                backing_off += 1;
                next_retry = Some(next_retry.map_or(at, |n| n.min(at)));
                continue;
            }
            let reason = status::shown_reason(&entry.status)
                .and_then(|r| PendingReason::ALL.into_iter().find(|p| p.as_str() == r));
            match counts.iter_mut().find(|(r, _)| *r == reason) {
                Some((_, n)) => *n += 1,
                None => counts.push((reason, 1)),
            }
        }
        PendingRuns {
            by_reason: counts,
            oldest_created: oldest,
            backing_off,
            next_retry,
        }
    }

    /// Objects the Run cache holds, by kind: Runs, Runtimes and Runtime
    /// Pods (for `kruntimes_cache_objects`).
    pub fn sizes(&self) -> [(&'static str, usize); 3] {
        let st = self.state.read();
        let runs = st.namespaces.values().map(|n| n.runs.len()).sum();
        let pods = st
            .namespaces
            .values()
            .flat_map(|n| n.pods.values())
            .filter(|slot| slot.pod.is_some())
            .count();
        [
            ("Run", runs),
            ("Runtime", st.runtimes.len()),
            ("RuntimePod", pods),
        ]
    }

    /// Applies a Run add/update: moves its usage, hands an assumed
    /// reservation over to actual usage exactly once, and wakes what it frees.
    pub fn apply_run(&self, run: &Run) {
        let Some(name) = run.metadata.name.as_deref() else {
            return;
        };
        let ns = ns_of(&run.metadata);
        let uid = run.metadata.uid.clone().unwrap_or_default();
        let status = run.status.clone().unwrap_or_default();
        let mut st = self.state.write();
        let State {
            names, namespaces, ..
        } = &mut *st;
        let nss = namespaces.entry(ns.to_owned()).or_default();

        let mut released_on: Vec<Arc<str>> = Vec::new();
        if let Some(old) = nss.runs.remove(name) {
            if old.uid != uid {
                // Same name, new object: the old one is gone.
                self.forget_run(nss, name, old, &mut released_on);
            } else {
                unindex(nss, name, &old, &mut released_on);
            }
        }

        let assigned: Option<String> = status.assigned_pod.clone().filter(|p| !p.is_empty());
        let released = status.is_released(self.config.released_condition.as_deref());
        let active = status.consumes(self.config.released_condition.as_deref());
        let counted = match (active, assigned.as_deref()) {
            (true, Some(pod)) => {
                let amounts = accounted_requests(run.requests()).intern(names);
                let key: Arc<str> = nss
                    .pods
                    .get_key_value(pod)
                    .map(|(k, _)| Arc::clone(k))
                    .unwrap_or_else(|| Arc::from(pod));
                nss.pods
                    .entry(Arc::clone(&key))
                    .or_default()
                    .res
                    .add_actual(&amounts);
                nss.sync_res(&key);
                released_on.retain(|p| **p != *pod);
                Some((key, amounts))
            }
            _ => None,
        };
        let entry = RunEntry {
            uid: uid.clone(),
            resource_version: run.metadata.resource_version.clone(),
            generation: run.metadata.generation,
            created: run.metadata.creation_timestamp.as_ref().map(|t| t.0),
            runtime: run.spec.runtime.clone(),
            deleting: run.metadata.deletion_timestamp.is_some(),
            requests: effective_requests(run.requests()),
            cancel: run.spec.cancel_requested(),
            labels: Arc::new(run.metadata.labels.clone().unwrap_or_default()),
            affinity: run
                .spec
                .affinity
                .as_ref()
                .filter(|a| has_terms(a))
                .map(|a| Box::new(a.clone())),
            retry_at: retry::retry_at(&run.spec, &status),
            status,
            counted,
        };

        // Assumed → actual handoff, or release when the Run went elsewhere.
        if let Some(a) = nss.assumed.get(&uid) {
            let handed_over = entry.counted.as_ref().is_some_and(|(p, _)| *p == a.pod);
            // A later attempt waiting again: the placed one ran and ended
            // unseen (the watch was away); nothing will hand it over.
            let retried = phase::is_unscheduled(entry.status.phase.as_deref())
                && entry.status.attempt.unwrap_or(0) > a.attempt;
            let moved_on = phase::is_terminal(entry.status.phase.as_deref())
                || released
                || retried
                || entry.deleting && !active
                || assigned.as_deref().is_some_and(|p| p != &*a.pod);
            if handed_over || moved_on {
                let pod = self.take_assumption(nss, &uid);
                if !handed_over {
                    released_on.extend(pod);
                }
            }
        }

        let unscheduled = entry.unscheduled();
        if unscheduled {
            nss.pending
                .entry(entry.runtime.clone())
                .or_default()
                .insert(name.to_owned());
        }
        let affinity = entry.affinity.is_some();
        nss.runs.insert(name.to_owned(), entry);
        if affinity {
            nss.ensure_targets();
        }
        nss.sync_targets(name);
        if unscheduled {
            self.queue.add(RunKey::new(ns, name));
            self.metrics.wake(WakeCause::RunChanged, 1);
        }
        self.wake_released(nss, ns, released_on);
        st.sweep();
    }

    /// Applies a Run deletion. The Run's key is queued once more, so the
    /// scheduling loop finds it gone and drops its retry state.
    pub fn delete_run(&self, namespace: &str, name: &str) {
        let mut st = self.state.write();
        let Some(nss) = st.namespaces.get_mut(namespace) else {
            return;
        };
        let Some(old) = nss.runs.remove(name) else {
            return;
        };
        let mut released_on = Vec::new();
        self.forget_run(nss, name, old, &mut released_on);
        nss.sync_targets(name);
        self.wake_released(nss, namespace, released_on);
        self.queue.add(RunKey::new(namespace, name));
    }

    /// Replaces every Run (a relist). Assumed reservations survive: they are
    /// released only by what the new objects show.
    pub fn reset_runs(&self, runs: &[Run]) {
        let gone = self.absent(runs, |nss| nss.runs.keys().cloned().collect());
        for (ns, name) in gone {
            self.delete_run(&ns, &name);
        }
        for r in runs {
            self.apply_run(r);
        }
    }

    /// Removes every trace of a Run: usage, index entry, reservation.
    fn forget_run(
        &self,
        nss: &mut NsState,
        name: &str,
        old: RunEntry,
        released_on: &mut Vec<Arc<str>>,
    ) {
        unindex(nss, name, &old, released_on);
        released_on.extend(self.take_assumption(nss, &old.uid));
    }

    /// Removes Run `uid`'s reservation and its amounts from the pod's
    /// ledger; returns the pod it was on.
    fn take_assumption(&self, nss: &mut NsState, uid: &str) -> Option<Arc<str>> {
        let a = nss.assumed.remove(uid)?;
        if let Some(slot) = nss.pods.get_mut(&a.pod) {
            slot.res.sub_assumed(&a.amounts);
        }
        nss.sync_res(&a.pod);
        nss.sync_targets(&a.run);
        self.metrics.assumed_reservations.dec();
        Some(a.pod)
    }

    /// Wakes the Pending Runs of the runtimes of pods that gained free capacity.
    fn wake_released(&self, nss: &mut NsState, ns: &str, released_on: Vec<Arc<str>>) {
        let mut runtimes: Vec<String> = Vec::new();
        for pod in released_on {
            if let Some(slot) = nss.pods.get(&pod) {
                if let Some(rt) = slot.pod.as_ref().map(|p| p.runtime())
                    && !runtimes.iter().any(|r| r == rt)
                {
                    runtimes.push(rt.to_owned());
                }
                if slot.is_empty() {
                    nss.pods.remove(&pod);
                }
            }
        }
        for rt in runtimes {
            self.wake_runtime(nss, ns, &rt, WakeCause::UsageReleased);
        }
    }

    /// One cycle for `key`: the Run and its namespace's pods looked up,
    /// [`decide`](crate::runs::decide::decide)d, and the result applied
    /// (a reservation when a pod fits), all under one write lock so
    /// concurrent cycles cannot double-book. The caller emits the metrics.
    pub fn schedule_one(&self, key: &RunKey, now: Timestamp) -> Decision {
        let mut st = self.state.write();
        let State {
            names,
            namespaces,
            runtime_values,
            ..
        } = &mut *st;
        let Some(nss) = namespaces.get_mut(&key.namespace) else {
            return Decision::Skip;
        };
        let Some(entry) = nss.runs.get(&key.name) else {
            return Decision::Skip;
        };
        if !entry.unscheduled() || nss.assumed.contains_key(&entry.uid) {
            return Decision::Skip;
        }
        let run = RunView {
            status: &entry.status,
            generation: entry.generation,
            cancel: entry.cancel,
            requests: &entry.requests,
            retry_at: entry.retry_at,
            runtime: &entry.runtime,
            labels: &entry.labels,
            affinity: entry.affinity.as_deref(),
        };
        let pods = PodState {
            names,
            columns: runtime_values
                .lookup(&entry.runtime)
                .and_then(|id| nss.columns.get(&id)),
            targets: nss.targets(),
            stale_after: self.config.heartbeat_stale_after,
        };
        let choice = decide(&run, &pods, now);
        let uid = entry.uid.clone();
        let resource_version = entry.resource_version.clone();
        let attempt = entry.status.attempt.unwrap_or(0);
        match choice {
            Choice::Cancelled { status, write } => Decision::Cancelled {
                uid,
                resource_version,
                status,
                write,
            },
            Choice::Invalid { status, write } => Decision::Invalid {
                uid,
                resource_version,
                status,
                write,
            },
            Choice::BackingOff { until } => Decision::BackingOff { until },
            Choice::Pending {
                reason,
                status,
                write,
                counts,
            } => Decision::Pending {
                uid,
                reason,
                resource_version,
                status,
                write,
                rejections: counts,
            },
            Choice::Place {
                pod,
                request,
                counts,
            } => {
                let (status, created) = {
                    let pod_uid = nss
                        .pods
                        .get(&pod)
                        .and_then(|slot| slot.pod.as_ref())
                        .map(|p| p.cold.uid.to_string())
                        .unwrap_or_default();
                    (
                        status::scheduled(&entry.status, &pod, &pod_uid, entry.generation, now),
                        entry.created,
                    )
                };
                if let Some(slot) = nss.pods.get_mut(&pod) {
                    slot.res.add_assumed(&request);
                }
                nss.sync_res(&pod);
                nss.assumed.insert(
                    uid.clone(),
                    Assumption {
                        run: key.name.clone(),
                        pod: Arc::clone(&pod),
                        amounts: request,
                        attempt,
                    },
                );
                nss.sync_targets(&key.name);
                self.metrics.assumed_reservations.inc();
                Decision::Reserved {
                    uid,
                    pod: pod.to_string(),
                    resource_version,
                    status,
                    created,
                    rejections: counts,
                }
            }
        }
    }

    /// Drops every reservation (leadership lost: the next leader starts
    /// from what the API server shows).
    pub fn clear_assumptions(&self) -> usize {
        let mut st = self.state.write();
        let mut n = 0;
        for nss in st.namespaces.values_mut() {
            let uids: Vec<String> = nss.assumed.keys().cloned().collect();
            for uid in uids {
                n += usize::from(self.take_assumption(nss, &uid).is_some());
            }
            nss.pods.retain(|_, s| !s.is_empty());
        }
        n
    }

    /// Releases the reservation of Run `uid` on `pod` after a failed write,
    /// and wakes the Runs it was blocking.
    pub fn release(&self, namespace: &str, uid: &str, pod: &str) -> bool {
        let mut st = self.state.write();
        let Some(nss) = st.namespaces.get_mut(namespace) else {
            return false;
        };
        if nss.assumed.get(uid).is_none_or(|a| &*a.pod != pod) {
            return false;
        }
        let released: Vec<Arc<str>> = self.take_assumption(nss, uid).into_iter().collect();
        self.wake_released(nss, namespace, released);
        true
    }

    /// Keeps the affinity targets of `namespace` from now on (built once,
    /// under the write lock, by the first plan with affinity terms).
    fn ensure_targets(&self, namespace: &str) {
        let kept = |st: &State| {
            st.namespaces
                .get(namespace)
                .is_none_or(|nss| nss.targets.is_some())
        };
        if kept(&self.state.read()) {
            return;
        }
        if let Some(nss) = self.state.write().namespaces.get_mut(namespace) {
            nss.ensure_targets();
        }
    }

    /// Dry-run placement of a request against the current snapshot, with
    /// owned results and every pod listed.
    pub fn plan(
        &self,
        namespace: &str,
        runtime: &str,
        requests: &Requests,
        now: Timestamp,
    ) -> PlanResult {
        self.plan_top(namespace, runtime, requests, now, 0)
    }

    /// Dry-run placement listing at most `limit` feasible pods (the best)
    /// and `limit` rejected pods (the first by name); 0 lists all. The
    /// selection, the reason and the counts always cover every pod.
    pub fn plan_top(
        &self,
        namespace: &str,
        runtime: &str,
        requests: &Requests,
        now: Timestamp,
        limit: usize,
    ) -> PlanResult {
        self.plan_with_limit(namespace, runtime, requests, now, limit, |o| PlanResult {
            feasible: o
                .feasible
                .iter()
                .map(|(n, s)| (n.to_string(), s.clone()))
                .collect(),
            rejected: o
                .rejected
                .iter()
                .map(|(n, r)| (n.to_string(), o.describe(r)))
                .collect(),
            counts: o.counts.clone(),
            affinity_scores: Vec::new(),
        })
    }

    /// [`plan_top`](Self::plan_top) for a Run labelled `own` with
    /// `affinity`: the required terms filter, the preferred ones score with
    /// least-loaded as upstream's weighted plugins do. `Err` is the message
    /// a Run with such terms fails with (an unparsable selector, an
    /// unsupported topology key).
    #[allow(clippy::too_many_arguments)]
    pub fn plan_top_for(
        &self,
        namespace: &str,
        runtime: &str,
        requests: &Requests,
        affinity: Option<&crate::crd::RunAffinity>,
        own: &BTreeMap<String, String>,
        now: Timestamp,
        limit: usize,
    ) -> Result<PlanResult, String> {
        let Some(aff) = affinity.filter(|a| has_terms(a)) else {
            return Ok(self.plan_top(namespace, runtime, requests, now, limit));
        };
        let terms = Terms::compile(aff).map_err(selection_failed)?;
        self.ensure_targets(namespace);
        let st = self.state.read();
        let (request, unknown) = requests.resolve(&st.names);
        let Some((nss, cols)) = st.namespaces.get(namespace).and_then(|nss| {
            let id = st.runtime_values.lookup(runtime)?;
            Some((nss, nss.columns.get(&id)?))
        }) else {
            return Ok(PlanResult {
                feasible: Vec::new(),
                rejected: Vec::new(),
                counts: RejectionCounts::default(),
                affinity_scores: Vec::new(),
            });
        };
        let has_unknown = !unknown.is_empty();
        let window = Freshness::new(now, self.config.heartbeat_stale_after);
        let bound = Bound::new(&terms, own, nss.targets());
        let placed = affinity::place(&bound, cols, &request, has_unknown, &window);
        self.affinity_examined
            .fetch_add(placed.examined as u64, std::sync::atomic::Ordering::Relaxed);
        let cut = |n: usize| if limit == 0 { n } else { n.min(limit) };
        let n = cut(placed.ranked.len());
        let kept: HashSet<&str> = placed.ranked.iter().map(|r| r.pod).collect();
        let refused: HashMap<&str, &'static str> = placed.refused.iter().copied().collect();
        // Rejected pods in name order, up to the cut: the capacity's
        // rejections and the affinity's.
        let laid = cols.lay_out(&request);
        let mut rejected: Vec<(String, String)> = Vec::new();
        for name in nss.pods.keys() {
            if limit > 0 && rejected.len() >= limit {
                break;
            }
            let Some(i) = cols.position(name) else {
                continue;
            };
            let why = match cols.verdict_at(i, &laid, has_unknown, &window) {
                Verdict::Fits if kept.contains(&**name) => continue,
                Verdict::Fits => match refused.get(&**name) {
                    Some(why) => describe_affinity(why),
                    None if placed.narrowed => describe_affinity(affinity::UNSATISFIED_AFFINITY),
                    None => continue,
                },
                Verdict::Rejected(r) => r.describe(&st.names, &unknown),
                Verdict::Base => base_rejection(nss, name).describe(&st.names, &unknown),
            };
            rejected.push((name.to_string(), why));
        }
        Ok(PlanResult {
            affinity_scores: placed.ranked.iter().take(n).map(|r| r.affinity).collect(),
            feasible: placed
                .ranked
                .into_iter()
                .take(n)
                .map(|r| (r.pod.to_owned(), r.load))
                .collect(),
            rejected,
            counts: placed.counts,
        })
    }

    /// Dry-run placement; `f` reads the outcome while the snapshot is held,
    /// so pod names are borrowed, not copied. Every pod is listed.
    pub fn plan_with<R>(
        &self,
        namespace: &str,
        runtime: &str,
        requests: &Requests,
        now: Timestamp,
        f: impl FnOnce(&PlanOutcome<'_>) -> R,
    ) -> R {
        self.plan_with_limit(namespace, runtime, requests, now, 0, f)
    }

    /// [`plan_with`](Self::plan_with) with the lists cut to `limit` (0: all).
    pub fn plan_with_limit<R>(
        &self,
        namespace: &str,
        runtime: &str,
        requests: &Requests,
        now: Timestamp,
        limit: usize,
        f: impl FnOnce(&PlanOutcome<'_>) -> R,
    ) -> R {
        let stale = self.config.heartbeat_stale_after;
        let st = self.state.read();
        let (request, unknown) = requests.resolve(&st.names);
        let mut outcome = PlanOutcome {
            feasible: Vec::new(),
            rejected: Vec::new(),
            counts: RejectionCounts::default(),
            names: &st.names,
            unknown,
        };
        if let Some(nss) = st.namespaces.get(namespace)
            && let Some(cols) = st
                .runtime_values
                .lookup(runtime)
                .and_then(|id| nss.columns.get(&id))
        {
            let has_unknown = !outcome.unknown.is_empty();
            let window = Freshness::new(now, stale);
            let p = cols.plan(&request, has_unknown, &window, limit);
            outcome.counts = p.counts;
            outcome.feasible = p.feasible.into_iter().map(|(n, s)| (&**n, s)).collect();
            outcome.rejected = p
                .rejected
                .into_iter()
                .map(|(n, v)| {
                    let r = match v {
                        Verdict::Rejected(r) => r,
                        // The clock-free rules failed: their reason is in the facts.
                        Verdict::Base | Verdict::Fits => base_rejection(nss, n),
                    };
                    (&**n, r)
                })
                .collect();
        }
        f(&outcome)
    }

    /// Whether Run `uid` in `namespace` holds an assumed reservation, and where.
    #[cfg(any(test, feature = "testkit"))]
    pub fn assumed_pod(&self, namespace: &str, uid: &str) -> Option<String> {
        let st = self.state.read();
        st.namespaces
            .get(namespace)?
            .assumed
            .get(uid)
            .map(|a| a.pod.to_string())
    }

    /// The runtime a Run names (for upstream's per-runtime metrics).
    pub fn runtime_of(&self, key: &RunKey) -> Option<String> {
        let st = self.state.read();
        let e = st.namespaces.get(&key.namespace)?.runs.get(&key.name)?;
        Some(e.runtime.clone())
    }

    /// The stored status of a Run (for tests that check what was applied).
    #[cfg(any(test, feature = "testkit"))]
    pub fn run_status(&self, key: &RunKey) -> Option<(Option<String>, RunStatus)> {
        let st = self.state.read();
        let e = st.namespaces.get(&key.namespace)?.runs.get(&key.name)?;
        Some((e.resource_version.clone(), e.status.clone()))
    }

    /// Checks the usage index against a recount from the Run entries:
    /// `Err` describes the first mismatch. Tests and debug builds use it.
    pub fn check_invariants(&self) -> Result<(), String> {
        let st = self.state.read();
        for (ns, nss) in &st.namespaces {
            let mut actual: std::collections::HashMap<&str, ResourceVec> = Default::default();
            for e in nss.runs.values() {
                if let Some((p, a)) = &e.counted {
                    actual.entry(p).or_default().add(a);
                }
            }
            let mut assumed: std::collections::HashMap<&str, ResourceVec> = Default::default();
            for a in nss.assumed.values() {
                assumed.entry(&a.pod).or_default().add(&a.amounts);
                if !nss.runs.contains_key(&a.run) {
                    return Err(format!("{ns}: assumption for unknown run {}", a.run));
                }
            }
            for (name, slot) in &nss.pods {
                let want = actual.remove(&**name).unwrap_or_default();
                if slot.res.actual() != want {
                    return Err(format!(
                        "{ns}/{name}: actual {:?} != recount {:?}",
                        slot.res.actual(),
                        want
                    ));
                }
                let want = assumed.remove(&**name).unwrap_or_default();
                if slot.res.assumed() != want {
                    return Err(format!(
                        "{ns}/{name}: assumed {:?} != recount {:?}",
                        slot.res.assumed(),
                        want
                    ));
                }
            }
            // Checked once kept (until then there is nothing to hold).
            let mut want: Vec<(&str, &BTreeMap<String, String>)> = match &nss.targets {
                Some(_) => affinity_targets(nss),
                None => Vec::new(),
            };
            let mut held: Vec<(&str, &BTreeMap<String, String>)> =
                nss.targets().iter().map(|(_, _, p, l)| (p, l)).collect();
            want.sort();
            held.sort();
            if held != want {
                return Err(format!(
                    "{ns}: affinity targets {held:?} != recount {want:?}"
                ));
            }
            if let Some((p, _)) = actual.into_iter().find(|(_, v)| !v.is_empty()) {
                return Err(format!("{ns}/{p}: usage counted on a pod without a slot"));
            }
            let mut members = 0;
            for (name, slot) in &nss.pods {
                let Some(p) = &slot.pod else { continue };
                members += 1;
                if st.runtime_values.name(p.runtime_id) != p.runtime()
                    || st.runtime_values.lookup(p.runtime()) != Some(p.runtime_id)
                {
                    return Err(format!(
                        "{ns}/{name}: runtime id {} does not name {:?}",
                        p.runtime_id,
                        p.runtime()
                    ));
                }
                let cols = nss
                    .columns
                    .get(&p.runtime_id)
                    .ok_or_else(|| format!("{ns}/{name}: no columns for its runtime"))?;
                cols.check(p.index, name, &slot.res, p.base_ok, p.heartbeat)
                    .map_err(|e| format!("{ns}/{e}"))?;
            }
            for cols in nss.columns.values() {
                cols.check_groups().map_err(|e| format!("{ns}: {e}"))?;
            }
            let held: usize = nss.columns.values().map(|c| c.len()).sum();
            if held != members {
                return Err(format!("{ns}: columns hold {held} pods, slots {members}"));
            }
        }
        Ok(())
    }
}

/// Removes a Run's usage and pending-index entry (not its reservation).
fn unindex(nss: &mut NsState, name: &str, old: &RunEntry, released_on: &mut Vec<Arc<str>>) {
    if let Some((pod, amounts)) = &old.counted {
        if let Some(slot) = nss.pods.get_mut(pod) {
            slot.res.sub_actual(amounts);
        }
        nss.sync_res(pod);
        released_on.push(Arc::clone(pod));
    }
    if let Some(set) = nss.pending.get_mut(&old.runtime) {
        set.remove(name);
        if set.is_empty() {
            nss.pending.remove(&old.runtime);
        }
    }
}

/// The columnar decision against a straightforward reference: every pod's
/// own ledger through [`evaluate`](crate::runs::placement::evaluate), in
/// name order, best by load then name.
#[cfg(test)]
mod differential {
    use super::*;
    use crate::cache::CacheConfig;
    use crate::metrics::Metrics;
    use crate::runs::placement::evaluate;
    use crate::runs::queue::WorkQueue;
    use crate::testkit;
    use k8s_openapi::api::core::v1::Pod;
    use proptest::prelude::*;

    fn now() -> Timestamp {
        "2026-03-01T12:00:00Z".parse().unwrap()
    }

    /// Capacities that make ties common, plus a few whose common
    /// denominator does not fit 128 bits (the exact fallback).
    const CAPS: [u64; 8] = [0, 1, 2, 3, 4, 6, 1 << 62, (1 << 62) - 57];

    #[derive(Debug, Clone)]
    struct PodSpec {
        name: u8,
        other_runtime: bool,
        /// 0 fresh, 1 stale, 2 none, 3 not ready, 4 from the future
        /// (beyond the window's other end).
        health: u8,
        caps: [usize; 3],
    }

    #[derive(Debug, Clone)]
    struct RunSpecT {
        pod: u8,
        amounts: [u64; 3],
    }

    const RES: [&str; 3] = ["runs", "gpu", "mem"];

    fn pod(p: &PodSpec) -> Pod {
        let name = format!("rp-{:02}", p.name);
        let caps: Vec<(&str, String)> = RES
            .iter()
            .zip(p.caps)
            .filter(|(_, c)| CAPS[*c] > 0)
            .map(|(r, c)| (*r, CAPS[c].to_string()))
            .collect();
        let caps: Vec<(&str, &str)> = caps.iter().map(|(r, c)| (*r, c.as_str())).collect();
        let stamp = match p.health {
            1 => "2026-03-01T11:00:00Z".to_owned(),
            4 => "2026-03-01T13:00:00Z".to_owned(),
            _ => now().to_string(),
        };
        let mut o = testkit::runtime_pod(&name, &caps, &stamp);
        if p.other_runtime {
            o = o.runtime("go");
        }
        if p.health == 3 {
            o = o.set(&["status", "conditions", "0", "status"], "False");
        }
        if p.health == 2 {
            // Ready, but no runtimed heartbeat condition at all.
            o = o.set(
                &["status", "conditions"],
                serde_json::json!([{"type": "Ready", "status": "True"}]),
            );
        }
        o.typed()
    }

    fn run(name: &str, amounts: &[u64; 3], extra: bool, assigned: Option<String>) -> Run {
        let amounts: Vec<String> = amounts.iter().map(u64::to_string).collect();
        let mut reqs: Vec<(&str, &str)> = RES
            .iter()
            .zip(&amounts)
            .map(|(r, a)| (*r, a.as_str()))
            .collect();
        if extra {
            reqs.push(("fpga", "1"));
        }
        let r = testkit::run(name, &reqs);
        match assigned {
            Some(p) => r.status("Running", Some(&p)),
            None => r,
        }
        .typed()
    }

    /// The best pod, the counts, the feasible pods best first and the
    /// rejected ones in name order with their descriptions.
    type Reference = (
        Option<String>,
        RejectionCounts,
        Vec<(String, Score)>,
        Vec<(String, String)>,
    );

    /// The decision's own answers, by rows and by groups (which must
    /// agree): the best pod and the counts, before anything is reserved.
    fn decided(c: &RunCache, request: &Requests) -> (Option<String>, RejectionCounts) {
        let st = c.state.read();
        let (req, unknown) = request.resolve(&st.names);
        let window = Freshness::new(now(), c.config.heartbeat_stale_after);
        let cols = st
            .namespaces
            .get("ns")
            .zip(st.runtime_values.lookup("py"))
            .and_then(|(nss, id)| nss.columns.get(&id));
        match cols {
            Some(cols) => {
                let unknown = !unknown.is_empty();
                let (rows, counts) = cols.best_by_rows(&req, unknown, &window);
                let by_groups = cols.best_by_groups(&req, unknown, &window);
                assert_eq!(
                    (rows, &counts),
                    (by_groups.0, &by_groups.1),
                    "rows and groups differ"
                );
                (rows.map(|i| cols.name(i).to_string()), counts)
            }
            None => (None, RejectionCounts::default()),
        }
    }

    /// The cut plans by rows and by groups agree, for a few cuts.
    fn plans_agree(c: &RunCache, request: &Requests) -> Result<(), String> {
        let st = c.state.read();
        let (req, unknown) = request.resolve(&st.names);
        let window = Freshness::new(now(), c.config.heartbeat_stale_after);
        let Some(cols) = st
            .namespaces
            .get("ns")
            .zip(st.runtime_values.lookup("py"))
            .and_then(|(nss, id)| nss.columns.get(&id))
        else {
            return Ok(());
        };
        let shown = |p: &crate::runs::columns::ColumnPlan<'_>| {
            (
                p.feasible
                    .iter()
                    .map(|(n, s)| (n.to_string(), s.max.to_string(), s.sum.to_string()))
                    .collect::<Vec<_>>(),
                p.rejected
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.clone()))
                    .collect::<Vec<_>>(),
                p.counts.clone(),
            )
        };
        for limit in [1usize, 2, 3, 5, 20] {
            let unknown = !unknown.is_empty();
            let rows = shown(&cols.plan_by_rows(&req, unknown, &window, limit));
            let groups = shown(&cols.plan_by_groups(&req, unknown, &window, limit));
            if rows != groups {
                return Err(format!("limit {limit}: rows {rows:?} != groups {groups:?}"));
            }
        }
        Ok(())
    }

    /// Pods, Runs placed on them, and requests to decide.
    type Case = (Vec<PodSpec>, Vec<RunSpecT>, Vec<([u64; 3], bool)>);

    /// The reference: every Runtime Pod of the runtime in name order, its
    /// own ledger evaluated, the first strictly less loaded one kept.
    fn reference(c: &RunCache, request: &Requests) -> Reference {
        let st = c.state.read();
        let (req, unknown) = request.resolve(&st.names);
        let window = Freshness::new(now(), c.config.heartbeat_stale_after);
        let mut counts = RejectionCounts::default();
        let mut feasible: Vec<(String, Score)> = Vec::new();
        let mut rejected = Vec::new();
        let Some(nss) = st.namespaces.get("ns") else {
            return (None, counts, feasible, rejected);
        };
        let runtime_id = st.runtime_values.lookup("py");
        for (name, slot) in &nss.pods {
            let Some(p) = &slot.pod else { continue };
            if Some(p.runtime_id) != runtime_id {
                continue;
            }
            counts.total_pods += 1;
            let available = p.available_in(&window);
            let r = match available {
                Err(u) => Err(Rejection::Unavailable(u)),
                Ok(()) => evaluate(&slot.res, &req, !unknown.is_empty()),
            };
            match r {
                Ok(s) => feasible.push((name.to_string(), s)),
                Err(e) => {
                    counts.record(&e);
                    rejected.push((name.to_string(), e.describe(&st.names, &unknown)));
                }
            }
        }
        feasible.sort_by(|a, b| a.1.cmp_load(&b.1));
        let best = feasible.first().map(|(n, _)| n.clone());
        (best, counts, feasible, rejected)
    }

    fn spec() -> impl Strategy<Value = Case> {
        let pod = (
            0u8..12,
            prop::bool::weighted(0.15),
            0u8..7,
            [0usize..8, 0usize..8, 0usize..8],
        )
            .prop_map(|(name, other_runtime, health, caps)| PodSpec {
                name,
                other_runtime,
                health: health.saturating_sub(2),
                caps,
            });
        let run = (0u8..12, [0u64..3, 0u64..3, 0u64..3])
            .prop_map(|(pod, amounts)| RunSpecT { pod, amounts });
        let req = ([0u64..3, 0u64..3, 0u64..3], prop::bool::weighted(0.1));
        (
            prop::collection::vec(pod, 0..14),
            prop::collection::vec(run, 0..24),
            prop::collection::vec(req, 1..8),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Random pods (some re-applied with other capacities or another
        /// runtime, some unavailable), random usage and reservations, and
        /// random requests: the columnar decision and plan equal the
        /// reference, ties included, and cut lists are prefixes.
        #[test]
        fn columnar_equals_reference((pods, runs, reqs) in spec()) {
            let c = RunCache::new(
                CacheConfig::default(),
                Arc::new(WorkQueue::default()),
                Arc::new(Metrics::default()),
            );
            for p in &pods {
                c.apply_pod(&pod(p), now());
            }
            for (i, r) in runs.iter().enumerate() {
                let target = format!("rp-{:02}", r.pod);
                c.apply_run(&run(&format!("busy-{i}"), &r.amounts, false, Some(target)));
            }
            for (i, (amounts, extra)) in reqs.iter().enumerate() {
                let name = format!("r-{i}");
                let r = run(&name, amounts, *extra, None);
                let request = effective_requests(r.requests()).unwrap();
                let (best, counts, feasible, rejected) = reference(&c, &request);
                let plan = c.plan("ns", "py", &request, now());
                prop_assert_eq!(&plan.counts, &counts);
                prop_assert_eq!(plan.selected().map(str::to_owned), best.clone());
                prop_assert_eq!(decided(&c, &request), (best.clone(), counts.clone()));
                prop_assert_eq!(plans_agree(&c, &request), Ok(()));
                prop_assert_eq!(
                    plan.feasible.iter().map(|(n, s)| (n.clone(), s.max.to_string(), s.sum.to_string())).collect::<Vec<_>>(),
                    feasible.iter().map(|(n, s)| (n.clone(), s.max.to_string(), s.sum.to_string())).collect::<Vec<_>>()
                );
                prop_assert_eq!(&plan.rejected, &rejected);
                for limit in [1usize, 2, 5] {
                    let cut = c.plan_top("ns", "py", &request, now(), limit);
                    prop_assert_eq!(&cut.counts, &counts);
                    prop_assert_eq!(cut.selected(), plan.selected());
                    let want: Vec<&String> = plan.feasible.iter().take(limit).map(|(n, _)| n).collect();
                    prop_assert_eq!(cut.feasible.iter().map(|(n, _)| n).collect::<Vec<_>>(), want);
                    prop_assert_eq!(&cut.rejected[..], &plan.rejected[..plan.rejected.len().min(limit)]);
                }
                // The decision itself; keep the reservation so later
                // requests see assumed usage.
                c.apply_run(&r);
                match c.schedule_one(&RunKey::new("ns", name.as_str()), now()) {
                    Decision::Reserved { pod, .. } => prop_assert_eq!(Some(pod), best),
                    Decision::Pending { .. } => prop_assert_eq!(None, best),
                    other => prop_assert!(false, "unexpected {:?}", other),
                }
                prop_assert_eq!(c.check_invariants(), Ok(()));
            }
            // Pods leave: what is left still matches.
            for p in pods.iter().step_by(2) {
                c.delete_pod("ns", &format!("rp-{:02}", p.name));
            }
            let request = effective_requests(run("last", &[1, 0, 0], false, None).requests()).unwrap();
            let (best, counts, _, _) = reference(&c, &request);
            let plan = c.plan("ns", "py", &request, now());
            prop_assert_eq!(&plan.counts, &counts);
            prop_assert_eq!(plan.selected().map(str::to_owned), best.clone());
            prop_assert_eq!(decided(&c, &request), (best, counts));
            prop_assert_eq!(c.check_invariants(), Ok(()));
        }
    }
}
