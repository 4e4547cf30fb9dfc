//! The Run status the scheduler writes, as upstream kruntimes writes it
//! (`internal/scheduler/reconciler.go`, `internal/runstatus`), and the
//! comparison that decides whether a write is needed at all.

use crate::crd::{RunStatus, phase};
use crate::model::refs::{MAX_MESSAGE, truncate};
use crate::model::resources::RequestError;
use crate::runs::placement::PendingReason;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// The condition the scheduler owns.
pub const SCHEDULED: &str = "Scheduled";
/// Upstream's lifecycle conditions set on a terminal transition.
pub const RUNNING: &str = "Running";
pub const READY: &str = "Ready";
pub const COMPLETED: &str = "Completed";
/// Reason of `Scheduled=True`.
pub const ASSIGNED: &str = "Assigned";
/// Reason of a Run failed in pre-filter (upstream `applyInvalidResources`).
pub const INVALID_RESOURCES: &str = "InvalidResources";
/// Reason of a cancelled Pending Run (upstream `retry.ReasonCancelled`).
pub const CANCELLED: &str = "Cancelled";
/// Message of a cancelled Pending Run.
pub const CANCELLED_MESSAGE: &str = "cancelled by user";

/// `meta.SetStatusCondition`: the transition time moves only when the
/// status changes (or the condition is new).
fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) {
    if let Some(c) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if c.status != status {
            c.last_transition_time = Time(now);
        }
        c.status = status.to_owned();
        c.reason = reason.to_owned();
        c.message = message.to_owned();
        c.observed_generation = generation.or(c.observed_generation);
    } else {
        conditions.push(Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            observed_generation: generation,
            last_transition_time: Time(now),
        });
    }
}

/// `phase=Scheduled` on `pod`, condition `Scheduled=True` reason `Assigned`,
/// message `assigned to runtime pod <pod>` (also the status message).
pub fn scheduled(
    old: &RunStatus,
    pod: &str,
    pod_uid: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> RunStatus {
    let mut s = old.clone();
    let message = truncate(format!("assigned to runtime pod {pod}"), MAX_MESSAGE);
    s.phase = Some(phase::SCHEDULED.to_owned());
    s.assigned_pod = Some(pod.to_owned());
    s.assigned_pod_uid = (!pod_uid.is_empty()).then(|| pod_uid.to_owned());
    s.message = Some(message.clone());
    set_condition(
        &mut s.conditions,
        SCHEDULED,
        "True",
        ASSIGNED,
        &message,
        generation,
        now,
    );
    s
}

/// `phase=Pending` with upstream's message (and our counts after it),
/// condition `Scheduled=False` with our finer reason. A stale assignment is
/// cleared.
pub fn pending(
    old: &RunStatus,
    reason: PendingReason,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> RunStatus {
    let mut s = old.clone();
    let message = truncate(message.to_owned(), MAX_MESSAGE);
    s.phase = Some(phase::PENDING.to_owned());
    s.assigned_pod = None;
    s.assigned_pod_uid = None;
    s.message = Some(message.clone());
    set_condition(
        &mut s.conditions,
        SCHEDULED,
        "False",
        reason.as_str(),
        &message,
        generation,
        now,
    );
    s
}

/// Upstream's `runstatus.SetTerminal`: phase, message, `completionTime`,
/// and `Running=False` / `Completed=False` (and `Ready=False` when the Run
/// has a `Ready` condition) with the reason.
fn terminal(
    old: &RunStatus,
    phase: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> RunStatus {
    let mut s = old.clone();
    s.phase = Some(phase.to_owned());
    s.message = Some(message.to_owned());
    s.completion_time = Some(Time(now));
    let types: &[&str] = if s.conditions.iter().any(|c| c.type_ == READY) {
        &[READY, RUNNING, COMPLETED]
    } else {
        &[RUNNING, COMPLETED]
    };
    for t in types {
        set_condition(
            &mut s.conditions,
            t,
            "False",
            reason,
            message,
            generation,
            now,
        );
    }
    s
}

/// An invalid request: `phase=Failed`, reason `InvalidResources`,
/// `completionTime`, and a message naming the field. An amount that is not
/// a non-negative integer starts with upstream's wording
/// (`RunSpec.ResourceRequests`: `resource request "<name>" must be a
/// non-negative integer`); a resource name upstream does not check has
/// only ours.
pub fn invalid(
    old: &RunStatus,
    err: &RequestError,
    generation: Option<i64>,
    now: Timestamp,
) -> RunStatus {
    let message = match err {
        RequestError::Quantity { resource, .. } => {
            format!("resource request {resource:?} must be a non-negative integer ({err})")
        }
        RequestError::Name { .. } => err.to_string(),
    };
    let message = truncate(message, 1024);
    terminal(
        old,
        phase::FAILED,
        INVALID_RESOURCES,
        &message,
        generation,
        now,
    )
}

/// A Run whose affinity cannot be compiled (an unparsable selector): as
/// upstream, `phase=Failed` with the message and nothing else.
pub fn selection_failed(old: &RunStatus, message: &str) -> RunStatus {
    let mut s = old.clone();
    s.phase = Some(phase::FAILED.to_owned());
    s.message = Some(truncate(message.to_owned(), 1024));
    s
}

/// A Pending Run whose cancellation was requested: `phase=Cancelled`,
/// reason `Cancelled`, `cancelled by user`, `completionTime`.
pub fn cancelled(old: &RunStatus, generation: Option<i64>, now: Timestamp) -> RunStatus {
    terminal(
        old,
        phase::CANCELLED,
        CANCELLED,
        CANCELLED_MESSAGE,
        generation,
        now,
    )
}

/// True when writing `new` over `old` changes what the API server stores,
/// transition times aside. Both are upstream's RunStatus (nothing a
/// structural schema would prune), so comparing them is comparing what is
/// stored.
pub fn differs(old: &RunStatus, new: &RunStatus) -> bool {
    let strip = |s: &RunStatus| {
        let mut s = s.clone();
        for c in &mut s.conditions {
            c.last_transition_time = Time(Timestamp::UNIX_EPOCH);
        }
        s
    };
    strip(old) != strip(new)
}

/// The reason shown for a Run (`GET /v1/runs`, metrics): for a terminal
/// Run the reason of its `Completed` condition, otherwise that of its
/// `Scheduled` condition.
pub fn shown_reason(s: &RunStatus) -> Option<&str> {
    let of = |t: &str| {
        s.conditions
            .iter()
            .find(|c| c.type_ == t)
            .map(|c| c.reason.as_str())
    };
    if phase::is_terminal(s.phase.as_deref()) {
        of(COMPLETED).or_else(|| of(SCHEDULED))
    } else {
        of(SCHEDULED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_write_only_on_change() {
        let t1: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t2: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let a = pending(
            &RunStatus::default(),
            PendingReason::InsufficientCapacity,
            "m",
            Some(1),
            t1,
        );
        let b = pending(&a, PendingReason::InsufficientCapacity, "m", Some(1), t2);
        assert!(!differs(&a, &b));
        assert_eq!(
            b.conditions[0].last_transition_time.0, t1,
            "same status keeps its transition time"
        );
        let c = pending(&a, PendingReason::NoRuntimePods, "m", Some(1), t2);
        assert!(differs(&a, &c));
        let d = scheduled(&c, "rp-1", "uid", Some(1), t2);
        assert_eq!(d.phase.as_deref(), Some("Scheduled"));
        assert_eq!(d.conditions.len(), 1);
        assert_eq!(d.conditions[0].status, "True");
        assert_eq!(shown_reason(&d), Some("Assigned"));
    }
}
