//! Watchers that feed the caches in cluster mode: one generic watcher
//! ([`watch`]) over the one index trait ([`Index`]), one task per kind,
//! wired from the kind table ([`super::kinds`], whose [`spawn`](super::kinds::spawn)
//! starts them).
//!
//! A watcher runs `kube-runtime`'s watcher (list, then watch from the
//! list's resourceVersion; a closed watch is resumed from there), strips
//! what the index does not read, and hands each event to the index:
//! `Apply` → `apply`, `Delete` → `delete`, and a relist (`Init`,
//! `InitApply`…, `InitDone`) → `reset`, so usage is recomputed from what
//! the API server says — never counted twice, never lost. An index with a
//! paged relist (Pods) gets each listed object as its page arrives and
//! `retain` at the end instead. The caches are ready once every watched
//! kind has listed once; a kind the process does not watch, or the cluster
//! does not serve, is reset to empty and does not hold readiness.
//!
//! Failures, as client-go's reflector treats them: an error (a failed list
//! or watch, `410 Gone`) ends the watch, and it starts again with a fresh
//! list after a backoff (0.8s doubling to 30s). So a watch is healthy from
//! a completed list to its next error, and [`Health`] knows when it heals:
//! `/readyz` turns 503 once a kind has been failing for longer than
//! `--watch-failure-grace`, and 200 again when its list completes. The
//! watcher task itself is supervised: if it panics or ends it is restarted
//! with backoff (readiness is off until it has listed again), and an
//! object whose handling panicked is skipped, at that resourceVersion, by
//! the restarted watch, so one bad object cannot keep a kind down.

use crate::cache::cluster_index::Key;
use crate::cache::index::Index;
use crate::health::{self, Exit, Health};
use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams};
use kube::runtime::watcher::{self, DefaultBackoff, Event};
use kube::{Client, Resource};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use std::collections::{BTreeSet, HashSet, VecDeque};
use std::fmt::Debug;
use std::sync::Arc;

/// Which kinds have not completed their first list yet; calls `synced`
/// once none is left. Every completed list also tells [`Health`] the kind
/// is healthy.
pub struct SyncTracker {
    pending: Mutex<BTreeSet<&'static str>>,
    synced: Box<dyn Fn() + Send + Sync>,
    health: Option<Arc<Health>>,
}

impl SyncTracker {
    pub fn new(
        kinds: impl IntoIterator<Item = &'static str>,
        synced: impl Fn() + Send + Sync + 'static,
    ) -> Self {
        SyncTracker {
            pending: Mutex::new(kinds.into_iter().collect()),
            synced: Box::new(synced),
            health: None,
        }
    }

    /// Reports every completed list to `health` as well.
    pub fn with_health(mut self, health: Arc<Health>) -> Self {
        self.health = Some(health);
        self
    }

    fn done(&self, kind: &'static str) {
        if let Some(h) = &self.health {
            h.watch_listed(kind);
        }
        let mut p = self.pending.lock();
        if p.remove(kind) && p.is_empty() {
            (self.synced)();
            tracing::info!("caches synced");
        }
    }
}

/// Objects (uid and resourceVersion) whose handling panicked: a restarted
/// watch skips them until they change. Bounded; the oldest go first.
#[derive(Debug, Default)]
pub struct Quarantine(Mutex<VecDeque<(String, String)>>);

/// Most objects a kind keeps skipped.
const QUARANTINED: usize = 64;

impl Quarantine {
    fn key(meta: &ObjectMeta) -> Option<(String, String)> {
        Some((meta.uid.clone()?, meta.resource_version.clone()?))
    }

    /// Whether this version of the object is skipped.
    pub fn holds(&self, meta: &ObjectMeta) -> bool {
        Self::key(meta).is_some_and(|k| self.0.lock().contains(&k))
    }

    fn add(&self, key: (String, String)) {
        let mut q = self.0.lock();
        if !q.contains(&key) {
            if q.len() == QUARANTINED {
                q.pop_front();
            }
            q.push_back(key);
        }
    }

    pub fn len(&self) -> usize {
        self.0.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The object being handed to the index: quarantined if its handling
/// panics (the guard drops while unwinding).
struct InFlight<'a> {
    quarantine: &'a Quarantine,
    kind: &'static str,
    key: Option<(String, String)>,
    name: String,
}

impl<'a> InFlight<'a> {
    fn new(quarantine: &'a Quarantine, kind: &'static str, meta: &ObjectMeta) -> Self {
        let guard = InFlight {
            quarantine,
            kind,
            key: Quarantine::key(meta),
            name: format!(
                "{}/{}",
                meta.namespace.as_deref().unwrap_or(""),
                meta.name.as_deref().unwrap_or("")
            ),
        };
        // Test builds: an object can ask for its handling to panic (the
        // guard above is live, so it is quarantined like a real panic).
        #[cfg(any(test, feature = "testkit"))]
        crate::testkit::faults::on_watched(meta);
        guard
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(key) = self.key.take()
        {
            tracing::error!(kind = self.kind, object = %self.name, resource_version = %key.1,
                "handling this object panicked: the restarted watch skips this version of it");
            self.quarantine.add(key);
        }
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

fn key_of(meta: &ObjectMeta) -> Key {
    (
        meta.namespace.clone().unwrap_or_else(|| "default".into()),
        meta.name.clone().unwrap_or_default(),
    )
}

/// Applies one watcher event stream to an index until it ends (`Ok`) or
/// fails (the error; the caller relists); marks the kind synced at the end
/// of each list. Objects in `quarantine` are skipped; an object whose
/// handling panics is put there as the panic unwinds.
pub async fn drive<K, I, S>(
    mut stream: S,
    kind: &'static str,
    index: &I,
    sync: &SyncTracker,
    quarantine: &Quarantine,
) -> Result<(), watcher::Error>
where
    K: Resource,
    I: Index<K> + ?Sized,
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Unpin,
{
    // A whole relist (`reset`), or the keys of a paged one (`retain`).
    let mut buffer: Vec<K> = Vec::new();
    let mut seen: HashSet<Key> = HashSet::new();
    let skip = |o: &K| {
        let held = quarantine.holds(o.meta());
        if held {
            tracing::warn!(kind, object = %format!("{}/{}", o.meta().namespace.as_deref().unwrap_or(""), o.meta().name.as_deref().unwrap_or("")),
                "skipping an object whose handling panicked before");
        }
        held
    };
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Apply(o)) => {
                if !skip(&o) {
                    let _guard = InFlight::new(quarantine, kind, o.meta());
                    index.apply(o)
                }
            }
            Ok(Event::Delete(o)) => {
                let _guard = InFlight::new(quarantine, kind, o.meta());
                let (ns, name) = key_of(o.meta());
                index.delete(&ns, &name)
            }
            Ok(Event::Init) => {
                buffer.clear();
                seen.clear();
            }
            Ok(Event::InitApply(o)) if I::PAGED_RELIST => {
                seen.insert(key_of(o.meta()));
                if !skip(&o) {
                    let _guard = InFlight::new(quarantine, kind, o.meta());
                    index.apply(o)
                }
            }
            Ok(Event::InitApply(o)) => {
                if !skip(&o) {
                    drop(InFlight::new(quarantine, kind, o.meta()));
                    buffer.push(o)
                }
            }
            Ok(Event::InitDone) => {
                if I::PAGED_RELIST {
                    index.retain(&std::mem::take(&mut seen));
                } else {
                    index.reset(std::mem::take(&mut buffer));
                }
                sync.done(kind);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One kind's watch: what it reads, where it writes, who is told.
struct KindWatch<K: Resource, I: ?Sized> {
    api: Api<K>,
    config: watcher::Config,
    index: Arc<I>,
    kind: &'static str,
    strip: fn(&mut K),
    sync: Arc<SyncTracker>,
    health: Arc<Health>,
    /// Kept across restarts of the task.
    quarantine: Arc<Quarantine>,
    /// Requests for a fresh list ([`Index::relists`]), held from the start
    /// so that a request is never made to nobody.
    relists: Option<tokio::sync::watch::Receiver<u64>>,
}

impl<K: Resource + Clone, I: ?Sized> Clone for KindWatch<K, I> {
    fn clone(&self) -> Self {
        KindWatch {
            api: self.api.clone(),
            config: self.config.clone(),
            index: Arc::clone(&self.index),
            kind: self.kind,
            strip: self.strip,
            sync: Arc::clone(&self.sync),
            health: Arc::clone(&self.health),
            quarantine: Arc::clone(&self.quarantine),
            relists: self.relists.clone(),
        }
    }
}

/// An index seen through one list: each relist's end (`reset`, `retain`)
/// also reports that a list started at request `asked` is in.
struct Listed<'a, I: ?Sized> {
    index: &'a I,
    asked: u64,
}

impl<K, I: Index<K> + ?Sized> Index<K> for Listed<'_, I> {
    fn apply(&self, obj: K) {
        self.index.apply(obj)
    }
    fn delete(&self, namespace: &str, name: &str) {
        self.index.delete(namespace, name)
    }
    fn reset(&self, objs: Vec<K>) {
        self.index.reset(objs);
        self.index.listed(self.asked);
    }
    const PAGED_RELIST: bool = I::PAGED_RELIST;
    fn retain(&self, keep: &HashSet<Key>) {
        self.index.retain(keep);
        self.index.listed(self.asked);
    }
}

/// Completes when a fresh list is asked for; never without requests.
async fn relist_asked(relists: &mut Option<tokio::sync::watch::Receiver<u64>>) {
    match relists {
        Some(rx) => {
            if rx.changed().await.is_err() {
                // The index is gone: nobody will ask again.
                std::future::pending::<()>().await
            }
        }
        None => std::future::pending().await,
    }
}

impl<K, I> KindWatch<K, I>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    I: Index<K> + ?Sized + 'static,
{
    /// Lists and watches until an error, then lists again after a backoff;
    /// when the index asks for a fresh list ([`Index::relists`]), drops the
    /// watch and lists again at once (a request made while it waits out a
    /// backoff is answered by the list that follows). Never returns.
    async fn run(self) {
        let kind = self.kind;
        let mut backoff = DefaultBackoff::default();
        let mut relists = self.relists.clone();
        loop {
            // Every list this watch makes from here started after it.
            let asked = relists.as_mut().map_or(0, |rx| *rx.borrow_and_update());
            let strip = self.strip;
            let stream = watcher::watcher(self.api.clone(), self.config.clone())
                .map(move |ev| ev.map(|e| e.modify(strip)));
            let index = Listed {
                index: &*self.index,
                asked,
            };
            let ended = tokio::select! {
                ended = drive(Box::pin(stream), kind, &index, &self.sync, &self.quarantine) => ended,
                () = relist_asked(&mut relists) => {
                    tracing::info!(kind, "a fresh list was asked for: listing again");
                    continue;
                }
            };
            let delay = backoff.next().unwrap_or(std::time::Duration::from_secs(30));
            match ended {
                Err(e) => {
                    tracing::warn!(kind, error = %e, relist_in = ?delay, "watch failed; listing again after a backoff");
                    self.health.watch_failed(kind, &e.to_string());
                }
                Ok(()) => {
                    tracing::warn!(kind, relist_in = ?delay, "watch stream ended; listing again after a backoff");
                }
            }
            tokio::time::sleep(delay).await;
            self.health.watch_restarting(kind);
        }
    }

    /// [`KindWatch::run`] as a supervised task: restarted with backoff if
    /// it panics or ends, readiness off meanwhile.
    async fn supervised(self) {
        let kind = self.kind;
        let health = Arc::clone(&self.health);
        health::supervise(
            kind,
            move || self.clone().run(),
            move |exit| {
                if let Exit::Panicked(m) = exit {
                    health.watch_failed(kind, &format!("handling an object panicked: {m}"));
                }
                health.watch_down(kind, &exit.to_string());
                health.watch_restarting(kind);
                true
            },
        )
        .await
    }
}

/// The one watcher: watches every object of `K` (across namespaces) with
/// `config`, strips each with `strip`, and feeds `index`, relisting after
/// errors and restarted if it panics; it does not end.
pub async fn watch<K, I>(
    api: Api<K>,
    config: watcher::Config,
    index: Arc<I>,
    kind: &'static str,
    strip: fn(&mut K),
    sync: Arc<SyncTracker>,
    health: Arc<Health>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    I: Index<K> + ?Sized + 'static,
{
    health.watch_planned(kind);
    KindWatch {
        api,
        config,
        relists: index.relists(),
        index,
        kind,
        strip,
        sync,
        health,
        quarantine: Arc::default(),
    }
    .supervised()
    .await
}

/// A watch decided on, to start once every kind's readiness is counted.
pub type Planned = (
    &'static str,
    Box<dyn FnOnce(Arc<SyncTracker>, Arc<Health>) -> tokio::task::JoinHandle<()> + Send>,
);

/// What a cluster must enable to serve an API this service reads (see
/// docs/prerequisites.md), by apiVersion; `None` for APIs always served.
pub fn prerequisite(api_version: &str) -> Option<&'static str> {
    Some(match api_version {
        "scheduling.k8s.io/v1beta1" => {
            "the GenericWorkload feature gate (API server, controller-manager, kube-scheduler) \
             and --runtime-config=scheduling.k8s.io/v1beta1=true on the API server"
        }
        "scheduling.k8s.io/v1alpha3" => {
            "the GenericWorkload and CompositePodGroup feature gates (API server, controller-manager, \
             kube-scheduler) and --runtime-config=scheduling.k8s.io/v1alpha3=true on the API server"
        }
        "resource.k8s.io/v1" => {
            "the DynamicResourceAllocation feature gate (on by default since 1.34) and resource.k8s.io/v1 served"
        }
        "kruntimes.io/v1alpha1" => {
            "the kruntimes Run and Runtime CRDs (installed by kruntimes, or components/crds)"
        }
        _ => return None,
    })
}

/// Plans one kind's watch: none when the process does not read the kind
/// (`on` false) or the cluster does not serve it; either way the index is
/// reset to empty, which is what the process sees of the kind, so nothing
/// waits on it. An API not served is an error log naming the `feature`
/// disabled and the gate to enable, `kruntimes_api_served{kind} 0`, and a
/// line of `/readyz` (which stays ready: [`Health::api_missing`]).
#[allow(clippy::too_many_arguments)]
pub async fn plan<K, I>(
    client: &Client,
    index: &Arc<I>,
    kind: &'static str,
    feature: &'static str,
    on: bool,
    config: watcher::Config,
    strip: fn(&mut K),
    health: &Health,
) -> Option<Planned>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default,
    I: Index<K> + 'static,
{
    if !on {
        index.reset(Vec::new());
        return None;
    }
    let api: Api<K> = Api::all(client.clone());
    if !served(&api).await {
        let gv = K::api_version(&K::DynamicType::default()).into_owned();
        let enable = prerequisite(&gv).unwrap_or("the API group served by the API server");
        tracing::error!(kind, api_version = %gv, enable,
            "{gv} {kind} is not served by this cluster: {feature} disabled; enable {enable}");
        health.api_missing(
            kind,
            &format!("{gv} {kind} not served: {feature} disabled; enable {enable}"),
        );
        index.reset(Vec::new());
        return None;
    }
    health.api_served(kind);
    let index = Arc::clone(index);
    Some((
        kind,
        Box::new(move |sync, health| {
            tokio::spawn(watch(api, config, index, kind, strip, sync, health))
        }),
    ))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CacheConfig;
    use crate::cache::RunCache;
    use crate::cache::cluster_index::ClusterIndex;
    use crate::cache::index::Indexes;
    use crate::metrics::Metrics;
    use crate::model::runtime_pod::{CAPACITY_PREFIX, RUNTIMED_READY};
    use crate::runs::queue::WorkQueue;
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::api::core::v1::{Pod, PodStatus};
    use k8s_openapi::jiff::Timestamp;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Keeps only what scheduling reads of a Pod: name, namespace, uid,
    /// deletion, the runtime label, capacity annotations, phase and the two
    /// conditions. Container specs, managed fields and the rest are dropped, so
    /// a cached Pod stays small whatever the Pod looks like.
    fn strip_pod(pod: Pod, runtime_label_key: &str) -> Pod {
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

    /// Records what reached it, in order.
    #[derive(Default)]
    struct Fake(Mutex<Vec<String>>);

    impl Fake {
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.0.lock())
        }
    }

    fn names(objs: &[Node]) -> String {
        objs.iter()
            .map(|n| n.metadata.name.clone().unwrap_or_default())
            .collect::<Vec<_>>()
            .join(",")
    }

    impl Index<Node> for Fake {
        fn apply(&self, obj: Node) {
            self.0.lock().push(format!("apply {}", names(&[obj])));
        }
        fn delete(&self, namespace: &str, name: &str) {
            self.0.lock().push(format!("delete {namespace}/{name}"));
        }
        fn reset(&self, objs: Vec<Node>) {
            self.0.lock().push(format!("reset [{}]", names(&objs)));
        }
    }

    /// The same, relisting page by page.
    #[derive(Default)]
    struct Paged(Fake);

    impl Index<Node> for Paged {
        fn apply(&self, obj: Node) {
            self.0.apply(obj)
        }
        fn delete(&self, namespace: &str, name: &str) {
            self.0.delete(namespace, name)
        }
        fn reset(&self, objs: Vec<Node>) {
            self.0.reset(objs)
        }
        const PAGED_RELIST: bool = true;
        fn retain(&self, keep: &HashSet<Key>) {
            let mut keep: Vec<_> = keep.iter().map(|(_, n)| n.as_str()).collect();
            keep.sort();
            self.0.0.lock().push(format!("retain [{}]", keep.join(",")));
        }
    }

    fn node(name: &str) -> Node {
        crate::testkit::node(name).typed()
    }

    /// A list, changes, a failed watch (the rest is not read: the watch
    /// ends at its error).
    fn events() -> Vec<Result<Event<Node>, watcher::Error>> {
        vec![
            Ok(Event::Init),
            Ok(Event::InitApply(node("a"))),
            Ok(Event::InitApply(node("b"))),
            Ok(Event::InitDone),
            Ok(Event::Apply(node("c"))),
            Ok(Event::Delete(node("a"))),
            Err(watcher::Error::NoResourceVersion),
            Ok(Event::Apply(node("never"))),
        ]
    }

    /// The relist that follows.
    fn relist() -> Vec<Result<Event<Node>, watcher::Error>> {
        vec![
            Ok(Event::Init),
            Ok(Event::InitApply(node("b"))),
            Ok(Event::InitApply(node("c"))),
            Ok(Event::InitDone),
        ]
    }

    /// Drives the events, then the relist after the error.
    async fn both<I: Index<Node>>(index: &I, kind: &'static str, sync: &SyncTracker) {
        let q = Quarantine::default();
        let first = drive(futures::stream::iter(events()), kind, index, sync, &q).await;
        assert!(first.is_err(), "the watch ends at its error");
        drive(futures::stream::iter(relist()), kind, index, sync, &q)
            .await
            .unwrap();
    }

    fn tracker(kinds: &[&'static str]) -> (SyncTracker, Arc<AtomicUsize>) {
        let synced = Arc::new(AtomicUsize::new(0));
        let s = Arc::clone(&synced);
        let t = SyncTracker::new(kinds.iter().copied(), move || {
            s.fetch_add(1, Ordering::SeqCst);
        });
        (t, synced)
    }

    #[tokio::test]
    async fn watcher_applies_deletes_and_resets_through_the_index() {
        let index = Fake::default();
        let (sync, synced) = tracker(&["Node"]);
        both(&index, "Node", &sync).await;
        assert_eq!(
            index.take(),
            ["reset [a,b]", "apply c", "delete default/a", "reset [b,c]"]
        );
        // Ready after the first list, once.
        assert_eq!(synced.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn paged_relist_applies_as_it_arrives_and_retains_what_it_showed() {
        let index = Paged::default();
        let (sync, _) = tracker(&["Node"]);
        both(&index, "Node", &sync).await;
        assert_eq!(
            index.0.take(),
            [
                "apply a",
                "apply b",
                "retain [a,b]",
                "apply c",
                "delete default/a",
                "apply b",
                "apply c",
                "retain [b,c]"
            ]
        );
    }

    #[tokio::test]
    async fn readiness_waits_for_every_watched_kind() {
        let (sync, synced) = tracker(&["Node", "PodGroup"]);
        let index = Fake::default();
        both(&index, "Node", &sync).await;
        assert_eq!(synced.load(Ordering::SeqCst), 0);
        let list = vec![Ok(Event::Init), Ok(Event::InitDone)];
        let q = Quarantine::default();
        drive(futures::stream::iter(list), "PodGroup", &index, &sync, &q)
            .await
            .unwrap();
        assert_eq!(synced.load(Ordering::SeqCst), 1);
    }

    /// The Pod index behind the watcher: both caches follow a paged relist,
    /// and a Pod that loses the runtime label leaves the Run cache only.
    #[tokio::test]
    async fn pods_reach_both_caches_through_the_watcher() {
        let cache = Arc::new(RunCache::new(
            CacheConfig::default(),
            Arc::new(WorkQueue::default()),
            Arc::new(Metrics::default()),
        ));
        let ix = Indexes::new(Arc::clone(&cache), Arc::new(ClusterIndex::new()));
        let pod = |name: &str, runtime: bool| {
            let mut p = Pod::default();
            p.metadata.name = Some(name.into());
            p.metadata.namespace = Some("ns".into());
            if runtime {
                p.metadata.labels = Some([("runtime".to_owned(), "py".to_owned())].into());
            }
            p
        };
        let runtime_pods = || {
            cache
                .runtime_pods(Some("ns"), None, Timestamp::now())
                .into_iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
        };
        let (sync, synced) = tracker(&["Pod"]);
        let events = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(pod("r1", true))),
            Ok(Event::InitApply(pod("r2", true))),
            Ok(Event::InitApply(pod("plain", false))),
            Ok(Event::InitDone),
        ];
        let q = Quarantine::default();
        drive(futures::stream::iter(events), "Pod", &*ix.pods, &sync, &q)
            .await
            .unwrap();
        assert_eq!(synced.load(Ordering::SeqCst), 1);
        assert_eq!(runtime_pods(), ["r1", "r2"]);
        assert!(ix.nodes.read().pod("ns", "plain").is_some());
        let events = vec![
            Ok(Event::Apply(pod("r2", false))),
            Ok(Event::Init),
            Ok(Event::InitApply(pod("r2", false))),
            Ok(Event::InitDone),
        ];
        drive(futures::stream::iter(events), "Pod", &*ix.pods, &sync, &q)
            .await
            .unwrap();
        assert!(runtime_pods().is_empty());
        let nodes = ix.nodes.read();
        assert!(nodes.pod("ns", "r2").is_some());
        assert!(nodes.pod("ns", "r1").is_none() && nodes.pod("ns", "plain").is_none());
    }

    /// A node whose handling panics (through the test hook).
    fn poison(name: &str, rv: &str) -> Node {
        let mut n = node(name);
        n.metadata.uid = Some(format!("uid-{name}"));
        n.metadata.resource_version = Some(rv.into());
        n.metadata.annotations = Some(
            [(
                crate::testkit::faults::PANIC_WHEN_WATCHED.to_owned(),
                "true".to_owned(),
            )]
            .into(),
        );
        n
    }

    #[tokio::test]
    async fn an_object_whose_handling_panicked_is_skipped_until_it_changes() {
        let index = Arc::new(Fake::default());
        let q = Arc::new(Quarantine::default());
        let (sync, synced) = tracker(&["Node"]);
        let sync = Arc::new(sync);
        let list = || {
            vec![
                Ok(Event::Init),
                Ok(Event::InitApply(node("a"))),
                Ok(Event::InitApply(poison("bad", "7"))),
                Ok(Event::InitApply(node("b"))),
                Ok(Event::InitDone),
            ]
        };
        // The first list panics on the bad node.
        let run = {
            let (index, q, sync) = (Arc::clone(&index), Arc::clone(&q), Arc::clone(&sync));
            tokio::spawn(async move {
                let _ = drive(futures::stream::iter(list()), "Node", &*index, &sync, &q).await;
            })
        };
        assert!(run.await.unwrap_err().is_panic());
        assert_eq!(q.len(), 1);
        assert_eq!(synced.load(Ordering::SeqCst), 0);
        // The restarted watch lists without it and is synced.
        drive(futures::stream::iter(list()), "Node", &*index, &sync, &q)
            .await
            .unwrap();
        assert_eq!(index.take(), ["reset [a,b]"]);
        assert_eq!(synced.load(Ordering::SeqCst), 1);
        // A new version of it is handled again (here: it still panics, so
        // that version is skipped too).
        let changed = vec![Ok(Event::Apply(poison("bad", "8")))];
        let run = {
            let (index, q, sync) = (Arc::clone(&index), Arc::clone(&q), Arc::clone(&sync));
            tokio::spawn(async move {
                let _ = drive(futures::stream::iter(changed), "Node", &*index, &sync, &q).await;
            })
        };
        assert!(run.await.unwrap_err().is_panic());
        assert_eq!(q.len(), 2);
    }

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
        let before = crate::model::runtime_pod::PodFacts::from_pod(&pod, "runtime", 2);
        let stripped = strip_pod(pod, "runtime");
        assert_eq!(
            crate::model::runtime_pod::PodFacts::from_pod(&stripped, "runtime", 2),
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
