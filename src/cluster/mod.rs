//! The write side of cluster state, behind one trait: the Kubernetes API in
//! cluster mode, the in-memory [`standalone::StandaloneStore`] otherwise.
//!
//! The read side feeds the caches through one index trait
//! ([`crate::cache::index::Index`]): in cluster mode by one generic watcher
//! ([`watch::watch`]), in standalone mode by the store; both are wired from
//! the kind table ([`kinds`]), where adding a kind is one row.

pub mod kinds;
pub mod kube;
pub mod leader;
pub mod load;
pub mod standalone;
pub mod watch;

use crate::crd::RunStatus;
use crate::model::refs::GroupRef;
use crate::model::refs::RunRef;
use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use std::collections::BTreeMap;

/// Why a write did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// The object changed since the given resourceVersion.
    #[error("conflict: the object has been modified")]
    Conflict,
    #[error("not found")]
    NotFound,
    #[error("{0}")]
    Other(String),
}

/// What [`ClusterWriter::read_claim`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimRead {
    /// The claim at this `metadata.resourceVersion`.
    Version(String),
    /// It does not exist.
    Gone,
    /// No source fresher than the cache: what it shows is the truth.
    CacheIsTruth,
}

/// Why a `pods/binding` was not created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    #[error("pod {namespace}/{name} not found")]
    PodGone { namespace: String, name: String },
    #[error("pod {namespace}/{name} has uid {actual}, not {expected}: it was replaced")]
    UidChanged {
        namespace: String,
        name: String,
        expected: String,
        actual: String,
    },
    #[error("node {0} not found")]
    NodeGone(String),
    #[error("pod {namespace}/{name} is already bound to node {node}")]
    AlreadyBound {
        namespace: String,
        name: String,
        node: String,
    },
    #[error("binding pod {namespace}/{name}: {message}")]
    Other {
        namespace: String,
        name: String,
        message: String,
    },
    /// The call failed with the write's fate unknown: a 5xx (a 504 may
    /// come after the Binding was stored) or the connection lost once the
    /// request could have gone out. The Binding may exist.
    #[error("binding pod {namespace}/{name}: {message} (the binding may have been created)")]
    Uncertain {
        namespace: String,
        name: String,
        message: String,
    },
}

/// A pod binding: the pod (with the uid kube-scheduler decided for) and the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodBinding {
    pub namespace: String,
    pub name: String,
    /// Precondition: the pod still has this uid (empty: no precondition).
    pub uid: String,
    pub node: String,
    /// `metadata.annotations` of the Binding: the API server copies them
    /// onto the pod in the same write that sets `spec.nodeName`.
    pub annotations: BTreeMap<String, String>,
}

/// A pod by name, with the uid a write to it takes as precondition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodId {
    pub namespace: String,
    pub name: String,
    /// Precondition (empty: none).
    pub uid: String,
}

impl std::fmt::Display for PodId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Why a `pods/eviction` was not created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvictError {
    /// The pod is gone (404): nothing left to evict.
    #[error("pod {0} not found")]
    Gone(String),
    /// The pod under the name has another uid (409): it was replaced.
    #[error("pod {0} was replaced (another uid)")]
    Replaced(String),
    /// 429: a PodDisruptionBudget does not allow the disruption now; the
    /// API server's message.
    #[error("eviction of {pod} refused: {message}")]
    Refused { pod: String, message: String },
    #[error("evicting {pod}: {message}")]
    Other { pod: String, message: String },
}

/// A ResourceClaim whose allocation is to be cleared, with the preconditions
/// that it is still the claim (uid) and still as seen (resourceVersion).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimAllocationRef {
    pub namespace: String,
    pub name: String,
    /// Precondition (empty: none).
    pub uid: String,
    /// Precondition (empty: none).
    pub resource_version: String,
}

/// Any object an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl ObjectRef {
    /// A Run.
    pub fn run(run: &RunRef) -> Self {
        use ::kube::Resource as _;
        ObjectRef {
            api_version: crate::crd::Run::api_version(&()).into_owned(),
            kind: crate::crd::Run::kind(&()).into_owned(),
            namespace: run.namespace.clone(),
            name: run.name.clone(),
            uid: run.uid.clone(),
        }
    }

    /// A PodGroup or CompositePodGroup (uid when known).
    pub fn group(g: &GroupRef, uid: Option<&str>) -> Self {
        ObjectRef {
            api_version: if g.composite {
                "scheduling.k8s.io/v1alpha3"
            } else {
                "scheduling.k8s.io/v1beta1"
            }
            .into(),
            kind: g.kind().into(),
            namespace: g.namespace.clone(),
            name: g.name.clone(),
            uid: uid.unwrap_or_default().to_owned(),
        }
    }
}

/// Severity of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Normal,
    Warning,
}

/// The reason of every Event the scheduler records: a fixed set, so
/// `kubectl get events --field-selector reason=...` and alerts can rely on
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventReason {
    /// `Normal`, on a Run: it was placed on a Runtime Pod.
    Scheduled,
    /// `Warning`, on a Run: pending (the Run's `Scheduled` condition
    /// reasons, [`PendingReason`](crate::runs::placement::PendingReason)).
    NoRuntimePods,
    InsufficientCapacity,
    ResourceNotDeclared,
    RuntimePodUnavailable,
    UnsatisfiedRunAffinity,
    UnsatisfiedRunAntiAffinity,
    /// `Warning`, on a Run: failed in pre-filter (reason `InvalidResources`).
    InvalidResourceRequest,
    /// `Normal`, on a Run: cancelled while Pending.
    Cancelled,
    /// `Warning`, on a PodGroup or CompositePodGroup: `--gang-wait`
    /// expired before quorum.
    GangWaitExpired,
    /// `Warning`, on a ResourceClaim: device binding conditions not met
    /// in time.
    BindingTimeout,
    /// `Warning`, on a ResourceClaim: a device binding failure condition.
    BindingFailed,
    /// `Warning`, on a PodGroup or CompositePodGroup: an `All` group
    /// preempted across nodes had its remaining members evicted.
    Preempted,
    /// `Warning`, on a PodGroup or CompositePodGroup: members of such a
    /// group could not be evicted in time and are left running.
    EvictionIncomplete,
    /// `Warning`, on a PodGroup or CompositePodGroup: initially scheduled,
    /// it lost bound members and the rest cannot be placed again.
    GangBelowMinCount,
}

impl EventReason {
    pub const ALL: [EventReason; 15] = [
        EventReason::Scheduled,
        EventReason::NoRuntimePods,
        EventReason::InsufficientCapacity,
        EventReason::ResourceNotDeclared,
        EventReason::RuntimePodUnavailable,
        EventReason::UnsatisfiedRunAffinity,
        EventReason::UnsatisfiedRunAntiAffinity,
        EventReason::InvalidResourceRequest,
        EventReason::Cancelled,
        EventReason::GangWaitExpired,
        EventReason::BindingTimeout,
        EventReason::BindingFailed,
        EventReason::Preempted,
        EventReason::EvictionIncomplete,
        EventReason::GangBelowMinCount,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventReason::Scheduled => "Scheduled",
            EventReason::NoRuntimePods => "NoRuntimePods",
            EventReason::InsufficientCapacity => "InsufficientCapacity",
            EventReason::ResourceNotDeclared => "ResourceNotDeclared",
            EventReason::RuntimePodUnavailable => "RuntimePodUnavailable",
            EventReason::UnsatisfiedRunAffinity => "UnsatisfiedRunAffinity",
            EventReason::UnsatisfiedRunAntiAffinity => "UnsatisfiedRunAntiAffinity",
            EventReason::InvalidResourceRequest => "InvalidResources",
            EventReason::Cancelled => "Cancelled",
            EventReason::GangWaitExpired => "GangWaitExpired",
            EventReason::BindingTimeout => "BindingTimeout",
            EventReason::BindingFailed => "BindingFailed",
            EventReason::Preempted => "Preempted",
            EventReason::EvictionIncomplete => "EvictionIncomplete",
            EventReason::GangBelowMinCount => "GangBelowMinCount",
        }
    }
}

impl std::fmt::Display for EventReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<crate::runs::placement::PendingReason> for EventReason {
    fn from(r: crate::runs::placement::PendingReason) -> Self {
        use crate::runs::placement::PendingReason as P;
        match r {
            P::NoRuntimePods => EventReason::NoRuntimePods,
            P::InsufficientCapacity => EventReason::InsufficientCapacity,
            P::ResourceNotDeclared => EventReason::ResourceNotDeclared,
            P::RuntimePodUnavailable => EventReason::RuntimePodUnavailable,
            P::UnsatisfiedRunAffinity => EventReason::UnsatisfiedRunAffinity,
            P::UnsatisfiedRunAntiAffinity => EventReason::UnsatisfiedRunAntiAffinity,
        }
    }
}

/// The namespace this process runs in: `POD_NAMESPACE` (set from the
/// Downward API), else `kruntimes-system`. The default namespace of the
/// leader-election Lease and of the webhook Service and Secret.
pub fn own_namespace() -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "kruntimes-system".to_owned())
}

/// Logs an Event the way every writer that does not post it does.
pub fn log_event(object: &ObjectRef, kind: EventKind, reason: EventReason, note: &str) {
    tracing::info!(kind = %object.kind, object = %format!("{}/{}", object.namespace, object.name), event = ?kind, %reason, note, "event");
}

/// Writes the scheduler makes.
pub trait ClusterWriter: Send + Sync + 'static {
    /// Records a Kubernetes Event about an object (best effort: failures
    /// are logged, never fatal). The in-memory store only logs it.
    fn record_event<'a>(
        &'a self,
        object: &'a ObjectRef,
        kind: EventKind,
        reason: EventReason,
        note: &'a str,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            log_event(object, kind, reason, note);
        })
    }

    /// Replaces a Run's status, precondition on `resource_version` when given.
    fn write_run_status<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        resource_version: Option<&'a str>,
        status: &'a RunStatus,
    ) -> BoxFuture<'a, Result<(), WriteError>>;

    /// Creates the pod's `pods/binding` to a node, with the pod uid as
    /// precondition.
    fn bind_pod<'a>(&'a self, binding: &'a PodBinding) -> BoxFuture<'a, Result<(), BindError>>;

    /// Removes a ResourceClaim's `status.allocation`, with its
    /// `status.devices` and `status.reservedFor` (which the API allows only
    /// with an allocation), so the claim is allocated again.
    fn clear_claim_allocation<'a>(
        &'a self,
        claim: &'a ClaimAllocationRef,
    ) -> BoxFuture<'a, Result<(), WriteError>>;
    /// Sets one condition (by type) in a PodGroup's or CompositePodGroup's
    /// status, leaving the other conditions alone.
    fn write_group_condition<'a>(
        &'a self,
        group: &'a GroupRef,
        condition: &'a Condition,
    ) -> BoxFuture<'a, Result<(), WriteError>>;

    /// The ResourceClaim as the API server holds it now (a GET without a
    /// resourceVersion: a consistent read). The device gate passes a bind
    /// only on a claim its cache shows at that version. A writer with no
    /// source fresher than the cache (the in-memory store, writers made
    /// for tests) answers [`ClaimRead::CacheIsTruth`].
    fn read_claim<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<ClaimRead, WriteError>> {
        let _ = (namespace, name);
        Box::pin(async { Ok(ClaimRead::CacheIsTruth) })
    }

    /// Evicts a pod through the Eviction API (`pods/{name}/eviction`,
    /// `policy/v1`), its uid as precondition; the API server checks
    /// PodDisruptionBudgets. A writer that cannot evict says so in
    /// [`EvictError::Other`] (the default, for writers made for tests).
    fn evict_pod<'a>(&'a self, pod: &'a PodId) -> BoxFuture<'a, Result<(), EvictError>> {
        Box::pin(async move {
            Err(EvictError::Other {
                pod: pod.to_string(),
                message: "this writer cannot evict pods".into(),
            })
        })
    }
}
