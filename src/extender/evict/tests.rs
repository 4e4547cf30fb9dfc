//! The evictor against a recording writer, on paused time.

use super::*;
use crate::cluster::{BindError, ClaimAllocationRef, PodBinding, WriteError};
use crate::crd::RunStatus;
use crate::testkit;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use serde_json::json;
use std::collections::HashMap;

/// Records evictions, conditions and events; refuses each pod's first
/// `refuse[pod]` evictions with a PodDisruptionBudget's 429.
#[derive(Default)]
struct Recorder {
    refuse: Mutex<HashMap<String, u32>>,
    attempts: Mutex<Vec<String>>,
    evicted: Mutex<Vec<PodId>>,
    conditions: Mutex<Vec<(GroupRef, Condition)>>,
    events: Mutex<Vec<(ObjectRef, String, String)>>,
}

impl ClusterWriter for Recorder {
    fn write_run_status<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: Option<&'a str>,
        _: &'a RunStatus,
    ) -> BoxFuture<'a, Result<(), WriteError>> {
        Box::pin(async { Ok(()) })
    }
    fn bind_pod<'a>(&'a self, _: &'a PodBinding) -> BoxFuture<'a, Result<(), BindError>> {
        Box::pin(async { Ok(()) })
    }
    fn clear_claim_allocation<'a>(
        &'a self,
        _: &'a ClaimAllocationRef,
    ) -> BoxFuture<'a, Result<(), WriteError>> {
        Box::pin(async { Ok(()) })
    }
    fn write_group_condition<'a>(
        &'a self,
        group: &'a GroupRef,
        condition: &'a Condition,
    ) -> BoxFuture<'a, Result<(), WriteError>> {
        Box::pin(async move {
            self.conditions
                .lock()
                .push((group.clone(), condition.clone()));
            Ok(())
        })
    }
    fn record_event<'a>(
        &'a self,
        object: &'a ObjectRef,
        kind: EventKind,
        reason: EventReason,
        note: &'a str,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            assert_eq!(kind, EventKind::Warning);
            self.events
                .lock()
                .push((object.clone(), reason.as_str().to_owned(), note.to_owned()));
        })
    }
    fn evict_pod<'a>(&'a self, pod: &'a PodId) -> BoxFuture<'a, Result<(), EvictError>> {
        Box::pin(async move {
            self.attempts.lock().push(pod.name.clone());
            let mut refuse = self.refuse.lock();
            if let Some(n) = refuse.get_mut(&pod.name)
                && *n > 0
            {
                *n -= 1;
                return Err(EvictError::Refused {
                    pod: pod.to_string(),
                    message: "Cannot evict pod as it would violate the pod's disruption budget."
                        .into(),
                });
            }
            self.evicted.lock().push(pod.clone());
            Ok(())
        })
    }
}

// Fixtures from the test kit: namespace `ns`, nodes with 8 cpu / 8Gi.

fn node(name: &str) -> Node {
    testkit::node(name).allocatable("8", "8Gi").typed()
}

/// A Running member `ns/name` of `group` on `node`, priority 10, requesting
/// nothing.
fn pod(name: &str, node: &str, group: &str) -> Pod {
    testkit::pod(name)
        .namespace("ns")
        .requests(&[])
        .priority(10)
        .group(group)
        .on_node(node)
        .typed()
}

/// The preemptor `big`, pending; `nominated`: kube-scheduler preempted for
/// it there.
fn preemptor(nominated: Option<&str>) -> Pod {
    testkit::pod("big")
        .namespace("ns")
        .requests(&[])
        .priority(1000)
        .phase("Pending")
        .set(&["status", "nominatedNodeName"], json!(nominated))
        .typed()
}

/// `sp0` as its controller created it again: another uid, pending.
fn sp0_replaced() -> Pod {
    let mut p: Pod = testkit::pod("sp0")
        .namespace("ns")
        .requests(&[])
        .priority(10)
        .group("spread")
        .phase("Pending")
        .typed();
    p.metadata.uid = Some("sp0-new".into());
    p
}

/// Another pod under the preemptor's name: [`preemptor`] with `uid`.
fn preemptor_as(uid: &str, nominated: Option<&str>) -> Pod {
    let mut p = preemptor(nominated);
    p.metadata.uid = Some(uid.into());
    p
}

fn id(name: &str) -> PodId {
    PodId {
        namespace: "ns".into(),
        name: name.into(),
        uid: format!("{name}-uid"),
    }
}

/// PodGroup `spread` (All, priority 10): sp0 on n1, sp1 on n2, sp2 on n3.
fn cluster() -> Arc<ClusterIndex> {
    let c = ClusterIndex::new();
    for n in ["n1", "n2", "n3"] {
        c.apply_node(&node(n));
    }
    let g: PodGroup = testkit::pod_group("spread")
        .namespace("ns")
        .uid("spread-uid")
        .set(&["metadata", "generation"], 3)
        .set(&["spec", "priority"], 10)
        .gang(3)
        .disrupt_all()
        .typed();
    c.apply_pod_group(&g);
    for (p, n) in [("sp0", "n1"), ("sp1", "n2"), ("sp2", "n3")] {
        c.apply_pod(&pod(p, n, "spread"));
    }
    c.apply_pod(&preemptor(None));
    Arc::new(c)
}

fn intent(node: &str, victims: &[&str], elsewhere: &[&str]) -> Intent {
    Intent {
        preemptor: id("big"),
        preemptor_priority: 1000,
        node: node.into(),
        namespace: "ns".into(),
        scope: Scope::Group("spread".into()),
        victims: victims.iter().map(|v| id(v)).collect(),
        elsewhere: elsewhere.iter().map(|v| id(v)).collect(),
    }
}

fn start(
    config: EvictConfig,
    nodes: &Arc<ClusterIndex>,
    writer: &Arc<Recorder>,
) -> (Arc<Evictions>, tokio::task::JoinHandle<()>) {
    start_counted(config, nodes, writer, Arc::new(Metrics::default()))
}

fn start_counted(
    config: EvictConfig,
    nodes: &Arc<ClusterIndex>,
    writer: &Arc<Recorder>,
    metrics: Arc<Metrics>,
) -> (Arc<Evictions>, tokio::task::JoinHandle<()>) {
    let ev = Arc::new(Evictions::new(config));
    let w: Arc<dyn ClusterWriter> = writer.clone();
    let task = tokio::spawn(Arc::clone(&ev).run(Arc::clone(nodes), w, metrics));
    (ev, task)
}

/// `kruntimes_disruption_evictions_total` by result.
fn counted(m: &Metrics, result: EvictionResult) -> u64 {
    m.disruption_evictions
        .get_or_create(&crate::metrics::EvictionLabels { result })
        .get()
}

async fn settle(d: Duration) {
    tokio::time::sleep(d).await;
}

#[tokio::test(start_paused = true)]
async fn the_rest_is_evicted_once_the_victims_are_deleted_with_refusals_retried() {
    let nodes = cluster();
    let writer = Arc::new(Recorder::default());
    writer.refuse.lock().insert("sp1".into(), 2);
    let metrics = Arc::new(Metrics::default());
    let (ev, task) = start_counted(
        EvictConfig::default(),
        &nodes,
        &writer,
        Arc::clone(&metrics),
    );
    ev.expect(vec![intent("n1", &["sp0"], &["sp1", "sp2"])]);
    settle(Duration::from_secs(5)).await;
    assert!(
        writer.attempts.lock().is_empty(),
        "nothing is evicted before kube-scheduler deletes the victims"
    );
    assert_eq!(ev.pending(), 1);
    // kube-scheduler nominates n1 for the preemptor and deletes sp0: it is
    // first marked terminating.
    nodes.apply_pod(&preemptor(Some("n1")));
    settle(Duration::from_millis(10)).await;
    assert_eq!(ev.pending(), 1, "the victim is not deleted yet");
    let mut terminating = pod("sp0", "n1", "spread");
    terminating.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    nodes.apply_pod(&terminating);
    settle(Duration::from_millis(10)).await;
    assert_eq!(ev.pending(), 0);
    // sp2 goes at once; sp1 is refused twice (0.5s, then 1s later).
    assert_eq!(*writer.evicted.lock(), vec![id("sp2")]);
    {
        let conds = writer.conditions.lock();
        assert_eq!(conds.len(), 1, "{conds:?}");
        let (g, c) = &conds[0];
        assert_eq!(g, &GroupRef::group("ns", "spread"));
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            (DISRUPTION_TARGET, "True", PREEMPTED)
        );
        assert_eq!(c.observed_generation, Some(3));
        assert!(
            c.message
                .contains("kube-scheduler preempted sp0 on node n1 for pod ns/big (priority 1000)"),
            "{}",
            c.message
        );
        assert!(
            c.message
                .contains("evicting the 2 members running on other nodes: "),
            "{}",
            c.message
        );
    }
    settle(Duration::from_millis(600)).await;
    assert_eq!(writer.attempts.lock().len(), 3, "{:?}", writer.attempts);
    assert!(writer.events.lock().is_empty());
    settle(Duration::from_millis(1100)).await;
    assert_eq!(*writer.evicted.lock(), vec![id("sp2"), id("sp1")]);
    let events = writer.events.lock().clone();
    assert_eq!(events.len(), 1, "{events:?}");
    let (o, reason, note) = &events[0];
    assert_eq!(
        (o.kind.as_str(), o.name.as_str(), o.uid.as_str()),
        ("PodGroup", "spread", "spread-uid")
    );
    assert_eq!(reason, EVENT_PREEMPTED);
    for want in [
        "evicted 2 members on other nodes: sp2 on n3, sp1 on n2",
        "2 refusals by a PodDisruptionBudget were retried",
    ] {
        assert!(note.contains(want), "{want}: {note}");
    }
    let conds = writer.conditions.lock();
    assert_eq!(conds.len(), 2);
    assert_eq!(conds[1].1.reason, PREEMPTED);
    assert_eq!(&conds[1].1.message, note);
    assert_eq!(
        conds[0].1.last_transition_time,
        conds[1].1.last_transition_time
    );
    assert_eq!(counted(&metrics, EvictionResult::Evicted), 2);
    assert_eq!(counted(&metrics, EvictionResult::Refused), 2);
    assert_eq!(counted(&metrics, EvictionResult::GaveUp), 0);
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn candidates_not_chosen_expire_and_the_chosen_one_drops_the_others() {
    let nodes = cluster();
    let writer = Arc::new(Recorder::default());
    let config = EvictConfig {
        intent_ttl: Duration::from_secs(60),
        ..EvictConfig::default()
    };
    let (ev, task) = start(config, &nodes, &writer);
    // Two candidates for one preemptor: n1 (sp0) and n2 (sp1).
    ev.expect(vec![
        intent("n1", &["sp0"], &["sp1", "sp2"]),
        intent("n2", &["sp1"], &["sp0", "sp2"]),
    ]);
    // The same answer again replaces, never duplicates.
    ev.expect(vec![intent("n1", &["sp0"], &["sp1", "sp2"])]);
    assert_eq!(ev.pending(), 2);
    // kube-scheduler chose n2: sp1 is gone.
    nodes.apply_pod(&preemptor(Some("n2")));
    nodes.delete_pod("ns", "sp1");
    settle(Duration::from_millis(10)).await;
    assert_eq!(ev.pending(), 0, "the n1 candidate was not chosen");
    assert_eq!(*writer.evicted.lock(), vec![id("sp0"), id("sp2")]);
    // A later answer whose victims are never deleted expires.
    ev.expect(vec![intent("n3", &["sp2"], &["sp0"])]);
    settle(Duration::from_secs(59)).await;
    assert_eq!(ev.pending(), 1);
    settle(Duration::from_secs(2)).await;
    assert_eq!(ev.pending(), 0);
    assert_eq!(writer.evicted.lock().len(), 2);
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn members_gone_or_replaced_meanwhile_are_not_evicted_and_a_stuck_one_gives_up() {
    let nodes = cluster();
    let writer = Arc::new(Recorder::default());
    writer.refuse.lock().insert("sp2".into(), u32::MAX);
    let config = EvictConfig {
        give_up_after: Duration::from_secs(120),
        ..EvictConfig::default()
    };
    let (ev, task) = start(config, &nodes, &writer);
    ev.expect(vec![intent("n1", &["sp0"], &["sp1", "sp2"])]);
    // sp1 was replaced by a pod of the same name (another uid).
    let mut other = pod("sp1", "n2", "spread");
    other.metadata.uid = Some("sp1-new".into());
    nodes.apply_pod(&other);
    nodes.apply_pod(&preemptor(Some("n1")));
    nodes.delete_pod("ns", "sp0");
    settle(Duration::from_millis(10)).await;
    // The replacement is a member running at that point: it goes too,
    // under its own uid.
    assert_eq!(
        writer
            .evicted
            .lock()
            .iter()
            .map(|p| p.uid.as_str())
            .collect::<Vec<_>>(),
        ["sp1-new"]
    );
    // sp2 is refused for ever: retries back off to 30s, then the job gives up.
    settle(Duration::from_secs(119)).await;
    let attempts = writer
        .attempts
        .lock()
        .iter()
        .filter(|a| *a == "sp2")
        .count();
    assert!((5..=12).contains(&attempts), "{attempts} attempts");
    assert!(writer.events.lock().is_empty());
    settle(Duration::from_secs(2)).await;
    let events = writer.events.lock().clone();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].1, INCOMPLETE);
    assert!(
        events[0].2.contains(
            "1 members could not be evicted and still run: sp2 on n3 (eviction of ns/sp2 refused"
        ),
        "{}",
        events[0].2
    );
    assert_eq!(
        writer.conditions.lock().last().unwrap().1.reason,
        INCOMPLETE
    );
    // No more attempts after giving up.
    let before = writer.attempts.lock().len();
    settle(Duration::from_secs(300)).await;
    assert_eq!(writer.attempts.lock().len(), before);
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn victims_deleted_for_another_reason_fire_nothing() {
    let nodes = cluster();
    let writer = Arc::new(Recorder::default());
    let (ev, task) = start(EvictConfig::default(), &nodes, &writer);
    ev.expect(vec![intent("n1", &["sp0"], &["sp1", "sp2"])]);
    // sp0 goes (its controller restarted it, say); the preemptor is not
    // nominated: kube-scheduler did not preempt on n1.
    nodes.delete_pod("ns", "sp0");
    settle(Duration::from_secs(5)).await;
    assert!(writer.attempts.lock().is_empty());
    // Nominated elsewhere: still not this candidate.
    nodes.apply_pod(&preemptor(Some("n3")));
    settle(Duration::from_secs(5)).await;
    assert!(writer.attempts.lock().is_empty());
    assert_eq!(ev.pending(), 1);
    // Nominated on n1: this candidate was chosen.
    nodes.apply_pod(&preemptor(Some("n1")));
    settle(Duration::from_millis(10)).await;
    assert_eq!(*writer.evicted.lock(), vec![id("sp1"), id("sp2")]);
    // Bound there (the nomination cleared) fires too.
    ev.expect(vec![intent("n1", &["sp1"], &["sp2"])]);
    let mut bound = preemptor(None);
    bound.spec.as_mut().unwrap().node_name = Some("n1".into());
    nodes.apply_pod(&bound);
    nodes.delete_pod("ns", "sp1");
    settle(Duration::from_millis(10)).await;
    assert_eq!(ev.pending(), 0);
    task.abort();

    // Another pod under the preemptor's name (another uid, an older one:
    // the watch has not shown the preemptor yet) nominated on n1 is not
    // the preemptor either.
    let nodes = cluster();
    nodes.delete_pod("ns", "big");
    let writer = Arc::new(Recorder::default());
    let (ev, task) = start(EvictConfig::default(), &nodes, &writer);
    ev.expect(vec![intent("n1", &["sp0"], &["sp1", "sp2"])]);
    nodes.delete_pod("ns", "sp0");
    nodes.apply_pod(&preemptor_as("other-uid", Some("n1")));
    settle(Duration::from_secs(5)).await;
    assert!(writer.attempts.lock().is_empty());
    assert_eq!(ev.pending(), 1);
    nodes.apply_pod(&preemptor(Some("n1")));
    settle(Duration::from_millis(10)).await;
    assert_eq!(*writer.evicted.lock(), vec![id("sp1"), id("sp2")]);
    task.abort();
}

/// An intent whose preemptor was bound on another node, or is gone,
/// can never fire: it goes at once instead of living out its TTL
/// (simulation seed 162 ended with one still pending).
#[tokio::test(start_paused = true)]
async fn an_intent_whose_preemptor_went_elsewhere_or_away_goes() {
    let nodes = cluster();
    let writer = Arc::new(Recorder::default());
    let (ev, task) = start(EvictConfig::default(), &nodes, &writer);
    ev.expect(vec![
        intent("n1", &["sp0"], &["sp1", "sp2"]),
        intent("n2", &["sp1"], &["sp0", "sp2"]),
    ]);
    // Assumed on n3 by a bind whose outcome is not known yet: the watch
    // does not show it bound there, so both candidates stay.
    assert!(nodes.assume("ns", "big", "big-uid", "n3"));
    nodes.apply_pod(&preemptor(None));
    settle(Duration::from_millis(10)).await;
    assert_eq!(ev.pending(), 2);
    nodes.forget("ns", "big");
    // Bound on n3, where it preempted nothing: neither candidate fires.
    let mut bound = preemptor(None);
    bound.spec.as_mut().unwrap().node_name = Some("n3".into());
    nodes.apply_pod(&bound);
    settle(Duration::from_millis(10)).await;
    assert_eq!(ev.pending(), 0);
    // sp0 and sp1 going later fire nothing.
    nodes.delete_pod("ns", "sp0");
    nodes.delete_pod("ns", "sp1");
    settle(Duration::from_secs(5)).await;
    assert!(writer.attempts.lock().is_empty());
    // A preemptor deleted takes its intents with it.
    nodes.apply_pod(&preemptor(None));
    ev.expect(vec![intent("n3", &["sp2"], &[])]);
    settle(Duration::from_millis(10)).await;
    assert_eq!(ev.pending(), 1);
    nodes.delete_pod("ns", "big");
    settle(Duration::from_millis(10)).await;
    assert_eq!(ev.pending(), 0);
    // A preemptor the watch has not shown yet is not gone: its intent
    // waits for it.
    ev.expect(vec![intent("n3", &["sp2"], &[])]);
    settle(Duration::from_secs(1)).await;
    assert_eq!(ev.pending(), 1);
    // Nor is another pod under its name before the watch has shown it
    // (that may be an older one).
    nodes.apply_pod(&preemptor_as("big-older", None));
    settle(Duration::from_secs(1)).await;
    assert_eq!(ev.pending(), 1);
    // Once shown, a preemptor replaced by another pod under its name
    // (deleted and created again between two reads) takes its intents
    // with it, as a deleted one does.
    nodes.apply_pod(&preemptor(None));
    settle(Duration::from_millis(10)).await;
    assert_eq!(ev.pending(), 1);
    nodes.apply_pod(&preemptor_as("big-new", None));
    settle(Duration::from_millis(10)).await;
    assert_eq!(ev.pending(), 0);
    task.abort();
}

#[test]
fn the_pending_table_is_bounded() {
    let ev = Evictions::new(EvictConfig {
        max_intents: 3,
        ..EvictConfig::default()
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        for n in 0..10 {
            let mut i = intent(&format!("n{n}"), &["sp0"], &["sp1"]);
            i.preemptor.uid = format!("p{n}");
            ev.expect(vec![i]);
        }
    });
    assert_eq!(ev.pending(), 3);
    let nodes: Vec<String> = ev
        .table
        .lock()
        .pending
        .iter()
        .map(|p| p.intent.node.clone())
        .collect();
    assert_eq!(nodes, ["n7", "n8", "n9"], "the oldest are dropped");
}

#[test]
fn messages_name_a_bounded_number_of_pods() {
    let many = (0..20).map(|i| format!("p{i}")).collect::<Vec<_>>();
    let s = names(many.into_iter());
    assert!(s.ends_with("p7, and 12 more"), "{s}");
}

/// The preemptor's nomination counts as the watch shows it, even while a
/// bind of this extender that answered uncertainly keeps it assumed on
/// another node (that assumption is a copy from before kube-scheduler
/// nominated it). Simulation seed 541: the intent never fired, and the
/// `All` group ran on without the member kube-scheduler preempted.
#[tokio::test(start_paused = true)]
async fn a_nomination_counts_while_an_earlier_bind_keeps_the_preemptor_assumed() {
    let nodes = cluster();
    let writer = Arc::new(Recorder::default());
    let (ev, task) = start(EvictConfig::default(), &nodes, &writer);
    nodes.apply_pod(&preemptor(None));
    assert!(nodes.assume("ns", "big", "big-uid", "n3"));
    ev.expect(vec![intent("n1", &["sp0"], &["sp1", "sp2"])]);
    nodes.apply_pod(&preemptor(Some("n1")));
    nodes.delete_pod("ns", "sp0");
    settle(Duration::from_millis(10)).await;
    assert_eq!(*writer.evicted.lock(), vec![id("sp1"), id("sp2")]);
    task.abort();
}

/// The watch dropped right after the preemption: kube-scheduler's
/// nomination of the preemptor and its clearing (a failed binding cycle)
/// both fell in the gap, and the relist shows the victims on the node
/// replaced and the preemptor bound on another node. The victims' deletion
/// is the choice's trace once a relist may have hidden it; without a
/// relist a deletion the watch showed while the preemptor was never
/// nominated there fires nothing (simulation seed 40124).
#[tokio::test(start_paused = true)]
async fn a_choice_a_relist_hid_is_read_from_the_victims_deleted() {
    let nodes = cluster();
    let writer = Arc::new(Recorder::default());
    let (ev, task) = start(EvictConfig::default(), &nodes, &writer);
    ev.expect(vec![intent("n1", &["sp0"], &["sp1", "sp2"])]);
    settle(Duration::from_millis(10)).await;
    // The relist: sp0 replaced (another uid, pending), big bound on n2,
    // nominated nowhere.
    let replaced = sp0_replaced();
    let bound: Pod = testkit::pod("big")
        .namespace("ns")
        .requests(&[])
        .priority(1000)
        .on_node("n2")
        .typed();
    let mut pods = vec![replaced, bound];
    for (p, n) in [("sp1", "n2"), ("sp2", "n3")] {
        pods.push(pod(p, n, "spread"));
    }
    crate::cache::index::Index::<Pod>::reset(nodes.as_ref(), pods);
    settle(Duration::from_millis(10)).await;
    assert_eq!(ev.pending(), 0);
    assert_eq!(*writer.evicted.lock(), vec![id("sp1"), id("sp2")]);
    task.abort();

    // The same deletion seen by the watch, no relist: not chosen, and the
    // intent goes once the preemptor binds elsewhere.
    let nodes = cluster();
    let writer = Arc::new(Recorder::default());
    let (ev, task) = start(EvictConfig::default(), &nodes, &writer);
    ev.expect(vec![intent("n1", &["sp0"], &["sp1", "sp2"])]);
    settle(Duration::from_millis(10)).await;
    nodes.delete_pod("ns", "sp0");
    settle(Duration::from_millis(10)).await;
    assert_eq!(ev.pending(), 1, "a deletion kube-scheduler did not make");
    nodes.apply_pod(
        &testkit::pod("big")
            .namespace("ns")
            .requests(&[])
            .priority(1000)
            .on_node("n2")
            .typed(),
    );
    settle(Duration::from_millis(10)).await;
    assert_eq!(ev.pending(), 0);
    assert!(writer.evicted.lock().is_empty());
    task.abort();
}

/// kube-scheduler preempted for a pod on one node while the watch was
/// down, cleared its nomination (its next cycle found the node taken) and
/// preempted for it again on another node before the relist, which shows
/// the first node's victims replaced and the preemptor nominated to the
/// second. Both were choices: the first fires from the victims deleted,
/// the second waits for its own (simulation seed 2077: the first intent
/// was dropped, and its `All` group ran on partly).
#[tokio::test(start_paused = true)]
async fn a_second_preemption_before_the_relist_keeps_the_first_choice() {
    let nodes = cluster();
    let g: PodGroup = testkit::pod_group("wide")
        .namespace("ns")
        .uid("wide-uid")
        .set(&["spec", "priority"], 10)
        .gang(2)
        .disrupt_all()
        .typed();
    nodes.apply_pod_group(&g);
    for (p, n) in [("w0", "n3"), ("w1", "n1")] {
        nodes.apply_pod(&pod(p, n, "wide"));
    }
    let writer = Arc::new(Recorder::default());
    let (ev, task) = start(EvictConfig::default(), &nodes, &writer);
    ev.expect(vec![intent("n1", &["sp0"], &["sp1", "sp2"])]);
    settle(Duration::from_millis(10)).await;
    let mut second = intent("n3", &["w0"], &["w1"]);
    second.scope = Scope::Group("wide".into());
    ev.expect(vec![second]);
    settle(Duration::from_millis(10)).await;
    // The relist: sp0 replaced (pending, another uid), big nominated to
    // n3, w0 still running.
    let replaced = sp0_replaced();
    let mut pods = vec![replaced, preemptor(Some("n3"))];
    for (p, n, g) in [
        ("sp1", "n2", "spread"),
        ("sp2", "n3", "spread"),
        ("w0", "n3", "wide"),
        ("w1", "n1", "wide"),
    ] {
        pods.push(pod(p, n, g));
    }
    crate::cache::index::Index::<Pod>::reset(nodes.as_ref(), pods);
    settle(Duration::from_millis(10)).await;
    assert_eq!(*writer.evicted.lock(), vec![id("sp1"), id("sp2")]);
    assert_eq!(ev.pending(), 1, "the second choice waits for its victim");
    nodes.delete_pod("ns", "w0");
    settle(Duration::from_millis(10)).await;
    assert_eq!(ev.pending(), 0);
    assert_eq!(*writer.evicted.lock(), vec![id("sp1"), id("sp2"), id("w1")]);
    task.abort();
}
