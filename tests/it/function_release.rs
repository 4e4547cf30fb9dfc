//! kruntimes function release: a Run holds its request until it is terminal
//! or its function is released. Through the real router, standalone mode:
//! the scheduler stops counting a released Run, so a second Run fits.

use crate::common;

use axum::http::StatusCode;
use common::*;
use kruntimes_scheduler::cache::CacheConfig;
use kruntimes_scheduler::crd::DEFAULT_RELEASED_CONDITION;
use kruntimes_scheduler::serve::{Standalone, standalone};
use kruntimes_scheduler::testkit;
use serde_json::Value;

/// Function Run `fn/f` (handler `h.handle`), `phase` on rp-1, with
/// `conditions` (type, status).
fn function_run(phase: &str, conditions: &[(&str, &str)]) -> Value {
    let run = testkit::run("f", &[])
        .namespace("fn")
        .unset(&["metadata", "resourceVersion"])
        .unset(&["spec", "resources"])
        .set(&["spec", "mode", "function", "handler"], "h.handle")
        .status(phase, Some("rp-1"))
        .set(&["status", "assignedPodUID"], "uid-rp-1");
    conditions
        .iter()
        .fold(run, |r, (t, s)| {
            r.condition(t, s, "FunctionUnregistered", "2026-01-01T00:00:00Z")
        })
        .value()
}

async fn start(config: CacheConfig) -> Standalone {
    let app = standalone(
        config,
        vec![
            testkit::runtime_pod("rp-1", &[("runs", "1")], "2020-01-01T00:00:00Z")
                .namespace("fn")
                .value(),
            function_run("Ready", &[]),
        ],
    )
    .expect("valid");
    heartbeat(&app, "fn").await;
    app
}

/// The plan of a second Run of runtime py: the pod it selects, if any.
async fn second_run_fits(app: &Standalone) -> bool {
    let run = testkit::run("x", &[])
        .namespace("fn")
        .unset(&["metadata", "resourceVersion"])
        .unset(&["spec", "resources"]);
    let r = post(app, "/v1/runs/plan", &run.json()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    match r.body["selected"].as_str() {
        Some(p) => {
            assert_eq!(p, "rp-1");
            true
        }
        None => {
            assert_eq!(r.body["reason"], "InsufficientCapacity", "{}", r.text);
            false
        }
    }
}

async fn update(app: &Standalone, run: Value) {
    let r = post(app, "/v1/objects", &run.to_string()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

async fn runs_used(app: &Standalone) -> Value {
    let r = get(app, "/v1/runtime-pods?namespace=fn").await;
    r.body["items"][0]["usage"]["runs"].clone()
}

#[tokio::test]
async fn released_function_run_is_no_longer_counted_and_a_second_run_fits() {
    let app = start(CacheConfig::default()).await;
    assert_eq!(runs_used(&app).await, "1");
    assert!(
        !second_run_fits(&app).await,
        "the Ready function holds runs 1 of 1"
    );
    // Not released: the condition False, or a condition of another type.
    update(
        &app,
        function_run("Ready", &[(DEFAULT_RELEASED_CONDITION, "False")]),
    )
    .await;
    update(&app, function_run("Ready", &[("Ready", "True")])).await;
    assert!(!second_run_fits(&app).await);
    // kruntimes marks the function released while the Run is still Ready.
    update(
        &app,
        function_run(
            "Ready",
            &[("Ready", "False"), (DEFAULT_RELEASED_CONDITION, "True")],
        ),
    )
    .await;
    assert_eq!(runs_used(&app).await, Value::Null, "nothing used on rp-1");
    assert!(second_run_fits(&app).await);
}

#[tokio::test]
async fn function_run_unregistered_to_a_terminal_phase_is_no_longer_counted() {
    // kruntimes' own release: unregister, then Timeout or Cancelled.
    for phase in ["Timeout", "Cancelled"] {
        let app = start(CacheConfig::default()).await;
        assert!(!second_run_fits(&app).await);
        update(&app, function_run(phase, &[])).await;
        assert!(second_run_fits(&app).await, "{phase}");
    }
}

#[tokio::test]
async fn released_condition_type_is_configurable() {
    let config = CacheConfig {
        released_condition: Some("example.com/Unregistered".into()),
        ..CacheConfig::default()
    };
    let app = start(config).await;
    update(
        &app,
        function_run("Ready", &[(DEFAULT_RELEASED_CONDITION, "True")]),
    )
    .await;
    assert!(!second_run_fits(&app).await, "not the configured type");
    update(
        &app,
        function_run("Ready", &[("example.com/Unregistered", "True")]),
    )
    .await;
    assert!(second_run_fits(&app).await);
    // Configured off: no condition releases.
    let config = CacheConfig {
        released_condition: None,
        ..CacheConfig::default()
    };
    let app = start(config).await;
    update(
        &app,
        function_run("Ready", &[(DEFAULT_RELEASED_CONDITION, "True")]),
    )
    .await;
    assert!(!second_run_fits(&app).await);
}
