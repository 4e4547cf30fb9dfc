//! Watchers that feed the [`Cache`] in cluster mode.
//!
//! One task per kind runs a `kube-runtime` watcher (list, then watch from
//! the list's resourceVersion; on `410 Gone`, disconnects or errors it
//! relists with backoff). A relist arrives as `Init`, `InitApply`…,
//! `InitDone` and is applied with the cache's `reset_*`, so usage is
//! recomputed from what the API server says — never counted twice, never
//! lost. The cache is ready once every served kind has listed once.

use crate::cache::Cache;
use crate::cache::nodes::{Key, NodeCache, PodEntry};
use crate::crd::{Run, Runtime};
use crate::model::pod::{CAPACITY_PREFIX, RUNTIMED_READY};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::scheduling::v1alpha3::CompositePodGroup;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use std::collections::{BTreeSet, HashSet};
use std::fmt::Debug;
use std::sync::Arc;

/// Which kinds have completed their first list.
struct SyncTracker {
    cache: Arc<Cache>,
    pending: Mutex<BTreeSet<&'static str>>,
}

impl SyncTracker {
    fn done(&self, kind: &'static str) {
        let mut p = self.pending.lock();
        if p.remove(kind) && p.is_empty() {
            self.cache.set_synced(true);
            tracing::info!("caches synced");
        }
    }
}

/// Keeps only what scheduling reads of a Pod: name, namespace, uid,
/// deletion, the runtime label, capacity annotations, phase and the two
/// conditions. Container specs, managed fields and the rest are dropped, so
/// a cached Pod stays small whatever the Pod looks like.
pub fn strip_pod(pod: Pod, runtime_label_key: &str) -> Pod {
    let m = pod.metadata;
    let labels = m
        .labels
        .and_then(|l| l.into_iter().find(|(k, _)| k == runtime_label_key))
        .map(|kv| [kv].into_iter().collect());
    let annotations = m.annotations.map(|a| {
        a.into_iter()
            .filter(|(k, _)| k.starts_with(CAPACITY_PREFIX))
            .collect()
    });
    let status = pod.status.map(|s| PodStatus {
        phase: s.phase,
        conditions: s.conditions.map(|c| {
            c.into_iter()
                .filter(|c| c.type_ == "Ready" || c.type_ == RUNTIMED_READY)
                .collect()
        }),
        ..PodStatus::default()
    });
    Pod {
        metadata: ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            deletion_timestamp: m.deletion_timestamp,
            labels,
            annotations,
            ..ObjectMeta::default()
        },
        spec: None,
        status,
    }
}

/// Whether the API server serves a resource (404 on list means it does not).
async fn served<K>(api: &Api<K>) -> bool
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Err(kube::Error::Api(s)) if s.code == 404 => false,
        // Anything else (including transient errors) is left to the watcher's retries.
        _ => true,
    }
}

/// Applies one watcher event stream to the cache until it ends.
async fn drive<K, S>(
    mut stream: S,
    kind: &'static str,
    sync: &SyncTracker,
    mut apply: impl FnMut(K),
    mut delete: impl FnMut(&K),
    mut reset: impl FnMut(Vec<K>),
) where
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Unpin,
{
    let mut buffer: Vec<K> = Vec::new();
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Apply(o)) => apply(o),
            Ok(Event::Delete(o)) => delete(&o),
            Ok(Event::Init) => buffer.clear(),
            Ok(Event::InitApply(o)) => buffer.push(o),
            Ok(Event::InitDone) => {
                reset(std::mem::take(&mut buffer));
                sync.done(kind);
            }
            Err(e) => tracing::warn!(kind, error = %e, "watch failed; retrying with backoff"),
        }
    }
}

fn key_of(meta: &ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_else(|| "default".into()),
        meta.name.clone().unwrap_or_default(),
    )
}

/// Which watches a process starts: only what its components read, so a
/// webhook-only replica does not list and watch every Pod and Node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watches {
    /// Run placement: Runs, Runtimes and Runtime Pods (label-selected by
    /// the runtime label when the extender's all-Pod watch is off).
    pub runs: bool,
    /// The extender's cluster model: Nodes, every Pod, PodGroups,
    /// CompositePodGroups, ResourceClaims, ResourceSlices.
    pub extender: bool,
    /// PriorityClasses (admission's `priorityClassName` check, group priority).
    pub priority_classes: bool,
}

/// Starts the watchers; returns their tasks. `/readyz` turns true once each
/// served kind has been listed.
pub async fn spawn(
    client: Client,
    cache: Arc<Cache>,
    nodes: Arc<NodeCache>,
    watches: Watches,
) -> Vec<tokio::task::JoinHandle<()>> {
    let sync = Arc::new(SyncTracker {
        cache: Arc::clone(&cache),
        pending: Mutex::new(BTreeSet::new()),
    });
    let runs: Api<Run> = Api::all(client.clone());
    let runtimes: Api<Runtime> = Api::all(client.clone());
    let runs_served = watches.runs && served(&runs).await;
    let runtimes_served = watches.runs && served(&runtimes).await;
    {
        let mut p = sync.pending.lock();
        if runs_served {
            p.insert("Run");
        }
        if runtimes_served {
            p.insert("Runtime");
        }
    }
    if watches.runs && !runs_served {
        tracing::warn!(
            "runs.kruntimes.io/v1alpha1 is not served by this cluster: Run scheduling is disabled"
        );
    }
    if watches.runs && !runtimes_served {
        tracing::warn!(
            "runtimes.kruntimes.io/v1alpha1 is not served by this cluster: Runtimes are not watched"
        );
    }
    let mut tasks = Vec::new();
    if watches.extender {
        spawn_extender(&client, &nodes, &sync, &mut tasks).await;
    }
    if watches.priority_classes {
        spawn_priority_classes(&client, &nodes, &sync, &mut tasks).await;
    } else {
        // Nothing reads it, but admission's index must not hold readiness.
        nodes.reset_priority_classes(&[]);
    }
    if watches.extender || watches.runs {
        spawn_pods(&client, &cache, &nodes, &sync, &mut tasks, watches);
    }
    if sync.pending.lock().is_empty() {
        cache.set_synced(true);
    }

    if runs_served {
        let (cache, sync) = (Arc::clone(&cache), Arc::clone(&sync));
        tasks.push(tokio::spawn(async move {
            let stream = watcher::watcher(runs, watcher::Config::default())
                .default_backoff()
                .map(|ev| {
                    ev.map(|e| {
                        e.modify(|r: &mut Run| {
                            r.metadata.managed_fields = None;
                            r.metadata.annotations = None;
                        })
                    })
                });
            drive(
                Box::pin(stream),
                "Run",
                &sync,
                |r: Run| cache.apply_run(&r),
                |r: &Run| {
                    let (ns, name) = key_of(&r.metadata);
                    cache.delete_run(&ns, &name)
                },
                |rs: Vec<Run>| cache.reset_runs(&rs),
            )
            .await;
        }));
    }
    if runtimes_served {
        let (cache, sync) = (Arc::clone(&cache), Arc::clone(&sync));
        tasks.push(tokio::spawn(async move {
            let stream = watcher::watcher(runtimes, watcher::Config::default()).default_backoff();
            drive(
                Box::pin(stream),
                "Runtime",
                &sync,
                |r: Runtime| cache.apply_runtime(&r),
                |r: &Runtime| {
                    let (ns, name) = key_of(&r.metadata);
                    cache.delete_runtime(&ns, &name)
                },
                |rs: Vec<Runtime>| cache.reset_runtimes(&rs),
            )
            .await;
        }));
    }
    tasks
}

/// Starts one watcher of a kind when its API group is served (else logs
/// once that `feature` is disabled and resets the index to empty, which is
/// what the cluster holds); a served kind joins readiness.
#[allow(clippy::too_many_arguments)]
async fn watch_kind<K>(
    client: &Client,
    sync: &Arc<SyncTracker>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
    kind: &'static str,
    feature: &'static str,
    apply: impl FnMut(K) + Send + 'static,
    delete: impl FnMut(&K) + Send + 'static,
    mut reset: impl FnMut(Vec<K>) + Send + 'static,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::all(client.clone());
    if !served(&api).await {
        let gv = K::api_version(&K::DynamicType::default()).into_owned();
        tracing::warn!(kind, api_version = %gv, "{gv} {kind} is not served by this cluster: {feature} disabled");
        reset(Vec::new());
        return;
    }
    sync.pending.lock().insert(kind);
    let sync = Arc::clone(sync);
    tasks.push(tokio::spawn(async move {
        let stream = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .map(|ev| {
                ev.map(|e| {
                    e.modify(|o: &mut K| {
                        o.meta_mut().managed_fields = None;
                    })
                })
            });
        drive(Box::pin(stream), kind, &sync, apply, delete, reset).await;
    }));
}

/// The extender's watchers: Nodes, PodGroups, CompositePodGroups,
/// ResourceClaims and ResourceSlices (all Pods and PriorityClasses have
/// their own, shared with the other components). A group the cluster does not serve disables what needs
/// it, with one log line, and does not hold readiness back.
async fn spawn_extender(
    client: &Client,
    nodes: &Arc<NodeCache>,
    sync: &Arc<SyncTracker>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) {
    let n = Arc::clone(nodes);
    let (n1, n2, n3) = (Arc::clone(&n), Arc::clone(&n), Arc::clone(&n));
    watch_kind::<Node>(
        client,
        sync,
        tasks,
        "Node",
        "the scheduler extender",
        move |o| n1.apply_node(&o),
        move |o| n2.delete_node(o.metadata.name.as_deref().unwrap_or_default()),
        move |os| n3.reset_nodes(&os),
    )
    .await;
    let (n1, n2, n3) = (Arc::clone(&n), Arc::clone(&n), Arc::clone(&n));
    watch_kind::<PodGroup>(
        client,
        sync,
        tasks,
        "PodGroup",
        "workload-aware scheduling",
        move |o| n1.apply_pod_group(&o),
        move |o| {
            let (ns, name) = key_of(&o.metadata);
            n2.delete_pod_group(&ns, &name)
        },
        move |os| n3.reset_pod_groups(&os),
    )
    .await;
    let (n1, n2, n3) = (Arc::clone(&n), Arc::clone(&n), Arc::clone(&n));
    watch_kind::<CompositePodGroup>(
        client,
        sync,
        tasks,
        "CompositePodGroup",
        "gangs of gangs",
        move |o| n1.apply_composite(&o),
        move |o| {
            let (ns, name) = key_of(&o.metadata);
            n2.delete_composite(&ns, &name)
        },
        move |os| n3.reset_composites(&os),
    )
    .await;
    let (n1, n2, n3) = (Arc::clone(&n), Arc::clone(&n), Arc::clone(&n));
    watch_kind::<ResourceClaim>(
        client,
        sync,
        tasks,
        "ResourceClaim",
        "DRA node-allocatable accounting and device binding conditions",
        move |o| n1.apply_claim(&o),
        move |o| {
            let (ns, name) = key_of(&o.metadata);
            n2.delete_claim(&ns, &name)
        },
        move |os| n3.reset_claims(&os),
    )
    .await;
    let (n1, n2, n3) = (Arc::clone(&n), Arc::clone(&n), Arc::clone(&n));
    watch_kind::<ResourceSlice>(
        client,
        sync,
        tasks,
        "ResourceSlice",
        "DRA node-allocatable accounting",
        move |o| n1.apply_slice(&o),
        move |o| n2.delete_slice(o.metadata.name.as_deref().unwrap_or_default()),
        move |os| n3.reset_slices(&os),
    )
    .await;
}

/// PriorityClasses, for admission's `priorityClassName` check and group
/// priority.
async fn spawn_priority_classes(
    client: &Client,
    nodes: &Arc<NodeCache>,
    sync: &Arc<SyncTracker>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) {
    let n = Arc::clone(nodes);
    let (n1, n2, n3) = (Arc::clone(&n), Arc::clone(&n), Arc::clone(&n));
    watch_kind::<PriorityClass>(
        client,
        sync,
        tasks,
        "PriorityClass",
        "priority class resolution",
        move |o| n1.apply_priority_class(&o),
        move |o| n2.delete_priority_class(o.metadata.name.as_deref().unwrap_or_default()),
        move |os| n3.reset_priority_classes(&os),
    )
    .await;
}

/// One Pod watch for both caches: every Pod is reduced at once to what node
/// fit reads (the extender's cache), and Pods carrying the runtime label are
/// also stripped into the Run cache as Runtime Pods. A Pod that loses the
/// label leaves the Run cache.
fn spawn_pods(
    client: &Client,
    cache: &Arc<Cache>,
    nodes: &Arc<NodeCache>,
    sync: &Arc<SyncTracker>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
    watches: Watches,
) {
    /// What one Pod event carries to the caches.
    type Reduced = (Key, PodEntry, Option<Pod>);
    sync.pending.lock().insert("Pod");
    let pods: Api<Pod> = Api::all(client.clone());
    let label_key = cache.config().runtime_label_key.clone();
    let sync = Arc::clone(sync);
    let (cache, nodes) = (Arc::clone(cache), Arc::clone(nodes));
    // Without the extender only Runtime Pods are read: select them by the
    // runtime label at the API server.
    let config = if watches.extender {
        watcher::Config::default()
    } else {
        watcher::Config::default().labels(&label_key)
    };
    tasks.push(tokio::spawn(async move {
        let reduce = move |p: Pod| -> Reduced {
            let key = key_of(&p.metadata);
            let entry = PodEntry::from_pod(&p);
            let runtime = p
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(&label_key));
            (key, entry, runtime.then(|| strip_pod(p, &label_key)))
        };
        let stream = watcher::watcher(pods, config)
            .default_backoff()
            .map(move |ev| {
                ev.map(|e| match e {
                    Event::Apply(p) => Event::Apply(reduce(p)),
                    Event::InitApply(p) => Event::InitApply(reduce(p)),
                    Event::Delete(p) => Event::Delete(reduce(p)),
                    Event::Init => Event::Init,
                    Event::InitDone => Event::InitDone,
                })
            });
        // A relist is applied pod by pod as its pages arrive, and pods it
        // did not show are deleted at its end: memory holds the list's keys,
        // never the whole list.
        let mut stream = Box::pin(stream);
        let mut seen: HashSet<Key> = HashSet::new();
        while let Some(ev) = stream.next().await {
            let (k, e, runtime) = match ev {
                Ok(Event::Apply(r)) => r,
                Ok(Event::InitApply(r)) => {
                    seen.insert(r.0.clone());
                    r
                }
                Ok(Event::Delete((k, _, _))) => {
                    cache.delete_pod(&k.0, &k.1);
                    nodes.delete_pod(&k.0, &k.1);
                    continue;
                }
                Ok(Event::Init) => {
                    seen.clear();
                    continue;
                }
                Ok(Event::InitDone) => {
                    let keep = std::mem::take(&mut seen);
                    cache.retain_pods(|ns, name| keep.contains(&(ns.to_owned(), name.to_owned())));
                    nodes.retain_pods(&keep);
                    sync.done("Pod");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(kind = "Pod", error = %e, "watch failed; retrying with backoff");
                    continue;
                }
            };
            match runtime {
                Some(p) => cache.apply_pod(&p, Timestamp::now()),
                None => cache.delete_pod(&k.0, &k.1),
            }
            nodes.apply_pod_entry(k, e)
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripping_keeps_what_scheduling_reads() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "n", "uid": "u",
                "labels": {"runtime": "py", "app": "x"},
                "annotations": {"kruntimes.io/capacity.gpu": "2", "big": "x".repeat(1000)},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "B"}]}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "PodScheduled", "status": "True"},
                {"type": "kruntimes.io/RuntimedReady", "status": "True", "lastProbeTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap();
        let before = crate::model::pod::PodFacts::from_pod(&pod, "runtime", 2);
        let stripped = strip_pod(pod, "runtime");
        assert_eq!(
            crate::model::pod::PodFacts::from_pod(&stripped, "runtime", 2),
            before
        );
        let json = serde_json::to_string(&stripped).unwrap();
        assert!(json.len() < 400, "{json}");
        assert!(
            !json.contains("managedFields")
                && !json.contains("containers")
                && !json.contains("big")
        );
    }
}
