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
        reach: Reach::Node("n1".into()),
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
    let none = PodLevel::new();
    let pods = [
        PodLoad {
            requests: &r1,
            level: &none,
            claims: &shared,
        },
        PodLoad {
            requests: &r2,
            level: &none,
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

/// Ported from upstream's pod-level DRA cases (`PodRequests` with
/// `UseDRANodeAllocatableResourceClaimStatus` and
/// `validatePodLevelResourcesCoverDRA`): the claims' amounts lie inside the
/// pod-level budget of the resources it names, are added on top for the
/// others, and more than the budget leaves is unresolvable.
#[test]
fn pod_level_requests_hold_dra_amounts() {
    let pod = |v: Value| pod_demand(&spec(v)).unwrap();
    let cases: Vec<(&str, Value, Amounts, Result<Amounts, String>)> = vec![
        (
            "pod-level cpu and memory hold the mapped cpu and memory exactly",
            json!({"containers": [c("a", json!({"cpu": "1", "memory": "1Gi"}))],
                   "resources": {"requests": {"cpu": "2", "memory": "2Gi"}}}),
            amounts(&[("cpu", 1000), ("memory", 1 << 30)]),
            Ok(amounts(&[("cpu", 2000), ("memory", 2 << 30)])),
        ),
        (
            "pod-level without container requests holds the whole DRA amount",
            json!({"containers": [c("a", json!({}))],
                   "resources": {"requests": {"cpu": "2", "memory": "2Gi"}}}),
            amounts(&[("cpu", 2000), ("memory", 2 << 30)]),
            Ok(amounts(&[("cpu", 2000), ("memory", 2 << 30)])),
        ),
        (
            "a resource the pod level does not name is added on top",
            json!({"containers": [c("a", json!({"cpu": "1", "memory": "1Gi"}))],
                   "resources": {"requests": {"cpu": "2"}}}),
            amounts(&[("cpu", 500), ("memory", 1 << 30)]),
            Ok(amounts(&[("cpu", 2000), ("memory", 2 << 30)])),
        ),
        (
            "pod overhead stays on top of the pod-level budget",
            json!({"containers": [c("a", json!({"cpu": "1"}))],
                   "resources": {"requests": {"cpu": "2"}}, "overhead": {"cpu": "250m"}}),
            amounts(&[("cpu", 1000)]),
            Ok(amounts(&[("cpu", 2250)])),
        ),
        (
            "more than the pod-level budget leaves is refused",
            json!({"containers": [c("a", json!({"cpu": "1500m"}))],
                   "resources": {"requests": {"cpu": "2"}}}),
            amounts(&[("cpu", 1000)]),
            Err(pod_level_short("cpu")),
        ),
        (
            "hugepages at pod level hold their DRA amount too",
            json!({"containers": [c("a", json!({"hugepages-2Mi": "2Mi"}))],
                   "resources": {"requests": {"hugepages-2Mi": "4Mi"}}}),
            amounts(&[("hugepages-2Mi", 2 << 20)]),
            Ok(amounts(&[("hugepages-2Mi", 4 << 20)])),
        ),
        (
            "without pod-level requests DRA amounts add up",
            json!({"containers": [c("a", json!({"cpu": "1"}))]}),
            amounts(&[("cpu", 1000)]),
            Ok(amounts(&[("cpu", 2000)])),
        ),
    ];
    for (name, s, dra, want) in cases {
        let (requests, level) = pod(s);
        assert_eq!(with_dra(&requests, &level, &dra), want, "{name}");
    }
}

/// Upstream `TestPodResourceRequestsWithDRANodeAllocatableClaims`
/// (`staging/src/k8s.io/component-helpers/resource/helpers_test.go`), the
/// rows whose claims the spec does not name: the amounts the pod's
/// `status.nodeAllocatableResourceClaimStatuses` records join the
/// containers' aggregate, and pod-level requests replace it for the
/// resources they name ("Pod Level Resources overrides the claim
/// request"). Rows whose claims the spec names are counted from the
/// claims' allocations (`claim_mapping`, `claim_overhead`, the DRA
/// plugin), which is where upstream's scheduler takes them from too.
#[test]
fn upstream_pod_requests_with_node_allocatable_claim_statuses() {
    let gi: u64 = 1 << 30;
    let mi: u64 = 1 << 20;
    let status = |v: Value| -> k8s_openapi::api::core::v1::PodStatus {
        serde_json::from_value(json!({"nodeAllocatableResourceClaimStatuses": v})).unwrap()
    };
    let cases: Vec<(&str, Value, Value, Amounts)> = vec![
        (
            "No claims",
            json!({"containers": [c("c1", json!({"cpu": "100m", "memory": "1Gi"}))]}),
            json!([]),
            amounts(&[("cpu", 100), ("memory", gi)]),
        ),
        (
            "Pod Level Resources overrides the claim request",
            json!({"resources": {"requests": {"cpu": "2"}},
                   "containers": [c("c1", json!({"cpu": "1", "memory": "1Gi"}))]}),
            json!([{"resourceClaimName": "node-allocatable-claim", "containers": ["c1"],
                    "mapping": [{"name": "cpu", "quantity": "3"}]}]),
            amounts(&[("cpu", 2000), ("memory", gi)]),
        ),
        (
            "Pod with DRA claim specifying Overhead mapping",
            json!({"containers": [c("c1", json!({"cpu": "100m", "memory": "1Gi"})),
                                  c("c2", json!({"cpu": "100m", "memory": "1Gi"}))]}),
            json!([{"resourceClaimName": "node-allocatable-claim", "containers": ["c1", "c2"],
                    "overhead": [{"name": "memory", "perPod": "1Gi", "perContainer": "500Mi"}]}]),
            amounts(&[("cpu", 200), ("memory", 3 * gi + 1000 * mi)]),
        ),
        (
            "Pod with DRA claim specifying Overhead mapping, PerPod only",
            json!({"containers": [c("c1", json!({"memory": "1Gi"}))]}),
            json!([{"resourceClaimName": "node-allocatable-claim", "containers": ["c1"],
                    "overhead": [{"name": "memory", "perPod": "1Gi"}]}]),
            amounts(&[("memory", 2 * gi)]),
        ),
        (
            "Pod with DRA claim specifying Overhead mapping, PerContainer only",
            json!({"containers": [c("c1", json!({"memory": "1Gi"}))]}),
            json!([{"resourceClaimName": "node-allocatable-claim", "containers": ["c1"],
                    "overhead": [{"name": "memory", "perContainer": "500Mi"}]}]),
            amounts(&[("memory", gi + 500 * mi)]),
        ),
        (
            // Not an upstream row: a mapping of a resource the pod level
            // does not name is added, one it names is not.
            "pod level names cpu, the mapping adds memory",
            json!({"resources": {"requests": {"cpu": "2"}},
                   "containers": [c("c1", json!({"cpu": "1", "memory": "1Gi"}))]}),
            json!([{"resourceClaimName": "x", "containers": ["c1"],
                    "mapping": [{"name": "cpu", "quantity": "3"}, {"name": "memory", "quantity": "512Mi"}]}]),
            amounts(&[("cpu", 2000), ("memory", gi + 512 * mi)]),
        ),
    ];
    for (name, s, st, want) in cases {
        let s = spec(s);
        let (got, level) = pod_demand_of(&s, Some(&status(st))).unwrap();
        assert_eq!(got, want, "{name}");
        // The recorded amounts never eat the headroom the pod's own
        // claims have inside the pod-level budget.
        assert_eq!(level, pod_demand(&s).unwrap().1, "{name}");
    }
    // A claim the spec names is counted from its allocation, not twice.
    let own = spec(json!({
        "containers": [{"name": "c1", "image": "i",
            "resources": {"requests": {"cpu": "100m"}, "claims": [{"name": "claim-1"}]}}],
        "resourceClaims": [{"name": "claim-1", "resourceClaimName": "node-allocatable-claim-1"}]}));
    let st = status(
        json!([{"resourceClaimName": "node-allocatable-claim-1", "containers": ["c1"],
        "mapping": [{"name": "cpu", "quantity": "50m"}]}]),
    );
    assert_eq!(
        pod_demand_of(&own, Some(&st)).unwrap().0,
        amounts(&[("cpu", 100)])
    );
    // A recorded quantity that does not parse names its field.
    let bad = status(json!([{"resourceClaimName": "x", "containers": ["c1"],
        "mapping": [{"name": "cpu", "quantity": "lots"}]}]));
    let err = pod_demand_of(&spec(json!({"containers": []})), Some(&bad)).unwrap_err();
    assert_eq!(
        err.field,
        "status.nodeAllocatableResourceClaimStatuses[0].mapping[0]"
    );
}

#[test]
fn only_node_resources_are_node_allocatable_targets() {
    for (name, valid) in [
        ("cpu", true),
        ("memory", true),
        ("ephemeral-storage", true),
        ("hugepages-1Gi", true),
        ("example.com/gpu", false),
        ("pods", false),
        ("nvidia.com/gpu", false),
    ] {
        assert_eq!(node_allocatable_target(name), valid, "{name}");
    }
    // A device naming an extended resource as its target maps nothing of it.
    let d = device(
        json!({"example.com/gpu": {"mapping": {"deviceMultiplier": "1"}},
               "nvidia.com/gpu": {"overhead": {"perPod": "1"}},
               "cpu": {"mapping": {"deviceMultiplier": "2"}}}),
        json!({}),
    );
    let d = [AllocatedDevice {
        consumed: None,
        device: &d,
    }];
    assert_eq!(claim_mapping(&d), Ok(amounts(&[("cpu", 2000)])));
    assert_eq!(claim_overhead(&d, 1), Ok(amounts(&[])));
}

#[test]
fn a_bound_pods_pod_level_budget_holds_its_claims() {
    let dev = device(
        json!({"cpu": {"mapping": {"deviceMultiplier": "1"}},
               "memory": {"overhead": {"perPod": "100"}}}),
        json!({}),
    );
    let (requests, level) = pod_demand(&spec(json!({
        "containers": [c("a", json!({"memory": "10"}))],
        "resources": {"requests": {"cpu": "2"}}})))
    .unwrap();
    let claims = vec![ClaimRef {
        claim: "mine".into(),
        refs: 1,
    }];
    let pods = [PodLoad {
        requests: &requests,
        level: &level,
        claims: &claims,
    }];
    let (used, _) = node_usage(&pods, |_| {
        Some(vec![AllocatedDevice {
            consumed: None,
            device: &dev,
        }])
    });
    // cpu: the pod-level 2 holds the mapped 1; memory: 10 + 100 on top.
    assert_eq!(
        used,
        amounts(&[("cpu", 2000), ("memory", 110), ("pods", 1)])
    );
}

#[test]
fn device_reach() {
    let labels: std::collections::BTreeMap<String, String> =
        [("zone".to_owned(), "a".to_owned())].into_iter().collect();
    let none = std::collections::BTreeMap::new();
    let sel: k8s_openapi::api::core::v1::NodeSelector = serde_json::from_value(json!({
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}))
    .unwrap();
    let by_selector = Reach::Selector(std::sync::Arc::new(
        crate::pods::selector::NodeRule::of_selector(&sel),
    ));
    assert!(by_selector.matches("n1", &labels));
    assert!(!by_selector.matches("n2", &none));
    assert!(Reach::All.matches("n2", &none));
    assert!(Reach::Node("n1".into()).matches("n1", &none));
    assert!(!Reach::Node("n1".into()).matches("n2", &labels));
    assert!(!Reach::Nowhere.matches("n1", &labels));
}
