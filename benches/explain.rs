//! `GET /v1/explain/pod` at 5,000 nodes in 1,000 racks: the explanation of
//! one pending gang member (the filter over every cached node on a scratch
//! planner, reasons grouped with examples, the group chain and quorum, and
//! every rack's trial), and of a plain pod with a fit shortfall.
//!
//! - `explain/gang-64`: a member of a 64-pod gang with rack topology that
//!   no plan exists for yet (every iteration plans afresh in its copy).
//! - `explain/plain`: a pod that fits nowhere (per-node fit reasons).

mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use kruntimes_scheduler::cache::cluster_index::ClusterIndex;
use kruntimes_scheduler::explain::pod::explain;
use kruntimes_scheduler::extender::gang::GangPlanner;
use kruntimes_scheduler::testkit::{pod, pod_group};
use std::hint::black_box;
use std::time::Duration;

const NODES: usize = 5_000;
const PER_RACK: usize = 5;

fn cluster() -> ClusterIndex {
    common::racked_cluster(NODES, PER_RACK)
}

fn bench(c: &mut Criterion) {
    let cache = cluster();
    // A gang of 64 × 8 cpu: a rack of 5 nodes holds at most 15-20 of them,
    // so no rack holds it: every rack is tried and reported.
    cache.apply_pod_group(
        &pod_group("g")
            .gang(64)
            .topology("topology.kubernetes.io/rack")
            .typed(),
    );
    let members: Vec<Pod> = (0..64)
        .map(|i| {
            pod(&format!("g-{i}"))
                .group("g")
                .requests(&[("cpu", "8")])
                .typed()
        })
        .collect();
    for p in &members {
        cache.apply_pod(p);
    }
    let plain: Pod = pod("big").requests(&[("cpu", "30")]).typed();
    cache.apply_pod(&plain);
    let planner = GangPlanner::new();
    let snap = cache.read();
    let v = explain(&snap, &planner, &members[0], 5, 20);
    assert!(v.group.is_some() && planner.is_empty(), "{}", v.summary);
    let mut group = c.benchmark_group("explain");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(5));
    group.bench_function("gang-64", |b| {
        b.iter(|| black_box(explain(&snap, &planner, &members[0], 5, 20)))
    });
    group.bench_function("plain", |b| {
        b.iter(|| black_box(explain(&snap, &planner, &plain, 5, 20)))
    });
    group.finish();
    println!("gang-64 summary: {}", v.summary);
    println!(
        "plain summary: {}",
        explain(&snap, &planner, &plain, 5, 20).summary
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
