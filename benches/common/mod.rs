//! The Runtime Pod cluster the placement and scale benches plan over, built
//! from the test kit's fixtures.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruntimes_scheduler::cache::{CacheConfig, RunCache};
use kruntimes_scheduler::crd::Run;
use kruntimes_scheduler::metrics::Metrics;
use kruntimes_scheduler::runs::queue::WorkQueue;
use kruntimes_scheduler::testkit;
use std::sync::Arc;

/// Runtime Pod `bench/rp-<i>` of runtime `py` declaring runs 8, gpu 4,
/// mem 64Gi, slots 16, with a heartbeat at `now`.
pub fn runtime_pod(i: usize, now: Timestamp) -> Pod {
    let caps = [
        ("runs", "8"),
        ("gpu", "4"),
        ("mem", "64Gi"),
        ("slots", "16"),
    ];
    testkit::runtime_pod(&format!("rp-{i:05}"), &caps, &now.to_string())
        .namespace("bench")
        .uid(&format!("uid-{i}"))
        .typed()
}

/// Run `bench/<name>` of runtime `py`, Running on `assigned` if given.
pub fn run(name: &str, requests: &[(&str, &str)], assigned: Option<&str>) -> Run {
    let r = testkit::run(name, requests).namespace("bench");
    match assigned {
        Some(p) => r.status("Running", Some(p)).typed(),
        None => r.typed(),
    }
}

/// N Runtime Pods × 4 resources; every other pod runs a Run using part of
/// each. The work queue is drained.
pub fn runtime_pods(n: usize, now: Timestamp) -> RunCache {
    let cache = RunCache::new(
        CacheConfig::default(),
        Arc::new(WorkQueue::default()),
        Arc::new(Metrics::default()),
    );
    for i in 0..n {
        cache.apply_pod(&runtime_pod(i, now), now);
        if i % 2 == 0 {
            let pod = format!("rp-{i:05}");
            let busy = [("runs", "3"), ("gpu", "2"), ("mem", "16Gi"), ("slots", "5")];
            cache.apply_run(&run(&format!("busy-{i}"), &busy, Some(&pod)));
        }
    }
    while let Some(k) = cache.queue().try_next() {
        cache.queue().done(&k);
    }
    cache
}

/// `nodes` Nodes `node-<i>` of 32 cpu / 128Gi in racks of `per_rack`
/// (`topology.kubernetes.io/rack`) across three zones, with some cpu load
/// everywhere (4 cpu) and more (16 cpu) on every third rack: the cluster
/// the gang and explain benches place groups on.
pub fn racked_cluster(
    nodes: usize,
    per_rack: usize,
) -> kruntimes_scheduler::cache::cluster_index::ClusterIndex {
    use kruntimes_scheduler::cache::cluster_index::{ClusterIndex, PodEntry};
    let cache = ClusterIndex::new();
    for i in 0..nodes {
        let name = format!("node-{i:05}");
        let n = testkit::node(&name)
            .allocatable("32", "128Gi")
            .label("kubernetes.io/hostname", &name)
            .label("topology.kubernetes.io/zone", &format!("zone-{}", i % 3))
            .label(
                "topology.kubernetes.io/rack",
                &format!("rack-{:04}", i / per_rack),
            );
        cache.apply_node(&n.typed());
        let cpu = if (i / per_rack).is_multiple_of(3) {
            16_000
        } else {
            4_000
        };
        cache.apply_pod_entry(
            ("bench".into(), format!("load-{i}")),
            PodEntry {
                uid: format!("load-{i}"),
                node: Some(name),
                requests: Some([("cpu".to_owned(), cpu)].into_iter().collect()),
                ..PodEntry::default()
            },
        );
    }
    cache
}

/// Cohorts of the affinity benches' active Runs (`cohort: c-<i>`).
pub const COHORTS: usize = 200;

/// The affinity benches' labels of active Run `j`: one of
/// [`COHORTS`] cohorts, a tier, a team on every third Run, a `spot` marker on
/// every tenth.
pub fn affinity_labels(j: usize) -> Vec<(String, String)> {
    let mut l = vec![
        ("cohort".to_owned(), format!("c-{}", j % COHORTS)),
        ("tier".to_owned(), ["web", "batch", "ml"][j % 3].to_owned()),
    ];
    if j.is_multiple_of(3) {
        l.push(("team".to_owned(), format!("t-{}", j % 17)));
    }
    if j.is_multiple_of(10) {
        l.push(("spot".to_owned(), "true".to_owned()));
    }
    l
}

/// The pod active Run `j` of `runs` is on, out of `pods`: spread so a
/// cohort's Runs land on different pods.
pub fn affinity_pod(j: usize, pods: usize) -> usize {
    (j * 7919) % pods
}

/// The affinity of the benched Run, as JSON: required affinity to cohort
/// `c-7` (`In`), required anti-affinity to `spot` Runs (`Exists`),
/// preferred affinity to team Runs of tier `ml` (`matchLabels` + `Exists`),
/// preferred anti-affinity to other cohorts' batch Runs (`NotIn`), and a
/// preferred term for Runs without a team (`DoesNotExist`).
pub fn bench_affinity() -> serde_json::Value {
    let term = |sel: serde_json::Value| serde_json::json!({"topologyKey": "kruntimes.io/runtime-pod", "labelSelector": sel});
    serde_json::json!({
        "runAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                term(serde_json::json!({"matchExpressions": [{"key": "cohort", "operator": "In", "values": ["c-7"]}]}))
            ],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 50, "runAffinityTerm": term(serde_json::json!({"matchLabels": {"tier": "ml"},
                    "matchExpressions": [{"key": "team", "operator": "Exists"}]}))},
                {"weight": 10, "runAffinityTerm": term(serde_json::json!({
                    "matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}))}
            ]
        },
        "runAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                term(serde_json::json!({"matchExpressions": [{"key": "spot", "operator": "Exists"}]}))
            ],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 30, "runAffinityTerm": term(serde_json::json!({"matchLabels": {"tier": "batch"},
                    "matchExpressions": [{"key": "cohort", "operator": "NotIn", "values": ["c-7", "c-8"]}]}))}
            ]
        }
    })
}

/// [`runtime_pods`]`(pods)` plus `runs` active Runs labelled by
/// [`affinity_labels`], each Running on [`affinity_pod`] with one `runs`.
pub fn affinity_cache(pods: usize, runs: usize, now: Timestamp) -> RunCache {
    let cache = runtime_pods(pods, now);
    add_affinity_runs(&cache, pods, runs);
    cache
}

/// The active Runs of [`affinity_cache`], added to `cache` (whose
/// Runtime Pods are [`runtime_pod`]`(0..pods)`).
pub fn add_affinity_runs(cache: &RunCache, pods: usize, runs: usize) {
    for j in 0..runs {
        let pod = format!("rp-{:05}", affinity_pod(j, pods));
        let mut r = testkit::run(&format!("a-{j}"), &[("runs", "1")])
            .namespace("bench")
            .status("Running", Some(&pod));
        for (k, v) in affinity_labels(j) {
            r = r.label(&k, &v);
        }
        cache.apply_run(&r.typed());
    }
    while let Some(k) = cache.queue().try_next() {
        cache.queue().done(&k);
    }
}
