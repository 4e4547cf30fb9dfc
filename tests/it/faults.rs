//! Faults against the test API server, through the real `kube::Client`,
//! watchers and lease manager: readiness tells the truth while a watch
//! fails and after it heals, a watched object whose handling panics is
//! survived, and leadership is contested again after the Lease API fails
//! or the Lease vanishes.

use crate::apiserver::{FakeApi, Res};
use axum::Router;
use axum::http::StatusCode;
use k8s_openapi::jiff::Timestamp;
use kruntimes_scheduler::cache::CacheConfig;
use kruntimes_scheduler::cluster::leader::LeaderConfig;
use kruntimes_scheduler::cluster::standalone::kube_time;
use kruntimes_scheduler::serve::{Cluster, Components, cluster_with, lead};
use kruntimes_scheduler::testkit::{self, faults::PANIC_WHEN_WATCHED};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

fn config() -> CacheConfig {
    CacheConfig {
        heartbeat_stale_after: Duration::from_secs(3600),
        ..CacheConfig::default()
    }
}

/// A Ready Runtime Pod `ns/name` of runtime `py` declaring 10 runs, its
/// runtimed heartbeat now.
fn runtime_pod(name: &str) -> Value {
    testkit::runtime_pod(name, &[("runs", "10")], &kube_time(Timestamp::now())).value()
}

/// A Run `ns/name` of runtime `py` with no requests.
fn run(name: &str) -> Value {
    testkit::run(name, &[])
        .unset(&["spec", "resources"])
        .value()
}

fn phase(api: &FakeApi, name: &str) -> Option<String> {
    api.get(Res::Runs, "ns", name)?
        .pointer("/status/phase")?
        .as_str()
        .map(str::to_owned)
}

async fn readyz(health: &Router) -> (StatusCode, String) {
    let r = testkit::get(health.clone(), "/readyz").await;
    (r.status, r.text)
}

/// One counter or gauge sample from `/metrics`.
fn sample(c: &Cluster, series: &str) -> Option<f64> {
    let text = c.state.runs.metrics.encode();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

async fn replica(api: &FakeApi, grace: Duration) -> (Cluster, Router) {
    let c = cluster_with(
        config(),
        api.client(),
        "test",
        Components::ALL.watches(),
        grace,
    )
    .await;
    let health = kruntimes_scheduler::http::health_router(c.state.clone());
    testkit::wait_until("ready", Duration::from_secs(10), || {
        c.state.runs.cache.is_synced()
    })
    .await;
    (c, health)
}

async fn wait_ready(health: &Router, what: &str, within: Duration) -> String {
    let mut last = String::new();
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        let (s, body) = readyz(health).await;
        if s == StatusCode::OK {
            return body;
        }
        last = body;
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("not ready after {within:?} ({what}): {last}");
}

async fn wait_unready(health: &Router, what: &str, within: Duration) -> String {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        let (s, body) = readyz(health).await;
        if s == StatusCode::SERVICE_UNAVAILABLE {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("still ready after {within:?}: {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_failing_past_the_grace_turns_readiness_off_until_it_heals() {
    let api = FakeApi::start().await;
    api.put(
        Res::Nodes,
        testkit::node("n1")
            .allocatable("4", "4Gi")
            .set(&["status", "allocatable", "pods"], "10")
            .label("rack", "r1")
            .value(),
    );
    let (c, health) = replica(&api, Duration::from_secs(1)).await;
    wait_ready(&health, "first list", Duration::from_secs(10)).await;

    // Node lists and watches fail from now on; a Node arrives meanwhile.
    api.fail_lists(Res::Nodes, true);
    api.put(
        Res::Nodes,
        testkit::node("n2")
            .allocatable("4", "4Gi")
            .set(&["status", "allocatable", "pods"], "10")
            .label("rack", "r1")
            .value(),
    );
    let body = wait_unready(&health, "Node watch failing", Duration::from_secs(15)).await;
    assert!(
        body.contains("watch Node: failing for") && body.contains("--watch-failure-grace 1s"),
        "{body}"
    );
    assert!(
        body.contains("injected: the list or watch failed"),
        "{body}"
    );
    // Only the failing watch is named; the process keeps serving.
    assert!(!body.contains("watch Pod"), "{body}");
    assert_eq!(
        testkit::get(health.clone(), "/healthz").await.status,
        StatusCode::OK
    );
    // Still failing: still not ready, however long it lasts.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(readyz(&health).await.0, StatusCode::SERVICE_UNAVAILABLE);
    assert!(sample(&c, "kruntimes_watch_errors_total{kind=\"Node\"}").unwrap() >= 2.0);
    assert!(sample(&c, "kruntimes_watch_restarts_total{kind=\"Node\"}").unwrap() >= 1.0);
    assert_eq!(
        sample(&c, "kruntimes_watch_errors_total{kind=\"Pod\"}"),
        Some(0.0)
    );

    // Healed: the next list brings readiness back, and what changed meanwhile.
    api.fail_lists(Res::Nodes, false);
    wait_ready(&health, "Node watch healed", Duration::from_secs(40)).await;
    assert!(c.state.extender.nodes.read().has_node("n2"));
    for w in c.watchers {
        w.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_object_whose_handling_panics_is_survived() {
    let api = FakeApi::start().await;
    api.put(
        Res::Nodes,
        testkit::node("n1")
            .allocatable("4", "4Gi")
            .set(&["status", "allocatable", "pods"], "10")
            .label("rack", "r1")
            .value(),
    );
    let (c, health) = replica(&api, Duration::from_secs(60)).await;
    wait_ready(&health, "first list", Duration::from_secs(10)).await;

    // This Node's handling panics inside the Node watcher task.
    let bad = testkit::node("bad")
        .allocatable("4", "4Gi")
        .set(&["status", "allocatable", "pods"], "10")
        .label("rack", "r1")
        .annotation(PANIC_WHEN_WATCHED, "true");
    api.put(Res::Nodes, bad.value());
    let body = wait_unready(
        &health,
        "the Node watcher panicked",
        Duration::from_secs(10),
    )
    .await;
    assert!(
        body.contains("watch Node: its watcher task panicked: injected fault"),
        "{body}"
    );
    // It is restarted, lists again without the bad version, and is ready.
    wait_ready(&health, "the Node watch restarted", Duration::from_secs(20)).await;
    assert!(sample(&c, "kruntimes_watch_restarts_total{kind=\"Node\"}").unwrap() >= 1.0);
    assert!(sample(&c, "kruntimes_watch_errors_total{kind=\"Node\"}").unwrap() >= 1.0);
    assert!(!c.state.extender.nodes.read().has_node("bad"));
    // The watch works: other Nodes arrive, and a fixed version of the bad one.
    api.put(
        Res::Nodes,
        testkit::node("n2")
            .allocatable("4", "4Gi")
            .set(&["status", "allocatable", "pods"], "10")
            .label("rack", "r1")
            .value(),
    );
    api.put(
        Res::Nodes,
        testkit::node("bad")
            .allocatable("4", "4Gi")
            .set(&["status", "allocatable", "pods"], "10")
            .label("rack", "r1")
            .value(),
    );
    testkit::wait_until("n2 and the fixed node", Duration::from_secs(10), || {
        let snap = c.state.extender.nodes.read();
        snap.has_node("n2") && snap.has_node("bad")
    })
    .await;
    // Other surfaces kept serving throughout.
    let app = kruntimes_scheduler::http::router(c.state.clone());
    assert_eq!(
        testkit::get(app, "/v1/runs?namespace=ns").await.status,
        StatusCode::OK
    );
    assert_eq!(readyz(&health).await.0, StatusCode::OK);
    for w in c.watchers {
        w.abort();
    }
}

fn lease_config(identity: &str) -> LeaderConfig {
    LeaderConfig {
        lease_name: "kruntimes-scheduler".into(),
        namespace: "ns".into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(2),
        grace: Duration::from_secs(1),
    }
}

fn holder(api: &FakeApi) -> Option<String> {
    api.get(Res::Leases, "ns", "kruntimes-scheduler")?
        .pointer("/spec/holderIdentity")?
        .as_str()
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_lease_api_stops_the_run_loop_and_leadership_is_contested_again() {
    let api = FakeApi::start().await;
    api.put(Res::Pods, runtime_pod("rp-1"));
    let (c, _) = replica(&api, Duration::from_secs(60)).await;
    let task = tokio::spawn(lead(
        api.client(),
        lease_config("one"),
        Arc::clone(&c.controller),
        2,
        Duration::from_secs(3600),
    ));
    let leader = |c: &Cluster| sample(c, "kruntimes_leader");
    testkit::wait_until("leader", Duration::from_secs(10), || {
        leader(&c) == Some(1.0)
    })
    .await;
    assert_eq!(holder(&api).as_deref(), Some("one"));
    api.put(Res::Runs, run("before"));
    testkit::wait_until("scheduled while leading", Duration::from_secs(10), || {
        phase(&api, "before").as_deref() == Some("Scheduled")
    })
    .await;

    // The Lease API fails: the next renewal fails, and the Run loop stops
    // before the Lease could expire and another replica take over.
    api.inner.lock().fail_leases = true;
    testkit::wait_until("stepped down", Duration::from_secs(10), || {
        leader(&c) == Some(0.0)
    })
    .await;
    api.put(Res::Runs, run("during"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(phase(&api, "during"), None, "no Run loop while not leader");

    // The API recovers: the Lease is contested again and won.
    api.inner.lock().fail_leases = false;
    testkit::wait_until("leader again", Duration::from_secs(30), || {
        leader(&c) == Some(1.0)
    })
    .await;
    testkit::wait_until(
        "scheduled after re-election",
        Duration::from_secs(10),
        || phase(&api, "during").as_deref() == Some("Scheduled"),
    )
    .await;
    c.state.runs.cache.check_invariants().unwrap();
    task.abort();
    for w in c.watchers {
        w.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_wins_the_lease_when_its_holder_and_its_lease_go_away() {
    let api = FakeApi::start().await;
    api.put(Res::Pods, runtime_pod("rp-1"));
    // Another replica holds the Lease, then goes away with it: it stops
    // renewing and its Lease is deleted.
    api.put(
        Res::Leases,
        json!({"metadata": {"name": "kruntimes-scheduler", "namespace": "ns"},
            "spec": {"holderIdentity": "other", "leaseDurationSeconds": 2,
                "acquireTime": kube_time(Timestamp::now()), "renewTime": kube_time(Timestamp::now())}}),
    );
    let (c, _) = replica(&api, Duration::from_secs(60)).await;
    let task = tokio::spawn(lead(
        api.client(),
        lease_config("one"),
        Arc::clone(&c.controller),
        2,
        Duration::from_secs(3600),
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sample(&c, "kruntimes_leader"), Some(0.0));
    assert_eq!(holder(&api).as_deref(), Some("other"));
    api.delete(Res::Leases, "ns", "kruntimes-scheduler");
    // The standby finds the Lease gone once the holder's term is over: its
    // lease manager fails, and a new one creates the Lease and takes it.
    testkit::wait_until("one leads", Duration::from_secs(30), || {
        sample(&c, "kruntimes_leader") == Some(1.0)
    })
    .await;
    assert_eq!(holder(&api).as_deref(), Some("one"));
    api.put(Res::Runs, run("r"));
    testkit::wait_until(
        "scheduled by the new leader",
        Duration::from_secs(10),
        || phase(&api, "r").as_deref() == Some("Scheduled"),
    )
    .await;
    task.abort();
    for w in c.watchers {
        w.abort();
    }
}
