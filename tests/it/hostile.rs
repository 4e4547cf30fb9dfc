//! Hostile clients and hostile requests (#14): connections that send their
//! headers or bodies slowly, more connections or requests than a listener
//! admits, and extender request bodies built to be expensive.

use crate::common;

use axum::Router;
use axum::routing::get;
use kruntimes_scheduler::tls::{ConnLimits, serve_with};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Generous: a bound the server must meet, not a speed measurement.
const PATIENCE: Duration = Duration::from_secs(10);

fn tight() -> ConnLimits {
    ConnLimits {
        max_connections: 2,
        max_in_flight: 1,
        header_read_timeout: Duration::from_millis(300),
        body_read_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(400),
        h2_keep_alive: Duration::from_secs(5),
        ..ConnLimits::default()
    }
}

/// Serves `router` within `limits` on a loopback port.
async fn start(router: Router, limits: ConnLimits) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_with(
        listener,
        router,
        None,
        limits,
        std::future::pending(),
    ));
    addr
}

fn hello() -> Router {
    Router::new().route("/hello", get(|| async { "hi" }))
}

/// Reads until the server closes; the bytes read.
async fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, s.read_to_end(&mut out))
        .await
        .expect("the server closes the connection in time");
    out
}

/// Reads one response head (up to the blank line), or `None` when
/// nothing arrives within `wait`.
async fn response_within(s: &mut TcpStream, wait: Duration) -> Option<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    let read = async {
        while !buf.ends_with(b"\r\n\r\n") {
            if s.read(&mut byte).await.ok()? == 0 {
                return None;
            }
            buf.push(byte[0]);
        }
        Some(())
    };
    tokio::time::timeout(wait, read).await.ok().flatten()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

const GET: &[u8] = b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n";

#[tokio::test]
async fn a_slowloris_connection_is_closed_after_the_header_timeout() {
    let addr = start(hello(), tight()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /hello HTTP/1.1\r\n").await.unwrap();
    // One header byte every 100 ms: never a whole header block.
    let drip = async {
        for _ in 0..200 {
            if s.write_all(b"x").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the server kept a dripping connection open for 20 s");
    };
    drip.await;
    let rest = read_to_close(&mut s).await;
    assert!(!String::from_utf8_lossy(&rest).contains("200 OK"));
}

#[tokio::test]
async fn connections_beyond_the_bound_wait_until_one_closes() {
    let addr = start(hello(), tight()).await;
    let mut a = TcpStream::connect(addr).await.unwrap();
    let mut b = TcpStream::connect(addr).await.unwrap();
    for s in [&mut a, &mut b] {
        s.write_all(GET).await.unwrap();
        let head = response_within(s, PATIENCE).await.expect("served");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
    // A third connection is not served while two are open...
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(GET).await.unwrap();
    assert_eq!(
        response_within(&mut c, Duration::from_millis(250)).await,
        None
    );
    // ... and is once one of them closes.
    drop(a);
    let head = response_within(&mut c, PATIENCE).await.expect("served");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
}

#[tokio::test]
async fn an_idle_connection_is_closed() {
    let addr = start(hello(), tight()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(GET).await.unwrap();
    assert!(response_within(&mut s, PATIENCE).await.is_some());
    // Keep-alive, then nothing: closed after the idle timeout.
    read_to_close(&mut s).await;
}

/// hyper starts its header read timeout as soon as a keep-alive
/// connection goes idle, so an HTTP/1 connection with no new request
/// within `--header-read-timeout` is closed even when `--idle-timeout` is
/// longer. kube-scheduler's client (Go's transport) sees the close of its
/// pooled connection and dials a new one for the next request; the
/// loopback client the large-gang tests use does the same.
#[tokio::test]
async fn a_keep_alive_connection_idle_past_the_header_timeout_is_closed_and_dialled_again() {
    let limits = ConnLimits {
        header_read_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_secs(30),
        ..tight()
    };
    let router = Router::new().route("/echo", axum::routing::post(|b: String| async move { b }));
    let addr = start(router, limits).await;
    // The raw connection: closed after the header timeout, not the idle one.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(GET).await.unwrap();
    assert!(response_within(&mut s, PATIENCE).await.is_some());
    let waited = std::time::Instant::now();
    read_to_close(&mut s).await;
    assert!(
        waited.elapsed() < Duration::from_secs(10),
        "closed well before --idle-timeout"
    );
    // The client: the same connection object answers after the close.
    let mut c = kruntimes_scheduler::testkit::loopback::Conn::connect(addr)
        .await
        .unwrap();
    assert_eq!(c.post("/echo", "{}").await.unwrap(), (200, b"{}".to_vec()));
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(c.post("/echo", "{}").await.unwrap(), (200, b"{}".to_vec()));
}

#[tokio::test]
async fn a_slow_body_fails_the_request() {
    let router = Router::new().route(
        "/echo",
        axum::routing::post(|body: axum::body::Bytes| async move { body.len().to_string() }),
    );
    let addr = start(router, tight()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n0123456789")
        .await
        .unwrap();
    let head = response_within(&mut s, PATIENCE)
        .await
        .expect("an answer once the body times out");
    assert!(!head.starts_with("HTTP/1.1 200"), "{head}");
}

#[tokio::test]
async fn requests_beyond_the_in_flight_bound_wait() {
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let router = {
        let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
        Router::new().route(
            "/hello",
            get(move || {
                let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
                async move {
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    "hi"
                }
            }),
        )
    };
    let addr = start(router, tight()).await;
    let mut a = TcpStream::connect(addr).await.unwrap();
    let mut b = TcpStream::connect(addr).await.unwrap();
    a.write_all(GET).await.unwrap();
    b.write_all(GET).await.unwrap();
    for s in [&mut a, &mut b] {
        let head = response_within(s, PATIENCE).await.expect("served");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
    assert_eq!(most.load(Ordering::SeqCst), 1, "max_in_flight 1");
}

// === hostile extender requests ===
//
// Every call must answer within a fixed budget and allocate at most
// `ALLOC_PER_BODY_BYTE` × its body size (plus a fixed allowance), as counted
// by the allocator below for the calling thread only: the call runs on a
// current-thread runtime, so everything it does is counted, and other
// tests' threads are not.

mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    pub struct Counting;

    thread_local! {
        static ALLOCATED: Cell<u64> = const { Cell::new(0) };
        static FREED: Cell<u64> = const { Cell::new(0) };
    }

    fn add(n: usize) {
        let _ = ALLOCATED.try_with(|c| c.set(c.get().saturating_add(n as u64)));
    }

    fn free(n: usize) {
        let _ = FREED.try_with(|c| c.set(c.get().saturating_add(n as u64)));
    }

    /// Bytes allocated on this thread so far (reallocations count their
    /// growth).
    pub fn allocated() -> u64 {
        ALLOCATED.try_with(Cell::get).unwrap_or(0)
    }

    /// Bytes allocated on this thread and not freed on it (what a
    /// structure built and torn down on one thread holds).
    pub fn live() -> i64 {
        allocated() as i64 - FREED.try_with(Cell::get).unwrap_or(0) as i64
    }

    // SAFETY: every call is forwarded to the system allocator unchanged;
    // the counter is a thread-local `Cell` that never allocates.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            add(layout.size());
            // SAFETY: forwarded with the caller's layout.
            unsafe { System.alloc(layout) }
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            add(layout.size());
            // SAFETY: forwarded with the caller's layout.
            unsafe { System.alloc_zeroed(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            free(layout.size());
            // SAFETY: `ptr` came from `System` with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            add(new_size.saturating_sub(layout.size()));
            free(layout.size().saturating_sub(new_size));
            // SAFETY: forwarded with the caller's pointer and layout.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }
}

#[global_allocator]
static ALLOCATOR: counting::Counting = counting::Counting;

/// Allocation allowed per byte of request body.
const ALLOC_PER_BODY_BYTE: u64 = 128;
/// Allocation allowed whatever the body (router, snapshot, answer).
const ALLOC_FIXED: u64 = 1 << 20;
/// Time allowed per call (unoptimised test build, a busy machine).
const CALL_BUDGET: Duration = Duration::from_secs(10);

struct Measured {
    status: axum::http::StatusCode,
    allocated: u64,
    elapsed: Duration,
}

/// Calls `verb` with `body` through the real router on this thread.
fn measure(
    rt: &tokio::runtime::Runtime,
    router: &Router,
    verb: &str,
    body: &bytes::Bytes,
) -> Measured {
    use tower::ServiceExt as _;
    let req = axum::http::Request::post(format!("/scheduler/{verb}"))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.clone()))
        .unwrap();
    let router = router.clone();
    let before = counting::allocated();
    let start = std::time::Instant::now();
    let status = rt.block_on(async move {
        let resp = router.oneshot(req).await.unwrap();
        let status = resp.status();
        let _ = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        status
    });
    Measured {
        status,
        allocated: counting::allocated() - before,
        elapsed: start.elapsed(),
    }
}

mod hostile_gen {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn container(i: usize, resources: usize, sidecar: bool) -> Value {
        let requests: serde_json::Map<String, Value> = (0..resources)
            .map(|r| (format!("example.com/r{r}"), json!("1")))
            .chain([("cpu".to_owned(), json!("1m"))])
            .collect();
        let mut c = json!({"name": format!("c{i}"), "image": "i",
            "resources": {"requests": requests, "limits": requests}});
        if sidecar {
            c["restartPolicy"] = json!("Always");
        }
        c
    }

    /// A Pod with `containers` containers and `inits` init containers
    /// (sidecars when `sidecars`), each naming `resources` resources.
    fn pod(containers: usize, inits: usize, resources: usize, sidecars: bool) -> Value {
        json!({"metadata": {"name": "p", "namespace": "default", "uid": "p-uid"},
        "spec": {
            "containers": (0..containers).map(|i| container(i, resources, false)).collect::<Vec<_>>(),
            "initContainers": (0..inits).map(|i| container(i, resources, sidecars)).collect::<Vec<_>>(),
        }})
    }

    /// A nesting `depth` deep.
    fn deep(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    fn names(count: usize, len: usize, duplicate: bool) -> Vec<String> {
        (0..count)
            .map(|i| {
                let tag = if duplicate { 1 } else { i };
                let base = format!("n{tag}-");
                format!("{base}{}", "x".repeat(len.saturating_sub(base.len())))
            })
            .chain(["n1".to_owned(), "n2".to_owned()])
            .collect()
    }

    /// `(verb, body)`.
    pub fn request() -> impl Strategy<Value = (&'static str, String)> {
        let filterish = prop_oneof![Just("filter"), Just("prioritize")];
        prop_oneof![
            // Many containers, init containers and sidecars, few resources.
            (filterish.clone(), 0usize..20_000, 0usize..5_000, 0usize..4, any::<bool>())
                .prop_map(|(v, c, i, r, s)| (v, json!({"Pod": pod(c, i, r, s), "NodeNames": ["n1", "n2", "n3"]}).to_string())),
            // Many resources in few containers, against many names.
            (filterish.clone(), 1usize..4, 0usize..4, 0usize..5_000, 0usize..5_000, any::<bool>())
                .prop_map(|(v, c, i, r, n, s)| (v, json!({"Pod": pod(c, i, r, s),
                    "NodeNames": names(n, 20, false)}).to_string())),
            // Many, duplicate or over-long node names.
            (filterish.clone(), 0usize..50_000, 1usize..300, any::<bool>())
                .prop_map(|(v, n, len, dup)| (v, json!({"Pod": pod(1, 0, 1, false),
                    "NodeNames": names(n, len, dup)}).to_string())),
            // Full mode: many Nodes with many allocatable entries.
            (filterish.clone(), 0usize..3_000, 0usize..50)
                .prop_map(|(v, n, r)| {
                    let alloc: serde_json::Map<String, Value> = (0..r)
                        .map(|i| (format!("example.com/r{i}"), json!("10")))
                        .chain([("cpu".to_owned(), json!("8")), ("pods".to_owned(), json!("110"))])
                        .collect();
                    let items: Vec<Value> = names(n, 10, false).into_iter()
                        .map(|name| json!({"metadata": {"name": name}, "status": {"allocatable": alloc}}))
                        .collect();
                    (v, json!({"Pod": pod(2, 1, 3, false), "Nodes": {"items": items}}).to_string())
                }),
            // Deep JSON in the Pod, the names or the whole body.
            (filterish, 0usize..50_000, 0u8..3).prop_map(|(v, d, at)| {
                let body = match at {
                    0 => format!(r#"{{"Pod":{{"spec":{{"containers":{}}}}}}}"#, deep(d)),
                    1 => format!(r#"{{"NodeNames":{}}}"#, deep(d)),
                    _ => deep(d),
                };
                (v, body)
            }),
            // Preempt: duplicate victims over many nodes, both forms.
            (0usize..2_000, 0usize..50, any::<bool>()).prop_map(|(nodes, dup, full)| {
                let uids = ["big-uid", "web-1-uid", "gpu-user-uid", "unknown"];
                let victims = |_: usize| -> Value {
                    let pods: Vec<Value> = (0..dup.max(1) * uids.len())
                        .map(|i| {
                            let uid = uids[i % uids.len()];
                            if full {
                                json!({"metadata": {"name": "v", "namespace": "default", "uid": uid}})
                            } else {
                                json!({"UID": uid})
                            }
                        })
                        .collect();
                    json!({"Pods": pods, "NumPDBViolations": 0})
                };
                let map: serde_json::Map<String, Value> = names(nodes, 12, false)
                    .into_iter()
                    .enumerate()
                    .map(|(i, n)| (n, victims(i)))
                    .collect();
                let preemptor = json!({"metadata": {"name": "p", "namespace": "default"},
                    "spec": {"containers": [{"name": "c", "image": "i"}], "priority": 1_000_000}});
                let key = if full { "NodeNameToVictims" } else { "NodeNameToMetaVictims" };
                ("preempt", json!({"Pod": preemptor, key: map}).to_string())
            }),
            // Bind with long or odd names.
            (0usize..400, 0usize..400).prop_map(|(a, b)| ("bind", json!({
                "PodName": "p".repeat(a), "PodNamespace": "n".repeat(b % 80),
                "PodUID": "u", "Node": "n1"}).to_string())),
        ]
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..Default::default()
    })]

    #[test]
    fn hostile_extender_requests_are_bounded_in_time_and_memory((verb, body) in hostile_gen::request()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let app = common::app("extender/cluster.yaml");
        let router = kruntimes_scheduler::http::router(app.state.clone());
        let body = bytes::Bytes::from(body);
        let m = measure(&rt, &router, verb, &body);
        let allowed = ALLOC_PER_BODY_BYTE * body.len() as u64 + ALLOC_FIXED;
        proptest::prop_assert!(
            m.allocated <= allowed,
            "{verb}: {} bytes allocated for a {}-byte body (allowed {allowed}), status {}",
            m.allocated, body.len(), m.status
        );
        proptest::prop_assert!(
            m.elapsed <= CALL_BUDGET,
            "{verb}: {:?} for a {}-byte body, status {}", m.elapsed, body.len(), m.status
        );
        proptest::prop_assert!(m.status != axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    }
}

/// The largest bodies the limits accept, one per shape: each within the
/// budget too.
#[test]
fn the_worst_accepted_bodies_are_bounded() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let app = common::app("extender/cluster.yaml");
    let router = kruntimes_scheduler::http::router(app.state.clone());
    for (what, verb, body) in worst_bodies() {
        let body = bytes::Bytes::from(body);
        let m = measure(&rt, &router, verb, &body);
        let allowed = ALLOC_PER_BODY_BYTE * body.len() as u64 + ALLOC_FIXED;
        eprintln!(
            "{what}: {verb} {} bytes -> {} in {:?}, {} bytes allocated ({:.1} per body byte)",
            body.len(),
            m.status,
            m.elapsed,
            m.allocated,
            m.allocated as f64 / body.len() as f64
        );
        assert!(
            m.allocated <= allowed,
            "{what}: {} > {allowed}",
            m.allocated
        );
        assert!(m.elapsed <= CALL_BUDGET, "{what}: {:?}", m.elapsed);
    }
}

/// `(what, verb, body)`: the worst shapes at the default limits.
fn worst_bodies() -> Vec<(&'static str, &'static str, String)> {
    use kruntimes_scheduler::extender::limits::{
        API_MAX_REQUEST_BODY_BYTES, MAX_CONTAINERS, MAX_NODE_NAME_BYTES,
    };
    let mut out = Vec::new();
    // As many valid containers (unique names) as a Pod at the API server's
    // size limit holds: the count limit, 3 MiB / 24, is not reachable
    // with unique names.
    let mut containers: Vec<String> = Vec::new();
    let mut len = 0;
    for i in 0..MAX_CONTAINERS {
        let c = format!(r#"{{"name":"{i:x}","image":"i"}}"#);
        len += c.len() + 1;
        if len > API_MAX_REQUEST_BODY_BYTES - 200 {
            break;
        }
        containers.push(c);
    }
    let pod = format!(
        r#"{{"metadata":{{"name":"p","namespace":"default"}},"spec":{{"containers":[{}]}}}}"#,
        containers.join(",")
    );
    assert!(pod.len() <= API_MAX_REQUEST_BODY_BYTES);
    for verb in ["filter", "prioritize"] {
        out.push((
            "most containers",
            verb,
            format!(r#"{{"Pod":{pod},"NodeNames":["n1","n2","n3"]}}"#),
        ));
    }
    out.push((
        "most containers",
        "preempt",
        format!(
            r#"{{"Pod":{pod},"NodeNameToMetaVictims":{{"n1":{{"Pods":[{{"UID":"big-uid"}}]}}}}}}"#
        ),
    ));
    // Many sidecars, each with its own resources: the init-container peak.
    let sidecars: Vec<String> = (0..16_000)
        .map(|i| {
            format!(r#"{{"name":"s{i}","image":"i","restartPolicy":"Always","resources":{{"requests":{{"e.io/r{i}":"1"}}}}}},{{"name":"i{i}","image":"i","resources":{{"requests":{{"e.io/r{i}":"1"}}}}}}"#)
        })
        .collect();
    out.push((
        "16,000 sidecars and 16,000 init containers, a resource each",
        "filter",
        format!(
            r#"{{"Pod":{{"metadata":{{"name":"p"}},"spec":{{"initContainers":[{}]}}}},"NodeNames":["n1","n2"]}}"#,
            sidecars.join(",")
        ),
    ));
    // Many resources no node offers, against many (duplicate) names: the
    // per-node check must not walk every resource for every name.
    let requests: Vec<String> = (0..20_000).map(|i| format!(r#""e.io/r{i}":"1""#)).collect();
    let names = vec![r#""n1""#; 1_000_000].join(",");
    out.push((
        "20,000 unoffered resources, 1,000,000 names",
        "filter",
        format!(
            r#"{{"Pod":{{"spec":{{"containers":[{{"name":"c","image":"i","resources":{{"requests":{{{}}}}}}}]}}}},"NodeNames":[{names}]}}"#,
            requests.join(",")
        ),
    ));
    // The longest node names filling the cache-capable body.
    let long = MAX_NODE_NAME_BYTES - 8;
    let names: Vec<String> = (0..(8 << 20) / (MAX_NODE_NAME_BYTES + 3) - 10)
        .map(|i| format!("\"{i:08}{}\"", "x".repeat(long)))
        .collect();
    out.push((
        "8 MiB of 253-byte node names",
        "filter",
        format!(
            r#"{{"Pod":{{"spec":{{"containers":[{{"name":"c","image":"i","resources":{{"requests":{{"cpu":"1"}}}}}}]}}}},"NodeNames":[{}]}}"#,
            names.join(",")
        ),
    ));
    out
}

/// Pods requesting resources of their own (`example.com/r-<i>`, 100k of
/// them, 100 alive at a time) do not leave interned names or per-resource
/// node columns behind: the cluster index's heap returns to its baseline.
#[test]
fn churn_of_unusual_resource_names_returns_the_cluster_index_to_its_baseline() {
    use kruntimes_scheduler::cache::cluster_index::ClusterIndex;
    use kruntimes_scheduler::testkit::{node, pod};
    let index = ClusterIndex::new();
    for n in 0..10 {
        index.apply_node(&node(&format!("n{n}")).allocatable("100", "100Gi").typed());
    }
    let mk = |i: usize| {
        let unusual = format!("example.com/r-{i}");
        pod(&format!("u{i}"))
            .requests(&[("cpu", "1m"), (unusual.as_str(), "1")])
            .on_node(&format!("n{}", i % 10))
            .typed()
    };
    // Warm up: the structures reach their working size (100 pods alive,
    // as below), so what is measured is what churn leaves, not the tables'
    // capacity for 100 pods.
    for i in 0..1000 {
        index.apply_pod(&mk(i));
        if i >= 100 {
            index.delete_pod("ml", &format!("u{}", i - 100));
        }
    }
    for i in 900..1000 {
        index.delete_pod("ml", &format!("u{i}"));
    }
    let (names0, cols0) = index.read().interned();
    let before = counting::live();
    for i in 0..100_000 {
        index.apply_pod(&mk(i));
        if i >= 100 {
            index.delete_pod("ml", &format!("u{}", i - 100));
        }
    }
    for i in 99_900..100_000 {
        index.delete_pod("ml", &format!("u{i}"));
    }
    let grown = counting::live() - before;
    let (names, cols) = index.read().interned();
    assert!(
        names <= names0 + 64 && cols <= cols0 + 64,
        "interned names {names0} -> {names}, columns {cols0} -> {cols}"
    );
    // Slack for the sweep's up to 64 unused names and their columns.
    assert!(grown < 64 * 1024, "the index grew by {grown} bytes");
}

/// Runtime Pods declaring resources of their own
/// (`kruntimes.io/capacity.example.com-r-<i>`) under runtime label values
/// of their own, with a Run counted on each, 20k of them and 100 alive at
/// a time, do not leave interned names, runtime ids or per-resource
/// columns behind: the Run cache's heap returns to its baseline.
#[test]
fn churn_of_unusual_resource_names_returns_the_run_cache_to_its_baseline() {
    use kruntimes_scheduler::cache::{CacheConfig, RunCache};
    use kruntimes_scheduler::metrics::Metrics;
    use kruntimes_scheduler::runs::queue::WorkQueue;
    use kruntimes_scheduler::testkit::{run, runtime_pod};
    use std::sync::Arc;
    let now = k8s_openapi::jiff::Timestamp::now();
    let hb = now.to_string();
    let hb = hb.as_str();
    let cache = RunCache::new(
        CacheConfig::default(),
        Arc::new(WorkQueue::default()),
        Arc::new(Metrics::default()),
    );
    // Ten ordinary pods that stay, so the sweep has live names to keep.
    for i in 0..10 {
        let p = runtime_pod(&format!("steady-{i}"), &[("runs", "4"), ("gpu", "2")], hb);
        cache.apply_pod(&p.typed(), now);
    }
    let unusual = |i: usize| format!("example.com-r-{i}");
    // Every other pod joins the steady pods' runtime, so its resource
    // becomes a column there; the others bring runtime values of their own.
    let runtime = |i: usize| {
        if i.is_multiple_of(2) {
            format!("rt-{i}")
        } else {
            "py".to_owned()
        }
    };
    let up = |i: usize| {
        let r = unusual(i);
        let pod = runtime_pod(&format!("u{i}"), &[("runs", "1"), (r.as_str(), "1")], hb)
            .set(&["metadata", "labels", "runtime"], runtime(i));
        cache.apply_pod(&pod.typed(), now);
        let r = run(&format!("run-{i}"), &[(r.as_str(), "1")])
            .set(&["spec", "runtime"], runtime(i))
            .status("Running", Some(&format!("u{i}")));
        cache.apply_run(&r.typed());
    };
    let down = |i: usize| {
        cache.delete_run("ns", &format!("run-{i}"));
        cache.delete_pod("ns", &format!("u{i}"));
        // The scheduling loop would take the deleted Run's key.
        while let Some(k) = cache.queue().try_next() {
            cache.queue().done(&k);
        }
    };
    let churn = |from: usize, to: usize| {
        for i in from..to {
            up(i);
            if i >= from + 100 {
                down(i - 100);
            }
        }
        for i in to - 100..to {
            down(i);
        }
    };
    // Warm up to the working size (100 alive), so what is measured is what
    // churn leaves, not the tables' capacity.
    churn(0, 1_000);
    let (names0, runtimes0, cols0) = cache.interned();
    let before = counting::live();
    churn(1_000, 20_000);
    let grown = counting::live() - before;
    let (names, runtimes, cols) = cache.interned();
    assert!(
        names <= names0 + 2 * 64 && runtimes <= runtimes0 + 2 * 64 && cols <= cols0 + 64,
        "interned names {names0} -> {names}, runtime ids {runtimes0} -> {runtimes}, columns {cols0} -> {cols}"
    );
    // Slack for the sweep's unused names and runtime ids.
    assert!(grown < 64 * 1024, "the Run cache grew by {grown} bytes");
    // What stays is still counted, and decided on, exactly.
    cache.check_invariants().unwrap();
    assert_eq!(cache.runtime_pods(None, None, now).len(), 10);
    cache.apply_run(&run("after", &[("gpu", "2")]).typed());
    let key = kruntimes_scheduler::runs::queue::RunKey::new("ns", "after");
    match cache.schedule_one(&key, now) {
        kruntimes_scheduler::cache::Decision::Reserved { pod, .. } => {
            assert!(pod.starts_with("steady-"), "{pod}")
        }
        other => panic!("expected a reservation: {other:?}"),
    }
    cache.check_invariants().unwrap();
}
