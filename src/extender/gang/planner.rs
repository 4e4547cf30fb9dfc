//! The gang planner: the topology domain chosen for each group not yet
//! placed (its *plan*), so the whole-cluster search of
//! [`gang`](super) runs once per group, not once per member.
//!
//! The planner is owned by the extender's state, next to the snapshot and
//! never inside it: filter calls run concurrently under the cluster index's
//! read lock, and the planner has its own small lock. Its API:
//!
//! - [`GangPlanner::consult`]: the live plan a member's filter may follow
//!   (made under the same specs, for the same key); consulting it extends
//!   its life by [`PLAN_TTL`].
//! - [`GangPlanner::plan`]: makes plans under the lock, after dropping
//!   lapsed plans and plans of groups that are gone, so what other groups'
//!   plans reserve is read and the new plans are recorded in one step (two
//!   gangs never plan the same room).
//! - [`GangPlanner::drop`]: forgets the plans of groups (their quorum was
//!   reached, or the room a plan counted on was taken) and every lapsed one.
//! - [`GangPlanner::planned`]: the value prioritize prefers.

use crate::model::refs::GroupRef;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use tokio::time::Instant;

/// A plan lapses when no member of its group has asked for it this long.
pub const PLAN_TTL: Duration = Duration::from_secs(30);

/// The domain chosen for a group before any of its pods is placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The topology key and the chosen value.
    pub key: String,
    pub value: String,
    /// Fingerprint of the group's chain (itself and its parents, with
    /// specs) when the plan was made; another fingerprint makes it stale.
    pub token: u64,
    /// The plan lapses when no member has asked for it by then.
    pub expires: Instant,
    /// Since when every member that asked was offered no node of the
    /// domain (`None`: one was, or none asked yet); see
    /// [`GangPlanner::missed`].
    pub missed_since: Option<Instant>,
}

/// Plans by group.
pub type Plans = HashMap<GroupRef, Plan>;

/// Makes, keeps and expires domain plans, behind its own lock.
#[derive(Debug, Default)]
pub struct GangPlanner {
    plans: Mutex<Plans>,
    /// The last reason each group could not be placed, not yet published
    /// as its `Unschedulable` condition (bounded; see [`GangPlanner::note`]).
    notes: Mutex<BTreeMap<GroupRef, Note>>,
}

/// Why a group could not be placed, for the group object (uid) the cache
/// held then: a recreated group under the same name is another group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub uid: Option<String>,
    pub message: String,
}

/// Most groups with an unpublished note at once.
const MAX_NOTES: usize = 4096;

// === impl GangPlanner ===

impl GangPlanner {
    pub fn new() -> Self {
        GangPlanner::default()
    }

    /// A private copy of the plans, with no notes: what a read-only caller
    /// (`/v1/explain/pod`) decides over. Plans it makes or consults there
    /// (and the notes it records) stay in the copy, so explaining a pod
    /// changes no plan, expiry or group condition.
    pub fn scratch(&self) -> GangPlanner {
        GangPlanner {
            plans: Mutex::new(self.plans.lock().clone()),
            notes: Mutex::default(),
        }
    }

    /// Records why a group (the object with `uid`) cannot be placed; the
    /// filter handler publishes it ([`GangPlanner::take_notes`]). At most
    /// [`MAX_NOTES`] groups wait.
    pub fn note(&self, group: &GroupRef, uid: Option<&str>, message: &str) {
        let mut notes = self.notes.lock();
        if notes.len() < MAX_NOTES || notes.contains_key(group) {
            notes.insert(
                group.clone(),
                Note {
                    uid: uid.map(str::to_owned),
                    message: message.to_owned(),
                },
            );
        }
    }

    /// The notes recorded since the last call.
    pub fn take_notes(&self) -> BTreeMap<GroupRef, Note> {
        std::mem::take(&mut *self.notes.lock())
    }

    /// The value of a group's live plan for `key`, made under `token`, that
    /// `admits` accepts (it lies inside the outer domains); following it
    /// extends its life to `now + PLAN_TTL`. `None`: plan again.
    pub fn consult(
        &self,
        group: &GroupRef,
        key: &str,
        token: u64,
        now: Instant,
        admits: impl FnOnce(&Plan) -> bool,
    ) -> Option<String> {
        let mut plans = self.plans.lock();
        match plans.get_mut(group) {
            Some(p) if p.token == token && p.expires > now && p.key == key && admits(p) => {
                p.expires = now + PLAN_TTL;
                Some(p.value.clone())
            }
            _ => None,
        }
    }

    /// Makes plans in one step under the lock. Lapsed plans and plans of
    /// groups `live` rejects are dropped first; `make` reads the remaining
    /// plans (what other groups reserve) and returns `(group, key, value,
    /// token)` for each plan to record (`None`: nothing fits, nothing is
    /// recorded). Returns whether plans were recorded.
    pub fn plan(
        &self,
        now: Instant,
        live: impl Fn(&GroupRef) -> bool,
        make: impl FnOnce(&Plans) -> Option<Vec<(GroupRef, String, String, u64)>>,
    ) -> bool {
        let mut plans = self.plans.lock();
        plans.retain(|g, p| p.expires > now && live(g));
        let Some(made) = make(&plans) else {
            return false;
        };
        for (group, key, value, token) in made {
            plans.insert(
                group,
                Plan {
                    key,
                    value,
                    token,
                    expires: now + PLAN_TTL,
                    missed_since: None,
                },
            );
        }
        true
    }

    /// A member of each group in `groups` was offered no node of its
    /// planned domain. Under node sampling a later cycle's sample meets the
    /// domain; a domain kube-scheduler has offered to no member for
    /// [`PLAN_TTL`] is one its own filters reject (nominated pods, devices,
    /// taints), and the plan is forgotten, so the group is planned again
    /// among the nodes kube-scheduler does offer. Whether one was.
    pub fn missed(&self, groups: &[GroupRef], now: Instant) -> bool {
        let mut plans = self.plans.lock();
        let mut stale = false;
        for g in groups {
            if let Some(p) = plans.get_mut(g) {
                let since = *p.missed_since.get_or_insert(now);
                stale |= now.duration_since(since) >= PLAN_TTL;
            }
        }
        if stale {
            for g in groups {
                plans.remove(g);
            }
        }
        stale
    }

    /// A member was offered a node of its groups' planned domains.
    pub fn followed(&self, groups: &[GroupRef]) {
        let mut plans = self.plans.lock();
        for g in groups {
            if let Some(p) = plans.get_mut(g) {
                p.missed_since = None;
            }
        }
    }

    /// Reads the plans (what other groups reserve) under the lock.
    pub fn with_plans<R>(&self, read: impl FnOnce(&Plans) -> R) -> R {
        read(&self.plans.lock())
    }

    /// Forgets the plans of `groups`, and every plan lapsed by `now`.
    pub fn drop(&self, groups: &[GroupRef], now: Instant) {
        let mut plans = self.plans.lock();
        for g in groups {
            plans.remove(g);
        }
        plans.retain(|_, p| p.expires > now);
    }

    /// Forgets the plans of `groups` only (a plan whose room was taken).
    pub fn forget(&self, groups: impl IntoIterator<Item = GroupRef>) {
        let mut plans = self.plans.lock();
        for g in groups {
            plans.remove(&g);
        }
    }

    /// The planned value of a group, lapsed or not (prioritize prefers it
    /// until the plan is replaced or dropped).
    pub fn planned(&self, group: &GroupRef) -> Option<String> {
        self.plans.lock().get(group).map(|p| p.value.clone())
    }

    /// A copy of a group's plan.
    pub fn get(&self, group: &GroupRef) -> Option<Plan> {
        self.plans.lock().get(group).cloned()
    }

    /// Number of plans kept (lapsed ones included until the next plan or
    /// drop).
    pub fn len(&self) -> usize {
        self.plans.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.plans.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::cluster_index::ClusterIndex;
    use crate::extender::gang::{self, filter_gate, quorum, tree_of};
    use crate::pods::fit::pod_requests;
    use crate::testkit;
    use k8s_openapi::api::core::v1::Pod;

    fn g(name: &str) -> GroupRef {
        GroupRef::group("ns", name)
    }

    #[test]
    fn notes_keep_the_last_reason_are_bounded_and_drain_once() {
        let planner = GangPlanner::new();
        planner.note(&g("a"), Some("a-1"), "first");
        planner.note(&g("a"), Some("a-1"), "second");
        for i in 0..MAX_NOTES + 10 {
            planner.note(&g(&format!("n{i}")), None, "full");
        }
        // An existing group is still updated when the table is full.
        planner.note(&g("a"), Some("a-2"), "third");
        let notes = planner.take_notes();
        assert_eq!(notes.len(), MAX_NOTES);
        assert_eq!(
            notes.get(&g("a")),
            Some(&Note {
                uid: Some("a-2".into()),
                message: "third".into()
            })
        );
        assert!(planner.take_notes().is_empty());
    }

    fn record(planner: &GangPlanner, group: &str, value: &str, token: u64, now: Instant) -> bool {
        planner.plan(
            now,
            |_| true,
            |_| Some(vec![(g(group), "rack".into(), value.into(), token)]),
        )
    }

    #[test]
    fn a_plan_lapses_unless_consulted_and_consulting_extends_it() {
        let planner = GangPlanner::new();
        let t0 = Instant::now();
        assert!(record(&planner, "a", "r1", 7, t0));
        // Consulted before it lapses: followed, and its life extended.
        let t1 = t0 + PLAN_TTL - Duration::from_secs(1);
        assert_eq!(
            planner.consult(&g("a"), "rack", 7, t1, |_| true),
            Some("r1".into())
        );
        let t2 = t1 + PLAN_TTL - Duration::from_secs(1);
        assert_eq!(
            planner.consult(&g("a"), "rack", 7, t2, |_| true),
            Some("r1".into())
        );
        // Not consulted for PLAN_TTL: lapsed.
        let t3 = t2 + PLAN_TTL;
        assert_eq!(planner.consult(&g("a"), "rack", 7, t3, |_| true), None);
        // The next plan or drop removes it.
        planner.drop(&[], t3);
        assert!(planner.is_empty());
    }

    #[test]
    fn a_plan_under_other_specs_or_keys_or_outside_is_not_followed() {
        let planner = GangPlanner::new();
        let now = Instant::now();
        assert!(record(&planner, "a", "r1", 7, now));
        assert_eq!(planner.consult(&g("a"), "rack", 8, now, |_| true), None);
        assert_eq!(planner.consult(&g("a"), "zone", 7, now, |_| true), None);
        assert_eq!(planner.consult(&g("a"), "rack", 7, now, |_| false), None);
        assert_eq!(planner.consult(&g("b"), "rack", 7, now, |_| true), None);
    }

    #[test]
    fn planning_drops_lapsed_plans_and_plans_of_groups_gone_first() {
        let planner = GangPlanner::new();
        let now = Instant::now();
        assert!(record(&planner, "old", "r1", 1, now));
        assert!(record(&planner, "gone", "r2", 1, now + PLAN_TTL));
        let later = now + PLAN_TTL;
        let seen = std::cell::RefCell::new(Vec::new());
        let made = planner.plan(
            later,
            |grp| grp.name != "gone",
            |plans| {
                seen.borrow_mut().extend(plans.keys().cloned());
                None
            },
        );
        assert!(!made, "nothing fits, nothing recorded");
        assert!(seen.borrow().is_empty(), "{:?}", seen.borrow());
        assert!(planner.is_empty());
    }

    fn member_requests(p: &Pod) -> crate::pods::fit::Amounts {
        pod_requests(p.spec.as_ref().expect("spec")).expect("requests")
    }

    #[test]
    fn quorum_drops_the_plans_of_the_unit() {
        let cache = ClusterIndex::of(testkit::racks(&[("r1", 2, "4"), ("r2", 2, "4")]));
        let pods = cache.apply_objects(testkit::gang("g", 2, "4", true));
        let planner = GangPlanner::new();
        let names = cache.read().node_names();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let v = filter_gate(
            &cache.read(),
            &planner,
            &pods[0],
            &member_requests(&pods[0]),
            &names,
            Instant::now(),
        );
        assert!(v.wide.is_none());
        let rack = v.domain()[0].1.clone();
        assert!(planner.get(&g("g")).is_some());
        // Both members assumed in the planned rack: the quorum is reached,
        // and bind drops the unit's plans.
        cache.assume("ns", "g-0", "g-0-uid", &format!("{rack}-0"));
        cache.assume("ns", "g-1", "g-1-uid", &format!("{rack}-1"));
        let snap = cache.read();
        let q = quorum(&snap, "ns", "g-1")
            .expect("hierarchy")
            .expect("a gang");
        assert!(q.reached);
        gang::drop_plans(&planner, &tree_of(&snap, &q.unit), Instant::now());
        assert!(planner.get(&g("g")).is_none());
    }

    #[test]
    fn drop_plans_lapses_plans_by_the_clock_it_is_given() {
        let planner = GangPlanner::new();
        let t0 = Instant::now();
        assert!(record(&planner, "done", "r1", 1, t0));
        assert!(record(&planner, "waiting", "r2", 1, t0));
        // Before the waiting group's plan lapses: only the unit's plans go.
        let before = t0 + PLAN_TTL - Duration::from_secs(1);
        gang::drop_plans(&planner, &[g("done")], before);
        assert!(planner.get(&g("done")).is_none());
        assert!(planner.get(&g("waiting")).is_some());
        // At its expiry by the clock passed in (the wall clock is still
        // near t0): lapsed, and dropped.
        gang::drop_plans(&planner, &[], t0 + PLAN_TTL);
        assert!(planner.is_empty());
    }

    /// The rack a fresh group plans for its member `p`, offered `sample`
    /// (node names in kube-scheduler's order).
    fn planned_rack(
        cache: &crate::cache::cluster_index::ClusterIndex,
        p: &Pod,
        sample: &[&str],
    ) -> String {
        let planner = GangPlanner::new();
        let v = filter_gate(
            &cache.read(),
            &planner,
            p,
            &member_requests(p),
            sample,
            Instant::now(),
        );
        assert!(v.wide.is_none(), "{:?}", v.wide);
        v.domain()[0].1.clone()
    }

    #[test]
    fn under_a_sample_a_fresh_group_plans_the_domain_the_sample_ends_inside() {
        // Three empty racks of three nodes; a gang of two one-cpu pods fits
        // in any of them.
        let cache = ClusterIndex::of(testkit::racks(&[
            ("r1", 3, "4"),
            ("r2", 3, "4"),
            ("r3", 3, "4"),
        ]));
        let pods = cache.apply_objects(testkit::gang("g", 2, "1", true));
        let names = cache.read().node_names();
        let every: Vec<&str> = names.iter().map(String::as_str).collect();
        // Every node offered: best fit, the first of equal racks.
        assert_eq!(planned_rack(&cache, &pods[0], &every), "r1");
        // kube-scheduler's sample stopped inside r2 (r2-2 has room and was
        // not offered): its next cycle starts at r2-2, so r2 is planned.
        assert_eq!(
            planned_rack(&cache, &pods[0], &["r1-0", "r1-1", "r1-2", "r2-0", "r2-1"]),
            "r2"
        );
        // Wrapped around past the last node: the sample ends inside r1
        // (best fit alone would take r2, the first rack offered).
        assert_eq!(
            planned_rack(&cache, &pods[0], &["r2-2", "r3-0", "r3-1", "r3-2", "r1-0"]),
            "r1"
        );
        assert_eq!(
            planned_rack(&cache, &pods[0], &["r2-2", "r3-0", "r3-1"]),
            "r3"
        );
        // A sample that ends on a rack's last node straddles no rack: best
        // fit among the racks the pod was offered.
        assert_eq!(
            planned_rack(
                &cache,
                &pods[0],
                &["r2-0", "r2-1", "r2-2", "r3-0", "r3-1", "r3-2"]
            ),
            "r2"
        );
    }

    #[test]
    fn nodes_the_pods_own_affinity_excludes_do_not_make_a_sample() {
        let cache = ClusterIndex::of(testkit::racks(&[
            ("r1", 3, "4"),
            ("r2", 3, "4"),
            ("r3", 3, "4"),
        ]));
        // g-0 may run on r1 and two nodes of r2 only: kube-scheduler offers
        // exactly those, every one of them (no sample).
        let mine = ["r1-0", "r1-1", "r1-2", "r2-0", "r2-1"];
        let mut objs = testkit::gang("g", 2, "1", true);
        objs[1] = objs[1].clone().set(
            &["spec", "affinity"],
            serde_json::json!({"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": mine}]}
            ]}}}),
        );
        let pods = cache.apply_objects(objs);
        let p = &pods[0];
        // r2-2 has room but the pod may not use it: best fit, r1.
        assert_eq!(planned_rack(&cache, p, &mine), "r1");
    }

    #[test]
    fn a_spec_change_makes_the_plan_stale_and_it_is_made_again() {
        let cache = ClusterIndex::of(testkit::racks(&[("r1", 2, "4"), ("r2", 3, "4")]));
        let pods = cache.apply_objects(testkit::gang("g", 2, "4", true));
        let planner = GangPlanner::new();
        let names = cache.read().node_names();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let first = filter_gate(
            &cache.read(),
            &planner,
            &pods[0],
            &member_requests(&pods[0]),
            &names,
            Instant::now(),
        );
        assert_eq!(first.domain()[0].1, "r1", "best fit for 2");
        let before = planner.get(&g("g")).expect("plan");
        // The gang now needs 3 (a third member comes): r1 cannot hold it.
        cache.apply_pod_group(
            &testkit::pod_group("g")
                .namespace("ns")
                .gang(3)
                .topology(testkit::RACK)
                .typed(),
        );
        let third: Pod = testkit::pod("g-2")
            .namespace("ns")
            .requests(&[("cpu", "4")])
            .group("g")
            .typed();
        cache.apply_pod(&third);
        let v = filter_gate(
            &cache.read(),
            &planner,
            &pods[0],
            &member_requests(&pods[0]),
            &names,
            Instant::now(),
        );
        assert!(v.wide.is_none(), "{:?}", v.wide);
        assert_eq!(v.domain()[0].1, "r2");
        let after = planner.get(&g("g")).expect("plan");
        assert_ne!(before.token, after.token, "made under the new spec");
    }
}
