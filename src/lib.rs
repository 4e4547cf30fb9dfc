//! kruntimes-scheduler: Run placement for kruntimes and workload-aware
//! scheduling for Kubernetes, in one service.
//!
//! ```text
//!  serve, main ── assembly: flags, listeners, watchers, leader election
//!       │
//!  certs ─▶ webhooks (self-managed webhook TLS and configurations)
//!       │
//!  http ── the Run API, standalone objects, health, metrics; composes every
//!       │  surface's router over AppState, which holds each surface's state
//!       ▼
//!  surfaces, none importing another, each with router(own state):
//!    extender (ExtenderState)  admission (AdmissionState)
//!    controller (Run loop)     agent (per-pod admission, unix socket)
//!       │
//!  cluster ── ports and adapters: ClusterWriter, kube client,
//!       │     standalone store, watchers
//!  cache ──── storage: the Run cache (cache::RunCache) and the cluster index
//!       │     (cache::cluster_index::ClusterIndex): apply/delete/reset, assume/forget;
//!       │     health: readiness of the watches, supervision of background tasks
//!  metrics
//!       │
//!  workload, pods, runs ── pure domain: validation, fit, priority,
//!       │                  placement, status, queue
//!  transport, crd, model, tls ── leaves: HTTP plumbing (errors, extractors,
//!                                limits, 404/405, latency middleware),
//!                                the CRD, the pure core (quantities,
//!                                GroupRef, RunRef, name rules), TLS
//! ```
//!
//! ## Layers
//!
//! Dependencies point down. A module may import only modules of a lower
//! layer than its own; modules of one layer never import each other. The
//! test `tests/it/layering.rs` reads this table and every `crate::` path under
//! `src/`, and fails on an import that goes up or sideways (test code's
//! use of the test kit excepted: the compiler keeps it out of production).
//!
//! | layer | modules | what they are |
//! |-------|---------|---------------|
//! | 0 | `transport`, `crd`, `model`, `tls` | leaves: HTTP plumbing, the CRD, the pure core, TLS |
//! | 1 | `workload`, `pods`, `runs`, `testkit` | pure domain; the test kit (fixtures, under `cfg(test)` or the `testkit` feature; any layer's tests may use it) |
//! | 2 | `metrics` | the metrics registry |
//! | 3 | `cache`, `health` | storage and indexes; readiness and task supervision |
//! | 4 | `cluster` | ports and adapters |
//! | 5 | `extender`, `admission`, `controller`, `agent` | surfaces |
//! | 6 | `explain` | why-pending explanations over the extender's decisions; the `explain` command |
//! | 7 | `http`, `webhooks` | the Run API and router composition; webhook management |
//! | 8 | `certs` | the certs command (uses webhook material) |
//! | 9 | `serve` | assembly: flags, listeners, watchers |
//! | 10 | `main` | the binary (through the library's public paths) |
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod admission;
pub mod agent;
pub mod cache;
pub mod certs;
pub mod cluster;
pub mod controller;
pub mod crd;
pub mod explain;
pub mod extender;
pub mod health;
pub mod http;
pub mod metrics;
pub mod model;
pub mod pods;
pub mod runs;
pub mod serve;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod tls;
pub mod transport;
pub mod webhooks;
pub mod workload;
