//! The bind sequence with no router and no HTTP, on tokio's paused clock:
//! cancelled at each await point (device wait, quorum hold, API call) it
//! leaves no assumption, no held member and no quorum contribution; and it
//! fails closed when the cache lacks the pod's group, parents or claims.

use super::*;
use crate::cluster::{ClaimAllocationRef, EventKind, EventReason, ObjectRef, WriteError};
use crate::crd::RunStatus;
use crate::metrics::{BindFailureLabels, GangWaitLabels};
use crate::testkit;
use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use parking_lot::Mutex;
use permit::GangConfig;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Semaphore;

/// A writer whose `bind_pod` may block until the test lets it answer.
struct SlowWriter {
    /// `bind_pod` waits for a permit when `blocking`.
    blocking: bool,
    release: Semaphore,
    /// Calls that started.
    started: AtomicUsize,
    /// What `bind_pod` answers.
    answer: Mutex<Result<(), BindError>>,
    /// Bindings created, `ns/name → node`.
    bound: Mutex<Vec<(String, String)>>,
    /// The Bindings created, whole.
    bindings: Mutex<Vec<PodBinding>>,
}

impl SlowWriter {
    fn new(blocking: bool) -> Arc<Self> {
        Arc::new(SlowWriter {
            blocking,
            release: Semaphore::new(0),
            started: AtomicUsize::new(0),
            answer: Mutex::new(Ok(())),
            bound: Mutex::new(Vec::new()),
            bindings: Mutex::new(Vec::new()),
        })
    }

    fn started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }
}

impl ClusterWriter for SlowWriter {
    fn write_run_status<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: Option<&'a str>,
        _: &'a RunStatus,
    ) -> BoxFuture<'a, Result<(), WriteError>> {
        Box::pin(async { Err(WriteError::Other("not expected here".into())) })
    }
    fn bind_pod<'a>(&'a self, b: &'a PodBinding) -> BoxFuture<'a, Result<(), BindError>> {
        Box::pin(async move {
            self.started.fetch_add(1, Ordering::SeqCst);
            if self.blocking {
                self.release
                    .acquire()
                    .await
                    .map_err(|e| BindError::Other {
                        namespace: b.namespace.clone(),
                        name: b.name.clone(),
                        message: e.to_string(),
                    })?
                    .forget();
            }
            let answer = self.answer.lock().clone();
            if answer.is_ok() {
                self.bound
                    .lock()
                    .push((format!("{}/{}", b.namespace, b.name), b.node.clone()));
                self.bindings.lock().push(b.clone());
            }
            answer
        })
    }
    fn clear_claim_allocation<'a>(
        &'a self,
        _: &'a ClaimAllocationRef,
    ) -> BoxFuture<'a, Result<(), WriteError>> {
        Box::pin(async { Ok(()) })
    }
    fn write_group_condition<'a>(
        &'a self,
        _: &'a GroupRef,
        _: &'a Condition,
    ) -> BoxFuture<'a, Result<(), WriteError>> {
        Box::pin(async { Ok(()) })
    }
}

// Fixtures from the test kit: namespace `ns`, nodes with 8 cpu / 16Gi.

fn node(name: &str) -> k8s_openapi::api::core::v1::Node {
    testkit::node(name).allocatable("8", "16Gi").typed()
}

/// Pod `name` in namespace `ns` (uid `<name>-uid`), 1 cpu, in `group`,
/// using the named claims.
fn pod(name: &str, group: Option<&str>, claims: &[&str]) -> k8s_openapi::api::core::v1::Pod {
    let mut p = testkit::pod(name).namespace("ns");
    if let Some(g) = group {
        p = p.group(g);
    }
    for c in claims {
        p = p.uses_claim(c, Some(c), None);
    }
    p.typed()
}

/// Member `name` of gang `g` bound on `n1`, as the watch shows it.
fn bound_on_n1(name: &str) -> k8s_openapi::api::core::v1::Pod {
    testkit::pod(name)
        .namespace("ns")
        .group("g")
        .on_node("n1")
        .typed()
}

fn gang(
    name: &str,
    min: u32,
    parent: Option<&str>,
) -> k8s_openapi::api::scheduling::v1beta1::PodGroup {
    let g = testkit::pod_group(name).namespace("ns").gang(min);
    match parent {
        Some(p) => g.parent(p),
        None => g,
    }
    .typed()
}

fn composite(
    name: &str,
    min_groups: u32,
    parent: Option<&str>,
) -> k8s_openapi::api::scheduling::v1alpha3::CompositePodGroup {
    let c = testkit::composite(name).namespace("ns").gang(min_groups);
    match parent {
        Some(p) => c.parent(p),
        None => c,
    }
    .typed()
}

/// Publishes device `drv/pool/d0` (the device the claims here are
/// allocated) on node `on`, in one slice, so publishing it again moves it:
/// an allocation none of whose devices is published is one the cache
/// cannot place, and bind fails closed on it.
fn publish_d0(nodes: &ClusterIndex, on: &str) {
    nodes.apply_slice(
        &testkit::slice("drv-d0", "drv", on, &["d0"])
            .set(&["spec", "pool", "name"], "pool")
            .typed(),
    );
}

/// Claim `name`, allocated, its device gated on `Attached` (not yet True).
fn gated_claim(name: &str, pod_uid: &str) -> k8s_openapi::api::resource::v1::ResourceClaim {
    testkit::claim(name, "c")
        .namespace("ns")
        .uid(&format!("{name}-uid"))
        .set(&["metadata", "resourceVersion"], "1")
        .allocated(&[("drv", "pool", "d0")])
        .binding_conditions(0, &["Attached"], &[])
        .reserved_for(&[("x", pod_uid)])
        .typed()
}

/// kube-scheduler's Unreserve after a failed bind (the pod leaves the
/// claim's `reservedFor`) and its next PreBind (reserved again), as the
/// watch shows them: two newer versions of [`gated_claim`].
fn rereserved(nodes: &ClusterIndex, name: &str, pod_uid: &str) {
    let mut c = gated_claim(name, pod_uid);
    let status = c.status.as_mut().expect("status");
    let reserved = status.reserved_for.take();
    c.metadata.resource_version = Some("2".into());
    nodes.apply_claim(&c);
    c.status.as_mut().expect("status").reserved_for = reserved;
    c.metadata.resource_version = Some("3".into());
    nodes.apply_claim(&c);
}

/// A node `n1`, a gang `g` of `min` pods `p0..p<pods>`, and the binder.
struct Fixture {
    binder: Binder,
    writer: Arc<SlowWriter>,
}

fn fixture(min: u32, pods: usize, blocking: bool) -> Fixture {
    fixture_with(
        min,
        pods,
        blocking,
        GangConfig {
            wait: Duration::from_secs(20),
            ..GangConfig::default()
        },
    )
}

fn fixture_with(min: u32, pods: usize, blocking: bool, config: GangConfig) -> Fixture {
    let nodes = Arc::new(ClusterIndex::new());
    nodes.apply_node(&node("n1"));
    nodes.apply_pod_group(&gang("g", min, None));
    for i in 0..pods {
        nodes.apply_pod(&pod(&format!("p{i}"), Some("g"), &[]));
    }
    let writer = SlowWriter::new(blocking);
    Fixture {
        binder: Binder {
            nodes,
            writer: writer.clone(),
            permit: Arc::new(Gangs::with_config(config)),
            devices: Arc::new(BindingGate::default()),
            metrics: Arc::new(Metrics::default()),
        },
        writer,
    }
}

fn req(name: &str) -> BindRequest {
    BindRequest {
        namespace: "ns".into(),
        name: name.into(),
        uid: format!("{name}-uid"),
        node: "n1".into(),
    }
}

impl Fixture {
    fn spawn(&self, name: &str) -> tokio::task::JoinHandle<Result<(), BindFailure>> {
        let (binder, req) = (self.binder.clone(), req(name));
        tokio::spawn(async move { binder.bind(&req).await })
    }

    /// Pod `x` in gang `g2` (1 of 1), under composite `c1`, under `c0`
    /// (left to the test).
    fn nested_x(&self) {
        let nodes = &self.binder.nodes;
        nodes.apply_pod_group(&gang("g2", 1, Some("c1")));
        nodes.apply_composite(&composite("c1", 1, Some("c0")));
        nodes.apply_pod(&pod("x", Some("g2"), &[]));
    }

    /// The watch shows member `name` of `g` bound on `node`.
    fn watch_bound(&self, name: &str, node: &str) {
        self.binder.nodes.apply_pod(
            &testkit::pod(name)
                .namespace("ns")
                .group("g")
                .on_node(node)
                .typed(),
        );
    }

    /// The watch shows member `name` of `g` pending, nominated to `node`.
    fn nominate(&self, name: &str, node: Option<&str>) {
        let mut p = pod(name, Some("g"), &[]);
        p.status.get_or_insert_default().nominated_node_name = node.map(str::to_owned);
        self.binder.nodes.apply_pod(&p);
    }

    /// Pods counted where kube-scheduler nominated them, with that node.
    fn nominated(&self) -> Vec<(String, String)> {
        let snap = self.binder.nodes.read();
        snap.nominated_pods()
            .map(|(k, _, node)| (k.1.clone(), node.to_owned()))
            .collect()
    }

    fn assumed(&self, name: &str) -> bool {
        self.binder.nodes.read().is_assumed("ns", name)
    }

    /// Members of `g` placed (bound or assumed) as its quorum counts them.
    fn placed(&self) -> usize {
        let snap = self.binder.nodes.read();
        snap.member_pods("ns", "g")
            .filter(|(_, p)| p.node.is_some())
            .count()
    }

    fn cpu_used(&self) -> u64 {
        self.binder.nodes.read().used("n1", "cpu").unwrap_or(0)
    }

    /// No assumption, no held member, no unit, no quorum contribution.
    fn assert_clean(&self, name: &str) {
        assert!(!self.assumed(name), "{name} still assumed");
        assert!(!self.binder.permit.is_held("ns", name), "{name} still held");
        assert_eq!(self.binder.permit.held(), 0, "members left in the hold");
        assert_eq!(self.binder.permit.units(), 0, "units left in the hold");
        assert_eq!(self.placed(), 0, "a quorum contribution is left");
        assert_eq!(self.cpu_used(), 0, "capacity is still taken");
    }

    fn failures(&self, cause: BindFailureCause) -> u64 {
        self.binder
            .metrics
            .bind_failures
            .get_or_create(&BindFailureLabels { cause })
            .get()
    }

    fn waits(&self, outcome: GangWait) -> u64 {
        self.binder
            .metrics
            .gang_waits
            .get_or_create(&GangWaitLabels { outcome })
            .get()
    }
}

/// Lets spawned tasks run until they block (paused time does not move).
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// Cancels a bind task as a dropped connection would: its future is dropped.
async fn cancel(task: tokio::task::JoinHandle<Result<(), BindFailure>>) {
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
}

// === cancellation ===

#[tokio::test(start_paused = true)]
async fn cancelled_before_assume_leaves_nothing() {
    let f = fixture(2, 2, false);
    let r = req("p0");
    let fut = f.binder.bind(&r);
    // Dropped before it first ran: nothing was assumed or held.
    drop(fut);
    f.assert_clean("p0");
    assert_eq!(f.writer.started(), 0);
}

#[tokio::test(start_paused = true)]
async fn cancelled_during_the_device_wait_drops_the_assumption() {
    let f = fixture(1, 0, false);
    publish_d0(&f.binder.nodes, "n1");
    f.binder.nodes.apply_pod(&pod("p0", Some("g"), &["gpu"]));
    f.binder.nodes.apply_claim(&gated_claim("gpu", "p0-uid"));
    let task = f.spawn("p0");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!task.is_finished());
    assert!(f.assumed("p0"), "assumed while its devices are awaited");
    assert_eq!(f.binder.devices.waiting(), 1);
    cancel(task).await;
    f.assert_clean("p0");
    assert_eq!(f.writer.started(), 0);
    assert_eq!(f.failures(BindFailureCause::Cancelled), 1);
}

/// Found by the cluster simulation (`cluster_sim::scheduler`, seed 1 with
/// DRA): a member assumed on its node while its devices are awaited counted
/// toward its gang's quorum, so another member was released and bound, and
/// the gang stayed below minCount when the devices never became ready.
#[tokio::test(start_paused = true)]
async fn a_member_awaiting_its_devices_does_not_count_toward_quorum() {
    let f = fixture(2, 0, false);
    publish_d0(&f.binder.nodes, "n1");
    f.binder.nodes.apply_pod(&pod("p0", Some("g"), &["gpu"]));
    f.binder.nodes.apply_pod(&pod("p1", Some("g"), &[]));
    f.binder.nodes.apply_claim(&gated_claim("gpu", "p0-uid"));
    let p0 = f.spawn("p0");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        f.assumed("p0"),
        "counted on its node while its devices are awaited"
    );
    assert_eq!(f.cpu_used(), 1000);
    let p1 = f.spawn("p1");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!p1.is_finished(), "p1 is bound on the strength of p0");
    assert!(f.binder.permit.is_held("ns", "p1"));
    assert!(f.writer.bound.lock().is_empty());
    // The driver reports the device attached: p0 passes the gate, completes
    // the quorum, and both bind.
    let ready: k8s_openapi::api::resource::v1::ResourceClaim = testkit::claim("gpu", "c")
        .namespace("ns")
        .uid("gpu-uid")
        .set(&["metadata", "resourceVersion"], "1")
        .allocated(&[("drv", "pool", "d0")])
        .binding_conditions(0, &["Attached"], &[])
        .reserved_for(&[("x", "p0-uid")])
        .device_conditions(
            ("drv", "pool", "d0"),
            &[("Attached", "True")],
            "2026-01-01T00:00:00Z",
        )
        .typed();
    f.binder.nodes.apply_claim(&ready);
    assert_eq!(p0.await.unwrap(), Ok(()));
    assert_eq!(p1.await.unwrap(), Ok(()));
    assert_eq!(f.writer.bound.lock().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn cancelled_while_held_leaves_the_hold_and_the_quorum() {
    let f = fixture(2, 2, false);
    let held = f.spawn("p0");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(f.binder.permit.is_held("ns", "p0"));
    assert!(f.assumed("p0"));
    assert_eq!(f.placed(), 1);
    cancel(held).await;
    f.assert_clean("p0");
    assert_eq!(f.waits(GangWait::Cancelled), 1);
    assert_eq!(f.failures(BindFailureCause::Cancelled), 1);
    // The next member does not complete a quorum with the cancelled one:
    // it is held, alone, and nothing is bound.
    let p1 = f.spawn("p1");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!p1.is_finished());
    assert!(f.binder.permit.is_held("ns", "p1"));
    assert_eq!(f.placed(), 1);
    assert!(f.writer.bound.lock().is_empty());
    // p0 again completes the quorum: both bind.
    let p0 = f.spawn("p0");
    assert_eq!(p0.await.unwrap(), Ok(()));
    assert_eq!(p1.await.unwrap(), Ok(()));
    assert_eq!(f.writer.bound.lock().len(), 2);
    assert_eq!(f.binder.permit.units(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_member_leaves_the_others_held_and_the_unit_waiting() {
    let f = fixture(3, 3, false);
    let p0 = f.spawn("p0");
    let p1 = f.spawn("p1");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(f.binder.permit.held(), 2);
    cancel(p1).await;
    assert!(!f.assumed("p1"));
    assert_eq!(f.binder.permit.held(), 1);
    assert_eq!(f.binder.permit.units(), 1);
    assert_eq!(f.placed(), 1);
    // p2 makes two of three: still held.
    let p2 = f.spawn("p2");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!p0.is_finished() && !p2.is_finished());
    assert!(f.writer.bound.lock().is_empty());
    // p0's own wait ends at --gang-wait from its arrival, but the unit
    // gained p2 since: p0 answers, and stays reserved (assumed, counted).
    let e0 = p0.await.unwrap().unwrap_err();
    assert!(
        matches!(e0, BindFailure::Hold(HoldFailure::Kept(_))),
        "{e0}"
    );
    assert!(e0.to_string().contains("stays reserved"), "{e0}");
    assert!(f.assumed("p0"), "p0 is reserved");
    assert!(f.binder.permit.is_kept("ns", "p0"));
    assert_eq!(f.placed(), 2);
    // The unit ends --gang-wait after its last new member (p2).
    let e2 = p2.await.unwrap().unwrap_err();
    assert!(
        matches!(e2, BindFailure::Hold(HoldFailure::Expired(_))),
        "{e2}"
    );
    assert!(
        e2.to_string()
            .contains("(2 of 3 placed); released 1 held pods and 1 reserved"),
        "{e2}"
    );
    f.assert_clean("p0");
    assert!(!f.binder.permit.is_kept("ns", "p0"));
    assert_eq!(f.waits(GangWait::Expired), 1);
    assert_eq!(f.waits(GangWait::Kept), 1);
    assert_eq!(f.waits(GangWait::Cancelled), 1);
    assert_eq!(f.failures(BindFailureCause::GangExpired), 1);
    assert_eq!(f.failures(BindFailureCause::GangKept), 1);
}

#[tokio::test(start_paused = true)]
async fn cancelled_during_the_api_call_the_outcome_of_the_call_decides() {
    // The call fails after the caller is gone: the assumption is dropped.
    let f = fixture(1, 1, true);
    let task = f.spawn("p0");
    settle().await;
    assert_eq!(f.writer.started(), 1);
    cancel(task).await;
    assert!(
        f.assumed("p0"),
        "the call is in flight: it may create the Binding"
    );
    *f.writer.answer.lock() = Err(BindError::PodGone {
        namespace: "ns".into(),
        name: "p0".into(),
    });
    f.writer.release.add_permits(1);
    settle().await;
    f.assert_clean("p0");
    assert_eq!(
        f.failures(BindFailureCause::Binding),
        0,
        "nobody got that answer"
    );

    // The call succeeds after the caller is gone: the Binding exists, so
    // the pod stays assumed and counts toward its quorum.
    let f = fixture(1, 1, true);
    let task = f.spawn("p0");
    settle().await;
    cancel(task).await;
    f.writer.release.add_permits(1);
    settle().await;
    assert!(f.assumed("p0"));
    assert_eq!(f.placed(), 1);
    assert_eq!(f.cpu_used(), 1000);
    assert_eq!(
        *f.writer.bound.lock(),
        vec![("ns/p0".to_owned(), "n1".to_owned())]
    );
    assert_eq!(f.binder.permit.units(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_gang_member_cancelled_during_its_api_call_is_forgotten_when_the_call_fails() {
    let f = fixture(2, 2, true);
    let p0 = f.spawn("p0");
    settle().await;
    let p1 = f.spawn("p1");
    settle().await;
    // Quorum reached: both are in their API calls.
    assert_eq!(f.writer.started(), 2);
    assert_eq!(f.binder.permit.held(), 0);
    cancel(p1).await;
    *f.writer.answer.lock() = Err(BindError::Other {
        namespace: "ns".into(),
        name: "p1".into(),
        message: "connection reset".into(),
    });
    f.writer.release.add_permits(2);
    assert!(p0.await.unwrap().is_err());
    settle().await;
    f.assert_clean("p1");
}

#[tokio::test(start_paused = true)]
async fn a_retried_bind_keeps_its_assumption_when_the_earlier_call_fails_late() {
    let f = fixture(1, 1, true);
    // The first bind reaches its API call, and its caller goes away.
    let first = f.spawn("p0");
    settle().await;
    assert_eq!(f.writer.started(), 1);
    cancel(first).await;
    // kube-scheduler retries: the second bind assumes the pod again and
    // reaches its own call.
    let second = f.spawn("p0");
    settle().await;
    assert_eq!(f.writer.started(), 2);
    // The first call fails late: it forgets its own assumption, not the
    // retry's.
    *f.writer.answer.lock() = Err(BindError::Other {
        namespace: "ns".into(),
        name: "p0".into(),
        message: "connection reset".into(),
    });
    f.writer.release.add_permits(1);
    settle().await;
    assert!(f.assumed("p0"), "the retry's assumption was dropped");
    assert_eq!(f.cpu_used(), 1000);
    // The retry's call succeeds: the pod stays assumed, counted once.
    *f.writer.answer.lock() = Ok(());
    f.writer.release.add_permits(1);
    assert!(second.await.unwrap().is_ok());
    assert!(f.assumed("p0"));
    assert_eq!(f.cpu_used(), 1000);
    assert_eq!(f.placed(), 1);
}

/// Found by the cluster simulation (seed 400328): kube-scheduler gave up
/// on a bind whose Binding call was in flight and retried the pod on
/// another node. The retry's assumption moved the pod's count there while
/// the first call went on to create the Binding, and another pod was bound
/// into the room the pod really took. While a Binding sent for one node
/// may exist and the watch does not show the pod, a bind to another node
/// is refused; to the same node it goes ahead.
#[tokio::test(start_paused = true)]
async fn a_retry_to_another_node_is_refused_while_an_earlier_binding_may_exist() {
    let elsewhere = |node: &str| BindRequest {
        node: node.into(),
        ..req("p0")
    };
    let refused = BindFailure::EarlierBinding {
        namespace: "ns".into(),
        name: "p0".into(),
        sent: "n1".into(),
        node: "n2".into(),
    };
    // The first call lands after its caller is gone.
    let f = fixture(1, 1, true);
    f.binder.nodes.apply_node(&node("n2"));
    let first = f.spawn("p0");
    settle().await;
    assert_eq!(f.writer.started(), 1);
    cancel(first).await;
    // (Bounded: were it let through, the blocked writer would hold it.)
    let e = tokio::time::timeout(Duration::from_secs(60), f.binder.bind(&elsewhere("n2")))
        .await
        .expect("answered at once")
        .unwrap_err();
    assert_eq!(e, refused);
    assert_eq!(
        e.to_string(),
        "pod ns/p0: a binding to node n1 was sent and may have been created; it is not bound to n2 until the watch shows where it is"
    );
    assert_eq!(f.failures(BindFailureCause::EarlierBinding), 1);
    assert_eq!(f.writer.started(), 1, "no second Binding was sent");
    assert_eq!(f.cpu_used(), 1000, "p0 still counts on n1");
    f.writer.release.add_permits(1);
    settle().await;
    // Created, not yet watched: still refused elsewhere.
    assert_eq!(f.binder.bind(&elsewhere("n2")).await.unwrap_err(), refused);
    assert_eq!(f.cpu_used(), 1000);
    assert_eq!(f.binder.nodes.read().used("n2", "cpu").unwrap_or(0), 0);
    // The watch shows it on n1: the assumption gives way to the pod itself.
    f.watch_bound("p0", "n1");
    assert!(!f.assumed("p0"));
    assert_eq!(f.cpu_used(), 1000);

    // The first call fails for sure: the retry elsewhere goes ahead.
    let f = fixture(1, 1, true);
    f.binder.nodes.apply_node(&node("n2"));
    let first = f.spawn("p0");
    settle().await;
    cancel(first).await;
    *f.writer.answer.lock() = Err(BindError::PodGone {
        namespace: "ns".into(),
        name: "p0".into(),
    });
    f.writer.release.add_permits(1);
    settle().await;
    *f.writer.answer.lock() = Ok(());
    f.writer.release.add_permits(1);
    assert_eq!(f.binder.bind(&elsewhere("n2")).await, Ok(()));
    assert_eq!(f.binder.nodes.read().used("n2", "cpu"), Some(1000));
    assert_eq!(f.cpu_used(), 0);

    // An answer that leaves it unknown: refused elsewhere until the
    // assumption's keep runs out, then free to go.
    let f = fixture(1, 1, false);
    f.binder.nodes.apply_node(&node("n2"));
    *f.writer.answer.lock() = Err(BindError::Uncertain {
        namespace: "ns".into(),
        name: "p0".into(),
        message: "504: Timeout".into(),
    });
    f.binder.bind(&req("p0")).await.unwrap_err();
    *f.writer.answer.lock() = Ok(());
    assert_eq!(f.binder.bind(&elsewhere("n2")).await.unwrap_err(), refused);
    tokio::time::sleep(UNCERTAIN_BIND_KEEP + Duration::from_secs(1)).await;
    assert_eq!(f.binder.bind(&elsewhere("n2")).await, Ok(()));
}

/// Found by the cluster simulation (`cluster_sim::scheduler`, seed 135): a
/// gang member's bind was answered 504 after its Binding was stored; the
/// bind forgot the assumption, the group's plan had gone with its quorum,
/// and the next member's filter planned another rack before the watch
/// showed the first one bound. An answer that leaves the outcome unknown
/// keeps the pod assumed until the watch shows it, or for a bounded time.
#[tokio::test(start_paused = true)]
async fn a_bind_whose_outcome_is_unknown_stays_assumed_until_the_watch_shows_it() {
    let uncertain = || BindError::Uncertain {
        namespace: "ns".into(),
        name: "p0".into(),
        message: "504: Timeout".into(),
    };
    // The write landed: the watch shows the pod bound, and the cache takes
    // over from the assumption; the late forget leaves the bound pod.
    let f = fixture(1, 2, false);
    *f.writer.answer.lock() = Err(uncertain());
    let e = f.binder.bind(&req("p0")).await.unwrap_err();
    assert_eq!(e, BindFailure::Binding(uncertain()));
    assert!(f.assumed("p0"), "the Binding may exist: p0 stays assumed");
    assert_eq!(f.placed(), 1, "p0 still fixes its gang's domain");
    assert_eq!(f.cpu_used(), 1000);
    assert_eq!(f.failures(BindFailureCause::Binding), 1);
    f.watch_bound("p0", "n1");
    assert!(!f.assumed("p0"));
    tokio::time::sleep(UNCERTAIN_BIND_KEEP + Duration::from_secs(1)).await;
    assert_eq!(f.placed(), 1);
    assert_eq!(f.cpu_used(), 1000);

    // The write did not land: nothing shows it, and the assumption goes
    // after UNCERTAIN_BIND_KEEP.
    let f = fixture(1, 2, false);
    *f.writer.answer.lock() = Err(uncertain());
    f.binder.bind(&req("p0")).await.unwrap_err();
    tokio::time::sleep(UNCERTAIN_BIND_KEEP - Duration::from_secs(1)).await;
    assert!(f.assumed("p0"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    f.assert_clean("p0");

    // A retry assumes the pod again: the earlier bind's late forget leaves
    // the retry's assumption alone.
    let f = fixture(1, 2, false);
    *f.writer.answer.lock() = Err(uncertain());
    f.binder.bind(&req("p0")).await.unwrap_err();
    tokio::time::sleep(Duration::from_secs(5)).await;
    *f.writer.answer.lock() = Ok(());
    f.binder.bind(&req("p0")).await.unwrap();
    tokio::time::sleep(UNCERTAIN_BIND_KEEP).await;
    assert!(f.assumed("p0"), "the retry's assumption was dropped");
    assert_eq!(f.cpu_used(), 1000);
}

/// Where kube-scheduler counts a pod this extender keeps assumed. While
/// its bind call runs, kube-scheduler holds the pod assumed too and counts
/// no nomination of it. Once the bind answered a failure the assumption
/// outlives (an unknown outcome, or a member kept for its gang),
/// kube-scheduler has unreserved the pod, and a nomination the watch shows
/// for another node holds that room in its filter, so the cache counts it
/// there as well (where it is assumed, once). Simulation seed 600229: a
/// sibling's uncertain bind kept it assumed on one node while its new
/// nomination held another; the cache offered that node's room, and a gang
/// member kept there was left with no node kube-scheduler would give it.
#[tokio::test(start_paused = true)]
async fn a_pod_kept_assumed_past_its_failed_bind_counts_where_it_is_nominated() {
    let f = fixture(1, 1, true);
    f.binder.nodes.apply_node(&node("n2"));
    let first = f.spawn("p0");
    settle().await;
    // In flight, with an older nomination still on the pod: kube-scheduler
    // dropped it when it assumed the pod.
    f.nominate("p0", Some("n2"));
    assert_eq!(f.nominated(), Vec::<(String, String)>::new());
    *f.writer.answer.lock() = Err(BindError::Uncertain {
        namespace: "ns".into(),
        name: "p0".into(),
        message: "504: Timeout".into(),
    });
    f.writer.release.add_permits(1);
    first.await.unwrap().unwrap_err();
    assert!(f.assumed("p0"));
    assert_eq!(f.cpu_used(), 1000, "the Binding may exist on n1");
    assert_eq!(f.nominated(), [("p0".to_owned(), "n2".to_owned())]);
    // Nominated where it is assumed: counted once.
    f.nominate("p0", Some("n1"));
    assert_eq!(f.nominated(), Vec::<(String, String)>::new());
    // A retry: kube-scheduler holds it assumed again.
    f.nominate("p0", Some("n2"));
    *f.writer.answer.lock() = Ok(());
    let again = f.spawn("p0");
    settle().await;
    assert_eq!(f.nominated(), Vec::<(String, String)>::new());
    f.writer.release.add_permits(1);
    again.await.unwrap().unwrap();
    assert_eq!(f.nominated(), Vec::<(String, String)>::new());

    // A member kept for its gang: kube-scheduler unreserved it.
    let f = fixture_with(3, 3, false, SHORT_WAITS);
    f.binder.nodes.apply_node(&node("n2"));
    let p1 = p0_kept_while_p1_held(&f).await;
    f.nominate("p0", Some("n2"));
    assert!(f.assumed("p0"));
    assert_eq!(f.nominated(), [("p0".to_owned(), "n2".to_owned())]);
    // Its retry is assumed again; p2 completes the unit.
    let back = retry(&f, "p0");
    settle().await;
    assert_eq!(f.nominated(), Vec::<(String, String)>::new());
    assert_eq!(f.spawn("p2").await.unwrap(), Ok(()));
    assert_eq!(back.await.unwrap(), Ok(()));
    assert_eq!(p1.await.unwrap(), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn a_bind_refused_before_the_write_is_forgotten_at_once() {
    let f = fixture(1, 2, false);
    *f.writer.answer.lock() = Err(BindError::Other {
        namespace: "ns".into(),
        name: "p0".into(),
        message: "429: too many requests".into(),
    });
    f.binder.bind(&req("p0")).await.unwrap_err();
    f.assert_clean("p0");
}

// === fail closed ===

#[tokio::test(start_paused = true)]
async fn a_pod_whose_group_is_not_cached_is_not_bound() {
    let f = fixture(1, 0, false);
    f.binder.nodes.apply_pod(&pod("x", Some("missing"), &[]));
    let e = f.binder.bind(&req("x")).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "pod group ns/missing is not in the cache yet"
    );
    assert_eq!(
        e,
        BindFailure::NotCached(Missing::Group(GroupRef::group("ns", "missing")))
    );
    assert!(!f.assumed("x"));
    assert_eq!(f.writer.started(), 0);
    assert_eq!(f.failures(BindFailureCause::NotCached), 1);
    // Once the group is there, a gang of one binds.
    f.binder.nodes.apply_pod_group(&gang("missing", 1, None));
    assert_eq!(f.binder.bind(&req("x")).await, Ok(()));
}

#[tokio::test(start_paused = true)]
async fn a_pod_whose_parent_composite_is_not_cached_is_not_bound() {
    let f = fixture(1, 0, false);
    // g2 → c1 (cached) → c0 (not cached): a missing level anywhere fails.
    f.nested_x();
    let e = f.binder.bind(&req("x")).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "composite pod group ns/c0 is not in the cache yet"
    );
    assert!(!f.assumed("x"));
    assert_eq!(f.writer.started(), 0);
    f.binder.nodes.apply_composite(&composite("c0", 1, None));
    assert_eq!(f.binder.bind(&req("x")).await, Ok(()));
}

/// The Binding carries the parent the pod's PodGroup names (the API
/// server copies it onto the pod): should the group be deleted while the
/// pod stays bound, an extender that never saw the group still ties the
/// pod to its composite. A group without a parent adds nothing.
#[tokio::test(start_paused = true)]
async fn a_binding_records_the_groups_parent_composite_on_the_pod() {
    let f = fixture(1, 1, false);
    f.nested_x();
    f.binder.nodes.apply_composite(&composite("c0", 1, None));
    assert_eq!(f.binder.bind(&req("x")).await, Ok(()));
    assert_eq!(f.binder.bind(&req("p0")).await, Ok(()));
    let bindings = f.writer.bindings.lock().clone();
    let annotations: Vec<(&str, Vec<(&str, &str)>)> = bindings
        .iter()
        .map(|b| {
            let a = b.annotations.iter();
            (
                b.name.as_str(),
                a.map(|(k, v)| (k.as_str(), v.as_str())).collect(),
            )
        })
        .collect();
    assert_eq!(
        annotations,
        [
            ("x", vec![("kruntimes.io/parent-composite-pod-group", "c1")]),
            ("p0", vec![]),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_pod_whose_claims_are_not_cached_is_not_bound() {
    let f = fixture(1, 0, false);
    f.binder.nodes.apply_pod(&pod("x", None, &["gpu"]));
    let e = f.binder.bind(&req("x")).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "resource claim ns/gpu is not allocated in the cache yet"
    );
    assert!(!f.assumed("x"));
    assert_eq!(f.writer.started(), 0);
    assert_eq!(f.failures(BindFailureCause::NotCached), 1);
}

/// Found by the cluster simulation (`cluster_sim::scheduler`, seed 9 with
/// DRA and preemption): during a dropped watch the cache still held a
/// claim's old allocation on another node, with its binding conditions
/// True; kube-scheduler had allocated it again for this node, and the pod
/// was bound before the new device was ready. A claim whose published
/// devices are all off the bind's node is an allocation the cache has not
/// caught up with.
#[tokio::test(start_paused = true)]
async fn a_claim_allocated_off_the_node_in_the_cache_is_not_caught_up() {
    let f = fixture(1, 0, false);
    f.binder.nodes.apply_node(&node("n2"));
    f.binder.nodes.apply_pod(&pod("x", None, &["gpu"]));
    f.binder.nodes.apply_claim(&gated_claim("gpu", "x-uid"));
    let off_node = "resource claim ns/gpu is allocated off node n1 in the cache: its allocation for n1 is not in the cache yet";
    // No slice publishes the device: the cache cannot place the
    // allocation (a slice not seen yet, or an older allocation whose slice
    // went with its node: simulation seed 743, a pod bound on the old
    // allocation's `Attached`), and bind fails closed.
    let e = f.binder.bind(&req("x")).await.unwrap_err();
    assert_eq!(e.to_string(), off_node);
    assert!(!f.assumed("x"));
    assert_eq!(f.writer.started(), 0);
    // Published on n2 only.
    publish_d0(&f.binder.nodes, "n2");
    let e = f.binder.bind(&req("x")).await.unwrap_err();
    assert_eq!(e.to_string(), off_node);
    assert!(!f.assumed("x"));
    assert_eq!(f.writer.started(), 0);
    assert_eq!(
        f.binder.devices.waiting(),
        0,
        "no wait on the old allocation"
    );
    // The same device published on n1: the allocation reaches the node,
    // and the gate decides on it (once the cache has shown
    // kube-scheduler's Unreserve after the failed binds and its PreBind).
    publish_d0(&f.binder.nodes, "n1");
    rereserved(&f.binder.nodes, "gpu", "x-uid");
    let task = f.spawn("x");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!task.is_finished(), "waits for Attached on n1");
    assert_eq!(f.binder.devices.waiting(), 1);
    task.abort();
}

/// The cache missed a deallocation and the new allocation of the same
/// device (its watch down): it still shows the old allocation, whose
/// `Attached` the driver reported, unreserved since the pod's earlier bind
/// was cancelled. kube-scheduler reserved the claim for the pod before
/// this bind (seed 105): without that reservation in the cache, the
/// conditions it shows may not be this allocation's, and the gate waits.
#[tokio::test(start_paused = true)]
async fn a_gated_claim_not_reserved_for_the_pod_in_the_cache_is_not_caught_up() {
    let f = fixture(1, 0, false);
    publish_d0(&f.binder.nodes, "n1");
    f.binder.nodes.apply_pod(&pod("x", None, &["gpu"]));
    let claim = |reserved: bool, attached: bool| {
        let c = testkit::claim("gpu", "c")
            .namespace("ns")
            .uid("gpu-uid")
            .set(&["metadata", "resourceVersion"], "1")
            .allocated(&[("drv", "pool", "d0")])
            .binding_conditions(0, &["Attached"], &[]);
        let c = if reserved {
            c.reserved_for(&[("x", "x-uid")])
        } else {
            c
        };
        if attached {
            c.device_conditions(
                ("drv", "pool", "d0"),
                &[("Attached", "True")],
                "2026-01-01T00:00:00Z",
            )
        } else {
            c
        }
        .typed()
    };
    f.binder.nodes.apply_claim(&claim(false, true));
    let e = f.binder.bind(&req("x")).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "waiting for device binding conditions: claim ns/gpu: not reserved for the pod in the cache yet; retry"
    );
    assert_eq!(f.failures(BindFailureCause::DevicesNotReady), 1);
    assert!(!f.assumed("x"));
    assert_eq!(f.writer.started(), 0, "no Binding on the old conditions");
    // The cache catches up: the new allocation, reserved for the pod, not
    // attached yet. The gate waits for it.
    f.binder.nodes.apply_claim(&claim(true, false));
    let task = f.spawn("x");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!task.is_finished(), "waits for Attached");
    assert_eq!(f.writer.started(), 0);
    f.binder.nodes.apply_claim(&claim(true, true));
    assert_eq!(task.await.unwrap(), Ok(()));
    assert_eq!(f.writer.bound.lock().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_pod_the_cache_does_not_know_or_knows_with_another_uid_is_not_bound() {
    let f = fixture(1, 1, false);
    let e = f.binder.bind(&req("nobody")).await.unwrap_err();
    assert_eq!(e.to_string(), "pod ns/nobody not found in the cache yet");
    let mut r = req("p0");
    r.uid = "newer".into();
    let e = f.binder.bind(&r).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "pod ns/p0 has uid p0-uid, not newer: it was replaced"
    );
    assert_eq!(f.failures(BindFailureCause::Replaced), 1);
    assert_eq!(f.writer.started(), 0);
    f.assert_clean("p0");
}

// === causes ===

#[tokio::test(start_paused = true)]
async fn a_broken_hierarchy_is_refused_not_counted_as_expired() {
    let f = fixture(1, 0, false);
    f.binder.nodes.apply_pod_group(&gang("g2", 1, Some("a")));
    f.binder
        .nodes
        .apply_composite(&composite("a", 1, Some("b")));
    f.binder
        .nodes
        .apply_composite(&composite("b", 1, Some("a")));
    f.binder.nodes.apply_pod(&pod("x", Some("g2"), &[]));
    let e = f.binder.bind(&req("x")).await.unwrap_err();
    assert!(
        matches!(e, BindFailure::Hold(HoldFailure::Hierarchy(_))),
        "{e}"
    );
    assert!(e.to_string().starts_with("parent cycle: "), "{e}");
    assert_eq!(f.waits(GangWait::Refused), 1);
    assert_eq!(f.waits(GangWait::Expired), 0);
    assert_eq!(f.failures(BindFailureCause::Hierarchy), 1);
    assert!(!f.assumed("x"));
    assert_eq!(f.binder.permit.units(), 0);
}

#[tokio::test(start_paused = true)]
async fn failures_keep_their_texts_and_causes() {
    let f = fixture(1, 1, false);
    let cases = [
        (
            BindRequest {
                name: String::new(),
                ..req("p0")
            },
            "PodName and Node are required",
            BindFailureCause::Invalid,
        ),
        (
            BindRequest {
                node: "ghost".into(),
                ..req("p0")
            },
            "node ghost not found",
            BindFailureCause::NodeGone,
        ),
    ];
    for (r, text, cause) in cases {
        let e = f.binder.bind(&r).await.unwrap_err();
        assert_eq!(e.to_string(), text);
        assert_eq!(e.cause(), cause);
        assert_eq!(f.failures(cause), 1);
    }
    *f.writer.answer.lock() = Err(BindError::AlreadyBound {
        namespace: "ns".into(),
        name: "p0".into(),
        node: "n2".into(),
    });
    let e = f.binder.bind(&req("p0")).await.unwrap_err();
    assert_eq!(e.to_string(), "pod ns/p0 is already bound to node n2");
    assert_eq!(f.failures(BindFailureCause::Binding), 1);
    f.assert_clean("p0");
    // A quorum of one completed on arrival.
    *f.writer.answer.lock() = Ok(());
    assert_eq!(f.binder.bind(&req("p0")).await, Ok(()));
    assert_eq!(f.waits(GangWait::Quorum), 2);
}

// === large gangs: slow arrival, the held-bind ceiling, size refusals ===

/// Waits short enough to run out in a test: `--gang-wait` 2s,
/// `--gang-wait-max` 60s.
const SHORT_WAITS: GangConfig = GangConfig {
    wait: Duration::from_secs(2),
    wait_max: Duration::from_secs(60),
    max_held: 100,
};

/// kube-scheduler's retry of a member whose bind answered: filter (which
/// drops the reservation kept for it), then bind.
fn retry(f: &Fixture, name: &str) -> tokio::task::JoinHandle<Result<(), BindFailure>> {
    assert!(f.binder.permit.returning(&f.binder.nodes, "ns", name));
    f.spawn(name)
}

/// With [`SHORT_WAITS`]: p0 binds at 0s and p1 at 1.5s (the unit's last
/// new member, so it ends at 3.5s); at 2s p0's own wait runs out and it is
/// kept. p1's bind, still held.
async fn p0_kept_while_p1_held(f: &Fixture) -> tokio::task::JoinHandle<Result<(), BindFailure>> {
    let p0 = f.spawn("p0");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let p1 = f.spawn("p1");
    let e0 = p0.await.unwrap().unwrap_err();
    assert!(
        matches!(e0, BindFailure::Hold(HoldFailure::Kept(_))),
        "{e0}"
    );
    p1
}

#[tokio::test(start_paused = true)]
async fn a_gang_arriving_slower_than_the_wait_binds_through_kept_members() {
    let f = fixture_with(4, 4, false, SHORT_WAITS);
    // Members reach the extender 1.5s apart: the last one 4.5s after the
    // first, more than --gang-wait.
    let p0 = f.spawn("p0");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let p1 = f.spawn("p1");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let p2 = f.spawn("p2");
    // p0's own wait ran out at 2s while the unit still gathered: kept.
    let e0 = p0.await.unwrap().unwrap_err();
    assert!(
        matches!(e0, BindFailure::Hold(HoldFailure::Kept(_))),
        "{e0}"
    );
    assert!(f.assumed("p0") && f.binder.permit.is_kept("ns", "p0"));
    // kube-scheduler retries p0: held again, not counted as progress.
    let p0 = retry(&f, "p0");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(f.placed(), 3);
    // p1 kept at 3.5s; p3 arrives at 4.5s: quorum with the kept p1.
    let e1 = p1.await.unwrap().unwrap_err();
    assert!(
        matches!(e1, BindFailure::Hold(HoldFailure::Kept(_))),
        "{e1}"
    );
    let p3 = f.spawn("p3");
    assert_eq!(p3.await.unwrap(), Ok(()));
    assert_eq!(p2.await.unwrap(), Ok(()));
    assert_eq!(p0.await.unwrap(), Ok(()));
    assert_eq!(f.writer.bound.lock().len(), 3);
    // p1, reserved past the quorum, binds when it is retried.
    assert!(f.binder.permit.is_kept("ns", "p1"));
    assert_eq!(retry(&f, "p1").await.unwrap(), Ok(()));
    assert_eq!(f.writer.bound.lock().len(), 4);
    assert_eq!(f.binder.permit.units(), 0);
    assert_eq!(f.binder.permit.kept(), 0);
    assert_eq!(f.waits(GangWait::Kept), 2);
    assert_eq!(f.waits(GangWait::Expired), 0);
}

/// Members coming back are not progress: a unit no new member joins ends
/// `--gang-wait` after the last new one, however its members cycle
/// through their own waits (kept, retried, held again). Simulation seed
/// 69648: a composite's members held in a zone its third child could not
/// fit re-held each other's wait for the whole `--gang-wait-max`, and the
/// composite was never planned again where all its children fit.
#[tokio::test(start_paused = true)]
async fn members_coming_back_do_not_keep_a_unit_alive() {
    let f = fixture_with(4, 4, false, SHORT_WAITS);
    // p1 is the last new member: the unit ends at 3.5s.
    let p1 = p0_kept_while_p1_held(&f).await;
    // kube-scheduler retries p0 at 2s: held again, the same member.
    let p0 = retry(&f, "p0");
    tokio::time::sleep(Duration::from_millis(1600)).await;
    // At 3.5s the unit ended: both binds answer its end, nothing stays
    // reserved or assumed, and the unit is gone.
    for (name, h) in [("p1", p1), ("p0", p0)] {
        assert!(h.is_finished(), "{name} still held");
        let e = h.await.unwrap().unwrap_err();
        assert!(
            matches!(e, BindFailure::Hold(HoldFailure::Expired(_))),
            "{name}: {e}"
        );
        assert!(!f.assumed(name), "{name} still assumed");
    }
    assert_eq!(f.binder.permit.units(), 0);
    assert_eq!(f.binder.permit.kept(), 0);
}

/// The unit a member comes back to keeps its clock while the member is
/// between its kept answer and its retried bind, even with no other
/// member in it: it is not started afresh by the member's return.
#[tokio::test(start_paused = true)]
async fn a_unit_keeps_its_clock_while_its_only_member_comes_back() {
    let f = fixture_with(3, 3, false, SHORT_WAITS);
    // p1 is the last new member: the unit ends at 3.5s.
    let p1 = p0_kept_while_p1_held(&f).await;
    // p1's bind is cancelled at 2.5s: p0, kept, is the unit's only member.
    tokio::time::sleep(Duration::from_millis(500)).await;
    p1.abort();
    assert!(p1.await.unwrap_err().is_cancelled());
    assert!(!f.assumed("p1"));
    // p0 is filtered again: no longer reserved, and its unit stays.
    assert!(f.binder.permit.returning(&f.binder.nodes, "ns", "p0"));
    assert_eq!((f.binder.permit.units(), f.binder.permit.kept()), (1, 0));
    // Its retried bind joins that unit, which ends at 3.5s (a fresh unit
    // would have held it until 4.5s and kept it).
    let p0 = f.spawn("p0");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(p0.is_finished(), "p0 still held at 3.6s");
    let e0 = p0.await.unwrap().unwrap_err();
    assert!(
        matches!(e0, BindFailure::Hold(HoldFailure::Expired(_))),
        "{e0}"
    );
    assert!(!f.assumed("p0"));
    assert_eq!(f.binder.permit.units(), 0);
}

/// Dropping one unit's kept member (stranded on a cordoned node, or
/// surplus) leaves every other unit as it is: a unit empty for a moment,
/// its only member between its kept answer and its retry, keeps its clock.
/// (Before, those paths swept every empty unit, so another group's
/// stranded member restarted this one's clock.)
#[tokio::test(start_paused = true)]
async fn dropping_another_units_kept_member_leaves_an_empty_unit_its_clock() {
    let f = fixture_with(3, 3, false, SHORT_WAITS);
    let nodes = &f.binder.nodes;
    nodes.apply_node(&node("n2"));
    nodes.apply_pod_group(&gang("h", 3, None));
    for q in ["q0", "q1", "q2"] {
        nodes.apply_pod(&pod(q, Some("h"), &[]));
    }
    // A bind of `name` to n2 issued `after` from now.
    let on_n2 = |name: &str, after: u64| {
        let binder = f.binder.clone();
        let r = BindRequest {
            node: "n2".into(),
            ..req(name)
        };
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(after)).await;
            binder.bind(&r).await
        })
    };
    // h: q0 at 0s and q1 at 1.5s on n2; g: p0 and p1 the same on n1.
    let q0 = on_n2("q0", 0);
    let _q1 = on_n2("q1", 1500);
    let p1 = p0_kept_while_p1_held(&f).await;
    let e = q0.await.unwrap().unwrap_err();
    assert!(matches!(e, BindFailure::Hold(HoldFailure::Kept(_))), "{e}");
    // At 2s g is emptied for a moment: p1 cancelled, p0 filtered again.
    p1.abort();
    assert!(p1.await.unwrap_err().is_cancelled());
    assert!(f.binder.permit.returning(nodes, "ns", "p0"));
    assert_eq!(f.binder.permit.units(), 2);
    // n2 cordoned: h's kept q0 is dropped by the sweep; g stays.
    nodes.apply_node(
        &testkit::node("n2")
            .allocatable("8", "16Gi")
            .set(&["spec", "unschedulable"], true)
            .typed(),
    );
    f.binder.permit.sweep(nodes);
    assert!(!f.binder.permit.is_kept("ns", "q0"));
    assert_eq!(f.binder.permit.units(), 2, "g's empty unit and h's");
    // g's unit still ends at 3.5s: p0's retried bind answers its end.
    let p0 = f.spawn("p0");
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert!(p0.is_finished(), "p0 still held at 3.6s");
    let e0 = p0.await.unwrap().unwrap_err();
    assert!(
        matches!(e0, BindFailure::Hold(HoldFailure::Expired(_))),
        "{e0}"
    );
}

/// A kept member whose node is cordoned (or deleted) cannot be bound
/// there on kube-scheduler's retry: the sweep drops it, so it no longer
/// counts toward its unit's quorum and its room is free. (Simulation seed
/// 179: a drained node's kept members completed a composite's quorum and
/// a child gang was bound short of its minCount.)
#[tokio::test(start_paused = true)]
async fn a_kept_member_on_a_cordoned_node_stops_counting() {
    let f = fixture_with(3, 3, false, SHORT_WAITS);
    let p1 = p0_kept_while_p1_held(&f).await;
    assert!(f.binder.permit.is_kept("ns", "p0"));
    // Nothing changed on the node: the sweep keeps it.
    f.binder.permit.sweep(&f.binder.nodes);
    assert!(f.binder.permit.is_kept("ns", "p0") && f.assumed("p0"));
    // n1 cordoned: p0 is dropped and no longer counted.
    f.binder.nodes.apply_node(
        &testkit::node("n1")
            .allocatable("8", "16Gi")
            .set(&["spec", "unschedulable"], true)
            .typed(),
    );
    f.binder.permit.sweep(&f.binder.nodes);
    assert!(!f.binder.permit.is_kept("ns", "p0"));
    assert!(!f.assumed("p0"));
    // p2 arriving does not complete the quorum with the stranded p0.
    let p2 = f.spawn("p2");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!p2.is_finished(), "held: 2 of 3 placed");
    assert!(f.writer.bound.lock().is_empty());
    drop((p1, p2));
}

#[tokio::test(start_paused = true)]
async fn a_unit_ends_at_the_overall_bound_however_steady_its_progress() {
    let f = fixture_with(
        10,
        10,
        false,
        GangConfig {
            wait: Duration::from_secs(2),
            wait_max: Duration::from_secs(5),
            max_held: 100,
        },
    );
    let mut tasks = Vec::new();
    for i in 0..6 {
        tasks.push(f.spawn(&format!("p{i}")));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let mut at_max = 0;
    for t in tasks {
        match t.await.unwrap() {
            // The unit of p0..p4 at 5s; p5, arriving just after, starts
            // another, which ends 2s later without progress.
            Err(BindFailure::Hold(HoldFailure::Expired(m))) => {
                at_max += usize::from(m.contains("within --gang-wait-max 5s"));
            }
            Err(BindFailure::Hold(HoldFailure::Kept(_))) => {}
            other => panic!("{other:?}"),
        }
    }
    assert!(at_max >= 1);
    // Everything held or kept was released with the unit.
    assert_eq!(f.binder.permit.kept(), 0);
    assert_eq!(f.binder.permit.units(), 0);
    assert_eq!(f.placed(), 0);
}

#[tokio::test(start_paused = true)]
async fn members_beyond_the_ceiling_are_refused_not_held() {
    let f = fixture_with(
        4,
        4,
        false,
        GangConfig {
            max_held: 2,
            ..GangConfig::default()
        },
    );
    let p0 = f.spawn("p0");
    let p1 = f.spawn("p1");
    settle().await;
    assert_eq!(f.binder.permit.held(), 2);
    let e = f.binder.bind(&req("p2")).await.unwrap_err();
    assert!(matches!(e, BindFailure::Hold(HoldFailure::Full(_))), "{e}");
    assert!(e.to_string().contains("--max-held-binds 2"), "{e}");
    assert!(!f.assumed("p2"));
    assert_eq!(f.failures(BindFailureCause::GangFull), 1);
    assert_eq!(f.waits(GangWait::Full), 1);
    cancel(p0).await;
    cancel(p1).await;
}

#[test]
fn too_large_names_the_unit_its_size_and_the_flag() {
    let nodes = ClusterIndex::new();
    nodes.apply_node(&node("n1"));
    nodes.apply_composite(&composite("root", 2, None));
    // Three children of 3, 5 and 4 pods: the two smallest need 7 held.
    for (g, min) in [("a", 3), ("b", 5), ("c", 4)] {
        nodes.apply_pod_group(&gang(g, min, Some("root")));
    }
    nodes.apply_pod(&pod("a0", Some("a"), &[]));
    let snap = nodes.read();
    assert_eq!(
        Gangs::pods_to_hold(
            &snap,
            &crate::model::refs::GroupRef::composite("ns", "root")
        ),
        7
    );
    let small = Gangs::with_config(GangConfig {
        max_held: 6,
        ..GangConfig::default()
    });
    let m = small.too_large(&snap, "ns", "a0").expect("refused");
    assert!(m.contains("ns/root"), "{m}");
    assert!(m.contains("needs 7 pods held at once"), "{m}");
    assert!(m.contains("--max-held-binds (6)"), "{m}");
    let fits = Gangs::with_config(GangConfig {
        max_held: 7,
        ..GangConfig::default()
    });
    assert_eq!(fits.too_large(&snap, "ns", "a0"), None);
}

/// A writer that keeps the group conditions and Events written (the
/// first `failing` condition writes answer a conflict).
#[derive(Default)]
struct Recorded {
    conditions: Mutex<Vec<(String, String, String)>>,
    events: Mutex<Vec<EventReason>>,
    failing: AtomicUsize,
}

impl ClusterWriter for Recorded {
    fn write_run_status<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: Option<&'a str>,
        _: &'a RunStatus,
    ) -> BoxFuture<'a, Result<(), WriteError>> {
        Box::pin(async { Err(WriteError::Other("not expected here".into())) })
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
        _: &'a GroupRef,
        c: &'a Condition,
    ) -> BoxFuture<'a, Result<(), WriteError>> {
        Box::pin(async move {
            let fail = self
                .failing
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if fail {
                return Err(WriteError::Conflict);
            }
            let row = (c.type_.clone(), c.status.clone(), c.reason.clone());
            self.conditions.lock().push(row);
            Ok(())
        })
    }
    fn record_event<'a>(
        &'a self,
        _: &'a ObjectRef,
        _: EventKind,
        reason: EventReason,
        _: &'a str,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move { self.events.lock().push(reason) })
    }
}

#[tokio::test(start_paused = true)]
async fn a_scheduled_gang_short_of_its_min_count_is_reported_once_and_cleared_when_whole() {
    let nodes = ClusterIndex::new();
    nodes.apply_node(&node("n1"));
    let mut g = gang("g", 2, None);
    g.metadata.uid = Some("g-uid".into());
    nodes.apply_pod_group(&g);
    nodes.apply_pod(&bound_on_n1("p0"));
    nodes.apply_pod(&bound_on_n1("p1"));
    let gangs = Gangs::with_config(GangConfig::default());
    let writer = Recorded::default();
    let r = GroupRef::group("ns", "g");
    let row = |t: &str, s: &str, why: &str| (t.to_owned(), s.to_owned(), why.to_owned());
    let (scheduled, short) = (permit::POD_GROUP_SCHEDULED, permit::BELOW_MIN_COUNT);

    gangs
        .set_condition(
            &nodes,
            &writer,
            &r,
            None,
            true,
            permit::SCHEDULED,
            "quorum bound",
        )
        .await;
    // Whole: a filter note says nothing more.
    gangs
        .set_condition(
            &nodes,
            &writer,
            &r,
            None,
            false,
            permit::UNSCHEDULABLE,
            "full",
        )
        .await;
    assert_eq!(
        *writer.conditions.lock(),
        vec![row(scheduled, "True", "Scheduled")]
    );

    // A member evicted and not placeable again: reported, once.
    nodes.delete_pod("ns", "p1");
    for _ in 0..3 {
        gangs
            .set_condition(
                &nodes,
                &writer,
                &r,
                None,
                false,
                permit::UNSCHEDULABLE,
                "full",
            )
            .await;
    }
    assert_eq!(
        *writer.conditions.lock(),
        vec![
            row(scheduled, "True", "Scheduled"),
            row(short, "True", "Unschedulable")
        ]
    );
    assert_eq!(*writer.events.lock(), vec![EventReason::GangBelowMinCount]);

    // Whole again: cleared, with no further Event.
    nodes.apply_pod(&bound_on_n1("p1"));
    gangs
        .set_condition(
            &nodes,
            &writer,
            &r,
            None,
            true,
            permit::SCHEDULED,
            "quorum bound",
        )
        .await;
    assert_eq!(
        writer.conditions.lock().last(),
        Some(&row(short, "False", "Scheduled"))
    );
    assert_eq!(writer.conditions.lock().len(), 3);
    assert_eq!(writer.events.lock().len(), 1);
}

/// A member whose own PodGroup has its minCount without it is not held
/// while its CompositePodGroup gathers: it would only take room the other
/// groups need (simulation seed 201: two such members of one child gang
/// kept the room its sibling needed, round after round, and the composite
/// never reached quorum). It binds once the composite is at quorum.
#[tokio::test(start_paused = true)]
async fn a_member_its_group_does_not_need_holds_no_room_while_the_unit_gathers() {
    let f = fixture(1, 0, false);
    let nodes = &f.binder.nodes;
    nodes.apply_composite(&composite("root", 2, None));
    for g in ["a", "b"] {
        nodes.apply_pod_group(&gang(g, 1, Some("root")));
    }
    for (p, g) in [("a0", "a"), ("a1", "a"), ("b0", "b")] {
        nodes.apply_pod(&pod(p, Some(g), &[]));
    }
    let a0 = f.spawn("a0");
    settle().await;
    assert!(f.binder.permit.is_held("ns", "a0"), "a0 is what a needs");
    // a1: a has its one member placed without it.
    let e = f.spawn("a1").await.unwrap().unwrap_err();
    assert!(
        matches!(e, BindFailure::Hold(HoldFailure::Surplus(_))),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("pod group ns/a has its minCount without this pod"),
        "{e}"
    );
    assert!(!f.assumed("a1") && !f.binder.permit.is_held("ns", "a1"));
    assert_eq!(f.failures(BindFailureCause::GangSurplus), 1);
    assert_eq!(f.waits(GangWait::Surplus), 1);
    // b0 completes the composite; a0 binds, and a1 binds when retried.
    f.spawn("b0")
        .await
        .unwrap()
        .expect("b0 completes the quorum");
    a0.await.unwrap().expect("a0 released");
    f.spawn("a1").await.unwrap().expect("a1 after the quorum");
    assert_eq!(f.writer.bound.lock().len(), 3);
}

/// A surplus member whose filter ran before its sibling was placed is
/// refused at the start of its bind: not assumed, and not left waiting at
/// the device gate for a device the other groups may need.
#[tokio::test(start_paused = true)]
async fn a_surplus_member_is_refused_before_it_is_assumed_or_waits_for_devices() {
    let f = fixture(1, 0, false);
    let nodes = &f.binder.nodes;
    nodes.apply_composite(&composite("root", 2, None));
    for g in ["a", "b"] {
        nodes.apply_pod_group(&gang(g, 1, Some("root")));
    }
    nodes.apply_pod(&pod("a0", Some("a"), &[]));
    nodes.apply_pod(&pod("a1", Some("a"), &["gpu"]));
    publish_d0(nodes, "n1");
    nodes.apply_claim(&gated_claim("gpu", "a1-uid"));
    let a0 = f.spawn("a0");
    settle().await;
    assert!(f.binder.permit.is_held("ns", "a0"));
    let used = f.cpu_used();
    let started = tokio::time::Instant::now();
    let e = f.binder.bind(&req("a1")).await.unwrap_err();
    assert!(
        matches!(e, BindFailure::Hold(HoldFailure::Surplus(_))),
        "{e}"
    );
    assert_eq!(started.elapsed(), Duration::ZERO, "no wait for its device");
    assert!(!f.assumed("a1"));
    assert_eq!(f.cpu_used(), used);
    assert_eq!(f.failures(BindFailureCause::GangSurplus), 1);
    assert_eq!(f.waits(GangWait::Surplus), 1);
    a0.abort();
}

/// A bind failed at the gate (`Attached` not yet True); the driver's
/// `Attached=True` arrived after it, the pod still reserved, then the watch
/// dropped: kube-scheduler's Unreserve, a deallocation and a new
/// allocation went unseen. The next bind decides nothing on the claim
/// until the cache shows the Unreserve (simulation seed 8862: a pod bound
/// on the old allocation's `Attached`).
#[tokio::test(start_paused = true)]
async fn a_bind_after_a_failed_one_waits_for_the_cache_to_show_the_unreserve() {
    let f = fixture(1, 0, false);
    let nodes = &f.binder.nodes;
    nodes.apply_pod(&pod("x", None, &["gpu"]));
    publish_d0(nodes, "n1");
    nodes.apply_claim(&gated_claim("gpu", "x-uid"));
    let e = f.binder.bind(&req("x")).await.unwrap_err();
    assert!(e.to_string().contains("needs Attached"), "{e}");
    // The driver's write, made before kube-scheduler's Unreserve.
    let attached = |rv: &str, reserved: bool| {
        let c = testkit::claim("gpu", "c")
            .namespace("ns")
            .uid("gpu-uid")
            .set(&["metadata", "resourceVersion"], rv)
            .allocated(&[("drv", "pool", "d0")])
            .binding_conditions(0, &["Attached"], &[])
            .device_status(("drv", "pool", "d0"), &["Attached"], "2026-01-01T00:00:00Z");
        let c = if reserved {
            c.reserved_for(&[("x", "x-uid")])
        } else {
            c
        };
        c.typed()
    };
    nodes.apply_claim(&attached("2", true));
    let e = f.binder.bind(&req("x")).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "waiting for device binding conditions: claim ns/gpu: the cache has not shown \
         kube-scheduler's Unreserve of an earlier bind of the pod yet; retry"
    );
    assert!(f.writer.bound.lock().is_empty());
    // The Unreserve, then PreBind reserving it again: decided on.
    nodes.apply_claim(&attached("3", false));
    nodes.apply_claim(&attached("4", true));
    f.binder.bind(&req("x")).await.expect("Attached, caught up");
    assert_eq!(f.writer.bound.lock().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_bind_the_node_no_longer_has_room_for_is_refused_and_changes_nothing() {
    // n1 holds 8 pods of 1 cpu. kube-scheduler's own fit can pass a node
    // whose last room a bind it forgot (cancelled, its write still going)
    // takes, and this cache can pass it before the binds in PreBind
    // arrive: the bind is where both are counted.
    let f = fixture(1, 0, false);
    for i in 0..9 {
        f.binder.nodes.apply_pod(&pod(&format!("a{i}"), None, &[]));
    }
    for i in 0..8 {
        f.binder.bind(&req(&format!("a{i}"))).await.expect("room");
    }
    assert_eq!(f.cpu_used(), 8000);
    let e = f.binder.bind(&req("a8")).await.expect_err("n1 is full");
    assert!(
        matches!(&e, BindFailure::NoRoom { node, reason, .. } if node == "n1" && reason.contains("cpu")),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "node n1 no longer has room for pod ns/a8: Insufficient cpu (counting the pods bound and being bound there)"
    );
    assert!(!f.assumed("a8"));
    assert_eq!(f.cpu_used(), 8000);
    assert_eq!(f.writer.bound.lock().len(), 8, "no Binding was written");
    assert_eq!(f.failures(BindFailureCause::NoRoom), 1);
    // A retried bind of a pod already counted on the node (kept, or its
    // earlier outcome unknown) needs no more room there.
    f.binder
        .bind(&req("a0"))
        .await
        .expect("counted there already");
    assert_eq!(f.cpu_used(), 8000);
}

#[tokio::test(start_paused = true)]
async fn a_condition_write_that_failed_is_retried_by_the_sweeper() {
    // The last member of a gang bound; the `True` write answered a
    // conflict. Nothing else would write it (no member is left to bind),
    // and a report the group later owes reads it: the sweeper retries.
    let nodes = ClusterIndex::new();
    nodes.apply_node(&node("n1"));
    let mut g = gang("g", 1, None);
    g.metadata.uid = Some("g-uid".into());
    nodes.apply_pod_group(&g);
    let gangs = Gangs::with_config(GangConfig::default());
    let writer = Recorded {
        failing: AtomicUsize::new(2),
        ..Recorded::default()
    };
    let r = GroupRef::group("ns", "g");
    gangs
        .set_condition(
            &nodes,
            &writer,
            &r,
            None,
            true,
            permit::SCHEDULED,
            "quorum bound",
        )
        .await;
    assert!(writer.conditions.lock().is_empty());
    gangs.tick(&nodes, &writer).await;
    assert!(writer.conditions.lock().is_empty(), "failed again");
    gangs.tick(&nodes, &writer).await;
    let row = (
        permit::POD_GROUP_SCHEDULED.to_owned(),
        "True".to_owned(),
        permit::SCHEDULED.to_owned(),
    );
    assert_eq!(*writer.conditions.lock(), vec![row.clone()]);
    // Settled: nothing is written again.
    gangs.tick(&nodes, &writer).await;
    assert_eq!(*writer.conditions.lock(), vec![row]);
}

#[tokio::test(start_paused = true)]
async fn a_bind_waits_briefly_for_the_cache_to_show_its_claim_allocated() {
    // kube-scheduler's PreBind allocated the claim just before calling
    // bind; the watch shows it 0.5 s later. The bind waits for it rather
    // than failing the binding cycle.
    let f = fixture(1, 0, false);
    publish_d0(&f.binder.nodes, "n1");
    f.binder.nodes.apply_pod(&pod("p", None, &["c"]));
    let claim = testkit::claim("c", "c")
        .namespace("ns")
        .allocated(&[("drv", "pool", "d0")])
        .typed();
    let bind = f.spawn("p");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!bind.is_finished(), "waiting for the cache");
    f.binder.nodes.apply_claim(&claim);
    bind.await
        .expect("task")
        .expect("bound once the cache caught up");
    assert_eq!(f.writer.bound.lock().len(), 1);

    // A claim the cache never shows allocated fails closed after the wait.
    f.binder.nodes.apply_pod(&pod("q", None, &["d"]));
    let started = tokio::time::Instant::now();
    let e = f.binder.bind(&req("q")).await.expect_err("fails closed");
    assert_eq!(
        e.to_string(),
        "resource claim ns/d is not allocated in the cache yet"
    );
    assert_eq!(started.elapsed(), CLAIM_CATCH_UP);
    assert!(!f.assumed("q"));
}

#[tokio::test(start_paused = true)]
async fn a_bind_outside_the_domain_its_gang_s_placed_members_fix_is_refused() {
    // Rack-pinned gang `g`: `p0` is bound in rack r0 since `p1`'s filter
    // chose a node in r1 (the filter ran first, or the bind waited for
    // the cache). Its bind refuses the other rack and assumes nothing.
    const RACK: &str = "kruntimes.io/rack";
    let nodes = Arc::new(ClusterIndex::new());
    nodes.apply_node(
        &testkit::node("a")
            .allocatable("8", "16Gi")
            .label(RACK, "r0")
            .typed(),
    );
    nodes.apply_node(
        &testkit::node("b")
            .allocatable("8", "16Gi")
            .label(RACK, "r1")
            .typed(),
    );
    nodes.apply_pod_group(
        &testkit::pod_group("g")
            .namespace("ns")
            .gang(1)
            .topology(RACK)
            .typed(),
    );
    nodes.apply_pod(
        &testkit::pod("p0")
            .namespace("ns")
            .group("g")
            .on_node("a")
            .typed(),
    );
    nodes.apply_pod(&pod("p1", Some("g"), &[]));
    let writer = SlowWriter::new(false);
    let binder = Binder {
        nodes,
        writer: writer.clone(),
        permit: Arc::new(Gangs::default()),
        devices: Arc::new(BindingGate::default()),
        metrics: Arc::new(Metrics::default()),
    };
    let to = |node: &str| BindRequest {
        node: node.into(),
        ..req("p1")
    };
    let e = binder.bind(&to("b")).await.expect_err("outside r0");
    assert_eq!(
        e.to_string(),
        "pod ns/p1 cannot go there: pod group ns/g: its members are placed in kruntimes.io/rack=r0, and node b is outside it"
    );
    assert!(!binder.nodes.read().is_assumed("ns", "p1"));
    assert!(writer.bound.lock().is_empty());
    assert_eq!(
        binder
            .metrics
            .bind_failures
            .get_or_create(&BindFailureLabels {
                cause: BindFailureCause::OutsideDomain
            })
            .get(),
        1
    );
    binder.bind(&to("a")).await.expect("inside r0");
}

/// 1403240: a member that completes its own PodGroup, another member of
/// which is bound already, binds without waiting for its composite's
/// quorum: the group was released once, and held back for the unit it
/// would leave the group bound below its minCount. While the other member
/// is only assumed (the unit still gathering), it is held as before.
#[tokio::test(start_paused = true)]
async fn a_member_completing_its_released_group_is_not_held_for_the_unit() {
    let f = fixture(2, 2, false);
    let nodes = &f.binder.nodes;
    nodes.apply_composite(&composite("c", 2, None));
    nodes.apply_pod_group(&gang("g", 2, Some("c")));
    nodes.apply_pod_group(&gang("h", 1, Some("c")));
    nodes.apply_pod(&pod("h0", Some("h"), &[]));
    // p0 only assumed: the unit is gathering, p1 is held for it.
    assert!(nodes.assume("ns", "p0", "p0-uid", "n1"));
    let held = f.spawn("p1");
    settle().await;
    assert!(f.binder.permit.is_held("ns", "p1"), "p1 held for c");
    cancel(held).await;
    // p0 bound (its group was released): p1 completes g and binds.
    f.watch_bound("p0", "n1");
    let task = f.spawn("p1");
    settle().await;
    assert!(task.is_finished(), "p1 is not held");
    task.await.expect("task").expect("bound");
    assert!(!f.binder.permit.is_held("ns", "p1"));
    assert_eq!(f.binder.permit.units(), 0, "no unit left waiting");
}

/// 1500197: a group whole again has `BelowMinCount=False` written, and is
/// struck again before the watch shows that write (the cache still shows
/// `True`): the condition turns `True` again on the API server, so its
/// Event comes again. Whether a write turns it is decided on the last
/// write the API server accepted, not on the cache.
#[tokio::test(start_paused = true)]
async fn below_min_count_turning_true_before_the_watch_shows_false_records_its_event() {
    let nodes = ClusterIndex::new();
    nodes.apply_node(&node("n1"));
    let group = |short: Option<&str>| {
        let mut g = gang("g", 2, None);
        g.metadata.uid = Some("g-uid".into());
        g.status = short.map(
            |status| k8s_openapi::api::scheduling::v1beta1::PodGroupStatus {
                conditions: Some(vec![Condition {
                    type_: permit::BELOW_MIN_COUNT.to_owned(),
                    status: status.to_owned(),
                    reason: permit::UNSCHEDULABLE.to_owned(),
                    message: "1 of 2 pods placed".to_owned(),
                    last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ),
                    observed_generation: None,
                }]),
                ..Default::default()
            },
        );
        g
    };
    nodes.apply_pod_group(&group(None));
    nodes.apply_pod(&bound_on_n1("p0"));
    nodes.apply_pod(&bound_on_n1("p1"));
    let gangs = Gangs::with_config(GangConfig::default());
    let writer = Recorded::default();
    let r = GroupRef::group("ns", "g");
    let set = |status: bool, reason: &'static str| {
        let (gangs, nodes, writer, r) = (&gangs, &nodes, &writer, &r);
        async move {
            gangs
                .set_condition(nodes, writer, r, None, status, reason, "full")
                .await;
        }
    };
    set(true, permit::SCHEDULED).await;
    // Struck: reported, with its Event; the watch shows the condition.
    nodes.delete_pod("ns", "p1");
    set(false, permit::UNSCHEDULABLE).await;
    nodes.apply_pod_group(&group(Some("True")));
    assert_eq!(*writer.events.lock(), vec![EventReason::GangBelowMinCount]);
    // Whole again: `False` written; the watch has not shown it yet.
    nodes.apply_pod(&bound_on_n1("p1"));
    set(false, permit::UNSCHEDULABLE).await;
    // Struck again at once: `True` again, and so is its Event.
    nodes.delete_pod("ns", "p1");
    set(false, permit::UNSCHEDULABLE).await;
    let statuses: Vec<String> = writer
        .conditions
        .lock()
        .iter()
        .filter(|(t, _, _)| t == permit::BELOW_MIN_COUNT)
        .map(|(_, s, _)| s.clone())
        .collect();
    assert_eq!(statuses, ["True", "False", "True"]);
    assert_eq!(
        *writer.events.lock(),
        vec![
            EventReason::GangBelowMinCount,
            EventReason::GangBelowMinCount
        ]
    );
}
