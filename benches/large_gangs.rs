//! Gangs of thousands (#33) against the real binary with `serve`'s default
//! flags, driven as kube-scheduler drives the extender
//! (`testkit::loopback`): filter one pod after another on one keep-alive
//! connection, each bind on a connection of its own.
//!
//! ```text
//! cargo bench --bench large_gangs            # bind 1,024 and 4,096; filter p99 and RSS with 4,095 held
//! cargo bench --bench large_gangs -- bind    # only the bind times
//! cargo bench --bench large_gangs -- held    # only filter p99 and memory while held
//! ```
//!
//! A loopback harness, not a timed test: it prints what it measured.
//! Memory per held bind is the server's resident set (`VmRSS`) with 4,095
//! binds held minus before they were sent, over 4,095 (kernel socket
//! buffers are not in it). The harness raises its own open-files limit;
//! the server raises its own at start.

use kruntimes_scheduler::serve::raise_open_files;
use kruntimes_scheduler::testkit::loopback::{
    Conn, bind_alone, bind_body, filter_body, filter_outcome,
};
use kruntimes_scheduler::testkit::{self, percentile};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_kruntimes-scheduler");
const NODES: usize = 64;

struct Server {
    child: Child,
    addr: SocketAddr,
    _dir: TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn node_names() -> Vec<String> {
    (0..NODES).map(|i| format!("n{i}")).collect()
}

fn member(i: usize) -> Value {
    testkit::pod(&format!("m{i}")).group("g").value()
}

/// The binary, default flags, over a state of 64 nodes (64 cpu, 1000
/// pods each), a gang `g` of `size` and a pod `plain` in no group.
async fn start(size: usize) -> Server {
    let dir = std::env::temp_dir().join(format!("krs-large-gangs-{}-{size}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut items: Vec<Value> = node_names()
        .iter()
        .map(|n| {
            testkit::node(n)
                .allocatable("64", "512Gi")
                .set(&["status", "allocatable", "pods"], "1000")
                .value()
        })
        .collect();
    items.push(testkit::pod_group("g").gang(size as u32).value());
    items.extend((0..size).map(member));
    items.push(testkit::pod("plain").value());
    let state = dir.join("state.json");
    std::fs::write(
        &state,
        json!({"kind": "List", "apiVersion": "v1", "items": items}).to_string(),
    )
    .expect("write state");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let child = Command::new(BIN)
        .args(["serve", "--components", "extender", "--listen"])
        .arg(addr.to_string())
        .arg("--state")
        .arg(&state)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the binary");
    let server = Server {
        child,
        addr,
        _dir: TempDir(dir),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(mut c) = Conn::connect(addr).await
            && c.post(
                "/scheduler/filter",
                &filter_body(&testkit::pod("plain").value(), &node_names()),
            )
            .await
            .is_ok_and(|(s, _)| s == 200)
        {
            return server;
        }
        assert!(Instant::now() < deadline, "the server did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Server {
    fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    fn threads(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }
}

async fn filter(c: &mut Conn, pod: &Value) -> (Vec<String>, Duration) {
    filter_on(c, pod, &node_names()).await
}

async fn filter_on(c: &mut Conn, pod: &Value, nodes: &[String]) -> (Vec<String>, Duration) {
    let start = Instant::now();
    let (status, bytes) = c
        .post("/scheduler/filter", &filter_body(pod, nodes))
        .await
        .expect("filter");
    let took = start.elapsed();
    assert_eq!(status, 200);
    let (fit, failed) = filter_outcome(&bytes);
    assert!(!fit.is_empty(), "{failed:?}");
    (fit, took)
}

type Binds = Vec<tokio::task::JoinHandle<std::io::Result<String>>>;
type Serial = std::sync::Arc<tokio::sync::Mutex<Conn>>;

/// kube-scheduler's own cache in this cluster, where the gang's members
/// are the only pods: the members it assumed or bound on each node. Its
/// NodeResourcesFit offers the extender only nodes with room for one more
/// (members request 1 cpu, nodes have 64), as a real one does; the
/// extender learns of a member only when its bind arrives.
#[derive(Clone, Default)]
struct Cache(std::sync::Arc<std::sync::Mutex<Vec<usize>>>);

impl Cache {
    fn offered(&self) -> Vec<String> {
        let on = self.0.lock().expect("cache");
        node_names()
            .into_iter()
            .enumerate()
            .filter(|(i, _)| on.get(*i).copied().unwrap_or(0) < 64)
            .map(|(_, n)| n)
            .collect()
    }

    /// The cycle ends: the member counts on `node`.
    fn assume(&self, node: &str) {
        self.add(node, |c| c + 1);
    }

    /// Its bind failed: `ForgetPod`.
    fn forget(&self, node: &str) {
        self.add(node, |c| c.saturating_sub(1));
    }

    fn add(&self, node: &str, f: impl Fn(usize) -> usize) {
        let Some(i) = node.strip_prefix('n').and_then(|i| i.parse::<usize>().ok()) else {
            return;
        };
        let mut on = self.0.lock().expect("cache");
        if on.len() <= i {
            on.resize(i + 1, 0);
        }
        on[i] = f(on[i]);
    }
}

/// One scheduling cycle of member `i`: kube-scheduler's fit, the
/// extender's filter in the serial loop, the first node passed, assumed.
async fn cycle(serial: &Serial, cache: &Cache, i: usize) -> String {
    let (fit, _) = filter_on(&mut *serial.lock().await, &member(i), &cache.offered()).await;
    cache.assume(&fit[0]);
    fit[0].clone()
}

/// One member's bind on its own connection; one that answers it stays
/// reserved (its own wait ran out while the gang gathered) or that its
/// node no longer has room is requeued as kube-scheduler requeues a failed
/// bind: forgotten, filtered again in the serial loop, bound again.
async fn bind_member(
    addr: SocketAddr,
    serial: Serial,
    cache: Cache,
    i: usize,
    node: String,
) -> std::io::Result<String> {
    let mut node = node;
    loop {
        let e = bind_alone(addr, bind_body("ml", &format!("m{i}"), &node)).await?;
        if !e.contains("stays reserved") && !e.contains("no longer has room") {
            return Ok(e);
        }
        cache.forget(&node);
        tokio::time::sleep(Duration::from_millis(200)).await;
        node = cycle(&serial, &cache, i).await;
    }
}

/// Filters members `range` in the serial loop and sends each bind on its
/// own connection.
async fn schedule(s: &Server, serial: &Serial, range: std::ops::Range<usize>) -> Binds {
    let cache = Cache::default();
    let mut binds = Vec::with_capacity(range.len());
    for i in range {
        let node = cycle(serial, &cache, i).await;
        binds.push(tokio::spawn(bind_member(
            s.addr,
            serial.clone(),
            cache.clone(),
            i,
            node,
        )));
    }
    binds
}

async fn answered(binds: Binds) {
    for (i, b) in binds.into_iter().enumerate() {
        let e = b.await.expect("task").expect("bind answered");
        assert_eq!(e, "", "m{i}");
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

async fn bind_times() {
    for size in [1024, 4096] {
        let s = start(size).await;
        let serial: Serial = std::sync::Arc::new(tokio::sync::Mutex::new(
            Conn::connect(s.addr).await.expect("connect"),
        ));
        let t0 = Instant::now();
        let binds = schedule(&s, &serial, 0..size).await;
        let sent = t0.elapsed();
        answered(binds).await;
        let all = t0.elapsed();
        println!(
            "gang of {size:>5}: every member filtered and its bind sent in {}; all bound {} after the first filter ({} after the last bind was sent)",
            ms(sent),
            ms(all),
            ms(all - sent),
        );
    }
}

async fn held() {
    let size = 4096;
    let s = start(size).await;
    let mut c = Conn::connect(s.addr).await.expect("connect");
    let plain = testkit::pod("plain").value();
    let samples = 300;
    let mut idle: Vec<Duration> = Vec::with_capacity(samples);
    for _ in 0..samples {
        idle.push(filter(&mut c, &plain).await.1);
    }
    idle.sort();
    // Every bind but the last, held for quorum: each member straight to
    // a node (64 per node fill them exactly), without its filter, so the
    // figure is the binds' own.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (before, threads_before) = (s.rss_kib(), s.threads());
    let mut binds: Binds = (0..size - 1)
        .map(|i| {
            let body = bind_body("ml", &format!("m{i}"), &format!("n{}", i % NODES));
            tokio::spawn(bind_alone(s.addr, body))
        })
        .collect();
    // Held: the server answers none of them until the last member.
    tokio::time::sleep(Duration::from_secs(3)).await;
    if let Some(b) = binds.iter_mut().find(|b| b.is_finished()) {
        panic!("a bind answered early: {:?}", b.await);
    }
    let (after, threads_after) = (s.rss_kib(), s.threads());
    let mut busy: Vec<Duration> = Vec::with_capacity(samples);
    for _ in 0..samples {
        busy.push(filter(&mut c, &plain).await.1);
    }
    busy.sort();
    if let Some(b) = binds.iter_mut().find(|b| b.is_finished()) {
        panic!("a bind answered early: {:?}", b.await);
    }
    let held = size - 1;
    println!(
        "filter (plain pod, {NODES} nodes, keep-alive): p50 {} p99 {} with no bind held; p50 {} p99 {} with {held} binds held ({samples} samples each)",
        ms(percentile(&idle, 0.5)),
        ms(percentile(&idle, 0.99)),
        ms(percentile(&busy, 0.5)),
        ms(percentile(&busy, 0.99)),
    );
    let per = (after.saturating_sub(before) as f64) * 1024.0 / held as f64;
    println!(
        "server RSS {:.1} MiB before the binds, {:.1} MiB with {held} held: {:.1} KiB per held bind; threads {threads_before} -> {threads_after}",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        per / 1024.0,
    );
    let t0 = Instant::now();
    let last = bind_alone(
        s.addr,
        bind_body("ml", &format!("m{}", size - 1), &format!("n{}", NODES - 1)),
    )
    .await
    .expect("last bind");
    assert_eq!(last, "");
    answered(binds).await;
    println!(
        "the last member released {held} held binds: all bound in {}",
        ms(t0.elapsed())
    );
}

fn main() {
    let mode = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .unwrap_or_default();
    // Client sockets: one per bind, up to 4,096 at once.
    raise_open_files(16_384);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        if mode.is_empty() || mode == "bind" {
            bind_times().await;
        }
        if mode.is_empty() || mode == "held" {
            held().await;
        }
    });
}
