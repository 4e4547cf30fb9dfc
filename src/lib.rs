//! kruntimes-scheduler
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod cache;
pub mod cluster;
pub mod controller;
pub mod crd;
pub mod http;
pub mod metrics;
pub mod model;
pub mod runs;
pub mod serve;
