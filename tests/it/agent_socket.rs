//! The agent over a real unix socket: HTTP/1.1 requests from a hyper
//! client, state fed as watch events, exactly as in cluster mode.

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kruntimes_scheduler::agent::Agent;
use kruntimes_scheduler::agent::metrics::AgentMetrics;
use kruntimes_scheduler::agent::server::{self, PeerPolicy, SocketError};
use kruntimes_scheduler::agent::source::AgentConfig;
use kruntimes_scheduler::crd::Run;
use kruntimes_scheduler::testkit::{self, Obj};
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::UnixStream;
use tokio::sync::oneshot;

const POD: &str = "rp-1";
const NS: &str = "default";

// === fixtures ===

/// This agent's Runtime Pod `default/rp-1` (uid `pod-uid`) declaring
/// `capacity`, with no labels and no status: the agent reads only the
/// capacity annotations.
fn pod_obj(capacity: &[(&str, &str)]) -> Obj {
    testkit::runtime_pod(POD, capacity, "2026-01-01T00:00:00Z")
        .namespace(NS)
        .uid("pod-uid")
        .unset(&["metadata", "labels"])
        .unset(&["status"])
}

fn mk_pod(capacity: &[(&str, &str)]) -> Pod {
    pod_obj(capacity).typed()
}

/// Run `default/name` (uid `uid-<name>`, no resourceVersion) of runtime
/// `python` requesting `requests`, in `phase`, assigned to `pod`.
fn run_obj(name: &str, phase: &str, pod: Option<&str>, requests: &[(&str, &str)]) -> Obj {
    testkit::run(name, requests)
        .namespace(NS)
        .runtime("python")
        .unset(&["metadata", "resourceVersion"])
        .status(phase, pod)
}

fn mk_run(name: &str, phase: &str, pod: Option<&str>, requests: &[(&str, &str)]) -> Run {
    run_obj(name, phase, pod, requests).typed()
}

fn config(max_bypass: u32) -> AgentConfig {
    AgentConfig {
        max_bypass,
        ..AgentConfig::new(POD, NS)
    }
}

/// A fresh private directory for one test (the agent refuses a socket
/// directory others can write, such as the temp dir itself).
fn test_dir(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("krs-agent-{}-{test}", std::process::id()))
}

fn socket_path(test: &str) -> PathBuf {
    test_dir(test).join("agent.sock")
}

/// An agent serving on a fresh socket; stops (and removes the socket) on drop.
struct Harness {
    agent: Arc<Agent>,
    path: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Harness {
    /// Starts with a first list of the pod (if any) and the Runs.
    async fn start(test: &str, max_bypass: u32, pod: Option<Pod>, runs: Vec<Run>) -> Self {
        let agent = Agent::new(config(max_bypass), Duration::from_secs(10));
        agent.apply_pod_event(Event::Init);
        if let Some(p) = pod {
            agent.apply_pod_event(Event::InitApply(p));
        }
        agent.apply_pod_event(Event::InitDone);
        agent.apply_run_event(Event::Init);
        for r in runs {
            agent.apply_run_event(Event::InitApply(r));
        }
        agent.apply_run_event(Event::InitDone);
        Self::serve(test, agent).await
    }

    async fn serve(test: &str, agent: Arc<Agent>) -> Self {
        Self::serve_with(test, agent, |_| {}).await
    }

    /// Serves with the owner-only policy changed by `policy`.
    async fn serve_with(
        test: &str,
        agent: Arc<Agent>,
        policy: impl FnOnce(&mut PeerPolicy),
    ) -> Self {
        let path = socket_path(test);
        let _ = std::fs::remove_file(&path);
        let socket = server::bind(&path).expect("bind");
        let (tx, rx) = oneshot::channel::<()>();
        let mut allowed = PeerPolicy::owner_only(&socket);
        policy(&mut allowed);
        let policy = allowed;
        let task = tokio::spawn(server::serve(
            socket,
            Arc::clone(&agent),
            policy,
            async move {
                let _ = rx.await;
            },
        ));
        Harness {
            agent,
            path,
            stop: Some(tx),
            task: Some(task),
        }
    }

    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.expect("join").expect("serve");
        }
    }

    async fn call(&self, method: Method, uri: &str, body: Option<String>) -> (StatusCode, Value) {
        call(&self.path, method, uri, body).await
    }

    async fn reserve(
        &self,
        name: &str,
        requests: Option<Value>,
        query: &str,
    ) -> (StatusCode, Value) {
        let mut body = json!({"namespace": NS, "name": name, "uid": format!("uid-{name}")});
        if let Some(r) = requests {
            body["requests"] = r;
        }
        self.call(
            Method::POST,
            &format!("/v1/reservations{query}"),
            Some(body.to_string()),
        )
        .await
    }

    async fn release(&self, name: &str) -> StatusCode {
        self.call(
            Method::DELETE,
            &format!("/v1/reservations/uid-{name}"),
            None,
        )
        .await
        .0
    }

    async fn status(&self) -> Value {
        let (s, v) = self.call(Method::GET, "/v1/reservations", None).await;
        assert_eq!(s, StatusCode::OK);
        v
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// One HTTP/1.1 request over a new connection to the socket.
async fn call(path: &Path, method: Method, uri: &str, body: Option<String>) -> (StatusCode, Value) {
    let stream = UnixStream::connect(path).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "agent")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .expect("request");
    let resp = sender.send_request(req).await.expect("send");
    let status = resp.status();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, v)
}

/// Waits until `name` is in the queue (its caller's request has arrived).
async fn until_queued(h: &Harness, name: &str) {
    let uid = format!("uid-{name}");
    for _ in 0..500 {
        let st = h.status().await;
        if st["queued"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|q| q["uid"] == uid.as_str())
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{name} never queued");
}

fn gpu(n: &str) -> Option<Value> {
    Some(json!({"gpu": n}))
}

fn runs(n: &str) -> Option<Value> {
    Some(json!({"runs": n}))
}

// === tests ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_concurrent_admissions_exactly_capacity_wins() {
    // gpu 5, one already taken by a Running Run: 4 units for 40 racers.
    let h = Harness::start(
        "race",
        4,
        Some(mk_pod(&[("runs", "100"), ("gpu", "5")])),
        vec![mk_run("busy", "Running", Some(POD), &[("gpu", "1")])],
    )
    .await;
    let h = Arc::new(h);
    let mut tasks = Vec::new();
    for i in 0..40 {
        let h = Arc::clone(&h);
        tasks.push(tokio::spawn(async move {
            h.reserve(&format!("r{i}"), gpu("1"), "").await.0
        }));
    }
    let mut won = 0;
    let mut queued = 0;
    for t in tasks {
        match t.await.expect("join") {
            StatusCode::CREATED => won += 1,
            StatusCode::CONFLICT => queued += 1,
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!((won, queued), (4, 36));
    let st = h.status().await;
    assert_eq!(st["reserved"]["gpu"], "5");
    assert_eq!(st["free"]["gpu"], "0");
    assert_eq!(st["queued"].as_array().map(Vec::len), Some(36));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_same_uid_is_idempotent_under_concurrency() {
    let h = Arc::new(Harness::start("idem", 4, Some(mk_pod(&[("runs", "3")])), vec![]).await);
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let h = Arc::clone(&h);
        tasks.push(tokio::spawn(async move { h.reserve("a", None, "").await }));
    }
    // `a` is unknown to the watch: without requests it is a 404...
    for t in tasks {
        assert_eq!(t.await.expect("join").0, StatusCode::NOT_FOUND);
    }
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let h = Arc::clone(&h);
        tasks.push(tokio::spawn(async move {
            h.reserve("a", runs("1"), "").await.0
        }));
    }
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(t.await.expect("join"));
    }
    assert_eq!(
        codes.iter().filter(|c| **c == StatusCode::CREATED).count(),
        1
    );
    assert_eq!(codes.iter().filter(|c| **c == StatusCode::OK).count(), 9);
    let st = h.status().await;
    assert_eq!(st["reserved"]["runs"], "1");
    assert_eq!(st["reservations"][0]["uid"], "uid-a");
    // ...and once the watch shows it, the body may omit requests.
    h.agent.apply_run_event(Event::Apply(mk_run(
        "b",
        "Scheduled",
        Some(POD),
        &[("runs", "2")],
    )));
    let (s, v) = h.reserve("b", None, "").await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["requests"]["runs"], "2");
    assert_eq!(h.reserve("b", None, "").await.0, StatusCode::OK);
}

#[tokio::test]
async fn agent_queue_admits_in_arrival_order() {
    let h = Harness::start("order", 0, Some(mk_pod(&[("runs", "1")])), vec![]).await;
    assert_eq!(h.reserve("a", runs("1"), "").await.0, StatusCode::CREATED);
    for (i, n) in ["b", "c", "d"].iter().enumerate() {
        let (s, v) = h.reserve(n, runs("1"), "").await;
        assert_eq!(s, StatusCode::CONFLICT);
        assert_eq!(v["queued"], true);
        assert_eq!(v["position"], i + 1);
        assert_eq!(v["shortfall"]["runs"], "1");
        assert!(
            v["error"]
                .as_str()
                .is_some_and(|e| e.contains("runs short by 1")),
            "{v}"
        );
    }
    // Asking again keeps the place.
    assert_eq!(h.reserve("c", runs("1"), "").await.1["position"], 2);
    assert_eq!(h.release("a").await, StatusCode::NO_CONTENT);
    assert_eq!(
        h.reserve("b", runs("1"), "").await.0,
        StatusCode::OK,
        "admitted by the agent"
    );
    assert_eq!(h.reserve("c", runs("1"), "").await.1["position"], 1);
    assert_eq!(h.release("b").await, StatusCode::NO_CONTENT);
    assert_eq!(h.reserve("c", runs("1"), "").await.0, StatusCode::OK);
    assert_eq!(h.reserve("d", runs("1"), "").await.1["position"], 1);
    // DELETE is idempotent, and takes a queued Run out of the queue.
    assert_eq!(h.release("d").await, StatusCode::NO_CONTENT);
    assert_eq!(h.release("d").await, StatusCode::NO_CONTENT);
    assert_eq!(h.status().await["queued"], json!([]));
    h.stop().await;
}

#[tokio::test]
async fn agent_big_run_is_not_starved() {
    let h = Harness::start("starve", 1, Some(mk_pod(&[("runs", "3")])), vec![]).await;
    assert_eq!(h.reserve("s1", runs("1"), "").await.0, StatusCode::CREATED);
    assert_eq!(h.reserve("s2", runs("1"), "").await.0, StatusCode::CREATED);
    assert_eq!(
        h.reserve("big", runs("3"), "").await.0,
        StatusCode::CONFLICT
    );
    // One bypass allowed...
    assert_eq!(h.reserve("s3", runs("1"), "").await.0, StatusCode::CREATED);
    h.release("s1").await;
    // ...then small Runs wait behind the big one although they fit.
    let (s, v) = h.reserve("s4", runs("1"), "").await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(v["blockedBy"], "uid-big");
    assert_eq!(v["shortfall"], json!({}));
    h.release("s2").await;
    h.release("s3").await;
    assert_eq!(h.reserve("big", runs("3"), "").await.0, StatusCode::OK);
    let st = h.status().await;
    assert_eq!(st["queued"][0]["uid"], "uid-s4");
    h.stop().await;
}

#[tokio::test]
async fn agent_wait_times_out_or_returns_on_admission() {
    let h = Arc::new(Harness::start("wait", 4, Some(mk_pod(&[("gpu", "1")])), vec![]).await);
    assert_eq!(h.reserve("a", gpu("1"), "").await.0, StatusCode::CREATED);
    let t0 = Instant::now();
    let (s, v) = h.reserve("b", gpu("1"), "?wait=50ms").await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(v["queued"], true);
    assert!(t0.elapsed() >= Duration::from_millis(50));
    assert!(t0.elapsed() < Duration::from_secs(5));
    // A waiting caller gets 201 as soon as capacity frees.
    let waiter = {
        let h = Arc::clone(&h);
        tokio::spawn(async move { h.reserve("b", gpu("1"), "?wait=10s").await })
    };
    until_queued(&h, "b").await;
    let t0 = Instant::now();
    h.release("a").await;
    let (s, v) = waiter.await.expect("join");
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["uid"], "uid-b");
    assert!(t0.elapsed() < Duration::from_secs(5));
    // Bad durations are refused.
    assert_eq!(
        h.reserve("c", gpu("1"), "?wait=soon").await.0,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn agent_running_runs_hold_capacity_from_the_start() {
    // A restarted agent: two Runs already executing fill runs=2.
    let h = Harness::start(
        "restart",
        4,
        Some(mk_pod(&[])),
        vec![
            mk_run("r1", "Running", Some(POD), &[]),
            mk_run("r2", "Ready", Some(POD), &[]),
            mk_run("s", "Scheduled", Some(POD), &[]),
            mk_run("other", "Running", Some("rp-2"), &[]),
            mk_run("done", "Succeeded", Some(POD), &[]),
        ],
    )
    .await;
    let st = h.status().await;
    assert_eq!(st["capacity"]["runs"], "2", "default runs capacity");
    assert_eq!(st["reserved"]["runs"], "2");
    let origins: Vec<_> = st["reservations"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| (r["name"].clone(), r["origin"].clone()))
        .collect();
    assert_eq!(
        origins,
        vec![
            (json!("r1"), json!("observed")),
            (json!("r2"), json!("observed"))
        ]
    );
    assert_eq!(h.reserve("s", None, "").await.0, StatusCode::CONFLICT);
    assert_eq!(h.reserve("r1", None, "").await.0, StatusCode::OK);
    h.stop().await;
}

#[tokio::test]
async fn agent_watch_events_release() {
    let h = Arc::new(
        Harness::start(
            "events",
            4,
            Some(mk_pod(&[("runs", "1")])),
            vec![
                mk_run("a", "Running", Some(POD), &[]),
                mk_run("b", "Scheduled", Some(POD), &[]),
                mk_run("c", "Scheduled", Some(POD), &[]),
                mk_run("d", "Scheduled", Some(POD), &[]),
            ],
        )
        .await,
    );
    assert_eq!(h.reserve("b", None, "").await.0, StatusCode::CONFLICT);
    let waiter = {
        let h = Arc::clone(&h);
        tokio::spawn(async move { h.reserve("b", None, "?wait=10s").await.0 })
    };
    until_queued(&h, "b").await;
    // Terminal.
    h.agent
        .apply_run_event(Event::Apply(mk_run("a", "Succeeded", Some(POD), &[])));
    assert_eq!(waiter.await.expect("join"), StatusCode::CREATED);
    // Deleted.
    assert_eq!(h.reserve("c", None, "").await.0, StatusCode::CONFLICT);
    h.agent
        .apply_run_event(Event::Delete(mk_run("b", "Running", Some(POD), &[])));
    assert_eq!(h.reserve("c", None, "").await.0, StatusCode::OK);
    // Reassigned.
    assert_eq!(h.reserve("d", None, "").await.0, StatusCode::CONFLICT);
    h.agent
        .apply_run_event(Event::Apply(mk_run("c", "Scheduled", Some("rp-2"), &[])));
    assert_eq!(h.reserve("d", None, "").await.0, StatusCode::OK);
    // A relist without `d` means it was deleted meanwhile.
    h.agent.apply_run_event(Event::Init);
    h.agent
        .apply_run_event(Event::InitApply(mk_run("e", "Scheduled", Some(POD), &[])));
    h.agent.apply_run_event(Event::InitDone);
    assert_eq!(h.status().await["reserved"], json!({}));
    // A waiter whose Run is deleted while queued hears it is no longer queued.
    assert_eq!(h.reserve("e", None, "").await.0, StatusCode::CREATED);
    h.agent
        .apply_run_event(Event::Apply(mk_run("f", "Scheduled", Some(POD), &[])));
    let waiter = {
        let h = Arc::clone(&h);
        tokio::spawn(async move { h.reserve("f", None, "?wait=10s").await })
    };
    until_queued(&h, "f").await;
    h.agent
        .apply_run_event(Event::Delete(mk_run("f", "Scheduled", Some(POD), &[])));
    let (s, v) = waiter.await.expect("join");
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(v["queued"], false, "{v}");
    // So does one whose queued request is withdrawn by DELETE.
    h.agent
        .apply_run_event(Event::Apply(mk_run("g", "Scheduled", Some(POD), &[])));
    let waiter = {
        let h = Arc::clone(&h);
        tokio::spawn(async move { h.reserve("g", None, "?wait=10s").await })
    };
    until_queued(&h, "g").await;
    let t0 = Instant::now();
    assert_eq!(h.release("g").await, StatusCode::NO_CONTENT);
    let (s, v) = waiter.await.expect("join");
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(v["queued"], false, "{v}");
    assert!(
        v["error"].as_str().is_some_and(|e| e.contains("withdrawn")),
        "{v}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn agent_explicit_release_is_not_undone_by_a_stale_running_event() {
    let h = Harness::start(
        "stale-event",
        4,
        Some(mk_pod(&[("runs", "1")])),
        vec![
            mk_run("a", "Scheduled", Some(POD), &[]),
            mk_run("o", "Running", Some(POD), &[]),
        ],
    )
    .await;
    // A hold the watch adopted is the watch's: a caller cannot release it.
    let (s, v) = h.call(Method::DELETE, "/v1/reservations/uid-o", None).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    assert!(
        v["error"].as_str().is_some_and(|e| e.contains("the watch")),
        "{v}"
    );
    h.agent
        .apply_run_event(Event::Apply(mk_run("o", "Succeeded", Some(POD), &[])));
    assert_eq!(h.reserve("a", None, "").await.0, StatusCode::CREATED);
    assert_eq!(h.release("a").await, StatusCode::NO_CONTENT);
    h.agent
        .apply_run_event(Event::Apply(mk_run("a", "Running", Some(POD), &[])));
    assert_eq!(h.status().await["reserved"], json!({}));
    assert_eq!(h.reserve("n", runs("1"), "").await.0, StatusCode::CREATED);
    h.stop().await;
}

#[tokio::test]
async fn agent_capacity_changes_both_ways() {
    let h = Arc::new(
        Harness::start(
            "capacity",
            4,
            Some(mk_pod(&[("runs", "3"), ("gpu", "2")])),
            vec![],
        )
        .await,
    );
    for n in ["a", "b"] {
        assert_eq!(h.reserve(n, gpu("1"), "").await.0, StatusCode::CREATED);
    }
    // Lowering below the reservations revokes nothing but blocks new ones.
    h.agent
        .apply_pod_event(Event::Apply(mk_pod(&[("runs", "3"), ("gpu", "1")])));
    let st = h.status().await;
    assert_eq!(st["reserved"]["gpu"], "2");
    assert_eq!(st["free"]["gpu"], "0");
    assert_eq!(st["reservations"].as_array().map(Vec::len), Some(2));
    assert_eq!(h.reserve("c", gpu("1"), "").await.0, StatusCode::CONFLICT);
    h.release("a").await;
    assert_eq!(
        h.reserve("c", gpu("1"), "").await.0,
        StatusCode::CONFLICT,
        "1 reserved of 1"
    );
    // Raising admits from the queue, waking the waiter.
    let waiter = {
        let h = Arc::clone(&h);
        tokio::spawn(async move { h.reserve("c", gpu("1"), "?wait=10s").await.0 })
    };
    until_queued(&h, "c").await;
    h.agent
        .apply_pod_event(Event::Apply(mk_pod(&[("runs", "3"), ("gpu", "4")])));
    assert_eq!(waiter.await.expect("join"), StatusCode::CREATED);
    // A resource the pod does not declare never fits; the Run stays queued.
    let (s, v) = h.reserve("d", Some(json!({"fpga": "1"})), "").await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("more than the pod's capacity")),
        "{v}"
    );
    // Losing the pod takes all capacity (nothing new), revokes nothing.
    h.agent.apply_pod_event(Event::Delete(mk_pod(&[])));
    let st = h.status().await;
    assert_eq!(st["capacity"], json!({}));
    assert_eq!(st["reservations"].as_array().map(Vec::len), Some(2));
    assert_eq!(h.reserve("e", runs("1"), "").await.0, StatusCode::CONFLICT);
}

#[tokio::test]
async fn agent_invalid_bodies_reserve_nothing() {
    let h = Harness::start(
        "invalid",
        4,
        Some(mk_pod(&[("runs", "10"), ("gpu", "10")])),
        vec![mk_run("known", "Scheduled", Some(POD), &[("gpu", "1")]), {
            mk_run("bad", "Scheduled", Some(POD), &[("gpu", "500m")])
        }],
    )
    .await;
    let cases: Vec<(Value, StatusCode, &str)> = vec![
        (
            json!({"namespace":NS,"name":"x","uid":"u","requests":{"gpu":"1.5"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "spec.resources.requests[gpu]: Invalid value: \"1.5\": must be an integer",
        ),
        (
            json!({"namespace":NS,"name":"x","uid":"u","requests":{"gpu":"-1"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "spec.resources.requests[gpu]",
        ),
        (
            json!({"namespace":NS,"name":"x","uid":"u","requests":{"gpu":1.5}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "must be an integer",
        ),
        (
            json!({"namespace":NS,"name":"x","uid":"u","requests":{"gpu":true}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "spec.resources.requests[gpu]",
        ),
        (
            json!({"namespace":NS,"name":"x","uid":"u","requests":{"bad name":"1"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "spec.resources.requests[bad name]",
        ),
        (
            json!({"namespace":NS,"name":"x","uid":"u","requests":"gpu"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "requests",
        ),
        (
            json!({"namespace":NS,"name":"x"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "uid",
        ),
        (
            json!({"namespace":NS,"name":"x","uid":""}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "uid: must not be empty",
        ),
        (
            json!({"namespace":"other","name":"x","uid":"u","requests":{}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "namespace",
        ),
        (
            json!({"namespace":NS,"name":"bad","uid":"uid-bad"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "spec.resources.requests[gpu]: Invalid value: \"500m\"",
        ),
        (
            json!({"namespace":NS,"name":"known","uid":"uid-known","requests":{"gpu":"2"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "does not match",
        ),
        (
            json!({"namespace":NS,"name":"alias","uid":"uid-known"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "belongs to Run default/known",
        ),
        (json!([1, 2]), StatusCode::UNPROCESSABLE_ENTITY, ""),
    ];
    for (body, want, needle) in cases {
        let (s, v) = h
            .call(Method::POST, "/v1/reservations", Some(body.to_string()))
            .await;
        assert_eq!(s, want, "{body} -> {v}");
        let msg = v["error"].as_str().unwrap_or_default();
        assert!(msg.contains(needle), "{body} -> {msg}");
    }
    for (raw, want) in [
        ("{not json", StatusCode::BAD_REQUEST),
        ("", StatusCode::BAD_REQUEST),
    ] {
        let (s, v) = h
            .call(Method::POST, "/v1/reservations", Some(raw.into()))
            .await;
        assert_eq!(s, want, "{raw:?}");
        assert!(v["error"].is_string());
    }
    let huge = format!(
        "{{\"namespace\":\"{NS}\",\"name\":\"x\",\"uid\":\"u\",\"pad\":\"{}\"}}",
        "x".repeat(5 * 1024 * 1024)
    );
    let (s, v) = h.call(Method::POST, "/v1/reservations", Some(huge)).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    let (s, _) = h.call(Method::PUT, "/v1/reservations", None).await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);
    let (s, _) = h.call(Method::GET, "/nope", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let st = h.status().await;
    assert_eq!(st["reserved"], json!({}));
    assert_eq!(st["queued"], json!([]));
    h.stop().await;
}

#[tokio::test]
async fn agent_refuses_before_the_watches_sync() {
    let agent = Agent::new(config(4), Duration::from_secs(1));
    agent.apply_pod_event(Event::Init);
    agent.apply_pod_event(Event::InitApply(mk_pod(&[("runs", "5")])));
    agent.apply_pod_event(Event::InitDone);
    let h = Harness::serve("unsynced", agent).await;
    let (s, v) = h.reserve("a", runs("1"), "").await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    let (s, _) = h.call(Method::GET, "/readyz", None).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    h.agent.apply_run_event(Event::Init);
    h.agent.apply_run_event(Event::InitApply(mk_run(
        "old",
        "Running",
        Some(POD),
        &[("runs", "5")],
    )));
    h.agent.apply_run_event(Event::InitDone);
    assert_eq!(h.call(Method::GET, "/readyz", None).await.0, StatusCode::OK);
    assert_eq!(
        h.reserve("a", runs("1"), "").await.0,
        StatusCode::CONFLICT,
        "full"
    );
    h.stop().await;
}

#[tokio::test]
async fn agent_socket_lifecycle() {
    let path = socket_path("lifecycle");
    let dir = path.parent().expect("dir").to_owned();
    // The directory is created private (0750)...
    drop(server::bind(&path).expect("bind in a new directory"));
    let mode = std::fs::metadata(&dir).expect("dir").permissions().mode();
    assert_eq!(mode & 0o777, 0o750);
    // ...one of ours that others may write is tightened...
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    drop(server::bind(&path).expect("bind"));
    let mode = std::fs::metadata(&dir).expect("dir").permissions().mode();
    assert_eq!(mode & 0o777, 0o755);
    // ...and a shared sticky one (like /tmp) is refused, untouched.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    match server::bind(&path) {
        Err(e @ SocketError::InsecureDir { .. }) => {
            assert!(e.to_string().contains("writable by group or others"), "{e}")
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("served from a world-writable directory"),
    }
    let mode = std::fs::metadata(&dir).expect("dir").permissions().mode();
    assert_eq!(mode & 0o7777, 0o1777);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750)).expect("chmod");
    // A stale socket file (nobody listening) is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).expect("bind stale"));
    assert!(path.exists());
    let agent = Agent::new(config(4), Duration::from_secs(1));
    let socket = server::bind(&path).expect("stale socket replaced");
    let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
    assert_eq!(mode & 0o777, 0o660);
    // A live one is not stolen.
    match server::bind(&path) {
        Err(SocketError::InUse { .. }) => {}
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("stole a live socket"),
    }
    let (tx, rx) = oneshot::channel::<()>();
    let policy = PeerPolicy::owner_only(&socket);
    let task = tokio::spawn(server::serve(socket, agent, policy, async move {
        let _ = rx.await;
    }));
    let (s, _) = call(&path, Method::GET, "/healthz", None).await;
    assert_eq!(s, StatusCode::OK);
    // Shutdown removes it.
    let _ = tx.send(());
    task.await.expect("join").expect("serve");
    assert!(!path.exists());
    // A path that is not a socket is never removed.
    std::fs::write(&path, "keep me").expect("write");
    assert!(matches!(
        server::bind(&path),
        Err(SocketError::NotASocket { .. })
    ));
    assert_eq!(std::fs::read_to_string(&path).expect("read"), "keep me");
    std::fs::remove_file(&path).expect("cleanup");
}

#[tokio::test]
async fn agent_shutdown_answers_waiters() {
    let h = Arc::new(Harness::start("shutdown", 4, Some(mk_pod(&[("runs", "1")])), vec![]).await);
    assert_eq!(h.reserve("a", runs("1"), "").await.0, StatusCode::CREATED);
    let waiter = {
        let h = Arc::clone(&h);
        tokio::spawn(async move { h.reserve("b", runs("1"), "?wait=10s").await })
    };
    until_queued(&h, "b").await;
    let t0 = Instant::now();
    h.agent.close();
    let (s, v) = waiter.await.expect("join");
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(v["queued"], true);
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn agent_standalone_state_file() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/state");
    let objects = kruntimes_scheduler::cluster::load::load_path(&dir).expect("load");
    let mut cfg = config(4);
    cfg.pod = "python-rp-1".into();
    let list =
        kruntimes_scheduler::agent::source::standalone_events(&objects, &cfg).expect("events");
    let agent = Agent::new(cfg, Duration::from_secs(1));
    list.pods.into_iter().for_each(|e| agent.apply_pod_event(e));
    list.runs.into_iter().for_each(|e| agent.apply_run_event(e));
    let st = agent.status();
    assert!(st.synced);
    assert_eq!(st.capacity.get("runs").map(String::as_str), Some("4"));
    assert_eq!(st.reservations.len(), 1);
    assert_eq!(st.reservations[0].uid, "default.train-1");
    assert_eq!(st.free.get("gpu").map(String::as_str), Some("0"));
}

#[tokio::test]
async fn agent_kube_client_builds_without_crypto_provider_panic() {
    // kube pulls rustls with ring only; building a client must not panic
    // over an ambiguous process-level CryptoProvider.
    let url = "https://127.0.0.1:9".parse().expect("url");
    let client = kube::Client::try_from(kube::Config::new(url));
    assert!(client.is_ok());
}

// === restarts, journal, peers, bounds ===

/// Feeds a first list of the pod and the Runs.
fn list(agent: &Agent, pod: Pod, runs: &[Run]) {
    agent.apply_pod_event(Event::Init);
    agent.apply_pod_event(Event::InitApply(pod));
    agent.apply_pod_event(Event::InitDone);
    agent.apply_run_event(Event::Init);
    for r in runs {
        agent.apply_run_event(Event::InitApply(r.clone()));
    }
    agent.apply_run_event(Event::InitDone);
}

fn scheduled(names: &[&str]) -> Vec<Run> {
    names
        .iter()
        .map(|n| mk_run(n, "Scheduled", Some(POD), &[]))
        .collect()
}

fn journaled(journal: &Path) -> Arc<Agent> {
    let dir = journal.parent().expect("dir");
    std::fs::create_dir_all(dir).expect("dir");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750)).expect("chmod");
    Agent::open(
        config(4),
        Duration::from_secs(1),
        Some(journal),
        AgentMetrics::default(),
    )
    .expect("open with journal")
}

#[tokio::test]
async fn agent_restart_after_abort_keeps_scheduled_admissions() {
    let test = "restart-abort";
    let journal = test_dir(test).join("agent.journal");
    let runs = scheduled(&["r1", "r2", "r3", "r4"]);
    let agent = journaled(&journal);
    let h = Harness::serve(test, Arc::clone(&agent)).await;
    list(&agent, mk_pod(&[("runs", "3")]), &runs);
    for n in ["r1", "r2", "r3"] {
        assert_eq!(h.reserve(n, None, "").await.0, StatusCode::CREATED, "{n}");
    }
    // Crash: the task serving the socket is aborted, nothing shuts down.
    let mut h = h;
    if let Some(t) = h.task.take() {
        t.abort();
        let _ = t.await;
    }
    drop(h);
    drop(agent);
    // Restart on the same directory; the Runs are all still Scheduled.
    let agent = journaled(&journal);
    list(&agent, mk_pod(&[("runs", "3")]), &runs);
    let h = Harness::serve(test, agent).await;
    let (s, v) = h.reserve("r4", None, "").await;
    assert_eq!(s, StatusCode::CONFLICT, "r4 would overbook: {v}");
    let st = h.status().await;
    assert_eq!(st["reserved"]["runs"], "3");
    let names: Vec<&str> = st["reservations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, ["r1", "r2", "r3"]);
    // The creator keeps its holds across the restart.
    assert_eq!(h.reserve("r1", None, "").await.0, StatusCode::OK);
    h.stop().await;
}

#[tokio::test]
async fn agent_restart_drops_journal_entries_the_watch_contradicts() {
    let test = "restart-drop";
    let journal = test_dir(test).join("agent.journal");
    let agent = journaled(&journal);
    let h = Harness::serve(test, Arc::clone(&agent)).await;
    list(
        &agent,
        mk_pod(&[("runs", "4")]),
        &scheduled(&["a", "b", "c", "d"]),
    );
    for n in ["a", "b", "c", "d"] {
        assert_eq!(h.reserve(n, None, "").await.0, StatusCode::CREATED, "{n}");
    }
    h.stop().await;
    drop(agent);
    // Meanwhile: a finished, b deleted, c moved to another pod; d waits.
    let agent = journaled(&journal);
    assert_eq!(
        agent.status().reservations.len(),
        4,
        "recovered before any list"
    );
    list(
        &agent,
        mk_pod(&[("runs", "4")]),
        &[
            mk_run("a", "Succeeded", Some(POD), &[]),
            mk_run("c", "Scheduled", Some("rp-2"), &[]),
            mk_run("d", "Scheduled", Some(POD), &[]),
        ],
    );
    let st = agent.status();
    let uids: Vec<&str> = st.reservations.iter().map(|r| r.uid.as_str()).collect();
    assert_eq!(uids, ["uid-d"]);
    drop(agent);
    // ...and the journal forgot them too.
    let agent = journaled(&journal);
    assert_eq!(agent.status().reservations.len(), 1);
}

#[tokio::test]
async fn agent_restart_with_a_journal_truncated_mid_record() {
    let test = "restart-torn";
    let journal = test_dir(test).join("agent.journal");
    let runs = scheduled(&["r1", "r2", "r3", "r4"]);
    let agent = journaled(&journal);
    let h = Harness::serve(test, Arc::clone(&agent)).await;
    list(&agent, mk_pod(&[("runs", "3")]), &runs);
    for n in ["r1", "r2", "r3"] {
        assert_eq!(h.reserve(n, None, "").await.0, StatusCode::CREATED, "{n}");
    }
    h.stop().await;
    drop(agent);
    // Torn write: the last record (r3's admission) loses its tail.
    let len = std::fs::metadata(&journal).expect("journal").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&journal)
        .and_then(|f| f.set_len(len - 5))
        .expect("truncate");
    let agent = journaled(&journal);
    list(&agent, mk_pod(&[("runs", "3")]), &runs);
    let h = Harness::serve(test, agent).await;
    let st = h.status().await;
    assert_eq!(st["reserved"]["runs"], "2", "r1 and r2 recovered: {st}");
    let (s, m) = h.call(Method::GET, "/metrics", None).await;
    assert_eq!(s, StatusCode::OK);
    let _ = m;
    let text = metrics_text(&h.path).await;
    assert!(
        text.contains(r#"kruntimes_agent_journal_errors_total{kind="corrupt"} 1"#),
        "{text}"
    );
    assert_eq!(h.reserve("r4", None, "").await.0, StatusCode::CREATED);
    assert_eq!(h.reserve("r3", None, "").await.0, StatusCode::CONFLICT);
    h.stop().await;
}

/// `/metrics` as text.
async fn metrics_text(path: &Path) -> String {
    let stream = UnixStream::connect(path).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let req = Request::builder()
        .uri("/metrics")
        .header("host", "agent")
        .body(Full::new(Bytes::new()))
        .expect("request");
    let resp = sender.send_request(req).await.expect("send");
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[tokio::test]
async fn agent_queue_is_bounded_and_metrics_report_it() {
    let cfg = AgentConfig {
        max_queue: 2,
        ..config(4)
    };
    let agent = Agent::open(
        cfg,
        Duration::from_secs(1),
        None,
        AgentMetrics::new(["gpu".to_owned()]),
    )
    .expect("agent");
    list(
        &agent,
        mk_pod(&[("runs", "1"), ("gpu", "1"), ("secret-thing", "7")]),
        &[],
    );
    let h = Harness::serve("bounded", agent).await;
    assert_eq!(h.reserve("a", runs("1"), "").await.0, StatusCode::CREATED);
    assert_eq!(h.reserve("b", runs("1"), "").await.0, StatusCode::CONFLICT);
    assert_eq!(h.reserve("c", runs("1"), "").await.0, StatusCode::CONFLICT);
    let (s, v) = h.reserve("d", runs("1"), "").await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert_eq!(v["queued"], false);
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("queue is full")),
        "{v}"
    );
    // Nothing of d was kept; a queued Run asking again keeps its place.
    assert_eq!(h.status().await["queued"].as_array().map(Vec::len), Some(2));
    assert_eq!(h.reserve("c", runs("1"), "").await.1["position"], 2);
    let text = metrics_text(&h.path).await;
    for line in [
        r#"kruntimes_agent_admissions_total{result="admitted"} 1"#,
        r#"kruntimes_agent_admissions_total{result="queued"} 3"#,
        r#"kruntimes_agent_admissions_total{result="queue_full"} 1"#,
        "kruntimes_agent_queue_length 2",
        r#"kruntimes_agent_reserved{resource="runs"} 1"#,
        r#"kruntimes_agent_free{resource="runs"} 0"#,
        r#"kruntimes_agent_free{resource="gpu"} 1"#,
        "kruntimes_agent_wait_seconds_count 1",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
    assert!(
        !text.contains("secret-thing"),
        "resource names only when allowed"
    );
    h.stop().await;
}

#[tokio::test]
async fn agent_refuses_releases_and_requests_of_another_caller() {
    // The test is its own peer; holds made in-process by another uid stand
    // for another caller's.
    let agent = Agent::new(config(4), Duration::from_secs(1));
    list(&agent, mk_pod(&[("runs", "2")]), &[]);
    let req = |n: &str| {
        serde_json::from_value::<kruntimes_scheduler::agent::ReserveRequest>(
            json!({"namespace": NS, "name": n, "uid": format!("uid-{n}"), "requests": {"runs": "1"}}),
        )
        .expect("request")
    };
    let other = Some(424_242);
    agent
        .reserve(req("theirs"), None, other)
        .await
        .expect("admitted");
    agent
        .reserve(req("full"), None, other)
        .await
        .expect("admitted");
    agent
        .reserve(req("queued"), None, other)
        .await
        .expect("queued");
    let h = Harness::serve("not-yours", agent).await;
    for name in ["theirs", "queued"] {
        let (s, v) = h
            .call(
                Method::DELETE,
                &format!("/v1/reservations/uid-{name}"),
                None,
            )
            .await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
        assert!(
            v["error"]
                .as_str()
                .is_some_and(|e| e.contains("uid 424242")),
            "{v}"
        );
        let (s, _) = h.reserve(name, runs("1"), "").await;
        assert_eq!(s, StatusCode::FORBIDDEN);
    }
    let st = h.status().await;
    assert_eq!(st["reserved"]["runs"], "2");
    assert_eq!(st["queued"].as_array().map(Vec::len), Some(1));
    h.stop().await;
}

/// A copy of the binary in a fresh 0755 directory under the system temp
/// directory, removed on drop.
struct BinaryCopy {
    dir: PathBuf,
    file: PathBuf,
}

impl Drop for BinaryCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The binary as user `uid` can run it: copied out of the checkout (whose
/// parents may be closed to other users) into a fresh 0755 directory, then
/// checked by running `--version` as that user. Err: why not.
fn binary_for(uid: u32, gid: u32) -> Result<BinaryCopy, String> {
    use std::os::unix::process::CommandExt as _;
    let dir = std::env::temp_dir().join(format!("krs-agent-bin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let copy = BinaryCopy {
        file: dir.join("kruntimes-scheduler"),
        dir,
    };
    std::fs::copy(env!("CARGO_BIN_EXE_kruntimes-scheduler"), &copy.file)
        .map_err(|e| format!("copying the binary: {e}"))?;
    for (p, mode) in [(&copy.dir, 0o755), (&copy.file, 0o755)] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("chmod {}: {e}", p.display()))?;
    }
    let out = std::process::Command::new(&copy.file)
        .uid(uid)
        .gid(gid)
        .arg("--version")
        .output()
        .map_err(|e| {
            format!(
                "the second user cannot run {} ({e}); is {} closed to other users?",
                copy.file.display(),
                std::env::temp_dir().display()
            )
        })?;
    if !out.status.success() {
        return Err(format!(
            "the second user cannot run the copied binary: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(copy)
}

/// A second unix user for the peer-credential test: created when running
/// as root (`useradd`), else `None`.
fn second_user() -> Result<(u32, u32), String> {
    let me = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .map_err(|e| format!("cannot tell who runs the test: {e}"))?;
    if me != 0 {
        return Err(format!(
            "running as uid {me}, not root: cannot create a second user or switch to one"
        ));
    }
    let name = "krs-agent-peer";
    let _ = std::process::Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ])
        .output();
    let id = |flag: &str| -> Result<u32, String> {
        let out = std::process::Command::new("id")
            .args([flag, name])
            .output()
            .map_err(|e| format!("id: {e}"))?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| format!("user {name} could not be created (useradd missing or failed)"))
    };
    Ok((id("-u")?, id("-g")?))
}

#[tokio::test]
async fn agent_peer_credentials_refuse_other_users() {
    let (uid, gid) = match second_user() {
        Ok(u) => u,
        Err(why) => {
            eprintln!("skipping agent_peer_credentials_refuse_other_users: {why}");
            return;
        }
    };
    // The checkout may live where the second user cannot go (a 0700 home
    // directory): it runs a copy of the binary from a fresh directory it
    // can traverse, or the test says why it cannot and skips.
    let bin = match binary_for(uid, gid) {
        Ok(b) => b,
        Err(why) => {
            eprintln!("skipping agent_peer_credentials_refuse_other_users: {why}");
            return;
        }
    };
    let agent = Agent::new(config(4), Duration::from_secs(1));
    list(&agent, mk_pod(&[("runs", "2")]), &[]);
    // Owner-only policy. The file modes are opened up so that only the
    // peer check stands between the other user and the agent.
    let h = Harness::serve("peer", Arc::clone(&agent)).await;
    let dir = h.path.parent().expect("dir").to_owned();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(&h.path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    // The runtime serving the agent is this test's: the probe must not
    // block it.
    let probe = |path: &Path| {
        tokio::process::Command::new(&bin.file)
            .uid(uid)
            .gid(gid)
            .args([
                "agent",
                "--probe",
                "--pod",
                POD,
                "--namespace",
                NS,
                "--socket",
            ])
            .arg(path)
            .output()
    };
    let out = probe(&h.path)
        .await
        .expect("spawn the probe as the second user");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("403"), "refused by the peer check: {err}");
    // The same user, once allowed, is served.
    h.stop().await;
    let h = Harness::serve_with("peer", agent, |p| {
        p.uids.insert(uid);
    })
    .await;
    let dir = h.path.parent().expect("dir").to_owned();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(&h.path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let out = probe(&h.path)
        .await
        .expect("spawn the probe as the second user");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    h.stop().await;
}

/// The real binary in standalone mode, killed with SIGKILL and restarted on
/// the same socket directory.
#[tokio::test]
async fn agent_restart_after_sigkill_keeps_scheduled_admissions() {
    let dir = test_dir("sigkill");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750)).expect("chmod");
    let state = dir.join("state.json");
    let objects = std::iter::once(pod_obj(&[("runs", "3")]))
        .chain(["r1", "r2", "r3", "r4"].map(|n| run_obj(n, "Scheduled", Some(POD), &[])));
    std::fs::write(
        &state,
        serde_json::to_string(&testkit::list(objects)).expect("json"),
    )
    .expect("write state");
    let sock = dir.join("agent.sock");
    let spawn = || {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kruntimes-scheduler"))
            .args(["agent", "--pod", POD, "--namespace", NS, "--socket"])
            .arg(&sock)
            .arg("--state")
            .arg(&state)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn agent");
        let _ = &mut child;
        child
    };
    async fn ready(sock: &Path) {
        for _ in 0..500 {
            if UnixStream::connect(sock).await.is_ok()
                && call(sock, Method::GET, "/readyz", None).await.0 == StatusCode::OK
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the agent never became ready");
    }
    let reserve = |n: &'static str| {
        let sock = sock.clone();
        async move {
            let body = json!({"namespace": NS, "name": n, "uid": format!("uid-{n}")});
            call(
                &sock,
                Method::POST,
                "/v1/reservations",
                Some(body.to_string()),
            )
            .await
        }
    };
    let mut child = spawn();
    ready(&sock).await;
    for n in ["r1", "r2", "r3"] {
        let (s, v) = reserve(n).await;
        assert_eq!(s, StatusCode::CREATED, "{n}: {v}");
    }
    child.start_kill().expect("SIGKILL");
    child.wait().await.expect("reaped");
    let mut child = spawn();
    ready(&sock).await;
    let (s, v) = reserve("r4").await;
    assert_eq!(s, StatusCode::CONFLICT, "r4 would overbook: {v}");
    let (_, st) = call(&sock, Method::GET, "/v1/reservations", None).await;
    assert_eq!(st["reserved"]["runs"], "3", "{st}");
    child.start_kill().expect("SIGKILL");
    child.wait().await.expect("reaped");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn agent_sweeper_releases_holds_the_watch_never_shows() {
    let cfg = AgentConfig {
        unseen_ttl: Duration::from_millis(100),
        ..config(4)
    };
    let agent = Agent::new(cfg, Duration::from_secs(1));
    list(&agent, mk_pod(&[("runs", "2")]), &scheduled(&["seen"]));
    let sweeper = tokio::spawn(Arc::clone(&agent).sweeper());
    let h = Harness::serve("sweeper", agent).await;
    assert_eq!(
        h.reserve("ghost", runs("1"), "").await.0,
        StatusCode::CREATED
    );
    assert_eq!(h.reserve("seen", None, "").await.0, StatusCode::CREATED);
    let mut left = Vec::new();
    for _ in 0..300 {
        let st = h.status().await;
        left = st["reservations"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str().map(str::to_owned))
            .collect();
        if left == ["seen"] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        left,
        ["seen"],
        "the ghost's hold was released, the seen Run's kept"
    );
    sweeper.abort();
    h.stop().await;
}

/// `run` with condition `type_` `True`: its function released.
fn function_released(mut run: Run, type_: &str) -> Run {
    let status = run.status.get_or_insert_with(Default::default);
    status
        .conditions
        .push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: type_.into(),
            status: "True".into(),
            reason: "FunctionUnregistered".into(),
            message: "function released".into(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
            observed_generation: None,
        });
    run
}

#[tokio::test]
async fn agent_released_function_run_frees_its_hold_for_the_next_run() {
    let h = Arc::new(
        Harness::start(
            "function-release",
            4,
            Some(mk_pod(&[("runs", "1")])),
            vec![
                mk_run("f", "Scheduled", Some(POD), &[]),
                mk_run("b", "Scheduled", Some(POD), &[]),
            ],
        )
        .await,
    );
    // f is admitted and becomes a Ready function; b does not fit.
    assert_eq!(h.reserve("f", None, "").await.0, StatusCode::CREATED);
    h.agent
        .apply_run_event(Event::Apply(mk_run("f", "Ready", Some(POD), &[])));
    assert_eq!(h.reserve("b", None, "").await.0, StatusCode::CONFLICT);
    let waiter = {
        let h = Arc::clone(&h);
        tokio::spawn(async move { h.reserve("b", None, "?wait=10s").await.0 })
    };
    until_queued(&h, "b").await;
    // A Ready condition of another type releases nothing.
    h.agent.apply_run_event(Event::Apply(function_released(
        mk_run("f", "Ready", Some(POD), &[]),
        "Ready",
    )));
    assert_eq!(h.status().await["reserved"], json!({"runs": "1"}));
    // The watch shows f's function released while f is still Ready: its
    // hold goes and b, waiting, is admitted.
    h.agent.apply_run_event(Event::Apply(function_released(
        mk_run("f", "Ready", Some(POD), &[]),
        kruntimes_scheduler::crd::DEFAULT_RELEASED_CONDITION,
    )));
    assert_eq!(waiter.await.expect("join"), StatusCode::CREATED);
    let st = h.status().await;
    let holders: Vec<&str> = st["reservations"]
        .as_array()
        .expect("reservations")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(holders, ["b"], "{st}");
    // runtimed's own DELETE for f afterwards is idempotent.
    assert_eq!(h.release("f").await, StatusCode::NO_CONTENT);
    assert_eq!(h.status().await["reserved"], json!({"runs": "1"}));
}

#[tokio::test]
async fn agent_released_condition_type_is_configurable() {
    let mut config = config(4);
    config.released_condition = Some("example.com/Unregistered".into());
    let agent = Agent::new(config, Duration::from_secs(10));
    for e in [
        Event::Init,
        Event::InitApply(mk_pod(&[("runs", "1")])),
        Event::InitDone,
    ] {
        agent.apply_pod_event(e);
    }
    for e in [
        Event::Init,
        Event::InitApply(mk_run("f", "Running", Some(POD), &[])),
        Event::InitApply(mk_run("b", "Scheduled", Some(POD), &[])),
        Event::InitDone,
    ] {
        agent.apply_run_event(e);
    }
    let h = Harness::serve("function-release-type", agent).await;
    assert_eq!(h.reserve("b", None, "").await.0, StatusCode::CONFLICT);
    // The default type is not the one configured: f still holds.
    h.agent.apply_run_event(Event::Apply(function_released(
        mk_run("f", "Running", Some(POD), &[]),
        kruntimes_scheduler::crd::DEFAULT_RELEASED_CONDITION,
    )));
    assert_eq!(h.reserve("b", None, "").await.0, StatusCode::CONFLICT);
    h.agent.apply_run_event(Event::Apply(function_released(
        mk_run("f", "Running", Some(POD), &[]),
        "example.com/Unregistered",
    )));
    assert_eq!(
        h.reserve("b", None, "").await.0,
        StatusCode::OK,
        "admitted from the queue"
    );
    h.stop().await;
}
