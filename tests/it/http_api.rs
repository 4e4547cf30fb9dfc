//! The HTTP API through the real router, on the standalone service.

use crate::common;

use axum::http::{Method, StatusCode};
use common::*;
use serde_json::{Value, json};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(data(name)).unwrap()
}

#[tokio::test]
async fn plan_returns_exact_scores_and_changes_nothing() {
    let app = app("state.yaml");
    heartbeat(&app, "team-a").await;
    let before = get(&app, "/v1/runtime-pods?namespace=team-a").await.body;
    let r = post(&app, "/v1/runs/plan", &fixture("plan-gpu.json")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let expected: Value = serde_json::from_str(&fixture("plan-gpu.expected.json")).unwrap();
    assert_eq!(r.body, expected);
    assert_eq!(
        get(&app, "/v1/runtime-pods?namespace=team-a").await.body,
        before
    );
    assert_eq!(
        app.state.runs.cache.queue().len(),
        0,
        "plan enqueues nothing"
    );
}

#[tokio::test]
async fn plan_reports_every_rejected_pod_and_the_pending_reason() {
    let app = app("state.yaml");
    // Heartbeats are stale until refreshed: everything is unavailable.
    let run = json!({"metadata": {"name": "x", "namespace": "team-a"}, "spec": {"runtime": "py"}})
        .to_string();
    let r = post(&app, "/v1/runs/plan", &run).await;
    assert_eq!(r.body["reason"], "RuntimePodUnavailable");
    assert_eq!(r.body["selected"], Value::Null);
    let rejected = r.body["rejected"].as_object().unwrap();
    assert_eq!(rejected.len(), 3);
    assert!(
        rejected["rp-1"]
            .as_str()
            .unwrap()
            .starts_with("RuntimePodUnavailable: runtimed heartbeat is ")
    );

    heartbeat(&app, "team-a").await;
    let run = json!({"metadata": {"name": "x", "namespace": "team-a"},
                     "spec": {"runtime": "py", "resources": {"requests": {"gpu": "2"}}}})
    .to_string();
    let r = post(&app, "/v1/runs/plan", &run).await;
    assert_eq!(r.body["reason"], "InsufficientCapacity");
    assert_eq!(r.body["feasible"], json!([]));
    assert_eq!(
        r.body["rejected"]["rp-1"],
        "InsufficientCapacity: gpu: requested 2, used 1 of 2, free 1"
    );
    assert_eq!(
        r.body["rejected"]["rp-2"],
        "InsufficientCapacity: gpu: requested 2, used 0 of 1, free 1"
    );

    let run = json!({"metadata": {"name": "x", "namespace": "team-a"},
                     "spec": {"runtime": "py", "resources": {"requests": {"fpga": "1"}}}})
    .to_string();
    let r = post(&app, "/v1/runs/plan", &run).await;
    assert_eq!(r.body["reason"], "ResourceNotDeclared");
    assert_eq!(
        r.body["rejected"]["rp-1"],
        "ResourceNotDeclared: pod does not declare resource \"fpga\""
    );

    let run = json!({"metadata": {"name": "x", "namespace": "team-c"}, "spec": {"runtime": "py"}})
        .to_string();
    let r = post(&app, "/v1/runs/plan", &run).await;
    assert_eq!(r.body["reason"], "NoRuntimePods");
    assert_eq!(r.body["rejected"], json!({}));

    // namespace defaults to "default".
    let run = json!({"metadata": {"name": "x"}, "spec": {"runtime": "py"}}).to_string();
    assert_eq!(
        post(&app, "/v1/runs/plan", &run).await.body["reason"],
        "NoRuntimePods"
    );
}

#[tokio::test]
async fn bad_plan_input_is_a_4xx_naming_the_field() {
    let app = app("state.yaml");
    let cases: &[(&str, StatusCode, &str)] = &[
        (
            r#"{"metadata":{"name":"x"},"spec":{"runtime":"py","resources":{"requests":{"gpu":"1.5"}}}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "spec.resources.requests[gpu]: Invalid value: \"1.5\": must be an integer",
        ),
        (
            r#"{"metadata":{"name":"x"},"spec":{"runtime":"py","resources":{"requests":{"cpu":"500m"}}}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "spec.resources.requests[cpu]",
        ),
        (
            r#"{"metadata":{"name":"x"},"spec":{"runtime":"py","resources":{"requests":{"gpu":"-1"}}}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "must be greater than or equal to 0",
        ),
        (
            r#"{"metadata":{"name":"x"},"spec":{"runtime":"py","resources":{"requests":{"gpu":"lots"}}}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "spec.resources.requests[gpu]",
        ),
        (
            r#"{"metadata":{},"spec":{"runtime":"py"}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "metadata.name: Required value",
        ),
        (
            r#"{"metadata":{"name":"x"},"spec":{"runtime":""}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "spec.runtime",
        ),
        (
            r#"{"metadata":{"name":"x"},"spec":{"runtime":5}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "spec.runtime: invalid type",
        ),
        (
            r#"{"metadata":{"name":"x"}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "missing field `spec`",
        ),
        (
            r#"{"metadata":{"name":"x"},"spec":{"runtime":"py","resources":{"requests":{"gpu":[1]}}}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "spec.resources.requests.gpu",
        ),
        ("{not json", StatusCode::BAD_REQUEST, "malformed JSON"),
        ("", StatusCode::BAD_REQUEST, "request body is empty"),
        ("[1,2]", StatusCode::UNPROCESSABLE_ENTITY, "invalid type"),
    ];
    for (body, status, needle) in cases {
        let r = post(&app, "/v1/runs/plan", body).await;
        assert_eq!(r.status, *status, "{body} → {}", r.text);
        let msg = r.body["error"]
            .as_str()
            .unwrap_or_else(|| panic!("JSON error for {body}: {}", r.text));
        assert!(msg.contains(needle), "{body}: {msg:?} lacks {needle:?}");
    }
}

#[tokio::test]
async fn oversized_bodies_are_rejected_with_413() {
    let app = app("");
    let big = format!(
        r#"{{"metadata":{{"name":"{}"}},"spec":{{"runtime":"py"}}}}"#,
        "x".repeat(5 * 1024 * 1024)
    );
    let r = post(&app, "/v1/runs/plan", &big).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(r.body["error"].as_str().unwrap().contains("larger than"));
    let r = post(&app, "/v1/objects", &big).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn runtime_pods_view() {
    let app = app("state.yaml");
    heartbeat(&app, "team-a").await;
    let r = get(&app, "/v1/runtime-pods?namespace=team-a&runtime=py").await;
    let items = r.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert_eq!(
        items[0],
        json!({"namespace": "team-a", "name": "rp-1", "runtime": "py", "candidate": true, "reason": null,
               "capacity": {"runs": "4", "gpu": "2"}, "usage": {"runs": "2", "gpu": "1"}, "assumed": {}})
    );
    assert_eq!(items[2]["candidate"], false);
    assert_eq!(
        items[2]["reason"],
        "RuntimePodUnavailable: pod phase is Pending"
    );
    assert_eq!(
        items[2]["capacity"],
        json!({"runs": "2"}),
        "default runs capacity"
    );
    let all = get(&app, "/v1/runtime-pods").await.body;
    assert_eq!(all["items"].as_array().unwrap().len(), 5);
}

#[tokio::test]
async fn applied_run_is_scheduled_and_visible() {
    let app = app("state.yaml");
    heartbeat(&app, "team-a").await;
    let run = "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata: {name: job-1, namespace: team-a}\nspec:\n  runtime: py\n  resources: {requests: {gpu: \"1\"}}\n";
    let r = post(&app, "/v1/objects", run).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let stored = &r.body["items"][0];
    assert!(
        stored["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty()),
        "uid generated"
    );
    app.controller.drain().await;
    let runs = get(&app, "/v1/runs?namespace=team-a").await.body;
    let job = runs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "job-1")
        .unwrap()
        .clone();
    assert_eq!(job["phase"], "Scheduled");
    assert_eq!(job["assignedPod"], "rp-2");
    // The reason of the `Scheduled` condition, upstream's `Assigned`.
    assert_eq!(job["reason"], "Assigned");
    let obj = get(&app, "/v1/objects?kind=Run&namespace=team-a&name=job-1")
        .await
        .body;
    let status = &obj["items"][0]["status"];
    assert_eq!(status["assignedPod"], "rp-2");
    assert_eq!(
        status["assignedPodUID"],
        "0b7c1a4e-0000-4000-8000-000000000002"
    );
    assert_eq!(status["conditions"][0]["type"], "Scheduled");
    assert_eq!(status["conditions"][0]["status"], "True");
    // The reservation was handed over to actual usage.
    let pods = get(&app, "/v1/runtime-pods?namespace=team-a").await.body;
    assert_eq!(pods["items"][1]["usage"], json!({"runs": "2", "gpu": "1"}));
    assert_eq!(pods["items"][1]["assumed"], json!({}));
}

#[tokio::test]
async fn pending_run_explains_itself_and_is_scheduled_when_capacity_frees() {
    let app = app("state.yaml");
    heartbeat(&app, "team-a").await;
    let run = json!({"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
        "metadata": {"name": "big", "namespace": "team-a"},
        "spec": {"runtime": "py", "resources": {"requests": {"gpu": "2"}}}});
    post(&app, "/v1/objects", &run.to_string()).await;
    app.controller.drain().await;
    let runs = get(&app, "/v1/runs?namespace=team-a").await.body;
    let big = runs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "big")
        .unwrap()
        .clone();
    assert_eq!(big["phase"], "Pending");
    assert_eq!(big["reason"], "InsufficientCapacity");
    assert_eq!(
        big["message"],
        "waiting for available runtime pods for runtime \"py\": 0/3 Runtime Pods can take this Run: 2 InsufficientCapacity, 1 RuntimePodUnavailable"
    );
    let rv_before = get(&app, "/v1/objects?kind=Run&namespace=team-a&name=big")
        .await
        .body["items"][0]["metadata"]["resourceVersion"]
        .clone();
    // Nothing changed: another cycle writes nothing.
    app.state.runs.cache.resync();
    app.controller.drain().await;
    let rv_after = get(&app, "/v1/objects?kind=Run&namespace=team-a&name=big")
        .await
        .body["items"][0]["metadata"]["resourceVersion"]
        .clone();
    assert_eq!(rv_before, rv_after, "status written only on change");
    // busy-1 finishes: its gpu on rp-1 frees, the wakeup schedules big there.
    let done = json!({"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
        "metadata": {"name": "busy-1", "namespace": "team-a"},
        "spec": {"runtime": "py", "resources": {"requests": {"runs": "2", "gpu": "1"}}},
        "status": {"phase": "Succeeded", "assignedPod": "rp-1"}});
    post(&app, "/v1/objects", &done.to_string()).await;
    assert!(app.controller.drain().await >= 1);
    let runs = get(&app, "/v1/runs?namespace=team-a").await.body;
    let big = runs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "big")
        .unwrap()
        .clone();
    assert_eq!(big["phase"], "Scheduled");
    assert_eq!(big["assignedPod"], "rp-1");
}

#[tokio::test]
async fn invalid_run_is_failed_by_the_scheduler() {
    let app = app("state.yaml");
    let run = json!({"kind": "Run", "metadata": {"name": "bad", "namespace": "team-a"},
        "spec": {"runtime": "py", "resources": {"requests": {"gpu": "0.5"}}}});
    post(&app, "/v1/objects", &run.to_string()).await;
    app.controller.drain().await;
    let obj = get(&app, "/v1/objects?kind=Run&namespace=team-a&name=bad")
        .await
        .body;
    let st = &obj["items"][0]["status"];
    assert_eq!(st["phase"], "Failed");
    // Upstream's terminal status: no `reason` field, the reason on the
    // Running and Completed conditions, and a completionTime.
    assert_eq!(st.get("reason"), None);
    assert!(st["completionTime"].is_string(), "{st}");
    let completed = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Completed")
        .unwrap();
    assert_eq!(completed["reason"], "InvalidResources");
    let runs = get(&app, "/v1/runs?namespace=team-a").await.body;
    let bad = runs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "bad")
        .unwrap();
    assert_eq!(bad["reason"], "InvalidResources");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("spec.resources.requests[gpu]")
    );
}

#[tokio::test]
async fn objects_api_round_trip_and_errors() {
    let app = app("");
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n---\nkind: Runtime\napiVersion: kruntimes.io/v1alpha1\nmetadata: {name: py, namespace: x}\nspec: {capacity: {resources: {runs: \"3\"}}}\n";
    let r = post(&app, "/v1/objects", pod).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["items"].as_array().unwrap().len(), 2);
    let got = get(&app, "/v1/objects?kind=Pod").await.body;
    assert_eq!(got["items"][0]["metadata"]["namespace"], "default");
    let uid = got["items"][0]["metadata"]["uid"].clone();
    // An update without uid keeps the object's identity.
    post(
        &app,
        "/v1/objects",
        r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","labels":{"a":"b"}}}"#,
    )
    .await;
    let got = get(&app, "/v1/objects?kind=pods&namespace=default&name=p")
        .await
        .body;
    assert_eq!(got["items"][0]["metadata"]["uid"], uid);
    assert_eq!(got["items"][0]["metadata"]["labels"]["a"], "b");
    assert_eq!(
        get(&app, "/v1/objects?kind=Runtime&namespace=x").await.body["items"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // A stale resourceVersion is a conflict and changes nothing.
    let r = post(
        &app,
        "/v1/objects",
        r#"{"kind":"Pod","metadata":{"name":"p","resourceVersion":"1"}}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::CONFLICT);

    let bad: &[(&str, StatusCode, &str)] = &[
        (
            r#"{"kind":"Service","metadata":{"name":"n"}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "kind: Unsupported value: \"Service\"",
        ),
        (
            r#"{"metadata":{"name":"n"}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "kind: Required value",
        ),
        (
            r#"{"kind":"Pod","metadata":{}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "metadata.name: Required value",
        ),
        (
            r#"{"kind":"Pod","apiVersion":"v2","metadata":{"name":"q"}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "apiVersion",
        ),
        (
            r#"{"kind":"Pod","metadata":{"name":"q"},"spec":{"containers":"nope"}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "spec.containers",
        ),
        (
            r#"{"kind":"Run","metadata":{"name":"q"},"spec":{}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "missing field `runtime`",
        ),
        (
            "kind: Pod\nmetadata: {name: [\n",
            StatusCode::BAD_REQUEST,
            "invalid YAML",
        ),
        ("{", StatusCode::BAD_REQUEST, "invalid JSON"),
        ("   ", StatusCode::BAD_REQUEST, "empty"),
    ];
    for (body, status, needle) in bad {
        let r = post(&app, "/v1/objects", body).await;
        assert_eq!(r.status, *status, "{body}: {}", r.text);
        assert!(
            r.body["error"].as_str().unwrap().contains(needle),
            "{body}: {}",
            r.text
        );
    }
    // All or nothing: the valid first object of a failing batch is not stored.
    let r = post(
        &app,
        "/v1/objects",
        "kind: Pod\nmetadata: {name: ok}\n---\nkind: Pod\nmetadata: {}\n",
    )
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        r.body["error"].as_str().unwrap().starts_with("object 1:"),
        "{}",
        r.text
    );
    assert_eq!(
        get(&app, "/v1/objects?kind=Pod&name=ok").await.body["items"],
        json!([])
    );

    // Delete: 204, then 404; kind is required and checked.
    let r = call(
        &app,
        Method::DELETE,
        "/v1/objects?kind=Pod&namespace=default&name=p",
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = call(
        &app,
        Method::DELETE,
        "/v1/objects?kind=Pod&namespace=default&name=p",
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(
        get(&app, "/v1/objects").await.status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        get(&app, "/v1/objects?kind=Widget").await.status,
        StatusCode::BAD_REQUEST
    );
    let r = call(&app, Method::DELETE, "/v1/objects?kind=Pod", None).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body["error"].as_str().unwrap().contains("name"));
}

#[tokio::test]
async fn health_metrics_and_unknown_routes() {
    let app = app("state.yaml");
    assert_eq!(get(&app, "/healthz").await.status, StatusCode::OK);
    assert_eq!(get(&app, "/readyz").await.status, StatusCode::OK);
    app.state.runs.cache.set_synced(false);
    assert_eq!(
        get(&app, "/readyz").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    heartbeat(&app, "team-a").await;
    post(&app, "/v1/runs/plan", &fixture("plan-gpu.json")).await;
    post(&app, "/v1/objects", r#"{"kind":"Run","metadata":{"name":"m","namespace":"team-a"},"spec":{"runtime":"py","resources":{"requests":{"gpu":"9"}}}}"#).await;
    app.controller.drain().await;
    let m = get(&app, "/metrics").await.text;
    for needle in [
        "kruntimes_decision_duration_seconds_bucket{le=",
        "operation=\"Plan\"",
        "operation=\"ScheduleCycle\"",
        "kruntimes_filter_rejections_total{reason=\"InsufficientCapacity\"}",
        "kruntimes_wakeups_total{cause=\"RunChanged\"}",
        "kruntimes_run_status_writes_total{result=\"Ok\"}",
    ] {
        assert!(m.contains(needle), "metrics lack {needle}:\n{m}");
    }
    for user_value in ["team-a", "rp-1", "gpu", "\"m\""] {
        assert!(
            !m.contains(user_value),
            "user value {user_value} leaked into metrics"
        );
    }
    let r = get(&app, "/nope").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(r.body["error"].is_string());
    let r = call(&app, Method::PUT, "/v1/runs/plan", Some("{}")).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(r.body["error"].is_string());
}

#[tokio::test]
async fn heartbeat_endpoint() {
    let app = app("state.yaml");
    let r = post(
        &app,
        "/v1/runtime-pods/heartbeat?namespace=team-a&runtime=node",
        "",
    )
    .await;
    assert_eq!(r.body["pods"], json!(["node-1"]));
    let r = post(&app, "/v1/runtime-pods/heartbeat?namespace=nowhere", "").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let pods = get(&app, "/v1/runtime-pods?namespace=team-a").await.body;
    let node = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "node-1")
        .unwrap()
        .clone();
    assert_eq!(node["candidate"], true);
}

#[tokio::test]
async fn admission_webhooks_are_served_and_counted() {
    let app = app("");
    let mut review: Value = serde_json::from_str(&fixture("admission/run-create.json")).unwrap();
    review["request"]["object"]["spec"]["resources"]["requests"]["gpu"] = json!("-1");
    let r = post(&app, "/admission/validate/runs", &review.to_string()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["response"]["allowed"], false);
    assert_eq!(
        post(&app, "/admission/validate/runs", "{").await.status,
        StatusCode::BAD_REQUEST
    );
    let m = get(&app, "/metrics").await.text;
    assert!(
        m.contains(
            r#"kruntimes_admission_verdicts_total{webhook="validate-runs",verdict="Denied"} 1"#
        ),
        "{m}"
    );
    assert!(
        m.contains(
            r#"kruntimes_admission_verdicts_total{webhook="validate-runs",verdict="Malformed"} 1"#
        ),
        "{m}"
    );
}

#[tokio::test]
async fn priority_classes_from_the_store_reach_the_admission_check() {
    let app = app("");
    let review = fixture("admission/podgroup-create.json");
    let r = post(&app, "/admission/validate/podgroups", &review).await;
    assert_eq!(r.body["response"]["allowed"], false, "{}", r.text);
    assert!(r.text.contains("high-priority"), "{}", r.text);
    let pc = r#"{"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{"name":"high-priority"},"value":1000}"#;
    assert_eq!(post(&app, "/v1/objects", pc).await.status, StatusCode::OK);
    let r = post(&app, "/admission/validate/podgroups", &review).await;
    assert_eq!(r.body["response"]["allowed"], true, "{}", r.text);
}
