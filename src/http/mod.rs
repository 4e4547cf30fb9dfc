//! The HTTP API: axum routers over shared state. Handlers decode, call the
//! cache or store, and encode; they keep no state of their own.

pub mod error;
mod objects;
mod runs;

use crate::cache::Cache;
use crate::cache::nodes::NodeCache;
use crate::cluster::ClusterWriter;
use crate::cluster::standalone::StandaloneStore;
use crate::metrics::Metrics;
use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use error::ApiError;
use std::sync::Arc;
use std::time::Duration;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

/// Largest request body accepted (bigger bodies get 413).
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// What handlers share.
#[derive(Clone)]
pub struct AppState {
    pub cache: Arc<Cache>,
    /// The in-memory cluster; `None` in cluster mode.
    pub store: Option<Arc<StandaloneStore>>,
    pub metrics: Arc<Metrics>,
    /// The extender's cluster model (Nodes, Pods, groups, DRA).
    pub nodes: Arc<NodeCache>,
    /// Where writes go (the store in standalone mode, the API otherwise).
    pub writer: Arc<dyn ClusterWriter>,
    /// Binds waiting on DRA device binding conditions.
    pub binding: Arc<crate::extender::binding::BindingGate>,
    /// Gang members held in bind until their group's quorum (`--gang-wait`).
    pub gangs: Arc<crate::extender::hold::Gangs>,
}

/// The service's router: the Run API, standalone objects, health, metrics,
/// and the admission webhooks.
pub fn router(state: AppState) -> Router {
    let admission = crate::admission::router(crate::admission::AdmissionState {
        priority_classes: Arc::clone(state.nodes.admission_classes()),
        metrics: Arc::clone(&state.metrics),
    });
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/v1/runs/plan", post(runs::plan))
        .route("/v1/runs", get(runs::list_runs))
        .route("/v1/runtime-pods", get(runs::list_runtime_pods))
        .route("/v1/runtime-pods/heartbeat", post(objects::heartbeat))
        .route(
            "/v1/objects",
            get(objects::list)
                .post(objects::upsert)
                .delete(objects::delete),
        )
        .merge(crate::extender::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            Duration::from_secs(60),
        ))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
        .merge(admission)
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(s): State<AppState>) -> Response {
    if s.cache.is_synced() {
        "ok".into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced").into_response()
    }
}

async fn metrics(State(s): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
        .into_response()
}

/// The JSON 404 for unknown paths.
pub async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no route for {}", uri.path()))
}

/// The JSON 405 for a known path with the wrong method.
pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method {method} is not allowed on {}", uri.path()),
    )
}
