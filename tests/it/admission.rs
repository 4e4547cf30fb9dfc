//! The admission webhooks through the real router, with AdmissionReview
//! fixtures shaped as the API server sends them (`tests/data/admission/`).
//! Each case edits a fixture (JSON pointer → value) to break one rule and
//! asserts the verdict, the status code and that the message and the status
//! causes name every offending field path. Patches are applied to the
//! object and the result checked.

use kruntimes_scheduler::testkit;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine as _;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kruntimes_scheduler::admission::{self, AdmissionState};
use kruntimes_scheduler::cache::cluster_index::ClusterIndex;
use rstest::rstest;
use serde_json::{Value, json};
use tower::ServiceExt;

// === fixtures and edits ===

fn fixture(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/admission")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("fixture exists");
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// One change to a fixture: set (adding parents as needed) or remove.
#[derive(Clone, Debug)]
enum Edit {
    Set(&'static str, Value),
    Remove(&'static str),
}

fn set(ptr: &'static str, v: Value) -> Edit {
    Edit::Set(ptr, v)
}

fn remove(ptr: &'static str) -> Edit {
    Edit::Remove(ptr)
}

fn apply_edits(mut doc: Value, edits: &[Edit]) -> Value {
    for e in edits {
        match e {
            Edit::Set(ptr, v) => {
                let (parent, key) = ptr.rsplit_once('/').expect("pointer has a parent");
                let target = doc
                    .pointer_mut(parent)
                    .unwrap_or_else(|| panic!("no {parent} in fixture"));
                match target {
                    Value::Array(a) => {
                        let i: usize = key.parse().expect("array index");
                        if i < a.len() {
                            a[i] = v.clone();
                        } else {
                            a.push(v.clone());
                        }
                    }
                    other => {
                        if other.is_null() {
                            *other = json!({});
                        }
                        other[key.replace("~1", "/")] = v.clone();
                    }
                }
            }
            Edit::Remove(ptr) => {
                let (parent, key) = ptr.rsplit_once('/').expect("pointer has a parent");
                match doc.pointer_mut(parent) {
                    Some(Value::Object(m)) => {
                        m.remove(&key.replace("~1", "/"));
                    }
                    Some(Value::Array(a)) => {
                        a.remove(key.parse::<usize>().expect("array index"));
                    }
                    _ => panic!("no {parent} in fixture"),
                }
            }
        }
    }
    doc
}

fn state() -> AdmissionState {
    AdmissionState::new(Arc::new(ClusterIndex::with_priority_classes(&[
        testkit::priority_class("high-priority", 1000).typed::<PriorityClass>(),
    ])))
}

struct Reply {
    status: StatusCode,
    body: Value,
    text: String,
}

async fn send_raw(state: AdmissionState, path: &str, body: Vec<u8>) -> Reply {
    let req = Request::builder()
        .method("POST")
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("request builds");
    let resp = admission::router(state)
        .oneshot(req)
        .await
        .expect("router answers");
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("body reads");
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Reply { status, body, text }
}

async fn send(state: AdmissionState, path: &str, review: &Value) -> Reply {
    send_raw(state, path, serde_json::to_vec(review).expect("serializes")).await
}

/// Asserts the AdmissionReview envelope and returns `response`.
fn response_of(reply: &Reply, review: &Value) -> Value {
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        reply.body["apiVersion"], "admission.k8s.io/v1",
        "{}",
        reply.text
    );
    assert_eq!(reply.body["kind"], "AdmissionReview", "{}", reply.text);
    let resp = reply.body["response"].clone();
    assert_eq!(resp["uid"], review["request"]["uid"], "uid echoed");
    resp
}

#[derive(Clone, Copy, Debug)]
enum Expect {
    Allow,
    Deny(u16, &'static [&'static str]),
}

fn check_verdict(resp: &Value, expect: Expect) {
    match expect {
        Expect::Allow => {
            assert_eq!(resp["allowed"], true, "expected allowed: {resp:#}");
        }
        Expect::Deny(code, paths) => {
            assert_eq!(resp["allowed"], false, "expected denied: {resp:#}");
            assert_eq!(resp["status"]["code"], code, "{resp:#}");
            assert_eq!(resp["status"]["status"], "Failure", "{resp:#}");
            let message = resp["status"]["message"].as_str().unwrap_or_default();
            let causes: Vec<&str> = resp["status"]["details"]["causes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["field"].as_str())
                .collect();
            for p in paths {
                assert!(message.contains(p), "message does not name {p}: {message}");
                assert!(causes.contains(p), "causes do not name {p}: {causes:?}");
            }
            assert!(resp.get("patch").is_none(), "a denial carries no patch");
        }
    }
}

async fn judge(path: &str, fixture_name: &str, edits: &[Edit], expect: Expect) -> Value {
    let review = apply_edits(fixture(fixture_name), edits);
    let reply = send(state(), path, &review).await;
    let resp = response_of(&reply, &review);
    check_verdict(&resp, expect);
    resp
}

// === Runs: validation ===

const VALIDATE_RUNS: &str = "/admission/validate/runs";
const GPU: &str = "/request/object/spec/resources/requests/gpu";
const AFF: &str = "/request/object/spec/affinity";

#[rstest]
#[case::valid(vec![], Expect::Allow)]
#[case::negative(vec![set(GPU, json!("-1"))], Expect::Deny(422, &["spec.resources.requests[gpu]"]))]
#[case::fractional(vec![set(GPU, json!("1.5"))], Expect::Deny(422, &["spec.resources.requests[gpu]"]))]
#[case::milli(vec![set(GPU, json!("500m"))], Expect::Deny(422, &["spec.resources.requests[gpu]"]))]
#[case::malformed(vec![set(GPU, json!("lots"))], Expect::Deny(422, &["spec.resources.requests[gpu]"]))]
#[case::absurd(vec![set(GPU, json!("1e30"))], Expect::Deny(422, &["spec.resources.requests[gpu]"]))]
#[case::float_number(vec![set(GPU, json!(1.5))], Expect::Deny(422, &["spec.resources.requests[gpu]"]))]
#[case::integer_number(vec![set(GPU, json!(2))], Expect::Allow)]
#[case::integer_forms(vec![set(GPU, json!("1Ki")), set("/request/object/spec/resources/requests/cpu", json!("1000m"))], Expect::Allow)]
#[case::bad_name(
    vec![set("/request/object/spec/resources/requests/Bad Name", json!("1"))],
    Expect::Deny(422, &["spec.resources.requests[Bad Name]"])
)]
#[case::every_offender(
    vec![set(GPU, json!("-1")), set("/request/object/spec/resources/requests/mem", json!("0.5")), set("/request/object/spec/resources/requests/-x", json!("1"))],
    Expect::Deny(422, &["spec.resources.requests[gpu]", "spec.resources.requests[mem]", "spec.resources.requests[-x]"])
)]
#[case::requests_not_a_map(
    vec![set("/request/object/spec/resources/requests", json!(["gpu"]))],
    Expect::Deny(422, &["spec.resources.requests"])
)]
#[case::no_resources(vec![remove("/request/object/spec/resources")], Expect::Allow)]
#[case::dry_run_same_verdict(
    vec![set("/request/dryRun", json!(true)), set(GPU, json!("-1"))],
    Expect::Deny(422, &["spec.resources.requests[gpu]"])
)]
#[case::affinity_valid(
    vec![set(AFF, json!({"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kruntimes.io/runtime-pod", "labelSelector": {"matchLabels": {"stage": "build"}}}]},
        "runAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "runAffinityTerm":
        {"topologyKey": "kruntimes.io/runtime-pod", "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}}}]}}))],
    Expect::Allow
)]
#[case::affinity_topology_key(
    vec![set(AFF, json!({"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"stage": "build"}}}]}}))],
    Expect::Deny(422, &["spec.affinity.runAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey"])
)]
#[case::affinity_weight(
    vec![set(AFF, json!({"runAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 101, "runAffinityTerm": {"topologyKey": "kruntimes.io/runtime-pod", "labelSelector": {"matchLabels": {"a": "b"}}}},
        {"weight": 0, "runAffinityTerm": {"topologyKey": "kruntimes.io/runtime-pod", "labelSelector": {"matchLabels": {"a": "b"}}}}]}}))],
    Expect::Deny(422, &["spec.affinity.runAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight", "spec.affinity.runAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[1].weight"])
)]
#[case::affinity_selector_syntax(
    vec![set(AFF, json!({"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kruntimes.io/runtime-pod", "labelSelector": {"matchExpressions": [{"key": "stage", "operator": "Near", "values": ["x"]}]}},
        {"topologyKey": "kruntimes.io/runtime-pod", "labelSelector": {"matchLabels": {"bad key!": "x"}}},
        {"topologyKey": "kruntimes.io/runtime-pod", "labelSelector": {"matchExpressions": [{"key": "stage", "operator": "In"}]}}]}}))],
    Expect::Deny(422, &[
        "spec.affinity.runAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector",
        "spec.affinity.runAffinity.requiredDuringSchedulingIgnoredDuringExecution[1].labelSelector",
        "spec.affinity.runAffinity.requiredDuringSchedulingIgnoredDuringExecution[2].labelSelector"])
)]
#[case::affinity_empty_selector(
    vec![set(AFF, json!({"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kruntimes.io/runtime-pod", "labelSelector": {}},
        {"topologyKey": "kruntimes.io/runtime-pod"}]}}))],
    Expect::Deny(422, &[
        "spec.affinity.runAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector",
        "spec.affinity.runAffinity.requiredDuringSchedulingIgnoredDuringExecution[1].labelSelector"])
)]
#[case::affinity_shape(vec![set(AFF, json!({"runAffinity": "near"}))], Expect::Deny(422, &["spec.affinity"]))]
#[tokio::test]
async fn run_create(#[case] edits: Vec<Edit>, #[case] expect: Expect) {
    let resp = judge(VALIDATE_RUNS, "run-create.json", &edits, expect).await;
    assert!(
        resp.get("patch").is_none(),
        "validating responses carry no patch"
    );
}

const NEW_REQ: &str = "/request/object/spec/resources/requests";
const OLD_REQ: &str = "/request/oldObject/spec/resources/requests";

#[rstest]
#[case::labels_only(vec![], Expect::Allow)]
#[case::status_only(vec![set("/request/object/status", json!({"phase": "Running", "assignedPod": "rp-1"}))], Expect::Allow)]
#[case::other_spec_field(vec![set("/request/object/spec/priority", json!("high"))], Expect::Allow)]
#[case::changed_amount(vec![set("/request/object/spec/resources/requests/gpu", json!("2"))], Expect::Deny(422, &["spec.resources.requests"]))]
#[case::added_resource(vec![set("/request/object/spec/resources/requests/mem", json!("1"))], Expect::Deny(422, &["spec.resources.requests"]))]
#[case::removed_resources(vec![remove("/request/object/spec/resources")], Expect::Deny(422, &["spec.resources.requests"]))]
#[case::absent_runs_is_one(vec![remove("/request/oldObject/spec/resources/requests/runs")], Expect::Allow)]
#[case::runs_one_is_absent(vec![set(NEW_REQ, json!({"gpu": "1"}))], Expect::Allow)]
#[case::zero_is_absent(vec![set("/request/object/spec/resources/requests/mem", json!("0"))], Expect::Allow)]
#[case::same_amount_other_form(vec![set("/request/object/spec/resources/requests/gpu", json!("1000m"))], Expect::Allow)]
#[case::invalid_new_value(
    vec![set("/request/object/spec/resources/requests/gpu", json!("-1"))],
    Expect::Deny(422, &["spec.resources.requests[gpu]", "spec.resources.requests"])
)]
#[case::unchanged_invalid_ratchets(
    vec![set(NEW_REQ, json!({"gpu": "1.5"})), set(OLD_REQ, json!({"gpu": "1.5"}))],
    Expect::Allow
)]
#[tokio::test]
async fn run_update(#[case] edits: Vec<Edit>, #[case] expect: Expect) {
    judge(VALIDATE_RUNS, "run-update.json", &edits, expect).await;
}

// === Runs: defaulting ===

fn decode_patch(resp: &Value) -> Option<json_patch::Patch> {
    let b64 = resp
        .get("patch")?
        .as_str()
        .expect("patch is a base64 string");
    assert_eq!(resp["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("patch is base64");
    Some(serde_json::from_slice(&bytes).expect("patch is RFC 6902 JSON"))
}

/// The object after the response's patch (unchanged without one).
fn patched(review: &Value, resp: &Value) -> Value {
    let mut obj = review["request"]["object"].clone();
    if let Some(p) = decode_patch(resp) {
        json_patch::patch(&mut obj, &p).expect("patch applies to the object");
    }
    obj
}

#[rstest]
#[case::adds_runs(vec![], true, json!({"gpu": "1", "runs": "1"}))]
#[case::no_resources(vec![remove("/request/object/spec/resources")], true, json!({"runs": "1"}))]
#[case::null_resources(vec![set("/request/object/spec/resources", Value::Null)], true, json!({"runs": "1"}))]
#[case::no_requests(vec![set("/request/object/spec/resources", json!({}))], true, json!({"runs": "1"}))]
#[case::runs_present(vec![set(NEW_REQ, json!({"runs": "3"}))], false, json!({"runs": "3"}))]
#[case::dry_run(vec![set("/request/dryRun", json!(true))], true, json!({"gpu": "1", "runs": "1"}))]
#[tokio::test]
async fn run_defaulting(#[case] edits: Vec<Edit>, #[case] patches: bool, #[case] requests: Value) {
    let review = apply_edits(fixture("run-create.json"), &edits);
    let reply = send(state(), "/admission/mutate/runs", &review).await;
    let resp = response_of(&reply, &review);
    check_verdict(&resp, Expect::Allow);
    assert_eq!(resp.get("patch").is_some(), patches, "{resp:#}");
    let obj = patched(&review, &resp);
    assert_eq!(obj.pointer("/spec/resources/requests"), Some(&requests));
    assert_eq!(obj["spec"]["runtime"], "python");
}

#[tokio::test]
async fn run_defaulting_leaves_updates_alone() {
    let review = apply_edits(
        fixture("run-update.json"),
        &[remove("/request/object/spec/resources")],
    );
    let reply = send(state(), "/admission/mutate/runs", &review).await;
    let resp = response_of(&reply, &review);
    check_verdict(&resp, Expect::Allow);
    assert!(resp.get("patch").is_none());
}

// === PodGroup ===

const VALIDATE_PG: &str = "/admission/validate/podgroups";

fn claims(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| json!({"name": format!("c{i}"), "resourceClaimName": format!("claim-{i}")}))
            .collect(),
    )
}

#[rstest]
#[case::valid(vec![], Expect::Allow)]
#[case::both_policies(
    vec![set("/request/object/spec/schedulingPolicy/basic", json!({}))],
    Expect::Deny(422, &["spec.schedulingPolicy"])
)]
#[case::no_policy(vec![set("/request/object/spec/schedulingPolicy", json!({}))], Expect::Deny(422, &["spec.schedulingPolicy"]))]
#[case::min_count_zero(
    vec![set("/request/object/spec/schedulingPolicy/gang/minCount", json!(0))],
    Expect::Deny(422, &["spec.schedulingPolicy.gang.minCount"])
)]
#[case::all_with_basic(
    vec![set("/request/object/spec/schedulingPolicy", json!({"basic": {}}))],
    Expect::Deny(422, &["spec.disruptionMode.all"])
)]
#[case::both_disruption_modes(
    vec![set("/request/object/spec/disruptionMode/single", json!({}))],
    Expect::Deny(422, &["spec.disruptionMode"])
)]
#[case::two_topologies(
    vec![set("/request/object/spec/schedulingConstraints/topology/1", json!({"key": "topology.kubernetes.io/zone"}))],
    Expect::Deny(422, &["spec.schedulingConstraints.topology"])
)]
#[case::bad_topology_key(
    vec![set("/request/object/spec/schedulingConstraints/topology/0/key", json!("bad key"))],
    Expect::Deny(422, &["spec.schedulingConstraints.topology[0].key"])
)]
#[case::five_claims(vec![set("/request/object/spec/resourceClaims", claims(5))], Expect::Deny(422, &["spec.resourceClaims"]))]
#[case::four_claims(vec![set("/request/object/spec/resourceClaims", claims(4))], Expect::Allow)]
#[case::claim_and_template(
    vec![set("/request/object/spec/resourceClaims/0/resourceClaimName", json!("gpu-claim"))],
    Expect::Deny(422, &["spec.resourceClaims[0]"])
)]
#[case::claim_neither(
    vec![remove("/request/object/spec/resourceClaims/0/resourceClaimTemplateName")],
    Expect::Deny(422, &["spec.resourceClaims[0]"])
)]
#[case::duplicate_claim_names(
    vec![set("/request/object/spec/resourceClaims/1", json!({"name": "gpus", "resourceClaimName": "x"}))],
    Expect::Deny(422, &["spec.resourceClaims[1]"])
)]
#[case::missing_class(
    vec![set("/request/object/spec/priorityClassName", json!("no-such-class"))],
    Expect::Deny(403, &["spec.priorityClassName"])
)]
#[case::missing_class_and_invalid(
    vec![set("/request/object/spec/priorityClassName", json!("no-such-class")), set("/request/object/spec/schedulingPolicy/gang/minCount", json!(0))],
    Expect::Deny(422, &["spec.priorityClassName", "spec.schedulingPolicy.gang.minCount"])
)]
#[case::no_class(vec![remove("/request/object/spec/priorityClassName")], Expect::Allow)]
#[case::bad_preemption_policy(
    vec![set("/request/object/spec/preemptionPolicy", json!("Sometimes"))],
    Expect::Deny(422, &["spec.preemptionPolicy"])
)]
#[case::priority_differs_from_class(
    vec![set("/request/object/spec/priority", json!(5))],
    Expect::Deny(403, &["spec.priority"])
)]
#[case::priority_without_class(
    vec![remove("/request/object/spec/priorityClassName"), set("/request/object/spec/priority", json!(5))],
    Expect::Allow
)]
#[case::priority_above_user_range(
    vec![remove("/request/object/spec/priorityClassName"), set("/request/object/spec/priority", json!(1_000_000_001))],
    Expect::Deny(422, &["spec.priority"])
)]
#[case::topology_key_name_too_long(
    vec![set("/request/object/spec/schedulingConstraints/topology/0/key", json!(format!("example.com/{}", "k".repeat(64))))],
    Expect::Deny(422, &["spec.schedulingConstraints.topology[0].key"])
)]
#[case::dry_run_same_verdict(
    vec![set("/request/dryRun", json!(true)), set("/request/object/spec/schedulingPolicy/gang/minCount", json!(0))],
    Expect::Deny(422, &["spec.schedulingPolicy.gang.minCount"])
)]
#[case::wrong_type(
    vec![set("/request/object/spec/schedulingPolicy/gang/minCount", json!("four"))],
    Expect::Deny(422, &["spec.schedulingPolicy.gang.minCount"])
)]
#[tokio::test]
async fn pod_group_create(#[case] edits: Vec<Edit>, #[case] expect: Expect) {
    judge(VALIDATE_PG, "podgroup-create.json", &edits, expect).await;
}

#[rstest]
#[case::min_count_mutable(vec![], Expect::Allow)]
#[case::topology(
    vec![set("/request/object/spec/schedulingConstraints/topology/0/key", json!("topology.kubernetes.io/zone"))],
    Expect::Deny(422, &["spec.schedulingConstraints"])
)]
#[case::claims(
    vec![set("/request/object/spec/resourceClaims/0/resourceClaimTemplateName", json!("other"))],
    Expect::Deny(422, &["spec.resourceClaims"])
)]
#[case::disruption(vec![set("/request/object/spec/disruptionMode", json!({"single": {}}))], Expect::Deny(422, &["spec.disruptionMode"]))]
#[case::class(
    vec![set("/request/object/spec/priorityClassName", json!("high-priority-2"))],
    Expect::Deny(422, &["spec.priorityClassName"])
)]
#[case::priority(vec![set("/request/object/spec/priority", json!(5))], Expect::Deny(422, &["spec.priority"]))]
#[case::preemption(vec![set("/request/object/spec/preemptionPolicy", json!("Never"))], Expect::Deny(422, &["spec.preemptionPolicy"]))]
#[case::workload_ref(
    vec![set("/request/object/spec/workloadRef/templateName", json!("other"))],
    Expect::Deny(422, &["spec.workloadRef"])
)]
#[case::parent(
    vec![set("/request/object/spec/parentCompositePodGroupName", json!("train-1"))],
    Expect::Deny(422, &["spec.parentCompositePodGroupName"])
)]
#[case::gang_to_basic(
    vec![set("/request/object/spec/schedulingPolicy", json!({"basic": {}})), set("/request/object/spec/disruptionMode", json!({"single": {}})), set("/request/oldObject/spec/disruptionMode", json!({"single": {}}))],
    Expect::Deny(422, &["spec.schedulingPolicy", "spec.schedulingPolicy.basic", "spec.schedulingPolicy.gang"])
)]
#[case::every_immutable_field(
    vec![set("/request/object/spec/priority", json!(5)), set("/request/object/spec/workloadRef/workloadName", json!("x"))],
    Expect::Deny(422, &["spec.priority", "spec.workloadRef"])
)]
#[tokio::test]
async fn pod_group_update(#[case] edits: Vec<Edit>, #[case] expect: Expect) {
    judge(VALIDATE_PG, "podgroup-update.json", &edits, expect).await;
}

#[tokio::test]
async fn class_deleted_after_create_does_not_block_updates() {
    let review = fixture("podgroup-update.json");
    let empty = AdmissionState::new(Arc::new(ClusterIndex::with_priority_classes(&[])));
    let resp = response_of(&send(empty, VALIDATE_PG, &review).await, &review);
    check_verdict(&resp, Expect::Allow);
}

/// Errors carry the API server's error types: an absent or zero `minCount`
/// is `Required`, an empty union `Invalid`, a repeated entry `Duplicate`.
#[tokio::test]
async fn causes_carry_the_api_servers_error_types() {
    let resp = judge(
        VALIDATE_PG,
        "podgroup-create.json",
        &[
            set("/request/object/spec/schedulingPolicy/gang/minCount", json!(0)),
            set("/request/object/spec/disruptionMode", json!({})),
            set(
                "/request/object/spec/resourceClaims",
                json!([{"name": "a", "resourceClaimName": "x"}, {"name": "a", "resourceClaimName": "y"}]),
            ),
        ],
        Expect::Deny(
            422,
            &["spec.schedulingPolicy.gang.minCount", "spec.disruptionMode", "spec.resourceClaims[1]"],
        ),
    )
    .await;
    let causes: Vec<(&str, &str)> = resp["status"]["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| Some((c["field"].as_str()?, c["reason"].as_str()?)))
        .collect();
    for expected in [
        ("spec.schedulingPolicy.gang.minCount", "FieldValueRequired"),
        ("spec.disruptionMode", "FieldValueInvalid"),
        ("spec.resourceClaims[1]", "FieldValueDuplicate"),
    ] {
        assert!(causes.contains(&expected), "{expected:?} not in {causes:?}");
    }
}

/// Admission writes nothing into groups: an accepted PodGroup,
/// CompositePodGroup or Workload comes back without a patch, with or
/// without a `priority` beside its class, and a differing `priority` is
/// refused with the field and both values named, not corrected.
#[tokio::test]
async fn admission_writes_no_priority_into_groups() {
    for (path, fixture_name, priority) in [
        (
            VALIDATE_PG,
            "podgroup-create.json",
            "/request/object/spec/priority",
        ),
        (
            VALIDATE_CPG,
            "compositepodgroup-create.json",
            "/request/object/spec/priority",
        ),
    ] {
        for edits in [vec![], vec![remove(priority)]] {
            let resp = judge(path, fixture_name, &edits, Expect::Allow).await;
            assert!(resp.get("patch").is_none(), "{path}: {resp:#}");
            assert!(resp.get("patchType").is_none(), "{path}: {resp:#}");
        }
        let resp = judge(
            path,
            fixture_name,
            &[set(priority, json!(7))],
            Expect::Deny(403, &["spec.priority"]),
        )
        .await;
        let message = resp["status"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("spec.priority: Forbidden: the integer value of priority (7)")
                && message.contains("1000")
                && message.contains("high-priority"),
            "{message}"
        );
    }
    let resp = judge(VALIDATE_WL, "workload-create.json", &[], Expect::Allow).await;
    assert!(resp.get("patch").is_none(), "{resp:#}");
}

#[tokio::test]
async fn unsynced_class_cache_fails_closed() {
    let review = fixture("podgroup-create.json");
    let unsynced = AdmissionState::new(Arc::new(ClusterIndex::new()));
    let resp = response_of(&send(unsynced.clone(), VALIDATE_PG, &review).await, &review);
    check_verdict(&resp, Expect::Deny(503, &["spec.priorityClassName"]));
    let message = resp["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("fail closed"), "{message}");
    assert!(message.contains("not synced"), "{message}");
    // Nothing to look up: no need to wait for the cache.
    let review = apply_edits(review, &[remove("/request/object/spec/priorityClassName")]);
    let resp = response_of(&send(unsynced, VALIDATE_PG, &review).await, &review);
    check_verdict(&resp, Expect::Allow);
}

// === CompositePodGroup ===

const VALIDATE_CPG: &str = "/admission/validate/compositepodgroups";

#[rstest]
#[case::valid(vec![], Expect::Allow)]
#[case::min_group_count_zero(
    vec![set("/request/object/spec/schedulingPolicy/gang/minGroupCount", json!(0))],
    Expect::Deny(422, &["spec.schedulingPolicy.gang.minGroupCount"])
)]
#[case::both_policies(vec![set("/request/object/spec/schedulingPolicy/basic", json!({}))], Expect::Deny(422, &["spec.schedulingPolicy"]))]
#[case::all_with_basic(vec![set("/request/object/spec/schedulingPolicy", json!({"basic": {}}))], Expect::Deny(422, &["spec.disruptionMode.all"]))]
#[case::two_topologies(
    vec![set("/request/object/spec/schedulingConstraints/topology/1", json!({"key": "rack"}))],
    Expect::Deny(422, &["spec.schedulingConstraints.topology"])
)]
#[case::missing_class(vec![set("/request/object/spec/priorityClassName", json!("nope"))], Expect::Deny(403, &["spec.priorityClassName"]))]
#[case::bad_workload_ref(vec![set("/request/object/spec/workloadRef/templateName", json!("Train"))], Expect::Deny(422, &["spec.workloadRef.templateName"]))]
#[case::missing_workload_ref(vec![remove("/request/object/spec/workloadRef")], Expect::Deny(422, &["spec.workloadRef"]))]
#[case::priority_differs_from_class(vec![set("/request/object/spec/priority", json!(999))], Expect::Deny(403, &["spec.priority"]))]
#[case::min_group_count_absent(
    vec![set("/request/object/spec/schedulingPolicy/gang", json!({}))],
    Expect::Deny(422, &["spec.schedulingPolicy.gang.minGroupCount"])
)]
#[tokio::test]
async fn composite_pod_group_create(#[case] edits: Vec<Edit>, #[case] expect: Expect) {
    judge(
        VALIDATE_CPG,
        "compositepodgroup-create.json",
        &edits,
        expect,
    )
    .await;
}

#[rstest]
#[case::labels_only(vec![], Expect::Allow)]
#[case::min_group_count_immutable(
    vec![set("/request/object/spec/schedulingPolicy/gang/minGroupCount", json!(3))],
    Expect::Deny(422, &["spec.schedulingPolicy"])
)]
#[case::topology(vec![set("/request/object/spec/schedulingConstraints", json!({}))], Expect::Deny(422, &["spec.schedulingConstraints"]))]
#[case::disruption(vec![set("/request/object/spec/disruptionMode", json!({"single": {}}))], Expect::Deny(422, &["spec.disruptionMode"]))]
#[case::class(vec![remove("/request/object/spec/priorityClassName")], Expect::Deny(422, &["spec.priorityClassName"]))]
#[case::workload_ref(vec![set("/request/object/spec/workloadRef/workloadName", json!("other"))], Expect::Deny(422, &["spec.workloadRef"]))]
#[case::workload_ref_removed(vec![remove("/request/object/spec/workloadRef")], Expect::Deny(422, &["spec.workloadRef"]))]
#[case::parent(vec![set("/request/object/spec/parentCompositePodGroupName", json!("root"))], Expect::Deny(422, &["spec.parentCompositePodGroupName"]))]
#[tokio::test]
async fn composite_pod_group_update(#[case] edits: Vec<Edit>, #[case] expect: Expect) {
    judge(
        VALIDATE_CPG,
        "compositepodgroup-update.json",
        &edits,
        expect,
    )
    .await;
}

// === Workload ===

const VALIDATE_WL: &str = "/admission/validate/workloads";
const PODS0: &str = "/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates";

fn pod_template(name: &str) -> Value {
    json!({
        "name": name,
        "schedulingPolicy": {"gang": {"minCount": 2}},
        "priorityClassName": "high-priority",
        "priority": 1000,
        "preemptionPolicy": "PreemptLowerPriority"
    })
}

fn pod_templates(n: usize) -> Value {
    Value::Array((0..n).map(|i| pod_template(&format!("w{i}"))).collect())
}

/// Composite templates nested `levels` deep, a pod group template at the bottom.
fn nested(levels: usize) -> Value {
    let mut inner = json!({"podGroupTemplates": [pod_template("leaf")]});
    for i in (0..levels).rev() {
        let mut t = json!({
            "name": format!("level-{i}"),
            "schedulingPolicy": {"gang": {"minGroupCount": 1}},
            "priorityClassName": "high-priority",
            "priority": 1000,
            "preemptionPolicy": "PreemptLowerPriority"
        });
        for (k, v) in inner.as_object().into_iter().flatten() {
            t[k] = v.clone();
        }
        inner = json!({"compositePodGroupTemplates": [t]});
    }
    inner["compositePodGroupTemplates"].clone()
}

#[rstest]
#[case::valid(vec![], Expect::Allow)]
#[case::both_lists(vec![set("/request/object/spec/podGroupTemplates", json!([pod_template("solo")]))], Expect::Deny(422, &["spec"]))]
#[case::no_list(vec![remove("/request/object/spec/compositePodGroupTemplates")], Expect::Deny(422, &["spec"]))]
#[case::nine_templates(vec![set(PODS0, pod_templates(9))], Expect::Deny(422, &["spec.compositePodGroupTemplates[0].podGroupTemplates"]))]
#[case::eight_templates(vec![set(PODS0, pod_templates(8))], Expect::Allow)]
#[case::duplicate_names(
    vec![set("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/1", pod_template("workers"))],
    Expect::Deny(422, &["spec.compositePodGroupTemplates[0].podGroupTemplates[1]"])
)]
#[case::name_reused_across_levels(
    vec![set("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/0/name", json!("train"))],
    Expect::Deny(422, &["spec.compositePodGroupTemplates[0].podGroupTemplates[0].name"])
)]
#[case::depth_four(vec![set("/request/object/spec/compositePodGroupTemplates", nested(3))], Expect::Allow)]
#[case::depth_five(
    vec![set("/request/object/spec/compositePodGroupTemplates", nested(4))],
    Expect::Deny(422, &["spec.compositePodGroupTemplates[0]"])
)]
#[case::two_priority_configs(
    vec![set("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/0/priority", json!(10))],
    Expect::Deny(422, &["spec", "spec.compositePodGroupTemplates[0].podGroupTemplates[0].priority"])
)]
#[case::preemption_policies_may_differ(
    vec![set("/request/object/spec/compositePodGroupTemplates/0/preemptionPolicy", json!("Never"))],
    Expect::Allow
)]
#[case::controller_ref_kind_with_slash(
    vec![set("/request/object/spec/controllerRef/kind", json!("Jo/b"))],
    Expect::Deny(422, &["spec.controllerRef.kind"])
)]
#[case::controller_ref_bad_api_group(
    vec![set("/request/object/spec/controllerRef/apiGroup", json!("Batch_v1"))],
    Expect::Deny(422, &["spec.controllerRef.apiGroup"])
)]
#[case::priority_too_high(
    vec![
        set("/request/object/spec/compositePodGroupTemplates/0/priority", json!(1_000_000_001)),
        set("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/0/priority", json!(1_000_000_001)),
        remove("/request/object/spec/compositePodGroupTemplates/0/priorityClassName"),
        remove("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/0/priorityClassName"),
    ],
    Expect::Deny(422, &["spec.compositePodGroupTemplates[0].priority", "spec.compositePodGroupTemplates[0].podGroupTemplates[0].priority"])
)]
#[case::topology_key_with_long_prefix_label(
    vec![set("/request/object/spec/compositePodGroupTemplates/0/schedulingConstraints/topology/0/key",
        json!(format!("{}.example.com/zone", "z".repeat(64))))],
    Expect::Allow
)]
#[case::priority_differs_from_class(
    vec![
        set("/request/object/spec/compositePodGroupTemplates/0/priority", json!(5)),
        set("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/0/priority", json!(5)),
    ],
    Expect::Deny(403, &["spec.compositePodGroupTemplates[0].priority", "spec.compositePodGroupTemplates[0].podGroupTemplates[0].priority"])
)]
#[case::min_count_zero(
    vec![set("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/0/schedulingPolicy/gang/minCount", json!(0))],
    Expect::Deny(422, &["spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingPolicy.gang.minCount"])
)]
#[case::min_group_count_zero(
    vec![set("/request/object/spec/compositePodGroupTemplates/0/schedulingPolicy/gang/minGroupCount", json!(0))],
    Expect::Deny(422, &["spec.compositePodGroupTemplates[0].schedulingPolicy.gang.minGroupCount"])
)]
#[case::all_with_basic(
    vec![set("/request/object/spec/compositePodGroupTemplates/0/schedulingPolicy", json!({"basic": {}}))],
    Expect::Deny(422, &["spec.compositePodGroupTemplates[0].disruptionMode.all"])
)]
#[case::two_topologies(
    vec![set("/request/object/spec/compositePodGroupTemplates/0/schedulingConstraints/topology/1", json!({"key": "rack"}))],
    Expect::Deny(422, &["spec.compositePodGroupTemplates[0].schedulingConstraints.topology"])
)]
#[case::five_claims(
    vec![set("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/0/resourceClaims", claims(5))],
    Expect::Deny(422, &["spec.compositePodGroupTemplates[0].podGroupTemplates[0].resourceClaims"])
)]
#[case::missing_class_everywhere(
    vec![set("/request/object/spec/compositePodGroupTemplates/0/priorityClassName", json!("gone")), set("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/0/priorityClassName", json!("gone"))],
    Expect::Deny(403, &["spec.compositePodGroupTemplates[0].priorityClassName", "spec.compositePodGroupTemplates[0].podGroupTemplates[0].priorityClassName"])
)]
#[tokio::test]
async fn workload_create(#[case] edits: Vec<Edit>, #[case] expect: Expect) {
    judge(VALIDATE_WL, "workload-create.json", &edits, expect).await;
}

#[rstest]
#[case::min_count_mutable(vec![], Expect::Allow)]
#[case::controller_ref(vec![set("/request/object/spec/controllerRef/name", json!("other"))], Expect::Deny(422, &["spec.controllerRef"]))]
#[case::template_added(
    vec![set("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/1", pod_template("extra"))],
    Expect::Deny(422, &["spec.compositePodGroupTemplates[0].podGroupTemplates[1]"])
)]
#[case::topology(
    vec![set("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/0/schedulingConstraints", json!({}))],
    Expect::Deny(422, &["spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingConstraints"])
)]
#[case::composite_min_group_count(
    vec![set("/request/object/spec/compositePodGroupTemplates/0/schedulingPolicy/gang/minGroupCount", json!(3))],
    Expect::Deny(422, &["spec.compositePodGroupTemplates[0].schedulingPolicy"])
)]
#[tokio::test]
async fn workload_update(#[case] edits: Vec<Edit>, #[case] expect: Expect) {
    judge(VALIDATE_WL, "workload-update.json", &edits, expect).await;
}

/// Upstream-shaped cases through the real handler: the causes name exactly
/// the fields, in order and with the error types, that the API server's
/// own validation tests expect (`TestDeclarativeValidate` and
/// `TestDeclarativeValidateUpdate` for Workload).
#[rstest]
#[case::duplicate_in_one_list(
    "workload-create.json",
    vec![set("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/1", pod_template("workers"))],
    &[("spec.compositePodGroupTemplates[0].podGroupTemplates[1]", "FieldValueDuplicate")]
)]
#[case::duplicate_across_lists(
    "workload-create.json",
    vec![set("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/0/name", json!("train"))],
    &[("spec.compositePodGroupTemplates[0].podGroupTemplates[0].name", "FieldValueDuplicate")]
)]
#[case::too_deep(
    "workload-create.json",
    vec![set("/request/object/spec/compositePodGroupTemplates", nested(4))],
    &[("spec.compositePodGroupTemplates[0]", "FieldValueInvalid")]
)]
#[case::min_count_zero(
    "workload-create.json",
    vec![set("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/0/schedulingPolicy/gang/minCount", json!(0))],
    &[("spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingPolicy.gang.minCount", "FieldValueRequired")]
)]
#[case::empty_union(
    "workload-create.json",
    vec![set("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/0/schedulingPolicy", json!({}))],
    &[("spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingPolicy", "FieldValueInvalid")]
)]
#[case::controller_ref_missing_kind(
    "workload-create.json",
    vec![set("/request/object/spec/controllerRef/kind", json!(""))],
    &[("spec.controllerRef.kind", "FieldValueRequired")]
)]
#[case::controller_ref_name_with_percent(
    "workload-create.json",
    vec![set("/request/object/spec/controllerRef/name", json!("tr%ain"))],
    &[("spec.controllerRef.name", "FieldValueInvalid")]
)]
#[case::two_priorities(
    "workload-create.json",
    vec![remove("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/0/priorityClassName"), set("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/0/priority", json!(2000))],
    &[("spec", "FieldValueInvalid")]
)]
#[case::template_renamed(
    "workload-update.json",
    vec![set("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/0/name", json!("learners"))],
    &[
        ("spec.compositePodGroupTemplates[0].podGroupTemplates[0]", "FieldValueForbidden"),
        ("spec.compositePodGroupTemplates[0].podGroupTemplates", "FieldValueForbidden"),
    ]
)]
#[case::topology_list_grown(
    "workload-update.json",
    vec![set("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/0/schedulingConstraints/topology/1", json!({"key": "zone"}))],
    &[("spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingConstraints", "FieldValueInvalid")]
)]
#[case::gang_to_basic(
    "workload-update.json",
    vec![set("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/0/schedulingPolicy", json!({"basic": {}}))],
    &[
        ("spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingPolicy.basic", "FieldValueInvalid"),
        ("spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingPolicy.gang", "FieldValueInvalid"),
    ]
)]
#[case::nested_policy_cleared(
    "workload-update.json",
    vec![set("/request/object/spec/compositePodGroupTemplates/0/podGroupTemplates/0/schedulingPolicy", json!({}))],
    &[
        ("spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingPolicy", "FieldValueInvalid"),
        ("spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingPolicy.gang", "FieldValueInvalid"),
    ]
)]
#[case::composite_policy_cleared(
    "workload-update.json",
    vec![set("/request/object/spec/compositePodGroupTemplates/0/schedulingPolicy", json!({}))],
    &[
        ("spec.compositePodGroupTemplates[0].schedulingPolicy", "FieldValueInvalid"),
        ("spec.compositePodGroupTemplates[0].schedulingPolicy.gang", "FieldValueInvalid"),
    ]
)]
#[tokio::test]
async fn upstream_shaped_workload_cases(
    #[case] fixture_name: &str,
    #[case] edits: Vec<Edit>,
    #[case] expected: &[(&str, &str)],
) {
    exact_causes(VALIDATE_WL, fixture_name, &edits, expected).await;
}

/// Upstream `TestDeclarativeValidateUpdate` for CompositePodGroup through
/// the real handler: a changed `schedulingPolicy` is named at the block
/// only, whichever way it changed.
#[rstest]
#[case::gang_to_basic(
    vec![
        set("/request/object/spec/schedulingPolicy", json!({"basic": {}})),
        set("/request/object/spec/disruptionMode", json!({"single": {}})),
        set("/request/oldObject/spec/disruptionMode", json!({"single": {}})),
    ],
    &[("spec.schedulingPolicy", "FieldValueInvalid")]
)]
#[case::basic_to_gang(
    vec![
        set("/request/oldObject/spec/schedulingPolicy", json!({"basic": {}})),
        set("/request/oldObject/spec/disruptionMode", json!({"single": {}})),
        set("/request/object/spec/schedulingPolicy", json!({"gang": {"minGroupCount": 5}})),
        set("/request/object/spec/disruptionMode", json!({"single": {}})),
    ],
    &[("spec.schedulingPolicy", "FieldValueInvalid")]
)]
#[case::min_group_count(
    vec![set("/request/object/spec/schedulingPolicy/gang/minGroupCount", json!(3))],
    &[("spec.schedulingPolicy", "FieldValueInvalid")]
)]
#[case::priority(
    vec![
        set("/request/oldObject/spec/priority", json!(100)),
        remove("/request/oldObject/spec/priorityClassName"),
        set("/request/object/spec/priority", json!(200)),
        remove("/request/object/spec/priorityClassName"),
    ],
    &[("spec.priority", "FieldValueInvalid")]
)]
#[case::workload_ref_removed(
    vec![remove("/request/object/spec/workloadRef")],
    &[("spec.workloadRef", "FieldValueRequired"), ("spec.workloadRef", "FieldValueInvalid")]
)]
#[tokio::test]
async fn upstream_shaped_composite_pod_group_updates(
    #[case] edits: Vec<Edit>,
    #[case] expected: &[(&str, &str)],
) {
    exact_causes(
        VALIDATE_CPG,
        "compositepodgroup-update.json",
        &edits,
        expected,
    )
    .await;
}

/// Sends the edited fixture to `path` and asserts a 422 denial whose causes
/// are exactly `expected` (field, reason), in order.
async fn exact_causes(path: &str, fixture_name: &str, edits: &[Edit], expected: &[(&str, &str)]) {
    let review = apply_edits(fixture(fixture_name), edits);
    let resp = response_of(&send(state(), path, &review).await, &review);
    assert_eq!(resp["allowed"], false, "{resp:#}");
    assert_eq!(resp["status"]["code"], 422, "{resp:#}");
    let causes: Vec<(&str, &str)> = resp["status"]["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| Some((c["field"].as_str()?, c["reason"].as_str()?)))
        .collect();
    assert_eq!(causes, expected, "{resp:#}");
}

// === Pods ===

#[rstest]
#[case::claims_and_group(vec![], Some("a pod with resource claims and a scheduling group"))]
#[case::claims_only(vec![remove("/request/object/spec/schedulingGroup")], Some("resource claims"))]
#[case::group_only(vec![remove("/request/object/spec/resourceClaims")], Some("a scheduling group"))]
#[case::existing_selector(vec![set("/request/object/spec/nodeSelector", json!({"disk": "ssd"}))], Some("resource claims"))]
#[case::plain_pod(vec![remove("/request/object/spec/resourceClaims"), remove("/request/object/spec/schedulingGroup")], None)]
#[case::no_node_name(vec![remove("/request/object/spec/nodeName")], None)]
#[tokio::test]
async fn pod_node_name(#[case] edits: Vec<Edit>, #[case] warning: Option<&str>) {
    let review = apply_edits(fixture("pod-create.json"), &edits);
    let reply = send(state(), "/admission/mutate/pods", &review).await;
    let resp = response_of(&reply, &review);
    check_verdict(&resp, Expect::Allow);
    let before = &review["request"]["object"];
    let after = patched(&review, &resp);
    match warning {
        None => {
            assert!(resp.get("patch").is_none());
            assert_eq!(&after, before);
        }
        Some(why) => {
            assert!(after["spec"].get("nodeName").is_none(), "{after:#}");
            assert_eq!(
                after["spec"]["nodeSelector"]["kubernetes.io/hostname"],
                "node-a"
            );
            if let Some(disk) = before["spec"]["nodeSelector"].get("disk") {
                assert_eq!(&after["spec"]["nodeSelector"]["disk"], disk);
            }
            let warnings = resp["warnings"].as_array().expect("a warning");
            let text = warnings[0].as_str().unwrap_or_default();
            assert!(
                text.contains("spec.nodeName") && text.contains(why),
                "{text}"
            );
            // Nothing else changed.
            let mut rest = after.clone();
            let mut orig = before.clone();
            for v in [&mut rest, &mut orig] {
                if let Some(spec) = v["spec"].as_object_mut() {
                    spec.remove("nodeName");
                    spec.remove("nodeSelector");
                }
            }
            assert_eq!(rest, orig);
        }
    }
}

// === malformed reviews and misrouted requests ===

#[rstest]
#[case::empty(b"".to_vec(), "empty")]
#[case::not_json(b"{not json".to_vec(), "malformed")]
#[case::wrong_version(
    serde_json::to_vec(&apply_edits(fixture("run-create.json"), &[set("/apiVersion", json!("admission.k8s.io/v1beta1"))])).unwrap(),
    "admission.k8s.io/v1beta1"
)]
#[case::no_request(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(), "no request")]
#[case::no_uid(serde_json::to_vec(&apply_edits(fixture("run-create.json"), &[remove("/request/uid")])).unwrap(), "uid")]
#[case::bad_operation(
    serde_json::to_vec(&apply_edits(fixture("run-create.json"), &[set("/request/operation", json!("PATCH"))])).unwrap(),
    "request.operation"
)]
#[tokio::test]
async fn malformed_review_is_http_400(#[case] body: Vec<u8>, #[case] needle: &str) {
    for path in [
        VALIDATE_RUNS,
        "/admission/mutate/runs",
        VALIDATE_PG,
        VALIDATE_CPG,
        VALIDATE_WL,
        "/admission/mutate/pods",
    ] {
        let reply = send_raw(state(), path, body.clone()).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{path}: {}",
            reply.text
        );
        let error = reply.body["error"].as_str().unwrap_or_default();
        assert!(error.contains(needle), "{path}: {error}");
    }
}

#[tokio::test]
async fn oversized_body_is_refused() {
    let body = vec![b' '; kruntimes_scheduler::transport::MAX_BODY_BYTES + 1];
    let reply = send_raw(state(), VALIDATE_RUNS, body).await;
    assert_eq!(
        reply.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        reply.text
    );
    assert!(reply.body["error"].is_string());
}

#[tokio::test]
async fn misrouted_kind_is_denied_as_bad_request() {
    let review = fixture("pod-create.json");
    let resp = response_of(&send(state(), VALIDATE_RUNS, &review).await, &review);
    assert_eq!(resp["allowed"], false);
    assert_eq!(resp["status"]["code"], 400);
    assert!(
        resp["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("kruntimes.io/v1alpha1 Run"),
        "{resp:#}"
    );
}

#[tokio::test]
async fn delete_is_not_judged() {
    let review = apply_edits(
        fixture("podgroup-update.json"),
        &[
            set("/request/operation", json!("DELETE")),
            set("/request/object", Value::Null),
        ],
    );
    let resp = response_of(&send(state(), VALIDATE_PG, &review).await, &review);
    check_verdict(&resp, Expect::Allow);
}

#[tokio::test]
async fn update_without_old_object_is_a_bad_request() {
    let review = apply_edits(
        fixture("run-update.json"),
        &[set("/request/oldObject", Value::Null)],
    );
    let resp = response_of(&send(state(), VALIDATE_RUNS, &review).await, &review);
    assert_eq!(resp["allowed"], false);
    assert_eq!(resp["status"]["code"], 400);
}

/// The kube client builds without a CryptoProvider panic: only ring is
/// compiled into rustls.
#[tokio::test]
async fn kube_client_builds() {
    let config = kube::Config::new("https://127.0.0.1:1".parse().expect("uri"));
    let client = kube::Client::try_from(config);
    assert!(client.is_ok());
}
