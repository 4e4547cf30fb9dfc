//! The extender's plugins, shaped as kube-scheduler's framework: a
//! per-pod state built once per request (PreFilter), then Filter plugins
//! per node, then Score plugins per node. Every plugin is pure over the
//! read-only [`ClusterState`] snapshot; the only state that outlives a request
//! is the [`GangPlanner`]'s plans.
//!
//! | plugin | PreFilter | Filter | Score |
//! |---|---|---|---|
//! | [`priority`] | pod-wide: priority consistency with its group | – | – |
//! | [`gang`] | the group verdict (quorum, domain, plan) | outside the domain | the gang preference |
//! | [`dra`] | group claims, claim sharing; requests plus the pod's claims' load per node | (through fit) | – |
//! | [`fit`] | requests resolved to column ids | node resources | least allocated |

pub mod dra;
pub mod fit;
pub mod gang;
pub mod priority;

use crate::cache::cluster_index::{ClusterState, Rejection};
use crate::extender::gang::{GangPlanner, GroupVerdict};
use crate::pods::fit::{self as pod_fit, Amounts};
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashMap;

/// What the filter plugins need of one pod, built once per request.
pub struct FilterState {
    /// A rejection of every node (priority, then the group verdict).
    pub wide: Option<Rejection>,
    /// The group verdict (its domain; empty for a pod without group rules).
    pub verdict: GroupVerdict,
    /// The pod's requests with its claims' load, per node.
    pub requests: dra::ClaimRequests,
    /// Per node, the summed requests and count of the pending pods
    /// kube-scheduler nominated there that it counts against this pod
    /// ([`nominated_room`]); empty in the usual case.
    pub nominated: HashMap<String, (Amounts, u64)>,
}

impl FilterState {
    /// PreFilter: the pod's requests (`Err`: why they cannot be read), the
    /// priority verdict, the group verdict unless priority already rejects,
    /// and the DRA-adjusted requests. `candidates`: the request's node
    /// names.
    pub fn new(
        snap: &ClusterState,
        planner: &GangPlanner,
        pod: &Pod,
        candidates: &[&str],
        returning: bool,
    ) -> Result<FilterState, String> {
        let demand = |s| pod_fit::pod_demand_of(s, pod.status.as_ref());
        let (requests, level) = match pod.spec.as_ref().map(demand).transpose() {
            Ok(r) => r.unwrap_or_default(),
            Err(e) => return Err(format!("pod requests: {e}")),
        };
        let wide = priority::prefilter(snap, pod);
        let verdict = match wide {
            Some(_) => GroupVerdict::default(),
            None => gang::prefilter(snap, planner, pod, &requests, candidates, returning),
        };
        let claims = dra::claims_of(snap, pod);
        let wide = wide
            .or(verdict.wide.clone())
            .or_else(|| dra::prefilter_wide(snap, pod, &claims));
        let claims = claims.map(|(c, _)| c).unwrap_or_default();
        Ok(FilterState {
            wide,
            verdict,
            requests: dra::prefilter(snap, &claims, &requests, &level, candidates),
            nominated: nominated_room(snap, pod),
        })
    }
}

/// The room the pending pods kube-scheduler nominated to each node hold
/// against `pod`, as its own filter counts them
/// (`RunFilterPluginsWithNominatedPods`: pods of at least the pod's
/// priority, not the pod itself). kube-scheduler knows nothing of the
/// members this extender keeps reserved, and the fit here counts those, so
/// the nominations must be counted here too: each side alone passed a node
/// that both together overfill (simulation seed 8854: a kept member's room
/// went to another pod, and its gang stood below minCount).
fn nominated_room(snap: &ClusterState, pod: &Pod) -> HashMap<String, (Amounts, u64)> {
    let mut out: HashMap<String, (Amounts, u64)> = HashMap::new();
    let mut nominated = snap.nominated_pods().peekable();
    if nominated.peek().is_none() {
        return out;
    }
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    // The cache's view of the pod (its priority class resolved); a pod it
    // does not know is rejected by the gang gate or counted at the
    // priority its spec declares.
    let floor = match snap.pod(namespace, name) {
        Some(p) => priority_of(snap, p),
        None => pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
    };
    for ((ns, n), p, node) in nominated {
        if (ns.as_str(), n.as_str()) == (namespace, name) || priority_of(snap, p) < floor {
            continue;
        }
        let (sum, count) = out.entry(node.to_owned()).or_default();
        for (resource, amount) in p.requests.iter().flatten() {
            let v = sum.entry(resource.clone()).or_default();
            *v = v.saturating_add(*amount);
        }
        *count += 1;
    }
    out
}

fn priority_of(snap: &ClusterState, p: &crate::cache::cluster_index::PodEntry) -> i32 {
    crate::pods::priority::resolve(p.declared(), snap.classes()).priority
}

/// What the score plugins need of one pod, built once per request.
pub struct ScoreState {
    /// The pod's requests resolved for the fit score.
    pub requests: fit::Resolved,
    /// The gang preference, when the pod's domain is known.
    pub prefer: Option<crate::extender::gang::Prefer>,
}

impl ScoreState {
    /// PreScore: requests that cannot be read score as none.
    pub fn new(snap: &ClusterState, planner: &GangPlanner, pod: Option<&Pod>) -> ScoreState {
        let requests: Amounts = pod
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| pod_fit::pod_requests(s).ok())
            .unwrap_or_default();
        ScoreState {
            requests: fit::resolve(snap, &requests),
            prefer: pod.and_then(|p| gang::prescore(snap, planner, p, &requests)),
        }
    }

    /// The score of a node (by slot when cache-capable), 0..=10: the gang
    /// preference when there is one, else least allocated.
    pub fn score(&self, snap: &ClusterState, name: &str, slot: Option<u32>) -> i64 {
        let s = match (&self.prefer, slot) {
            (Some(p), _) => gang::score(p, name),
            (None, Some(slot)) => fit::score_at(snap, slot, &self.requests),
            (None, None) => fit::score(snap, name, &self.requests),
        };
        s.clamp(0, 10)
    }
}
