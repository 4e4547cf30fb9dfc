//! Admit/release round trips over the agent's unix socket.
//!
//! `cargo bench --bench agent` runs a criterion measurement of one round trip
//! (POST 201 + DELETE 204 on a kept-alive HTTP/1.1 connection) with the
//! journal on tmpfs (as in the example's in-memory `emptyDir`), then bounded
//! load loops ([`ROUNDS`] round trips, at most [`LOAD_DEADLINE`] each) with
//! one client and with [`CLIENTS`] concurrent clients, for each journal
//! setting — none, tmpfs (`/dev/shm`, detected as memory-backed: records
//! written at once, no `fdatasync`), the same tmpfs with group commit
//! forced (the writer-thread hand-off the detection saves), and the temp
//! directory's file system — printing admit and release latency p50/p99
//! (nearest rank, `testkit::percentile`), admissions per second and
//! admissions per journal sync (per write, inline). Every 201 waits for its
//! journal record to be durable; on a disk concurrent admissions share one
//! sync (group commit).
//!
//! Before the loops it prints the floor set by the file system: p50/p99 of a
//! bare `write` + `fdatasync` loop on each journal's file system.

use criterion::{Criterion, criterion_group, criterion_main};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kruntimes_scheduler::agent::Agent;
use kruntimes_scheduler::agent::journal::{SyncMode, memory_backed};
use kruntimes_scheduler::agent::metrics::{AgentMetrics, JournalStats};
use kruntimes_scheduler::agent::server;
use kruntimes_scheduler::agent::source::AgentConfig;
use kruntimes_scheduler::testkit::percentile;
use kube::runtime::watcher::Event;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const CLIENTS: usize = 4;
/// Round trips per load loop, shared among its clients.
const ROUNDS: usize = 2_000;
const LOAD_DEADLINE: Duration = Duration::from_secs(8);
/// Iterations of the bare `fdatasync` loop.
const FSYNC_ROUNDS: usize = 500;

/// A started agent: its socket and its journal's counters.
struct Started {
    path: PathBuf,
    journal: JournalStats,
}

fn start(rt: &tokio::runtime::Runtime, label: &str, journal: Option<&Path>) -> Started {
    start_with(rt, label, journal, SyncMode::Auto)
}

fn start_with(
    rt: &tokio::runtime::Runtime,
    label: &str,
    journal: Option<&Path>,
    mode: SyncMode,
) -> Started {
    let dir = std::env::temp_dir().join(format!("krs-agent-bench-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("agent.sock");
    if let Some(j) = journal {
        let _ = std::fs::remove_file(j);
        if let Some(d) = j.parent() {
            std::fs::create_dir_all(d).expect("journal dir");
        }
    }
    let metrics = AgentMetrics::default();
    let stats = metrics.journal.clone();
    let agent = Agent::open_with(
        AgentConfig::new("rp-1", "default"),
        Duration::from_secs(1),
        journal,
        mode,
        metrics,
    )
    .expect("agent");
    if let Some(j) = journal {
        let detected = if memory_backed(j) {
            "memory-backed: inline, no fdatasync"
        } else {
            "group commit, fdatasync"
        };
        println!(
            "journal {label}: {} ({mode:?}; file system {detected})",
            j.display()
        );
    }
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("rp-1".into()),
            namespace: Some("default".into()),
            annotations: Some(
                [
                    (
                        "kruntimes.io/capacity.runs".to_string(),
                        "1000000".to_string(),
                    ),
                    (
                        "kruntimes.io/capacity.gpu".to_string(),
                        "1000000".to_string(),
                    ),
                ]
                .into(),
            ),
            ..Default::default()
        },
        ..Default::default()
    };
    for e in [Event::Init, Event::InitApply(pod), Event::InitDone] {
        agent.apply_pod_event(e);
    }
    for e in [Event::Init, Event::InitDone] {
        agent.apply_run_event(e);
    }
    let socket = rt.block_on(async { server::bind(&path) }).expect("bind");
    let policy = server::PeerPolicy::owner_only(&socket);
    rt.spawn(server::serve(socket, agent, policy, std::future::pending()));
    Started {
        path,
        journal: stats,
    }
}

async fn connect(path: &Path) -> SendRequest<Full<Bytes>> {
    let stream = tokio::net::UnixStream::connect(path)
        .await
        .expect("connect");
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    sender
}

async fn send(
    s: &mut SendRequest<Full<Bytes>>,
    method: Method,
    uri: &str,
    body: String,
) -> StatusCode {
    s.ready().await.expect("ready");
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "agent")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    let resp = s.send_request(req).await.expect("send");
    let status = resp.status();
    let _ = resp.into_body().collect().await.expect("body");
    status
}

/// One admit + release; returns the admit and release latencies.
async fn round_trip(s: &mut SendRequest<Full<Bytes>>, uid: &str) -> (Duration, Duration) {
    let body = format!(
        r#"{{"namespace":"default","name":"{uid}","uid":"{uid}","requests":{{"runs":"1","gpu":"1"}}}}"#
    );
    let t0 = Instant::now();
    let st = send(s, Method::POST, "/v1/reservations", body).await;
    let admit = t0.elapsed();
    assert_eq!(st, StatusCode::CREATED);
    let t1 = Instant::now();
    let st = send(
        s,
        Method::DELETE,
        &format!("/v1/reservations/{uid}"),
        String::new(),
    )
    .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    (admit, t1.elapsed())
}

/// The file system's own floor: `write` of one record-sized buffer plus
/// `fdatasync`, in a loop, on a file in `dir`.
fn fsync_floor(label: &str, dir: &Path) {
    use std::io::Write as _;
    let _ = std::fs::create_dir_all(dir);
    let path = dir.join("fsync-floor");
    let Ok(mut f) = std::fs::File::create(&path) else {
        println!("fsync floor, {label}: cannot create {}", path.display());
        return;
    };
    let record = [b'x'; 128];
    let mut lat = Vec::with_capacity(FSYNC_ROUNDS);
    for _ in 0..FSYNC_ROUNDS {
        let t = Instant::now();
        f.write_all(&record).expect("write");
        f.sync_data().expect("fdatasync");
        lat.push(t.elapsed());
    }
    drop(f);
    let _ = std::fs::remove_file(&path);
    lat.sort();
    println!(
        "fsync floor, {label}: {FSYNC_ROUNDS} x (write 128 B + fdatasync): p50 {:?}, p99 {:?}",
        percentile(&lat, 0.50),
        percentile(&lat, 0.99)
    );
}

fn load_report(rt: &tokio::runtime::Runtime, label: &str, agent: &Started, clients: usize) {
    let syncs_before = agent.journal.syncs.get();
    let (lat, elapsed) = rt.block_on(async {
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..clients {
            let path = agent.path.clone();
            let per_client = ROUNDS / clients;
            tasks.push(tokio::spawn(async move {
                let mut s = connect(&path).await;
                let mut lat = Vec::with_capacity(per_client);
                for i in 0..per_client {
                    if t0.elapsed() > LOAD_DEADLINE {
                        break;
                    }
                    lat.push(round_trip(&mut s, &format!("load-{clients}-{c}-{i}")).await);
                }
                lat
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.expect("join"));
        }
        (all, t0.elapsed())
    });
    let syncs = agent.journal.syncs.get() - syncs_before;
    let (mut admit, mut release): (Vec<Duration>, Vec<Duration>) = lat.into_iter().unzip();
    admit.sort();
    release.sort();
    let n = admit.len();
    if n == 0 {
        println!("agent load, journal {label}, {clients} client(s): no round trip finished");
        return;
    }
    let per_sync = if syncs == 0 {
        String::new()
    } else {
        format!(
            "; {syncs} syncs, {:.2} admissions per sync",
            n as f64 / syncs as f64
        )
    };
    println!(
        "agent load, journal {label}, {clients} client(s): {n} admit+release round trips in {:.2}s: admit p50 {:?}, p99 {:?}; release p50 {:?}, p99 {:?}; {:.0} admissions/s{per_sync}",
        elapsed.as_secs_f64(),
        percentile(&admit, 0.50),
        percentile(&admit, 0.99),
        percentile(&release, 0.50),
        percentile(&release, 0.99),
        n as f64 / elapsed.as_secs_f64()
    );
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let pid = std::process::id();
    let shm = Path::new("/dev/shm")
        .is_dir()
        .then(|| PathBuf::from(format!("/dev/shm/krs-agent-bench-{pid}/agent.journal")));
    let disk = std::env::temp_dir().join(format!("krs-agent-bench-{pid}-journal/agent.journal"));
    let tmpfs = start(&rt, "tmpfs", shm.as_deref());
    let mut sender = rt.block_on(connect(&tmpfs.path));
    let mut n = 0u64;
    c.bench_function(
        "agent admit+release round trip (unix socket, journal on tmpfs)",
        |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let t0 = Instant::now();
                    for _ in 0..iters {
                        n += 1;
                        round_trip(&mut sender, &format!("crit-{n}")).await;
                    }
                    t0.elapsed()
                })
            })
        },
    );
    if let Some(dir) = shm.as_deref().and_then(Path::parent) {
        fsync_floor("tmpfs", dir);
    }
    if let Some(dir) = disk.parent() {
        fsync_floor("the temp dir's file system", dir);
    }
    let none = start(&rt, "none", None);
    let disk_agent = start(&rt, "disk", Some(&disk));
    let tmpfs_label = if shm.is_some() { "tmpfs" } else { "none" };
    // The same tmpfs with group commit forced: the writer-thread hand-off
    // that the memory-backed mode saves.
    let shm_gc = shm
        .as_deref()
        .and_then(Path::parent)
        .map(|d| d.join("gc.journal"));
    let tmpfs_gc = shm_gc
        .as_deref()
        .map(|j| start_with(&rt, "tmpfs-gc", Some(j), SyncMode::GroupCommit));
    for clients in [1, CLIENTS] {
        load_report(&rt, "none", &none, clients);
        load_report(&rt, tmpfs_label, &tmpfs, clients);
        if let Some(gc) = &tmpfs_gc {
            load_report(&rt, "tmpfs, group commit forced", gc, clients);
        }
        load_report(&rt, "on the temp dir's file system", &disk_agent, clients);
    }
    for d in [shm.as_deref().and_then(Path::parent), disk.parent()]
        .into_iter()
        .flatten()
    {
        let _ = std::fs::remove_dir_all(d);
    }
    for label in ["tmpfs", "tmpfs-gc", "none", "disk"] {
        let _ = std::fs::remove_dir_all(
            std::env::temp_dir().join(format!("krs-agent-bench-{pid}-{label}")),
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
