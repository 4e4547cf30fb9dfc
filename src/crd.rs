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

    /// Phases in which a Run holds capacity on its assigned pod.
    pub fn is_active(phase: Option<&str>) -> bool {
        matches!(phase, Some(SCHEDULED | RUNNING | READY))
    }

    /// Phases a Run never leaves.
    pub fn is_terminal(phase: Option<&str>) -> bool {
        matches!(phase, Some(SUCCEEDED | FAILED))
    }

    /// A Run waiting for placement: no phase yet, or `Pending`.
    pub fn is_unscheduled(phase: Option<&str>) -> bool {
        matches!(phase, None | Some("") | Some(PENDING))
    }
}
