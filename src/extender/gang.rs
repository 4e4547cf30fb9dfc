//! Group semantics, pure over a [`NodeState`] snapshot: membership and
//! quorum of PodGroups (`gang.minCount`, `basic`) and CompositePodGroups
//! (`gang.minGroupCount`), topology domains (`schedulingConstraints.topology[0].key`,
//! nested: a child's domain lies inside its parent's), domain choice by
//! simulation, early infeasibility, and the prioritize preference.
//!
//! ```text
//!   filter ──▶ filter_gate: group exists? enough pods exist? domain fixed by placed
//!              members, else the plan (chosen once per group by simulating the
//!              whole remaining group in every domain), remaining members still fit?
//!   prioritize ──▶ prefer: the nodes the simulation fills first score 10
//!   bind ──▶ quorum: the unit (group, or outermost gang composite) and whether
//!            enough members are placed (bound or assumed)
//! ```
//!
//! The simulation is first-fit over the domain's nodes in name order, the
//! group's members largest first, against `allocatable - used` (what is
//! bound or assumed), after the members other planned groups still need in
//! overlapping domains are placed the same way (so two gangs never plan the
//! same room). Among domains that can hold what the group needs, the one
//! left with the least room for another pod of the group's largest shape
//! wins (best fit: the least fragmentation, big empty domains stay whole
//! for big groups); ties go to the smallest label value.

use crate::cache::nodes::{DomainIndex, GroupRef, NodeState, Plan, Rejection};
use crate::pods::fit::{self, Amounts};
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A plan lapses when no member of its group has asked for it this long.
pub const PLAN_TTL: Duration = Duration::from_secs(30);
/// Deepest group hierarchy followed (the Workload API allows 4 levels).
pub use crate::model::refs::MAX_GROUP_DEPTH as MAX_DEPTH;
/// Longest status message or rejection detail (the same bound as Run
/// status messages).
pub use crate::model::refs::MAX_MESSAGE;
/// Domains up to this many nodes get an exact "does the rest still fit"
/// check per node in prioritize.
const EXACT_PREFER_NODES: usize = 64;

/// A group's scheduling policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    /// All-or-nothing: at least this many pods (or child groups) together.
    Gang(usize),
    /// Best effort, no quorum.
    Basic,
}

/// What the extender reads of a PodGroup or CompositePodGroup.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Spec {
    pub policy: Policy,
    /// `schedulingConstraints.topology[0].key`.
    pub topology: Option<String>,
    /// `parentCompositePodGroupName`.
    pub parent: Option<String>,
}

/// The spec of a group or composite in the snapshot.
pub fn spec_of(snap: &NodeState, r: &GroupRef) -> Option<Spec> {
    let key = |k: Option<&String>| k.filter(|k| !k.is_empty()).cloned();
    if r.composite {
        let c = snap.composite(&r.namespace, &r.name)?;
        let s = &c.spec;
        Some(Spec {
            policy: match &s.scheduling_policy.gang {
                Some(g) => Policy::Gang(usize::try_from(g.min_group_count).unwrap_or(0).max(1)),
                None => Policy::Basic,
            },
            topology: key(s
                .scheduling_constraints
                .as_ref()
                .and_then(|c| c.topology.as_ref())
                .and_then(|t| t.first())
                .map(|t| &t.key)),
            parent: s.parent_composite_pod_group_name.clone(),
        })
    } else {
        let g = snap.group(&r.namespace, &r.name)?;
        let s = &g.spec;
        Some(Spec {
            policy: match &s.scheduling_policy.gang {
                Some(g) => Policy::Gang(usize::try_from(g.min_count).unwrap_or(0).max(1)),
                None => Policy::Basic,
            },
            topology: key(s
                .scheduling_constraints
                .as_ref()
                .and_then(|c| c.topology.as_ref())
                .and_then(|t| t.first())
                .map(|t| &t.key)),
            parent: s.parent_composite_pod_group_name.clone(),
        })
    }
}

/// One level of a pod's hierarchy: its group, then the parents.
#[derive(Debug, Clone)]
pub struct Level {
    pub group: GroupRef,
    pub spec: Spec,
}

/// The group and its parents, innermost first. A missing object is an
/// unresolvable rejection naming it.
pub fn chain(snap: &NodeState, namespace: &str, group: &str) -> Result<Vec<Level>, Rejection> {
    chain_from(snap, GroupRef::group(namespace, group))
}

/// [`chain`] from any group or composite. A parent reference that comes
/// back to a group already on the chain (a cycle), or a chain longer than
/// [`MAX_DEPTH`] levels, is unresolvable with a message naming the chain.
pub fn chain_from(snap: &NodeState, start: GroupRef) -> Result<Vec<Level>, Rejection> {
    walk(snap, start).map_err(|(r, _)| r)
}

/// [`chain_from`]; the error says whether an object is only missing (it
/// may still come) rather than the hierarchy being broken.
fn walk(snap: &NodeState, start: GroupRef) -> Result<Vec<Level>, (Rejection, bool)> {
    let mut out: Vec<Level> = Vec::new();
    let mut at = start;
    loop {
        let Some(spec) = spec_of(snap, &at) else {
            return Err((
                Rejection {
                    message: bounded(format!("waiting for {at} to exist")),
                    unresolvable: true,
                },
                true,
            ));
        };
        let parent = spec.parent.clone().filter(|p| !p.is_empty());
        let namespace = at.namespace.clone();
        out.push(Level { group: at, spec });
        let Some(p) = parent else {
            return Ok(out);
        };
        let next = GroupRef::composite(&namespace, &p);
        if let Some(i) = out.iter().position(|l| l.group == next) {
            return Err((
                Rejection {
                    message: bounded(format!(
                        "parent cycle: {}",
                        path_of(out[i..].iter().map(|l| &l.group).chain([&next]))
                    )),
                    unresolvable: true,
                },
                false,
            ));
        }
        if out.len() >= MAX_DEPTH {
            return Err((
                Rejection {
                    message: bounded(format!(
                        "group hierarchy deeper than {MAX_DEPTH} levels: {}",
                        path_of(out.iter().map(|l| &l.group).chain([&next]))
                    )),
                    unresolvable: true,
                },
                false,
            ));
        }
        at = next;
    }
}

/// `pod group ns/a → composite pod group ns/b → …`.
fn path_of<'a>(groups: impl IntoIterator<Item = &'a GroupRef>) -> String {
    let mut s = String::new();
    for (i, g) in groups.into_iter().enumerate() {
        if i > 0 {
            s.push_str(" → ");
        }
        s.push_str(&g.to_string());
    }
    s
}

/// Truncates a message to [`MAX_MESSAGE`] bytes on a char boundary.
pub fn bounded(m: String) -> String {
    crate::model::refs::truncate(m, MAX_MESSAGE)
}

// === members ===

/// The pod being filtered: `(its group, its name, its requests, the nodes
/// it may use)`.
type This<'a, 's> = Option<(&'a str, &'a str, &'s Amounts, &'a Elig)>;

/// The nodes a member may run on; `None`: any node.
pub type Elig = Option<Arc<BTreeSet<String>>>;

/// The cached nodes a pod's own `nodeSelector` and required node affinity
/// admit (`None`: it has neither).
fn eligible(snap: &NodeState, p: &crate::cache::nodes::PodEntry) -> Elig {
    let rule = p.node_rule.as_ref()?;
    Some(Arc::new(
        snap.node_names()
            .into_iter()
            .filter(|n| {
                snap.slot(n)
                    .and_then(|s| s.node.as_ref())
                    .is_some_and(|info| rule.matches(n, &info.labels))
            })
            .collect(),
    ))
}

/// A leaf group's pods as the snapshot shows them.
#[derive(Debug, Default, Clone)]
struct Members<'s> {
    /// Non-terminal pods.
    existing: usize,
    /// Nodes of the pods bound or assumed.
    placed: Vec<&'s str>,
    /// Requests of the pods not placed yet, with the nodes each may use.
    unplaced: Vec<(&'s Amounts, Elig)>,
}

static NO_REQUESTS: Amounts = Amounts::new();

/// `this`: the pod being filtered (counted in its own group even if the
/// watch has not shown it yet).
fn members<'s>(
    snap: &'s NodeState,
    namespace: &str,
    group: &str,
    this: This<'_, 's>,
) -> Members<'s> {
    let mut m = Members::default();
    let mut seen_this = false;
    for (name, p) in snap.member_pods(namespace, group) {
        if p.terminal {
            continue;
        }
        m.existing += 1;
        let is_this = this.is_some_and(|(_, n, _, _)| n == name);
        seen_this |= is_this;
        match &p.node {
            Some(n) if !is_this => m.placed.push(n),
            _ => m.unplaced.push(match (is_this, this) {
                (true, Some((_, _, r, e))) => (r, e.clone()),
                _ => (
                    p.requests.as_ref().unwrap_or(&NO_REQUESTS),
                    eligible(snap, p),
                ),
            }),
        }
    }
    // Only in its own group: counted once, not once per leaf of a composite.
    if let (false, Some((g, _, r, e))) = (seen_this, this)
        && g == group
    {
        m.existing += 1;
        m.unplaced.push((r, e.clone()));
    }
    m
}

/// Leaf PodGroups under a group (itself when it is one).
fn leaves(snap: &NodeState, r: &GroupRef, depth: usize, out: &mut Vec<GroupRef>) {
    if !r.composite {
        out.push(r.clone());
        return;
    }
    if depth >= MAX_DEPTH {
        return;
    }
    for g in snap.child_groups(&r.namespace, &r.name) {
        out.push(GroupRef::group(&r.namespace, &g));
    }
    for c in snap.child_composites(&r.namespace, &r.name) {
        leaves(snap, &GroupRef::composite(&r.namespace, &c), depth + 1, out);
    }
}

fn children(snap: &NodeState, r: &GroupRef) -> Vec<GroupRef> {
    let mut v: Vec<GroupRef> = snap
        .child_groups(&r.namespace, &r.name)
        .iter()
        .map(|g| GroupRef::group(&r.namespace, g))
        .collect();
    v.extend(
        snap.child_composites(&r.namespace, &r.name)
            .iter()
            .map(|c| GroupRef::composite(&r.namespace, c)),
    );
    v
}

/// What counts toward a quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Count {
    /// Pods that exist (filter: could the group ever reach quorum?).
    Existing,
    /// Pods bound or assumed (bind: has it?).
    Placed,
}

/// `(have, need)` of a group: pods for a PodGroup, satisfied children for a
/// composite. A basic group needs one.
fn tally(snap: &NodeState, r: &GroupRef, count: Count, depth: usize) -> (usize, usize) {
    let Some(spec) = spec_of(snap, r) else {
        return (0, 1);
    };
    let need = match spec.policy {
        Policy::Gang(n) => n,
        Policy::Basic => 1,
    };
    if !r.composite {
        let m = members(snap, &r.namespace, &r.name, None);
        let have = match count {
            Count::Existing => m.existing,
            Count::Placed => m.placed.len(),
        };
        return (have, need);
    }
    if depth >= MAX_DEPTH {
        return (0, need);
    }
    let have = children(snap, r)
        .iter()
        .filter(|c| {
            let (h, n) = tally(snap, c, count, depth + 1);
            h >= n
        })
        .count();
    (have, need)
}

/// The unit whose quorum a member waits for: the outermost gang on the
/// walk from the group to the root, whatever the policies between (a
/// `basic` level in the middle does not cut a `gang` root off, as in
/// upstream's gang plugin); `None` when no level is a gang.
fn unit_of(levels: &[Level]) -> Option<usize> {
    levels
        .iter()
        .rposition(|l| matches!(l.spec.policy, Policy::Gang(_)))
}

/// Whether a member's unit has reached quorum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quorum {
    /// The group or composite whose quorum is waited for.
    pub unit: GroupRef,
    pub reached: bool,
    /// Pods (or child groups) placed, and needed.
    pub have: usize,
    pub need: usize,
    /// Groups and composites of the unit at their own quorum (placed).
    pub satisfied: Vec<GroupRef>,
}

/// The quorum a pod's bind waits for; `Ok(None)` when it waits for nothing
/// (no group, no gang on its way to the root, or a group the cache does not
/// hold yet). `Err`: the hierarchy is broken (a parent cycle, or deeper
/// than [`MAX_DEPTH`]), and the pod must not be bound.
pub fn quorum(snap: &NodeState, namespace: &str, pod: &str) -> Result<Option<Quorum>, String> {
    let Some(group) = snap.pod(namespace, pod).and_then(|p| p.group.clone()) else {
        return Ok(None);
    };
    let levels = match walk(snap, GroupRef::group(namespace, &group)) {
        Ok(l) => l,
        Err((_, true)) => return Ok(None),
        Err((r, false)) => return Err(r.message),
    };
    let Some(unit) = unit_of(&levels) else {
        return Ok(None);
    };
    let unit = levels[unit].group.clone();
    let (have, need) = tally(snap, &unit, Count::Placed, 0);
    let mut satisfied = Vec::new();
    collect_satisfied(snap, &unit, 0, &mut satisfied);
    Ok(Some(Quorum {
        reached: have >= need,
        unit,
        have,
        need,
        satisfied,
    }))
}

fn collect_satisfied(snap: &NodeState, r: &GroupRef, depth: usize, out: &mut Vec<GroupRef>) {
    let (h, n) = tally(snap, r, Count::Placed, depth);
    if h >= n {
        out.push(r.clone());
    }
    if r.composite && depth < MAX_DEPTH {
        for c in children(snap, r) {
            collect_satisfied(snap, &c, depth + 1, out);
        }
    }
}

/// Groups under a unit (itself, child groups and composites, recursively).
pub fn tree_of(snap: &NodeState, unit: &GroupRef) -> Vec<GroupRef> {
    let mut out = vec![unit.clone()];
    let mut i = 0;
    while i < out.len() && out.len() < 4096 {
        let r = out[i].clone();
        if r.composite && i < 1024 {
            out.extend(children(snap, &r));
        }
        i += 1;
    }
    out
}

// === simulation ===

/// Resource names of a simulation; `pods` last.
#[derive(Debug, Clone, Default)]
struct Dims {
    names: Vec<String>,
}

impl Dims {
    fn of<'a>(reqs: impl IntoIterator<Item = &'a Amounts>) -> Dims {
        let mut set: BTreeSet<&str> = BTreeSet::new();
        for r in reqs {
            set.extend(r.keys().map(String::as_str).filter(|k| *k != fit::PODS));
        }
        let mut names: Vec<String> = set.into_iter().map(str::to_owned).collect();
        names.push(fit::PODS.to_owned());
        Dims { names }
    }

    fn shape(&self, r: &Amounts) -> Vec<u64> {
        let last = self.names.len() - 1;
        self.names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                if i == last {
                    1
                } else {
                    r.get(n).copied().unwrap_or(0)
                }
            })
            .collect()
    }
}

/// How many pods of `shape` fit in `room`.
fn max_fit(room: &[u64], shape: &[u64]) -> u64 {
    room.iter()
        .zip(shape)
        .filter(|(_, s)| **s > 0)
        .map(|(r, s)| r / s)
        .min()
        .unwrap_or(0)
}

/// Members still to place: shapes with counts, largest first.
#[derive(Debug, Clone, Default)]
struct Need {
    classes: Vec<(Vec<u64>, usize)>,
    /// The nodes each class may use (`None`: any), by class.
    elig: Vec<Elig>,
    /// At least this many must fit.
    required: usize,
    /// Component-wise largest shape (for the leftover measure).
    big: Vec<u64>,
}

impl Need {
    fn new(dims: &Dims, reqs: &[(&Amounts, Elig)], required: usize) -> Need {
        let mut eligs: Vec<Elig> = Vec::new();
        let mut counts: BTreeMap<(Vec<u64>, usize), usize> = BTreeMap::new();
        for (r, e) in reqs {
            let ei = match eligs.iter().position(|x| x == e) {
                Some(i) => i,
                None => {
                    eligs.push(e.clone());
                    eligs.len() - 1
                }
            };
            *counts.entry((dims.shape(r), ei)).or_default() += 1;
        }
        let mut classes: Vec<(Vec<u64>, usize)> = Vec::with_capacity(counts.len());
        let mut elig: Vec<Elig> = Vec::with_capacity(counts.len());
        let mut order: Vec<((Vec<u64>, usize), usize)> = counts.into_iter().rev().collect();
        // Members with the fewest nodes first (stable: largest first within),
        // so unrestricted members do not take the only nodes others may use.
        order.sort_by_key(|((_, ei), _)| eligs[*ei].as_ref().map_or(usize::MAX, |s| s.len()));
        for ((shape, ei), c) in order {
            classes.push((shape, c));
            elig.push(eligs[ei].clone());
        }
        let mut big = vec![0; dims.names.len()];
        for (s, _) in &classes {
            for (b, v) in big.iter_mut().zip(s) {
                *b = (*b).max(*v);
            }
        }
        Need {
            classes,
            elig,
            required,
            big,
        }
    }

    /// Whether pods of class `i` may run on `node`.
    fn allows(&self, i: usize, node: &str) -> bool {
        self.elig
            .get(i)
            .and_then(Option::as_ref)
            .is_none_or(|s| s.contains(node))
    }

    fn total(&self) -> usize {
        self.classes.iter().map(|(_, c)| c).sum()
    }
}

/// Free room per node with an undo journal; nodes not touched yet are read
/// from the snapshot.
struct Free<'s> {
    rooms: crate::cache::nodes::Rooms<'s>,
    changed: HashMap<String, Option<Vec<u64>>>,
    journal: Vec<(String, Option<Option<Vec<u64>>>)>,
}

impl<'s> Free<'s> {
    fn new(snap: &'s NodeState, dims: &Dims, empty: bool) -> Self {
        Free {
            rooms: snap.rooms(&dims.names, empty),
            changed: HashMap::new(),
            journal: Vec::new(),
        }
    }

    fn get(&self, node: &str) -> Option<Vec<u64>> {
        if let Some(v) = self.changed.get(node) {
            return v.clone();
        }
        let mut out = Vec::new();
        self.rooms.room(node, &mut out).then_some(out)
    }

    /// Appends the node's room to `out`; false (nothing appended) when the
    /// node cannot take pods.
    fn load(&self, node: &str, out: &mut Vec<u64>, scratch: &mut Vec<u64>) -> bool {
        if let Some(v) = self.changed.get(node) {
            return match v {
                Some(v) => {
                    out.extend_from_slice(v);
                    true
                }
                None => false,
            };
        }
        if self.rooms.room(node, scratch) {
            out.extend_from_slice(scratch);
            true
        } else {
            false
        }
    }

    fn set(&mut self, node: &str, room: Vec<u64>) {
        let old = self.changed.insert(node.to_owned(), Some(room));
        self.journal.push((node.to_owned(), old));
    }

    fn mark(&self) -> usize {
        self.journal.len()
    }

    fn rollback(&mut self, mark: usize) {
        while self.journal.len() > mark {
            let Some((node, old)) = self.journal.pop() else {
                break;
            };
            match old {
                Some(v) => {
                    self.changed.insert(node, v);
                }
                None => {
                    self.changed.remove(&node);
                }
            }
        }
    }

    /// First fit of `need` over `nodes` (in order), committed; returns how
    /// many were placed and the nodes used.
    fn fill<'n>(
        &mut self,
        nodes: impl IntoIterator<Item = &'n str>,
        need: &Need,
    ) -> (usize, Vec<&'n str>) {
        let mut classes = need.classes.clone();
        let mut left = need.total();
        let mut placed = 0;
        let mut used = Vec::new();
        for node in nodes {
            if left == 0 {
                break;
            }
            let Some(mut room) = self.get(node) else {
                continue;
            };
            let mut here = 0;
            for (i, (shape, count)) in classes.iter_mut().enumerate() {
                if *count == 0 || !need.allows(i, node) {
                    continue;
                }
                let k = max_fit(&room, shape).min(*count as u64) as usize;
                if k == 0 {
                    continue;
                }
                for (r, s) in room.iter_mut().zip(shape.iter()) {
                    *r = r.saturating_sub(s.saturating_mul(k as u64));
                }
                *count -= k;
                here += k;
            }
            if here > 0 {
                left -= here;
                placed += here;
                used.push(node);
                self.set(node, room);
            }
        }
        (placed, used)
    }

    /// Room left for pods of `shape` over `nodes`.
    fn leftover<'n>(&self, nodes: impl IntoIterator<Item = &'n str>, shape: &[u64]) -> u64 {
        nodes
            .into_iter()
            .filter_map(|n| self.get(n))
            .map(|r| max_fit(&r, shape))
            .fold(0u64, u64::saturating_add)
    }
}

/// Nodes must carry each `(index, value)`.
#[derive(Clone, Default)]
struct Within(Vec<(Arc<DomainIndex>, String)>);

impl Within {
    fn admits(&self, node: &str) -> bool {
        self.0
            .iter()
            .all(|(ix, v)| ix.value_of(node) == Some(v.as_str()))
    }

    fn with(&self, ix: Arc<DomainIndex>, value: &str) -> Within {
        let mut w = self.0.clone();
        w.push((ix, value.to_owned()));
        Within(w)
    }
}

/// A group's subtree prepared for simulation.
struct Tree {
    group: GroupRef,
    key: Option<(String, Arc<DomainIndex>)>,
    /// The domain value fixed by placed members.
    fixed: Option<String>,
    body: Body,
    big: Vec<u64>,
}

enum Body {
    Leaf(Need),
    Composite { children: Vec<Tree>, need: usize },
}

/// The outcome of placing a tree in one domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Outcome {
    satisfied: bool,
    placed: usize,
    leftover: u64,
}

impl Tree {
    /// Places the tree within `within`; the best domain is committed to
    /// `free`, and `record` receives the chosen `(group, key, value)` of
    /// every level with a topology key.
    fn place(
        &self,
        within: &Within,
        free: &mut Free<'_>,
        record: &mut Vec<(GroupRef, String, String)>,
    ) -> Option<Outcome> {
        let Some((key, ix)) = &self.key else {
            // No key: the domain is what the parent allows.
            return self.place_in(None, within, free, record);
        };
        let mut best: Option<(Outcome, &str)> = None;
        let (mut buf, mut scratch_room) = (Vec::new(), Vec::new());
        for (value, nodes) in ix.domains() {
            if self.fixed.as_deref().is_some_and(|f| f != value) {
                continue;
            }
            let o = match &self.body {
                // A leaf is tried on a flat copy of its domain's rooms.
                Body::Leaf(need) => trial_leaf(
                    free,
                    nodes,
                    within,
                    need,
                    &self.big,
                    &mut buf,
                    &mut scratch_room,
                ),
                Body::Composite { .. } => {
                    let inner = within.with(Arc::clone(ix), value);
                    let mark = free.mark();
                    let mut scratch = Vec::new();
                    let o = self.place_in(Some(value), &inner, free, &mut scratch);
                    free.rollback(mark);
                    o
                }
            };
            let Some(o) = o else { continue };
            let better = match best {
                None => true,
                Some((b, _)) => {
                    (o.satisfied, o.placed, std::cmp::Reverse(o.leftover))
                        > (b.satisfied, b.placed, std::cmp::Reverse(b.leftover))
                }
            };
            if better {
                best = Some((o, value));
            }
        }
        let (o, value) = best?;
        let inner = within.with(Arc::clone(ix), value);
        record.push((self.group.clone(), key.clone(), value.to_owned()));
        self.place_in(Some(value), &inner, free, record);
        Some(o)
    }

    fn place_in(
        &self,
        value: Option<&str>,
        within: &Within,
        free: &mut Free<'_>,
        record: &mut Vec<(GroupRef, String, String)>,
    ) -> Option<Outcome> {
        let nodes: Vec<&str> = match (&self.key, value) {
            (Some((_, ix)), Some(v)) => ix
                .nodes(v)
                .iter()
                .map(String::as_str)
                .filter(|n| within.admits(n))
                .collect(),
            // No key of its own: the innermost outer domain's nodes.
            _ => match within.0.last() {
                Some((ix, v)) => ix
                    .nodes(v)
                    .iter()
                    .map(String::as_str)
                    .filter(|n| within.admits(n))
                    .collect(),
                None => return None,
            },
        };
        if nodes.is_empty() {
            return None;
        }
        match &self.body {
            Body::Leaf(need) => {
                let (placed, _) = free.fill(nodes.iter().copied(), need);
                Some(Outcome {
                    satisfied: placed >= need.required,
                    placed,
                    leftover: free.leftover(nodes.iter().copied(), &self.big),
                })
            }
            Body::Composite { children, need } => {
                let mut satisfied = 0;
                let mut placed = 0;
                for c in children {
                    if let Some(o) = c.place(within, free, record) {
                        satisfied += usize::from(o.satisfied);
                        placed += o.placed;
                    }
                }
                Some(Outcome {
                    satisfied: satisfied >= *need,
                    placed,
                    leftover: free.leftover(nodes.iter().copied(), &self.big),
                })
            }
        }
    }
}

/// First fit of a leaf's need over `nodes` on a flat copy of their rooms
/// (nothing committed).
fn trial_leaf(
    free: &Free<'_>,
    nodes: &[String],
    within: &Within,
    need: &Need,
    big: &[u64],
    buf: &mut Vec<u64>,
    scratch: &mut Vec<u64>,
) -> Option<Outcome> {
    let d = big.len();
    buf.clear();
    let restricted = need.elig.iter().any(Option::is_some);
    let mut names: Vec<&str> = Vec::new();
    for n in nodes {
        if within.admits(n) && free.load(n, buf, scratch) && restricted {
            names.push(n);
        }
    }
    if buf.is_empty() || d == 0 {
        return None;
    }
    let mut left: Vec<usize> = need.classes.iter().map(|(_, c)| *c).collect();
    let mut placed = 0;
    let mut leftover = 0u64;
    for (at, room) in buf.chunks_mut(d).enumerate() {
        for (i, ((shape, _), l)) in need.classes.iter().zip(left.iter_mut()).enumerate() {
            if *l == 0 || (restricted && !need.allows(i, names[at])) {
                continue;
            }
            let k = max_fit(room, shape).min(*l as u64);
            if k == 0 {
                continue;
            }
            for (r, s) in room.iter_mut().zip(shape) {
                *r = r.saturating_sub(s.saturating_mul(k));
            }
            *l -= k as usize;
            placed += k as usize;
        }
        leftover = leftover.saturating_add(max_fit(room, big));
    }
    Some(Outcome {
        satisfied: placed >= need.required,
        placed,
        leftover,
    })
}

/// The domain a group's placed members fix (`Ok(None)`: none placed).
/// Placed members fix it wherever they are: a member on a node the cache
/// does not know, or on a node without the label, leaves the domain
/// unknown, and members in two domains (an empty value and a non-empty one
/// included) conflict; either way no domain may be chosen (`Err`: why).
fn fixed_domain(
    snap: &NodeState,
    group: &GroupRef,
    key: &str,
    ix: &DomainIndex,
) -> Result<Option<String>, String> {
    let mut values: BTreeSet<&str> = BTreeSet::new();
    for n in placed_nodes(snap, group) {
        if !snap.has_node(n) {
            return Err(bounded(format!(
                "{group}: a member is on node {n}, which the extender does not know, so its {key} domain is unknown"
            )));
        }
        match ix.value_of(n) {
            Some(v) => {
                values.insert(v);
            }
            None => {
                return Err(bounded(format!(
                    "{group}: a member is on node {n}, which has no {key} label, so its domain is unknown"
                )));
            }
        }
    }
    let mut it = values.into_iter();
    match (it.next(), it.next()) {
        (None, _) => Ok(None),
        (Some(v), None) => Ok(Some(v.to_owned())),
        (Some(a), Some(b)) => Err(bounded(format!(
            "{group}: members are in different {key} domains (\"{a}\" and \"{b}\")"
        ))),
    }
}

/// Nodes of every pod placed under a group.
fn placed_nodes<'s>(snap: &'s NodeState, r: &GroupRef) -> Vec<&'s str> {
    let mut ls = Vec::new();
    leaves(snap, r, 0, &mut ls);
    ls.iter()
        .flat_map(|l| members(snap, &l.namespace, &l.name, None).placed)
        .collect()
}

/// What a leaf still needs: `(requests of unplaced pods, how many must fit)`.
fn leaf_need<'s>(
    snap: &'s NodeState,
    r: &GroupRef,
    this: This<'_, 's>,
) -> (Vec<(&'s Amounts, Elig)>, usize) {
    let m = members(snap, &r.namespace, &r.name, this);
    let required = match spec_of(snap, r).map(|s| s.policy) {
        Some(Policy::Gang(n)) => n.saturating_sub(m.placed.len()).min(m.unplaced.len()),
        _ => 0,
    };
    let mut reqs = m.unplaced;
    // Largest first, so the `required` counted are the hardest ones.
    reqs.sort_by(|a, b| b.0.cmp(a.0));
    (reqs, required)
}

fn build_tree(
    snap: &NodeState,
    r: &GroupRef,
    dims: &Dims,
    this: This<'_, '_>,
    depth: usize,
) -> Option<Tree> {
    let spec = spec_of(snap, r)?;
    let key = spec
        .topology
        .as_ref()
        .map(|k| (k.clone(), snap.domain_index(k)));
    // Members in an unknown or conflicting domain: the group cannot be
    // placed anywhere (filter reports why for the pod's own chain).
    let fixed = match &key {
        Some((k, ix)) => fixed_domain(snap, r, k, ix).ok()?,
        None => None,
    };
    let (body, big) = if r.composite {
        let mut kids: Vec<Tree> = if depth < MAX_DEPTH {
            children(snap, r)
                .iter()
                .filter_map(|c| build_tree(snap, c, dims, this, depth + 1))
                .collect()
        } else {
            Vec::new()
        };
        // Biggest demand first.
        kids.sort_by_key(|t| std::cmp::Reverse(t.demand()));
        let satisfied_already = children(snap, r)
            .iter()
            .filter(|c| {
                let (h, n) = tally(snap, c, Count::Placed, depth + 1);
                h >= n
            })
            .count();
        let need = match spec.policy {
            Policy::Gang(n) => n.saturating_sub(satisfied_already),
            Policy::Basic => 0,
        };
        let mut big = vec![0; dims.names.len()];
        for k in &kids {
            for (b, v) in big.iter_mut().zip(&k.big) {
                *b = (*b).max(*v);
            }
        }
        (
            Body::Composite {
                children: kids,
                need,
            },
            big,
        )
    } else {
        let (reqs, required) = leaf_need(snap, r, this);
        let need = Need::new(dims, &reqs, required);
        let big = need.big.clone();
        (Body::Leaf(need), big)
    };
    let big = if big.iter().all(|v| *v == 0) {
        let mut b = vec![0; dims.names.len()];
        if let Some(last) = b.last_mut() {
            *last = 1;
        }
        b
    } else {
        big
    };
    Some(Tree {
        group: r.clone(),
        key,
        fixed,
        body,
        big,
    })
}

impl Tree {
    /// Pods the tree still needs placed: a leaf's, or the sum of its
    /// children's (each pod counted once).
    fn required(&self) -> usize {
        match &self.body {
            Body::Leaf(n) => n.required,
            Body::Composite { children, .. } => children.iter().map(Tree::required).sum(),
        }
    }

    fn demand(&self) -> u64 {
        match &self.body {
            Body::Leaf(n) => n
                .classes
                .iter()
                .map(|(s, c)| {
                    s.iter()
                        .fold(0u64, |a, v| a.saturating_add(*v))
                        .saturating_mul(*c as u64)
                })
                .fold(0u64, u64::saturating_add),
            Body::Composite { children, .. } => children.iter().map(Tree::demand).sum(),
        }
    }
}

/// Requests of every unplaced pod under `r` (for the simulation's dims).
fn subtree_requests<'s>(snap: &'s NodeState, r: &GroupRef, this: This<'_, 's>) -> Vec<&'s Amounts> {
    let mut ls = Vec::new();
    leaves(snap, r, 0, &mut ls);
    ls.iter()
        .flat_map(|l| members(snap, &l.namespace, &l.name, this).unplaced)
        .map(|(r, _)| r)
        .collect()
}

/// Places the members other planned groups still need (in their planned
/// domains) into `free`, skipping the groups of `own`. With `overlap`,
/// only plans whose domain shares a node with it.
fn reserve_others(
    snap: &NodeState,
    plans: &HashMap<GroupRef, Plan>,
    own: &BTreeSet<GroupRef>,
    dims: &Dims,
    free: &mut Free<'_>,
    overlap: Option<&[&str]>,
    now: Instant,
) {
    let mut keys: Vec<&GroupRef> = plans
        .iter()
        .filter(|(r, p)| !r.composite && !own.contains(*r) && p.expires > now)
        .map(|(r, _)| r)
        .collect();
    keys.sort();
    for r in keys {
        let Some(p) = plans.get(r) else { continue };
        let ix = snap.domain_index(&p.key);
        if let Some(mine) = overlap
            && !mine
                .iter()
                .any(|n| ix.value_of(n) == Some(p.value.as_str()))
        {
            continue;
        }
        let (reqs, required) = leaf_need(snap, r, None);
        if required == 0 {
            continue;
        }
        let reqs: Vec<(&Amounts, Elig)> = reqs.into_iter().take(required).collect();
        let need = Need::new(dims, &reqs, required);
        free.fill(ix.nodes(&p.value).iter().map(String::as_str), &need);
    }
}

/// Fingerprint of a group's chain (itself and its parents, with specs): a
/// plan made under other specs is stale.
fn token(levels: &[Level]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for l in levels {
        l.group.hash(&mut h);
        l.spec.hash(&mut h);
    }
    h.finish()
}

// === filter ===

/// The group verdict for one pod: a rejection for every node, or the
/// domain its nodes must lie in.
#[derive(Default)]
pub struct Gate {
    /// Every node fails with this.
    pub wide: Option<Rejection>,
    /// `(index, value)` a node must carry, outermost first.
    domain: Vec<(String, Arc<DomainIndex>, String)>,
}

impl Gate {
    fn reject(message: String, unresolvable: bool) -> Gate {
        Gate {
            wide: Some(Rejection {
                message: bounded(message),
                unresolvable,
            }),
            domain: Vec::new(),
        }
    }

    /// Why `node` is outside the group's domain, if it is.
    pub fn node(&self, node: &str) -> Option<Rejection> {
        self.outside(node).map(|level| Rejection {
            message: self.outside_message(level),
            unresolvable: true,
        })
    }

    /// The first domain level (outermost first) a node is outside of.
    pub fn outside(&self, node: &str) -> Option<usize> {
        self.domain
            .iter()
            .position(|(_, ix, value)| ix.value_of(node) != Some(value.as_str()))
    }

    /// Why a node outside a level is rejected (one message per level, so a
    /// filter call shares it among the nodes it rejects).
    pub fn outside_message(&self, level: usize) -> String {
        match self.domain.get(level) {
            Some((key, _, value)) => {
                format!("node is outside the pod group's topology domain {key}={value}")
            }
            None => String::new(),
        }
    }

    /// The domain as `key=value` pairs.
    pub fn domain(&self) -> Vec<(String, String)> {
        self.domain
            .iter()
            .map(|(k, _, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// The pod's group name and namespace.
pub fn group_of(pod: &Pod) -> Option<(&str, &str)> {
    let g = pod
        .spec
        .as_ref()?
        .scheduling_group
        .as_ref()?
        .pod_group_name
        .as_deref()
        .filter(|g| !g.is_empty())?;
    Some((pod.metadata.namespace.as_deref().unwrap_or("default"), g))
}

/// Records why a group cannot be placed (published by the filter handler).
fn note(snap: &NodeState, group: &GroupRef, message: &str) {
    let mut l = snap.group_ledger();
    if l.notes.len() < 4096 || l.notes.contains_key(group) {
        l.notes.insert(group.clone(), message.to_owned());
    }
}

/// The group verdict for a pod being filtered. `candidates`: the node
/// names of the request (the domain of a group without topology).
pub fn filter_gate(snap: &NodeState, pod: &Pod, requests: &Amounts, candidates: &[&str]) -> Gate {
    let Some((ns, group)) = group_of(pod) else {
        return Gate::default();
    };
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    // The pod itself may use the nodes kube-scheduler offered.
    let offered: Elig = (!candidates.is_empty())
        .then(|| Arc::new(candidates.iter().map(|n| (*n).to_owned()).collect()));
    let this = Some((group, name, requests, &offered));
    let levels = match chain(snap, ns, group) {
        Ok(l) => l,
        Err(r) => {
            return Gate {
                wide: Some(r),
                domain: Vec::new(),
            };
        }
    };
    let leaf = &levels[0];
    // 1. Enough pods exist for each gang up to the unit.
    if let Some(unit) = unit_of(&levels) {
        for l in &levels[..=unit] {
            if let Policy::Gang(_) = l.spec.policy {
                let (have, need) = if l.group.composite {
                    tally(snap, &l.group, Count::Existing, 0)
                } else {
                    let m = members(snap, ns, &l.group.name, this);
                    (
                        m.existing,
                        match l.spec.policy {
                            Policy::Gang(n) => n,
                            Policy::Basic => 1,
                        },
                    )
                };
                if have < need {
                    let msg = if l.group.composite {
                        format!(
                            "{}: {have} of the {need} child groups it needs have all their pods",
                            l.group
                        )
                    } else {
                        format!("{}: {have} of the {need} pods it needs exist", l.group)
                    };
                    note(snap, &l.group, &msg);
                    return Gate::reject(msg, true);
                }
            }
        }
    }
    // 2. Domains, outermost first: fixed by placed members, else planned.
    let now = Instant::now();
    let keyed: Vec<usize> = (0..levels.len())
        .rev()
        .filter(|i| levels[*i].spec.topology.is_some())
        .collect();
    let mut replanned = false;
    loop {
        let mut domain: Vec<(String, Arc<DomainIndex>, String)> = Vec::new();
        let mut from_plan = false;
        let mut unplanned: Option<usize> = None;
        for &i in &keyed {
            let l = &levels[i];
            let Some(key) = l.spec.topology.clone() else {
                continue;
            };
            let ix = snap.domain_index(&key);
            let fixed = match fixed_domain(snap, &l.group, &key, &ix) {
                Ok(f) => f,
                Err(msg) => {
                    note(snap, &l.group, &msg);
                    return Gate::reject(msg, true);
                }
            };
            let value = match fixed {
                Some(v) => Some(v),
                None => {
                    let t = token(&levels[i..]);
                    let inside = |p: &Plan| {
                        ix.nodes(&p.value).iter().any(|n| {
                            domain
                                .iter()
                                .all(|(_, oix, ov)| oix.value_of(n) == Some(ov.as_str()))
                        })
                    };
                    let mut ledger = snap.group_ledger();
                    match ledger.plans.get_mut(&l.group) {
                        Some(p) if p.token == t && p.expires > now && p.key == key && inside(p) => {
                            p.expires = now + PLAN_TTL;
                            from_plan = true;
                            Some(p.value.clone())
                        }
                        _ => None,
                    }
                }
            };
            match value {
                Some(v) => domain.push((key, ix, v)),
                None => {
                    unplanned = Some(i);
                    break;
                }
            }
        }
        if let Some(i) = unplanned {
            // Plan the highest level without a domain, inside the outer ones.
            match make_plan(snap, &levels, i, &domain, this, now) {
                Ok(()) => {
                    if replanned {
                        // A fresh plan that does not hold: give up for this cycle.
                        let msg = format!("{}: no domain can hold the pods it needs", leaf.group);
                        note(snap, &leaf.group, &msg);
                        return Gate::reject(msg, false);
                    }
                    replanned = true;
                    continue;
                }
                Err((msg, unresolvable)) => {
                    note(snap, &levels[i].group, &msg);
                    return Gate::reject(msg, unresolvable);
                }
            }
        }
        // 3. The group's remaining pods still fit in its domain.
        let (reqs, required) = leaf_need(snap, &leaf.group, this);
        let all_nodes = if domain.is_empty() {
            snap.node_names()
        } else {
            Vec::new()
        };
        if required == 0 {
            return Gate { wide: None, domain };
        }
        let dims = Dims::of(reqs.iter().map(|(r, _)| *r));
        let need = Need::new(&dims, &reqs, required);
        let nodes: Vec<&str> = match domain.last() {
            Some((_, ix, v)) => ix
                .nodes(v)
                .iter()
                .map(String::as_str)
                .filter(|n| {
                    domain
                        .iter()
                        .all(|(_, ix, v)| ix.value_of(n) == Some(v.as_str()))
                })
                .collect(),
            // No topology: every cached node (each member on its own).
            None => all_nodes.iter().map(String::as_str).collect(),
        };
        let mut free = Free::new(snap, &dims, false);
        {
            let ledger = snap.group_ledger();
            let own: BTreeSet<GroupRef> = levels.iter().map(|l| l.group.clone()).collect();
            reserve_others(
                snap,
                &ledger.plans,
                &own,
                &dims,
                &mut free,
                Some(&nodes),
                now,
            );
        }
        let (placed, _) = free.fill(nodes.iter().copied(), &need);
        if placed >= required {
            return Gate { wide: None, domain };
        }
        if from_plan && !replanned {
            // Room was taken since the plan was made: plan again once.
            let mut ledger = snap.group_ledger();
            for l in &levels {
                ledger.plans.remove(&l.group);
            }
            drop(ledger);
            replanned = true;
            continue;
        }
        let where_ = match domain.last() {
            Some((k, _, v)) => format!(" in {k}={v}"),
            None => String::new(),
        };
        // Would they fit on empty nodes? Then removing pods could help.
        let mut empty = Free::new(snap, &dims, true);
        let (fits_empty, _) = empty.fill(nodes.iter().copied(), &need);
        let msg = format!(
            "{}: {placed} of the {required} pods it still needs fit{where_}",
            leaf.group
        );
        note(snap, &leaf.group, &msg);
        return Gate::reject(msg, fits_empty < required);
    }
}

/// Chooses and records domains for `levels[at]` and every keyed group below
/// it, inside `outer`. Err: why nothing fits, and whether removing pods
/// could not help.
fn make_plan(
    snap: &NodeState,
    levels: &[Level],
    at: usize,
    outer: &[(String, Arc<DomainIndex>, String)],
    this: This<'_, '_>,
    now: Instant,
) -> Result<(), (String, bool)> {
    let root = &levels[at].group;
    // Members of the pod's own chain below `at` are in the subtree.
    let reqs = subtree_requests(snap, root, this);
    let dims = Dims::of(reqs.iter().copied());
    let Some(tree) = build_tree(snap, root, &dims, this, 0) else {
        return Err((format!("waiting for {root} to exist"), true));
    };
    let within = Within(
        outer
            .iter()
            .map(|(_, ix, v)| (Arc::clone(ix), v.clone()))
            .collect(),
    );
    let mut ledger = snap.group_ledger();
    // Lapsed plans and plans of groups that are gone reserve nothing.
    ledger
        .plans
        .retain(|g, p| p.expires > now && spec_of(snap, g).is_some());
    let own: BTreeSet<GroupRef> = tree_of(snap, root).into_iter().collect();
    let mut free = Free::new(snap, &dims, false);
    reserve_others(snap, &ledger.plans, &own, &dims, &mut free, None, now);
    let mut record = Vec::new();
    let outcome = tree.place(&within, &mut free, &mut record);
    let key = levels[at].spec.topology.clone().unwrap_or_default();
    match outcome {
        Some(o) if o.satisfied => {
            for (g, k, v) in record {
                let t = chain_from(snap, g.clone()).map_or(0, |l| token(&l));
                ledger.plans.insert(
                    g,
                    Plan {
                        key: k,
                        value: v,
                        token: t,
                        expires: now + PLAN_TTL,
                    },
                );
            }
            Ok(())
        }
        _ => {
            drop(ledger);
            let mut empty = Free::new(snap, &dims, true);
            let fits_empty = tree
                .place(&within, &mut empty, &mut Vec::new())
                .is_some_and(|o| o.satisfied);
            let n = tree.required();
            Err((
                format!("{root}: no {key} domain can hold the {n} pods it still needs"),
                !fits_empty,
            ))
        }
    }
}

/// Drops the plans of a unit's groups (its quorum was reached).
pub fn drop_plans(snap: &NodeState, groups: &[GroupRef]) {
    let mut l = snap.group_ledger();
    for g in groups {
        l.plans.remove(g);
    }
    let now = Instant::now();
    l.plans.retain(|_, p| p.expires > now);
}

// === preemption ===

/// Where preempting can help a grouped preemptor: the nodes of every domain
/// in which its gang's remaining pods (at least those its quorum still
/// needs) fit once every pod that may be preempted is gone. `None`: no
/// group rule applies (no group, no gang on its way to the root, or the
/// quorum is already reached), so any candidate may help. `stays`: whether
/// a pod counted on a node may not be preempted.
///
/// Checked for the preemptor's own PodGroup in its innermost topology
/// domain (fixed by placed members, else every domain of that key); a
/// broken hierarchy or members in an unknown or conflicting domain leave
/// nothing that helps.
pub fn preemption_nodes(
    snap: &NodeState,
    pod: &Pod,
    requests: &Amounts,
    stays: impl Fn(&crate::cache::nodes::Key, &crate::cache::nodes::PodEntry) -> bool,
) -> Option<BTreeSet<String>> {
    let (ns, group) = group_of(pod)?;
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let any: Elig = None;
    let this = Some((group, name, requests, &any));
    let levels = match chain(snap, ns, group) {
        Ok(l) => l,
        Err(_) => return Some(BTreeSet::new()),
    };
    unit_of(&levels)?;
    let leaf = &levels[0].group;
    let (reqs, required) = leaf_need(snap, leaf, this);
    if required == 0 {
        return None;
    }
    let domains: Vec<Vec<String>> = match levels.iter().find_map(|l| {
        l.spec
            .topology
            .as_ref()
            .map(|k| (l.group.clone(), k.clone()))
    }) {
        None => vec![snap.node_names()],
        Some((g, key)) => {
            let ix = snap.domain_index(&key);
            match fixed_domain(snap, &g, &key, &ix) {
                Err(_) => return Some(BTreeSet::new()),
                Ok(Some(v)) => vec![ix.nodes(&v).to_vec()],
                Ok(None) => ix.domains().map(|(_, n)| n.to_vec()).collect(),
            }
        }
    };
    let dims = Dims::of(reqs.iter().map(|(r, _)| *r));
    let need = Need::new(&dims, &reqs, required);
    let mut out = BTreeSet::new();
    for nodes in domains {
        let mut free = Free::new(snap, &dims, false);
        for n in &nodes {
            let Some(mut room) = free.get(n) else {
                continue;
            };
            for (k, e) in snap.pods_on(n) {
                if stays(k, e) {
                    continue;
                }
                let shape = dims.shape(e.requests.as_ref().unwrap_or(&NO_REQUESTS));
                for (r, v) in room.iter_mut().zip(shape) {
                    *r = r.saturating_add(v);
                }
            }
            free.set(n, room);
        }
        let (placed, _) = free.fill(nodes.iter().map(String::as_str), &need);
        if placed >= required {
            out.extend(nodes);
        }
    }
    Some(out)
}

// === prioritize ===

/// Node scores for a grouped pod with a domain.
pub struct Prefer {
    scores: HashMap<String, i64>,
    /// Score of a domain node not in `scores`.
    rest: i64,
    domain: Gate,
}

impl Prefer {
    /// 0..=10: 10 where the simulation places the group's next members, 5
    /// where the rest of the group still fits after this pod, 1 where it
    /// would strand a member, 0 outside the domain.
    pub fn score(&self, node: &str) -> i64 {
        if self.domain.node(node).is_some() {
            return 0;
        }
        self.scores.get(node).copied().unwrap_or(self.rest)
    }
}

/// The preference for a grouped pod whose domain is known (fixed or
/// planned); `None` leaves prioritize to its default.
pub fn prefer(snap: &NodeState, pod: &Pod, requests: &Amounts) -> Option<Prefer> {
    let (ns, group) = group_of(pod)?;
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let any: Elig = None;
    let this = Some((group, name, requests, &any));
    let levels = chain(snap, ns, group).ok()?;
    let mut domain = Vec::new();
    for l in levels.iter().rev() {
        let Some(key) = l.spec.topology.clone() else {
            continue;
        };
        let ix = snap.domain_index(&key);
        let value = fixed_domain(snap, &l.group, &key, &ix).ok()?.or_else(|| {
            snap.group_ledger()
                .plans
                .get(&l.group)
                .map(|p| p.value.clone())
        })?;
        domain.push((key, ix, value));
    }
    let (_, ix, v) = domain.last()?;
    let nodes: Vec<&str> = ix
        .nodes(v)
        .iter()
        .map(String::as_str)
        .filter(|n| {
            domain
                .iter()
                .all(|(_, ix, v)| ix.value_of(n) == Some(v.as_str()))
        })
        .collect();
    let (mut reqs, _) = leaf_need(snap, &levels[0].group, this);
    if reqs.is_empty() {
        reqs.push((requests, None));
    }
    let dims = Dims::of(reqs.iter().map(|(r, _)| *r));
    let all = Need::new(&dims, &reqs, reqs.len());
    let mut free = Free::new(snap, &dims, false);
    let mark = free.mark();
    let (_, used) = free.fill(nodes.iter().copied(), &all);
    free.rollback(mark);
    let mut scores: HashMap<String, i64> = used.iter().map(|n| ((*n).to_owned(), 10)).collect();
    let mut rest = 5;
    if nodes.len() <= EXACT_PREFER_NODES {
        rest = 0;
        // The rest of the group without this pod.
        let shape = dims.shape(requests);
        let mut others = reqs.clone();
        if let Some(i) = others.iter().position(|(r, _)| *r == requests) {
            others.remove(i);
        }
        let rest_need = Need::new(&dims, &others, others.len());
        for n in &nodes {
            if scores.contains_key(*n) {
                continue;
            }
            let Some(mut room) = free.get(n) else {
                continue;
            };
            if max_fit(&room, &shape) == 0 {
                continue;
            }
            for (r, s) in room.iter_mut().zip(&shape) {
                *r -= s;
            }
            let mark = free.mark();
            free.set(n, room);
            let (placed, _) = free.fill(nodes.iter().copied(), &rest_need);
            free.rollback(mark);
            scores.insert(
                (*n).to_owned(),
                if placed >= rest_need.total() { 5 } else { 1 },
            );
        }
    }
    Some(Prefer {
        scores,
        rest,
        domain: Gate { wide: None, domain },
    })
}

#[cfg(test)]
mod tests;
