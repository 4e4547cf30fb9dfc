//! DRA device binding conditions: the gate a bind passes before the
//! `pods/binding` is created.
//!
//! For every ResourceClaim of the pod, each allocated device that carries
//! `bindingConditions` must have all of them `True` in the claim's
//! `status.devices[]` entry for that device (matched by driver, pool,
//! device and shareID).
//!
//! - All `True` → the bind proceeds.
//! - Not yet → the bind waits, woken by every ResourceClaim change, for at
//!   most `--binding-wait` per call (so the call fits kube-scheduler's
//!   extender `httpTimeout`), then answers `Error` and kube-scheduler
//!   retries the pod.
//! - A `bindingFailureConditions` entry `True`, or the binding timeout
//!   (`--binding-timeout`, or `DynamicResourcesArgs.bindingTimeout` from
//!   `--scheduler-config`) passed since the claim's
//!   `status.allocation.allocationTimestamp`, as upstream counts it (since
//!   the first wait for that allocation when the claim has no timestamp)
//!   → the claim's allocation is cleared (with its device status and
//!   reservations, preconditioned on the claim's uid and resourceVersion)
//!   and the bind fails, so the pod is scheduled again and the claim
//!   allocated again. A claim also reserved for other pods is in use and is
//!   not cleared; the bind fails all the same. A clear answered 409 (the
//!   claim changed since the cache's version) is decided again within the
//!   call once the cache shows the newer claim.
//!
//! A gated claim the cache does not show reserved for the pod is waited
//! for like a condition (and never cleared on what the cache shows):
//! kube-scheduler's PreBind reserves it before it calls bind, so the cache
//! is behind that write, and may still hold an older allocation of the same
//! device whose conditions were `True`.
//!
//! Before it passes, the gate reads each gated claim from the API server
//! (a GET, a consistent read) and passes only if the cache shows that
//! version; otherwise it waits for the watch, like a condition. A cache
//! behind the API server (a watch down, or a new leader's first list
//! taken before a deallocation) can show an earlier allocation of the same
//! device with that allocation's conditions `True`, reserved for the same
//! pod (simulation seed 101357: after a leader kill, the claim was
//! deallocated and allocated again on the same device while the watch was
//! down). A failed read passes nothing either.
//!
//! The first wait of each allocation without a timestamp is remembered
//! until the allocation is ready, cleared here, or gone from the cache
//! ([`BindingGate::sweep`], every second).
//!
//! Waits run on tokio's clock, so tests run with paused time and never
//! sleep; the age of an allocation is read against the wall clock
//! (`allocationTimestamp` is wall time), which the gate takes as a
//! function so tests can set it.

use crate::cache::cluster_index::{ClaimBinding, ClusterIndex};
use crate::cluster::{
    ClaimAllocationRef, ClaimRead, ClusterWriter, EventKind, EventReason, ObjectRef, WriteError,
};
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// Default `--binding-timeout` (as kube-scheduler's `DynamicResourcesArgs.bindingTimeout`).
pub const DEFAULT_BINDING_TIMEOUT: Duration = Duration::from_secs(600);
/// Default `--binding-wait`: well below the 30s extender `httpTimeout`.
pub const DEFAULT_BINDING_WAIT: Duration = Duration::from_secs(5);
/// How soon a claim read that failed is tried again within a call.
const READ_RETRY: Duration = Duration::from_millis(250);

/// How long binds wait for device binding conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindingConfig {
    /// From the first wait for a claim's allocation until it is cleared.
    pub timeout: Duration,
    /// Longest wait within one bind call.
    pub wait: Duration,
}

impl Default for BindingConfig {
    fn default() -> Self {
        BindingConfig {
            timeout: DEFAULT_BINDING_TIMEOUT,
            wait: DEFAULT_BINDING_WAIT,
        }
    }
}

/// One claim's state against its binding conditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every binding condition is `True`.
    Ready,
    /// Conditions still missing, described.
    Waiting(String),
    /// A binding failure condition is `True`, described.
    Failed(String),
}

fn device_name(d: &crate::cache::cluster_index::ShareKey) -> String {
    match &d.3 {
        Some(share) => format!("{}/{}/{} (share {share})", d.0, d.1, d.2),
        None => format!("{}/{}/{}", d.0, d.1, d.2),
    }
}

/// The verdict for one claim, pure.
pub fn claim_verdict(b: &ClaimBinding) -> Verdict {
    let mut missing = Vec::new();
    for d in &b.gated {
        let ok = b.true_conditions.get(&d.device);
        let is_true = |c: &String| ok.is_some_and(|t| t.contains(c));
        if let Some(f) = d.failure_conditions.iter().find(|c| is_true(c)) {
            return Verdict::Failed(format!(
                "device {}: binding failure condition {f} is True",
                device_name(&d.device)
            ));
        }
        let not_yet: Vec<&str> = d
            .binding_conditions
            .iter()
            .filter(|c| !is_true(c))
            .map(String::as_str)
            .collect();
        if !not_yet.is_empty() {
            missing.push(format!(
                "device {} needs {}",
                device_name(&d.device),
                not_yet.join(", ")
            ));
        }
    }
    if missing.is_empty() {
        Verdict::Ready
    } else {
        Verdict::Waiting(missing.join("; "))
    }
}

/// Why the gate stopped a bind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceFailure {
    /// Conditions still missing after `--binding-wait`, described per
    /// claim: kube-scheduler retries.
    #[error("waiting for device binding conditions: {0}; retry")]
    NotReady(String),
    /// A claim failed or timed out: its allocation was cleared (or kept,
    /// when other pods use it), described per claim.
    #[error("device binding failed: {0}")]
    Failed(String),
}

/// The wall clock the gate reads allocation ages with.
pub type WallClock = std::sync::Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// The gate: its settings and when each claim allocation was first waited for.
pub struct BindingGate {
    config: BindingConfig,
    /// `(claim uid, allocation)` → first wait (claims without an
    /// `allocationTimestamp`).
    first_wait: Mutex<HashMap<(String, String), Instant>>,
    /// The wall clock `allocationTimestamp` is compared with.
    wall: WallClock,
}

impl std::fmt::Debug for BindingGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BindingGate")
            .field("config", &self.config)
            .field("waiting", &self.waiting())
            .finish_non_exhaustive()
    }
}

impl Default for BindingGate {
    fn default() -> Self {
        BindingGate::new(BindingConfig::default())
    }
}

/// A claim that must be cleared, and why.
struct Clear {
    claim: ClaimAllocationRef,
    qualified: String,
    reason: String,
    /// Reserved for other pods too: in use, left allocated.
    in_use: bool,
    /// The binding timeout passed (else a failure condition is True).
    timed_out: bool,
    /// The allocation's first-wait key, forgotten once it is settled.
    id: (String, String),
}

// === impl BindingGate ===

impl BindingGate {
    pub fn new(config: BindingConfig) -> Self {
        BindingGate {
            config,
            first_wait: Mutex::new(HashMap::new()),
            wall: std::sync::Arc::new(Timestamp::now),
        }
    }

    /// The gate with another wall clock (tests).
    #[cfg(test)]
    pub fn with_wall_clock(config: BindingConfig, wall: WallClock) -> Self {
        BindingGate {
            wall,
            ..BindingGate::new(config)
        }
    }

    /// When the binding timeout of this allocation ends on tokio's clock:
    /// the allocation's age is counted from its `allocationTimestamp`
    /// (upstream), else from the first wait for it.
    fn expires(&self, b: &ClaimBinding, now: Instant) -> Instant {
        match b.allocated_at {
            Some(at) => {
                let age = (self.wall)()
                    .duration_since(at)
                    .try_into()
                    .unwrap_or(Duration::ZERO);
                now + self.config.timeout.saturating_sub(age)
            }
            None => self.first_wait(b, now) + self.config.timeout,
        }
    }

    pub fn config(&self) -> BindingConfig {
        self.config
    }

    /// Claim allocations being waited for.
    pub fn waiting(&self) -> usize {
        self.first_wait.lock().len()
    }

    fn id(b: &ClaimBinding) -> (String, String) {
        (b.uid.clone(), b.allocation.clone())
    }

    /// When this allocation was first waited for (now, if never).
    fn first_wait(&self, b: &ClaimBinding, now: Instant) -> Instant {
        let mut m = self.first_wait.lock();
        if let Some(t) = m.get(&Self::id(b)) {
            return *t;
        }
        // Entries nobody asked about for a long time belong to claims that
        // were deleted or reallocated: drop them.
        let horizon = self.config.timeout * 2 + self.config.wait;
        m.retain(|_, t| now.saturating_duration_since(*t) <= horizon);
        m.insert(Self::id(b), now);
        now
    }

    /// Drops the first waits of claim allocations the cache no longer
    /// holds (the claim deleted, deallocated, or allocated again by someone
    /// else than this gate): what is left belongs to live allocations. The
    /// gang sweeper runs it every second (`serve::spawn_gang_sweeper`).
    /// How many were dropped.
    pub fn sweep(&self, nodes: &ClusterIndex) -> usize {
        let live: std::collections::HashSet<(String, String)> = nodes
            .read()
            .gated_allocations()
            .map(|(u, a)| (u.to_owned(), a.to_owned()))
            .collect();
        let mut m = self.first_wait.lock();
        let before = m.len();
        m.retain(|k, _| live.contains(k));
        before - m.len()
    }

    fn forget(&self, b: &ClaimBinding) {
        self.first_wait.lock().remove(&Self::id(b));
    }

    /// [`BindingGate::wait`] with the failure as its message.
    #[cfg(test)]
    pub async fn wait_for_devices(
        &self,
        nodes: &ClusterIndex,
        writer: &dyn ClusterWriter,
        namespace: &str,
        pod_name: &str,
        pod_uid: &str,
    ) -> Result<(), String> {
        self.wait(nodes, writer, namespace, pod_name, pod_uid)
            .await
            .map_err(|e| e.to_string())
    }

    /// Waits until every gated device of the pod's claims is ready (`Ok`),
    /// or fails: conditions still missing after `--binding-wait`, or a
    /// claim failed or timed out (its allocation is then cleared). The gate
    /// reads what the cache holds: a pod the cache does not know has no
    /// known claims and passes, so bind checks first that the cache has
    /// the pod and its claims (see [`super::bind`]).
    ///
    /// Cancellation: dropped at its await, nothing is left but the first
    /// wait of each claim allocation, which is meant to outlive the call.
    pub async fn wait(
        &self,
        nodes: &ClusterIndex,
        writer: &dyn ClusterWriter,
        namespace: &str,
        pod_name: &str,
        pod_uid: &str,
    ) -> Result<(), DeviceFailure> {
        let call_deadline = Instant::now() + self.config.wait;
        // Claims whose failure was settled (cleared, or kept in use): their
        // allocations, and the description of each.
        let mut settled: Vec<((String, String), String)> = Vec::new();
        loop {
            // The versions of the pod's gated claims this round decides on.
            let mut versions: Vec<(String, String)> = Vec::new();
            let mut pod_uid_seen = String::new();
            // Registered before reading, so no change is missed.
            let changed = nodes.claim_changes().notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let now = Instant::now();
            let mut clear: Vec<Clear> = Vec::new();
            let mut waiting: Vec<(String, Instant)> = Vec::new();
            {
                let snap = nodes.read();
                let Some(pod) = snap.pod(namespace, pod_name) else {
                    return Ok(());
                };
                let uid = if pod_uid.is_empty() {
                    pod.uid.as_str()
                } else {
                    pod_uid
                };
                for c in &pod.claims {
                    let Some(b) = snap.claim_binding(&c.claim) else {
                        continue;
                    };
                    // Settled in an earlier round (the watch may not show
                    // the clear yet).
                    if settled.iter().any(|(id, _)| *id == Self::id(b)) {
                        continue;
                    }
                    // kube-scheduler's PreBind reserves the claim for the
                    // pod before it calls bind: a cache without that
                    // reservation is behind, and may hold an older
                    // allocation of the same device with that allocation's
                    // conditions True (deallocated and allocated again
                    // while the watch was down). Nothing is decided on it.
                    if !b.reserved_for.iter().any(|r| r == uid) {
                        waiting.push((
                            format!(
                                "claim {}: not reserved for the pod in the cache yet",
                                c.claim
                            ),
                            call_deadline,
                        ));
                        continue;
                    }
                    // The same holds for a pod bound again: an earlier bind
                    // passed on this version of the claim and did not bind
                    // it, and kube-scheduler's Unreserve and PreBind have
                    // written the claim since. A cache still at that
                    // version is behind (it may miss a deallocation and a
                    // new allocation of the same device, reserved for the
                    // pod again, while its watch was down).
                    // Not for ever: when kube-scheduler's Unreserve write
                    // fails (upstream logs it and goes on), the pod stays
                    // reserved and PreBind writes nothing, so the claim may
                    // never change; after two calls' waits the cache had
                    // time to catch up, and what it shows is decided on.
                    if snap
                        .passed_version(namespace, pod_name, uid, &c.claim)
                        .is_some_and(|(rv, until)| rv == b.resource_version && now < until)
                    {
                        waiting.push((
                            format!(
                                "claim {}: the cache has not shown kube-scheduler's Unreserve of an earlier bind of the pod yet",
                                c.claim
                            ),
                            call_deadline,
                        ));
                        continue;
                    }
                    pod_uid_seen = uid.to_owned();
                    versions.push((c.claim.clone(), b.resource_version.clone()));
                    let (reason, timed_out) = match claim_verdict(b) {
                        Verdict::Ready => {
                            self.forget(b);
                            continue;
                        }
                        Verdict::Failed(why) => (why, false),
                        Verdict::Waiting(what) => {
                            let expires = self.expires(b, now);
                            if now < expires {
                                waiting.push((format!("claim {}: {what}", c.claim), expires));
                                continue;
                            }
                            let since = if b.allocated_at.is_some() {
                                "of the allocation"
                            } else {
                                "of the first wait"
                            };
                            (
                                format!(
                                    "binding timeout: binding conditions not met within {:?} {since} ({what})",
                                    self.config.timeout
                                ),
                                true,
                            )
                        }
                    };
                    clear.push(Clear {
                        claim: ClaimAllocationRef {
                            namespace: b.key.0.clone(),
                            name: b.key.1.clone(),
                            uid: b.uid.clone(),
                            resource_version: b.resource_version.clone(),
                        },
                        qualified: c.claim.clone(),
                        reason,
                        in_use: b.reserved_for.iter().any(|r| r != uid),
                        timed_out,
                        id: Self::id(b),
                    });
                }
            }
            if !clear.is_empty() {
                // A clear that meets a newer version of the claim than the
                // cache showed (kube-scheduler's PreBind writes
                // `reservedFor` just before it calls bind) is decided again
                // once the cache has caught up, within this call.
                let retry = now < call_deadline;
                if self.clear(writer, clear, retry, &mut settled).await {
                    tokio::select! {
                        _ = &mut changed => {}
                        _ = tokio::time::sleep_until(call_deadline) => {}
                    }
                    continue;
                }
                return Err(Self::failed(&settled));
            }
            if !settled.is_empty() {
                // Another claim was cleared in an earlier round: the bind
                // fails all the same.
                return Err(Self::failed(&settled));
            }
            let Some(expires) = waiting.iter().map(|(_, e)| *e).min() else {
                // The reads are bounded by the call's wait (at least one
                // retry interval), like every other wait of the gate.
                let limit = call_deadline.max(Instant::now() + READ_RETRY);
                let behind = tokio::time::timeout_at(limit, behind(writer, &versions))
                    .await
                    .unwrap_or_else(|_| {
                        vec![
                            "the API server did not answer the reads of the pod's claims in time"
                                .to_owned(),
                        ]
                    });
                if behind.is_empty() {
                    nodes.record_passed(
                        namespace,
                        pod_name,
                        &pod_uid_seen,
                        now + 2 * self.config.wait,
                        versions,
                    );
                    return Ok(());
                }
                if Instant::now() >= call_deadline {
                    return Err(DeviceFailure::NotReady(behind.join("; ")));
                }
                tokio::select! {
                    _ = &mut changed => {}
                    _ = tokio::time::sleep_until(call_deadline.min(Instant::now() + READ_RETRY)) => {}
                }
                continue;
            };
            if now >= call_deadline {
                let what: Vec<String> = waiting.into_iter().map(|(w, _)| w).collect();
                return Err(DeviceFailure::NotReady(what.join("; ")));
            }
            tokio::select! {
                _ = &mut changed => {}
                _ = tokio::time::sleep_until(call_deadline.min(expires)) => {}
            }
        }
    }

    /// A bind of the pod ended without a Binding: kube-scheduler's
    /// Unreserve comes next, and the pod's next bind waits until the cache
    /// shows it ([`ClusterIndex::record_bind_ended`]), for at most two
    /// calls' waits (an Unreserve write that failed leaves the claim as it
    /// was).
    pub fn bind_ended(&self, nodes: &ClusterIndex, namespace: &str, pod: &str, uid: &str) {
        nodes.record_bind_ended(namespace, pod, uid, Instant::now() + 2 * self.config.wait);
    }

    /// The bind error naming every settled claim.
    fn failed(settled: &[((String, String), String)]) -> DeviceFailure {
        let parts: Vec<&str> = settled.iter().map(|(_, p)| p.as_str()).collect();
        DeviceFailure::Failed(parts.join("; "))
    }

    /// Clears failed claims' allocations, adding to `settled` each one's
    /// allocation and the part of the bind error naming it. `retry`: a
    /// clear answered 409 (the claim changed since the cache's version) is
    /// left unsettled, and `true` says to wait for the cache and decide
    /// again.
    async fn clear(
        &self,
        writer: &dyn ClusterWriter,
        clear: Vec<Clear>,
        retry: bool,
        settled: &mut Vec<((String, String), String)>,
    ) -> bool {
        let mut again = false;
        for c in clear {
            let outcome = if c.in_use {
                "reserved for other pods, allocation kept".to_owned()
            } else {
                match writer.clear_claim_allocation(&c.claim).await {
                    Ok(()) => "allocation cleared".to_owned(),
                    Err(WriteError::Conflict) if retry => {
                        tracing::debug!(claim = %c.qualified, "clearing the allocation met a newer claim; deciding again");
                        again = true;
                        continue;
                    }
                    Err(e) => format!("clearing the allocation failed: {e}"),
                }
            };
            self.first_wait.lock().remove(&c.id);
            tracing::info!(claim = %c.qualified, reason = %c.reason, outcome = %outcome, "device binding failed");
            let object = ObjectRef {
                api_version: "resource.k8s.io/v1".into(),
                kind: "ResourceClaim".into(),
                namespace: c.claim.namespace.clone(),
                name: c.claim.name.clone(),
                uid: c.claim.uid.clone(),
            };
            let reason = if c.timed_out {
                EventReason::BindingTimeout
            } else {
                EventReason::BindingFailed
            };
            writer
                .record_event(
                    &object,
                    EventKind::Warning,
                    reason,
                    &crate::model::refs::truncate(format!("{}; {outcome}", c.reason), 1024),
                )
                .await;
            settled.push((
                c.id,
                format!("claim {}: {}; {outcome}", c.qualified, c.reason),
            ));
        }
        again
    }
}

#[cfg(test)]
mod tests;

/// Why the cache cannot be trusted for each decided claim (empty: it
/// can): the API server holds a newer version, or the claim is gone, or it
/// could not be read. `versions`: each claim (`namespace/name`) and the
/// version the cache decided on.
async fn behind(writer: &dyn ClusterWriter, versions: &[(String, String)]) -> Vec<String> {
    let reads = futures::future::join_all(versions.iter().map(|(claim, _)| {
        let (namespace, name) = claim.split_once('/').unwrap_or(("", claim));
        writer.read_claim(namespace, name)
    }))
    .await;
    let mut out = Vec::new();
    for (read, (claim, seen)) in reads.into_iter().zip(versions) {
        match read {
            Ok(ClaimRead::CacheIsTruth) => {}
            Ok(ClaimRead::Version(v)) if v == *seen => {}
            Ok(ClaimRead::Version(v)) => out.push(format!(
                "claim {claim}: the cache shows resourceVersion {seen}, the API server {v}; waiting for the watch"
            )),
            Ok(ClaimRead::Gone) => out.push(format!(
                "claim {claim}: gone from the API server; waiting for the watch"
            )),
            Err(e) => out.push(format!(
                "claim {claim}: could not read it to check the cache is current: {e}"
            )),
        }
    }
    out
}
