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
    /// Slots (sorted) that do not offer the pod's DRA-backed extended
    /// resources themselves and have too few unallocated devices for them
    /// ([`extended_short`]), with the rejection.
    no_devices: Option<(Vec<u32>, Rejection)>,
}

impl ClaimRequests {
    /// The request on a node's slot (`None`: a node the cache does not know).
    pub fn on(&self, slot: Option<u32>) -> Result<&Resolved, &Rejection> {
        if let (Some(slot), Some((slots, why))) = (slot, &self.no_devices)
            && slots.binary_search(&slot).is_ok()
        {
            return Err(why);
        }
        slot.and_then(|slot| self.special.iter().find(|(s, _)| *s == slot))
            .map_or(&self.everywhere, |(_, r)| r)
            .as_ref()
    }
}

/// How many devices a request's DRA-backed extended resources take on a
/// node that does not offer them itself: one per unit of each resource a
/// DeviceClass backs and the node's allocatable does not list.
fn extended_need(snap: &ClusterState, slot: u32, requests: &Amounts) -> u64 {
    requests
        .iter()
        .filter(|(name, want)| **want > 0 && snap.device_classes().backing(name).is_some())
        .filter(|(name, _)| {
            snap.resource_id(name)
                .is_none_or(|id| snap.amounts_at(id, slot)[0] == 0)
        })
        .map(|(_, want)| *want)
        .sum()
}

/// The candidate slots, sorted, where the pod's DRA-backed extended
/// resources cannot be allocated: the node does not offer them itself
/// (then the fit plugin counts them) and fewer unallocated devices are
/// available there than the units requested (upstream's DynamicResources
/// Filter: "cannot allocate all claims", unresolvable; `dynamicresources`
/// test "extended-resource-name-no-resource"). Empty, at no cost, for a
/// pod without such resources.
pub fn extended_short(snap: &ClusterState, requests: &Amounts, candidates: &[&str]) -> Vec<u32> {
    let classes = snap.device_classes();
    if classes.is_empty() || !requests.keys().any(|r| classes.backing(r).is_some()) {
        return Vec::new();
    }
    let free = snap.free_devices();
    let mut out: Vec<u32> = candidates
        .iter()
        .filter_map(|name| {
            let slot = snap.find(name)?;
            let node = snap.slot_at(slot)?.node.as_ref()?;
            let need = extended_need(snap, slot, requests);
            (need > free.on(name, &node.labels)).then_some(slot)
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
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
    candidates: &[&str],
) -> ClaimRequests {
    let short = extended_short(snap, requests, candidates);
    let no_devices = (!short.is_empty()).then(|| {
        (
            short,
            Rejection {
                message: rules::CANNOT_ALLOCATE.to_owned(),
                unresolvable: true,
            },
        )
    });
    if claims.is_empty() {
        return ClaimRequests {
            everywhere: Ok(fit::resolve(snap, requests)),
            special: Vec::new(),
            no_devices,
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
        no_devices,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::cluster_index::ClusterIndex;
    use crate::testkit;
    use serde_json::json;

    /// Upstream `dynamicresources` tests with `enableDRAExtendedResource`
    /// (`pkg/scheduler/framework/plugins/dynamicresources/dynamicresources_test.go`):
    /// "extended-resource-name-no-resource" (a DeviceClass names the
    /// resource, no ResourceSlice: the node is unresolvable) and
    /// "extended-resource-name-with-resources" (a device on the node: it
    /// fits); a pod without such resources is never refused here.
    #[test]
    fn upstream_extended_resource_cases() {
        let gpu = "extended.resource.dra.io/something";
        let class = serde_json::from_value(json!({"metadata": {"name": "device-class-name"},
            "spec": {"extendedResourceName": gpu}}))
        .expect("class");
        let slice = serde_json::from_value(json!({"metadata": {"name": "worker-slice"},
            "spec": {"driver": "some-driver", "nodeName": "worker",
                "pool": {"name": "worker", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "instance-1"}]}}))
        .expect("slice");
        let want = |units: u64| -> Amounts { [(gpu.to_owned(), units)].into_iter().collect() };
        let cpu: Amounts = [("cpu".to_owned(), 1000)].into_iter().collect();
        // (name, with slice, request, worker refused)
        let cases = [
            ("extended-resource-name-no-resource", false, want(1), true),
            (
                "extended-resource-name-with-resources",
                true,
                want(1),
                false,
            ),
            ("more units than devices", true, want(2), true),
            ("no DRA-backed resource", false, cpu, false),
        ];
        for (name, with_slice, request, refused) in cases {
            let c = ClusterIndex::new();
            c.apply_node(&testkit::node("worker").allocatable("4", "64Gi").typed());
            c.apply_device_class(&class);
            if with_slice {
                c.apply_slice(&slice);
            }
            let s = c.read();
            let slot = s.find("worker").expect("slot");
            let short = extended_short(&s, &request, &["worker"]);
            assert_eq!(short == [slot], refused, "{name}");
            let r = prefilter(&s, &[], &request, &PodLevel::new(), &["worker"]);
            match r.on(Some(slot)) {
                Err(why) if refused => {
                    assert_eq!(why.message, rules::CANNOT_ALLOCATE, "{name}");
                    assert!(why.unresolvable, "{name}");
                }
                Ok(_) if !refused => {}
                other => panic!("{name}: {other:?}"),
            }
        }
    }
}
