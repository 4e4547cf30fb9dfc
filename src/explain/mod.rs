//! "Why is it pending?": read-only explanations over the service's caches.
//!
//! | path | served with | answers |
//! |---|---|---|
//! | `GET /v1/explain/pod?namespace=&name=` | the `extender` component (its cluster index) | the extender's filter for the pod over every cached node: per-reason node counts with example nodes, the pod's group and quorum, the chosen or planned domain and why the other domains cannot hold the group, the priority checks |
//! | `GET /v1/explain/run?namespace=&name=` | the `runs` component (a Run API route, in `http`) | the dry-run plan of an existing Run, in the shape of `POST /v1/runs/plan` (`limit` on listed pods) |
//!
//! Both are read-only: explain pod decides over a private copy of the gang
//! planner ([`GangPlanner::scratch`](crate::extender::gang::GangPlanner::scratch)),
//! so it makes, refreshes or drops no plan and records no group condition,
//! and it assumes nothing. In cluster mode both sit behind the read API's
//! access control (`--authorize-reads`): explain pod needs `get` on `pods`
//! in the pod's namespace, explain run `get` on `runs.kruntimes.io`, as
//! the Run API.
//!
//! The pod explained is read whole from where kube-scheduler would read it
//! (the API server in cluster mode, the store in standalone mode): the
//! extender's cache keeps only what fit reads, and filter decides over the
//! Pod kube-scheduler sends. The cache must know the pod under the same uid
//! for its group to be planned, as in filter; the answer says when it does
//! not.

pub mod cli;
pub mod pod;

use crate::cache::cluster_index::ClusterIndex;
use crate::cluster::standalone::{Kind, StandaloneStore};
use crate::extender::bind::permit::Gangs;
use crate::transport::{ApiError, Params};
use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use k8s_openapi::api::core::v1::Pod;
use std::sync::Arc;

/// Where the Pod explained is read.
#[derive(Clone)]
pub enum PodSource {
    /// Standalone mode: the in-memory store.
    Store(Arc<StandaloneStore>),
    /// Cluster mode: the API server.
    Api(kube::Client),
}

impl PodSource {
    /// The Pod, `Ok(None)` when there is none under that name.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Option<Pod>, ApiError> {
        match self {
            PodSource::Store(store) => store
                .list(Kind::Pod, Some(namespace), Some(name))
                .into_iter()
                .next()
                .map(|v| {
                    serde_json::from_value::<Pod>(v).map_err(|e| {
                        ApiError::new(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            format!("the stored pod does not decode: {e}"),
                        )
                    })
                })
                .transpose(),
            PodSource::Api(client) => kube::Api::<Pod>::namespaced(client.clone(), namespace)
                .get_opt(name)
                .await
                .map_err(|e| {
                    tracing::warn!(error = %e, "reading the pod to explain failed");
                    ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("reading pod {namespace}/{name} from the API server failed: {e}"),
                    )
                }),
        }
    }
}

/// What `GET /v1/explain/pod` reads.
#[derive(Clone)]
pub struct ExplainPodState {
    pub nodes: Arc<ClusterIndex>,
    pub gangs: Arc<Gangs>,
    /// `None`: neither a store nor an API client (every request is a 503).
    pub source: Option<PodSource>,
}

/// `GET /v1/explain/pod`. The service router puts it behind the read
/// API's access control (`get pods` in the namespace asked for).
pub fn pod_router(state: ExplainPodState) -> Router {
    Router::new()
        .route("/v1/explain/pod", get(pod::handler))
        .with_state(state)
}

/// Most example nodes per reason `?examples=` may ask for.
pub const MAX_EXAMPLES: usize = 100;
/// Example nodes per reason without `?examples=`.
pub const DEFAULT_EXAMPLES: usize = 5;
/// Most domains `?domains=` may ask for.
pub const MAX_DOMAINS: usize = 1000;
/// Domains listed without `?domains=`.
pub const DEFAULT_DOMAINS: usize = 20;

/// `namespace` and `name` of an explain request: required, a DNS label and
/// a DNS subdomain (400 naming the parameter otherwise).
pub fn object_params(params: &Params) -> Result<(String, String), ApiError> {
    let namespace = params
        .get("namespace")
        .ok_or_else(|| ApiError::bad_request("namespace: Required value"))?;
    if !crate::model::refs::is_dns_label(namespace) {
        return Err(ApiError::bad_request(format!(
            "namespace: Invalid value: {namespace:?}: must be a DNS label (lowercase alphanumerics and '-', at most 63)"
        )));
    }
    let name = params
        .get("name")
        .ok_or_else(|| ApiError::bad_request("name: Required value"))?;
    if !crate::model::refs::is_dns_subdomain(name) {
        return Err(ApiError::bad_request(format!(
            "name: Invalid value: {name:?}: must be a DNS subdomain (lowercase alphanumerics, '-' and '.', at most 253)"
        )));
    }
    Ok((namespace.to_owned(), name.to_owned()))
}

/// A count parameter from 0 to `max`, `default` when absent.
pub fn count_param(
    params: &Params,
    key: &str,
    default: usize,
    max: usize,
) -> Result<usize, ApiError> {
    let Some(raw) = params.get(key) else {
        return Ok(default);
    };
    raw.parse::<usize>()
        .ok()
        .filter(|n| *n <= max)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "{key}: Invalid value: {raw:?}: must be an integer from 0 to {max}"
            ))
        })
}
