//! `GET /v1/explain/pod?namespace=&name=&examples=&domains=`: the
//! extender's filter for one pod over every cached node, explained.
//!
//! The answer ([`PodExplanation`]) is built from the extender's own code:
//! the PreFilter state ([`FilterState`]) and [`decide_filter`] over every
//! cached node, on a private copy of the gang planner (nothing is planned,
//! refreshed, noted or assumed for real); the group chain and domain trials
//! of [`gang::explain`]; the priority plugin's check.

use super::{
    DEFAULT_DOMAINS, DEFAULT_EXAMPLES, ExplainPodState, MAX_DOMAINS, MAX_EXAMPLES, count_param,
    object_params,
};
use crate::cache::cluster_index::ClusterState;
use crate::extender::gang::{self, GangPlanner};
use crate::extender::plugins::{self, FilterState};
use crate::extender::types::ExtenderArgs;
use crate::extender::{Candidates, decide_filter};
use crate::pods::fit as pod_fit;
use crate::pods::priority;
use crate::transport::{ApiError, Params};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;

/// The pod as the explanation saw it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodFacts {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `spec.nodeName`, when the pod is bound.
    pub node: Option<String>,
    /// The extender's cache holds the pod under this uid (filter plans
    /// only for cached pods).
    pub cached: bool,
}

/// How many nodes pass, with examples.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCounts {
    /// Cached nodes filtered.
    pub total: usize,
    pub feasible: usize,
    pub feasible_examples: Vec<String>,
}

/// One rejection reason and the nodes it rejects.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasonCount {
    pub reason: String,
    pub nodes: usize,
    /// Preemption cannot help (kube-scheduler's `UnschedulableAndUnresolvable`).
    pub unresolvable: bool,
    /// Up to `examples` nodes, in name order.
    pub examples: Vec<String>,
}

/// A resolved priority.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PriorityFacts {
    pub priority: i32,
    pub preemption_policy: String,
}

/// The priority plugin's check.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PriorityCheck {
    /// The pod's effective priority and preemption policy.
    pub pod: PriorityFacts,
    pub priority_class_name: Option<String>,
    /// The group's (its root composite's when it has one); `None`: no
    /// group, or a group the cache does not hold.
    pub group: Option<PriorityFacts>,
    /// `--pod-group-preemption-policy`: compare with the group's policy
    /// (else with the other members').
    pub group_preemption_policy: bool,
    /// The check passes.
    pub ok: bool,
    /// Why it does not.
    pub message: Option<String>,
}

/// Where the chosen domain comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum DomainSource {
    /// Placed members fix it.
    Placed,
    /// The group's live plan.
    Plan,
    /// No plan yet: the next member's filter would plan it.
    NewPlan,
}

/// The domain the filter verdict chose.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChosenDomain {
    /// `key=value`, outermost first.
    pub domain: Vec<String>,
    pub source: DomainSource,
}

/// The answer of `GET /v1/explain/pod`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodExplanation {
    /// One line for a human.
    pub summary: String,
    pub pod: PodFacts,
    pub nodes: NodeCounts,
    /// Rejections by reason, most nodes first.
    pub reasons: Vec<ReasonCount>,
    /// Filter failed for the pod as a whole (its requests do not parse).
    pub error: Option<String>,
    /// The pod's group, its chain and quorum, and its domains.
    pub group: Option<gang::explain::GroupReport>,
    pub chosen_domain: Option<ChosenDomain>,
    pub priority: PriorityCheck,
}

pub(super) async fn handler(
    State(s): State<ExplainPodState>,
    params: Params,
) -> Result<Json<PodExplanation>, ApiError> {
    let (namespace, name) = object_params(&params)?;
    let examples = count_param(&params, "examples", DEFAULT_EXAMPLES, MAX_EXAMPLES)?;
    let domains = count_param(&params, "domains", DEFAULT_DOMAINS, MAX_DOMAINS)?;
    let Some(source) = &s.source else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "this listener has no way to read pods",
        ));
    };
    let Some(mut pod) = source.get(&namespace, &name).await? else {
        return Err(ApiError::not_found(format!(
            "pod {namespace}/{name} not found"
        )));
    };
    pod.metadata.namespace = Some(namespace);
    let snap = s.nodes.read();
    Ok(Json(explain(
        &snap,
        s.gangs.planner(),
        &pod,
        examples,
        domains,
    )))
}

/// Explains the filter for `pod` over every cached node. Read-only:
/// `planner` is only read (decisions run on its [`GangPlanner::scratch`]).
pub fn explain(
    snap: &ClusterState,
    planner: &GangPlanner,
    pod: &Pod,
    examples: usize,
    max_domains: usize,
) -> PodExplanation {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let facts = PodFacts {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        node: pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty()),
        cached: snap.pod(namespace, name).is_some_and(|c| c.uid == uid),
        uid,
    };
    let refs = snap.all_node_refs();
    let names: Vec<&str> = refs.iter().map(|(n, _)| n).collect();
    let scratch = planner.scratch();
    // PreFilter once for the verdict's domain; filter itself then follows
    // the plan this made in the copy, as a real member's filter would.
    let state = FilterState::new(snap, &scratch, pod, &names, false);
    let chosen_pairs = state
        .as_ref()
        .map(|st| st.verdict.domain())
        .unwrap_or_default();
    let args = ExtenderArgs {
        pod: Some(pod.clone()),
        nodes: None,
        node_names: None,
    };
    let candidates = Candidates::Cached(Arc::clone(&refs));
    let out = decide_filter(snap, &scratch, &args, &candidates, false);
    let feasible: Vec<&str> = out.node_names.clone().unwrap_or_default();
    // Reasons, grouped by message and resolvability.
    // The same message may be resolvable on one node and not on another
    // (a node too small even empty): one entry each.
    let mut by_reason: HashMap<(&str, bool), usize> = HashMap::new();
    let mut reasons: Vec<ReasonCount> = Vec::new();
    for (list, unresolvable) in [
        (&out.failed_nodes, false),
        (&out.failed_and_unresolvable_nodes, true),
    ] {
        for (node, why) in &list.0 {
            let at = *by_reason.entry((why, unresolvable)).or_insert_with(|| {
                reasons.push(ReasonCount {
                    reason: why.to_string(),
                    nodes: 0,
                    unresolvable,
                    examples: Vec::new(),
                });
                reasons.len() - 1
            });
            let r = &mut reasons[at];
            r.nodes += 1;
            if r.examples.len() < examples {
                r.examples.push(node.to_string());
            }
        }
    }
    reasons.sort_by(|a, b| b.nodes.cmp(&a.nodes).then_with(|| a.reason.cmp(&b.reason)));
    let requests = pod
        .spec
        .as_ref()
        .and_then(|s| pod_fit::pod_requests(s).ok())
        .unwrap_or_default();
    let group = gang::explain::report(snap, planner, pod, &requests, &chosen_pairs, max_domains);
    let chosen_domain = (!chosen_pairs.is_empty()).then(|| ChosenDomain {
        domain: chosen_pairs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect(),
        source: domain_source(group.as_ref(), &chosen_pairs),
    });
    let priority = priority_check(snap, pod);
    let error = (!out.error.is_empty()).then(|| out.error.clone());
    let nodes = NodeCounts {
        total: refs.len(),
        feasible: feasible.len(),
        feasible_examples: feasible
            .iter()
            .take(examples)
            .map(|n| (*n).to_owned())
            .collect(),
    };
    let summary = summary(&facts, &nodes, &reasons, error.as_deref(), group.as_ref());
    PodExplanation {
        summary,
        pod: facts,
        nodes,
        reasons,
        error,
        group,
        chosen_domain,
        priority,
    }
}

fn domain_source(
    group: Option<&gang::explain::GroupReport>,
    chosen: &[(String, String)],
) -> DomainSource {
    let Some(d) = group.and_then(|g| g.domain.as_ref()) else {
        return DomainSource::NewPlan;
    };
    let mine = chosen
        .last()
        .filter(|(k, _)| *k == d.key)
        .map(|(_, v)| v.as_str());
    if d.fixed.is_some() && d.fixed.as_deref() == mine {
        DomainSource::Placed
    } else if d.planned.is_some() && d.planned.as_deref() == mine {
        DomainSource::Plan
    } else {
        DomainSource::NewPlan
    }
}

fn priority_check(snap: &ClusterState, pod: &Pod) -> PriorityCheck {
    let spec = pod.spec.as_ref();
    let declared = priority::Declared {
        priority: spec.and_then(|s| s.priority),
        class_name: spec.and_then(|s| s.priority_class_name.as_deref()),
        preemption_policy: spec.and_then(|s| s.preemption_policy.as_deref()),
    };
    let eff = priority::resolve(declared, snap.classes());
    let group = gang::group_of(pod).and_then(|(ns, g)| snap.group_priority(ns, g));
    let verdict = plugins::priority::prefilter(snap, pod);
    PriorityCheck {
        pod: PriorityFacts {
            priority: eff.priority,
            preemption_policy: eff.preemption_policy,
        },
        priority_class_name: spec.and_then(|s| s.priority_class_name.clone()),
        group: group.map(|g| PriorityFacts {
            priority: g.priority,
            preemption_policy: g.preemption_policy,
        }),
        group_preemption_policy: snap.semantics().group_preemption_policy,
        ok: verdict.is_none(),
        message: verdict.map(|r| r.message),
    }
}

fn summary(
    pod: &PodFacts,
    nodes: &NodeCounts,
    reasons: &[ReasonCount],
    error: Option<&str>,
    group: Option<&gang::explain::GroupReport>,
) -> String {
    let who = format!("pod {}/{}", pod.namespace, pod.name);
    let mut s = match (&pod.node, error) {
        (_, Some(e)) => return format!("{who}: the extender cannot filter it: {e}"),
        (Some(n), _) => format!("{who} is bound to {n}; "),
        (None, _) => format!("{who}: "),
    };
    if nodes.total == 0 {
        s.push_str("the extender's cache holds no nodes");
        return s;
    }
    if nodes.feasible > 0 {
        s.push_str(&format!("fits {} of {} nodes", nodes.feasible, nodes.total));
        if let Some(g) = group
            && let Some(unit) = &g.unit
            && let Some(l) = g
                .levels
                .iter()
                .find(|l| unit.ends_with(&format!("{}/{}", l.namespace, l.name)))
            && l.placed < l.needed
        {
            s.push_str(&format!(
                "; bind holds it until {unit} has {} placed ({} now)",
                l.needed, l.placed
            ));
        }
        return s;
    }
    s.push_str(&format!("fits none of the {} nodes", nodes.total));
    if let Some(top) = reasons.first() {
        s.push_str(&format!(": {} ({} nodes)", top.reason, top.nodes));
        if let Some(next) = reasons.get(1) {
            s.push_str(&format!("; {} ({} nodes)", next.reason, next.nodes));
        }
        if reasons.len() > 2 {
            s.push_str(&format!("; {} more reasons", reasons.len() - 2));
        }
    }
    s
}
