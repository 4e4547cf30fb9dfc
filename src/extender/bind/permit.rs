//! The hold coordinator bind uses for gangs, and group status writes.
//!
//! ```text
//!   bind(member) ── assume on node ──▶ hold: unit at quorum? ── yes ──▶ release every held
//!                                        │ no                           member of the unit; bind
//!                                        ▼
//!            held (≤ --max-held-binds over all units, else refused at once) until:
//!            - quorum: every held member binds; kept ones bind when retried;
//!            - its own --gang-wait runs out while the unit still gathers: the
//!              bind answers Error, the member stays assumed and counted (kept);
//!            - the unit ends: --gang-wait without a new member, or --gang-wait-max
//!              since its first: every held and kept member is forgotten from the
//!              cache and the held binds answer Error
//! ```
//!
//! Why kept members: kube-scheduler's `httpTimeout` bounds one bind call,
//! so a held bind cannot outlast it; a gang whose members reach the
//! extender over longer than that would lose its first members before its
//! last arrive, every attempt. A member whose own wait runs out keeps its
//! place (assumed on its node, counted toward quorum) while its unit keeps
//! gaining members, as a pod waiting in kube-scheduler's Permit stage
//! keeps its node; kube-scheduler retries its bind and it is held again.
//! When kube-scheduler filters a kept member again (its retry), the
//! reservation is dropped ([`Gangs::returning`]): its bind re-assumes it.
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

use crate::cache::cluster_index::{ClusterIndex, ClusterState};
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

/// Whether an assumed pod's node is cordoned (`spec.unschedulable`) or
/// gone from the cache.
fn stranded_on(snap: &ClusterState, namespace: &str, pod: &str) -> bool {
    let Some(node) = snap.pod(namespace, pod).and_then(|p| p.node.as_deref()) else {
        return false;
    };
    snap.slot(node)
        .and_then(|s| s.node.as_ref())
        .is_none_or(|n| n.unschedulable)
}

/// Default `--gang-wait`: the longest one bind is held, and how long a
/// gathering unit waits for a member it has not seen yet.
pub const DEFAULT_GANG_WAIT: Duration = Duration::from_secs(20);
/// Default `--gang-wait-max`: the longest a unit gathers, from its first
/// member, however steadily members arrive (KEP-4671's PodGroup scheduling
/// timeout, `DefaultPodGroupSchedulingTimeoutDuration`, is 5 minutes).
pub const DEFAULT_GANG_WAIT_MAX: Duration = Duration::from_secs(300);
/// Default `--max-held-binds`: gang members held or reserved at once, over
/// every unit. Kubernetes supports clusters of up to 5,000 nodes, and the
/// largest training jobs run one pod per node (a whole 8-GPU node each):
/// the largest gang such a cluster can run is 5,000 members. Twice that
/// holds it with room for a second large gang gathering at the same time.
pub const DEFAULT_MAX_HELD: usize = 10_000;
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
/// Condition type on a PodGroup or CompositePodGroup initially scheduled
/// that is short of its `minCount` (`minGroupCount`) again and cannot be
/// placed: `True` (reason [`UNSCHEDULABLE`]) while so, `False` (reason
/// [`SCHEDULED`]) once whole again. Upstream's `PodGroupInitiallyScheduled`
/// is terminal once `True` and its `DisruptionTarget` means the group is
/// about to be terminated, so neither can say this.
pub const BELOW_MIN_COUNT: &str = "kruntimes.io/BelowMinCount";
/// Event reason when a group's [`BELOW_MIN_COUNT`] condition turns `True`.
pub const BELOW_MIN_EVENT: EventReason = EventReason::GangBelowMinCount;

/// How long gangs wait, and how many members may wait at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GangConfig {
    /// `--gang-wait`: the longest one bind is held; a unit with no new
    /// member for this long ends.
    pub wait: Duration,
    /// `--gang-wait-max`: a unit gathering for this long ends, progress or not.
    pub wait_max: Duration,
    /// `--max-held-binds`: members held or reserved at once, over all units.
    pub max_held: usize,
}

impl Default for GangConfig {
    fn default() -> Self {
        GangConfig {
            wait: DEFAULT_GANG_WAIT,
            wait_max: DEFAULT_GANG_WAIT_MAX,
            max_held: DEFAULT_MAX_HELD,
        }
    }
}

/// Where a unit's held members stand.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Waiting,
    /// The unit reached quorum: every held member binds except those
    /// listed, whose own gang below the unit is still short (they hold
    /// again, in the unit's next generation).
    Go(Arc<BTreeSet<Member>>),
    Expired(String),
}

/// `(namespace, pod)`.
type Member = (String, String);

/// Members of one unit gathering for quorum.
struct Unit {
    /// Distinguishes a unit from a later one of the same group.
    generation: u64,
    /// When its first member arrived.
    started: Instant,
    /// When a member it had not seen arrived last.
    progress: Instant,
    /// Every member it has held, so a member coming back (kept, filtered
    /// again by kube-scheduler's retry, held again) is not progress:
    /// members cycling through their own waits must not keep a unit
    /// alive that no new member joins (simulation seed 69648: a
    /// composite's members held in a zone its third child did not fit
    /// re-held each other's wait until `--gang-wait-max`). Bounded by the
    /// unit's pods.
    seen: BTreeSet<Member>,
    /// Members whose bind is held now.
    held: BTreeSet<Member>,
    /// Members whose bind answered (its own wait ran out while the unit
    /// was still gathering) but whose assumption is kept: they count
    /// toward quorum until kube-scheduler retries them or the unit ends.
    kept: BTreeSet<Member>,
    tx: watch::Sender<Outcome>,
}

impl Unit {
    /// When the unit ends: `wait` after its last progress, `wait_max`
    /// after its start, whichever is first.
    fn end(&self, c: &GangConfig) -> Instant {
        (self.progress + c.wait).min(self.started + c.wait_max)
    }

    fn members(&self) -> usize {
        self.held.len() + self.kept.len()
    }
}

/// Why the hold failed a bind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HoldFailure {
    /// The group hierarchy is broken (a parent cycle, deeper than the
    /// limit): the member is refused, never held.
    #[error("{0}")]
    Hierarchy(String),
    /// The unit ended without quorum: every member was released.
    #[error("{0}")]
    Expired(String),
    /// The unit's wait ended without quorum or expiry.
    #[error("{0}")]
    Ended(String),
    /// This bind's own wait (`--gang-wait`) ran out while its unit is
    /// still gathering: the member stays assumed and counted (reserved)
    /// so kube-scheduler's retry rejoins it.
    #[error("{0}")]
    Kept(String),
    /// `--max-held-binds` members are held or reserved already; the
    /// member is refused, never held.
    #[error("{0}")]
    Full(String),
    /// The member's own PodGroup is at its minCount without it while its
    /// unit (a CompositePodGroup) still gathers for other groups: it is
    /// not held or kept (its assumption is dropped), so it takes no room
    /// those groups need; kube-scheduler's retry binds it once the unit
    /// is at quorum.
    #[error("{0}")]
    Surplus(String),
}

/// How one round of a hold ended other than with the bind let through.
enum Round {
    Failed(HoldFailure),
    /// Released by a quorum met without this member's own gang: it holds
    /// again (it is still assumed, and counted by the next round).
    Again,
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
    member: Member,
    /// The wait ended through the unit's outcome: nothing to undo.
    done: bool,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut t = self.gangs.table.lock();
        if let Some(u) = t.units.get_mut(&self.unit)
            && u.generation == self.generation
        {
            u.held.remove(&self.member);
            if u.members() == 0 {
                t.units.remove(&self.unit);
            }
        }
        t.recount();
        self.nodes.forget(&self.member.0, &self.member.1);
        drop(t);
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
    /// The last [`BELOW_MIN_COUNT`] condition written, per group (from
    /// when its write starts).
    short: HashMap<GroupRef, Written>,
    /// The last [`BELOW_MIN_COUNT`] condition the API server accepted, per
    /// group: whether a write turned it `True` (its Event) is decided on
    /// this, not on a concurrent write still in flight (simulation seed
    /// 1403809: the write that turned it failed, the one beside it that
    /// landed took it for turned already, and no Event came).
    short_accepted: HashMap<GroupRef, Written>,
    /// Writes that failed (a conflict, a 5xx, the API server away), per
    /// group the last one asked: [`Gangs::retry_writes`] asks again, so a
    /// condition never stays behind what happened because one write
    /// failed (nothing else may come to write it: a group whose last
    /// member just bound).
    failed: HashMap<GroupRef, Retry>,
    /// Sweep when the table grows past this.
    sweep_at: usize,
}

/// A [`Gangs::set_condition`] call to make again.
#[derive(Debug, Clone)]
struct Retry {
    only_uid: Option<String>,
    status: bool,
    reason: String,
    message: String,
}

/// A [`Gangs::set_condition`] call in progress; dropped before it
/// settles, it forgets what it took as written and leaves a retry.
struct Unsettled<'a> {
    gangs: &'a Gangs,
    group: &'a GroupRef,
    retry: Option<Retry>,
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        let Some(retry) = self.retry.take() else {
            return;
        };
        let mut w = self.gangs.written.lock();
        w.by_group.remove(self.group);
        w.short.remove(self.group);
        w.failed.entry(self.group.clone()).or_insert(retry);
    }
}

/// The smallest size that starts a sweep.
const MIN_SWEEP: usize = 1024;

/// The units gathering, and the members reserved after their unit's quorum.
#[derive(Default)]
struct Table {
    units: HashMap<GroupRef, Unit>,
    /// Members kept (reserved) when their unit reached quorum: assumed,
    /// counted, and bound when kube-scheduler retries them. Dropped when
    /// kube-scheduler filters them again (it holds no binding for them
    /// then), when they bind, or by [`Gangs::sweep`] once no longer
    /// assumed. Bounded by `--max-held-binds`: they count against it.
    reserved: HashMap<Member, Instant>,
    /// Members held or kept over all units, plus `reserved`.
    count: usize,
}

impl Table {
    fn recount(&mut self) {
        self.count = self.units.values().map(Unit::members).sum::<usize>() + self.reserved.len();
    }

    /// Takes a member out of its reservation and its unit's held and kept
    /// members (the unit goes if that leaves it empty).
    fn leave(&mut self, unit: &GroupRef, m: &Member) {
        self.reserved.remove(m);
        if let Some(u) = self.units.get_mut(unit) {
            u.held.remove(m);
            u.kept.remove(m);
            if u.members() == 0 {
                self.units.remove(unit);
            }
        }
        self.recount();
    }

    /// Drops a member's reservation, or its place among its unit's kept
    /// members; the unit goes if that leaves it empty (nothing is coming
    /// back to it). Other units are untouched: one emptied for a moment by
    /// a member coming back keeps its clock ([`Gangs::returning`]).
    /// Whether the member was kept at all.
    fn drop_kept(&mut self, m: &Member) -> bool {
        let mut found = self.reserved.remove(m).is_some();
        self.units.retain(|_, u| {
            if !u.kept.remove(m) {
                return true;
            }
            found = true;
            u.members() > 0
        });
        found
    }

    /// The unit that holds or keeps a member.
    fn unit_of(&self, m: &Member) -> Option<GroupRef> {
        self.units
            .iter()
            .find(|(_, u)| u.held.contains(m) || u.kept.contains(m))
            .map(|(g, _)| g.clone())
    }
}

/// The coordinator. Share it behind an `Arc`.
pub struct Gangs {
    config: GangConfig,
    table: Mutex<Table>,
    generation: AtomicU64,
    /// The last condition written per group object.
    written: Mutex<WrittenTable>,
    /// The domain plans of groups not placed yet (dropped on quorum).
    planner: Arc<GangPlanner>,
}

impl Default for Gangs {
    fn default() -> Self {
        Gangs::with_config(GangConfig::default())
    }
}

/// A unit that ended, for its Event and condition.
pub struct Ended {
    unit: GroupRef,
    message: String,
}

// === impl Gangs ===

impl Gangs {
    /// Default limits with `wait` as `--gang-wait`.
    pub fn new(wait: Duration) -> Self {
        Gangs::with_config(GangConfig {
            wait,
            ..GangConfig::default()
        })
    }

    pub fn with_config(config: GangConfig) -> Self {
        Gangs {
            config,
            table: Mutex::new(Table::default()),
            generation: AtomicU64::new(0),
            written: Mutex::new(WrittenTable {
                by_group: HashMap::new(),
                short: HashMap::new(),
                short_accepted: HashMap::new(),
                failed: HashMap::new(),
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
        self.config.wait
    }

    /// The waits and the ceiling.
    pub fn config(&self) -> GangConfig {
        self.config
    }

    /// Members whose bind is held now, over all units.
    pub fn held(&self) -> usize {
        self.table.lock().units.values().map(|u| u.held.len()).sum()
    }

    /// Members reserved without a bind held: kept by a gathering unit, or
    /// kept when their unit reached quorum and not retried yet.
    pub fn kept(&self) -> usize {
        let t = self.table.lock();
        t.units.values().map(|u| u.kept.len()).sum::<usize>() + t.reserved.len()
    }

    /// Units gathering now.
    pub fn units(&self) -> usize {
        self.table.lock().units.len()
    }

    /// Groups whose last written condition is remembered.
    pub fn written(&self) -> usize {
        let w = self.written.lock();
        w.by_group.len() + w.short.len()
    }

    /// Whether a member's bind is held now.
    #[cfg(any(test, feature = "testkit"))]
    pub fn is_held(&self, namespace: &str, pod: &str) -> bool {
        let member = (namespace.to_owned(), pod.to_owned());
        self.table
            .lock()
            .units
            .values()
            .any(|u| u.held.contains(&member))
    }

    /// Whether a member is reserved without a bind held.
    #[cfg(any(test, feature = "testkit"))]
    pub fn is_kept(&self, namespace: &str, pod: &str) -> bool {
        let member = (namespace.to_owned(), pod.to_owned());
        let t = self.table.lock();
        t.reserved.contains_key(&member) || t.units.values().any(|u| u.kept.contains(&member))
    }

    /// Pods a unit must hold at once to reach quorum: `minCount` of a
    /// PodGroup gang (1 for basic), and for a CompositePodGroup the
    /// `minGroupCount` smallest of its children's.
    pub fn pods_to_hold(snap: &ClusterState, unit: &GroupRef) -> usize {
        let tree = gang::tree_of(snap, unit);
        // Each group's children, found once: `need_of` then visits every
        // group of the tree once instead of scanning the tree per composite.
        let composites: HashMap<(&str, &str), &GroupRef> = tree
            .iter()
            .filter(|g| g.composite)
            .map(|g| ((g.namespace.as_str(), g.name.as_str()), g))
            .collect();
        let mut children: HashMap<&GroupRef, Vec<&GroupRef>> = HashMap::new();
        for c in &tree {
            if let Some(parent) = gang::spec_of(snap, c).and_then(|s| s.parent)
                && let Some(&p) = composites.get(&(c.namespace.as_str(), parent.as_str()))
                && p != c
            {
                children.entry(p).or_default().push(c);
            }
        }
        need_of(snap, unit, &children, 0)
    }

    /// Filter's early refusal: the pod's unit needs more members held at
    /// once than `--max-held-binds` allows, so it can never be bound. The
    /// message names the unit, its size and the flag.
    pub fn too_large(&self, snap: &ClusterState, namespace: &str, pod: &str) -> Option<String> {
        let q = gang::quorum(snap, namespace, pod).ok().flatten()?;
        let need = Self::pods_to_hold(snap, &q.unit);
        (need > self.config.max_held).then(|| {
            bounded(format!(
                "{}: needs {need} pods held at once to reach quorum, more than --max-held-binds ({}); \
                 raise --max-held-binds (and the open-files limit) to schedule it",
                q.unit, self.config.max_held
            ))
        })
    }

    /// kube-scheduler filters a pod: it holds no binding for it, so a
    /// reservation kept for it (its earlier bind answered while its unit
    /// gathered) is dropped now; its bind re-assumes it. Whether one was.
    pub fn returning(&self, nodes: &ClusterIndex, namespace: &str, pod: &str) -> bool {
        let member = (namespace.to_owned(), pod.to_owned());
        let mut t = self.table.lock();
        let mut found = t.reserved.remove(&member).is_some();
        if !found
            && let Some(g) = t.unit_of(&member)
            && let Some(u) = t.units.get_mut(&g)
        {
            // The unit stays, empty or not: the member is coming back to
            // it, and its clock (and what it has seen) must not restart.
            // It ends at its time like any unit if nothing comes.
            found = u.kept.remove(&member);
        }
        if found {
            t.recount();
            nodes.forget(namespace, pod);
        }
        found
    }

    /// Whether a member is surplus now: its unit is a CompositePodGroup
    /// still gathering and its own PodGroup has its minCount without it.
    /// Such a member is refused before it is assumed, and a reservation
    /// still kept for it is dropped (it holds no room). The refusal's text.
    pub fn surplus_now(&self, nodes: &ClusterIndex, namespace: &str, pod: &str) -> Option<String> {
        let q = gang::surplus_while_gathering(&nodes.read(), namespace, pod)?;
        let member = (namespace.to_owned(), pod.to_owned());
        let mut t = self.table.lock();
        if t.drop_kept(&member) {
            t.recount();
            drop(t);
            nodes.forget(namespace, pod);
        } else {
            drop(t);
        }
        Some(surplus_message(
            &q.unit, q.have, q.need, namespace, pod, nodes,
        ))
    }

    /// Ends the units whose time is up and drops reservations no longer
    /// assumed; what ended, for [`Gangs::record`]. Held binds end their
    /// own units; this covers units left with reserved members only (the
    /// service runs it every second).
    pub fn sweep(&self, nodes: &ClusterIndex) -> Vec<Ended> {
        let now = Instant::now();
        let due: Vec<(GroupRef, u64)> = {
            let mut t = self.table.lock();
            let kept = t.reserved.len() + t.units.values().map(|u| u.kept.len()).sum::<usize>();
            if kept > 0 {
                let snap = nodes.read();
                t.reserved.retain(|(ns, name), _| snap.is_assumed(ns, name));
                // A kept member whose node was cordoned or deleted cannot
                // be bound there when kube-scheduler retries it (its
                // filter rejects the node): it no longer counts toward
                // its unit's quorum, and its room is free.
                let mut stranded: Vec<Member> = t
                    .reserved
                    .keys()
                    .chain(t.units.values().flat_map(|u| u.kept.iter()))
                    .filter(|(ns, name)| stranded_on(&snap, ns, name))
                    .cloned()
                    .collect();
                stranded.sort();
                stranded.dedup();
                drop(snap);
                for m in &stranded {
                    t.drop_kept(m);
                    nodes.forget(&m.0, &m.1);
                }
                let now_kept =
                    t.reserved.len() + t.units.values().map(|u| u.kept.len()).sum::<usize>();
                if now_kept != kept {
                    t.recount();
                }
            }
            t.units
                .iter()
                .filter(|(_, u)| u.end(&self.config) <= now)
                .map(|(g, u)| (g.clone(), u.generation))
                .collect()
        };
        due.into_iter()
            .filter_map(|(g, generation)| {
                self.expire_now(nodes, &g, generation)
                    .map(|message| Ended { unit: g, message })
            })
            .collect()
    }

    /// Writes the Event and condition of units that ended.
    pub async fn record(
        &self,
        nodes: &ClusterIndex,
        writer: &dyn ClusterWriter,
        ended: Vec<Ended>,
    ) {
        for e in ended {
            self.record_expiry(nodes, writer, &e.unit, &e.message).await;
        }
    }

    /// Holds a member already assumed on its node until its unit reaches
    /// quorum (`Ok`: bind it), its own wait runs out while the unit still
    /// gathers (`Err(Kept)`: the bind answers, the member stays assumed and
    /// counted), or the unit ends (`Err(Expired)`: the member and every
    /// other one were forgotten from the cache).
    ///
    /// The unit ends `--gang-wait` after a member it had not seen last
    /// arrived, or `--gang-wait-max` after its first, whichever is first.
    /// A member that would take the members held or reserved over
    /// `--max-held-binds` is refused (`Err(Full)`), never held.
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
        self.hold_then(nodes, writer, namespace, pod, || {}).await
    }

    /// [`Gangs::hold`], calling `waiting` once the member is held (not
    /// when it passes at once or is refused).
    pub async fn hold_then(
        &self,
        nodes: &ClusterIndex,
        writer: &dyn ClusterWriter,
        namespace: &str,
        pod: &str,
        waiting: impl FnOnce(),
    ) -> Result<Held, HoldFailure> {
        let mut waiting = Some(waiting);
        // The member's own wait spans the whole bind call, however many
        // rounds it takes: a round per release its own gang was not ready
        // for must not hold the call past kube-scheduler's `httpTimeout`.
        let mine = Instant::now() + self.config.wait;
        loop {
            match self
                .hold_round(nodes, writer, namespace, pod, &mut waiting, mine)
                .await
            {
                Ok(held) => return Ok(held),
                Err(Round::Failed(e)) => return Err(e),
                // Released by a quorum its own gang is not at: hold again.
                Err(Round::Again) => continue,
            }
        }
    }

    /// One hold: until the unit's outcome or this member's deadline
    /// (`mine`).
    async fn hold_round<W: FnOnce()>(
        &self,
        nodes: &ClusterIndex,
        writer: &dyn ClusterWriter,
        namespace: &str,
        pod: &str,
        waiting: &mut Option<W>,
        mine: Instant,
    ) -> Result<Held, Round> {
        let ended = self.sweep(nodes);
        self.record(nodes, writer, ended).await;
        let member = (namespace.to_owned(), pod.to_owned());
        let (mut rx, mut waiter) = {
            let mut t = self.table.lock();
            let q = gang::quorum(&nodes.read(), namespace, pod)
                .map_err(|e| Round::Failed(HoldFailure::Hierarchy(e)))?;
            let Some(q) = q else {
                if t.reserved.remove(&member).is_some() {
                    t.recount();
                }
                return Ok(Held::Free);
            };
            if !q.reached && q.unit.composite && gang::surplus(&nodes.read(), namespace, pod) {
                t.leave(&q.unit, &member);
                return Err(Round::Failed(HoldFailure::Surplus(surplus_message(
                    &q.unit, q.have, q.need, namespace, pod, nodes,
                ))));
            }
            // Its own group was released once and it completes it: bound,
            // it repairs the group; held for the unit, it would leave the
            // group below its minCount.
            if !q.reached && gang::completes_released_group(&nodes.read(), namespace, pod) {
                t.leave(&q.unit, &member);
                return Ok(Held::Free);
            }
            if q.reached {
                let now = Instant::now();
                t.reserved.remove(&member);
                if let Some(u) = t.units.remove(&q.unit) {
                    // Only a composite unit has gangs below it; whether
                    // they are met is the same for every pod of a group,
                    // so it is decided once per group.
                    let mut short = BTreeSet::new();
                    if q.unit.composite {
                        let snap = nodes.read();
                        let mut met: HashMap<Option<&str>, bool> = HashMap::new();
                        for m in &u.held {
                            let group = snap.pod(&m.0, &m.1).and_then(|p| p.group.as_deref());
                            let ok = *met.entry(group).or_insert_with(|| {
                                gang::quorum(&snap, &m.0, &m.1)
                                    .ok()
                                    .flatten()
                                    .is_some_and(|q| q.reached)
                            });
                            if !ok {
                                short.insert(m.clone());
                            }
                        }
                    }
                    u.tx.send_replace(Outcome::Go(Arc::new(short)));
                    // Members kept stay assumed and counted until
                    // kube-scheduler retries them: they bind then.
                    for m in u.kept {
                        if m != member {
                            t.reserved.insert(m, now);
                        }
                    }
                }
                t.recount();
                drop(t);
                let snap = nodes.read();
                gang::drop_plans(&self.planner, &gang::tree_of(&snap, &q.unit), now);
                return Ok(Held::Quorum);
            }
            let known = t.reserved.contains_key(&member)
                || t.units
                    .get(&q.unit)
                    .is_some_and(|u| u.kept.contains(&member) || u.held.contains(&member));
            if !known && t.count >= self.config.max_held {
                return Err(Round::Failed(HoldFailure::Full(bounded(format!(
                    "{}: not held: {} gang members are held or reserved already (--max-held-binds {}); \
                     retried when binds finish",
                    q.unit, t.count, self.config.max_held
                )))));
            }
            t.reserved.remove(&member);
            let now = Instant::now();
            let generation = self.generation.fetch_add(1, Ordering::Relaxed);
            let u = t.units.entry(q.unit.clone()).or_insert_with(|| Unit {
                generation,
                started: now,
                progress: now,
                seen: BTreeSet::new(),
                held: BTreeSet::new(),
                kept: BTreeSet::new(),
                tx: watch::channel(Outcome::Waiting).0,
            });
            u.kept.remove(&member);
            if u.seen.insert(member.clone()) {
                // A member the unit had not seen: progress.
                u.progress = now;
            }
            u.held.insert(member.clone());
            tracing::debug!(unit = %q.unit, have = q.have, need = q.need, pod = %format!("{namespace}/{pod}"), "holding gang member");
            let rx = u.tx.subscribe();
            let generation = u.generation;
            t.recount();
            let waiter = Waiter {
                gangs: self,
                nodes,
                unit: q.unit,
                generation,
                member,
                done: false,
            };
            (rx, waiter)
        };
        if let Some(w) = waiting.take() {
            w();
        }
        // From here every return leaves the table through the unit's
        // outcome (quorum, expiry) or the member's own deadline (`mine`,
        // from the start of the bind call); only a drop mid-wait goes
        // through the waiter.
        let unit = waiter.unit.clone();
        let ended = || {
            Round::Failed(HoldFailure::Ended(format!(
                "{unit}: the wait for quorum ended"
            )))
        };
        let again = || Round::Again;
        let result = loop {
            let now = rx.borrow_and_update().clone();
            match now {
                Outcome::Go(short) if short.contains(&waiter.member) => break Err(again()),
                Outcome::Go(_) => break Ok(Held::Waited),
                Outcome::Expired(m) => break Err(Round::Failed(HoldFailure::Expired(m))),
                Outcome::Waiting => {}
            }
            let wake = {
                let t = self.table.lock();
                match t.units.get(&unit) {
                    Some(u) if u.generation == waiter.generation => u.end(&self.config).min(mine),
                    // Gone: the outcome says why.
                    _ => Instant::now(),
                }
            };
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() && *rx.borrow() == Outcome::Waiting {
                        break Err(ended());
                    }
                }
                _ = tokio::time::sleep_until(wake) => {
                    match self.on_deadline(nodes, &unit, waiter.generation, &waiter.member, mine) {
                        Deadline::Extended => continue,
                        Deadline::Kept(m) => {
                            waiter.done = true;
                            break Err(Round::Failed(HoldFailure::Kept(m)));
                        }
                        Deadline::Surplus(m) => {
                            waiter.done = true;
                            break Err(Round::Failed(HoldFailure::Surplus(m)));
                        }
                        Deadline::Expired(m) => {
                            // Under the table's lock the unit is gone (with
                            // every member forgotten) before the writes below.
                            waiter.done = true;
                            self.record_expiry(nodes, writer, &unit, &m).await;
                        }
                        Deadline::Gone => {}
                    }
                    // The outcome is now Expired (or Go, if quorum won the race).
                    let now = rx.borrow().clone();
                    break match now {
                        Outcome::Go(short) if short.contains(&waiter.member) => Err(again()),
                        Outcome::Go(_) => Ok(Held::Waited),
                        Outcome::Expired(m) => Err(Round::Failed(HoldFailure::Expired(m))),
                        Outcome::Waiting => Err(ended()),
                    };
                }
            }
        };
        waiter.done = true;
        result
    }

    /// A held member's timer fired: the unit ended, or this member's own
    /// wait ran out (it is kept), or neither (the unit made progress).
    fn on_deadline(
        &self,
        nodes: &ClusterIndex,
        unit: &GroupRef,
        generation: u64,
        member: &Member,
        mine: Instant,
    ) -> Deadline {
        let now = Instant::now();
        let end = {
            let mut t = self.table.lock();
            let Some(u) = t.units.get_mut(unit).filter(|u| u.generation == generation) else {
                return Deadline::Gone;
            };
            let end = u.end(&self.config);
            if end > now {
                if mine > now {
                    return Deadline::Extended;
                }
                u.held.remove(member);
                // A member its own group no longer needs (another member
                // took its place meanwhile) keeps no room.
                if gang::surplus(&nodes.read(), &member.0, &member.1) {
                    if u.members() == 0 {
                        t.units.remove(unit);
                    }
                    t.recount();
                    drop(t);
                    let (have, need) = placed(nodes, member);
                    return Deadline::Surplus(surplus_message(
                        unit, have, need, &member.0, &member.1, nodes,
                    ));
                }
                u.kept.insert(member.clone());
                let (kept, held) = (u.kept.len(), u.held.len());
                drop(t);
                let (have, need) = placed(nodes, member);
                return Deadline::Kept(bounded(format!(
                    "{unit}: quorum not reached yet ({have} of {need} placed, {held} held, {kept} reserved); \
                     this pod stays reserved on its node while the group gathers (until {} without a new member, \
                     at most {} in all): retry it",
                    humantime::format_duration(self.config.wait),
                    humantime::format_duration(self.config.wait_max),
                )));
            }
            end
        };
        let _ = end;
        match self.expire_now(nodes, unit, generation) {
            Some(m) => Deadline::Expired(m),
            None => Deadline::Gone,
        }
    }

    /// Ends a unit's wait: forgets every held and kept member (capacity
    /// visible to the next cycle at once) and fails the held binds. `None`
    /// when that unit (that generation) is no longer waiting.
    fn expire_now(&self, nodes: &ClusterIndex, unit: &GroupRef, generation: u64) -> Option<String> {
        let mut t = self.table.lock();
        match t.units.get(unit) {
            Some(u) if u.generation == generation => {}
            _ => return None,
        }
        let u = t.units.remove(unit)?;
        t.recount();
        let first = u
            .held
            .first()
            .or_else(|| u.kept.first())
            .or_else(|| u.seen.first())
            .cloned();
        let (have, need) = first.map_or((0, 0), |m| placed(nodes, &m));
        // Under the lock: a bind evaluating quorum next sees them gone.
        for (ns, name) in u.held.iter().chain(u.kept.iter()) {
            nodes.forget(ns, name);
        }
        let now = Instant::now();
        let within = if now >= u.started + self.config.wait_max {
            format!(
                "within --gang-wait-max {}",
                humantime::format_duration(self.config.wait_max)
            )
        } else {
            format!("within {}", humantime::format_duration(self.config.wait))
        };
        let kept = if u.kept.is_empty() {
            String::new()
        } else {
            format!(" and {} reserved", u.kept.len())
        };
        let message = bounded(format!(
            "{unit}: quorum not reached {within} ({have} of {need} placed); released {} held pods{kept}",
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
    ///
    /// A call dropped before it settles (the bind that made it was
    /// cancelled mid-write) forgets what it took as written to the group
    /// and is asked again by [`Gangs::retry_writes`], as a failed write is:
    /// a write is recorded when it starts, so such a call used to leave
    /// one recorded as written that never was, and never retried (seen
    /// while tracing simulation seed 1403809).
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
        let mut unsettled = Unsettled {
            gangs: self,
            group,
            retry: Some(Retry {
                only_uid: only_uid.map(str::to_owned),
                status,
                reason: reason.to_owned(),
                message: message.to_owned(),
            }),
        };
        self.write_condition(nodes, writer, group, only_uid, status, reason, message)
            .await;
        unsettled.retry = None;
    }

    /// [`Gangs::set_condition`], to its end.
    #[allow(clippy::too_many_arguments)]
    async fn write_condition(
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
        // Initially scheduled (terminal): what is left to say is whether
        // the group is short of its minCount again.
        let scheduled = current.as_ref().is_some_and(|c| c.status == "True")
            || self
                .written
                .lock()
                .by_group
                .get(group)
                .is_some_and(|prev| prev.uid == uid && prev.status);
        if scheduled {
            let written = self
                .set_below_min(nodes, writer, group, &uid, status, &message)
                .await;
            self.settle(group, written, only_uid, status, reason, &message);
            return;
        }
        if let Some(c) = &current
            && !status
            && c.reason == reason
            && c.message == message
        {
            return;
        }
        {
            let mut w = self.written.lock();
            if w.by_group.get(group) == Some(&want) {
                return;
            }
            w.by_group.insert(group.clone(), want);
            w.sweep(nodes);
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
        let written = match writer.write_group_condition(group, &condition).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(%group, error = %e, "writing the group condition failed; retried within a second");
                self.written.lock().by_group.remove(group);
                false
            }
        };
        self.settle(group, written, only_uid, status, reason, &condition.message);
    }

    /// Records whether the condition write a [`Gangs::set_condition`] call
    /// made (or found nothing to write) settled; a failed one is asked
    /// again by [`Gangs::retry_writes`], unless a later call settles it.
    fn settle(
        &self,
        group: &GroupRef,
        written: bool,
        only_uid: Option<&str>,
        status: bool,
        reason: &str,
        message: &str,
    ) {
        let mut w = self.written.lock();
        if written {
            w.failed.remove(group);
        } else {
            w.failed.insert(
                group.clone(),
                Retry {
                    only_uid: only_uid.map(str::to_owned),
                    status,
                    reason: reason.to_owned(),
                    message: message.to_owned(),
                },
            );
        }
    }

    /// Asks again for the condition writes that failed (the gang sweeper
    /// runs it every second). Each is decided again on the cache as it is
    /// now: a group gone or replaced, or a condition since written, ends
    /// it.
    pub async fn retry_writes(&self, nodes: &ClusterIndex, writer: &dyn ClusterWriter) {
        let failed = std::mem::take(&mut self.written.lock().failed);
        for (group, r) in failed {
            self.set_condition(
                nodes,
                writer,
                &group,
                r.only_uid.as_deref(),
                r.status,
                &r.reason,
                &r.message,
            )
            .await;
        }
    }

    /// What the gang sweeper does every second: ends the units whose time
    /// is up with no bind held, records their Events and conditions, and
    /// retries the condition writes that failed.
    pub async fn tick(&self, nodes: &ClusterIndex, writer: &dyn ClusterWriter) {
        let ended = self.sweep(nodes);
        self.record(nodes, writer, ended).await;
        self.retry_writes(nodes, writer).await;
    }

    /// For a group initially scheduled: writes [`BELOW_MIN_COUNT`] `True`
    /// when it is placed short of its minCount and filter or the permit
    /// found its missing members cannot be placed (`placeable` false, with
    /// their reason), and `False` once it is whole again; an Event when it
    /// turns `True`. Written only when it changes, as the other condition.
    /// Nothing is evicted: whether the members still running are of use
    /// is the workload owner's decision.
    /// Whether nothing is left to write (a failed write answers `false`).
    async fn set_below_min(
        &self,
        nodes: &ClusterIndex,
        writer: &dyn ClusterWriter,
        group: &GroupRef,
        uid: &str,
        placeable: bool,
        why: &str,
    ) -> bool {
        let (current, generation) = {
            let snap = nodes.read();
            let (conds, generation) = if group.composite {
                let Some(c) = snap.composite(&group.namespace, &group.name) else {
                    return true;
                };
                (
                    c.status.as_ref().and_then(|s| s.conditions.clone()),
                    c.metadata.generation,
                )
            } else {
                let Some(g) = snap.group(&group.namespace, &group.name) else {
                    return true;
                };
                (
                    g.status.as_ref().and_then(|s| s.conditions.clone()),
                    g.metadata.generation,
                )
            };
            (
                conds
                    .into_iter()
                    .flatten()
                    .find(|c| c.type_ == BELOW_MIN_COUNT),
                generation,
            )
        };
        // As this process last wrote it to this object, else as the cache
        // shows it: the watch shows a write 0-300 ms late, and a `False`
        // written a moment ago under a cached `True` is what stands
        // (simulation seed 1500197: a group struck again right after it
        // was whole turned `True` again with no Event, read as not turning).
        let mine = self
            .written
            .lock()
            .short
            .get(group)
            .filter(|p| p.uid == uid)
            .map(|p| p.status);
        let was_true = mine.unwrap_or_else(|| current.as_ref().is_some_and(|c| c.status == "True"));
        // Every bind of a scheduled group passes here: nothing to say (and
        // no members to count) unless a report is up or filter failed.
        if placeable && !was_true {
            return true;
        }
        let (have, need) = gang::placed(&nodes.read(), group);
        let what = if group.composite {
            "child groups"
        } else {
            "pods"
        };
        let short = have < need;
        let (status, reason, message) = if short && !placeable {
            (
                true,
                UNSCHEDULABLE,
                bounded(format!(
                    "{have} of {need} {what} placed since the group was scheduled: {why}"
                )),
            )
        } else if !short && was_true {
            (
                false,
                SCHEDULED,
                bounded(format!("{have} of {need} {what} placed again")),
            )
        } else {
            return true;
        };
        // The cache says so already, unless this process wrote otherwise
        // since (the watch has not shown it yet).
        if let Some(c) = &current
            && mine.is_none_or(|m| m == status)
            && (c.status == "True") == status
            && c.reason == reason
            && c.message == message
        {
            return true;
        }
        let want = Written {
            uid: uid.to_owned(),
            status,
            reason: reason.to_owned(),
            message: message.clone(),
        };
        {
            let mut w = self.written.lock();
            let prev = w.short.insert(group.clone(), want.clone());
            if prev.as_ref() == Some(&want) {
                return true;
            }
            w.sweep(nodes);
        }
        let cached_true = current.as_ref().is_some_and(|c| c.status == "True");
        let transition = match &current {
            Some(c) if (c.status == "True") == status => c.last_transition_time.clone(),
            _ => Time(k8s_openapi::jiff::Timestamp::now()),
        };
        let condition = Condition {
            type_: BELOW_MIN_COUNT.to_owned(),
            status: if status { "True" } else { "False" }.to_owned(),
            reason: reason.to_owned(),
            message: message.clone(),
            last_transition_time: transition,
            observed_generation: generation,
        };
        if let Err(e) = writer.write_group_condition(group, &condition).await {
            tracing::warn!(%group, error = %e, "writing the group condition failed; retried within a second");
            self.written.lock().short.remove(group);
            return false;
        }
        // Turned `True` by this write: the last one the API server
        // accepted for this object said otherwise (as the cache showed it
        // when none did).
        let turned_true = {
            let prev = self
                .written
                .lock()
                .short_accepted
                .insert(group.clone(), want);
            let before = match prev {
                Some(p) if p.uid == uid => p.status,
                _ => cached_true,
            };
            status && !before
        };
        if turned_true {
            tracing::info!(%group, %message, "gang below minCount");
            writer
                .record_event(
                    &ObjectRef::group(group, Some(uid)),
                    EventKind::Warning,
                    BELOW_MIN_EVENT,
                    &message,
                )
                .await;
        }
        true
    }
}

// === impl WrittenTable ===

impl WrittenTable {
    /// Drops what was written to group objects gone (or replaced) once the
    /// table doubled.
    fn sweep(&mut self, nodes: &ClusterIndex) {
        if self.by_group.len() + self.short.len() <= self.sweep_at {
            return;
        }
        let snap = nodes.read();
        let live = |g: &GroupRef, written: &mut Written| {
            let meta = if g.composite {
                snap.composite(&g.namespace, &g.name).map(|c| &c.metadata)
            } else {
                snap.group(&g.namespace, &g.name).map(|c| &c.metadata)
            };
            meta.and_then(|m| m.uid.as_deref()) == Some(written.uid.as_str())
        };
        self.by_group.retain(live);
        self.short.retain(live);
        self.short_accepted.retain(live);
        self.sweep_at = ((self.by_group.len() + self.short.len()) * 2).max(MIN_SWEEP);
    }
}

/// What a held member's timer found.
enum Deadline {
    /// The unit made progress: wait on.
    Extended,
    /// This member's own wait ran out; it is kept (reserved).
    Kept(String),
    /// This member's own wait ran out and its group no longer needs it:
    /// it left the unit, not kept.
    Surplus(String),
    /// The unit ended now.
    Expired(String),
    /// The unit ended already (quorum or expiry): its outcome says how.
    Gone,
}

/// Why a member whose own group is at its minCount without it is not held
/// while its unit gathers.
fn surplus_message(
    unit: &GroupRef,
    have: usize,
    need: usize,
    namespace: &str,
    pod: &str,
    nodes: &ClusterIndex,
) -> String {
    let group = nodes
        .read()
        .pod(namespace, pod)
        .and_then(|p| p.group.clone())
        .unwrap_or_default();
    gang::surplus_message(unit, have, need, namespace, &group)
}

/// `(have, need)` of a member's unit.
fn placed(nodes: &ClusterIndex, m: &Member) -> (usize, usize) {
    gang::quorum(&nodes.read(), &m.0, &m.1)
        .ok()
        .flatten()
        .map_or((0, 0), |q| (q.have, q.need))
}

/// Pods a group needs placed at once (see [`Gangs::pods_to_hold`]).
fn need_of(
    snap: &ClusterState,
    r: &GroupRef,
    children: &HashMap<&GroupRef, Vec<&GroupRef>>,
    depth: usize,
) -> usize {
    let Some(spec) = gang::spec_of(snap, r) else {
        return 1;
    };
    let want = match spec.policy {
        gang::Policy::Gang(n) => n,
        gang::Policy::Basic => 1,
    };
    if !r.composite {
        return want;
    }
    if depth >= gang::MAX_DEPTH {
        return 0;
    }
    let mut needs: Vec<usize> = children
        .get(r)
        .map(|cs| {
            cs.iter()
                .map(|c| need_of(snap, c, children, depth + 1))
                .collect()
        })
        .unwrap_or_default();
    needs.sort_unstable();
    needs
        .iter()
        .take(want)
        .fold(0usize, |a, n| a.saturating_add(*n))
}

fn uid_of(nodes: &ClusterIndex, g: &GroupRef) -> Option<String> {
    let snap = nodes.read();
    if g.composite {
        snap.composite(&g.namespace, &g.name)?.metadata.uid.clone()
    } else {
        snap.group(&g.namespace, &g.name)?.metadata.uid.clone()
    }
}
