//! Extender benchmarks: the server-side work of one kube-scheduler call
//! (decode the JSON body, resolve its nodes, decide over a cache snapshot,
//! encode the answer), as the handlers do it.
//!
//! - `filter/cache/N`, `prioritize/cache/N`: `nodeCacheCapable: true`, N node
//!   names (500, 5,000, 15,000), 10 bound pods per node.
//! - `filter+prioritize/cache/N`: both calls for one pod, the per-pod cost.
//! - `filter/full/N`, `prioritize/full/N`: full NodeList bodies (500, 1,000).
//!
//! Each call is [`filter_bytes`] / [`prioritize_bytes`], the functions the
//! handlers serve. Criterion reports the mean per call with its confidence
//! interval; the closing lines print p50/p99 (nearest rank,
//! `testkit::percentile`) over 200 timed calls per case.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use kruntimes_scheduler::cache::cluster_index::{ClusterIndex, PodEntry};
use kruntimes_scheduler::extender::gang::GangPlanner;
use kruntimes_scheduler::extender::{filter_bytes, prioritize_bytes};
use kruntimes_scheduler::testkit::{percentile, time_calls};
use serde_json::{Value, json};
use std::hint::black_box;

fn node_json(i: usize) -> Value {
    json!({"metadata": {"name": format!("node-{i:05}"), "uid": format!("uid-{i}"),
        "labels": {"kubernetes.io/hostname": format!("node-{i:05}"), "topology.kubernetes.io/zone": format!("zone-{}", i % 3), "rack": format!("rack-{}", i / 5)}},
        "spec": {},
        "status": {"capacity": {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "100Gi"},
                   "allocatable": {"cpu": "31500m", "memory": "125Gi", "pods": "110", "ephemeral-storage": "95Gi"},
                   "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// A cache with `n` nodes and 10 bound pods on each (every 7th node full on cpu).
pub fn cluster(n: usize) -> ClusterIndex {
    let cache = ClusterIndex::new();
    for i in 0..n {
        let node: k8s_openapi::api::core::v1::Node =
            serde_json::from_value(node_json(i)).expect("node");
        cache.apply_node(&node);
        for j in 0..10 {
            let cpu = if i % 7 == 0 { 3150 } else { 1000 };
            let entry = PodEntry {
                uid: format!("p-{i}-{j}"),
                node: Some(format!("node-{i:05}")),
                requests: Some(
                    [("cpu".to_owned(), cpu), ("memory".to_owned(), 4 << 30)]
                        .into_iter()
                        .collect(),
                ),
                ..PodEntry::default()
            };
            cache.apply_pod_entry(("bench".into(), format!("p-{i}-{j}")), entry);
        }
    }
    cache
}

fn pod() -> Value {
    json!({"metadata": {"name": "web-0", "namespace": "bench", "uid": "web-0-uid", "creationTimestamp": null},
        "spec": {"containers": [{"name": "c", "image": "web", "resources": {"requests": {"cpu": "2", "memory": "8Gi"}}}],
                 "schedulerName": "kruntimes-scheduler", "priority": 0},
        "status": {"phase": "Pending"}})
}

pub fn cache_body(n: usize) -> Vec<u8> {
    let names: Vec<String> = (0..n).map(|i| format!("node-{i:05}")).collect();
    serde_json::to_vec(&json!({"Pod": pod(), "Nodes": null, "NodeNames": names})).expect("json")
}

fn full_body(n: usize) -> Vec<u8> {
    let items: Vec<Value> = (0..n).map(node_json).collect();
    serde_json::to_vec(
        &json!({"Pod": pod(), "Nodes": {"metadata": {}, "items": items}, "NodeNames": null}),
    )
    .expect("json")
}

/// The extender's gang planner (no group in these pods plans anything).
static PLANNER: std::sync::LazyLock<GangPlanner> = std::sync::LazyLock::new(GangPlanner::new);

/// One filter call as the handler makes it: decode, resolve the nodes,
/// decide, encode.
fn filter_call(cache: &ClusterIndex, body: &[u8]) -> Vec<u8> {
    filter_bytes(cache, &PLANNER, body).expect("a valid extender call")
}

/// One prioritize call as the handler makes it.
fn prioritize_call(cache: &ClusterIndex, body: &[u8]) -> Vec<u8> {
    prioritize_bytes(cache, &PLANNER, body).expect("a valid extender call")
}

/// The prioritize body kube-scheduler sends after filter: the feasible names.
fn prioritize_body(names: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"Pod": pod(), "Nodes": null, "NodeNames": names})).expect("json")
}

/// p50 and p99 (nearest rank) of 200 timed calls, in milliseconds.
fn percentiles(f: impl FnMut()) -> (f64, f64) {
    let t = time_calls(200, f);
    let ms = |p| percentile(&t, p).as_secs_f64() * 1e3;
    (ms(0.5), ms(0.99))
}

fn benches(c: &mut Criterion) {
    let mut report = Vec::new();
    let mut g = c.benchmark_group("extender");
    g.sample_size(30);
    for n in [500usize, 5_000, 15_000] {
        let cache = cluster(n);
        let body = cache_body(n);
        let answer: Value = serde_json::from_slice(&filter_call(&cache, &body)).expect("answer");
        let pbody = prioritize_body(&answer["NodeNames"]);
        g.bench_with_input(BenchmarkId::new("filter/cache", n), &n, |b, _| {
            b.iter(|| black_box(filter_call(&cache, &body)))
        });
        g.bench_with_input(BenchmarkId::new("prioritize/cache", n), &n, |b, _| {
            b.iter(|| black_box(prioritize_call(&cache, &pbody)))
        });
        g.bench_with_input(
            BenchmarkId::new("filter+prioritize/cache", n),
            &n,
            |b, _| {
                b.iter(|| {
                    black_box(filter_call(&cache, &body));
                    black_box(prioritize_call(&cache, &pbody));
                })
            },
        );
        let (p50, p99) = percentiles(|| {
            black_box(filter_call(&cache, &body));
            black_box(prioritize_call(&cache, &pbody));
        });
        report.push(format!(
            "filter+prioritize cache-capable {n:>6} nodes: p50 {p50:.3} ms, p99 {p99:.3} ms"
        ));
    }
    for n in [500usize, 1_000] {
        let cache = cluster(n);
        let body = full_body(n);
        g.bench_with_input(BenchmarkId::new("filter/full", n), &n, |b, _| {
            b.iter(|| black_box(filter_call(&cache, &body)))
        });
        g.bench_with_input(BenchmarkId::new("prioritize/full", n), &n, |b, _| {
            b.iter(|| black_box(prioritize_call(&cache, &body)))
        });
        let (p50, p99) = percentiles(|| {
            black_box(filter_call(&cache, &body));
        });
        report.push(format!(
            "filter full NodeList {n:>6} nodes: p50 {p50:.3} ms, p99 {p99:.3} ms"
        ));
    }
    g.finish();
    for line in report {
        println!("{line}");
    }
}

criterion_group!(extender, benches);
criterion_main!(extender);
