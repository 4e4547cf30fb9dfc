//! kruntimes-scheduler: Run placement for kruntimes and workload-aware
//! scheduling for Kubernetes, in one service.
//!
//! ```text
//!            transport                     cache                    pure domain
//!  ┌──────────────────────────┐    ┌─────────────────────┐    ┌──────────────────────┐
//!  │ http (axum routers)      │───▶│ cache::Cache        │───▶│ model (quantities,   │
//!  │ controller (Run loop)    │    │  Runtime Pod slots: │    │   ratios, pod facts, │
//!  │ cluster (writes: store / │    │  facts, actual and  │    │   requests)          │
//!  │   kube API)              │    │  assumed usage;     │    │ runs (filter, score, │
//!  │ serve (assembly), main   │    │  Runs; reservations │    │   status, queue)     │
//!  └──────────────────────────┘    └─────────────────────┘    │ workload (builder,   │
//!                                                              │   validation)        │
//!                                                              └──────────────────────┘
//! ```
//!
//! Dependencies point one way: transport uses the cache, the cache uses the
//! pure domain; never the reverse. Handlers keep no state of their own.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod admission;
pub mod agent;
pub mod cache;
pub mod certs;
pub mod cluster;
pub mod controller;
pub mod crd;
pub mod extender;
pub mod http;
pub mod metrics;
pub mod model;
pub mod pods;
pub mod runs;
pub mod serve;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod tls;
pub mod webhooks;
pub mod workload;
