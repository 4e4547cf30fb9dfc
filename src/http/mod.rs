//! The HTTP API: axum routers over shared state. Handlers decode, call the
//! cache or store, and encode; they keep no state of their own.

pub mod auth;
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
    /// Cluster mode: who may read the Run API and `/metrics`; `None` leaves
    /// them open (standalone mode).
    pub access: Option<auth::AccessControl>,
}

/// Which HTTP surfaces a listener serves. Each follows a component of
/// `serve --components`: the Run API with `runs`, the webhooks with
/// `admission`, the extender verbs with `extender` (unless the extender has
/// its own listener). Health and metrics are always served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Surfaces {
    /// `/v1/runs`, `/v1/runs/plan`, `/v1/runtime-pods`.
    pub run_api: bool,
    /// `/admission/...`.
    pub admission: bool,
    /// `/scheduler/...`.
    pub extender: bool,
}

impl Surfaces {
    /// Every surface: the standalone default and what tests drive.
    pub const ALL: Surfaces = Surfaces {
        run_api: true,
        admission: true,
        extender: true,
    };
}

/// The service's router with every surface: the Run API, standalone
/// objects, health, metrics, the extender verbs and the admission webhooks.
pub fn router(state: AppState) -> Router {
    router_with(state, Surfaces::ALL)
}

/// The service's router with the chosen surfaces. The standalone objects
/// API answers only when the state has a store (standalone mode).
pub fn router_with(state: AppState, surfaces: Surfaces) -> Router {
    let mut app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(metrics_route(&state));
    if surfaces.run_api {
        let run_api = Router::new()
            .route("/v1/runs/plan", post(runs::plan))
            .route("/v1/runs", get(runs::list_runs))
            .route("/v1/runtime-pods", get(runs::list_runtime_pods));
        app = app.merge(match &state.access {
            Some(ac) => run_api.route_layer(axum::middleware::from_fn_with_state(
                ac.clone(),
                auth::require_run_read,
            )),
            None => run_api,
        });
    }
    // Standalone only; cluster mode answers a 404 that says so.
    app = app
        .route("/v1/runtime-pods/heartbeat", post(objects::heartbeat))
        .route(
            "/v1/objects",
            get(objects::list)
                .post(objects::upsert)
                .delete(objects::delete),
        );
    if surfaces.extender {
        app = app.merge(crate::extender::routes());
    }
    let admission = surfaces.admission.then(|| {
        crate::admission::router(crate::admission::AdmissionState {
            priority_classes: Arc::clone(state.nodes.admission_classes()),
            metrics: Arc::clone(&state.metrics),
        })
    });
    let app = finish(app, state);
    match admission {
        Some(a) => app.merge(a),
        None => app,
    }
}

/// The extender's own listener (`--extender-listen`): only the extender
/// verbs under `/scheduler/`, so the loopback listener kube-scheduler calls
/// serves nothing else.
pub fn extender_router(state: AppState) -> Router {
    finish(Router::new().merge(crate::extender::routes()), state)
}

/// The health listener (`--health-listen`): `/healthz`, `/readyz` and
/// `/metrics`, plain HTTP, for the kubelet and Prometheus when the API
/// listens on loopback or behind TLS.
pub fn health_router(state: AppState) -> Router {
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(metrics_route(&state));
    finish(app, state)
}

/// `/metrics`, behind access control when the state has it.
fn metrics_route(state: &AppState) -> Router<AppState> {
    let r = Router::new().route("/metrics", get(metrics));
    match &state.access {
        Some(ac) => r.route_layer(axum::middleware::from_fn_with_state(
            ac.clone(),
            auth::require_metrics_read,
        )),
        None => r,
    }
}

/// Fallbacks, limits, timeout and tracing shared by every listener.
fn finish(app: Router<AppState>, state: AppState) -> Router {
    app.fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            Duration::from_secs(60),
        ))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
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
