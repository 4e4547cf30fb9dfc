//! The kruntimes custom resources, `kruntimes.io/v1alpha1` `Run` and `Runtime`.
//!
//! Field names follow the kruntimes API. Only the fields the scheduler reads
//! or writes are typed; unknown fields are ignored on read (the standalone
//! store keeps objects verbatim, so nothing is lost there).
//!
//! kruntimes owns these CRDs. The schema generated here (shipped only as
//! the opt-in `manifests/components/crds` for clusters without kruntimes)
//! marks `spec` and `status` `x-kubernetes-preserve-unknown-fields`, so the
//! API server never prunes the fields kruntimes stores that this crate does
//! not model (commands, env, timeout, repo, mode, ...).

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A short task that kruntimes executes on a warm Runtime Pod.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kruntimes.io",
    version = "v1alpha1",
    kind = "Run",
    namespaced,
    status = "RunStatus",
    shortname = "krun",
    printcolumn = r#"{"name":"Runtime","type":"string","jsonPath":".spec.runtime"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Pod","type":"string","jsonPath":".status.assignedPod"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct RunSpec {
    /// Name of the Runtime whose pods may execute this Run; Runtime Pods carry
    /// it in the runtime label (`--runtime-label-key`).
    pub runtime: String,
    /// Logical resources this Run needs while active. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<RunResources>,
}

/// `spec.resources` of a Run: requests only, there are no limits.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunResources {
    /// Non-negative integer quantities by resource name; `runs` defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<BTreeMap<String, Quantity>>,
}

/// Observed state of a Run. The scheduler writes `phase` (`Scheduled`,
/// `Pending`, `Failed`), the assignment, `reason`, `message` and the
/// `Scheduled` condition; runtimed moves it on to `Running`, `Ready`,
/// `Succeeded` or `Failed`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct RunStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assigned_pod: Option<String>,
    #[serde(
        default,
        rename = "assignedPodUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub assigned_pod_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Condition type that marks a Run whose function is released, when its
/// status is `True` (the default of `--released-condition`). kruntimes
/// releases a function Run by unregistering it and then writing a terminal
/// phase (`Timeout`, `Cancelled`, ...), which needs no condition; this one
/// is for a release recorded while the Run is still `Ready`.
pub const DEFAULT_RELEASED_CONDITION: &str = "kruntimes.io/FunctionReleased";

impl RunStatus {
    /// Whether condition `condition` (when configured) is `True`: the
    /// Run's function is released and it holds no capacity.
    pub fn is_released(&self, condition: Option<&str>) -> bool {
        condition.is_some_and(|c| {
            self.conditions
                .iter()
                .any(|k| k.type_ == c && k.status == "True")
        })
    }

    /// Whether the Run still consumes its request on its assigned pod:
    /// assigned, in an active phase, and its function not released.
    pub fn consumes(&self, released_condition: Option<&str>) -> bool {
        phase::is_active(self.phase.as_deref())
            && self.assigned_pod.as_deref().is_some_and(|p| !p.is_empty())
            && !self.is_released(released_condition)
    }
}

impl Run {
    /// The requests map, if any.
    pub fn requests(&self) -> Option<&BTreeMap<String, Quantity>> {
        self.spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
    }
}

/// A pool of warm Runtime Pods that execute Runs.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kruntimes.io",
    version = "v1alpha1",
    kind = "Runtime",
    namespaced,
    shortname = "krt"
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct RuntimeSpec {
    /// Capacity every pod of this Runtime advertises; the kruntimes
    /// controller stamps it onto its pods as `kruntimes.io/capacity.<resource>`
    /// annotations, which are what the scheduler reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<RuntimeCapacity>,
}

/// `spec.capacity` of a Runtime.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeCapacity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<BTreeMap<String, Quantity>>,
}

/// Run phases.
pub mod phase {
    pub const PENDING: &str = "Pending";
    pub const SCHEDULED: &str = "Scheduled";
    pub const RUNNING: &str = "Running";
    pub const READY: &str = "Ready";
    pub const SUCCEEDED: &str = "Succeeded";
    pub const FAILED: &str = "Failed";
    /// Terminal: the Run's timeout (or a function's idle timeout) expired.
    pub const TIMEOUT: &str = "Timeout";
    /// Terminal: cancelled (`spec.termination` / `cancelRequested`).
    pub const CANCELLED: &str = "Cancelled";

    /// Phases in which a Run holds capacity on its assigned pod.
    pub fn is_active(phase: Option<&str>) -> bool {
        matches!(phase, Some(SCHEDULED | RUNNING | READY))
    }

    /// Phases a Run never leaves (kruntimes' terminal phases; a function
    /// Run is unregistered, its function released, before it gets one).
    pub fn is_terminal(phase: Option<&str>) -> bool {
        matches!(phase, Some(SUCCEEDED | FAILED | TIMEOUT | CANCELLED))
    }

    /// A Run waiting for placement: no phase yet, or `Pending`.
    pub fn is_unscheduled(phase: Option<&str>) -> bool {
        matches!(phase, None | Some("") | Some(PENDING))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(phase: &str, pod: Option<&str>, conditions: &[(&str, &str)]) -> RunStatus {
        RunStatus {
            phase: Some(phase.into()),
            assigned_pod: pod.map(str::to_owned),
            conditions: conditions
                .iter()
                .map(|(t, s)| Condition {
                    type_: (*t).into(),
                    status: (*s).into(),
                    reason: "Test".into(),
                    message: String::new(),
                    last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ),
                    observed_generation: None,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn run_consumes_until_terminal_or_released() {
        let rel = Some(DEFAULT_RELEASED_CONDITION);
        for p in ["Scheduled", "Running", "Ready"] {
            assert!(status(p, Some("rp-1"), &[]).consumes(rel), "{p}");
            assert!(!status(p, None, &[]).consumes(rel), "{p} unassigned");
            assert!(!status(p, Some(""), &[]).consumes(rel), "{p} empty pod");
        }
        for p in ["Pending", "Succeeded", "Failed", "Timeout", "Cancelled"] {
            assert!(!status(p, Some("rp-1"), &[]).consumes(rel), "{p}");
        }
        for p in ["Succeeded", "Failed", "Timeout", "Cancelled"] {
            assert!(phase::is_terminal(Some(p)), "{p}");
        }
        assert!(!phase::is_terminal(Some("Ready")));
        let released = status(
            "Ready",
            Some("rp-1"),
            &[(DEFAULT_RELEASED_CONDITION, "True")],
        );
        assert!(released.is_released(rel));
        assert!(!released.consumes(rel));
        // Only True releases; only the configured type; none configured: none.
        for s in ["False", "Unknown"] {
            let st = status("Ready", Some("rp-1"), &[(DEFAULT_RELEASED_CONDITION, s)]);
            assert!(st.consumes(rel), "{s}");
        }
        assert!(released.consumes(Some("example.com/Released")));
        assert!(released.consumes(None));
    }
}
