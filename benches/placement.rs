//! Placement benchmarks.
//!
//! - `plan/N`: one Run planned against N Runtime Pods (4 declared resources
//!   each, half of them busy), the work behind `POST /v1/runs/plan`.
//! - `decide/N`: the scheduling decision of one cycle (filter, score, pick,
//!   reserve) followed by releasing the reservation.
//! - `loop/runs_bound`: the standalone scheduling loop binding 2,000 Runs on
//!   200 Runtime Pods, status writes included; Runs/s = 2000 / time.
//! - `affinity/plan/10000` and `affinity/decide/10000`: the same for a Run
//!   with required and preferred affinity and anti-affinity terms (`In`,
//!   `NotIn`, `Exists`, `DoesNotExist`, `matchLabels`) over 10,000 Runtime
//!   Pods holding 20,000 active Runs of 200 cohorts; plan at the default
//!   limit, as `POST /v1/runs/plan` answers.
//! - `plan_http/N`: `POST /v1/runs/plan` through the real router (JSON in,
//!   the answer rendered); `plan_http/affinity/10000` with the affinity
//!   benches' Run and active Runs.
//! - `affinity/plan-unrequired/10000`: the same Run without its required
//!   affinity term (preferred terms and required anti-affinity only), so
//!   nothing narrows the candidates to a cohort.

mod common;

use common::{add_affinity_runs, affinity_cache, bench_affinity, run, runtime_pod, runtime_pods};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;
use kruntimes_scheduler::cache::{CacheConfig, Decision};
use kruntimes_scheduler::model::resources::effective_requests;
use kruntimes_scheduler::runs::queue::RunKey;
use kruntimes_scheduler::serve::standalone;
use serde_json::json;
use std::hint::black_box;
use std::time::{Duration, Instant};

fn plan(c: &mut Criterion) {
    let now = Timestamp::now();
    let req = effective_requests(Some(
        &[("runs", "1"), ("gpu", "1"), ("mem", "4Gi")]
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect(),
    ))
    .unwrap();
    let mut g = c.benchmark_group("plan");
    for n in [100usize, 1_000, 10_000] {
        let cache = runtime_pods(n, now);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                black_box(cache.plan_with("bench", "py", &req, now, |o| o.selected().is_some()))
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("decide");
    for n in [100usize, 1_000, 10_000] {
        let cache = runtime_pods(n, now);
        cache.apply_run(&run(
            "r",
            &[("runs", "1"), ("gpu", "1"), ("mem", "4Gi")],
            None,
        ));
        let key = RunKey::new("bench", "r");
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| match cache.schedule_one(&key, now) {
                Decision::Reserved { uid, pod, .. } => {
                    black_box(cache.release("bench", &uid, &pod))
                }
                other => panic!("expected a reservation: {other:?}"),
            })
        });
    }
    g.finish();
}

fn affinity(c: &mut Criterion) {
    const PODS: usize = 10_000;
    const RUNS: usize = 20_000;
    let now = Timestamp::now();
    let cache = affinity_cache(PODS, RUNS, now);
    let aff: kruntimes_scheduler::crd::RunAffinity =
        serde_json::from_value(bench_affinity()).unwrap();
    let own: std::collections::BTreeMap<String, String> =
        [("cohort".to_owned(), "c-7".to_owned())].into();
    let requests = [("runs", "1"), ("gpu", "1"), ("mem", "4Gi")];
    let req = effective_requests(Some(
        &requests
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect(),
    ))
    .unwrap();
    let mut g = c.benchmark_group("affinity");
    g.throughput(Throughput::Elements(PODS as u64));
    // Without the required term nothing narrows the candidates: every
    // feasible pod is filtered by the anti-affinity and ranked, as upstream
    // ranks them.
    let mut open = aff.clone();
    if let Some(a) = open.run_affinity.as_mut() {
        a.required_during_scheduling_ignored_during_execution
            .clear();
    }
    for (name, terms) in [("plan", &aff), ("plan-unrequired", &open)] {
        g.bench_function(BenchmarkId::new(name, PODS), |b| {
            b.iter(|| {
                let p = cache
                    .plan_top_for(
                        "bench",
                        "py",
                        &req,
                        Some(terms),
                        &own,
                        now,
                        kruntimes_scheduler::cache::DEFAULT_PLAN_LIMIT,
                    )
                    .unwrap();
                assert!(p.selected().is_some());
                black_box(p)
            })
        });
    }
    let mut r = kruntimes_scheduler::testkit::run("r", &requests)
        .namespace("bench")
        .label("cohort", "c-7")
        .set(&["spec", "affinity"], bench_affinity());
    r = r.set(&["metadata", "uid"], "uid-r");
    cache.apply_run(&r.typed());
    let key = RunKey::new("bench", "r");
    g.bench_function(BenchmarkId::new("decide", PODS), |b| {
        b.iter(|| match cache.schedule_one(&key, now) {
            Decision::Reserved { uid, pod, .. } => black_box(cache.release("bench", &uid, &pod)),
            other => panic!("expected a reservation: {other:?}"),
        })
    });
    g.finish();
}

fn scheduling_loop(c: &mut Criterion) {
    const PODS: usize = 200;
    const RUNS: usize = 2_000;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("loop");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .throughput(Throughput::Elements(RUNS as u64));
    g.bench_function("runs_bound", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let now = kruntimes_scheduler::cluster::standalone::kube_time(Timestamp::now());
                let mut objects = Vec::new();
                for i in 0..PODS {
                    objects.push(json!({"kind": "Pod", "apiVersion": "v1",
                        "metadata": {"name": format!("rp-{i}"), "namespace": "bench", "labels": {"runtime": "py"},
                            "annotations": {"kruntimes.io/capacity.runs": "16", "kruntimes.io/capacity.gpu": "4"}},
                        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"},
                            {"type": "kruntimes.io/RuntimedReady", "status": "True", "lastProbeTime": now}]}}));
                }
                for i in 0..RUNS {
                    let gpu = if i % 4 == 0 { "1" } else { "0" };
                    objects.push(json!({"kind": "Run", "apiVersion": "kruntimes.io/v1alpha1",
                        "metadata": {"name": format!("run-{i}"), "namespace": "bench"},
                        "spec": {"runtime": "py", "resources": {"requests": {"runs": "1", "gpu": gpu}}}}));
                }
                let app = standalone(CacheConfig::default(), objects).unwrap();
                let start = Instant::now();
                let n = rt.block_on(app.controller.drain());
                total += start.elapsed();
                assert!(n >= RUNS);
                assert_eq!(app.state.runs.cache.runs(Some("bench")).iter().filter(|r| r.phase.as_deref() == Some("Scheduled")).count(), RUNS);
            }
            total
        })
    });
    g.finish();
}

/// `POST /v1/runs/plan` through the real router: JSON in, every feasible pod
/// rendered with its exact utilizations, JSON out.
fn plan_http(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let body = json!({"metadata": {"name": "r", "namespace": "bench"},
        "spec": {"runtime": "py", "resources": {"requests": {"runs": "1", "gpu": "1", "mem": "4Gi"}}}})
    .to_string();
    let mut g = c.benchmark_group("plan_http");
    for n in [100usize, 1_000, 10_000] {
        let now = Timestamp::now();
        let app = standalone_pods(n, now);
        let router = kruntimes_scheduler::http::router(app.state.clone());
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| black_box(post_plan(&rt, &router, &body)))
        });
    }
    // With affinity terms, over the affinity benches' 20,000 active Runs.
    const PODS: usize = 10_000;
    let now = Timestamp::now();
    let app = standalone_pods(PODS, now);
    add_affinity_runs(&app.state.runs.cache, PODS, 20_000);
    let body = json!({"metadata": {"name": "r", "namespace": "bench", "labels": {"cohort": "c-7"}},
        "spec": {"runtime": "py", "resources": {"requests": {"runs": "1", "gpu": "1", "mem": "4Gi"}},
            "affinity": bench_affinity()}})
    .to_string();
    let router = kruntimes_scheduler::http::router(app.state.clone());
    g.throughput(Throughput::Elements(PODS as u64));
    g.bench_function(BenchmarkId::new("affinity", PODS), |b| {
        b.iter(|| black_box(post_plan(&rt, &router, &body)))
    });
    g.finish();
}

/// A standalone service whose Run cache holds [`runtime_pod`]`(0..n)`,
/// every other one busy, as [`runtime_pods`] builds a bare cache.
fn standalone_pods(n: usize, now: Timestamp) -> kruntimes_scheduler::serve::Standalone {
    let app = standalone(CacheConfig::default(), Vec::new()).unwrap();
    for i in 0..n {
        app.state.runs.cache.apply_pod(&runtime_pod(i, now), now);
        if i % 2 == 0 {
            let busy = [("runs", "3"), ("gpu", "2"), ("mem", "16Gi"), ("slots", "5")];
            app.state.runs.cache.apply_run(&run(
                &format!("busy-{i}"),
                &busy,
                Some(&format!("rp-{i:05}")),
            ));
        }
    }
    app
}

/// One `POST /v1/runs/plan` through the router; the answer's length.
fn post_plan(rt: &tokio::runtime::Runtime, router: &axum::Router, body: &str) -> usize {
    use tower::ServiceExt;
    let req = axum::http::Request::post("/v1/runs/plan")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_owned()))
        .unwrap();
    rt.block_on(async {
        let resp = router.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap()
            .len()
    })
}

criterion_group!(benches, plan, affinity, plan_http, scheduling_loop);
criterion_main!(benches);
