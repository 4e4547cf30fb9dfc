//! `GET /v1/explain/run?namespace=&name=&limit=`: the dry-run plan of an
//! existing Run, as `POST /v1/runs/plan` answers for the same Run, with
//! the Run as the cache sees it under `run`.

use crate::http::RunApiState;
use crate::http::runs::{PlanView, plan_limit};
use crate::transport::{ApiError, Params};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

#[derive(Serialize)]
struct RunPlan {
    #[serde(flatten)]
    plan: PlanView,
    run: crate::cache::views::RunView,
    runtime: String,
}

pub(super) async fn handler(
    State(s): State<RunApiState>,
    params: Params,
) -> Result<Response, ApiError> {
    let (namespace, name) = super::object_params(&params)?;
    let limit = plan_limit(&params)?;
    let Some((view, runtime, requests)) = s.cache.run_inputs(&namespace, &name) else {
        return Err(ApiError::not_found(format!(
            "Run {namespace}/{name} is not in the scheduler's cache"
        )));
    };
    let requests = requests.map_err(|e| {
        ApiError::unprocessable(format!("Run {namespace}/{name} cannot be planned: {e}"))
    })?;
    let plan = s
        .cache
        .plan_top(&namespace, &runtime, &requests, Timestamp::now(), limit);
    Ok(axum::Json(RunPlan {
        plan: PlanView(plan),
        run: view,
        runtime,
    })
    .into_response())
}
