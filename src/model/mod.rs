//! The pure domain: quantities, resource vectors, exact ratios, Runtime Pod
//! facts and effective requests. No I/O, no clocks (time is passed in).

pub mod pod;
pub mod quantity;
pub mod ratio;
pub mod resources;
