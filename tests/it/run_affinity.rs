//! Run affinity and anti-affinity through the real router, ported from
//! upstream kruntimes' scheduler tests (`affinity_test.go`,
//! `score_test.go`, `framework_test.go`): the filter, the seeding rule,
//! the weighted score with least-loaded and its pod-name tie-break, the
//! Pending wording, and an unparsable selector.

use crate::common::{app, get, post};
use k8s_openapi::jiff::Timestamp;
use kruntimes_scheduler::cluster::standalone::kube_time;
use kruntimes_scheduler::serve::Standalone;
use kruntimes_scheduler::testkit::{self, Obj};
use serde_json::{Value, json};

const NS: &str = "default";

/// A Ready Runtime Pod `default/name` of runtime `py` declaring 4 runs.
fn runtime_pod(name: &str) -> Value {
    testkit::runtime_pod(name, &[("runs", "4")], &kube_time(Timestamp::now()))
        .namespace(NS)
        .value()
}

/// A Run `default/name` of runtime `py` with no requests, labelled
/// `labels`.
fn labelled_run(name: &str, labels: &[(&str, &str)]) -> Obj {
    testkit::run(name, &[])
        .namespace(NS)
        .unset(&["metadata", "resourceVersion"])
        .unset(&["spec", "resources"])
        .labels(labels)
}

/// An active Run with `labels` on `pod` (upstream `activeAffinityRun`).
fn active(name: &str, pod: &str, phase: &str, labels: &[(&str, &str)]) -> Value {
    labelled_run(name, labels).status(phase, Some(pod)).value()
}

/// A term selecting `label=value` (upstream `affinityTerm`).
fn term(label: &str, value: &str) -> Value {
    testkit::run_term(&[(label, value)])
}

/// The Run `next` to place, labelled `labels`.
fn next(labels: &[(&str, &str)]) -> Obj {
    labelled_run("next", labels)
}

async fn cluster(pods: &[&str], runs: &[Value]) -> Standalone {
    let app = app("");
    let mut items: Vec<Value> = pods.iter().map(|p| runtime_pod(p)).collect();
    items.extend(runs.iter().cloned());
    let r = post(&app, "/v1/objects", &testkit::list(items).to_string()).await;
    assert!(r.status.is_success(), "{}", r.text);
    app
}

struct Case {
    name: &'static str,
    pods: &'static [&'static str],
    runs: Vec<Value>,
    run: Value,
    selected: Option<&'static str>,
    /// pod → reason prefix of its rejection
    rejected: &'static [(&'static str, &'static str)],
    reason: Option<&'static str>,
}

/// A Running Run `<stage>-<pod>` labelled `stage` on `pod`.
fn build(stage: &str, pod: &str) -> Value {
    active(
        &format!("{stage}-{pod}"),
        pod,
        "Running",
        &[("stage", stage)],
    )
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "required affinity keeps the pod with the cohort",
            pods: &["pod-a", "pod-b"],
            runs: vec![build("build", "pod-a"), build("other", "pod-b")],
            run: next(&[])
                .requires(false, term("stage", "build"))
                .value(),
            selected: Some("pod-a"),
            rejected: &[("pod-b", "UnsatisfiedRunAffinity")],
            reason: None,
        },
        Case {
            name: "required anti-affinity avoids the pod with the cohort",
            pods: &["pod-a", "pod-b"],
            runs: vec![build("build", "pod-a")],
            run: next(&[])
                .requires(true, term("stage", "build"))
                .value(),
            selected: Some("pod-b"),
            rejected: &[("pod-a", "UnsatisfiedRunAntiAffinity")],
            reason: None,
        },
        Case {
            // 100 affinity + 0 least-loaded ties 0 + 100; the name decides.
            name: "preferred affinity scores with least-loaded, ties by name",
            pods: &["pod-a", "pod-b"],
            runs: vec![build("build", "pod-a")],
            run: next(&[])
                .prefers(false, 100, term("stage", "build"))
                .value(),
            selected: Some("pod-a"),
            rejected: &[],
            reason: None,
        },
        Case {
            // No Run matches: every affinity score is 0, least-loaded
            // alone decides (b and c tie at 100; the name picks b).
            name: "an unmatched preferred term leaves least-loaded and the name",
            pods: &["pod-a", "pod-b", "pod-c"],
            runs: vec![build("other", "pod-a")],
            run: next(&[])
                .prefers(false, 1, term("stage", "x"))
                .value(),
            selected: Some("pod-b"),
            rejected: &[],
            reason: None,
        },
        Case {
            // Loads a=1, b=0, c=1: least-loaded b=100, a=c=50 (one rank
            // group); affinity on c normalizes to 100: c=150 wins.
            name: "preferred affinity outweighs one rank of load",
            pods: &["pod-a", "pod-b", "pod-c"],
            runs: vec![build("other", "pod-a"), build("x", "pod-c")],
            run: next(&[])
                .prefers(false, 1, term("stage", "x"))
                .value(),
            selected: Some("pod-c"),
            rejected: &[],
            reason: None,
        },
        Case {
            name: "preferred anti-affinity scores the pods without the cohort",
            pods: &["pod-a", "pod-b"],
            runs: vec![build("build", "pod-b"), build("other", "pod-a")],
            run: next(&[])
                .prefers(true, 50, term("stage", "build"))
                .value(),
            selected: Some("pod-a"),
            rejected: &[],
            reason: None,
        },
        Case {
            name: "terminal Runs are no targets; no seed without matching labels",
            pods: &["pod-a", "pod-b"],
            runs: vec![active("done", "pod-b", "Succeeded", &[("stage", "build")])],
            run: next(&[])
                .requires(false, term("stage", "build"))
                .value(),
            selected: None,
            rejected: &[
                ("pod-a", "UnsatisfiedRunAffinity"),
                ("pod-b", "UnsatisfiedRunAffinity"),
            ],
            reason: Some("UnsatisfiedRunAffinity"),
        },
        Case {
            name: "a Run whose labels match its required term seeds the cohort",
            pods: &["pod-a", "pod-b"],
            runs: vec![build("other", "pod-a")],
            run: next(&[("stage", "build")])
                .requires(false, term("stage", "build"))
                .value(),
            selected: Some("pod-b"),
            rejected: &[],
            reason: None,
        },
        Case {
            name: "anti-affinity never seeds",
            pods: &["pod-a"],
            runs: vec![build("build", "pod-a")],
            run: next(&[("stage", "build")])
                .requires(true, term("stage", "build"))
                .value(),
            selected: None,
            rejected: &[("pod-a", "UnsatisfiedRunAntiAffinity")],
            reason: Some("UnsatisfiedRunAntiAffinity"),
        },
        Case {
            name: "matchExpressions In / NotIn / Exists / DoesNotExist",
            pods: &["pod-a", "pod-b", "pod-c"],
            runs: vec![
                build("build", "pod-a"),
                build("test", "pod-b"),
                active("bare", "pod-c", "Scheduled", &[("team", "x")]),
            ],
            run: next(&[])
                .requires(
                    false,
                    json!({"topologyKey": "kruntimes.io/runtime-pod", "labelSelector": {"matchExpressions": [
                        {"key": "stage", "operator": "In", "values": ["build", "test"]},
                        {"key": "stage", "operator": "NotIn", "values": ["test"]},
                        {"key": "stage", "operator": "Exists"},
                        {"key": "team", "operator": "DoesNotExist"}]}}),
                )
                .value(),
            selected: Some("pod-a"),
            rejected: &[
                ("pod-b", "UnsatisfiedRunAffinity"),
                ("pod-c", "UnsatisfiedRunAffinity"),
            ],
            reason: None,
        },
    ]
}

#[tokio::test]
async fn upstream_affinity_cases_through_the_router() {
    for c in cases() {
        let app = cluster(c.pods, &c.runs).await;
        let plan = post(&app, "/v1/runs/plan?limit=0", &c.run.to_string()).await;
        assert!(plan.status.is_success(), "{}: {}", c.name, plan.text);
        let p = &plan.body;
        assert_eq!(p["selected"].as_str(), c.selected, "{}: {p}", c.name);
        assert_eq!(p["reason"].as_str(), c.reason, "{}: {p}", c.name);
        let rejected = p["rejected"].as_object().unwrap();
        for (pod, why) in c.rejected {
            assert!(
                rejected[*pod].as_str().unwrap().starts_with(why),
                "{}: {pod} {p}",
                c.name
            );
        }
        assert_eq!(rejected.len(), c.rejected.len(), "{}: {p}", c.name);
        for f in p["feasible"].as_array().unwrap() {
            assert!(f["affinityScore"].is_i64(), "{}: {p}", c.name);
        }
        // The scheduler itself decides the same.
        post(&app, "/v1/objects", &c.run.to_string()).await;
        app.controller.drain().await;
        let runs = get(&app, &format!("/v1/runs?namespace={NS}")).await.body;
        let run = runs["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "next")
            .unwrap()
            .clone();
        assert_eq!(run["assignedPod"].as_str(), c.selected, "{}: {run}", c.name);
        if let Some(reason) = c.reason {
            assert_eq!(run["phase"], "Pending", "{}", c.name);
            assert_eq!(run["reason"], reason, "{}", c.name);
            let wording = if reason == "UnsatisfiedRunAffinity" {
                "waiting for available runtime pods satisfying required Run affinity for runtime \"py\""
            } else {
                "waiting for available runtime pods satisfying required Run anti-affinity for runtime \"py\""
            };
            assert!(
                run["message"].as_str().unwrap().starts_with(wording),
                "{}: {run}",
                c.name
            );
            let explained = get(&app, &format!("/v1/explain/run?namespace={NS}&name=next"))
                .await
                .body;
            assert_eq!(explained["reason"], reason, "{}", c.name);
        }
    }
}

/// Assumed Runs are targets: two Runs of one cohort placed in one batch
/// share a pod, and anti-affinity spreads a batch, before any status
/// comes back through the store.
#[tokio::test]
async fn assumed_runs_count_as_targets() {
    let app = cluster(&["pod-a", "pod-b", "pod-c"], &[]).await;
    let mut items = Vec::new();
    for i in 0..3 {
        let r = labelled_run(&format!("s{i}"), &[("app", "spread")])
            .requires(true, term("app", "spread"));
        items.push(r);
    }
    post(&app, "/v1/objects", &testkit::list(items).to_string()).await;
    app.controller.drain().await;
    let runs = get(&app, &format!("/v1/runs?namespace={NS}")).await.body;
    let mut pods: Vec<String> = runs["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["assignedPod"].as_str().map(str::to_owned))
        .collect();
    pods.sort();
    assert_eq!(pods, ["pod-a", "pod-b", "pod-c"], "one per pod: {runs}");
}

#[tokio::test]
async fn an_unparsable_selector_is_refused_and_fails_the_run_as_upstream() {
    let app = cluster(&["pod-a"], &[]).await;
    let bad = next(&[])
        .requires(
            false,
            json!({"topologyKey": "kruntimes.io/runtime-pod", "labelSelector": {"matchExpressions": [
                {"key": "stage", "operator": "Near", "values": ["x"]}]}}),
        )
        .value();
    let plan = post(&app, "/v1/runs/plan", &bad.to_string()).await;
    assert_eq!(plan.status.as_u16(), 422, "{}", plan.text);
    assert!(plan.text.contains("spec.affinity"), "{}", plan.text);
    post(&app, "/v1/objects", &bad.to_string()).await;
    app.controller.drain().await;
    let obj = get(
        &app,
        &format!("/v1/objects?kind=Run&namespace={NS}&name=next"),
    )
    .await
    .body;
    let st = &obj["items"][0]["status"];
    assert_eq!(st["phase"], "Failed");
    assert!(
        st["message"].as_str().unwrap().starts_with(
            "pod selection failed: pre-filter run affinity: parse run affinity selector:"
        ),
        "{st}"
    );
    assert_eq!(st.get("assignedPod"), None);
}

/// The Run loop's metrics under upstream's names and label sets.
#[tokio::test]
async fn upstream_metric_names_and_labels() {
    let app = cluster(&["pod-a", "pod-b"], &[build("build", "pod-a")]).await;
    let pending = labelled_run("waits", &[])
        .requires(false, term("stage", "nope"))
        .value();
    post(&app, "/v1/objects", &pending.to_string()).await;
    let placed = next(&[]).value();
    post(&app, "/v1/objects", &placed.to_string()).await;
    app.controller.drain().await;
    let text = get(&app, "/metrics").await.text;
    for want in [
        "kruntimes_scheduler_sync_total{runtime=\"py\",result=\"scheduled\"} 1",
        // The Pending one is looked at again (re-checks count, as upstream's
        // requeues do).
        "kruntimes_scheduler_sync_total{runtime=\"py\",result=\"no_pods\"} ",
        "kruntimes_scheduler_no_pods_total{runtime=\"py\"} ",
        "kruntimes_scheduler_filter_rejections_total{plugin=\"RunAffinity\",reason=\"UnsatisfiedRunAffinity\"} ",
        "kruntimes_scheduler_sync_duration_seconds_count{runtime=\"py\"} ",
        "kruntimes_scheduler_run_queue_duration_seconds_count{runtime=\"py\"}",
        "kruntimes_scheduler_reservation_conflicts_total{stage=\"bind\"} 0",
    ] {
        assert!(text.contains(want), "missing {want}:\n{text}");
    }
}
