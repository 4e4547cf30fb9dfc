//! The served `POST /v1/runs/plan` of a Run with affinity goes through the
//! target index: on the `scale` bench's `plan-affinity` fixture at a small
//! size, loaded the way `serve --state` loads it, a required affinity term
//! narrows the pods the terms are checked on to those holding a Run of its
//! cohort. Counts pods examined, times nothing.

use crate::common::post;
use k8s_openapi::jiff::Timestamp;
use kruntimes_scheduler::cache::CacheConfig;
use kruntimes_scheduler::cluster::standalone::kube_time;
use kruntimes_scheduler::serve::standalone_from_state;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

const PODS: usize = 200;
const RUNS: usize = 400;
const COHORTS: usize = 20;

/// The labels of active Run `j`, as the benches' `affinity_labels`.
fn labels(j: usize) -> Map<String, Value> {
    let mut l = Map::new();
    l.insert("cohort".into(), json!(format!("c-{}", j % COHORTS)));
    l.insert("tier".into(), json!(["web", "batch", "ml"][j % 3]));
    if j.is_multiple_of(3) {
        l.insert("team".into(), json!(format!("t-{}", j % 17)));
    }
    if j.is_multiple_of(10) {
        l.insert("spot".into(), json!("true"));
    }
    l
}

/// The pod of active Run `j`, as the benches' `affinity_pod`.
fn pod_of(j: usize) -> String {
    format!("rp-{:05}", (j * 7919) % PODS)
}

fn term(selector: Value) -> Value {
    json!({"topologyKey": "kruntimes.io/runtime-pod", "labelSelector": selector})
}

/// The benches' `bench_affinity`: required affinity to cohort `c-7`,
/// required anti-affinity to `spot` Runs, three preferred terms.
fn affinity() -> Value {
    json!({
        "runAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                term(json!({"matchExpressions": [{"key": "cohort", "operator": "In", "values": ["c-7"]}]}))],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 50, "runAffinityTerm": term(json!({"matchLabels": {"tier": "ml"},
                    "matchExpressions": [{"key": "team", "operator": "Exists"}]}))},
                {"weight": 10, "runAffinityTerm": term(json!({
                    "matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}))}]},
        "runAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                term(json!({"matchExpressions": [{"key": "spot", "operator": "Exists"}]}))],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 30, "runAffinityTerm": term(json!({"matchLabels": {"tier": "batch"},
                    "matchExpressions": [{"key": "cohort", "operator": "NotIn", "values": ["c-7", "c-8"]}]}))}]}
    })
}

/// The fixture as a `--state` file: `PODS` Runtime Pods with room for 8
/// Runs each, `RUNS` Running Runs of `COHORTS` cohorts, two per pod.
fn state_file() -> std::path::PathBuf {
    let stamp = kube_time(Timestamp::now());
    let mut items: Vec<Value> = (0..PODS)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("rp-{i:05}"), "namespace": "bench",
                    "labels": {"runtime": "py", "app": "runtimed"},
                    "annotations": {"kruntimes.io/capacity.runs": "8", "kruntimes.io/capacity.gpu": "4",
                        "kruntimes.io/capacity.mem": "64Gi"}},
                "status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "kruntimes.io/RuntimedReady", "status": "True", "lastProbeTime": stamp}]}})
        })
        .collect();
    for j in 0..RUNS {
        items.push(json!({"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
            "metadata": {"name": format!("a-{j}"), "namespace": "bench", "uid": format!("uid-a-{j}"),
                "labels": labels(j)},
            "spec": {"runtime": "py", "resources": {"requests": {"runs": "1"}}},
            "status": {"phase": "Running", "assignedPod": pod_of(j)}}));
    }
    let path = std::env::temp_dir().join(format!(
        "krs-it-plan-affinity-{}-{}.json",
        std::process::id(),
        Timestamp::now().as_nanosecond()
    ));
    std::fs::write(
        &path,
        json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string(),
    )
    .unwrap();
    path
}

#[tokio::test]
async fn served_plan_checks_the_terms_only_on_the_pods_of_the_required_cohort() {
    let path = state_file();
    let (app, stored, _) = standalone_from_state(CacheConfig::default(), &path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(stored, PODS + RUNS);
    // The pods holding a Run of cohort c-7: the only candidates.
    let cohort: BTreeSet<String> = (0..RUNS).filter(|j| j % COHORTS == 7).map(pod_of).collect();
    assert!(cohort.len() < PODS / 4, "{}", cohort.len());
    let body = json!({"metadata": {"name": "r", "namespace": "bench", "labels": {"cohort": "c-7"}},
        "spec": {"runtime": "py", "resources": {"requests": {"runs": "1", "gpu": "1", "mem": "4Gi"}},
            "affinity": affinity()}})
    .to_string();
    let before = app.state.runs.cache.affinity_pods_examined();
    let r = post(&app, "/v1/runs/plan", &body).await;
    assert!(r.status.is_success(), "{}", r.text);
    let examined = app.state.runs.cache.affinity_pods_examined() - before;
    // Every pod of the cohort fits (two Runs of 8), so each is examined
    // once; a path around the index would examine all PODS.
    assert_eq!(examined, cohort.len() as u64);
    let plan: Value = serde_json::from_str(&r.text).unwrap();
    let selected = plan["selected"].as_str().expect("a pod is selected");
    assert!(cohort.contains(selected), "{selected}");
    let feasible = plan["feasible"].as_array().unwrap();
    assert!(!feasible.is_empty());
    for f in feasible {
        let pod = f["pod"].as_str().unwrap();
        assert!(cohort.contains(pod), "{pod} is not in the cohort");
    }
    // Every pod outside the cohort is refused by the required term.
    let rejected = plan["rejected"].as_object().unwrap();
    assert!(!rejected.is_empty());
    for (pod, why) in rejected {
        if !cohort.contains(pod) {
            assert!(
                why.as_str().unwrap().starts_with("UnsatisfiedRunAffinity"),
                "{pod}: {why}"
            );
        }
    }
    // The same answer as the cache's own plan.
    let own = [("cohort".to_owned(), "c-7".to_owned())].into();
    let aff: kruntimes_scheduler::crd::RunAffinity = serde_json::from_value(affinity()).unwrap();
    let requests = kruntimes_scheduler::model::resources::effective_requests(Some(
        &[("runs", "1"), ("gpu", "1"), ("mem", "4Gi")]
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.to_string()),
                )
            })
            .collect(),
    ))
    .unwrap();
    let direct = app
        .state
        .runs
        .cache
        .plan_top_for(
            "bench",
            "py",
            &requests,
            Some(&aff),
            &own,
            Timestamp::now(),
            kruntimes_scheduler::cache::DEFAULT_PLAN_LIMIT,
        )
        .unwrap();
    assert_eq!(direct.selected(), Some(selected));
    let direct_feasible: Vec<&str> = direct.feasible.iter().map(|(p, _)| p.as_str()).collect();
    let served_feasible: Vec<&str> = feasible
        .iter()
        .map(|f| f["pod"].as_str().unwrap())
        .collect();
    assert_eq!(direct_feasible, served_feasible);
}
