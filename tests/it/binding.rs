//! DRA binding conditions through `POST /scheduler/bind`, standalone mode,
//! on tokio's paused clock: waits take no real time.

use crate::common;

use axum::http::StatusCode;
use common::{app, get, post};
use kruntimes_scheduler::extender::bind::device_gate::{BindingConfig, BindingGate};
use kruntimes_scheduler::serve::Standalone;
use kruntimes_scheduler::testkit;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// Claim `gpu`, allocated for `gpu-pod`: device gpu-0 binds once `Attached`
/// is True and has failed when `AttachFailed` is; `conditions` are what the
/// driver reports for it.
fn claim(conditions: &[(&str, &str)]) -> Value {
    testkit::claim("gpu", "gpu.example.com")
        .allocated(&[("gpu.example.com", "n1", "gpu-0")])
        .binding_conditions(0, &["Attached"], &["AttachFailed"])
        .device_conditions(
            ("gpu.example.com", "n1", "gpu-0"),
            conditions,
            "2026-01-01T00:00:00Z",
        )
        .reserved_for(&[("gpu-pod", "gpu-pod-uid")])
        .value()
}

/// A node, the pod and its claim with no condition reported yet.
fn cluster() -> Standalone {
    let app = app("");
    let pod = testkit::pod("gpu-pod")
        .namespace("default")
        .requests(&[("cpu", "3")])
        .uses_claim("gpu", Some("gpu"), None);
    set(
        &app,
        testkit::list([
            testkit::node("n1").value(),
            testkit::slice("s1", "gpu.example.com", "n1", &["gpu-0"]).value(),
            pod.value(),
            claim(&[]),
        ]),
    );
    app
}

/// Upserts objects through the store directly (no await: the paused clock
/// does not move).
fn set(app: &Standalone, v: Value) {
    let items = match v.get("items") {
        Some(Value::Array(a)) => a.clone(),
        _ => vec![v],
    };
    app.store.upsert(items).expect("valid objects");
}

const BIND: &str =
    r#"{"PodName":"gpu-pod","PodNamespace":"default","PodUID":"gpu-pod-uid","Node":"n1"}"#;

/// Starts a bind call; resolves to its `Error`.
fn bind(app: &Standalone) -> tokio::task::JoinHandle<String> {
    let router = kruntimes_scheduler::http::router(app.state.clone());
    tokio::spawn(async move {
        let req = axum::http::Request::post("/scheduler/bind")
            .header("content-type", "application/json")
            .body(axum::body::Body::from(BIND))
            .unwrap();
        let resp = router.oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let b = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        serde_json::from_slice::<Value>(&b).unwrap()["Error"]
            .as_str()
            .unwrap()
            .to_owned()
    })
}

async fn node_of(app: &Standalone) -> Option<String> {
    let r = get(app, "/v1/objects?kind=Pod&namespace=default&name=gpu-pod").await;
    r.body["items"][0]["spec"]["nodeName"]
        .as_str()
        .map(str::to_owned)
}

async fn stored_claim(app: &Standalone) -> Value {
    let r = get(
        app,
        "/v1/objects?kind=ResourceClaim&namespace=default&name=gpu",
    )
    .await;
    r.body["items"][0].clone()
}

fn cpu_on_n1(app: &Standalone) -> u64 {
    app.state
        .extender
        .nodes
        .read()
        .used("n1", "cpu")
        .unwrap_or(0)
}

#[tokio::test(start_paused = true)]
async fn the_pod_binds_once_its_device_reports_the_condition() {
    let app = cluster();
    let start = tokio::time::Instant::now();
    let call = bind(&app);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!call.is_finished());
    assert_eq!(node_of(&app).await, None);
    // Held meanwhile: the pod is counted on n1 already.
    assert_eq!(cpu_on_n1(&app), 3000);
    // Another condition changes nothing; Attached=True lets the bind through.
    set(&app, claim(&[("Attached", "False")]));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!call.is_finished());
    set(&app, claim(&[("Attached", "True")]));
    assert_eq!(call.await.unwrap(), "");
    assert_eq!(start.elapsed(), Duration::from_secs(4));
    assert_eq!(node_of(&app).await.as_deref(), Some("n1"));
    assert!(stored_claim(&app).await["status"]["allocation"].is_object());
}

#[tokio::test(start_paused = true)]
async fn a_failure_condition_clears_the_allocation_in_the_store() {
    let app = cluster();
    let call = bind(&app);
    tokio::time::sleep(Duration::from_secs(2)).await;
    set(
        &app,
        claim(&[("Attached", "False"), ("AttachFailed", "True")]),
    );
    let err = call.await.unwrap();
    assert!(err.contains("claim default/gpu"), "{err}");
    assert!(err.contains("AttachFailed is True"), "{err}");
    assert!(err.contains("allocation cleared"), "{err}");
    assert_eq!(node_of(&app).await, None);
    let c = stored_claim(&app).await;
    for field in ["allocation", "devices", "reservedFor"] {
        assert!(c["status"].get(field).is_none(), "{field}: {c}");
    }
    // The assumption is dropped, and the cleared claim gates nothing.
    assert_eq!(cpu_on_n1(&app), 0);
    assert!(
        app.state
            .extender
            .nodes
            .read()
            .claim_binding("default/gpu")
            .is_none()
    );
}

#[tokio::test(start_paused = true)]
async fn waits_end_in_an_error_and_the_timeout_clears_the_allocation() {
    let mut app = cluster();
    app.state.extender.binding = Arc::new(BindingGate::new(BindingConfig {
        timeout: Duration::from_secs(25),
        wait: Duration::from_secs(10),
    }));
    let start = tokio::time::Instant::now();
    for at in [10, 20] {
        let err = bind(&app).await.unwrap();
        assert!(
            err.contains("waiting for device binding conditions") && err.contains("needs Attached"),
            "{err}"
        );
        assert_eq!(start.elapsed(), Duration::from_secs(at));
        assert!(stored_claim(&app).await["status"]["allocation"].is_object());
        assert_eq!(cpu_on_n1(&app), 0, "a failed bind keeps no assumption");
    }
    let err = bind(&app).await.unwrap();
    assert!(err.contains("not met within 25s"), "{err}");
    assert_eq!(start.elapsed(), Duration::from_secs(25));
    assert!(
        stored_claim(&app).await["status"]
            .get("allocation")
            .is_none()
    );
    assert_eq!(node_of(&app).await, None);
    // An object API write of a cleared claim is an ordinary upsert.
    let r = post(
        &app,
        "/v1/objects",
        &claim(&[("Attached", "True")]).to_string(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(bind(&app).await.unwrap(), "");
    assert_eq!(node_of(&app).await.as_deref(), Some("n1"));
}
