//! Scale figures, one command each. Every mode prints what it measured.
//!
//! ```text
//! cargo bench --bench scale -- decide     # decision p50/p99 at 100 / 1k / 10k / 50k Runtime Pods
//! cargo bench --bench scale -- plan       # POST /v1/runs/plan at 10k pods (default limit and limit=0)
//! cargo bench --bench scale -- plan-affinity  # the same for a Run with affinity terms, 20,000 active Runs
//! cargo bench --bench scale -- bulk       # 20,000 Runs in one POST /v1/objects List onto 10,000 pods
//!                                         #   (KRS_SCALE_BULK_PODS=100: onto 100 bigger pods)
//! cargo bench --bench scale -- load       # standalone --state with 50,000 Pods at 50 and 1,000 pods per node
//! cargo bench --bench scale -- rss        # standalone RSS, 15,000 Nodes + 150,000 Pods
//! cargo bench --bench scale -- rss-cluster  # cluster-mode RSS, same state, test API server
//! ```
//!
//! Percentiles are nearest rank (`testkit::percentile`). `decide` runs in
//! process; the others start the real binary (`serve`) on
//! a loopback port and talk HTTP to it, as an operator would: the one this
//! build made, or the one `KRS_SCALE_BIN` names (to measure another build,
//! e.g. an earlier commit's, with the same harness).

#[path = "../tests/it/apiserver/mod.rs"]
mod apiserver;
mod common;

/// The in-process figures use the allocator the service binary is built
/// with (mimalloc, the default feature; the system allocator with
/// `--no-default-features`).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use common::{run, runtime_pods};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;
use kruntimes_scheduler::cache::{Decision, RunCache};
use kruntimes_scheduler::cluster::standalone::kube_time;
use kruntimes_scheduler::model::resources::Requests;
use kruntimes_scheduler::model::resources::effective_requests;
use kruntimes_scheduler::runs::queue::RunKey;
use kruntimes_scheduler::testkit::{self, percentile};
use serde_json::{Value, json};
use std::hint::black_box;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The binary this build made.
const BIN: &str = env!("CARGO_BIN_EXE_kruntimes-scheduler");

/// The binary the HTTP modes start: `KRS_SCALE_BIN`, or this build's.
fn bin() -> String {
    std::env::var("KRS_SCALE_BIN").unwrap_or_else(|_| BIN.to_owned())
}

fn main() {
    let mode = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .unwrap_or_default();
    if mode != "decide" && std::env::var_os("KRS_SCALE_BIN").is_some() {
        println!("server binary: {}", bin());
    }
    match mode.as_str() {
        "decide" => decide(),
        "plan" => plan(),
        "plan-affinity" => plan_affinity(),
        "bulk" => bulk(),
        "load" => load(),
        "rss" => rss_standalone(),
        "rss-cluster" => rss_cluster(),
        _ => {
            eprintln!(
                "usage: cargo bench --bench scale -- decide|plan|plan-affinity|bulk|load|rss|rss-cluster"
            );
        }
    }
}

// --- helpers ---

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

// --- decide ---

fn decide() {
    let now = Timestamp::now();
    let req = effective_requests(Some(
        &[("runs", "1"), ("gpu", "1"), ("mem", "4Gi")]
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect(),
    ))
    .unwrap();
    println!(
        "decision: one Run over N Runtime Pods × 4 resources (filter, score, reserve; then release)"
    );
    // `KRS_SCALE_PODS=10000,50000` measures only those sizes.
    let sizes: Vec<usize> = std::env::var("KRS_SCALE_PODS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![100, 1_000, 10_000, 50_000]);
    // Two shapes: a warm pool (half the pods idle, half running the same
    // Run: two distinct states), and the worst case for grouping, where
    // every pod's usage differs (a Run of its own size on each).
    type Build = fn(usize, Timestamp) -> RunCache;
    let shapes: [(&str, Build); 2] = [("pool", runtime_pods), ("distinct", runtime_pods_distinct)];
    for (shape, build) in shapes {
        println!("  {shape}:");
        for &n in &sizes {
            decide_at(n, build(n, now), &req, now);
        }
    }
}

/// Every pod runs a Run of its own memory size: no two pods' numbers are
/// equal.
fn runtime_pods_distinct(n: usize, now: Timestamp) -> RunCache {
    let cache = runtime_pods(0, now);
    for i in 0..n {
        cache.apply_pod(&common::runtime_pod(i, now), now);
        let pod = format!("rp-{i:05}");
        let mem = format!("{}Mi", i + 1);
        let own = [("runs", "1"), ("mem", mem.as_str())];
        cache.apply_run(&run(&format!("own-{i}"), &own, Some(&pod)));
    }
    while let Some(k) = cache.queue().try_next() {
        cache.queue().done(&k);
    }
    cache
}

fn decide_at(n: usize, cache: RunCache, req: &Requests, now: Timestamp) {
    cache.apply_run(&run(
        "r",
        &[("runs", "1"), ("gpu", "1"), ("mem", "4Gi")],
        None,
    ));
    let key = RunKey::new("bench", "r");
    let samples = (2_000_000 / n).clamp(200, 5_000);
    let mut t = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        let d = cache.schedule_one(&key, now);
        t.push(start.elapsed());
        match d {
            Decision::Reserved { uid, pod, .. } => {
                black_box(cache.release("bench", &uid, &pod));
            }
            other => panic!("expected a reservation: {other:?}"),
        }
    }
    t.sort();
    let mut p = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        black_box(cache.plan_with("bench", "py", req, now, |o| o.selected().is_some()));
        p.push(start.elapsed());
    }
    p.sort();
    println!(
        "    pods {n:>6}: decide p50 {} p99 {} | plan (in process, every pod) p50 {} p99 {}  ({samples} samples)",
        us(percentile(&t, 0.5)),
        us(percentile(&t, 0.99)),
        us(percentile(&p, 0.5)),
        us(percentile(&p, 0.99)),
    );
}

// --- the binary over HTTP ---

struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let port = free_port();
        let child = Command::new(bin())
            .arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .args(args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the binary");
        Server { child, port }
    }

    /// Waits until `/readyz` answers 200; returns how long that took.
    fn wait_ready(&self, start: Instant) -> Duration {
        loop {
            if let Ok((200, _)) = http(self.port, "GET", "/readyz", None) {
                return start.elapsed();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn rss_mib(&self) -> f64 {
        self.status_mib("VmRSS:")
    }

    /// The peak resident set so far (`VmHWM`).
    fn peak_mib(&self) -> f64 {
        self.status_mib("VmHWM:")
    }

    /// A `/proc/PID/status` figure in MiB (0 when unreadable).
    fn status_mib(&self, field: &str) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    }
}

/// One HTTP/1.1 request on a fresh connection: (status, body).
fn http(port: u16, method: &str, path: &str, body: Option<&str>) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )?;
    s.write_all(body.as_bytes())?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    let text = String::from_utf8_lossy(&out);
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}

/// A Runtime Pod as the state file and the test API server hold it: with
/// its runtimed container and, if given, its node.
fn runtime_pod_json(name: &str, ns: &str, node: Option<&str>, stamp: &str) -> Value {
    runtime_pod_json_scaled(name, ns, node, stamp, 1)
}

/// [`runtime_pod_json`] with every capacity multiplied by `scale`.
fn runtime_pod_json_scaled(
    name: &str,
    ns: &str,
    node: Option<&str>,
    stamp: &str,
    scale: u64,
) -> Value {
    let caps = [
        ("runs", (8 * scale).to_string()),
        ("gpu", (4 * scale).to_string()),
        ("mem", format!("{}Gi", 64 * scale)),
        ("slots", (16 * scale).to_string()),
    ];
    let caps: Vec<(&str, &str)> = caps.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let pod = testkit::runtime_pod(name, &caps, stamp)
        .namespace(ns)
        .unset(&["metadata", "uid"])
        .label("app", "runtimed")
        .set(
            &["spec", "containers"],
            json!([{"name": "runtimed", "image": "kruntimes/runtimed:1.0",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]),
        );
    match node {
        Some(n) => pod.set(&["spec", "nodeName"], n).value(),
        None => pod.value(),
    }
}

fn node_json(name: &str) -> Value {
    testkit::node(name)
        .label("zone", "z1")
        .allocatable("512", "2048Gi")
        .set(&["status", "allocatable", "pods"], "2000")
        .value()
}

/// Writes a state file of `nodes` Nodes and `pods` Runtime Pods spread
/// evenly over them.
fn state_file(tag: &str, nodes: usize, pods: usize, stamp: &str) -> std::path::PathBuf {
    let mut items: Vec<Value> = (0..nodes)
        .map(|i| node_json(&format!("node-{i:05}")))
        .collect();
    for i in 0..pods {
        let node = format!("node-{:05}", i % nodes.max(1));
        items.push(runtime_pod_json(
            &format!("rp-{i:06}"),
            &format!("team-{}", i % 50),
            (nodes > 0).then_some(node.as_str()),
            stamp,
        ));
    }
    let path = std::env::temp_dir().join(format!("krs-scale-{tag}-{}.json", std::process::id()));
    let text = serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": items}))
        .unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

// --- plan over HTTP ---

fn plan() {
    let stamp = kube_time(Timestamp::now());
    let items: Vec<Value> = (0..10_000)
        .map(|i| runtime_pod_json(&format!("rp-{i:05}"), "bench", None, &stamp))
        .collect();
    let path = std::env::temp_dir().join(format!("krs-scale-plan-{}.json", std::process::id()));
    std::fs::write(
        &path,
        json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string(),
    )
    .unwrap();
    let server = Server::start(&[
        "--state",
        path.to_str().unwrap(),
        "--heartbeat-stale-after",
        "1h",
    ]);
    server.wait_ready(Instant::now());
    let body = json!({"metadata": {"name": "r", "namespace": "bench"},
        "spec": {"runtime": "py", "resources": {"requests": {"runs": "1", "gpu": "1", "mem": "4Gi"}}}})
    .to_string();
    println!("POST /v1/runs/plan, 10,000 Runtime Pods, one connection per request");
    for path in ["/v1/runs/plan", "/v1/runs/plan?limit=0"] {
        let mut t = Vec::new();
        let mut len = 0;
        for _ in 0..200 {
            let start = Instant::now();
            let (code, b) = http(server.port, "POST", path, Some(&body)).unwrap();
            t.push(start.elapsed());
            assert_eq!(code, 200, "{b}");
            len = b.len();
        }
        t.sort();
        println!(
            "  {path:<24} p50 {} p99 {} ({len} bytes)",
            ms(percentile(&t, 0.5)),
            ms(percentile(&t, 0.99))
        );
    }
    let _ = std::fs::remove_file(path);
}

/// `POST /v1/runs/plan` (default limit) of a Run with required and
/// preferred affinity and anti-affinity terms, at 10,000 Runtime Pods
/// holding 20,000 active Runs of 200 cohorts (`common::affinity_labels`).
fn plan_affinity() {
    const PODS: usize = 10_000;
    const RUNS: usize = 20_000;
    const REQUESTS: usize = 500;
    let stamp = kube_time(Timestamp::now());
    let mut items: Vec<Value> = (0..PODS)
        .map(|i| runtime_pod_json(&format!("rp-{i:05}"), "bench", None, &stamp))
        .collect();
    for j in 0..RUNS {
        let labels: serde_json::Map<String, Value> = common::affinity_labels(j)
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        items.push(json!({"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
            "metadata": {"name": format!("a-{j}"), "namespace": "bench", "uid": format!("uid-a-{j}"), "labels": labels},
            "spec": {"runtime": "py", "resources": {"requests": {"runs": "1"}}},
            "status": {"phase": "Running", "assignedPod": format!("rp-{:05}", common::affinity_pod(j, PODS))}}));
    }
    let path = std::env::temp_dir().join(format!("krs-scale-plan-aff-{}.json", std::process::id()));
    std::fs::write(
        &path,
        json!({"apiVersion": "v1", "kind": "List", "items": &items}).to_string(),
    )
    .unwrap();
    let server = Server::start(&[
        "--state",
        path.to_str().unwrap(),
        "--heartbeat-stale-after",
        "1h",
    ]);
    server.wait_ready(Instant::now());
    let body = json!({"metadata": {"name": "r", "namespace": "bench", "labels": {"cohort": "c-7"}},
        "spec": {"runtime": "py", "resources": {"requests": {"runs": "1", "gpu": "1", "mem": "4Gi"}},
            "affinity": common::bench_affinity()}})
    .to_string();
    println!(
        "POST /v1/runs/plan with affinity, {PODS} Runtime Pods, {RUNS} active Runs, one connection per request"
    );
    let mut t = Vec::new();
    let mut len = 0;
    for _ in 0..REQUESTS {
        let start = Instant::now();
        let (code, b) = http(server.port, "POST", "/v1/runs/plan", Some(&body)).unwrap();
        t.push(start.elapsed());
        assert_eq!(code, 200, "{b}");
        assert!(b.contains("UnsatisfiedRunAffinity"), "{b}");
        len = b.len();
    }
    t.sort();
    println!(
        "  /v1/runs/plan  p50 {} p99 {} ({len} bytes, {REQUESTS} requests)",
        us(percentile(&t, 0.5)),
        us(percentile(&t, 0.99))
    );
    // The same on one kept-alive connection: no connect per request, so
    // the round trip is the server's time plus two loopback hops.
    let conn = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    conn.set_nodelay(true).unwrap();
    let mut conn = std::io::BufReader::new(conn);
    let mut t = Vec::new();
    for _ in 0..REQUESTS {
        let start = Instant::now();
        let (code, b) = http_kept_alive(&mut conn, "/v1/runs/plan", &body).unwrap();
        t.push(start.elapsed());
        assert_eq!(code, 200, "{b}");
        assert!(b.contains("UnsatisfiedRunAffinity"), "{b}");
    }
    t.sort();
    println!(
        "  /v1/runs/plan, one kept-alive connection  p50 {} p99 {} ({REQUESTS} requests)",
        us(percentile(&t, 0.5)),
        us(percentile(&t, 0.99))
    );
    in_process_plan(items, &body);
    // The server's own time for the same requests: its latency histogram
    // around the route (body parsed, plan, answer rendered), read back
    // from /metrics. Buckets are powers of 4 from 1 µs, so the p99 is
    // given as the bucket bound it falls under.
    let (code, metrics) = http(server.port, "GET", "/metrics", None).unwrap();
    assert_eq!(code, 200, "{metrics}");
    let buckets = plan_buckets(&metrics);
    let total = buckets.last().map_or(0, |b| b.1);
    let under = |q: f64| {
        buckets
            .iter()
            .find(|(_, n)| *n as f64 >= q * total as f64)
            .map_or("+Inf".to_owned(), |(le, _)| le.clone())
    };
    let cumulative: Vec<String> = buckets
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(le, n)| format!("<= {le}s: {n}"))
        .collect();
    println!(
        "  server time (kruntimes_decision_duration_seconds{{operation=\"Plan\"}}, {total} requests): p50 under {}s, p99 under {}s; {}",
        under(0.5),
        under(0.99),
        cumulative.join(", ")
    );
    let _ = std::fs::remove_file(path);
}

/// The server's time per `POST /v1/runs/plan`, one request at a time: the
/// same objects and request through the real router in this process (the
/// body parsed, the plan, the answer rendered), without sockets.
fn in_process_plan(objects: Vec<Value>, body: &str) {
    use tower::ServiceExt;
    const REQUESTS: usize = 2_000;
    let config = kruntimes_scheduler::cache::CacheConfig {
        heartbeat_stale_after: Duration::from_secs(3600),
        ..Default::default()
    };
    let app = kruntimes_scheduler::serve::standalone(config, objects).unwrap();
    let router = kruntimes_scheduler::http::router(app.state.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut t = Vec::with_capacity(REQUESTS);
    for _ in 0..REQUESTS {
        let req = axum::http::Request::post("/v1/runs/plan")
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body.to_owned()))
            .unwrap();
        let start = Instant::now();
        let (status, len) = rt.block_on(async {
            let resp = router.clone().oneshot(req).await.unwrap();
            let status = resp.status();
            let b = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .unwrap();
            (status, b.len())
        });
        t.push(start.elapsed());
        assert_eq!(status, 200);
        black_box(len);
    }
    t.sort();
    println!(
        "  /v1/runs/plan through the router in process (server time)  p50 {} p99 {} max {} ({REQUESTS} requests)",
        us(percentile(&t, 0.5)),
        us(percentile(&t, 0.99)),
        us(t[t.len() - 1])
    );
}

/// `(le, cumulative count)` of the Plan operation's latency buckets in a
/// Prometheus text exposition, in bucket order.
fn plan_buckets(metrics: &str) -> Vec<(String, u64)> {
    metrics
        .lines()
        .filter(|l| l.starts_with("kruntimes_decision_duration_seconds_bucket{"))
        .filter(|l| l.contains("operation=\"Plan\""))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?.to_owned();
            let n = l.rsplit(' ').next()?.parse().ok()?;
            Some((le, n))
        })
        .collect()
}

/// One `POST` on a kept-alive HTTP/1.1 connection: (status, body). Reads
/// the head, then `content-length` bytes of body.
fn http_kept_alive(
    s: &mut std::io::BufReader<TcpStream>,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    use std::io::BufRead;
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.get_mut().write_all(request.as_bytes())?;
    let mut head = String::new();
    while !head.ends_with("\r\n\r\n") {
        if s.read_line(&mut head)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut out = vec![0u8; len];
    s.read_exact(&mut out)?;
    Ok((code, String::from_utf8_lossy(&out).into_owned()))
}

// --- bulk apply ---

fn scheduled(port: u16) -> u64 {
    let (_, m) = http(port, "GET", "/metrics", None).unwrap_or_default();
    m.lines()
        .find_map(|l| l.strip_prefix("kruntimes_runs_scheduled_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as u64
}

/// `KRS_SCALE_BULK_PODS` sets the Runtime Pod count (default 10,000). With
/// few pods the decision costs little, which leaves the rest of the cycle
/// (queue, status write, event, metrics) to measure; each pod then gets
/// enough capacity that all Runs still fit (at least 4 per pod, as at
/// 10,000 pods: 8 `runs` and 4 `gpu` each).
fn bulk() {
    const RUNS: usize = 20_000;
    let pods: usize = std::env::var("KRS_SCALE_BULK_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(10_000);
    // A `gpu` each Run; 4 per pod unscaled.
    let scale = (RUNS.div_ceil(pods) as u64).div_ceil(4).max(1);
    let stamp = kube_time(Timestamp::now());
    let items: Vec<Value> = (0..pods)
        .map(|i| runtime_pod_json_scaled(&format!("rp-{i:05}"), "bench", None, &stamp, scale))
        .collect();
    let path = std::env::temp_dir().join(format!("krs-scale-bulk-{}.json", std::process::id()));
    std::fs::write(
        &path,
        json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string(),
    )
    .unwrap();
    let server = Server::start(&[
        "--state",
        path.to_str().unwrap(),
        "--heartbeat-stale-after",
        "1h",
    ]);
    server.wait_ready(Instant::now());
    let runs: Vec<Value> = (0..RUNS)
        .map(|i| {
            json!({"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
                "metadata": {"name": format!("run-{i:05}"), "namespace": "bench"},
                "spec": {"runtime": "py", "resources": {"requests": {"runs": "1", "gpu": "1", "mem": "4Gi"}}}})
        })
        .collect();
    let body = json!({"apiVersion": "v1", "kind": "List", "items": runs}).to_string();
    let port = server.port;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Another client meanwhile: a cheap cache read every 10 ms.
    let probe = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut t = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let start = Instant::now();
                let _ = http(port, "GET", "/v1/runtime-pods?namespace=probe", None);
                t.push(start.elapsed());
                std::thread::sleep(Duration::from_millis(10));
            }
            t.sort();
            t
        })
    };
    let start = Instant::now();
    let (code, resp) = http(port, "POST", "/v1/objects", Some(&body)).unwrap();
    let accepted = start.elapsed();
    assert_eq!(code, 200, "{}", &resp[..resp.len().min(300)]);
    // Give up after 5 minutes, saying how far it got.
    let mut bound = 0;
    while bound < RUNS as u64 && start.elapsed() < Duration::from_secs(300) {
        std::thread::sleep(Duration::from_millis(20));
        bound = scheduled(port);
    }
    let all = start.elapsed();
    if bound < RUNS as u64 {
        println!("  only {bound} of {RUNS} Runs Scheduled after {}", ms(all));
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let t = probe.join().unwrap();
    println!(
        "bulk apply: {RUNS} Runs in one POST /v1/objects List, {pods} Runtime Pods × 4 resources"
    );
    println!(
        "  POST answered after {}, all Runs Scheduled after {} ({:.0} Runs/s)",
        ms(accepted),
        ms(all),
        RUNS as f64 / all.as_secs_f64()
    );
    println!(
        "  meanwhile GET /v1/runtime-pods: {} requests, p50 {} p99 {} max {}",
        t.len(),
        ms(percentile(&t, 0.5)),
        ms(percentile(&t, 0.99)),
        ms(*t.last().unwrap())
    );
    let _ = std::fs::remove_file(path);
}

// --- standalone load ---

fn load() {
    let stamp = kube_time(Timestamp::now());
    println!("standalone --state, 50,000 Runtime Pods: process start to /readyz");
    for nodes in [50usize, 1_000] {
        let path = state_file(&format!("load{nodes}"), nodes, 50_000, &stamp);
        let start = Instant::now();
        let server = Server::start(&["--state", path.to_str().unwrap()]);
        let took = server.wait_ready(start);
        println!(
            "  {nodes:>5} nodes ({:>4} pods per node): ready after {}, RSS {:.0} MiB (peak {:.0} MiB)",
            50_000 / nodes,
            ms(took),
            server.rss_mib(),
            server.peak_mib()
        );
        drop(server);
        let _ = std::fs::remove_file(path);
    }
}

// --- memory ---

fn rss_standalone() {
    let stamp = kube_time(Timestamp::now());
    let path = state_file("rss", 15_000, 150_000, &stamp);
    let start = Instant::now();
    let server = Server::start(&["--state", path.to_str().unwrap()]);
    let took = server.wait_ready(start);
    std::thread::sleep(Duration::from_millis(500));
    println!(
        "standalone, 15,000 Nodes + 150,000 Pods: ready after {}, RSS {:.0} MiB (peak {:.0} MiB)",
        ms(took),
        server.rss_mib(),
        server.peak_mib()
    );
    let _ = std::fs::remove_file(path);
}

fn rss_cluster() {
    use apiserver::{FakeApi, Res};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let api = rt.block_on(FakeApi::start());
    let stamp = kube_time(Timestamp::now());
    for i in 0..15_000 {
        api.put(Res::Nodes, node_json(&format!("node-{i:05}")));
    }
    for i in 0..150_000 {
        let node = format!("node-{:05}", i % 15_000);
        api.put(
            Res::Pods,
            runtime_pod_json(
                &format!("rp-{i:06}"),
                &format!("team-{}", i % 50),
                Some(&node),
                &stamp,
            ),
        );
    }
    let kubeconfig = std::env::temp_dir().join(format!("krs-scale-kc-{}.yaml", std::process::id()));
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n",
            api.url
        ),
    )
    .unwrap();
    let start = Instant::now();
    let server = Server::start(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--leader-elect=false",
    ]);
    let took = server.wait_ready(start);
    // Let the node and pod watchers finish their lists too.
    let mut last = 0.0;
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(250));
        let now = server.rss_mib();
        if (now - last).abs() < 1.0 && now > 0.0 {
            break;
        }
        last = now;
    }
    println!(
        "cluster mode, 15,000 Nodes + 150,000 Pods (test API server): ready after {}, RSS {:.0} MiB",
        ms(took),
        server.rss_mib()
    );
    drop(server);
    let _ = std::fs::remove_file(kubeconfig);
    drop(rt);
}
