//! The test kit: fixture builders, a router-call helper, a poll helper and
//! the one percentile definition, shared by unit tests (`cfg(test)`),
//! the integration tests in `tests/it/` and the benches (the `testkit`
//! feature, which the package enables for its own dev-dependency).
//!
//! - [`builders`]: Kubernetes objects and Runs as JSON ([`Obj`]) with the
//!   defaults the tests share, turned into typed objects with
//!   [`Obj::typed`] or the `*_typed` helpers.
//! - [`call`]: one request through an axum router, answered as status,
//!   JSON body and text.
//! - [`poll`]: wait, bounded, until a condition holds.
//! - [`faults`]: faults injected through the real code paths (an object
//!   whose handling by a watcher panics).
//! - [`loopback`]: kube-scheduler's extender client over a real loopback
//!   connection (one connection per bind, serial verbs on one).
//! - [`stats`]: [`percentile`] (nearest rank) and [`time_calls`], used
//!   for every figure the benches print.
//!
//! It depends on nothing in the crate but [`crate::crd`] (the Run type), so
//! it sits beside the leaves and any layer's tests may use it.
//!
//! Fixtures are test input: a builder given nonsense panics, as a test
//! should.
#![allow(clippy::expect_used, clippy::unwrap_used)]

pub mod builders;
pub mod call;
pub mod faults;
pub mod loopback;
pub mod poll;
pub mod stats;

pub use builders::*;
pub use call::{Resp, call, get, post};
pub use poll::{wait_until, wait_until_async};
pub use stats::{percentile, time_calls};
