//! Where cluster mode's memory goes: applies Nodes, then Pods (as the Pod
//! watcher hands them to both caches, [`Pods`]), then Runs, and reports
//! the growth of resident memory per object at each step, split into the
//! Run cache and the cluster index. Linux only (reads /proc/self/statm).
//!
//! cargo run --release --example cache_memory [--no-default-features] [-- PODS NODES]
//!
//! Defaults: 100,000 Runtime Pods on 10,000 Nodes, 100,000 Runs. Objects
//! are built, applied and dropped one at a time, so the growth is what the
//! caches keep (plus the allocator's overhead and fragmentation), not the
//! objects in flight.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kruntimes_scheduler::cache::cluster_index::ClusterIndex;
use kruntimes_scheduler::cache::index::{Index, Indexes};
use kruntimes_scheduler::cache::{CacheConfig, RunCache};
use kruntimes_scheduler::crd::Run;
use kruntimes_scheduler::metrics::Metrics;
use kruntimes_scheduler::runs::queue::WorkQueue;
use serde_json::json;
use std::sync::Arc;

/// The binary's allocator (mimalloc, the default feature); the system
/// allocator with `--no-default-features`.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// A realistic Runtime Pod as the API server sends it.
fn pod(i: usize, nodes: usize, stamp: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("runtime-python-{i:06}"), "namespace": format!("team-{}", i % 50),
            "uid": format!("6f1c2a3e-0000-4000-8000-{i:012}"), "resourceVersion": "12345678",
            "labels": {"runtime": "python", "app": "runtimed", "pod-template-hash": "5d8c9f7b6"},
            "annotations": {"kruntimes.io/capacity.runs": "8", "kruntimes.io/capacity.gpu": "2",
                "kruntimes.io/capacity.mem": "64Gi", "kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"},
            "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1"}]},
        "spec": {"nodeName": format!("node-{:05}", i % nodes.max(1)),
            "containers": [{"name": "runtimed", "image": "kruntimes/runtimed:1.0",
            "env": [{"name": "A", "value": "B"}], "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
        "status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": [
            {"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"},
            {"type": "kruntimes.io/RuntimedReady", "status": "True", "lastProbeTime": stamp}]}
    }))
    .expect("valid pod")
}

fn node(i: usize) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": format!("node-{i:05}"), "uid": format!("5e0b1a2d-0000-4000-8000-{i:012}"),
            "labels": {"kubernetes.io/hostname": format!("node-{i:05}"), "topology.kubernetes.io/zone": "z1"}},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110", "ephemeral-storage": "100Gi"},
            "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"}}
    }))
    .expect("valid node")
}

fn per(bytes: usize, n: usize) -> String {
    format!("{} bytes", bytes.checked_div(n).unwrap_or(0))
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let pods = args.next().and_then(Result::ok).unwrap_or(100_000);
    let nodes = args.next().and_then(Result::ok).unwrap_or(10_000);
    let now = Timestamp::now();
    let stamp = kruntimes_scheduler::cluster::standalone::kube_time(now);
    let queue = Arc::new(WorkQueue::default());
    let cache = Arc::new(RunCache::new(
        CacheConfig {
            heartbeat_stale_after: std::time::Duration::from_secs(3600),
            ..CacheConfig::default()
        },
        Arc::clone(&queue),
        Arc::new(Metrics::default()),
    ));
    let index = Arc::new(ClusterIndex::new());
    let ix = Indexes::new(Arc::clone(&cache), Arc::clone(&index));

    let start = rss_bytes();
    for i in 0..nodes {
        index.apply_node(&node(i));
    }
    let after_nodes = rss_bytes();
    // The Run cache alone, then the cluster index alone, then both as the
    // Pod watcher feeds them (the same pods again: no growth expected).
    for i in 0..pods {
        cache.apply_pod(&pod(i, nodes, &stamp), now);
    }
    let after_run_cache = rss_bytes();
    for i in 0..pods {
        Index::<Pod>::apply(&*index, pod(i, nodes, &stamp));
    }
    let after_index = rss_bytes();
    for i in 0..pods {
        Index::<Pod>::apply(&*ix.pods, pod(i, nodes, &stamp));
    }
    let after_both = rss_bytes();
    for i in 0..pods {
        let run: Run = serde_json::from_value(json!({
            "apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
            "metadata": {"name": format!("run-{i:06}"), "namespace": format!("team-{}", i % 50),
                "uid": format!("7a2b3c4d-0000-4000-8000-{i:012}"), "resourceVersion": "23456789", "generation": 1},
            "spec": {"runtime": "python", "resources": {"requests": {"runs": "1", "gpu": "1"}}},
            "status": {"phase": "Running", "assignedPod": format!("runtime-python-{:06}", i % pods.max(1)),
                "assignedPodUID": "6f1c2a3e-0000-4000-8000-000000000000", "message": "assigned to Runtime Pod",
                "conditions": [{"type": "Scheduled", "status": "True", "reason": "Scheduled",
                    "message": "assigned to Runtime Pod", "lastTransitionTime": stamp}]}
        }))
        .expect("valid run");
        cache.apply_run(&run);
    }
    let after_runs = rss_bytes();
    while let Some(k) = queue.try_next() {
        queue.done(&k);
    }
    cache.check_invariants().expect("consistent");
    println!("nodes: {nodes}, Runtime Pods: {pods}, Runs: {pods}");
    println!(
        "per Node (cluster index):         {}",
        per(after_nodes - start, nodes)
    );
    println!(
        "per Runtime Pod, Run cache:       {}",
        per(after_run_cache - after_nodes, pods)
    );
    println!(
        "per Pod, cluster index:           {}",
        per(after_index - after_run_cache, pods)
    );
    println!(
        "per Pod, both again (re-applied): {}",
        per(after_both.saturating_sub(after_index), pods)
    );
    println!(
        "per Run, Run cache:               {}",
        per(after_runs - after_both, pods)
    );
    println!(
        "total resident growth:            {} MiB",
        (after_runs - start) / (1 << 20)
    );
}
