//! One trait for every watched kind: how an add or update, a deletion and a
//! relist of objects reach a cache.
//!
//! Shaped after `kubert::index` (`IndexNamespacedResource` /
//! `IndexClusterResource`): an index is told `apply(obj)`,
//! `delete(namespace, name)` and `reset(objs)`; it never sees a watch
//! stream. The cluster watcher (`cluster::watch::watch`), the standalone
//! store and tests drive the same calls, so a kind behaves alike in both
//! modes.
//!
//! Both caches implement it: the Run cache ([`RunCache`]: Runs, Runtimes,
//! Runtime Pods) and the cluster index ([`ClusterIndex`]: Nodes, Pods,
//! PodGroups, CompositePodGroups, PriorityClasses, ResourceClaims,
//! ResourceSlices, DeviceClasses). [`Pods`] feeds one Pod stream to both. [`Indexes`] is
//! the set of indexes a watched object can land in; the kind table
//! (`cluster::kinds`) names, per kind, which one.

use super::RunCache;
use super::cluster_index::{ClusterIndex, Key, PodEntry, key_of};
use crate::crd::{Run, Runtime};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use std::collections::HashSet;
use std::sync::Arc;

/// Where the objects of one kind `K` land.
///
/// Keys are `(namespace, name)`; a cluster-scoped kind ignores the
/// namespace (callers pass `""`, or the watcher's `"default"`).
pub trait Index<K>: Send + Sync {
    /// An object was added or changed.
    fn apply(&self, obj: K);

    /// An object was deleted.
    fn delete(&self, namespace: &str, name: &str);

    /// A relist: `objs` is every object of the kind; anything else the
    /// index holds is gone.
    fn reset(&self, objs: Vec<K>);

    /// How a relist reaches the index. `false` (the default): the watcher
    /// buffers the list and calls [`Index::reset`]. `true`: each listed
    /// object is [`Index::apply`]d as its page arrives, then
    /// [`Index::retain`] drops what the list did not show, so memory holds
    /// the list's keys, never the list (for kinds with very many objects).
    const PAGED_RELIST: bool = false;

    /// The end of a paged relist: drops every object whose key is not in
    /// `keep`. Called only when [`Index::PAGED_RELIST`] is true, and such
    /// an index must override it.
    fn retain(&self, keep: &HashSet<Key>) {
        let _ = keep;
    }

    /// Requests for a fresh list (the Run cache's,
    /// [`RunCache::fresh_runs`]): on a change the watcher drops its watch
    /// and lists again at once. `None` (the default): never asked.
    fn relists(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }

    /// A list that started when the latest request was `asked` is in (after
    /// its [`Index::reset`] or [`Index::retain`]).
    fn listed(&self, asked: u64) {
        let _ = asked;
    }
}

/// Every index a watched object can land in (the kind table picks one per
/// kind by field name).
#[derive(Clone)]
pub struct Indexes {
    /// The Run cache: Runs and Runtimes.
    pub runs: Arc<RunCache>,
    /// The cluster index: what the extender and admission read.
    pub nodes: Arc<ClusterIndex>,
    /// Pods, into both.
    pub pods: Arc<Pods>,
}

impl Indexes {
    pub fn new(runs: Arc<RunCache>, nodes: Arc<ClusterIndex>) -> Self {
        let pods = Arc::new(Pods {
            runs: Arc::clone(&runs),
            nodes: Arc::clone(&nodes),
        });
        Indexes { runs, nodes, pods }
    }
}

// === the Run cache ===

impl Index<Run> for RunCache {
    fn apply(&self, obj: Run) {
        self.apply_run(&obj)
    }
    fn delete(&self, namespace: &str, name: &str) {
        self.delete_run(namespace, name)
    }
    fn reset(&self, objs: Vec<Run>) {
        self.reset_runs(&objs)
    }
    fn relists(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.runs_relists())
    }
    fn listed(&self, asked: u64) {
        self.runs_listed(asked)
    }
}

impl Index<Runtime> for RunCache {
    fn apply(&self, obj: Runtime) {
        self.apply_runtime(&obj)
    }
    fn delete(&self, namespace: &str, name: &str) {
        self.delete_runtime(namespace, name)
    }
    fn reset(&self, objs: Vec<Runtime>) {
        self.reset_runtimes(&objs)
    }
}

/// Runtime Pods, read at the current time (heartbeat staleness).
impl Index<Pod> for RunCache {
    fn apply(&self, obj: Pod) {
        self.apply_pod(&obj, Timestamp::now())
    }
    fn delete(&self, namespace: &str, name: &str) {
        self.delete_pod(namespace, name)
    }
    fn reset(&self, objs: Vec<Pod>) {
        self.reset_pods(&objs, Timestamp::now())
    }
    const PAGED_RELIST: bool = true;
    fn retain(&self, keep: &HashSet<Key>) {
        self.retain_pods(|ns, name| keep.contains(&(ns.to_owned(), name.to_owned())))
    }
}

// === the cluster index ===
//
// The cluster index implements `Index<K>` beside the storage of each kind:
// `cluster_index/nodes.rs`, `pods.rs`, `groups.rs`, `priorities.rs`,
// `claims.rs`, `slices.rs`, `device_classes.rs`.

// === both ===

/// One Pod stream for both caches: every Pod goes to the cluster index;
/// Pods carrying the runtime label also go to the Run cache as Runtime
/// Pods, and a Pod that loses the label leaves it.
pub struct Pods {
    runs: Arc<RunCache>,
    nodes: Arc<ClusterIndex>,
}

impl Pods {
    fn is_runtime_pod(&self, pod: &Pod) -> bool {
        let key = &self.runs.config().runtime_label_key;
        pod.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(key))
    }
}

impl Index<Pod> for Pods {
    fn apply(&self, obj: Pod) {
        let key = key_of(&obj.metadata);
        let entry = PodEntry::from_pod(&obj);
        if self.is_runtime_pod(&obj) {
            self.runs.apply_pod(&obj, Timestamp::now());
        } else {
            self.runs.delete_pod(&key.0, &key.1);
        }
        self.nodes.apply_pod_entry(key, entry)
    }
    fn delete(&self, namespace: &str, name: &str) {
        self.runs.delete_pod(namespace, name);
        self.nodes.delete_pod(namespace, name);
    }
    fn reset(&self, objs: Vec<Pod>) {
        let keep: HashSet<Key> = objs.iter().map(|p| key_of(&p.metadata)).collect();
        for p in objs {
            self.apply(p);
        }
        self.retain(&keep);
    }
    const PAGED_RELIST: bool = true;
    fn retain(&self, keep: &HashSet<Key>) {
        Index::<Pod>::retain(&*self.runs, keep);
        Index::<Pod>::retain(&*self.nodes, keep);
    }
}
