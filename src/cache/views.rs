//! Read-only views of the cache, in the JSON shapes of the HTTP API.

use super::RunCache;
use crate::model::runtime_pod::Freshness;
use crate::runs::placement::PendingReason;
use crate::runs::status;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use std::collections::BTreeMap;

/// What planning an existing Run needs: its view, runtime, request (or
/// why it is invalid), the end of its retry backoff, and its affinity with
/// its labels.
pub type RunInputs = (
    RunView,
    String,
    Result<crate::model::resources::Requests, String>,
    Option<Timestamp>,
    Option<(crate::crd::RunAffinity, BTreeMap<String, String>)>,
);

/// One item of `GET /v1/runtime-pods`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RuntimePodView {
    pub namespace: String,
    pub name: String,
    pub runtime: String,
    pub candidate: bool,
    pub reason: Option<String>,
    pub capacity: BTreeMap<String, String>,
    pub usage: BTreeMap<String, String>,
    pub assumed: BTreeMap<String, String>,
}

/// One item of `GET /v1/runs`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunView {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub phase: Option<String>,
    pub assigned_pod: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
}

impl RunCache {
    /// Runtime Pods, optionally filtered, sorted by namespace and name.
    pub fn runtime_pods(
        &self,
        namespace: Option<&str>,
        runtime: Option<&str>,
        now: Timestamp,
    ) -> Vec<RuntimePodView> {
        let window = Freshness::new(now, self.config.heartbeat_stale_after);
        let st = self.state.read();
        let mut nss: Vec<_> = st
            .namespaces
            .iter()
            .filter(|(ns, _)| namespace.is_none_or(|n| n == *ns))
            .collect();
        nss.sort_by(|a, b| a.0.cmp(b.0));
        let mut out = Vec::new();
        for (ns, state) in nss {
            for (name, slot) in &state.pods {
                let Some(pod) = &slot.pod else { continue };
                let rt = pod.runtime();
                if runtime.is_some_and(|r| r != rt) {
                    continue;
                }
                let avail = pod.available_in(&window);
                out.push(RuntimePodView {
                    namespace: ns.clone(),
                    name: name.to_string(),
                    runtime: rt.to_owned(),
                    candidate: avail.is_ok(),
                    reason: avail
                        .err()
                        .map(|u| format!("{}: {u}", PendingReason::RuntimePodUnavailable)),
                    capacity: slot.res.capacity().to_named(&st.names),
                    usage: slot.res.actual().to_named(&st.names),
                    assumed: slot.res.assumed().to_named(&st.names),
                });
            }
        }
        out
    }

    /// Runs, optionally filtered by namespace, sorted by namespace and name.
    pub fn runs(&self, namespace: Option<&str>) -> Vec<RunView> {
        let st = self.state.read();
        let mut out: Vec<RunView> = st
            .namespaces
            .iter()
            .filter(|(ns, _)| namespace.is_none_or(|n| n == *ns))
            .flat_map(|(ns, state)| {
                state.runs.iter().map(move |(name, e)| RunView {
                    namespace: ns.clone(),
                    name: name.clone(),
                    uid: e.uid.clone(),
                    phase: e.status.phase.clone(),
                    assigned_pod: e.status.assigned_pod.clone(),
                    reason: status::shown_reason(&e.status).map(str::to_owned),
                    message: e.status.message.clone(),
                })
            })
            .collect();
        out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        out
    }

    /// What `GET /v1/explain/run` plans for a cached Run: its view, its
    /// Runtime and its effective requests (`Err`: why its spec is invalid).
    pub fn run_inputs(&self, namespace: &str, name: &str) -> Option<RunInputs> {
        let st = self.state.read();
        let e = st.namespaces.get(namespace)?.runs.get(name)?;
        let view = RunView {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: e.uid.clone(),
            phase: e.status.phase.clone(),
            assigned_pod: e.status.assigned_pod.clone(),
            reason: status::shown_reason(&e.status).map(str::to_owned),
            message: e.status.message.clone(),
        };
        let requests = e.requests.clone().map_err(|err| err.to_string());
        let affinity = e
            .affinity
            .as_ref()
            .map(|a| ((**a).clone(), (*e.labels).clone()));
        Some((view, e.runtime.clone(), requests, e.retry_at, affinity))
    }
}
