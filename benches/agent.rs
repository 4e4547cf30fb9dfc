//! Admit/release round trips over the agent's unix socket.
//!
//! `cargo bench --bench agent` runs a criterion measurement of one round trip
//! (POST 201 + DELETE 204 on a kept-alive HTTP/1.1 connection) with the
//! journal on tmpfs (as in the example's in-memory `emptyDir`), then a
//! bounded load loop (4 concurrent clients, 4 000 round trips each, at most
//! 20 s) for each journal setting — none, tmpfs (`/dev/shm`), and the temp
//! directory's file system — printing admit and release latency p50/p99
//! (nearest rank, `testkit::percentile`) and
//! admissions per second. Every 201 waits for its journal record to be
//! synced; concurrent admissions share one sync.

use criterion::{Criterion, criterion_group, criterion_main};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kruntimes_scheduler::agent::Agent;
use kruntimes_scheduler::agent::metrics::AgentMetrics;
use kruntimes_scheduler::agent::server;
use kruntimes_scheduler::agent::source::AgentConfig;
use kruntimes_scheduler::testkit::percentile;
use kube::runtime::watcher::Event;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const CLIENTS: usize = 4;
const PER_CLIENT: usize = 4_000;
const LOAD_DEADLINE: Duration = Duration::from_secs(20);

fn start(rt: &tokio::runtime::Runtime, label: &str, journal: Option<&Path>) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("krs-agent-bench-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("agent.sock");
    if let Some(j) = journal {
        let _ = std::fs::remove_file(j);
        if let Some(d) = j.parent() {
            std::fs::create_dir_all(d).expect("journal dir");
        }
    }
    let agent = Agent::open(
        AgentConfig::new("rp-1", "default"),
        Duration::from_secs(1),
        journal,
        AgentMetrics::default(),
    )
    .expect("agent");
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
    path
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

fn load_report(rt: &tokio::runtime::Runtime, label: &str, path: &Path) {
    let (lat, elapsed) = rt.block_on(async {
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..CLIENTS {
            let path = path.to_owned();
            tasks.push(tokio::spawn(async move {
                let mut s = connect(&path).await;
                let mut lat = Vec::with_capacity(PER_CLIENT);
                for i in 0..PER_CLIENT {
                    if t0.elapsed() > LOAD_DEADLINE {
                        break;
                    }
                    lat.push(round_trip(&mut s, &format!("load-{c}-{i}")).await);
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
    let (mut admit, mut release): (Vec<Duration>, Vec<Duration>) = lat.into_iter().unzip();
    admit.sort();
    release.sort();
    let n = admit.len();
    if n == 0 {
        println!("agent load, journal {label}: no round trip finished");
        return;
    }
    println!(
        "agent load, journal {label}: {CLIENTS} clients, {n} admit+release round trips in {:.2}s: admit p50 {:?}, p99 {:?}; release p50 {:?}, p99 {:?}; {:.0} admissions/s",
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
    let path = start(&rt, "tmpfs", shm.as_deref());
    let mut sender = rt.block_on(connect(&path));
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
    load_report(&rt, if shm.is_some() { "tmpfs" } else { "none" }, &path);
    let path = start(&rt, "none", None);
    load_report(&rt, "none", &path);
    let path = start(&rt, "disk", Some(&disk));
    load_report(&rt, "on the temp dir's file system", &path);
    for d in [shm.as_deref().and_then(Path::parent), disk.parent()]
        .into_iter()
        .flatten()
    {
        let _ = std::fs::remove_dir_all(d);
    }
    for label in ["tmpfs", "none", "disk"] {
        let _ = std::fs::remove_dir_all(
            std::env::temp_dir().join(format!("krs-agent-bench-{pid}-{label}")),
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
