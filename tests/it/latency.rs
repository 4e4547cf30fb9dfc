//! Per-route latency is a middleware: failed requests (decode errors, 4xx)
//! are timed under their operation as well as successful ones.

use crate::common;

use axum::http::StatusCode;
use common::{app, get, post};

/// The sample count of `decision_duration_seconds` for one operation (label `operation`, formerly `endpoint`).
fn samples(metrics: &str, operation: &str) -> u64 {
    let label = format!("operation=\"{operation}\"");
    metrics
        .lines()
        .find(|l| l.starts_with("kruntimes_decision_duration_seconds_count{") && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0, |n| n.parse().expect("a count"))
}

#[tokio::test]
async fn failed_extender_requests_are_counted_in_the_latency_histogram() {
    let app = app("state.yaml");
    let before = get(&app, "/metrics").await.text;
    assert_eq!(samples(&before, "ExtenderFilter"), 0);

    let r = post(&app, "/scheduler/filter", "{not json").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    let r = post(&app, "/scheduler/filter", r#"{"Pod": 5}"#).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    let r = post(&app, "/scheduler/bind", "").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    let r = post(&app, "/v1/runs/plan", "[]").await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);

    let m = get(&app, "/metrics").await.text;
    assert_eq!(samples(&m, "ExtenderFilter"), 2, "{m}");
    assert_eq!(samples(&m, "ExtenderBind"), 1, "{m}");
    assert_eq!(samples(&m, "Plan"), 1, "{m}");
    // A wrong method is not a decision: it is not timed.
    let r = get(&app, "/scheduler/prioritize").await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{}", r.text);
    let m = get(&app, "/metrics").await.text;
    assert_eq!(samples(&m, "ExtenderPrioritize"), 0, "{m}");
}
