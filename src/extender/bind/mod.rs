//! Permit and Bind: the extender's bind sequence and the gang quorum hold,
//! in one place.
//!
//! ```text
//!   bind(pod, node) ── node cached? ── pod, group hierarchy, claims cached? ── assume on node
//!        │                                     (no: Error naming what is missing)
//!        ▼
//!   device gate (DRA binding conditions, ≤ --binding-wait)
//!        ▼
//!   permit: hold until the unit's quorum (≤ --gang-wait; the request
//!           leaves the server's in-flight and connection budgets meanwhile)
//!        ▼
//!   pods/binding (in an owning task) ── ok: stays assumed, group conditions written
//!                                     ├─ outcome unknown: stays assumed ≤ 30 s
//!                                     └─ failed: forgotten
//! ```
//!
//! Every failure answers a typed [`BindFailure`] whose text is the bind's
//! `Error`, and drops the assumption.
//!
//! **Fail closed.** The checks read the cache, so a pod the cache does not
//! know, whose PodGroup or any parent CompositePodGroup it does not hold,
//! or whose ResourceClaims it does not hold allocated, is not bound
//! unchecked: the bind answers `Error` naming what is missing
//! (`pod group ns/g is not in the cache yet`) and kube-scheduler retries.
//!
//! **Cancellation.** kube-scheduler's `httpTimeout`, a closed connection or
//! the server's own timeout can drop the bind future at any await point.
//! Nothing is trusted to run to the end:
//! - until the binding call starts, a drop guard owns the assumption and
//!   forgets it when dropped;
//! - while held, the permit's own guard takes the member out of its unit
//!   and forgets it under the hold table's lock, so no later quorum counts
//!   it, and removes a unit left without members;
//! - the binding call runs in a task that owns the assumption from then
//!   on: whatever happens to the caller, the task learns whether the
//!   Binding was created, keeps the assumption if it was and forgets it if
//!   it was not. When the answer leaves that unknown (a 5xx, a 504 after
//!   the write, a lost connection: [`BindError::Uncertain`]) the pod stays
//!   assumed on its node for [`UNCERTAIN_BIND_KEEP`], so its room and its
//!   gang's domain hold until the watch shows it bound (the cache takes it
//!   over) or a retry assumes it again; forgetting it at once would let the
//!   next member of its gang plan another domain while it is bound in this
//!   one.

pub mod device_gate;
pub mod permit;

use crate::cache::cluster_index::{ChainError, ClusterIndex, ClusterState, PodEntry};
use crate::cluster::{BindError, ClusterWriter, PodBinding};
use crate::extender::gang;
use crate::extender::plugins::fit;
use crate::metrics::{BindFailureCause, GangWait, Metrics};
use crate::model::refs::{GroupRef, PARENT_COMPOSITE_ANNOTATION};
use crate::tls::park::Park;
use device_gate::{BindingGate, DeviceFailure};
use permit::{Gangs, Held, HoldFailure};
use std::sync::Arc;
use std::time::Duration;

/// How long a pod whose binding call ended with its outcome unknown stays
/// assumed on its node, unless the watch shows it first (bound, replaced,
/// gone) or a retried bind assumes it again: longer than the watch takes
/// to show a Binding, a relist after a dropped watch included.
pub const UNCERTAIN_BIND_KEEP: Duration = Duration::from_secs(30);

/// How long a bind waits for the cache to show a claim allocation of the
/// pod (kube-scheduler's PreBind writes it just before calling bind)
/// before it fails closed: well inside kube-scheduler's 30 s bind
/// `httpTimeout`, longer than a healthy watch lags.
pub const CLAIM_CATCH_UP: Duration = Duration::from_secs(2);

/// What a bind works with: the cache, the write side, the permit (quorum
/// hold), the device gate and the metrics. Cheap to clone.
#[derive(Clone)]
pub struct Binder {
    pub nodes: Arc<ClusterIndex>,
    pub writer: Arc<dyn ClusterWriter>,
    pub permit: Arc<Gangs>,
    pub devices: Arc<BindingGate>,
    pub metrics: Arc<Metrics>,
}

/// One bind as kube-scheduler asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindRequest {
    pub namespace: String,
    pub name: String,
    /// The uid kube-scheduler decided for (empty: any).
    pub uid: String,
    pub node: String,
}

/// What the cache lacks for a bind to be checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// The pod itself.
    Pod { namespace: String, name: String },
    /// The pod's PodGroup or a parent CompositePodGroup.
    Group(GroupRef),
    /// A ResourceClaim of the pod (`namespace/name`), or its allocation.
    Claim(String),
    /// A ResourceClaim of the pod the cache holds allocated only to devices
    /// that do not reach the node: kube-scheduler allocated it for this
    /// node, so the cache has not caught up with that allocation.
    ClaimElsewhere { claim: String, node: String },
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Missing::Pod { namespace, name } => {
                write!(f, "pod {namespace}/{name} not found in the cache yet")
            }
            Missing::Group(g) => write!(f, "{g} is not in the cache yet"),
            Missing::Claim(c) => write!(f, "resource claim {c} is not allocated in the cache yet"),
            Missing::ClaimElsewhere { claim, node } => write!(
                f,
                "resource claim {claim} is allocated off node {node} in the cache: its allocation for {node} is not in the cache yet"
            ),
        }
    }
}

/// Why a bind failed. Its text is the bind's `Error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindFailure {
    #[error("PodName and Node are required")]
    Invalid,
    #[error("node {0} not found")]
    NodeGone(String),
    /// Fail closed: the cache lacks what the checks read.
    #[error("{0}")]
    NotCached(Missing),
    /// The cache holds the pod with another uid.
    #[error("pod {namespace}/{name} has uid {cached}, not {requested}: it was replaced")]
    Replaced {
        namespace: String,
        name: String,
        cached: String,
        requested: String,
    },
    /// The node no longer holds the pod: pods bound or being bound there
    /// since kube-scheduler filtered it (its own view and this cache's
    /// can each miss a bind the other sees) take the room.
    #[error(
        "node {node} no longer has room for pod {namespace}/{name}: {reason} (counting the pods bound and being bound there)"
    )]
    NoRoom {
        namespace: String,
        name: String,
        node: String,
        reason: String,
    },
    /// A Binding of the pod to another node was sent and may exist (the
    /// call is in flight, or answered without telling, or created it and
    /// the watch does not show it yet): binding it here meanwhile would
    /// count it on this node while it may be on that one.
    #[error(
        "pod {namespace}/{name}: a binding to node {sent} was sent and may have been created; it is not bound to {node} until the watch shows where it is"
    )]
    EarlierBinding {
        namespace: String,
        name: String,
        sent: String,
        node: String,
    },
    /// The node is outside the domain its gang's placed members fix.
    #[error("pod {namespace}/{name} cannot go there: {reason}")]
    OutsideDomain {
        namespace: String,
        name: String,
        reason: String,
    },
    #[error(transparent)]
    Devices(#[from] DeviceFailure),
    #[error(transparent)]
    Hold(#[from] HoldFailure),
    /// The `pods/binding` call failed.
    #[error(transparent)]
    Binding(#[from] BindError),
}

impl BindFailure {
    /// The metrics label of the cause.
    pub fn cause(&self) -> BindFailureCause {
        match self {
            BindFailure::Invalid => BindFailureCause::Invalid,
            BindFailure::NodeGone(_) | BindFailure::Binding(BindError::NodeGone(_)) => {
                BindFailureCause::NodeGone
            }
            BindFailure::NotCached(_) => BindFailureCause::NotCached,
            BindFailure::Replaced { .. } => BindFailureCause::Replaced,
            BindFailure::NoRoom { .. } => BindFailureCause::NoRoom,
            BindFailure::EarlierBinding { .. } => BindFailureCause::EarlierBinding,
            BindFailure::OutsideDomain { .. } => BindFailureCause::OutsideDomain,
            BindFailure::Devices(DeviceFailure::NotReady(_)) => BindFailureCause::DevicesNotReady,
            BindFailure::Devices(DeviceFailure::Failed(_)) => BindFailureCause::DevicesFailed,
            BindFailure::Hold(HoldFailure::Hierarchy(_)) => BindFailureCause::Hierarchy,
            BindFailure::Hold(HoldFailure::Expired(_) | HoldFailure::Ended(_)) => {
                BindFailureCause::GangExpired
            }
            BindFailure::Hold(HoldFailure::Kept(_)) => BindFailureCause::GangKept,
            BindFailure::Hold(HoldFailure::Full(_)) => BindFailureCause::GangFull,
            BindFailure::Hold(HoldFailure::Surplus(_)) => BindFailureCause::GangSurplus,
            BindFailure::Binding(_) => BindFailureCause::Binding,
        }
    }
}

/// Where a bind stands, for what a drop undoes and counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Devices,
    Held,
    Binding,
}

/// Owns a pod's assumption until the bind ends. Dropped while still live
/// (the bind future was cancelled, or the binding task died), it forgets
/// the assumption and counts the cancellation.
struct Assumption {
    binder: Binder,
    namespace: String,
    name: String,
    /// The pod's uid, as the bind request names it.
    uid: String,
    /// This bind's assumption (a retry of the same pod has its own): what
    /// is forgotten is this one only.
    token: u64,
    stage: Stage,
    live: bool,
}

impl Assumption {
    /// The bind failed: the pod is no longer counted on the node (unless a
    /// newer bind of it assumed it since).
    fn release(mut self) {
        self.live = false;
        self.binder
            .nodes
            .forget_for(&self.namespace, &self.name, self.token);
    }

    /// The Binding was created: the assumption stays until the watch shows
    /// the pod bound.
    fn keep(mut self) {
        self.live = false;
    }

    /// The bind answers a failure, yet the pod stays assumed (kept for
    /// its gang, or the Binding's outcome unknown): kube-scheduler
    /// unreserves it, and counts it where it is nominated next.
    fn keep_unreserved(self) {
        self.binder
            .nodes
            .mark_unreserved(&self.namespace, &self.name, self.token);
        self.keep();
    }
}

impl Drop for Assumption {
    fn drop(&mut self) {
        if !self.live {
            return;
        }
        self.binder
            .nodes
            .forget_for(&self.namespace, &self.name, self.token);
        self.binder
            .metrics
            .bind_failure(BindFailureCause::Cancelled);
        self.binder
            .devices
            .bind_ended(&self.binder.nodes, &self.namespace, &self.name, &self.uid);
        if self.stage == Stage::Held {
            self.binder.metrics.gang_wait(GangWait::Cancelled);
        }
        tracing::info!(pod = %format!("{}/{}", self.namespace, self.name), stage = ?self.stage, "bind cancelled; assumption dropped");
    }
}

/// The checks' inputs the cache must hold: the pod (with that uid), its
/// PodGroup and every parent CompositePodGroup, and each of its
/// ResourceClaims allocated. A broken hierarchy (a cycle, too deep) is left
/// to the permit, which refuses it with the reason.
pub fn check_cached(
    snap: &ClusterState,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<(), BindFailure> {
    let Some(pod) = snap.pod(namespace, name) else {
        return Err(BindFailure::NotCached(Missing::Pod {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }));
    };
    if !uid.is_empty() && pod.uid != uid {
        return Err(BindFailure::Replaced {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            cached: pod.uid.clone(),
            requested: uid.to_owned(),
        });
    }
    if let Some(group) = pod.group.as_deref().filter(|g| !g.is_empty()) {
        // A broken hierarchy (a cycle, too deep) is the quorum's to refuse.
        let missing = snap.chain(namespace, false, group).find_map(|l| match l {
            Err(ChainError::Missing(g)) => Some(g),
            _ => None,
        });
        if let Some(g) = missing {
            return Err(BindFailure::NotCached(Missing::Group(g)));
        }
    }
    if let Some(c) = pod.claims.iter().find(|c| !snap.claim_allocated(&c.claim)) {
        return Err(BindFailure::NotCached(Missing::Claim(c.claim.clone())));
    }
    Ok(())
}

/// [`check_cached`], and each claim's cached allocation reaches `node`:
/// a claim whose known devices are all on other nodes is an allocation the
/// cache has not caught up with (kube-scheduler allocated it for `node`),
/// and its binding conditions would be read from the old one.
pub fn check_cached_on(
    snap: &ClusterState,
    namespace: &str,
    name: &str,
    uid: &str,
    node: &str,
) -> Result<(), BindFailure> {
    check_cached(snap, namespace, name, uid)?;
    let Some(pod) = snap.pod(namespace, name) else {
        return Ok(());
    };
    if let Some(c) = pod
        .claims
        .iter()
        .find(|c| snap.claim_reaches(&c.claim, node) == Some(false))
    {
        return Err(BindFailure::NotCached(Missing::ClaimElsewhere {
            claim: c.claim.clone(),
            node: node.to_owned(),
        }));
    }
    Ok(())
}

// === impl Binder ===

impl Binder {
    /// Binds a pod: node check, cache check, assume, device gate, quorum
    /// hold, binding; on failure the assumption is dropped. Failures are
    /// counted by cause; see the module docs for cancellation.
    pub async fn bind(&self, req: &BindRequest) -> Result<(), BindFailure> {
        self.bind_parked(req, None).await
    }

    /// [`Binder::bind`] whose request can leave the server's in-flight and
    /// connection budgets while it is held for quorum (`park`: the server's
    /// handle, absent when no server counts the request).
    pub async fn bind_parked(
        &self,
        req: &BindRequest,
        park: Option<&Park>,
    ) -> Result<(), BindFailure> {
        let r = self.sequence(req, park).await;
        if let Err(e) = &r {
            self.metrics.bind_failure(e.cause());
            self.devices
                .bind_ended(&self.nodes, &req.namespace, &req.name, &req.uid);
        }
        r
    }

    async fn sequence(&self, req: &BindRequest, park: Option<&Park>) -> Result<(), BindFailure> {
        if req.name.is_empty() || req.node.is_empty() {
            return Err(BindFailure::Invalid);
        }
        let (ns, name) = (req.namespace.as_str(), req.name.as_str());
        self.caught_up(req).await?;
        // A member its own PodGroup does not need while its
        // CompositePodGroup gathers is refused before it is assumed: it
        // holds no room and waits for no device the other groups need
        // (the filter rejects it too; this covers a filter that ran before
        // another member was placed).
        if let Some(message) = self.permit.surplus_now(&self.nodes, ns, name) {
            self.metrics.gang_wait(GangWait::Surplus);
            return Err(BindFailure::Hold(HoldFailure::Surplus(message)));
        }
        // A pod with claims is assumed as waiting for its devices: counted
        // on the node, not placed for its gang's quorum until the gate
        // lets it through. It is assumed only if the node still holds it
        // (checked under the index's write lock, so concurrent binds to one
        // node cannot share the last room): the Binding is this
        // extender's write, the last point where an overcommit is stopped.
        // Its gang's domain is checked the same way: the filter that chose
        // the node may have run before another member was placed elsewhere
        // (and the bind may have waited for the cache since).
        let room = |snap: &ClusterState, pod: &PodEntry| {
            if let Some(sent) = snap.binding_elsewhere(ns, name, &req.node) {
                return Err(BindFailure::EarlierBinding {
                    namespace: ns.to_owned(),
                    name: name.to_owned(),
                    sent: sent.to_owned(),
                    node: req.node.clone(),
                });
            }
            if let Some(g) = pod.group.as_deref().filter(|g| !g.is_empty())
                && let Some(reason) = gang::outside_fixed_domain(snap, ns, g, &req.node)
            {
                return Err(BindFailure::OutsideDomain {
                    namespace: ns.to_owned(),
                    name: name.to_owned(),
                    reason,
                });
            }
            match &pod.requests {
                Some(requests) => fit::check(snap, &req.node, &fit::resolve(snap, requests), None)
                    .map_err(|r| BindFailure::NoRoom {
                        namespace: ns.to_owned(),
                        name: name.to_owned(),
                        node: req.node.clone(),
                        reason: r.message,
                    }),
                None => Ok(()),
            }
        };
        let Some(token) = self
            .nodes
            .assume_checked(ns, name, &req.uid, &req.node, true, room)?
        else {
            // The pod left the cache (or was replaced) since the check.
            check_cached(&self.nodes.read(), ns, name, &req.uid)?;
            return Err(BindFailure::NotCached(Missing::Pod {
                namespace: ns.to_owned(),
                name: name.to_owned(),
            }));
        };
        let mut assumption = Assumption {
            binder: self.clone(),
            namespace: ns.to_owned(),
            name: name.to_owned(),
            uid: req.uid.clone(),
            token,
            stage: Stage::Devices,
            live: true,
        };
        if let Err(e) = self.permit_stage(req, park, &mut assumption).await {
            if matches!(e, BindFailure::Hold(HoldFailure::Kept(_))) {
                // Reserved for the unit still gathering: the permit owns it.
                assumption.keep_unreserved();
            } else {
                assumption.release();
            }
            return Err(e);
        }
        assumption.stage = Stage::Binding;
        // From here the Binding may exist whatever the call answers. The
        // pod keeps its group's parent: should the group be deleted while
        // the pod stays bound, an extender that never saw the group still
        // knows which composite's domain the pod fixes.
        let annotations = self
            .nodes
            .mark_binding_sent(ns, name, assumption.token)
            .map(|p| (PARENT_COMPOSITE_ANNOTATION.to_owned(), p))
            .into_iter()
            .collect();
        let binding = PodBinding {
            namespace: ns.to_owned(),
            name: name.to_owned(),
            uid: req.uid.clone(),
            node: req.node.clone(),
            annotations,
        };
        // The task owns the assumption from here: the caller may go, the
        // outcome of the call still decides whether the pod stays assumed.
        let me = self.clone();
        let task = tokio::spawn(async move {
            match me.writer.bind_pod(&binding).await {
                Ok(()) => {
                    assumption.keep();
                    me.permit
                        .bound(
                            &me.nodes,
                            me.writer.as_ref(),
                            &binding.namespace,
                            &binding.name,
                        )
                        .await;
                    Ok(())
                }
                Err(e @ BindError::Uncertain { .. }) => {
                    // The Binding may exist: the pod keeps its room and
                    // fixes its gang's domain until the watch tells.
                    let token = assumption.token;
                    assumption.keep_unreserved();
                    let nodes = Arc::clone(&me.nodes);
                    let (ns, name) = (binding.namespace.clone(), binding.name.clone());
                    tokio::spawn(async move {
                        tokio::time::sleep(UNCERTAIN_BIND_KEEP).await;
                        nodes.forget_for(&ns, &name, token);
                    });
                    Err(BindFailure::Binding(e))
                }
                Err(e) => {
                    assumption.release();
                    Err(BindFailure::Binding(e))
                }
            }
        });
        match task.await {
            Ok(r) => r,
            Err(e) => Err(BindFailure::Binding(BindError::Other {
                namespace: ns.to_owned(),
                name: name.to_owned(),
                message: format!("the binding task ended: {e}"),
            })),
        }
    }

    /// The node exists and the cache holds what the checks read. A claim
    /// allocation the cache does not show yet is waited for, up to
    /// [`CLAIM_CATCH_UP`]: kube-scheduler's PreBind wrote it just before
    /// this call, and the watch is typically behind by less than a second.
    /// Failing at once cost the pod its binding cycle, and with it the
    /// nomination a preemption had made for it (kube-scheduler clears it
    /// when a binding cycle fails): its victims' recreated pods took the
    /// room back, round after round (the cluster simulation, seed 732).
    /// The pod is not assumed meanwhile; the assumption checks room and
    /// domain again.
    async fn caught_up(&self, req: &BindRequest) -> Result<(), BindFailure> {
        let (ns, name) = (req.namespace.as_str(), req.name.as_str());
        let deadline = tokio::time::Instant::now() + CLAIM_CATCH_UP;
        loop {
            // Registered before reading, so no change is missed.
            let changed = self.nodes.claim_changes().notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let r = {
                let snap = self.nodes.read();
                if !snap.has_node(&req.node) {
                    return Err(BindFailure::NodeGone(req.node.clone()));
                }
                check_cached_on(&snap, ns, name, &req.uid, &req.node)
            };
            match r {
                Err(BindFailure::NotCached(Missing::Claim(_) | Missing::ClaimElsewhere { .. }))
                    if tokio::time::Instant::now() < deadline =>
                {
                    let _ = tokio::time::timeout_at(deadline, changed).await;
                }
                r => return r,
            }
        }
    }

    /// Device gate, then the quorum hold (the Permit stage).
    async fn permit_stage(
        &self,
        req: &BindRequest,
        park: Option<&Park>,
        assumption: &mut Assumption,
    ) -> Result<(), BindFailure> {
        let (ns, name) = (req.namespace.as_str(), req.name.as_str());
        self.devices
            .wait(&self.nodes, self.writer.as_ref(), ns, name, &req.uid)
            .await?;
        self.nodes
            .set_awaiting_devices(ns, name, assumption.token, false);
        // The wait may have taken seconds: what the hold reads must still
        // be there.
        check_cached_on(&self.nodes.read(), ns, name, &req.uid, &req.node)?;
        assumption.stage = Stage::Held;
        // Waiting for other members is no work of the server's: a held
        // request leaves its in-flight and connection budgets, so filter
        // and prioritize never wait behind held binds.
        let held = self
            .permit
            .hold_then(&self.nodes, self.writer.as_ref(), ns, name, || {
                if let Some(p) = park {
                    p.park();
                }
            })
            .await;
        let outcome = match &held {
            Ok(Held::Free) => None,
            Ok(Held::Quorum) => Some(GangWait::Quorum),
            Ok(Held::Waited) => Some(GangWait::Released),
            Err(HoldFailure::Hierarchy(_)) => Some(GangWait::Refused),
            Err(HoldFailure::Full(_)) => Some(GangWait::Full),
            Err(HoldFailure::Surplus(_)) => Some(GangWait::Surplus),
            Err(HoldFailure::Kept(_)) => Some(GangWait::Kept),
            Err(HoldFailure::Expired(_) | HoldFailure::Ended(_)) => Some(GangWait::Expired),
        };
        if let Some(outcome) = outcome {
            self.metrics.gang_wait(outcome);
        }
        held?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
