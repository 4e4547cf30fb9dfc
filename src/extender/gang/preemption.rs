//! Where preempting can help a grouped preemptor.

use super::*;

/// Where preempting can help a grouped preemptor: the nodes of every domain
/// in which its gang's remaining pods (at least those its quorum still
/// needs) fit once every pod that may be preempted is gone. `None`: no
/// group rule applies (no group, no gang on its way to the root, or the
/// quorum is already reached), so any candidate may help. `stays`: whether
/// a pod counted on a node may not be preempted.
///
/// Checked for the preemptor's own PodGroup in its innermost topology
/// domain, identified by its whole chain of keyed levels up to the root
/// ([`chained_domains`]); a broken hierarchy or members in an unknown or
/// conflicting domain leave nothing that helps.
pub fn preemption_nodes(
    snap: &ClusterState,
    pod: &Pod,
    requests: &Amounts,
    stays: impl Fn(&crate::cache::cluster_index::Key, &crate::cache::cluster_index::PodEntry) -> bool,
) -> Option<BTreeSet<String>> {
    let (ns, group) = group_of(pod)?;
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let any: AllowedNodes = None;
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
    let Some(domains) = chained_domains(snap, &levels) else {
        return Some(BTreeSet::new());
    };
    let dims = ResourceAxes::of(snap, reqs.iter().map(|(r, _)| *r));
    let need = Demand::new(&dims, &reqs, required);
    let mut out = BTreeSet::new();
    for nodes in domains {
        let mut free = FreeRooms::new(snap, &dims, false);
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

/// The nodes of each innermost domain of a chain of groups, a domain being
/// the values of every keyed level from the root down (so `rack-1` of
/// `block-1` and `rack-1` of `block-2` are two domains); a level whose
/// placed members fix its value admits only that value. No keyed level:
/// every cached node, one domain. `None`: members in an unknown or
/// conflicting domain.
pub(super) fn chained_domains(snap: &ClusterState, levels: &[Level]) -> Option<Vec<Vec<String>>> {
    let mut keyed: Vec<(Arc<DomainIndex>, Option<String>)> = Vec::new();
    for l in levels.iter().rev() {
        let Some(key) = &l.spec.topology else {
            continue;
        };
        let ix = snap.domain_index(key);
        let fixed = fixed_domain(snap, &l.group, key, &ix).ok()?;
        keyed.push((ix, fixed));
    }
    let Some((inner, inner_fixed)) = keyed.last() else {
        return Some(vec![snap.node_names()]);
    };
    let mut by_chain: BTreeMap<Vec<&str>, Vec<String>> = BTreeMap::new();
    for (value, nodes) in inner.domains() {
        if inner_fixed.as_deref().is_some_and(|f| f != value) {
            continue;
        }
        for n in nodes {
            let chain: Option<Vec<&str>> = keyed
                .iter()
                .map(|(ix, fixed)| {
                    let v = ix.value_of(n)?;
                    fixed.as_deref().is_none_or(|f| f == v).then_some(v)
                })
                .collect();
            if let Some(chain) = chain {
                by_chain.entry(chain).or_default().push(n.clone());
            }
        }
    }
    Some(by_chain.into_values().collect())
}
