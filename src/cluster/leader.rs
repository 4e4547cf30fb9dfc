//! Leader election on a `coordination.k8s.io/v1` Lease: only the leader
//! runs the Run loop and writes Run status.

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
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

/// Starts the lease manager; the receiver turns `true` while we lead.
pub async fn elect(
    client: Client,
    cfg: &LeaderConfig,
) -> Result<(watch::Receiver<bool>, tokio::task::JoinHandle<()>), LeaseManagerError> {
    // The lease manager requires 0 < grace < duration.
    let duration = cfg.lease_duration.as_secs().max(2);
    let grace = cfg.grace.as_secs().clamp(1, duration - 1);
    // One field manager per replica, so server-side apply arbitrates a race
    // for an orphaned Lease.
    let manager = LeaseManagerBuilder::new(client, cfg.lease_name.clone())
        .with_namespace(cfg.namespace.clone())
        .with_identity(cfg.identity.clone())
        .with_duration(duration)
        .with_grace(grace)
        .with_field_manager(format!("{}-{}", super::kube::MANAGER, cfg.identity))
        .build()
        .await?;
    let (rx, handle) = manager.watch().await;
    let task = tokio::spawn(async move {
        match handle.await {
            Ok(Ok(_)) => tracing::info!("leader election stopped"),
            Ok(Err(e)) => tracing::error!(error = %e, "leader election failed"),
            Err(e) => tracing::error!(error = %e, "leader election task panicked"),
        }
    });
    Ok((rx, task))
}
