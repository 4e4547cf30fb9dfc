//! Preempt benchmark: the server-side work of one kube-scheduler preempt
//! call (decode the JSON body, decide over a cache snapshot, encode the
//! answer) with 100 candidate nodes × 10 victims, in both request forms:
//! UIDs only (`NodeNameToMetaVictims`, node-cache capable) and full victim
//! Pods (`NodeNameToVictims`).
//!
//! The cache holds 5,000 nodes with 11 bound pods each. On every node two
//! pods form a PodGroup with disruption mode `All` (the victim list names one
//! of them; the other is added), four belong to `Single` PodGroups, and the
//! rest are not in a group; on every 10th node the `All` group has its
//! other member on the next node, so with `--evict-all-disruption=false`
//! 10 of the 100 candidates are dropped (the two forms). With the flag on
//! (the default; the `meta-evicting` case) they are kept with the member on
//! the node as victim, and the member elsewhere handed to the evictor.
//!
//! Criterion reports the mean per call; the closing lines print p50/p99
//! (nearest rank, `testkit::percentile`) over 200 timed calls per form.

use criterion::{Criterion, criterion_group, criterion_main};
use kruntimes_scheduler::cache::cluster_index::{ClusterIndex, PodEntry, Semantics};
use kruntimes_scheduler::extender::{preempt_bytes, preempt_plan_bytes};
use kruntimes_scheduler::testkit::{node, percentile, pod_group, time_calls};
use serde_json::{Value, json};
use std::hint::black_box;

const NODES: usize = 5_000;
const CANDIDATES: usize = 100;
const VICTIMS: usize = 10;

fn node_name(i: usize) -> String {
    format!("node-{i:05}")
}

fn pod_name(i: usize, j: usize) -> String {
    format!("p-{i}-{j}")
}

/// The group of pod `j` on node `i`, if any.
fn group_of(i: usize, j: usize) -> Option<String> {
    match j {
        0 | 1 => Some(format!("all-{i}")),
        2..=5 => Some(format!("single-{}", (i + j) % 50)),
        _ => None,
    }
}

fn cluster() -> ClusterIndex {
    let cache = ClusterIndex::new();
    for i in 0..NODES {
        cache.apply_node(&node(&node_name(i)).allocatable("32", "128Gi").typed());
        let all = pod_group(&format!("all-{i}"))
            .namespace("bench")
            .priority(10)
            .gang(2)
            .disrupt_all();
        cache.apply_pod_group(&all.typed());
        for j in 0..PODS {
            // Every 10th node's All group has its second member elsewhere.
            let on = if j == 1 && i % 10 == 5 {
                (i + 1) % NODES
            } else {
                i
            };
            let entry = PodEntry {
                uid: format!("{}-uid", pod_name(i, j)),
                node: Some(node_name(on)),
                requests: Some(
                    [("cpu".to_owned(), 2000), ("memory".to_owned(), 8 << 30)]
                        .into_iter()
                        .collect(),
                ),
                group: group_of(i, j),
                priority: Some(if j < 6 { 10 } else { j as i32 }),
                ..PodEntry::default()
            };
            cache.apply_pod_entry(("bench".into(), pod_name(i, j)), entry);
        }
    }
    for g in 0..50 {
        let single = pod_group(&format!("single-{g}"))
            .namespace("bench")
            .priority(10);
        cache.apply_pod_group(&single.typed());
    }
    cache
}

fn preemptor() -> Value {
    json!({"metadata": {"name": "trainer", "namespace": "bench", "uid": "trainer-uid", "creationTimestamp": null},
        "spec": {"containers": [{"name": "c", "image": "train", "resources": {"requests": {"cpu": "30"}}}],
                 "schedulerName": "kruntimes-scheduler", "priority": 1000, "preemptionPolicy": "PreemptLowerPriority"},
        "status": {"phase": "Pending"}})
}

/// A victim Pod as kube-scheduler sends it in the full form.
fn victim(i: usize, j: usize) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "registry.example.com/app:1.2.3",
            "resources": {"requests": {"cpu": "2", "memory": "8Gi"}},
            "ports": [{"containerPort": 8080, "protocol": "TCP"}]}],
        "nodeName": node_name(i), "priority": if j < 6 { 10 } else { j }, "schedulerName": "kruntimes-scheduler"});
    if let Some(g) = group_of(i, j) {
        spec["schedulingGroup"] = json!({"podGroupName": g});
    }
    json!({"metadata": {"name": pod_name(i, j), "namespace": "bench", "uid": format!("{}-uid", pod_name(i, j)),
            "labels": {"app": "batch"}, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": spec,
        "status": {"phase": "Running", "podIP": "10.0.0.1", "startTime": "2026-01-01T00:00:05Z"}})
}

/// Pods per node: the victims and the second `All` member.
const PODS: usize = VICTIMS + 1;

/// Candidate `c`'s node: spread over the cluster, one in ten of them with a
/// split `All` group.
fn candidate(c: usize) -> usize {
    c * (NODES / CANDIDATES) + c % 10
}

/// Victims kube-scheduler names: every pod but `p-*-1` (the second `All`
/// member, which the extender adds).
fn victims_of() -> impl Iterator<Item = usize> {
    (0..PODS).filter(|j| *j != 1)
}

fn meta_body() -> Vec<u8> {
    let m: serde_json::Map<String, Value> = (0..CANDIDATES)
        .map(|c| {
            let i = candidate(c);
            let pods: Vec<Value> = victims_of()
                .map(|j| json!({"UID": format!("{}-uid", pod_name(i, j))}))
                .collect();
            (node_name(i), json!({"Pods": pods, "NumPDBViolations": 0}))
        })
        .collect();
    serde_json::to_vec(
        &json!({"Pod": preemptor(), "NodeNameToVictims": null, "NodeNameToMetaVictims": m}),
    )
    .expect("json")
}

fn full_body() -> Vec<u8> {
    let m: serde_json::Map<String, Value> = (0..CANDIDATES)
        .map(|c| {
            let i = candidate(c);
            let pods: Vec<Value> = victims_of().map(|j| victim(i, j)).collect();
            (node_name(i), json!({"Pods": pods, "NumPDBViolations": 0}))
        })
        .collect();
    serde_json::to_vec(
        &json!({"Pod": preemptor(), "NodeNameToVictims": m, "NodeNameToMetaVictims": null}),
    )
    .expect("json")
}

/// One preempt call as the handler does it: decode, decide, encode.
fn preempt_call(cache: &ClusterIndex, body: &[u8]) -> Vec<u8> {
    preempt_bytes(cache, body).expect("a valid preemption body")
}

/// p50 and p99 (nearest rank) of 200 timed calls, in milliseconds.
fn percentiles(f: impl FnMut()) -> (f64, f64) {
    let t = time_calls(200, f);
    let ms = |p| percentile(&t, p).as_secs_f64() * 1e3;
    (ms(0.5), ms(0.99))
}

fn benches(c: &mut Criterion) {
    let cache = cluster();
    cache.set_semantics(Semantics {
        evict_all_disruption: false,
        ..Semantics::default()
    });
    let mut report = Vec::new();
    let mut g = c.benchmark_group("preempt");
    g.sample_size(50);
    for (form, body) in [("meta", meta_body()), ("full", full_body())] {
        // The answer is what the rules say: candidates whose All group
        // spans two nodes are dropped, the others gain the second member.
        let out: Value = serde_json::from_slice(&preempt_call(&cache, &body)).expect("answer");
        let kept = out["NodeNameToMetaVictims"].as_object().expect("map");
        assert_eq!(kept.len(), CANDIDATES - CANDIDATES / 10, "{form}");
        assert!(
            kept.values()
                .all(|v| v["Pods"].as_array().map(Vec::len) == Some(PODS)),
            "{form}"
        );
        g.bench_function(format!("{form}/{CANDIDATES}x{VICTIMS}"), |b| {
            b.iter(|| black_box(preempt_call(&cache, &body)))
        });
        let (p50, p99) = percentiles(|| {
            black_box(preempt_call(&cache, &body));
        });
        report.push(format!(
            "preempt {form:>4} {CANDIDATES} candidates x {VICTIMS} victims ({} KiB body): p50 {p50:.3} ms, p99 {p99:.3} ms",
            body.len() / 1024
        ));
    }
    // The default: split candidates kept, their member elsewhere to follow.
    cache.set_semantics(Semantics::default());
    let body = meta_body();
    let (answer, intents) = preempt_plan_bytes(&cache, &body).expect("a valid preemption body");
    let out: Value = serde_json::from_slice(&answer).expect("answer");
    let kept = out["NodeNameToMetaVictims"].as_object().expect("map");
    assert_eq!(kept.len(), CANDIDATES);
    assert_eq!(
        kept.values()
            .filter(|v| v["Pods"].as_array().map(Vec::len) == Some(PODS - 1))
            .count(),
        CANDIDATES / 10
    );
    assert_eq!(intents.len(), CANDIDATES / 10);
    g.bench_function(format!("meta-evicting/{CANDIDATES}x{VICTIMS}"), |b| {
        b.iter(|| black_box(preempt_plan_bytes(&cache, &body).expect("valid")))
    });
    let (p50, p99) = percentiles(|| {
        black_box(preempt_plan_bytes(&cache, &body).expect("valid"));
    });
    report.push(format!(
        "preempt meta-evicting {CANDIDATES} candidates x {VICTIMS} victims ({} KiB body): p50 {p50:.3} ms, p99 {p99:.3} ms",
        body.len() / 1024
    ));
    g.finish();
    for line in report {
        println!("{line}");
    }
}

criterion_group!(preempt, benches);
criterion_main!(preempt);
