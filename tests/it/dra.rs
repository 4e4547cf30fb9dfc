//! DRA accounting as kube-scheduler 1.37 does it, and PodGroup
//! ResourceClaims, through the real router in standalone mode: objects go
//! in through `POST /v1/objects`, decisions come out of
//! `POST /scheduler/filter` and `/scheduler/bind` with kube-scheduler's
//! extender bodies.

use crate::common;

use axum::http::StatusCode;
use common::{app, get, post};
use kruntimes_scheduler::serve::Standalone;
use kruntimes_scheduler::testkit::{Obj, claim, device_class, list, node, pod, pod_group, slice};
use serde_json::{Value, json};

/// A standalone service holding `objects` (posted through the object API).
async fn cluster(objects: Vec<Obj>) -> Standalone {
    let app = app("");
    let r = post(&app, "/v1/objects", &list(objects).to_string()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    app
}

/// `(NodeNames, FailedNodes, FailedAndUnresolvableNodes, Error)` of a
/// cache-capable filter of `pod` over `nodes`.
async fn filter(
    app: &Standalone,
    pod: &Obj,
    nodes: &[&str],
) -> (Vec<String>, Value, Value, String) {
    let body = json!({"Pod": pod.0, "NodeNames": nodes}).to_string();
    let r = post(app, "/scheduler/filter", &body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let names = r.body["NodeNames"]
        .as_array()
        .unwrap_or_else(|| panic!("NodeNames is a list: {}", r.text))
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_owned())
        .collect();
    (
        names,
        r.body["FailedNodes"].clone(),
        r.body["FailedAndUnresolvableNodes"].clone(),
        r.body["Error"].as_str().unwrap_or_default().to_owned(),
    )
}

/// Why `node` was rejected, failed or unresolvable (a demand larger than
/// the node's whole allocatable is unresolvable).
fn why<'a>(failed: &'a Value, unresolvable: &'a Value, node: &str) -> &'a str {
    failed
        .get(node)
        .or(unresolvable.get(node))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// A slice of driver `cpu.example.com` on `n1`, one device `d0` with
/// these `nodeAllocatableResources`.
fn cpu_slice(resources: Value) -> Obj {
    slice("s1", "cpu.example.com", "n1", &["d0"]).node_allocatable(0, resources)
}

/// Claim `ml/<name>` allocated device `d0` of [`cpu_slice`].
fn cpu_claim(name: &str) -> Obj {
    claim(name, "cpu.example.com")
        .namespace("ml")
        .allocated(&[("cpu.example.com", "n1", "d0")])
}

// === pod-level requests ===

/// Upstream: a node with exactly 2 cpu / 2Gi takes a pod whose pod-level
/// request is 2 cpu / 2Gi and whose claim maps 1 cpu / 1Gi: the mapped
/// amounts lie inside the pod-level budget.
#[tokio::test]
async fn pod_level_requests_with_a_dra_claim_fit_a_node_exactly() {
    let app = cluster(vec![
        node("n1").allocatable("2", "2Gi"),
        cpu_slice(json!({"cpu": {"mapping": {"deviceMultiplier": "1"}},
                         "memory": {"mapping": {"deviceMultiplier": "1Gi"}}})),
        cpu_claim("cpus"),
    ])
    .await;
    let p = pod("p")
        .requests(&[("cpu", "1"), ("memory", "1Gi")])
        .set(
            &["spec", "resources"],
            json!({"requests": {"cpu": "2", "memory": "2Gi"}}),
        )
        .uses_claim("cpus", Some("cpus"), None);
    let (names, failed, unresolvable, error) = filter(&app, &p, &["n1"]).await;
    assert_eq!(names, ["n1"], "{failed} {unresolvable} {error}");
    // Containers 1.5 cpu + mapped 1 cpu exceed the pod-level 2: no node can help.
    let over = p.clone().requests(&[("cpu", "1500m"), ("memory", "1Gi")]);
    let (names, _, unresolvable, _) = filter(&app, &over, &["n1"]).await;
    assert!(names.is_empty());
    assert_eq!(
        unresolvable["n1"],
        "pod level request for cpu is insufficient to cover the aggregated container and node-allocatable DRA requests"
    );
    // Without pod-level requests the mapping adds up: 1 + 1 cpu, 1Gi + 1Gi fit too,
    // but not one more millicore.
    let plain = pod("q")
        .requests(&[("cpu", "1001m"), ("memory", "1Gi")])
        .uses_claim("cpus", Some("cpus"), None);
    let (names, failed, unresolvable, _) = filter(&app, &plain, &["n1"]).await;
    assert!(names.is_empty());
    assert_eq!(why(&failed, &unresolvable, "n1"), "Insufficient cpu");
}

/// Upstream `PodRequests` row "Pod Level Resources overrides the claim
/// request", as kube-scheduler sends such a pod: the pod's status records a
/// node-allocatable claim mapping 3 cpu to its container, the pod-level
/// request (2 cpu) is not overridden by it, so the pod asks 2 cpu / 1Gi and
/// fits a node with exactly that. A recorded mapping of a resource the pod
/// level does not name (memory) is added on top.
#[tokio::test]
async fn pod_level_requests_are_not_overridden_by_a_recorded_claim_mapping() {
    let app = cluster(vec![
        node("n1").allocatable("2", "1Gi"),
        node("n0").allocatable("1999m", "8Gi"),
    ])
    .await;
    let recorded = |mapping: Value| json!([{"resourceClaimName": "node-allocatable-claim", "containers": ["c"], "mapping": mapping}]);
    let p = pod("p")
        .requests(&[("cpu", "1"), ("memory", "1Gi")])
        .set(&["spec", "resources"], json!({"requests": {"cpu": "2"}}))
        .set(
            &["status", "nodeAllocatableResourceClaimStatuses"],
            recorded(json!([{"name": "cpu", "quantity": "3"}])),
        );
    let (names, failed, unresolvable, error) = filter(&app, &p, &["n1", "n0"]).await;
    assert_eq!(names, ["n1"], "{failed} {unresolvable} {error}");
    assert_eq!(why(&failed, &unresolvable, "n0"), "Insufficient cpu");
    let more = p.set(
        &["status", "nodeAllocatableResourceClaimStatuses"],
        recorded(json!([{"name": "cpu", "quantity": "3"}, {"name": "memory", "quantity": "1Mi"}])),
    );
    let (names, failed, unresolvable, _) = filter(&app, &more, &["n1"]).await;
    assert!(names.is_empty());
    assert_eq!(why(&failed, &unresolvable, "n1"), "Insufficient memory");
}

// === mapped claims are not shared ===

const NOT_SHARED: &str =
    "node allocatable resource claim cpus has a mapped device and cannot be shared across pods";

#[tokio::test]
async fn a_mapped_claim_is_not_shared_through_another_pod() {
    let app = cluster(vec![
        node("n1").allocatable("16", "16Gi"),
        cpu_slice(json!({"cpu": {"mapping": {"deviceMultiplier": "2"}}})),
        cpu_claim("cpus"),
        pod("a")
            .on_node("n1")
            .uses_claim("cpus", Some("cpus"), None),
    ])
    .await;
    let b = pod("b").uses_claim("cpus", Some("cpus"), None);
    let (names, _, unresolvable, _) = filter(&app, &b, &["n1"]).await;
    assert!(names.is_empty());
    assert_eq!(unresolvable["n1"], NOT_SHARED);
}

#[tokio::test]
async fn a_mapped_claim_is_not_shared_through_a_template() {
    let app = cluster(vec![
        node("n1").allocatable("16", "16Gi"),
        cpu_slice(json!({"cpu": {"mapping": {"deviceMultiplier": "2"}}})),
        cpu_claim("cpus").reserved_for(&[("a", "a-uid")]),
    ])
    .await;
    // The template's claim, as the pod's status names it, is another pod's.
    let b = pod("b").uses_claim("cpus", None, Some("cpu-template")).set(
        &["status", "resourceClaimStatuses"],
        json!([{"name": "cpus", "resourceClaimName": "cpus"}]),
    );
    let (names, _, unresolvable, _) = filter(&app, &b, &["n1"]).await;
    assert!(names.is_empty());
    assert_eq!(unresolvable["n1"], NOT_SHARED);
}

#[tokio::test]
async fn a_mapped_claim_already_reserved_for_another_pod_is_refused() {
    let app = cluster(vec![
        node("n1").allocatable("16", "16Gi"),
        cpu_slice(json!({"cpu": {"mapping": {"deviceMultiplier": "2"}}})),
        cpu_claim("cpus").reserved_for(&[("other", "other-uid")]),
    ])
    .await;
    let b = pod("b").uses_claim("cpus", Some("cpus"), None);
    let (_, _, unresolvable, _) = filter(&app, &b, &["n1"]).await;
    assert_eq!(unresolvable["n1"], NOT_SHARED);
    // Reserved for this very pod: its own claim, no sharing.
    let r = post(
        &app,
        "/v1/objects",
        &cpu_claim("cpus").reserved_for(&[("b", "b-uid")]).json(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let (names, failed, unresolvable, _) = filter(&app, &b, &["n1"]).await;
    assert_eq!(names, ["n1"], "{failed} {unresolvable}");
}

#[tokio::test]
async fn an_overhead_only_claim_may_be_shared() {
    let app = cluster(vec![
        node("n1").allocatable("16", "16Gi"),
        cpu_slice(json!({"memory": {"overhead": {"perPod": "1Gi"}}})),
        cpu_claim("cpus").reserved_for(&[("a", "a-uid")]),
        pod("a")
            .on_node("n1")
            .uses_claim("cpus", Some("cpus"), None),
    ])
    .await;
    let b = pod("b").uses_claim("cpus", Some("cpus"), None);
    let (names, failed, unresolvable, _) = filter(&app, &b, &["n1"]).await;
    assert_eq!(names, ["n1"], "{failed} {unresolvable}");
}

// === valid targets ===

/// An extended resource named as a `nodeAllocatableResources` target is
/// ignored (with a warning), not charged: only cpu, memory,
/// ephemeral-storage and hugepages-* are node resources it can take.
#[tokio::test]
async fn an_extended_resource_target_is_ignored() {
    let app = cluster(vec![
        node("n1")
            .allocatable("4", "4Gi")
            .set(&["status", "allocatable", "example.com/widget"], "1"),
        cpu_slice(
            json!({"example.com/widget": {"mapping": {"deviceMultiplier": "1"}},
                         "cpu": {"overhead": {"perPod": "1"}}}),
        ),
        cpu_claim("cpus"),
        pod("a")
            .on_node("n1")
            .uses_claim("cpus", Some("cpus"), None),
    ])
    .await;
    // a counts 1 cpu + 1 cpu overhead, and no widget.
    assert_eq!(
        app.state.extender.nodes.read().used("n1", "cpu"),
        Some(2000)
    );
    assert_eq!(
        app.state
            .extender
            .nodes
            .read()
            .used("n1", "example.com/widget"),
        None
    );
    let b = pod("b").requests(&[("example.com/widget", "1"), ("cpu", "2")]);
    let (names, failed, unresolvable, _) = filter(&app, &b, &["n1"]).await;
    assert_eq!(names, ["n1"], "{failed} {unresolvable}");
}

// === extended resources backed by DRA ===

#[tokio::test]
async fn an_extended_resource_backed_by_a_device_class_passes_filter() {
    let app = cluster(vec![
        node("n1"),
        node("plugin").set(&["status", "allocatable", "example.com/gpu"], "1"),
        pod("holder")
            .on_node("plugin")
            .requests(&[("example.com/gpu", "1")]),
        device_class("gpu.example.com", Some("example.com/gpu")),
        slice("s1", "gpu.example.com", "n1", &["g0", "g1"]),
    ])
    .await;
    // An explicit extendedResourceName: DRA satisfies it on n1, which
    // offers none but has devices; the device-plugin node is counted as
    // usual (full).
    let p = pod("p").requests(&[("example.com/gpu", "1")]);
    let (names, failed, _, _) = filter(&app, &p, &["n1", "plugin"]).await;
    assert_eq!(names, ["n1"]);
    assert_eq!(failed["plugin"], "Insufficient example.com/gpu");
    // The implicit name of any DeviceClass.
    let p = pod("p").requests(&[("deviceclass.resource.kubernetes.io/gpu.example.com", "2")]);
    let (names, failed, unresolvable, _) = filter(&app, &p, &["n1"]).await;
    assert_eq!(names, ["n1"], "{failed} {unresolvable}");
    // Without a DeviceClass behind it, no node has it.
    let r = common::call(
        &app,
        axum::http::Method::DELETE,
        "/v1/objects?kind=DeviceClass&name=gpu.example.com",
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let p = pod("p").requests(&[("example.com/gpu", "1")]);
    let (names, failed, unresolvable, _) = filter(&app, &p, &["n1"]).await;
    assert!(names.is_empty());
    assert_eq!(
        why(&failed, &unresolvable, "n1"),
        "Insufficient example.com/gpu"
    );
}

/// Upstream `dynamicresources` test "extended-resource-name-no-resource":
/// a DeviceClass backs the extended resource, no ResourceSlice offers a
/// device, so the node is unresolvable ("cannot allocate all claims"); a
/// node with enough unallocated devices takes the pod, one whose devices
/// are all allocated does not, and a node offering the resource itself is
/// judged by its allocatable alone.
#[tokio::test]
async fn an_extended_resource_backed_by_dra_needs_a_device() {
    let app = cluster(vec![
        node("bare"),
        node("n1"),
        node("n2"),
        node("plugin").set(&["status", "allocatable", "example.com/gpu"], "4"),
        device_class("gpu.example.com", Some("example.com/gpu")),
        slice("s1", "gpu.example.com", "n1", &["g0", "g1"]),
        slice("s2", "gpu.example.com", "n2", &["g0"]),
        claim("taken", "gpu.example.com")
            .namespace("ml")
            .allocated(&[("gpu.example.com", "n2", "g0")]),
    ])
    .await;
    let p = pod("p").requests(&[("example.com/gpu", "1")]);
    let (names, failed, unresolvable, error) =
        filter(&app, &p, &["bare", "n1", "n2", "plugin"]).await;
    assert_eq!(names, ["n1", "plugin"], "{failed} {unresolvable} {error}");
    assert_eq!(unresolvable["bare"], "cannot allocate all claims");
    assert_eq!(unresolvable["n2"], "cannot allocate all claims");
    // Two units take two devices: n1 has them, three it has not.
    let two = pod("p").requests(&[("example.com/gpu", "2")]);
    let (names, ..) = filter(&app, &two, &["n1"]).await;
    assert_eq!(names, ["n1"]);
    let three = pod("p").requests(&[("example.com/gpu", "3")]);
    let (names, _, unresolvable, _) = filter(&app, &three, &["n1", "plugin"]).await;
    assert_eq!(names, ["plugin"]);
    assert_eq!(unresolvable["n1"], "cannot allocate all claims");
}

#[tokio::test]
async fn the_object_api_keeps_device_classes() {
    let app = cluster(vec![device_class(
        "gpu.example.com",
        Some("example.com/gpu"),
    )])
    .await;
    let r = get(&app, "/v1/objects?kind=DeviceClass&name=gpu.example.com").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body["items"][0]["spec"]["extendedResourceName"],
        "example.com/gpu"
    );
    let r = get(&app, "/v1/objects?kind=deviceclasses").await;
    assert_eq!(r.body["items"].as_array().map(Vec::len), Some(1));
}

// === slice node selectors ===

#[tokio::test]
async fn a_slice_selected_by_node_selector_is_charged_only_where_it_matches() {
    let app = cluster(vec![
        node("a1").label("zone", "a"),
        node("b1").label("zone", "b"),
        slice("zonal", "cpu.example.com", "a1", &["d0"])
            .on_nodes_labelled("zone", "a")
            .node_allocatable(0, json!({"cpu": {"mapping": {"deviceMultiplier": "3"}}})),
        claim("cpus", "cpu.example.com")
            .namespace("ml")
            .allocated(&[("cpu.example.com", "a1", "d0")]),
    ])
    .await;
    // The slice's pool is named after the node it was built for.
    let p = pod("p")
        .requests(&[("cpu", "2")])
        .uses_claim("cpus", Some("cpus"), None);
    let (names, failed, unresolvable, _) = filter(&app, &p, &["a1", "b1"]).await;
    assert_eq!(names, ["b1"]);
    assert_eq!(why(&failed, &unresolvable, "a1"), "Insufficient cpu");
    // A bound pod counts the device where the selector matches only.
    let r = post(
        &app,
        "/v1/objects",
        &pod("q")
            .on_node("a1")
            .uses_claim("cpus", Some("cpus"), None)
            .json(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        app.state.extender.nodes.read().used("a1", "cpu"),
        Some(4000)
    );
    // Relabelled out of the zone: the device no longer takes from a1.
    let r = post(&app, "/v1/objects", &node("a1").label("zone", "c").json()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        app.state.extender.nodes.read().used("a1", "cpu"),
        Some(1000)
    );
}

#[tokio::test]
async fn a_slice_for_all_nodes_is_charged_on_every_node() {
    let app = cluster(vec![
        node("a1"),
        node("b1"),
        slice("everywhere", "cpu.example.com", "a1", &["d0"])
            .on_all_nodes()
            .node_allocatable(0, json!({"cpu": {"mapping": {"deviceMultiplier": "3"}}})),
        claim("cpus", "cpu.example.com")
            .namespace("ml")
            .allocated(&[("cpu.example.com", "a1", "d0")]),
    ])
    .await;
    let p = pod("p")
        .requests(&[("cpu", "2")])
        .uses_claim("cpus", Some("cpus"), None);
    let (names, failed, unresolvable, _) = filter(&app, &p, &["a1", "b1"]).await;
    assert!(names.is_empty());
    assert_eq!(why(&failed, &unresolvable, "a1"), "Insufficient cpu");
    assert_eq!(why(&failed, &unresolvable, "b1"), "Insufficient cpu");
}

// === binding timeout ===

/// Upstream counts the binding timeout from `allocationTimestamp`: a claim
/// allocated long ago is cleared at the first bind.
#[tokio::test]
async fn an_old_allocation_timestamp_clears_the_claim_at_the_first_bind() {
    let app = cluster(vec![
        node("n1"),
        slice("s1", "gpu.example.com", "n1", &["gpu-0"]),
        claim("gpu", "gpu.example.com")
            .namespace("ml")
            .set(
                &["status", "allocation"],
                json!({"allocationTimestamp": "2020-01-01T00:00:00Z",
                   "devices": {"results": [{"request": "gpu", "driver": "gpu.example.com",
                       "pool": "n1", "device": "gpu-0", "bindingConditions": ["Attached"]}]}}),
            )
            .reserved_for(&[("p", "p-uid")]),
        pod("p").uses_claim("gpu", Some("gpu"), None),
    ])
    .await;
    let r = post(
        &app,
        "/scheduler/bind",
        r#"{"PodName":"p","PodNamespace":"ml","PodUID":"p-uid","Node":"n1"}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let error = r.body["Error"].as_str().unwrap_or_default();
    assert!(error.contains("binding timeout"), "{error}");
    assert!(error.contains("allocation cleared"), "{error}");
    let stored = get(&app, "/v1/objects?kind=ResourceClaim&namespace=ml&name=gpu").await;
    assert_eq!(stored.body["items"][0]["status"].get("allocation"), None);
    let p = get(&app, "/v1/objects?kind=Pod&namespace=ml&name=p").await;
    assert_eq!(
        p.body["items"][0]["spec"].get("nodeName"),
        None,
        "not bound"
    );
}

// === group ResourceClaims ===

#[tokio::test]
async fn a_member_referencing_another_object_under_a_group_claim_name_is_unresolvable() {
    let app = cluster(vec![
        node("n1"),
        pod_group("g").namespace("ml").set(
            &["spec", "resourceClaims"],
            json!([{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}]),
        ),
        pod("m").group("g").uses_claim("gpu", Some("my-gpu"), None),
    ])
    .await;
    // The filtered pod is in the cache, as kube-scheduler's pods are.
    let p = pod("m").group("g").uses_claim("gpu", Some("my-gpu"), None);
    let (names, _, unresolvable, _) = filter(&app, &p, &["n1"]).await;
    assert!(names.is_empty());
    assert_eq!(
        unresolvable["n1"],
        "pod claim gpu refers to ResourceClaim my-gpu, but PodGroup ml/g claim gpu refers to ResourceClaimTemplate gpu-template"
    );
}

/// The group's claim is shared by its members: its mapped devices count
/// once for the group on their node, and members are not refused as
/// sharing it.
#[tokio::test]
async fn a_group_claim_is_counted_once_for_the_group() {
    let app = cluster(vec![
        node("n1").allocatable("4", "8Gi"),
        cpu_slice(json!({"cpu": {"mapping": {"deviceMultiplier": "2"}}})),
        claim("group-cpus", "cpu.example.com")
            .namespace("ml")
            .allocated(&[("cpu.example.com", "n1", "d0")])
            .set(
                &["status", "reservedFor"],
                json!([{"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "g", "uid": "g-uid"}]),
            ),
        pod_group("g")
            .namespace("ml")
            .set(
                &["spec", "resourceClaims"],
                json!([{"name": "cpus", "resourceClaimTemplateName": "cpu-template"}]),
            )
            .set(
                &["status", "resourceClaimStatuses"],
                json!([{"name": "cpus", "resourceClaimName": "group-cpus"}]),
            ),
        pod("m0")
            .group("g")
            .on_node("n1")
            .uses_claim("cpus", None, Some("cpu-template"))
            .set(
                &["status", "resourceClaimStatuses"],
                json!([{"name": "cpus", "resourceClaimName": "group-cpus"}]),
            ),
        pod("m1")
            .group("g")
            .uses_claim("cpus", None, Some("cpu-template")),
    ])
    .await;
    // m0: 1 cpu + the group's 2 mapped cpus.
    assert_eq!(
        app.state.extender.nodes.read().used("n1", "cpu"),
        Some(3000)
    );
    // m1 resolves the group claim through the PodGroup's status; its 1 cpu
    // fits in the 1 left because the mapping is not counted again.
    let m1 = pod("m1")
        .group("g")
        .uses_claim("cpus", None, Some("cpu-template"));
    let (names, failed, unresolvable, error) = filter(&app, &m1, &["n1"]).await;
    assert_eq!(names, ["n1"], "{failed} {unresolvable} {error}");
}

// === --scheduler-config ===

/// A kube-scheduler configuration whose extender `httpTimeout` cannot hold
/// a bind's waits is refused at start, naming the fields.
#[tokio::test]
async fn a_scheduler_config_whose_http_timeout_is_too_short_is_refused_at_start() {
    let dir = std::env::temp_dir().join(format!("krs-dra-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("scheduler-config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
         extenders:\n- urlPrefix: http://127.0.0.1:8888/scheduler\n  bindVerb: bind\n  httpTimeout: 10s\n",
    )
    .unwrap();
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kruntimes-scheduler"))
        .args(["serve", "--listen", "127.0.0.1:0", "--state"])
        .arg(&state)
        .arg("--scheduler-config")
        .arg(&config)
        .env_remove("KRS_BINDING_TIMEOUT")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), out)
        .await
        .expect("the process ends by itself")
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "must not start: {stderr}");
    assert!(
        stderr.contains("extenders[0].httpTimeout is 10s"),
        "{stderr}"
    );
    assert!(
        stderr.contains("--binding-wait 5s") && stderr.contains("--gang-wait 20s"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
