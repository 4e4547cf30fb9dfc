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

use crate::model::resources::{ResId, ResourceNames};
use crate::pods::dra::DeviceClasses;
use crate::pods::fit::{self, DeviceInfo};
use crate::pods::priority::Classes;
use k8s_openapi::api::scheduling::v1alpha3::CompositePodGroup;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use claims::ClaimEntry;
use nodes::NodeTable;

mod claim_bindings;
mod claims;
mod device_classes;
mod domains;
mod groups;
mod node_refs;
mod nodes;
mod pods;
mod priorities;
mod slices;
#[cfg(test)]
mod tests;

pub use claim_bindings::{ClaimBinding, GatedDevice, ShareKey};
pub use claims::ClaimsLoad;
pub use domains::{DomainIndex, Rooms, Semantics};
pub use groups::{Chain, ChainError, GroupObject, Link, Scope};
pub use node_refs::{NodeRefs, REFS_CACHED_BYTES};
pub use nodes::{NO_SLOT, NodeInfo, NodeSlot};
pub use pods::PodEntry;

/// `(namespace, name)`.
pub type Key = (String, String);

/// The hasher of the maps looked up on every call (names, not attacker
/// chosen keys of unbounded count: the API server names them).
type Fast = foldhash::fast::RandomState;

/// A device by `(driver, pool, device)`.
pub type DeviceKey = (String, String, String);

/// Everything the extender knows.
#[derive(Debug)]
pub struct ClusterState {
    /// Interned resource names.
    names: ResourceNames,
    /// Id of `pods`.
    pods_id: ResId,
    /// Id of `cpu`, for scoring.
    cpu_id: ResId,
    /// Id of `memory`, for scoring.
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
    /// PodGroups deleted while member pods remained, with the parent
    /// they last named: those members still fix their parents' topology
    /// domains (see [`ClusterState::departed_groups`]). An entry lives
    /// until the group is created again or its last member is gone.
    departed: HashMap<Key, String, Fast>,
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
    /// Per pending pod (its uid): the resourceVersion of each gated claim
    /// the device gate last let a bind of it pass on
    /// ([`ClusterIndex::record_passed`]); dropped once the watch shows the
    /// pod bound, replaced or gone.
    passed: HashMap<Key, PassedClaims, Fast>,
    /// Pending pods with `status.nominatedNodeName`, as the watch shows
    /// them (see [`ClusterState::nominated_pods`]); ordered, so what reads
    /// them does so in the same order every time.
    nominated: BTreeSet<Key>,
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
            departed: HashMap::default(),
            classes: Classes::new(),
            claims: HashMap::new(),
            claim_users: HashMap::new(),
            slices: HashMap::new(),
            devices: HashMap::new(),
            claim_bindings: HashMap::new(),
            passed: HashMap::default(),
            nominated: BTreeSet::new(),
            device_classes: DeviceClasses::new(),
            refs: Default::default(),
            domains: domains::Domains::default(),
            names_kept: 0,
            names_freed: 0,
        }
    }
}

/// A pod's uid, until when the memory holds, and `(claim,
/// resourceVersion)` of each gated claim its last bind passed the device
/// gate on.
type PassedClaims = (String, tokio::time::Instant, Vec<(String, String)>);

/// The `(namespace, name)` of an object (`default` when it has no namespace).
pub(super) fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Key {
    (
        meta.namespace.clone().unwrap_or_else(|| "default".into()),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The name of a cluster-scoped object.
fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

/// Why a node is not feasible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// What kube-scheduler shows for the node.
    pub message: String,
    /// Removing pods from the node cannot help.
    pub unresolvable: bool,
}

// === impl ClusterState ===

impl ClusterState {
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
    /// Pod relists completed: what happened between two of them, and was
    /// undone before the second, was never seen.
    pod_relists: std::sync::atomic::AtomicU64,
    /// Fed by the standalone store, which writes through it: it never lags
    /// behind the objects (no watch), so nothing waits for it to catch up.
    store_backed: std::sync::atomic::AtomicBool,
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

    /// An empty index (PriorityClasses not synced yet).
    pub fn new() -> Self {
        Self::default()
    }

    /// A consistent snapshot for reading (hold it briefly).
    pub fn read(&self) -> RwLockReadGuard<'_, ClusterState> {
        self.state.read()
    }
}

#[cfg(test)]
impl ClusterIndex {
    /// An index holding test kit objects (see [`ClusterIndex::apply_objects`]).
    pub(crate) fn of(objs: impl IntoIterator<Item = crate::testkit::Obj>) -> Self {
        let index = Self::new();
        index.apply_objects(objs);
        index
    }

    /// Applies test kit objects by `kind`; returns the Pods among them, in
    /// order.
    pub(crate) fn apply_objects(
        &self,
        objs: impl IntoIterator<Item = crate::testkit::Obj>,
    ) -> Vec<k8s_openapi::api::core::v1::Pod> {
        let mut pods = Vec::new();
        for o in objs {
            let kind = o.0["kind"].as_str().unwrap_or_default().to_owned();
            match kind.as_str() {
                "Node" => self.apply_node(&o.typed()),
                "Pod" => {
                    let p = o.typed();
                    self.apply_pod(&p);
                    pods.push(p);
                }
                "PodGroup" => self.apply_pod_group(&o.typed()),
                "CompositePodGroup" => self.apply_composite(&o.typed()),
                "PriorityClass" => self.apply_priority_class(&o.typed()),
                "ResourceClaim" => self.apply_claim(&o.typed()),
                "ResourceSlice" => self.apply_slice(&o.typed()),
                "DeviceClass" => self.apply_device_class(&o.typed()),
                other => panic!("the cluster index holds no kind {other:?}"),
            }
        }
        pods
    }
}
