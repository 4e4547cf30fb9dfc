//! The filter gate: the group verdict for one pod (a rejection for every
//! node, or the domain its nodes must lie in), in named steps, with domain
//! plans made and consulted through the [`GangPlanner`].

use super::*;

/// The group verdict for one pod: a rejection for every node, or the
/// domain its nodes must lie in.
#[derive(Default)]
pub struct GroupVerdict {
    /// Every node fails with this.
    pub wide: Option<Rejection>,
    /// `(index, value)` a node must carry, outermost first.
    pub(super) domain: Vec<(String, Arc<DomainIndex>, String)>,
}

impl GroupVerdict {
    pub(super) fn reject(message: String, unresolvable: bool) -> GroupVerdict {
        GroupVerdict {
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
    #[inline]
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

/// The group verdict for a pod being filtered. `candidates`: the node
/// names of the request (the domain of a group without topology).
///
/// The steps: the group's chain resolves; enough pods exist for each gang
/// up to the unit ([`enough_pods`]); every keyed level has a domain, fixed
/// by placed members or planned ([`domains_of`], [`make_plan`]); the
/// group's remaining pods still fit in it ([`remaining_fit`]). A plan whose
/// room was taken since is made again once. `now`: the time plans are
/// consulted, made and lapse at.
pub fn filter_gate(
    snap: &ClusterState,
    planner: &GangPlanner,
    pod: &Pod,
    requests: &Amounts,
    candidates: &[&str],
    now: Instant,
) -> GroupVerdict {
    filter_gate_for(snap, planner, pod, requests, candidates, false, now)
}

/// [`filter_gate`] for a pod that may be `returning`: a gang member whose
/// reservation was kept when its unit reached quorum, filtered again by
/// kube-scheduler's retry (its reservation was just dropped, see
/// [`crate::extender::bind::permit::Gangs::returning`]). Its unit's quorum
/// counted it, and members were bound on the strength of it, so the room
/// it held is its own: other groups' plans do not take it
/// ([`remaining_fit`]).
pub fn filter_gate_for(
    snap: &ClusterState,
    planner: &GangPlanner,
    pod: &Pod,
    requests: &Amounts,
    candidates: &[&str],
    returning: bool,
    now: Instant,
) -> GroupVerdict {
    let Some((namespace, group)) = group_of(pod) else {
        return GroupVerdict::default();
    };
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    // Plans and notes are keyed to real pods: a request for a pod the
    // cache does not know, or knows under another uid, must not make or
    // refresh a plan, or record a note, for its group. It waits (as bind
    // refuses it) until the watch shows the pod.
    match snap.pod(namespace, name) {
        None => {
            return GroupVerdict::reject(
                format!("pod {namespace}/{name} is not in the extender's cache yet"),
                true,
            );
        }
        Some(cached) if pod.metadata.uid.as_deref().unwrap_or_default() != cached.uid => {
            return GroupVerdict::reject(
                format!(
                    "pod {namespace}/{name} has another uid in the extender's cache (it was replaced)"
                ),
                true,
            );
        }
        Some(_) => {}
    }
    // The pod itself may use the nodes kube-scheduler offered.
    let offered: AllowedNodes = (!candidates.is_empty())
        .then(|| Arc::new(candidates.iter().map(|n| (*n).to_owned()).collect()));
    let this = Some((group, name, requests, &offered));
    let any: AllowedNodes = None;
    let anywhere = Some((group, name, requests, &any));
    let levels = match chain(snap, namespace, group) {
        Ok(levels) => levels,
        Err(rejection) => {
            return GroupVerdict {
                wide: Some(rejection),
                domain: Vec::new(),
            };
        }
    };
    if let Err(verdict) = enough_pods(snap, planner, &levels, this) {
        return verdict;
    }
    // A member its own PodGroup does not need while its CompositePodGroup
    // gathers takes no node: a binding cycle would hold room and a device
    // the other groups need, round after round, until its bind is refused
    // (simulation seed 20253). kube-scheduler retries it; once the unit is
    // placed it is placed like any pod.
    if let Some(q) = surplus_while_gathering(snap, namespace, name) {
        return GroupVerdict::reject(
            surplus_message(&q.unit, q.have, q.need, namespace, group),
            true,
        );
    }
    let mut replanned = false;
    let mut dropped_missed = false;
    loop {
        let (domain, from_plan) = match domains_of(snap, planner, &levels, now) {
            Err(verdict) => return verdict,
            Ok(DomainWalk::Unplanned { level, outer }) => {
                // Plan the highest level without a domain, inside the outer ones.
                if let Err((message, unresolvable)) = make_plan(
                    snap,
                    planner,
                    &levels,
                    level,
                    &outer,
                    this,
                    candidates.last().copied(),
                    now,
                ) {
                    note(snap, planner, &levels[level].group, &message);
                    return GroupVerdict::reject(message, unresolvable);
                }
                if replanned {
                    // A fresh plan that does not hold: give up for this cycle.
                    let leaf = &levels[0].group;
                    let message = format!("{leaf}: no domain can hold the pods it needs");
                    note(snap, planner, leaf, &message);
                    return GroupVerdict::reject(message, false);
                }
                replanned = true;
                continue;
            }
            Ok(DomainWalk::Resolved { domain, from_plan }) => (domain, from_plan),
        };
        let groups: Vec<GroupRef> = if from_plan {
            levels.iter().map(|l| l.group.clone()).collect()
        } else {
            Vec::new()
        };
        match remaining_fit(snap, planner, &levels, &domain, this, returning, now) {
            RemainingFit::Fits => {
                planner.followed(&groups);
                return held_where_it_cannot_complete(snap, planner, &levels, name, now)
                    .unwrap_or(GroupVerdict { wide: None, domain });
            }
            // kube-scheduler sent a sample of the nodes (its
            // percentageOfNodesToScore) that misses the group's domain:
            // the group still fits there, only this pod cannot go there
            // this cycle. Its offered nodes outside the domain fail (a
            // later cycle offers others); the plan stays, so the room it
            // holds is not handed to other groups, and nothing is noted.
            RemainingFit::Short { .. }
                if offered.is_some()
                    && matches!(
                        remaining_fit(snap, planner, &levels, &domain, anywhere, returning, now),
                        RemainingFit::Fits
                    ) =>
            {
                // ... unless no member was offered the planned domain for
                // a whole PLAN_TTL: kube-scheduler's own filters reject it
                // (simulation seeds 430, 1437), so plan again once.
                if !dropped_missed && planner.missed(&groups, now) {
                    dropped_missed = true;
                    continue;
                }
                return held_where_it_cannot_complete(snap, planner, &levels, name, now)
                    .unwrap_or(GroupVerdict { wide: None, domain });
            }
            RemainingFit::Short { .. } if from_plan && !replanned => {
                // Room was taken since the plan was made: plan again once.
                planner.forget(levels.iter().map(|l| l.group.clone()));
                replanned = true;
            }
            // Short only by room pods of lower priority hold: the members
            // pass where they fit as they are, so each is held at the
            // gang's Permit (its reservation keeping the room) while its
            // siblings preempt. Rejected, a member that fits as it is has
            // no victims, so kube-scheduler clears the nomination its
            // preemption made and the victims, created again, take the
            // room back, round after round (simulation seed 67445).
            RemainingFit::Short {
                required,
                fits_empty,
                ..
            } if fits_empty >= required
                && fits_preempting(
                    snap, planner, &levels, &domain, pod, anywhere, returning, now,
                ) =>
            {
                planner.followed(&groups);
                return held_where_it_cannot_complete(snap, planner, &levels, name, now)
                    .unwrap_or(GroupVerdict { wide: None, domain });
            }
            RemainingFit::Short {
                placed,
                required,
                fits_empty,
            } => {
                let leaf = &levels[0].group;
                let where_ = match domain.last() {
                    Some((key, _, value)) => format!(" in {key}={value}"),
                    None => String::new(),
                };
                let message =
                    format!("{leaf}: {placed} of the {required} pods it still needs fit{where_}");
                note(snap, planner, leaf, &message);
                let mut verdict = GroupVerdict::reject(message, fits_empty < required);
                // A domain its placed members fix is kept with the
                // rejection: a node outside it fails unresolvable, so
                // kube-scheduler's preemption looks for victims only where
                // they could help (simulation seed 103560: every node
                // failed resolvable, preemption found victims only outside
                // the rack, the extender dropped them all, and
                // kube-scheduler, answered no candidate, kept a nomination
                // that no preemption could ever complete, its room lost to
                // every pod of its priority for good; upstream clears the
                // nomination when no node has victims).
                if !from_plan {
                    verdict.domain = domain;
                }
                return verdict;
            }
        }
    }
}

/// A CompositePodGroup unit whose domain only members still gathering
/// fix (assumed by binds held or kept for the unit; none bound), where
/// too few of its groups still fit to complete it ([`enough_children_fit`])
/// while the whole unit, those members moved too, fits in another domain
/// as the cluster stands: the room one of its groups needs was taken after
/// the plan was made. Its members are
/// rejected, so none comes back to hold the domain: once the held ones are
/// released at the end of the wait, nothing fixes it and the unit is
/// planned again where it fits (simulation seed 603109: a child was kept
/// in a zone its sibling no longer fitted, its members held in turn so one
/// always fixed the zone, and the composite gathered and expired there
/// round after round while another zone stood empty). `None`: the pod may
/// pass. A unit with a member bound stays where it is, and so does a unit
/// that fits nowhere else as the cluster stands: its members are held
/// where they are while kube-scheduler preempts for its siblings (seed
/// 1002957: a top-priority composite that fitted no zone without
/// preemption, let go, never preempted).
fn held_where_it_cannot_complete(
    snap: &ClusterState,
    planner: &GangPlanner,
    levels: &[Level],
    name: &str,
    now: Instant,
) -> Option<GroupVerdict> {
    let level = &levels[unit_of(levels)?];
    let unit = &level.group;
    // A unit without a topology of its own has no domain to be held in.
    let key = level.spec.topology.as_deref().filter(|_| unit.composite)?;
    let mut leaves_under = Vec::new();
    leaves(snap, unit, 0, snap.any_departed(), &mut leaves_under);
    let mut gathering = false;
    let mut every_member: Vec<&Amounts> = Vec::new();
    for leaf in &leaves_under {
        for (member, p) in snap.member_pods(&leaf.namespace, &leaf.name) {
            if p.terminal {
                continue;
            }
            every_member.push(p.requests.as_ref().unwrap_or(&NO_REQUESTS));
            if p.node.is_none() {
                continue;
            }
            if !snap.is_assumed(&leaf.namespace, member) {
                return None;
            }
            gathering = true;
        }
    }
    if !gathering {
        return None;
    }
    let ix = snap.domain_index(key);
    let Ok(Some(held)) = fixed_domain(snap, unit, key, &ix) else {
        return None;
    };
    let axes = ResourceAxes::of(snap, every_member);
    let tree = build_tree(snap, unit, &axes, None, Counting::AsPlaced, 0)?;
    let own: BTreeSet<GroupRef> = tree_of(snap, unit).into_iter().collect();
    let namespace = levels[0].group.namespace.as_str();
    let elsewhere = planner.with_plans(|plans| {
        let mut free = FreeRooms::new(snap, &axes, false);
        reserve_others(snap, plans, &own, &axes, &mut free, None, now);
        hold_nominated(
            snap,
            &axes,
            &mut free,
            || floor_of(snap, namespace, name),
            |k, p| planned_member(plans, &own, k, p, now),
        );
        let within = ancestor_bounds(snap, plans, unit);
        // It completes there packed as the planner packs it, or enough of
        // its children fit on their own.
        let mark = free.mark();
        let packed = tree
            .place(&within, &mut free, &mut Vec::new(), None)
            .is_some_and(|trial| trial.satisfied);
        free.rollback(mark);
        if packed
            || enough_children_fit(snap, &tree, &within.with(Arc::clone(&ix), &held), &mut free)
        {
            return None;
        }
        // Built only now: the common case (the unit completes) needs none.
        // Its members' room in the held domain is not counted: it is
        // another domain the unit would move to.
        let moved = build_tree(snap, unit, &axes, None, Counting::Moved, 0)?;
        ix.domains()
            .map(|(value, _)| value)
            .filter(|value| *value != held)
            .find(|value| {
                let mark = free.mark();
                let fits = moved
                    .place_in(
                        Some(value),
                        &within.with(Arc::clone(&ix), value),
                        &mut free,
                        &mut Vec::new(),
                        None,
                    )
                    .is_some_and(|trial| trial.satisfied);
                free.rollback(mark);
                fits
            })
            .map(str::to_owned)
    })?;
    let message = format!(
        "{unit}: its groups no longer fit in the {key} domain its members waiting for quorum hold ({held}), and they fit in {elsewhere}; retry it once they are released"
    );
    note(snap, planner, unit, &message);
    // Its plans name the held domain: followed, they would let the next
    // member in there again once the held ones are released (seed
    // 1002957: each round's first member followed the plan back in).
    planner.forget(own);
    Some(GroupVerdict::reject(message, true))
}

/// Whether enough children of a composite's `tree` to meet its quorum
/// each fit `within` on their own, after what its other children whose
/// placed members fix their domains still need there (nothing committed).
/// The children that are free to move are not packed together: such a
/// packing is the planner's guess, and kube-scheduler packs members its
/// own way (simulation seed 1100518: a unit whose children fitted its zone
/// together only as the planner packed them was let go, planned back into
/// the same zone, and let go again, round after round, where it had
/// completed before). A child that does not fit even so shows the unit
/// cannot complete there. (Reserving the fixed siblings first can block
/// a child a packing of them all would fit: the caller tries that packing
/// too.)
fn enough_children_fit(
    snap: &ClusterState,
    tree: &GroupTree,
    within: &DomainBounds,
    free: &mut FreeRooms<'_>,
) -> bool {
    let GroupTreeKind::Composite { children, need } = &tree.kind else {
        return true;
    };
    let fitting = children
        .iter()
        .enumerate()
        // Children at their quorum already are not in `need`.
        .filter(|(_, c)| {
            let (have, need) = tally(snap, &c.group, QuorumCount::Placed, 1);
            have < need
        })
        .filter(|(at, c)| {
            let mark = free.mark();
            for (_, sibling) in children
                .iter()
                .enumerate()
                .filter(|(i, s)| i != at && s.fixed.is_some())
            {
                let before = free.mark();
                if !sibling
                    .place(within, free, &mut Vec::new(), None)
                    .is_some_and(|trial| trial.satisfied)
                {
                    // A sibling that cannot complete there reserves nothing.
                    free.rollback(before);
                }
            }
            let fits = c
                .place(within, free, &mut Vec::new(), None)
                .is_some_and(|trial| trial.satisfied);
            free.rollback(mark);
            fits
        })
        .count();
    fitting >= *need
}

/// Records why `group` cannot be placed, for the object the cache holds
/// under its name now (by uid: a group recreated later is not it).
fn note(snap: &ClusterState, planner: &GangPlanner, group: &GroupRef, message: &str) {
    let uid = if group.composite {
        snap.composite(&group.namespace, &group.name)
            .and_then(|c| c.metadata.uid.as_deref())
    } else {
        snap.group(&group.namespace, &group.name)
            .and_then(|g| g.metadata.uid.as_deref())
    };
    planner.note(group, uid, message);
}

/// Step 1: enough pods exist for each gang from the pod's group up to its
/// unit (`Err`: the unresolvable verdict naming the first level short).
pub(super) fn enough_pods(
    snap: &ClusterState,
    planner: &GangPlanner,
    levels: &[Level],
    this: FilteredPod<'_, '_>,
) -> Result<(), GroupVerdict> {
    let Some(unit) = unit_of(levels) else {
        return Ok(());
    };
    for level in &levels[..=unit] {
        let Policy::Gang(min) = level.spec.policy else {
            continue;
        };
        let (have, need) = if level.group.composite {
            tally(snap, &level.group, QuorumCount::Existing, 0)
        } else {
            let group = &level.group;
            (
                members(snap, &group.namespace, &group.name, this).existing,
                min,
            )
        };
        if have < need {
            let message = if level.group.composite {
                format!(
                    "{}: {have} of the {need} child groups it needs have all their pods",
                    level.group
                )
            } else {
                format!("{}: {have} of the {need} pods it needs exist", level.group)
            };
            note(snap, planner, &level.group, &message);
            return Err(GroupVerdict::reject(message, true));
        }
    }
    Ok(())
}

/// `(topology key, its index, the chosen value)` of each keyed level,
/// outermost first.
pub(super) type DomainChain = Vec<(String, Arc<DomainIndex>, String)>;

/// What step 2 found.
pub(super) enum DomainWalk {
    /// Every keyed level has a domain; `from_plan`: one came from a plan.
    Resolved {
        domain: DomainChain,
        from_plan: bool,
    },
    /// `levels[level]` has none yet; `outer`: the domains above it.
    Unplanned { level: usize, outer: DomainChain },
}

/// Step 2: the domain of each keyed level, outermost first: fixed by
/// placed members, else the level's live plan (`Err`: members in an
/// unknown or conflicting domain).
pub(super) fn domains_of(
    snap: &ClusterState,
    planner: &GangPlanner,
    levels: &[Level],
    now: Instant,
) -> Result<DomainWalk, GroupVerdict> {
    let mut domain: DomainChain = Vec::new();
    let mut from_plan = false;
    for at in (0..levels.len()).rev() {
        let level = &levels[at];
        let Some(key) = level.spec.topology.clone() else {
            continue;
        };
        let index = snap.domain_index(&key);
        let fixed = match fixed_domain(snap, &level.group, &key, &index) {
            Ok(fixed) => fixed,
            Err(message) => {
                note(snap, planner, &level.group, &message);
                return Err(GroupVerdict::reject(message, true));
            }
        };
        let value = match fixed {
            Some(value) => Some(value),
            None => {
                let inside_outer = |plan: &Plan| {
                    index.nodes(&plan.value).iter().any(|node| {
                        domain.iter().all(|(_, outer_index, outer_value)| {
                            outer_index.value_of(node) == Some(outer_value.as_str())
                        })
                    })
                };
                let planned =
                    planner.consult(&level.group, &key, token(&levels[at..]), now, inside_outer);
                from_plan |= planned.is_some();
                planned
            }
        };
        match value {
            Some(value) => domain.push((key, index, value)),
            None => {
                return Ok(DomainWalk::Unplanned {
                    level: at,
                    outer: domain,
                });
            }
        }
    }
    Ok(DomainWalk::Resolved { domain, from_plan })
}

/// What step 3 found.
pub(super) enum RemainingFit {
    Fits,
    /// Only `placed` of the `required` remaining pods fit; `fits_empty` of
    /// them would fit on empty nodes.
    Short {
        placed: usize,
        required: usize,
        fits_empty: usize,
    },
}

/// Step 3: the group's remaining pods still fit in its domain (every
/// cached node when it has none), after what other groups' plans reserve
/// there.
pub(super) fn remaining_fit(
    snap: &ClusterState,
    planner: &GangPlanner,
    levels: &[Level],
    domain: &DomainChain,
    this: FilteredPod<'_, '_>,
    returning: bool,
    now: Instant,
) -> RemainingFit {
    let Some(rest) = remaining(snap, levels, domain, this) else {
        return RemainingFit::Fits;
    };
    let required = rest.demand.required;
    let (nodes, mut free) = rest.rooms(snap, planner, levels, domain, this, returning, now);
    let (placed, _) = free.fill(nodes.iter().copied(), &rest.demand);
    if placed >= required {
        return RemainingFit::Fits;
    }
    // Would they fit on empty nodes? Then removing pods could help.
    let mut empty = FreeRooms::new(snap, &rest.axes, true);
    let (fits_empty, _) = empty.fill(nodes.iter().copied(), &rest.demand);
    RemainingFit::Short {
        placed,
        required,
        fits_empty,
    }
}

/// The pods a group still needs in its domain: the axes they are counted
/// on, their demand, and every cached node when the group has no domain.
struct Remaining {
    axes: ResourceAxes,
    demand: Demand,
    all_nodes: Vec<String>,
}

impl Remaining {
    /// The domain's nodes (every cached node without one), and their free
    /// room less what others hold against the group ([`reserved_rooms`]).
    #[allow(clippy::too_many_arguments)]
    fn rooms<'r, 's>(
        &'r self,
        snap: &'s ClusterState,
        planner: &GangPlanner,
        levels: &[Level],
        domain: &'r DomainChain,
        this: FilteredPod<'_, '_>,
        returning: bool,
        now: Instant,
    ) -> (Vec<&'r str>, FreeRooms<'s>) {
        let nodes = domain_nodes(domain, &self.all_nodes);
        let free = reserved_rooms(
            snap, planner, levels, this, returning, &self.axes, &nodes, now,
        );
        (nodes, free)
    }
}

/// [`Remaining`] for the pod's leaf group; `None` when it needs none.
fn remaining(
    snap: &ClusterState,
    levels: &[Level],
    domain: &DomainChain,
    this: FilteredPod<'_, '_>,
) -> Option<Remaining> {
    let (reqs, required) = leaf_need(snap, &levels[0].group, this);
    if required == 0 {
        return None;
    }
    let axes = ResourceAxes::of(snap, reqs.iter().map(|(r, _)| *r));
    let demand = Demand::new(&axes, &reqs, required);
    let all_nodes = if domain.is_empty() {
        snap.node_names()
    } else {
        Vec::new()
    };
    Some(Remaining {
        axes,
        demand,
        all_nodes,
    })
}

/// The nodes of `domain` (every cached node, `all`, without one).
fn domain_nodes<'a>(domain: &'a DomainChain, all: &'a [String]) -> Vec<&'a str> {
    match domain.last() {
        Some((_, index, value)) => index
            .nodes(value)
            .iter()
            .map(String::as_str)
            .filter(|node| {
                domain
                    .iter()
                    .all(|(_, index, value)| index.value_of(node) == Some(value.as_str()))
            })
            .collect(),
        // No topology: every cached node (each member on its own).
        None => all.iter().map(String::as_str).collect(),
    }
}

/// The free room of the nodes less what others hold against the group's
/// members: other groups' plans (not against a returning member, see
/// [`filter_gate_for`]), its unit's fixed siblings, and kube-scheduler's
/// nominated pods.
#[allow(clippy::too_many_arguments)]
fn reserved_rooms<'s>(
    snap: &'s ClusterState,
    planner: &GangPlanner,
    levels: &[Level],
    this: FilteredPod<'_, '_>,
    returning: bool,
    axes: &ResourceAxes,
    nodes: &[&str],
    now: Instant,
) -> FreeRooms<'s> {
    let mut free = FreeRooms::new(snap, axes, false);
    let own: BTreeSet<GroupRef> = levels.iter().map(|l| l.group.clone()).collect();
    let namespace = levels[0].group.namespace.as_str();
    let floor = || this.and_then(|(_, name, _, _)| floor_of(snap, namespace, name));
    let itself = |k: &crate::cache::cluster_index::Key| {
        this.is_some_and(|(_, name, _, _)| k.0 == namespace && k.1 == name)
    };
    // Other groups' plans hold their room, except against a returning
    // member (see [`filter_gate_for`]); kube-scheduler's nominated pods
    // hold theirs against every member.
    if returning {
        // The siblings in its own unit whose placed members fix their
        // domain still come first: the unit's quorum needs them as much
        // as it, and they cannot move (simulation seed 62206: a returning
        // member held the rack room its fixed sibling needed, round after
        // round, and the composite never formed).
        if let Some(unit) = unit_of(levels)
            .map(|u| &levels[u].group)
            .filter(|u| u.composite && placed_nodes(snap, &levels[0].group).is_empty())
        {
            planner.with_plans(|plans| {
                reserve_fixed_siblings(snap, plans, unit, &own, axes, &mut free, now);
            });
        }
        hold_nominated(snap, axes, &mut free, floor, |k, p| {
            itself(k) || planned_member(&HashMap::new(), &own, k, p, now)
        });
    } else {
        planner.with_plans(|plans| {
            reserve_others(snap, plans, &own, axes, &mut free, Some(nodes), now);
            // A group with no member placed (its domain is a plan) yields
            // to the siblings in its unit whose placed members fix theirs.
            if let Some(unit) = unit_of(levels)
                .map(|u| &levels[u].group)
                .filter(|u| u.composite && placed_nodes(snap, &levels[0].group).is_empty())
            {
                reserve_fixed_siblings(snap, plans, unit, &own, axes, &mut free, now);
            }
            hold_nominated(snap, axes, &mut free, floor, |k, p| {
                itself(k) || planned_member(plans, &own, k, p, now)
            });
        });
    }
    free
}

/// Whether the pods the pod's group still needs fit `domain` once
/// kube-scheduler's preemption frees what pods of lower effective priority
/// than the pod's hold there (never for a pod that may not preempt). When
/// the pod claims devices a node holds at most as many of the pods as it
/// has devices free: DynamicResources' Filter fails a node whose devices
/// are all taken as unresolvable, so DefaultPreemption never frees room
/// there (simulation seed 1046), and a victim's device is free only once
/// its claim is deallocated (seed 67629). The group's own members are its
/// demand, not victims.
#[allow(clippy::too_many_arguments)]
fn fits_preempting(
    snap: &ClusterState,
    planner: &GangPlanner,
    levels: &[Level],
    domain: &DomainChain,
    pod: &Pod,
    this: FilteredPod<'_, '_>,
    returning: bool,
    now: Instant,
) -> bool {
    let Some(floor) = crate::extender::preempt::preemptor_priority(snap, pod) else {
        return false;
    };
    let leaf = &levels[0].group;
    let Some(rest) = remaining(snap, levels, domain, this) else {
        return true;
    };
    let required = rest.demand.required;
    let (nodes, mut free) = rest.rooms(snap, planner, levels, domain, this, returning, now);
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let claims = snap
        .pod(&leaf.namespace, name)
        .is_some_and(|p| !p.claims.is_empty());
    let devices = claims.then(|| snap.free_devices());
    let mut device_room: HashMap<&str, usize> = HashMap::new();
    let own: BTreeSet<&str> = levels
        .iter()
        .filter(|l| !l.group.composite)
        .map(|l| l.group.name.as_str())
        .collect();
    for node in &nodes {
        let Some(mut room) = free.get(node) else {
            continue;
        };
        if let Some(devices) = &devices {
            let labels = snap
                .find(node)
                .and_then(|slot| snap.slot_at(slot))
                .and_then(|slot| slot.node.as_ref())
                .map(|n| &n.labels);
            let free = usize::try_from(labels.map_or(0, |labels| devices.on(node, labels)))
                .unwrap_or(usize::MAX);
            if free == 0 {
                continue;
            }
            device_room.insert(*node, free);
        }
        for (key, entry) in snap.pods_on(node) {
            let mine =
                key.0 == leaf.namespace && entry.group.as_deref().is_some_and(|g| own.contains(g));
            if mine || crate::extender::preempt::effective_priority(snap, key, entry) >= floor {
                continue;
            }
            if let Some(r) = &entry.requests {
                for (have, freed) in room.iter_mut().zip(rest.axes.shape(r)) {
                    *have = have.saturating_add(freed);
                }
            }
        }
        free.changed.insert((*node).to_owned(), Some(room));
    }
    // A pod that claims a device takes one of the node's free devices:
    // preemption frees the cpu and memory of its victims, but a device
    // only once their claims are deallocated, which the filter of the pod
    // it preempts for cannot count on (simulation seed 67629: the room of
    // a rack with four free devices passed a gang of six, whose members,
    // held there, never completed).
    let cap = |node: &str| {
        if devices.is_some() {
            device_room.get(node).copied().unwrap_or(0)
        } else {
            usize::MAX
        }
    };
    free.fill_capped(nodes.iter().copied(), &rest.demand, cap).0 >= required
}

/// Chooses and records domains for `levels[at]` and every keyed group below
/// it, inside `outer`. Err: why nothing fits, and whether removing pods
/// could not help. `last_offered`: the last node of the filter request, in
/// kube-scheduler's order; when the request is a sample that ends inside a
/// domain that holds the group, that domain is chosen ([`SampleEnd`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn make_plan(
    snap: &ClusterState,
    planner: &GangPlanner,
    levels: &[Level],
    at: usize,
    outer: &[(String, Arc<DomainIndex>, String)],
    this: FilteredPod<'_, '_>,
    last_offered: Option<&str>,
    now: Instant,
) -> Result<(), (String, bool)> {
    let root = &levels[at].group;
    // Members of the pod's own chain below `at` are in the subtree.
    let reqs = subtree_requests(snap, root, this);
    let axes = ResourceAxes::of(snap, reqs.iter().copied());
    let sample = this.and_then(|(_, name, requests, offered)| {
        Some(SampleEnd {
            last: last_offered?,
            offered: offered.as_deref()?,
            eligible: snap
                .pod(&levels[0].group.namespace, name)
                .and_then(|p| eligible(snap, p)),
            shape: axes.shape(requests),
        })
    });
    let Some(tree) = build_tree(snap, root, &axes, this, Counting::AsPlaced, 0) else {
        return Err((format!("waiting for {root} to exist"), true));
    };
    let bounds = DomainBounds(
        outer
            .iter()
            .map(|(_, index, value)| (Arc::clone(index), value.clone()))
            .collect(),
    );
    let own: BTreeSet<GroupRef> = tree_of(snap, root).into_iter().collect();
    // Lapsed plans and plans of groups that are gone reserve nothing.
    let live = |g: &GroupRef| spec_of(snap, g).is_some();
    let namespace = levels[0].group.namespace.as_str();
    let floor = || this.and_then(|(_, name, _, _)| floor_of(snap, namespace, name));
    let planned = planner.plan(now, live, |plans| {
        let mut free = FreeRooms::new(snap, &axes, false);
        reserve_others(snap, plans, &own, &axes, &mut free, None, now);
        if let Some(u) = unit_of(levels) {
            reserve_fixed_siblings(snap, plans, &levels[u].group, &own, &axes, &mut free, now);
        }
        hold_nominated(snap, &axes, &mut free, floor, |k, p| {
            this.is_some_and(|(_, name, _, _)| k.0 == namespace && k.1 == name)
                || planned_member(plans, &own, k, p, now)
        });
        let mut record = Vec::new();
        match tree.place(&bounds, &mut free, &mut record, sample.as_ref()) {
            Some(trial) if trial.satisfied => Some(
                record
                    .into_iter()
                    .map(|(group, key, value)| {
                        let token = chain_from(snap, group.clone()).map_or(0, |l| token(&l));
                        (group, key, value, token)
                    })
                    .collect(),
            ),
            _ => None,
        }
    });
    if planned {
        return Ok(());
    }
    let key = levels[at].spec.topology.clone().unwrap_or_default();
    let mut empty = FreeRooms::new(snap, &axes, true);
    let fits_empty = tree
        .place(&bounds, &mut empty, &mut Vec::new(), None)
        .is_some_and(|trial| trial.satisfied);
    let n = tree.required();
    Err((
        format!("{root}: no {key} domain can hold the {n} pods it still needs"),
        !fits_empty,
    ))
}

/// Drops the plans of a unit's groups (its quorum was reached), and every
/// plan lapsed by `now`.
pub fn drop_plans(planner: &GangPlanner, groups: &[GroupRef], now: Instant) {
    planner.drop(groups, now);
}
