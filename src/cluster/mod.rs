//! The write side of cluster state, behind one trait: the Kubernetes API in
//! cluster mode, the in-memory [`standalone::StandaloneStore`] otherwise.

pub mod load;
pub mod standalone;

use crate::crd::RunStatus;
use futures::future::BoxFuture;

/// Why a write did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// The object changed since the given resourceVersion.
    #[error("conflict: the object has been modified")]
    Conflict,
    #[error("not found")]
    NotFound,
    #[error("{0}")]
    Other(String),
}

/// Writes the scheduler makes.
pub trait ClusterWriter: Send + Sync + 'static {
    /// Replaces a Run's status, precondition on `resource_version` when given.
    fn write_run_status<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        resource_version: Option<&'a str>,
        status: &'a RunStatus,
    ) -> BoxFuture<'a, Result<(), WriteError>>;
}
