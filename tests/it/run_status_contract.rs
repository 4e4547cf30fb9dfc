//! The Run status contract in cluster mode, under a test API server that
//! prunes Runs to upstream kruntimes' structural schema: only upstream's
//! RunStatus fields are written, upstream's reasons and messages, and one
//! write per change, none on a re-check that changes nothing.

use crate::apiserver;

use apiserver::{FakeApi, Res};
use k8s_openapi::jiff::Timestamp;
use kruntimes_scheduler::cache::CacheConfig;
use kruntimes_scheduler::cluster::standalone::kube_time;
use kruntimes_scheduler::serve::{Cluster, cluster};
use kruntimes_scheduler::testkit;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// A Ready Runtime Pod `ns/name` of runtime `py` declaring `runs` runs,
/// its runtimed heartbeat now.
fn runtime_pod(name: &str, runs: &str) -> Value {
    testkit::runtime_pod(name, &[("runs", runs)], &kube_time(Timestamp::now())).value()
}

/// A Run `ns/name` of runtime `py` with no requests and no status.
fn pending_run(name: &str) -> Value {
    testkit::run(name, &[])
        .unset(&["spec", "resources"])
        .value()
}

async fn replica(api: &FakeApi) -> (Cluster, tokio::task::JoinHandle<()>) {
    let config = CacheConfig {
        heartbeat_stale_after: Duration::from_secs(3600),
        ..CacheConfig::default()
    };
    let c = cluster(config, api.client(), "test").await;
    let task = tokio::spawn(Arc::clone(&c.controller).run(2, Duration::from_secs(3600)));
    wait_for("cache sync", || c.state.runs.cache.is_synced()).await;
    (c, task)
}

async fn wait_for(what: &str, cond: impl FnMut() -> bool) {
    testkit::wait_until(what, Duration::from_secs(10), cond).await;
}

fn status(api: &FakeApi, name: &str) -> Value {
    api.get(Res::Runs, "ns", name)
        .map(|r| r["status"].clone())
        .unwrap_or(Value::Null)
}

fn writes(api: &FakeApi, name: &str) -> usize {
    let key = format!("ns/{name}");
    api.inner
        .lock()
        .status_writes
        .iter()
        .filter(|(k, _)| *k == key)
        .count()
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

/// Every key of a stored status is one of upstream's RunStatus fields.
fn only_upstream_fields(status: &Value) {
    const UPSTREAM: [&str; 12] = [
        "phase",
        "assignedPod",
        "assignedPodUID",
        "endpoint",
        "message",
        "startTime",
        "completionTime",
        "outputs",
        "artifactRefs",
        "artifactStore",
        "attempt",
        "conditions",
    ];
    for k in status.as_object().unwrap().keys() {
        assert!(
            UPSTREAM.contains(&k.as_str()),
            "status.{k} is not upstream's"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_write_per_change_none_on_a_recheck() {
    let api = FakeApi::start().await;
    api.put(Res::Pods, runtime_pod("rp-1", "1"));
    let (c, task) = replica(&api).await;
    api.put(Res::Runs, pending_run("a"));
    wait_for("a scheduled", || status(&api, "a")["phase"] == "Scheduled").await;
    api.put(Res::Runs, pending_run("b"));
    wait_for("b pending", || status(&api, "b")["phase"] == "Pending").await;

    let a = status(&api, "a");
    only_upstream_fields(&a);
    let sc = condition(&a, "Scheduled");
    assert_eq!(sc["status"], "True");
    assert_eq!(sc["reason"], "Assigned");
    assert_eq!(sc["message"], "assigned to runtime pod rp-1");
    let b = status(&api, "b");
    only_upstream_fields(&b);
    assert!(
        b["message"]
            .as_str()
            .unwrap()
            .starts_with("waiting for available runtime pods for runtime \"py\""),
        "{b}"
    );
    assert_eq!(condition(&b, "Scheduled")["reason"], "InsufficientCapacity");

    // Re-checks that change nothing: the fallback resync, a pod update
    // that wakes the runtime's Pending Runs, and the Pending re-check timer
    // (1 s, then 2 s).
    for _ in 0..3 {
        c.state.runs.cache.resync();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    api.put(Res::Pods, runtime_pod("rp-1", "1"));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(writes(&api, "a"), 1, "a: one write");
    assert_eq!(
        writes(&api, "b"),
        1,
        "b: one write, no rewrite of the same status"
    );

    // A change: capacity frees up, b is placed with one more write.
    api.put(Res::Pods, runtime_pod("rp-1", "2"));
    wait_for("b scheduled", || status(&api, "b")["phase"] == "Scheduled").await;
    assert_eq!(writes(&api, "b"), 2);
    c.state.runs.cache.resync();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(writes(&api, "b"), 2);
    c.state.runs.cache.check_invariants().unwrap();
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_invalid_and_stale_assignment_as_upstream() {
    let api = FakeApi::start().await;
    api.put(Res::Pods, runtime_pod("rp-1", "4"));
    let (c, task) = replica(&api).await;

    // Cancelled before anything else, even with an invalid request.
    for (name, spec) in [
        (
            "cancel-new",
            json!({"runtime": "py", "termination": {"mode": "Immediate"}}),
        ),
        (
            "cancel-old",
            json!({"runtime": "py", "cancelRequested": true,
            "resources": {"requests": {"gpu": "-1"}}}),
        ),
    ] {
        api.put(
            Res::Runs,
            json!({"metadata": {"name": name, "namespace": "ns"}, "spec": spec}),
        );
    }
    // Invalid request: Failed, InvalidResources, completionTime.
    api.put(
        Res::Runs,
        json!({"metadata": {"name": "bad", "namespace": "ns"},
            "spec": {"runtime": "py", "resources": {"requests": {"runs": "1.5"}}}}),
    );
    // A Pending Run with a stale assignedPod is placed all the same.
    api.put(
        Res::Runs,
        json!({"metadata": {"name": "stale", "namespace": "ns"}, "spec": {"runtime": "py"},
            "status": {"phase": "Pending", "assignedPod": "gone"}}),
    );
    wait_for("all decided", || {
        status(&api, "cancel-new")["phase"] == "Cancelled"
            && status(&api, "cancel-old")["phase"] == "Cancelled"
            && status(&api, "bad")["phase"] == "Failed"
            && status(&api, "stale")["phase"] == "Scheduled"
    })
    .await;
    for name in ["cancel-new", "cancel-old"] {
        let s = status(&api, name);
        only_upstream_fields(&s);
        assert_eq!(s["message"], "cancelled by user");
        assert!(s["completionTime"].is_string(), "{s}");
        assert_eq!(s["assignedPod"], Value::Null);
        for t in ["Running", "Completed"] {
            assert_eq!(condition(&s, t)["status"], "False", "{name} {t}");
            assert_eq!(condition(&s, t)["reason"], "Cancelled", "{name} {t}");
        }
    }
    let bad = status(&api, "bad");
    only_upstream_fields(&bad);
    assert!(bad["completionTime"].is_string());
    assert_eq!(condition(&bad, "Completed")["reason"], "InvalidResources");
    assert_eq!(condition(&bad, "Running")["reason"], "InvalidResources");
    assert!(bad["message"].as_str().unwrap().contains("runs"), "{bad}");
    assert_eq!(status(&api, "stale")["assignedPod"], "rp-1");

    c.state.runs.cache.resync();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for name in ["cancel-new", "cancel-old", "bad", "stale"] {
        assert_eq!(writes(&api, name), 1, "{name}");
    }
    // Nothing was placed but the stale one.
    let rp = serde_json::to_value(c.state.runs.cache.runtime_pods(
        Some("ns"),
        Some("py"),
        Timestamp::now(),
    ))
    .unwrap();
    assert_eq!(rp[0]["usage"]["runs"], "1", "{rp}");
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_run_waits_out_its_backoff_then_is_placed() {
    let api = FakeApi::start().await;
    api.put(Res::Pods, runtime_pod("rp-1", "4"));
    let (c, task) = replica(&api).await;
    let failed_at = Timestamp::now();
    // Attempt 3 of a policy with a 2s backoff: 4s after Running=False.
    api.put(
        Res::Runs,
        json!({"metadata": {"name": "retry", "namespace": "ns"},
            "spec": {"runtime": "py", "retryPolicy": {"maxAttempts": 3, "backoff": "2s"}},
            "status": {"phase": "Pending", "attempt": 3, "conditions": [
                {"type": "Running", "status": "False", "reason": "RuntimeError", "message": "exit 1",
                 "lastTransitionTime": kube_time(failed_at)}]}}),
    );
    // Once the replica has the Run (however long its start takes on a busy
    // machine), the pending metrics count it as backing off.
    wait_for("the Run counted as backing off", || {
        c.state
            .runs
            .cache
            .pending_runs(Timestamp::now())
            .backing_off
            >= 1
    })
    .await;
    assert_eq!(status(&api, "retry")["phase"], "Pending");
    assert_eq!(
        writes(&api, "retry"),
        0,
        "nothing written while backing off"
    );
    wait_for("placed after the backoff", || {
        status(&api, "retry")["phase"] == "Scheduled"
    })
    .await;
    let waited = Timestamp::now().duration_since(failed_at);
    // kube_time has second precision: the backoff ends 4s after the
    // truncated transition time.
    assert!(waited.as_secs_f64() >= 3.0, "placed after {waited:?}");
    assert_eq!(writes(&api, "retry"), 1);
    task.abort();
}

/// The pruning double itself: what a structural CRD keeps and drops.
#[test]
fn unknown_fields_are_dropped_at_every_level_but_preserved_ones_stay() {
    let mut run = json!({
        "apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
        "metadata": {"name": "a", "labels": {"x": "y"}},
        "spec": {
            "runtime": "py", "bogus": 1,
            "resources": {"requests": {"gpu": "1"}, "limits": {"gpu": "2"}},
            "mode": {"task": {"entrypoint": "main.py", "anything": true}},
            "affinity": {"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kruntimes.io/runtime-pod", "extra": 1,
                 "labelSelector": {"matchLabels": {"team": "a"}, "junk": 2}}]}},
        },
        "status": {
            "phase": "Pending", "reason": "InsufficientCapacity", "message": "m",
            "attempt": 2,
            "conditions": [{"type": "Scheduled", "status": "False", "reason": "R",
                "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z", "x": 1}],
            "endpoint": {"url": "http://e", "protocol": "HTTP", "more": 1},
        },
        "extra": {},
    });
    apiserver::prune::prune_object(apiserver::prune::run_schema(), &mut run);
    assert_eq!(run.get("extra"), None);
    assert_eq!(run["metadata"]["labels"]["x"], "y");
    assert_eq!(run["spec"].get("bogus"), None);
    assert_eq!(run["spec"]["resources"], json!({"requests": {"gpu": "1"}}));
    assert_eq!(run["spec"]["mode"]["task"]["anything"], true, "preserved");
    let term = &run["spec"]["affinity"]["runAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        [0];
    assert_eq!(term.get("extra"), None);
    assert_eq!(term["labelSelector"], json!({"matchLabels": {"team": "a"}}));
    assert_eq!(run["status"].get("reason"), None, "not upstream's");
    assert_eq!(run["status"]["attempt"], 2);
    assert_eq!(run["status"]["conditions"][0].get("x"), None);
    assert_eq!(run["status"]["conditions"][0]["reason"], "R");
    assert_eq!(run["status"]["endpoint"]["more"], 1, "preserved");
}

/// `POST /v1/runs/plan` and `explain run` say a Run is backing off and
/// until when; a Run not backing off has `backoffUntil: null`.
#[tokio::test]
async fn plan_and_explain_show_the_retry_backoff() {
    use crate::common::{app, get, post};
    let app = app("state.yaml");
    let until = Timestamp::now()
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(3600))
        .unwrap();
    // Attempt 2, Running=False now, backoff 1h (capped at 60s).
    let failed = kube_time(Timestamp::now());
    let run = json!({"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
        "metadata": {"name": "again", "namespace": "team-a"},
        "spec": {"runtime": "py", "retryPolicy": {"backoff": "1h"}},
        "status": {"phase": "Pending", "attempt": 2, "conditions": [
            {"type": "Running", "status": "False", "reason": "RuntimeError", "message": "",
             "lastTransitionTime": failed}]}});
    let plan = post(&app, "/v1/runs/plan", &run.to_string()).await.body;
    let shown: Timestamp = plan["backoffUntil"].as_str().unwrap().parse().unwrap();
    assert!(shown < until, "capped at 60s: {shown}");
    assert!(shown > Timestamp::now(), "{shown}");
    post(&app, "/v1/objects", &run.to_string()).await;
    app.controller.drain().await;
    let explained = get(&app, "/v1/explain/run?namespace=team-a&name=again")
        .await
        .body;
    assert_eq!(explained["backoffUntil"], plan["backoffUntil"]);
    assert_eq!(explained["run"]["phase"], "Pending");
    let text = kruntimes_scheduler::explain::cli::render_run(&explained);
    assert!(text.contains("backing off"), "{text}");
    let plain =
        json!({"metadata": {"name": "x", "namespace": "team-a"}, "spec": {"runtime": "py"}});
    let plan = post(&app, "/v1/runs/plan", &plain.to_string()).await.body;
    assert_eq!(plan["backoffUntil"], Value::Null);
}
