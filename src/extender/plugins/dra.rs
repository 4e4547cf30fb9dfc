//! The DRA overhead plugin: what a pending pod's own allocated
//! ResourceClaims take from a node is added to its requests (the same
//! everywhere but on the nodes of its devices). PreFilter resolves the
//! adjusted requests once; the fit plugin's Filter then reads
//! [`ClaimRequests::on`] per node. It scores nothing (prioritize scores the
//! pod's own requests, as kube-scheduler's least-allocated does).

use super::fit::{self, Resolved};
use crate::cache::cluster_index::ClusterState;
use crate::pods::fit::Amounts;
use crate::pods::fit::{ClaimRef, pod_claims};
use k8s_openapi::api::core::v1::Pod;

/// The pod's requests resolved for fit, with its claims' load.
#[derive(Debug, Clone)]
pub struct ClaimRequests {
    /// On every node not listed in `special`.
    everywhere: Resolved,
    /// On these slots instead.
    special: Vec<(u32, Resolved)>,
}

impl ClaimRequests {
    /// The request on a node's slot (`None`: a node the cache does not know).
    pub fn on(&self, slot: Option<u32>) -> &Resolved {
        slot.and_then(|slot| self.special.iter().find(|(s, _)| *s == slot))
            .map_or(&self.everywhere, |(_, r)| r)
    }
}

/// Resolves the pod's requests plus what its allocated claims take.
pub fn prefilter(snap: &ClusterState, pod: &Pod, requests: &Amounts) -> ClaimRequests {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let claims: Vec<ClaimRef> = pod
        .spec
        .as_ref()
        .map(|s| pod_claims(s, pod.status.as_ref()))
        .unwrap_or_default()
        .into_iter()
        .map(|c| ClaimRef {
            claim: format!("{ns}/{}", c.claim),
            refs: c.refs,
        })
        .collect();
    if claims.is_empty() {
        return ClaimRequests {
            everywhere: fit::resolve(snap, requests),
            special: Vec::new(),
        };
    }
    let load = snap.pending_claims_load(&claims);
    let plus = |extra: &Amounts| {
        let mut r = requests.clone();
        for (k, v) in extra {
            let e = r.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(*v);
        }
        fit::resolve(snap, &r)
    };
    let special = load.on.iter().map(|(slot, a)| (*slot, plus(a))).collect();
    ClaimRequests {
        everywhere: plus(&load.everywhere),
        special,
    }
}
