//! Pod scheduling decisions for the kube-scheduler extender, pure over a
//! snapshot: node fit (effective requests, DRA node-allocatable
//! consumption), group priority consistency and a pod's own node
//! constraints (`nodeSelector`, required node affinity). No I/O, no clocks.

pub mod dra;
pub mod fit;
pub mod priority;
pub mod selector;

#[cfg(test)]
mod tests;
