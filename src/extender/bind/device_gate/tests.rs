//! The binding-condition gate with tokio's paused clock: waits take no real
//! time, and the virtual time at which a wait ends is asserted.

use super::*;
use crate::cluster::{BindError, PodBinding, WriteError};
use crate::crd::RunStatus;
use crate::testkit;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use std::sync::Arc;

/// Records allocation clears and events; nothing else is expected of it.
#[derive(Default)]
struct Recorder {
    clears: Mutex<Vec<(ClaimAllocationRef, Instant)>>,
    /// `(object name, reason, note)`.
    events: Mutex<Vec<(String, String, String)>>,
    /// Clears preconditioned on this resourceVersion answer 409 (the
    /// claim changed since).
    stale: Mutex<Option<String>>,
    /// What a read of a claim answers (`None`: the cache is the truth);
    /// `Some(Err(..))`: the read fails.
    server: Mutex<Option<Result<ClaimRead, String>>>,
    /// Reads never answer (an API server that hangs).
    hang: Mutex<bool>,
}

impl ClusterWriter for Recorder {
    fn record_event<'a>(
        &'a self,
        object: &'a crate::cluster::ObjectRef,
        _: crate::cluster::EventKind,
        reason: crate::cluster::EventReason,
        note: &'a str,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            self.events.lock().push((
                object.name.clone(),
                reason.as_str().to_owned(),
                note.to_owned(),
            ));
        })
    }
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
        Box::pin(async move { Err(BindError::NodeGone(b.node.clone())) })
    }
    fn clear_claim_allocation<'a>(
        &'a self,
        claim: &'a ClaimAllocationRef,
    ) -> BoxFuture<'a, Result<(), WriteError>> {
        Box::pin(async move {
            self.clears.lock().push((claim.clone(), Instant::now()));
            if self.stale.lock().as_deref() == Some(claim.resource_version.as_str()) {
                return Err(WriteError::Conflict);
            }
            Ok(())
        })
    }
    fn read_claim<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<ClaimRead, WriteError>> {
        let answer = match self.server.lock().clone() {
            None => Ok(ClaimRead::CacheIsTruth),
            Some(r) => r.map_err(WriteError::Other),
        };
        let hang = *self.hang.lock();
        Box::pin(async move {
            if hang {
                futures::future::pending::<()>().await;
            }
            answer
        })
    }
    fn write_group_condition<'a>(
        &'a self,
        _: &'a crate::model::refs::GroupRef,
        _: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition,
    ) -> BoxFuture<'a, Result<(), WriteError>> {
        Box::pin(async { Err(WriteError::Other("not expected here".into())) })
    }
}

/// A device `(name, bindingConditions, bindingFailureConditions)`.
type Dev<'a> = (&'a str, &'a [&'a str], &'a [&'a str]);

/// An allocated claim `ns/name` (uid `name-uid`, resourceVersion 7,
/// allocated at [`ALLOCATED`]) with those devices of driver `drv` in pool
/// `pool`, the conditions reported True per device, and the consumers (pod
/// uids).
fn claim(
    name: &str,
    devices: &[Dev<'_>],
    true_conds: &[(&str, &[&str])],
    reserved: &[&str],
) -> ResourceClaim {
    let allocated: Vec<(&str, &str, &str)> = devices
        .iter()
        .map(|(d, _, _)| ("drv", "pool", *d))
        .collect();
    let mut c = testkit::claim(name, "c")
        .namespace("ns")
        .uid(&format!("{name}-uid"))
        .set(&["metadata", "resourceVersion"], "7")
        .allocated(&allocated)
        .set(&["status", "allocation", "allocationTimestamp"], ALLOCATED);
    for (i, (_, conditions, failures)) in devices.iter().enumerate() {
        c = c.binding_conditions(i, conditions, failures);
    }
    for (d, conds) in true_conds {
        c = c.device_status(("drv", "pool", d), conds, ALLOCATED);
    }
    let reserved: Vec<(&str, &str)> = reserved.iter().map(|u| (*u, *u)).collect();
    c.reserved_for(&reserved).typed()
}

/// Pod `ns/p` (uid `p-uid`) using the claims of those names.
fn pod(claims: &[&str]) -> Pod {
    claims
        .iter()
        .fold(
            testkit::pod("p").namespace("ns").uid("p-uid").requests(&[]),
            |p, c| p.uses_claim(c, Some(c), None),
        )
        .typed()
}

/// The `allocationTimestamp` of the claims below.
const ALLOCATED: &str = "2026-01-01T00:00:00Z";

/// A wall clock that reads `at` now and moves with tokio's (paused) clock.
fn wall_from(at: &str) -> super::WallClock {
    let base: k8s_openapi::jiff::Timestamp = at.parse().unwrap();
    let start = Instant::now();
    Arc::new(move || {
        let d = k8s_openapi::jiff::SignedDuration::try_from(start.elapsed()).unwrap();
        base.checked_add(d).unwrap()
    })
}

struct Fixture {
    nodes: Arc<ClusterIndex>,
    writer: Arc<Recorder>,
    gate: Arc<BindingGate>,
}

fn fixture(timeout: u64, wait: u64) -> Fixture {
    fixture_at(timeout, wait, ALLOCATED)
}

/// [`fixture`] with the wall clock reading `now` at the start.
fn fixture_at(timeout: u64, wait: u64, now: &str) -> Fixture {
    let nodes = Arc::new(ClusterIndex::new());
    nodes.apply_pod(&pod(&["gpu", "nic"]));
    Fixture {
        nodes,
        writer: Arc::new(Recorder::default()),
        gate: Arc::new(BindingGate::with_wall_clock(
            BindingConfig {
                timeout: Duration::from_secs(timeout),
                wait: Duration::from_secs(wait),
            },
            wall_from(now),
        )),
    }
}

impl Fixture {
    fn gate_task(&self) -> tokio::task::JoinHandle<(Result<(), String>, Duration)> {
        let (nodes, writer, gate) = (self.nodes.clone(), self.writer.clone(), self.gate.clone());
        tokio::spawn(async move {
            let start = Instant::now();
            let r = gate
                .wait_for_devices(&nodes, writer.as_ref(), "ns", "p", "p-uid")
                .await;
            (r, start.elapsed())
        })
    }

    async fn gate(&self) -> (Result<(), String>, Duration) {
        self.gate_task().await.unwrap()
    }

    fn clears(&self) -> Vec<ClaimAllocationRef> {
        self.writer
            .clears
            .lock()
            .iter()
            .map(|(c, _)| c.clone())
            .collect()
    }
}

const GPU: Dev<'static> = ("gpu-0", &["Attached", "Healthy"], &["AttachFailed"]);

/// Claim `gpu` with [`GPU`] ready (every binding condition True), reserved
/// for the pod.
fn ready_gpu() -> ResourceClaim {
    claim(
        "gpu",
        &[GPU],
        &[("gpu-0", &["Attached", "Healthy"])],
        &["p-uid"],
    )
}

#[test]
fn verdicts() {
    let b = |c: &ResourceClaim| ClaimBinding::from_claim(c).unwrap();
    assert_eq!(
        claim_verdict(&b(&claim(
            "gpu",
            &[GPU],
            &[("gpu-0", &["Attached", "Healthy"])],
            &[]
        ))),
        Verdict::Ready
    );
    assert_eq!(
        claim_verdict(&b(&claim("gpu", &[GPU], &[("gpu-0", &["Attached"])], &[]))),
        Verdict::Waiting("device drv/pool/gpu-0 needs Healthy".into())
    );
    // A True condition on another device does not count.
    assert!(matches!(
        claim_verdict(&b(&claim(
            "gpu",
            &[GPU],
            &[("gpu-1", &["Attached", "Healthy"])],
            &[]
        ))),
        Verdict::Waiting(_)
    ));
    // A failure condition wins, even with every binding condition True.
    assert_eq!(
        claim_verdict(&b(&claim(
            "gpu",
            &[GPU],
            &[("gpu-0", &["Attached", "Healthy", "AttachFailed"])],
            &[]
        ))),
        Verdict::Failed(
            "device drv/pool/gpu-0: binding failure condition AttachFailed is True".into()
        )
    );
    // No device with conditions, or no allocation: nothing to gate.
    assert!(ClaimBinding::from_claim(&claim("gpu", &[("gpu-0", &[], &[])], &[], &[])).is_none());
    let mut c = claim("gpu", &[GPU], &[], &[]);
    c.status.as_mut().unwrap().allocation = None;
    assert!(ClaimBinding::from_claim(&c).is_none());
}

#[test]
fn a_status_entry_with_another_share_id_is_another_device() {
    let mut c = claim("gpu", &[GPU], &[("gpu-0", &["Attached", "Healthy"])], &[]);
    let status = c.status.as_mut().unwrap();
    status
        .allocation
        .as_mut()
        .unwrap()
        .devices
        .as_mut()
        .unwrap()
        .results
        .as_mut()
        .unwrap()[0]
        .share_id = Some("s1".into());
    let b = ClaimBinding::from_claim(&c).unwrap();
    assert!(matches!(claim_verdict(&b), Verdict::Waiting(_)));
    c.status.as_mut().unwrap().devices.as_mut().unwrap()[0].share_id = Some("s1".into());
    assert_eq!(
        claim_verdict(&ClaimBinding::from_claim(&c).unwrap()),
        Verdict::Ready
    );
}

#[tokio::test(start_paused = true)]
async fn ready_devices_and_ungated_pods_pass_at_once() {
    let f = fixture(600, 10);
    // No claim known yet: nothing gates.
    assert_eq!(f.gate().await, (Ok(()), Duration::ZERO));
    f.nodes.apply_claim(&ready_gpu());
    f.nodes
        .apply_claim(&claim("nic", &[("nic-0", &[], &[])], &[], &[]));
    assert_eq!(f.gate().await, (Ok(()), Duration::ZERO));
    // A pod the cache does not know passes (nothing known to gate).
    let r = f
        .gate
        .wait_for_devices(&f.nodes, f.writer.as_ref(), "ns", "other", "")
        .await;
    assert_eq!(r, Ok(()));
    assert!(f.clears().is_empty());
    assert_eq!(f.gate.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_bind_proceeds_exactly_when_the_last_condition_turns_true() {
    let f = fixture(600, 10);
    f.nodes.apply_claim(&claim("gpu", &[GPU], &[], &["p-uid"]));
    let task = f.gate_task();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!task.is_finished());
    // One of two conditions: still waiting.
    f.nodes.apply_claim(&claim(
        "gpu",
        &[GPU],
        &[("gpu-0", &["Attached"])],
        &["p-uid"],
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!task.is_finished());
    // Both, four (virtual) seconds in.
    f.nodes.apply_claim(&ready_gpu());
    let (r, elapsed) = task.await.unwrap();
    assert_eq!(r, Ok(()));
    assert_eq!(elapsed, Duration::from_secs(4));
    assert!(f.clears().is_empty());
    assert_eq!(f.gate.waiting(), 0, "a ready claim is no longer waited for");
}

#[tokio::test(start_paused = true)]
async fn a_wait_is_bounded_per_call_and_answers_an_error_to_retry() {
    let f = fixture(600, 10);
    f.nodes.apply_claim(&claim(
        "gpu",
        &[GPU],
        &[("gpu-0", &["Attached"])],
        &["p-uid"],
    ));
    let (r, elapsed) = f.gate().await;
    let err = r.unwrap_err();
    assert!(
        err.contains("waiting for device binding conditions"),
        "{err}"
    );
    assert!(
        err.contains("claim ns/gpu: device drv/pool/gpu-0 needs Healthy"),
        "{err}"
    );
    assert_eq!(elapsed, Duration::from_secs(10));
    assert!(f.clears().is_empty());
    assert_eq!(
        f.gate.waiting(),
        0,
        "the allocationTimestamp starts the clock: no first wait to remember"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failure_condition_clears_the_allocation_and_fails_the_bind() {
    let f = fixture(600, 10);
    f.nodes.apply_claim(&claim("gpu", &[GPU], &[], &["p-uid"]));
    let task = f.gate_task();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!task.is_finished());
    f.nodes.apply_claim(&claim(
        "gpu",
        &[GPU],
        &[("gpu-0", &["AttachFailed"])],
        &["p-uid"],
    ));
    let (r, elapsed) = task.await.unwrap();
    let err = r.unwrap_err();
    assert!(
        err.contains("binding failure condition AttachFailed is True"),
        "{err}"
    );
    assert!(err.contains("allocation cleared"), "{err}");
    assert_eq!(elapsed, Duration::from_secs(3));
    assert_eq!(
        f.clears(),
        vec![ClaimAllocationRef {
            namespace: "ns".into(),
            name: "gpu".into(),
            uid: "gpu-uid".into(),
            resource_version: "7".into(),
        }]
    );
    assert_eq!(f.gate.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_timeout_runs_from_the_first_wait_across_calls() {
    let f = fixture(25, 10);
    f.nodes.apply_claim(&claim("gpu", &[GPU], &[], &["p-uid"]));
    let start = Instant::now();
    for _ in 0..2 {
        let (r, elapsed) = f.gate().await;
        assert!(r.unwrap_err().contains("retry"));
        assert_eq!(elapsed, Duration::from_secs(10));
        assert!(f.clears().is_empty());
    }
    // The third call reaches 25s after the first wait: cleared then, not before.
    let (r, elapsed) = f.gate().await;
    let err = r.unwrap_err();
    assert!(err.contains("not met within 25s"), "{err}");
    assert!(err.contains("allocation cleared"), "{err}");
    assert_eq!(elapsed, Duration::from_secs(5));
    let clears = f.writer.clears.lock().clone();
    assert_eq!(clears.len(), 1);
    assert_eq!(clears[0].1 - start, Duration::from_secs(25));
    // A new allocation of the claim is a new wait, with a fresh timeout.
    let mut again = claim("gpu", &[GPU], &[], &["p-uid"]);
    again
        .status
        .as_mut()
        .unwrap()
        .allocation
        .as_mut()
        .unwrap()
        .allocation_timestamp =
        serde_json::from_value(serde_json::json!("2026-01-01T00:05:00Z")).ok();
    f.nodes.apply_claim(&again);
    let (r, elapsed) = f.gate().await;
    assert!(r.unwrap_err().contains("retry"));
    assert_eq!(elapsed, Duration::from_secs(10));
    assert_eq!(f.clears().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_claim_in_use_by_other_pods_is_not_cleared() {
    let f = fixture(600, 10);
    f.nodes.apply_claim(&claim(
        "gpu",
        &[GPU],
        &[("gpu-0", &["AttachFailed"])],
        &["p-uid", "q-uid"],
    ));
    let (r, elapsed) = f.gate().await;
    let err = r.unwrap_err();
    assert!(
        err.contains("reserved for other pods, allocation kept"),
        "{err}"
    );
    assert_eq!(elapsed, Duration::ZERO);
    assert!(f.clears().is_empty());
}

#[tokio::test(start_paused = true)]
async fn every_claim_of_the_pod_must_be_ready() {
    let f = fixture(600, 10);
    f.nodes.apply_claim(&ready_gpu());
    f.nodes.apply_claim(&claim(
        "nic",
        &[("nic-0", &["Linked"], &[])],
        &[],
        &["p-uid"],
    ));
    let task = f.gate_task();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!task.is_finished());
    // A deleted claim gates nothing any more.
    f.nodes.delete_claim("ns", "nic");
    let (r, elapsed) = task.await.unwrap();
    assert_eq!(r, Ok(()));
    assert_eq!(elapsed, Duration::from_secs(1));
}

/// Upstream counts the binding timeout from `allocationTimestamp`: a claim
/// allocated longer ago than the timeout is cleared at the first bind,
/// with no wait, and the error and the Event say `binding timeout`.
#[tokio::test(start_paused = true)]
async fn an_old_allocation_is_cleared_at_the_first_bind() {
    // 700s after the allocation, with a 600s timeout.
    let f = fixture_at(600, 10, "2026-01-01T00:11:40Z");
    f.nodes.apply_claim(&claim("gpu", &[GPU], &[], &["p-uid"]));
    let (r, elapsed) = f.gate().await;
    let err = r.unwrap_err();
    assert!(err.contains("binding timeout"), "{err}");
    assert!(err.contains("of the allocation"), "{err}");
    assert!(err.contains("allocation cleared"), "{err}");
    assert_eq!(elapsed, Duration::ZERO);
    assert_eq!(f.clears().len(), 1);
    let events = f.writer.events.lock().clone();
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].0.as_str(), events[0].1.as_str()),
        ("gpu", "BindingTimeout")
    );
    assert!(events[0].2.contains("binding timeout"), "{:?}", events[0]);
    // 100s after the allocation: 500s are left, so the call waits and retries.
    let f = fixture_at(600, 10, "2026-01-01T00:01:40Z");
    f.nodes.apply_claim(&claim("gpu", &[GPU], &[], &["p-uid"]));
    let (r, elapsed) = f.gate().await;
    assert!(r.unwrap_err().contains("retry"));
    assert_eq!(elapsed, Duration::from_secs(10));
    assert!(f.clears().is_empty());
    assert!(f.writer.events.lock().is_empty());
}

/// Without `allocationTimestamp` the first wait starts the clock (the
/// fallback), whatever the wall clock says.
#[tokio::test(start_paused = true)]
async fn without_a_timestamp_the_first_wait_starts_the_timeout() {
    let f = fixture_at(25, 10, "2030-01-01T00:00:00Z");
    let mut c = claim("gpu", &[GPU], &[], &["p-uid"]);
    c.status
        .as_mut()
        .unwrap()
        .allocation
        .as_mut()
        .unwrap()
        .allocation_timestamp = None;
    f.nodes.apply_claim(&c);
    for _ in 0..2 {
        let (r, _) = f.gate().await;
        assert!(r.unwrap_err().contains("retry"));
    }
    assert_eq!(f.gate.waiting(), 1, "the first wait is remembered");
    let (r, elapsed) = f.gate().await;
    let err = r.unwrap_err();
    assert!(
        err.contains("binding timeout") && err.contains("of the first wait"),
        "{err}"
    );
    assert_eq!(elapsed, Duration::from_secs(5));
    assert_eq!(f.clears().len(), 1);
}

/// Found by the cluster simulation (`cluster_sim::scheduler`, seed 3 with
/// DRA): the first wait of an allocation that kube-scheduler removed
/// (PostFilter, or the claim controller after the pod was deleted) stayed
/// in the table until some later wait pruned by age. The sweep drops it as
/// soon as the cache no longer holds that allocation, and keeps live ones.
#[tokio::test(start_paused = true)]
async fn the_sweep_drops_first_waits_of_allocations_gone_from_the_cache() {
    let f = fixture_at(600, 1, "2030-01-01T00:00:00Z");
    let untimed = |name: &str| {
        let mut c = claim(name, &[GPU], &[], &["p-uid"]);
        c.status
            .as_mut()
            .unwrap()
            .allocation
            .as_mut()
            .unwrap()
            .allocation_timestamp = None;
        c
    };
    f.nodes.apply_claim(&untimed("gpu"));
    f.nodes.apply_claim(&untimed("nic"));
    let (r, _) = f.gate().await;
    assert!(r.unwrap_err().contains("retry"));
    assert_eq!(f.gate.waiting(), 2);
    assert_eq!(f.gate.sweep(&f.nodes), 0, "both allocations are live");
    // The gpu claim is deallocated by someone else: its first wait goes,
    // the nic claim's stays.
    let mut gone = untimed("gpu");
    gone.status.as_mut().unwrap().allocation = None;
    f.nodes.apply_claim(&gone);
    assert_eq!(f.gate.sweep(&f.nodes), 1);
    assert_eq!(f.gate.waiting(), 1);
    f.nodes.delete_claim("ns", "nic");
    assert_eq!(f.gate.sweep(&f.nodes), 1);
    assert_eq!(f.gate.waiting(), 0);
}

/// Found by the cluster simulation (`cluster_sim::scheduler`, seed 1 with
/// DRA): kube-scheduler's PreBind writes the claim's `reservedFor` just
/// before it calls bind, so the cache's resourceVersion was often stale
/// when a failed claim was cleared; every attempt answered 409 and the pod
/// never got another device. A clear answered 409 is now decided again
/// once the cache shows the newer claim, within the same call.
#[tokio::test(start_paused = true)]
async fn a_clear_answered_409_is_retried_once_the_cache_has_the_newer_claim() {
    let f = fixture(600, 10);
    *f.writer.stale.lock() = Some("7".into());
    let failed = claim("gpu", &[GPU], &[("gpu-0", &["AttachFailed"])], &["p-uid"]);
    f.nodes.apply_claim(&failed);
    let task = f.gate_task();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!task.is_finished(), "decided on the stale claim");
    assert_eq!(f.clears().len(), 1);
    assert!(
        f.writer.events.lock().is_empty(),
        "no Event for an unsettled clear"
    );
    let mut newer = failed;
    newer.metadata.resource_version = Some("8".into());
    f.nodes.apply_claim(&newer);
    let (r, elapsed) = task.await.unwrap();
    let err = r.unwrap_err();
    assert!(err.contains("allocation cleared"), "{err}");
    assert_eq!(elapsed, Duration::from_secs(2));
    let rvs: Vec<String> = f.clears().into_iter().map(|c| c.resource_version).collect();
    assert_eq!(rvs, ["7", "8"]);
    assert_eq!(f.writer.events.lock().len(), 1);
    assert_eq!(f.gate.waiting(), 0);
}

/// Still 409 when the call's wait ends: the bind fails naming it, and the
/// next bind decides again.
#[tokio::test(start_paused = true)]
async fn a_clear_still_answered_409_at_the_end_of_the_call_fails_the_bind() {
    let f = fixture(600, 4);
    *f.writer.stale.lock() = Some("7".into());
    f.nodes.apply_claim(&claim(
        "gpu",
        &[GPU],
        &[("gpu-0", &["AttachFailed"])],
        &["p-uid"],
    ));
    let (r, elapsed) = f.gate().await;
    let err = r.unwrap_err();
    assert!(
        err.contains("clearing the allocation failed: conflict"),
        "{err}"
    );
    assert_eq!(elapsed, Duration::from_secs(4));
    assert_eq!(f.clears().len(), 2);
    assert_eq!(f.writer.events.lock().len(), 1);
}

/// Of two failed claims, one cleared and the other answered 409: the call
/// decides again for the second only (the cache may still show the first
/// failed), and the error names both.
#[tokio::test(start_paused = true)]
async fn a_claim_cleared_before_a_retry_is_not_cleared_again() {
    let f = fixture(600, 10);
    *f.writer.stale.lock() = Some("7".into());
    let failed = |name: &str| {
        claim(
            name,
            &[("gpu-0", &["Attached"], &["AttachFailed"])],
            &[("gpu-0", &["AttachFailed"])],
            &["p-uid"],
        )
    };
    let mut gpu = failed("gpu");
    gpu.metadata.resource_version = Some("6".into());
    f.nodes.apply_claim(&gpu);
    let nic = failed("nic");
    f.nodes.apply_claim(&nic);
    let task = f.gate_task();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!task.is_finished());
    let mut newer = nic;
    newer.metadata.resource_version = Some("8".into());
    f.nodes.apply_claim(&newer);
    let (r, _) = task.await.unwrap();
    let err = r.unwrap_err();
    assert!(
        err.contains("claim ns/gpu") && err.contains("claim ns/nic"),
        "{err}"
    );
    let clears: Vec<(String, String)> = f
        .clears()
        .into_iter()
        .map(|c| (c.name, c.resource_version))
        .collect();
    assert_eq!(
        clears,
        [
            ("gpu".to_owned(), "6".to_owned()),
            ("nic".to_owned(), "7".to_owned()),
            ("nic".to_owned(), "8".to_owned())
        ]
    );
    assert_eq!(f.writer.events.lock().len(), 2);
    assert_eq!(f.gate.waiting(), 0);
}

/// A pod bound again (its earlier bind passed the gate and did not bind
/// it) is not passed on the claim version the earlier bind passed on:
/// kube-scheduler's Unreserve and PreBind write the claim before the next
/// bind, so a cache still at that version is behind (its watch may have
/// missed a deallocation and a new allocation of the same device, reserved
/// for the pod again, whose conditions are not True yet). Simulation seed
/// 173 bound a pod that way. A newer version is decided on; the memory
/// goes once the watch shows the pod bound.
#[tokio::test(start_paused = true)]
async fn a_pod_bound_again_waits_for_a_newer_claim_than_the_last_bind_passed_on() {
    let f = fixture(600, 10);
    let ready = |rv: &str| {
        let mut c = claim(
            "gpu",
            &[GPU],
            &[("gpu-0", &["Attached", "Healthy"])],
            &["p-uid"],
        );
        c.metadata.resource_version = Some(rv.into());
        c
    };
    f.nodes.apply_claim(&ready("7"));
    assert_eq!(f.gate().await, (Ok(()), Duration::ZERO));
    // The bind did not bind the pod; the cache still shows version 7.
    let (r, waited) = f.gate().await;
    assert_eq!(
        r,
        Err("waiting for device binding conditions: claim ns/gpu: the cache has not shown kube-scheduler's Unreserve of an earlier bind of the pod yet; retry".into())
    );
    assert_eq!(waited, Duration::from_secs(10), "--binding-wait");
    // The cache catches up with kube-scheduler's later writes.
    let task = f.gate_task();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!task.is_finished());
    f.nodes.apply_claim(&ready("9"));
    assert_eq!(task.await.unwrap().0, Ok(()));
    assert!(f.clears().is_empty());
    assert_eq!(f.nodes.read().passed_pods(), 1);
    // Bound: nothing is remembered for it.
    let mut bound = pod(&["gpu", "nic"]);
    bound.spec.as_mut().unwrap().node_name = Some("n1".into());
    f.nodes.apply_pod(&bound);
    assert_eq!(f.nodes.read().passed_pods(), 0);
}

/// The memory of a passed version holds for two `--binding-wait` calls,
/// not for ever: when kube-scheduler's Unreserve write fails (upstream
/// logs it and goes on), the pod stays reserved and PreBind writes
/// nothing, so the claim may never change; then what the cache shows is
/// decided on.
#[tokio::test(start_paused = true)]
async fn a_passed_version_is_remembered_for_two_waits_only() {
    let f = fixture(600, 10);
    f.nodes.apply_claim(&ready_gpu());
    assert_eq!(f.gate().await.0, Ok(()));
    // The same version: held back through the first call...
    assert!(f.gate().await.0.is_err());
    // ...and decided on once two waits have passed.
    assert_eq!(f.gate().await, (Ok(()), Duration::from_secs(10)));
}

/// A cache behind the API server may show an earlier allocation of the
/// same device, its conditions `True`, reserved for the same pod (the
/// claim deallocated and allocated again while the watch was down, or
/// before a new leader's first list). The gate passes only on the version
/// a read of the claim finds, and waits for the watch otherwise; a read
/// that fails passes nothing (simulation seed 101357).
#[tokio::test(start_paused = true)]
async fn a_cache_behind_the_api_server_passes_nothing() {
    let f = fixture(600, 10);
    f.nodes.apply_claim(&ready_gpu());
    // The API server holds version 9 (a new allocation, nothing True).
    *f.writer.server.lock() = Some(Ok(ClaimRead::Version("9".into())));
    let (r, elapsed) = f.gate().await;
    let err = r.unwrap_err();
    assert!(
        err.contains(
            "claim ns/gpu: the cache shows resourceVersion 7, the API server 9; waiting for the watch"
        ),
        "{err}"
    );
    assert_eq!(elapsed, Duration::from_secs(10));
    assert!(f.clears().is_empty(), "nothing is cleared on a stale cache");
    // The watch delivers version 9: its device not attached yet, so the
    // gate waits for the condition, and passes once the cache shows it.
    let task = f.gate_task();
    let mut newer = claim("gpu", &[GPU], &[], &["p-uid"]);
    newer.metadata.resource_version = Some("9".into());
    f.nodes.apply_claim(&newer);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!task.is_finished());
    let mut ready = ready_gpu();
    ready.metadata.resource_version = Some("10".into());
    *f.writer.server.lock() = Some(Ok(ClaimRead::Version("10".into())));
    f.nodes.apply_claim(&ready);
    let (r, elapsed) = task.await.unwrap();
    assert_eq!(r, Ok(()));
    assert_eq!(elapsed, Duration::from_secs(1));
    // A read that fails, or a claim gone, passes nothing (a fresh gate:
    // this one remembers the version it passed on).
    for (answer, says) in [
        (
            Err("connection refused".to_owned()),
            "could not read it to check the cache is current: connection refused",
        ),
        (
            Ok(ClaimRead::Gone),
            "gone from the API server; waiting for the watch",
        ),
    ] {
        let f = fixture(600, 10);
        f.nodes.apply_claim(&ready);
        *f.writer.server.lock() = Some(answer);
        let (r, _) = f.gate().await;
        let err = r.unwrap_err();
        assert!(err.contains(says), "{err}");
    }
    // Nor does a read that never answers: the call's wait bounds it.
    let f = fixture(600, 10);
    f.nodes.apply_claim(&ready);
    *f.writer.hang.lock() = true;
    let (r, elapsed) = f.gate().await;
    let err = r.unwrap_err();
    assert!(
        err.contains("the API server did not answer the reads of the pod's claims in time"),
        "{err}"
    );
    assert_eq!(elapsed, Duration::from_secs(10));
}
