//! Run entries, the usage index, reservations and placement over the cache.

use super::{Assumption, Cache, NsState, PodSlot, RunEntry, State, ns_of};
use crate::crd::{Run, RunStatus, phase};
use crate::metrics::WakeCause;
use crate::model::pod::Freshness;
use crate::model::resources::{
    Requests, ResourceNames, ResourceVec, accounted_requests, effective_requests,
};
use crate::runs::placement::{PendingReason, Rejection, RejectionCounts, Score, evaluate};
use crate::runs::queue::RunKey;
use crate::runs::status;
use k8s_openapi::jiff::Timestamp;
use std::collections::HashMap;
use std::sync::Arc;

/// The outcome of one scheduling cycle's decision, taken under the write
/// lock. `Reserved` has already reserved capacity; the caller must write the
/// status and [`Cache::release`] on failure.
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
    },
    /// Nothing fits; `write` says whether the status changes.
    Pending {
        uid: String,
        reason: PendingReason,
        resource_version: Option<String>,
        status: RunStatus,
        write: bool,
    },
    /// Invalid request: fail the Run.
    Invalid {
        uid: String,
        resource_version: Option<String>,
        status: RunStatus,
        write: bool,
    },
}

/// A dry-run placement: every feasible pod best first, every rejected pod
/// with its `"<Reason>: <detail>"`.
#[derive(Debug, Clone)]
pub struct PlanResult {
    pub feasible: Vec<(String, Score)>,
    pub rejected: Vec<(String, String)>,
    pub counts: RejectionCounts,
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

/// One placement question: which pod of `runtime` takes `request` now.
struct Query<'a> {
    runtime: &'a str,
    request: &'a ResourceVec,
    /// The request names a resource no pod declares.
    has_unknown: bool,
    window: Freshness,
}

/// Walks the Runtime Pods of the query's runtime in name order, evaluating each.
fn for_each_pod<'a>(
    runtime_ids: &HashMap<String, u32>,
    nss: &'a NsState,
    q: &Query<'_>,
    mut f: impl FnMut(&'a Arc<str>, &'a PodSlot, Result<Score, Rejection>),
) {
    let (window, request, has_unknown) = (&q.window, q.request, q.has_unknown);
    let Some(&runtime_id) = runtime_ids.get(q.runtime) else {
        return;
    };
    for (name, slot) in &nss.pods {
        let Some(pod) = &slot.pod else { continue };
        if pod.runtime_id != runtime_id {
            continue;
        }
        let available = if pod.base_ok {
            window.check(pod.heartbeat)
        } else {
            pod.cold.base.clone()
        };
        let result = match available {
            Err(u) => Err(Rejection::Unavailable(u)),
            Ok(()) => evaluate(&slot.res, request, has_unknown),
        };
        f(name, slot, result);
    }
}

/// Best pod (lowest load, then name) and rejection counts.
fn best_in<'a>(
    runtime_ids: &HashMap<String, u32>,
    nss: &'a NsState,
    q: &Query<'_>,
) -> (Option<(&'a Arc<str>, Score)>, RejectionCounts) {
    let mut counts = RejectionCounts::default();
    let mut best: Option<(&Arc<str>, Score)> = None;
    for_each_pod(runtime_ids, nss, q, |name, _, r| {
        counts.total_pods += 1;
        match r {
            Ok(score) => {
                // Name order: a later pod wins only when strictly less loaded.
                if best.as_ref().is_none_or(|(_, b)| score.cmp_load(b).is_lt()) {
                    best = Some((name, score));
                }
            }
            Err(rej) => counts.record(&rej),
        }
    });
    (best, counts)
}

// === impl Cache (Runs) ===

impl Cache {
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
        let active = phase::is_active(status.phase.as_deref()) && assigned.is_some();
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
                released_on.retain(|p| **p != *pod);
                Some((key, amounts))
            }
            _ => None,
        };
        let entry = RunEntry {
            uid: uid.clone(),
            resource_version: run.metadata.resource_version.clone(),
            generation: run.metadata.generation,
            runtime: run.spec.runtime.clone(),
            deleting: run.metadata.deletion_timestamp.is_some(),
            requests: effective_requests(run.requests()),
            status,
            counted,
        };

        // Assumed → actual handoff, or release when the Run went elsewhere.
        if let Some(a) = nss.assumed.get(&uid) {
            let handed_over = entry.counted.as_ref().is_some_and(|(p, _)| *p == a.pod);
            let moved_on = phase::is_terminal(entry.status.phase.as_deref())
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
        nss.runs.insert(name.to_owned(), entry);
        if unscheduled {
            self.queue.add(RunKey::new(ns, name));
            self.metrics.wake(WakeCause::RunChanged, 1);
        }
        self.wake_released(nss, ns, released_on);
    }

    /// Applies a Run deletion.
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
        self.wake_released(nss, namespace, released_on);
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
        self.metrics.assumed_reservations.dec();
        Some(a.pod)
    }

    /// Wakes the Pending Runs of the runtimes of pods that gained free capacity.
    fn wake_released(&self, nss: &mut NsState, ns: &str, released_on: Vec<Arc<str>>) {
        let mut runtimes: Vec<String> = Vec::new();
        for pod in released_on {
            if let Some(slot) = nss.pods.get(&pod) {
                if let Some(rt) = slot.pod.as_ref().and_then(|p| p.cold.facts.runtime.clone())
                    && !runtimes.contains(&rt)
                {
                    runtimes.push(rt);
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

    /// Decides one cycle for `key`: pre-filter, filter, score, and — when a pod
    /// fits — reserves it, all under one write lock so concurrent cycles
    /// cannot double-book.
    pub fn schedule_one(&self, key: &RunKey, now: Timestamp) -> Decision {
        let stale = self.config.heartbeat_stale_after;
        let mut st = self.state.write();
        let State {
            names,
            namespaces,
            runtime_ids,
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
        let rv = entry.resource_version.clone();
        let requests = match &entry.requests {
            Err(e) => {
                let status = status::invalid(&entry.status, e, entry.generation, now);
                let write = status::differs(&entry.status, &status);
                return Decision::Invalid {
                    uid: entry.uid.clone(),
                    resource_version: rv,
                    status,
                    write,
                };
            }
            Ok(r) => r,
        };
        let (request, unknown) = requests.resolve(names);
        let runtime = entry.runtime.clone();
        let q = Query {
            runtime: &runtime,
            request: &request,
            has_unknown: !unknown.is_empty(),
            window: Freshness::new(now, stale),
        };
        let (best, counts) = best_in(runtime_ids, nss, &q);
        let best = best.map(|(n, _)| Arc::clone(n));
        let entry = nss.runs.get(&key.name).expect("present above");

        self.metrics
            .rejections(PendingReason::InsufficientCapacity, counts.insufficient);
        self.metrics
            .rejections(PendingReason::ResourceNotDeclared, counts.not_declared);
        self.metrics
            .rejections(PendingReason::RuntimePodUnavailable, counts.unavailable);

        match best {
            Some(pod) => {
                let slot = nss.pods.get_mut(&pod).expect("best pod has a slot");
                let pod_uid = slot
                    .pod
                    .as_ref()
                    .map(|p| p.cold.facts.uid.clone())
                    .unwrap_or_default();
                slot.res.add_assumed(&request);
                let status =
                    status::scheduled(&entry.status, &pod, &pod_uid, entry.generation, now);
                let uid = entry.uid.clone();
                nss.assumed.insert(
                    uid.clone(),
                    Assumption {
                        run: key.name.clone(),
                        pod: Arc::clone(&pod),
                        amounts: request,
                    },
                );
                self.metrics.assumed_reservations.inc();
                Decision::Reserved {
                    uid,
                    pod: pod.to_string(),
                    resource_version: rv,
                    status,
                }
            }
            None => {
                let reason = counts.pending_reason();
                if counts.total_pods == 0 {
                    self.metrics.rejections(reason, 1);
                }
                let message = counts.message(&runtime);
                let status =
                    status::pending(&entry.status, reason, &message, entry.generation, now);
                let write = status::differs(&entry.status, &status);
                Decision::Pending {
                    uid: entry.uid.clone(),
                    reason,
                    resource_version: rv,
                    status,
                    write,
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

    /// Dry-run placement of a request against the current snapshot, with
    /// owned results.
    pub fn plan(
        &self,
        namespace: &str,
        runtime: &str,
        requests: &Requests,
        now: Timestamp,
    ) -> PlanResult {
        self.plan_with(namespace, runtime, requests, now, |o| PlanResult {
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
        })
    }

    /// Dry-run placement; `f` reads the outcome while the snapshot is held,
    /// so pod names are borrowed, not copied.
    pub fn plan_with<R>(
        &self,
        namespace: &str,
        runtime: &str,
        requests: &Requests,
        now: Timestamp,
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
        if let Some(nss) = st.namespaces.get(namespace) {
            let has_unknown = !outcome.unknown.is_empty();
            let q = Query {
                runtime,
                request: &request,
                has_unknown,
                window: Freshness::new(now, stale),
            };
            for_each_pod(&st.runtime_ids, nss, &q, |name, _, r| {
                outcome.counts.total_pods += 1;
                match r {
                    Ok(score) => outcome.feasible.push((&**name, score)),
                    Err(rej) => {
                        outcome.counts.record(&rej);
                        outcome.rejected.push((&**name, rej));
                    }
                }
            });
        }
        // Stable sort keeps name order among equal loads.
        outcome.feasible.sort_by(|a, b| a.1.cmp_load(&b.1));
        f(&outcome)
    }

    /// Whether Run `uid` in `namespace` holds an assumed reservation, and where.
    pub fn assumed_pod(&self, namespace: &str, uid: &str) -> Option<String> {
        let st = self.state.read();
        st.namespaces
            .get(namespace)?
            .assumed
            .get(uid)
            .map(|a| a.pod.to_string())
    }

    /// The stored status of a Run (for callers that re-check before writing).
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
            if let Some((p, _)) = actual.into_iter().find(|(_, v)| !v.is_empty()) {
                return Err(format!("{ns}/{p}: usage counted on a pod without a slot"));
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
        released_on.push(Arc::clone(pod));
    }
    if let Some(set) = nss.pending.get_mut(&old.runtime) {
        set.remove(name);
        if set.is_empty() {
            nss.pending.remove(&old.runtime);
        }
    }
}
