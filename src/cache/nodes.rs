//! The extender's cluster model: Nodes, Pods (stripped to what node fit
//! reads), PodGroups, CompositePodGroups, PriorityClasses, ResourceClaims
//! and ResourceSlices, with indexes (pods per node, members per group,
//! pods per claim) and pods assumed on a node by this extender's binds.
//!
//! ```text
//!   watchers / standalone store ──apply/delete/reset──▶ NodeCache ◀── filter, prioritize (read lock)
//!                                                          ▲
//!                                        bind: assume / forget (write lock)
//! ```
//!
//! One `RwLock` guards one [`NodeState`]: every reader sees a consistent
//! snapshot. Each node slot keeps its usage (effective requests of the pods
//! counted there, one pod slot each, DRA consumption of their allocated
//! claims) as an interned vector, recomputed whenever anything counted on
//! that node changes, so a filter call only compares integers.

use crate::model::resources::{ResId, ResourceNames, ResourceVec};
use crate::pods::fit::{self, AllocatedDevice, Amounts, ClaimRef, DeviceInfo, PodLoad};
use crate::pods::priority::{self, Class, Classes, Declared, Effective};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::scheduling::v1alpha3::CompositePodGroup;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use parking_lot::{RwLock, RwLockReadGuard};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

mod domains;
pub use domains::{DomainIndex, GroupLedger, GroupRef, Plan, Rooms};

/// `(namespace, name)`.
pub type Key = (String, String);

/// A device by `(driver, pool, device)`.
pub type DeviceKey = (String, String, String);

/// What the cache keeps of a Node.
#[derive(Debug, Clone, Default)]
pub struct NodeInfo {
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    /// `status.allocatable` by name (cpu in milli-cores).
    pub allocatable: Amounts,
    /// The same, interned.
    pub alloc: ResourceVec,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
}

/// A node name's slot: the node (while it exists) and what is counted on it.
/// A slot exists while the node exists or any pod is counted on it.
#[derive(Debug, Default)]
pub struct NodeSlot {
    /// The Node, when it exists.
    pub node: Option<NodeInfo>,
    /// Pods counted here (bound or assumed).
    pub pods: BTreeSet<Key>,
    /// Everything counted here, interned.
    pub used: ResourceVec,
    /// The same by name, for views and messages.
    pub used_named: Amounts,
}

/// What the cache keeps of a Pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodEntry {
    pub uid: String,
    /// `spec.nodeName` (or the node it is assumed on).
    pub node: Option<String>,
    /// Effective requests (`None` when a quantity does not parse).
    pub requests: Option<Amounts>,
    /// `spec.schedulingGroup.podGroupName`.
    pub group: Option<String>,
    pub priority: Option<i32>,
    pub priority_class: Option<String>,
    pub preemption_policy: Option<String>,
    /// ResourceClaims used, names qualified as `namespace/name`.
    pub claims: Vec<ClaimRef>,
    /// `Succeeded` or `Failed`: counts nowhere.
    pub terminal: bool,
}

impl PodEntry {
    /// Extracts what fit and grouping read.
    pub fn from_pod(pod: &Pod) -> PodEntry {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let spec = pod.spec.as_ref();
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        PodEntry {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            node: spec
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            requests: spec.map_or(Some(Amounts::new()), |s| fit::pod_requests(s).ok()),
            group: spec
                .and_then(|s| s.scheduling_group.as_ref())
                .and_then(|g| g.pod_group_name.clone()),
            priority: spec.and_then(|s| s.priority),
            priority_class: spec.and_then(|s| s.priority_class_name.clone()),
            preemption_policy: spec.and_then(|s| s.preemption_policy.clone()),
            claims: spec
                .map(|s| fit::pod_claims(s, pod.status.as_ref()))
                .unwrap_or_default()
                .into_iter()
                .map(|c| ClaimRef {
                    claim: format!("{ns}/{}", c.claim),
                    refs: c.refs,
                })
                .collect(),
            terminal: matches!(phase, Some("Succeeded" | "Failed")),
        }
    }

    pub fn declared(&self) -> Declared<'_> {
        Declared {
            priority: self.priority,
            class_name: self.priority_class.as_deref(),
            preemption_policy: self.preemption_policy.as_deref(),
        }
    }
}

/// An allocated claim's devices.
#[derive(Debug, Clone, Default)]
struct ClaimEntry {
    /// `(device, consumedCapacity)` per allocation result.
    devices: Vec<(DeviceKey, Option<BTreeMap<String, Quantity>>)>,
}

/// Everything the extender knows.
#[derive(Debug)]
pub struct NodeState {
    /// Interned resource names.
    names: ResourceNames,
    /// Id of `pods`.
    pods_id: ResId,
    /// Ids of `cpu` and `memory`, for scoring.
    cpu_id: ResId,
    memory_id: ResId,
    /// Slots by node name (a fast hasher: node names are looked up per request).
    nodes: HashMap<String, NodeSlot, foldhash::fast::RandomState>,
    /// Pods as the watch shows them.
    pods: HashMap<Key, PodEntry>,
    /// Pods this extender bound (or is binding), until the watch shows them bound.
    assumed: HashMap<Key, PodEntry>,
    /// PodGroups.
    groups: HashMap<Key, PodGroup>,
    /// Member pod names per PodGroup `(namespace, group)`.
    members: HashMap<Key, BTreeSet<String>>,
    /// CompositePodGroups.
    composites: HashMap<Key, CompositePodGroup>,
    /// PriorityClasses by name.
    classes: Classes,
    /// Allocated ResourceClaims by `namespace/name`.
    claims: HashMap<String, ClaimEntry>,
    /// Pods using a claim, by `namespace/name` of the claim.
    claim_users: HashMap<String, BTreeSet<Key>>,
    /// Devices of each ResourceSlice by slice name.
    slices: HashMap<String, Vec<DeviceKey>>,
    /// Published devices.
    devices: HashMap<DeviceKey, DeviceInfo>,
    /// Topology label indexes and the group ledger (see [`domains`]).
    domains: domains::Domains,
}

impl Default for NodeState {
    fn default() -> Self {
        let mut names = ResourceNames::default();
        let pods_id = names.intern(fit::PODS);
        let cpu_id = names.intern("cpu");
        let memory_id = names.intern("memory");
        NodeState {
            names,
            pods_id,
            cpu_id,
            memory_id,
            nodes: HashMap::default(),
            pods: HashMap::new(),
            assumed: HashMap::new(),
            groups: HashMap::new(),
            members: HashMap::new(),
            composites: HashMap::new(),
            classes: Classes::new(),
            claims: HashMap::new(),
            claim_users: HashMap::new(),
            slices: HashMap::new(),
            devices: HashMap::new(),
            domains: domains::Domains::default(),
        }
    }
}

fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Key {
    (
        meta.namespace.clone().unwrap_or_else(|| "default".into()),
        meta.name.clone().unwrap_or_default(),
    )
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

/// A pod's request resolved against a snapshot's interned names.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// `(id, amount, name)`; `id` is `None` for a name no node offers.
    entries: Vec<(Option<ResId>, u64, String)>,
    /// cpu and memory for scoring, with upstream's non-zero defaults
    /// (100m, 200Mi) for a pod that requests none.
    cpu: u64,
    memory: u64,
}

/// Why a node is not feasible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub message: String,
    /// Removing pods from the node cannot help.
    pub unresolvable: bool,
}

// === impl NodeState ===

impl NodeState {
    /// Resolves a request for [`NodeState::check`] and [`NodeState::score`].
    pub fn resolve(&self, requests: &Amounts) -> Resolved {
        Resolved {
            entries: requests
                .iter()
                .filter(|(n, _)| n.as_str() != fit::PODS)
                .map(|(n, a)| (self.names.lookup(n), *a, n.clone()))
                .collect(),
            cpu: requests.get("cpu").copied().unwrap_or(100),
            memory: requests.get("memory").copied().unwrap_or(200 << 20),
        }
    }

    /// The slot of a node name.
    pub fn slot(&self, node: &str) -> Option<&NodeSlot> {
        self.nodes.get(node)
    }

    /// Whether a Node object exists.
    pub fn has_node(&self, node: &str) -> bool {
        self.nodes.get(node).is_some_and(|s| s.node.is_some())
    }

    /// Node names that exist, sorted.
    pub fn node_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, s)| s.node.is_some())
            .map(|(n, _)| n.clone())
            .collect();
        v.sort();
        v
    }

    /// Node fit against the cached Node (or the given allocatable, in
    /// full-NodeList mode) minus what is counted on it.
    pub fn check(
        &self,
        node: &str,
        req: &Resolved,
        allocatable: Option<&Amounts>,
    ) -> Result<(), Rejection> {
        let slot = self.nodes.get(node);
        let cached = slot.and_then(|s| s.node.as_ref());
        if allocatable.is_none() && cached.is_none() {
            return Err(Rejection {
                message: "node not found in the extender's cache".into(),
                unresolvable: true,
            });
        }
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
            .map(|(id, want, name)| {
                (
                    name.as_str(),
                    *want,
                    alloc_of(*id, name),
                    id.map_or(0, |i| used.get(i)),
                )
            })
            .chain(std::iter::once((
                fit::PODS,
                1,
                alloc_of(Some(self.pods_id), fit::PODS),
                used.get(self.pods_id),
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
    pub fn score(&self, node: &str, req: &Resolved) -> i64 {
        let Some(slot) = self.nodes.get(node) else {
            return 0;
        };
        let Some(info) = &slot.node else { return 0 };
        let part = |id: ResId, want: u64| -> u128 {
            let alloc = u128::from(info.alloc.get(id));
            if alloc == 0 {
                return 0;
            }
            let after = u128::from(slot.used.get(id)) + u128::from(want);
            alloc.saturating_sub(after) * 10 / alloc
        };
        ((part(self.cpu_id, req.cpu) + part(self.memory_id, req.memory)) / 2) as i64
    }

    /// A cached pod (the assumed version while one exists).
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&PodEntry> {
        let k = (namespace.to_owned(), name.to_owned());
        self.assumed.get(&k).or_else(|| self.pods.get(&k))
    }

    /// Whether a pod is assumed (bound here, not yet seen bound).
    pub fn is_assumed(&self, namespace: &str, name: &str) -> bool {
        self.assumed
            .contains_key(&(namespace.to_owned(), name.to_owned()))
    }

    /// A PodGroup.
    pub fn group(&self, namespace: &str, name: &str) -> Option<&PodGroup> {
        self.groups.get(&(namespace.to_owned(), name.to_owned()))
    }

    /// A CompositePodGroup.
    pub fn composite(&self, namespace: &str, name: &str) -> Option<&CompositePodGroup> {
        self.composites
            .get(&(namespace.to_owned(), name.to_owned()))
    }

    /// Member pod names of a PodGroup.
    pub fn members(&self, namespace: &str, group: &str) -> Option<&BTreeSet<String>> {
        self.members.get(&(namespace.to_owned(), group.to_owned()))
    }

    /// PriorityClasses.
    pub fn classes(&self) -> &Classes {
        &self.classes
    }

    /// A PodGroup's resolved priority and preemption policy.
    pub fn group_priority(&self, namespace: &str, name: &str) -> Option<Effective> {
        let g = self.group(namespace, name)?;
        Some(priority::resolve(
            Declared {
                priority: g.spec.priority,
                class_name: g.spec.priority_class_name.as_deref(),
                preemption_policy: g.spec.preemption_policy.as_deref(),
            },
            &self.classes,
        ))
    }

    // --- writes ---

    /// The entry counted for a key: assumed wins over the watched one.
    fn counted(&self, k: &Key) -> Option<&PodEntry> {
        self.assumed
            .get(k)
            .or_else(|| self.pods.get(k))
            .filter(|p| !p.terminal && p.node.is_some())
    }

    fn counted_node(&self, k: &Key) -> Option<String> {
        self.counted(k).and_then(|p| p.node.clone())
    }

    /// Moves a pod's index entry from `before` to where it counts now, and
    /// recomputes both nodes.
    fn reindex(&mut self, k: &Key, before: Option<String>) {
        let after = self.counted_node(k);
        if let Some(b) = &before
            && let Some(slot) = self.nodes.get_mut(b)
        {
            slot.pods.remove(k);
        }
        if let Some(a) = &after {
            self.nodes
                .entry(a.clone())
                .or_default()
                .pods
                .insert(k.clone());
        }
        for n in before.iter().chain(after.iter()).collect::<BTreeSet<_>>() {
            self.recompute(n);
        }
    }

    /// Recomputes what is counted on one node; drops an empty slot.
    fn recompute(&mut self, node: &str) {
        let Some(slot) = self.nodes.get(node) else {
            return;
        };
        let entries: Vec<&PodEntry> = slot.pods.iter().filter_map(|k| self.counted(k)).collect();
        let empty = Amounts::new();
        let loads: Vec<PodLoad<'_>> = entries
            .iter()
            .map(|p| PodLoad {
                requests: p.requests.as_ref().unwrap_or(&empty),
                claims: &p.claims,
            })
            .collect();
        let (claims, devices) = (&self.claims, &self.devices);
        let (used, errors) = fit::node_usage(&loads, |claim| {
            let c = claims.get(claim)?;
            Some(
                c.devices
                    .iter()
                    .filter_map(|(dk, consumed)| {
                        devices.get(dk).map(|device| AllocatedDevice {
                            consumed: consumed.as_ref(),
                            device,
                        })
                    })
                    .collect(),
            )
        });
        for e in errors {
            tracing::warn!(node, error = %e, "DRA node-allocatable quantity ignored");
        }
        let mut vec = ResourceVec::new();
        for (n, a) in &used {
            vec.add_one(self.names.intern(n), *a);
        }
        if let Some(slot) = self.nodes.get_mut(node) {
            slot.used = vec;
            slot.used_named = used;
            if slot.node.is_none() && slot.pods.is_empty() {
                self.nodes.remove(node);
            }
        }
    }

    /// Recomputes every node where a pod uses a claim (devices changed).
    fn recompute_dra_nodes(&mut self) {
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

    fn set_node(&mut self, node: &Node) {
        let name = name_of(&node.metadata);
        let allocatable = fit::node_allocatable(node.status.as_ref());
        let alloc = ResourceVec::from_pairs(
            allocatable
                .iter()
                .map(|(n, a)| (self.names.intern(n), *a))
                .collect::<Vec<_>>(),
        );
        let info = NodeInfo {
            uid: node.metadata.uid.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            allocatable,
            alloc,
            unschedulable: node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
        };
        self.nodes.entry(name.clone()).or_default().node = Some(info);
        self.node_labels_changed(&name);
    }

    fn unset_node(&mut self, name: &str) {
        if let Some(slot) = self.nodes.get_mut(name) {
            slot.node = None;
            if slot.pods.is_empty() {
                self.nodes.remove(name);
            }
        }
        self.node_labels_changed(name);
    }

    fn index_pod(&mut self, k: &Key, p: &PodEntry, add: bool) {
        if let Some(g) = &p.group {
            let gk = (k.0.clone(), g.clone());
            if add {
                self.members.entry(gk).or_default().insert(k.1.clone());
            } else if let Some(m) = self.members.get_mut(&gk) {
                m.remove(&k.1);
                if m.is_empty() {
                    self.members.remove(&gk);
                }
            }
        }
        for c in &p.claims {
            if add {
                self.claim_users
                    .entry(c.claim.clone())
                    .or_default()
                    .insert(k.clone());
            } else if let Some(u) = self.claim_users.get_mut(&c.claim) {
                u.remove(k);
                if u.is_empty() {
                    self.claim_users.remove(&c.claim);
                }
            }
        }
    }

    fn put_pod(&mut self, k: Key, entry: PodEntry) {
        let before = self.counted_node(&k);
        if let Some(old) = self.pods.remove(&k) {
            self.index_pod(&k, &old, false);
        }
        // The watch confirms an assumption once it shows the pod bound, or
        // shows a different pod (new uid) under the name.
        if let Some(a) = self.assumed.get(&k)
            && (entry.node.is_some() || a.uid != entry.uid || entry.terminal)
        {
            self.assumed.remove(&k);
        }
        self.index_pod(&k, &entry, true);
        self.pods.insert(k.clone(), entry);
        self.reindex(&k, before);
    }

    fn remove_pod(&mut self, k: &Key) {
        let before = self.counted_node(k);
        if let Some(old) = self.pods.remove(k) {
            self.index_pod(k, &old, false);
        }
        self.assumed.remove(k);
        self.reindex(k, before);
    }

    fn set_claim(&mut self, claim: &ResourceClaim) {
        let (ns, name) = key_of(&claim.metadata);
        let qualified = format!("{ns}/{name}");
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
                self.claims
                    .insert(qualified.clone(), ClaimEntry { devices });
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

    fn set_slice(&mut self, slice: &ResourceSlice) {
        let name = name_of(&slice.metadata);
        self.unset_slice(&name);
        let spec = &slice.spec;
        let mut keys = Vec::new();
        for d in spec.devices.iter().flatten() {
            let key = (spec.driver.clone(), spec.pool.name.clone(), d.name.clone());
            self.devices.insert(
                key.clone(),
                DeviceInfo {
                    node: spec.node_name.clone(),
                    capacity: d
                        .capacity
                        .iter()
                        .flatten()
                        .map(|(k, v)| (k.clone(), v.value.clone()))
                        .collect(),
                    node_allocatable: d.node_allocatable_resources.clone().unwrap_or_default(),
                },
            );
            keys.push(key);
        }
        self.slices.insert(name, keys);
    }

    fn unset_slice(&mut self, name: &str) {
        if let Some(keys) = self.slices.remove(name) {
            for k in keys {
                self.devices.remove(&k);
            }
        }
    }
}

/// The extender's cache. Share it behind an `Arc`.
#[derive(Debug, Default)]
pub struct NodeCache {
    /// All state, behind one lock for consistent snapshots.
    state: RwLock<NodeState>,
    /// The PriorityClass names the admission webhooks check, fed by the same
    /// applies as `state` so there is one watch and one store path.
    admission_classes: Arc<crate::admission::PriorityClasses>,
}

// === impl NodeCache ===

impl NodeCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// The admission webhooks' view of PriorityClasses, kept in step with
    /// this cache.
    pub fn admission_classes(&self) -> &Arc<crate::admission::PriorityClasses> {
        &self.admission_classes
    }

    /// A consistent snapshot for reading (hold it briefly).
    pub fn read(&self) -> RwLockReadGuard<'_, NodeState> {
        self.state.read()
    }

    // Nodes
    pub fn apply_node(&self, node: &Node) {
        let mut s = self.state.write();
        s.set_node(node);
    }
    pub fn delete_node(&self, name: &str) {
        self.state.write().unset_node(name);
    }
    pub fn reset_nodes(&self, nodes: &[Node]) {
        let mut s = self.state.write();
        let keep: HashSet<String> = nodes.iter().map(|n| name_of(&n.metadata)).collect();
        let gone: Vec<String> = s
            .nodes
            .keys()
            .filter(|n| !keep.contains(*n))
            .cloned()
            .collect();
        for n in gone {
            s.unset_node(&n);
        }
        for n in nodes {
            s.set_node(n);
        }
    }

    // Pods
    pub fn apply_pod(&self, pod: &Pod) {
        self.apply_pod_entry(key_of(&pod.metadata), PodEntry::from_pod(pod));
    }
    /// Applies an already extracted pod (watchers strip pods early).
    pub fn apply_pod_entry(&self, key: Key, entry: PodEntry) {
        self.state.write().put_pod(key, entry);
    }
    pub fn delete_pod(&self, namespace: &str, name: &str) {
        self.state
            .write()
            .remove_pod(&(namespace.to_owned(), name.to_owned()));
    }
    pub fn reset_pods(&self, pods: Vec<(Key, PodEntry)>) {
        let mut s = self.state.write();
        let keep: HashSet<&Key> = pods.iter().map(|(k, _)| k).collect();
        let gone: Vec<Key> = s
            .pods
            .keys()
            .filter(|k| !keep.contains(k))
            .cloned()
            .collect();
        for k in gone {
            s.remove_pod(&k);
        }
        for (k, e) in pods {
            s.put_pod(k, e);
        }
    }

    /// Counts a pod on `node` until the watch shows it bound (or gone).
    /// False when the pod is not cached (nothing to count).
    pub fn assume(&self, namespace: &str, name: &str, uid: &str, node: &str) -> bool {
        let mut s = self.state.write();
        let k = (namespace.to_owned(), name.to_owned());
        let Some(mut e) = s.pods.get(&k).cloned() else {
            return false;
        };
        if !uid.is_empty() && e.uid != uid {
            return false;
        }
        let before = s.counted_node(&k);
        e.node = Some(node.to_owned());
        s.assumed.insert(k.clone(), e);
        s.reindex(&k, before);
        true
    }

    /// Drops an assumption (the bind failed).
    pub fn forget(&self, namespace: &str, name: &str) {
        let mut s = self.state.write();
        let k = (namespace.to_owned(), name.to_owned());
        let before = s.counted_node(&k);
        if s.assumed.remove(&k).is_some() {
            s.reindex(&k, before);
        }
    }

    // PodGroups
    pub fn apply_pod_group(&self, g: &PodGroup) {
        self.state
            .write()
            .groups
            .insert(key_of(&g.metadata), g.clone());
    }
    pub fn delete_pod_group(&self, namespace: &str, name: &str) {
        self.state
            .write()
            .groups
            .remove(&(namespace.to_owned(), name.to_owned()));
    }
    pub fn reset_pod_groups(&self, gs: &[PodGroup]) {
        self.state.write().groups = gs
            .iter()
            .map(|g| (key_of(&g.metadata), g.clone()))
            .collect();
    }

    // CompositePodGroups
    pub fn apply_composite(&self, g: &CompositePodGroup) {
        self.state
            .write()
            .composites
            .insert(key_of(&g.metadata), g.clone());
    }
    pub fn delete_composite(&self, namespace: &str, name: &str) {
        self.state
            .write()
            .composites
            .remove(&(namespace.to_owned(), name.to_owned()));
    }
    pub fn reset_composites(&self, gs: &[CompositePodGroup]) {
        self.state.write().composites = gs
            .iter()
            .map(|g| (key_of(&g.metadata), g.clone()))
            .collect();
    }

    // PriorityClasses
    fn class_of(pc: &PriorityClass) -> Class {
        Class {
            value: pc.value.unwrap_or(0),
            preemption_policy: pc.preemption_policy.clone(),
            global_default: pc.global_default.unwrap_or(false),
        }
    }
    pub fn apply_priority_class(&self, pc: &PriorityClass) {
        self.state
            .write()
            .classes
            .insert(name_of(&pc.metadata), Self::class_of(pc));
        self.admission_classes.apply(pc);
    }
    pub fn delete_priority_class(&self, name: &str) {
        self.state.write().classes.remove(name);
        self.admission_classes.delete_name(name);
    }
    /// Replaces every PriorityClass (a relist); marks the admission view synced.
    pub fn reset_priority_classes(&self, pcs: &[PriorityClass]) {
        self.state.write().classes = pcs
            .iter()
            .map(|pc| (name_of(&pc.metadata), Self::class_of(pc)))
            .collect();
        self.admission_classes.reset(pcs.iter().cloned());
    }

    // ResourceClaims
    pub fn apply_claim(&self, c: &ResourceClaim) {
        self.state.write().set_claim(c);
    }
    pub fn delete_claim(&self, namespace: &str, name: &str) {
        let mut s = self.state.write();
        let q = format!("{namespace}/{name}");
        s.claims.remove(&q);
        s.recompute_claim_users(&q);
    }
    pub fn reset_claims(&self, cs: &[ResourceClaim]) {
        let mut s = self.state.write();
        s.claims.clear();
        for c in cs {
            s.set_claim(c);
        }
        s.recompute_dra_nodes();
    }

    // ResourceSlices
    pub fn apply_slice(&self, sl: &ResourceSlice) {
        let mut s = self.state.write();
        s.set_slice(sl);
        s.recompute_dra_nodes();
    }
    pub fn delete_slice(&self, name: &str) {
        let mut s = self.state.write();
        s.unset_slice(name);
        s.recompute_dra_nodes();
    }
    pub fn reset_slices(&self, sls: &[ResourceSlice]) {
        let mut s = self.state.write();
        s.slices.clear();
        s.devices.clear();
        for sl in sls {
            s.set_slice(sl);
        }
        s.recompute_dra_nodes();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mk_node(name: &str, cpu: &str) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name},
            "status": {"allocatable": {"cpu": cpu, "memory": "1Gi", "pods": "10"}}}))
        .unwrap()
    }

    fn mk_pod(name: &str, node: Option<&str>, cpu: &str, claim: Option<&str>) -> Pod {
        let mut spec = json!({"containers": [{"name": "c", "image": "i",
            "resources": {"requests": {"cpu": cpu}, "claims": [{"name": "x"}]}}]});
        if let Some(n) = node {
            spec["nodeName"] = json!(n);
        }
        if let Some(c) = claim {
            spec["resourceClaims"] = json!([{"name": "x", "resourceClaimName": c}]);
        }
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid")},
            "spec": spec}),
        )
        .unwrap()
    }

    fn cpu(c: &NodeCache, node: &str) -> Option<u64> {
        c.read()
            .slot(node)
            .and_then(|s| s.used_named.get("cpu").copied())
    }

    #[test]
    fn pods_count_on_their_node_and_assumptions_until_confirmed() {
        let c = NodeCache::new();
        c.apply_node(&mk_node("n1", "4"));
        c.apply_pod(&mk_pod("a", Some("n1"), "1", None));
        c.apply_pod(&mk_pod("b", None, "2", None));
        assert_eq!(cpu(&c, "n1"), Some(1000));
        assert!(c.assume("ns", "b", "b-uid", "n1"));
        assert_eq!(cpu(&c, "n1"), Some(3000));
        // Wrong uid: nothing assumed.
        assert!(!c.assume("ns", "a", "other", "n1"));
        // The watch still shows b unbound: the assumption stays.
        c.apply_pod(&mk_pod("b", None, "2", None));
        assert!(c.read().is_assumed("ns", "b"));
        // Bound by the watch: confirmed, counted once.
        c.apply_pod(&mk_pod("b", Some("n1"), "2", None));
        assert!(!c.read().is_assumed("ns", "b"));
        assert_eq!(cpu(&c, "n1"), Some(3000));
        // Forgetting an unconfirmed assumption releases it at once.
        c.apply_pod(&mk_pod("d", None, "1", None));
        c.assume("ns", "d", "", "n1");
        assert_eq!(cpu(&c, "n1"), Some(4000));
        c.forget("ns", "d");
        assert_eq!(cpu(&c, "n1"), Some(3000));
        // Relist without b: it no longer counts.
        c.reset_pods(vec![(
            ("ns".into(), "a".into()),
            PodEntry::from_pod(&mk_pod("a", Some("n1"), "1", None)),
        )]);
        assert_eq!(cpu(&c, "n1"), Some(1000));
        // A deleted node keeps its slot while pods are counted there.
        c.delete_node("n1");
        assert!(!c.read().has_node("n1"));
        assert_eq!(cpu(&c, "n1"), Some(1000));
        c.delete_pod("ns", "a");
        assert!(c.read().slot("n1").is_none());
    }

    #[test]
    fn claims_follow_allocation_and_slices() {
        let c = NodeCache::new();
        c.apply_node(&mk_node("n1", "16"));
        let slice: ResourceSlice = serde_json::from_value(json!({"metadata": {"name": "s"},
            "spec": {"driver": "d", "nodeName": "n1", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "cpu0", "nodeAllocatableResources": {"cpu": {"mapping": {"deviceMultiplier": "4"}}}}]}}))
        .unwrap();
        let claim = |allocated: bool| -> ResourceClaim {
            let mut v = json!({"metadata": {"name": "cl", "namespace": "ns"},
                "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "c"}}]}}});
            if allocated {
                v["status"] = json!({"allocation": {"devices": {"results": [
                    {"request": "r", "driver": "d", "pool": "p", "device": "cpu0"}]}}});
            }
            serde_json::from_value(v).unwrap()
        };
        c.apply_pod(&mk_pod("a", Some("n1"), "1", Some("cl")));
        c.apply_pod(&mk_pod("b", Some("n1"), "1", Some("cl")));
        assert_eq!(cpu(&c, "n1"), Some(2000));
        c.apply_slice(&slice);
        c.apply_claim(&claim(true));
        // Shared claim: mapped once.
        assert_eq!(cpu(&c, "n1"), Some(6000));
        c.apply_claim(&claim(false));
        assert_eq!(cpu(&c, "n1"), Some(2000));
        c.apply_claim(&claim(true));
        c.delete_slice("s");
        assert_eq!(cpu(&c, "n1"), Some(2000));
    }

    #[test]
    fn group_members_and_priority() {
        let c = NodeCache::new();
        let mut p = mk_pod("m", None, "1", None);
        p.spec.as_mut().unwrap().scheduling_group =
            Some(serde_json::from_value(json!({"podGroupName": "g"})).unwrap());
        c.apply_pod(&p);
        assert_eq!(c.read().members("ns", "g").map(|m| m.len()), Some(1));
        let g: PodGroup =
            serde_json::from_value(json!({"metadata": {"name": "g", "namespace": "ns"},
            "spec": {"priorityClassName": "hi", "schedulingPolicy": {"basic": {}}}}))
            .unwrap();
        c.apply_pod_group(&g);
        let pc: PriorityClass =
            serde_json::from_value(json!({"metadata": {"name": "hi"}, "value": 7})).unwrap();
        c.apply_priority_class(&pc);
        assert_eq!(
            c.read().group_priority("ns", "g").map(|e| e.priority),
            Some(7)
        );
        c.delete_pod("ns", "m");
        assert!(c.read().members("ns", "g").is_none());
    }
}
