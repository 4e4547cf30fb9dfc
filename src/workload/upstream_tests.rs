//! Kubernetes' own validation cases for Workload, PodGroup and
//! CompositePodGroup, ported as tables: each case edits a valid object and
//! lists the exact field paths and error types the API server reports.
//!
//! Where the scheduler says more than the API server, the extra error is
//! listed and commented. Cases about feature gates and object metadata
//! have no counterpart here: the webhook judges specs of an API server that
//! already accepted the metadata.

use k8s_openapi::api::scheduling::v1alpha3::CompositePodGroup;
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload};
use serde_json::{Value, json};

use super::FieldErrorKind::{self, Duplicate, Forbidden, Invalid, NotSupported, Required, TooMany};
use super::{validate_composite_pod_group, validate_pod_group, validate_workload};

type Edit = fn(&mut Value);
type Expected = &'static [(&'static str, FieldErrorKind)];

/// A case: name, edits of the new object, expected (path, type) in order.
type Case = (&'static str, &'static [Edit], Expected);
/// An update case: name, edits of the old object, edits of the new one,
/// expected errors.
type UpdateCase = (&'static str, &'static [Edit], &'static [Edit], Expected);

fn at<'v>(v: &'v mut Value, pointer: &str) -> &'v mut Value {
    match v.pointer_mut(pointer) {
        Some(x) => x,
        None => panic!("fixture has no {pointer}"),
    }
}

fn push(v: &mut Value, pointer: &str, item: Value) {
    match at(v, pointer).as_array_mut() {
        Some(list) => list.push(item),
        None => panic!("{pointer} is not a list"),
    }
}

fn gang_template(name: &str) -> Value {
    json!({"name": name, "schedulingPolicy": {"gang": {"minCount": 1}}})
}

fn composite_template(name: &str, children: Value) -> Value {
    json!({"name": name, "schedulingPolicy": {"gang": {"minGroupCount": 1}}, "podGroupTemplates": children})
}

fn claim(name: &str, claim: &str) -> Value {
    json!({"name": name, "resourceClaimName": claim})
}

fn workload() -> Value {
    json!({
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "valid-workload", "namespace": "default"},
        "spec": {"podGroupTemplates": [gang_template("main")]}
    })
}

/// The valid Workload with one composite template `cpg-0` over `main`
/// instead of the top-level pod group template.
fn to_composite(v: &mut Value) {
    let spec = at(v, "/spec");
    spec["compositePodGroupTemplates"] =
        json!([composite_template("cpg-0", json!([gang_template("main")]))]);
    if let Some(spec) = spec.as_object_mut() {
        spec.remove("podGroupTemplates");
    }
}

fn controller_ref(api_group: &str, kind: &str, name: &str) -> impl Fn(&mut Value) {
    let r = json!({"apiGroup": api_group, "kind": kind, "name": name});
    move |v: &mut Value| at(v, "/spec")["controllerRef"] = r.clone()
}

fn topology(v: &mut Value, pointer: &str, keys: &[&str]) {
    let topo: Vec<Value> = keys.iter().map(|k| json!({"key": k})).collect();
    at(v, pointer)["schedulingConstraints"] = json!({"topology": topo});
}

const PG0: &str = "/spec/podGroupTemplates/0";
const CPG0: &str = "/spec/compositePodGroupTemplates/0";
const NESTED0: &str = "/spec/compositePodGroupTemplates/0/podGroupTemplates/0";

fn run<T: serde::de::DeserializeOwned>(base: fn() -> Value, edits: &[Edit], name: &str) -> T {
    let mut v = base();
    for edit in edits {
        edit(&mut v);
    }
    match serde_json::from_value(v) {
        Ok(t) => t,
        Err(e) => panic!("{name}: fixture does not decode: {e}"),
    }
}

fn check<F>(cases: &[Case], validate: F)
where
    F: Fn(&[Edit], &str) -> Vec<super::FieldError>,
{
    let mut failures = Vec::new();
    for (name, edits, expected) in cases {
        let got: Vec<(String, FieldErrorKind)> = validate(edits, name)
            .into_iter()
            .map(|e| (e.path, e.kind))
            .collect();
        let want: Vec<(String, FieldErrorKind)> = expected
            .iter()
            .map(|(p, k)| ((*p).to_owned(), *k))
            .collect();
        if got != want {
            failures.push(format!("{name}:\n  want {want:?}\n  got  {got:?}"));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

// === Workload: create ===

const WORKLOAD_CASES: &[Case] = &[
    ("valid", &[], &[]),
    (
        "empty podGroupTemplates",
        &[|v| at(v, "/spec")["podGroupTemplates"] = json!([])],
        &[("spec", Invalid)],
    ),
    (
        "too many podGroupTemplates",
        &[|v| {
            at(v, "/spec")["podGroupTemplates"] = Value::Array(
                (0..9)
                    .map(|i| gang_template(&format!("group-{i}")))
                    .collect(),
            )
        }],
        &[("spec.podGroupTemplates", TooMany)],
    ),
    (
        "empty podGroupTemplate name",
        &[|v| at(v, PG0)["name"] = json!("")],
        &[("spec.podGroupTemplates[0].name", Required)],
    ),
    (
        "invalid podGroupTemplate name",
        &[|v| at(v, PG0)["name"] = json!("Invalid_Name")],
        &[("spec.podGroupTemplates[0].name", Invalid)],
    ),
    (
        "duplicate podGroupTemplate names",
        &[|v| push(v, "/spec/podGroupTemplates", gang_template("main"))],
        &[("spec.podGroupTemplates[1]", Duplicate)],
    ),
    (
        "gang minCount zero",
        &[|v| at(v, PG0)["schedulingPolicy"]["gang"]["minCount"] = json!(0)],
        &[(
            "spec.podGroupTemplates[0].schedulingPolicy.gang.minCount",
            Required,
        )],
    ),
    (
        "gang minCount absent",
        &[|v| at(v, PG0)["schedulingPolicy"]["gang"] = json!({})],
        &[(
            "spec.podGroupTemplates[0].schedulingPolicy.gang.minCount",
            Required,
        )],
    ),
    (
        "gang minCount negative",
        &[|v| at(v, PG0)["schedulingPolicy"]["gang"]["minCount"] = json!(-1)],
        &[(
            "spec.podGroupTemplates[0].schedulingPolicy.gang.minCount",
            Invalid,
        )],
    ),
    (
        "valid with controllerRef",
        &[|v| controller_ref("apps", "Deployment", "my-deployment")(v)],
        &[],
    ),
    (
        "controllerRef with empty APIGroup",
        &[|v| controller_ref("", "Pod", "my-pod")(v)],
        &[],
    ),
    (
        "controllerRef invalid APIGroup",
        &[|v| controller_ref("invalid_api_group", "Deployment", "my-deployment")(v)],
        &[("spec.controllerRef.apiGroup", Invalid)],
    ),
    (
        "controllerRef too long APIGroup",
        &[|v| controller_ref(&"g".repeat(254), "Deployment", "my-deployment")(v)],
        &[("spec.controllerRef.apiGroup", Invalid)],
    ),
    (
        "controllerRef APIGroup with a 64-character label",
        &[|v| {
            controller_ref(
                &format!("{}.example.com", "g".repeat(64)),
                "Deployment",
                "d",
            )(v)
        }],
        &[],
    ),
    (
        "controllerRef missing kind",
        &[|v| controller_ref("apps", "", "my-deployment")(v)],
        &[("spec.controllerRef.kind", Required)],
    ),
    (
        "controllerRef invalid kind with slash",
        &[|v| controller_ref("apps", "Deploy/ment", "my-deployment")(v)],
        &[("spec.controllerRef.kind", Invalid)],
    ),
    (
        "controllerRef missing name",
        &[|v| controller_ref("apps", "Deployment", "")(v)],
        &[("spec.controllerRef.name", Required)],
    ),
    (
        "controllerRef invalid name",
        &[|v| controller_ref("apps", "Deployment", "/invalid-name")(v)],
        &[("spec.controllerRef.name", Invalid)],
    ),
    (
        "controllerRef invalid kind with percent",
        &[|v| controller_ref("apps", "Deploy%ment", "my-deployment")(v)],
        &[("spec.controllerRef.kind", Invalid)],
    ),
    (
        "controllerRef invalid name with percent",
        &[|v| controller_ref("apps", "Deployment", "my%deployment")(v)],
        &[("spec.controllerRef.name", Invalid)],
    ),
    (
        "controllerRef name dot-dot",
        &[|v| controller_ref("apps", "Deployment", "..")(v)],
        &[("spec.controllerRef.name", Invalid)],
    ),
    (
        "policy with neither basic nor gang",
        &[|v| at(v, PG0)["schedulingPolicy"] = json!({})],
        &[("spec.podGroupTemplates[0].schedulingPolicy", Invalid)],
    ),
    (
        "policy with both basic and gang",
        &[|v| at(v, PG0)["schedulingPolicy"]["basic"] = json!({})],
        &[("spec.podGroupTemplates[0].schedulingPolicy", Invalid)],
    ),
    (
        "valid with basic policy",
        &[|v| at(v, PG0)["schedulingPolicy"] = json!({"basic": {}})],
        &[],
    ),
    (
        "valid with schedulingConstraints",
        &[|v| topology(v, PG0, &["foo"])],
        &[],
    ),
    (
        "valid with empty schedulingConstraints",
        &[|v| at(v, PG0)["schedulingConstraints"] = json!({})],
        &[],
    ),
    (
        "with multiple topology constraints",
        &[|v| topology(v, PG0, &["foo", "bar"])],
        &[(
            "spec.podGroupTemplates[0].schedulingConstraints.topology",
            TooMany,
        )],
    ),
    (
        "with empty topology key",
        &[|v| topology(v, PG0, &[""])],
        &[(
            "spec.podGroupTemplates[0].schedulingConstraints.topology[0].key",
            Required,
        )],
    ),
    (
        "valid with topology key with DNS prefix",
        &[|v| topology(v, PG0, &["example.com/Foo"])],
        &[],
    ),
    (
        "valid with topology key with prefix with max length",
        &[|v| {
            let key = format!("{}/{}", "a".repeat(253), "b".repeat(63));
            topology(v, PG0, &[&key])
        }],
        &[],
    ),
    (
        "valid with topology key with a 64-character prefix label",
        &[|v| {
            let key = format!("{}.example.com/zone", "a".repeat(64));
            topology(v, PG0, &[&key])
        }],
        &[],
    ),
    (
        "with topology key with prefix exceeding max prefix length",
        &[|v| {
            let key = format!("{}/foo", "a".repeat(254));
            topology(v, PG0, &[&key])
        }],
        &[(
            "spec.podGroupTemplates[0].schedulingConstraints.topology[0].key",
            Invalid,
        )],
    ),
    (
        "with topology key with prefix exceeding max name length",
        &[|v| {
            let key = format!("foo/{}", "b".repeat(64));
            topology(v, PG0, &[&key])
        }],
        &[(
            "spec.podGroupTemplates[0].schedulingConstraints.topology[0].key",
            Invalid,
        )],
    ),
    (
        "with topology key without prefix exceeding max length",
        &[|v| topology(v, PG0, &[&"b".repeat(64)])],
        &[(
            "spec.podGroupTemplates[0].schedulingConstraints.topology[0].key",
            Invalid,
        )],
    ),
    (
        "with topology key with invalid characters",
        &[|v| topology(v, PG0, &["Example.com/Foo"])],
        &[(
            "spec.podGroupTemplates[0].schedulingConstraints.topology[0].key",
            Invalid,
        )],
    ),
    (
        "disruption mode single",
        &[|v| at(v, PG0)["disruptionMode"] = json!({"single": {}})],
        &[],
    ),
    (
        "disruption mode all",
        &[|v| at(v, PG0)["disruptionMode"] = json!({"all": {}})],
        &[],
    ),
    (
        "disruption mode with neither single nor all",
        &[|v| at(v, PG0)["disruptionMode"] = json!({})],
        &[("spec.podGroupTemplates[0].disruptionMode", Invalid)],
    ),
    (
        "disruption mode with both single and all",
        &[|v| at(v, PG0)["disruptionMode"] = json!({"single": {}, "all": {}})],
        &[("spec.podGroupTemplates[0].disruptionMode", Invalid)],
    ),
    (
        "valid priorityClassName",
        &[|v| at(v, PG0)["priorityClassName"] = json!("high-priority")],
        &[],
    ),
    (
        "invalid priorityClassName",
        &[|v| at(v, PG0)["priorityClassName"] = json!("high/priority")],
        &[("spec.podGroupTemplates[0].priorityClassName", Invalid)],
    ),
    (
        "valid priority",
        &[|v| at(v, PG0)["priority"] = json!(1000)],
        &[],
    ),
    (
        "valid negative priority",
        &[|v| at(v, PG0)["priority"] = json!(i32::MIN)],
        &[],
    ),
    (
        "highest user-definable priority",
        &[|v| at(v, PG0)["priority"] = json!(1_000_000_000)],
        &[],
    ),
    (
        "too high priority",
        &[|v| at(v, PG0)["priority"] = json!(1_000_000_001)],
        &[("spec.podGroupTemplates[0].priority", Invalid)],
    ),
    (
        "valid PreemptionPolicy",
        &[|v| at(v, PG0)["preemptionPolicy"] = json!("PreemptLowerPriority")],
        &[],
    ),
    (
        "invalid PreemptionPolicy",
        &[|v| at(v, PG0)["preemptionPolicy"] = json!("Invalid")],
        &[("spec.podGroupTemplates[0].preemptionPolicy", NotSupported)],
    ),
    (
        "ok resourceClaimName reference",
        &[|v| at(v, PG0)["resourceClaims"] = json!([claim("claim", "resource-claim")])],
        &[],
    ),
    (
        "ok resourceClaimTemplateName reference",
        &[|v| {
            at(v, PG0)["resourceClaims"] =
                json!([{"name": "claim", "resourceClaimTemplateName": "resource-claim-template"}])
        }],
        &[],
    ),
    (
        "ok multiple claims",
        &[|v| {
            at(v, PG0)["resourceClaims"] = json!([
                claim("claim-1", "resource-claim-1"),
                claim("claim-2", "resource-claim-2")
            ])
        }],
        &[],
    ),
    (
        "claim name with prefix",
        &[|v| at(v, PG0)["resourceClaims"] = json!([claim("../my-claim", "resource-claim")])],
        &[("spec.podGroupTemplates[0].resourceClaims[0].name", Invalid)],
    ),
    (
        "claim name with path",
        &[|v| at(v, PG0)["resourceClaims"] = json!([claim("my/claim", "resource-claim")])],
        &[("spec.podGroupTemplates[0].resourceClaims[0].name", Invalid)],
    ),
    (
        "duplicate claim entries",
        &[|v| {
            at(v, PG0)["resourceClaims"] = json!([
                claim("my-claim", "resource-claim-1"),
                claim("my-claim", "resource-claim-2")
            ])
        }],
        &[("spec.podGroupTemplates[0].resourceClaims[1]", Duplicate)],
    ),
    (
        "resource claim source empty",
        &[|v| at(v, PG0)["resourceClaims"] = json!([{"name": "my-claim"}])],
        &[("spec.podGroupTemplates[0].resourceClaims[0]", Invalid)],
    ),
    (
        "resource claim reference and template",
        &[|v| {
            at(v, PG0)["resourceClaims"] = json!([{"name": "my-claim", "resourceClaimName": "resource-claim",
                "resourceClaimTemplateName": "resource-claim-template"}])
        }],
        &[("spec.podGroupTemplates[0].resourceClaims[0]", Invalid)],
    ),
    (
        "invalid claim reference name",
        &[|v| at(v, PG0)["resourceClaims"] = json!([claim("my-claim", ".foo_bar")])],
        &[(
            "spec.podGroupTemplates[0].resourceClaims[0].resourceClaimName",
            Invalid,
        )],
    ),
    (
        "invalid claim template name",
        &[|v| {
            at(v, PG0)["resourceClaims"] =
                json!([{"name": "my-claim", "resourceClaimTemplateName": ".foo_bar"}])
        }],
        &[(
            "spec.podGroupTemplates[0].resourceClaims[0].resourceClaimTemplateName",
            Invalid,
        )],
    ),
    (
        "too many claims",
        &[|v| {
            at(v, PG0)["resourceClaims"] = Value::Array(
                (0..5)
                    .map(|i| claim(&format!("my-claim-{i}"), "resource-claim"))
                    .collect(),
            )
        }],
        &[("spec.podGroupTemplates[0].resourceClaims", TooMany)],
    ),
    (
        "empty claim name",
        &[|v| at(v, PG0)["resourceClaims"] = json!([claim("", "resource-claim")])],
        &[("spec.podGroupTemplates[0].resourceClaims[0].name", Required)],
    ),
    (
        "empty compositePodGroupTemplates",
        &[|v| {
            let spec = at(v, "/spec");
            spec["podGroupTemplates"] = json!([]);
            spec["compositePodGroupTemplates"] = json!([]);
        }],
        &[("spec", Invalid)],
    ),
    (
        "both podGroupTemplates and compositePodGroupTemplates",
        &[|v| {
            at(v, "/spec")["compositePodGroupTemplates"] =
                json!([composite_template("cpg-0", json!([gang_template("sub")]))])
        }],
        &[("spec", Invalid)],
    ),
    ("valid composite", &[to_composite], &[]),
    (
        "too many compositePodGroupTemplates",
        &[|v| {
            at(v, "/spec")["compositePodGroupTemplates"] = Value::Array(
                (0..9)
                    .map(|i| {
                        composite_template(
                            &format!("cpg-{i}"),
                            json!([gang_template(&format!("pg-{i}"))]),
                        )
                    })
                    .collect(),
            );
            if let Some(spec) = at(v, "/spec").as_object_mut() {
                spec.remove("podGroupTemplates");
            }
        }],
        &[("spec.compositePodGroupTemplates", TooMany)],
    ),
    (
        "duplicate compositePodGroupTemplates",
        &[to_composite, |v| {
            push(
                v,
                "/spec/compositePodGroupTemplates",
                composite_template("cpg-0", json!([gang_template("other")])),
            )
        }],
        &[("spec.compositePodGroupTemplates[1]", Duplicate)],
    ),
    (
        "invalid compositePodGroupTemplate name",
        &[to_composite, |v| {
            at(v, CPG0)["name"] = json!("Invalid_Name")
        }],
        &[("spec.compositePodGroupTemplates[0].name", Invalid)],
    ),
    (
        "empty compositePodGroupTemplate name",
        &[to_composite, |v| at(v, CPG0)["name"] = json!("")],
        &[("spec.compositePodGroupTemplates[0].name", Required)],
    ),
    (
        "too many nested compositePodGroupTemplates",
        &[to_composite, |v| {
            at(v, CPG0)["compositePodGroupTemplates"] = Value::Array(
                (0..9)
                    .map(|i| {
                        composite_template(
                            &format!("sub-{i}"),
                            json!([gang_template(&format!("leaf-{i}"))]),
                        )
                    })
                    .collect(),
            )
        }],
        &[(
            "spec.compositePodGroupTemplates[0].compositePodGroupTemplates",
            TooMany,
        )],
    ),
    (
        "duplicate nested compositePodGroupTemplates",
        &[to_composite, |v| {
            at(v, CPG0)["compositePodGroupTemplates"] = json!([
                composite_template("sub", json!([gang_template("leaf-a")])),
                composite_template("sub", json!([gang_template("leaf-b")])),
            ])
        }],
        &[(
            "spec.compositePodGroupTemplates[0].compositePodGroupTemplates[1]",
            Duplicate,
        )],
    ),
    (
        "cpg empty children",
        &[to_composite, |v| {
            if let Some(t) = at(v, CPG0).as_object_mut() {
                t.remove("podGroupTemplates");
            }
        }],
        &[("spec.compositePodGroupTemplates[0]", Invalid)],
    ),
    (
        "cpg nested child has no children",
        &[
            to_composite,
            |v| {
                at(v, CPG0)["compositePodGroupTemplates"] =
                    json!([{"name": "sub", "schedulingPolicy": {"gang": {"minGroupCount": 1}}}])
            },
        ],
        &[(
            "spec.compositePodGroupTemplates[0].compositePodGroupTemplates[0]",
            Invalid,
        )],
    ),
    (
        "cpg priorityClassName differs from its child",
        &[to_composite, |v| {
            at(v, CPG0)["priorityClassName"] = json!("my-priority")
        }],
        &[("spec", Invalid)],
    ),
    (
        "cpg invalid priorityClassName",
        &[to_composite, |v| {
            at(v, CPG0)["priorityClassName"] = json!("Invalid_Class");
            at(v, NESTED0)["priorityClassName"] = json!("Invalid_Class");
        }],
        &[
            (
                "spec.compositePodGroupTemplates[0].priorityClassName",
                Invalid,
            ),
            (
                "spec.compositePodGroupTemplates[0].podGroupTemplates[0].priorityClassName",
                Invalid,
            ),
        ],
    ),
    (
        "cpg policy missing gang",
        &[to_composite, |v| {
            at(v, CPG0)["schedulingPolicy"] = json!({})
        }],
        &[(
            "spec.compositePodGroupTemplates[0].schedulingPolicy",
            Invalid,
        )],
    ),
    (
        "cpg policy missing gang minGroupCount",
        &[to_composite, |v| {
            at(v, CPG0)["schedulingPolicy"]["gang"]["minGroupCount"] = json!(0)
        }],
        &[(
            "spec.compositePodGroupTemplates[0].schedulingPolicy.gang.minGroupCount",
            Required,
        )],
    ),
    (
        "cpg policy invalid gang minGroupCount",
        &[to_composite, |v| {
            at(v, CPG0)["schedulingPolicy"]["gang"]["minGroupCount"] = json!(-1)
        }],
        &[(
            "spec.compositePodGroupTemplates[0].schedulingPolicy.gang.minGroupCount",
            Invalid,
        )],
    ),
    (
        "too many nested podGroupTemplates",
        &[to_composite, |v| {
            at(v, CPG0)["podGroupTemplates"] =
                Value::Array((0..9).map(|i| gang_template(&format!("pg-{i}"))).collect())
        }],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates",
            TooMany,
        )],
    ),
    (
        "duplicate nested podGroupTemplates",
        &[to_composite, |v| {
            push(
                v,
                "/spec/compositePodGroupTemplates/0/podGroupTemplates",
                gang_template("sub-pg"),
            );
            push(
                v,
                "/spec/compositePodGroupTemplates/0/podGroupTemplates",
                gang_template("sub-pg"),
            );
        }],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[2]",
            Duplicate,
        )],
    ),
    (
        "nested pg empty name",
        &[to_composite, |v| at(v, NESTED0)["name"] = json!("")],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].name",
            Required,
        )],
    ),
    (
        "nested pg invalid name",
        &[to_composite, |v| {
            at(v, NESTED0)["name"] = json!("Invalid_Name")
        }],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].name",
            Invalid,
        )],
    ),
    (
        "nested pg invalid disruptionMode union",
        &[to_composite, |v| {
            at(v, NESTED0)["disruptionMode"] = json!({"single": {}, "all": {}})
        }],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].disruptionMode",
            Invalid,
        )],
    ),
    (
        "nested pg priority differs",
        &[to_composite, |v| at(v, NESTED0)["priority"] = json!(100)],
        &[("spec", Invalid)],
    ),
    (
        "nested pg invalid priority max",
        &[to_composite, |v| {
            at(v, CPG0)["priority"] = json!(1_000_000_001);
            at(v, NESTED0)["priority"] = json!(1_000_000_001);
        }],
        &[
            ("spec.compositePodGroupTemplates[0].priority", Invalid),
            (
                "spec.compositePodGroupTemplates[0].podGroupTemplates[0].priority",
                Invalid,
            ),
        ],
    ),
    (
        "nested pg too many resourceClaims",
        &[to_composite, |v| {
            at(v, NESTED0)["resourceClaims"] =
                Value::Array((0..5).map(|i| claim(&format!("c-{i}"), "rc")).collect())
        }],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].resourceClaims",
            TooMany,
        )],
    ),
    (
        "nested pg duplicate resourceClaims",
        &[to_composite, |v| {
            at(v, NESTED0)["resourceClaims"] = json!([claim("claim1", "a"), claim("claim1", "b")])
        }],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].resourceClaims[1]",
            Duplicate,
        )],
    ),
    (
        "nested pg resourceClaim invalid union",
        &[
            to_composite,
            |v| at(v, NESTED0)["resourceClaims"] = json!([{"name": "claim1", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}]),
        ],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].resourceClaims[0]",
            Invalid,
        )],
    ),
    (
        "nested pg resourceClaim missing name",
        &[to_composite, |v| {
            at(v, NESTED0)["resourceClaims"] = json!([claim("", "a")])
        }],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].resourceClaims[0].name",
            Required,
        )],
    ),
    (
        "nested pg resourceClaim invalid name",
        &[to_composite, |v| {
            at(v, NESTED0)["resourceClaims"] = json!([claim("Invalid_Name", "a")])
        }],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].resourceClaims[0].name",
            Invalid,
        )],
    ),
    (
        "nested pg resourceClaim invalid resourceClaimName",
        &[to_composite, |v| {
            at(v, NESTED0)["resourceClaims"] = json!([claim("c", "Invalid_Ref")])
        }],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].resourceClaims[0].resourceClaimName",
            Invalid,
        )],
    ),
    (
        "nested pg resourceClaim invalid resourceClaimTemplateName",
        &[
            to_composite,
            |v| {
                at(v, NESTED0)["resourceClaims"] =
                    json!([{"name": "c", "resourceClaimTemplateName": "Invalid_Tpl"}])
            },
        ],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].resourceClaims[0].resourceClaimTemplateName",
            Invalid,
        )],
    ),
    (
        "nested pg schedulingConstraints too many topology",
        &[to_composite, |v| topology(v, NESTED0, &["a", "b"])],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingConstraints.topology",
            TooMany,
        )],
    ),
    (
        "nested pg schedulingConstraints topology missing key",
        &[to_composite, |v| topology(v, NESTED0, &[""])],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingConstraints.topology[0].key",
            Required,
        )],
    ),
    (
        "nested pg schedulingConstraints topology invalid key",
        &[to_composite, |v| {
            topology(v, NESTED0, &["invalid/key/slash/format"])
        }],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingConstraints.topology[0].key",
            Invalid,
        )],
    ),
    (
        "nested pg policy invalid union",
        &[to_composite, |v| {
            at(v, NESTED0)["schedulingPolicy"]["basic"] = json!({})
        }],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingPolicy",
            Invalid,
        )],
    ),
    (
        "nested pg policy missing gang minCount",
        &[to_composite, |v| {
            at(v, NESTED0)["schedulingPolicy"]["gang"]["minCount"] = json!(0)
        }],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingPolicy.gang.minCount",
            Required,
        )],
    ),
    (
        "nested pg policy invalid gang minCount",
        &[to_composite, |v| {
            at(v, NESTED0)["schedulingPolicy"]["gang"]["minCount"] = json!(-1)
        }],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingPolicy.gang.minCount",
            Invalid,
        )],
    ),
    (
        "cpg tree depth three is valid",
        &[|v| {
            at(v, "/spec")["podGroupTemplates"] = json!([]);
            at(v, "/spec")["compositePodGroupTemplates"] = json!([{
                "name": "cpg1", "schedulingPolicy": {"basic": {}},
                "compositePodGroupTemplates": [{
                    "name": "cpg2", "schedulingPolicy": {"basic": {}},
                    "compositePodGroupTemplates": [composite_template("cpg3", json!([gang_template("leaf")]))]
                }]
            }]);
            if let Some(spec) = at(v, "/spec").as_object_mut() {
                spec.remove("podGroupTemplates");
            }
        }],
        &[],
    ),
    (
        "exceeds max tree height",
        &[|v| {
            at(v, "/spec")["compositePodGroupTemplates"] = json!([{
                "name": "cpg1", "schedulingPolicy": {"basic": {}},
                "compositePodGroupTemplates": [{
                    "name": "cpg2", "schedulingPolicy": {"basic": {}},
                    "compositePodGroupTemplates": [{
                        "name": "cpg3", "schedulingPolicy": {"basic": {}},
                        "compositePodGroupTemplates": [composite_template("cpg4", json!([gang_template("leaf")]))]
                    }]
                }]
            }]);
            if let Some(spec) = at(v, "/spec").as_object_mut() {
                spec.remove("podGroupTemplates");
            }
        }],
        &[("spec.compositePodGroupTemplates[0]", Invalid)],
    ),
    (
        "mismatched PriorityClassName in root podGroupTemplates",
        &[|v| {
            at(v, PG0)["priorityClassName"] = json!("high-priority");
            push(v, "/spec/podGroupTemplates", gang_template("second-pg"));
            at(v, "/spec/podGroupTemplates/1")["priorityClassName"] = json!("low-priority");
        }],
        &[("spec", Invalid)],
    ),
    (
        "mismatched Priority in root podGroupTemplates",
        &[|v| {
            at(v, PG0)["priority"] = json!(100);
            push(v, "/spec/podGroupTemplates", gang_template("second-pg"));
            at(v, "/spec/podGroupTemplates/1")["priority"] = json!(200);
        }],
        &[("spec", Invalid)],
    ),
    (
        "mismatched PriorityClassName in cpg hierarchy",
        &[to_composite, |v| {
            at(v, CPG0)["priorityClassName"] = json!("high-priority");
            push(
                v,
                "/spec/compositePodGroupTemplates/0/podGroupTemplates",
                gang_template("child-pg-2"),
            );
            at(v, NESTED0)["priorityClassName"] = json!("low-priority");
        }],
        &[("spec", Invalid)],
    ),
    (
        "mismatched Priority in cpg hierarchy",
        &[to_composite, |v| {
            at(v, CPG0)["priority"] = json!(100);
            at(v, NESTED0)["priority"] = json!(200);
        }],
        &[("spec", Invalid)],
    ),
    (
        "same priority everywhere, preemption policies differ",
        &[to_composite, |v| {
            at(v, CPG0)["priority"] = json!(100);
            at(v, CPG0)["preemptionPolicy"] = json!("Never");
            at(v, NESTED0)["priority"] = json!(100);
            at(v, NESTED0)["preemptionPolicy"] = json!("PreemptLowerPriority");
        }],
        &[],
    ),
    (
        "valid nested pg PreemptionPolicy",
        &[to_composite, |v| {
            at(v, NESTED0)["preemptionPolicy"] = json!("PreemptLowerPriority")
        }],
        &[],
    ),
    (
        "invalid nested pg PreemptionPolicy",
        &[to_composite, |v| {
            at(v, NESTED0)["preemptionPolicy"] = json!("Invalid")
        }],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].preemptionPolicy",
            NotSupported,
        )],
    ),
    (
        "duplicate names deep in tree",
        &[|v| {
            at(v, "/spec")["compositePodGroupTemplates"] = json!([{
                "name": "main", "schedulingPolicy": {"basic": {}},
                "compositePodGroupTemplates": [composite_template("main", json!([gang_template("leaf")]))]
            }]);
            if let Some(spec) = at(v, "/spec").as_object_mut() {
                spec.remove("podGroupTemplates");
            }
        }],
        &[(
            "spec.compositePodGroupTemplates[0].compositePodGroupTemplates[0].name",
            Duplicate,
        )],
    ),
    (
        "duplicate names in tree",
        &[|v| {
            at(v, "/spec")["compositePodGroupTemplates"] = json!([{
                "name": "cpg1", "schedulingPolicy": {"basic": {}},
                "compositePodGroupTemplates": [composite_template("cpg2", json!([gang_template("group1")]))],
                "podGroupTemplates": [gang_template("group1")]
            }]);
            if let Some(spec) = at(v, "/spec").as_object_mut() {
                spec.remove("podGroupTemplates");
            }
        }],
        &[(
            "spec.compositePodGroupTemplates[0].compositePodGroupTemplates[0].podGroupTemplates[0].name",
            Duplicate,
        )],
    ),
];

#[test]
fn upstream_workload_cases() {
    check(WORKLOAD_CASES, |edits, name| {
        let w: Workload = run(workload, edits, name);
        validate_workload(&w, None)
    });
}

// === Workload: update ===

fn with_controller_ref(v: &mut Value) {
    controller_ref("apps", "Deployment", "my-deployment")(v)
}

fn add_worker1(v: &mut Value) {
    push(v, "/spec/podGroupTemplates", gang_template("worker1"));
}

fn add_nested_sub(v: &mut Value) {
    at(v, CPG0)["compositePodGroupTemplates"] = json!([composite_template(
        "sub",
        json!([gang_template("sub-leaf")])
    )]);
}

const WORKLOAD_UPDATES: &[UpdateCase] = &[
    ("valid update", &[], &[], &[]),
    (
        "valid update with unchanged controllerRef",
        &[with_controller_ref],
        &[with_controller_ref],
        &[],
    ),
    (
        "valid update with minCount changed",
        &[],
        &[|v| at(v, PG0)["schedulingPolicy"]["gang"]["minCount"] = json!(10)],
        &[],
    ),
    (
        "set controllerRef",
        &[],
        &[|v| controller_ref("apps", "Deployment", "different-deployment")(v)],
        &[("spec.controllerRef", Invalid)],
    ),
    (
        "invalid update controllerRef",
        &[with_controller_ref],
        &[|v| controller_ref("apps", "Deployment", "different-deployment")(v)],
        &[("spec.controllerRef", Invalid)],
    ),
    (
        "unset controllerRef",
        &[with_controller_ref],
        &[],
        &[("spec.controllerRef", Invalid)],
    ),
    (
        "invalid update empty podGroupTemplates",
        &[],
        &[|v| at(v, "/spec")["podGroupTemplates"] = json!([])],
        &[("spec", Invalid), ("spec.podGroupTemplates", Forbidden)],
    ),
    (
        "change podGroupTemplate name",
        &[add_worker1],
        &[|v| push(v, "/spec/podGroupTemplates", gang_template("worker2"))],
        &[
            ("spec.podGroupTemplates[1]", Forbidden),
            ("spec.podGroupTemplates", Forbidden),
        ],
    ),
    (
        "invalid update too many podGroupTemplates",
        &[],
        &[|v| {
            at(v, "/spec")["podGroupTemplates"] = Value::Array(
                (0..9)
                    .map(|i| gang_template(&format!("group-{i}")))
                    .collect(),
            )
        }],
        &[
            ("spec.podGroupTemplates", TooMany),
            ("spec.podGroupTemplates[0]", Forbidden),
            ("spec.podGroupTemplates[1]", Forbidden),
            ("spec.podGroupTemplates[2]", Forbidden),
            ("spec.podGroupTemplates[3]", Forbidden),
            ("spec.podGroupTemplates[4]", Forbidden),
            ("spec.podGroupTemplates[5]", Forbidden),
            ("spec.podGroupTemplates[6]", Forbidden),
            ("spec.podGroupTemplates[7]", Forbidden),
            ("spec.podGroupTemplates[8]", Forbidden),
            ("spec.podGroupTemplates", Forbidden),
        ],
    ),
    (
        "add podGroupTemplate",
        &[],
        &[add_worker1],
        &[("spec.podGroupTemplates[1]", Forbidden)],
    ),
    (
        "remove podGroupTemplate",
        &[add_worker1],
        &[],
        &[("spec.podGroupTemplates", Forbidden)],
    ),
    (
        "invalid update with neither basic nor gang",
        &[],
        &[|v| at(v, PG0)["schedulingPolicy"] = json!({})],
        &[
            ("spec.podGroupTemplates[0].schedulingPolicy", Invalid),
            ("spec.podGroupTemplates[0].schedulingPolicy.gang", Invalid),
        ],
    ),
    (
        "invalid update with both basic and gang",
        &[],
        &[|v| at(v, PG0)["schedulingPolicy"]["basic"] = json!({})],
        &[
            ("spec.podGroupTemplates[0].schedulingPolicy", Invalid),
            ("spec.podGroupTemplates[0].schedulingPolicy.basic", Invalid),
        ],
    ),
    (
        "invalid update of gang minCount",
        &[],
        &[|v| at(v, PG0)["schedulingPolicy"]["gang"]["minCount"] = json!(-1)],
        &[(
            "spec.podGroupTemplates[0].schedulingPolicy.gang.minCount",
            Invalid,
        )],
    ),
    (
        "invalid update from gang to basic policy",
        &[],
        &[|v| at(v, PG0)["schedulingPolicy"] = json!({"basic": {}})],
        &[
            ("spec.podGroupTemplates[0].schedulingPolicy.basic", Invalid),
            ("spec.podGroupTemplates[0].schedulingPolicy.gang", Invalid),
        ],
    ),
    (
        "valid update with unchanged scheduling constraints",
        &[|v| topology(v, PG0, &["foo"])],
        &[|v| topology(v, PG0, &["foo"])],
        &[],
    ),
    (
        "invalid update to scheduling constraints",
        &[|v| topology(v, PG0, &["foo"])],
        &[|v| at(v, PG0)["schedulingConstraints"] = json!({})],
        &[("spec.podGroupTemplates[0].schedulingConstraints", Invalid)],
    ),
    (
        // Reported immutable only: no `Too many` for the list as well.
        "invalid update to topology constraints",
        &[|v| topology(v, PG0, &["foo"])],
        &[|v| topology(v, PG0, &["foo", "bar"])],
        &[("spec.podGroupTemplates[0].schedulingConstraints", Invalid)],
    ),
    (
        "invalid update to topology key",
        &[|v| topology(v, PG0, &["foo"])],
        &[|v| topology(v, PG0, &["bar"])],
        &[("spec.podGroupTemplates[0].schedulingConstraints", Invalid)],
    ),
    (
        "invalid add of resource claims",
        &[],
        &[|v| {
            at(v, PG0)["resourceClaims"] =
                json!([{"name": "my-claim", "resourceClaimTemplateName": "my-template"}])
        }],
        &[("spec.podGroupTemplates[0].resourceClaims", Invalid)],
    ),
    (
        "invalid update of resource claims",
        &[|v| {
            at(v, PG0)["resourceClaims"] =
                json!([{"name": "my-claim", "resourceClaimTemplateName": "my-template"}])
        }],
        &[|v| {
            at(v, PG0)["resourceClaims"] =
                json!([{"name": "my-other-claim", "resourceClaimTemplateName": "my-template"}])
        }],
        &[("spec.podGroupTemplates[0].resourceClaims", Invalid)],
    ),
    (
        "invalid remove of resource claims",
        &[|v| {
            at(v, PG0)["resourceClaims"] =
                json!([{"name": "my-claim", "resourceClaimTemplateName": "my-template"}])
        }],
        &[],
        &[("spec.podGroupTemplates[0].resourceClaims", Invalid)],
    ),
    (
        "invalid update of disruption mode",
        &[|v| at(v, PG0)["disruptionMode"] = json!({"single": {}})],
        &[|v| at(v, PG0)["disruptionMode"] = json!({"all": {}})],
        &[("spec.podGroupTemplates[0].disruptionMode", Invalid)],
    ),
    (
        "invalid update of priority class name",
        &[|v| at(v, PG0)["priorityClassName"] = json!("low-priority")],
        &[|v| at(v, PG0)["priorityClassName"] = json!("high-priority")],
        &[("spec.podGroupTemplates[0].priorityClassName", Invalid)],
    ),
    (
        "invalid update of priority",
        &[|v| at(v, PG0)["priority"] = json!(1000)],
        &[|v| at(v, PG0)["priority"] = json!(2000)],
        &[("spec.podGroupTemplates[0].priority", Invalid)],
    ),
    (
        "valid update with unchanged PreemptionPolicy",
        &[|v| at(v, PG0)["preemptionPolicy"] = json!("PreemptLowerPriority")],
        &[|v| at(v, PG0)["preemptionPolicy"] = json!("PreemptLowerPriority")],
        &[],
    ),
    (
        "invalid update of PreemptionPolicy",
        &[|v| at(v, PG0)["preemptionPolicy"] = json!("PreemptLowerPriority")],
        &[|v| at(v, PG0)["preemptionPolicy"] = json!("Never")],
        &[("spec.podGroupTemplates[0].preemptionPolicy", Invalid)],
    ),
    (
        "invalid update add compositePodGroupTemplates",
        &[],
        &[to_composite],
        &[
            ("spec.podGroupTemplates", Forbidden),
            ("spec.compositePodGroupTemplates[0]", Forbidden),
        ],
    ),
    (
        "invalid update add nested compositePodGroupTemplates",
        &[to_composite],
        &[to_composite, add_nested_sub],
        &[(
            "spec.compositePodGroupTemplates[0].compositePodGroupTemplates[0]",
            Forbidden,
        )],
    ),
    (
        "invalid update remove compositePodGroupTemplates",
        &[to_composite],
        &[],
        &[
            ("spec.podGroupTemplates[0]", Forbidden),
            ("spec.compositePodGroupTemplates", Forbidden),
        ],
    ),
    (
        "invalid update remove nested compositePodGroupTemplates",
        &[to_composite, add_nested_sub],
        &[to_composite],
        &[(
            "spec.compositePodGroupTemplates[0].compositePodGroupTemplates",
            Forbidden,
        )],
    ),
    (
        "invalid update remove nested podGroupTemplates",
        &[to_composite, |v| {
            push(
                v,
                "/spec/compositePodGroupTemplates/0/podGroupTemplates",
                gang_template("sub-pg"),
            )
        }],
        &[to_composite],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates",
            Forbidden,
        )],
    ),
    (
        "invalid update immutable compositePodGroupTemplates",
        &[to_composite],
        &[to_composite, |v| {
            push(
                v,
                "/spec/compositePodGroupTemplates",
                composite_template("another", json!([gang_template("x")])),
            )
        }],
        &[("spec.compositePodGroupTemplates[1]", Forbidden)],
    ),
    (
        "invalid update immutable cpg priorityClassName",
        &[to_composite, |v| {
            at(v, CPG0)["priorityClassName"] = json!("p1");
            at(v, NESTED0)["priorityClassName"] = json!("p1");
        }],
        &[to_composite, |v| {
            at(v, CPG0)["priorityClassName"] = json!("p2");
            at(v, NESTED0)["priorityClassName"] = json!("p2");
        }],
        &[
            (
                "spec.compositePodGroupTemplates[0].priorityClassName",
                Invalid,
            ),
            (
                "spec.compositePodGroupTemplates[0].podGroupTemplates[0].priorityClassName",
                Invalid,
            ),
        ],
    ),
    (
        "invalid update immutable cpg priority",
        &[to_composite, |v| {
            at(v, CPG0)["priority"] = json!(1);
            at(v, NESTED0)["priority"] = json!(1);
        }],
        &[to_composite, |v| {
            at(v, CPG0)["priority"] = json!(2);
            at(v, NESTED0)["priority"] = json!(2);
        }],
        &[
            ("spec.compositePodGroupTemplates[0].priority", Invalid),
            (
                "spec.compositePodGroupTemplates[0].podGroupTemplates[0].priority",
                Invalid,
            ),
        ],
    ),
    (
        "invalid update immutable nested pg disruptionMode",
        &[to_composite, |v| {
            at(v, NESTED0)["disruptionMode"] = json!({"single": {}})
        }],
        &[to_composite, |v| {
            at(v, NESTED0)["disruptionMode"] = json!({"all": {}})
        }],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].disruptionMode",
            Invalid,
        )],
    ),
    (
        "invalid update immutable nested pg schedulingConstraints",
        &[to_composite, |v| {
            at(v, NESTED0)["schedulingConstraints"] = json!({})
        }],
        &[to_composite, |v| topology(v, NESTED0, &["t0"])],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingConstraints",
            Invalid,
        )],
    ),
    (
        "invalid update immutable cpg basic policy",
        &[to_composite, |v| {
            at(v, CPG0)["schedulingPolicy"] = json!({"basic": {}})
        }],
        &[to_composite, |v| {
            at(v, CPG0)["schedulingPolicy"] = json!({})
        }],
        &[
            (
                "spec.compositePodGroupTemplates[0].schedulingPolicy",
                Invalid,
            ),
            (
                "spec.compositePodGroupTemplates[0].schedulingPolicy.basic",
                Invalid,
            ),
        ],
    ),
    (
        "invalid update immutable cpg gang policy",
        &[to_composite],
        &[to_composite, |v| {
            at(v, CPG0)["schedulingPolicy"] = json!({})
        }],
        &[
            (
                "spec.compositePodGroupTemplates[0].schedulingPolicy",
                Invalid,
            ),
            (
                "spec.compositePodGroupTemplates[0].schedulingPolicy.gang",
                Invalid,
            ),
        ],
    ),
    (
        "invalid update nested pg from gang to basic policy",
        &[to_composite],
        &[to_composite, |v| {
            at(v, NESTED0)["schedulingPolicy"] = json!({"basic": {}})
        }],
        &[
            (
                "spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingPolicy.basic",
                Invalid,
            ),
            (
                "spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingPolicy.gang",
                Invalid,
            ),
        ],
    ),
    (
        "invalid update nested pg with neither basic nor gang",
        &[to_composite],
        &[to_composite, |v| {
            at(v, NESTED0)["schedulingPolicy"] = json!({})
        }],
        &[
            (
                "spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingPolicy",
                Invalid,
            ),
            (
                "spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingPolicy.gang",
                Invalid,
            ),
        ],
    ),
    (
        "invalid update of nested pg PreemptionPolicy",
        &[to_composite, |v| {
            at(v, NESTED0)["preemptionPolicy"] = json!("PreemptLowerPriority")
        }],
        &[to_composite, |v| {
            at(v, NESTED0)["preemptionPolicy"] = json!("Never")
        }],
        &[(
            "spec.compositePodGroupTemplates[0].podGroupTemplates[0].preemptionPolicy",
            Invalid,
        )],
    ),
];

#[test]
fn upstream_workload_update_cases() {
    let mut failures = Vec::new();
    for (name, old_edits, new_edits, expected) in WORKLOAD_UPDATES {
        let old: Workload = run(workload, old_edits, name);
        let new: Workload = run(workload, new_edits, name);
        let got: Vec<(String, FieldErrorKind)> = validate_workload(&new, Some(&old))
            .into_iter()
            .map(|e| (e.path, e.kind))
            .collect();
        let want: Vec<(String, FieldErrorKind)> = expected
            .iter()
            .map(|(p, k)| ((*p).to_owned(), *k))
            .collect();
        if got != want {
            failures.push(format!("{name}:\n  want {want:?}\n  got  {got:?}"));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

// === PodGroup ===

fn pod_group() -> Value {
    json!({
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "ns"},
        "spec": {
            "workloadRef": {"workloadName": "w", "templateName": "t1"},
            "schedulingPolicy": {"gang": {"minCount": 5}},
            "schedulingConstraints": {"topology": [{"key": "foo"}]}
        }
    })
}

const SPEC: &str = "/spec";

const POD_GROUP_CASES: &[Case] = &[
    ("valid", &[], &[]),
    (
        "valid with basic policy",
        &[|v| at(v, SPEC)["schedulingPolicy"] = json!({"basic": {}})],
        &[],
    ),
    (
        "gang minCount zero",
        &[|v| at(v, SPEC)["schedulingPolicy"]["gang"]["minCount"] = json!(0)],
        &[("spec.schedulingPolicy.gang.minCount", Required)],
    ),
    (
        "gang minCount negative",
        &[|v| at(v, SPEC)["schedulingPolicy"]["gang"]["minCount"] = json!(-1)],
        &[("spec.schedulingPolicy.gang.minCount", Invalid)],
    ),
    (
        "no workloadRef",
        &[|v| {
            if let Some(s) = at(v, SPEC).as_object_mut() {
                s.remove("workloadRef");
            }
        }],
        &[],
    ),
    (
        "workloadRef with empty template name",
        &[|v| at(v, SPEC)["workloadRef"]["templateName"] = json!("")],
        &[("spec.workloadRef.templateName", Required)],
    ),
    (
        "workloadRef invalid template name",
        &[|v| at(v, SPEC)["workloadRef"]["templateName"] = json!("temp/late")],
        &[("spec.workloadRef.templateName", Invalid)],
    ),
    (
        "workloadRef with empty workload name",
        &[|v| at(v, SPEC)["workloadRef"]["workloadName"] = json!("")],
        &[("spec.workloadRef.workloadName", Required)],
    ),
    (
        "workloadRef invalid workload name",
        &[|v| at(v, SPEC)["workloadRef"]["workloadName"] = json!("work/load")],
        &[("spec.workloadRef.workloadName", Invalid)],
    ),
    (
        "workloadRef too long workload name",
        &[|v| at(v, SPEC)["workloadRef"]["workloadName"] = json!("g".repeat(254))],
        &[("spec.workloadRef.workloadName", Invalid)],
    ),
    (
        "workloadRef too long template name",
        &[|v| at(v, SPEC)["workloadRef"]["templateName"] = json!("g".repeat(254))],
        &[("spec.workloadRef.templateName", Invalid)],
    ),
    (
        "policy with neither basic nor gang",
        &[|v| at(v, SPEC)["schedulingPolicy"] = json!({})],
        &[("spec.schedulingPolicy", Invalid)],
    ),
    (
        "policy with both basic and gang",
        &[|v| at(v, SPEC)["schedulingPolicy"]["basic"] = json!({})],
        &[("spec.schedulingPolicy", Invalid)],
    ),
    (
        "schedulingConstraints with multiple topology constraints",
        &[|v| topology(v, SPEC, &["foo", "bar"])],
        &[("spec.schedulingConstraints.topology", TooMany)],
    ),
    (
        "valid with empty schedulingConstraints",
        &[|v| at(v, SPEC)["schedulingConstraints"] = json!({})],
        &[],
    ),
    (
        "topologyConstraint with empty topology key",
        &[|v| topology(v, SPEC, &[""])],
        &[("spec.schedulingConstraints.topology[0].key", Required)],
    ),
    (
        "valid with topology key with DNS prefix",
        &[|v| topology(v, SPEC, &["example.com/Foo"])],
        &[],
    ),
    (
        "valid with topology key with prefix with max length",
        &[|v| {
            let key = format!("{}/{}", "a".repeat(253), "b".repeat(63));
            topology(v, SPEC, &[&key])
        }],
        &[],
    ),
    (
        "with topology key with prefix exceeding max prefix length",
        &[|v| {
            let key = format!("{}/foo", "a".repeat(254));
            topology(v, SPEC, &[&key])
        }],
        &[("spec.schedulingConstraints.topology[0].key", Invalid)],
    ),
    (
        "with topology key with prefix exceeding max name length",
        &[|v| {
            let key = format!("foo/{}", "b".repeat(64));
            topology(v, SPEC, &[&key])
        }],
        &[("spec.schedulingConstraints.topology[0].key", Invalid)],
    ),
    (
        "with topology key without prefix exceeding max length",
        &[|v| topology(v, SPEC, &[&"b".repeat(64)])],
        &[("spec.schedulingConstraints.topology[0].key", Invalid)],
    ),
    (
        "with topology key with invalid characters",
        &[|v| topology(v, SPEC, &["Example.com/Foo"])],
        &[("spec.schedulingConstraints.topology[0].key", Invalid)],
    ),
    (
        "valid priority class name",
        &[|v| at(v, SPEC)["priorityClassName"] = json!("high-priority")],
        &[],
    ),
    (
        "invalid priority class name",
        &[|v| at(v, SPEC)["priorityClassName"] = json!("high/priority")],
        &[("spec.priorityClassName", Invalid)],
    ),
    (
        "valid priority",
        &[|v| at(v, SPEC)["priority"] = json!(1000)],
        &[],
    ),
    (
        "valid negative priority",
        &[|v| at(v, SPEC)["priority"] = json!(i32::MIN)],
        &[],
    ),
    (
        "too high priority",
        &[|v| at(v, SPEC)["priority"] = json!(1_000_000_001)],
        &[("spec.priority", Invalid)],
    ),
    (
        "claim name with prefix",
        &[|v| at(v, SPEC)["resourceClaims"] = json!([claim("../my-claim", "resource-claim")])],
        &[("spec.resourceClaims[0].name", Invalid)],
    ),
    (
        "duplicate claim entries",
        &[|v| {
            at(v, SPEC)["resourceClaims"] = json!([
                claim("my-claim", "resource-claim-1"),
                claim("my-claim", "resource-claim-2")
            ])
        }],
        &[("spec.resourceClaims[1]", Duplicate)],
    ),
    (
        "resource claim source empty",
        &[|v| at(v, SPEC)["resourceClaims"] = json!([{"name": "my-claim"}])],
        &[("spec.resourceClaims[0]", Invalid)],
    ),
    (
        "invalid claim reference name",
        &[|v| at(v, SPEC)["resourceClaims"] = json!([claim("my-claim", ".foo_bar")])],
        &[("spec.resourceClaims[0].resourceClaimName", Invalid)],
    ),
];

#[test]
fn upstream_pod_group_cases() {
    check(POD_GROUP_CASES, |edits, name| {
        let pg: PodGroup = run(pod_group, edits, name);
        validate_pod_group(&pg, None)
    });
}

const POD_GROUP_UPDATES: &[UpdateCase] = &[
    ("no change", &[], &[], &[]),
    (
        "minCount may change",
        &[],
        &[|v| at(v, SPEC)["schedulingPolicy"]["gang"]["minCount"] = json!(2)],
        &[],
    ),
    (
        "workloadRef changed",
        &[],
        &[|v| at(v, SPEC)["workloadRef"]["workloadName"] = json!("other")],
        &[("spec.workloadRef", Invalid)],
    ),
    (
        "workloadRef removed",
        &[],
        &[|v| {
            if let Some(s) = at(v, SPEC).as_object_mut() {
                s.remove("workloadRef");
            }
        }],
        &[("spec.workloadRef", Invalid)],
    ),
    (
        // Reported immutable only: no `Too many` for the list as well.
        "topology list changed",
        &[],
        &[|v| topology(v, SPEC, &["foo", "bar"])],
        &[("spec.schedulingConstraints", Invalid)],
    ),
    (
        "gang to basic",
        &[],
        &[|v| at(v, SPEC)["schedulingPolicy"] = json!({"basic": {}})],
        &[
            ("spec.schedulingPolicy", Invalid),
            ("spec.schedulingPolicy.basic", Invalid),
            ("spec.schedulingPolicy.gang", Invalid),
        ],
    ),
];

#[test]
fn upstream_pod_group_update_cases() {
    let mut failures = Vec::new();
    for (name, old_edits, new_edits, expected) in POD_GROUP_UPDATES {
        let old: PodGroup = run(pod_group, old_edits, name);
        let new: PodGroup = run(pod_group, new_edits, name);
        let got: Vec<(String, FieldErrorKind)> = validate_pod_group(&new, Some(&old))
            .into_iter()
            .map(|e| (e.path, e.kind))
            .collect();
        let want: Vec<(String, FieldErrorKind)> = expected
            .iter()
            .map(|(p, k)| ((*p).to_owned(), *k))
            .collect();
        if got != want {
            failures.push(format!("{name}:\n  want {want:?}\n  got  {got:?}"));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

// === CompositePodGroup ===

fn composite_pod_group() -> Value {
    json!({
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": {"name": "cpg", "namespace": "ns"},
        "spec": {
            "workloadRef": {"workloadName": "w", "templateName": "root"},
            "schedulingPolicy": {"gang": {"minGroupCount": 2}}
        }
    })
}

const COMPOSITE_CASES: &[Case] = &[
    ("gang policy", &[], &[]),
    (
        "basic policy",
        &[|v| at(v, SPEC)["schedulingPolicy"] = json!({"basic": {}})],
        &[],
    ),
    (
        "minGroupCount zero",
        &[|v| at(v, SPEC)["schedulingPolicy"]["gang"]["minGroupCount"] = json!(0)],
        &[("spec.schedulingPolicy.gang.minGroupCount", Required)],
    ),
    (
        "minGroupCount absent",
        &[|v| at(v, SPEC)["schedulingPolicy"]["gang"] = json!({})],
        &[("spec.schedulingPolicy.gang.minGroupCount", Required)],
    ),
    (
        "missing workloadRef",
        &[|v| {
            if let Some(s) = at(v, SPEC).as_object_mut() {
                s.remove("workloadRef");
            }
        }],
        &[("spec.workloadRef", Required)],
    ),
    (
        "workloadRef without template name",
        &[|v| at(v, SPEC)["workloadRef"]["templateName"] = json!("")],
        &[("spec.workloadRef.templateName", Required)],
    ),
    (
        "policy with neither basic nor gang",
        &[|v| at(v, SPEC)["schedulingPolicy"] = json!({})],
        &[("spec.schedulingPolicy", Invalid)],
    ),
    (
        "too high priority",
        &[|v| at(v, SPEC)["priority"] = json!(1_000_000_001)],
        &[("spec.priority", Invalid)],
    ),
    (
        "topology key with a 64-character prefix label",
        &[|v| {
            let key = format!("{}.example.com/rack", "r".repeat(64));
            topology(v, SPEC, &[&key])
        }],
        &[],
    ),
    (
        "two topology constraints",
        &[|v| topology(v, SPEC, &["zone", "rack"])],
        &[("spec.schedulingConstraints.topology", TooMany)],
    ),
];

#[test]
fn upstream_composite_pod_group_cases() {
    check(COMPOSITE_CASES, |edits, name| {
        let cpg: CompositePodGroup = run(composite_pod_group, edits, name);
        validate_composite_pod_group(&cpg, None)
    });
}

/// Upstream's `mkValidCompositePodGroup` has the basic policy.
fn basic_policy(v: &mut Value) {
    at(v, SPEC)["schedulingPolicy"] = json!({"basic": {}});
}

fn remove_workload_ref(v: &mut Value) {
    if let Some(s) = at(v, SPEC).as_object_mut() {
        s.remove("workloadRef");
    }
}

/// Upstream `TestDeclarativeValidateUpdate` for CompositePodGroup
/// (`pkg/registry/scheduling/compositepodgroup/declarative_validation_test.go`):
/// every spec field is immutable, and a changed `schedulingPolicy` is named
/// only at the block, never at its variant fields.
const COMPOSITE_UPDATES: &[UpdateCase] = &[
    ("valid update", &[basic_policy], &[basic_policy], &[]),
    (
        "invalid parentCompositePodGroupName update",
        &[basic_policy, |v| {
            at(v, SPEC)["parentCompositePodGroupName"] = json!("parent1")
        }],
        &[basic_policy, |v| {
            at(v, SPEC)["parentCompositePodGroupName"] = json!("parent2")
        }],
        &[("spec.parentCompositePodGroupName", Invalid)],
    ),
    (
        "invalid priority update",
        &[basic_policy, |v| at(v, SPEC)["priority"] = json!(100)],
        &[basic_policy, |v| at(v, SPEC)["priority"] = json!(200)],
        &[("spec.priority", Invalid)],
    ),
    (
        "invalid priorityClassName update",
        &[basic_policy, |v| {
            at(v, SPEC)["priorityClassName"] = json!("low-priority")
        }],
        &[basic_policy, |v| {
            at(v, SPEC)["priorityClassName"] = json!("high-priority")
        }],
        &[("spec.priorityClassName", Invalid)],
    ),
    (
        "invalid schedulingPolicy update",
        &[basic_policy],
        &[|v| at(v, SPEC)["schedulingPolicy"] = json!({"gang": {"minGroupCount": 5}})],
        &[("spec.schedulingPolicy", Invalid)],
    ),
    (
        "invalid workloadRef update",
        &[basic_policy],
        &[basic_policy, remove_workload_ref],
        &[
            ("spec.workloadRef", Required),
            ("spec.workloadRef", Invalid),
        ],
    ),
    (
        "invalid workloadRef.templateName update",
        &[basic_policy],
        &[basic_policy, |v| {
            at(v, SPEC)["workloadRef"]["templateName"] = json!("other-template")
        }],
        &[("spec.workloadRef", Invalid)],
    ),
    (
        "invalid workloadRef.workloadName update",
        &[basic_policy],
        &[basic_policy, |v| {
            at(v, SPEC)["workloadRef"]["workloadName"] = json!("other-workload")
        }],
        &[("spec.workloadRef", Invalid)],
    ),
    // Not an upstream row: the other direction and a changed minimum are
    // reported the same way.
    (
        "gang to basic",
        &[],
        &[basic_policy],
        &[("spec.schedulingPolicy", Invalid)],
    ),
    (
        "minGroupCount changed",
        &[],
        &[|v| at(v, SPEC)["schedulingPolicy"]["gang"]["minGroupCount"] = json!(3)],
        &[("spec.schedulingPolicy", Invalid)],
    ),
];

#[test]
fn upstream_composite_pod_group_update_cases() {
    let mut failures = Vec::new();
    for (name, old_edits, new_edits, expected) in COMPOSITE_UPDATES {
        let old: CompositePodGroup = run(composite_pod_group, old_edits, name);
        let new: CompositePodGroup = run(composite_pod_group, new_edits, name);
        let got: Vec<(String, FieldErrorKind)> = validate_composite_pod_group(&new, Some(&old))
            .into_iter()
            .map(|e| (e.path, e.kind))
            .collect();
        let want: Vec<(String, FieldErrorKind)> = expected
            .iter()
            .map(|(p, k)| ((*p).to_owned(), *k))
            .collect();
        if got != want {
            failures.push(format!("{name}:\n  want {want:?}\n  got  {got:?}"));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn composite_pod_group_workload_ref_changes_are_reported_at_the_ref() {
    let old: CompositePodGroup = run(composite_pod_group, &[], "old");
    for (name, edit) in [
        (
            "changed",
            (|v| at(v, SPEC)["workloadRef"]["workloadName"] = json!("other")) as Edit,
        ),
        ("removed", |v| {
            if let Some(s) = at(v, SPEC).as_object_mut() {
                s.remove("workloadRef");
            }
        }),
    ] {
        let new: CompositePodGroup = run(composite_pod_group, &[edit], name);
        let got: Vec<(String, FieldErrorKind)> = validate_composite_pod_group(&new, Some(&old))
            .into_iter()
            .map(|e| (e.path, e.kind))
            .filter(|(p, _)| p.starts_with("spec.workloadRef"))
            .collect();
        let want = match name {
            "removed" => vec![
                ("spec.workloadRef".to_owned(), Required),
                ("spec.workloadRef".to_owned(), Invalid),
            ],
            _ => vec![("spec.workloadRef".to_owned(), Invalid)],
        };
        assert_eq!(got, want, "{name}");
    }
}
