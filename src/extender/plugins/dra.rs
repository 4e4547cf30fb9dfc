//! The DRA plugin (kube-scheduler's `DynamicResources`, as far as an
//! extender sees it).
//!
//! PreFilter, pod-wide:
//! - a member of a PodGroup that references one of the group's
//!   `resourceClaims` by name must refer to the same ResourceClaim or
//!   ResourceClaimTemplate (unresolvable otherwise, naming both);
//! - an allocated claim whose device maps a node resource cannot be shared:
//!   reserved for another consumer, or already counted with another pod, it
//!   is unresolvable with upstream's message. Overhead-only claims and the
//!   PodGroup's own claims may be shared.
//!
//! PreFilter, per node: what the pod's own allocated claims take from a
//! node is added to its requests (the same everywhere but on the nodes
//! their devices reach), inside the pod-level budget for the resources
//! pod-level requests name. The fit plugin's Filter then reads
//! [`ClaimRequests::on`] per node. It scores nothing (prioritize scores the
//! pod's own requests, as kube-scheduler's least-allocated does).

use super::fit::{self, Resolved};
use crate::cache::cluster_index::{ClusterState, Rejection};
use crate::pods::dra::{self as rules, ClaimUse};
use crate::pods::fit::{Amounts, ClaimRef, PodLevel, claim_refs, pod_claims, with_dra};
use k8s_openapi::api::core::v1::Pod;

/// The pod's requests resolved for fit, with its claims' load; `Err`: the
/// claims' DRA amounts do not fit the pod's own pod-level budget there.
pub type NodeRequest = Result<Resolved, Rejection>;

/// The pod's requests resolved for fit, with its claims' load.
#[derive(Debug, Clone)]
pub struct ClaimRequests {
    /// On every node not listed in `special`.
    everywhere: NodeRequest,
    /// On these slots instead.
    special: Vec<(u32, NodeRequest)>,
}

impl ClaimRequests {
    /// The request on a node's slot (`None`: a node the cache does not know).
    pub fn on(&self, slot: Option<u32>) -> Result<&Resolved, &Rejection> {
        slot.and_then(|slot| self.special.iter().find(|(s, _)| *s == slot))
            .map_or(&self.everywhere, |(_, r)| r)
            .as_ref()
    }
}

/// The pod's PodGroup (with its `namespace/name`) when the group has
/// claims.
fn group_with_claims<'a>(
    snap: &'a ClusterState,
    pod: &Pod,
) -> Option<(String, &'a k8s_openapi::api::scheduling::v1beta1::PodGroup)> {
    let (ns, g) = crate::extender::gang::group_of(pod)?;
    let group = snap.group(ns, g)?;
    group
        .spec
        .resource_claims
        .as_ref()
        .is_some_and(|c| !c.is_empty())
        .then(|| (format!("{ns}/{g}"), group))
}

/// The ResourceClaims the pod uses, qualified `namespace/name`, with the
/// names of the pod claims that are its PodGroup's (`Err`: a pod claim
/// under a group claim's name refers to another object). A group claim
/// from a template resolves through the pod's status, else the PodGroup's
/// `status.resourceClaimStatuses`.
pub fn claims_of(snap: &ClusterState, pod: &Pod) -> Result<(Vec<ClaimRef>, Vec<String>), String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(Default::default());
    };
    let mut claims: Vec<ClaimRef> = pod_claims(spec, pod.status.as_ref());
    let mut group_claims = Vec::new();
    if let Some((gname, group)) = group_with_claims(snap, pod) {
        let pod_claims = spec.resource_claims.as_deref().unwrap_or_default();
        let gcs = group.spec.resource_claims.as_deref().unwrap_or_default();
        let names = rules::group_claims(pod_claims, &gname, gcs)?;
        let status_name = |n: &str| {
            pod.status
                .as_ref()
                .and_then(|s| s.resource_claim_statuses.as_ref())
                .and_then(|st| st.iter().find(|s| s.name == n))
                .and_then(|s| s.resource_claim_name.clone())
        };
        let group_status_name = |n: &str| {
            group
                .status
                .as_ref()
                .and_then(|s| s.resource_claim_statuses.as_ref())
                .and_then(|st| st.iter().find(|s| s.name == n))
                .and_then(|s| s.resource_claim_name.clone())
        };
        for name in names {
            let Some(pc) = pod_claims.iter().find(|p| p.name == name) else {
                continue;
            };
            let Some(claim) = pc
                .resource_claim_name
                .clone()
                .or_else(|| status_name(name))
                .or_else(|| group_status_name(name))
            else {
                continue;
            };
            if !claims.iter().any(|x| x.claim == claim) {
                // A group template the pod's status does not resolve yet:
                // `pod_claims` skipped it; count its container references.
                let refs = claim_refs(spec, name);
                claims.push(ClaimRef {
                    claim: claim.clone(),
                    refs,
                });
            }
            group_claims.push(format!("{ns}/{claim}"));
        }
    }
    for c in &mut claims {
        c.claim = format!("{ns}/{}", c.claim);
    }
    Ok((claims, group_claims))
}

/// PreFilter, pod-wide: the group claim rule and the sharing rule.
pub fn prefilter_wide(
    snap: &ClusterState,
    pod: &Pod,
    claims: &Result<(Vec<ClaimRef>, Vec<String>), String>,
) -> Option<Rejection> {
    let unresolvable = |message: String| Rejection {
        message,
        unresolvable: true,
    };
    let (claims, group_claims) = match claims {
        Ok(c) => c,
        Err(e) => return Some(unresolvable(e.clone())),
    };
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let key = (ns.to_owned(), pod.metadata.name.clone().unwrap_or_default());
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let group = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_group.as_ref())
        .and_then(|g| g.pod_group_name.as_deref());
    for c in claims {
        let Some((mapped, reserved_for, used_by_other)) = snap.claim_sharing(&c.claim, &key) else {
            continue;
        };
        let name = c.claim.rsplit('/').next().unwrap_or(&c.claim);
        let refused = rules::sharing_refused(
            &ClaimUse {
                name,
                mapped,
                reserved_for,
                used_by_other,
                group_claim: group_claims.contains(&c.claim),
            },
            uid,
            group,
        );
        if let Some(message) = refused {
            return Some(unresolvable(message));
        }
    }
    None
}

/// Resolves the pod's requests plus what its allocated claims take, per
/// node.
pub fn prefilter(
    snap: &ClusterState,
    claims: &[ClaimRef],
    requests: &Amounts,
    level: &PodLevel,
) -> ClaimRequests {
    if claims.is_empty() {
        return ClaimRequests {
            everywhere: Ok(fit::resolve(snap, requests)),
            special: Vec::new(),
        };
    }
    let load = snap.pending_claims_load(claims);
    let plus = |extra: &Amounts| match with_dra(requests, level, extra) {
        Ok(r) => Ok(fit::resolve(snap, &r)),
        Err(message) => Err(Rejection {
            message,
            unresolvable: true,
        }),
    };
    let special = load.on.iter().map(|(slot, a)| (*slot, plus(a))).collect();
    ClaimRequests {
        everywhere: plus(&load.everywhere),
        special,
    }
}
