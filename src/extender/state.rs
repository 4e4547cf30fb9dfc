//! What the extender's handlers share: the cluster index they decide over,
//! where binds are written, the bind gates and the metrics. The service's
//! composite state holds it and hands it out (axum `FromRef`); the
//! extender knows nothing of the other surfaces.

use crate::cache::cluster_index::ClusterIndex;
use crate::cluster::ClusterWriter;
use crate::extender::bind::device_gate::BindingGate;
use crate::extender::bind::permit::Gangs;
use crate::metrics::Metrics;
use std::sync::Arc;

/// The extender's own state.
#[derive(Clone)]
pub struct ExtenderState {
    /// The cluster model (Nodes, Pods, groups, DRA).
    pub nodes: Arc<ClusterIndex>,
    /// Where writes go (the store in standalone mode, the API otherwise).
    pub writer: Arc<dyn ClusterWriter>,
    /// Binds waiting on DRA device binding conditions.
    pub binding: Arc<BindingGate>,
    /// Gang members held in bind until their group's quorum (`--gang-wait`).
    pub gangs: Arc<Gangs>,
    /// Decision latency and bind outcomes.
    pub metrics: Arc<Metrics>,
    /// Body limits per mode (`--extender-max-body-bytes`,
    /// `--extender-max-nodelist-bytes`).
    pub limits: crate::extender::limits::Limits,
    /// Follow-up evictions of `All` groups preempted across nodes
    /// ([`crate::extender::evict`]).
    pub evictions: Arc<crate::extender::evict::Evictions>,
    /// Whether the caches the verbs decide over have synced (every watched
    /// kind listed). Until then every verb is an error kube-scheduler
    /// retries, never a failed node.
    pub synced: Arc<dyn Fn() -> bool + Send + Sync>,
}

impl ExtenderState {
    /// The extender over `nodes`, writing through `writer`, deciding only
    /// while `synced` says the caches are; the bind gates, gang holds,
    /// body limits and evictions at their defaults (`serve` sets them from
    /// its flags).
    pub fn new(
        nodes: Arc<ClusterIndex>,
        writer: Arc<dyn ClusterWriter>,
        metrics: Arc<Metrics>,
        synced: Arc<dyn Fn() -> bool + Send + Sync>,
    ) -> Self {
        ExtenderState {
            nodes,
            writer,
            binding: Arc::new(BindingGate::default()),
            gangs: Arc::new(Gangs::default()),
            metrics,
            limits: Default::default(),
            evictions: Arc::default(),
            synced,
        }
    }
}
