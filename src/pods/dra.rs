//! DRA rules of kube-scheduler 1.37 that are not node arithmetic (that is
//! [`super::fit`]): extended resources backed by DeviceClasses
//! (DRAExtendedResource), who may share a claim whose device maps a node
//! resource, and how a PodGroup's `resourceClaims` bind its members.
//! Pure; the cluster index keeps the objects, the extender's DRA plugin
//! applies the verdicts.

use k8s_openapi::api::core::v1::PodResourceClaim;
use k8s_openapi::api::resource::v1::DeviceClass;
use k8s_openapi::api::scheduling::v1beta1::PodGroupResourceClaim;
use std::collections::BTreeMap;

/// The prefix of the implicit extended resource name of every DeviceClass:
/// `deviceclass.resource.kubernetes.io/<class>`.
pub const IMPLICIT_PREFIX: &str = "deviceclass.resource.kubernetes.io/";

/// Whether `name` can be an extended resource backed by DRA (upstream
/// `schedutil.IsDRAExtendedResourceName`): an extended resource name (has a
/// domain, not `kubernetes.io`, not a `requests.` quota name) or an
/// implicit DeviceClass name.
pub fn is_dra_extended_resource_name(name: &str) -> bool {
    if name.starts_with(IMPLICIT_PREFIX) {
        return true;
    }
    let native = !name.contains('/') || name.contains("kubernetes.io/");
    !native && !name.starts_with("requests.")
}

/// One DeviceClass as the resolver keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ClassEntry {
    /// `spec.extendedResourceName`.
    explicit: Option<String>,
    /// `metadata.creationTimestamp` (RFC 3339, sorts by time; empty: unknown).
    created: String,
}

/// Which DeviceClass satisfies an extended resource (upstream's
/// `DeviceClassResolver`): the class naming it in
/// `spec.extendedResourceName` (of several, the one created last; created
/// at the same time, the name sorted first), else the class of an implicit
/// `deviceclass.resource.kubernetes.io/<class>` name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceClasses {
    classes: BTreeMap<String, ClassEntry>,
}

impl DeviceClasses {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces a class.
    pub fn apply(&mut self, class: &DeviceClass) {
        let Some(name) = class.metadata.name.clone().filter(|n| !n.is_empty()) else {
            return;
        };
        let entry = ClassEntry {
            explicit: class
                .spec
                .as_ref()
                .and_then(|s| s.extended_resource_name.clone())
                .filter(|n| !n.is_empty()),
            created: class
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default(),
        };
        self.classes.insert(name, entry);
    }

    pub fn delete(&mut self, name: &str) {
        self.classes.remove(name);
    }

    /// Replaces every class (a relist).
    pub fn reset(&mut self, classes: &[DeviceClass]) {
        self.classes.clear();
        for c in classes {
            self.apply(c);
        }
    }

    pub fn len(&self) -> usize {
        self.classes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    /// The DeviceClass that satisfies a request for `resource`, if any.
    pub fn backing(&self, resource: &str) -> Option<&str> {
        if !is_dra_extended_resource_name(resource) {
            return None;
        }
        let explicit = self
            .classes
            .iter()
            .filter(|(_, c)| c.explicit.as_deref() == Some(resource))
            // Latest creation first, then the name sorted first.
            .max_by(|(an, a), (bn, b)| a.created.cmp(&b.created).then_with(|| bn.cmp(an)))
            .map(|(n, _)| n.as_str());
        explicit.or_else(|| {
            let class = resource.strip_prefix(IMPLICIT_PREFIX)?;
            self.classes.get_key_value(class).map(|(n, _)| n.as_str())
        })
    }
}

/// Unallocated devices by where they are available, counted once per call
/// (upstream's DynamicResources allocates a DRA-backed extended resource
/// from these: one device per unit requested).
#[derive(Debug, Clone, Default)]
pub struct FreeDevices {
    /// Devices available on every node.
    everywhere: u64,
    /// Devices of one node, by node name.
    by_node: BTreeMap<String, u64>,
    /// Devices available where a node selector matches.
    selected: Vec<crate::pods::fit::Reach>,
}

impl<'a> FromIterator<&'a crate::pods::fit::Reach> for FreeDevices {
    fn from_iter<I: IntoIterator<Item = &'a crate::pods::fit::Reach>>(reaches: I) -> Self {
        use crate::pods::fit::Reach;
        let mut out = FreeDevices::default();
        for r in reaches {
            match r {
                Reach::All => out.everywhere += 1,
                Reach::Node(n) => *out.by_node.entry(n.clone()).or_insert(0) += 1,
                Reach::Selector(_) => out.selected.push(r.clone()),
                Reach::Nowhere => {}
            }
        }
        out
    }
}

impl FreeDevices {
    /// How many unallocated devices a node of this name and labels can use.
    pub fn on(&self, node: &str, labels: &BTreeMap<String, String>) -> u64 {
        let selected = self
            .selected
            .iter()
            .filter(|r| r.matches(node, labels))
            .count() as u64;
        self.everywhere + self.by_node.get(node).copied().unwrap_or(0) + selected
    }
}

/// Why a node is refused a DRA-backed extended resource no device of it
/// can satisfy (upstream's DynamicResources Filter, unresolvable).
pub const CANNOT_ALLOCATE: &str = "cannot allocate all claims";

/// A consumer in a claim's `status.reservedFor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    /// `resource` (`pods`, `podgroups`).
    pub resource: String,
    pub name: String,
    pub uid: String,
}

impl Consumer {
    /// Whether this reservation is for the pod (by uid) or for its PodGroup
    /// (upstream `IsReservedForPod` with workload claims).
    pub fn is_for(&self, pod_uid: &str, pod_group: Option<&str>) -> bool {
        (!self.uid.is_empty() && self.uid == pod_uid)
            || (self.resource == "podgroups" && pod_group.is_some_and(|g| g == self.name))
    }
}

/// What the sharing rule reads of one allocated claim.
#[derive(Debug, Clone, Copy)]
pub struct ClaimUse<'a> {
    /// The claim's name (for the message).
    pub name: &'a str,
    /// Some allocated device maps a node resource.
    pub mapped: bool,
    /// `status.reservedFor`.
    pub reserved_for: &'a [Consumer],
    /// Another pod (not of the pod's group) is counted with the claim.
    pub used_by_other: bool,
    /// The pod references it as its PodGroup's claim.
    pub group_claim: bool,
}

/// Upstream's message for a mapped claim that another pod holds.
pub fn not_shareable(claim: &str) -> String {
    format!(
        "node allocatable resource claim {claim} has a mapped device and cannot be shared across pods"
    )
}

/// The sharing rule (upstream `validateNodeAllocatableDRAClaimSharing`): a
/// claim with a mapped device is refused (unresolvable) when it is reserved
/// for a consumer other than the pod or its PodGroup, or another pod is
/// already counted with it. Overhead-only claims may be shared; a group
/// claim is shared by the group's members.
pub fn sharing_refused(c: &ClaimUse<'_>, pod_uid: &str, pod_group: Option<&str>) -> Option<String> {
    if !c.mapped || c.group_claim {
        return None;
    }
    let reserved_elsewhere =
        !c.reserved_for.is_empty() && !c.reserved_for.iter().any(|r| r.is_for(pod_uid, pod_group));
    (reserved_elsewhere || c.used_by_other).then(|| not_shareable(c.name))
}

fn source(claim: Option<&String>, template: Option<&String>) -> String {
    match (claim, template) {
        (Some(c), _) => format!("ResourceClaim {c}"),
        (None, Some(t)) => format!("ResourceClaimTemplate {t}"),
        (None, None) => "nothing".to_owned(),
    }
}

/// The PodGroup claim rule: a member pod's `spec.resourceClaims[]` entry
/// with the name of one of its PodGroup's `spec.resourceClaims` must refer
/// to the same ResourceClaim or ResourceClaimTemplate. `Err` names both
/// (unresolvable); `Ok` lists the pod claim names that are group claims.
pub fn group_claims<'a>(
    pod_claims: &'a [PodResourceClaim],
    group: &str,
    group_claims: &[PodGroupResourceClaim],
) -> Result<Vec<&'a str>, String> {
    let mut out = Vec::new();
    for pc in pod_claims {
        let Some(gc) = group_claims.iter().find(|g| g.name == pc.name) else {
            continue;
        };
        let same = gc.resource_claim_name == pc.resource_claim_name
            && gc.resource_claim_template_name == pc.resource_claim_template_name;
        if !same {
            return Err(format!(
                "pod claim {} refers to {}, but PodGroup {group} claim {} refers to {}",
                pc.name,
                source(
                    pc.resource_claim_name.as_ref(),
                    pc.resource_claim_template_name.as_ref()
                ),
                gc.name,
                source(
                    gc.resource_claim_name.as_ref(),
                    gc.resource_claim_template_name.as_ref()
                ),
            ));
        }
        out.push(pc.name.as_str());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, explicit: Option<&str>, created: &str) -> DeviceClass {
        crate::testkit::device_class(name, explicit)
            .set(&["metadata", "creationTimestamp"], created)
            .typed()
    }

    #[test]
    fn extended_resource_names() {
        for (name, dra) in [
            ("example.com/gpu", true),
            ("deviceclass.resource.kubernetes.io/gpu.example.com", true),
            ("cpu", false),
            ("hugepages-2Mi", false),
            ("kubernetes.io/batch", false),
            ("requests.example.com/gpu", false),
        ] {
            assert_eq!(is_dra_extended_resource_name(name), dra, "{name}");
        }
    }

    /// Upstream `extended/cache_test.go`: the class created later wins an
    /// explicit name; at the same time, the name sorted first; every class
    /// answers its implicit name; deleting a class drops both.
    #[test]
    fn device_class_resolution() {
        let mut dc = DeviceClasses::new();
        dc.apply(&class(
            "gpu-class-0",
            Some("example.com/gpu"),
            "2026-01-01T00:00:00Z",
        ));
        dc.apply(&class(
            "gpu-class-1",
            Some("example.com/gpu"),
            "2026-01-02T00:00:00Z",
        ));
        dc.apply(&class("tpu-class", None, "2026-01-01T00:00:00Z"));
        assert_eq!(dc.backing("example.com/gpu"), Some("gpu-class-1"));
        dc.apply(&class(
            "gpu-class-2",
            Some("example.com/gpu"),
            "2026-01-02T00:00:00Z",
        ));
        assert_eq!(
            dc.backing("example.com/gpu"),
            Some("gpu-class-1"),
            "same time: name first"
        );
        assert_eq!(
            dc.backing("deviceclass.resource.kubernetes.io/tpu-class"),
            Some("tpu-class")
        );
        assert_eq!(dc.backing("deviceclass.resource.kubernetes.io/none"), None);
        assert_eq!(dc.backing("example.com/tpu"), None);
        assert_eq!(dc.backing("cpu"), None);
        dc.delete("gpu-class-1");
        dc.delete("gpu-class-2");
        assert_eq!(dc.backing("example.com/gpu"), Some("gpu-class-0"));
        dc.delete("gpu-class-0");
        assert_eq!(dc.backing("example.com/gpu"), None);
        assert_eq!(
            dc.backing("deviceclass.resource.kubernetes.io/gpu-class-0"),
            None
        );
        dc.reset(&[]);
        assert!(dc.is_empty());
    }

    fn consumer(resource: &str, name: &str, uid: &str) -> Consumer {
        Consumer {
            resource: resource.into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    /// `(name, mapped, reservedFor, used by another, pod group, group claim, want)`.
    type Case<'a> = (
        &'a str,
        bool,
        &'a [Consumer],
        bool,
        Option<&'a str>,
        bool,
        Option<String>,
    );

    /// Ported from upstream `TestValidateNodeAllocatableDRAClaimSharing`.
    #[test]
    fn mapped_claims_are_not_shared() {
        let other = [consumer("pods", "other-pod", "other-pod-uid")];
        let own = [consumer("pods", "test-pod", "pod-uid")];
        let my_group = [consumer("podgroups", "my-pod-group", "")];
        let other_group = [consumer("podgroups", "other-pod-group", "")];
        let refused = Some(not_shareable("node-allocatable-claim"));
        let cases: Vec<Case<'_>> = vec![
            ("mapped, not shared", true, &[], false, None, false, None),
            (
                "mapped, reserved for another pod",
                true,
                &other,
                false,
                None,
                false,
                refused.clone(),
            ),
            (
                "mapped, reserved for this pod",
                true,
                &own,
                false,
                None,
                false,
                None,
            ),
            (
                "overhead only, reserved for another pod",
                false,
                &other,
                true,
                None,
                false,
                None,
            ),
            (
                "mapped, another pod counted with it",
                true,
                &[],
                true,
                None,
                false,
                refused.clone(),
            ),
            (
                "mapped, reserved for the pod's group",
                true,
                &my_group,
                false,
                Some("my-pod-group"),
                false,
                None,
            ),
            (
                "mapped, reserved for another group",
                true,
                &other_group,
                false,
                Some("my-pod-group"),
                false,
                refused.clone(),
            ),
            (
                "mapped group claim, shared by members",
                true,
                &my_group,
                true,
                Some("my-pod-group"),
                true,
                None,
            ),
        ];
        for (name, mapped, reserved_for, used_by_other, group, group_claim, want) in cases {
            let c = ClaimUse {
                name: "node-allocatable-claim",
                mapped,
                reserved_for,
                used_by_other,
                group_claim,
            };
            assert_eq!(sharing_refused(&c, "pod-uid", group), want, "{name}");
        }
    }

    fn pod_claim(name: &str, claim: Option<&str>, template: Option<&str>) -> PodResourceClaim {
        PodResourceClaim {
            name: name.into(),
            resource_claim_name: claim.map(Into::into),
            resource_claim_template_name: template.map(Into::into),
        }
    }

    fn group_claim(
        name: &str,
        claim: Option<&str>,
        template: Option<&str>,
    ) -> PodGroupResourceClaim {
        PodGroupResourceClaim {
            name: name.into(),
            resource_claim_name: claim.map(Into::into),
            resource_claim_template_name: template.map(Into::into),
        }
    }

    #[test]
    fn group_claims_must_match_exactly() {
        let group = [
            group_claim("gpu", None, Some("gpu-template")),
            group_claim("net", Some("fabric"), None),
        ];
        let ok = [
            pod_claim("gpu", None, Some("gpu-template")),
            pod_claim("own", Some("mine"), None),
        ];
        assert_eq!(group_claims(&ok, "ns/g", &group), Ok(vec!["gpu"]));
        let other_template = [pod_claim("gpu", None, Some("other"))];
        assert_eq!(
            group_claims(&other_template, "ns/g", &group),
            Err("pod claim gpu refers to ResourceClaimTemplate other, but PodGroup ns/g claim gpu refers to ResourceClaimTemplate gpu-template".into())
        );
        let claim_not_template = [pod_claim("net", None, Some("fabric"))];
        let e = group_claims(&claim_not_template, "ns/g", &group).unwrap_err();
        assert!(
            e.contains("ResourceClaimTemplate fabric") && e.contains("ResourceClaim fabric"),
            "{e}"
        );
    }
}
