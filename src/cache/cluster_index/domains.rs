//! Topology domains, for gang and topology-aware placement.
//!
//! - A label index per topology key (node names by label value), built on
//!   the first request for that key and kept current by node applies, so a
//!   group's domain is found without walking every node.
//! - [`Rooms`]: what is free on a node for a fixed list of resources.
//!
//! Everything that reads node storage directly is here, so a change of that
//! storage only touches this file.

use super::{ClusterState, Key, ResId};
use k8s_openapi::api::scheduling::v1alpha3::CompositePodGroup;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Node names by value of one label key.
#[derive(Debug, Default, Clone)]
pub struct DomainIndex {
    /// Value → node names (sorted).
    by_value: BTreeMap<String, Vec<String>>,
    /// Node name → value.
    of_node: HashMap<String, String, foldhash::fast::RandomState>,
}

// === impl DomainIndex ===

impl DomainIndex {
    /// The label value of an existing node (`None`: outside every domain).
    #[inline]
    pub fn value_of(&self, node: &str) -> Option<&str> {
        self.of_node.get(node).map(String::as_str)
    }

    /// Nodes of one domain, sorted.
    pub fn nodes(&self, value: &str) -> &[String] {
        self.by_value.get(value).map_or(&[], Vec::as_slice)
    }

    /// Every domain with its nodes, by value.
    pub fn domains(&self) -> impl Iterator<Item = (&str, &[String])> {
        self.by_value
            .iter()
            .map(|(v, n)| (v.as_str(), n.as_slice()))
    }

    /// Number of domains.
    pub fn len(&self) -> usize {
        self.by_value.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_value.is_empty()
    }

    fn insert(&mut self, node: &str, value: &str) {
        let nodes = self.by_value.entry(value.to_owned()).or_default();
        if let Err(at) = nodes.binary_search_by(|n| n.as_str().cmp(node)) {
            nodes.insert(at, node.to_owned());
        }
        self.of_node.insert(node.to_owned(), value.to_owned());
    }

    fn remove(&mut self, node: &str) {
        let Some(value) = self.of_node.remove(node) else {
            return;
        };
        if let Some(nodes) = self.by_value.get_mut(&value) {
            nodes.retain(|n| n != node);
            if nodes.is_empty() {
                self.by_value.remove(&value);
            }
        }
    }
}

/// Switches of the Workload API semantics the extender follows (set from
/// `serve`'s flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Semantics {
    /// The `PodGroupPreemptionPolicy` feature gate: groups carry their own
    /// `preemptionPolicy` (the root CompositePodGroup's is authoritative).
    /// Off: the groups' field is ignored and the pods of one group must
    /// share one preemption policy among themselves.
    pub group_preemption_policy: bool,
    /// `--evict-all-disruption`: preempt may take a candidate whose `All`
    /// group (or `All` CompositePodGroup scope) also runs on other nodes
    /// when every member is below the preemptor; the members elsewhere are
    /// evicted afterwards ([`crate::extender::evict`]). Off: such a
    /// candidate is dropped.
    pub evict_all_disruption: bool,
}

impl Default for Semantics {
    fn default() -> Self {
        Semantics {
            group_preemption_policy: true,
            evict_all_disruption: true,
        }
    }
}

/// The label indexes and the semantics switches (a field of [`ClusterState`]).
#[derive(Debug, Default)]
pub(super) struct Domains {
    /// One index per topology key asked for so far.
    indexes: Mutex<HashMap<String, Arc<DomainIndex>>>,
    /// The switches `serve` set ([`ClusterIndex::set_semantics`]).
    semantics: Semantics,
}

impl super::ClusterIndex {
    /// Sets the semantics switches (at start-up).
    pub fn set_semantics(&self, s: Semantics) {
        self.write().domains.semantics = s;
    }
}

/// Free amounts on nodes for a fixed list of resources.
pub struct Rooms<'s> {
    /// The snapshot read.
    snap: &'s ClusterState,
    /// The interned id of each asked resource, in the asked order (`None`:
    /// no node offers it, so it is 0 everywhere).
    ids: Vec<Option<ResId>>,
    /// Ignore what is counted on the node (allocatable only).
    empty: bool,
}

// === impl Rooms ===

impl Rooms<'_> {
    /// Writes `allocatable - used` of each resource into `out` (saturating
    /// at 0). False when the node does not exist or is unschedulable.
    pub fn room(&self, node: &str, out: &mut Vec<u64>) -> bool {
        out.clear();
        let Some(slot) = self.snap.nodes.get(node) else {
            return false;
        };
        let Some(info) = &slot.node else {
            return false;
        };
        if info.unschedulable {
            return false;
        }
        out.extend(self.ids.iter().map(|id| match id {
            None => 0,
            Some(id) => {
                let alloc = info.alloc.get(*id);
                if self.empty {
                    alloc
                } else {
                    alloc.saturating_sub(slot.used.get(*id))
                }
            }
        }));
        true
    }
}

// === impl ClusterState (domains) ===

impl ClusterState {
    /// Existing nodes carrying label `key`: `(name, value)`, in no order.
    pub fn nodes_with_label<'a>(
        &'a self,
        key: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a str)> {
        self.nodes.iter().filter_map(move |slot| {
            slot.node
                .as_ref()
                .and_then(|n| n.labels.get(key))
                .map(|v| (&*slot.name, v.as_str()))
        })
    }

    /// The domains of a topology key (built on first use, then kept current).
    pub fn domain_index(&self, key: &str) -> Arc<DomainIndex> {
        let mut indexes = self.domains.indexes.lock();
        if let Some(ix) = indexes.get(key) {
            return Arc::clone(ix);
        }
        let mut ix = DomainIndex::default();
        for (node, value) in self.nodes_with_label(key) {
            ix.insert(node, value);
        }
        let ix = Arc::new(ix);
        indexes.insert(key.to_owned(), Arc::clone(&ix));
        ix
    }

    /// A reader of free amounts for `resources` (in that order).
    pub fn rooms(&self, resources: &[String], empty: bool) -> Rooms<'_> {
        Rooms {
            snap: self,
            ids: resources.iter().map(|r| self.names.lookup(r)).collect(),
            empty,
        }
    }

    /// PodGroups whose parent is the CompositePodGroup `namespace/parent`, sorted.
    pub fn child_groups(&self, namespace: &str, parent: &str) -> Vec<String> {
        children(&self.groups, namespace, parent, |g: &PodGroup| {
            g.spec.parent_composite_pod_group_name.as_deref()
        })
    }

    /// CompositePodGroups whose parent is `namespace/parent`, sorted.
    pub fn child_composites(&self, namespace: &str, parent: &str) -> Vec<String> {
        children(
            &self.composites,
            namespace,
            parent,
            |c: &CompositePodGroup| c.spec.parent_composite_pod_group_name.as_deref(),
        )
    }

    /// The semantics switches.
    pub fn semantics(&self) -> Semantics {
        self.domains.semantics
    }

    /// Keeps the label indexes current after a node was set or removed.
    pub(super) fn node_labels_changed(&mut self, name: &str) {
        let labels = self
            .nodes
            .get(name)
            .and_then(|s| s.node.as_ref())
            .map(|n| &n.labels);
        for (key, ix) in self.domains.indexes.get_mut().iter_mut() {
            let now = labels.and_then(|l| l.get(key));
            let before = ix.value_of(name);
            if now.map(String::as_str) == before {
                continue;
            }
            let ix = Arc::make_mut(ix);
            ix.remove(name);
            if let Some(v) = now {
                ix.insert(name, v);
            }
        }
    }
}

/// Names of the objects in `namespace` whose parent is `parent`, sorted.
fn children<T, S>(
    objects: &HashMap<Key, T, S>,
    namespace: &str,
    parent: &str,
    parent_of: impl Fn(&T) -> Option<&str>,
) -> Vec<String> {
    let mut v: Vec<String> = objects
        .iter()
        .filter(|((ns, _), o)| ns == namespace && parent_of(o) == Some(parent))
        .map(|((_, n), _)| n.clone())
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use crate::cache::cluster_index::ClusterIndex;
    use crate::testkit;

    #[test]
    fn index_follows_label_changes_and_deletions() {
        let c = ClusterIndex::new();
        c.apply_node(
            &testkit::node("a")
                .pod_slots("10")
                .label("rack", "r1")
                .typed(),
        );
        c.apply_node(
            &testkit::node("b")
                .pod_slots("10")
                .label("rack", "r1")
                .typed(),
        );
        c.apply_node(&testkit::node("c").pod_slots("10").typed());
        let ix = c.read().domain_index("rack");
        assert_eq!(ix.nodes("r1"), ["a", "b"]);
        assert_eq!(ix.value_of("c"), None);
        // Relabelled, labelled, deleted: the index follows.
        c.apply_node(
            &testkit::node("b")
                .pod_slots("10")
                .label("rack", "r2")
                .typed(),
        );
        c.apply_node(
            &testkit::node("c")
                .pod_slots("10")
                .label("rack", "r2")
                .typed(),
        );
        c.delete_node("a");
        let ix = c.read().domain_index("rack");
        assert_eq!(ix.nodes("r1"), [] as [String; 0]);
        assert_eq!(ix.nodes("r2"), ["b", "c"]);
        assert_eq!(ix.len(), 1);
        // An index taken earlier is a consistent snapshot of its time.
        let old = ix;
        c.apply_node(
            &testkit::node("d")
                .pod_slots("10")
                .label("rack", "r3")
                .typed(),
        );
        assert_eq!(old.len(), 1);
        assert_eq!(c.read().domain_index("rack").len(), 2);
    }

    #[test]
    fn rooms_are_allocatable_minus_used() {
        let c = ClusterIndex::new();
        c.apply_node(
            &testkit::node("a")
                .pod_slots("10")
                .label("rack", "r1")
                .typed(),
        );
        c.apply_pod(
            &testkit::pod("p")
                .namespace("ns")
                .requests(&[("cpu", "1500m")])
                .node_name("a")
                .typed(),
        );
        let s = c.read();
        let names = vec!["cpu".to_owned(), "pods".to_owned(), "gpu".to_owned()];
        let mut out = Vec::new();
        assert!(s.rooms(&names, false).room("a", &mut out));
        assert_eq!(out, [2500, 9, 0]);
        assert!(s.rooms(&names, true).room("a", &mut out));
        assert_eq!(out, [4000, 10, 0]);
        assert!(!s.rooms(&names, false).room("ghost", &mut out));
    }
}
