//! The agent over a real unix socket: HTTP/1.1 requests from a hyper
//! client, state fed as watch events, exactly as in cluster mode.

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kruntimes_scheduler::agent::Agent;
use kruntimes_scheduler::agent::server::{self, PeerPolicy, SocketError};
use kruntimes_scheduler::agent::source::AgentConfig;
use kruntimes_scheduler::crd::{Run, RunResources, RunSpec, RunStatus};
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

fn mk_pod(capacity: &[(&str, &str)]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(POD.into()),
            namespace: Some(NS.into()),
            uid: Some("pod-uid".into()),
            annotations: Some(
                capacity
                    .iter()
                    .map(|(k, v)| (format!("kruntimes.io/capacity.{k}"), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn mk_run(name: &str, phase: &str, pod: Option<&str>, requests: &[(&str, &str)]) -> Run {
    let mut run = Run::new(
        name,
        RunSpec {
            runtime: "python".into(),
            resources: Some(RunResources {
                requests: Some(
                    requests
                        .iter()
                        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                        .collect(),
                ),
            }),
        },
    );
    run.metadata.namespace = Some(NS.into());
    run.metadata.uid = Some(format!("uid-{name}"));
    run.status = Some(RunStatus {
        phase: Some(phase.into()),
        assigned_pod: pod.map(str::to_owned),
        ..Default::default()
    });
    run
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
    let dir = std::env::temp_dir().join(format!("krs-agent-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
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
        let path = socket_path(test);
        let _ = std::fs::remove_file(&path);
        let socket = server::bind(&path).expect("bind");
        let (tx, rx) = oneshot::channel::<()>();
        let policy = PeerPolicy::owner_only(&socket);
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
    tokio::time::sleep(Duration::from_millis(20)).await;
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
    tokio::time::sleep(Duration::from_millis(20)).await;
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
    tokio::time::sleep(Duration::from_millis(20)).await;
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
    tokio::time::sleep(Duration::from_millis(20)).await;
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
