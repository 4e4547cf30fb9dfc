//! The hold coordinator bind uses for gangs, and group status writes.
//!
//! ```text
//!   bind(member) ── assume on node ──▶ hold: unit at quorum? ── yes ──▶ release every held
//!                                        │ no                           member of the unit; bind
//!                                        ▼
//!                      held until quorum (then bind) or --gang-wait since the
//!                      unit's first hold (then every held member is forgotten
//!                      from the cache and its bind returns Error)
//! ```
//!
//! A *unit* is what a member waits for: its PodGroup, or the outermost gang
//! CompositePodGroup above it (a gang of gangs). Quorum is evaluated from the
//! cache snapshot under the coordinator's lock, after the member's own
//! assumption, so of two concurrent binds the later always sees the earlier:
//! no member is left waiting for a quorum that was already reached, and no
//! member is bound below quorum.
//!
//! Status: `PodGroupInitiallyScheduled` (`CompositePodGroupInitiallyScheduled`
//! for composites) is set `True` once a group's quorum is bound, and `False`
//! with reason `Unschedulable` while filter cannot place it or when its wait
//! expires. Writes happen only when the condition changes, and never after
//! `True` (the condition is terminal). What was written is remembered per
//! group *object* (by uid): a PodGroup deleted and created again under its
//! name gets its conditions written again, and entries of groups gone are
//! swept as the table grows.
//!
//! Cancellation: a bind future dropped while its member is held takes the
//! member out of its unit and forgets its assumption under the table's
//! lock (a drop guard), so a cancelled member never counts toward quorum
//! and a unit without members does not stay in the table.

use crate::cache::cluster_index::ClusterIndex;
use crate::cluster::{ClusterWriter, EventKind, EventReason, ObjectRef};
use crate::extender::gang::{self, GangPlanner, bounded};
use crate::model::refs::GroupRef;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Default `--gang-wait`.
pub const DEFAULT_GANG_WAIT: Duration = Duration::from_secs(20);
/// Condition type on PodGroups.
pub const POD_GROUP_SCHEDULED: &str = "PodGroupInitiallyScheduled";
/// Condition type on CompositePodGroups.
pub const COMPOSITE_SCHEDULED: &str = "CompositePodGroupInitiallyScheduled";
/// Reason of the condition while a group cannot be placed.
pub const UNSCHEDULABLE: &str = "Unschedulable";
/// Reason of the condition once quorum is bound.
pub const SCHEDULED: &str = "Scheduled";
/// Event reason when a gang's wait expires.
pub const WAIT_EXPIRED: EventReason = EventReason::GangWaitExpired;

/// Where a unit's held members stand.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Waiting,
    Go,
    Expired(String),
}

/// Members of one unit held in bind.
struct Unit {
    /// Distinguishes a unit from a later one of the same group.
    generation: u64,
    deadline: Instant,
    /// `(namespace, pod)` held.
    held: BTreeSet<(String, String)>,
    tx: watch::Sender<Outcome>,
}

/// Why the hold failed a bind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HoldFailure {
    /// The group hierarchy is broken (a parent cycle, deeper than the
    /// limit): the member is refused, never held.
    #[error("{0}")]
    Hierarchy(String),
    /// `--gang-wait` ran out: every held member of the unit was released.
    #[error("{0}")]
    Expired(String),
    /// The unit's wait ended without quorum or expiry.
    #[error("{0}")]
    Ended(String),
}

/// A member in its unit's held set while its bind waits. Dropped before
/// the wait ended (the bind future was cancelled), it takes the member
/// out of the set and forgets its assumption under the table's lock, so
/// no quorum evaluated afterwards counts it, and removes the unit with its
/// last member.
struct Waiter<'a> {
    gangs: &'a Gangs,
    nodes: &'a ClusterIndex,
    unit: GroupRef,
    generation: u64,
    /// `(namespace, pod)`.
    member: (String, String),
    /// The wait ended through the unit's outcome: nothing to undo.
    done: bool,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut units = self.gangs.units.lock();
        if let Some(u) = units.get_mut(&self.unit)
            && u.generation == self.generation
        {
            u.held.remove(&self.member);
            if u.held.is_empty() {
                units.remove(&self.unit);
            }
        }
        self.nodes.forget(&self.member.0, &self.member.1);
        drop(units);
        tracing::debug!(unit = %self.unit, pod = %format!("{}/{}", self.member.0, self.member.1), "held gang member cancelled");
    }
}

/// How a bind passed the quorum hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Not a member of a gang still short of quorum: never held.
    Free,
    /// This member completed the quorum on arrival.
    Quorum,
    /// Held, then released by the quorum.
    Waited,
}

/// The last condition written to a group object.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Written {
    /// The group object's uid.
    uid: String,
    status: bool,
    reason: String,
    message: String,
}

/// What was written, per group, bounded by the groups that exist: swept
/// of groups gone (or replaced) whenever it doubles.
#[derive(Debug)]
struct WrittenTable {
    by_group: HashMap<GroupRef, Written>,
    /// Sweep when the table grows past this.
    sweep_at: usize,
}

/// The smallest size that starts a sweep.
const MIN_SWEEP: usize = 1024;

/// The coordinator. Share it behind an `Arc`.
pub struct Gangs {
    wait: Duration,
    units: Mutex<HashMap<GroupRef, Unit>>,
    generation: AtomicU64,
    /// The last condition written per group object.
    written: Mutex<WrittenTable>,
    /// The domain plans of groups not placed yet (dropped on quorum).
    planner: Arc<GangPlanner>,
}

impl Default for Gangs {
    fn default() -> Self {
        Gangs::new(DEFAULT_GANG_WAIT)
    }
}

// === impl Gangs ===

impl Gangs {
    pub fn new(wait: Duration) -> Self {
        Gangs {
            wait,
            units: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
            written: Mutex::new(WrittenTable {
                by_group: HashMap::new(),
                sweep_at: MIN_SWEEP,
            }),
            planner: Arc::default(),
        }
    }

    /// The gang planner filter and prioritize consult.
    pub fn planner(&self) -> &Arc<GangPlanner> {
        &self.planner
    }

    /// `--gang-wait`.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// Members held now, over all units.
    pub fn held(&self) -> usize {
        self.units.lock().values().map(|u| u.held.len()).sum()
    }

    /// Units with members held now.
    pub fn units(&self) -> usize {
        self.units.lock().len()
    }

    /// Groups whose last written condition is remembered.
    pub fn written(&self) -> usize {
        self.written.lock().by_group.len()
    }

    /// Whether a member is held now.
    #[cfg(any(test, feature = "testkit"))]
    pub fn is_held(&self, namespace: &str, pod: &str) -> bool {
        let member = (namespace.to_owned(), pod.to_owned());
        self.units.lock().values().any(|u| u.held.contains(&member))
    }

    /// Holds a member already assumed on its node until its unit reaches
    /// quorum (`Ok`: bind it) or the wait expires (`Err`: the bind's Error;
    /// the member and every other held one were forgotten from the cache).
    ///
    /// Cancellation: dropped while held, the member leaves its unit's held
    /// set and is forgotten from the cache under the table's lock, so no
    /// quorum evaluated later counts it; a unit whose last member left is
    /// removed (nothing stays in the table).
    pub async fn hold(
        &self,
        nodes: &ClusterIndex,
        writer: &dyn ClusterWriter,
        namespace: &str,
        pod: &str,
    ) -> Result<Held, HoldFailure> {
        let (mut rx, mut waiter, deadline) = {
            let mut units = self.units.lock();
            let q = gang::quorum(&nodes.read(), namespace, pod).map_err(HoldFailure::Hierarchy)?;
            let Some(q) = q else { return Ok(Held::Free) };
            if q.reached {
                if let Some(u) = units.remove(&q.unit) {
                    u.tx.send_replace(Outcome::Go);
                }
                drop(units);
                let snap = nodes.read();
                gang::drop_plans(&self.planner, &gang::tree_of(&snap, &q.unit));
                return Ok(Held::Quorum);
            }
            let generation = self.generation.fetch_add(1, Ordering::Relaxed);
            let wait = self.wait;
            let u = units.entry(q.unit.clone()).or_insert_with(|| Unit {
                generation,
                deadline: Instant::now() + wait,
                held: BTreeSet::new(),
                tx: watch::channel(Outcome::Waiting).0,
            });
            let member = (namespace.to_owned(), pod.to_owned());
            u.held.insert(member.clone());
            tracing::debug!(unit = %q.unit, have = q.have, need = q.need, pod = %format!("{namespace}/{pod}"), "holding gang member");
            let waiter = Waiter {
                gangs: self,
                nodes,
                unit: q.unit,
                generation: u.generation,
                member,
                done: false,
            };
            (u.tx.subscribe(), waiter, u.deadline)
        };
        // From here every return leaves the table through the unit's
        // outcome (quorum or expiry); only a drop mid-wait goes through
        // the waiter.
        let unit = waiter.unit.clone();
        let ended = || HoldFailure::Ended(format!("{unit}: the wait for quorum ended"));
        let result = loop {
            let now = rx.borrow_and_update().clone();
            match now {
                Outcome::Go => break Ok(Held::Waited),
                Outcome::Expired(m) => break Err(HoldFailure::Expired(m)),
                Outcome::Waiting => {}
            }
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() && *rx.borrow() == Outcome::Waiting {
                        break Err(ended());
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {
                    // Under the table's lock the unit is gone (with every
                    // member forgotten) before the writes below.
                    if let Some(w) = self.expire_now(nodes, &unit, waiter.generation) {
                        waiter.done = true;
                        self.record_expiry(nodes, writer, &unit, &w).await;
                    }
                    // The outcome is now Expired (or Go, if quorum won the race).
                    let now = rx.borrow().clone();
                    break match now {
                        Outcome::Go => Ok(Held::Waited),
                        Outcome::Expired(m) => Err(HoldFailure::Expired(m)),
                        Outcome::Waiting => Err(ended()),
                    };
                }
            }
        };
        waiter.done = true;
        result
    }

    /// Ends a unit's wait: forgets every held member (capacity visible to
    /// the next cycle at once) and fails their binds. `None` when that unit
    /// (that generation) is no longer waiting.
    fn expire_now(&self, nodes: &ClusterIndex, unit: &GroupRef, generation: u64) -> Option<String> {
        let mut units = self.units.lock();
        match units.get(unit) {
            Some(u) if u.generation == generation => {}
            _ => return None,
        }
        let u = units.remove(unit)?;
        let (have, need) = gang::quorum(
            &nodes.read(),
            &u.held.first().map(|k| k.0.clone()).unwrap_or_default(),
            &u.held.first().map(|k| k.1.clone()).unwrap_or_default(),
        )
        .ok()
        .flatten()
        .map_or((0, 0), |q| (q.have, q.need));
        // Under the lock: a bind evaluating quorum next sees them gone.
        for (ns, name) in &u.held {
            nodes.forget(ns, name);
        }
        let message = bounded(format!(
            "{unit}: quorum not reached within {} ({have} of {need} placed); released {} held pods",
            humantime::format_duration(self.wait),
            u.held.len()
        ));
        u.tx.send_replace(Outcome::Expired(message.clone()));
        Some(message)
    }

    /// Records an expired wait: an Event and the Unschedulable condition.
    async fn record_expiry(
        &self,
        nodes: &ClusterIndex,
        writer: &dyn ClusterWriter,
        unit: &GroupRef,
        message: &str,
    ) {
        tracing::info!(%unit, %message, "gang wait expired");
        let uid = uid_of(nodes, unit);
        writer
            .record_event(
                &ObjectRef::group(unit, uid.as_deref()),
                EventKind::Warning,
                WAIT_EXPIRED,
                message,
            )
            .await;
        self.set_condition(nodes, writer, unit, None, false, UNSCHEDULABLE, message)
            .await;
    }

    /// After a member was bound: marks every group of its unit that reached
    /// quorum as initially scheduled.
    pub async fn bound(
        &self,
        nodes: &ClusterIndex,
        writer: &dyn ClusterWriter,
        namespace: &str,
        pod: &str,
    ) {
        let q = gang::quorum(&nodes.read(), namespace, pod).ok().flatten();
        let Some(q) = q.filter(|q| q.reached) else {
            return;
        };
        for g in &q.satisfied {
            let what = if g.composite { "child groups" } else { "pods" };
            let (have, need) = if *g == q.unit {
                (q.have, q.need)
            } else {
                (0, 0)
            };
            let message = if need > 0 {
                format!("quorum bound: {have} of {need} {what}")
            } else {
                "quorum bound".to_owned()
            };
            self.set_condition(nodes, writer, g, None, true, SCHEDULED, &message)
                .await;
        }
    }

    /// Publishes the reasons filter recorded for groups it could not place
    /// (`Unschedulable` conditions), in the background.
    pub fn publish(self: &Arc<Self>, nodes: &Arc<ClusterIndex>, writer: &Arc<dyn ClusterWriter>) {
        let notes = self.planner.take_notes();
        if notes.is_empty() {
            return;
        }
        let (me, nodes, writer) = (Arc::clone(self), Arc::clone(nodes), Arc::clone(writer));
        tokio::spawn(async move {
            for (g, note) in notes {
                // Written only to the group object the note was made for.
                let Some(uid) = note.uid.as_deref() else {
                    continue;
                };
                me.set_condition(
                    &nodes,
                    writer.as_ref(),
                    &g,
                    Some(uid),
                    false,
                    UNSCHEDULABLE,
                    &note.message,
                )
                .await;
            }
        });
    }

    /// Writes a group's condition when it differs from what the cache shows
    /// and from the last write to that group object; never after `True`.
    /// With `only_uid`, only to the group object with that uid.
    #[allow(clippy::too_many_arguments)]
    pub async fn set_condition(
        &self,
        nodes: &ClusterIndex,
        writer: &dyn ClusterWriter,
        group: &GroupRef,
        only_uid: Option<&str>,
        status: bool,
        reason: &str,
        message: &str,
    ) {
        let message = bounded(message.to_owned());
        let type_ = if group.composite {
            COMPOSITE_SCHEDULED
        } else {
            POD_GROUP_SCHEDULED
        };
        let (current, generation, uid) = {
            let snap = nodes.read();
            let (conds, meta) = if group.composite {
                let Some(c) = snap.composite(&group.namespace, &group.name) else {
                    return;
                };
                (
                    c.status.as_ref().and_then(|s| s.conditions.clone()),
                    &c.metadata,
                )
            } else {
                let Some(g) = snap.group(&group.namespace, &group.name) else {
                    return;
                };
                (
                    g.status.as_ref().and_then(|s| s.conditions.clone()),
                    &g.metadata,
                )
            };
            (
                conds.into_iter().flatten().find(|c| c.type_ == type_),
                meta.generation,
                meta.uid.clone().unwrap_or_default(),
            )
        };
        if only_uid.is_some_and(|u| u != uid) {
            return;
        }
        let want = Written {
            uid: uid.clone(),
            status,
            reason: reason.to_owned(),
            message: message.clone(),
        };
        if let Some(c) = &current {
            if c.status == "True" {
                return;
            }
            if (c.status == "True") == status && c.reason == reason && c.message == message {
                return;
            }
        }
        {
            let mut w = self.written.lock();
            match w.by_group.get(group) {
                // What this group object was last given (another uid: a
                // group of the same name that is gone).
                Some(prev) if prev.uid == uid && prev.status => return,
                Some(prev) if *prev == want => return,
                _ => {}
            }
            w.by_group.insert(group.clone(), want);
            if w.by_group.len() > w.sweep_at {
                let snap = nodes.read();
                w.by_group.retain(|g, written| {
                    let meta = if g.composite {
                        snap.composite(&g.namespace, &g.name).map(|c| &c.metadata)
                    } else {
                        snap.group(&g.namespace, &g.name).map(|c| &c.metadata)
                    };
                    meta.and_then(|m| m.uid.as_deref()) == Some(written.uid.as_str())
                });
                w.sweep_at = (w.by_group.len() * 2).max(MIN_SWEEP);
            }
        }
        let now = k8s_openapi::jiff::Timestamp::now();
        let transition = match &current {
            Some(c) if (c.status == "True") == status => c.last_transition_time.clone(),
            _ => Time(now),
        };
        let condition = Condition {
            type_: type_.to_owned(),
            status: if status { "True" } else { "False" }.to_owned(),
            reason: reason.to_owned(),
            message,
            last_transition_time: transition,
            observed_generation: generation,
        };
        if let Err(e) = writer.write_group_condition(group, &condition).await {
            tracing::warn!(%group, error = %e, "writing the group condition failed");
            self.written.lock().by_group.remove(group);
        }
    }
}

fn uid_of(nodes: &ClusterIndex, g: &GroupRef) -> Option<String> {
    let snap = nodes.read();
    if g.composite {
        snap.composite(&g.namespace, &g.name)?.metadata.uid.clone()
    } else {
        snap.group(&g.namespace, &g.name)?.metadata.uid.clone()
    }
}
