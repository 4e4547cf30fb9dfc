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
/// domain (fixed by placed members, else every domain of that key); a
/// broken hierarchy or members in an unknown or conflicting domain leave
/// nothing that helps.
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
