//! Allocated ResourceClaims: their devices and consumers, the pods using
//! each, what a claim's devices take from the node they are on (DRA
//! node-allocatable mapping and overhead), the DRA sharing rule's reads
//! and what a pending pod's own claims would add.

use super::{ClusterIndex, ClusterState, DeviceKey, Key, key_of};
use crate::cache::index::Index;
use crate::pods::dra::Consumer;
use crate::pods::fit::{self, AllocatedDevice, Amounts, ClaimRef, DeviceInfo, Reach};
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// An allocated claim's devices.
#[derive(Debug, Clone, Default)]
pub(super) struct ClaimEntry {
    /// `(device, consumedCapacity)` per allocation result.
    pub(super) devices: Vec<(DeviceKey, Option<BTreeMap<String, Quantity>>)>,
    /// `status.reservedFor`.
    pub(super) reserved_for: Vec<Consumer>,
}

/// What a pending pod's own allocated claims add ([`ClusterState::pending_claims_load`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClaimsLoad {
    /// On every node not listed in `on`.
    pub everywhere: Amounts,
    /// On these slots instead.
    pub on: Vec<(u32, Amounts)>,
}

// === impl ClusterState ===

impl ClusterState {
    /// The allocated devices of a claim that take from `node`: those whose
    /// ResourceSlice (or own node selection) reaches that node (`None`
    /// while the claim is not allocated).
    pub(super) fn devices_on<'a>(
        &'a self,
        claim: &str,
        node: &str,
    ) -> Option<Vec<AllocatedDevice<'a>>> {
        let c = self.claims.get(claim)?;
        let empty = BTreeMap::new();
        let labels = self
            .nodes
            .get(node)
            .and_then(|s| s.node.as_ref())
            .map_or(&empty, |n| &n.labels);
        Some(
            c.devices
                .iter()
                .filter_map(|(dk, consumed)| {
                    let device = self.devices.get(dk)?;
                    device
                        .reach
                        .matches(node, labels)
                        .then_some(AllocatedDevice {
                            consumed: consumed.as_ref(),
                            device,
                        })
                })
                .collect(),
        )
    }

    /// Whether an allocated claim's devices reach `node`: `None` when the
    /// claim is not allocated (or allocated no device), else whether one
    /// of the devices published in a ResourceSlice the cache holds reaches
    /// the node. An allocation none of whose devices is published is one
    /// the cache cannot place: kube-scheduler allocated from slices the
    /// cache has not seen yet, or the cache holds an older allocation whose
    /// slice is gone with its node (simulation seed 743); either way it
    /// does not reach the node as far as the cache can tell.
    pub fn claim_reaches(&self, claim: &str, node: &str) -> Option<bool> {
        let c = self.claims.get(claim)?;
        if c.devices.is_empty() {
            return None;
        }
        let empty = BTreeMap::new();
        let labels = self
            .nodes
            .get(node)
            .and_then(|s| s.node.as_ref())
            .map_or(&empty, |n| &n.labels);
        for (dk, _) in &c.devices {
            if self
                .devices
                .get(dk)
                .is_some_and(|d| d.reach.matches(node, labels))
            {
                return Some(true);
            }
        }
        Some(false)
    }

    /// Whether a claim is allocated a device that maps a node resource.
    fn claim_mapped(&self, entry: &ClaimEntry) -> bool {
        entry
            .devices
            .iter()
            .any(|(dk, _)| self.devices.get(dk).is_some_and(DeviceInfo::mapped))
    }

    /// What the DRA sharing rule reads of an allocated claim
    /// (`namespace/name`): whether a device of it maps a node resource, its
    /// `status.reservedFor`, and whether a counted pod other than `pod`
    /// (`(namespace, name)`) uses it. `None` while it is not allocated.
    pub fn claim_sharing(&self, claim: &str, pod: &Key) -> Option<(bool, &[Consumer], bool)> {
        let entry = self.claims.get(claim)?;
        let others = self
            .claim_users
            .get(claim)
            .into_iter()
            .flatten()
            .any(|k| k != pod && self.counted(k).is_some());
        Some((self.claim_mapped(entry), &entry.reserved_for, others))
    }

    /// Where each published device no allocated claim holds is available:
    /// what a DRA-backed extended resource can still be allocated from.
    pub fn free_devices(&self) -> crate::pods::dra::FreeDevices {
        let held: HashSet<&DeviceKey> = self
            .claims
            .values()
            .flat_map(|c| c.devices.iter().map(|(k, _)| k))
            .collect();
        self.devices
            .iter()
            .filter(|(k, _)| !held.contains(k))
            .map(|(_, d)| &d.reach)
            .collect()
    }

    /// What a pending pod's own allocated claims would add on each node:
    /// their overhead, and the mapping of each claim not already counted
    /// there through another pod sharing it. The same on every node but
    /// the few returned by slot (nodes its devices are on, or where a
    /// shared claim is already counted).
    pub fn pending_claims_load(&self, claims: &[ClaimRef]) -> ClaimsLoad {
        let mut out = ClaimsLoad::default();
        if !claims.iter().any(|c| self.claims.contains_key(&c.claim)) {
            return out;
        }
        let mut special: BTreeSet<String> = BTreeSet::new();
        for c in claims {
            let Some(entry) = self.claims.get(&c.claim) else {
                continue;
            };
            for (dk, _) in &entry.devices {
                match self.devices.get(dk).map(|d| &d.reach) {
                    Some(Reach::Node(n)) => {
                        special.insert(n.clone());
                    }
                    // Nodes a selector reaches: every node is looked at
                    // once (only for pods whose claims have such devices).
                    Some(r @ Reach::Selector(_)) => special.extend(
                        self.nodes
                            .iter()
                            .filter_map(|s| Some((s, s.node.as_ref()?)))
                            .filter(|(s, n)| r.matches(&s.name, &n.labels))
                            .map(|(s, _)| s.name.to_string()),
                    ),
                    _ => {}
                }
            }
            special.extend(
                self.claim_users
                    .get(&c.claim)
                    .into_iter()
                    .flatten()
                    .filter_map(|k| self.counted_node(k)),
            );
        }
        // A node no device is on and where nothing is counted: only the
        // devices of every node take from it.
        out.everywhere = self.claims_load_on(claims, None);
        for node in special {
            if let Some(slot) = self.nodes.find(&node) {
                out.on
                    .push((slot, self.claims_load_on(claims, Some(&node))));
            }
        }
        out
    }

    fn claims_load_on(&self, claims: &[ClaimRef], node: Option<&str>) -> Amounts {
        let mut out = Amounts::new();
        for c in claims {
            let devs = match node {
                Some(n) => self.devices_on(&c.claim, n),
                None => self.claims.get(&c.claim).map(|e| {
                    e.devices
                        .iter()
                        .filter_map(|(dk, consumed)| {
                            let device = self.devices.get(dk).filter(|d| d.reach == Reach::All)?;
                            Some(AllocatedDevice {
                                consumed: consumed.as_ref(),
                                device,
                            })
                        })
                        .collect()
                }),
            };
            let Some(devs) = devs else { continue };
            let counted_here = node.is_some_and(|n| {
                self.claim_users
                    .get(&c.claim)
                    .into_iter()
                    .flatten()
                    .any(|k| self.counted_node(k).as_deref() == Some(n))
            });
            let mut add = |a: Result<Amounts, fit::FitError>| match a {
                Ok(a) => {
                    for (k, v) in a {
                        let e = out.entry(k).or_insert(0);
                        *e = e.saturating_add(v);
                    }
                }
                Err(e) => {
                    tracing::warn!(claim = %c.claim, error = %e, "DRA node-allocatable quantity ignored")
                }
            };
            add(fit::claim_overhead(&devs, c.refs));
            if !counted_here {
                add(fit::claim_mapping(&devs));
            }
        }
        out
    }

    /// Recomputes every node where a pod uses a claim (devices changed).
    pub(super) fn recompute_dra_nodes(&mut self) {
        let names: BTreeSet<String> = self
            .claim_users
            .values()
            .flatten()
            .filter_map(|k| self.counted_node(k))
            .collect();
        for n in names {
            self.recompute(&n);
        }
    }

    fn set_claim(&mut self, claim: &ResourceClaim) {
        let (ns, name) = key_of(&claim.metadata);
        let qualified = format!("{ns}/{name}");
        self.set_claim_binding(&qualified, claim);
        let results = claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .and_then(|d| d.results.as_ref());
        match results {
            Some(rs) => {
                let devices = rs
                    .iter()
                    .map(|r| {
                        (
                            (r.driver.clone(), r.pool.clone(), r.device.clone()),
                            r.consumed_capacity.clone(),
                        )
                    })
                    .collect();
                let reserved_for = claim
                    .status
                    .iter()
                    .flat_map(|s| s.reserved_for.iter().flatten())
                    .map(|r| Consumer {
                        resource: r.resource.clone(),
                        name: r.name.clone(),
                        uid: r.uid.clone(),
                    })
                    .collect();
                self.claims.insert(
                    qualified.clone(),
                    ClaimEntry {
                        devices,
                        reserved_for,
                    },
                );
            }
            None => {
                self.claims.remove(&qualified);
            }
        }
        self.recompute_claim_users(&qualified);
    }

    fn recompute_claim_users(&mut self, qualified: &str) {
        let nodes: BTreeSet<String> = self
            .claim_users
            .get(qualified)
            .into_iter()
            .flatten()
            .filter_map(|k| self.counted_node(k))
            .collect();
        for n in nodes {
            self.recompute(&n);
        }
    }
}

// === impl ClusterIndex ===

impl ClusterIndex {
    pub fn apply_claim(&self, c: &ResourceClaim) {
        self.write().set_claim(c);
        self.claim_changes.notify_waiters();
    }
    pub fn delete_claim(&self, namespace: &str, name: &str) {
        {
            let mut s = self.write();
            let q = format!("{namespace}/{name}");
            s.claims.remove(&q);
            s.claim_bindings.remove(&q);
            s.follow_remembered(&q, None);
            s.recompute_claim_users(&q);
        }
        self.claim_changes.notify_waiters();
    }
    pub fn reset_claims(&self, cs: &[ResourceClaim]) {
        {
            let mut s = self.write();
            s.claims.clear();
            s.claim_bindings.clear();
            for c in cs {
                s.set_claim(c);
            }
            s.recompute_dra_nodes();
        }
        self.claim_changes.notify_waiters();
    }
    /// Notified after every ResourceClaim change: register (`notified()`,
    /// then `enable()`) before reading the state, then await.
    pub fn claim_changes(&self) -> &tokio::sync::Notify {
        &self.claim_changes
    }
}

impl Index<ResourceClaim> for ClusterIndex {
    fn apply(&self, obj: ResourceClaim) {
        self.apply_claim(&obj)
    }
    fn delete(&self, namespace: &str, name: &str) {
        self.delete_claim(namespace, name)
    }
    fn reset(&self, objs: Vec<ResourceClaim>) {
        self.reset_claims(&objs)
    }
}
