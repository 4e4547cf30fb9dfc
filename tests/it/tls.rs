//! HTTPS serving and certificate rotation, the way a Kubernetes Secret
//! volume rotates: the files are symlinks into `..data`, and an update
//! swaps the `..data` directory symlink atomically.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;
use kruntimes_scheduler::certs::{Generated, generate};
use kruntimes_scheduler::tls::{self, TlsConfigHandle};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;

fn leaf(g: &Generated) -> CertificateDer<'static> {
    CertificateDer::pem_slice_iter(g.chain_pem.as_bytes())
        .next()
        .expect("a certificate")
        .expect("valid PEM")
}

/// A Secret-volume-like directory: `tls.crt` → `..data/tls.crt`, `..data` → `<version>`.
struct SecretDir {
    root: PathBuf,
}

impl SecretDir {
    fn new() -> Self {
        let root = std::env::temp_dir().join(format!("krs-tls-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&root).expect("temp dir");
        Self { root }
    }

    /// Writes a version directory and swaps `..data` to it atomically.
    fn publish(&self, version: &str, cert: &[u8], key: &[u8]) {
        let dir = self.root.join(version);
        std::fs::create_dir_all(&dir).expect("version dir");
        std::fs::write(dir.join("tls.crt"), cert).expect("write cert");
        std::fs::write(dir.join("tls.key"), key).expect("write key");
        let tmp = self.root.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(version, &tmp).expect("symlink");
        std::fs::rename(&tmp, self.root.join("..data")).expect("swap ..data");
        for name in ["tls.crt", "tls.key"] {
            let link = self.root.join(name);
            if std::fs::symlink_metadata(&link).is_err() {
                std::os::unix::fs::symlink(Path::new("..data").join(name), &link)
                    .expect("file symlink");
            }
        }
    }

    fn cert(&self) -> PathBuf {
        self.root.join("tls.crt")
    }

    fn key(&self) -> PathBuf {
        self.root.join("tls.key")
    }
}

impl Drop for SecretDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn client_config(
    cas: &[&Generated],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for g in cas {
        for c in CertificateDer::pem_slice_iter(g.ca_pem.as_bytes()) {
            roots.add(c.expect("CA PEM")).expect("CA added");
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    // A resumed session does not present the certificate again: every
    // connection here must do a full handshake to see what is served now.
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

/// Opens a new TLS connection, returns the presented leaf and the answer to `GET /healthz`.
async fn fetch(
    addr: std::net::SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> (CertificateDer<'static>, String) {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let connector = tokio_rustls::TlsConnector::from(config);
    let name = ServerName::try_from("kruntimes-scheduler.kruntimes-system.svc").expect("name");
    let stream = connector.connect(name, tcp).await.expect("TLS handshake");
    let presented = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .expect("server presents a certificate")
        .clone()
        .into_owned();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("HTTP handshake");
    tokio::spawn(conn);
    let req = hyper::Request::get("/healthz")
        .header("host", "kruntimes-scheduler")
        .body(Empty::<Bytes>::new())
        .expect("request");
    let resp = sender.send_request(req).await.expect("response");
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (presented, String::from_utf8_lossy(&body).into_owned())
}

fn app() -> Router {
    Router::new().route("/healthz", get(|| async { "ok" }))
}

fn names() -> Vec<String> {
    kruntimes_scheduler::webhooks::material::service_dns_names(
        "kruntimes-scheduler",
        "kruntimes-system",
    )
}

#[tokio::test]
async fn rotation_by_data_symlink_swap_and_broken_certs_keep_serving() {
    let first = generate(&names()).expect("first pair");
    let second = generate(&names()).expect("second pair");
    let third = generate(&names()).expect("third pair");
    let dir = SecretDir::new();
    dir.publish(
        "..2026_11_29_10_00_00.1",
        first.chain_pem.as_bytes(),
        first.key_pem.as_bytes(),
    );

    let handle = TlsConfigHandle::from_files(&dir.cert(), &dir.key()).expect("loads");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(tls::serve(listener, app(), Some(handle), async {
        let _ = stopped.await;
    }));

    let config = client_config(&[&first, &second, &third], rustls::ALL_VERSIONS);
    let (cert, body) = fetch(addr, config.clone()).await;
    assert_eq!(cert, leaf(&first));
    assert_eq!(body, "ok");

    // TLS 1.2 clients are served too.
    let tls12 = client_config(&[&first], &[&rustls::version::TLS12]);
    assert_eq!(fetch(addr, tls12).await.0, leaf(&first));

    // Rotate: swap ..data to a new version directory.
    dir.publish(
        "..2026_11_29_11_00_00.2",
        second.chain_pem.as_bytes(),
        second.key_pem.as_bytes(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (cert, body) = fetch(addr, config.clone()).await;
        assert_eq!(body, "ok");
        if cert == leaf(&second) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "new certificate not presented within 10s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A garbage certificate, then a certificate with the wrong key: the
    // server stays up and keeps presenting the last good certificate.
    dir.publish(
        "..2026_11_29_12_00_00.3",
        b"-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n",
        b"not a key",
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(fetch(addr, config.clone()).await.0, leaf(&second));
    dir.publish(
        "..2026_11_29_13_00_00.4",
        third.chain_pem.as_bytes(),
        second.key_pem.as_bytes(),
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(fetch(addr, config.clone()).await.0, leaf(&second));

    // A good pair again is picked up.
    dir.publish(
        "..2026_11_29_14_00_00.5",
        third.chain_pem.as_bytes(),
        third.key_pem.as_bytes(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while fetch(addr, config.clone()).await.0 != leaf(&third) {
        assert!(
            Instant::now() < deadline,
            "third certificate not presented within 10s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(30), server)
        .await
        .expect("server stops")
        .expect("server task")
        .expect("serve returns Ok");
}

#[tokio::test]
async fn reload_reports_unchanged_changed_and_broken() {
    let first = generate(&names()).expect("first pair");
    let second = generate(&names()).expect("second pair");
    let dir = SecretDir::new();
    dir.publish("v1", first.chain_pem.as_bytes(), first.key_pem.as_bytes());
    let handle = TlsConfigHandle::from_files(&dir.cert(), &dir.key()).expect("loads");
    assert!(!handle.reload().expect("unchanged"));
    dir.publish("v2", b"garbage", b"garbage");
    assert!(handle.reload().is_err());
    assert_eq!(handle.current().cert[0], leaf(&first));
    dir.publish("v3", second.chain_pem.as_bytes(), second.key_pem.as_bytes());
    assert!(handle.reload().expect("changed"));
    assert_eq!(handle.current().cert[0], leaf(&second));
}

#[tokio::test]
async fn broken_files_at_startup_are_an_error() {
    let dir = SecretDir::new();
    dir.publish("v1", b"garbage", b"garbage");
    assert!(TlsConfigHandle::from_files(&dir.cert(), &dir.key()).is_err());
    assert!(TlsConfigHandle::from_files(&dir.root.join("missing.crt"), &dir.key()).is_err());
}

#[tokio::test]
async fn plain_http_without_tls() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(tls::serve(listener, app(), None, async {
        let _ = stopped.await;
    }));
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .expect("HTTP handshake");
    tokio::spawn(conn);
    for _ in 0..3 {
        let req = hyper::Request::get("/healthz")
            .header("host", "localhost")
            .body(Empty::<Bytes>::new())
            .expect("request");
        let resp = sender.send_request(req).await.expect("response");
        assert_eq!(resp.status(), 200);
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&body[..], b"ok");
    }
    drop(sender);
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(30), server)
        .await
        .expect("server stops")
        .expect("server task")
        .expect("serve returns Ok");
}
