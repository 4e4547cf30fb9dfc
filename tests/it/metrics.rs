//! `/metrics` after a cluster-mode scenario against the test API server:
//! Runs scheduled and pending, extender calls that succeed, fail inside the
//! protocol and are refused, admission reviews allowed and malformed, and a
//! self-managed webhook certificate. Every series the operator contract
//! names is checked in the scrape; `monitoring.rs` checks the alerts and
//! the dashboard against the same scrape.

use crate::apiserver;

use apiserver::{FakeApi, Res};
use axum::http::StatusCode;
use k8s_openapi::jiff::Timestamp;
use kruntimes_scheduler::cache::CacheConfig;
use kruntimes_scheduler::cluster::standalone::kube_time;
use kruntimes_scheduler::http::router;
use kruntimes_scheduler::serve::cluster;
use kruntimes_scheduler::testkit;
use kruntimes_scheduler::webhooks::{self, Lifetimes, ManageConfig, WebhookTarget};
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// A Ready Runtime Pod `ns/name` of runtime `py` declaring `runs` runs,
/// its runtimed heartbeat now.
fn runtime_pod(name: &str, runs: &str) -> Value {
    testkit::runtime_pod(name, &[("runs", runs)], &kube_time(Timestamp::now())).value()
}

/// A Run `ns/name` of runtime `py` with no requests, created at `created`.
fn run(name: &str, created: Timestamp) -> Value {
    testkit::run(name, &[])
        .set(&["metadata", "creationTimestamp"], kube_time(created))
        .value()
}

fn fixture(path: &str) -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(path),
    )
    .expect("fixture exists")
}

/// What the scenario left behind: the scrape, and the API server with the
/// Events written.
pub struct Scraped {
    pub text: String,
    pub api: FakeApi,
}

/// Runs the scenario and scrapes `/metrics` through the service's router.
pub async fn scenario() -> Scraped {
    let api = FakeApi::start().await;
    api.put(Res::Pods, runtime_pod("rp-1", "1"));
    let config = CacheConfig {
        heartbeat_stale_after: Duration::from_secs(3600),
        ..CacheConfig::default()
    };
    let c = cluster(config, api.client(), "metrics-test").await;
    let task = tokio::spawn(Arc::clone(&c.controller).run(1, Duration::from_secs(3600)));
    testkit::wait_until("cache sync", Duration::from_secs(10), || {
        c.state.runs.cache.is_synced()
    })
    .await;

    // One Run fits (created a minute ago), the second finds no capacity.
    let minute_ago = Timestamp::now() - Duration::from_secs(60);
    api.put(Res::Runs, run("first", minute_ago));
    testkit::wait_until("first scheduled", Duration::from_secs(10), || {
        api.get(Res::Runs, "ns", "first")
            .is_some_and(|r| r["status"]["phase"] == "Scheduled")
    })
    .await;
    api.put(Res::Runs, run("second", Timestamp::now()));
    testkit::wait_until("second pending", Duration::from_secs(10), || {
        api.get(Res::Runs, "ns", "second")
            .is_some_and(|r| r["status"]["phase"] == "Pending")
    })
    .await;

    let app = || router(c.state.clone());
    // Extender: a filter answered, a bind that fails inside the protocol
    // (the pod is not cached: 200 with Error), a body that is not JSON.
    let r = testkit::post(
        app(),
        "/scheduler/filter",
        &fixture("extender/filter-full.json"),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = testkit::post(
        app(),
        "/scheduler/bind",
        r#"{"PodName":"ghost","PodNamespace":"ns","PodUID":"u","Node":"n1"}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(
        !r.body["Error"].as_str().unwrap_or_default().is_empty(),
        "{}",
        r.text
    );
    let r = testkit::post(app(), "/scheduler/bind", "{not json").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);

    // Admission: a Run review answered, and a malformed one.
    let review = fixture("admission/run-create.json");
    let r = testkit::post(app(), "/admission/validate/runs", &review).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = testkit::post(app(), "/admission/validate/runs", "[]").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);

    // The self-managed webhook certificate, recorded on the same metrics.
    webhooks::start(
        api.client(),
        ManageConfig {
            target: WebhookTarget {
                config_name: "kruntimes-scheduler".into(),
                service: "kruntimes-scheduler".into(),
                namespace: "kruntimes-system".into(),
                port: 443,
                exclude_namespaces: Vec::new(),
                mutate_pods: true,
            },
            secret: "kruntimes-scheduler-tls".into(),
            owner: None,
            lifetimes: Lifetimes {
                ca_validity: Duration::from_secs(3650 * 86_400),
                serving_validity: Duration::from_secs(365 * 86_400),
                renew_before: Duration::from_secs(30 * 86_400),
            },
            check_every: Duration::from_secs(60),
        },
        Arc::clone(&c.state.runs.metrics),
    )
    .await
    .expect("the webhook certificate is created");

    let r = testkit::get(app(), "/metrics").await;
    assert_eq!(r.status, StatusCode::OK);
    task.abort();
    Scraped { text: r.text, api }
}

/// The sample names of an OpenMetrics text (`name{labels} value`).
pub fn sample_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// The value of the first sample line starting with `prefix`.
fn value(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_named_series_is_exported_after_a_scenario() {
    let Scraped { text: m, api } = scenario().await;
    let names = sample_names(&m);
    for series in [
        // Runs pending by reason, and the oldest one's age.
        "kruntimes_runs_pending",
        "kruntimes_runs_pending_oldest_seconds",
        // Run scheduling latency (creation to Scheduled).
        "kruntimes_run_scheduling_duration_seconds_bucket",
        "kruntimes_run_scheduling_duration_seconds_count",
        // Admission review latency by webhook and verdict.
        "kruntimes_admission_review_duration_seconds_bucket",
        "kruntimes_admission_verdicts_total",
        // Extender latency by verb and outcome.
        "kruntimes_extender_request_duration_seconds_bucket",
        "kruntimes_decision_duration_seconds_bucket",
        // Gang holds and waits.
        "kruntimes_gang_members_held",
        "kruntimes_gang_groups_waiting",
        "kruntimes_gang_waits_total",
        // Cache sizes, watches, leader, build, certificates.
        "kruntimes_cache_objects",
        "kruntimes_watch_restarts_total",
        "kruntimes_watch_errors_total",
        "kruntimes_leader",
        "kruntimes_build_info",
        "kruntimes_certificate_expiry_timestamp_seconds",
        // Process.
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        assert!(names.contains(series), "no {series} in the scrape:\n{m}");
    }

    // The values say what happened.
    assert_eq!(
        value(
            &m,
            "kruntimes_runs_pending{reason=\"InsufficientCapacity\"}"
        ),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        value(&m, "kruntimes_runs_pending{reason=\"Queued\"}"),
        Some(0.0)
    );
    assert!(value(&m, "kruntimes_runs_pending_oldest_seconds").is_some_and(|s| s >= 0.0));
    assert_eq!(
        value(&m, "kruntimes_run_scheduling_duration_seconds_count"),
        Some(1.0),
        "{m}"
    );
    // Created a minute before it was placed.
    assert!(
        value(&m, "kruntimes_run_scheduling_duration_seconds_sum").is_some_and(|s| s >= 59.0),
        "{m}"
    );
    for (labels, n) in [
        ("verb=\"Filter\",outcome=\"Ok\"", 1.0),
        ("verb=\"Bind\",outcome=\"Error\"", 1.0),
        ("verb=\"Bind\",outcome=\"Rejected\"", 1.0),
    ] {
        let prefix = format!("kruntimes_extender_request_duration_seconds_count{{{labels}}}");
        assert_eq!(value(&m, &prefix), Some(n), "{prefix}:\n{m}");
    }
    for (labels, n) in [
        ("webhook=\"validate-runs\",verdict=\"Allowed\"", 1.0),
        ("webhook=\"validate-runs\",verdict=\"Malformed\"", 1.0),
    ] {
        let prefix = format!("kruntimes_admission_review_duration_seconds_count{{{labels}}}");
        assert_eq!(value(&m, &prefix), Some(n), "{prefix}:\n{m}");
    }
    assert_eq!(
        value(&m, "kruntimes_cache_objects{kind=\"Run\"}"),
        Some(2.0),
        "{m}"
    );
    assert_eq!(
        value(&m, "kruntimes_cache_objects{kind=\"RuntimePod\"}"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(value(&m, "kruntimes_gang_members_held"), Some(0.0));
    assert_eq!(
        value(&m, "kruntimes_gang_waits_total{outcome=\"Expired\"}"),
        Some(0.0),
        "the fixed outcomes are exported before the first wait:\n{m}"
    );
    assert!(
        m.contains("kruntimes_watch_errors_total{kind=\"Pod\"}"),
        "{m}"
    );
    let build = m
        .lines()
        .find(|l| l.starts_with("kruntimes_build_info{"))
        .expect("build_info");
    assert!(
        build.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION")))
            && build.contains("revision=\""),
        "{build}"
    );
    assert!(
        value(
            &m,
            "kruntimes_certificate_expiry_timestamp_seconds{certificate=\"Serving\"}"
        )
        .is_some_and(|t| t > Timestamp::now().as_second() as f64)
    );
    assert!(value(&m, "process_resident_memory_bytes").is_some_and(|b| b > 0.0));
    assert!(
        !m.contains("kruntimes_process_"),
        "process series are not prefixed"
    );
    assert!(!m.contains("endpoint=\""), "the old label is gone:\n{m}");

    // A Normal Scheduled event on the placed Run.
    testkit::wait_until("Scheduled event", Duration::from_secs(10), || {
        api.list(Res::Events).iter().any(|e| {
            e["reason"] == "Scheduled"
                && e["type"] == "Normal"
                && e["regarding"]["name"] == "first"
                && e["regarding"]["kind"] == "Run"
        })
    })
    .await;
}

#[tokio::test]
async fn standalone_mode_records_the_scheduled_event_and_the_pending_gauge() {
    use crate::common::{app, get, heartbeat, post};
    use kruntimes_scheduler::cluster::{EventKind, EventReason};
    let app = app("state.yaml");
    heartbeat(&app, "team-a").await;
    for (name, gpu) in [("fits", "1"), ("too-big", "9")] {
        let r = post(
            &app,
            "/v1/objects",
            &format!(r#"{{"kind":"Run","metadata":{{"name":"{name}","namespace":"team-a"}},"spec":{{"runtime":"py","resources":{{"requests":{{"gpu":"{gpu}"}}}}}}}}"#),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    }
    app.controller.drain().await;
    let store = app.state.runs.store.as_ref().expect("standalone");
    let events = store.events();
    let scheduled = events
        .iter()
        .find(|e| e.name == "fits")
        .expect("an event for the placed Run");
    assert_eq!(scheduled.event_type, EventKind::Normal);
    assert_eq!(scheduled.reason, EventReason::Scheduled);
    assert_eq!(scheduled.kind, "Run");
    assert!(
        scheduled.note.starts_with("assigned to runtime pod "),
        "{scheduled:?}"
    );
    let pending = events
        .iter()
        .find(|e| e.name == "too-big")
        .expect("an event for the pending Run");
    assert_eq!(pending.event_type, EventKind::Warning);
    assert_eq!(pending.reason, EventReason::InsufficientCapacity);

    let m = get(&app, "/metrics").await.text;
    assert_eq!(
        value(
            &m,
            "kruntimes_runs_pending{reason=\"InsufficientCapacity\"}"
        ),
        Some(1.0),
        "{m}"
    );
    // The store stamps creationTimestamp on create: the placed Run is timed.
    assert_eq!(
        value(&m, "kruntimes_run_scheduling_duration_seconds_count"),
        Some(1.0),
        "{m}"
    );
}
