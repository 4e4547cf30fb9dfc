//! Measures the cache's memory per Runtime Pod and per Run: applies 100,000
//! of each (Pods stripped as the watcher strips them) and reports the growth
//! of resident memory. Linux only (reads /proc/self/statm).
//!
//! cargo run --release --example cache_memory

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruntimes_scheduler::cache::{CacheConfig, RunCache};
use kruntimes_scheduler::cluster::watch::strip_pod;
use kruntimes_scheduler::crd::Run;
use kruntimes_scheduler::metrics::Metrics;
use kruntimes_scheduler::runs::queue::WorkQueue;
use serde_json::json;
use std::sync::Arc;

const N: usize = 100_000;

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    let now = Timestamp::now();
    let stamp = kruntimes_scheduler::cluster::standalone::kube_time(now);
    let queue = Arc::new(WorkQueue::default());
    let cache = RunCache::new(
        CacheConfig::default(),
        Arc::clone(&queue),
        Arc::new(Metrics::default()),
    );
    let before = rss_bytes();
    for i in 0..N {
        // A realistic Pod as the API server sends it; the watcher strips it.
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("runtime-python-{i:06}"), "namespace": format!("team-{}", i % 50),
                "uid": format!("6f1c2a3e-0000-4000-8000-{i:012}"), "resourceVersion": "12345678",
                "labels": {"runtime": "python", "app": "runtimed", "pod-template-hash": "5d8c9f7b6"},
                "annotations": {"kruntimes.io/capacity.runs": "8", "kruntimes.io/capacity.gpu": "2",
                    "kruntimes.io/capacity.mem": "64Gi", "kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"},
                "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1"}]},
            "spec": {"containers": [{"name": "runtimed", "image": "kruntimes/runtimed:1.0",
                "env": [{"name": "A", "value": "B"}], "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": [
                {"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"},
                {"type": "kruntimes.io/RuntimedReady", "status": "True", "lastProbeTime": stamp}]}
        }))
        .expect("valid pod");
        cache.apply_pod(&strip_pod(pod, "runtime"), now);
    }
    let after_pods = rss_bytes();
    for i in 0..N {
        let run: Run = serde_json::from_value(json!({
            "apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
            "metadata": {"name": format!("run-{i:06}"), "namespace": format!("team-{}", i % 50),
                "uid": format!("7a2b3c4d-0000-4000-8000-{i:012}"), "resourceVersion": "23456789", "generation": 1},
            "spec": {"runtime": "python", "resources": {"requests": {"runs": "1", "gpu": "1"}}},
            "status": {"phase": "Running", "assignedPod": format!("runtime-python-{:06}", i % N),
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
    println!("pods: {N}, runs: {N}");
    println!(
        "memory per cached Runtime Pod: {} bytes",
        (after_pods - before) / N
    );
    println!(
        "memory per cached Run:         {} bytes",
        (after_runs - after_pods) / N
    );
}
