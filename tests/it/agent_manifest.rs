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
    // The agent is a native sidecar: an init container that keeps running,
    // with a startup probe, so the socket answers before runtimed starts.
    let agent = spec
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == "agent")
        .expect("agent init container");
    assert_eq!(agent.restart_policy.as_deref(), Some("Always"));
    let probe = agent
        .startup_probe
        .as_ref()
        .and_then(|p| p.exec.as_ref())
        .and_then(|e| e.command.clone())
        .expect("exec startup probe");
    assert!(
        probe.ends_with(&["agent".to_owned(), "--probe".to_owned()]),
        "{probe:?}"
    );
    assert!(spec.containers.iter().all(|c| c.name != "agent"));
    // Pinned images, and the `restricted` Pod Security Standard.
    let all: Vec<&k8s_openapi::api::core::v1::Container> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .collect();
    for c in &all {
        let image = c.image.as_deref().expect("image");
        let tag = image.rsplit_once(':').map(|(_, t)| t);
        assert!(
            image.contains("@sha256:") || tag.is_some_and(|t| t != "latest" && !t.contains('/')),
            "{}: pin the image ({image})",
            c.name
        );
    }
    let agent_image = agent.image.as_deref().unwrap_or_default();
    let kustomization = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/kustomization.yaml"),
    )
    .expect("kustomization");
    let release = kustomization
        .lines()
        .find_map(|l| l.trim().strip_prefix("newTag: "))
        .expect("the install's image tag");
    assert_eq!(
        agent_image,
        format!("kruntimes/kruntimes-scheduler:{release}"),
        "the agent runs the install's release"
    );
    let pod_sc = spec.security_context.as_ref().expect("pod securityContext");
    assert_eq!(pod_sc.run_as_non_root, Some(true));
    assert_eq!(
        pod_sc.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
        Some("RuntimeDefault")
    );
    for c in &all {
        let sc = c
            .security_context
            .as_ref()
            .expect("container securityContext");
        assert_eq!(sc.allow_privilege_escalation, Some(false), "{}", c.name);
        assert_eq!(
            sc.capabilities.as_ref().and_then(|k| k.drop.clone()),
            Some(vec!["ALL".to_owned()]),
            "{}",
            c.name
        );
        assert!(sc.privileged != Some(true) && sc.run_as_non_root != Some(false));
        assert!(sc.run_as_user.is_some_and(|u| u != 0), "{}", c.name);
    }
    assert!(
        spec.volumes
            .iter()
            .flatten()
            .all(|v| v.empty_dir.is_some() || v.config_map.is_some() || v.secret.is_some()),
        "restricted allows no hostPath"
    );
    assert!(spec.host_network != Some(true) && spec.host_pid != Some(true));
    let env = |c: &k8s_openapi::api::core::v1::Container, var: &str| {
        c.env
            .iter()
            .flatten()
            .find(|e| e.name == var)
            .map(|e| e.value.clone())
    };
    for var in ["KRS_AGENT_SOCKET", "KRS_AGENT_POD", "KRS_AGENT_NAMESPACE"] {
        assert!(env(agent, var).is_some(), "{var}");
    }
    // Every agent variable is a flag of `agent` (KRS_LOG_FORMAT is global).
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        agent: kruntimes_scheduler::agent::AgentArgs,
    }
    let cmd = <Cli as clap::CommandFactory>::command();
    let known: Vec<String> = cmd
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect();
    for e in agent.env.iter().flatten() {
        if e.name.starts_with("KRS_") && e.name != "KRS_LOG_FORMAT" {
            assert!(known.contains(&e.name), "{} is not a flag of agent", e.name);
        }
    }
    // runtimed runs under its own uid, the one the agent allows.
    let runtimed = spec
        .containers
        .iter()
        .find(|c| c.name == "runtimed")
        .expect("runtimed container");
    let uid = |c: &k8s_openapi::api::core::v1::Container| {
        c.security_context
            .as_ref()
            .and_then(|s| s.run_as_user)
            .expect("runAsUser")
    };
    assert_ne!(uid(agent), uid(runtimed));
    assert_eq!(
        env(agent, "KRS_AGENT_RUNTIMED_UID").flatten(),
        Some(uid(runtimed).to_string())
    );
    // The socket sits in a directory the agent creates inside the shared
    // volume (the volume's root is writable by everyone), and runtimed
    // uses that path.
    let socket = env(agent, "KRS_AGENT_SOCKET").flatten().expect("socket");
    let mount = agent
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "agent-socket")
        .expect("socket volume mounted");
    let dir = Path::new(&socket).parent().expect("socket dir");
    assert!(
        dir.starts_with(&mount.mount_path) && dir != Path::new(&mount.mount_path),
        "{socket} must be in a subdirectory of {}",
        mount.mount_path
    );
    assert_eq!(
        env(runtimed, "KRUNTIMES_AGENT_SOCKET").flatten(),
        Some(socket.clone())
    );
    // The journal beside the socket is on tmpfs (an in-memory emptyDir):
    // it outlives container restarts and needs no fdatasync.
    let volume = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "agent-socket")
        .and_then(|v| v.empty_dir.as_ref())
        .expect("socket volume is an emptyDir");
    assert_eq!(volume.medium.as_deref(), Some("Memory"));
    assert!(
        env(agent, "KRS_AGENT_JOURNAL").is_none() && env(agent, "KRS_AGENT_NO_JOURNAL").is_none()
    );
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
