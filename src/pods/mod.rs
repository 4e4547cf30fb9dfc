//! Pod scheduling decisions for the kube-scheduler extender, pure over a
//! snapshot: node fit (effective requests, DRA node-allocatable
//! consumption) and group priority consistency. No I/O, no clocks.

pub mod fit;
pub mod priority;

#[cfg(test)]
mod tests;
