//! Gang placement with rack topology on 5,000 nodes in 1,000 racks.
//!
//! One iteration places a whole gang (3 or 64 pods) the way kube-scheduler
//! drives the extender: for each member, filter with all 5,000 node names
//! (decode, decide, encode), prioritize the nodes that passed, assume the
//! best one, and evaluate the gang's quorum as bind does. The first
//! member's filter chooses the gang's rack by simulating it in every rack.
//!
//! - `gang/N/place`: the whole path, per group (divide by N per member).
//! - `gang/N/decisions`: only the group logic (gate, preference, quorum),
//!   without the 5,000-name filter loop that every pod pays.
//! - `gang/composite-4x16/decisions`: the same for a CompositePodGroup by
//!   zone over four gangs of 16 by rack (64 members): every member after
//!   the first is filtered while the unit gathers, so it also pays the
//!   check that a unit held in a domain can still complete there.
//!
//! A fresh PodGroup is used per iteration (the previous one's pods are
//! forgotten and deleted outside the timed part), so every iteration plans
//! from scratch.

mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use kruntimes_scheduler::cache::cluster_index::ClusterIndex;
use kruntimes_scheduler::extender::types::ExtenderArgs;
use kruntimes_scheduler::extender::{Candidates, decide_filter, decide_prioritize, gang};
use kruntimes_scheduler::testkit::{composite, pod, pod_group};
use serde_json::json;
use std::hint::black_box;
use std::time::{Duration, Instant};

const NODES: usize = 5_000;
const PER_RACK: usize = 5;

fn cluster() -> ClusterIndex {
    common::racked_cluster(NODES, PER_RACK)
}

/// The extender's gang planner (plans outlive a call, as in the server).
static PLANNER: std::sync::LazyLock<gang::GangPlanner> =
    std::sync::LazyLock::new(gang::GangPlanner::new);

fn member(group: &str, i: usize) -> Pod {
    pod(&format!("{group}-{i}"))
        .namespace("bench")
        .uid(&format!("{group}-{i}-uid"))
        .group(group)
        .requests(&[("cpu", "2"), ("memory", "4Gi")])
        .typed()
}

fn setup(cache: &ClusterIndex, group: &str, n: usize) -> Vec<Pod> {
    let g = pod_group(group)
        .namespace("bench")
        .gang(n as u32)
        .topology("topology.kubernetes.io/rack");
    cache.apply_pod_group(&g.typed());
    let pods: Vec<Pod> = (0..n).map(|i| member(group, i)).collect();
    for p in &pods {
        cache.apply_pod(p);
    }
    pods
}

/// A CompositePodGroup `name` by zone (all `children` needed) over
/// `children` gangs of `per` by rack; returns the pods, child by child.
fn setup_composite(cache: &ClusterIndex, name: &str, children: usize, per: usize) -> Vec<Pod> {
    let c = composite(name)
        .namespace("bench")
        .gang(children as u32)
        .topology("topology.kubernetes.io/zone");
    cache.apply_composite(&c.typed());
    let mut pods = Vec::new();
    for k in 0..children {
        let group = format!("{name}-{k}");
        let g = pod_group(&group)
            .namespace("bench")
            .gang(per as u32)
            .topology("topology.kubernetes.io/rack")
            .parent(name);
        cache.apply_pod_group(&g.typed());
        for i in 0..per {
            let p = member(&group, i);
            cache.apply_pod(&p);
            pods.push(p);
        }
    }
    pods
}

fn teardown_composite(cache: &ClusterIndex, name: &str, children: usize, pods: &[Pod]) {
    for k in 0..children {
        let group = format!("{name}-{k}");
        let mine: Vec<Pod> = pods
            .iter()
            .filter(|p| gang::group_of(p).is_some_and(|(_, g)| g == group))
            .cloned()
            .collect();
        teardown(cache, &group, &mine);
    }
    cache.delete_composite("bench", name);
}

fn teardown(cache: &ClusterIndex, group: &str, pods: &[Pod]) {
    for p in pods {
        let name = p.metadata.name.as_deref().unwrap_or_default();
        cache.forget("bench", name);
        cache.delete_pod("bench", name);
    }
    cache.delete_pod_group("bench", group);
}

fn body(pod: &Pod, names: &[String]) -> Vec<u8> {
    serde_json::to_vec(&json!({"Pod": pod, "Nodes": null, "NodeNames": names})).expect("json")
}

/// Places one gang through the whole path; returns the racks used.
fn place(cache: &ClusterIndex, pods: &[Pod], names: &[String]) -> usize {
    let mut racks = std::collections::BTreeSet::new();
    for p in pods {
        let b = body(p, names);
        let args: ExtenderArgs<'_> = serde_json::from_slice(&b).expect("args");
        let passed: Vec<String> = {
            let snap = cache.read();
            let candidates = Candidates::of(&snap, &args).expect("nodes");
            let out = decide_filter(&snap, &PLANNER, &args, &candidates, false);
            let mut encoded = Vec::new();
            out.write_json(&mut encoded);
            black_box(&encoded);
            assert!(
                out.node_names.as_ref().is_some_and(|n| !n.is_empty()),
                "member placed: {:?}",
                out.failed_and_unresolvable_nodes.0.first()
            );
            out.node_names
                .unwrap_or_default()
                .into_iter()
                .map(str::to_owned)
                .collect()
        };
        let pb = body(p, &passed);
        let pargs: ExtenderArgs<'_> = serde_json::from_slice(&pb).expect("args");
        let snap = cache.read();
        let pcandidates = Candidates::of(&snap, &pargs).expect("nodes");
        let scores = decide_prioritize(&snap, &PLANNER, &pargs, &pcandidates);
        let best = scores
            .iter()
            .max_by_key(|h| (h.score, std::cmp::Reverse(h.host.clone())))
            .map(|h| h.host.to_string())
            .expect("a node");
        drop(scores);
        drop(snap);
        let name = p.metadata.name.as_deref().unwrap_or_default();
        cache.assume("bench", name, "", &best);
        settle(cache, name);
        let index: usize = best
            .trim_start_matches("node-")
            .parse()
            .expect("node number");
        racks.insert(index / PER_RACK);
    }
    racks.len()
}

/// Only the group logic per member: gate, preference, assume, quorum.
fn decisions(cache: &ClusterIndex, pods: &[Pod], names: &[&str]) {
    for p in pods {
        let req = kruntimes_scheduler::pods::fit::pod_requests(p.spec.as_ref().expect("spec"))
            .expect("requests");
        let (node, _) = {
            let snap = cache.read();
            let gate =
                gang::filter_gate(&snap, &PLANNER, p, &req, names, tokio::time::Instant::now());
            assert!(gate.wide.is_none());
            let prefer = gang::prefer(&snap, &PLANNER, p, &req).expect("a domain");
            let domain = gate.domain();
            let (_, value) = domain.last().expect("rack");
            let ix = snap.domain_index("topology.kubernetes.io/rack");
            let best = ix
                .nodes(value)
                .iter()
                .filter(|n| gate.node(n).is_none())
                .max_by_key(|n| prefer.score(n))
                .cloned()
                .expect("node");
            (best, ())
        };
        let name = p.metadata.name.as_deref().unwrap_or_default();
        cache.assume("bench", name, "", &node);
        settle(cache, name);
    }
}

/// What bind's hold does after the assumption: evaluate the unit's quorum,
/// and once reached drop the group's plan.
fn settle(cache: &ClusterIndex, name: &str) {
    let snap = cache.read();
    if let Ok(Some(q)) = gang::quorum(&snap, "bench", name)
        && q.reached
    {
        gang::drop_plans(
            &PLANNER,
            &gang::tree_of(&snap, &q.unit),
            tokio::time::Instant::now(),
        );
    }
}

fn bench(c: &mut Criterion) {
    let cache = cluster();
    let names: Vec<String> = (0..NODES).map(|i| format!("node-{i:05}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut seq = 0usize;
    let mut group = c.benchmark_group("gang");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(8));
    for n in [3usize, 64] {
        group.bench_function(format!("{n}/place"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    seq += 1;
                    let g = format!("g{seq}");
                    let pods = setup(&cache, &g, n);
                    let start = Instant::now();
                    let racks = place(&cache, &pods, &names);
                    total += start.elapsed();
                    assert_eq!(racks, 1, "one rack per gang");
                    teardown(&cache, &g, &pods);
                }
                total
            })
        });
        group.bench_function(format!("{n}/decisions"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    seq += 1;
                    let g = format!("g{seq}");
                    let pods = setup(&cache, &g, n);
                    let start = Instant::now();
                    decisions(&cache, &pods, &refs);
                    total += start.elapsed();
                    teardown(&cache, &g, &pods);
                }
                total
            })
        });
    }
    let (children, per) = (4usize, 16usize);
    group.bench_function(format!("composite-{children}x{per}/decisions"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                seq += 1;
                let c = format!("c{seq}");
                let pods = setup_composite(&cache, &c, children, per);
                let start = Instant::now();
                decisions(&cache, &pods, &refs);
                total += start.elapsed();
                teardown_composite(&cache, &c, children, &pods);
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
