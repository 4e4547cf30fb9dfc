//! `serve`: assembles cache, store, scheduling loop and HTTP server.

use crate::admission::AdmissionState;
use crate::cache::cluster_index::ClusterIndex;
use crate::cache::{CacheConfig, RunCache};
use crate::cluster::ClusterWriter;
use crate::cluster::kube::KubeWriter;
use crate::cluster::leader::{self, LeaderConfig};
use crate::cluster::load;
use crate::cluster::standalone::StandaloneStore;
use crate::controller::RunController;
use crate::extender::ExtenderState;
use crate::extender::bind::device_gate::{BindingConfig, BindingGate};
use crate::extender::bind::permit::Gangs;
use crate::health::{self, Health};
use crate::http::{AppState, RunApiState};
use crate::metrics::{Metrics, Task};
use crate::runs::queue::WorkQueue;
use crate::transport::{parse_duration, shutdown_signal};
use anyhow::Context as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What `serve` runs (`--components`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Component {
    /// Run placement: the Run scheduling loop (leader-elected in cluster
    /// mode) and the Run API (`/v1/runs`, `/v1/runs/plan`, `/v1/runtime-pods`).
    Runs,
    /// The admission webhooks under `/admission/`.
    Admission,
    /// The kube-scheduler extender verbs under `/scheduler/`.
    Extender,
}

/// The set of components one process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Components {
    pub runs: bool,
    pub admission: bool,
    pub extender: bool,
}

impl Components {
    /// Every component (the default).
    pub const ALL: Components = Components {
        runs: true,
        admission: true,
        extender: true,
    };

    /// The set named by `--components`.
    pub fn from_list(list: &[Component]) -> Components {
        Components {
            runs: list.contains(&Component::Runs),
            admission: list.contains(&Component::Admission),
            extender: list.contains(&Component::Extender),
        }
    }

    /// The watches these components need in cluster mode.
    pub fn watches(self) -> crate::cluster::watch::Watches {
        crate::cluster::watch::Watches {
            runs: self.runs,
            // The extender's whole cluster model: Nodes, all Pods, groups, DRA.
            extender: self.extender,
            // Admission resolves priorityClassName through a PriorityClass index.
            priority_classes: self.admission || self.extender,
        }
    }

    fn names(self) -> String {
        let mut v = Vec::new();
        if self.runs {
            v.push("runs");
        }
        if self.admission {
            v.push("admission");
        }
        if self.extender {
            v.push("extender");
        }
        v.join(",")
    }
}

/// Flags of `serve`.
/// The Lease upstream kruntimes' scheduler elects its leader with
/// (`cmd/scheduler/main.go`, controller-runtime `LeaderElectionID`).
pub const UPSTREAM_SCHEDULER_LEASE: &str = "kruntimes-scheduler.kruntimes.com";

#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address of the main listener: the Run API, the admission webhooks
    /// (HTTPS with `--tls-cert`/`--tls-key` or `--manage-webhooks`), the
    /// extender verbs unless `--extender-listen` is given, health and
    /// metrics.
    #[arg(long, env = "KRS_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Components to run, comma-separated: `runs` (Run scheduling loop and
    /// Run API), `admission` (webhooks), `extender` (kube-scheduler
    /// extender). Only the watches the chosen components need are started.
    #[arg(
        long,
        env = "KRS_COMPONENTS",
        value_enum,
        value_delimiter = ',',
        default_value = "runs,admission,extender"
    )]
    pub components: Vec<Component>,
    /// Serve the extender verbs (`/scheduler/...`) on this address only,
    /// plain HTTP, instead of on `--listen`. Use a loopback address so only
    /// the kube-scheduler in the same pod can call `bind`.
    #[arg(long, env = "KRS_EXTENDER_LISTEN")]
    pub extender_listen: Option<SocketAddr>,
    /// Cluster mode: authenticate (TokenReview) and authorize
    /// (SubjectAccessReview) callers of the Run API and `/metrics`. Health
    /// endpoints stay open; standalone mode is always open.
    #[arg(long, env = "KRS_AUTHORIZE_READS", default_value_t = true, action = clap::ArgAction::Set)]
    pub authorize_reads: bool,
    /// How long an access decision is reused.
    #[arg(long, env = "KRS_AUTH_CACHE_TTL", default_value = "10s", value_parser = parse_duration)]
    pub auth_cache_ttl: Duration,
    /// Also serve `/healthz`, `/readyz` and `/metrics` on this address,
    /// plain HTTP, for the kubelet and Prometheus when `--listen` is on
    /// loopback or TLS.
    #[arg(long, env = "KRS_HEALTH_LISTEN")]
    pub health_listen: Option<SocketAddr>,
    /// Standalone mode: a YAML/JSON file or a directory of them holding the
    /// cluster state (Pods, Runs, Runtimes). Without it, cluster mode.
    #[arg(long, env = "KRS_STATE")]
    pub state: Option<PathBuf>,
    /// Pod label whose value names the Runtime a pod serves.
    #[arg(long, env = "KRS_RUNTIME_LABEL_KEY", default_value = "runtime")]
    pub runtime_label_key: String,
    /// `runs` capacity of a Runtime Pod without `kruntimes.io/capacity.runs`.
    #[arg(long, env = "KRS_DEFAULT_RUNS_CAPACITY", default_value_t = 2)]
    pub default_runs_capacity: u64,
    /// A Runtime Pod whose runtimed heartbeat is older than this is unavailable.
    #[arg(long, env = "KRS_HEARTBEAT_STALE_AFTER", default_value = "15s", value_parser = parse_duration)]
    pub heartbeat_stale_after: Duration,
    /// Run condition type that, when `True`, marks the Run's function
    /// released: it no longer counts against its pod (empty: none).
    #[arg(long, env = "KRS_RELEASED_CONDITION", default_value = crate::crd::DEFAULT_RELEASED_CONDITION)]
    pub released_condition: String,
    /// The longest one bind is held waiting for its group's quorum (keep
    /// it, plus `--binding-wait`, below kube-scheduler's extender
    /// `httpTimeout`), and how long a gathering group waits for a member
    /// it has not seen yet. A bind whose own wait runs out while its group
    /// still gains members answers `Error` but stays reserved (assumed,
    /// counted) for kube-scheduler's retry.
    #[arg(long, env = "KRS_GANG_WAIT", default_value = "20s", value_parser = parse_duration)]
    pub gang_wait: Duration,
    /// The longest a group gathers for quorum, from its first member bound,
    /// however steadily members arrive; then every held and reserved
    /// member is released (KEP-4671's PodGroup scheduling timeout, 5m).
    #[arg(long, env = "KRS_GANG_WAIT_MAX", default_value = "5m", value_parser = parse_duration)]
    pub gang_wait_max: Duration,
    /// Gang members held in bind or reserved at once, over all groups. A
    /// gang needing more pods at once to reach quorum is refused at filter
    /// (unresolvable, naming this flag); a member beyond it while other
    /// gangs hold the room is refused at bind and retried. Held binds do
    /// not count against `--max-connections` or `--max-in-flight`; each
    /// holds one open connection (a file descriptor).
    #[arg(long, env = "KRS_MAX_HELD_BINDS", default_value_t = crate::extender::bind::permit::DEFAULT_MAX_HELD, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_held_binds: usize,
    /// Follow the `PodGroupPreemptionPolicy` feature gate as on: PodGroups
    /// and CompositePodGroups carry `preemptionPolicy` (the root's is
    /// authoritative). `false`: the groups' field is ignored and the pods of
    /// one group must share one preemption policy.
    #[arg(long, env = "KRS_POD_GROUP_PREEMPTION_POLICY", default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub pod_group_preemption_policy: bool,
    /// Extender preempt: allow a candidate whose `All`-disruption group (or
    /// CompositePodGroup scope) also runs on other nodes when every member
    /// is below the preemptor's priority, and evict the members elsewhere
    /// through the Eviction API once kube-scheduler has deleted the
    /// victims. `false`: such a candidate is dropped.
    #[arg(long, env = "KRS_EVICT_ALL_DISRUPTION", default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub evict_all_disruption: bool,
    #[command(flatten)]
    pub tls: crate::tls::TlsArgs,
    #[command(flatten)]
    pub webhooks: crate::webhooks::ManageWebhookArgs,
    /// Concurrent scheduling workers.
    #[arg(long, env = "KRS_WORKERS", default_value_t = 2)]
    pub workers: usize,
    /// Fallback: how often every Pending Run is retried even without a wakeup.
    #[arg(long, env = "KRS_RESYNC_PERIOD", default_value = "30s", value_parser = parse_duration)]
    pub resync_period: Duration,
    /// Cluster mode: kubeconfig to use (default: in-cluster config, then
    /// `KUBECONFIG`, then `~/.kube/config`, as kube-rs discovers them).
    #[arg(long, env = "KRS_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Cluster mode: elect a leader through a Lease; only the leader
    /// schedules Runs. Default: on when running in a cluster.
    #[arg(long, env = "KRS_LEADER_ELECT", num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: Option<bool>,
    /// Namespace of the leader-election Lease (default: the pod's own
    /// namespace from POD_NAMESPACE, else `kruntimes-system`). Set it to
    /// the namespace upstream's scheduler runs in when that differs.
    #[arg(long, env = "KRS_LEADER_ELECT_NAMESPACE")]
    pub leader_elect_namespace: Option<String>,
    /// Name of the leader-election Lease. The default is the Lease upstream
    /// kruntimes' own scheduler holds (its `LeaderElectionID`), so the two
    /// never place Runs at the same time during a switch-over.
    #[arg(
        long,
        env = "KRS_LEADER_ELECT_LEASE",
        default_value = UPSTREAM_SCHEDULER_LEASE
    )]
    pub leader_elect_lease: String,
    /// How long the Lease is valid without renewal (a standby takes over
    /// within this).
    #[arg(long, env = "KRS_LEADER_ELECT_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub leader_elect_duration: Duration,
    /// Cluster mode: `/readyz` answers 503 once a watch has been failing
    /// (its lists or watches erroring) for longer than this; it is ready
    /// again when the watch lists. A watcher task that ended or panicked
    /// makes it 503 at once, until its restart has listed.
    #[arg(long, env = "KRS_WATCH_FAILURE_GRACE", default_value = "60s", value_parser = parse_duration)]
    pub watch_failure_grace: Duration,
    /// Extender bind: how long after a ResourceClaim's allocation
    /// (`allocationTimestamp`; else the first wait for it) its device binding
    /// conditions may stay unmet before the allocation is cleared and the
    /// pod rescheduled (kube-scheduler's `DynamicResourcesArgs.bindingTimeout`).
    /// Default 600s. With `--scheduler-config` the configuration's value is
    /// used, and this flag, if given, must agree with it.
    #[arg(long, env = "KRS_BINDING_TIMEOUT", value_parser = parse_duration)]
    pub binding_timeout: Option<Duration>,
    /// kube-scheduler's `KubeSchedulerConfiguration` (the file its
    /// `--config` reads): `DynamicResourcesArgs.bindingTimeout` replaces
    /// `--binding-timeout`, and the extender entry's `httpTimeout` must
    /// exceed `--binding-wait` + `--gang-wait`; a configuration that cannot
    /// work is refused at start.
    #[arg(long, env = "KRS_SCHEDULER_CONFIG")]
    pub scheduler_config: Option<PathBuf>,
    /// Extender bind: the longest one bind call waits for device binding
    /// conditions before answering `Error` for a retry; keep it, plus any
    /// other bind wait, below the extender's `httpTimeout`.
    #[arg(long, env = "KRS_BINDING_WAIT", default_value = "5s", value_parser = parse_duration)]
    pub binding_wait: Duration,
    /// Largest extender request without `Nodes` or `NodeNameToVictims`
    /// (cache-capable filter, prioritize and preempt; bind), in bytes.
    #[arg(long, env = "KRS_EXTENDER_MAX_BODY_BYTES", default_value_t = crate::extender::limits::DEFAULT_BODY_BYTES, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub extender_max_body_bytes: usize,
    /// Largest full-mode extender request (`Nodes`, i.e. an extender that is
    /// not `nodeCacheCapable`, or preempt's full victim Pods), in bytes.
    #[arg(long, env = "KRS_EXTENDER_MAX_NODELIST_BYTES", default_value_t = crate::extender::limits::DEFAULT_NODELIST_BYTES, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub extender_max_nodelist_bytes: usize,
    /// Open connections per listener; further clients wait in the listen
    /// backlog until one closes.
    #[arg(long, env = "KRS_MAX_CONNECTIONS", default_value_t = 1024, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_connections: usize,
    /// Requests handled at once per listener; further requests wait.
    #[arg(long, env = "KRS_MAX_IN_FLIGHT", default_value_t = 256, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_in_flight: usize,
    /// An HTTP/1 request's headers must arrive within this, or the
    /// connection is closed.
    #[arg(long, env = "KRS_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// A request body must arrive within this, or the request fails.
    #[arg(long, env = "KRS_BODY_READ_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub body_read_timeout: Duration,
    /// A connection with no request in flight for this long is closed.
    #[arg(long, env = "KRS_IDLE_TIMEOUT", default_value = "120s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// HTTP/2: PING after this long without frames; close when the PING is
    /// not answered within the same time.
    #[arg(long, env = "KRS_HTTP2_KEEP_ALIVE", default_value = "30s", value_parser = parse_duration)]
    pub http2_keep_alive: Duration,
}

impl ServeArgs {
    /// The components chosen by `--components`, checked against the
    /// listener flags.
    pub fn components(&self) -> anyhow::Result<Components> {
        let c = Components::from_list(&self.components);
        if !(c.runs || c.admission || c.extender) {
            anyhow::bail!("--components: name at least one of runs, admission, extender");
        }
        if self.extender_listen.is_some() && !c.extender {
            anyhow::bail!(
                "--extender-listen is set but --components does not include extender ({})",
                c.names()
            );
        }
        if let Some(e) = self.extender_listen
            && (e == self.listen || Some(e) == self.health_listen)
        {
            anyhow::bail!("--extender-listen {e} must differ from --listen and --health-listen");
        }
        if self.health_listen.is_some() && self.health_listen == Some(self.listen) {
            anyhow::bail!("--health-listen must differ from --listen");
        }
        Ok(c)
    }

    /// What the main listener serves.
    fn surfaces(&self, c: Components) -> crate::http::Surfaces {
        crate::http::Surfaces {
            run_api: c.runs,
            admission: c.admission,
            extender: c.extender && self.extender_listen.is_none(),
            explain_pod: c.extender,
        }
    }

    /// The extender's Workload API switches.
    pub fn semantics(&self) -> crate::cache::cluster_index::Semantics {
        crate::cache::cluster_index::Semantics {
            group_preemption_policy: self.pod_group_preemption_policy,
            evict_all_disruption: self.evict_all_disruption,
        }
    }

    pub fn cache_config(&self) -> CacheConfig {
        CacheConfig {
            runtime_label_key: self.runtime_label_key.clone(),
            default_runs_capacity: self.default_runs_capacity,
            heartbeat_stale_after: self.heartbeat_stale_after,
            released_condition: Some(self.released_condition.clone()).filter(|c| !c.is_empty()),
        }
    }

    /// The bounds of every listener's connections and requests.
    pub fn conn_limits(&self) -> crate::tls::ConnLimits {
        crate::tls::ConnLimits {
            max_connections: self.max_connections,
            max_in_flight: self.max_in_flight,
            header_read_timeout: self.header_read_timeout,
            body_read_timeout: self.body_read_timeout,
            idle_timeout: self.idle_timeout,
            h2_keep_alive: self.http2_keep_alive,
            max_parked: self.max_held_binds,
        }
    }

    /// The gang waits and the held-bind ceiling.
    pub fn gang_config(&self) -> anyhow::Result<crate::extender::bind::permit::GangConfig> {
        if self.gang_wait_max < self.gang_wait {
            anyhow::bail!(
                "--gang-wait-max {:?} is shorter than --gang-wait {:?}",
                self.gang_wait_max,
                self.gang_wait
            );
        }
        Ok(crate::extender::bind::permit::GangConfig {
            wait: self.gang_wait,
            wait_max: self.gang_wait_max,
            max_held: self.max_held_binds,
        })
    }

    /// The extender's body limits per mode.
    pub fn extender_limits(&self) -> crate::extender::limits::Limits {
        crate::extender::limits::Limits {
            body: self.extender_max_body_bytes,
            nodelist: self.extender_max_nodelist_bytes,
        }
    }

    /// The device gate's settings: `--binding-wait`, and the binding
    /// timeout from `--scheduler-config` (checked against the waits and
    /// `--binding-timeout`) or `--binding-timeout`.
    pub fn binding_config(&self) -> anyhow::Result<BindingConfig> {
        let timeout = match &self.scheduler_config {
            None => self
                .binding_timeout
                .unwrap_or(crate::extender::bind::device_gate::DEFAULT_BINDING_TIMEOUT),
            Some(path) => {
                use crate::extender::scheduler_config;
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading --scheduler-config {}", path.display()))?;
                let c = scheduler_config::parse(&text)
                    .map_err(|e| anyhow::anyhow!("--scheduler-config {}: {e}", path.display()))?;
                c.check_waits(self.binding_wait, self.gang_wait)
                    .and_then(|()| {
                        c.check_namespace(std::env::var("POD_NAMESPACE").ok().as_deref())
                    })
                    .map_err(|e| anyhow::anyhow!("--scheduler-config {}: {e}", path.display()))?;
                if let Some(flag) = self.binding_timeout
                    && flag != c.binding_timeout
                {
                    anyhow::bail!(
                        "--binding-timeout {flag:?} disagrees with --scheduler-config {}: \
                         DynamicResourcesArgs.bindingTimeout is {:?}; drop --binding-timeout",
                        path.display(),
                        c.binding_timeout
                    );
                }
                c.binding_timeout
            }
        };
        Ok(BindingConfig {
            timeout,
            wait: self.binding_wait,
        })
    }
}

/// A standalone service, assembled but not yet listening.
pub struct Standalone {
    pub state: AppState,
    pub store: Arc<StandaloneStore>,
    pub controller: Arc<RunController>,
}

/// Builds the standalone service from objects already read.
pub fn standalone(
    config: CacheConfig,
    objects: Vec<serde_json::Value>,
) -> anyhow::Result<Standalone> {
    assemble(config, |store| {
        store.upsert(objects).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(())
    })
}

/// Builds the standalone service from a `--state` file or directory, as
/// [`standalone`] of `load_state`'s objects would, reading and storing
/// one object at a time: the snapshot is never held whole, as text of
/// more than one file or as trees ([`load::for_each_in_path`],
/// [`StandaloneStore::preload`]). Returns the objects stored and what was
/// left out.
pub fn standalone_from_state(
    config: CacheConfig,
    path: &std::path::Path,
) -> anyhow::Result<(Standalone, usize, load::Skipped)> {
    /// Why the state did not load: reading it, or an object refused.
    enum Failed {
        Read(load::LoadError),
        Store(crate::cluster::standalone::StoreError),
    }
    impl From<load::LoadError> for Failed {
        fn from(e: load::LoadError) -> Self {
            Failed::Read(e)
        }
    }
    let mut count = 0;
    let mut skipped = load::Skipped::default();
    let app = assemble(config, |store| {
        let stored = load::for_each_in_path(path, &mut |object| {
            if skipped.admit(&object) {
                store.preload(object, count).map_err(Failed::Store)?;
                count += 1;
            }
            Ok(())
        });
        match stored {
            Ok(()) => Ok(()),
            Err(Failed::Read(e)) => {
                Err(anyhow::Error::new(e).context(format!("reading --state {}", path.display())))
            }
            Err(Failed::Store(e)) => {
                Err(anyhow::anyhow!("{e}").context(format!("loading --state {}", path.display())))
            }
        }
    })?;
    if !skipped.is_empty() {
        tracing::info!(path = %path.display(), skipped = skipped.total(), "--state: skipped {skipped}");
    }
    Ok((app, count, skipped))
}

/// The standalone service around a store that `fill` fills.
fn assemble(
    config: CacheConfig,
    fill: impl FnOnce(&StandaloneStore) -> anyhow::Result<()>,
) -> anyhow::Result<Standalone> {
    let metrics = Arc::new(Metrics::default());
    let queue = Arc::new(WorkQueue::default());
    let cache = Arc::new(RunCache::new(config, queue, Arc::clone(&metrics)));
    let nodes = Arc::new(ClusterIndex::new());
    nodes.set_store_backed();
    let store = Arc::new(StandaloneStore::with_nodes(
        Arc::clone(&cache),
        Arc::clone(&nodes),
    ));
    fill(&store)?;
    // The store holds the whole cluster: every index is complete now.
    cache.set_synced(true);
    nodes.set_priority_classes_synced(true);
    let writer: Arc<dyn ClusterWriter> = store.clone();
    let controller = Arc::new(RunController::new(Arc::clone(&cache), writer));
    let health = Arc::new(Health::new(
        Arc::clone(&metrics),
        health::DEFAULT_WATCH_FAILURE_GRACE,
    ));
    let state = app_state(
        cache,
        Some(Arc::clone(&store)),
        health,
        metrics,
        nodes,
        store.clone(),
        None,
    );
    Ok(Standalone {
        state,
        store,
        controller,
    })
}

/// Every surface's state over one set of caches, each built by its
/// surface: the Run API and health over the Run cache, the extender and
/// admission over the cluster index (the extender decides once the Run
/// cache reports every watch synced).
fn app_state(
    cache: Arc<RunCache>,
    store: Option<Arc<StandaloneStore>>,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    nodes: Arc<ClusterIndex>,
    writer: Arc<dyn ClusterWriter>,
    api: Option<kube::Client>,
) -> AppState {
    let synced = {
        let cache = Arc::clone(&cache);
        Arc::new(move || cache.is_synced())
    };
    let extender = ExtenderState::new(Arc::clone(&nodes), writer, Arc::clone(&metrics), synced);
    AppState {
        admission: AdmissionState::new(nodes.clone()).with_metrics(Arc::clone(&metrics)),
        runs: RunApiState::new(crate::http::RunApi {
            cache,
            store,
            health,
            metrics,
            access: None,
            nodes,
            gangs: Arc::clone(&extender.gangs),
        }),
        extender,
        api,
    }
}

/// Starts the follow-up evictor of `All` groups preempted across nodes
/// (component `extender`, `--evict-all-disruption`) over the state's
/// cluster index, writing through `writer`: [`evictor_writer`] in cluster
/// mode, the in-memory store (`state.extender.writer`: the pods deleted) in
/// standalone mode. Restarted with backoff if it panics
/// (`kruntimes_task_restarts_total{task="AllDisruptionEvictor"}`).
pub fn spawn_evictor(
    state: &AppState,
    writer: Arc<dyn ClusterWriter>,
) -> tokio::task::JoinHandle<()> {
    let evictions = Arc::clone(&state.extender.evictions);
    let nodes = Arc::clone(&state.extender.nodes);
    let metrics = Arc::clone(&state.extender.metrics);
    tokio::spawn(health::supervise(
        "all-disruption-evictor",
        {
            let metrics = Arc::clone(&metrics);
            move || {
                Arc::clone(&evictions).run(
                    Arc::clone(&nodes),
                    Arc::clone(&writer),
                    Arc::clone(&metrics),
                )
            }
        },
        move |_| {
            metrics.task_restart(Task::AllDisruptionEvictor);
            true
        },
    ))
}

/// The evictor's writer in cluster mode: the Eviction API through a client
/// without kube-rs' own retry of 429, so each PodDisruptionBudget refusal
/// reaches the evictor, which backs off (0.5s doubling to 30s) and counts
/// it in the group's Event.
pub fn evictor_writer(
    config: &kube::Config,
    identity: &str,
) -> anyhow::Result<Arc<dyn ClusterWriter>> {
    let mut config = config.clone();
    config.default_retry = false;
    let client = kube::Client::try_from(config).context("building the evictor's client")?;
    Ok(Arc::new(KubeWriter::new(client, Some(identity.to_owned()))))
}

/// Runs `serve` until SIGINT/SIGTERM: standalone with `--state`, else
/// against the cluster.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    raise_open_files(open_files_needed(&args));
    match &args.state {
        Some(path) => run_standalone(&args, path).await,
        None => run_cluster(&args).await,
    }
}

/// Reads a `--state` file or directory, leaving out (and logging, in one
/// line by kind) the objects of kinds the scheduler does not model, so a
/// `kubectl get -A -o json` snapshot of a whole cluster loads.
#[cfg(any(test, feature = "testkit"))]
pub fn load_state(
    path: &std::path::Path,
) -> anyhow::Result<(Vec<serde_json::Value>, crate::cluster::load::Skipped)> {
    let objects =
        load::load_path(path).with_context(|| format!("reading --state {}", path.display()))?;
    let (objects, skipped) = crate::cluster::load::skip_unmodelled(objects);
    if !skipped.is_empty() {
        tracing::info!(path = %path.display(), skipped = skipped.total(), "--state: skipped {skipped}");
    }
    Ok((objects, skipped))
}

async fn run_standalone(args: &ServeArgs, path: &std::path::Path) -> anyhow::Result<()> {
    let components = args.components()?;
    let binding = args.binding_config()?;
    let (mut app, count, skipped) = standalone_from_state(args.cache_config(), path)?;
    app.state.extender.binding = Arc::new(BindingGate::new(binding));
    app.state
        .set_gangs(Arc::new(Gangs::with_config(args.gang_config()?)));
    app.state.extender.nodes.set_semantics(args.semantics());
    tracing::info!(path = %path.display(), objects = count, skipped = skipped.total(), components = %components.names(), "standalone mode: state loaded");
    let loop_task = components.runs.then(|| {
        // The one replica of standalone mode is its leader.
        app.state.runs.metrics.leader.set(1);
        tokio::spawn(Arc::clone(&app.controller).run(args.workers, args.resync_period))
    });
    let evictor = (components.extender && args.evict_all_disruption)
        .then(|| spawn_evictor(&app.state, Arc::clone(&app.state.extender.writer)));
    let queue = Arc::clone(app.state.runs.cache.queue());
    let tls = args.tls.load().context("loading --tls-cert/--tls-key")?;
    let result = listen_all(args, components, &app.state, tls, "standalone mode").await;
    queue.shutdown();
    if let Some(t) = evictor {
        t.abort();
    }
    if let Some(t) = loop_task {
        let _ = t.await;
    }
    result
}

/// One bound listener and what it serves.
struct Listener {
    what: &'static str,
    listener: tokio::net::TcpListener,
    router: axum::Router,
    tls: Option<crate::tls::TlsConfigHandle>,
    limits: crate::tls::ConnLimits,
}

/// Binds every listener the flags ask for before anything is served, so a
/// port in use fails the start with a message naming the flag.
async fn bind_all(
    args: &ServeArgs,
    components: Components,
    state: &AppState,
    tls: Option<crate::tls::TlsConfigHandle>,
) -> anyhow::Result<Vec<Listener>> {
    let mut state = state.clone();
    state.extender.limits = args.extender_limits();
    let state = &state;
    let wanted = [
        (
            "--listen",
            "api",
            Some(args.listen),
            crate::http::router_with(state.clone(), args.surfaces(components)),
            tls,
        ),
        (
            "--extender-listen",
            "extender",
            args.extender_listen,
            crate::http::extender_router(state.clone()),
            None,
        ),
        (
            "--health-listen",
            "health",
            args.health_listen,
            crate::http::health_router(state.clone()),
            None,
        ),
    ];
    let mut out = Vec::new();
    for (flag, what, addr, router, tls) in wanted {
        let Some(addr) = addr else { continue };
        let listener = listen(
            addr,
            args.max_connections.saturating_add(args.max_held_binds),
        )
        .with_context(|| format!("binding {flag} {addr}"))?;
        out.push(Listener {
            what,
            listener,
            router,
            tls,
            limits: args.conn_limits(),
        });
    }
    Ok(out)
}

/// A listener whose accept queue holds `backlog` connections (the kernel
/// caps it at `net.core.somaxconn`): a gang's binds connect all at once,
/// one connection each, and a full queue resets connections.
fn listen(addr: SocketAddr, backlog: usize) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(u32::try_from(backlog).unwrap_or(u32::MAX))
}

/// Serves bound listeners until SIGINT/SIGTERM; the first listener that
/// fails stops them all.
async fn serve_all(listeners: Vec<Listener>, mode: &str) -> anyhow::Result<()> {
    use futures::FutureExt as _;
    let shutdown = shutdown_signal().shared();
    let mut tasks = tokio::task::JoinSet::new();
    for l in listeners {
        let scheme = if l.tls.is_some() { "HTTPS" } else { "HTTP" };
        tracing::info!(addr = %l.listener.local_addr()?, scheme, listener = l.what, mode, "listening");
        let shutdown = shutdown.clone();
        tasks.spawn(async move {
            crate::tls::serve_with(l.listener, l.router, l.tls, l.limits, shutdown)
                .await
                .with_context(|| format!("serving the {} listener", l.what))
        });
    }
    let mut result = Ok(());
    while let Some(done) = tasks.join_next().await {
        let r = done.map_err(anyhow::Error::from).and_then(|r| r);
        if r.is_err() && result.is_ok() {
            result = r;
            tasks.abort_all();
        }
    }
    result
}

/// Binds and serves every listener (see [`bind_all`]).
async fn listen_all(
    args: &ServeArgs,
    components: Components,
    state: &AppState,
    tls: Option<crate::tls::TlsConfigHandle>,
    mode: &str,
) -> anyhow::Result<()> {
    let listeners = bind_all(args, components, state, tls).await?;
    let sweeper = components.extender.then(|| spawn_gang_sweeper(state));
    let r = serve_all(listeners, mode).await;
    if let Some(t) = sweeper {
        t.abort();
    }
    r
}

/// Open files one listener may need at once: its connections, its parked
/// (held) requests, and a margin for the process' other files.
pub fn open_files_needed(args: &ServeArgs) -> u64 {
    let per_listener = args.max_connections.saturating_add(args.max_held_binds);
    u64::try_from(per_listener)
        .unwrap_or(u64::MAX)
        .saturating_add(1024)
}

/// Raises the soft open-files limit to the hard one, as the Go runtime
/// does for kube-scheduler itself (Go 1.19 and later): every connection
/// and every held bind is a file descriptor, and a container's soft limit
/// may be 1024. Returns the soft limit now (`None`: unlimited). Logs a
/// warning when the hard limit is below `needed`.
pub fn raise_open_files(needed: u64) -> Option<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let l = getrlimit(Resource::Nofile);
    let mut now = l.current;
    if l.current.is_some() && l.current != l.maximum {
        let want = Rlimit {
            current: l.maximum,
            maximum: l.maximum,
        };
        match setrlimit(Resource::Nofile, want) {
            Ok(()) => now = l.maximum,
            Err(e) => tracing::warn!(error = %e, "raising the open-files limit failed"),
        }
    }
    if let Some(n) = now
        && n < needed
    {
        tracing::warn!(
            limit = n,
            needed,
            "the open-files limit is below --max-connections plus --max-held-binds: \
             large gangs may fail to connect (raise the container's nofile limit)"
        );
    }
    now
}

/// Every second, ends the gang units whose time is up with no bind held
/// (only reserved members left), records their Events and conditions, and
/// retries the group condition writes that failed.
pub fn spawn_gang_sweeper(state: &AppState) -> tokio::task::JoinHandle<()> {
    let (gangs, nodes, writer, devices) = (
        Arc::clone(&state.extender.gangs),
        Arc::clone(&state.extender.nodes),
        Arc::clone(&state.extender.writer),
        Arc::clone(&state.extender.binding),
    );
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // First device waits of allocations gone from the cache.
            devices.sweep(&nodes);
            gangs.tick(&nodes, writer.as_ref()).await;
        }
    })
}

/// The client configuration as kube-rs discovers it, or from `--kubeconfig`.
pub async fn kube_config(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Config> {
    Ok(match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading --kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("using --kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no cluster configuration found (in-cluster, KUBECONFIG or ~/.kube/config); pass --state PATH for standalone mode")?,
    })
}

/// This process's identity for leader election and events.
fn identity() -> String {
    std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| format!("kruntimes-scheduler-{}", uuid::Uuid::new_v4()))
}

/// A cluster-mode service, assembled from a client.
pub struct Cluster {
    pub state: AppState,
    pub controller: Arc<RunController>,
    pub watchers: Vec<tokio::task::JoinHandle<()>>,
}

/// Builds the cluster-mode service and starts every watcher.
pub async fn cluster(config: CacheConfig, client: kube::Client, identity: &str) -> Cluster {
    cluster_with(
        config,
        client,
        identity,
        Components::ALL.watches(),
        health::DEFAULT_WATCH_FAILURE_GRACE,
    )
    .await
}

/// Builds the cluster-mode service and starts the watchers `watches` names;
/// readiness turns off once a watch has been failing for longer than
/// `watch_failure_grace`.
pub async fn cluster_with(
    config: CacheConfig,
    client: kube::Client,
    identity: &str,
    watches: crate::cluster::watch::Watches,
    watch_failure_grace: Duration,
) -> Cluster {
    let metrics = Arc::new(Metrics::default());
    let health = Arc::new(Health::new(Arc::clone(&metrics), watch_failure_grace));
    let queue = Arc::new(WorkQueue::default());
    let cache = Arc::new(RunCache::new(config, queue, Arc::clone(&metrics)));
    let writer: Arc<dyn ClusterWriter> =
        Arc::new(KubeWriter::new(client.clone(), Some(identity.to_owned())));
    let controller = Arc::new(RunController::new(Arc::clone(&cache), Arc::clone(&writer)));
    let nodes = Arc::new(ClusterIndex::new());
    let watchers = crate::cluster::kinds::spawn(
        client.clone(),
        Arc::clone(&cache),
        Arc::clone(&nodes),
        watches,
        Arc::clone(&health),
    )
    .await;
    Cluster {
        state: app_state(cache, None, health, metrics, nodes, writer, Some(client)),
        controller,
        watchers,
    }
}

/// Runs the Run loop whenever this replica holds the Lease; stops it and
/// drops every reservation, its backoff state and its queue (parked until
/// it leads again: [`RunController::stand_by`]) when the Lease is lost, or whenever the lease
/// manager fails (it is replaced, and the Lease contested again: see
/// [`leader::contest`]). `kruntimes_leader` is 1 while the loop runs.
/// Dropping this future releases the Lease.
pub async fn lead(
    client: kube::Client,
    cfg: LeaderConfig,
    controller: Arc<RunController>,
    workers: usize,
    resync: Duration,
) {
    let metrics = Arc::clone(controller.cache().metrics());
    let (mut rx, _contest) = leader::contest(client, cfg.clone(), Arc::clone(&metrics));
    // A standby's queue takes no keys until it leads.
    controller.stand_by();
    loop {
        // The contest keeps its sender for as long as `rx` lives.
        if rx.wait_for(|l| *l).await.is_err() {
            return;
        }
        tracing::info!(identity = %cfg.identity, "became leader: running the Run loop");
        metrics.leader.set(1);
        let mut lost = rx.clone();
        let stop = async move {
            let _ = lost.wait_for(|l| !*l).await;
        };
        Arc::clone(&controller)
            .run_until(workers, resync, stop)
            .await;
        metrics.leader.set(0);
        let dropped = controller.stand_by();
        tracing::warn!(dropped, "not leader: Run loop stopped");
    }
}

async fn run_cluster(args: &ServeArgs) -> anyhow::Result<()> {
    let components = args.components()?;
    let binding = args.binding_config()?;
    let config = kube_config(args.kubeconfig.as_deref()).await?;
    let client =
        kube::Client::try_from(config.clone()).context("building the Kubernetes client")?;
    let id = identity();
    tracing::info!(components = %components.names(), "cluster mode");
    let mut app = cluster_with(
        args.cache_config(),
        client.clone(),
        &id,
        components.watches(),
        args.watch_failure_grace,
    )
    .await;
    app.state.extender.binding = Arc::new(BindingGate::new(binding));
    app.state
        .set_gangs(Arc::new(Gangs::with_config(args.gang_config()?)));
    app.state.extender.nodes.set_semantics(args.semantics());
    if args.authorize_reads {
        app.state.runs.access = Some(crate::http::auth::AccessControl::new(
            client.clone(),
            args.auth_cache_ttl,
        ));
    } else {
        tracing::warn!(
            "--authorize-reads=false: the Run API and /metrics answer anyone who can reach them"
        );
    }
    let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    let loop_task = if !components.runs {
        None
    } else if args.leader_elect.unwrap_or(in_cluster) {
        let cfg = LeaderConfig {
            lease_name: args.leader_elect_lease.clone(),
            namespace: args
                .leader_elect_namespace
                .clone()
                .unwrap_or_else(crate::cluster::own_namespace),
            identity: id.clone(),
            lease_duration: args.leader_elect_duration,
            grace: (args.leader_elect_duration / 3).max(Duration::from_secs(1)),
        };
        tracing::info!(lease = %cfg.lease_name, namespace = %cfg.namespace, identity = %cfg.identity, "leader election on");
        // The Lease's own client gives up on a call after the renewal
        // grace: a hung renewal is an error (and a step down) before the
        // Lease can expire, never a leader that no longer holds it.
        let mut lease_config = config.clone();
        lease_config.connect_timeout = Some(cfg.grace);
        lease_config.read_timeout = Some(cfg.grace);
        lease_config.write_timeout = Some(cfg.grace);
        let lease_client =
            kube::Client::try_from(lease_config).context("building the Lease client")?;
        Some(tokio::spawn(lead(
            lease_client,
            cfg,
            Arc::clone(&app.controller),
            args.workers,
            args.resync_period,
        )))
    } else {
        tracing::info!("leader election off: this replica schedules Runs");
        app.state.runs.metrics.leader.set(1);
        Some(tokio::spawn(
            Arc::clone(&app.controller).run(args.workers, args.resync_period),
        ))
    };
    let queue = Arc::clone(app.state.runs.cache.queue());
    let managed = match args.webhooks.config().map_err(anyhow::Error::msg)? {
        Some(cfg) => {
            if !components.admission {
                anyhow::bail!(
                    "--manage-webhooks registers the admission webhooks, but --components does not include admission ({})",
                    components.names()
                );
            }
            if args.tls.tls_cert.is_some() {
                anyhow::bail!(
                    "--manage-webhooks serves its own certificate; do not also give --tls-cert/--tls-key"
                );
            }
            Some(
                crate::webhooks::start(client.clone(), cfg, Arc::clone(&app.state.runs.metrics))
                    .await
                    .context("--manage-webhooks")?,
            )
        }
        None => None,
    };
    let tls = match &managed {
        Some(m) => Some(m.tls()),
        None => args.tls.load().context("loading --tls-cert/--tls-key")?,
    };
    let listeners = bind_all(args, components, &app.state, tls).await?;
    let sweeper = components.extender.then(|| spawn_gang_sweeper(&app.state));
    let evictor = if components.extender && args.evict_all_disruption {
        Some(spawn_evictor(&app.state, evictor_writer(&config, &id)?))
    } else {
        None
    };
    // The webhooks are registered only now that a listener can answer
    // them; registration and renewal are restarted if they panic.
    let webhook_task = managed.map(|m| {
        let metrics = Arc::clone(&app.state.runs.metrics);
        tokio::spawn(health::supervise(
            "webhook-renewal",
            move || register_and_renew(m.clone()),
            move |_| {
                metrics.task_restart(Task::WebhookRenewal);
                true
            },
        ))
    });
    let result = serve_all(listeners, "cluster mode").await;
    if let Some(t) = sweeper {
        t.abort();
    }
    queue.shutdown();
    if let Some(t) = evictor {
        t.abort();
    }
    if let Some(t) = webhook_task {
        t.abort();
    }
    if let Some(t) = loop_task {
        t.abort();
    }
    for w in app.watchers {
        w.abort();
    }
    result
}

/// Registers the webhook configurations (retrying with backoff: the API
/// server may refuse for a while, e.g. RBAC not yet applied), then renews
/// the certificate and re-applies the configurations every interval.
async fn register_and_renew(managed: crate::webhooks::ManagedTls) {
    let mut backoff = Duration::from_secs(1);
    while let Err(e) = managed.register().await {
        tracing::error!(error = %format!("{e:#}"), "registering the webhook configurations failed; retrying");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
    managed.run(std::future::pending()).await;
}
