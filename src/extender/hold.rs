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
//! `True` (the condition is terminal).

use super::gang::{self, GangPlanner, bounded};
use crate::cache::nodes::{GroupRef, NodeCache};
use crate::cluster::{ClusterWriter, EventKind, ObjectRef};
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
pub const WAIT_EXPIRED: &str = "GangWaitExpired";

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

/// The coordinator. Share it behind an `Arc`.
pub struct Gangs {
    wait: Duration,
    units: Mutex<HashMap<GroupRef, Unit>>,
    generation: AtomicU64,
    /// The last condition written per group: `(status, reason, message)`.
    written: Mutex<HashMap<GroupRef, (bool, String, String)>>,
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
            written: Mutex::new(HashMap::new()),
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

    /// Holds a member already assumed on its node until its unit reaches
    /// quorum (`Ok`: bind it) or the wait expires (`Err`: the bind's Error;
    /// the member and every other held one were forgotten from the cache).
    pub async fn hold(
        &self,
        nodes: &NodeCache,
        writer: &dyn ClusterWriter,
        namespace: &str,
        pod: &str,
    ) -> Result<Held, String> {
        let (mut rx, generation, deadline, unit) = {
            let mut units = self.units.lock();
            let q = gang::quorum(&nodes.read(), namespace, pod)?;
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
            u.held.insert((namespace.to_owned(), pod.to_owned()));
            tracing::debug!(unit = %q.unit, have = q.have, need = q.need, pod = %format!("{namespace}/{pod}"), "holding gang member");
            (u.tx.subscribe(), u.generation, u.deadline, q.unit)
        };
        loop {
            let now = rx.borrow_and_update().clone();
            match now {
                Outcome::Go => return Ok(Held::Waited),
                Outcome::Expired(m) => return Err(m),
                Outcome::Waiting => {}
            }
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() && *rx.borrow() == Outcome::Waiting {
                        return Err(format!("{unit}: the wait for quorum ended"));
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {
                    self.expire(nodes, writer, &unit, generation).await;
                    // The outcome is now Expired (or Go, if quorum won the race).
                    let now = rx.borrow().clone();
                    return match now {
                        Outcome::Go => Ok(Held::Waited),
                        Outcome::Expired(m) => Err(m),
                        Outcome::Waiting => Err(format!("{unit}: the wait for quorum ended")),
                    };
                }
            }
        }
    }

    /// Ends a unit's wait: forgets every held member (capacity visible to
    /// the next cycle at once) and fails their binds; records an Event and
    /// the Unschedulable condition.
    async fn expire(
        &self,
        nodes: &NodeCache,
        writer: &dyn ClusterWriter,
        unit: &GroupRef,
        generation: u64,
    ) {
        let message = {
            let mut units = self.units.lock();
            match units.get(unit) {
                Some(u) if u.generation == generation => {}
                _ => return,
            }
            let Some(u) = units.remove(unit) else { return };
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
            message
        };
        tracing::info!(%unit, %message, "gang wait expired");
        let uid = uid_of(nodes, unit);
        writer
            .record_event(
                &ObjectRef::group(unit, uid.as_deref()),
                EventKind::Warning,
                WAIT_EXPIRED,
                &message,
            )
            .await;
        self.set_condition(nodes, writer, unit, false, UNSCHEDULABLE, &message)
            .await;
    }

    /// After a member was bound: marks every group of its unit that reached
    /// quorum as initially scheduled.
    pub async fn bound(
        &self,
        nodes: &NodeCache,
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
            self.set_condition(nodes, writer, g, true, SCHEDULED, &message)
                .await;
        }
    }

    /// Publishes the reasons filter recorded for groups it could not place
    /// (`Unschedulable` conditions), in the background.
    pub fn publish(self: &Arc<Self>, nodes: &Arc<NodeCache>, writer: &Arc<dyn ClusterWriter>) {
        let notes = {
            let snap = nodes.read();
            let mut l = snap.group_ledger();
            if l.notes.is_empty() {
                return;
            }
            std::mem::take(&mut l.notes)
        };
        let (me, nodes, writer) = (Arc::clone(self), Arc::clone(nodes), Arc::clone(writer));
        tokio::spawn(async move {
            for (g, m) in notes {
                me.set_condition(&nodes, writer.as_ref(), &g, false, UNSCHEDULABLE, &m)
                    .await;
            }
        });
    }

    /// Writes a group's condition when it differs from what the cache shows
    /// and from the last write; never after `True`.
    pub async fn set_condition(
        &self,
        nodes: &NodeCache,
        writer: &dyn ClusterWriter,
        group: &GroupRef,
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
        let (current, generation) = {
            let snap = nodes.read();
            let (conds, generation) = if group.composite {
                let Some(c) = snap.composite(&group.namespace, &group.name) else {
                    return;
                };
                (
                    c.status.as_ref().and_then(|s| s.conditions.clone()),
                    c.metadata.generation,
                )
            } else {
                let Some(g) = snap.group(&group.namespace, &group.name) else {
                    return;
                };
                (
                    g.status.as_ref().and_then(|s| s.conditions.clone()),
                    g.metadata.generation,
                )
            };
            (
                conds.into_iter().flatten().find(|c| c.type_ == type_),
                generation,
            )
        };
        let want = (status, reason.to_owned(), message.clone());
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
            match w.get(group) {
                Some(prev) if prev.0 => return,
                Some(prev) if *prev == want => return,
                _ => {}
            }
            w.insert(group.clone(), want);
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
            self.written.lock().remove(group);
        }
    }
}

fn uid_of(nodes: &NodeCache, g: &GroupRef) -> Option<String> {
    let snap = nodes.read();
    if g.composite {
        snap.composite(&g.namespace, &g.name)?.metadata.uid.clone()
    } else {
        snap.group(&g.namespace, &g.name)?.metadata.uid.clone()
    }
}
