//! Shared helpers: build the real standalone service and call its router.
#![allow(dead_code)]

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use kruntimes_scheduler::cache::CacheConfig;
use kruntimes_scheduler::cluster::load::load_path;
use kruntimes_scheduler::http::router;
use kruntimes_scheduler::serve::{Standalone, standalone};
use serde_json::Value;
use std::path::Path;
use tower::ServiceExt;

pub fn data(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The standalone service over `tests/data/<file>`.
pub fn app(file: &str) -> Standalone {
    let objects = if file.is_empty() {
        Vec::new()
    } else {
        load_path(&data(file)).expect("fixture loads")
    };
    standalone(CacheConfig::default(), objects).expect("fixture is valid")
}

pub struct Resp {
    pub status: StatusCode,
    pub body: Value,
    pub text: String,
}

pub async fn call(app: &Standalone, method: Method, uri: &str, body: Option<&str>) -> Resp {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(
            body.map(|b| Body::from(b.to_owned()))
                .unwrap_or_else(Body::empty),
        )
        .unwrap();
    let resp = router(app.state.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Resp { status, body, text }
}

pub async fn get(app: &Standalone, uri: &str) -> Resp {
    call(app, Method::GET, uri, None).await
}

pub async fn post(app: &Standalone, uri: &str, body: &str) -> Resp {
    call(app, Method::POST, uri, Some(body)).await
}

/// Freshens every Runtime Pod heartbeat in `ns`, as runtimed would.
pub async fn heartbeat(app: &Standalone, ns: &str) {
    let r = post(
        app,
        &format!("/v1/runtime-pods/heartbeat?namespace={ns}"),
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}
