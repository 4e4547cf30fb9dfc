//! Leader election on a `coordination.k8s.io/v1` Lease: only the leader
//! runs the Run loop and writes Run status.
//!
//! [`contest`] keeps contesting the Lease for as long as its receiver
//! lives. The lease manager (kube-lease-manager) reports each change of
//! holder; when it fails to start, errors (the Lease API fails, a
//! renewal is refused) or stops, this replica is at once *not* leader (its
//! Run loop stops: it cannot tell whether its renewals still land) and a
//! new manager contests the Lease again after a backoff, so leadership is
//! never lost for good. A panic in the contest is counted
//! (`kruntimes_task_restarts_total{task="LeaderElection"}`) and restarted
//! the same way. Dropping the receiver releases the Lease.

use crate::health::{self, Exit};
use crate::metrics::{Metrics, Task};
use kube::Client;
use kube::runtime::watcher::DefaultBackoff;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Where the Lease lives and who we are.
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    pub lease_name: String,
    pub namespace: String,
    pub identity: String,
    /// How long a Lease is valid without renewal; a standby takes over at
    /// most this long after the leader stops renewing.
    pub lease_duration: Duration,
    /// Renewal happens this long before expiry.
    pub grace: Duration,
}

/// Builds a lease manager (it reads, or creates, the Lease).
async fn manager(client: Client, cfg: &LeaderConfig) -> Result<LeaseManager, LeaseManagerError> {
    // The lease manager requires 0 < grace < duration.
    let duration = cfg.lease_duration.as_secs().max(2);
    let grace = cfg.grace.as_secs().clamp(1, duration - 1);
    // One field manager per replica, so server-side apply arbitrates a race
    // for an orphaned Lease.
    LeaseManagerBuilder::new(client, cfg.lease_name.clone())
        .with_namespace(cfg.namespace.clone())
        .with_identity(cfg.identity.clone())
        .with_duration(duration)
        .with_grace(grace)
        .with_field_manager(format!("{}-{}", super::kube::MANAGER, cfg.identity))
        .build()
        .await
}

/// Contests the Lease until every receiver is gone; the receiver is
/// `true` while this replica holds it. Never gives up: a manager that
/// fails is replaced (see the module docs).
pub fn contest(
    client: Client,
    cfg: LeaderConfig,
    metrics: Arc<Metrics>,
) -> (watch::Receiver<bool>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(false);
    let tx = Arc::new(tx);
    let task = tokio::spawn({
        let tx = Arc::clone(&tx);
        async move {
            let restart_tx = Arc::clone(&tx);
            health::supervise(
                "leader-election",
                move || contest_until_closed(client.clone(), cfg.clone(), Arc::clone(&tx)),
                move |exit| {
                    restart_tx.send_replace(false);
                    if let Exit::Panicked(_) = exit {
                        metrics.task_restart(Task::LeaderElection);
                    }
                    // Ended: every receiver is gone (the Lease was released).
                    !restart_tx.is_closed()
                },
            )
            .await
        }
    });
    (rx, task)
}

/// One contest: managers one after another, each until it fails, until
/// the receivers are gone (then the Lease is released).
async fn contest_until_closed(client: Client, cfg: LeaderConfig, tx: Arc<watch::Sender<bool>>) {
    let mut backoff = DefaultBackoff::default();
    loop {
        match manager(client.clone(), &cfg).await {
            Err(e) => {
                tracing::error!(error = %e, lease = %cfg.lease_name, "starting leader election failed; retrying");
            }
            Ok(m) => loop {
                tokio::select! {
                    biased;
                    _ = tx.closed() => {
                        if let Err(e) = m.release().await {
                            tracing::warn!(error = %e, "releasing the Lease failed");
                        }
                        return;
                    }
                    changed = m.changed() => match changed {
                        Ok(leading) => {
                            tracing::info!(identity = %cfg.identity, leading, "Lease holder changed");
                            tx.send_replace(leading);
                        }
                        Err(e) => {
                            // Whether our renewals still land is unknown:
                            // step down now, contest again with a new manager.
                            let was = tx.send_replace(false);
                            tracing::error!(error = %e, was_leader = was, "leader election failed; contesting the Lease again");
                            break;
                        }
                    }
                }
            },
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(backoff.next().unwrap_or(Duration::from_secs(30))).await;
    }
}
