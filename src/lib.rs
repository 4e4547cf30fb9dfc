//! kruntimes-scheduler
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod workload;
