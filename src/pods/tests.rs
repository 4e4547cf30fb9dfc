//! Table tests for node fit.

use super::fit::*;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::api::resource::v1::NodeAllocatableResource;
use serde_json::{Value, json};

fn spec(v: Value) -> PodSpec {
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": v})).unwrap();
    pod.spec.unwrap()
}

fn amounts(pairs: &[(&str, u64)]) -> Amounts {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

fn c(name: &str, req: Value) -> Value {
    json!({"name": name, "image": "i", "resources": {"requests": req}})
}

#[test]
fn effective_pod_requests() {
    let cases: Vec<(&str, Value, Amounts)> = vec![
        ("empty", json!({"containers": []}), amounts(&[])),
        (
            "containers add up, cpu in milli",
            json!({"containers": [c("a", json!({"cpu": "250m", "memory": "1Gi"})), c("b", json!({"cpu": "1", "nvidia.com/gpu": "2"}))]}),
            amounts(&[("cpu", 1250), ("memory", 1 << 30), ("nvidia.com/gpu", 2)]),
        ),
        (
            "init container peak wins when larger",
            json!({"containers": [c("a", json!({"cpu": "1"}))],
                   "initContainers": [c("i", json!({"cpu": "2", "memory": "1"}))]}),
            amounts(&[("cpu", 2000), ("memory", 1)]),
        ),
        (
            "sidecars add to containers and to later init containers",
            json!({"containers": [c("a", json!({"cpu": "1"}))],
                   "initContainers": [
                       {"name": "s", "image": "i", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
                       c("i", json!({"cpu": "2"}))]}),
            // containers 1 + sidecar 0.5 = 1.5; init 2 + sidecar 0.5 = 2.5 → 2.5
            amounts(&[("cpu", 2500)]),
        ),
        (
            "init containers before a sidecar do not see it",
            json!({"containers": [c("a", json!({"cpu": "1"}))],
                   "initContainers": [
                       c("i", json!({"cpu": "2"})),
                       {"name": "s", "image": "i", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}}]}),
            amounts(&[("cpu", 2000)]),
        ),
        (
            "overhead is added",
            json!({"containers": [c("a", json!({"memory": "100"}))], "overhead": {"memory": "20", "cpu": "100m"}}),
            amounts(&[("cpu", 100), ("memory", 120)]),
        ),
        (
            "pod-level resources replace cpu and memory, not extended",
            json!({"containers": [c("a", json!({"cpu": "1", "memory": "1", "example.com/x": "3"}))],
                   "resources": {"requests": {"cpu": "4", "memory": "8"}},
                   "overhead": {"cpu": "1"}}),
            amounts(&[("cpu", 5000), ("example.com/x", 3), ("memory", 8)]),
        ),
        (
            "fractions round up",
            json!({"containers": [c("a", json!({"cpu": "0.1m", "memory": "1.5"}))]}),
            amounts(&[("cpu", 1), ("memory", 2)]),
        ),
    ];
    for (name, s, want) in cases {
        assert_eq!(pod_requests(&spec(s)), Ok(want), "{name}");
    }
    let err =
        pod_requests(&spec(json!({"containers": [c("a", json!({"cpu": "x"}))]}))).unwrap_err();
    assert_eq!(err.field, "spec.containers[0].resources.requests[cpu]");
}

#[test]
fn fit_check() {
    let alloc = amounts(&[("cpu", 4000), ("memory", 100), ("pods", 2)]);
    type Case<'a> = (&'a str, Amounts, Amounts, Vec<(&'a str, bool)>);
    let cases: Vec<Case<'_>> = vec![
        (
            "fits",
            amounts(&[("cpu", 1000)]),
            amounts(&[("cpu", 3000), ("pods", 1)]),
            vec![],
        ),
        (
            "exactly full fits",
            amounts(&[("memory", 40)]),
            amounts(&[("memory", 60)]),
            vec![],
        ),
        (
            "insufficient cpu, resolvable",
            amounts(&[("cpu", 2000)]),
            amounts(&[("cpu", 3000)]),
            vec![("cpu", false)],
        ),
        (
            "more than the node has: unresolvable",
            amounts(&[("memory", 101)]),
            amounts(&[]),
            vec![("memory", true)],
        ),
        (
            "unknown resource: unresolvable",
            amounts(&[("example.com/gpu", 1)]),
            amounts(&[]),
            vec![("example.com/gpu", true)],
        ),
        (
            "too many pods",
            amounts(&[]),
            amounts(&[("pods", 2)]),
            vec![("pods", false)],
        ),
        (
            "overcommitted node",
            amounts(&[("cpu", 1)]),
            amounts(&[("cpu", 5000)]),
            vec![("cpu", false)],
        ),
    ];
    for (name, req, used, want) in cases {
        let got: Vec<(String, bool)> = fits(&req, &alloc, &used)
            .into_iter()
            .map(|i| (i.resource, i.unresolvable))
            .collect();
        let want: Vec<(String, bool)> = want.into_iter().map(|(r, u)| (r.to_owned(), u)).collect();
        assert_eq!(got, want, "{name}");
    }
    let msg = fits(&amounts(&[]), &amounts(&[]), &amounts(&[]));
    assert_eq!(msg[0].to_string(), "Too many pods");
}

fn device(nar: Value, capacity: Value) -> DeviceInfo {
    let nar: std::collections::BTreeMap<String, NodeAllocatableResource> =
        serde_json::from_value(nar).unwrap();
    let capacity: std::collections::BTreeMap<String, Value> =
        serde_json::from_value(capacity).unwrap();
    DeviceInfo {
        node: Some("n1".into()),
        capacity: capacity
            .into_iter()
            .map(|(k, v)| (k, serde_json::from_value(v["value"].clone()).unwrap()))
            .collect(),
        node_allocatable: nar,
    }
}

#[test]
fn dra_mapping_and_overhead() {
    let cpu_cores = device(
        json!({"cpu": {"mapping": {"capacityKey": "dra.example.com/cores", "capacityMultiplier": "2"}}}),
        json!({"dra.example.com/cores": {"value": "64"}}),
    );
    let ccx = device(
        json!({"cpu": {"mapping": {"deviceMultiplier": "8"}}}),
        json!({}),
    );
    let gpu = device(
        json!({"memory": {"overhead": {"perPod": "1Gi", "perContainer": "256Mi"}},
               "cpu": {"overhead": {"perContainer": "500m"}}}),
        json!({}),
    );
    let consumed: std::collections::BTreeMap<
        String,
        k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    > = serde_json::from_value(json!({"dra.example.com/cores": "8"})).unwrap();

    // Mapping by capacity key: consumed 8 cores * 2 = 16 cpu.
    let d = [AllocatedDevice {
        consumed: Some(&consumed),
        device: &cpu_cores,
    }];
    assert_eq!(claim_mapping(&d), Ok(amounts(&[("cpu", 16_000)])));
    // Without recorded consumption the whole device capacity is taken: 64 * 2.
    let d = [AllocatedDevice {
        consumed: None,
        device: &cpu_cores,
    }];
    assert_eq!(claim_mapping(&d), Ok(amounts(&[("cpu", 128_000)])));
    // Mapping by device count: 2 devices * 8.
    let d = [
        AllocatedDevice {
            consumed: None,
            device: &ccx,
        },
        AllocatedDevice {
            consumed: None,
            device: &ccx,
        },
    ];
    assert_eq!(claim_mapping(&d), Ok(amounts(&[("cpu", 16_000)])));
    // Overhead: perPod + perContainer * refs.
    let d = [AllocatedDevice {
        consumed: None,
        device: &gpu,
    }];
    assert_eq!(
        claim_overhead(&d, 2),
        Ok(amounts(&[
            ("cpu", 1000),
            ("memory", (1 << 30) + (512 << 20))
        ]))
    );
    assert_eq!(claim_overhead(&d, 0), Ok(amounts(&[("memory", 1 << 30)])));
    // Overhead only devices map nothing; mapping only devices have no overhead.
    assert_eq!(claim_mapping(&d), Ok(amounts(&[])));
    assert_eq!(
        claim_overhead(
            &[AllocatedDevice {
                consumed: None,
                device: &ccx
            }],
            3
        ),
        Ok(amounts(&[]))
    );
}

#[test]
fn node_usage_counts_shared_claims_once() {
    let ccx = device(
        json!({"cpu": {"mapping": {"deviceMultiplier": "8"}},
               "memory": {"overhead": {"perPod": "100"}}}),
        json!({}),
    );
    let r1 = amounts(&[("cpu", 1000)]);
    let r2 = amounts(&[("cpu", 500), ("memory", 10)]);
    let shared = vec![ClaimRef {
        claim: "shared".into(),
        refs: 1,
    }];
    let pods = [
        PodLoad {
            requests: &r1,
            claims: &shared,
        },
        PodLoad {
            requests: &r2,
            claims: &shared,
        },
    ];
    let (used, errors) = node_usage(&pods, |name| {
        (name == "shared").then(|| {
            vec![AllocatedDevice {
                consumed: None,
                device: &ccx,
            }]
        })
    });
    assert!(errors.is_empty());
    // 1.5 cpu requested + 8 mapped once; memory 10 + 100 per pod * 2; two pod slots.
    assert_eq!(
        used,
        amounts(&[("cpu", 9500), ("memory", 210), ("pods", 2)])
    );
    // Unallocated claims take nothing.
    let (used, _) = node_usage(&pods, |_| None);
    assert_eq!(used, amounts(&[("cpu", 1500), ("memory", 10), ("pods", 2)]));
}

#[test]
fn claims_of_a_pod() {
    let s = spec(json!({
        "containers": [
            {"name": "a", "image": "i", "resources": {"claims": [{"name": "gpu"}]}},
            {"name": "b", "image": "i", "resources": {"claims": [{"name": "gpu"}, {"name": "t"}]}}],
        "resourceClaims": [
            {"name": "gpu", "resourceClaimName": "gpu-claim"},
            {"name": "t", "resourceClaimTemplateName": "tmpl"},
            {"name": "u", "resourceClaimTemplateName": "tmpl"}]
    }));
    let status: k8s_openapi::api::core::v1::PodStatus = serde_json::from_value(json!({
        "resourceClaimStatuses": [{"name": "t", "resourceClaimName": "p-t-abc"}]
    }))
    .unwrap();
    assert_eq!(
        pod_claims(&s, Some(&status)),
        vec![
            ClaimRef {
                claim: "gpu-claim".into(),
                refs: 2
            },
            ClaimRef {
                claim: "p-t-abc".into(),
                refs: 1
            },
        ]
    );
}
