//! PodGroup, CompositePodGroup and Workload webhooks: the workload module's
//! validators (one implementation, shared with the workload builder) plus
//! the PriorityClass existence check through a [`PriorityLookup`].

use k8s_openapi::api::scheduling::{v1alpha3, v1beta1};
use kube::core::admission::AdmissionResponse;
use serde::de::DeserializeOwned;

use super::priority::{ClassLookup, PriorityLookup};
use super::review::{self, Request, Scope, Target, Violation};
use crate::workload::{self, FieldError, PriorityClassRef};

/// `scheduling.k8s.io/v1beta1` PodGroup.
pub const POD_GROUP: Target = Target {
    group: "scheduling.k8s.io",
    version: "v1beta1",
    kind: "PodGroup",
};

/// `scheduling.k8s.io/v1alpha3` CompositePodGroup.
pub const COMPOSITE_POD_GROUP: Target = Target {
    group: "scheduling.k8s.io",
    version: "v1alpha3",
    kind: "CompositePodGroup",
};

/// `scheduling.k8s.io/v1beta1` Workload.
pub const WORKLOAD: Target = Target {
    group: "scheduling.k8s.io",
    version: "v1beta1",
    kind: "Workload",
};

/// `POST /admission/validate/podgroups`.
pub fn validate_pod_group(req: &Request, classes: &dyn PriorityLookup) -> AdmissionResponse {
    judge::<v1beta1::PodGroup>(
        req,
        classes,
        &POD_GROUP,
        workload::validate_pod_group,
        workload::pod_group_priority_classes,
    )
}

/// `POST /admission/validate/compositepodgroups`.
pub fn validate_composite_pod_group(
    req: &Request,
    classes: &dyn PriorityLookup,
) -> AdmissionResponse {
    judge::<v1alpha3::CompositePodGroup>(
        req,
        classes,
        &COMPOSITE_POD_GROUP,
        workload::validate_composite_pod_group,
        workload::composite_pod_group_priority_classes,
    )
}

/// `POST /admission/validate/workloads`.
pub fn validate_workload(req: &Request, classes: &dyn PriorityLookup) -> AdmissionResponse {
    judge::<v1beta1::Workload>(
        req,
        classes,
        &WORKLOAD,
        workload::validate_workload,
        workload::workload_priority_classes,
    )
}

/// Decode, validate (with the old object on UPDATE), check PriorityClasses.
fn judge<T: DeserializeOwned>(
    req: &Request,
    classes: &dyn PriorityLookup,
    target: &Target,
    validate: fn(&T, Option<&T>) -> Vec<FieldError>,
    class_refs: fn(&T) -> Vec<PriorityClassRef>,
) -> AdmissionResponse {
    let (new_obj, old_obj) = match review::scope(req, target) {
        Ok(Scope::Judge { new, old }) => (new, old),
        Ok(Scope::Skip) => return review::allow(req),
        Err(msg) => return review::bad_request(req, msg),
    };
    let what = review::describe(req, new_obj);
    let new: T = match review::decode_object(new_obj) {
        Ok(t) => t,
        Err(v) => return review::deny(req, &what, vec![v]),
    };
    let old: Option<T> = match old_obj.map(review::decode_object).transpose() {
        Ok(o) => o,
        Err(v) => return review::bad_request(req, format!("oldObject: {}", v.message)),
    };
    let mut violations: Vec<Violation> = validate(&new, old.as_ref())
        .iter()
        .map(Violation::from)
        .collect();
    violations.extend(class_violations(
        classes,
        class_refs(&new),
        old.as_ref().map(class_refs),
    ));
    if violations.is_empty() {
        review::allow(req)
    } else {
        review::deny(req, &what, violations)
    }
}

/// PriorityClass references that do not resolve, and explicit priorities
/// that differ from their class's value (403, as the Priority admission
/// plugin answers; nothing is patched in). On UPDATE a reference
/// already present in the stored object is not checked again: the field is
/// immutable, and a class deleted later must not block updates (finalizers,
/// `minCount`) of objects that were admitted with it.
pub fn class_violations(
    classes: &dyn PriorityLookup,
    refs: Vec<PriorityClassRef>,
    old_refs: Option<Vec<PriorityClassRef>>,
) -> Vec<Violation> {
    let refs: Vec<PriorityClassRef> = match &old_refs {
        Some(old) => refs.into_iter().filter(|r| !old.contains(r)).collect(),
        None => refs,
    };
    classes
        .check(&refs)
        .into_iter()
        .map(|p| match p.lookup {
            ClassLookup::NotSynced => Violation::unavailable(p.field(), p.to_string()),
            ClassLookup::Found(_) => Violation::forbidden_value(p.field(), p.to_string()),
            ClassLookup::Missing => Violation::forbidden(p.field(), p.to_string()),
        })
        .collect()
}
