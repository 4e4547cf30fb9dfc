//! Authentication and authorization of the network-reachable read surfaces
//! in cluster mode (the Run API and `/metrics`), as kube-rbac-proxy and
//! controller-runtime's metrics filter do it: the caller's bearer token is
//! checked with a `TokenReview`, and the user it names is checked with a
//! `SubjectAccessReview` for what the request reads:
//!
//! | request | access checked |
//! | --- | --- |
//! | `/v1/runs`, `/v1/runs/plan`, `/v1/runtime-pods` | `get` on `runs.kruntimes.io`, in the `namespace` query parameter's namespace (all namespaces without one) |
//! | `/v1/explain/run` | as the Run API |
//! | `/v1/explain/pod` | `get` on `pods` (core group), in the `namespace` query parameter's namespace |
//! | `/metrics` | `get` on the non-resource URL `/metrics` |
//!
//! No token, or one the API server does not authenticate: `401`. An
//! authenticated user without that access: `403`. The API server not
//! answering: `503` (fail closed). Decisions are cached for a short time
//! (`--auth-cache-ttl`, default 10s) in a bounded table, so a scrape every
//! few seconds costs no API call. Health endpoints are never checked;
//! standalone mode has no checks at all.

use crate::transport::ApiError;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most decisions kept; a full table drops its expired entries, then all.
pub const MAX_CACHED_DECISIONS: usize = 4096;
/// Longest bearer token looked at (service account tokens are ~1 KB).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// What a request reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Access {
    /// A resource: `verb` on `group`/`resource` in `namespace` (`""`: all).
    Resource {
        group: &'static str,
        resource: &'static str,
        verb: &'static str,
        namespace: String,
    },
    /// A non-resource URL.
    NonResource {
        path: &'static str,
        verb: &'static str,
    },
}

/// The outcome of checking one token for one access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// The token is not valid (401).
    Unauthenticated(String),
    /// The user may not (403).
    Forbidden(String),
}

/// Recent decisions by (token, access).
type Decisions = HashMap<(String, Access), (Verdict, Instant)>;

/// Checks callers against the API server; cheap to clone.
#[derive(Clone)]
pub struct AccessControl {
    client: kube::Client,
    ttl: Duration,
    cache: Arc<Mutex<Decisions>>,
}

impl AccessControl {
    pub fn new(client: kube::Client, ttl: Duration) -> Self {
        AccessControl {
            client,
            ttl,
            cache: Arc::default(),
        }
    }

    /// Checks `token` for `access`, from the cache when a decision is fresh.
    pub async fn check(&self, token: &str, access: &Access) -> Result<Verdict, ApiError> {
        let key = (token.to_owned(), access.clone());
        if let Some((v, at)) = self.cache.lock().get(&key)
            && at.elapsed() < self.ttl
        {
            return Ok(v.clone());
        }
        let verdict = self.review(token, access).await?;
        let mut cache = self.cache.lock();
        if cache.len() >= MAX_CACHED_DECISIONS {
            let ttl = self.ttl;
            cache.retain(|_, (_, at)| at.elapsed() < ttl);
            if cache.len() >= MAX_CACHED_DECISIONS {
                cache.clear();
            }
        }
        cache.insert(key, (verdict.clone(), Instant::now()));
        Ok(verdict)
    }

    async fn review(&self, token: &str, access: &Access) -> Result<Verdict, ApiError> {
        let unavailable = |what: &str, e: kube::Error| {
            tracing::warn!(error = %e, "{what} failed; refusing the request");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "cannot check the caller's access right now ({what} failed); retry shortly"
                ),
            )
        };
        let tr = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let tr = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &tr)
            .await
            .map_err(|e| unavailable("TokenReview", e))?;
        let status = tr.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => user,
            _ => {
                return Ok(Verdict::Unauthenticated(
                    status
                        .error
                        .unwrap_or_else(|| "the token is not valid".into()),
                ));
            }
        };
        let mut spec = SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups,
            uid: user.uid,
            extra: user.extra,
            ..SubjectAccessReviewSpec::default()
        };
        match access {
            Access::Resource {
                group,
                resource,
                verb,
                namespace,
            } => {
                spec.resource_attributes = Some(ResourceAttributes {
                    group: Some((*group).into()),
                    resource: Some((*resource).into()),
                    verb: Some((*verb).into()),
                    namespace: (!namespace.is_empty()).then(|| namespace.clone()),
                    ..ResourceAttributes::default()
                })
            }
            Access::NonResource { path, verb } => {
                spec.non_resource_attributes = Some(NonResourceAttributes {
                    path: Some((*path).into()),
                    verb: Some((*verb).into()),
                })
            }
        }
        let sar = SubjectAccessReview {
            spec,
            ..SubjectAccessReview::default()
        };
        let sar = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &sar)
            .await
            .map_err(|e| unavailable("SubjectAccessReview", e))?;
        let status = sar.status.unwrap_or_default();
        let who = user.username.unwrap_or_default();
        Ok(if status.allowed && !status.denied.unwrap_or(false) {
            Verdict::Allowed
        } else {
            Verdict::Forbidden(format!("user {who:?} may not {}", describe(access)))
        })
    }
}

fn describe(access: &Access) -> String {
    match access {
        Access::Resource {
            group,
            resource,
            verb,
            namespace,
        } => {
            let scope = if namespace.is_empty() {
                "all namespaces".to_owned()
            } else {
                format!("namespace {namespace:?}")
            };
            if group.is_empty() {
                format!("{verb} {resource} in {scope}")
            } else {
                format!("{verb} {resource}.{group} in {scope}")
            }
        }
        Access::NonResource { path, verb } => format!("{verb} {path}"),
    }
}

/// The bearer token of a request, if it carries one.
pub fn bearer(req: &Request) -> Option<&str> {
    let v = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && token.len() <= MAX_TOKEN_BYTES)
        .then_some(token)
}

fn query_param<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.uri()
        .query()?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

async fn enforce(ac: &AccessControl, req: Request, next: Next, access: Access) -> Response {
    let Some(token) = bearer(&req) else {
        return unauthorized("a bearer token is required (Authorization: Bearer <token>)");
    };
    match ac.check(token, &access).await {
        Ok(Verdict::Allowed) => next.run(req).await,
        Ok(Verdict::Unauthenticated(why)) => unauthorized(&why),
        Ok(Verdict::Forbidden(why)) => ApiError::new(StatusCode::FORBIDDEN, why).into_response(),
        Err(e) => e.into_response(),
    }
}

fn unauthorized(why: &str) -> Response {
    let mut r =
        ApiError::new(StatusCode::UNAUTHORIZED, format!("unauthorized: {why}")).into_response();
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    r
}

/// `get` on `group/resource` in the `namespace` query parameter's
/// namespace (a namespace name is a DNS label; anything else, or none, is
/// checked cluster-wide).
async fn require_resource_read(
    ac: &AccessControl,
    req: Request,
    next: Next,
    group: &'static str,
    resource: &'static str,
) -> Response {
    let namespace = query_param(&req, "namespace")
        .filter(|ns| crate::workload::is_dns_label(ns))
        .unwrap_or_default()
        .to_owned();
    let access = Access::Resource {
        group,
        resource,
        verb: "get",
        namespace,
    };
    enforce(ac, req, next, access).await
}

/// Middleware of the Run API: `get` on `runs.kruntimes.io`.
pub async fn require_run_read(
    State(ac): State<AccessControl>,
    req: Request,
    next: Next,
) -> Response {
    require_resource_read(&ac, req, next, "kruntimes.io", "runs").await
}

/// Middleware of `/v1/explain/pod`: `get` on `pods` in the `namespace`
/// query parameter's namespace (all namespaces without a valid one).
pub async fn require_pod_read(
    State(ac): State<AccessControl>,
    req: Request,
    next: Next,
) -> Response {
    require_resource_read(&ac, req, next, "", "pods").await
}

/// Middleware of `/metrics`: non-resource `get /metrics`.
pub async fn require_metrics_read(
    State(ac): State<AccessControl>,
    req: Request,
    next: Next,
) -> Response {
    let access = Access::NonResource {
        path: "/metrics",
        verb: "get",
    };
    enforce(&ac, req, next, access).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(auth: Option<&str>) -> Request {
        let mut b = axum::http::Request::builder().uri("/v1/runs?namespace=a&x=1");
        if let Some(a) = auth {
            b = b.header(header::AUTHORIZATION, a);
        }
        b.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn bearer_tokens_are_read_strictly() {
        assert_eq!(bearer(&req(Some("Bearer abc"))), Some("abc"));
        assert_eq!(bearer(&req(Some("bearer  abc "))), Some("abc"));
        assert_eq!(bearer(&req(Some("Basic abc"))), None);
        assert_eq!(bearer(&req(Some("Bearer "))), None);
        assert_eq!(bearer(&req(None)), None);
        let long = format!("Bearer {}", "x".repeat(MAX_TOKEN_BYTES + 1));
        assert_eq!(bearer(&req(Some(&long))), None);
        assert_eq!(query_param(&req(None), "namespace"), Some("a"));
        assert_eq!(query_param(&req(None), "y"), None);
    }
}
