//! Domain choice by simulation: the free room of nodes with an undo
//! journal ([`FreeRooms`]), what a group still needs as resource shapes
//! ([`Demand`] over [`ResourceAxes`]), a group's subtree prepared for
//! placement ([`GroupTree`]), the trial of one domain ([`TrialResult`]),
//! the room other groups' plans reserve ([`reserve_others`]), and the room
//! kube-scheduler's nominated pods hold ([`hold_nominated`]).

use super::*;

/// Resource names of a simulation; `pods` last. Extended resources a
/// DeviceClass backs are left out: DRA allocation, not node room, decides
/// them (kube-scheduler's DynamicResources allocates the devices).
#[derive(Debug, Clone, Default)]
pub(super) struct ResourceAxes {
    pub(super) names: Vec<String>,
}

impl ResourceAxes {
    pub(super) fn of<'a>(
        snap: &ClusterState,
        reqs: impl IntoIterator<Item = &'a Amounts>,
    ) -> ResourceAxes {
        let mut set: BTreeSet<&str> = BTreeSet::new();
        for r in reqs {
            set.extend(
                r.keys()
                    .map(String::as_str)
                    .filter(|k| *k != fit::PODS && snap.device_classes().backing(k).is_none()),
            );
        }
        let mut names: Vec<String> = set.into_iter().map(str::to_owned).collect();
        names.push(fit::PODS.to_owned());
        ResourceAxes { names }
    }

    pub(super) fn shape(&self, r: &Amounts) -> Vec<u64> {
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
pub(super) fn max_fit(room: &[u64], shape: &[u64]) -> u64 {
    room.iter()
        .zip(shape)
        .filter(|(_, s)| **s > 0)
        .map(|(r, s)| r / s)
        .min()
        .unwrap_or(0)
}

/// Members still to place: shapes with counts, largest first.
#[derive(Debug, Clone, Default)]
pub(super) struct Demand {
    pub(super) classes: Vec<(Vec<u64>, usize)>,
    /// The nodes each class may use (`None`: any), by class.
    pub(super) eligible: Vec<AllowedNodes>,
    /// At least this many must fit.
    pub(super) required: usize,
    /// Component-wise largest shape (for the leftover measure).
    pub(super) largest: Vec<u64>,
}

impl Demand {
    pub(super) fn new(
        dims: &ResourceAxes,
        reqs: &[(&Amounts, AllowedNodes)],
        required: usize,
    ) -> Demand {
        let mut eligs: Vec<AllowedNodes> = Vec::new();
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
        let mut eligible: Vec<AllowedNodes> = Vec::with_capacity(counts.len());
        let mut order: Vec<((Vec<u64>, usize), usize)> = counts.into_iter().rev().collect();
        // Members with the fewest nodes first (stable: largest first within),
        // so unrestricted members do not take the only nodes others may use.
        order.sort_by_key(|((_, ei), _)| eligs[*ei].as_ref().map_or(usize::MAX, |s| s.len()));
        for ((shape, ei), c) in order {
            classes.push((shape, c));
            eligible.push(eligs[ei].clone());
        }
        let mut largest = vec![0; dims.names.len()];
        for (s, _) in &classes {
            for (b, v) in largest.iter_mut().zip(s) {
                *b = (*b).max(*v);
            }
        }
        Demand {
            classes,
            eligible,
            required,
            largest,
        }
    }

    /// Whether pods of class `i` may run on `node`.
    pub(super) fn allows(&self, i: usize, node: &str) -> bool {
        self.eligible
            .get(i)
            .and_then(Option::as_ref)
            .is_none_or(|s| s.contains(node))
    }

    pub(super) fn total(&self) -> usize {
        self.classes.iter().map(|(_, c)| c).sum()
    }
}

/// Free room per node with an undo journal; nodes not touched yet are read
/// from the snapshot.
pub(super) struct FreeRooms<'s> {
    pub(super) rooms: crate::cache::cluster_index::Rooms<'s>,
    pub(super) changed: HashMap<String, Option<Vec<u64>>>,
    pub(super) journal: Vec<(String, Option<Option<Vec<u64>>>)>,
}

impl<'s> FreeRooms<'s> {
    pub(super) fn new(snap: &'s ClusterState, dims: &ResourceAxes, empty: bool) -> Self {
        FreeRooms {
            rooms: snap.rooms(&dims.names, empty),
            changed: HashMap::new(),
            journal: Vec::new(),
        }
    }

    pub(super) fn get(&self, node: &str) -> Option<Vec<u64>> {
        if let Some(v) = self.changed.get(node) {
            return v.clone();
        }
        let mut out = Vec::new();
        self.rooms.room(node, &mut out).then_some(out)
    }

    /// Appends the node's room to `out`; false (nothing appended) when the
    /// node cannot take pods.
    pub(super) fn load(&self, node: &str, out: &mut Vec<u64>, scratch: &mut Vec<u64>) -> bool {
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

    pub(super) fn set(&mut self, node: &str, room: Vec<u64>) {
        let old = self.changed.insert(node.to_owned(), Some(room));
        self.journal.push((node.to_owned(), old));
    }

    pub(super) fn mark(&self) -> usize {
        self.journal.len()
    }

    pub(super) fn rollback(&mut self, mark: usize) {
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
    pub(super) fn fill<'n>(
        &mut self,
        nodes: impl IntoIterator<Item = &'n str>,
        need: &Demand,
    ) -> (usize, Vec<&'n str>) {
        self.fill_capped(nodes, need, |_| usize::MAX)
    }

    /// [`FreeRooms::fill`] with at most `cap(node)` pods on a node (the
    /// devices free there, for pods that each claim one).
    pub(super) fn fill_capped<'n>(
        &mut self,
        nodes: impl IntoIterator<Item = &'n str>,
        need: &Demand,
        cap: impl Fn(&str) -> usize,
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
            let cap = cap(node);
            let mut here = 0;
            for (class, (shape, count)) in classes.iter_mut().enumerate() {
                if *count == 0 || !need.allows(class, node) {
                    continue;
                }
                let fits = max_fit(&room, shape)
                    .min(*count as u64)
                    .min(cap.saturating_sub(here) as u64) as usize;
                if fits == 0 {
                    continue;
                }
                for (amount, per_pod) in room.iter_mut().zip(shape.iter()) {
                    *amount = amount.saturating_sub(per_pod.saturating_mul(fits as u64));
                }
                *count -= fits;
                here += fits;
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
    pub(super) fn leftover<'n>(
        &self,
        nodes: impl IntoIterator<Item = &'n str>,
        shape: &[u64],
    ) -> u64 {
        nodes
            .into_iter()
            .filter_map(|n| self.get(n))
            .map(|r| max_fit(&r, shape))
            .fold(0u64, u64::saturating_add)
    }
}

/// Nodes must carry each `(index, value)`.
#[derive(Clone, Default)]
pub(super) struct DomainBounds(pub(super) Vec<(Arc<DomainIndex>, String)>);

impl DomainBounds {
    pub(super) fn admits(&self, node: &str) -> bool {
        self.0
            .iter()
            .all(|(ix, v)| ix.value_of(node) == Some(v.as_str()))
    }

    pub(super) fn with(&self, ix: Arc<DomainIndex>, value: &str) -> DomainBounds {
        let mut bounds = self.0.clone();
        bounds.push((ix, value.to_owned()));
        DomainBounds(bounds)
    }
}

/// Where kube-scheduler's node sample ended, when a filter call was sent
/// fewer nodes than have room (an operator's profile without
/// `percentageOfNodesToScore: 100`): kube-scheduler filters from a
/// rotating start index, stops after `numFeasibleNodesToFind` feasible
/// nodes, and starts its next cycle right after the last node it
/// processed. A domain the sample ends inside (its last node is there, and
/// so are nodes with room the sample did not reach) is the one the next
/// members' samples most likely reach too; a domain wholly inside the
/// sample is most likely wholly outside the next one.
pub(super) struct SampleEnd<'a> {
    /// The last node of the request, in kube-scheduler's order.
    pub(super) last: &'a str,
    /// Every node of the request.
    pub(super) offered: &'a BTreeSet<String>,
    /// The nodes the pod's own `nodeSelector` and required node affinity
    /// admit (`None`: any): a node they exclude was not offered because of
    /// them, not because the sample stopped.
    pub(super) eligible: AllowedNodes,
    /// The filtered pod's shape over the simulation's axes.
    pub(super) shape: Vec<u64>,
}

impl SampleEnd<'_> {
    /// The value of the domain of `ix` (inside `within`) the sample ends
    /// inside, if the last node lies in one that also holds a node with
    /// room for the pod the sample did not offer.
    pub(super) fn ends_inside(
        &self,
        ix: &DomainIndex,
        within: &DomainBounds,
        free: &FreeRooms<'_>,
    ) -> Option<String> {
        if !within.admits(self.last) {
            return None;
        }
        let value = ix.value_of(self.last)?;
        ix.nodes(value)
            .iter()
            .any(|n| {
                !self.offered.contains(n)
                    && within.admits(n)
                    && self.eligible.as_ref().is_none_or(|e| e.contains(n))
                    && free
                        .get(n)
                        .is_some_and(|room| max_fit(&room, &self.shape) > 0)
            })
            .then(|| value.to_owned())
    }
}

/// A group's subtree prepared for simulation.
pub(super) struct GroupTree {
    pub(super) group: GroupRef,
    pub(super) key: Option<(String, Arc<DomainIndex>)>,
    /// The domain value fixed by placed members.
    pub(super) fixed: Option<String>,
    pub(super) kind: GroupTreeKind,
    pub(super) largest: Vec<u64>,
}

pub(super) enum GroupTreeKind {
    Leaf(Demand),
    Composite {
        children: Vec<GroupTree>,
        need: usize,
    },
}

/// The outcome of placing a tree in one domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TrialResult {
    pub(super) satisfied: bool,
    pub(super) placed: usize,
    pub(super) leftover: u64,
}

impl GroupTree {
    /// Places the tree within `within`; the best domain is committed to
    /// `free`, and `record` receives the chosen `(group, key, value)` of
    /// every level with a topology key.
    ///
    /// Domains are compared by whether the tree is satisfied there, then
    /// how many pods fit, then (with `sample`) whether kube-scheduler's
    /// sample ends inside the domain ([`SampleEnd`]), then best fit (least
    /// room left over).
    pub(super) fn place(
        &self,
        within: &DomainBounds,
        free: &mut FreeRooms<'_>,
        record: &mut Vec<(GroupRef, String, String)>,
        sample: Option<&SampleEnd<'_>>,
    ) -> Option<TrialResult> {
        let Some((key, ix)) = &self.key else {
            // No key: the domain is what the parent allows.
            return self.place_in(None, within, free, record, sample);
        };
        // The one domain of this level the sample ends inside, if any.
        let follows = sample.and_then(|s| s.ends_inside(ix, within, free));
        let mut best: Option<(TrialResult, bool, &str)> = None;
        let (mut buf, mut scratch_room) = (Vec::new(), Vec::new());
        for (value, nodes) in ix.domains() {
            if self.fixed.as_deref().is_some_and(|f| f != value) {
                continue;
            }
            let trial = match &self.kind {
                // A leaf is tried on a flat copy of its domain's rooms.
                GroupTreeKind::Leaf(need) => trial_leaf(
                    free,
                    nodes,
                    within,
                    need,
                    &self.largest,
                    &mut buf,
                    &mut scratch_room,
                ),
                GroupTreeKind::Composite { .. } => {
                    let inner = within.with(Arc::clone(ix), value);
                    let mark = free.mark();
                    let mut scratch = Vec::new();
                    let nested = self.place_in(Some(value), &inner, free, &mut scratch, sample);
                    free.rollback(mark);
                    nested
                }
            };
            let Some(trial) = trial else { continue };
            let here = follows.as_deref() == Some(value);
            let better = match best {
                None => true,
                Some((kept, kept_here, _)) => {
                    (
                        trial.satisfied,
                        trial.placed,
                        here,
                        std::cmp::Reverse(trial.leftover),
                    ) > (
                        kept.satisfied,
                        kept.placed,
                        kept_here,
                        std::cmp::Reverse(kept.leftover),
                    )
                }
            };
            if better {
                best = Some((trial, here, value));
            }
        }
        let (chosen, _, value) = best?;
        let inner = within.with(Arc::clone(ix), value);
        record.push((self.group.clone(), key.clone(), value.to_owned()));
        self.place_in(Some(value), &inner, free, record, sample);
        Some(chosen)
    }

    pub(super) fn place_in(
        &self,
        value: Option<&str>,
        within: &DomainBounds,
        free: &mut FreeRooms<'_>,
        record: &mut Vec<(GroupRef, String, String)>,
        sample: Option<&SampleEnd<'_>>,
    ) -> Option<TrialResult> {
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
        match &self.kind {
            GroupTreeKind::Leaf(need) => {
                let (placed, _) = free.fill(nodes.iter().copied(), need);
                Some(TrialResult {
                    satisfied: placed >= need.required,
                    placed,
                    leftover: free.leftover(nodes.iter().copied(), &self.largest),
                })
            }
            GroupTreeKind::Composite { children, need } => {
                let mut satisfied = 0;
                let mut placed = 0;
                for c in children {
                    if let Some(child) = c.place(within, free, record, sample) {
                        satisfied += usize::from(child.satisfied);
                        placed += child.placed;
                    }
                }
                Some(TrialResult {
                    satisfied: satisfied >= *need,
                    placed,
                    leftover: free.leftover(nodes.iter().copied(), &self.largest),
                })
            }
        }
    }
}

/// First fit of a leaf's need over `nodes` on a flat copy of their rooms
/// (nothing committed).
pub(super) fn trial_leaf(
    free: &FreeRooms<'_>,
    nodes: &[String],
    within: &DomainBounds,
    need: &Demand,
    largest: &[u64],
    buf: &mut Vec<u64>,
    scratch: &mut Vec<u64>,
) -> Option<TrialResult> {
    let axes = largest.len();
    buf.clear();
    let restricted = need.eligible.iter().any(Option::is_some);
    let mut names: Vec<&str> = Vec::new();
    for n in nodes {
        if within.admits(n) && free.load(n, buf, scratch) && restricted {
            names.push(n);
        }
    }
    if buf.is_empty() || axes == 0 {
        return None;
    }
    let mut left: Vec<usize> = need.classes.iter().map(|(_, c)| *c).collect();
    let mut placed = 0;
    let mut leftover = 0u64;
    for (at, room) in buf.chunks_mut(axes).enumerate() {
        for (class, ((shape, _), still)) in need.classes.iter().zip(left.iter_mut()).enumerate() {
            if *still == 0 || (restricted && !need.allows(class, names[at])) {
                continue;
            }
            let fits = max_fit(room, shape).min(*still as u64);
            if fits == 0 {
                continue;
            }
            for (amount, per_pod) in room.iter_mut().zip(shape) {
                *amount = amount.saturating_sub(per_pod.saturating_mul(fits));
            }
            *still -= fits as usize;
            placed += fits as usize;
        }
        leftover = leftover.saturating_add(max_fit(room, largest));
    }
    Some(TrialResult {
        satisfied: placed >= need.required,
        placed,
        leftover,
    })
}

/// How a tree counts the members already on nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Counting {
    /// As they are: placed members fix their domains and count toward
    /// quorum; the tree needs what is not placed yet.
    AsPlaced,
    /// As if every member were still to place: no domain fixed, no quorum
    /// met, every member that is not terminal in the demand (a unit whose
    /// members only gather, moved whole: [`super::gate`]'s held check).
    Moved,
}

/// A group's subtree prepared for simulation (`None`: the group is gone,
/// or its placed members are in an unknown or conflicting domain).
pub(super) fn build_tree(
    snap: &ClusterState,
    r: &GroupRef,
    dims: &ResourceAxes,
    this: FilteredPod<'_, '_>,
    counting: Counting,
    depth: usize,
) -> Option<GroupTree> {
    let spec = spec_of(snap, r)?;
    let key = spec
        .topology
        .as_ref()
        .map(|k| (k.clone(), snap.domain_index(k)));
    // Members in an unknown or conflicting domain: the group cannot be
    // placed anywhere (filter reports why for the pod's own chain).
    let fixed = match (&key, counting) {
        (Some((k, ix)), Counting::AsPlaced) => fixed_domain(snap, r, k, ix).ok()?,
        _ => None,
    };
    let (kind, largest) = if r.composite {
        let mut kids: Vec<GroupTree> = if depth < MAX_DEPTH {
            children(snap, r)
                .iter()
                .filter_map(|c| build_tree(snap, c, dims, this, counting, depth + 1))
                .collect()
        } else {
            Vec::new()
        };
        // Biggest demand first.
        kids.sort_by_key(|t| std::cmp::Reverse(t.demand()));
        let satisfied_already = match counting {
            Counting::AsPlaced => children(snap, r)
                .iter()
                .filter(|c| {
                    let (h, n) = tally(snap, c, QuorumCount::Placed, depth + 1);
                    h >= n
                })
                .count(),
            Counting::Moved => 0,
        };
        let need = match spec.policy {
            Policy::Gang(n) => n.saturating_sub(satisfied_already),
            Policy::Basic => 0,
        };
        let mut largest = vec![0; dims.names.len()];
        for k in &kids {
            for (b, v) in largest.iter_mut().zip(&k.largest) {
                *b = (*b).max(*v);
            }
        }
        (
            GroupTreeKind::Composite {
                children: kids,
                need,
            },
            largest,
        )
    } else {
        let (reqs, required) = match counting {
            Counting::AsPlaced => leaf_need(snap, r, this),
            Counting::Moved => leaf_need_moved(snap, r),
        };
        let need = Demand::new(dims, &reqs, required);
        let largest = need.largest.clone();
        (GroupTreeKind::Leaf(need), largest)
    };
    let largest = if largest.iter().all(|v| *v == 0) {
        let mut b = vec![0; dims.names.len()];
        if let Some(last) = b.last_mut() {
            *last = 1;
        }
        b
    } else {
        largest
    };
    Some(GroupTree {
        group: r.clone(),
        key,
        fixed,
        kind,
        largest,
    })
}

impl GroupTree {
    /// Pods the tree still needs placed: a leaf's, or the sum of its
    /// children's (each pod counted once).
    pub(super) fn required(&self) -> usize {
        match &self.kind {
            GroupTreeKind::Leaf(n) => n.required,
            GroupTreeKind::Composite { children, .. } => {
                children.iter().map(GroupTree::required).sum()
            }
        }
    }

    pub(super) fn demand(&self) -> u64 {
        match &self.kind {
            GroupTreeKind::Leaf(n) => n
                .classes
                .iter()
                .map(|(s, c)| {
                    s.iter()
                        .fold(0u64, |a, v| a.saturating_add(*v))
                        .saturating_mul(*c as u64)
                })
                .fold(0u64, u64::saturating_add),
            GroupTreeKind::Composite { children, .. } => {
                children.iter().map(GroupTree::demand).sum()
            }
        }
    }
}

/// Requests of every unplaced pod under `r` (for the simulation's dims).
pub(super) fn subtree_requests<'s>(
    snap: &'s ClusterState,
    r: &GroupRef,
    this: FilteredPod<'_, 's>,
) -> Vec<&'s Amounts> {
    let mut ls = Vec::new();
    leaves(snap, r, 0, false, &mut ls);
    ls.iter()
        .flat_map(|l| members(snap, &l.namespace, &l.name, this).unplaced)
        .map(|(r, _)| r)
        .collect()
}

/// Places the members other planned groups still need (in their planned
/// domains) into `free`, skipping the groups of `own`. With `overlap`,
/// only plans whose domain shares a node with it.
pub(super) fn reserve_others(
    snap: &ClusterState,
    plans: &HashMap<GroupRef, Plan>,
    own: &BTreeSet<GroupRef>,
    dims: &ResourceAxes,
    free: &mut FreeRooms<'_>,
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
        // Cheap first: no node of `overlap` carries the value at all.
        if let Some(mine) = overlap
            && !mine
                .iter()
                .any(|n| ix.value_of(n) == Some(p.value.as_str()))
        {
            continue;
        }
        let nodes = plan_nodes(snap, plans, r, p, &ix);
        if let Some(mine) = overlap
            && !nodes.iter().any(|n| mine.contains(n))
        {
            continue;
        }
        let (reqs, required) = leaf_need(snap, r, None);
        if required == 0 {
            continue;
        }
        let reqs: Vec<(&Amounts, AllowedNodes)> = reqs.into_iter().take(required).collect();
        let need = Demand::new(dims, &reqs, required);
        free.fill(nodes.iter().copied(), &need);
    }
}

/// The priority kube-scheduler compares nominated pods with when it
/// filters pod `name` of `namespace` (`None`: the cache does not know it,
/// and every nominated pod holds its room).
pub(super) fn floor_of(snap: &ClusterState, namespace: &str, name: &str) -> Option<i32> {
    snap.pod(namespace, name)
        .map(|p| crate::pods::priority::resolve(p.declared(), snap.classes()).priority)
}

/// Takes from `free` the room of the pending pods kube-scheduler nominated
/// to a node ([`ClusterState::nominated_pods`]) whose priority is at least
/// `floor()` (called only when a pod is nominated), as kube-scheduler's own filter counts them for a pod of that
/// priority (`RunFilterPluginsWithNominatedPods`, which adds the nominated
/// pods of equal or higher priority to the node): the room its preemption
/// freed is the preemptor's, and kube-scheduler offers it to no lower pod,
/// so a group plan that counted it would hold a domain kube-scheduler
/// never lets the group into. `skip`: pods whose room is counted already
/// (the pod being filtered, the group's own members, which are its demand,
/// and members of groups whose plans [`reserve_others`] reserved).
pub(super) fn hold_nominated(
    snap: &ClusterState,
    dims: &ResourceAxes,
    free: &mut FreeRooms<'_>,
    floor: impl FnOnce() -> Option<i32>,
    skip: impl Fn(&crate::cache::cluster_index::Key, &crate::cache::cluster_index::PodEntry) -> bool,
) {
    let mut nominated = snap.nominated_pods().peekable();
    // Nothing nominated (the usual case): nothing to look up.
    if nominated.peek().is_none() {
        return;
    }
    let floor = floor();
    for (k, p, node) in nominated {
        if skip(k, p) {
            continue;
        }
        if let Some(floor) = floor
            && crate::pods::priority::resolve(p.declared(), snap.classes()).priority < floor
        {
            continue;
        }
        let Some(mut room) = free.get(node) else {
            continue;
        };
        let shape = dims.shape(p.requests.as_ref().unwrap_or(&NO_REQUESTS));
        for (r, v) in room.iter_mut().zip(shape) {
            *r = r.saturating_sub(v);
        }
        free.set(node, room);
    }
}

/// Whether pod `p` (`k`) is a member of a group whose live plan
/// [`reserve_others`] reserves room for (so [`hold_nominated`] does not
/// count it twice).
pub(super) fn planned_member(
    plans: &HashMap<GroupRef, Plan>,
    own: &BTreeSet<GroupRef>,
    k: &crate::cache::cluster_index::Key,
    p: &crate::cache::cluster_index::PodEntry,
    now: Instant,
) -> bool {
    let Some(g) = p.group.as_deref() else {
        return false;
    };
    let r = GroupRef::group(&k.0, g);
    own.contains(&r) || plans.get(&r).is_some_and(|plan| plan.expires > now)
}

/// Reserves in `free` what the other gangs of `unit`'s tree (outside
/// `own`, without a live plan) still need in the domains their placed
/// members fix, for each one that can still complete there: a group whose
/// members are placed cannot move, so a sibling with no member placed
/// yields it the room rather than keep the unit from its quorum
/// (simulation seed 344: a child's plan, made while its sibling was whole,
/// kept it in the room the sibling needed once faults took members from
/// it, and the unit gathered and expired round after round). A sibling
/// that cannot complete there anyway reserves nothing. Planned siblings
/// reserve through [`reserve_others`].
pub(super) fn reserve_fixed_siblings(
    snap: &ClusterState,
    plans: &HashMap<GroupRef, Plan>,
    unit: &GroupRef,
    own: &BTreeSet<GroupRef>,
    dims: &ResourceAxes,
    free: &mut FreeRooms<'_>,
    now: Instant,
) {
    if !unit.composite {
        return;
    }
    for g in tree_of(snap, unit) {
        if g.composite || own.contains(&g) || plans.get(&g).is_some_and(|p| p.expires > now) {
            continue;
        }
        let Some(key) = spec_of(snap, &g).and_then(|s| s.topology) else {
            continue;
        };
        let ix = snap.domain_index(&key);
        let Ok(Some(value)) = fixed_domain(snap, &g, &key, &ix) else {
            continue;
        };
        let (reqs, required) = leaf_need(snap, &g, None);
        if required == 0 {
            continue;
        }
        let bounds = ancestor_bounds(snap, plans, &g);
        let nodes: Vec<&str> = ix
            .nodes(&value)
            .iter()
            .map(String::as_str)
            .filter(|n| bounds.admits(n))
            .collect();
        let reqs: Vec<(&Amounts, AllowedNodes)> = reqs.into_iter().take(required).collect();
        let need = Demand::new(dims, &reqs, required);
        let mark = free.mark();
        if free.fill(nodes.iter().copied(), &need).0 < required {
            free.rollback(mark);
        }
    }
}

/// The nodes of the domain a group's plan names. A label value names a
/// domain only together with its whole chain of parent values (`rack-1`
/// may exist in every block, `block-1` in every zone), so the plan's value
/// is bounded by the domain of each keyed ancestor of the group, however
/// deep: fixed by the ancestor's placed members, else its plan. An
/// ancestor with neither (or a broken chain) bounds nothing.
pub(super) fn plan_nodes<'i>(
    snap: &ClusterState,
    plans: &HashMap<GroupRef, Plan>,
    group: &GroupRef,
    plan: &Plan,
    ix: &'i DomainIndex,
) -> Vec<&'i str> {
    let bounds = ancestor_bounds(snap, plans, group);
    ix.nodes(&plan.value)
        .iter()
        .map(String::as_str)
        .filter(|n| bounds.admits(n))
        .collect()
}

/// The domains of a group's keyed ancestors ([`plan_nodes`]).
pub(super) fn ancestor_bounds(
    snap: &ClusterState,
    plans: &HashMap<GroupRef, Plan>,
    group: &GroupRef,
) -> DomainBounds {
    let Ok(levels) = chain_from(snap, group.clone()) else {
        return DomainBounds::default();
    };
    let mut bounds = Vec::new();
    for level in levels.iter().skip(1) {
        let Some(key) = &level.spec.topology else {
            continue;
        };
        let ix = snap.domain_index(key);
        let value = match fixed_domain(snap, &level.group, key, &ix) {
            Ok(Some(v)) => Some(v),
            Ok(None) => plans
                .get(&level.group)
                .filter(|p| &p.key == key)
                .map(|p| p.value.clone()),
            Err(_) => None,
        };
        if let Some(v) = value {
            bounds.push((ix, v));
        }
    }
    DomainBounds(bounds)
}
