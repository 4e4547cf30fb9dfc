//! Admission webhooks (`admission.k8s.io/v1` AdmissionReview).
//!
//! ```text
//!  POST /admission/<mutate|validate>/<resource>
//!      │ handler: decode the review (malformed → HTTP 400, JSON error)
//!      ▼
//!  pure decision fn(&AdmissionRequest) -> AdmissionResponse
//!      runs::{mutate_run, validate_run}     model::resources rules
//!      groups::validate_*                   workload::validate_* rules
//!                                           + PriorityLookup (class index)
//!      pods::mutate_pod
//!      │
//!      ▼ encode: echo apiVersion/kind/uid, base64 JSONPatch
//! ```
//!
//! A rule violation is HTTP 200 with `allowed: false`, `status.code` 4xx and
//! a message naming every offending field path. Decisions have no side
//! effects, so `dryRun` requests get the same verdict as real ones.

pub mod groups;
pub mod pods;
pub mod priority;
pub mod review;
pub mod runs;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, response::IntoResponse, response::Response};
use kube::core::admission::AdmissionResponse;

use crate::transport::MAX_BODY_BYTES;
use crate::transport::{ApiError, Body};
pub use priority::{ClassLookup, PriorityLookup};
use review::Request;

/// How long one review may take before the handler gives up (the webhook
/// configurations give the API server a 10s budget).
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(9);

/// What the admission handlers share.
#[derive(Clone, Debug)]
pub struct AdmissionState {
    /// PriorityClasses by name: the cluster index in the service, fed by a
    /// watcher or the standalone store.
    pub priority_classes: Arc<dyn PriorityLookup>,
    /// Where verdicts are counted.
    pub metrics: Arc<crate::metrics::Metrics>,
}

impl Default for AdmissionState {
    /// An empty, unsynced PriorityClass index (every class check fails
    /// closed) and metrics of its own.
    fn default() -> Self {
        Self::new(Arc::new(crate::cache::cluster_index::ClusterIndex::new()))
    }
}

impl AdmissionState {
    /// State over an existing PriorityClass index.
    pub fn new(priority_classes: Arc<dyn PriorityLookup>) -> Self {
        Self {
            priority_classes,
            metrics: Arc::default(),
        }
    }

    /// The same, counting verdicts in `metrics` (the service's registry).
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = metrics;
        self
    }
}

/// The webhook routes, with their own body limit and timeout, ready to be
/// merged into the service router (`router.merge(admission::router(s))`).
/// It sets no fallback, so it merges with a router that has one.
pub fn router(state: AdmissionState) -> Router {
    // Each review is timed by webhook and verdict, including reviews
    // refused before a verdict (too large, timed out: verdict `Error`).
    let timed = |webhook| state.metrics.review_latency(webhook);
    Router::new()
        .route(
            "/admission/mutate/runs",
            post(mutate_runs).route_layer(timed(MUTATE_RUNS)),
        )
        .route(
            "/admission/validate/runs",
            post(validate_runs).route_layer(timed(VALIDATE_RUNS)),
        )
        .route(
            "/admission/validate/podgroups",
            post(validate_pod_groups).route_layer(timed(VALIDATE_POD_GROUPS)),
        )
        .route(
            "/admission/validate/compositepodgroups",
            post(validate_composite_pod_groups).route_layer(timed(VALIDATE_COMPOSITE_POD_GROUPS)),
        )
        .route(
            "/admission/validate/workloads",
            post(validate_workloads).route_layer(timed(VALIDATE_WORKLOADS)),
        )
        .route(
            "/admission/mutate/pods",
            post(mutate_pods).route_layer(timed(MUTATE_PODS)),
        )
        .layer(crate::transport::body_limit(crate::transport::BodyLimit {
            bytes: MAX_BODY_BYTES,
            of: "the admission webhooks",
        }))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            REVIEW_TIMEOUT,
        ))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state)
}

// === handlers: decode, decide, encode ===

/// The `webhook` label values: one per route.
const MUTATE_RUNS: &str = "mutate-runs";
const VALIDATE_RUNS: &str = "validate-runs";
const VALIDATE_POD_GROUPS: &str = "validate-podgroups";
const VALIDATE_COMPOSITE_POD_GROUPS: &str = "validate-compositepodgroups";
const VALIDATE_WORKLOADS: &str = "validate-workloads";
const MUTATE_PODS: &str = "mutate-pods";

/// A response carrying its verdict for the review latency middleware.
fn with_verdict(mut resp: Response, verdict: crate::metrics::Verdict) -> Response {
    resp.extensions_mut().insert(verdict);
    resp
}

fn answer(
    s: &AdmissionState,
    body: &[u8],
    webhook: &'static str,
    decide: impl FnOnce(&Request) -> AdmissionResponse,
) -> Response {
    use crate::metrics::{AdmissionLabels, Verdict};
    let count = |verdict| {
        s.metrics
            .admission_verdicts
            .get_or_create(&AdmissionLabels { webhook, verdict })
            .inc()
    };
    let req = match review::decode_review(body) {
        Ok(req) => req,
        Err(e) => {
            count(Verdict::Malformed);
            return with_verdict(
                ApiError::bad_request(e.to_string()).into_response(),
                Verdict::Malformed,
            );
        }
    };
    let resp = decide(&req);
    let verdict = match (resp.allowed, resp.patch.is_some()) {
        (false, _) => Verdict::Denied,
        (true, true) => Verdict::Patched,
        (true, false) => Verdict::Allowed,
    };
    count(verdict);
    tracing::debug!(
        webhook,
        uid = %req.uid,
        operation = ?req.operation,
        dry_run = req.dry_run,
        allowed = resp.allowed,
        code = resp.result.code,
        patched = resp.patch.is_some(),
        "admission review"
    );
    with_verdict(Json(review::encode_review(resp)).into_response(), verdict)
}

async fn mutate_runs(State(s): State<AdmissionState>, Body(body): Body) -> Response {
    answer(&s, &body, MUTATE_RUNS, runs::mutate_run)
}

async fn validate_runs(State(s): State<AdmissionState>, Body(body): Body) -> Response {
    answer(&s, &body, VALIDATE_RUNS, runs::validate_run)
}

async fn validate_pod_groups(State(s): State<AdmissionState>, Body(body): Body) -> Response {
    answer(&s, &body, VALIDATE_POD_GROUPS, |r| {
        groups::validate_pod_group(r, s.priority_classes.as_ref())
    })
}

async fn validate_composite_pod_groups(
    State(s): State<AdmissionState>,
    Body(body): Body,
) -> Response {
    answer(&s, &body, VALIDATE_COMPOSITE_POD_GROUPS, |r| {
        groups::validate_composite_pod_group(r, s.priority_classes.as_ref())
    })
}

async fn validate_workloads(State(s): State<AdmissionState>, Body(body): Body) -> Response {
    answer(&s, &body, VALIDATE_WORKLOADS, |r| {
        groups::validate_workload(r, s.priority_classes.as_ref())
    })
}

async fn mutate_pods(State(s): State<AdmissionState>, Body(body): Body) -> Response {
    answer(&s, &body, MUTATE_PODS, pods::mutate_pod)
}
