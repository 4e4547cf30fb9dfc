//! Runs bound per second in cluster mode, against the test API server over
//! loopback HTTP: watch delivery, decision, reservation, status patch with
//! resourceVersion precondition, and the watch handing the reservation over.

#[path = "../tests/it/apiserver/mod.rs"]
mod apiserver;

use apiserver::{FakeApi, Res};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::jiff::Timestamp;
use kruntimes_scheduler::cache::CacheConfig;
use kruntimes_scheduler::cluster::standalone::kube_time;
use kruntimes_scheduler::serve::cluster;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

const PODS: usize = 50;
const RUNS: usize = 1_000;

fn bind(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("cluster");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(30))
        .throughput(Throughput::Elements(RUNS as u64));
    g.bench_function("runs_bound_via_api", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                total += rt.block_on(async {
                    let api = FakeApi::start().await;
                    for i in 0..PODS {
                        api.put(Res::Pods, json!({"metadata": {"name": format!("rp-{i}"), "namespace": "ns",
                            "labels": {"runtime": "py"}, "annotations": {"kruntimes.io/capacity.runs": "40"}},
                            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"},
                                {"type": "kruntimes.io/RuntimedReady", "status": "True",
                                 "lastProbeTime": kube_time(Timestamp::now())}]}}));
                    }
                    let cfg = CacheConfig { heartbeat_stale_after: Duration::from_secs(3600), ..CacheConfig::default() };
                    let c = cluster(cfg, api.client(), "bench").await;
                    while !c.state.runs.cache.is_synced() {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    let task = tokio::spawn(Arc::clone(&c.controller).run(4, Duration::from_secs(3600)));
                    let start = Instant::now();
                    for i in 0..RUNS {
                        api.put(Res::Runs, json!({"metadata": {"name": format!("run-{i}"), "namespace": "ns"},
                            "spec": {"runtime": "py"}}));
                    }
                    loop {
                        let bound = api.inner.lock().status_writes.iter().filter(|(_, s)| s["phase"] == "Scheduled").count();
                        if bound >= RUNS {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    let took = start.elapsed();
                    task.abort();
                    for w in c.watchers {
                        w.abort();
                    }
                    took
                });
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, bind);
criterion_main!(benches);
