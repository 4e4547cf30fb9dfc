//! The follow-up evictor of `All` disruption across nodes.
//!
//! kube-scheduler's extender protocol lets preempt name victims only on the
//! candidate node, so a PodGroup with `disruptionMode: {all: {}}` (or the
//! PodGroups beneath a CompositePodGroup with `all`) that runs on several
//! nodes cannot be preempted whole in one answer. Preempt
//! ([`super::preempt::plan_preempt`]) therefore answers with the members on
//! the candidate node and hands an [`Intent`] per candidate to
//! [`Evictions`]: the members running elsewhere. The evictor task
//! ([`Evictions::run`]) then follows the pod watch (through the cluster
//! index):
//!
//! ```text
//!   preempt ──Intent──▶ pending (bounded, expires after intent_ttl)
//!                          │ kube-scheduler chose the node (the preemptor's
//!                          │ nominatedNodeName, or it is bound there, seen
//!                          │ since; or a relist since the answer) and
//!                          │ every victim on it is deleted
//!                          │ (gone, replaced, finished or terminating)
//!                          ▼
//!                       job: condition DisruptionTarget=True on the groups,
//!                          │ evict each remaining running member through
//!                          │ the Eviction API; 429 (PodDisruptionBudget)
//!                          │ and other failures retried with backoff
//!                          ▼
//!                       done: Warning Event + condition message; or, after
//!                       give_up_after, EvictionIncomplete
//! ```
//!
//! Candidates kube-scheduler did not choose never see their victims
//! deleted and expire; once one intent of a preemptor fires, its intents
//! on other nodes are dropped (kube-scheduler preempts on one node at a
//! time) unless kube-scheduler was seen choosing them too, or a relist
//! may have hidden that.
//! The disruption is eventual, not atomic: between the victims' deletion
//! and the last eviction the group runs partly.

use crate::cache::cluster_index::{ClusterIndex, ClusterState, Scope};
pub use crate::cluster::PodId;
use crate::cluster::{ClusterWriter, EventKind, EventReason, EvictError, ObjectRef};
use crate::metrics::{EvictionResult, Metrics};
use crate::model::refs::{GroupRef, truncate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The group condition recording the disruption.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
/// Its reason while the members are evicted and once they are.
pub const PREEMPTED: &str = "PreemptionByScheduler";
/// Its reason (and the Event's) when members could not be evicted within
/// [`EvictConfig::give_up_after`].
pub const INCOMPLETE: &str = "EvictionIncomplete";
/// The reason of the Warning Event once every member is evicted.
pub const EVENT_PREEMPTED: &str = "Preempted";
/// Pods named in one message at most (then "and N more").
const NAMED: usize = 8;
/// Longest condition message.
const MAX_CONDITION_MESSAGE: usize = 1024;

/// What preempt hands the evictor for one candidate and `All` scope whose
/// members also run on other nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    /// The pod preempting.
    pub preemptor: PodId,
    /// Its effective priority.
    pub preemptor_priority: i32,
    /// The candidate node.
    pub node: String,
    /// Namespace of the scope.
    pub namespace: String,
    /// The `All` scope (a PodGroup, or a CompositePodGroup's PodGroups).
    pub scope: Scope,
    /// The scope's members on the node: victims in the answer.
    pub victims: Vec<PodId>,
    /// The scope's members running on other nodes when preempt answered.
    pub elsewhere: Vec<PodId>,
}

impl Intent {
    fn key(&self) -> (&str, &str, &str, &Scope) {
        (
            self.preemptor.uid.as_str(),
            self.node.as_str(),
            self.namespace.as_str(),
            &self.scope,
        )
    }

    /// The object the scope is named after.
    fn scope_ref(&self) -> Option<GroupRef> {
        match &self.scope {
            Scope::Single => None,
            Scope::Group(g) => Some(GroupRef::group(&self.namespace, g)),
            Scope::Composite(c) => Some(GroupRef::composite(&self.namespace, c)),
        }
    }
}

/// Timings and bounds of the evictor.
#[derive(Debug, Clone, Copy)]
pub struct EvictConfig {
    /// First retry of a refused or failed eviction; doubles per attempt.
    pub retry_base: Duration,
    /// Longest wait between two attempts at one pod.
    pub retry_max: Duration,
    /// A job still holding members this long after it started gives up
    /// (`EvictionIncomplete`).
    pub give_up_after: Duration,
    /// An intent whose victims are not deleted within this was for a
    /// candidate kube-scheduler did not choose, and is dropped.
    pub intent_ttl: Duration,
    /// Intents kept at most; the oldest go first.
    pub max_intents: usize,
    /// Jobs (groups being evicted) at once at most; an intent firing beyond
    /// this is logged and dropped.
    pub max_jobs: usize,
}

impl Default for EvictConfig {
    fn default() -> Self {
        EvictConfig {
            retry_base: Duration::from_millis(500),
            retry_max: Duration::from_secs(30),
            give_up_after: Duration::from_secs(600),
            intent_ttl: Duration::from_secs(300),
            max_intents: 4096,
            max_jobs: 1024,
        }
    }
}

/// An intent waiting for its victims' deletion.
#[derive(Debug)]
struct Pending {
    intent: Intent,
    expires: Instant,
    /// The watch has shown the preemptor (under its uid) since: only then
    /// does its absence mean it was deleted rather than not seen yet.
    seen: bool,
    /// The watch has shown kube-scheduler choosing the node ([`chosen`])
    /// since. It need not show it still when the victims' deletion
    /// arrives: after a relist the preemptor may be nominated nowhere (a
    /// failed binding cycle clears it) or bound on another node, its
    /// victims here deleted all the same (simulation seed 40124).
    chose: bool,
    /// Pod relists the cache had completed when the evictor first saw the
    /// intent ([`ClusterIndex::pod_relists`]).
    relists: Option<u64>,
}

impl Pending {
    /// Whether the preemptor can no longer choose the intent's node, as
    /// the watch shows it (an assumption, a bind in flight or one whose
    /// outcome is unknown, is not a pod bound elsewhere): gone or replaced
    /// by another pod under its name (once the watch has shown it, else it
    /// may not be seen yet), finished or
    /// terminating, or (the same pod) bound on another node. Notes when
    /// the watch shows it.
    fn moved_on(&mut self, snap: &ClusterState) -> bool {
        let p = &self.intent.preemptor;
        match snap.watched_pod(&p.namespace, &p.name) {
            None => self.seen,
            // Another pod under its name: once the watch has shown the
            // preemptor, it was deleted (a name holds one pod at a time,
            // and the watch does not go back), as when it is absent; else
            // the preemptor may not be seen yet, and is left to expire
            // (simulation seed 67059: replaced between two reads of the
            // watch, its intent outlived it by the intent's whole TTL).
            Some(e) if !p.uid.is_empty() && e.uid != p.uid => self.seen,
            Some(e) => {
                self.seen = true;
                e.terminal || e.deleting || e.node.as_deref().is_some_and(|n| n != self.intent.node)
            }
        }
    }
}

/// The intents preempt recorded and the evictor has not fired yet.
#[derive(Debug, Default)]
struct Table {
    /// In arrival order.
    pending: Vec<Pending>,
}

/// The pending-eviction table and the evictor's configuration; shared by
/// the preempt handler (which adds) and the evictor task.
#[derive(Debug)]
pub struct Evictions {
    config: EvictConfig,
    table: Mutex<Table>,
    /// Woken when intents are added.
    added: tokio::sync::Notify,
}

impl Default for Evictions {
    fn default() -> Self {
        Evictions::new(EvictConfig::default())
    }
}

/// One pod to evict.
#[derive(Debug)]
struct Target {
    pod: PodId,
    /// Its node when the job started (for the messages).
    node: String,
    attempts: u32,
    next: Instant,
    last_error: Option<String>,
}

/// A scope being evicted.
#[derive(Debug)]
struct Job {
    intent: Intent,
    targets: Vec<Target>,
    evicted: Vec<(PodId, String)>,
    /// Members already gone (deleted, replaced, finished) when their turn came.
    vanished: usize,
    /// PodDisruptionBudget refusals (429) so far.
    refusals: u32,
    started: Time,
    give_up_at: Instant,
    /// The group objects the condition is written to, with their uid and
    /// generation when the job started.
    groups: Vec<(GroupRef, String, Option<i64>)>,
}

/// Whether kube-scheduler chose the intent's node, as the watch shows: the
/// preemptor (same uid) is nominated there (`status.nominatedNodeName`, set
/// when kube-scheduler preempts) or already bound there (or assumed there
/// by a bind of this extender). Victims deleted for another reason (a
/// member restarted by its controller) therefore never fire an intent.
/// The nomination is read from the watch's version of the pod: an earlier
/// bind's assumption (kept after an uncertain answer) is a copy from
/// before kube-scheduler nominated it (simulation seed 541).
fn chosen(snap: &ClusterState, i: &Intent) -> bool {
    let p = &i.preemptor;
    let same = |e: &crate::cache::cluster_index::PodEntry| p.uid.is_empty() || e.uid == p.uid;
    let here = Some(i.node.as_str());
    snap.watched_pod(&p.namespace, &p.name)
        .is_some_and(|e| same(e) && (e.nominated.as_deref() == here || e.node.as_deref() == here))
        || snap
            .pod(&p.namespace, &p.name)
            .is_some_and(|e| same(e) && e.node.as_deref() == here)
}

/// Whether a victim has been deleted as far as the watch shows: gone,
/// replaced (another uid), finished or terminating.
fn deleted(snap: &ClusterState, p: &PodId) -> bool {
    match snap.watched_pod(&p.namespace, &p.name) {
        None => true,
        Some(e) => (!p.uid.is_empty() && e.uid != p.uid) || e.terminal || e.deleting,
    }
}

/// `a, b, c and 3 more`.
fn names<'a>(pods: impl ExactSizeIterator<Item = String> + 'a) -> String {
    let n = pods.len();
    let mut s: Vec<String> = pods.take(NAMED).collect();
    if n > NAMED {
        s.push(format!("and {} more", n - NAMED));
    }
    s.join(", ")
}

// === impl Evictions ===

impl Evictions {
    pub fn new(config: EvictConfig) -> Self {
        Evictions {
            config,
            table: Mutex::new(Table::default()),
            added: tokio::sync::Notify::new(),
        }
    }

    pub fn config(&self) -> &EvictConfig {
        &self.config
    }

    /// Records the intents of one preempt answer. An intent for the same
    /// preemptor, node and scope replaces the earlier one; beyond
    /// `max_intents` the oldest are dropped.
    pub fn expect(&self, intents: Vec<Intent>) {
        if intents.is_empty() {
            return;
        }
        let expires = Instant::now() + self.config.intent_ttl;
        {
            let mut t = self.table.lock();
            for intent in intents {
                t.pending.retain(|p| p.intent.key() != intent.key());
                t.pending.push(Pending {
                    intent,
                    expires,
                    seen: false,
                    chose: false,
                    relists: None,
                });
            }
            let over = t.pending.len().saturating_sub(self.config.max_intents);
            if over > 0 {
                tracing::warn!(
                    dropped = over,
                    "too many pending All-disruption evictions; dropping the oldest"
                );
                t.pending.drain(..over);
            }
        }
        self.added.notify_one();
    }

    /// Intents waiting for their victims' deletion.
    pub fn pending(&self) -> usize {
        self.table.lock().pending.len()
    }

    /// The evictor task: fires intents as the pod watch shows their victims
    /// deleted and evicts the remaining members, counting each attempt in
    /// `kruntimes_disruption_evictions_total`; never returns.
    pub async fn run(
        self: Arc<Self>,
        nodes: Arc<ClusterIndex>,
        writer: Arc<dyn ClusterWriter>,
        metrics: Arc<Metrics>,
    ) {
        let mut jobs: Vec<Job> = Vec::new();
        loop {
            let changed = nodes.pod_changes().notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let added = self.added.notified();
            tokio::pin!(added);
            added.as_mut().enable();
            let next = self
                .step(&nodes, writer.as_ref(), &metrics, &mut jobs)
                .await;
            let sleep = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = changed => {}
                _ = added => {}
                _ = sleep => {}
            }
        }
    }

    /// One pass: prunes and fires intents, attempts due evictions, finishes
    /// jobs. Returns when the next attempt or expiry is due.
    async fn step(
        &self,
        nodes: &ClusterIndex,
        writer: &dyn ClusterWriter,
        metrics: &Metrics,
        jobs: &mut Vec<Job>,
    ) -> Option<Instant> {
        let now = Instant::now();
        let started = self.fire(nodes, jobs, now);
        for i in started {
            write_conditions(writer, &jobs[i], PREEMPTED, &progress_message(&jobs[i])).await;
        }
        for job in jobs.iter_mut() {
            self.attempt(nodes, writer, metrics, job, now).await;
        }
        let mut i = 0;
        while i < jobs.len() {
            let job = &jobs[i];
            if job.targets.is_empty() {
                let job = jobs.swap_remove(i);
                finish(writer, &job).await;
            } else if Instant::now() >= job.give_up_at {
                let job = jobs.swap_remove(i);
                metrics.disruption_eviction(EvictionResult::GaveUp);
                give_up(writer, &job).await;
            } else {
                i += 1;
            }
        }
        let next_target = jobs
            .iter()
            .flat_map(|j| j.targets.iter().map(|t| t.next).chain([j.give_up_at]))
            .min();
        let next_expiry = self.table.lock().pending.iter().map(|p| p.expires).min();
        next_target.into_iter().chain(next_expiry).min()
    }

    /// Drops expired intents and turns those whose victims are deleted into
    /// jobs; returns the indexes of the new jobs.
    fn fire(&self, nodes: &ClusterIndex, jobs: &mut Vec<Job>, now: Instant) -> Vec<usize> {
        let snap = nodes.read();
        let mut t = self.table.lock();
        let relists = nodes.pod_relists();
        for p in t.pending.iter_mut() {
            p.chose = p.chose || chosen(&snap, &p.intent);
            // A relist since the intent may have hidden the choice: the
            // nomination and its clearing (a failed binding cycle) both
            // fell in the watch's gap, and kube-scheduler may since have
            // preempted for the same pod on another node (seed 2077). The
            // victims on the node all deleted are then the choice's trace,
            // whatever the preemptor's nomination now.
            let first = *p.relists.get_or_insert(relists);
            p.chose = p.chose || relists > first;
        }
        // Fires once kube-scheduler chose the node (now or before) and the
        // victims there are deleted, wherever the preemptor went since.
        let (fired, rest): (Vec<Pending>, Vec<Pending>) =
            std::mem::take(&mut t.pending).into_iter().partition(|p| {
                p.expires > now && p.chose && p.intent.victims.iter().all(|v| deleted(&snap, v))
            });
        t.pending = rest;
        // Expired, or never to fire: the preemptor is gone, finished or
        // terminating, or bound on another node.
        t.pending
            .retain_mut(|p| p.expires > now && !p.moved_on(&snap));
        // kube-scheduler preempts on one node at a time: the preemptor's
        // other candidates were not chosen, unless the watch showed it
        // choosing one of them too (it preempted again after its
        // nomination was cleared) or a relist may have hidden that
        // (seed 2077); those wait for their own victims.
        let fired_for: BTreeSet<(&str, &str)> = fired
            .iter()
            .filter(|p| !p.intent.preemptor.uid.is_empty())
            .map(|p| (p.intent.preemptor.uid.as_str(), p.intent.node.as_str()))
            .collect();
        t.pending.retain(|p| {
            p.chose
                || !fired_for
                    .iter()
                    .any(|(uid, node)| p.intent.preemptor.uid == *uid && p.intent.node != *node)
        });
        drop(t);
        let mut started = Vec::new();
        for Pending { intent, .. } in fired {
            if jobs
                .iter()
                .any(|j| j.intent.namespace == intent.namespace && j.intent.scope == intent.scope)
            {
                continue;
            }
            if jobs.len() >= self.config.max_jobs {
                tracing::warn!(
                    scope = ?intent.scope,
                    namespace = %intent.namespace,
                    "too many All-disruption evictions in progress; not evicting this group's remaining members"
                );
                continue;
            }
            let victims: BTreeSet<(&str, &str)> = intent
                .victims
                .iter()
                .map(|v| (v.namespace.as_str(), v.name.as_str()))
                .collect();
            let members = snap.scope_pods(&intent.namespace, &intent.scope);
            let mut groups: BTreeMap<GroupRef, (String, Option<i64>)> = BTreeMap::new();
            if let Some(
                r @ GroupRef {
                    composite: true, ..
                },
            ) = intent.scope_ref()
                && let Some(c) = snap.composite(&r.namespace, &r.name)
            {
                let uid = c.metadata.uid.clone().unwrap_or_default();
                groups.insert(r, (uid, c.metadata.generation));
            }
            let mut targets = Vec::new();
            for (k, e) in &members {
                if let Some(g) = e.group.as_deref()
                    && let Some(pg) = snap.group(&k.0, g)
                {
                    groups.entry(GroupRef::group(&k.0, g)).or_insert_with(|| {
                        (
                            pg.metadata.uid.clone().unwrap_or_default(),
                            pg.metadata.generation,
                        )
                    });
                }
                if victims.contains(&(k.0.as_str(), k.1.as_str())) || e.deleting {
                    continue;
                }
                targets.push(Target {
                    pod: PodId {
                        namespace: k.0.clone(),
                        name: k.1.clone(),
                        uid: e.uid.clone(),
                    },
                    node: e.node.clone().unwrap_or_default(),
                    attempts: 0,
                    next: now,
                    last_error: None,
                });
            }
            tracing::info!(
                preemptor = %intent.preemptor,
                node = %intent.node,
                namespace = %intent.namespace,
                scope = ?intent.scope,
                remaining = targets.len(),
                "victims of an All group deleted; evicting its members on other nodes"
            );
            jobs.push(Job {
                intent,
                targets,
                evicted: Vec::new(),
                vanished: 0,
                refusals: 0,
                started: Time(k8s_openapi::jiff::Timestamp::now()),
                give_up_at: now + self.config.give_up_after,
                groups: groups
                    .into_iter()
                    .map(|(g, (uid, generation))| (g, uid, generation))
                    .collect(),
            });
            started.push(jobs.len() - 1);
        }
        started
    }

    /// Attempts every due eviction of a job.
    async fn attempt(
        &self,
        nodes: &ClusterIndex,
        writer: &dyn ClusterWriter,
        metrics: &Metrics,
        job: &mut Job,
        now: Instant,
    ) {
        let mut i = 0;
        while i < job.targets.len() {
            if job.targets[i].next > now {
                i += 1;
                continue;
            }
            if deleted(&nodes.read(), &job.targets[i].pod) {
                job.targets.swap_remove(i);
                job.vanished += 1;
                metrics.disruption_eviction(EvictionResult::Vanished);
                continue;
            }
            let result = writer.evict_pod(&job.targets[i].pod).await;
            let t = &mut job.targets[i];
            match result {
                Ok(()) => {
                    metrics.disruption_eviction(EvictionResult::Evicted);
                    tracing::info!(pod = %t.pod, node = %t.node, preemptor = %job.intent.preemptor, "evicted a member of an All group");
                    let t = job.targets.swap_remove(i);
                    job.evicted.push((t.pod, t.node));
                    continue;
                }
                Err(EvictError::Gone(_) | EvictError::Replaced(_)) => {
                    metrics.disruption_eviction(EvictionResult::Vanished);
                    job.targets.swap_remove(i);
                    job.vanished += 1;
                    continue;
                }
                Err(e) => {
                    if matches!(e, EvictError::Refused { .. }) {
                        job.refusals += 1;
                        metrics.disruption_eviction(EvictionResult::Refused);
                    } else {
                        metrics.disruption_eviction(EvictionResult::Failed);
                    }
                    t.attempts += 1;
                    let shift = t.attempts.saturating_sub(1).min(16);
                    let delay = self
                        .config
                        .retry_base
                        .saturating_mul(1 << shift)
                        .min(self.config.retry_max);
                    tracing::info!(pod = %t.pod, error = %e, retry_in = ?delay, "eviction not done; retrying");
                    t.next = Instant::now() + delay;
                    t.last_error = Some(e.to_string());
                    i += 1;
                }
            }
        }
    }
}

/// What was preempted, by whom, where.
fn cause(j: &Job) -> String {
    let what = match &j.intent.scope {
        Scope::Composite(c) => format!("the PodGroups beneath CompositePodGroup {c}"),
        Scope::Group(g) => format!("PodGroup {g}"),
        Scope::Single => "the pods".to_owned(),
    };
    format!(
        "disruptionMode All: kube-scheduler preempted {} on node {} for pod {} (priority {}), so {what} go whole",
        names(j.intent.victims.iter().map(|p| p.name.clone())),
        j.intent.node,
        j.intent.preemptor,
        j.intent.preemptor_priority,
    )
}

fn progress_message(j: &Job) -> String {
    format!(
        "{}; evicting the {} members running on other nodes: {}",
        cause(j),
        j.targets.len(),
        names(
            j.targets
                .iter()
                .map(|t| format!("{} on {}", t.pod.name, t.node))
        ),
    )
}

fn done_message(j: &Job) -> String {
    let mut s = format!(
        "{}; evicted {} members on other nodes: {}",
        cause(j),
        j.evicted.len(),
        names(j.evicted.iter().map(|(p, n)| format!("{} on {n}", p.name))),
    );
    if j.vanished > 0 {
        s.push_str(&format!("; {} were already gone", j.vanished));
    }
    if j.refusals > 0 {
        s.push_str(&format!(
            "; {} refusals by a PodDisruptionBudget were retried",
            j.refusals
        ));
    }
    s
}

async fn write_conditions(writer: &dyn ClusterWriter, j: &Job, reason: &str, message: &str) {
    let message = truncate(message.to_owned(), MAX_CONDITION_MESSAGE);
    for (g, _, generation) in &j.groups {
        let condition = Condition {
            type_: DISRUPTION_TARGET.to_owned(),
            status: "True".to_owned(),
            reason: reason.to_owned(),
            message: message.clone(),
            last_transition_time: j.started.clone(),
            observed_generation: *generation,
        };
        if let Err(e) = writer.write_group_condition(g, &condition).await {
            tracing::warn!(group = %g, error = %e, "writing the DisruptionTarget condition failed");
        }
    }
}

/// The object the Event is about: the scope's group object.
fn event_object(j: &Job) -> Option<ObjectRef> {
    let r = j.intent.scope_ref()?;
    let uid = j
        .groups
        .iter()
        .find(|(g, _, _)| *g == r)
        .map(|(_, u, _)| u.as_str());
    Some(ObjectRef::group(&r, uid))
}

async fn finish(writer: &dyn ClusterWriter, j: &Job) {
    let message = done_message(j);
    write_conditions(writer, j, PREEMPTED, &message).await;
    if let Some(o) = event_object(j) {
        writer
            .record_event(&o, EventKind::Warning, EventReason::Preempted, &message)
            .await;
    }
}

async fn give_up(writer: &dyn ClusterWriter, j: &Job) {
    let left = names(j.targets.iter().map(|t| {
        format!(
            "{} on {} ({})",
            t.pod.name,
            t.node,
            t.last_error.as_deref().unwrap_or("not attempted")
        )
    }));
    let message = format!(
        "{}; {} members could not be evicted and still run: {left}",
        done_message(j),
        j.targets.len()
    );
    tracing::warn!(scope = ?j.intent.scope, namespace = %j.intent.namespace, %message, "giving up evicting an All group");
    write_conditions(writer, j, INCOMPLETE, &message).await;
    if let Some(o) = event_object(j) {
        writer
            .record_event(
                &o,
                EventKind::Warning,
                EventReason::EvictionIncomplete,
                &message,
            )
            .await;
    }
}

#[cfg(test)]
mod tests;
