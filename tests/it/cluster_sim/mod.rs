//! Deterministic simulations of a cluster around the real decision code:
//! one seed drives every event, fault and delay, time is simulated, and the
//! invariants are checked after every step. `cargo test cluster_sim` runs
//! the fixed seeds; a failure prints its seed, step, invariant and the last
//! events, and `SEED=<n> cargo test --test it <test> -- --exact` replays it.
//! See `docs/simulation.md`.

// Each world uses the part of the harness it needs.
#[allow(dead_code)]
mod harness;
mod runs;
mod scheduler;
