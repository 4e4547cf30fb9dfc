//! `All` disruption across nodes: preempt keeps a candidate whose `All`
//! group also runs elsewhere when every member is below the preemptor, and
//! the follow-up evictor evicts the members elsewhere once kube-scheduler
//! has deleted the victims. Through the router in standalone mode (the
//! store deletes the pods), and in cluster mode against the test API
//! server's Eviction API, with a PodDisruptionBudget refusal retried.

use crate::apiserver::{FakeApi, Res};
use crate::common::{self, app, get, post};

use axum::http::{Method, StatusCode};
use kruntimes_scheduler::cache::CacheConfig;
use kruntimes_scheduler::http::router;
use kruntimes_scheduler::serve::{self, spawn_evictor};
use kruntimes_scheduler::testkit::{self, wait_until, wait_until_async};
use serde_json::{Value, json};
use std::time::Duration;

/// The preemptor of `tests/data/preempt/groups-meta.json` (priority 1000)
/// with kube-scheduler's candidates.
fn preempt_body(victims: Value) -> String {
    let mut body: Value = serde_json::from_str(
        &std::fs::read_to_string(common::data("preempt/groups-meta.json")).unwrap(),
    )
    .unwrap();
    body["NodeNameToMetaVictims"] = victims;
    body.to_string()
}

/// Whether the store holds the pod (the objects API answers a list).
async fn exists(a: &kruntimes_scheduler::serve::Standalone, pod: &str) -> bool {
    let r = get(
        a,
        &format!("/v1/objects?kind=Pod&namespace=default&name={pod}"),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    r.body["items"].as_array().is_some_and(|i| !i.is_empty())
}

fn conditions(group: &Value) -> Vec<Value> {
    group
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn disruption_condition(group: &Value) -> Option<Value> {
    conditions(group)
        .into_iter()
        .find(|c| c["type"] == "DisruptionTarget")
}

#[tokio::test]
async fn standalone_a_spread_all_group_is_preempted_then_evicted_whole() {
    let a = app("preempt/cluster.yaml");
    let evictor = spawn_evictor(&a.state, a.state.extender.writer.clone());
    // n2 holds sp0 of `spread` (All); sp1 runs on n3.
    let r = post(
        &a,
        "/scheduler/preempt",
        &preempt_body(json!({"n2": {"Pods": [{"UID": "sp0-uid"}], "NumPDBViolations": 0}})),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body,
        json!({"NodeNameToMetaVictims": {"n2": {"Pods": [{"UID": "sp0-uid"}], "NumPDBViolations": 0}}})
    );
    // kube-scheduler deletes sp0...
    let r = common::call(
        &a,
        Method::DELETE,
        "/v1/objects?kind=Pod&namespace=default&name=sp0",
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    // ...but nothing happens until the preemptor shows it chose n2.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(exists(&a, "sp1").await, "sp1 still runs");
    assert_eq!(a.state.extender.evictions.pending(), 1);
    // kube-scheduler nominates n2 for the preemptor; the evictor deletes
    // sp1 from the store.
    let trainer = testkit::pod("trainer")
        .namespace("default")
        .uid("trainer-uid")
        .requests(&[])
        .priority(1000)
        .phase("Pending")
        .set(&["status", "nominatedNodeName"], "n2");
    let r = post(&a, "/v1/objects", &trainer.json()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    wait_until_async("sp1 evicted", Duration::from_secs(10), || async {
        !exists(&a, "sp1").await
    })
    .await;
    wait_until("the condition on spread", Duration::from_secs(10), || {
        a.state
            .extender
            .nodes
            .read()
            .group("default", "spread")
            .and_then(|g| g.status.as_ref()?.conditions.clone())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "DisruptionTarget" && c.message.contains("evicted 1"))
            })
    })
    .await;
    let g = get(
        &a,
        "/v1/objects?kind=PodGroup&namespace=default&name=spread",
    )
    .await;
    let c = disruption_condition(&g.body["items"][0]).expect("DisruptionTarget");
    assert_eq!(c["status"], "True");
    assert_eq!(c["reason"], "PreemptionByScheduler");
    let m = c["message"].as_str().unwrap();
    assert!(
        m.contains(
            "kube-scheduler preempted sp0 on node n2 for pod default/trainer (priority 1000)"
        ) && m.contains("evicted 1 members on other nodes: sp1 on n3"),
        "{m}"
    );
    // The other pods are untouched.
    for p in ["b0", "b1", "web", "l0", "l1", "ja0", "jb0"] {
        assert!(exists(&a, p).await, "{p}");
    }
    assert_eq!(a.state.extender.evictions.pending(), 0);
    evictor.abort();
}

#[tokio::test]
async fn standalone_without_the_flag_the_spread_candidate_is_dropped() {
    let a = app("preempt/cluster.yaml");
    a.state
        .extender
        .nodes
        .set_semantics(kruntimes_scheduler::cache::cluster_index::Semantics {
            evict_all_disruption: false,
            ..Default::default()
        });
    let r = post(
        &a,
        "/scheduler/preempt",
        &preempt_body(json!({"n2": {"Pods": [{"UID": "sp0-uid"}], "NumPDBViolations": 0}})),
    )
    .await;
    assert_eq!(r.body, json!({"NodeNameToMetaVictims": {}}), "{}", r.text);
    assert_eq!(a.state.extender.evictions.pending(), 0);
}

/// Member `ml/name` of the group `train` at priority 10 requesting cpu
/// 3, Running on `node` (a node with room for one 3-cpu pod).
fn member(name: &str, node: &str) -> Value {
    testkit::pod(name)
        .unset(&["metadata", "uid"])
        .requests(&[("cpu", "3")])
        .group("train")
        .priority(10)
        .on_node(node)
        .value()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_mode_a_cross_node_all_group_is_preempted_then_evicted_through_the_eviction_api() {
    let api = FakeApi::start().await;
    for n in ["n0", "n1", "n2"] {
        api.put(
            Res::Nodes,
            testkit::node(n)
                .set(&["status", "allocatable", "pods"], "10")
                .value(),
        );
    }
    api.put(
        Res::PodGroups,
        testkit::pod_group("train")
            .priority(10)
            .gang(3)
            .disrupt_all()
            .value(),
    );
    for (p, n) in [("train-0", "n0"), ("train-1", "n1"), ("train-2", "n2")] {
        api.put(Res::Pods, member(p, n));
    }
    // A PodDisruptionBudget refuses train-1's eviction twice.
    api.inner.lock().pdb_refusals.insert("ml/train-1".into(), 2);
    let c = serve::cluster(CacheConfig::default(), api.client(), "test").await;
    let config = kube::Config::new(api.url.parse().unwrap());
    let evictor = spawn_evictor(&c.state, serve::evictor_writer(&config, "test").unwrap());
    wait_until("the cache lists the group", Duration::from_secs(10), || {
        // Until its caches have synced every extender verb answers 503.
        (c.state.extender.synced)() && {
            let s = c.state.extender.nodes.read();
            s.has_node("n2")
                && s.group("ml", "train").is_some()
                && s.members("ml", "train").map(|m| m.len()) == Some(3)
        }
    })
    .await;
    let app = router(c.state.clone());
    // A high-priority pod that needs n0: kube-scheduler's candidate is
    // train-0 alone (it can name only pods on n0).
    let preemptor = api.put(
        Res::Pods,
        testkit::pod("big")
            .unset(&["metadata", "uid"])
            .requests(&[("cpu", "3")])
            .priority(1000)
            .phase("Pending")
            .value(),
    );
    let uid = |p: &str| format!("uid-Pod-ml-{p}");
    let body = json!({"Pod": preemptor, "NodeNameToVictims": null,
        "NodeNameToMetaVictims": {"n0": {"Pods": [{"UID": uid("train-0")}], "NumPDBViolations": 0}}});
    let r = testkit::call(
        app.clone(),
        Method::POST,
        "/scheduler/preempt",
        Some(&body.to_string()),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body["NodeNameToMetaVictims"],
        json!({"n0": {"Pods": [{"UID": uid("train-0")}], "NumPDBViolations": 0}})
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        api.inner.lock().evictions.is_empty(),
        "nothing is evicted before kube-scheduler deletes the victim"
    );
    // kube-scheduler nominates n0 for the preemptor and deletes train-0:
    // terminating first, then gone.
    let mut nominated = preemptor.clone();
    nominated["status"]["nominatedNodeName"] = json!("n0");
    api.put(Res::Pods, nominated);
    let mut terminating = api.get(Res::Pods, "ml", "train-0").unwrap();
    terminating["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    api.put(Res::Pods, terminating);
    api.delete(Res::Pods, "ml", "train-0");
    wait_until("every member evicted", Duration::from_secs(20), || {
        api.get(Res::Pods, "ml", "train-1").is_none()
            && api.get(Res::Pods, "ml", "train-2").is_none()
    })
    .await;
    // The evictions spoke the protocol: train-2 at once; train-1 refused
    // twice with 429, then evicted.
    let evictions = api.inner.lock().evictions.clone();
    let codes: Vec<(String, u16)> = evictions
        .iter()
        .map(|(p, code, _)| (p.clone(), *code))
        .collect();
    assert_eq!(
        codes
            .iter()
            .filter(|(p, _)| p == "ml/train-1")
            .cloned()
            .collect::<Vec<_>>(),
        [
            ("ml/train-1".to_owned(), 429),
            ("ml/train-1".to_owned(), 429),
            ("ml/train-1".to_owned(), 201)
        ],
        "{codes:?}"
    );
    assert_eq!(
        codes
            .iter()
            .filter(|(p, _)| p == "ml/train-2")
            .cloned()
            .collect::<Vec<_>>(),
        [("ml/train-2".to_owned(), 201)]
    );
    for (p, _, body) in &evictions {
        let name = p.trim_start_matches("ml/");
        assert_eq!(body["apiVersion"], "policy/v1");
        assert_eq!(body["kind"], "Eviction");
        assert_eq!(body["metadata"]["name"], name);
        assert_eq!(body["deleteOptions"]["preconditions"]["uid"], uid(name));
    }
    // The Warning Event names what was evicted and why.
    wait_until("the Warning Event", Duration::from_secs(10), || {
        api.list(Res::Events)
            .iter()
            .any(|e| e["reason"] == "Preempted")
    })
    .await;
    let events = api.list(Res::Events);
    let ev = events.iter().find(|e| e["reason"] == "Preempted").unwrap();
    assert_eq!(ev["type"], "Warning");
    assert_eq!(ev["regarding"]["kind"], "PodGroup");
    assert_eq!(ev["regarding"]["name"], "train");
    let note = ev["note"].as_str().unwrap();
    for want in [
        "kube-scheduler preempted train-0 on node n0 for pod ml/big (priority 1000)",
        "evicted 2 members on other nodes: ",
        "train-1 on n1",
        "train-2 on n2",
        "2 refusals by a PodDisruptionBudget were retried",
    ] {
        assert!(note.contains(want), "{want}: {note}");
    }
    // The condition is on the PodGroup.
    let g = api.get(Res::PodGroups, "ml", "train").unwrap();
    let cond = disruption_condition(&g).expect("DisruptionTarget condition");
    assert_eq!(cond["status"], "True");
    assert_eq!(cond["reason"], "PreemptionByScheduler");
    assert_eq!(cond["message"], note);
    // The RBAC the extender needs for it.
    assert!(
        api.inner
            .lock()
            .requests
            .iter()
            .any(|r| r.resource == "pods" && r.subresource == "eviction" && r.verb == "create")
    );
    evictor.abort();
    for w in c.watchers {
        w.abort();
    }
}
