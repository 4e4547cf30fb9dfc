//! The HTTP API: the Run API, the standalone objects API, health and
//! metrics, over their own state ([`RunApiState`]); and the composition of
//! every surface's router (the Run API here, [`crate::extender::router`],
//! [`crate::admission::router`]) into one service router over
//! [`AppState`], which holds each surface's own state as built by that
//! surface and hands it out whole (axum `FromRef`). Handlers decode, call
//! the cache or store, and encode; they keep no state of their own.

pub mod auth;
mod objects;
mod runs;

use crate::admission::AdmissionState;
use crate::cache::RunCache;
use crate::cache::cluster_index::ClusterIndex;
use crate::cluster::standalone::StandaloneStore;
use crate::extender::ExtenderState;
use crate::health::Health;
use crate::metrics::{Metrics, Operation, PendingState, StateSample};
use crate::transport::{MAX_BODY_BYTES, method_not_allowed, not_found};
use axum::Router;
use axum::extract::{FromRef, State};
use axum::handler::Handler as _;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::sync::Arc;
use std::time::Duration;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

/// What the service's listeners serve: each surface's own state, built
/// where that surface lives, handed out whole (axum `FromRef`).
#[derive(Clone)]
pub struct AppState {
    /// The Run API, the standalone objects API, health and metrics.
    pub runs: RunApiState,
    /// The extender verbs ([`ExtenderState`]).
    pub extender: ExtenderState,
    /// The admission webhooks ([`AdmissionState`]).
    pub admission: AdmissionState,
    /// Cluster mode: the API client `/v1/explain/pod` reads the pod with
    /// (standalone mode reads the store).
    pub api: Option<kube::Client>,
}

impl AppState {
    /// Replaces the gang holds the extender binds with and the gang gauges
    /// read (`--gang-wait` and the other gang flags).
    pub fn set_gangs(&mut self, gangs: Arc<crate::extender::bind::permit::Gangs>) {
        self.runs.gangs = Arc::clone(&gangs);
        self.extender.gangs = gangs;
    }
}

/// What the Run API, the standalone objects API, health and metrics share:
/// a handle on [`RunApi`] (one reference count per request; fields read
/// through `Deref`, set up through `DerefMut`, which copies the fields when
/// the handle is shared).
#[derive(Clone)]
pub struct RunApiState(Arc<RunApi>);

impl RunApiState {
    pub fn new(api: RunApi) -> Self {
        RunApiState(Arc::new(api))
    }
}

impl std::ops::Deref for RunApiState {
    type Target = RunApi;
    fn deref(&self) -> &RunApi {
        &self.0
    }
}

impl std::ops::DerefMut for RunApiState {
    fn deref_mut(&mut self) -> &mut RunApi {
        Arc::make_mut(&mut self.0)
    }
}

/// The fields of [`RunApiState`].
#[derive(Clone)]
pub struct RunApi {
    /// The Run cache: Runs, Runtimes, Runtime Pods, reservations.
    pub cache: Arc<RunCache>,
    /// The in-memory cluster; `None` in cluster mode.
    pub store: Option<Arc<StandaloneStore>>,
    /// How the watches fare (`/readyz`).
    pub health: Arc<Health>,
    /// The registry `/metrics` encodes.
    pub metrics: Arc<Metrics>,
    /// Cluster mode: who may read the Run API and `/metrics`; `None` leaves
    /// them open (standalone mode).
    pub access: Option<auth::AccessControl>,
    /// The cluster index, for the cache-size gauges.
    pub nodes: Arc<ClusterIndex>,
    /// The gang holds, for the gang gauges.
    pub gangs: Arc<crate::extender::bind::permit::Gangs>,
}

impl FromRef<AppState> for RunApiState {
    fn from_ref(s: &AppState) -> Self {
        s.runs.clone()
    }
}

impl FromRef<AppState> for ExtenderState {
    fn from_ref(s: &AppState) -> Self {
        s.extender.clone()
    }
}

impl FromRef<AppState> for AdmissionState {
    fn from_ref(s: &AppState) -> Self {
        s.admission.clone()
    }
}

/// Which HTTP surfaces a listener serves. Each follows a component of
/// `serve --components`: the Run API with `runs`, the webhooks with
/// `admission`, the extender verbs with `extender` (unless the extender has
/// its own listener). Health and metrics are always served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Surfaces {
    /// `/v1/runs`, `/v1/runs/plan`, `/v1/runtime-pods`, `/v1/explain/run`.
    pub run_api: bool,
    /// `/admission/...`.
    pub admission: bool,
    /// `/scheduler/...`.
    pub extender: bool,
    /// `/v1/explain/pod` (reads the extender's cluster index: served
    /// wherever the extender component runs, on the main listener).
    pub explain_pod: bool,
}

impl Surfaces {
    /// Every surface: the standalone default and what tests drive.
    pub const ALL: Surfaces = Surfaces {
        run_api: true,
        admission: true,
        extender: true,
        explain_pod: true,
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
    let api = RunApiState::from_ref(&state);
    let mut app = health(&api).merge(objects_router(api.clone()));
    if surfaces.run_api {
        app = app.merge(run_api_router(api));
    }
    if surfaces.extender {
        app = app.merge(crate::extender::router(ExtenderState::from_ref(&state)));
    }
    if surfaces.explain_pod {
        app = app.merge(explain_pod_router(&state));
    }
    let app = finish(app);
    // Admission brings its own body limit, timeout and tracing.
    if surfaces.admission {
        app.merge(crate::admission::router(AdmissionState::from_ref(&state)))
    } else {
        app
    }
}

/// `GET /v1/explain/pod` over the extender's cluster index and planner,
/// reading the pod from the store (standalone) or the API server.
fn explain_pod_router(state: &AppState) -> Router {
    let source = match (&state.runs.store, &state.api) {
        (Some(store), _) => Some(crate::explain::PodSource::Store(Arc::clone(store))),
        (None, Some(client)) => Some(crate::explain::PodSource::Api(client.clone())),
        (None, None) => None,
    };
    let r = crate::explain::pod_router(crate::explain::ExplainPodState {
        nodes: Arc::clone(&state.extender.nodes),
        gangs: Arc::clone(&state.extender.gangs),
        source,
    });
    match &state.runs.access {
        Some(ac) => r.route_layer(axum::middleware::from_fn_with_state(
            ac.clone(),
            auth::require_pod_read,
        )),
        None => r,
    }
}

/// The extender's own listener (`--extender-listen`): only the extender
/// verbs under `/scheduler/`, so the loopback listener kube-scheduler calls
/// serves nothing else.
pub fn extender_router(state: AppState) -> Router {
    finish(crate::extender::router(ExtenderState::from_ref(&state)))
}

/// The health listener (`--health-listen`): `/healthz`, `/readyz` and
/// `/metrics`, plain HTTP, for the kubelet and Prometheus when the API
/// listens on loopback or behind TLS.
pub fn health_router(state: AppState) -> Router {
    finish(health(&RunApiState::from_ref(&state)))
}

/// The Run API (`/v1/runs`, `/v1/runs/plan`, `/v1/runtime-pods`,
/// `/v1/explain/run`) over its
/// own state, each route timed by the latency middleware, behind access
/// control when the state has it.
pub fn run_api_router(state: RunApiState) -> Router {
    let timed = |endpoint| state.metrics.latency(endpoint);
    let run_api = Router::new()
        .route(
            "/v1/runs/plan",
            post(runs::plan).route_layer(timed(Operation::Plan)),
        )
        .route(
            "/v1/runs",
            get(runs::list_runs).route_layer(timed(Operation::Runs)),
        )
        .route(
            "/v1/runtime-pods",
            get(runs::list_runtime_pods).route_layer(timed(Operation::RuntimePods)),
        )
        .route("/v1/explain/run", get(runs::explain_run));
    let run_api = match &state.access {
        Some(ac) => run_api.route_layer(axum::middleware::from_fn_with_state(
            ac.clone(),
            auth::require_run_read,
        )),
        None => run_api,
    };
    run_api.with_state(state)
}

/// The standalone objects API (`/v1/objects`, the heartbeat); in cluster
/// mode it answers a 404 that says so. Upserts are timed.
pub fn objects_router(state: RunApiState) -> Router {
    let upsert = objects::upsert.layer(state.metrics.latency(Operation::Objects));
    Router::new()
        .route("/v1/runtime-pods/heartbeat", post(objects::heartbeat))
        .route(
            "/v1/objects",
            get(objects::list).post(upsert).delete(objects::delete),
        )
        .with_state(state)
}

/// `/healthz`, `/readyz` and `/metrics` (behind access control when the
/// state has it).
fn health(state: &RunApiState) -> Router {
    let metrics = Router::new().route("/metrics", get(metrics));
    let metrics = match &state.access {
        Some(ac) => metrics.route_layer(axum::middleware::from_fn_with_state(
            ac.clone(),
            auth::require_metrics_read,
        )),
        None => metrics,
    };
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(metrics)
        .with_state(state.clone())
}

/// Fallbacks, limits, timeout and tracing shared by every listener.
fn finish(app: Router) -> Router {
    app.fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(crate::transport::body_limit(crate::transport::BodyLimit {
            bytes: MAX_BODY_BYTES,
            of: "the Run and object API",
        }))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            Duration::from_secs(60),
        ))
        .layer(TraceLayer::new_for_http())
}

async fn healthz() -> &'static str {
    "ok"
}

/// 200 `ok` once the caches are synced and while every watch is healthy;
/// else 503 with one line per cause, naming the watch (see
/// [`Health::readiness`]).
async fn readyz(State(s): State<RunApiState>) -> Response {
    let mut causes = s.health.readiness().err().unwrap_or_default();
    if !s.cache.is_synced() && causes.is_empty() {
        causes.push("caches not synced".to_owned());
    }
    if causes.is_empty() {
        // Ready; a missing optional API is detail, never a cause.
        let missing = s.health.missing_apis();
        if missing.is_empty() {
            "ok".into_response()
        } else {
            format!("ok\n{}\n", missing.join("\n")).into_response()
        }
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready:\n{}\n", causes.join("\n")),
        )
            .into_response()
    }
}

/// What the caches hold now, for the state gauges.
pub fn state_sample(s: &RunApiState) -> StateSample {
    let mut cache_objects: Vec<(&'static str, usize)> = s.nodes.read().sizes().to_vec();
    cache_objects.extend(s.cache.sizes());
    let pending = s.cache.pending_runs(k8s_openapi::jiff::Timestamp::now());
    StateSample {
        pending: pending
            .by_reason
            .into_iter()
            .map(|(r, n)| (PendingState::from(r), n))
            .chain([(PendingState::RetryBackoff, pending.backing_off)])
            .collect(),
        oldest_pending_seconds: pending.oldest_created.map(|c| {
            k8s_openapi::jiff::Timestamp::now()
                .duration_since(c)
                .as_secs_f64()
                .max(0.0)
        }),
        cache_objects,
        gang_members_held: s.gangs.held(),
        gang_groups_waiting: s.gangs.units(),
        gang_members_reserved: s.gangs.kept(),
    }
}

/// The OpenMetrics text, with the state gauges set from the caches first.
async fn metrics(State(s): State<RunApiState>) -> Response {
    s.metrics.set_state(&state_sample(&s));
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
        .into_response()
}
