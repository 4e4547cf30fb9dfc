//! The priority-consistency plugin: a grouped pod's effective priority and
//! preemption policy must agree with its group's (with the
//! `PodGroupPreemptionPolicy` semantics on), or with the other members'
//! preemption policies (off). A verdict about the pod, not a node, so it is
//! a PreFilter step: a rejection fails every node, unresolvable. It scores
//! nothing.

use crate::cache::cluster_index::{ClusterState, Rejection};
use crate::pods::priority;
use k8s_openapi::api::core::v1::Pod;

/// Why the pod cannot go anywhere, before looking at nodes.
pub fn prefilter(snap: &ClusterState, pod: &Pod) -> Option<Rejection> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let spec = pod.spec.as_ref()?;
    let group = spec.scheduling_group.as_ref()?.pod_group_name.as_deref()?;
    let group_eff = snap.group_priority(ns, group)?;
    let pod_eff = priority::resolve(
        priority::Declared {
            priority: spec.priority,
            class_name: spec.priority_class_name.as_deref(),
            preemption_policy: spec.preemption_policy.as_deref(),
        },
        snap.classes(),
    );
    let verdict = if snap.semantics().group_preemption_policy {
        priority::check_member(&pod_eff, &group_eff)
    } else {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let others: Vec<String> = snap
            .member_pods(ns, group)
            .filter(|(n, p)| *n != name && !p.terminal)
            .map(|(_, p)| priority::resolve(p.declared(), snap.classes()).preemption_policy)
            .collect();
        priority::check_member_without_group_policy(
            &pod_eff,
            group_eff.priority,
            others.iter().map(String::as_str),
        )
    };
    verdict.err().map(|m| Rejection {
        message: m.to_owned(),
        unresolvable: true,
    })
}
