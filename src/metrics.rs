//! Prometheus metrics. Label values come from fixed enums only, never from
//! user-controlled names, namespaces or resource names.
//!
//! Three kinds of series:
//!
//! - counters and histograms updated where things happen (decisions,
//!   writes, binds, reviews), the per-route ones through the latency
//!   middleware ([`crate::transport::latency`]), which times failed and
//!   dropped requests too;
//! - gauges of state (pending Runs by reason, cache sizes, gang holds)
//!   set from the caches when `/metrics` is scraped ([`StateSample`]);
//! - `build_info` and the standard `process_*` series (read from `/proc`
//!   at scrape time by [`process::ProcessCollector`]), without the
//!   `kruntimes_` prefix for the latter, as Prometheus' own clients name them.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use crate::runs::placement::PendingReason;
use crate::transport::{Answer, LatencyLayer, LatencyObserver};

pub mod process;

/// The crate version, for `kruntimes_build_info`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The source revision the binary was built from (`git rev-parse` at build
/// time by build.rs, or `KRUNTIMES_REVISION`), else `unknown`.
pub const REVISION: &str = match option_env!("KRUNTIMES_REVISION") {
    Some(r) => r,
    None => "unknown",
};

/// Which decision a latency sample belongs to (label `operation` of
/// `kruntimes_decision_duration_seconds`; it was `endpoint`, which the
/// Prometheus Operator's own target label shadowed).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Operation {
    Plan,
    ScheduleCycle,
    RuntimePods,
    Runs,
    Objects,
    ExtenderFilter,
    ExtenderPrioritize,
    ExtenderBind,
    ExtenderPreempt,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation: Operation,
}

/// An extender verb.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Verb {
    Filter,
    Prioritize,
    Bind,
    Preempt,
}

/// How an extender request ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Outcome {
    /// Answered 2xx without `Error`.
    Ok,
    /// Answered 200 with the protocol's `Error` set (a failed bind, a
    /// filter that could not run): the handler marks it with
    /// [`ExtenderError`].
    Error,
    /// Refused with a 4xx: the body is not the protocol, or too large.
    Rejected,
    /// Failed with a 5xx (a timeout answered by a layer outside the route
    /// is `Cancelled` instead: the route's future is dropped).
    Failed,
    /// No answer: the caller went away or a timeout dropped the request.
    Cancelled,
}

/// Response extension an extender handler sets when it answers 200 with
/// `Error`, so the latency middleware counts the request as `Error`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtenderError;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExtenderLabels {
    pub verb: Verb,
    pub outcome: Outcome,
}

/// Why a Run is pending, for `kruntimes_runs_pending` (the Run's
/// `Scheduled` condition reason, or `Queued` before its first decision).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum PendingState {
    NoRuntimePods,
    InsufficientCapacity,
    ResourceNotDeclared,
    RuntimePodUnavailable,
    UnsatisfiedRunAffinity,
    UnsatisfiedRunAntiAffinity,
    /// Not decided yet (new, or its decision was not written yet).
    Queued,
    /// Waiting out the backoff before its next attempt (`spec.retryPolicy`).
    RetryBackoff,
}

impl PendingState {
    pub const ALL: [PendingState; 8] = [
        PendingState::NoRuntimePods,
        PendingState::InsufficientCapacity,
        PendingState::ResourceNotDeclared,
        PendingState::RuntimePodUnavailable,
        PendingState::UnsatisfiedRunAffinity,
        PendingState::UnsatisfiedRunAntiAffinity,
        PendingState::Queued,
        PendingState::RetryBackoff,
    ];
}

impl From<Option<PendingReason>> for PendingState {
    fn from(r: Option<PendingReason>) -> Self {
        match r {
            Some(PendingReason::NoRuntimePods) => PendingState::NoRuntimePods,
            Some(PendingReason::InsufficientCapacity) => PendingState::InsufficientCapacity,
            Some(PendingReason::ResourceNotDeclared) => PendingState::ResourceNotDeclared,
            Some(PendingReason::RuntimePodUnavailable) => PendingState::RuntimePodUnavailable,
            Some(PendingReason::UnsatisfiedRunAffinity) => PendingState::UnsatisfiedRunAffinity,
            Some(PendingReason::UnsatisfiedRunAntiAffinity) => {
                PendingState::UnsatisfiedRunAntiAffinity
            }
            None => PendingState::Queued,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PendingLabels {
    pub reason: PendingState,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Reason {
    NoRuntimePods,
    InsufficientCapacity,
    ResourceNotDeclared,
    RuntimePodUnavailable,
    UnsatisfiedRunAffinity,
    UnsatisfiedRunAntiAffinity,
}

impl From<PendingReason> for Reason {
    fn from(r: PendingReason) -> Self {
        match r {
            PendingReason::NoRuntimePods => Reason::NoRuntimePods,
            PendingReason::InsufficientCapacity => Reason::InsufficientCapacity,
            PendingReason::ResourceNotDeclared => Reason::ResourceNotDeclared,
            PendingReason::RuntimePodUnavailable => Reason::RuntimePodUnavailable,
            PendingReason::UnsatisfiedRunAffinity => Reason::UnsatisfiedRunAffinity,
            PendingReason::UnsatisfiedRunAntiAffinity => Reason::UnsatisfiedRunAntiAffinity,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: Reason,
}

/// What woke Pending Runs.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum WakeCause {
    /// A Runtime Pod's capacity, readiness or heartbeat freshness changed.
    PodCapacity,
    /// A Run left the active set or a reservation was released.
    UsageReleased,
    /// A Run was created or changed while unscheduled.
    RunChanged,
    /// The periodic fallback resync.
    Resync,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WakeLabels {
    pub cause: WakeCause,
}

/// Outcome of a Run status write.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum WriteResult {
    Ok,
    Conflict,
    NotFound,
    Error,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub result: WriteResult,
}

/// How a gang member's wait for its group's quorum in bind ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum GangWait {
    /// The member completed the quorum on arrival (no wait).
    Quorum,
    /// The member waited and was released by the quorum.
    Released,
    /// `--gang-wait` expired (or the wait ended otherwise): bind failed.
    Expired,
    /// The member was refused without a wait: its group hierarchy is
    /// broken (a parent cycle, deeper than the limit).
    Refused,
    /// The bind was cancelled (caller gone, timeout) while held: the
    /// member left the hold and its assumption was dropped.
    Cancelled,
    /// The member's own `--gang-wait` ran out while its group was still
    /// gathering: the bind answered, the member stays reserved.
    Kept,
    /// Refused without a wait: `--max-held-binds` members were held or
    /// reserved already.
    Full,
    /// Refused (or, its own wait over, not kept): the member's PodGroup has
    /// its minCount without it while its CompositePodGroup still gathers,
    /// so it holds no room the other groups need.
    Surplus,
}

impl GangWait {
    pub const ALL: [GangWait; 8] = [
        GangWait::Quorum,
        GangWait::Released,
        GangWait::Expired,
        GangWait::Refused,
        GangWait::Cancelled,
        GangWait::Kept,
        GangWait::Full,
        GangWait::Surplus,
    ];
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GangWaitLabels {
    pub outcome: GangWait,
}

/// Why an extender bind failed (`Error` answered, or the call dropped).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum BindFailureCause {
    /// `PodName` or `Node` missing.
    Invalid,
    /// The node is not in the cache.
    NodeGone,
    /// The cache lacks the pod, its group hierarchy or its claims (fail
    /// closed: kube-scheduler retries).
    NotCached,
    /// The cache holds the pod with another uid.
    Replaced,
    /// The node no longer has room for the pod (pods bound or being bound
    /// there since kube-scheduler filtered it).
    NoRoom,
    /// A Binding of the pod to another node was sent and may exist; the
    /// watch does not show the pod yet.
    EarlierBinding,
    /// The node is outside the domain the gang's placed members fix (a
    /// member placed elsewhere since the filter).
    OutsideDomain,
    /// Device binding conditions not met within `--binding-wait`.
    DevicesNotReady,
    /// A device binding failure condition, or `--binding-timeout`.
    DevicesFailed,
    /// The group hierarchy is broken (cycle, too deep).
    Hierarchy,
    /// `--gang-wait` ran out before quorum.
    GangExpired,
    /// The API server refused the binding (or the call failed).
    Binding,
    /// The call was dropped (caller gone, timeout) before it answered.
    Cancelled,
    /// The member's own `--gang-wait` ran out while its group gathers: it
    /// stays reserved for kube-scheduler's retry.
    GangKept,
    /// `--max-held-binds` members were held or reserved already.
    GangFull,
    /// The member's PodGroup has its minCount without it while its
    /// CompositePodGroup gathers: it holds no room (retried later).
    GangSurplus,
}

impl BindFailureCause {
    pub const ALL: [BindFailureCause; 16] = [
        BindFailureCause::Invalid,
        BindFailureCause::NodeGone,
        BindFailureCause::NotCached,
        BindFailureCause::Replaced,
        BindFailureCause::NoRoom,
        BindFailureCause::EarlierBinding,
        BindFailureCause::OutsideDomain,
        BindFailureCause::DevicesNotReady,
        BindFailureCause::DevicesFailed,
        BindFailureCause::Hierarchy,
        BindFailureCause::GangExpired,
        BindFailureCause::Binding,
        BindFailureCause::Cancelled,
        BindFailureCause::GangKept,
        BindFailureCause::GangFull,
        BindFailureCause::GangSurplus,
    ];
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BindFailureLabels {
    pub cause: BindFailureCause,
}

/// An admission verdict. Handlers set it as a response extension too, so
/// the review latency middleware labels the sample with it.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Verdict {
    Allowed,
    Patched,
    Denied,
    Malformed,
    /// No review was answered: the body was refused before decoding (too
    /// large), the review timed out, or the caller went away.
    Error,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    /// The webhook path's name (a fixed set compiled into the binary).
    pub webhook: &'static str,
    pub verdict: Verdict,
}

/// Which certificate an expiry belongs to.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum CertificateKind {
    /// The webhook serving certificate.
    Serving,
    /// The CA that signs it (the `caBundle`).
    Ca,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CertificateLabels {
    pub certificate: CertificateKind,
}

/// A background task that is restarted when it panics (or ends when it
/// must not), for `kruntimes_task_restarts_total`. Watchers are counted
/// per kind in `kruntimes_watch_restarts_total` instead.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Task {
    /// A Run scheduling worker.
    RunWorker,
    /// The periodic fallback resync of Pending Runs.
    RunResync,
    /// The Lease contest of leader election.
    LeaderElection,
    /// Webhook registration and certificate renewal (`--manage-webhooks`).
    WebhookRenewal,
    /// The timer of the Run queue's delayed wakeups.
    QueueTimer,
    /// The follow-up evictor of `All` groups preempted across nodes.
    AllDisruptionEvictor,
}

/// What one eviction attempt of the `All`-disruption evictor came to, for
/// `kruntimes_disruption_evictions_total`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum EvictionResult {
    /// 201: the pod is being deleted.
    Evicted,
    /// 429: a PodDisruptionBudget refused it (retried with backoff).
    Refused,
    /// Another failure (retried with backoff).
    Failed,
    /// The pod was gone or replaced already (not evicted).
    Vanished,
    /// A group whose members could not all be evicted in time (one per group).
    GaveUp,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvictionLabels {
    pub result: EvictionResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskLabels {
    pub task: Task,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// The kind-table name of a watched kind (`Pod`, `PodGroup`, ...): a
    /// fixed set compiled into the binary.
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: &'static str,
    pub revision: &'static str,
}

#[derive(Clone)]
pub struct LatencyHistogram;

impl MetricConstructor<Histogram> for LatencyHistogram {
    fn new_metric(&self) -> Histogram {
        // 1µs .. ~16s
        Histogram::new(exponential_buckets(1e-6, 4.0, 13))
    }
}

/// Upper bounds of the extender's latency buckets past 1 s: the alert
/// thresholds and kube-scheduler's `httpTimeout`s of the two extender
/// entries (filter, prioritize and preempt: 4 s of 5 s; bind: 24 s of
/// 30 s), so a p99 near either timeout is measured, not clamped to the
/// last bucket below it.
pub const EXTENDER_SLOW_BUCKETS: [f64; 7] = [2.0, 4.0, 5.0, 10.0, 20.0, 24.0, 30.0];

/// Extender latency: 1µs growing fourfold to ~1 s, then
/// [`EXTENDER_SLOW_BUCKETS`] up to the bind entry's 30 s timeout.
#[derive(Clone)]
pub struct ExtenderLatencyHistogram;

impl MetricConstructor<Histogram> for ExtenderLatencyHistogram {
    fn new_metric(&self) -> Histogram {
        Histogram::new(exponential_buckets(1e-6, 4.0, 11).chain(EXTENDER_SLOW_BUCKETS))
    }
}

/// Buckets of the Run scheduling latency (creation to `Scheduled`): 10ms
/// doubling to ~22 min; a Run may wait for capacity that long.
fn run_latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.01, 2.0, 18)
}

/// What the caches hold when `/metrics` is scraped: the state gauges are
/// set from it.
#[derive(Debug, Default, Clone)]
pub struct StateSample {
    /// Unscheduled Runs by why they are pending.
    pub pending: Vec<(PendingState, usize)>,
    /// Age of the oldest unscheduled Run (`None`: there is none).
    pub oldest_pending_seconds: Option<f64>,
    /// Objects held by each cache, by kind (a fixed set).
    pub cache_objects: Vec<(&'static str, usize)>,
    /// Gang members held in bind until their group's quorum.
    pub gang_members_held: usize,
    /// Groups (units) with members held, waiting for quorum.
    pub gang_groups_waiting: usize,
    /// Gang members reserved (assumed, counted toward quorum) with no bind
    /// held: their own wait ran out while their group gathered.
    pub gang_members_reserved: usize,
}

/// `result` of upstream's `kruntimes_scheduler_sync_total`.
pub mod sync_result {
    pub const SCHEDULED: &str = "scheduled";
    pub const NO_PODS: &str = "no_pods";
    pub const SELECTION_ERROR: &str = "selection_error";
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuntimeLabels {
    pub runtime: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SyncLabels {
    pub runtime: String,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    pub plugin: &'static str,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    pub stage: &'static str,
}

/// The Run loop's metrics under upstream kruntimes' scheduler names and
/// label sets (`internal/scheduler/metrics.go`), so its dashboards keep
/// working: `kruntimes_scheduler_*`. Their `runtime` label is a Runtime
/// name, bounded by the Runtimes that exist, as upstream labels it.
#[derive(Debug)]
pub struct UpstreamMetrics {
    pub sync_total: Family<SyncLabels, Counter>,
    pub sync_duration: Family<RuntimeLabels, Histogram, fn() -> Histogram>,
    pub no_pods_total: Family<RuntimeLabels, Counter>,
    pub run_queue_duration: Family<RuntimeLabels, Histogram, fn() -> Histogram>,
    pub filter_rejections: Family<PluginLabels, Counter>,
    pub reservation_conflicts: Family<StageLabels, Counter>,
}

/// Prometheus' `DefBuckets`, which upstream's histograms use.
fn default_buckets() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

impl UpstreamMetrics {
    fn new() -> Self {
        UpstreamMetrics {
            sync_total: Family::default(),
            sync_duration: Family::new_with_constructor(default_buckets),
            no_pods_total: Family::default(),
            run_queue_duration: Family::new_with_constructor(default_buckets),
            filter_rejections: Family::default(),
            reservation_conflicts: Family::default(),
        }
    }

    fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("scheduler");
        r.register(
            "sync",
            "Total number of tasks processed by the scheduler",
            self.sync_total.clone(),
        );
        r.register(
            "sync_duration_seconds",
            "Latency of run scheduling",
            self.sync_duration.clone(),
        );
        r.register(
            "no_pods",
            "Total number of tasks that could not find a matching runtime pod",
            self.no_pods_total.clone(),
        );
        r.register(
            "run_queue_duration_seconds",
            "Time from Run creation until scheduler assignment",
            self.run_queue_duration.clone(),
        );
        r.register(
            "filter_rejections",
            "Total Runtime Pod evaluations rejected by scheduler Filter plugins",
            self.filter_rejections.clone(),
        );
        r.register(
            "reservation_conflicts",
            "Total scheduler reservation conflicts",
            self.reservation_conflicts.clone(),
        );
    }

    /// Counts rejections of a filter plugin (upstream's plugin names:
    /// `RuntimePodAvailability`, `RunAffinity`).
    pub fn rejected(&self, reason: PendingReason, n: usize) {
        if n == 0 {
            return;
        }
        let plugin = match reason {
            PendingReason::UnsatisfiedRunAffinity | PendingReason::UnsatisfiedRunAntiAffinity => {
                "RunAffinity"
            }
            _ => "RuntimePodAvailability",
        };
        // Every capacity or readiness rejection is upstream's
        // RuntimePodUnavailable; the affinity reasons are its own.
        let reason = match reason {
            PendingReason::UnsatisfiedRunAffinity => "UnsatisfiedRunAffinity",
            PendingReason::UnsatisfiedRunAntiAffinity => "UnsatisfiedRunAntiAffinity",
            _ => "RuntimePodUnavailable",
        };
        self.filter_rejections
            .get_or_create(&PluginLabels { plugin, reason })
            .inc_by(n as u64);
    }
}

/// All metrics of the process.
#[derive(Debug)]
pub struct Metrics {
    /// The Run loop's metrics under upstream's names.
    pub upstream: UpstreamMetrics,
    /// The root registry: `process_*` unprefixed, everything else under
    /// `kruntimes_`.
    pub registry: Registry,
    pub decision_seconds: Family<OperationLabels, Histogram, LatencyHistogram>,
    /// Extender requests by verb and outcome (failed and dropped ones too).
    pub extender_seconds: Family<ExtenderLabels, Histogram, ExtenderLatencyHistogram>,
    /// Admission reviews by webhook and verdict (`Error`: none answered).
    pub admission_seconds: Family<AdmissionLabels, Histogram, LatencyHistogram>,
    /// From a Run's creation to its `Scheduled` status write.
    pub run_scheduling_seconds: Histogram,
    /// Unscheduled Runs by reason (set at scrape time).
    pub runs_pending: Family<PendingLabels, Gauge>,
    /// Age of the oldest unscheduled Run, 0 without one (set at scrape time).
    pub runs_pending_oldest: Gauge<f64, AtomicU64>,
    /// Objects held by the caches, by kind (set at scrape time).
    pub cache_objects: Family<KindLabels, Gauge>,
    /// Gang members held in bind (set at scrape time).
    pub gang_members_held: Gauge,
    /// Gang groups waiting for quorum (set at scrape time).
    pub gang_groups_waiting: Gauge,
    /// Gang members reserved with no bind held (set at scrape time).
    pub gang_members_reserved: Gauge,
    /// Filter calls that refused a gang for needing more members held at
    /// once than `--max-held-binds`.
    pub gang_too_large: Counter,
    pub filter_rejections: Family<ReasonLabels, Counter>,
    pub wakeups: Family<WakeLabels, Counter>,
    pub reservation_conflicts: Counter,
    pub runs_scheduled: Counter,
    pub status_writes: Family<WriteLabels, Counter>,
    pub assumed_reservations: Gauge,
    pub admission_verdicts: Family<AdmissionLabels, Counter>,
    pub gang_waits: Family<GangWaitLabels, Counter>,
    /// Extender binds that failed, by cause.
    pub bind_failures: Family<BindFailureLabels, Counter>,
    /// `notAfter` of the self-managed webhook certificates (`--manage-webhooks`).
    pub certificate_expiry: Family<CertificateLabels, Gauge>,
    /// Watches restarted (after an error, or after their task ended or
    /// panicked), by kind.
    pub watch_restarts: Family<KindLabels, Counter>,
    /// Errors watches met (failed lists and watches, objects whose
    /// handling panicked), by kind.
    pub watch_errors: Family<KindLabels, Counter>,
    /// 1 when the cluster serves the API a read kind needs, 0 when it does
    /// not (a feature gate or `--runtime-config` is off), by kind.
    pub api_served: Family<KindLabels, Gauge>,
    /// Background tasks restarted after a panic, by task.
    pub task_restarts: Family<TaskLabels, Counter>,
    /// Evictions of members of `All` groups preempted across nodes, by result.
    pub disruption_evictions: Family<EvictionLabels, Counter>,
    /// 1 while this replica runs the Run loop as leader (holds the Lease,
    /// or leader election is off), else 0.
    pub leader: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut root = Registry::default();
        root.register_collector(Box::new(process::ProcessCollector));
        let registry = root.sub_registry_with_prefix("kruntimes");
        registry.register(
            "build",
            "The version and source revision of the running binary",
            Info::new(BuildLabels {
                version: VERSION,
                revision: REVISION,
            }),
        );
        let decision_seconds = Family::new_with_constructor(LatencyHistogram);
        registry.register(
            "decision_duration_seconds",
            "Latency of scheduling decisions and API requests by operation",
            decision_seconds.clone(),
        );
        let extender_seconds = Family::new_with_constructor(ExtenderLatencyHistogram);
        registry.register(
            "extender_request_duration_seconds",
            "Latency of extender requests by verb and outcome, failed and dropped requests included",
            extender_seconds.clone(),
        );
        let admission_seconds = Family::new_with_constructor(LatencyHistogram);
        registry.register(
            "admission_review_duration_seconds",
            "Latency of admission reviews by webhook and verdict (Error: no review answered)",
            admission_seconds.clone(),
        );
        let run_scheduling_seconds = Histogram::new(run_latency_buckets());
        registry.register(
            "run_scheduling_duration_seconds",
            "Time from a Run's creation to its Scheduled status write",
            run_scheduling_seconds.clone(),
        );
        let runs_pending = Family::default();
        registry.register(
            "runs_pending",
            "Unscheduled Runs by reason (Queued: not decided yet)",
            runs_pending.clone(),
        );
        let runs_pending_oldest = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "runs_pending_oldest_seconds",
            "Time since the creation of the oldest unscheduled Run (0 when none is)",
            runs_pending_oldest.clone(),
        );
        let cache_objects = Family::default();
        registry.register(
            "cache_objects",
            "Objects held by the caches, by kind",
            cache_objects.clone(),
        );
        let gang_members_held = Gauge::default();
        registry.register(
            "gang_members_held",
            "Gang members held in bind until their group's quorum",
            gang_members_held.clone(),
        );
        let gang_groups_waiting = Gauge::default();
        registry.register(
            "gang_groups_waiting",
            "Gang groups with members held in bind, waiting for quorum",
            gang_groups_waiting.clone(),
        );
        let gang_members_reserved = Gauge::default();
        registry.register(
            "gang_members_reserved",
            "Gang members reserved (assumed, counted toward quorum) with no bind held, while their group gathers",
            gang_members_reserved.clone(),
        );
        let gang_too_large = Counter::default();
        registry.register(
            "gang_too_large",
            "Extender filter calls refused because the pod's gang needs more members held at once than --max-held-binds",
            gang_too_large.clone(),
        );
        let filter_rejections = Family::default();
        registry.register(
            "filter_rejections",
            "Runtime Pods rejected by the Run filter, by reason",
            filter_rejections.clone(),
        );
        let wakeups = Family::default();
        registry.register("wakeups", "Pending Runs woken, by cause", wakeups.clone());
        let reservation_conflicts = Counter::default();
        registry.register(
            "reservation_conflicts",
            "Run bind writes that hit a resourceVersion conflict and released their reservation",
            reservation_conflicts.clone(),
        );
        let runs_scheduled = Counter::default();
        registry.register(
            "runs_scheduled",
            "Runs bound to a Runtime Pod",
            runs_scheduled.clone(),
        );
        let status_writes = Family::default();
        registry.register(
            "run_status_writes",
            "Run status writes by result",
            status_writes.clone(),
        );
        let assumed_reservations = Gauge::default();
        registry.register(
            "assumed_reservations",
            "Reservations written but not yet observed through the Run watch",
            assumed_reservations.clone(),
        );
        let admission_verdicts = Family::default();
        registry.register(
            "admission_verdicts",
            "Admission reviews answered, by webhook and verdict",
            admission_verdicts.clone(),
        );
        let gang_waits = Family::default();
        registry.register(
            "gang_waits",
            "Gang members whose bind waited for the group's quorum, by outcome",
            gang_waits.clone(),
        );
        let bind_failures = Family::default();
        registry.register(
            "extender_bind_failures",
            "Extender binds that failed or were cancelled, by cause",
            bind_failures.clone(),
        );
        let certificate_expiry = Family::default();
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "Expiry (Unix time) of the self-managed webhook serving certificate and its CA",
            certificate_expiry.clone(),
        );
        let watch_restarts = Family::default();
        registry.register(
            "watch_restarts",
            "Watches restarted after an error or after their task ended or panicked, by kind",
            watch_restarts.clone(),
        );
        let watch_errors = Family::default();
        registry.register(
            "watch_errors",
            "Errors met by watches (failed lists or watches, objects whose handling panicked), by kind",
            watch_errors.clone(),
        );
        let api_served = Family::default();
        registry.register(
            "api_served",
            "1 when the cluster serves the API a kind this process reads needs, 0 when it does not (a feature gate or --runtime-config is off), by kind",
            api_served.clone(),
        );
        let task_restarts = Family::default();
        registry.register(
            "task_restarts",
            "Background tasks restarted after a panic, by task",
            task_restarts.clone(),
        );
        let disruption_evictions = Family::default();
        registry.register(
            "disruption_evictions",
            "Eviction attempts at members of All groups preempted across nodes, by result",
            disruption_evictions.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica runs the Run loop as leader (it holds the Lease, or leader election is off), else 0",
            leader.clone(),
        );
        // The fixed outcomes and causes exist at 0 from the start, so
        // `increase()` over them sees the first event.
        for outcome in GangWait::ALL {
            let _ = gang_waits.get_or_create(&GangWaitLabels { outcome });
        }
        for cause in BindFailureCause::ALL {
            let _ = bind_failures.get_or_create(&BindFailureLabels { cause });
        }
        let upstream = UpstreamMetrics::new();
        upstream.register(registry);
        for stage in ["reserve", "bind"] {
            let _ = upstream
                .reservation_conflicts
                .get_or_create(&StageLabels { stage });
        }
        Metrics {
            upstream,
            registry: root,
            extender_seconds,
            admission_seconds,
            run_scheduling_seconds,
            runs_pending,
            runs_pending_oldest,
            cache_objects,
            gang_members_held,
            gang_groups_waiting,
            gang_members_reserved,
            gang_too_large,
            watch_restarts,
            watch_errors,
            api_served,
            task_restarts,
            disruption_evictions,
            leader,
            certificate_expiry,
            admission_verdicts,
            gang_waits,
            bind_failures,
            decision_seconds,
            filter_rejections,
            wakeups,
            reservation_conflicts,
            runs_scheduled,
            status_writes,
            assumed_reservations,
        }
    }
}

/// Records one route's latency samples in `decision_seconds` under its
/// operation label and, for the extender's verbs and the webhooks, in
/// their own histograms by outcome (the observer of the transport latency
/// middleware).
#[derive(Debug, Clone)]
pub struct RouteTimer {
    metrics: Arc<Metrics>,
    route: Route,
}

/// What a [`RouteTimer`] times.
#[derive(Debug, Clone)]
enum Route {
    /// An API route: `decision_seconds` only.
    Api(Operation),
    /// An extender verb: `decision_seconds` and `extender_seconds`.
    Extender(Operation, Verb),
    /// An admission webhook: `admission_seconds`, and `Error` verdicts
    /// (no review answered) in `admission_verdicts`.
    Webhook(&'static str),
}

/// The extender outcome of an answer.
pub fn extender_outcome(answer: Answer<'_>) -> Outcome {
    match answer {
        Answer::Dropped => Outcome::Cancelled,
        Answer::Response { status, .. } if status.is_server_error() => Outcome::Failed,
        Answer::Response { status, .. } if !status.is_success() => Outcome::Rejected,
        Answer::Response { extensions, .. } if extensions.get::<ExtenderError>().is_some() => {
            Outcome::Error
        }
        Answer::Response { .. } => Outcome::Ok,
    }
}

impl LatencyObserver for RouteTimer {
    fn observe(&self, elapsed: Duration, answer: Answer<'_>) {
        let secs = elapsed.as_secs_f64();
        let m = &self.metrics;
        match &self.route {
            Route::Api(operation) => m.observe_secs(operation.clone(), secs),
            Route::Extender(operation, verb) => {
                m.observe_secs(operation.clone(), secs);
                m.extender_seconds
                    .get_or_create(&ExtenderLabels {
                        verb: *verb,
                        outcome: extender_outcome(answer),
                    })
                    .observe(secs);
            }
            Route::Webhook(webhook) => {
                let verdict = match answer {
                    Answer::Response { extensions, .. } => extensions.get::<Verdict>().copied(),
                    Answer::Dropped => None,
                };
                let labels = AdmissionLabels {
                    webhook,
                    verdict: verdict.unwrap_or(Verdict::Error),
                };
                if verdict.is_none() {
                    // The handler counts the verdicts it answers.
                    m.admission_verdicts.get_or_create(&labels).inc();
                }
                m.admission_seconds.get_or_create(&labels).observe(secs);
            }
        }
    }
}

impl Metrics {
    /// The latency middleware for one API route, timing every answer
    /// (failed ones too) as `operation`.
    pub fn latency(self: &Arc<Self>, operation: Operation) -> LatencyLayer<RouteTimer> {
        self.timer(Route::Api(operation))
    }

    /// The latency middleware for one extender verb: `operation` in
    /// `decision_duration_seconds`, and `verb` by outcome in
    /// `extender_request_duration_seconds`.
    pub fn extender_latency(
        self: &Arc<Self>,
        operation: Operation,
        verb: Verb,
    ) -> LatencyLayer<RouteTimer> {
        self.timer(Route::Extender(operation, verb))
    }

    /// The latency middleware for one admission webhook, by the verdict
    /// its handler set on the response (`Error` when none was answered).
    pub fn review_latency(self: &Arc<Self>, webhook: &'static str) -> LatencyLayer<RouteTimer> {
        self.timer(Route::Webhook(webhook))
    }

    fn timer(self: &Arc<Self>, route: Route) -> LatencyLayer<RouteTimer> {
        LatencyLayer::new(RouteTimer {
            metrics: Arc::clone(self),
            route,
        })
    }

    pub fn observe(&self, operation: Operation, start: Instant) {
        self.observe_secs(operation, start.elapsed().as_secs_f64());
    }

    fn observe_secs(&self, operation: Operation, secs: f64) {
        self.decision_seconds
            .get_or_create(&OperationLabels { operation })
            .observe(secs);
    }

    /// Records a Run's time from creation to its `Scheduled` write (a
    /// negative span, from clock skew, counts as 0).
    pub fn run_scheduled_after(&self, secs: f64) {
        self.run_scheduling_seconds.observe(secs.max(0.0));
    }

    /// Sets the state gauges from what the caches hold. Every pending
    /// reason is exported, at 0 when no Run has it.
    pub fn set_state(&self, sample: &StateSample) {
        for reason in PendingState::ALL {
            let n = sample
                .pending
                .iter()
                .filter(|(r, _)| *r == reason)
                .map(|(_, n)| *n)
                .sum::<usize>();
            self.runs_pending
                .get_or_create(&PendingLabels { reason })
                .set(gauge_value(n));
        }
        self.runs_pending_oldest
            .set(sample.oldest_pending_seconds.unwrap_or(0.0));
        for (kind, n) in &sample.cache_objects {
            self.cache_objects
                .get_or_create(&KindLabels { kind })
                .set(gauge_value(*n));
        }
        self.gang_members_held
            .set(gauge_value(sample.gang_members_held));
        self.gang_groups_waiting
            .set(gauge_value(sample.gang_groups_waiting));
        self.gang_members_reserved
            .set(gauge_value(sample.gang_members_reserved));
    }

    pub fn wake(&self, cause: WakeCause, n: usize) {
        if n > 0 {
            self.wakeups
                .get_or_create(&WakeLabels { cause })
                .inc_by(n as u64);
        }
    }

    /// The rejections of one scheduling decision, per reason; `pending`
    /// is the reason it left the Run Pending with, if it did (a Run with
    /// no Runtime Pods at all counts once under it).
    pub fn decision_rejections(
        &self,
        counts: &crate::runs::placement::RejectionCounts,
        pending: Option<PendingReason>,
    ) {
        self.rejections(PendingReason::InsufficientCapacity, counts.insufficient);
        self.rejections(PendingReason::ResourceNotDeclared, counts.not_declared);
        self.rejections(PendingReason::RuntimePodUnavailable, counts.unavailable);
        self.rejections(PendingReason::UnsatisfiedRunAffinity, counts.affinity);
        self.rejections(
            PendingReason::UnsatisfiedRunAntiAffinity,
            counts.anti_affinity,
        );
        if let Some(reason) = pending
            && counts.total_pods == 0
        {
            self.rejections(reason, 1);
        }
    }

    pub fn rejections(&self, reason: PendingReason, n: usize) {
        self.upstream.rejected(reason, n);
        if n > 0 {
            self.filter_rejections
                .get_or_create(&ReasonLabels {
                    reason: reason.into(),
                })
                .inc_by(n as u64);
        }
    }

    pub fn write(&self, result: WriteResult) {
        self.status_writes
            .get_or_create(&WriteLabels { result })
            .inc();
    }

    /// Counts a gang member's way through the quorum hold.
    pub fn gang_wait(&self, outcome: GangWait) {
        self.gang_waits
            .get_or_create(&GangWaitLabels { outcome })
            .inc();
    }

    /// Counts a failed (or cancelled) extender bind.
    pub fn bind_failure(&self, cause: BindFailureCause) {
        self.bind_failures
            .get_or_create(&BindFailureLabels { cause })
            .inc();
    }

    /// Records the expiry (Unix seconds) of a managed certificate.
    pub fn certificate_expiry(&self, certificate: CertificateKind, not_after: i64) {
        self.certificate_expiry
            .get_or_create(&CertificateLabels { certificate })
            .set(not_after);
    }

    /// Counts a restart of a background task.
    pub fn disruption_eviction(&self, result: EvictionResult) {
        self.disruption_evictions
            .get_or_create(&EvictionLabels { result })
            .inc();
    }

    pub fn task_restart(&self, task: Task) {
        self.task_restarts.get_or_create(&TaskLabels { task }).inc();
    }

    /// Creates a watched kind's series at 0, so they are exported before
    /// the first error.
    pub fn watch_started(&self, kind: &'static str) {
        let _ = self.watch_restarts.get_or_create(&KindLabels { kind });
        let _ = self.watch_errors.get_or_create(&KindLabels { kind });
    }

    /// Whether the API a read kind needs is served.
    pub fn api_served(&self, kind: &'static str, served: bool) {
        self.api_served
            .get_or_create(&KindLabels { kind })
            .set(i64::from(served));
    }

    /// Counts an error a watch met.
    pub fn watch_error(&self, kind: &'static str) {
        self.watch_errors.get_or_create(&KindLabels { kind }).inc();
    }

    /// Counts a restart of a watch.
    pub fn watch_restart(&self, kind: &'static str) {
        self.watch_restarts
            .get_or_create(&KindLabels { kind })
            .inc();
    }

    /// OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
