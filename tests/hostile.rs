//! Hostile clients and hostile requests (#14): connections that send their
//! headers or bodies slowly, more connections or requests than a listener
//! admits, and extender request bodies built to be expensive.

mod common;

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
