//! The pure domain: quantities, resource vectors, exact ratios, Runtime Pod
//! facts and effective requests, and the small shared types every layer
//! uses ([`refs`]: Run and group references, message bounds, name rules).
//! No I/O, no clocks (time is passed in).

pub mod quantity;
pub mod ratio;
pub mod refs;
pub mod resources;
pub mod runtime_pod;
