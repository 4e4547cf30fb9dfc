//! `examples/manifests/agent-sidecar.yaml` is valid Kubernetes: every document
//! decodes into its typed object and loses no field on the way (so a typo in
//! a field name fails here), and the agent's flags in it exist.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kruntimes_scheduler::cluster::load::load_path;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::Path;

fn roundtrip<T: DeserializeOwned + Serialize>(doc: &Value) -> Value {
    let typed: T = serde_json::from_value(doc.clone()).expect("decodes into its type");
    serde_json::to_value(&typed).expect("encodes")
}

#[test]
fn agent_sidecar_manifest_is_valid_kubernetes() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/manifests/agent-sidecar.yaml");
    let docs = load_path(&path).expect("parses");
    let kinds: Vec<&str> = docs
        .iter()
        .filter_map(|d| d.get("kind").and_then(Value::as_str))
        .collect();
    assert_eq!(
        kinds,
        ["ServiceAccount", "Role", "RoleBinding", "Deployment"]
    );
    for doc in &docs {
        let back = match doc["kind"].as_str() {
            Some("ServiceAccount") => roundtrip::<ServiceAccount>(doc),
            Some("Role") => roundtrip::<Role>(doc),
            Some("RoleBinding") => roundtrip::<RoleBinding>(doc),
            Some("Deployment") => roundtrip::<Deployment>(doc),
            other => panic!("unexpected kind {other:?}"),
        };
        assert_eq!(&back, doc, "a field was dropped: unknown or misspelled");
    }
    let deploy: Deployment = serde_json::from_value(docs[3].clone()).expect("deployment");
    let spec = deploy.spec.template.spec.expect("pod spec");
    let agent = spec
        .containers
        .iter()
        .find(|c| c.name == "agent")
        .expect("agent container");
    let env: Vec<&str> = agent
        .env
        .iter()
        .flatten()
        .map(|e| e.name.as_str())
        .collect();
    for var in ["KRS_AGENT_SOCKET", "KRS_AGENT_POD", "KRS_AGENT_NAMESPACE"] {
        assert!(env.contains(&var), "{var}");
    }
    let role: Role = serde_json::from_value(docs[1].clone()).expect("role");
    let rules = role.rules.unwrap_or_default();
    for (group, resource) in [("", "pods"), ("kruntimes.io", "runs")] {
        assert!(
            rules
                .iter()
                .any(|r| r.api_groups.iter().flatten().any(|g| g == group)
                    && r.resources.iter().flatten().any(|x| x == resource)
                    && ["get", "list", "watch"]
                        .iter()
                        .all(|v| r.verbs.iter().any(|x| x == v))),
            "{resource}"
        );
    }
}
