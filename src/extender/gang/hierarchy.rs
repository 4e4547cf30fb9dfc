//! The group hierarchy and quorum: a group's spec, the chain of a pod's
//! group and its parents, members as the snapshot shows them, what counts
//! toward a quorum, the domain placed members fix, and the plan token.

use super::*;

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
pub fn spec_of(snap: &ClusterState, r: &GroupRef) -> Option<Spec> {
    let object = if r.composite {
        GroupObject::Composite(snap.composite(&r.namespace, &r.name)?)
    } else {
        GroupObject::Pod(snap.group(&r.namespace, &r.name)?)
    };
    Some(Spec::from_object(object))
}

impl Spec {
    /// The spec of a group object.
    pub fn from_object(object: GroupObject<'_>) -> Spec {
        match object {
            GroupObject::Composite(composite) => {
                let spec = &composite.spec;
                Spec::of(
                    spec.scheduling_policy
                        .gang
                        .as_ref()
                        .map(|g| g.min_group_count),
                    spec.scheduling_constraints
                        .as_ref()
                        .and_then(|c| c.topology.as_ref())
                        .and_then(|t| t.first())
                        .map(|t| &t.key),
                    &spec.parent_composite_pod_group_name,
                )
            }
            GroupObject::Pod(group) => {
                let spec = &group.spec;
                Spec::of(
                    spec.scheduling_policy.gang.as_ref().map(|g| g.min_count),
                    spec.scheduling_constraints
                        .as_ref()
                        .and_then(|c| c.topology.as_ref())
                        .and_then(|t| t.first())
                        .map(|t| &t.key),
                    &spec.parent_composite_pod_group_name,
                )
            }
        }
    }

    /// From the fields PodGroup and CompositePodGroup share (k8s-openapi
    /// gives them distinct types): the gang minimum (`minCount` /
    /// `minGroupCount`, at least 1), the first topology key (empty is
    /// none) and the parent's name.
    fn of(gang_min: Option<i32>, topology: Option<&String>, parent: &Option<String>) -> Spec {
        Spec {
            policy: match gang_min {
                Some(min) => Policy::Gang(usize::try_from(min).unwrap_or(0).max(1)),
                None => Policy::Basic,
            },
            topology: topology.filter(|k| !k.is_empty()).cloned(),
            parent: parent.clone(),
        }
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
pub fn chain(snap: &ClusterState, namespace: &str, group: &str) -> Result<Vec<Level>, Rejection> {
    chain_from(snap, GroupRef::group(namespace, group))
}

/// [`chain`] from any group or composite. A parent reference that comes
/// back to a group already on the chain (a cycle), or a chain longer than
/// [`MAX_DEPTH`] levels, is unresolvable with a message naming the chain.
pub fn chain_from(snap: &ClusterState, start: GroupRef) -> Result<Vec<Level>, Rejection> {
    walk(snap, start).map_err(|(r, _)| r)
}

/// [`chain_from`] over the snapshot's [`chain`](ClusterState::chain); the
/// error says whether an object is only missing (it may still come) rather
/// than the hierarchy being broken.
pub(super) fn walk(snap: &ClusterState, start: GroupRef) -> Result<Vec<Level>, (Rejection, bool)> {
    let mut out: Vec<Level> = Vec::new();
    for link in snap.chain(&start.namespace, start.composite, &start.name) {
        let (message, missing) = match link {
            Ok(link) => {
                out.push(Level {
                    group: link.group(),
                    spec: Spec::from_object(link.object),
                });
                continue;
            }
            Err(ChainError::Missing(at)) => (format!("waiting for {at} to exist"), true),
            Err(broken) => (broken.broken_message().unwrap_or_default(), false),
        };
        let rejection = Rejection {
            message: bounded(message),
            unresolvable: true,
        };
        return Err((rejection, missing));
    }
    Ok(out)
}

/// Truncates a message to [`MAX_MESSAGE`] bytes on a char boundary.
pub fn bounded(m: String) -> String {
    crate::model::refs::truncate(m, MAX_MESSAGE)
}

// === members ===

/// The pod being filtered: `(its group, its name, its requests, the nodes
/// it may use)`.
pub(super) type FilteredPod<'a, 's> = Option<(&'a str, &'a str, &'s Amounts, &'a AllowedNodes)>;

/// The nodes a member may run on; `None`: any node.
pub type AllowedNodes = Option<Arc<BTreeSet<String>>>;

/// The cached nodes a pod's own `nodeSelector` and required node affinity
/// admit (`None`: it has neither).
pub(super) fn eligible(
    snap: &ClusterState,
    p: &crate::cache::cluster_index::PodEntry,
) -> AllowedNodes {
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
pub(super) struct Members<'s> {
    /// Non-terminal pods.
    pub(super) existing: usize,
    /// Nodes of the pods bound or assumed.
    pub(super) placed: Vec<&'s str>,
    /// Of `placed`, pods assumed by a bind still waiting for their devices'
    /// binding conditions: on their node, not yet placed for quorum.
    pub(super) awaiting: usize,
    /// Requests of the pods not placed yet, with the nodes each may use.
    pub(super) unplaced: Vec<(&'s Amounts, AllowedNodes)>,
}

pub(super) static NO_REQUESTS: Amounts = Amounts::new();

/// `this`: the pod being filtered (counted in its own group even if the
/// watch has not shown it yet).
pub(super) fn members<'s>(
    snap: &'s ClusterState,
    namespace: &str,
    group: &str,
    this: FilteredPod<'_, 's>,
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
            Some(n) if !is_this => {
                m.placed.push(n);
                m.awaiting += usize::from(p.awaiting_devices);
            }
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

/// Leaf PodGroups under a group (itself when it is one). With `departed`,
/// also the PodGroups deleted under each composite while their members
/// remained ([`ClusterState::departed_groups`]): their members are still
/// where they were placed.
pub(super) fn leaves(
    snap: &ClusterState,
    r: &GroupRef,
    depth: usize,
    departed: bool,
    out: &mut Vec<GroupRef>,
) {
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
    if departed {
        for g in snap.departed_groups(&r.namespace, &r.name) {
            out.push(GroupRef::group(&r.namespace, &g));
        }
    }
    for c in snap.child_composites(&r.namespace, &r.name) {
        leaves(
            snap,
            &GroupRef::composite(&r.namespace, &c),
            depth + 1,
            departed,
            out,
        );
    }
}

pub(super) fn children(snap: &ClusterState, r: &GroupRef) -> Vec<GroupRef> {
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
pub(super) enum QuorumCount {
    /// Pods that exist (filter: could the group ever reach quorum?).
    Existing,
    /// Pods bound or assumed (bind: has it?), but not those whose bind
    /// still waits for their devices' binding conditions.
    Placed,
}

/// `(placed, need)` of a group: its pods bound or assumed (for a
/// composite, its children at their own quorum) and its `minCount`
/// (`minGroupCount`); `(0, 1)` for a group the cache does not hold.
pub fn placed(snap: &ClusterState, r: &GroupRef) -> (usize, usize) {
    tally(snap, r, QuorumCount::Placed, 0)
}

/// `(have, need)` of a group: pods for a PodGroup, satisfied children for a
/// composite. A basic group needs one.
pub(super) fn tally(
    snap: &ClusterState,
    r: &GroupRef,
    count: QuorumCount,
    depth: usize,
) -> (usize, usize) {
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
            QuorumCount::Existing => m.existing,
            QuorumCount::Placed => m.placed.len() - m.awaiting,
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

/// Whether pod `namespace/pod`'s own PodGroup is at its quorum (its
/// `minCount`; one for a basic group) without it: placed or not, the pod
/// changes nothing its unit waits for.
pub fn surplus(snap: &ClusterState, namespace: &str, pod: &str) -> bool {
    let Some(p) = snap.pod(namespace, pod) else {
        return false;
    };
    let Some(group) = p.group.as_deref() else {
        return false;
    };
    let Some(spec) = spec_of(snap, &GroupRef::group(namespace, group)) else {
        return false;
    };
    let need = match spec.policy {
        Policy::Gang(n) => n,
        Policy::Basic => 1,
    };
    let m = members(snap, namespace, group, None);
    let counted = p.node.is_some() && !p.terminal && !p.awaiting_devices;
    m.placed.len() - m.awaiting - usize::from(counted) >= need
}

/// Whether pod `namespace/pod` brings its own PodGroup to its `minCount`
/// (it is not [`surplus`]), and another member of that group is bound
/// already (not only assumed): the group was released once, by a quorum
/// its unit reached, and the unit has since fallen short (a fault took a
/// member of a sibling). Held back for the unit again, the pod would leave
/// its own group bound below its minCount (simulation seed 1403240: a
/// member kept when its composite reached quorum came back to bind after a
/// drain evicted a sibling's member, was held for the composite, and was
/// released when the wait expired, its group bound 1 of 2).
pub fn completes_released_group(snap: &ClusterState, namespace: &str, pod: &str) -> bool {
    let Some(p) = snap.pod(namespace, pod) else {
        return false;
    };
    let Some(group) = p.group.as_deref() else {
        return false;
    };
    let Some(Policy::Gang(need)) =
        spec_of(snap, &GroupRef::group(namespace, group)).map(|s| s.policy)
    else {
        return false;
    };
    if surplus(snap, namespace, pod) {
        return false;
    }
    let m = members(snap, namespace, group, None);
    m.placed.len() - m.awaiting >= need
        && snap.member_pods(namespace, group).any(|(name, q)| {
            name != pod && q.node.is_some() && !q.terminal && !snap.is_assumed(namespace, name)
        })
}

/// The quorum of a member that would only take room from its unit's other
/// groups: its unit is a CompositePodGroup still gathering, and its own
/// PodGroup has its minCount without it ([`surplus`]). `None` otherwise.
pub fn surplus_while_gathering(snap: &ClusterState, namespace: &str, pod: &str) -> Option<Quorum> {
    let q = quorum(snap, namespace, pod).ok().flatten()?;
    (!q.reached && q.unit.composite && surplus(snap, namespace, pod)).then_some(q)
}

/// Why such a member is not placed now, for filter and bind alike.
pub fn surplus_message(
    unit: &GroupRef,
    have: usize,
    need: usize,
    namespace: &str,
    group: &str,
) -> String {
    bounded(format!(
        "{unit}: quorum not reached yet ({have} of {need} placed); pod group {namespace}/{group} \
         has its minCount without this pod, so it holds no room the other groups need: retry it \
         once the unit is placed"
    ))
}

/// The unit whose quorum a member waits for: the outermost gang on the
/// walk from the group to the root, whatever the policies between (a
/// `basic` level in the middle does not cut a `gang` root off, as in
/// upstream's gang plugin); `None` when no level is a gang.
pub(super) fn unit_of(levels: &[Level]) -> Option<usize> {
    levels
        .iter()
        .rposition(|l| matches!(l.spec.policy, Policy::Gang(_)))
}

/// Whether a member's unit has reached quorum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quorum {
    /// The group or composite whose quorum is waited for.
    pub unit: GroupRef,
    /// The unit is at its quorum and so is every gang between the pod and
    /// the unit (the pod's own PodGroup first).
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
pub fn quorum(snap: &ClusterState, namespace: &str, pod: &str) -> Result<Option<Quorum>, String> {
    let Some(group) = snap.pod(namespace, pod).and_then(|p| p.group.clone()) else {
        return Ok(None);
    };
    let levels = match walk(snap, GroupRef::group(namespace, &group)) {
        Ok(l) => l,
        Err((_, true)) => return Ok(None),
        Err((r, false)) => return Err(r.message),
    };
    let Some(at) = unit_of(&levels) else {
        return Ok(None);
    };
    let unit = levels[at].group.clone();
    let (have, need) = tally(snap, &unit, QuorumCount::Placed, 0);
    // A gang below the unit on the pod's own way up (its PodGroup, a
    // composite between) is all-or-nothing too: the unit's quorum, met by
    // other children, does not let this pod bind while its own gang is
    // short of its minCount (minGroupCount).
    let own_gangs_met = levels[..at].iter().all(|l| match l.spec.policy {
        Policy::Gang(_) => {
            let (h, n) = tally(snap, &l.group, QuorumCount::Placed, 0);
            h >= n
        }
        Policy::Basic => true,
    });
    let mut satisfied = Vec::new();
    collect_satisfied(snap, &unit, 0, &mut satisfied);
    Ok(Some(Quorum {
        reached: have >= need && own_gangs_met,
        unit,
        have,
        need,
        satisfied,
    }))
}

pub(super) fn collect_satisfied(
    snap: &ClusterState,
    r: &GroupRef,
    depth: usize,
    out: &mut Vec<GroupRef>,
) {
    let (have, need) = tally(snap, r, QuorumCount::Placed, depth);
    if have >= need {
        out.push(r.clone());
    }
    if r.composite && depth < MAX_DEPTH {
        for c in children(snap, r) {
            collect_satisfied(snap, &c, depth + 1, out);
        }
    }
}

/// Groups under a unit (itself, child groups and composites, recursively).
pub fn tree_of(snap: &ClusterState, unit: &GroupRef) -> Vec<GroupRef> {
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

/// The domain a group's placed members fix (`Ok(None)`: none placed).
/// Placed members fix it wherever they are: a member on a node the cache
/// does not know, or on a node without the label, leaves the domain
/// unknown, and members in two domains (an empty value and a non-empty one
/// included) conflict; either way no domain may be chosen (`Err`: why).
pub(super) fn fixed_domain(
    snap: &ClusterState,
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

/// Why putting a member of `group` on `node` would split its group, or a
/// composite above it, across two domains of its constraint: the first
/// level (outermost first) whose placed members fix a domain `node` lies
/// outside of. `None` when it does not (a chain that does not resolve, or
/// a domain not fixed, is left to filter and the quorum). Bind checks it
/// as it assumes the pod: the filter that chose the node may have run
/// before another member was placed elsewhere.
pub fn outside_fixed_domain(
    snap: &ClusterState,
    namespace: &str,
    group: &str,
    node: &str,
) -> Option<String> {
    let levels = chain(snap, namespace, group).ok()?;
    for l in levels.iter().rev() {
        let Some(key) = &l.spec.topology else {
            continue;
        };
        let ix = snap.domain_index(key);
        if let Ok(Some(value)) = fixed_domain(snap, &l.group, key, &ix)
            && ix.value_of(node) != Some(value.as_str())
        {
            return Some(bounded(format!(
                "{}: its members are placed in {key}={value}, and node {node} is outside it",
                l.group
            )));
        }
    }
    None
}

/// Nodes of every pod placed under a group.
pub(super) fn placed_nodes<'s>(snap: &'s ClusterState, r: &GroupRef) -> Vec<&'s str> {
    let mut ls = Vec::new();
    // Members of a child group deleted under a composite stay bound where
    // they are: they still fix the composite's domain.
    leaves(snap, r, 0, snap.any_departed(), &mut ls);
    ls.iter()
        .flat_map(|l| members(snap, &l.namespace, &l.name, None).placed)
        .collect()
}

/// What a leaf still needs: `(requests of unplaced pods, how many must fit)`.
pub(super) fn leaf_need<'s>(
    snap: &'s ClusterState,
    r: &GroupRef,
    this: FilteredPod<'_, 's>,
) -> (Vec<(&'s Amounts, AllowedNodes)>, usize) {
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

/// [`leaf_need`] as if none of the leaf's members were placed: every
/// member that is not terminal is still to place, and the gang needs its
/// `minCount` of them ([`Counting::Moved`]).
pub(super) fn leaf_need_moved<'s>(
    snap: &'s ClusterState,
    r: &GroupRef,
) -> (Vec<(&'s Amounts, AllowedNodes)>, usize) {
    let mut reqs: Vec<(&'s Amounts, AllowedNodes)> = snap
        .member_pods(&r.namespace, &r.name)
        .filter(|(_, p)| !p.terminal)
        .map(|(_, p)| {
            (
                p.requests.as_ref().unwrap_or(&NO_REQUESTS),
                eligible(snap, p),
            )
        })
        .collect();
    let required = match spec_of(snap, r).map(|s| s.policy) {
        Some(Policy::Gang(n)) => n.min(reqs.len()),
        _ => 0,
    };
    reqs.sort_by(|a, b| b.0.cmp(a.0));
    (reqs, required)
}

/// Fingerprint of a group's chain (itself and its parents, with specs): a
/// plan made under other specs is stale.
pub(super) fn token(levels: &[Level]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for l in levels {
        l.group.hash(&mut h);
        l.spec.hash(&mut h);
    }
    h.finish()
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
