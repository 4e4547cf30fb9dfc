//! The prioritize preference of a grouped pod whose domain is known: the
//! nodes the simulation fills first score highest.

use super::*;

/// Node scores for a grouped pod with a domain.
pub struct Prefer {
    pub(super) scores: HashMap<String, i64>,
    /// Score of a domain node not in `scores`.
    pub(super) rest: i64,
    pub(super) domain: GroupVerdict,
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
pub fn prefer(
    snap: &ClusterState,
    planner: &GangPlanner,
    pod: &Pod,
    requests: &Amounts,
) -> Option<Prefer> {
    let (ns, group) = group_of(pod)?;
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let any: AllowedNodes = None;
    let this = Some((group, name, requests, &any));
    let levels = chain(snap, ns, group).ok()?;
    let mut domain = Vec::new();
    for l in levels.iter().rev() {
        let Some(key) = l.spec.topology.clone() else {
            continue;
        };
        let ix = snap.domain_index(&key);
        let value = fixed_domain(snap, &l.group, &key, &ix)
            .ok()?
            .or_else(|| planner.planned(&l.group))?;
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
    let dims = ResourceAxes::of(snap, reqs.iter().map(|(r, _)| *r));
    let all = Demand::new(&dims, &reqs, reqs.len());
    let mut free = FreeRooms::new(snap, &dims, false);
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
        let rest_need = Demand::new(&dims, &others, others.len());
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
        domain: GroupVerdict { wide: None, domain },
    })
}
