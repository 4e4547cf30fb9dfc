//! The fit plugin (kube-scheduler's `NodeResourcesFit`): a node fits when
//! its allocatable minus what is counted on it (bound or assumed pods, DRA
//! consumption) holds the pod's requests and one pod slot; the score is
//! least-allocated over cpu and memory after placing the pod, 0..=10.
//!
//! Pure over a [`ClusterState`] snapshot: the per-slot step reads the dense
//! columns of the cluster index through its accessors and builds no
//! message; messages are made once per distinct shortfall
//! ([`short_message`]).

use crate::cache::cluster_index::{ClusterState, NodeSlot, Rejection};
use crate::model::resources::{ResId, ResourceVec};
use crate::pods::fit::{self, Amounts};

/// The reason given for a node name the cache does not know.
pub const NOT_FOUND: &str = "node not found in the extender's cache";

/// A pod's request resolved against a snapshot's interned names (part of
/// the PreFilter state).
#[derive(Debug, Clone)]
pub struct Resolved {
    /// `(id, amount, name, dra)`; `id` is `None` for a name no node
    /// offers; `dra`: an extended resource a DeviceClass backs, satisfied
    /// by DRA allocation on a node that does not offer it
    /// (DRAExtendedResource), so only a node that offers it is short of it.
    entries: Vec<(Option<ResId>, u64, String, bool)>,
    /// cpu and memory for scoring, with upstream's non-zero defaults
    /// (100m, 200Mi) for a pod that requests none.
    cpu: u64,
    memory: u64,
}

impl Resolved {
    /// How many resources the request names (without `pods`).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Requested resources no cached node offers (their names were never
    /// interned) and DRA does not back: every cached node is short of them.
    pub fn unoffered(&self) -> impl Iterator<Item = &str> {
        self.entries
            .iter()
            .filter(|(id, want, _, dra)| id.is_none() && *want > 0 && !dra)
            .map(|(_, _, name, _)| name.as_str())
    }
}

/// The fit of one node ([`filter`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fit {
    Fits,
    /// Bit 0: the pod slot; bit `i + 1`: the request's entry `i`.
    Short {
        short: u64,
        unresolvable: bool,
    },
    /// The node is not cached.
    NotFound,
    /// Rejected on the general path (a request with very many resources).
    Other(Rejection),
}

/// Resolves a request for [`filter`], [`check`] and [`score`].
pub fn resolve(snap: &ClusterState, requests: &Amounts) -> Resolved {
    Resolved {
        entries: requests
            .iter()
            .filter(|(n, _)| n.as_str() != fit::PODS)
            .map(|(n, a)| {
                let dra = snap.device_classes().backing(n).is_some();
                (snap.resource_id(n), *a, n.clone(), dra)
            })
            .collect(),
        cpu: requests.get("cpu").copied().unwrap_or(100),
        memory: requests.get("memory").copied().unwrap_or(200 << 20),
    }
}

/// The fit of the cached node at a slot index, without building a
/// message: the per-node step of a filter call.
pub fn filter(snap: &ClusterState, slot: u32, req: &Resolved) -> Fit {
    if !snap.present_at(slot) {
        return Fit::NotFound;
    }
    if req.entries.len() >= 64 {
        return match check_slot(snap, snap.slot_at(slot), req, None) {
            Ok(()) => Fit::Fits,
            Err(r) => Fit::Other(r),
        };
    }
    let [pods_id, _, _] = snap.well_known_ids();
    let (mut short, mut resolvable) = (0u64, false);
    let mut test = |bit: u32, id: Option<ResId>, want: u64, dra: bool| {
        if want == 0 {
            return;
        }
        let [alloc, used] = id.map_or([0, 0], |id| snap.amounts_at(id, slot));
        if dra && alloc == 0 {
            return;
        }
        if used.saturating_add(want) > alloc {
            short |= 1 << bit;
            resolvable |= want <= alloc;
        }
    };
    test(0, Some(pods_id), 1, false);
    for (i, (id, want, _, dra)) in req.entries.iter().enumerate() {
        test(i as u32 + 1, *id, *want, *dra);
    }
    if short == 0 {
        Fit::Fits
    } else {
        Fit::Short {
            short,
            unresolvable: !resolvable,
        }
    }
}

/// Node fit against the cached Node (or the given allocatable, in
/// full-NodeList mode) minus what is counted on it, with its message.
pub fn check(
    snap: &ClusterState,
    node: &str,
    req: &Resolved,
    allocatable: Option<&Amounts>,
) -> Result<(), Rejection> {
    check_slot(snap, snap.slot(node), req, allocatable)
}

/// [`check`] as kube-scheduler's `RunFilterPluginsWithNominatedPods` runs
/// it: the pod's request plus `nominated` (the summed requests of the
/// `count` pending pods nominated to the node whose priority is at least
/// the pod's). kube-scheduler counts those pods but not the members this
/// extender keeps reserved; this cache counts the reservations: only both
/// together keep a node from taking a pod neither side alone would refuse.
pub fn check_with_nominated(
    snap: &ClusterState,
    node: &str,
    req: &Resolved,
    nominated: &Amounts,
    count: u64,
    allocatable: Option<&Amounts>,
) -> Result<(), Rejection> {
    let mut merged = req.clone();
    for (name, amount) in nominated {
        if name == fit::PODS {
            continue;
        }
        match merged.entries.iter_mut().find(|e| &e.2 == name) {
            Some(e) => e.1 = e.1.saturating_add(*amount),
            None => {
                let dra = snap.device_classes().backing(name).is_some();
                merged
                    .entries
                    .push((snap.resource_id(name), *amount, name.clone(), dra));
            }
        }
    }
    check_pods(
        snap,
        snap.slot(node),
        &merged,
        1u64.saturating_add(count),
        allocatable,
    )
}

/// [`check`] of the cached node at a slot index.
#[cfg(test)]
pub fn check_at(snap: &ClusterState, slot: u32, req: &Resolved) -> Result<(), Rejection> {
    match filter(snap, slot, req) {
        Fit::Fits => Ok(()),
        _ => check_slot(snap, snap.slot_at(slot), req, None),
    }
}

/// The message for a [`Fit::Short`] mask of `req`.
pub fn short_message(req: &Resolved, short: u64) -> String {
    let mut list: Vec<fit::Insufficient> = req
        .entries
        .iter()
        .enumerate()
        .filter(|(i, _)| short & (1 << (i + 1)) != 0)
        .map(|(_, (_, _, name, _))| fit::Insufficient {
            resource: name.clone(),
            unresolvable: false,
        })
        .collect();
    if short & 1 != 0 {
        list.push(fit::Insufficient {
            resource: fit::PODS.into(),
            unresolvable: false,
        });
    }
    list.sort_by(|a, b| a.resource.cmp(&b.resource));
    fit::describe(&list)
}

fn check_slot(
    snap: &ClusterState,
    slot: Option<&NodeSlot>,
    req: &Resolved,
    allocatable: Option<&Amounts>,
) -> Result<(), Rejection> {
    check_pods(snap, slot, req, 1, allocatable)
}

/// [`check_slot`] for `pods` pod slots.
fn check_pods(
    snap: &ClusterState,
    slot: Option<&NodeSlot>,
    req: &Resolved,
    pods: u64,
    allocatable: Option<&Amounts>,
) -> Result<(), Rejection> {
    let cached = slot.and_then(|s| s.node.as_ref());
    if allocatable.is_none() && cached.is_none() {
        return Err(Rejection {
            message: NOT_FOUND.into(),
            unresolvable: true,
        });
    }
    let [pods_id, _, _] = snap.well_known_ids();
    let empty = ResourceVec::new();
    let used = slot.map_or(&empty, |s| &s.used);
    let alloc_of = |id: Option<ResId>, name: &str| -> u64 {
        match allocatable {
            Some(a) => a.get(name).copied().unwrap_or(0),
            None => match (cached, id) {
                (Some(n), Some(id)) => n.alloc.get(id),
                _ => 0,
            },
        }
    };
    let terms = req
        .entries
        .iter()
        .map(|(id, want, name, dra)| {
            (
                name.as_str(),
                *want,
                alloc_of(*id, name),
                id.map_or(0, |i| used.get(i)),
                *dra,
            )
        })
        // Backed by DRA and not offered here: DRA allocation satisfies it.
        .filter(|&(_, _, alloc, _, dra)| !(dra && alloc == 0))
        .map(|(name, want, alloc, used, _)| (name, want, alloc, used))
        .chain(std::iter::once((
            fit::PODS,
            pods,
            alloc_of(Some(pods_id), fit::PODS),
            used.get(pods_id),
        )));
    let short = fit::shortfalls(terms);
    if short.is_empty() {
        return Ok(());
    }
    Err(Rejection {
        message: fit::describe(&short),
        unresolvable: short.iter().all(|s| s.unresolvable),
    })
}

/// Least-allocated score 0..=10 over cpu and memory after placing the pod.
pub fn score(snap: &ClusterState, node: &str, req: &Resolved) -> i64 {
    snap.find(node).map_or(0, |slot| score_at(snap, slot, req))
}

/// [`score`] of the node at a slot index.
pub fn score_at(snap: &ClusterState, slot: u32, req: &Resolved) -> i64 {
    if !snap.present_at(slot) {
        return 0;
    }
    let [_, cpu_id, memory_id] = snap.well_known_ids();
    let part = |id: ResId, want: u64| -> u64 {
        let [alloc, used] = snap.amounts_at(id, slot);
        if alloc == 0 {
            return 0;
        }
        let free = alloc.saturating_sub(used.saturating_add(want));
        match free.checked_mul(10) {
            Some(f) => f / alloc,
            None => (u128::from(free) * 10 / u128::from(alloc)) as u64,
        }
    };
    ((part(cpu_id, req.cpu) + part(memory_id, req.memory)) / 2) as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::cluster_index::ClusterIndex;
    use crate::testkit;
    use proptest::prelude::*;

    fn cpu(millis: u64) -> Amounts {
        [("cpu".to_owned(), millis)].into_iter().collect()
    }

    /// One node of 4 cores and 2 pod slots, one pod of 3 cores on it.
    fn one_node() -> ClusterIndex {
        let c = ClusterIndex::new();
        c.apply_node(
            &testkit::node("n")
                .allocatable("4", "64Gi")
                .pod_slots("2")
                .typed(),
        );
        c.apply_pod(
            &testkit::pod("p")
                .namespace("ns")
                .requests(&[("cpu", "3")])
                .node_name("n")
                .typed(),
        );
        c
    }

    #[test]
    fn fits_exactly_what_is_left() {
        let c = one_node();
        let s = c.read();
        let slot = s.find("n").expect("slot");
        let req = resolve(&s, &cpu(1000));
        assert_eq!(filter(&s, slot, &req), Fit::Fits);
        assert_eq!(check(&s, "n", &req, None), Ok(()));
        assert_eq!(check_at(&s, slot, &req), Ok(()));
    }

    #[test]
    fn short_by_one_names_the_resource_and_is_resolvable() {
        let c = one_node();
        let s = c.read();
        let slot = s.find("n").expect("slot");
        let req = resolve(&s, &cpu(1001));
        let Fit::Short {
            short,
            unresolvable,
        } = filter(&s, slot, &req)
        else {
            panic!("short expected: {:?}", filter(&s, slot, &req));
        };
        // Removing the pod would make room: resolvable.
        assert!(!unresolvable);
        let named = check(&s, "n", &req, None).expect_err("short");
        assert_eq!(named.message, short_message(&req, short));
        assert!(named.message.contains("cpu"), "{}", named.message);
        assert!(!named.unresolvable);
        // More than the node has at all: removing pods cannot help.
        let req = resolve(&s, &cpu(4001));
        assert!(matches!(
            filter(&s, slot, &req),
            Fit::Short {
                unresolvable: true,
                ..
            }
        ));
    }

    #[test]
    fn the_pod_slot_counts_and_unknown_nodes_are_not_found() {
        let c = one_node();
        c.apply_pod(
            &testkit::pod("q")
                .namespace("ns")
                .requests(&[("cpu", "0")])
                .node_name("n")
                .typed(),
        );
        let s = c.read();
        let slot = s.find("n").expect("slot");
        let req = resolve(&s, &cpu(0));
        let Fit::Short { short, .. } = filter(&s, slot, &req) else {
            panic!("the two pod slots are taken");
        };
        assert_eq!(short, 1, "bit 0: the pod slot");
        assert!(short_message(&req, short).contains("pods"));
        let gone = check(&s, "ghost", &req, None).expect_err("unknown");
        assert_eq!(gone.message, NOT_FOUND);
        assert!(gone.unresolvable);
        // Full-NodeList mode checks the given allocatable instead.
        let alloc: Amounts = [("cpu".to_owned(), 8000), ("pods".to_owned(), 10)]
            .into_iter()
            .collect();
        assert_eq!(check(&s, "ghost", &req, Some(&alloc)), Ok(()));
    }

    #[test]
    fn emptier_nodes_score_higher() {
        let c = ClusterIndex::new();
        for n in ["empty", "half", "full"] {
            c.apply_node(&testkit::node(n).allocatable("8", "64Gi").typed());
        }
        for (p, cpu, n) in [("a", "4", "half"), ("b", "7", "full")] {
            c.apply_pod(
                &testkit::pod(p)
                    .namespace("ns")
                    .requests(&[("cpu", cpu)])
                    .node_name(n)
                    .typed(),
            );
        }
        let s = c.read();
        let req = resolve(&s, &cpu(1000));
        let scores: Vec<i64> = ["empty", "half", "full"]
            .iter()
            .map(|n| score(&s, n, &req))
            .collect();
        assert!(scores[0] > scores[1] && scores[1] > scores[2], "{scores:?}");
        for n in ["empty", "half", "full"] {
            let slot = s.find(n).expect("slot");
            assert_eq!(score_at(&s, slot, &req), score(&s, n, &req));
        }
        assert_eq!(score(&s, "ghost", &req), 0);
    }

    proptest! {
        /// Under any history of nodes and pods the per-slot step agrees
        /// with the named check, message and resolvability included.
        #[test]
        fn fast_check_agrees_with_named_check(
            ops in proptest::collection::vec((0..3u8, 0..4u8, proptest::option::of(0..3u8), 1..5u8), 1..30)
        ) {
            let c = ClusterIndex::new();
            for (kind, a, b, amount) in ops {
                match kind {
                    0 => c.apply_node(
                        &testkit::node(&format!("n{}", a % 3))
                            .allocatable(&amount.to_string(), "64Gi")
                            .pod_slots("3")
                            .typed(),
                    ),
                    1 => {
                        let p = testkit::pod(&format!("p{a}"))
                            .namespace("ns")
                            .requests(&[("cpu", &amount.to_string())]);
                        let p = match b {
                            Some(n) => p.node_name(&format!("n{n}")),
                            None => p,
                        };
                        c.apply_pod(&p.typed())
                    }
                    _ => c.delete_pod("ns", &format!("p{a}")),
                }
                let s = c.read();
                let req = resolve(&s, &cpu(2000));
                for n in 0..3 {
                    let name = format!("n{n}");
                    let named = check(&s, &name, &req, None);
                    let fast = s.find(&name).map_or(Fit::NotFound, |i| filter(&s, i, &req));
                    match (&named, &fast) {
                        (Ok(()), Fit::Fits) => {}
                        (Err(r), Fit::NotFound) => prop_assert_eq!(&r.message, NOT_FOUND),
                        (Err(r), Fit::Short { short, unresolvable }) => {
                            prop_assert_eq!(&r.message, &short_message(&req, *short));
                            prop_assert_eq!(r.unresolvable, *unresolvable);
                        }
                        _ => prop_assert!(false, "{name}: {named:?} vs {fast:?}"),
                    }
                }
            }
        }
    }
}
