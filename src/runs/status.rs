//! The Run status the scheduler writes, and the comparison that decides
//! whether a write is needed at all.

use crate::crd::{RunStatus, phase};
use crate::model::refs::{MAX_MESSAGE, truncate};
use crate::model::resources::RequestError;
use crate::runs::placement::PendingReason;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// The condition the scheduler owns.
pub const SCHEDULED: &str = "Scheduled";
/// Reason of a Run failed in pre-filter.
pub const INVALID_RESOURCE_REQUEST: &str = "InvalidResourceRequest";

fn set_condition(
    conditions: &mut Vec<Condition>,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) {
    if let Some(c) = conditions.iter_mut().find(|c| c.type_ == SCHEDULED) {
        if c.status != status {
            c.last_transition_time = Time(now);
        }
        c.status = status.to_owned();
        c.reason = reason.to_owned();
        c.message = message.to_owned();
        c.observed_generation = generation;
    } else {
        conditions.push(Condition {
            type_: SCHEDULED.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            observed_generation: generation,
            last_transition_time: Time(now),
        });
    }
}

/// `phase=Scheduled` on `pod`, condition `Scheduled=True`.
pub fn scheduled(
    old: &RunStatus,
    pod: &str,
    pod_uid: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> RunStatus {
    let mut s = old.clone();
    let message = truncate(format!("assigned to Runtime Pod {pod}"), MAX_MESSAGE);
    s.phase = Some(phase::SCHEDULED.to_owned());
    s.assigned_pod = Some(pod.to_owned());
    s.assigned_pod_uid = (!pod_uid.is_empty()).then(|| pod_uid.to_owned());
    s.reason = None;
    s.message = Some(message.clone());
    set_condition(
        &mut s.conditions,
        "True",
        SCHEDULED,
        &message,
        generation,
        now,
    );
    s
}

/// `phase=Pending`, condition `Scheduled=False` with a fixed reason.
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
    s.reason = Some(reason.as_str().to_owned());
    s.message = Some(message.clone());
    set_condition(
        &mut s.conditions,
        "False",
        reason.as_str(),
        &message,
        generation,
        now,
    );
    s
}

/// `phase=Failed`, reason `InvalidResourceRequest`, message naming the field.
pub fn invalid(
    old: &RunStatus,
    err: &RequestError,
    generation: Option<i64>,
    now: Timestamp,
) -> RunStatus {
    let mut s = old.clone();
    let message = truncate(err.to_string(), 1024);
    s.phase = Some(phase::FAILED.to_owned());
    s.assigned_pod = None;
    s.assigned_pod_uid = None;
    s.reason = Some(INVALID_RESOURCE_REQUEST.to_owned());
    s.message = Some(message.clone());
    set_condition(
        &mut s.conditions,
        "False",
        INVALID_RESOURCE_REQUEST,
        &message,
        generation,
        now,
    );
    s
}

/// True when writing `new` over `old` changes anything but timestamps.
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

/// The reason shown for a Run: its `Scheduled` condition's reason, else
/// `status.reason`.
pub fn shown_reason(s: &RunStatus) -> Option<&str> {
    s.conditions
        .iter()
        .find(|c| c.type_ == SCHEDULED)
        .map(|c| c.reason.as_str())
        .or(s.reason.as_deref())
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
        assert_eq!(shown_reason(&d), Some("Scheduled"));
    }
}
