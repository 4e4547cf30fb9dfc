//! The kruntimes custom resources, `kruntimes.io/v1alpha1` `Run` and `Runtime`.
//!
//! `RunSpec` and `RunStatus` mirror upstream kruntimes' `api/v1alpha1`
//! (`run_types.go`) field for field, with the same JSON names. The fields
//! the scheduler reads are typed (`runtime`, `resources`, `affinity`,
//! `retryPolicy`, `termination`); the ones it only carries (`source`,
//! `mode`, `env`, ...) are kept as JSON objects. The status has exactly
//! upstream's fields: a structural CRD prunes anything else, so the
//! scheduler never writes a field outside them (there is no `status.reason`).
//!
//! kruntimes owns these CRDs. The schema generated here is shipped only as
//! the opt-in `manifests/components/crds` for clusters without kruntimes.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Schema of a field the scheduler carries but does not interpret: any
/// object, kept whole.
fn preserved_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Schema of a list of such objects.
fn preserved_objects(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    })
}

/// Schema of a duration string (`metav1.Duration`).
fn duration_string(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string"})
}

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
pub struct RunSpec {
    /// Name of the Runtime whose pods may execute this Run; Runtime Pods carry
    /// it in the runtime label (`--runtime-label-key`).
    pub runtime: String,
    /// Where the code comes from (upstream `CodeSource`; carried, not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub source: Option<Value>,
    /// Execution mode (upstream `RunMode`; carried, not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub mode: Option<Value>,
    /// Artifacts materialized before execution (carried, not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_objects")]
    pub artifact_inputs: Option<Vec<Value>>,
    /// A namespace-local PersistentWorkspace (carried, not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub workspace: Option<Value>,
    /// Placement relative to other active Runs of the namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<RunAffinity>,
    /// Logical resources this Run needs while active. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<RunResources>,
    /// Environment variables (carried, not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_objects")]
    pub env: Option<Vec<Value>>,
    /// Longest run time, a duration string (carried, not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_string")]
    pub timeout: Option<String>,
    /// A one-way termination request; `mode: Immediate` cancels a Pending Run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination: Option<RunTermination>,
    /// The retry strategy; its backoff delays a retried attempt's placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_policy: Option<RetryPolicy>,
    /// Lifetime of a finished Run in seconds (carried, not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
    /// The earlier upstream API's cancellation flag, still honoured like
    /// `termination.mode: Immediate`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel_requested: bool,
}

/// `spec.termination` of a Run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunTermination {
    /// `Immediate` (any Run) or `Drain` (Session Runs).
    pub mode: String,
}

/// `spec.retryPolicy` of a Run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    /// Attempts including the first (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<i32>,
    /// First backoff, a duration string (default 1s); doubles per retry,
    /// capped at 60s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_string")]
    pub backoff: Option<String>,
    /// Failure reasons eligible for retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable_reasons: Option<Vec<String>>,
}

/// `spec.affinity` of a Run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunAffinity {
    /// Share a Runtime Pod with matching active Runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_affinity: Option<RunAffinityRules>,
    /// Avoid a Runtime Pod with matching active Runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_anti_affinity: Option<RunAffinityRules>,
}

/// Required and preferred Run affinity terms.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunAffinityRules {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_during_scheduling_ignored_during_execution: Vec<RunAffinityTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred_during_scheduling_ignored_during_execution: Vec<WeightedRunAffinityTerm>,
}

/// A preferred term and its weight (1–100).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WeightedRunAffinityTerm {
    pub weight: i32,
    pub run_affinity_term: RunAffinityTerm,
}

/// Active namespace-local Runs selected by labels, for one topology.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunAffinityTerm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Only `kruntimes.io/runtime-pod` is supported.
    #[serde(default)]
    pub topology_key: String,
}

/// The one supported affinity topology: the Runtime Pod itself.
pub const TOPOLOGY_RUNTIME_POD: &str = "kruntimes.io/runtime-pod";

/// `spec.resources` of a Run: requests only, there are no limits.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunResources {
    /// Non-negative integer quantities by resource name; `runs` defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<BTreeMap<String, Quantity>>,
}

/// Observed state of a Run: upstream's `RunStatus`, field for field. The
/// scheduler writes `phase` (`Scheduled`, `Pending`, `Failed`,
/// `Cancelled`), the assignment, `message`, `completionTime` of a Run it
/// ends, and conditions; runtimed moves it on to `Running`, `Ready`,
/// `Succeeded` or `Failed`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
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
    /// Gateway endpoint of a ready function or session Run (carried).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub endpoint: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_objects")]
    pub artifact_refs: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub artifact_store: Option<Value>,
    /// The current execution attempt (1-based).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i32>,
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

impl RunSpec {
    /// Whether cancellation was requested: `termination.mode: Immediate`
    /// (upstream's `HasImmediateTermination`) or the earlier
    /// `cancelRequested`.
    pub fn cancel_requested(&self) -> bool {
        self.cancel_requested
            || self
                .termination
                .as_ref()
                .is_some_and(|t| t.mode == "Immediate")
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
