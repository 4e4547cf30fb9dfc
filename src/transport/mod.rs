//! Transport plumbing shared by every HTTP surface: the JSON error shape
//! ([`ApiError`]), body and query extractors, body limits, the JSON 404/405
//! fallbacks, per-route latency timing ([`latency`]), duration parsing and
//! the shutdown signal.
//!
//! This module is a leaf: it imports nothing else from the crate, so every
//! surface (the Run API, admission, the extender, the agent) can use it
//! without depending on another surface.

pub mod error;
pub mod latency;

pub use error::{ApiError, Body, JsonBody, Params, decode_json};
pub use latency::{Answer, LatencyLayer, LatencyObserver};

use axum::http::StatusCode;
use std::time::Duration;

/// Largest request body accepted (bigger bodies get 413).
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// The body limit in force on a router, carried to [`Body`] as a request
/// extension so that a 413 names the limit that applied and what sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimit {
    /// The largest body accepted, in bytes.
    pub bytes: usize,
    /// What the limit belongs to, and the flag that sets it if any, for the
    /// 413 message (`"the object API"`, `"the extender (--extender-…)"`).
    pub of: &'static str,
}

impl Default for BodyLimit {
    fn default() -> Self {
        BodyLimit {
            bytes: MAX_BODY_BYTES,
            of: "this API",
        }
    }
}

/// The layers that enforce `limit` on a router and tell [`Body`] about it:
/// axum's `DefaultBodyLimit` plus the [`BodyLimit`] extension. A router
/// layered inside another overrides the outer limit for its routes.
pub fn body_limit(
    limit: BodyLimit,
) -> (axum::Extension<BodyLimit>, axum::extract::DefaultBodyLimit) {
    (
        axum::Extension(limit),
        axum::extract::DefaultBodyLimit::max(limit.bytes),
    )
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

/// Parses `500ms`, `15s`, `5m`, `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("invalid duration {s:?} ({e}); write e.g. 500ms, 15s, 5m, 12h, 30d"))
}

/// Completes on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_or_explain() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        let err = parse_duration("soon").unwrap_err();
        assert!(err.contains("\"soon\"") && err.contains("15s"), "{err}");
    }

    /// A 413 names the limit of the router that refused it: an inner
    /// router's own limit overrides the outer one, in force and in words.
    #[tokio::test]
    async fn a_413_names_the_limit_that_applied() {
        use axum::Router;
        use axum::routing::post;
        use tower::ServiceExt;
        async fn echo(Body(b): Body) -> String {
            b.len().to_string()
        }
        let inner = Router::new()
            .route("/small", post(echo))
            .layer(body_limit(BodyLimit {
                bytes: 16,
                of: "the small route (--small-limit)",
            }));
        let app = Router::new()
            .route("/big", post(echo))
            .merge(inner)
            .layer(body_limit(BodyLimit {
                bytes: 64,
                of: "the API",
            }));
        let call = |path: &'static str, n: usize| {
            let app = app.clone();
            async move {
                let req = axum::http::Request::post(path)
                    .body(axum::body::Body::from(vec![b'x'; n]))
                    .unwrap();
                let resp = app.oneshot(req).await.unwrap();
                let status = resp.status();
                let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
                    .await
                    .unwrap();
                (status, String::from_utf8_lossy(&body).into_owned())
            }
        };
        assert_eq!(call("/small", 16).await, (StatusCode::OK, "16".into()));
        let (status, body) = call("/small", 17).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(
            body.contains("larger than 16 bytes, the limit of the small route (--small-limit)"),
            "{body}"
        );
        assert_eq!(call("/big", 40).await, (StatusCode::OK, "40".into()));
        let (status, body) = call("/big", 65).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(
            body.contains("larger than 64 bytes, the limit of the API"),
            "{body}"
        );
    }
}
