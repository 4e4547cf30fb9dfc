//! One scheduling cycle's decision for one Run: a pure function of the Run,
//! the Runtime Pods of its namespace and runtime (their columns and the
//! namespace's affinity targets) and the clock. The Run cache looks the
//! inputs up and applies the result under its write lock (the reservation,
//! the status to write); the scheduling loop emits the metrics.
//!
//! In upstream's order: a cancellation first, then the request's validity,
//! then the retry backoff, then the affinity's pre-filter, filter and score.

use crate::crd::{RunAffinity, RunStatus};
use crate::model::resources::{RequestError, Requests, ResourceNames, ResourceVec};
use crate::model::runtime_pod::Freshness;
use crate::runs::affinity::{self, Bound, Terms};
use crate::runs::columns::Columns;
use crate::runs::placement::{PendingReason, RejectionCounts};
use crate::runs::status;
use crate::runs::targets::Targets;
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What the decision reads of the Run.
#[derive(Debug, Clone, Copy)]
pub struct RunView<'a> {
    pub status: &'a RunStatus,
    pub generation: Option<i64>,
    /// Cancellation requested.
    pub cancel: bool,
    /// The effective request, or why the spec is invalid.
    pub requests: &'a Result<Requests, RequestError>,
    /// End of the retry backoff it is in, if any.
    pub retry_at: Option<Timestamp>,
    pub runtime: &'a str,
    /// `metadata.labels` (a required term may be seeded by them).
    pub labels: &'a BTreeMap<String, String>,
    /// `spec.affinity`, when it has any term.
    pub affinity: Option<&'a RunAffinity>,
}

/// What the decision reads of the pods.
#[derive(Debug, Clone, Copy)]
pub struct PodState<'a> {
    /// Interned resource names (the request resolves against them).
    pub names: &'a ResourceNames,
    /// The Runtime Pods of the Run's runtime in its namespace, if any.
    pub columns: Option<&'a Columns>,
    /// The namespace's affinity targets.
    pub targets: &'a Targets,
    /// How old a heartbeat may be.
    pub stale_after: Duration,
}

/// The decision; the cache applies it.
#[derive(Debug, Clone, PartialEq)]
pub enum Choice {
    /// Cancellation requested while Pending: write `status` (`Cancelled`).
    Cancelled { status: RunStatus, write: bool },
    /// Invalid request or affinity: write `status` (failed).
    Invalid { status: RunStatus, write: bool },
    /// In a retry backoff until `until`: nothing to write.
    BackingOff { until: Timestamp },
    /// Reserve `request` on `pod`.
    Place {
        pod: Arc<str>,
        request: ResourceVec,
        counts: RejectionCounts,
    },
    /// Nothing fits: write `status` when `write`.
    Pending {
        reason: PendingReason,
        status: RunStatus,
        write: bool,
        counts: RejectionCounts,
    },
}

/// Upstream's message for a Run whose affinity cannot be compiled.
pub fn selection_failed(e: String) -> String {
    format!("pod selection failed: pre-filter run affinity: {e}")
}

/// Decides one cycle for `run` over `pods` at `now`.
pub fn decide(run: &RunView<'_>, pods: &PodState<'_>, now: Timestamp) -> Choice {
    let with_status = |status: RunStatus| {
        let write = status::differs(run.status, &status);
        (status, write)
    };
    if run.cancel {
        let (status, write) = with_status(status::cancelled(run.status, run.generation, now));
        return Choice::Cancelled { status, write };
    }
    let requests = match run.requests {
        Err(e) => {
            let (status, write) = with_status(status::invalid(run.status, e, run.generation, now));
            return Choice::Invalid { status, write };
        }
        Ok(r) => r,
    };
    if let Some(until) = run.retry_at
        && now < until
    {
        return Choice::BackingOff { until };
    }
    let (request, unknown) = requests.resolve(pods.names);
    let has_unknown = !unknown.is_empty();
    let window = Freshness::new(now, pods.stale_after);
    let (best, counts) = match (run.affinity, pods.columns) {
        // With affinity: the fitting pods filtered and ranked by the terms
        // against the active and assumed Runs.
        (Some(aff), cols) => {
            let terms = match Terms::compile(aff) {
                Ok(t) => t,
                Err(e) => {
                    let (status, write) =
                        with_status(status::selection_failed(run.status, &selection_failed(e)));
                    return Choice::Invalid { status, write };
                }
            };
            match cols {
                Some(cols) => {
                    let bound = Bound::new(&terms, run.labels, pods.targets);
                    let placed = affinity::place(&bound, cols, &request, has_unknown, &window);
                    let best = placed
                        .ranked
                        .first()
                        .and_then(|r| cols.position(r.pod))
                        .map(|i| Arc::clone(cols.name(i)));
                    (best, placed.counts)
                }
                None => (None, RejectionCounts::default()),
            }
        }
        (None, Some(cols)) => {
            let (best, counts) = cols.best(&request, has_unknown, &window);
            (best.map(|i| Arc::clone(cols.name(i))), counts)
        }
        (None, None) => (None, RejectionCounts::default()),
    };
    match best {
        Some(pod) => Choice::Place {
            pod,
            request,
            counts,
        },
        None => {
            let reason = counts.pending_reason();
            let message = counts.message(run.runtime);
            let (status, write) = with_status(status::pending(
                run.status,
                reason,
                &message,
                run.generation,
                now,
            ));
            Choice::Pending {
                reason,
                status,
                write,
                counts,
            }
        }
    }
}
