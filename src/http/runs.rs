//! `POST /v1/runs/plan`, `GET /v1/runs`, `GET /v1/runtime-pods`,
//! `GET /v1/explain/run`.

use super::RunApiState;
use crate::cache::{DEFAULT_PLAN_LIMIT, PlanResult};
use crate::crd::Run;
use crate::model::resources::effective_requests;
use crate::runs::placement::Score;
use crate::runs::retry;
use crate::transport::{ApiError, JsonBody, Params};
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};

/// The plan response, serialized straight from the plan result (ratios are
/// written with `collect_str`, no intermediate strings).
struct PlanView(PlanResult, Option<Timestamp>);

impl Serialize for PlanView {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        struct Feasible<'a>(&'a [(String, Score)], &'a [i64]);
        impl Serialize for Feasible<'_> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                struct One<'a>(&'a str, &'a Score, i64);
                impl Serialize for One<'_> {
                    fn serialize<S: serde::Serializer>(
                        &self,
                        serializer: S,
                    ) -> Result<S::Ok, S::Error> {
                        let mut m = serializer.serialize_map(Some(4))?;
                        m.serialize_entry("pod", self.0)?;
                        m.serialize_entry("maxUtilization", &Collect(&self.1.max))?;
                        m.serialize_entry("sumUtilization", &Collect(&self.1.sum))?;
                        // Preferred Run affinity, normalized 0..100.
                        m.serialize_entry("affinityScore", &self.2)?;
                        m.end()
                    }
                }
                let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
                for (i, (pod, score)) in self.0.iter().enumerate() {
                    let affinity = self.1.get(i).copied().unwrap_or(0);
                    seq.serialize_element(&One(pod, score, affinity))?;
                }
                seq.end()
            }
        }
        struct Rejected<'a>(&'a [(String, String)]);
        impl Serialize for Rejected<'_> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                // Already in pod-name order.
                let mut m = serializer.serialize_map(Some(self.0.len()))?;
                for (pod, why) in self.0 {
                    m.serialize_entry(pod, why)?;
                }
                m.end()
            }
        }
        let p = &self.0;
        let mut m = serializer.serialize_map(Some(5))?;
        m.serialize_entry("feasible", &Feasible(&p.feasible, &p.affinity_scores))?;
        m.serialize_entry("rejected", &Rejected(&p.rejected))?;
        m.serialize_entry("selected", &p.selected())?;
        m.serialize_entry("reason", &p.reason().map(|r| r.as_str()))?;
        // In a retry backoff: placed no earlier than this (RFC 3339).
        m.serialize_entry("backoffUntil", &self.1.as_ref().map(Collect))?;
        m.end()
    }
}

/// Serializes a `Display` value as a JSON string.
struct Collect<'a, T>(&'a T);

impl<T: std::fmt::Display> Serialize for Collect<'_, T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self.0)
    }
}

/// Longest list `?limit=` may ask for (besides 0, everything).
const MAX_PLAN_LIMIT: usize = 100_000;

/// `?limit=N`: how many feasible and rejected pods the plan lists.
fn plan_limit(params: &Params) -> Result<usize, ApiError> {
    let Some(raw) = params.get("limit") else {
        return Ok(DEFAULT_PLAN_LIMIT);
    };
    raw.parse::<usize>()
        .ok()
        .filter(|n| *n <= MAX_PLAN_LIMIT)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "limit: Invalid value: {raw:?}: must be an integer from 0 (no limit) to {MAX_PLAN_LIMIT}"
            ))
        })
}

/// Dry-run placement of a Run against the current cache. Changes nothing.
/// `feasible` lists the best `limit` pods, `rejected` the first `limit` by
/// name; `selected` and `reason` always consider every pod.
pub(super) async fn plan(
    State(s): State<RunApiState>,
    params: Params,
    JsonBody(run): JsonBody<Run>,
) -> Result<Response, ApiError> {
    let limit = plan_limit(&params)?;
    if run.metadata.name.as_deref().is_none_or(str::is_empty) {
        return Err(ApiError::unprocessable("metadata.name: Required value"));
    }
    if run.spec.runtime.is_empty() {
        return Err(ApiError::unprocessable("spec.runtime: Required value"));
    }
    let namespace = run
        .metadata
        .namespace
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or("default");
    let requests =
        effective_requests(run.requests()).map_err(|e| ApiError::unprocessable(e.to_string()))?;
    let now = Timestamp::now();
    let backoff = run
        .status
        .as_ref()
        .and_then(|st| retry::retry_at(&run.spec, st))
        .filter(|at| *at > now);
    let no_labels = std::collections::BTreeMap::new();
    let result = s
        .cache
        .plan_top_for(
            namespace,
            &run.spec.runtime,
            &requests,
            run.spec.affinity.as_ref(),
            run.metadata.labels.as_ref().unwrap_or(&no_labels),
            now,
            limit,
        )
        .map_err(|e| ApiError::unprocessable(format!("spec.affinity: {e}")))?;
    let response = Json(PlanView(result, backoff)).into_response();
    Ok(response)
}

/// Runs as the cache sees them (including the scheduler's own writes).
pub(super) async fn list_runs(State(s): State<RunApiState>, params: Params) -> Json<Value> {
    let items = s.cache.runs(params.get("namespace"));
    Json(json!({ "items": items }))
}

/// Runtime Pods with capacity, usage and assumed reservations.
pub(super) async fn list_runtime_pods(State(s): State<RunApiState>, params: Params) -> Json<Value> {
    let items = s.cache.runtime_pods(
        params.get("namespace"),
        params.get("runtime"),
        Timestamp::now(),
    );
    Json(json!({ "items": items }))
}

/// `GET /v1/explain/run?namespace=&name=&limit=`: the dry-run plan of an
/// existing Run, as `POST /v1/runs/plan` answers for the same Run, with
/// the Run as the cache sees it under `run` and its `runtime`.
pub(super) async fn explain_run(
    State(s): State<RunApiState>,
    params: Params,
) -> Result<Response, ApiError> {
    #[derive(Serialize)]
    struct RunPlan {
        #[serde(flatten)]
        plan: PlanView,
        run: crate::cache::views::RunView,
        runtime: String,
    }
    let (namespace, name) = crate::explain::object_params(&params)?;
    let limit = plan_limit(&params)?;
    let Some((view, runtime, requests, retry_at, affinity)) = s.cache.run_inputs(&namespace, &name)
    else {
        return Err(ApiError::not_found(format!(
            "Run {namespace}/{name} is not in the scheduler's cache"
        )));
    };
    let requests = requests.map_err(|e| {
        ApiError::unprocessable(format!("Run {namespace}/{name} cannot be planned: {e}"))
    })?;
    let now = Timestamp::now();
    let plan = match &affinity {
        Some((aff, labels)) => s
            .cache
            .plan_top_for(
                &namespace,
                &runtime,
                &requests,
                Some(aff),
                labels,
                now,
                limit,
            )
            .map_err(|e| {
                ApiError::unprocessable(format!("Run {namespace}/{name} cannot be planned: {e}"))
            })?,
        None => s
            .cache
            .plan_top(&namespace, &runtime, &requests, now, limit),
    };
    Ok(Json(RunPlan {
        plan: PlanView(plan, retry_at.filter(|at| *at > now)),
        run: view,
        runtime,
    })
    .into_response())
}
