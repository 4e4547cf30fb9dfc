//! `POST /scheduler/preempt` through the router, standalone mode, with
//! bodies exactly as kube-scheduler marshals `ExtenderPreemptionArgs` (Go
//! field names, `null` for nil) in both forms: full victim Pods
//! (`NodeNameToVictims`) and UIDs only (`NodeNameToMetaVictims`).

use crate::common;

use axum::http::StatusCode;
use common::{app, data, post};
use serde_json::{Value, json};
use std::collections::BTreeMap;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(data(&format!("preempt/{name}"))).expect("fixture exists")
}

fn state() -> kruntimes_scheduler::serve::Standalone {
    app("preempt/cluster.yaml")
}

/// `ExtenderPreemptionResult` as Go's `encoding/json` decodes it:
/// node → (UIDs, NumPDBViolations).
fn go_preemption(v: &Value) -> BTreeMap<String, (Vec<String>, i64)> {
    let o = v
        .as_object()
        .expect("ExtenderPreemptionResult is an object");
    match o.get("NodeNameToMetaVictims") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(node, mv)| {
                let pods = match &mv["Pods"] {
                    Value::Null => vec![],
                    Value::Array(a) => a
                        .iter()
                        .map(|p| p["UID"].as_str().expect("UID is a string").to_owned())
                        .collect(),
                    other => panic!("Pods: cannot unmarshal {other}"),
                };
                let pdb = match &mv["NumPDBViolations"] {
                    Value::Null => 0,
                    n => n.as_i64().expect("NumPDBViolations is an int64"),
                };
                (node.clone(), (pods, pdb))
            })
            .collect(),
        Some(other) => panic!("NodeNameToMetaVictims: cannot unmarshal {other}"),
    }
}

fn want(entries: &[(&str, &[&str], i64)]) -> BTreeMap<String, (Vec<String>, i64)> {
    entries
        .iter()
        .map(|(n, pods, pdb)| {
            (
                n.to_string(),
                (pods.iter().map(|p| format!("{p}-uid")).collect(), *pdb),
            )
        })
        .collect()
}

async fn preempt(
    app: &kruntimes_scheduler::serve::Standalone,
    body: &str,
) -> BTreeMap<String, (Vec<String>, i64)> {
    let r = post(app, "/scheduler/preempt", body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    go_preemption(&r.body)
}

#[tokio::test]
async fn all_groups_go_whole_or_not_at_all_in_both_forms() {
    let app = state();
    // n1: b0 brings b1 (batch is All, both on n1). n2: spread is All with
    // sp1 on n3: with --evict-all-disruption the candidate stands (sp0 and
    // web, sp1 to be evicted after) but disrupts three pods where n1
    // disrupts two at the same counts otherwise, so n1 dominates it (it is
    // dropped outright with the flag off: tests/it/disruption.rs). n3: ja0
    // brings jb0 (the CompositePodGroup job is All). ghost: not a node, no
    // victims.
    let expected = want(&[("n1", &["b0", "b1"], 1), ("n3", &["ja0", "jb0"], 0)]);
    assert_eq!(preempt(&app, &fixture("groups-meta.json")).await, expected);
    assert_eq!(preempt(&app, &fixture("groups-full.json")).await, expected);
}

#[tokio::test]
async fn victims_at_or_above_the_preemptor_drop_their_node() {
    let app = state();
    let expected = want(&[("n2", &["web"], 0)]);
    assert_eq!(
        preempt(&app, &fixture("priority-meta.json")).await,
        expected
    );
    assert_eq!(
        preempt(&app, &fixture("priority-full.json")).await,
        expected
    );
    // A preemptor at the victims' priority may preempt nothing.
    let mut body: Value = serde_json::from_str(&fixture("priority-meta.json")).unwrap();
    body["Pod"]["spec"]["priorityClassName"] = json!("low");
    body["Pod"]["spec"]["priority"] = json!(10);
    assert!(preempt(&app, &body.to_string()).await.is_empty());
}

#[tokio::test]
async fn a_preemptor_that_never_preempts_gets_no_candidates() {
    let app = state();
    let r = post(&app, "/scheduler/preempt", &fixture("never-meta.json")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, json!({"NodeNameToMetaVictims": {}}));
}

#[tokio::test]
async fn a_preemptor_in_a_group_takes_the_group_priority() {
    let app = state();
    let group = r#"{"kind": "PodGroup", "apiVersion": "scheduling.k8s.io/v1beta1",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"priority": 5, "schedulingPolicy": {"basic": {}}}}"#;
    assert_eq!(
        post(&app, "/v1/objects", group).await.status,
        StatusCode::OK
    );
    // The pod says 1000, its group 5: below every victim.
    let mut body: Value = serde_json::from_str(&fixture("groups-meta.json")).unwrap();
    body["Pod"]["spec"]["schedulingGroup"] = json!({"podGroupName": "train"});
    assert!(preempt(&app, &body.to_string()).await.is_empty());
}

#[tokio::test]
async fn malformed_preempt_requests_are_4xx_and_odd_ones_answer_nothing() {
    let app = state();
    for body in [
        "",
        "{",
        "1",
        r#"{"NodeNameToMetaVictims": {"n1": {"Pods": "x"}}}"#,
    ] {
        let r = post(&app, "/scheduler/preempt", body).await;
        assert!(r.status.is_client_error(), "{body}: {}", r.status);
    }
    for body in [
        r#"{"Pod": null, "NodeNameToVictims": null, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "b0-uid"}], "NumPDBViolations": 0}}}"#,
        r#"{"Pod": {"metadata": {"name": "p"}}, "NodeNameToVictims": null, "NodeNameToMetaVictims": null}"#,
        r#"{"Pod": {"metadata": {"name": "p"}}, "NodeNameToVictims": {"n1": {"Pods": [{"metadata": null}], "NumPDBViolations": 0}}, "NodeNameToMetaVictims": null}"#,
    ] {
        let r = post(&app, "/scheduler/preempt", body).await;
        assert_eq!(r.status, StatusCode::OK, "{body}: {}", r.text);
        assert_eq!(r.body, json!({"NodeNameToMetaVictims": {}}), "{body}");
    }
}
