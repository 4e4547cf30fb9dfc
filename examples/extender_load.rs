//! HTTP load on loopback against the real router (standalone mode): filter
//! then prioritize for one pod, as kube-scheduler calls them, over keep-alive
//! HTTP/1.1 connections. Prints p50/p99 per call and calls per second.
//!
//! `cargo run --release --example extender_load -- [NODES] [CALLS] [CONNECTIONS]`
//! (defaults 5000, 2000, 2). Bounded: stops after CALLS filter+prioritize pairs.

use kruntimes_scheduler::cache::CacheConfig;
use kruntimes_scheduler::http::router;
use kruntimes_scheduler::serve::standalone;
use kruntimes_scheduler::testkit::percentile;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

async fn call(conn: &mut BufReader<TcpStream>, path: &str, body: &[u8]) -> anyhow::Result<Vec<u8>> {
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    // One write, so Nagle and delayed ACKs do not add 40 ms per call.
    let mut req = head.into_bytes();
    req.extend_from_slice(body);
    conn.get_mut().write_all(&req).await?;
    let mut len = 0usize;
    let mut status = String::new();
    conn.read_line(&mut status).await?;
    anyhow::ensure!(status.contains(" 200 "), "unexpected status {status:?}");
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).await?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse()?;
        }
    }
    let mut buf = vec![0u8; len];
    conn.read_exact(&mut buf).await?;
    Ok(buf)
}

/// The `p` quantile in milliseconds (nearest rank, `testkit::percentile`).
fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    if v.is_empty() {
        return 0.0;
    }
    percentile(v, p).as_secs_f64() * 1e3
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let nodes = args.first().copied().unwrap_or(5000);
    let calls = args.get(1).copied().unwrap_or(2000);
    let conns = args.get(2).copied().unwrap_or(2).max(1);

    let mut objects: Vec<Value> = (0..nodes)
        .map(|i| {
            json!({"kind": "Node", "apiVersion": "v1", "metadata": {"name": format!("node-{i:05}")},
                "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}}})
        })
        .collect();
    for i in 0..nodes {
        objects.push(json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": format!("p-{i}"), "namespace": "load"},
            "spec": {"nodeName": format!("node-{i:05}"), "containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": if i % 7 == 0 { "31" } else { "4" }, "memory": "8Gi"}}}]}}));
    }
    let app = standalone(CacheConfig::default(), objects)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, router(app.state)).await;
    });

    let pod = json!({"metadata": {"name": "web-0", "namespace": "load", "uid": "u"},
        "spec": {"containers": [{"name": "c", "image": "web", "resources": {"requests": {"cpu": "2", "memory": "8Gi"}}}]}});
    let names: Vec<String> = (0..nodes).map(|i| format!("node-{i:05}")).collect();
    let filter_body = serde_json::to_vec(&json!({"Pod": pod, "Nodes": null, "NodeNames": names}))?;

    let per_conn = calls.div_ceil(conns);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (fb, pod) = (filter_body.clone(), pod.clone());
        tasks.push(tokio::spawn(async move {
            let stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let mut conn = BufReader::new(stream);
            let (mut f, mut p) = (Vec::new(), Vec::new());
            for _ in 0..per_conn {
                let t = Instant::now();
                let answer = call(&mut conn, "/scheduler/filter", &fb).await?;
                f.push(t.elapsed());
                // Decoded outside the timing: only the call is measured.
                let out: Value = serde_json::from_slice(&answer)?;
                let pb = serde_json::to_vec(
                    &json!({"Pod": pod, "Nodes": null, "NodeNames": out["NodeNames"]}),
                )?;
                let t = Instant::now();
                call(&mut conn, "/scheduler/prioritize", &pb).await?;
                p.push(t.elapsed());
            }
            anyhow::Ok((f, p))
        }));
    }
    let (mut f, mut p) = (Vec::new(), Vec::new());
    for t in tasks {
        let (a, b) = t.await??;
        f.extend(a);
        p.extend(b);
    }
    let secs = start.elapsed().as_secs_f64();
    let total = f.len() + p.len();
    println!(
        "{nodes} nodes, {} filter+prioritize pairs over {conns} connections in {secs:.2}s",
        f.len()
    );
    println!(
        "filter:     p50 {:.3} ms  p99 {:.3} ms (client-observed, loopback)",
        pct(&mut f, 0.5),
        pct(&mut f, 0.99)
    );
    println!(
        "prioritize: p50 {:.3} ms  p99 {:.3} ms",
        pct(&mut p, 0.5),
        pct(&mut p, 0.99)
    );
    println!(
        "{:.0} calls/s ({:.0} pods/s)",
        total as f64 / secs,
        f.len() as f64 / secs
    );
    Ok(())
}
