//! Group-aware preemption: kube-scheduler's candidate nodes and victims,
//! checked and completed against the cache, pure over a snapshot.
//!
//! kube-scheduler chooses the victims on each candidate node and then, among
//! the candidates the extender returns, the node to preempt on. The
//! extender can only drop candidates or change the victims of one, so the
//! rules are applied per candidate, and the preference between candidates
//! by dropping the dominated ones:
//!
//! 1. A preemptor whose own or group preemption policy is `Never` gets no
//!    candidates.
//! 2. Every victim must be a pod the cache counts on that node (the
//!    UID-only form is resolved through the node's pods); a victim that is
//!    unknown or counted elsewhere drops the node: its group and priority
//!    cannot be checked, and the watch will catch up before the next try.
//! 3. A victim in a PodGroup whose disruption mode is `All` (or beneath a
//!    CompositePodGroup with `All`) brings every running pod of that group
//!    (or of every PodGroup beneath the CompositePodGroup) on the node with
//!    it (bound there as the watch shows, or named by kube-scheduler; a
//!    member only this extender still assumes there counts as elsewhere).
//!    When some of them run on other nodes, kube-scheduler's protocol
//!    cannot name them (victims must be on the candidate node): with
//!    `--evict-all-disruption` (the default) the candidate stays, its
//!    victims are the members on the node, and the members elsewhere are
//!    returned as an [`Intent`] for the follow-up evictor
//!    ([`crate::extender::evict`]), which evicts them once kube-scheduler
//!    has deleted the victims; they count as victims in rules 4 and 6.
//!    With the flag off the node is dropped, as the group would be partly
//!    disrupted. `Single` groups go pod by pod.
//! 4. No victim, added ones included (members on other nodes too), may
//!    have an effective priority (its PodGroup's when it is in one, the
//!    root CompositePodGroup's in a hierarchy) at or above the preemptor's
//!    (its group's when it is in one); such a victim drops the node rather
//!    than being removed, since kube-scheduler chose the victims as what
//!    frees enough room.
//! 5. A node without victims is dropped. `NumPDBViolations` is carried
//!    through as kube-scheduler counted it.
//! 6. Preference: a candidate is dropped when another is at least as good
//!    on every count — PDB violations, PodGroups disrupted, highest victim
//!    priority, number of victims — and better on one. kube-scheduler then
//!    picks among the rest by its own order.
//! 7. A preemptor in a gang: a node is dropped unless it lies in a domain
//!    where the gang's remaining pods would fit once every pod below the
//!    preemptor's priority were gone — lower-priority pods are never
//!    evicted for a gang that can never fit.

use super::evict::{Intent, PodId};
use super::types::{ExtenderPreemptionArgs, ExtenderPreemptionResult, MetaPod, MetaVictims};
use crate::cache::cluster_index::{ClusterState, Key, PodEntry, Scope};
use crate::pods::fit;
use crate::pods::priority::{self, Declared};
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeSet, HashMap, HashSet};

/// The preemption policy that forbids preempting.
pub const NEVER: &str = "Never";

/// A candidate that passed the rules.
#[derive(Debug)]
struct Candidate<'a> {
    node: &'a str,
    victims: Vec<&'a PodEntry>,
    /// `All` scopes with members on other nodes: the scope, its members on
    /// this node and its members elsewhere (rule 3).
    spread: Vec<Spread<'a>>,
    pdb: i64,
    /// Distinct PodGroups among the victims.
    groups: usize,
    /// Highest effective victim priority.
    highest: i32,
}

/// An `All` scope of a candidate with members on other nodes.
#[derive(Debug)]
struct Spread<'a> {
    namespace: &'a str,
    scope: Scope,
    here: Vec<(&'a Key, &'a PodEntry)>,
    elsewhere: Vec<(&'a Key, &'a PodEntry)>,
}

impl Candidate<'_> {
    fn costs(&self) -> [i64; 4] {
        let elsewhere: usize = self.spread.iter().map(|s| s.elsewhere.len()).sum();
        [
            self.pdb,
            self.groups as i64,
            i64::from(self.highest),
            (self.victims.len() + elsewhere) as i64,
        ]
    }
}

fn pod_id(key: &Key, entry: &PodEntry) -> PodId {
    PodId {
        namespace: key.0.clone(),
        name: key.1.clone(),
        uid: entry.uid.clone(),
    }
}

/// Whether `a` is at least as good as `b` everywhere and better somewhere.
#[cfg(test)]
fn dominates(a: &[i64; 4], b: &[i64; 4]) -> bool {
    a.iter().zip(b).all(|(x, y)| x <= y) && a != b
}

/// Which cost vectors no other one dominates (rule 6), in
/// O(n log² n): the vectors are visited in lexicographic order, so every
/// vector that could dominate the current one has been visited (a
/// dominating vector is lexicographically smaller); equal vectors are
/// visited together and never dominate each other. Whether a visited vector
/// is at or below the current one in the last three counts is a prefix
/// query over the second count (a Fenwick tree over its ranks) of
/// staircases in the last two ([`Staircase`]).
fn undominated(costs: &[[i64; 4]]) -> Vec<bool> {
    let n = costs.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_unstable_by(|&a, &b| costs[a].cmp(&costs[b]));
    let mut ranks: Vec<i64> = costs.iter().map(|c| c[1]).collect();
    ranks.sort_unstable();
    ranks.dedup();
    let rank = |v: i64| ranks.partition_point(|r| *r < v) + 1;
    let mut tree: Vec<Staircase> = (0..=ranks.len()).map(|_| Staircase::default()).collect();
    let mut keep = vec![false; n];
    let mut i = 0;
    while i < n {
        let c = costs[order[i]];
        let mut j = i;
        while j < n && costs[order[j]] == c {
            j += 1;
        }
        let r = rank(c[1]);
        let mut k = r;
        let mut dominated = false;
        while k > 0 && !dominated {
            dominated = tree[k].covers(c[2], c[3]);
            k &= k - 1;
        }
        for &o in &order[i..j] {
            keep[o] = !dominated;
        }
        let mut k = r;
        while k < tree.len() {
            tree[k].insert(c[2], c[3]);
            k += k & k.wrapping_neg();
        }
        i = j;
    }
    keep
}

/// Points `(x, y)` none of which is at or below another in both: `y`
/// strictly falls as `x` rises.
#[derive(Default)]
struct Staircase(std::collections::BTreeMap<i64, i64>);

impl Staircase {
    /// Whether some point is at or below `(x, y)` in both.
    fn covers(&self, x: i64, y: i64) -> bool {
        self.0
            .range(..=x)
            .next_back()
            .is_some_and(|(_, &py)| py <= y)
    }

    fn insert(&mut self, x: i64, y: i64) {
        if self.covers(x, y) {
            return;
        }
        let gone: Vec<i64> = self
            .0
            .range(x..)
            .take_while(|(_, py)| **py >= y)
            .map(|(px, _)| *px)
            .collect();
        for px in gone {
            self.0.remove(&px);
        }
        self.0.insert(x, y);
    }
}

/// The preemptor's effective priority; `None` when it may not preempt.
pub(crate) fn preemptor_priority(snap: &ClusterState, pod: &Pod) -> Option<i32> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let spec = pod.spec.as_ref();
    let own = priority::resolve(
        Declared {
            priority: spec.and_then(|s| s.priority),
            class_name: spec.and_then(|s| s.priority_class_name.as_deref()),
            preemption_policy: spec.and_then(|s| s.preemption_policy.as_deref()),
        },
        snap.classes(),
    );
    if own.preemption_policy == NEVER {
        return None;
    }
    let group = spec
        .and_then(|s| s.scheduling_group.as_ref())
        .and_then(|g| g.pod_group_name.as_deref());
    let group_policy = snap.semantics().group_preemption_policy;
    match group.and_then(|g| snap.group_priority(ns, g)) {
        Some(g) if group_policy && g.preemption_policy == NEVER => None,
        Some(g) => Some(g.priority),
        None => Some(own.priority),
    }
}

/// A cached pod's effective priority: its PodGroup's when the group is known.
pub(crate) fn effective_priority(snap: &ClusterState, key: &Key, pod: &PodEntry) -> i32 {
    pod.group
        .as_deref()
        .and_then(|g| snap.group_priority(&key.0, g))
        .map(|e| e.priority)
        .unwrap_or_else(|| priority::resolve(pod.declared(), snap.classes()).priority)
}

/// The request's candidates: node, victim UIDs (`None` when a full Pod has
/// none) and PDB violations. The UID-only form wins when both are sent.
fn requested(args: &ExtenderPreemptionArgs) -> Vec<(&str, Vec<Option<&str>>, i64)> {
    if let Some(meta) = &args.node_name_to_meta_victims {
        meta.iter()
            .map(|(node, v)| {
                let (pods, pdb) = v
                    .as_ref()
                    .map(|v| {
                        (
                            v.pods.iter().map(|p| Some(p.uid.as_str())).collect(),
                            v.num_pdb_violations,
                        )
                    })
                    .unwrap_or_default();
                (node.as_str(), pods, pdb)
            })
            .collect()
    } else if let Some(full) = &args.node_name_to_victims {
        full.iter()
            .map(|(node, v)| {
                let (pods, pdb) = v
                    .as_ref()
                    .map(|v| {
                        (
                            v.pods
                                .iter()
                                .map(|p| Some(p.metadata.uid.as_str()).filter(|u| !u.is_empty()))
                                .collect(),
                            v.num_pdb_violations,
                        )
                    })
                    .unwrap_or_default();
                (node.as_str(), pods, pdb)
            })
            .collect()
    } else {
        Vec::new()
    }
}

/// Running pods per disruption scope, looked up once per call.
type ScopeMemo<'s> = HashMap<(String, Scope), Vec<(&'s Key, &'s PodEntry)>>;

/// Applies rules 2–5 to one candidate.
fn evaluate<'s>(
    snap: &'s ClusterState,
    node: &'s str,
    uids: &[Option<&str>],
    pdb: i64,
    preemptor: i32,
    memo: &mut ScopeMemo<'s>,
) -> Option<Candidate<'s>> {
    if uids.is_empty() || !snap.has_node(node) {
        return None;
    }
    let on_node: HashMap<&str, (&Key, &PodEntry)> = snap
        .pods_on(node)
        .filter(|(_, e)| !e.uid.is_empty())
        .map(|(k, e)| (e.uid.as_str(), (k, e)))
        .collect();
    let spread_ok = snap.semantics().evict_all_disruption;
    let mut chosen: Vec<(&Key, &PodEntry)> = Vec::with_capacity(uids.len());
    let mut seen: HashSet<&Key> = HashSet::with_capacity(uids.len());
    let mut spread: Vec<Spread<'s>> = Vec::new();
    for uid in uids {
        let &(key, entry) = on_node.get((*uid)?)?;
        // A victim named twice, or already taken with its group, adds
        // nothing: its group (one per pod) was completed the first time.
        if !seen.insert(key) {
            continue;
        }
        chosen.push((key, entry));
        let Some(group) = entry.group.as_deref() else {
            continue;
        };
        let scope = snap.disruption_scope(&key.0, group);
        if scope == Scope::Single {
            continue;
        }
        let members = memo
            .entry((key.0.clone(), scope.clone()))
            .or_insert_with_key(|(ns, scope)| snap.scope_pods(ns, scope));
        let mut here = Vec::new();
        let mut elsewhere = Vec::new();
        for &(mk, me) in members.iter() {
            // On the node as kube-scheduler knows it: bound there per the
            // watch, or named by kube-scheduler (its own assumed pod, whose
            // bind is in flight). A member this extender alone still
            // assumes there (its bind answered uncertainly, and
            // kube-scheduler forgot it) is no pod kube-scheduler can
            // delete as a victim, so the evictor would wait for it for
            // ever: it is one of the members elsewhere (simulation seed
            // 639).
            if me.node.as_deref() == Some(node)
                && (uids.contains(&Some(me.uid.as_str()))
                    || snap
                        .watched_pod(&mk.0, &mk.1)
                        .is_some_and(|w| w.node.as_deref() == Some(node)))
            {
                here.push((mk, me));
                if seen.insert(mk) {
                    chosen.push((mk, me));
                }
            } else if spread_ok {
                elsewhere.push((mk, me));
            } else {
                return None;
            }
        }
        if !elsewhere.is_empty() {
            spread.push(Spread {
                namespace: key.0.as_str(),
                scope,
                here,
                elsewhere,
            });
        }
    }
    let mut highest = i32::MIN;
    let mut groups: BTreeSet<(&str, &str)> = BTreeSet::new();
    let elsewhere = spread.iter().flat_map(|s| s.elsewhere.iter());
    for &(key, entry) in chosen.iter().chain(elsewhere) {
        let p = effective_priority(snap, key, entry);
        if p >= preemptor {
            return None;
        }
        highest = highest.max(p);
        if let Some(g) = entry.group.as_deref() {
            groups.insert((key.0.as_str(), g));
        }
    }
    Some(Candidate {
        node,
        victims: chosen.into_iter().map(|(_, e)| e).collect(),
        spread,
        pdb,
        groups: groups.len(),
        highest,
    })
}

/// The preempt decision: kube-scheduler's candidates narrowed and completed
/// by the rules in this module's documentation.
pub fn decide_preempt(
    snap: &ClusterState,
    args: &ExtenderPreemptionArgs,
) -> ExtenderPreemptionResult {
    plan_preempt(snap, args).0
}

/// [`decide_preempt`], with the follow-up evictions of every candidate
/// returned whose `All` scopes also run on other nodes (rule 3): one
/// [`Intent`] per candidate and scope.
pub fn plan_preempt(
    snap: &ClusterState,
    args: &ExtenderPreemptionArgs,
) -> (ExtenderPreemptionResult, Vec<Intent>) {
    let mut out = ExtenderPreemptionResult::default();
    let mut intents = Vec::new();
    let Some(pod) = &args.pod else {
        return (out, intents);
    };
    let Some(preemptor) = preemptor_priority(snap, pod) else {
        return (out, intents);
    };
    let preemptor_id = PodId {
        namespace: pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
    };
    let requested = requested(args);
    // Rule 7: where removing lower-priority pods can let the group fit.
    let helps = pod
        .spec
        .as_ref()
        .and_then(|s| fit::pod_requests(s).ok())
        .and_then(|r| {
            super::gang::preemption_nodes(snap, pod, &r, |k, e| {
                effective_priority(snap, k, e) >= preemptor
            })
        });
    let mut memo = ScopeMemo::new();
    let candidates: Vec<Candidate<'_>> = requested
        .iter()
        .filter(|(node, _, _)| helps.as_ref().is_none_or(|h| h.contains(*node)))
        .filter_map(|(node, uids, pdb)| evaluate(snap, node, uids, *pdb, preemptor, &mut memo))
        .collect();
    let costs: Vec<[i64; 4]> = candidates.iter().map(Candidate::costs).collect();
    for (c, keep) in candidates.iter().zip(undominated(&costs)) {
        if !keep {
            continue;
        }
        out.node_name_to_meta_victims.insert(
            c.node.to_owned(),
            MetaVictims {
                pods: c
                    .victims
                    .iter()
                    .map(|e| MetaPod { uid: e.uid.clone() })
                    .collect(),
                num_pdb_violations: c.pdb,
            },
        );
        for sp in &c.spread {
            intents.push(Intent {
                preemptor: preemptor_id.clone(),
                preemptor_priority: preemptor,
                node: c.node.to_owned(),
                namespace: sp.namespace.to_owned(),
                scope: sp.scope.clone(),
                victims: sp.here.iter().map(|&(k, e)| pod_id(k, e)).collect(),
                elsewhere: sp.elsewhere.iter().map(|&(k, e)| pod_id(k, e)).collect(),
            });
        }
    }
    (out, intents)
}

#[cfg(test)]
mod tests;
