//! Node storage: one slot per node name in a dense table, the Node's
//! allocatable and labels, what is counted there, the per-resource
//! columns a filter call compares, and the interned resource names those
//! columns are numbered by (swept when churn leaves them unused).

use super::{ClusterIndex, ClusterState, Key, name_of};
use crate::cache::index::Index;
use crate::model::resources::{ResId, ResourceVec};
use crate::pods::fit;
use k8s_openapi::api::core::v1::Node;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// What the cache keeps of a Node.
#[derive(Debug, Clone, Default)]
pub struct NodeInfo {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.labels` (topology domains, device node selectors).
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
    pub(super) plain: PlainLoad,
    /// Counted pods with ResourceClaims, recounted with their claims.
    pub(super) claimed: BTreeSet<Key>,
}

/// One pod's plain load: its requests and one pod slot, interned.
pub(super) type Load = smallvec::SmallVec<[(ResId, u64); 4]>;

/// A sum of [`Load`]s per resource id, sorted by id.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct PlainLoad(pub(super) smallvec::SmallVec<[(ResId, u128); 4]>);

impl PlainLoad {
    pub(super) fn add(&mut self, load: &Load) {
        for &(id, a) in load {
            match self.0.binary_search_by_key(&id, |e| e.0) {
                Ok(pos) => self.0[pos].1 += u128::from(a),
                Err(pos) => self.0.insert(pos, (id, u128::from(a))),
            }
        }
    }

    /// Returns how many resources left the sum.
    pub(super) fn sub(&mut self, load: &Load) -> usize {
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

/// Names interned or resources dropped from a slot since the last sweep
/// that start the next one: at most this many unused names are kept.
pub(super) const NAMES_SWEEP: usize = 64;

/// Sentinel slot index of a name the cache does not know.
pub const NO_SLOT: u32 = u32::MAX;

/// Node slots in one dense vector, found by name through one index, so a
/// request's node list can be resolved to slot indexes once and reused.
#[derive(Debug, Default)]
pub(super) struct NodeTable {
    /// Slot index by node name.
    pub(super) index: HashMap<Box<str>, u32, foldhash::fast::RandomState>,
    /// The slots, live or free (a free slot's name is empty).
    pub(super) slots: Vec<NodeSlot>,
    /// Indexes of free slots, reused before the vector grows.
    pub(super) free: Vec<u32>,
    /// Bumped whenever a name gains or loses its slot: slot indexes
    /// resolved under an older layout are stale.
    pub(super) layout: u64,
    /// `[allocatable, used]` by resource id, then slot: the numbers a
    /// filter call compares, kept contiguous for a scan over many nodes (a
    /// copy of each slot's `node.alloc` and `used`).
    pub(super) cols: Vec<Vec<[u64; 2]>>,
    /// Whether the slot's Node exists (a copy of `slots[i].node.is_some()`,
    /// so a scan need not touch the slots).
    pub(super) present: Vec<bool>,
}

/// Index of allocatable in a [`NodeTable`] column entry.
pub(super) const ALLOC: usize = 0;
/// Index of used in a [`NodeTable`] column entry.
pub(super) const USED: usize = 1;

impl NodeTable {
    #[inline]
    pub(super) fn find(&self, name: &str) -> Option<u32> {
        self.index.get(name).copied()
    }

    #[inline]
    pub(super) fn get(&self, name: &str) -> Option<&NodeSlot> {
        self.find(name).map(|i| &self.slots[i as usize])
    }

    pub(super) fn get_mut(&mut self, name: &str) -> Option<&mut NodeSlot> {
        let i = self.find(name)?;
        Some(&mut self.slots[i as usize])
    }

    /// The slot at an index from [`NodeTable::find`] under the current layout.
    pub(super) fn at(&self, i: u32) -> Option<&NodeSlot> {
        self.slots.get(i as usize).filter(|s| !s.name.is_empty())
    }

    /// The slot of a name, created when missing.
    pub(super) fn entry(&mut self, name: &str) -> &mut NodeSlot {
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
    pub(super) fn release_if_empty(&mut self, name: &str) {
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
    pub(super) fn set_col(&mut self, i: u32, which: usize, v: &ResourceVec) {
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
    pub(super) fn present(&self, i: u32) -> bool {
        self.present.get(i as usize).copied().unwrap_or(false)
    }

    pub(super) fn set_present(&mut self, i: u32, present: bool) {
        if let Some(p) = self.present.get_mut(i as usize) {
            *p = present;
        }
    }

    /// `[allocatable, used]` of a resource on a slot.
    pub(super) fn amounts(&self, id: ResId, i: u32) -> [u64; 2] {
        self.cols
            .get(id as usize)
            .and_then(|c| c.get(i as usize))
            .copied()
            .unwrap_or([0, 0])
    }

    /// Live slots.
    pub(super) fn iter(&self) -> impl Iterator<Item = &NodeSlot> {
        self.slots.iter().filter(|s| !s.name.is_empty())
    }
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
    #[inline]
    pub fn find(&self, node: &str) -> Option<u32> {
        self.nodes.find(node)
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
    pub(super) fn sweep_names(&mut self) {
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
}

// === impl ClusterIndex ===

impl ClusterIndex {
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
}

impl Index<Node> for ClusterIndex {
    fn apply(&self, obj: Node) {
        self.apply_node(&obj)
    }
    fn delete(&self, _namespace: &str, name: &str) {
        self.delete_node(name)
    }
    fn reset(&self, objs: Vec<Node>) {
        self.reset_nodes(&objs)
    }
}
