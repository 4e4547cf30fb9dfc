//! The write side against the Kubernetes API: Run status through the status
//! subresource with a resourceVersion precondition, and Events.

use super::{
    BindError, ClaimAllocationRef, ClaimRead, ClusterWriter, EventKind, EventReason, EvictError,
    ObjectRef, PodBinding, PodId, WriteError,
};
use crate::crd::{Run, RunStatus};
use crate::model::refs::GroupRef;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::scheduling::v1alpha3::CompositePodGroup;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::{Value, json};

/// Field manager and event reporter name.
pub const MANAGER: &str = "kruntimes-scheduler";

/// Writes through a `kube::Client`.
pub struct KubeWriter {
    client: Client,
    recorder: Recorder,
}

impl KubeWriter {
    pub fn new(client: Client, instance: Option<String>) -> Self {
        let reporter = Reporter {
            controller: MANAGER.into(),
            instance,
        };
        KubeWriter {
            recorder: Recorder::new(client.clone(), reporter),
            client,
        }
    }
}

/// The status as a JSON merge patch body: every field the scheduler owns is
/// present, cleared ones as `null`, so a merge never leaves a stale value.
pub fn status_patch(resource_version: Option<&str>, status: &RunStatus) -> Value {
    let conditions = serde_json::to_value(&status.conditions).unwrap_or(Value::Array(Vec::new()));
    let mut body = json!({
        "status": {
            "phase": status.phase,
            "assignedPod": status.assigned_pod,
            "assignedPodUID": status.assigned_pod_uid,
            "message": status.message,
            "conditions": conditions,
        }
    });
    if let Some(t) = &status.completion_time {
        body["status"]["completionTime"] = json!(t);
    }
    if let Some(rv) = resource_version {
        body["metadata"] = json!({ "resourceVersion": rv });
    }
    body
}

/// The merge patch on `resourceclaims/status` that clears an allocation:
/// `allocation`, `devices` and `reservedFor` removed, with the uid and
/// resourceVersion as preconditions.
pub fn clear_allocation_patch(claim: &ClaimAllocationRef) -> Value {
    let mut meta = serde_json::Map::new();
    if !claim.uid.is_empty() {
        meta.insert("uid".into(), json!(claim.uid));
    }
    if !claim.resource_version.is_empty() {
        meta.insert("resourceVersion".into(), json!(claim.resource_version));
    }
    json!({
        "metadata": meta,
        "status": {"allocation": null, "devices": null, "reservedFor": null},
    })
}

impl ClusterWriter for KubeWriter {
    fn write_run_status<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        resource_version: Option<&'a str>,
        status: &'a RunStatus,
    ) -> BoxFuture<'a, Result<(), WriteError>> {
        Box::pin(async move {
            let api: Api<Run> = Api::namespaced(self.client.clone(), namespace);
            let params = PatchParams {
                field_manager: Some(MANAGER.into()),
                ..PatchParams::default()
            };
            match api
                .patch_status(
                    name,
                    &params,
                    &Patch::Merge(status_patch(resource_version, status)),
                )
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Err(WriteError::Conflict),
                Err(kube::Error::Api(s)) if s.code == 404 => Err(WriteError::NotFound),
                Err(e) => Err(WriteError::Other(e.to_string())),
            }
        })
    }

    fn bind_pod<'a>(&'a self, b: &'a PodBinding) -> BoxFuture<'a, Result<(), BindError>> {
        Box::pin(async move {
            let api: Api<k8s_openapi::api::core::v1::Pod> =
                Api::namespaced(self.client.clone(), &b.namespace);
            let body = binding_body(b);
            let pp = kube::api::PostParams {
                field_manager: Some(MANAGER.into()),
                ..Default::default()
            };
            let res: Result<Value, kube::Error> =
                api.create_subresource("binding", &b.name, &pp, &body).await;
            match res {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) => Err(bind_error(b, s.code, &s.message)),
                // The request may have reached the API server.
                Err(e) => Err(BindError::Uncertain {
                    namespace: b.namespace.clone(),
                    name: b.name.clone(),
                    message: e.to_string(),
                }),
            }
        })
    }

    fn clear_claim_allocation<'a>(
        &'a self,
        claim: &'a ClaimAllocationRef,
    ) -> BoxFuture<'a, Result<(), WriteError>> {
        Box::pin(async move {
            let api: Api<k8s_openapi::api::resource::v1::ResourceClaim> =
                Api::namespaced(self.client.clone(), &claim.namespace);
            let params = PatchParams {
                field_manager: Some(MANAGER.into()),
                ..PatchParams::default()
            };
            match api
                .patch_status(
                    &claim.name,
                    &params,
                    &Patch::Merge(clear_allocation_patch(claim)),
                )
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Err(WriteError::Conflict),
                Err(kube::Error::Api(s)) if s.code == 404 => Err(WriteError::NotFound),
                Err(e) => Err(WriteError::Other(e.to_string())),
            }
        })
    }

    fn read_claim<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<ClaimRead, WriteError>> {
        Box::pin(async move {
            let api: Api<k8s_openapi::api::resource::v1::ResourceClaim> =
                Api::namespaced(self.client.clone(), namespace);
            match api.get(name).await {
                Ok(c) => Ok(ClaimRead::Version(
                    c.metadata.resource_version.unwrap_or_default(),
                )),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(ClaimRead::Gone),
                Err(e) => Err(WriteError::Other(e.to_string())),
            }
        })
    }

    fn write_group_condition<'a>(
        &'a self,
        group: &'a GroupRef,
        condition: &'a Condition,
    ) -> BoxFuture<'a, Result<(), WriteError>> {
        Box::pin(async move {
            // Server-side apply: conditions are a map keyed by type, so this
            // manager owns only its own condition.
            let body = group_condition_apply(group, condition);
            let params = PatchParams::apply(MANAGER).force();
            let res = if group.composite {
                let api: Api<CompositePodGroup> =
                    Api::namespaced(self.client.clone(), &group.namespace);
                api.patch_status(&group.name, &params, &Patch::Apply(body))
                    .await
                    .map(drop)
            } else {
                let api: Api<PodGroup> = Api::namespaced(self.client.clone(), &group.namespace);
                api.patch_status(&group.name, &params, &Patch::Apply(body))
                    .await
                    .map(drop)
            };
            match res {
                Ok(()) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Err(WriteError::Conflict),
                Err(kube::Error::Api(s)) if s.code == 404 => Err(WriteError::NotFound),
                Err(e) => Err(WriteError::Other(e.to_string())),
            }
        })
    }

    fn evict_pod<'a>(&'a self, pod: &'a PodId) -> BoxFuture<'a, Result<(), EvictError>> {
        Box::pin(async move {
            let api: Api<k8s_openapi::api::core::v1::Pod> =
                Api::namespaced(self.client.clone(), &pod.namespace);
            let pp = kube::api::PostParams {
                field_manager: Some(MANAGER.into()),
                ..Default::default()
            };
            // The typed body (kube's own `evict` sends `delete_options`,
            // which the API server does not read, so no uid precondition).
            let res: Result<Value, kube::Error> = api
                .create_subresource("eviction", &pod.name, &pp, &eviction_body(pod))
                .await;
            match res {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) => Err(evict_error(pod, s.code, &s.message)),
                Err(e) => Err(EvictError::Other {
                    pod: pod.to_string(),
                    message: e.to_string(),
                }),
            }
        })
    }

    fn record_event<'a>(
        &'a self,
        object: &'a ObjectRef,
        kind: EventKind,
        reason: EventReason,
        note: &'a str,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let reference = ObjectReference {
                api_version: Some(object.api_version.clone()),
                kind: Some(object.kind.clone()),
                namespace: Some(object.namespace.clone()),
                name: Some(object.name.clone()),
                uid: (!object.uid.is_empty()).then(|| object.uid.clone()),
                ..ObjectReference::default()
            };
            self.publish(&reference, kind, reason.as_str(), note).await;
        })
    }
}

impl KubeWriter {
    async fn publish(
        &self,
        reference: &ObjectReference,
        kind: EventKind,
        reason: &str,
        note: &str,
    ) {
        let event = Event {
            type_: match kind {
                EventKind::Normal => EventType::Normal,
                EventKind::Warning => EventType::Warning,
            },
            reason: reason.into(),
            note: Some(note.chars().take(1024).collect()),
            action: "Scheduling".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, reference).await {
            let object = format!(
                "{}/{}",
                reference.namespace.as_deref().unwrap_or_default(),
                reference.name.as_deref().unwrap_or_default()
            );
            tracing::warn!(%object, error = %e, "recording event failed");
        }
    }
}

/// The server-side apply body setting one condition of a group's status.
pub fn group_condition_apply(group: &GroupRef, condition: &Condition) -> Value {
    json!({
        "apiVersion": ObjectRef::group(group, None).api_version,
        "kind": group.kind(),
        "metadata": {"name": group.name, "namespace": group.namespace},
        "status": {"conditions": [condition]},
    })
}

/// The `Binding` object the API server expects; `metadata.uid` is the
/// precondition that the pod was not replaced meanwhile; its annotations
/// land on the pod with the node (the API server copies them).
pub fn binding_body(b: &PodBinding) -> Value {
    let mut meta = json!({ "name": b.name, "namespace": b.namespace });
    if !b.uid.is_empty() {
        meta["uid"] = json!(b.uid);
    }
    if !b.annotations.is_empty() {
        meta["annotations"] = json!(b.annotations);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": meta,
        "target": { "apiVersion": "v1", "kind": "Node", "name": b.node },
    })
}

/// The `policy/v1` Eviction the API server expects; the pod's uid (when
/// known) is the precondition that it was not replaced meanwhile.
pub fn eviction_body(pod: &PodId) -> Value {
    let mut body = json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod.name, "namespace": pod.namespace},
    });
    if !pod.uid.is_empty() {
        body["deleteOptions"] = json!({"preconditions": {"uid": pod.uid}});
    }
    body
}

/// Maps the API server's answer to an eviction to a precise error: 429 is
/// a PodDisruptionBudget refusal (retry later), 404 a pod already gone, 409
/// a failed uid precondition.
pub fn evict_error(pod: &PodId, code: u16, message: &str) -> EvictError {
    let who = pod.to_string();
    match code {
        404 => EvictError::Gone(who),
        409 => EvictError::Replaced(who),
        429 => EvictError::Refused {
            pod: who,
            message: message.to_owned(),
        },
        _ => EvictError::Other {
            pod: who,
            message: format!("{code}: {message}"),
        },
    }
}

/// Maps the API server's answer to a binding to a precise error.
pub fn bind_error(b: &PodBinding, code: u16, message: &str) -> BindError {
    let (namespace, name) = (b.namespace.clone(), b.name.clone());
    match code {
        404 => BindError::PodGone { namespace, name },
        409 if message.contains("already assigned") || message.contains("already bound") => {
            BindError::AlreadyBound {
                namespace,
                name,
                node: message
                    .rsplit_once("node ")
                    .map(|(_, n)| n.trim_matches(|c: char| c == '"' || c == '.').to_owned())
                    .unwrap_or_default(),
            }
        }
        409 if message.to_ascii_lowercase().contains("uid") => BindError::UidChanged {
            namespace,
            name,
            expected: b.uid.clone(),
            // The API server's precondition message names the current uid.
            actual: message
                .rsplit_once("UID in object meta: ")
                .map(|(_, u)| u.trim().trim_end_matches('.').to_owned())
                .unwrap_or_else(|| "another uid".into()),
        },
        // A server error may come after the write (a 504 once the Binding
        // was stored): whether the pod is bound is for the watch to show.
        500..=599 => BindError::Uncertain {
            namespace,
            name,
            message: format!("{code}: {message}"),
        },
        _ => BindError::Other {
            namespace,
            name,
            message: format!("{code}: {message}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_error_on_a_binding_leaves_its_outcome_unknown() {
        let b = PodBinding {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u".into(),
            node: "n".into(),
            annotations: Default::default(),
        };
        for code in [500, 503, 504] {
            assert!(
                matches!(bind_error(&b, code, "x"), BindError::Uncertain { .. }),
                "{code}"
            );
        }
        for code in [400, 403, 409, 422, 429] {
            assert!(
                matches!(bind_error(&b, code, "x"), BindError::Other { .. }),
                "{code}"
            );
        }
    }

    #[test]
    fn status_patch_clears_what_is_unset() {
        let s = RunStatus {
            phase: Some("Scheduled".into()),
            assigned_pod: Some("rp".into()),
            ..Default::default()
        };
        let p = status_patch(Some("7"), &s);
        assert_eq!(p["metadata"]["resourceVersion"], "7");
        assert_eq!(p["status"]["assignedPodUID"], Value::Null);
        assert!(
            p["status"]
                .as_object()
                .unwrap()
                .contains_key("assignedPodUID")
        );
        // Nothing outside upstream's RunStatus: a structural CRD prunes it.
        assert!(!p["status"].as_object().unwrap().contains_key("reason"));
        assert!(
            !p["status"]
                .as_object()
                .unwrap()
                .contains_key("completionTime")
        );
        assert_eq!(p["status"]["assignedPod"], "rp");
        assert_eq!(p["status"]["conditions"], json!([]));
    }
}
