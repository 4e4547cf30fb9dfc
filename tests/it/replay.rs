//! Snapshot replay: `serve --state` on a `kubectl get -A -o json` dump of
//! a whole cluster (Deployments, ReplicaSets, Services, ConfigMaps,
//! Events, ... mixed in) loads, says what it skipped, and decides exactly
//! as the same state without those kinds; `POST /v1/objects` stays strict.

use axum::http::StatusCode;
use kruntimes_scheduler::cache::CacheConfig;
use kruntimes_scheduler::cluster::load::load_path;
use kruntimes_scheduler::http::router;
use kruntimes_scheduler::serve::{Standalone, load_state, standalone, standalone_from_state};
use kruntimes_scheduler::testkit;
use serde_json::{Value, json};
use std::path::PathBuf;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/snapshot-all.json")
}

/// The kinds the scheduler models, as the test knows them (not from the
/// code under test).
const MODELLED: &[&str] = &["Node", "Pod", "PodGroup", "PriorityClass", "Run", "Runtime"];

/// The snapshot as `serve --state` loads it, and the same state written
/// without the other kinds.
fn both() -> (Standalone, Standalone, String) {
    let (objects, skipped) = load_state(&fixture()).expect("the snapshot loads");
    let replayed = standalone(CacheConfig::default(), objects).expect("valid");
    let only_modelled: Vec<Value> = load_path(&fixture())
        .unwrap()
        .into_iter()
        .filter(|o| MODELLED.contains(&o["kind"].as_str().unwrap()))
        .collect();
    let plain = standalone(CacheConfig::default(), only_modelled).expect("valid");
    (replayed, plain, skipped.to_string())
}

#[test]
fn the_snapshot_loads_and_counts_what_it_skipped_by_kind() {
    let (_, skipped) = load_state(&fixture()).expect("the snapshot loads");
    assert_eq!(
        skipped.to_string(),
        "13 objects of kinds the scheduler does not model: \
         ConfigMap 4, Deployment 1, Event 2, Namespace 1, ReplicaSet 1, Service 3, ServiceAccount 1"
    );
    assert_eq!(skipped.0["Event"], 2, "core and events.k8s.io Events");
}

fn filter_body(pod: &Value, nodes: &[&str]) -> String {
    json!({"Pod": pod, "NodeNames": nodes}).to_string()
}

#[tokio::test]
async fn filter_explain_and_plan_answer_as_the_state_without_the_skipped_kinds() {
    let (replayed, plain, _) = both();
    let snapshot = load_path(&fixture()).unwrap();
    let nodes = ["r1-0", "r1-1", "r2-0", "r2-1", "r3-0", "r3-1"];
    let pods: Vec<&Value> = snapshot.iter().filter(|o| o["kind"] == "Pod").collect();
    assert!(pods.len() >= 5);
    for app in [&replayed, &plain] {
        assert_eq!(app.state.extender.nodes.read().node_names().len(), 6);
    }
    for pod in pods {
        let body = filter_body(pod, &nodes);
        let a = testkit::post(router(replayed.state.clone()), "/scheduler/filter", &body).await;
        let b = testkit::post(router(plain.state.clone()), "/scheduler/filter", &body).await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(a.text, b.text, "filter of {}", pod["metadata"]["name"]);
        let name = pod["metadata"]["name"].as_str().unwrap();
        let ns = pod["metadata"]["namespace"].as_str().unwrap();
        let uri = format!("/v1/explain/pod?namespace={ns}&name={name}");
        let a = testkit::get(router(replayed.state.clone()), &uri).await;
        let b = testkit::get(router(plain.state.clone()), &uri).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.text);
        assert_eq!(a.text, b.text, "explain of {name}");
    }
    // The gang in the snapshot: r1 is full of web pods, r2 and r3 hold it;
    // the first member's filter plans r2 (the tie goes to the smaller value).
    let gang_pod = snapshot
        .iter()
        .find(|o| o["metadata"]["name"] == "train-0")
        .unwrap();
    let r = testkit::post(
        router(replayed.state.clone()),
        "/scheduler/filter",
        &filter_body(gang_pod, &nodes),
    )
    .await;
    let v: Value = serde_json::from_str(&r.text).unwrap();
    assert_eq!(v["NodeNames"], json!(["r2-0", "r2-1"]), "{v}");
    // And the Run in the snapshot plans alike.
    let uri = "/v1/explain/run?namespace=default&name=job-1";
    let a = testkit::get(router(replayed.state.clone()), uri).await;
    let b = testkit::get(router(plain.state.clone()), uri).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(a.text, b.text);
}

#[tokio::test]
async fn the_object_api_stays_strict_about_unknown_kinds() {
    let (replayed, _, _) = both();
    let body = std::fs::read_to_string(fixture()).unwrap();
    let r = testkit::post(router(replayed.state.clone()), "/v1/objects", &body).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert!(
        r.text
            .contains("kind: Unsupported value: \\\"Deployment\\\""),
        "{}",
        r.text
    );
}

/// The object without what a store makes up when it is missing (uid,
/// creation time).
fn made_up_removed(mut o: Value) -> Value {
    if let Some(meta) = o["metadata"].as_object_mut() {
        meta.remove("uid");
        meta.remove("creationTimestamp");
    }
    o
}

#[test]
fn the_snapshot_read_object_by_object_is_the_snapshot_read_whole() {
    use kruntimes_scheduler::cluster::standalone::Kind;
    let (objects, skipped) = load_state(&fixture()).expect("the snapshot loads");
    let count = objects.len();
    let whole = standalone(CacheConfig::default(), objects).expect("valid");
    let (streamed, streamed_count, streamed_skipped) =
        standalone_from_state(CacheConfig::default(), &fixture()).expect("valid");
    assert_eq!((streamed_count, &streamed_skipped), (count, &skipped));
    for kind in Kind::ALL {
        let list = |app: &Standalone| -> Vec<Value> {
            app.store
                .list(kind, None, None)
                .into_iter()
                .map(made_up_removed)
                .collect()
        };
        assert_eq!(list(&streamed), list(&whole), "{kind:?}");
    }
    let now = k8s_openapi::jiff::Timestamp::now();
    let pods = |app: &Standalone| app.state.runs.cache.runtime_pods(None, None, now);
    assert_eq!(pods(&streamed), pods(&whole));
    let stored_pods = whole.store.list(Kind::Pod, None, None);
    assert!(stored_pods.len() >= 5);
    for pod in stored_pods {
        let (ns, name) = (
            pod["metadata"]["namespace"].as_str().unwrap(),
            pod["metadata"]["name"].as_str().unwrap(),
        );
        let entry = |app: &Standalone| {
            let mut e = app.state.extender.nodes.read().pod(ns, name).cloned();
            if let Some(e) = &mut e {
                e.uid.clear();
            }
            e
        };
        assert!(entry(&whole).is_some(), "{ns}/{name}");
        assert_eq!(entry(&streamed), entry(&whole), "{ns}/{name}");
    }
    assert_eq!(
        streamed.state.extender.nodes.read().node_names(),
        whole.state.extender.nodes.read().node_names()
    );
    // A refused object stops the load, saying which one, as it does whole.
    let dir = std::env::temp_dir().join(format!("krs-refused-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("state.json");
    std::fs::write(
        &bad,
        r#"{"kind":"List","items":[{"kind":"Node","metadata":{"name":"n"}},{"kind":"Pod","metadata":{"name":"p","labels":7}}]}"#,
    )
    .unwrap();
    let streamed = standalone_from_state(CacheConfig::default(), &bad)
        .err()
        .unwrap();
    let (objects, _) = load_state(&bad).unwrap();
    let whole = standalone(CacheConfig::default(), objects).err().unwrap();
    assert_eq!(
        format!("{:#}", streamed),
        format!("loading --state {}: {whole}", bad.display())
    );
    std::fs::write(&bad, "{\"kind\":").unwrap();
    let streamed = standalone_from_state(CacheConfig::default(), &bad)
        .err()
        .unwrap();
    let whole = load_state(&bad).err().unwrap();
    assert_eq!(format!("{streamed:#}"), format!("{whole:#}"));
    std::fs::remove_dir_all(&dir).unwrap();
}
