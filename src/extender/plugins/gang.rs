//! The gang/topology plugin over [`crate::extender::gang`]: PreFilter
//! computes the group verdict once per pod (a pod-wide rejection, or the
//! topology domain its nodes must lie in, planned through the
//! [`GangPlanner`]); Filter rejects a node outside that domain; PreScore
//! builds the preference of a grouped pod whose domain is known, and Score
//! reads it.

use crate::cache::cluster_index::ClusterState;
use crate::extender::gang::{self, GangPlanner, GroupVerdict, Prefer};
use crate::pods::fit::Amounts;
use k8s_openapi::api::core::v1::Pod;
use std::sync::Arc;
use tokio::time::Instant;

/// The group verdict for the pod, at the time of the request (plans are
/// consulted, made and lapse by it). `candidates`: the node names of the
/// request (the domain of a group without topology, and the nodes the pod
/// itself may use). `returning`: see [`gang::filter_gate_for`].
pub fn prefilter(
    snap: &ClusterState,
    planner: &GangPlanner,
    pod: &Pod,
    requests: &Amounts,
    candidates: &[&str],
    returning: bool,
) -> GroupVerdict {
    gang::filter_gate_for(
        snap,
        planner,
        pod,
        requests,
        candidates,
        returning,
        Instant::now(),
    )
}

/// Why a node is rejected by the verdict: the first domain level it is
/// outside of (messages are shared per level, see [`OutsideReasons`]).
#[inline]
pub fn filter(verdict: &GroupVerdict, node: &str) -> Option<usize> {
    verdict.outside(node)
}

/// One message per domain level, built on first use.
#[derive(Default)]
pub struct OutsideReasons(Vec<Option<Arc<str>>>);

impl OutsideReasons {
    #[inline]
    pub fn get(&mut self, verdict: &GroupVerdict, level: usize) -> Arc<str> {
        if self.0.len() <= level {
            self.0.resize(level + 1, None);
        }
        Arc::clone(self.0[level].get_or_insert_with(|| verdict.outside_message(level).into()))
    }
}

/// The preference of a grouped pod whose domain is known; `None` leaves
/// scoring to the fit plugin.
pub fn prescore(
    snap: &ClusterState,
    planner: &GangPlanner,
    pod: &Pod,
    requests: &Amounts,
) -> Option<Prefer> {
    gang::prefer(snap, planner, pod, requests)
}

/// 0..=10 for a node under the preference.
pub fn score(prefer: &Prefer, node: &str) -> i64 {
    prefer.score(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::cluster_index::ClusterIndex;
    use crate::model::refs::GroupRef;
    use crate::pods::fit::pod_requests;
    use crate::testkit::{self, RACK};

    fn requests(p: &Pod) -> Amounts {
        pod_requests(p.spec.as_ref().expect("spec")).expect("requests")
    }

    /// The verdict of one member over every node of the cache.
    fn verdict(cache: &ClusterIndex, planner: &GangPlanner, p: &Pod) -> GroupVerdict {
        let names = cache.read().node_names();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        prefilter(&cache.read(), planner, p, &requests(p), &names, false)
    }

    fn rack_of(v: &GroupVerdict) -> String {
        let domain = v.domain();
        assert_eq!(domain.len(), 1, "one keyed level: {domain:?}");
        assert_eq!(domain[0].0, RACK);
        domain[0].1.clone()
    }

    #[test]
    fn a_gang_short_of_pods_fails_every_node_unresolvable() {
        let cache = ClusterIndex::of(testkit::racks(&[("r1", 2, "8")]));
        let pods = cache.apply_objects(testkit::gang("g", 3, "1", true));
        cache.delete_pod("ns", "g-2");
        let planner = GangPlanner::new();
        let v = verdict(&cache, &planner, &pods[0]);
        let wide = v.wide.expect("rejected");
        assert_eq!(
            wide.message,
            "pod group ns/g: 2 of the 3 pods it needs exist"
        );
        assert!(wide.unresolvable);
        assert!(planner.is_empty(), "nothing planned");
        // The third member comes: the gang may go.
        cache.apply_pod(&pods[2]);
        assert!(verdict(&cache, &planner, &pods[0]).wide.is_none());
    }

    #[test]
    fn the_domain_chosen_holds_the_whole_gang_and_others_are_outside() {
        // r1 has room for 2 one-core... members of 3 cores; r2 for 4.
        let cache = ClusterIndex::of(testkit::racks(&[("r1", 1, "6"), ("r2", 2, "6")]));
        let pods = cache.apply_objects(testkit::gang("g", 3, "3", true));
        let planner = GangPlanner::new();
        let v = verdict(&cache, &planner, &pods[0]);
        assert!(v.wide.is_none(), "{:?}", v.wide);
        assert_eq!(rack_of(&v), "r2");
        assert_eq!(filter(&v, "r1-0"), Some(0));
        assert_eq!(filter(&v, "r2-1"), None);
        let mut reasons = OutsideReasons::default();
        assert_eq!(
            &*reasons.get(&v, 0),
            "node is outside the pod group's topology domain rack=r2"
        );
        // The plan is kept and followed by the next member.
        let plan = planner.get(&GroupRef::group("ns", "g")).expect("plan");
        assert_eq!((plan.key.as_str(), plan.value.as_str()), (RACK, "r2"));
        assert_eq!(rack_of(&verdict(&cache, &planner, &pods[1])), "r2");
    }

    #[test]
    fn best_fit_leaves_the_big_domain_whole() {
        let cache = ClusterIndex::of(testkit::racks(&[("big", 4, "4"), ("small", 2, "4")]));
        let pods = cache.apply_objects(testkit::gang("g", 2, "4", true));
        let planner = GangPlanner::new();
        assert_eq!(rack_of(&verdict(&cache, &planner, &pods[0])), "small");
    }

    #[test]
    fn plans_reserve_room_so_two_gangs_never_plan_the_same_rack() {
        // Two racks of room for 2 members each; two gangs of 2.
        let cache = ClusterIndex::of(testkit::racks(&[("r1", 2, "4"), ("r2", 2, "4")]));
        let a = cache.apply_objects(testkit::gang("a", 2, "4", true));
        let b = cache.apply_objects(testkit::gang("b", 2, "4", true));
        let planner = GangPlanner::new();
        let ra = rack_of(&verdict(&cache, &planner, &a[0]));
        let rb = rack_of(&verdict(&cache, &planner, &b[0]));
        assert_ne!(ra, rb, "b must not plan the room a's plan holds");
        // A third gang finds no room left: every rack is planned.
        let c = cache.apply_objects(testkit::gang("c", 2, "4", true));
        let v = verdict(&cache, &planner, &c[0]);
        let wide = v.wide.expect("no room");
        assert!(
            wide.message
                .contains("no rack domain can hold the 2 pods it still needs"),
            "{}",
            wide.message
        );
        assert!(
            !wide.unresolvable,
            "removing pods (or plans lapsing) could help"
        );
    }

    #[test]
    fn a_recreated_member_is_counted_once_and_follows_the_fixed_domain() {
        let cache = ClusterIndex::of(testkit::racks(&[("r1", 2, "4"), ("r2", 2, "4")]));
        let pods = cache.apply_objects(testkit::gang("g", 2, "2", true));
        let planner = GangPlanner::new();
        // Member 0 is bound in r2: the domain is fixed there.
        cache.apply_pod(
            &testkit::pod("g-0")
                .namespace("ns")
                .requests(&[("cpu", "2")])
                .group("g")
                .node_name("r2-0")
                .typed(),
        );
        assert_eq!(rack_of(&verdict(&cache, &planner, &pods[1])), "r2");
        // Member 1 is deleted and recreated (a new uid, not placed yet).
        cache.delete_pod("ns", "g-1");
        let mut again: Pod = testkit::pod("g-1")
            .namespace("ns")
            .requests(&[("cpu", "2")])
            .group("g")
            .typed();
        again.metadata.uid = Some("g-1-second".into());
        cache.apply_pod(&again);
        let v = verdict(&cache, &planner, &again);
        assert!(v.wide.is_none(), "{:?}", v.wide);
        assert_eq!(rack_of(&v), "r2");
        let members = cache.read().member_pods("ns", "g").count();
        assert_eq!(members, 2);
    }

    #[test]
    fn prescore_prefers_the_planned_domain() {
        let cache = ClusterIndex::of(testkit::racks(&[("r1", 2, "4"), ("r2", 1, "8")]));
        let pods = cache.apply_objects(testkit::gang("g", 2, "4", true));
        let planner = GangPlanner::new();
        let planned = rack_of(&verdict(&cache, &planner, &pods[0]));
        let snap = cache.read();
        let prefer = prescore(&snap, &planner, &pods[0], &requests(&pods[0])).expect("domain");
        for n in snap.node_names() {
            let inside = n.starts_with(&planned);
            assert_eq!(score(&prefer, &n) > 0, inside, "{n} in {planned}");
        }
        // Without a plan or placed members there is no preference.
        let none = GangPlanner::new();
        assert!(prescore(&snap, &none, &pods[0], &requests(&pods[0])).is_none());
    }
}
