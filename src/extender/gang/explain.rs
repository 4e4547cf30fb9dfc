//! What a group verdict rests on, for `GET /v1/explain/pod`: the pod's
//! group chain with each level's quorum (pods existing / needed / placed),
//! and for the innermost level with a topology key, every domain of that
//! key with how many of the group's remaining pods fit there (after the
//! room other groups' plans reserve), so an operator sees why the domains
//! not chosen cannot hold the group. Read-only over the snapshot and the
//! plans it is given; it records nothing.

use super::*;
use serde::Serialize;

/// One level of the pod's group chain, innermost first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LevelReport {
    /// `PodGroup` or `CompositePodGroup`.
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    /// `gang` or `basic`.
    pub policy: &'static str,
    pub topology_key: Option<String>,
    /// Pods that exist (a PodGroup), or child groups whose pods all exist
    /// (a composite).
    pub existing: usize,
    /// `minCount` / `minGroupCount` of a gang; 1 for a basic group.
    pub needed: usize,
    /// Pods bound or assumed (a PodGroup), or child groups at their
    /// quorum (a composite).
    pub placed: usize,
}

/// One domain of the key, and whether the group's remaining pods fit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainFit {
    pub value: String,
    /// Nodes in the domain (inside the outer domains).
    pub nodes: usize,
    /// Remaining pods that fit, after other groups' plans reserve room.
    pub fit: usize,
    /// Remaining pods that would fit without those reservations.
    pub fit_unreserved: usize,
    /// The filter's verdict domain is this one.
    pub chosen: bool,
    /// The whole remainder fits here.
    pub holds: bool,
    /// Why this domain cannot hold the group (`None` when it can).
    pub why: Option<String>,
}

/// The domains of the innermost keyed level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainReport {
    /// The group the domain is chosen for (the innermost keyed level).
    pub group: String,
    pub key: String,
    /// The domain placed members fix.
    pub fixed: Option<String>,
    /// Why placed members leave the domain unknown or conflicting.
    pub fixed_error: Option<String>,
    /// The value of the group's plan, if it has one.
    pub planned: Option<String>,
    /// Pods of the pod's own group still to place that must fit.
    pub required: usize,
    /// Domains, the chosen one first, then those that hold the group, then
    /// by how many fit (at most the `max_domains` asked for).
    pub domains: Vec<DomainFit>,
    /// Domains left out of `domains`.
    pub omitted: usize,
}

/// The group side of an explanation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupReport {
    /// Innermost first; empty when the chain does not resolve.
    pub levels: Vec<LevelReport>,
    /// The level whose quorum bind waits for (`None`: no gang on the chain).
    pub unit: Option<String>,
    pub domain: Option<DomainReport>,
    /// Why the chain does not resolve (a missing group, a cycle).
    pub error: Option<String>,
}

/// The group report of a grouped pod (`None`: the pod has no group).
/// `chosen`: the domain the filter verdict chose, as `key=value` pairs
/// outermost first (empty when it rejected the pod). `planner`: the plans
/// whose reservations count (read only).
pub fn report(
    snap: &ClusterState,
    planner: &GangPlanner,
    pod: &Pod,
    requests: &Amounts,
    chosen: &[(String, String)],
    max_domains: usize,
) -> Option<GroupReport> {
    let (namespace, group) = group_of(pod)?;
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let levels = match chain(snap, namespace, group) {
        Ok(levels) => levels,
        Err(r) => {
            return Some(GroupReport {
                error: Some(r.message),
                ..GroupReport::default()
            });
        }
    };
    let any: AllowedNodes = None;
    let this = Some((group, name, requests, &any));
    let levels_out = levels
        .iter()
        .enumerate()
        .map(|(at, l)| {
            let (existing, needed) = if l.group.composite {
                tally(snap, &l.group, QuorumCount::Existing, 0)
            } else {
                let need = match l.spec.policy {
                    Policy::Gang(n) => n,
                    Policy::Basic => 1,
                };
                // The pod explained counts in its own group, as in filter.
                let m = members(
                    snap,
                    &l.group.namespace,
                    &l.group.name,
                    this.filter(|_| at == 0),
                );
                (m.existing, need)
            };
            let (placed, _) = tally(snap, &l.group, QuorumCount::Placed, 0);
            LevelReport {
                kind: if l.group.composite {
                    "CompositePodGroup"
                } else {
                    "PodGroup"
                },
                namespace: l.group.namespace.clone(),
                name: l.group.name.clone(),
                policy: match l.spec.policy {
                    Policy::Gang(_) => "gang",
                    Policy::Basic => "basic",
                },
                topology_key: l.spec.topology.clone(),
                existing,
                needed,
                placed,
            }
        })
        .collect();
    let unit = unit_of(&levels).map(|u| levels[u].group.to_string());
    let domain = levels
        .iter()
        .position(|l| l.spec.topology.is_some())
        .map(|k| domains(snap, planner, &levels, k, this, chosen, max_domains));
    Some(GroupReport {
        levels: levels_out,
        unit,
        domain,
        error: None,
    })
}

fn domains(
    snap: &ClusterState,
    planner: &GangPlanner,
    levels: &[Level],
    k: usize,
    this: FilteredPod<'_, '_>,
    chosen: &[(String, String)],
    max_domains: usize,
) -> DomainReport {
    let level = &levels[k];
    let key = level.spec.topology.clone().unwrap_or_default();
    let index = snap.domain_index(&key);
    let (fixed, fixed_error) = match fixed_domain(snap, &level.group, &key, &index) {
        Ok(v) => (v, None),
        Err(e) => (None, Some(e)),
    };
    let planned = planner
        .get(&level.group)
        .filter(|p| p.key == key)
        .map(|p| p.value);
    // The verdict's domain: outer levels first, this level's last.
    let (outer, mine) = match chosen.split_last() {
        Some((last, outer)) if last.0 == key => (outer, Some(last.1.as_str())),
        _ => (chosen, None),
    };
    let outer: Vec<(Arc<DomainIndex>, &str)> = outer
        .iter()
        .map(|(k, v)| (snap.domain_index(k), v.as_str()))
        .collect();
    let (reqs, required) = leaf_need(snap, &levels[0].group, this);
    let axes = ResourceAxes::of(snap, reqs.iter().map(|(r, _)| *r));
    let demand = Demand::new(&axes, &reqs, required);
    let own: BTreeSet<GroupRef> = levels.iter().map(|l| l.group.clone()).collect();
    let floor =
        || this.and_then(|(_, name, _, _)| floor_of(snap, &levels[0].group.namespace, name));
    let now = Instant::now();
    let mut out: Vec<DomainFit> = index
        .domains()
        .map(|(value, nodes)| {
            let nodes: Vec<&str> = nodes
                .iter()
                .map(String::as_str)
                .filter(|n| outer.iter().all(|(ix, v)| ix.value_of(n) == Some(*v)))
                .collect();
            let mut free = FreeRooms::new(snap, &axes, false);
            let fit_unreserved = if required == 0 {
                0
            } else {
                free.fill(nodes.iter().copied(), &demand).0
            };
            let fit = if required == 0 {
                0
            } else {
                let mut free = FreeRooms::new(snap, &axes, false);
                planner.with_plans(|plans| {
                    reserve_others(snap, plans, &own, &axes, &mut free, Some(&nodes), now);
                    hold_nominated(snap, &axes, &mut free, floor, |k, p| {
                        this.is_some_and(|(_, name, _, _)| {
                            k.0 == levels[0].group.namespace && k.1 == name
                        }) || planned_member(plans, &own, k, p, now)
                    });
                });
                free.fill(nodes.iter().copied(), &demand).0
            };
            let holds = !nodes.is_empty() && fit >= required;
            let why = match &fixed {
                Some(f) if f != value => Some(format!(
                    "placed members fix the group's domain at {key}={f}"
                )),
                _ if nodes.is_empty() => {
                    Some("no node of this domain lies inside the outer domains".to_owned())
                }
                _ if holds => None,
                _ if fit_unreserved >= required => Some(format!(
                    "other groups' plans or pods kube-scheduler nominated there reserve the room: {fit} of the {required} pods it still needs fit after them"
                )),
                _ => Some(format!(
                    "{fit} of the {required} pods it still needs fit"
                )),
            };
            DomainFit {
                value: value.to_owned(),
                nodes: nodes.len(),
                fit,
                fit_unreserved,
                chosen: mine == Some(value),
                holds: holds && why.is_none(),
                why,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        (b.chosen, b.holds, b.fit)
            .cmp(&(a.chosen, a.holds, a.fit))
            .then_with(|| a.value.cmp(&b.value))
    });
    let omitted = out.len().saturating_sub(max_domains);
    out.truncate(max_domains);
    DomainReport {
        group: level.group.to_string(),
        key,
        fixed,
        fixed_error,
        planned,
        required,
        domains: out,
        omitted,
    }
}
