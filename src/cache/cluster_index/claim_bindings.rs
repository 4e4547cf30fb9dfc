//! What the node cache keeps of a ResourceClaim for DRA binding conditions:
//! the devices whose allocation carries `bindingConditions` or
//! `bindingFailureConditions`, the conditions the drivers report in
//! `status.devices[]`, the allocation's identity and the claim's consumers.
//! Claims without such devices are not kept here: nothing gates their bind.

use super::{ClusterState, Key, key_of};
use k8s_openapi::api::resource::v1::ResourceClaim;
use std::collections::{BTreeSet, HashMap};

/// A device of an allocation, as `status.devices[]` names it:
/// `(driver, pool, device, shareID)`.
pub type ShareKey = (String, String, String, Option<String>);

/// An allocated device that gates binding.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GatedDevice {
    /// The device, as `status.devices[]` names it.
    pub device: ShareKey,
    /// Every one must be `True` in the device's status before binding.
    pub binding_conditions: Vec<String>,
    /// Any one `True` means binding failed.
    pub failure_conditions: Vec<String>,
}

/// A claim's binding state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimBinding {
    /// `(namespace, name)`.
    pub key: Key,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
    /// Identifies this allocation (its timestamp and devices): a claim that
    /// is allocated again is a new allocation.
    pub allocation: String,
    /// `status.allocation.allocationTimestamp`: the binding timeout counts
    /// from it.
    pub allocated_at: Option<k8s_openapi::jiff::Timestamp>,
    /// Devices with binding or failure conditions.
    pub gated: Vec<GatedDevice>,
    /// Condition types reported `True`, per device.
    pub true_conditions: HashMap<ShareKey, BTreeSet<String>>,
    /// UIDs of the consumers in `status.reservedFor`.
    pub reserved_for: Vec<String>,
}

impl ClaimBinding {
    /// The binding state of an allocated claim with gated devices, else `None`.
    pub fn from_claim(claim: &ResourceClaim) -> Option<ClaimBinding> {
        let status = claim.status.as_ref()?;
        let allocation = status.allocation.as_ref()?;
        let results = allocation.devices.as_ref()?.results.as_ref()?;
        let gated: Vec<GatedDevice> = results
            .iter()
            .filter(|r| {
                r.binding_conditions.as_ref().is_some_and(|c| !c.is_empty())
                    || r.binding_failure_conditions
                        .as_ref()
                        .is_some_and(|c| !c.is_empty())
            })
            .map(|r| GatedDevice {
                device: (
                    r.driver.clone(),
                    r.pool.clone(),
                    r.device.clone(),
                    r.share_id.clone(),
                ),
                binding_conditions: r.binding_conditions.clone().unwrap_or_default(),
                failure_conditions: r.binding_failure_conditions.clone().unwrap_or_default(),
            })
            .collect();
        if gated.is_empty() {
            return None;
        }
        let mut identity = allocation
            .allocation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default();
        for r in results {
            identity.push_str(&format!(
                "|{}/{}/{}/{}",
                r.driver,
                r.pool,
                r.device,
                r.share_id.as_deref().unwrap_or_default()
            ));
        }
        let true_conditions = status
            .devices
            .iter()
            .flatten()
            .map(|d| {
                (
                    (
                        d.driver.clone(),
                        d.pool.clone(),
                        d.device.clone(),
                        d.share_id.clone(),
                    ),
                    d.conditions
                        .iter()
                        .flatten()
                        .filter(|c| c.status == "True")
                        .map(|c| c.type_.clone())
                        .collect(),
                )
            })
            .collect();
        Some(ClaimBinding {
            key: key_of(&claim.metadata),
            uid: claim.metadata.uid.clone().unwrap_or_default(),
            resource_version: claim.metadata.resource_version.clone().unwrap_or_default(),
            allocation: identity,
            allocated_at: allocation.allocation_timestamp.as_ref().map(|t| t.0),
            gated,
            true_conditions,
            reserved_for: status
                .reserved_for
                .iter()
                .flatten()
                .map(|r| r.uid.clone())
                .collect(),
        })
    }
}

// === impl ClusterState ===

impl ClusterState {
    /// The binding state of a claim (`namespace/name`), when it gates binding.
    pub fn claim_binding(&self, qualified: &str) -> Option<&ClaimBinding> {
        self.claim_bindings.get(qualified)
    }

    /// `(claim uid, allocation)` of every claim allocation that gates
    /// binding ([`ClaimBinding::allocation`]).
    pub fn gated_allocations(&self) -> impl Iterator<Item = (&str, &str)> {
        self.claim_bindings
            .values()
            .map(|b| (b.uid.as_str(), b.allocation.as_str()))
    }

    /// Whether the cache holds the claim (`namespace/name`) allocated.
    pub fn claim_allocated(&self, qualified: &str) -> bool {
        self.claims.contains_key(qualified)
    }

    pub(super) fn set_claim_binding(&mut self, qualified: &str, claim: &ResourceClaim) {
        match ClaimBinding::from_claim(claim) {
            Some(b) => {
                self.follow_remembered(qualified, Some(&b));
                self.claim_bindings.insert(qualified.to_owned(), b);
            }
            None => {
                self.follow_remembered(qualified, None);
                self.claim_bindings.remove(qualified);
            }
        }
    }

    /// A gated claim's new version against the versions remembered for
    /// pods whose earlier bind ended ([`ClusterIndex::record_passed`],
    /// [`ClusterIndex::record_bind_ended`]): once it shows the pod no
    /// longer reserved (kube-scheduler's Unreserve) or the claim no longer
    /// gated, the cache has caught up with that bind and the memory goes;
    /// a version that still shows the pod reserved (the driver's condition
    /// written before the Unreserve, delivered after it) is remembered in
    /// its place: the Unreserve is still to come.
    pub(super) fn follow_remembered(&mut self, qualified: &str, b: Option<&ClaimBinding>) {
        if self.passed.is_empty() {
            return;
        }
        self.passed.retain(|_, (uid, _, claims)| {
            claims.retain_mut(|(c, rv)| {
                if c != qualified {
                    return true;
                }
                match b {
                    Some(b) if b.reserved_for.iter().any(|r| r == uid) => {
                        rv.clone_from(&b.resource_version);
                        true
                    }
                    _ => false,
                }
            });
            !claims.is_empty()
        });
    }
}
