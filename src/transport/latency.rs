//! Per-route latency as a tower middleware: the time from the request
//! reaching the route to its response being ready, for every answer,
//! including 4xx/5xx ones and body-decode rejections (the handler-side
//! timing it replaces missed those).
//!
//! The layer is generic over a [`LatencyObserver`], so this module knows
//! nothing about the metrics registry: the metrics module implements the
//! observer and the surfaces put one layer on each route. The observer is
//! told how the request ended ([`Answer`]): the response's status and
//! extensions (where a handler can leave a marker of its own, such as an
//! admission verdict or an extender error answered in a 200), or that no
//! response came (the request future was dropped: caller gone, timeout).

use axum::http::{Extensions, Response, StatusCode};
use futures::future::BoxFuture;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tower::{Layer, Service};

/// How a timed request ended.
#[derive(Debug, Clone, Copy)]
pub enum Answer<'a> {
    /// A response is ready: its status and extensions.
    Response {
        status: StatusCode,
        extensions: &'a Extensions,
    },
    /// No response: the request future was dropped before it finished
    /// (the caller went away, or an outer timeout fired), or the inner
    /// service failed.
    Dropped,
}

/// Receives one sample per request.
pub trait LatencyObserver: Clone + Send + Sync + 'static {
    /// How long one request took, and how it ended.
    fn observe(&self, elapsed: Duration, answer: Answer<'_>);
}

impl<F> LatencyObserver for F
where
    F: Fn(Duration, Answer<'_>) + Clone + Send + Sync + 'static,
{
    fn observe(&self, elapsed: Duration, answer: Answer<'_>) {
        self(elapsed, answer)
    }
}

/// Observes [`Answer::Dropped`] unless disarmed: a request future dropped
/// mid-flight is still timed.
struct DropGuard<O: LatencyObserver> {
    observer: Option<O>,
    start: Instant,
}

impl<O: LatencyObserver> Drop for DropGuard<O> {
    fn drop(&mut self) {
        if let Some(o) = self.observer.take() {
            o.observe(self.start.elapsed(), Answer::Dropped);
        }
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

impl<S, O, Req, B> Service<Req> for Latency<S, O>
where
    S: Service<Req, Response = Response<B>>,
    S::Future: Send + 'static,
    B: Send + 'static,
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
        let mut guard = DropGuard {
            observer: Some(self.observer.clone()),
            start,
        };
        Box::pin(async move {
            let out = fut.await;
            if let (Ok(resp), Some(observer)) = (&out, guard.observer.take()) {
                observer.observe(
                    start.elapsed(),
                    Answer::Response {
                        status: resp.status(),
                        extensions: resp.extensions(),
                    },
                );
            }
            // An inner error leaves the guard armed: observed as dropped.
            drop(guard);
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
            post(echo).layer(LatencyLayer::new(move |_: Duration, _: Answer<'_>| {
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

    #[tokio::test]
    async fn the_observer_sees_the_status_extensions_and_drops() {
        #[derive(Clone, Copy, Debug, PartialEq)]
        struct Marker;
        type Seen = Arc<parking_lot::Mutex<Vec<(Option<StatusCode>, bool)>>>;
        let seen: Seen = Arc::default();
        let sink = Arc::clone(&seen);
        let layer = LatencyLayer::new(move |_: Duration, a: Answer<'_>| {
            sink.lock().push(match a {
                Answer::Response { status, extensions } => {
                    (Some(status), extensions.get::<Marker>().is_some())
                }
                Answer::Dropped => (None, false),
            });
        });
        async fn marked() -> axum::response::Response {
            let mut r = axum::response::IntoResponse::into_response("ok");
            r.extensions_mut().insert(Marker);
            r
        }
        async fn slow() -> &'static str {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            "late"
        }
        let app = Router::new()
            .route("/marked", post(marked).layer(layer.clone()))
            .route("/slow", post(slow).layer(layer));
        let resp = app
            .clone()
            .oneshot(
                Request::post("/marked")
                    .body(Body::empty())
                    .expect("request"),
            )
            .await
            .expect("infallible");
        assert_eq!(resp.status(), StatusCode::OK);
        // The slow route's future is dropped by a timeout around it.
        let dropped = tokio::time::timeout(
            Duration::from_millis(20),
            app.oneshot(Request::post("/slow").body(Body::empty()).expect("request")),
        )
        .await;
        assert!(dropped.is_err(), "the slow route cannot answer in time");
        assert_eq!(
            *seen.lock(),
            vec![(Some(StatusCode::OK), true), (None, false)]
        );
    }
}
