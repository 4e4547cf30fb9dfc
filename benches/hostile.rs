//! The worst extender bodies the limits accept (#14), through the real
//! router: time per call (criterion) and bytes allocated per call (printed
//! once per case, counted by this binary's allocator).
//!
//! - `worst/filter/containers`, `worst/prioritize/containers`,
//!   `worst/preempt/containers`: a Pod at the API server's 3 MiB limit
//!   holding as many valid containers as fit (~112,000).
//! - `worst/filter/sidecars`: 16,000 sidecars and 16,000 init containers,
//!   each with its own resource (the init-container peak).
//! - `worst/filter/unoffered`: 20,000 resources no node offers, against
//!   1,000,000 node names.
//! - `worst/filter/names`: 8 MiB of 253-byte node names (the
//!   cache-capable body limit).
//! - `worst/filter/nodelist`: a full NodeList near the 64 MiB limit,
//!   ~30,000 Nodes with 50 allocatable entries each.
//! - `worst/bind/names`: bind with names at their length limits.
//!
//! `cargo bench --bench hostile -- --warm-up-time 1 --measurement-time 3`

use axum::Router;
use criterion::{Criterion, criterion_group, criterion_main};
use kruntimes_scheduler::cache::CacheConfig;
use kruntimes_scheduler::cluster::load::load_path;
use kruntimes_scheduler::extender::limits::{API_MAX_REQUEST_BODY_BYTES, MAX_NODE_NAME_BYTES};
use serde_json::{Value, json};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use tower::ServiceExt as _;

/// Counts every byte allocated (reallocations by their growth).
struct Counting;

static ALLOCATED: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(
            new_size.saturating_sub(layout.size()) as u64,
            Ordering::Relaxed,
        );
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn router() -> Router {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/extender/cluster.yaml");
    let objects = load_path(&path).expect("fixture loads");
    let app = kruntimes_scheduler::serve::standalone(CacheConfig::default(), objects)
        .expect("fixture is valid");
    kruntimes_scheduler::http::router(app.state)
}

fn most_containers_pod() -> String {
    let mut containers = Vec::new();
    let mut len = 0;
    for i in 0.. {
        let c = format!(r#"{{"name":"{i:x}","image":"i"}}"#);
        len += c.len() + 1;
        if len > API_MAX_REQUEST_BODY_BYTES - 200 {
            break;
        }
        containers.push(c);
    }
    format!(
        r#"{{"metadata":{{"name":"p","namespace":"default"}},"spec":{{"containers":[{}]}}}}"#,
        containers.join(",")
    )
}

/// `(name, verb, body)`.
fn cases() -> Vec<(&'static str, &'static str, String)> {
    let pod = most_containers_pod();
    let mut out = vec![
        (
            "filter/containers",
            "filter",
            format!(r#"{{"Pod":{pod},"NodeNames":["n1","n2","n3"]}}"#),
        ),
        (
            "prioritize/containers",
            "prioritize",
            format!(r#"{{"Pod":{pod},"NodeNames":["n1","n2","n3"]}}"#),
        ),
        (
            "preempt/containers",
            "preempt",
            format!(
                r#"{{"Pod":{pod},"NodeNameToMetaVictims":{{"n1":{{"Pods":[{{"UID":"big-uid"}}]}}}}}}"#
            ),
        ),
    ];
    let sidecars: Vec<String> = (0..16_000)
        .map(|i| {
            format!(r#"{{"name":"s{i}","image":"i","restartPolicy":"Always","resources":{{"requests":{{"e.io/r{i}":"1"}}}}}},{{"name":"i{i}","image":"i","resources":{{"requests":{{"e.io/r{i}":"1"}}}}}}"#)
        })
        .collect();
    out.push((
        "filter/sidecars",
        "filter",
        format!(
            r#"{{"Pod":{{"metadata":{{"name":"p"}},"spec":{{"initContainers":[{}]}}}},"NodeNames":["n1","n2"]}}"#,
            sidecars.join(",")
        ),
    ));
    let requests: Vec<String> = (0..20_000).map(|i| format!(r#""e.io/r{i}":"1""#)).collect();
    out.push((
        "filter/unoffered",
        "filter",
        format!(
            r#"{{"Pod":{{"spec":{{"containers":[{{"name":"c","image":"i","resources":{{"requests":{{{}}}}}}}]}}}},"NodeNames":[{}]}}"#,
            requests.join(","),
            vec![r#""n1""#; 1_000_000].join(",")
        ),
    ));
    let names: Vec<String> = (0..(8 << 20) / (MAX_NODE_NAME_BYTES + 3) - 10)
        .map(|i| format!("\"{i:08}{}\"", "x".repeat(MAX_NODE_NAME_BYTES - 8)))
        .collect();
    out.push((
        "filter/names",
        "filter",
        format!(
            r#"{{"Pod":{{"spec":{{"containers":[{{"name":"c","image":"i","resources":{{"requests":{{"cpu":"1"}}}}}}]}}}},"NodeNames":[{}]}}"#,
            names.join(",")
        ),
    ));
    let alloc: serde_json::Map<String, Value> = (0..50)
        .map(|i| (format!("example.com/resource-{i}"), json!("10")))
        .chain([
            ("cpu".to_owned(), json!("8")),
            ("pods".to_owned(), json!("110")),
        ])
        .collect();
    let mut items = Vec::new();
    let mut len = 0;
    for i in 0.. {
        let node =
            json!({"metadata": {"name": format!("node-{i:06}")}, "status": {"allocatable": alloc}})
                .to_string();
        len += node.len() + 1;
        if len > (64 << 20) - 4096 {
            break;
        }
        items.push(node);
    }
    let small_pod = r#"{"metadata":{"name":"p","namespace":"default"},"spec":{"containers":[{"name":"c","image":"i","resources":{"requests":{"cpu":"1","example.com/resource-3":"1"}}}]}}"#;
    out.push((
        "filter/nodelist",
        "filter",
        format!(
            r#"{{"Pod":{small_pod},"Nodes":{{"items":[{}]}}}}"#,
            items.join(",")
        ),
    ));
    out.push((
        "bind/names",
        "bind",
        json!({"PodName": "p".repeat(253), "PodNamespace": "n".repeat(63),
            "PodUID": "u".repeat(128), "Node": "n".repeat(253)})
        .to_string(),
    ));
    out
}

async fn call(router: &Router, verb: &str, body: &bytes::Bytes) -> axum::http::StatusCode {
    let req = axum::http::Request::post(format!("/scheduler/{verb}"))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.clone()))
        .expect("request");
    let resp = router.clone().oneshot(req).await.expect("infallible");
    let status = resp.status();
    let _ = axum::body::to_bytes(resp.into_body(), usize::MAX).await;
    status
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let router = router();
    let mut group = c.benchmark_group("worst");
    group.sample_size(10);
    for (name, verb, body) in cases() {
        let body = bytes::Bytes::from(body);
        let before = ALLOCATED.load(Ordering::Relaxed);
        let start = std::time::Instant::now();
        let status = rt.block_on(call(&router, verb, &body));
        let elapsed = start.elapsed();
        let allocated = ALLOCATED.load(Ordering::Relaxed) - before;
        println!(
            "{name}: {} bytes -> {status}, one call {elapsed:?}, {allocated} bytes allocated ({:.1} per body byte)",
            body.len(),
            allocated as f64 / body.len() as f64
        );
        group.bench_function(name, |b| b.iter(|| rt.block_on(call(&router, verb, &body))));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
