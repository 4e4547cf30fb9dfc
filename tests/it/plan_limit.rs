//! `POST /v1/runs/plan?limit=N` through the real router: the lists are cut,
//! the shape, the selection and the reason are not.

use crate::common;

use axum::http::StatusCode;
use common::*;
use serde_json::{Value, json};

/// 30 Runtime Pods with runs capacity 1..=30, so loads differ, and 25 of
/// another capacity set that rejects a gpu request.
fn cluster() -> kruntimes_scheduler::serve::Standalone {
    let app = app("state.yaml");
    let mut items = Vec::new();
    for i in 0..30 {
        items.push(json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": format!("fit-{i:02}"), "namespace": "big", "labels": {"runtime": "py"},
                "annotations": {"kruntimes.io/capacity.runs": (i + 1).to_string(), "kruntimes.io/capacity.gpu": "1"}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}));
    }
    for i in 0..25 {
        items.push(json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": format!("cpu-{i:02}"), "namespace": "big", "labels": {"runtime": "py"},
                "annotations": {"kruntimes.io/capacity.runs": "4"}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}));
    }
    app.store.upsert(items).unwrap();
    app
}

fn run(gpu: &str) -> String {
    json!({"metadata": {"name": "x", "namespace": "big"},
        "spec": {"runtime": "py", "resources": {"requests": {"gpu": gpu}}}})
    .to_string()
}

fn names(v: &Value) -> Vec<String> {
    v["feasible"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["pod"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn plan_lists_are_cut_to_the_limit_and_default_to_20() {
    let app = cluster();
    heartbeat(&app, "big").await;
    let all = post(&app, "/v1/runs/plan?limit=0", &run("1")).await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.text);
    assert_eq!(all.body["feasible"].as_array().unwrap().len(), 30);
    assert_eq!(all.body["rejected"].as_object().unwrap().len(), 25);
    // Least loaded first: the biggest runs capacity has the lowest ratio.
    assert_eq!(all.body["selected"], "fit-29");

    let cut = post(&app, "/v1/runs/plan", &run("1")).await;
    assert_eq!(cut.status, StatusCode::OK, "{}", cut.text);
    assert_eq!(cut.body["feasible"].as_array().unwrap().len(), 20);
    assert_eq!(names(&cut.body), names(&all.body)[..20].to_vec());
    assert_eq!(cut.body["feasible"][0], all.body["feasible"][0]);
    let rejected: Vec<&String> = cut.body["rejected"].as_object().unwrap().keys().collect();
    let want: Vec<&String> = all.body["rejected"]
        .as_object()
        .unwrap()
        .keys()
        .take(20)
        .collect();
    assert_eq!(rejected, want, "the first rejected pods by name");
    assert_eq!(cut.body["selected"], "fit-29");
    assert_eq!(cut.body["reason"], Value::Null);
    let keys: Vec<&String> = cut.body.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 5, "same shape: {keys:?}");

    let three = post(&app, "/v1/runs/plan?limit=3", &run("1")).await;
    assert_eq!(names(&three.body), names(&all.body)[..3].to_vec());
    assert_eq!(three.body["rejected"].as_object().unwrap().len(), 3);

    // Nothing fits: the reason still counts every pod.
    let none = post(&app, "/v1/runs/plan?limit=2", &run("2")).await;
    assert_eq!(none.body["reason"], "InsufficientCapacity");
    assert_eq!(none.body["selected"], Value::Null);
    assert_eq!(none.body["rejected"].as_object().unwrap().len(), 2);
}

#[tokio::test]
async fn a_bad_limit_is_a_400_naming_the_field() {
    let app = cluster();
    for bad in ["-1", "x", "1.5", "100001"] {
        let r = post(&app, &format!("/v1/runs/plan?limit={bad}"), &run("1")).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.text);
        assert!(r.text.contains("limit: Invalid value"), "{}", r.text);
    }
}
