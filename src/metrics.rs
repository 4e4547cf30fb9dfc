//! Prometheus metrics. Label values come from fixed enums only, never from
//! user-controlled names, namespaces or resource names.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::runs::placement::PendingReason;
use crate::transport::{LatencyLayer, LatencyObserver};

/// Which decision a latency sample belongs to.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Endpoint {
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
pub struct EndpointLabels {
    pub endpoint: Endpoint,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Reason {
    NoRuntimePods,
    InsufficientCapacity,
    ResourceNotDeclared,
    RuntimePodUnavailable,
}

impl From<PendingReason> for Reason {
    fn from(r: PendingReason) -> Self {
        match r {
            PendingReason::NoRuntimePods => Reason::NoRuntimePods,
            PendingReason::InsufficientCapacity => Reason::InsufficientCapacity,
            PendingReason::ResourceNotDeclared => Reason::ResourceNotDeclared,
            PendingReason::RuntimePodUnavailable => Reason::RuntimePodUnavailable,
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
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BindFailureLabels {
    pub cause: BindFailureCause,
}

/// An admission verdict.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Verdict {
    Allowed,
    Patched,
    Denied,
    Malformed,
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

#[derive(Clone)]
pub struct LatencyHistogram;

impl MetricConstructor<Histogram> for LatencyHistogram {
    fn new_metric(&self) -> Histogram {
        // 1µs .. ~16s
        Histogram::new(exponential_buckets(1e-6, 4.0, 13))
    }
}

/// All metrics of the process.
#[derive(Debug)]
pub struct Metrics {
    pub registry: Registry,
    pub decision_seconds: Family<EndpointLabels, Histogram, LatencyHistogram>,
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
        let mut registry = Registry::with_prefix("kruntimes");
        let decision_seconds = Family::new_with_constructor(LatencyHistogram);
        registry.register(
            "decision_duration_seconds",
            "Latency of scheduling decisions by endpoint",
            decision_seconds.clone(),
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
        Metrics {
            watch_restarts,
            watch_errors,
            task_restarts,
            disruption_evictions,
            leader,
            certificate_expiry,
            admission_verdicts,
            gang_waits,
            bind_failures,
            registry,
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
/// endpoint label (the observer of the transport latency middleware).
#[derive(Debug, Clone)]
pub struct EndpointTimer {
    metrics: Arc<Metrics>,
    endpoint: Endpoint,
}

impl LatencyObserver for EndpointTimer {
    fn observe(&self, elapsed: Duration) {
        self.metrics
            .decision_seconds
            .get_or_create(&EndpointLabels {
                endpoint: self.endpoint.clone(),
            })
            .observe(elapsed.as_secs_f64());
    }
}

impl Metrics {
    /// The latency middleware for one route, timing every answer (failed
    /// ones too) as `endpoint`.
    pub fn latency(self: &Arc<Self>, endpoint: Endpoint) -> LatencyLayer<EndpointTimer> {
        LatencyLayer::new(EndpointTimer {
            metrics: Arc::clone(self),
            endpoint,
        })
    }

    pub fn observe(&self, endpoint: Endpoint, start: Instant) {
        self.decision_seconds
            .get_or_create(&EndpointLabels { endpoint })
            .observe(start.elapsed().as_secs_f64());
    }

    pub fn wake(&self, cause: WakeCause, n: usize) {
        if n > 0 {
            self.wakeups
                .get_or_create(&WakeLabels { cause })
                .inc_by(n as u64);
        }
    }

    pub fn rejections(&self, reason: PendingReason, n: usize) {
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
