//! Run placement: filter, least-loaded score, Pending summaries, and the
//! work queue that drives scheduling cycles.

pub mod affinity;
pub mod columns;
pub mod decide;
pub mod placement;
pub mod queue;
pub mod retry;
pub mod status;
pub mod targets;
