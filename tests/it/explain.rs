//! `GET /v1/explain/pod` and `GET /v1/explain/run` through the real router,
//! and the `explain` CLI against a server on loopback. Each answer names
//! the cause; explaining is read-only (no plan, no group condition).

use axum::http::StatusCode;
use kruntimes_scheduler::cache::CacheConfig;
use kruntimes_scheduler::cluster::standalone::Kind;
use kruntimes_scheduler::http::router;
use kruntimes_scheduler::serve::{Standalone, standalone};
use kruntimes_scheduler::testkit::{self, Obj, node, pod, pod_group, run, runtime_pod};
use serde_json::Value;

fn app(objects: Vec<Obj>) -> Standalone {
    standalone(
        CacheConfig::default(),
        objects.into_iter().map(Obj::value).collect(),
    )
    .expect("valid objects")
}

async fn explain_pod(app: &Standalone, ns: &str, name: &str) -> Value {
    let r = testkit::get(
        router(app.state.clone()),
        &format!("/v1/explain/pod?namespace={ns}&name={name}"),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    serde_json::from_str(&r.text).expect("JSON")
}

fn rack_node(name: &str, rack: &str, cpu: &str) -> Obj {
    node(name).allocatable(cpu, "64Gi").label("rack", rack)
}

fn reasons(v: &Value) -> Vec<(String, u64)> {
    v["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["reason"].as_str().unwrap().to_owned(),
                r["nodes"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Nothing the explanation ran was kept: no plan, no group condition.
fn untouched(app: &Standalone, group: &str) {
    assert!(
        app.state.extender.gangs.planner().is_empty(),
        "explain made a plan for real"
    );
    for g in app.store.list(Kind::PodGroup, Some("ml"), Some(group)) {
        assert!(
            g["status"]["conditions"]
                .as_array()
                .is_none_or(Vec::is_empty),
            "explain wrote a condition: {g}"
        );
    }
}

#[tokio::test]
async fn a_gang_short_of_members_names_the_pods_missing() {
    let app = app(vec![
        rack_node("n1", "r1", "8"),
        rack_node("n2", "r1", "8"),
        pod_group("g").gang(3),
        pod("g-0").group("g"),
        pod("g-1").group("g"),
    ]);
    let v = explain_pod(&app, "ml", "g-0").await;
    let why = "pod group ml/g: 2 of the 3 pods it needs exist";
    assert_eq!(reasons(&v), [(why.to_owned(), 2)]);
    assert_eq!(v["reasons"][0]["unresolvable"], true);
    assert_eq!(v["nodes"]["feasible"], 0);
    assert!(v["summary"].as_str().unwrap().contains(why), "{v}");
    let level = &v["group"]["levels"][0];
    assert_eq!(
        (&level["existing"], &level["needed"], &level["placed"]),
        (&Value::from(2), &Value::from(3), &Value::from(0))
    );
    assert_eq!(v["pod"]["cached"], true);
    untouched(&app, "g");
}

#[tokio::test]
async fn a_gang_whose_domain_is_full_names_the_domain_and_the_others() {
    // g-0 is bound in r1, which fixes the domain; the hog fills r1's other
    // node, so the two members left cannot fit there, though r2 is empty.
    let app = app(vec![
        rack_node("r1-0", "r1", "4"),
        rack_node("r1-1", "r1", "4"),
        rack_node("r2-0", "r2", "4"),
        rack_node("r2-1", "r2", "4"),
        pod_group("g").gang(3).topology("rack"),
        pod("g-0")
            .group("g")
            .requests(&[("cpu", "4")])
            .on_node("r1-0"),
        pod("g-1").group("g").requests(&[("cpu", "4")]),
        pod("g-2").group("g").requests(&[("cpu", "4")]),
        pod("hog").requests(&[("cpu", "4")]).on_node("r1-1"),
    ]);
    let v = explain_pod(&app, "ml", "g-1").await;
    let why = "pod group ml/g: 0 of the 2 pods it still needs fit in rack=r1";
    // r2's nodes fail as outside the domain its placed member fixes
    // (unresolvable: no preemption there helps), r1's with why it is short.
    let outside = "node is outside the pod group's topology domain rack=r1";
    assert_eq!(reasons(&v), [(outside.to_owned(), 2), (why.to_owned(), 2)]);
    assert!(v["summary"].as_str().unwrap().contains(why), "{v}");
    let d = &v["group"]["domain"];
    assert_eq!(d["key"], "rack");
    assert_eq!(d["fixed"], "r1");
    assert_eq!(d["required"], 2);
    let by_value = |value: &str| {
        d["domains"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["value"] == value)
            .unwrap_or_else(|| panic!("domain {value}: {d}"))
            .clone()
    };
    assert_eq!(by_value("r1")["why"], "0 of the 2 pods it still needs fit");
    assert_eq!(
        by_value("r2")["why"],
        "placed members fix the group's domain at rack=r1"
    );
    let level = &v["group"]["levels"][0];
    assert_eq!(
        (&level["existing"], &level["placed"]),
        (&Value::from(3), &Value::from(1))
    );
    untouched(&app, "g");
}

#[tokio::test]
async fn a_gang_that_fits_shows_the_domain_it_would_plan_and_plans_nothing() {
    // r1 holds one member of 4 cpu, r2 both: r2 would be planned.
    let app = app(vec![
        rack_node("r1-0", "r1", "4"),
        rack_node("r2-0", "r2", "4"),
        rack_node("r2-1", "r2", "4"),
        pod_group("g").gang(2).topology("rack"),
        pod("g-0").group("g").requests(&[("cpu", "4")]),
        pod("g-1").group("g").requests(&[("cpu", "4")]),
    ]);
    let v = explain_pod(&app, "ml", "g-0").await;
    assert_eq!(v["nodes"]["feasible"], 2, "{v}");
    assert_eq!(
        reasons(&v),
        [(
            "node is outside the pod group's topology domain rack=r2".to_owned(),
            1
        )]
    );
    assert_eq!(v["chosenDomain"]["domain"][0], "rack=r2");
    assert_eq!(v["chosenDomain"]["source"], "newPlan");
    let domains = v["group"]["domain"]["domains"].as_array().unwrap();
    assert_eq!(domains[0]["value"], "r2");
    assert_eq!(domains[0]["chosen"], true);
    assert_eq!(domains[1]["value"], "r1");
    assert_eq!(domains[1]["why"], "1 of the 2 pods it still needs fit");
    let summary = v["summary"].as_str().unwrap();
    assert!(summary.contains("fits 2 of 3 nodes"), "{summary}");
    assert!(
        summary.contains("bind holds it until pod group ml/g has 2 placed (0 now)"),
        "{summary}"
    );
    // Asked again: the same answer, and still nothing planned for real.
    assert_eq!(explain_pod(&app, "ml", "g-0").await, v);
    untouched(&app, "g");
}

#[tokio::test]
async fn a_priority_mismatch_is_named_with_both_priorities() {
    let app = app(vec![
        node("n1"),
        pod_group("g").gang(1).set(&["spec", "priority"], 10),
        pod("g-0").group("g").priority(5),
    ]);
    let v = explain_pod(&app, "ml", "g-0").await;
    let why = kruntimes_scheduler::pods::priority::PRIORITY_MISMATCH;
    assert_eq!(reasons(&v), [(why.to_owned(), 1)]);
    let p = &v["priority"];
    assert_eq!(p["ok"], false);
    assert_eq!(p["message"], why);
    assert_eq!(p["pod"]["priority"], 5);
    assert_eq!(p["group"]["priority"], 10);
    assert!(v["summary"].as_str().unwrap().contains(why));
}

#[tokio::test]
async fn a_node_fit_shortfall_counts_nodes_by_reason_with_bounded_examples() {
    let mut objects: Vec<Obj> = (0..7)
        .map(|i| node(&format!("small-{i}")).allocatable("2", "8Gi"))
        .collect();
    objects.push(node("big").allocatable("16", "8Gi"));
    objects.push(node("full").allocatable("16", "8Gi"));
    objects.push(pod("other").requests(&[("cpu", "12")]).on_node("full"));
    objects.push(pod("p").requests(&[("cpu", "8")]));
    let app = app(objects);
    let r = testkit::get(
        router(app.state.clone()),
        "/v1/explain/pod?namespace=ml&name=p&examples=2",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v: Value = serde_json::from_str(&r.text).unwrap();
    // Too small even empty (preemption cannot help), and full: two entries.
    assert_eq!(
        reasons(&v),
        [
            ("Insufficient cpu".to_owned(), 7),
            ("Insufficient cpu".to_owned(), 1)
        ]
    );
    assert_eq!(v["reasons"][0]["unresolvable"], true);
    assert_eq!(
        v["reasons"][0]["examples"],
        serde_json::json!(["small-0", "small-1"])
    );
    assert_eq!(v["reasons"][1]["unresolvable"], false);
    assert_eq!(v["reasons"][1]["examples"], serde_json::json!(["full"]));
    assert_eq!(v["nodes"]["total"], 9);
    assert_eq!(v["nodes"]["feasibleExamples"][0], "big");
    assert_eq!(v["group"], Value::Null);
    assert!(v["summary"].as_str().unwrap().contains("fits 1 of 9 nodes"));
}

#[tokio::test]
async fn bad_requests_name_the_parameter() {
    let app = app(vec![node("n1"), pod("p")]);
    let cases = [
        (
            "/v1/explain/pod?name=p",
            StatusCode::BAD_REQUEST,
            "namespace: Required value",
        ),
        (
            "/v1/explain/pod?namespace=ml",
            StatusCode::BAD_REQUEST,
            "name: Required value",
        ),
        (
            "/v1/explain/pod?namespace=Bad_NS&name=p",
            StatusCode::BAD_REQUEST,
            "namespace: Invalid value",
        ),
        (
            "/v1/explain/pod?namespace=ml&name=p&examples=x",
            StatusCode::BAD_REQUEST,
            "examples: Invalid value",
        ),
        (
            "/v1/explain/pod?namespace=ml&name=p&examples=101",
            StatusCode::BAD_REQUEST,
            "from 0 to 100",
        ),
        (
            "/v1/explain/pod?namespace=ml&name=nope",
            StatusCode::NOT_FOUND,
            "pod ml/nope not found",
        ),
        (
            "/v1/explain/run?namespace=ns&name=nope",
            StatusCode::NOT_FOUND,
            "Run ns/nope is not in the scheduler's cache",
        ),
        (
            "/v1/explain/run?namespace=ns&name=r&limit=-1",
            StatusCode::BAD_REQUEST,
            "limit: Invalid value",
        ),
    ];
    for (uri, status, text) in cases {
        let r = testkit::get(router(app.state.clone()), uri).await;
        assert_eq!(r.status, status, "{uri}: {}", r.text);
        assert!(r.text.contains(text), "{uri}: {}", r.text);
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

#[tokio::test]
async fn explain_run_answers_the_plan_of_an_existing_run() {
    let app = app(vec![
        runtime_pod("rp-1", &[("gpu", "1")], &now()),
        runtime_pod("rp-2", &[("gpu", "4")], &now()),
        run("train", &[("gpu", "2")]),
    ]);
    let r = testkit::get(
        router(app.state.clone()),
        "/v1/explain/run?namespace=ns&name=train&limit=1",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v: Value = serde_json::from_str(&r.text).unwrap();
    assert_eq!(v["selected"], "rp-2", "{v}");
    assert_eq!(v["run"]["name"], "train");
    assert_eq!(v["runtime"], "py");
    assert!(
        v["rejected"]["rp-1"].as_str().unwrap().contains("gpu"),
        "{v}"
    );
    // The same answer as POST /v1/runs/plan for that Run.
    let plan = testkit::post(
        router(app.state.clone()),
        "/v1/runs/plan?limit=1",
        &run("train", &[("gpu", "2")]).json(),
    )
    .await;
    let plan: Value = serde_json::from_str(&plan.text).unwrap();
    for k in ["feasible", "rejected", "selected", "reason"] {
        assert_eq!(v[k], plan[k], "{k}");
    }
}

/// The CLI against the real router served on loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_a_short_answer_and_clear_errors() {
    let app = app(vec![
        rack_node("n1", "r1", "8"),
        rack_node("n2", "r1", "8"),
        pod_group("g").gang(3),
        pod("g-0").group("g"),
        pod("g-1").group("g"),
    ]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = router(app.state.clone());
    let server = tokio::spawn(async move { axum::serve(listener, served).await });
    let cli = |args: Vec<String>| async move {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kruntimes-scheduler"))
            .args(&args)
            .output()
            .await
            .expect("the binary runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let url = format!("http://{addr}");
    let (ok, stdout, stderr) = cli(vec![
        "explain".into(),
        "pod".into(),
        "ml/g-0".into(),
        "--server".into(),
        url.clone(),
    ])
    .await;
    assert!(ok, "{stderr}");
    assert!(
        stdout.starts_with(
            "pod ml/g-0: fits none of the 2 nodes: pod group ml/g: 2 of the 3 pods it needs exist"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("group PodGroup ml/g (gang): 2 exist, 3 needed, 0 placed"),
        "{stdout}"
    );
    let (ok, _, stderr) = cli(vec![
        "explain".into(),
        "pod".into(),
        "ml/missing".into(),
        "--server".into(),
        url.clone(),
    ])
    .await;
    assert!(!ok);
    assert!(
        stderr.contains("answered 404 Not Found: pod ml/missing not found"),
        "{stderr}"
    );
    let (ok, _, stderr) = cli(vec!["explain".into(), "pod".into(), "ML/x".into()]).await;
    assert!(!ok);
    assert!(stderr.contains("namespace \"ML\""), "{stderr}");
    server.abort();
    // Nothing listens there any more.
    let (ok, _, stderr) = cli(vec![
        "explain".into(),
        "run".into(),
        "ns/r".into(),
        "--server".into(),
        url.clone(),
        "--timeout".into(),
        "3s".into(),
    ])
    .await;
    assert!(!ok);
    assert!(stderr.contains(&format!("cannot reach {url}")), "{stderr}");
}

/// Cluster mode: the pod is read from the API server, and the endpoint is
/// behind the read API's access control (`get pods` in its namespace).
#[tokio::test]
async fn in_cluster_mode_the_pod_is_read_from_the_api_and_access_is_checked() {
    use crate::apiserver::{FakeApi, Res};
    use kruntimes_scheduler::http::auth::AccessControl;
    let api = FakeApi::start().await;
    api.put(Res::Nodes, rack_node("n1", "r1", "8").value());
    api.put(Res::Nodes, rack_node("n2", "r1", "8").value());
    api.put(Res::PodGroups, pod_group("g").gang(3).value());
    for p in ["g-0", "g-1"] {
        api.put(
            Res::Pods,
            pod(p).group("g").unset(&["metadata", "uid"]).value(),
        );
    }
    let mut c =
        kruntimes_scheduler::serve::cluster(CacheConfig::default(), api.client(), "test").await;
    testkit::wait_until("pods cached", std::time::Duration::from_secs(10), || {
        (c.state.extender.synced)()
            && c.state.extender.nodes.read().pod("ml", "g-1").is_some()
            && c.state.extender.nodes.read().has_node("n2")
    })
    .await;
    c.state.runs.access = Some(AccessControl::new(
        api.client(),
        std::time::Duration::from_secs(10),
    ));
    {
        let mut g = api.inner.lock();
        g.tokens.insert("alice-token".into(), "alice".into());
        g.tokens.insert("bob-token".into(), "bob".into());
        g.grants.push(("alice".into(), "get pods.".into()));
    }
    let uri = "/v1/explain/pod?namespace=ml&name=g-0";
    let call = |token: Option<&'static str>| {
        let app = router(c.state.clone());
        async move {
            let mut req = axum::http::Request::get(uri);
            if let Some(t) = token {
                req = req.header("authorization", format!("Bearer {t}"));
            }
            let res = tower::ServiceExt::oneshot(app, req.body(axum::body::Body::empty()).unwrap())
                .await
                .unwrap();
            let status = res.status();
            let body = http_body_util::BodyExt::collect(res.into_body())
                .await
                .unwrap()
                .to_bytes();
            (status, String::from_utf8_lossy(&body).into_owned())
        }
    };
    assert_eq!(call(None).await.0, StatusCode::UNAUTHORIZED);
    let (status, text) = call(Some("bob-token")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
    assert!(
        text.contains("may not get pods in namespace \\\"ml\\\""),
        "{text}"
    );
    let (status, text) = call(Some("alice-token")).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["pod"]["cached"], true, "{v}");
    assert_eq!(
        reasons(&v),
        [(
            "pod group ml/g: 2 of the 3 pods it needs exist".to_owned(),
            2
        )]
    );
    // The pod was read with a GET, and nothing was written.
    let requests = api.inner.lock().requests.clone();
    assert!(
        requests
            .iter()
            .any(|r| r.verb == "get" && r.resource == "pods" && r.subresource.is_empty()),
        "{requests:?}"
    );
    assert!(
        !requests.iter().any(|r| r.verb == "patch"
            || r.verb == "update"
            || (r.verb == "create"
                && r.resource != "tokenreviews"
                && r.resource != "subjectaccessreviews")),
        "{requests:?}"
    );
    for w in c.watchers {
        w.abort();
    }
}
