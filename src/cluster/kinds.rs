//! The kind table: every kind the scheduler reads, written once.
//!
//! One row per kind says its apiVersion, its scope, which index receives
//! it ([`Indexes`] field), when a cluster-mode process watches it and what
//! is disabled when the cluster does not serve it, the watch's
//! configuration and what is stripped from each object before it is
//! indexed. From the table come:
//!
//! - [`Kind`], its names, apiVersions and scope (the standalone object API,
//!   `POST|GET|DELETE /v1/objects`, and `--state` loading accept exactly
//!   these kinds);
//! - decoding and checking a JSON object as the kind's type
//!   ([`Kind::decode`]), and applying or deleting it in its index
//!   ([`Kind::apply`], [`Kind::delete`]): the standalone store's dispatch;
//! - the cluster-mode watch wiring ([`Kind::plan_watch`], run by
//!   [`spawn`] through the one generic watcher).
//!
//! **Adding a kind** is one row here plus its `apply` / `delete` / `reset`:
//! an [`Index`] impl for the new type on the cache that keeps it
//! (`cache::index`). The unit tests below check every row against the
//! type's own kind and apiVersion and round-trip every kind through the
//! standalone object store.

use super::watch::{self, SyncTracker, Watches};
use crate::cache::RunCache;
use crate::cache::cluster_index::ClusterIndex;
use crate::cache::index::{Index, Indexes};
use crate::crd::{Run, Runtime};
use crate::health::Health;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::scheduling::v1alpha3::CompositePodGroup;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher;
use kube::{Client, Resource as _};
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

/// Why a JSON object is not a valid object of its kind (with the path of
/// the offending field).
pub type DecodeError = serde_path_to_error::Error<serde_json::Error>;

/// Drops what no index reads and every object carries.
fn strip_managed<K: kube::Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

/// Runs also lose their annotations (nothing the scheduler reads; often
/// `kubectl.kubernetes.io/last-applied-configuration`, a copy of the Run).
fn strip_run(r: &mut Run) {
    r.metadata.managed_fields = None;
    r.metadata.annotations = None;
}

/// Pods are reduced by their index as they arrive (see
/// [`crate::cache::index::Pods`]): nothing to strip first.
fn keep<K>(_: &mut K) {}

fn any_config(_: &Watches, _: &Indexes) -> watcher::Config {
    watcher::Config::default()
}

/// Without the extender only Runtime Pods are read: they are selected by
/// the runtime label at the API server.
fn pod_config(w: &Watches, ix: &Indexes) -> watcher::Config {
    if w.extender {
        watcher::Config::default()
    } else {
        watcher::Config::default().labels(&ix.runs.config().runtime_label_key)
    }
}

macro_rules! kinds {
    ($(
        $(#[$doc:meta])*
        $kind:ident: $api_version:literal, $scope:ident, index: $index:ident,
            watch: $gate:expr, $feature:literal, config: $config:expr, strip: $strip:expr;
    )*) => {
        /// The kinds the scheduler reads (see the module docs).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Kind {
            $($(#[$doc])* $kind,)*
        }

        /// An object decoded as its kind's type ([`Kind::decode`]), to
        /// apply to the kind's index.
        pub enum Decoded {
            $($kind(Box<$kind>),)*
        }

        impl Decoded {
            /// Replaces the object's metadata with `meta` and applies it to
            /// the kind's index.
            pub fn apply_with_meta(self, ix: &Indexes, meta: ObjectMeta) {
                match self {
                    $(Decoded::$kind(mut o) => {
                        *o.meta_mut() = meta;
                        Index::<$kind>::apply(&*ix.$index, *o);
                    })*
                }
            }
        }

        impl Kind {
            /// Every kind, in table order.
            pub const ALL: [Kind; [$(stringify!($kind)),*].len()] = [$(Kind::$kind),*];

            /// The kind's name (`PriorityClass`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Kind::$kind => stringify!($kind),)*
                }
            }

            /// The one apiVersion the kind is read at.
            pub fn api_version(self) -> &'static str {
                match self {
                    $(Kind::$kind => $api_version,)*
                }
            }

            /// Cluster-scoped kinds have no namespace.
            pub fn cluster_scoped(self) -> bool {
                match self {
                    $(Kind::$kind => kinds!(@cluster $scope),)*
                }
            }

            /// Checks a JSON object against the kind's Kubernetes type,
            /// keeping what was decoded: the object's one decode when it is
            /// stored and indexed at once.
            pub fn decode(self, v: &Value) -> Result<Decoded, DecodeError> {
                match self {
                    $(Kind::$kind => serde_path_to_error::deserialize::<_, $kind>(v)
                        .map(|o| Decoded::$kind(Box::new(o))),)*
                }
            }

            /// Decodes a JSON object as the kind's type and applies it to
            /// the kind's index.
            pub fn apply(self, ix: &Indexes, v: &Value) -> Result<(), serde_json::Error> {
                match self {
                    $(Kind::$kind => {
                        Index::<$kind>::apply(&*ix.$index, $kind::deserialize(v)?);
                        Ok(())
                    })*
                }
            }

            /// Deletes an object from the kind's index (`namespace` is
            /// ignored for cluster-scoped kinds).
            pub fn delete(self, ix: &Indexes, namespace: &str, name: &str) {
                match self {
                    $(Kind::$kind => Index::<$kind>::delete(&*ix.$index, namespace, name),)*
                }
            }

            /// Decides whether this process watches the kind (what its
            /// components read, and what the cluster serves) and returns
            /// the watch to start; a kind not watched is reset to empty.
            pub async fn plan_watch(
                self,
                client: &Client,
                ix: &Indexes,
                watches: &Watches,
                health: &crate::health::Health,
            ) -> Option<watch::Planned> {
                match self {
                    $(Kind::$kind => {
                        let on: fn(&Watches) -> bool = $gate;
                        let config: fn(&Watches, &Indexes) -> watcher::Config = $config;
                        watch::plan::<$kind, _>(
                            client,
                            &ix.$index,
                            stringify!($kind),
                            $feature,
                            on(watches),
                            config(watches, ix),
                            $strip,
                            health,
                        )
                        .await
                    })*
                }
            }
        }
    };
    (@cluster cluster) => { true };
    (@cluster namespaced) => { false };
}

kinds! {
    /// Every Pod: Runtime Pods for Run placement, all Pods for node fit.
    Pod: "v1", namespaced, index: pods,
        watch: |w| w.runs || w.extender, "Run placement and node fit",
        config: pod_config, strip: keep;
    Run: "kruntimes.io/v1alpha1", namespaced, index: runs,
        watch: |w| w.runs, "Run scheduling",
        config: any_config, strip: strip_run;
    Runtime: "kruntimes.io/v1alpha1", namespaced, index: runs,
        watch: |w| w.runs, "Runtime lookups",
        config: any_config, strip: strip_managed;
    Node: "v1", cluster, index: nodes,
        watch: |w| w.extender, "the scheduler extender",
        config: any_config, strip: strip_managed;
    PodGroup: "scheduling.k8s.io/v1beta1", namespaced, index: nodes,
        watch: |w| w.extender, "workload-aware scheduling",
        config: any_config, strip: strip_managed;
    CompositePodGroup: "scheduling.k8s.io/v1alpha3", namespaced, index: nodes,
        watch: |w| w.extender, "gangs of gangs",
        config: any_config, strip: strip_managed;
    /// Admission's `priorityClassName` check and group priority.
    PriorityClass: "scheduling.k8s.io/v1", cluster, index: nodes,
        watch: |w| w.priority_classes, "priority class resolution",
        config: any_config, strip: strip_managed;
    ResourceClaim: "resource.k8s.io/v1", namespaced, index: nodes,
        watch: |w| w.extender, "DRA node-allocatable accounting and device binding conditions",
        config: any_config, strip: strip_managed;
    ResourceSlice: "resource.k8s.io/v1", cluster, index: nodes,
        watch: |w| w.extender, "DRA node-allocatable accounting",
        config: any_config, strip: strip_managed;
    /// Extended resources backed by DRA (`spec.extendedResourceName`).
    DeviceClass: "resource.k8s.io/v1", cluster, index: nodes,
        watch: |w| w.extender, "extended resources backed by DRA",
        config: any_config, strip: strip_managed;
}

impl Kind {
    /// Accepts the kind (`Run`), lower case (`run`) or plural (`runs`,
    /// `priorityclasses`).
    pub fn parse(s: &str) -> Option<Kind> {
        let l = s.to_ascii_lowercase();
        Kind::ALL.into_iter().find(|k| {
            let n = k.as_str().to_ascii_lowercase();
            l == n || l == format!("{n}s") || l == format!("{n}es")
        })
    }
}

/// Starts the watchers of every kind in the kind table this process reads;
/// returns their tasks. `/readyz` turns true once each watched kind has
/// been listed, and tells `health` how each watch fares.
pub async fn spawn(
    client: Client,
    cache: Arc<RunCache>,
    nodes: Arc<ClusterIndex>,
    watches: Watches,
    health: Arc<Health>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let ix = Indexes::new(Arc::clone(&cache), nodes);
    let mut planned = Vec::new();
    for kind in Kind::ALL {
        planned.extend(kind.plan_watch(&client, &ix, &watches, &health).await);
    }
    // Every watched kind is pending before any watcher starts, so the
    // first to list cannot declare the caches synced alone.
    if planned.is_empty() {
        cache.set_synced(true);
    }
    for (kind, _) in &planned {
        health.watch_planned(kind);
    }
    let sync = Arc::new(
        SyncTracker::new(planned.iter().map(|(k, _)| *k), {
            let cache = Arc::clone(&cache);
            move || cache.set_synced(true)
        })
        .with_health(Arc::clone(&health)),
    );
    planned
        .into_iter()
        .map(|(_, start)| start(Arc::clone(&sync), Arc::clone(&health)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::cluster_index::ClusterIndex;
    use crate::cache::{CacheConfig, RunCache};
    use crate::cluster::standalone::StandaloneStore;
    use crate::metrics::Metrics;
    use crate::runs::queue::WorkQueue;
    use serde_json::json;
    use std::any::TypeId;
    use std::sync::Arc;

    /// What the type itself says: kind, apiVersion, cluster-scoped.
    fn type_says(kind: Kind) -> (String, String, bool) {
        fn says<K: kube::Resource<DynamicType = ()>>() -> (String, String, bool)
        where
            K::Scope: 'static,
        {
            (
                K::kind(&()).into_owned(),
                K::api_version(&()).into_owned(),
                TypeId::of::<K::Scope>() == TypeId::of::<k8s_openapi::ClusterResourceScope>(),
            )
        }
        match kind {
            Kind::Pod => says::<Pod>(),
            Kind::Run => says::<Run>(),
            Kind::Runtime => says::<Runtime>(),
            Kind::Node => says::<Node>(),
            Kind::PodGroup => says::<PodGroup>(),
            Kind::CompositePodGroup => says::<CompositePodGroup>(),
            Kind::PriorityClass => says::<PriorityClass>(),
            Kind::ResourceClaim => says::<ResourceClaim>(),
            Kind::ResourceSlice => says::<ResourceSlice>(),
            Kind::DeviceClass => says::<DeviceClass>(),
        }
    }

    #[test]
    fn every_row_matches_its_type() {
        for kind in Kind::ALL {
            assert_eq!(
                type_says(kind),
                (
                    kind.as_str().to_owned(),
                    kind.api_version().to_owned(),
                    kind.cluster_scoped()
                ),
                "{kind:?}"
            );
            let plural = if kind.as_str().ends_with('s') {
                format!("{}es", kind.as_str())
            } else {
                format!("{}s", kind.as_str())
            };
            for name in [
                kind.as_str().to_owned(),
                kind.as_str().to_lowercase(),
                plural,
            ] {
                assert_eq!(Kind::parse(&name), Some(kind), "{name}");
            }
        }
        assert_eq!(Kind::parse("Lease"), None);
    }

    /// A small valid object of each kind (a new kind must add one here).
    fn sample(kind: Kind) -> Value {
        let spec = match kind {
            Kind::Pod => json!({"containers": [{"name": "c", "image": "i"}]}),
            Kind::Run => json!({"runtime": "py"}),
            Kind::Runtime => json!({}),
            Kind::Node => json!({}),
            Kind::PodGroup => json!({"schedulingPolicy": {"basic": {}}}),
            Kind::CompositePodGroup => json!({"schedulingPolicy": {"basic": {}}}),
            Kind::PriorityClass => Value::Null,
            Kind::ResourceClaim => json!({"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}),
            Kind::ResourceSlice => json!({"driver": "gpu.example.com", "nodeName": "n1",
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "d0"}]}),
            Kind::DeviceClass => json!({"extendedResourceName": "example.com/gpu"}),
        };
        let mut v = json!({"kind": kind.as_str(), "metadata": {"name": "x1", "namespace": "ns"}});
        if kind == Kind::PriorityClass {
            v["value"] = json!(100);
        } else {
            v["spec"] = spec;
        }
        if kind == Kind::Pod {
            v["metadata"]["labels"] = json!({"runtime": "py"});
        }
        v
    }

    /// Whether the kind's index holds `x1`, where a reader exists.
    fn indexed(kind: Kind, store: &StandaloneStore) -> Option<bool> {
        let nodes = store.nodes().read();
        match kind {
            Kind::Pod => Some(
                nodes.pod("ns", "x1").is_some()
                    && store
                        .cache()
                        .runtime_pods(Some("ns"), None, k8s_openapi::jiff::Timestamp::now())
                        .len()
                        == 1,
            ),
            Kind::Run => Some(store.cache().runs(Some("ns")).len() == 1),
            Kind::Node => Some(nodes.has_node("x1")),
            Kind::PodGroup => Some(nodes.group("ns", "x1").is_some()),
            Kind::CompositePodGroup => Some(nodes.composite("ns", "x1").is_some()),
            Kind::DeviceClass => {
                Some(nodes.device_classes().backing("example.com/gpu") == Some("x1"))
            }
            Kind::Runtime | Kind::PriorityClass | Kind::ResourceClaim | Kind::ResourceSlice => None,
        }
    }

    fn store() -> StandaloneStore {
        let cache = Arc::new(RunCache::new(
            CacheConfig::default(),
            Arc::new(WorkQueue::default()),
            Arc::new(Metrics::default()),
        ));
        StandaloneStore::with_nodes(cache, Arc::new(ClusterIndex::new()))
    }

    #[test]
    fn every_kind_round_trips_through_the_object_store() {
        for kind in Kind::ALL {
            let store = store();
            let stored = store
                .upsert(vec![sample(kind)])
                .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            assert_eq!(stored.len(), 1);
            assert_eq!(stored[0]["apiVersion"], kind.api_version(), "{kind:?}");
            // The stored object decodes as its type and reaches its index.
            assert!(kind.apply(&store_indexes(&store), &stored[0]).is_ok());
            assert_ne!(indexed(kind, &store), Some(false), "{kind:?} not indexed");
            let ns = if kind.cluster_scoped() { "" } else { "ns" };
            assert_eq!(
                stored[0].pointer("/metadata/namespace").is_some(),
                !kind.cluster_scoped(),
                "{kind:?}"
            );
            let listed = store.list(kind, Some("ns"), Some("x1"));
            assert_eq!(listed, stored, "{kind:?}");
            assert!(store.delete(kind, "ns", "x1"), "{kind:?}");
            assert!(store.list(kind, None, None).is_empty(), "{kind:?}");
            assert_ne!(indexed(kind, &store), Some(true), "{kind:?} still indexed");
            assert!(!store.delete(kind, ns, "x1"), "{kind:?}");
            // A wrong apiVersion is refused, naming the field.
            let mut bad = sample(kind);
            bad["apiVersion"] = json!("example.com/v9");
            let e = store.upsert(vec![bad]).unwrap_err().to_string();
            assert!(e.contains("apiVersion"), "{kind:?}: {e}");
        }
    }

    /// The stored object without what each store makes up (uid, creation).
    fn made_up_removed(mut v: Value) -> Value {
        let meta = v["metadata"].as_object_mut().expect("metadata");
        assert!(meta.remove("uid").is_some_and(|u| u.is_string()));
        assert!(meta.remove("creationTimestamp").is_some());
        v
    }

    #[test]
    fn every_kind_preloads_as_upsert_stores_it() {
        for kind in Kind::ALL {
            let (upserted, preloaded) = (store(), store());
            let stored = upserted.upsert(vec![sample(kind)]).expect("valid");
            preloaded
                .preload(sample(kind), 0)
                .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            let listed = preloaded.list(kind, Some("ns"), Some("x1"));
            assert_eq!(
                listed.into_iter().map(made_up_removed).collect::<Vec<_>>(),
                stored.into_iter().map(made_up_removed).collect::<Vec<_>>(),
                "{kind:?}"
            );
            assert_ne!(
                indexed(kind, &preloaded),
                Some(false),
                "{kind:?} not indexed"
            );
            // The same refusals, in the same words.
            let mut wrong_type = sample(kind);
            wrong_type["metadata"]["labels"] = json!({"a": 5});
            let mut uid_number = sample(kind);
            uid_number["metadata"]["uid"] = json!(7);
            let mut unknown = sample(kind);
            unknown["kind"] = json!(kind.as_str().to_lowercase());
            for bad in [wrong_type, uid_number, unknown, json!([])] {
                let e = store().upsert(vec![sample(kind), bad.clone()]).unwrap_err();
                assert!(e.to_string().starts_with("object 1"), "{kind:?}: {e}");
                assert_eq!(store().preload(bad, 1).unwrap_err(), e, "{kind:?}");
            }
        }
    }

    fn store_indexes(store: &StandaloneStore) -> Indexes {
        Indexes::new(Arc::clone(store.cache()), Arc::clone(store.nodes()))
    }
}
