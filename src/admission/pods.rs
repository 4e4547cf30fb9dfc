//! Pod webhook (opt-in): a Pod created with `spec.nodeName` set skips the
//! scheduler, and with it gang quorum, topology and DRA device allocation.
//! When such a Pod needs the scheduler (it has resource claims or a
//! scheduling group), the webhook moves the node choice into a
//! `kubernetes.io/hostname` node selector instead, so the Pod still lands on
//! that node but through the scheduler.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation};
use kube::core::admission::AdmissionResponse;
use serde_json::{Value, json};

use super::review::{self, Request, Scope, Target};

/// `v1` Pod.
pub const POD: Target = Target {
    group: "",
    version: "v1",
    kind: "Pod",
};

/// The well-known node label the selector uses.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// `POST /admission/mutate/pods`: see the module documentation. Only CREATE
/// is mutated (`nodeName` cannot be changed by an update).
pub fn mutate_pod(req: &Request) -> AdmissionResponse {
    let new = match review::scope(req, &POD) {
        Ok(Scope::Judge { new, old: None }) => new,
        Ok(_) => return review::allow(req),
        Err(msg) => return review::bad_request(req, msg),
    };
    match node_name_patch(&new.data) {
        Some((patch, warning)) => review::allow_with_patch(req, patch, vec![warning]),
        None => review::allow(req),
    }
}

/// The patch (and the warning to show) for a Pod's JSON, `None` when the
/// Pod is left alone.
pub fn node_name_patch(data: &Value) -> Option<(Patch, String)> {
    let spec = data.get("spec")?.as_object()?;
    let node = spec.get("nodeName")?.as_str().filter(|n| !n.is_empty())?;
    let claims = spec
        .get("resourceClaims")
        .and_then(Value::as_array)
        .is_some_and(|c| !c.is_empty());
    let group = spec
        .get("schedulingGroup")
        .and_then(|g| g.get("podGroupName"))
        .and_then(Value::as_str)
        .is_some_and(|g| !g.is_empty());
    if !claims && !group {
        return None;
    }
    let mut ops = vec![PatchOperation::Remove(RemoveOperation {
        path: PointerBuf::from_tokens(["spec", "nodeName"]),
    })];
    match spec.get("nodeSelector") {
        Some(Value::Object(_)) => ops.push(PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["spec", "nodeSelector", HOSTNAME_LABEL]),
            value: json!(node),
        })),
        _ => ops.push(PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["spec", "nodeSelector"]),
            value: json!({ HOSTNAME_LABEL: node }),
        })),
    }
    let why = match (claims, group) {
        (true, true) => "resource claims and a scheduling group",
        (true, false) => "resource claims",
        _ => "a scheduling group",
    };
    let warning = format!(
        "spec.nodeName {node:?} replaced by nodeSelector {HOSTNAME_LABEL}={node}: a pod with {why} must be placed by the scheduler"
    );
    Some((Patch(ops), warning))
}
