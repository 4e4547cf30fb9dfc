//! The extender's cluster model: Nodes, Pods (stripped to what node fit
//! reads), PodGroups, CompositePodGroups, PriorityClasses, ResourceClaims
//! and ResourceSlices, with indexes (pods per node, members per group,
//! pods per claim) and pods assumed on a node by this extender's binds.
//!
//! ```text
//!   watchers / standalone store ──apply/delete/reset──▶ ClusterIndex ◀── filter, prioritize (read lock)
//!                                                          ▲
//!                                        bind: assume / forget (write lock)
//! ```
//!
//! One `RwLock` guards one [`ClusterState`]: every reader sees a consistent
//! snapshot. Each node slot keeps its usage (effective requests of the pods
//! counted there, one pod slot each, DRA consumption of their allocated
//! claims) as an interned vector, recomputed whenever anything counted on
//! that node changes, so a filter call only compares integers.
//!
//! Slots live in one dense vector, and allocatable and used amounts are
//! also kept per resource as columns indexed by slot. kube-scheduler sends
//! the same `NodeNames` list for pod after pod, so a list is resolved to
//! slot indexes once ([`ClusterState::resolve_names`], keyed by the list's
//! JSON text and the slot layout) and a call then walks the columns
//! without hashing a name.

use crate::model::resources::{ResId, ResourceNames, ResourceVec};
use crate::pods::dra::{Consumer, DeviceClasses};
use crate::pods::fit::{
    self, AllocatedDevice, Amounts, ClaimRef, DeviceInfo, PodLevel, PodLoad, Reach,
};
use crate::pods::priority::{self, Class, Classes, Declared, Effective};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::scheduling::v1alpha3::CompositePodGroup;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

mod claim_bindings;
mod groups;

pub use claim_bindings::{ClaimBinding, GatedDevice, ShareKey};
pub use groups::{Chain, ChainError, GroupObject, Link, Scope};
mod domains;
pub use domains::{DomainIndex, Rooms, Semantics};

/// `(namespace, name)`.
pub type Key = (String, String);

/// The hasher of the maps looked up on every call (names, not attacker
/// chosen keys of unbounded count: the API server names them).
type Fast = foldhash::fast::RandomState;

/// A device by `(driver, pool, device)`.
pub type DeviceKey = (String, String, String);

/// What the cache keeps of a Node.
#[derive(Debug, Clone, Default)]
pub struct NodeInfo {
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    /// `status.allocatable`, interned (cpu in milli-cores).
    pub alloc: ResourceVec,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
}

/// A node name's slot: the node (while it exists) and what is counted on it.
/// A slot exists while the node exists or any pod is counted on it.
#[derive(Debug, Default)]
pub struct NodeSlot {
    /// The node name (empty for a free slot).
    pub name: Box<str>,
    /// The Node, when it exists.
    pub node: Option<NodeInfo>,
    /// Pods counted here (bound or assumed).
    pub pods: BTreeSet<Key>,
    /// Everything counted here, interned (see [`ClusterState::used`] by name).
    pub used: ResourceVec,
    /// What the counted pods without ResourceClaims take (requests and one
    /// pod slot each), summed wide so removing a pod undoes it exactly:
    /// applying or deleting such a pod never rescans the node.
    plain: PlainLoad,
    /// Counted pods with ResourceClaims, recounted with their claims.
    claimed: BTreeSet<Key>,
}

/// One pod's plain load: its requests and one pod slot, interned.
type Load = smallvec::SmallVec<[(ResId, u64); 4]>;

/// A sum of [`Load`]s per resource id, sorted by id.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct PlainLoad(smallvec::SmallVec<[(ResId, u128); 4]>);

impl PlainLoad {
    fn add(&mut self, load: &Load) {
        for &(id, a) in load {
            match self.0.binary_search_by_key(&id, |e| e.0) {
                Ok(pos) => self.0[pos].1 += u128::from(a),
                Err(pos) => self.0.insert(pos, (id, u128::from(a))),
            }
        }
    }

    /// Returns how many resources left the sum.
    fn sub(&mut self, load: &Load) -> usize {
        let mut gone = 0;
        for &(id, a) in load {
            if let Ok(pos) = self.0.binary_search_by_key(&id, |e| e.0) {
                self.0[pos].1 = self.0[pos].1.saturating_sub(u128::from(a));
                if self.0[pos].1 == 0 {
                    self.0.remove(pos);
                    gone += 1;
                }
            }
        }
        gone
    }
}

/// Where a pod is counted and, without claims, what it adds there.
struct Counted {
    node: String,
    plain: Option<Load>,
}

/// Sentinel slot index of a name the cache does not know.
pub const NO_SLOT: u32 = u32::MAX;

/// Node slots in one dense vector, found by name through one index, so a
/// request's node list can be resolved to slot indexes once and reused.
#[derive(Debug, Default)]
struct NodeTable {
    index: HashMap<Box<str>, u32, foldhash::fast::RandomState>,
    slots: Vec<NodeSlot>,
    free: Vec<u32>,
    /// Bumped whenever a name gains or loses its slot: slot indexes
    /// resolved under an older layout are stale.
    layout: u64,
    /// `[allocatable, used]` by resource id, then slot: the numbers a
    /// filter call compares, kept contiguous for a scan over many nodes (a
    /// copy of each slot's `node.alloc` and `used`).
    cols: Vec<Vec<[u64; 2]>>,
    /// Whether the slot's Node exists (a copy of `slots[i].node.is_some()`,
    /// so a scan need not touch the slots).
    present: Vec<bool>,
}

/// Index of allocatable and used in a [`NodeTable`] column entry.
const ALLOC: usize = 0;
const USED: usize = 1;

impl NodeTable {
    fn find(&self, name: &str) -> Option<u32> {
        self.index.get(name).copied()
    }

    fn get(&self, name: &str) -> Option<&NodeSlot> {
        self.find(name).map(|i| &self.slots[i as usize])
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut NodeSlot> {
        let i = self.find(name)?;
        Some(&mut self.slots[i as usize])
    }

    /// The slot at an index from [`NodeTable::find`] under the current layout.
    fn at(&self, i: u32) -> Option<&NodeSlot> {
        self.slots.get(i as usize).filter(|s| !s.name.is_empty())
    }

    /// The slot of a name, created when missing.
    fn entry(&mut self, name: &str) -> &mut NodeSlot {
        let i = match self.find(name) {
            Some(i) => i,
            None => {
                self.layout += 1;
                let slot = NodeSlot {
                    name: name.into(),
                    ..NodeSlot::default()
                };
                let i = match self.free.pop() {
                    Some(i) => {
                        self.slots[i as usize] = slot;
                        i
                    }
                    None => {
                        self.slots.push(slot);
                        self.present.push(false);
                        for c in &mut self.cols {
                            c.push([0, 0]);
                        }
                        u32::try_from(self.slots.len() - 1).unwrap_or(NO_SLOT - 1)
                    }
                };
                self.index.insert(name.into(), i);
                i
            }
        };
        &mut self.slots[i as usize]
    }

    /// Frees a name's slot when no node and no pod keep it.
    fn release_if_empty(&mut self, name: &str) {
        if let Some(i) = self.find(name)
            && let Some(slot) = self.slots.get_mut(i as usize)
            && slot.node.is_none()
            && slot.pods.is_empty()
        {
            *slot = NodeSlot::default();
            self.index.remove(name);
            self.free.push(i);
            self.layout += 1;
            self.set_col(i, ALLOC, &ResourceVec::new());
            self.set_col(i, USED, &ResourceVec::new());
        }
    }

    /// Copies a slot's allocatable or used amounts into the columns.
    fn set_col(&mut self, i: u32, which: usize, v: &ResourceVec) {
        let i = i as usize;
        for c in &mut self.cols {
            if let Some(e) = c.get_mut(i) {
                e[which] = 0;
            }
        }
        for (id, a) in v.iter() {
            let id = id as usize;
            while self.cols.len() <= id {
                self.cols.push(vec![[0, 0]; self.slots.len()]);
            }
            if let Some(e) = self.cols[id].get_mut(i) {
                e[which] = a;
            }
        }
    }

    /// Whether the Node of a slot index exists.
    fn present(&self, i: u32) -> bool {
        self.present.get(i as usize).copied().unwrap_or(false)
    }

    fn set_present(&mut self, i: u32, present: bool) {
        if let Some(p) = self.present.get_mut(i as usize) {
            *p = present;
        }
    }

    /// `[allocatable, used]` of a resource on a slot.
    fn amounts(&self, id: ResId, i: u32) -> [u64; 2] {
        self.cols
            .get(id as usize)
            .and_then(|c| c.get(i as usize))
            .copied()
            .unwrap_or([0, 0])
    }

    /// Live slots.
    fn iter(&self) -> impl Iterator<Item = &NodeSlot> {
        self.slots.iter().filter(|s| !s.name.is_empty())
    }
}

/// What the cache keeps of a Pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodEntry {
    pub uid: String,
    /// `spec.nodeName` (or the node it is assumed on).
    pub node: Option<String>,
    /// Effective requests (`None` when a quantity does not parse).
    pub requests: Option<Amounts>,
    /// Pod-level requests: the resources whose DRA amounts lie inside
    /// `requests`, with their headroom ([`fit::PodLevel`]).
    pub level: PodLevel,
    /// `spec.schedulingGroup.podGroupName`.
    pub group: Option<String>,
    pub priority: Option<i32>,
    pub priority_class: Option<String>,
    pub preemption_policy: Option<String>,
    /// ResourceClaims used, names qualified as `namespace/name`.
    pub claims: Vec<ClaimRef>,
    /// `Succeeded` or `Failed`: counts nowhere.
    pub terminal: bool,
    /// `metadata.deletionTimestamp` is set: the pod is being deleted (it
    /// still counts on its node until it is gone).
    pub deleting: bool,
    /// `status.nominatedNodeName`: where kube-scheduler preempted for it.
    pub nominated: Option<String>,
    /// `nodeSelector` and required node affinity (group feasibility).
    pub node_rule: Option<Arc<crate::pods::selector::NodeRule>>,
}

impl PodEntry {
    /// Extracts what fit and grouping read.
    pub fn from_pod(pod: &Pod) -> PodEntry {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let spec = pod.spec.as_ref();
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let demand = spec.map_or(Some((Amounts::new(), PodLevel::new())), |s| {
            fit::pod_demand_of(s, pod.status.as_ref()).ok()
        });
        let (requests, level) = match demand {
            Some((r, l)) => (Some(r), l),
            None => (None, PodLevel::new()),
        };
        PodEntry {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            node: spec
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            requests,
            level,
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
            deleting: pod.metadata.deletion_timestamp.is_some(),
            nominated: pod
                .status
                .as_ref()
                .and_then(|s| s.nominated_node_name.clone())
                .filter(|n| !n.is_empty()),
            node_rule: spec
                .and_then(crate::pods::selector::NodeRule::of)
                .map(Arc::new),
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
    /// `status.reservedFor`.
    reserved_for: Vec<Consumer>,
}

/// Everything the extender knows.
#[derive(Debug)]
pub struct ClusterState {
    /// Interned resource names.
    names: ResourceNames,
    /// Id of `pods`.
    pods_id: ResId,
    /// Ids of `cpu` and `memory`, for scoring.
    cpu_id: ResId,
    memory_id: ResId,
    /// Node slots, dense, found by name.
    nodes: NodeTable,
    /// Pods as the watch shows them.
    pods: HashMap<Key, PodEntry, Fast>,
    /// Pods this extender bound (or is binding), until the watch shows them bound.
    assumed: HashMap<Key, PodEntry, Fast>,
    /// The bind each assumption belongs to ([`ClusterIndex::assume_for`]),
    /// so a bind that ends late forgets only its own.
    assume_tokens: HashMap<Key, u64, Fast>,
    /// The next bind token.
    next_token: u64,
    /// PodGroups.
    groups: HashMap<Key, PodGroup, Fast>,
    /// Member pods per PodGroup `(namespace, group)`, by name, as
    /// counted (the assumed version while one exists): group decisions
    /// walk a group's members many times per call without a lookup each.
    members: HashMap<Key, BTreeMap<String, PodEntry>, Fast>,
    /// CompositePodGroups.
    composites: HashMap<Key, CompositePodGroup, Fast>,
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
    /// Binding state of allocated claims with gated devices, by `namespace/name`.
    claim_bindings: HashMap<String, ClaimBinding>,
    /// DeviceClasses: which extended resources DRA satisfies.
    device_classes: DeviceClasses,
    /// Recently resolved `NodeNames` arrays, most recent first.
    refs: parking_lot::Mutex<Vec<Arc<NodeRefs>>>,
    /// Topology label indexes and the group ledger (see [`domains`]).
    domains: domains::Domains,
    /// Interned names the last sweep kept (see [`ClusterState::sweep_names`]).
    names_kept: usize,
    /// Resources that left a slot's `alloc`, `used` or `plain` since.
    names_freed: usize,
}

/// Names interned or resources dropped from a slot since the last sweep
/// that start the next one: at most this many unused names are kept.
const NAMES_SWEEP: usize = 64;

impl Default for ClusterState {
    fn default() -> Self {
        let mut names = ResourceNames::default();
        let pods_id = names.intern(fit::PODS);
        let cpu_id = names.intern("cpu");
        let memory_id = names.intern("memory");
        ClusterState {
            names,
            pods_id,
            cpu_id,
            memory_id,
            nodes: NodeTable::default(),
            pods: HashMap::default(),
            assumed: HashMap::default(),
            assume_tokens: HashMap::default(),
            next_token: 1,
            groups: HashMap::default(),
            members: HashMap::default(),
            composites: HashMap::default(),
            classes: Classes::new(),
            claims: HashMap::new(),
            claim_users: HashMap::new(),
            slices: HashMap::new(),
            devices: HashMap::new(),
            claim_bindings: HashMap::new(),
            device_classes: DeviceClasses::new(),
            refs: Default::default(),
            domains: domains::Domains::default(),
            names_kept: 0,
            names_freed: 0,
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

/// How many resolved `NodeNames` arrays are kept (a lookup scans them).
const REFS_CACHED: usize = 8;
/// How many bytes the kept arrays may hold together ([`NodeRefs::bytes`]):
/// a list larger than this is resolved for its request and not kept, and
/// older lists are dropped until a new one fits.
pub const REFS_CACHED_BYTES: usize = 32 * 1024 * 1024;

/// The hash a `NodeNames` array's text is looked up by.
fn refs_hash(raw: &str) -> u64 {
    use std::hash::BuildHasher as _;
    foldhash::fast::FixedState::with_seed(0).hash_one(raw)
}

/// A `NodeNames` array resolved to slot indexes ([`NO_SLOT`] for names the
/// cache does not know), valid under the layout it was resolved in.
#[derive(Debug, Default)]
pub struct NodeRefs {
    raw: Box<str>,
    hash: u64,
    layout: u64,
    names: Vec<Box<str>>,
    slots: Vec<u32>,
    /// No name needs escaping in JSON (checked once per list).
    plain: bool,
    /// The heap this resolution holds: the raw text, each name with its
    /// box, the slots.
    bytes: usize,
}

impl NodeRefs {
    /// The heap bytes this resolution holds, as the reuse cache counts them.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether every name can be written between quotes as is.
    pub fn all_plain(&self) -> bool {
        self.plain
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// `(name, slot)` in request order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u32)> {
        self.names
            .iter()
            .map(|n| &**n)
            .zip(self.slots.iter().copied())
    }
}

/// What a pending pod's own allocated claims add ([`ClusterState::pending_claims_load`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClaimsLoad {
    /// On every node not listed in `on`.
    pub everywhere: Amounts,
    /// On these slots instead.
    pub on: Vec<(u32, Amounts)>,
}

/// Why a node is not feasible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub message: String,
    /// Removing pods from the node cannot help.
    pub unresolvable: bool,
}

// === impl ClusterState ===

impl ClusterState {
    /// The slot of a node name.
    pub fn slot(&self, node: &str) -> Option<&NodeSlot> {
        self.nodes.get(node)
    }

    /// The amount of a resource counted on a node (`None` when nothing is).
    pub fn used(&self, node: &str, resource: &str) -> Option<u64> {
        let id = self.names.lookup(resource)?;
        Some(self.nodes.get(node)?.used.get(id)).filter(|a| *a > 0)
    }

    /// Whether a Node object exists.
    pub fn has_node(&self, node: &str) -> bool {
        self.nodes.get(node).is_some_and(|s| s.node.is_some())
    }

    /// Objects held, by kind (for `kruntimes_cache_objects`): Nodes, Pods
    /// as watched, Pods assumed by binds not yet observed, groups,
    /// PriorityClasses, allocated ResourceClaims, ResourceSlices.
    pub fn sizes(&self) -> [(&'static str, usize); 8] {
        [
            (
                "Node",
                self.nodes.iter().filter(|s| s.node.is_some()).count(),
            ),
            ("Pod", self.pods.len()),
            ("AssumedPod", self.assumed.len()),
            ("PodGroup", self.groups.len()),
            ("CompositePodGroup", self.composites.len()),
            ("PriorityClass", self.classes.len()),
            ("ResourceClaim", self.claims.len()),
            ("ResourceSlice", self.slices.len()),
        ]
    }

    /// Node names that exist, sorted.
    pub fn node_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .nodes
            .iter()
            .filter(|s| s.node.is_some())
            .map(|s| s.name.to_string())
            .collect();
        v.sort();
        v
    }

    /// The slot index of a node name under the current layout.
    pub fn find(&self, node: &str) -> Option<u32> {
        self.nodes.find(node)
    }

    /// Every cached node, in name order, resolved to its slot, without the
    /// reuse table [`ClusterState::resolve_names`] keeps for kube-scheduler's
    /// lists (a read-only caller such as `/v1/explain/pod` must not evict
    /// them).
    pub fn all_node_refs(&self) -> Arc<NodeRefs> {
        let names: Vec<Box<str>> = self.node_names().into_iter().map(Into::into).collect();
        let raw = serde_json::to_string(&names).unwrap_or_default();
        Arc::new(self.node_refs(&raw, refs_hash(&raw), names))
    }

    /// The resolution of `names` (the array `raw`, hashed `hash`) under the
    /// current layout.
    fn node_refs(&self, raw: &str, hash: u64, names: Vec<Box<str>>) -> NodeRefs {
        let slots: Vec<u32> = names
            .iter()
            .map(|n| self.nodes.find(n).unwrap_or(NO_SLOT))
            .collect();
        let plain = names
            .iter()
            .all(|n| n.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\'));
        let bytes = std::mem::size_of::<NodeRefs>()
            + raw.len()
            + names
                .iter()
                .map(|n| n.len() + std::mem::size_of::<Box<str>>())
                .sum::<usize>()
            + std::mem::size_of_val(&slots[..]);
        NodeRefs {
            raw: raw.into(),
            hash,
            layout: self.nodes.layout,
            names,
            slots,
            plain,
            bytes,
        }
    }

    /// Resolves a `NodeNames` array (its raw JSON text) to slot indexes,
    /// reusing the resolution of an identical array seen under the same
    /// layout: kube-scheduler sends the same list for pod after pod.
    pub fn resolve_names(&self, raw: &str) -> Result<Arc<NodeRefs>, serde_json::Error> {
        let hash = refs_hash(raw);
        let layout = self.nodes.layout;
        {
            let mut cache = self.refs.lock();
            if let Some(pos) = cache
                .iter()
                .position(|r| r.hash == hash && r.layout == layout && *r.raw == *raw)
            {
                let hit = cache.remove(pos);
                cache.insert(0, Arc::clone(&hit));
                return Ok(hit);
            }
        }
        let names: Vec<Box<str>> =
            serde_json::from_str::<Option<Vec<Box<str>>>>(raw)?.unwrap_or_default();
        let refs = Arc::new(self.node_refs(raw, hash, names));
        let bytes = refs.bytes;
        if bytes > REFS_CACHED_BYTES {
            return Ok(refs);
        }
        let mut cache = self.refs.lock();
        cache.retain(|r| r.layout == layout);
        cache.insert(0, Arc::clone(&refs));
        cache.truncate(REFS_CACHED);
        let mut total = 0;
        let keep = cache
            .iter()
            .take_while(|r| {
                total += r.bytes;
                total <= REFS_CACHED_BYTES
            })
            .count();
        cache.truncate(keep);
        Ok(refs)
    }

    // Node fit and score read the columns through these (the fit plugin
    // of the extender owns the rules).

    /// The interned id of a resource name (`None`: no node offers it).
    pub fn resource_id(&self, name: &str) -> Option<ResId> {
        self.names.lookup(name)
    }

    /// Ids of `pods`, `cpu` and `memory`.
    pub fn well_known_ids(&self) -> [ResId; 3] {
        [self.pods_id, self.cpu_id, self.memory_id]
    }

    /// Whether the Node of a slot index exists.
    pub fn present_at(&self, slot: u32) -> bool {
        self.nodes.present(slot)
    }

    /// `[allocatable, used]` of a resource on a slot index.
    pub fn amounts_at(&self, id: ResId, slot: u32) -> [u64; 2] {
        self.nodes.amounts(id, slot)
    }

    /// The slot at a slot index.
    pub fn slot_at(&self, slot: u32) -> Option<&NodeSlot> {
        self.nodes.at(slot)
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

    /// The member pods of a PodGroup as counted (the assumed version
    /// while one exists), with their names.
    pub fn member_pods<'a>(
        &'a self,
        namespace: &str,
        group: &str,
    ) -> impl Iterator<Item = (&'a str, &'a PodEntry)> + 'a {
        self.members(namespace, group)
            .into_iter()
            .flatten()
            .map(|(n, p)| (n.as_str(), p))
    }

    /// Member pods of a PodGroup by name (see [`ClusterState::member_pods`]).
    pub fn members(&self, namespace: &str, group: &str) -> Option<&BTreeMap<String, PodEntry>> {
        self.members.get(&(namespace.to_owned(), group.to_owned()))
    }

    /// PriorityClasses.
    pub fn classes(&self) -> &Classes {
        &self.classes
    }

    /// A PodGroup's resolved priority and preemption policy: the root
    /// CompositePodGroup's when the group is in a hierarchy (the root is
    /// authoritative), else its own.
    pub fn group_priority(&self, namespace: &str, name: &str) -> Option<Effective> {
        let g = self.group(namespace, name)?;
        let declared = match self.root_composite(namespace, name) {
            Some(root) => Declared {
                priority: root.spec.priority,
                class_name: root.spec.priority_class_name.as_deref(),
                preemption_policy: root.spec.preemption_policy.as_deref(),
            },
            None => Declared {
                priority: g.spec.priority,
                class_name: g.spec.priority_class_name.as_deref(),
                preemption_policy: g.spec.preemption_policy.as_deref(),
            },
        };
        Some(priority::resolve(declared, &self.classes))
    }

    /// Interned resource names, and per-resource columns kept (both
    /// return to what the cluster uses after churn of unusual names).
    pub fn interned(&self) -> (usize, usize) {
        (self.names.len(), self.nodes.cols.len())
    }

    // --- writes ---

    /// Frees interned names nothing counts any more, with their columns,
    /// so names churned by pods requesting unusual resources
    /// (`example.com/r-<i>`) do not pile up. A name is in use while a Node
    /// offers it or a counted pod's load holds it (slot `alloc`, `used`,
    /// `plain`); the ids of `runs`, `pods`, `cpu` and `memory` are always
    /// kept. A name can only have fallen out of use by being interned, or
    /// by leaving a slot, since the last sweep: after [`NAMES_SWEEP`] of
    /// those the next write sweeps, so fewer than that many unused names
    /// are ever kept, and a sweep (a pass over the slots) is paid for by
    /// as many changes. Runs under the write lock at the end of a write,
    /// when no id is held outside the state.
    fn sweep_names(&mut self) {
        if self.names_freed + self.names.len().saturating_sub(self.names_kept) < NAMES_SWEEP {
            return;
        }
        let slots = self.nodes.slots.iter().flat_map(|slot| {
            let alloc = slot.node.iter().flat_map(|info| info.alloc.iter());
            alloc
                .chain(slot.used.iter())
                .map(|(id, _)| id)
                .chain(slot.plain.0.iter().map(|(id, _)| *id))
        });
        let map = self.names.compact(
            [self.pods_id, self.cpu_id, self.memory_id]
                .into_iter()
                .chain(slots),
        );
        let new = |id: ResId| map.get(id as usize).copied().flatten();
        for slot in &mut self.nodes.slots {
            if let Some(info) = &mut slot.node {
                info.alloc.remap(&map);
            }
            slot.used.remap(&map);
            slot.plain.0 = slot
                .plain
                .0
                .iter()
                .filter_map(|&(id, a)| Some((new(id)?, a)))
                .collect();
            slot.plain.0.shrink_to_fit();
        }
        let old = std::mem::take(&mut self.nodes.cols);
        let mut cols: Vec<Vec<[u64; 2]>> = Vec::new();
        for (id, col) in old.into_iter().enumerate() {
            if let Some(to) = new(id as ResId) {
                let to = to as usize;
                if cols.len() <= to {
                    cols.resize_with(to + 1, Vec::new);
                }
                cols[to] = col;
            }
        }
        // A column a live id never had (nothing counted yet) reads as zeros.
        let slots = self.nodes.slots.len();
        for c in &mut cols {
            c.resize(slots, [0, 0]);
        }
        self.nodes.cols = cols;
        self.pods_id = new(self.pods_id).unwrap_or(self.pods_id);
        self.cpu_id = new(self.cpu_id).unwrap_or(self.cpu_id);
        self.memory_id = new(self.memory_id).unwrap_or(self.memory_id);
        self.names_kept = self.names.len();
        self.names_freed = 0;
    }

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

    /// Where a pod counts and its plain load (`None` with claims).
    fn counted_load(&mut self, k: &Key) -> Option<Counted> {
        let p = self
            .assumed
            .get(k)
            .or_else(|| self.pods.get(k))
            .filter(|p| !p.terminal && p.node.is_some())?;
        let plain = p.claims.is_empty().then(|| {
            let mut load: Load = p
                .requests
                .iter()
                .flatten()
                .filter(|(_, a)| **a > 0)
                .map(|(n, a)| (self.names.intern(n), *a))
                .collect();
            load.push((self.names.intern(fit::PODS), 1));
            load
        });
        Some(Counted {
            node: p.node.clone()?,
            plain,
        })
    }

    /// Moves a pod's index entry from `before` to where it counts now, and
    /// recomputes both nodes: plain pods by their own load alone, so the
    /// cost does not grow with the pods already on the node.
    fn reindex(&mut self, k: &Key, before: Option<Counted>) {
        let after = self.counted_load(k);
        if let Some(b) = &before
            && let Some(slot) = self.nodes.get_mut(&b.node)
        {
            slot.pods.remove(k);
            match &b.plain {
                Some(load) => self.names_freed += slot.plain.sub(load),
                None => {
                    slot.claimed.remove(k);
                }
            }
        }
        if let Some(a) = &after {
            let slot = self.nodes.entry(&a.node);
            slot.pods.insert(k.clone());
            match &a.plain {
                Some(load) => slot.plain.add(load),
                None => {
                    slot.claimed.insert(k.clone());
                }
            }
        }
        let mut nodes: Vec<&str> = before
            .iter()
            .chain(after.iter())
            .map(|c| c.node.as_str())
            .collect();
        nodes.dedup();
        for n in nodes {
            self.recompute(n);
        }
        self.refresh_member(k);
    }

    /// Copies the pod's counted version into its group's member view.
    fn refresh_member(&mut self, k: &Key) {
        let Some(v) = self.assumed.get(k).or_else(|| self.pods.get(k)) else {
            return;
        };
        let Some(g) = &v.group else { return };
        if let Some(m) = self.members.get_mut(&(k.0.clone(), g.clone()))
            && let Some(slot) = m.get_mut(&k.1)
            && slot != v
        {
            *slot = v.clone();
        }
    }

    /// Recomputes what is counted on one node; drops an empty slot.
    fn recompute(&mut self, node: &str) {
        let Some(slot) = self.nodes.get(node) else {
            return;
        };
        let mut vec = ResourceVec::new();
        for &(id, a) in &slot.plain.0 {
            vec.add_one(id, u64::try_from(a).unwrap_or(u64::MAX));
        }
        let entries: Vec<&PodEntry> = slot
            .claimed
            .iter()
            .filter_map(|k| self.counted(k))
            .collect();
        let empty = Amounts::new();
        let loads: Vec<PodLoad<'_>> = entries
            .iter()
            .map(|p| PodLoad {
                requests: p.requests.as_ref().unwrap_or(&empty),
                level: &p.level,
                claims: &p.claims,
            })
            .collect();
        let (used, errors) = fit::node_usage(&loads, |claim| self.devices_on(claim, node));
        for e in errors {
            tracing::warn!(node, error = %e, "DRA node-allocatable quantity ignored");
        }
        for (n, a) in &used {
            vec.add_one(self.names.intern(n), *a);
        }
        if let Some(i) = self.nodes.find(node) {
            self.nodes.set_col(i, USED, &vec);
            let slot = &mut self.nodes.slots[i as usize];
            self.names_freed += slot.used.iter().filter(|(id, _)| vec.get(*id) == 0).count();
            slot.used = vec;
        }
        self.nodes.release_if_empty(node);
    }

    /// The allocated devices of a claim that take from `node`: those whose
    /// ResourceSlice (or own node selection) reaches that node (`None`
    /// while the claim is not allocated).
    fn devices_on<'a>(&'a self, claim: &str, node: &str) -> Option<Vec<AllocatedDevice<'a>>> {
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

    /// The DeviceClasses (which extended resources DRA satisfies).
    pub fn device_classes(&self) -> &DeviceClasses {
        &self.device_classes
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
        let alloc = ResourceVec::from_pairs(
            fit::node_allocatable(node.status.as_ref())
                .iter()
                .map(|(n, a)| (self.names.intern(n), *a))
                .collect::<Vec<_>>(),
        );
        let info = NodeInfo {
            uid: node.metadata.uid.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            alloc,
            unschedulable: node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
        };
        if name.is_empty() {
            return;
        }
        let alloc = info.alloc.clone();
        if let Some(old) = self.nodes.get(&name).and_then(|s| s.node.as_ref()) {
            self.names_freed += old
                .alloc
                .iter()
                .filter(|(id, _)| alloc.get(*id) == 0)
                .count();
        }
        let slot = self.nodes.entry(&name);
        let relabelled = slot.node.as_ref().is_none_or(|n| n.labels != info.labels);
        let claimed = !slot.claimed.is_empty();
        slot.node = Some(info);
        if let Some(i) = self.nodes.find(&name) {
            self.nodes.set_col(i, ALLOC, &alloc);
            self.nodes.set_present(i, true);
        }
        // Devices reach nodes by label: what claims take here may change.
        if relabelled && claimed {
            self.recompute(&name);
        }
        self.node_labels_changed(&name);
    }

    fn unset_node(&mut self, name: &str) {
        if let Some(i) = self.nodes.find(name) {
            if let Some(old) = self.nodes.slots[i as usize].node.take() {
                self.names_freed += old.alloc.len();
            }
            self.nodes.set_col(i, ALLOC, &ResourceVec::new());
            self.nodes.set_present(i, false);
        }
        self.node_labels_changed(name);
        self.nodes.release_if_empty(name);
    }

    fn index_pod(&mut self, k: &Key, p: &PodEntry, add: bool) {
        if let Some(g) = &p.group {
            let gk = (k.0.clone(), g.clone());
            if add {
                self.members
                    .entry(gk)
                    .or_default()
                    .insert(k.1.clone(), p.clone());
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
        let before = self.counted_load(&k);
        if let Some(old) = self.pods.remove(&k) {
            self.index_pod(&k, &old, false);
        }
        // The watch confirms an assumption once it shows the pod bound, or
        // shows a different pod (new uid) under the name.
        if let Some(a) = self.assumed.get(&k)
            && (entry.node.is_some() || a.uid != entry.uid || entry.terminal)
        {
            self.assumed.remove(&k);
            self.assume_tokens.remove(&k);
        }
        self.index_pod(&k, &entry, true);
        self.pods.insert(k.clone(), entry);
        self.reindex(&k, before);
    }

    fn remove_pod(&mut self, k: &Key) {
        let before = self.counted_load(k);
        if let Some(old) = self.pods.remove(k) {
            self.index_pod(k, &old, false);
        }
        self.assumed.remove(k);
        self.assume_tokens.remove(k);
        self.reindex(k, before);
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

    fn set_slice(&mut self, slice: &ResourceSlice) {
        let name = name_of(&slice.metadata);
        self.unset_slice(&name);
        let spec = &slice.spec;
        let reach_of = |node: Option<&String>,
                        selector: Option<&k8s_openapi::api::core::v1::NodeSelector>,
                        all: Option<bool>| {
            match (node, selector, all) {
                (Some(n), _, _) if !n.is_empty() => Reach::Node(n.clone()),
                (_, Some(sel), _) => {
                    Reach::Selector(Arc::new(crate::pods::selector::NodeRule::of_selector(sel)))
                }
                (_, _, Some(true)) => Reach::All,
                _ => Reach::Nowhere,
            }
        };
        let per_device = spec.per_device_node_selection == Some(true);
        let slice_reach = reach_of(
            spec.node_name.as_ref(),
            spec.node_selector.as_ref(),
            spec.all_nodes,
        );
        let mut keys = Vec::new();
        for d in spec.devices.iter().flatten() {
            let key = (spec.driver.clone(), spec.pool.name.clone(), d.name.clone());
            let mut node_allocatable = d.node_allocatable_resources.clone().unwrap_or_default();
            node_allocatable.retain(|res, _| {
                let valid = fit::node_allocatable_target(res);
                if !valid {
                    tracing::warn!(slice = %name, device = %d.name, resource = %res,
                        "nodeAllocatableResources names a resource that is not a node resource (cpu, memory, ephemeral-storage, hugepages-*); ignored");
                }
                valid
            });
            self.devices.insert(
                key.clone(),
                DeviceInfo {
                    reach: if per_device {
                        reach_of(d.node_name.as_ref(), d.node_selector.as_ref(), d.all_nodes)
                    } else {
                        slice_reach.clone()
                    },
                    capacity: d
                        .capacity
                        .iter()
                        .flatten()
                        .map(|(k, v)| (k.clone(), v.value.clone()))
                        .collect(),
                    node_allocatable,
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
pub struct ClusterIndex {
    /// All state, behind one lock for consistent snapshots.
    state: RwLock<ClusterState>,
    /// The PriorityClasses in `state` have been listed once (a `reset`):
    /// until then name lookups answer "not synced" (admission fails closed).
    classes_synced: std::sync::atomic::AtomicBool,
    /// Woken after every ResourceClaim change (binds waiting on devices).
    claim_changes: tokio::sync::Notify,
    /// Woken after every Pod change (the `All`-disruption evictor).
    pod_changes: tokio::sync::Notify,
}

/// The write lock of the state; releasing it sweeps interned names that
/// are no longer used ([`ClusterState::sweep_names`]).
struct Writing<'a>(RwLockWriteGuard<'a, ClusterState>);

impl std::ops::Deref for Writing<'_> {
    type Target = ClusterState;
    fn deref(&self) -> &ClusterState {
        &self.0
    }
}

impl std::ops::DerefMut for Writing<'_> {
    fn deref_mut(&mut self) -> &mut ClusterState {
        &mut self.0
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.sweep_names();
    }
}

// === impl ClusterIndex ===

impl ClusterIndex {
    /// Takes the write lock (see [`Writing`]).
    fn write(&self) -> Writing<'_> {
        Writing(self.state.write())
    }

    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the PriorityClasses have been listed once.
    pub fn priority_classes_synced(&self) -> bool {
        self.classes_synced
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Marks the PriorityClasses synced (standalone mode: the store is the
    /// whole truth from the start) or not.
    pub fn set_priority_classes_synced(&self, synced: bool) {
        self.classes_synced
            .store(synced, std::sync::atomic::Ordering::Release);
    }

    /// One PriorityClass by name, or "not synced" before the first list.
    pub fn lookup_priority_class(&self, name: &str) -> priority::ClassLookup {
        priority::lookup(
            &self.state.read().classes,
            self.priority_classes_synced(),
            name,
        )
    }

    /// A consistent snapshot for reading (hold it briefly).
    pub fn read(&self) -> RwLockReadGuard<'_, ClusterState> {
        self.state.read()
    }

    // Nodes
    pub fn apply_node(&self, node: &Node) {
        let mut s = self.write();
        s.set_node(node);
    }
    pub fn delete_node(&self, name: &str) {
        self.write().unset_node(name);
    }
    pub fn reset_nodes(&self, nodes: &[Node]) {
        let mut s = self.write();
        let keep: HashSet<String> = nodes.iter().map(|n| name_of(&n.metadata)).collect();
        let gone: Vec<String> = s
            .nodes
            .iter()
            .filter(|slot| !keep.contains(&*slot.name))
            .map(|slot| slot.name.to_string())
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
        self.write().put_pod(key, entry);
        self.pod_changes.notify_waiters();
    }
    pub fn delete_pod(&self, namespace: &str, name: &str) {
        self.write()
            .remove_pod(&(namespace.to_owned(), name.to_owned()));
        self.pod_changes.notify_waiters();
    }
    /// Notified after every Pod change: register (`notified()`, then
    /// `enable()`) before reading the state, then await.
    pub fn pod_changes(&self) -> &tokio::sync::Notify {
        &self.pod_changes
    }
    /// Deletes every pod not in `keep` (the end of a relist applied pod by pod).
    pub fn retain_pods(&self, keep: &HashSet<Key>) {
        let mut s = self.write();
        let gone: Vec<Key> = s
            .pods
            .keys()
            .filter(|k| !keep.contains(*k))
            .cloned()
            .collect();
        for k in gone {
            s.remove_pod(&k);
        }
        drop(s);
        self.pod_changes.notify_waiters();
    }
    pub fn reset_pods(&self, pods: Vec<(Key, PodEntry)>) {
        let mut s = self.write();
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
        drop(s);
        self.pod_changes.notify_waiters();
    }

    /// Counts a pod on `node` until the watch shows it bound (or gone).
    /// False when the pod is not cached (nothing to count).
    pub fn assume(&self, namespace: &str, name: &str, uid: &str, node: &str) -> bool {
        self.assume_for(namespace, name, uid, node).is_some()
    }

    /// [`ClusterIndex::assume`] for one bind: returns the token that
    /// [`ClusterIndex::forget_for`] needs to undo this assumption and no
    /// later one (a retried bind of the same pod takes a new token).
    pub fn assume_for(&self, namespace: &str, name: &str, uid: &str, node: &str) -> Option<u64> {
        let mut s = self.write();
        let k = (namespace.to_owned(), name.to_owned());
        let mut e = s.pods.get(&k).cloned()?;
        if !uid.is_empty() && e.uid != uid {
            return None;
        }
        let before = s.counted_load(&k);
        e.node = Some(node.to_owned());
        s.assumed.insert(k.clone(), e);
        let token = s.next_token;
        s.next_token += 1;
        s.assume_tokens.insert(k.clone(), token);
        s.reindex(&k, before);
        Some(token)
    }

    /// Drops an assumption (the bind failed), whichever bind made it.
    pub fn forget(&self, namespace: &str, name: &str) {
        let mut s = self.write();
        let k = (namespace.to_owned(), name.to_owned());
        let before = s.counted_load(&k);
        if s.assumed.remove(&k).is_some() {
            s.assume_tokens.remove(&k);
            s.reindex(&k, before);
        }
    }

    /// Drops the assumption bind `token` made, if it is still the pod's
    /// (a newer bind's assumption is left alone). Whether it was dropped.
    pub fn forget_for(&self, namespace: &str, name: &str, token: u64) -> bool {
        let mut s = self.write();
        let k = (namespace.to_owned(), name.to_owned());
        if s.assume_tokens.get(&k) != Some(&token) {
            return false;
        }
        let before = s.counted_load(&k);
        s.assume_tokens.remove(&k);
        if s.assumed.remove(&k).is_some() {
            s.reindex(&k, before);
        }
        true
    }

    // PodGroups
    pub fn apply_pod_group(&self, g: &PodGroup) {
        self.write().groups.insert(key_of(&g.metadata), g.clone());
    }
    pub fn delete_pod_group(&self, namespace: &str, name: &str) {
        self.write()
            .groups
            .remove(&(namespace.to_owned(), name.to_owned()));
    }
    pub fn reset_pod_groups(&self, gs: &[PodGroup]) {
        self.write().groups = gs
            .iter()
            .map(|g| (key_of(&g.metadata), g.clone()))
            .collect();
    }

    // CompositePodGroups
    pub fn apply_composite(&self, g: &CompositePodGroup) {
        self.write()
            .composites
            .insert(key_of(&g.metadata), g.clone());
    }
    pub fn delete_composite(&self, namespace: &str, name: &str) {
        self.write()
            .composites
            .remove(&(namespace.to_owned(), name.to_owned()));
    }
    pub fn reset_composites(&self, gs: &[CompositePodGroup]) {
        self.write().composites = gs
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
        self.write()
            .classes
            .insert(name_of(&pc.metadata), Self::class_of(pc));
    }
    pub fn delete_priority_class(&self, name: &str) {
        self.write().classes.remove(name);
    }
    /// An index holding exactly these PriorityClasses, synced: for running
    /// the admission webhooks without watchers (embedding, tests).
    pub fn with_priority_classes(pcs: &[PriorityClass]) -> Self {
        let index = Self::new();
        index.reset_priority_classes(pcs);
        index
    }
    /// Replaces every PriorityClass (a relist); marks them synced.
    pub fn reset_priority_classes(&self, pcs: &[PriorityClass]) {
        self.write().classes = pcs
            .iter()
            .map(|pc| (name_of(&pc.metadata), Self::class_of(pc)))
            .collect();
        self.set_priority_classes_synced(true);
    }

    // ResourceClaims
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

    // ResourceSlices
    pub fn apply_slice(&self, sl: &ResourceSlice) {
        let mut s = self.write();
        s.set_slice(sl);
        s.recompute_dra_nodes();
    }
    pub fn delete_slice(&self, name: &str) {
        let mut s = self.write();
        s.unset_slice(name);
        s.recompute_dra_nodes();
    }
    pub fn reset_slices(&self, sls: &[ResourceSlice]) {
        let mut s = self.write();
        s.slices.clear();
        s.devices.clear();
        for sl in sls {
            s.set_slice(sl);
        }
        s.recompute_dra_nodes();
    }

    // DeviceClasses
    pub fn apply_device_class(&self, c: &DeviceClass) {
        self.state.write().device_classes.apply(c);
    }
    pub fn delete_device_class(&self, name: &str) {
        self.state.write().device_classes.delete(name);
    }
    pub fn reset_device_classes(&self, cs: &[DeviceClass]) {
        self.state.write().device_classes.reset(cs);
    }
}

#[cfg(test)]
impl ClusterState {
    /// Every derived index agrees with the slots it was derived from.
    fn assert_consistent(&self) {
        for ((ns, g), members) in &self.members {
            for (name, view) in members {
                let k = (ns.clone(), name.clone());
                let v = self.assumed.get(&k).or_else(|| self.pods.get(&k));
                assert_eq!(Some(view), v, "member view of {ns}/{name}");
                assert_eq!(view.group.as_deref(), Some(g.as_str()));
            }
        }
        let t = &self.nodes;
        for (name, &i) in &t.index {
            assert_eq!(&*t.slots[i as usize].name, &**name);
        }
        for (i, slot) in t.slots.iter().enumerate() {
            let mut plain = PlainLoad::default();
            let mut claimed = BTreeSet::new();
            for k in &slot.pods {
                let p = self.counted(k).expect("indexed pods are counted");
                assert_eq!(p.node.as_deref(), Some(&*slot.name), "{k:?}");
                if p.claims.is_empty() {
                    let mut load: Load = p
                        .requests
                        .iter()
                        .flatten()
                        .filter(|(_, a)| **a > 0)
                        .map(|(n, a)| (self.names.lookup(n).expect("interned"), *a))
                        .collect();
                    load.push((self.names.lookup(fit::PODS).expect("interned"), 1));
                    plain.add(&load);
                } else {
                    claimed.insert(k.clone());
                }
            }
            assert_eq!(slot.plain, plain, "plain load of slot {i}");
            assert_eq!(slot.claimed, claimed, "claimed pods of slot {i}");
            let live = !slot.name.is_empty();
            assert_eq!(live, t.find(&slot.name) == Some(i as u32) && live);
            assert_eq!(live, !t.free.contains(&(i as u32)), "slot {i}");
            let alloc = slot
                .node
                .as_ref()
                .map(|n| n.alloc.clone())
                .unwrap_or_default();
            for (id, col) in t.cols.iter().enumerate() {
                let id = id as ResId;
                assert_eq!(col.len(), t.slots.len());
                assert_eq!(
                    col[i],
                    [alloc.get(id), slot.used.get(id)],
                    "slot {i} id {id}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    use crate::testkit;

    // Fixtures from the test kit: namespace `ns`, nodes with 1Gi, 10 pods.

    fn mk_node(name: &str, cpu: &str) -> Node {
        testkit::node(name)
            .allocatable(cpu, "1Gi")
            .set(&["status", "allocatable", "pods"], "10")
            .typed()
    }

    /// Pod `ns/name` requesting `cpu`, bound to `node`, whose container uses
    /// claim `x` (ResourceClaim `claim`).
    fn mk_pod(name: &str, node: Option<&str>, cpu: &str, claim: Option<&str>) -> Pod {
        let mut p = testkit::pod(name).namespace("ns").requests(&[("cpu", cpu)]);
        if let Some(n) = node {
            p = p.set(&["spec", "nodeName"], n);
        }
        let p = p.uses_claim("x", claim, None);
        match claim {
            Some(_) => p,
            // The container still names `x`; the pod lists no such claim.
            None => p.unset(&["spec", "resourceClaims"]),
        }
        .typed()
    }

    fn cpu(c: &ClusterIndex, node: &str) -> Option<u64> {
        c.read().used(node, "cpu")
    }

    /// A pod bound to `node` requesting one of an unusual resource.
    fn unusual(i: usize, node: &str) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": format!("u{i}"), "namespace": "ns", "uid": format!("u{i}")},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": "1m", format!("example.com/r-{i}"): "1"}}}]}}),
        )
        .unwrap()
    }

    #[test]
    fn churned_resource_names_and_their_columns_are_freed() {
        let c = ClusterIndex::new();
        for n in 0..10 {
            c.apply_node(&mk_node(&format!("n{n}"), "100"));
        }
        let baseline = c.read().interned();
        // 100k pods, each requesting a resource of its own, created and
        // deleted with 100 alive at a time.
        let mut peak = baseline;
        for i in 0..100_000 {
            c.apply_pod(&unusual(i, &format!("n{}", i % 10)));
            if i >= 100 {
                c.delete_pod("ns", &format!("u{}", i - 100));
            }
            let now = c.read().interned();
            peak = (peak.0.max(now.0), peak.1.max(now.1));
            if i % 10_000 == 0 {
                c.read().assert_consistent();
            }
        }
        // Never more than what is alive plus the sweep's slack.
        assert!(peak.0 <= baseline.0 + 100 + NAMES_SWEEP, "{peak:?}");
        assert!(peak.1 <= baseline.1 + 100 + NAMES_SWEEP, "{peak:?}");
        // The 100 still alive are counted where they are.
        assert_eq!(c.read().used("n3", "example.com/r-99993"), Some(1));
        c.read().assert_consistent();
        for i in 99_900..100_000 {
            c.delete_pod("ns", &format!("u{i}"));
        }
        // A write after the churn: a pod of usual resources comes and goes.
        c.apply_pod(&mk_pod("p", Some("n1"), "1", None));
        c.delete_pod("ns", "p");
        let after = c.read().interned();
        assert!(
            after.0 <= baseline.0 + NAMES_SWEEP,
            "{after:?} vs {baseline:?}"
        );
        assert!(
            after.1 <= baseline.1 + NAMES_SWEEP,
            "{after:?} vs {baseline:?}"
        );
        c.read().assert_consistent();
        // Fit still reads the well-known resources right after the renumbering.
        let snap = c.read();
        assert_eq!(snap.used("n1", "cpu"), None);
        let [pods, cpu, _] = snap.well_known_ids();
        let slot = snap.find("n1").unwrap();
        assert_eq!(snap.amounts_at(cpu, slot), [100_000, 0]);
        assert_eq!(snap.amounts_at(pods, slot), [10, 0]);
    }

    #[test]
    fn pods_count_on_their_node_and_assumptions_until_confirmed() {
        let c = ClusterIndex::new();
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
        c.read().assert_consistent();
    }

    #[test]
    fn the_reused_node_lists_are_bounded_in_bytes() {
        let c = ClusterIndex::new();
        c.apply_node(&mk_node("n1", "4"));
        // Lists of 200-byte names, each a little over a third of the budget.
        let list = |tag: char, count: usize| {
            let names: Vec<String> = (0..count)
                .map(|i| format!("{}{i:08}", tag.to_string().repeat(192)))
                .collect();
            serde_json::to_string(&names).unwrap()
        };
        let third = REFS_CACHED_BYTES / 3 / (2 * 200);
        let (a, b, d) = (list('a', third), list('b', third), list('d', third));
        let ra = c.read().resolve_names(&a).unwrap();
        assert!(ra.bytes() > REFS_CACHED_BYTES / 3 - REFS_CACHED_BYTES / 10);
        let rb = c.read().resolve_names(&b).unwrap();
        assert!(Arc::ptr_eq(&ra, &c.read().resolve_names(&a).unwrap()));
        // A third list does not fit beside the other two: the least
        // recently used (b) goes, though only three lists are kept.
        let rd = c.read().resolve_names(&d).unwrap();
        assert!(ra.bytes() + rb.bytes() + rd.bytes() > REFS_CACHED_BYTES);
        assert!(Arc::ptr_eq(&rd, &c.read().resolve_names(&d).unwrap()));
        assert!(Arc::ptr_eq(&ra, &c.read().resolve_names(&a).unwrap()));
        assert!(!Arc::ptr_eq(&rb, &c.read().resolve_names(&b).unwrap()));
        // A list larger than the whole budget is resolved but never kept.
        let huge = list('h', REFS_CACHED_BYTES / (200 + 24) + 1);
        let h1 = c.read().resolve_names(&huge).unwrap();
        assert!(h1.bytes() > REFS_CACHED_BYTES);
        assert_eq!(h1.len(), REFS_CACHED_BYTES / (200 + 24) + 1);
        assert!(!Arc::ptr_eq(&h1, &c.read().resolve_names(&huge).unwrap()));
        // ... and costs the lists kept nothing (b and a now).
        assert!(Arc::ptr_eq(&ra, &c.read().resolve_names(&a).unwrap()));
    }

    #[test]
    fn resolved_node_names_are_reused_until_the_layout_changes() {
        let c = ClusterIndex::new();
        c.apply_node(&mk_node("n1", "4"));
        let raw = r#"["n1","n2"]"#;
        let a = c.read().resolve_names(raw).unwrap();
        let b = c.read().resolve_names(raw).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(
            a.iter().collect::<Vec<_>>(),
            vec![("n1", 0), ("n2", NO_SLOT)]
        );
        // A new node changes the layout: resolved again, n2 now found.
        c.apply_node(&mk_node("n2", "4"));
        let d = c.read().resolve_names(raw).unwrap();
        assert!(!Arc::ptr_eq(&a, &d));
        assert_eq!(d.iter().collect::<Vec<_>>(), vec![("n1", 0), ("n2", 1)]);
        // A pod counted there does not change the layout.
        c.apply_pod(&mk_pod("a", Some("n2"), "1", None));
        assert!(Arc::ptr_eq(&d, &c.read().resolve_names(raw).unwrap()));
        // Escaped names resolve to what they spell.
        let e = c.read().resolve_names(r#"["n\u0031", null]"#);
        assert!(e.is_err(), "null is not a node name");
        let e = c.read().resolve_names("[\"n\\u0031\"]").unwrap();
        assert_eq!(e.iter().collect::<Vec<_>>(), vec![("n1", 0)]);
        assert!(c.read().resolve_names("[1]").is_err());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Node(u8, u8),
        DeleteNode(u8),
        Pod(u8, Option<u8>, u8),
        DeletePod(u8),
        Assume(u8, u8),
        Forget(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..4u8, 1..8u8).prop_map(|(n, cpu)| Op::Node(n, cpu)),
            (0..4u8).prop_map(Op::DeleteNode),
            (0..6u8, proptest::option::of(0..4u8), 1..4u8).prop_map(|(p, n, c)| Op::Pod(p, n, c)),
            (0..6u8).prop_map(Op::DeletePod),
            (0..6u8, 0..4u8).prop_map(|(p, n)| Op::Assume(p, n)),
            (0..6u8).prop_map(Op::Forget),
        ]
    }

    proptest! {
        /// Under any history the dense columns and the group member views
        /// match what they are derived from (the fit plugin checks that its
        /// per-slot step agrees with the named check under such histories).
        #[test]
        fn columns_follow_every_history(ops in proptest::collection::vec(op(), 1..40)) {
            let c = ClusterIndex::new();
            for op in ops {
                match op {
                    Op::Node(n, cpu) => c.apply_node(&mk_node(&format!("n{n}"), &cpu.to_string())),
                    Op::DeleteNode(n) => c.delete_node(&format!("n{n}")),
                    Op::Pod(p, n, cpu) => {
                        let mut pod = mk_pod(
                            &format!("p{p}"),
                            n.map(|n| format!("n{n}")).as_deref(),
                            &cpu.to_string(),
                            None,
                        );
                        if p % 2 == 0 {
                            pod.spec.as_mut().unwrap().scheduling_group =
                                Some(serde_json::from_value(json!({"podGroupName": "g"})).unwrap());
                        }
                        c.apply_pod(&pod)
                    }
                    Op::DeletePod(p) => c.delete_pod("ns", &format!("p{p}")),
                    Op::Assume(p, n) => {
                        c.assume("ns", &format!("p{p}"), "", &format!("n{n}"));
                    }
                    Op::Forget(p) => c.forget("ns", &format!("p{p}")),
                }
                let s = c.read();
                s.assert_consistent();
            }
        }
    }

    #[test]
    fn claims_follow_allocation_and_slices() {
        let c = ClusterIndex::new();
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

    fn cpu_slice(name: &str, node: &str, per_pod: Option<&str>) -> ResourceSlice {
        let mut res = json!({"mapping": {"deviceMultiplier": "4"}});
        if let Some(o) = per_pod {
            res["overhead"] = json!({"perPod": o});
        }
        serde_json::from_value(json!({"metadata": {"name": name},
            "spec": {"driver": "d", "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "cpu0", "nodeAllocatableResources": {"cpu": res}}]}}))
        .unwrap()
    }

    fn allocated(claim: &str, pool: &str) -> ResourceClaim {
        serde_json::from_value(json!({"metadata": {"name": claim, "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "c"}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "r", "driver": "d", "pool": pool, "device": "cpu0"}]}}}}))
        .unwrap()
    }

    #[test]
    fn a_device_takes_only_from_the_node_its_slice_is_on() {
        let c = ClusterIndex::new();
        c.apply_node(&mk_node("n1", "16"));
        c.apply_node(&mk_node("n2", "16"));
        c.apply_slice(&cpu_slice("s2", "n2", None));
        c.apply_claim(&allocated("cl", "n2"));
        // A pod on n1 referencing a claim whose device is on n2: its
        // request counts on n1, the device's mapping does not.
        c.apply_pod(&mk_pod("a", Some("n1"), "1", Some("cl")));
        assert_eq!(cpu(&c, "n1"), Some(1000));
        c.apply_pod(&mk_pod("b", Some("n2"), "1", Some("cl")));
        assert_eq!(cpu(&c, "n2"), Some(5000));
    }

    #[test]
    fn a_pending_pods_claims_load_the_nodes_of_their_devices() {
        let c = ClusterIndex::new();
        c.apply_node(&mk_node("n1", "16"));
        c.apply_node(&mk_node("n2", "16"));
        c.apply_slice(&cpu_slice("s1", "n1", Some("500m")));
        c.apply_claim(&allocated("cl", "n1"));
        let claims = [ClaimRef {
            claim: "ns/cl".into(),
            refs: 1,
        }];
        let n1 = c.read().find("n1").unwrap();
        let cpu_of = |a: &Amounts| a.get("cpu").copied();
        // Nobody uses the claim yet: mapping and overhead on n1, nothing elsewhere.
        let load = c.read().pending_claims_load(&claims);
        assert_eq!(cpu_of(&load.everywhere), None);
        assert_eq!(load.on.len(), 1);
        assert_eq!((load.on[0].0, cpu_of(&load.on[0].1)), (n1, Some(4500)));
        // Shared with a pod already counted on n1: the mapping is counted
        // there once already; only this pod's overhead is added.
        c.apply_pod(&mk_pod("a", Some("n1"), "1", Some("cl")));
        assert_eq!(cpu(&c, "n1"), Some(5500));
        let load = c.read().pending_claims_load(&claims);
        assert_eq!((load.on[0].0, cpu_of(&load.on[0].1)), (n1, Some(500)));
        // Unallocated claims add nothing anywhere.
        let none = c.read().pending_claims_load(&[ClaimRef {
            claim: "ns/other".into(),
            refs: 1,
        }]);
        assert_eq!(none, ClaimsLoad::default());
    }

    #[test]
    fn group_members_and_priority() {
        let c = ClusterIndex::new();
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
