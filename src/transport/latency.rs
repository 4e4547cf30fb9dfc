//! Per-route latency as a tower middleware: the time from the request
//! reaching the route to its response being ready, for every answer,
//! including 4xx/5xx ones and body-decode rejections (the handler-side
//! timing it replaces missed those).
//!
//! The layer is generic over a [`LatencyObserver`], so this module knows
//! nothing about the metrics registry: the metrics module implements the
//! observer and the surfaces put one layer on each route.

use futures::future::BoxFuture;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tower::{Layer, Service};

/// Receives one sample per request.
pub trait LatencyObserver: Clone + Send + Sync + 'static {
    /// How long one request took.
    fn observe(&self, elapsed: Duration);
}

impl<F> LatencyObserver for F
where
    F: Fn(Duration) + Clone + Send + Sync + 'static,
{
    fn observe(&self, elapsed: Duration) {
        self(elapsed)
    }
}

/// Times every request of the service it wraps.
#[derive(Debug, Clone)]
pub struct LatencyLayer<O> {
    observer: O,
}

impl<O: LatencyObserver> LatencyLayer<O> {
    pub fn new(observer: O) -> Self {
        LatencyLayer { observer }
    }
}

impl<S, O: LatencyObserver> Layer<S> for LatencyLayer<O> {
    type Service = Latency<S, O>;

    fn layer(&self, inner: S) -> Self::Service {
        Latency {
            inner,
            observer: self.observer.clone(),
        }
    }
}

/// The service [`LatencyLayer`] makes.
#[derive(Debug, Clone)]
pub struct Latency<S, O> {
    inner: S,
    observer: O,
}

impl<S, O, Req> Service<Req> for Latency<S, O>
where
    S: Service<Req>,
    S::Future: Send + 'static,
    O: LatencyObserver,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let start = Instant::now();
        let fut = self.inner.call(req);
        let observer = self.observer.clone();
        Box::pin(async move {
            let out = fut.await;
            observer.observe(start.elapsed());
            out
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{ApiError, JsonBody};
    use axum::Router;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::routing::post;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::ServiceExt as _;

    async fn echo(JsonBody(v): JsonBody<serde_json::Value>) -> Result<String, ApiError> {
        if v.get("fail").is_some() {
            return Err(ApiError::unprocessable("fail: asked to"));
        }
        Ok(v.to_string())
    }

    #[tokio::test]
    async fn every_answer_is_timed_including_failures() {
        let seen = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&seen);
        let app = Router::new().route(
            "/echo",
            post(echo).layer(LatencyLayer::new(move |_: Duration| {
                counter.fetch_add(1, Ordering::Relaxed);
            })),
        );
        for (body, status) in [
            ("{}", StatusCode::OK),
            ("{\"fail\":1}", StatusCode::UNPROCESSABLE_ENTITY),
            ("{not json", StatusCode::BAD_REQUEST),
        ] {
            let resp = app
                .clone()
                .oneshot(
                    Request::post("/echo")
                        .body(Body::from(body))
                        .expect("request"),
                )
                .await
                .expect("infallible");
            assert_eq!(resp.status(), status, "{body}");
        }
        assert_eq!(seen.load(Ordering::Relaxed), 3);
        // Other routes are not timed by this route's layer.
        let resp = app
            .oneshot(Request::get("/other").body(Body::empty()).expect("request"))
            .await
            .expect("infallible");
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        assert_eq!(seen.load(Ordering::Relaxed), 3);
    }
}
