//! End-to-end standalone scenario: many Runs with mixed resources against
//! several Runtime Pods, scheduled by the real loop with concurrent workers.
//! At every settle point: no pod is over capacity, every Pending Run really
//! fits nowhere (with the reason its status claims), and completing Runs
//! lets Pending ones in.

use crate::common;

use common::*;
use k8s_openapi::jiff::Timestamp;
use kruntimes_scheduler::cache::CacheConfig;
use kruntimes_scheduler::cluster::standalone::kube_time;
use kruntimes_scheduler::model::quantity::parse_amount;
use kruntimes_scheduler::serve::standalone;
use kruntimes_scheduler::testkit;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// A Ready Runtime Pod `sim/name` of runtime `py` declaring `caps`, its
/// runtimed heartbeat now.
fn pod(name: &str, caps: &[(&str, u64)]) -> Value {
    let now = kube_time(Timestamp::now());
    let caps: Vec<(&str, String)> = caps.iter().map(|(k, v)| (*k, v.to_string())).collect();
    let caps: Vec<(&str, &str)> = caps.iter().map(|(k, v)| (*k, v.as_str())).collect();
    testkit::runtime_pod(name, &caps, &now)
        .namespace("sim")
        .value()
}

/// A Run `sim/name` of runtime `py` requesting `reqs`.
fn run(name: &str, reqs: &BTreeMap<String, String>) -> Value {
    let reqs: Vec<(&str, &str)> = reqs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    testkit::run(name, &reqs)
        .namespace("sim")
        .unset(&["metadata", "resourceVersion"])
        .value()
}

async fn settle(app: &kruntimes_scheduler::serve::Standalone) {
    for _ in 0..1000 {
        if app.state.runs.cache.queue().outstanding() == 0 {
            // Give in-flight cycles a moment, then re-check.
            tokio::time::sleep(Duration::from_millis(20)).await;
            if app.state.runs.cache.queue().outstanding() == 0 {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("scheduling did not settle");
}

fn amounts(reqs: &Value) -> BTreeMap<String, u64> {
    let mut m: BTreeMap<String, u64> = reqs
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), parse_amount(v.as_str().unwrap()).unwrap()))
                .collect()
        })
        .unwrap_or_default();
    m.retain(|_, v| *v > 0);
    m.entry("runs".into()).or_insert(1);
    m
}

/// Checks capacity on every pod from the stored objects alone.
async fn check(
    app: &kruntimes_scheduler::serve::Standalone,
    caps: &BTreeMap<String, BTreeMap<String, u64>>,
) -> (usize, usize) {
    let runs = get(app, "/v1/objects?kind=Run&namespace=sim").await.body;
    let mut used: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let (mut scheduled, mut pending) = (0, 0);
    for r in runs["items"].as_array().unwrap() {
        let phase = r["status"]["phase"].as_str().unwrap_or("");
        match phase {
            "Scheduled" | "Running" | "Ready" => {
                scheduled += 1;
                let pod = r["status"]["assignedPod"].as_str().unwrap().to_owned();
                for (k, v) in amounts(&r["spec"]["resources"]["requests"]) {
                    *used.entry(pod.clone()).or_default().entry(k).or_default() += v;
                }
            }
            "Pending" => {
                pending += 1;
                // It really fits nowhere now, for the reason it states.
                let plan = post(app, "/v1/runs/plan", &r.to_string()).await.body;
                assert_eq!(
                    plan["selected"],
                    Value::Null,
                    "{} is Pending but fits: {plan}",
                    r["metadata"]["name"]
                );
                let reason = r["status"]["conditions"]
                    .as_array()
                    .and_then(|cs| cs.iter().find(|c| c["type"] == "Scheduled"))
                    .map(|c| c["reason"].clone())
                    .unwrap_or(Value::Null);
                assert_eq!(plan["reason"], reason, "{}", r["metadata"]["name"]);
            }
            "Succeeded" => {}
            other => panic!("unexpected phase {other:?} for {}", r["metadata"]["name"]),
        }
    }
    for (pod, u) in &used {
        for (res, amount) in u {
            let cap = caps[pod].get(res).copied().unwrap_or(0);
            assert!(
                *amount <= cap,
                "{pod} over capacity on {res}: {amount} > {cap}"
            );
        }
    }
    // The cache's own index agrees with the objects.
    app.state.runs.cache.check_invariants().unwrap();
    (scheduled, pending)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_runs_never_overbook_and_pending_runs_get_in() {
    // The pods' heartbeats are set once: keep them fresh for the whole run,
    // however slowly the other tests in the process let it go.
    let config = CacheConfig {
        heartbeat_stale_after: Duration::from_secs(3600),
        ..CacheConfig::default()
    };
    let app = standalone(config, Vec::new()).expect("empty state");
    let controller = Arc::clone(&app.controller);
    let loop_task = tokio::spawn(controller.run(4, Duration::from_secs(3600)));

    let mut rng = Lcg(42);
    let mut caps: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let mut objects = Vec::new();
    for i in 0..6 {
        let name = format!("rp-{i}");
        let mut c = vec![("runs", 3 + rng.next(4)), ("mem", 1024 * (1 + rng.next(4)))];
        if i % 2 == 0 {
            c.push(("gpu", 1 + rng.next(2)));
        }
        caps.insert(
            name.clone(),
            c.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        );
        objects.push(pod(&name, &c));
    }
    post(&app, "/v1/objects", &Value::Array(objects).to_string()).await;

    // 80 Runs, posted in small concurrent batches while the loop runs.
    let mut batches = Vec::new();
    for b in 0..8 {
        let mut batch = Vec::new();
        for j in 0..10 {
            let mut reqs = BTreeMap::new();
            reqs.insert("runs".to_string(), (1 + rng.next(2)).to_string());
            if rng.next(3) == 0 {
                reqs.insert("gpu".to_string(), "1".to_string());
            }
            reqs.insert("mem".to_string(), format!("{}", 256 * rng.next(5)));
            batch.push(run(&format!("r-{b}-{j}"), &reqs));
        }
        batches.push(Value::Array(batch).to_string());
    }
    let app_ref = &app;
    futures::future::join_all(
        batches
            .iter()
            .map(|b| async move { post(app_ref, "/v1/objects", b).await }),
    )
    .await;
    // Two that can never fit: an undeclared resource and more gpu than any pod has.
    let never = vec![
        run(
            "never-fpga",
            &[("fpga".to_string(), "1".to_string())].into(),
        ),
        run("never-gpu", &[("gpu".to_string(), "5".to_string())].into()),
    ];
    post(&app, "/v1/objects", &Value::Array(never).to_string()).await;
    settle(&app).await;
    let (scheduled, pending) = check(&app, &caps).await;
    assert!(
        scheduled > 0 && pending > 2,
        "scheduled {scheduled}, pending {pending}"
    );

    // Complete Runs round by round; Pending Runs get in until only the
    // impossible two are left.
    for round in 0..40 {
        let runs = get(&app, "/v1/objects?kind=Run&namespace=sim").await.body;
        let active: Vec<Value> = runs["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["status"]["phase"] == "Scheduled")
            .cloned()
            .collect();
        if active.is_empty() {
            break;
        }
        let done: Vec<Value> = active
            .into_iter()
            .enumerate()
            .filter(|(i, _)| (i + round) % 2 == 0)
            .map(|(_, mut r)| {
                r["status"]["phase"] = json!("Succeeded");
                r["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("resourceVersion");
                r
            })
            .collect();
        post(&app, "/v1/objects", &Value::Array(done).to_string()).await;
        settle(&app).await;
        check(&app, &caps).await;
    }
    let runs = get(&app, "/v1/runs?namespace=sim").await.body;
    let left: Vec<(String, String)> = runs["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["phase"] != "Succeeded")
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["reason"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        left,
        vec![
            ("never-fpga".to_owned(), "ResourceNotDeclared".to_owned()),
            ("never-gpu".to_owned(), "InsufficientCapacity".to_owned())
        ]
    );
    app.state.runs.cache.queue().shutdown();
    loop_task.await.unwrap();
}
