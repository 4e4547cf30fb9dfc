//! `POST /v1/runs/plan`, `GET /v1/runs`, `GET /v1/runtime-pods`.

use super::AppState;
use super::error::{ApiError, JsonBody, Params};
use crate::crd::Run;
use crate::metrics::Endpoint;
use crate::model::resources::effective_requests;
use axum::Json;
use axum::extract::State;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Instant;

/// One feasible pod in a plan.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FeasibleView {
    pod: String,
    max_utilization: String,
    sum_utilization: String,
}

/// The plan response.
#[derive(Serialize)]
struct PlanView {
    feasible: Vec<FeasibleView>,
    rejected: BTreeMap<String, String>,
    selected: Option<String>,
    reason: Option<&'static str>,
}

/// Dry-run placement of a Run against the current cache. Changes nothing.
pub(super) async fn plan(
    State(s): State<AppState>,
    JsonBody(run): JsonBody<Run>,
) -> Result<Json<Value>, ApiError> {
    let start = Instant::now();
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
    let result = s
        .cache
        .plan(namespace, &run.spec.runtime, &requests, Timestamp::now());
    let view = PlanView {
        selected: result.selected().map(str::to_owned),
        reason: result.reason().map(|r| r.as_str()),
        feasible: result
            .feasible
            .iter()
            .map(|(pod, score)| FeasibleView {
                pod: pod.to_string(),
                max_utilization: score.max.to_string(),
                sum_utilization: score.sum.to_string(),
            })
            .collect(),
        rejected: result
            .rejected
            .into_iter()
            .map(|(p, r)| (p.to_string(), r))
            .collect(),
    };
    s.metrics.observe(Endpoint::Plan, start);
    Ok(Json(serde_json::to_value(view).map_err(|e| {
        ApiError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    })?))
}

/// Runs as the cache sees them (including the scheduler's own writes).
pub(super) async fn list_runs(State(s): State<AppState>, params: Params) -> Json<Value> {
    let start = Instant::now();
    let items = s.cache.runs(params.get("namespace"));
    s.metrics.observe(Endpoint::Runs, start);
    Json(json!({ "items": items }))
}

/// Runtime Pods with capacity, usage and assumed reservations.
pub(super) async fn list_runtime_pods(State(s): State<AppState>, params: Params) -> Json<Value> {
    let start = Instant::now();
    let items = s.cache.runtime_pods(
        params.get("namespace"),
        params.get("runtime"),
        Timestamp::now(),
    );
    s.metrics.observe(Endpoint::RuntimePods, start);
    Json(json!({ "items": items }))
}
