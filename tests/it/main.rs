//! The integration tests, one test binary (`cargo test --test it`), so the
//! crate and its dependencies are linked once rather than once per file.
//!
//! Each file is a module named after what it covers; run one with
//! `cargo test --test it <module>::` (for example
//! `cargo test --test it gang::`). Shared helpers:
//!
//! - [`common`]: the standalone service over `tests/data/` and calls
//!   through its router;
//! - [`apiserver`]: the test API server speaking the Kubernetes HTTP
//!   protocol, for cluster mode;
//! - `kruntimes_scheduler::testkit`: fixture builders, the router-call and
//!   poll helpers, the percentile the benches use.
//!
//! ## Adding a module
//!
//! 1. Put the tests in `tests/it/<name>.rs` and add `mod <name>;` below
//!    (keep the list sorted).
//! 2. Reach the helpers as `crate::common` and `crate::apiserver`
//!    (`use crate::common;` where a file had `mod common;`).
//! 3. Everything here shares one process: do not set environment
//!    variables, change the current directory or install a global tracing
//!    subscriber or rustls provider; give temporary files a per-test name;
//!    bind port 0 unless the test is about fixed ports (`deploy` serializes
//!    those behind its own lock).
//!
//! A new top-level `tests/<name>.rs` still builds as its own binary; move it
//! here to stop paying its link.

mod apiserver;
mod common;

mod admission;
mod agent_manifest;
mod agent_socket;
mod bind_cancel;
mod bind_fail_closed;
mod binding;
mod cluster;
mod cluster_sim;
mod deploy;
mod disruption;
mod docs;
mod dra;
mod explain;
mod extender;
mod faults;
mod function_release;
mod gang;
mod hierarchy;
mod hostile;
mod http_api;
mod large_gangs;
mod latency;
mod layering;
mod list_paging;
mod manifests;
mod metrics;
mod monitoring;
mod plan_limit;
mod preempt;
mod replay;
mod run_affinity;
mod run_affinity_served;
mod run_status_contract;
mod scenario;
mod tls;
mod upstream_runs;
mod webhook_certs;
mod workload_golden;
