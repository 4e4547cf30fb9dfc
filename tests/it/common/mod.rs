//! Shared helpers: build the real standalone service and call its router.
#![allow(dead_code)]

use axum::http::{Method, StatusCode};
use kruntimes_scheduler::cache::CacheConfig;
use kruntimes_scheduler::cluster::load::load_path;
use kruntimes_scheduler::http::router;
use kruntimes_scheduler::serve::{Standalone, standalone};
use kruntimes_scheduler::testkit;
use std::path::Path;

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

pub use kruntimes_scheduler::testkit::Resp;

/// One request through the service's router.
pub async fn call(app: &Standalone, method: Method, uri: &str, body: Option<&str>) -> Resp {
    testkit::call(router(app.state.clone()), method, uri, body).await
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
