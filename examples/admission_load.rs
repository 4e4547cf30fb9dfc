//! Admission throughput and latency over HTTPS on loopback, keep-alive.
//!
//! Starts the admission router behind `tls::serve` with a fresh `certs`
//! certificate, then `--connections` clients each send reviews back to back
//! on one kept-alive HTTP/1.1 connection until `--requests` reviews are
//! answered. Prints validations per second and p50/p99/max latency.
//!
//! ```sh
//! cargo run --release --example admission_load -- --connections 8 --requests 40000
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kruntimes_scheduler::admission::{self, AdmissionState};
use kruntimes_scheduler::cache::cluster_index::ClusterIndex;
use kruntimes_scheduler::certs;
use kruntimes_scheduler::tls::{self, TlsConfigHandle};
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject;

#[derive(Parser)]
struct Args {
    /// Concurrent kept-alive connections.
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// Reviews to send in total.
    #[arg(long, default_value_t = 20_000)]
    requests: usize,
    /// Fixture under tests/data/admission/ to send.
    #[arg(long, default_value = "workload-create.json")]
    fixture: String,
    /// Webhook path.
    #[arg(long, default_value = "/admission/validate/workloads")]
    path: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let body = Bytes::from(std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/admission")
            .join(&args.fixture),
    )?);

    // Server: the admission router over TLS with a generated certificate.
    let dir = std::env::temp_dir().join(format!("krs-load-{}", std::process::id()));
    let generated = certs::generate(&kruntimes_scheduler::webhooks::material::service_dns_names(
        "kruntimes-scheduler",
        "kruntimes-system",
    ))?;
    certs::write(&dir, &generated, true)?;
    let handle = TlsConfigHandle::from_files(&dir.join("tls.crt"), &dir.join("tls.key"))?;
    let classes = ClusterIndex::with_priority_classes(&[PriorityClass {
        metadata: ObjectMeta {
            name: Some("high-priority".into()),
            ..Default::default()
        },
        value: Some(1000),
        ..Default::default()
    }]);
    let router = admission::router(AdmissionState::new(Arc::new(classes)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(tls::serve(listener, router, Some(handle), async {
        let _ = stopped.await;
    }));

    // Clients.
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(generated.ca_pem.as_bytes()) {
        roots.add(c?)?;
    }
    let client = Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth(),
    );
    let per_conn = args.requests.div_ceil(args.connections.max(1));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.connections.max(1) {
        let client = Arc::clone(&client);
        let body = body.clone();
        let path = args.path.clone();
        tasks.push(tokio::spawn(async move {
            let tcp = tokio::net::TcpStream::connect(addr).await?;
            tcp.set_nodelay(true)?;
            let name = ServerName::try_from("kruntimes-scheduler.kruntimes-system.svc")?;
            let tls = tokio_rustls::TlsConnector::from(client)
                .connect(name, tcp)
                .await?;
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
            tokio::spawn(conn);
            let mut latencies = Vec::with_capacity(per_conn);
            let mut denied = 0usize;
            for _ in 0..per_conn {
                let req = hyper::Request::post(path.as_str())
                    .header("host", "kruntimes-scheduler.kruntimes-system.svc")
                    .header("content-type", "application/json")
                    .body(Full::new(body.clone()))?;
                let t = Instant::now();
                let resp = sender.send_request(req).await?;
                let status = resp.status();
                let bytes = resp.into_body().collect().await?.to_bytes();
                latencies.push(t.elapsed());
                anyhow::ensure!(status == 200, "HTTP {status}");
                let v: serde_json::Value = serde_json::from_slice(&bytes)?;
                if v["response"]["allowed"] != true {
                    denied += 1;
                }
            }
            anyhow::Ok((latencies, denied))
        }));
    }
    let mut latencies: Vec<Duration> = Vec::new();
    let mut denied = 0;
    for t in tasks {
        let (l, d) = t.await??;
        latencies.extend(l);
        denied += d;
    }
    let elapsed = started.elapsed();
    let _ = stop.send(());
    server.await??;
    let _ = std::fs::remove_dir_all(&dir);

    latencies.sort();
    let pct = |p: f64| kruntimes_scheduler::testkit::percentile(&latencies, p);
    println!(
        "{} reviews of {} ({} bytes) to {} over {} HTTPS keep-alive connections in {:.2?}",
        latencies.len(),
        args.fixture,
        body.len(),
        args.path,
        args.connections,
        elapsed
    );
    println!(
        "{:.0} validations/s; latency p50 {:.2?}, p99 {:.2?}, max {:.2?}; denied {}",
        latencies.len() as f64 / elapsed.as_secs_f64(),
        pct(0.50),
        pct(0.99),
        pct(1.0),
        denied
    );
    Ok(())
}
