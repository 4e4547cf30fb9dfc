//! A bind held for its gang's quorum, through a real HTTP connection to the
//! real server (`tls::serve` on a loopback listener, plain HTTP), whose
//! client goes away mid-hold: the server drops the bind, and the member is
//! neither assumed nor held nor counted toward the quorum any more.

use crate::common;

use common::{app, post};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use kruntimes_scheduler::extender::bind::permit::Gangs;
use kruntimes_scheduler::serve::Standalone;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// A node, a gang of 2 and its two pods.
async fn cluster() -> Standalone {
    let mut a = app("");
    // Long enough that only the closed connection can end the hold.
    a.state
        .set_gangs(Arc::new(Gangs::new(Duration::from_secs(600))));
    let pod = |name: &str| {
        json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": "ml", "uid": format!("{name}-uid")},
            "spec": {"schedulingGroup": {"podGroupName": "g"},
                "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}})
    };
    let objects = json!({"kind": "List", "apiVersion": "v1", "items": [
        {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n1"},
         "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}}},
        {"kind": "PodGroup", "apiVersion": "scheduling.k8s.io/v1beta1",
         "metadata": {"name": "g", "namespace": "ml"},
         "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}},
        pod("p0"), pod("p1")]});
    let r = post(&a, "/v1/objects", &objects.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text);
    a
}

/// Polls `cond` every 10ms for at most 10s.
async fn wait_for(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..1000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

fn bind_body(pod: &str) -> String {
    json!({"PodName": pod, "PodNamespace": "ml", "PodUID": format!("{pod}-uid"), "Node": "n1"})
        .to_string()
}

/// A bind request on a fresh HTTP/1.1 connection: the pending response
/// and the connection's task (abort it to close the connection).
async fn start_bind(
    addr: std::net::SocketAddr,
    pod: &str,
) -> (
    tokio::task::JoinHandle<hyper::Result<hyper::Response<hyper::body::Incoming>>>,
    tokio::task::JoinHandle<()>,
) {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = hyper::Request::post("/scheduler/bind")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from(bind_body(pod))))
        .expect("request");
    let resp = tokio::spawn(async move { sender.send_request(req).await });
    (resp, conn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_closed_mid_hold_leaves_no_assumption_and_no_held_member() {
    let a = cluster().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(kruntimes_scheduler::tls::serve(
        listener,
        kruntimes_scheduler::http::router(a.state.clone()),
        None,
        async move {
            let _ = stopped.await;
        },
    ));
    let nodes = a.state.extender.nodes.clone();
    let gangs = a.state.extender.gangs.clone();

    let (resp, conn) = start_bind(addr, "p0").await;
    wait_for("p0 held", || gangs.is_held("ml", "p0")).await;
    assert!(nodes.read().is_assumed("ml", "p0"));
    assert_eq!(nodes.read().used("n1", "cpu"), Some(1000));

    // kube-scheduler gives up: the connection closes with the bind held.
    conn.abort();
    resp.abort();
    wait_for("p0 released", || {
        gangs.held() == 0 && gangs.units() == 0 && !nodes.read().is_assumed("ml", "p0")
    })
    .await;
    assert_eq!(nodes.read().used("n1", "cpu").unwrap_or(0), 0);

    // p1 alone does not reach the quorum with the cancelled p0: it is held.
    let (resp1, _conn1) = start_bind(addr, "p1").await;
    wait_for("p1 held", || gangs.is_held("ml", "p1")).await;
    assert!(!resp1.is_finished());
    // p0 retried completes it: both answer with no Error.
    let (resp0, _conn0) = start_bind(addr, "p0").await;
    for resp in [resp0, resp1] {
        let r = resp.await.expect("task").expect("response");
        assert_eq!(r.status(), 200);
        let body = r.into_body().collect().await.expect("body").to_bytes();
        let v: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(v["Error"], "", "{v}");
    }
    assert_eq!(gangs.held(), 0);
    let _ = stop.send(());
    server.await.expect("server task").expect("server");
}
