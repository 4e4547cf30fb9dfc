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
pub use latency::{LatencyLayer, LatencyObserver};

use axum::http::StatusCode;
use std::time::Duration;

/// Largest request body accepted (bigger bodies get 413).
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

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
}
