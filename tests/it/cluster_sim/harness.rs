//! What every simulation shares: the seed that drives every choice, the
//! simulated clock, the trace of recent events, the failure report, and the
//! seed loops (`cargo test`, `SEED=` replay, `SIM_SOAK_SECS=` soak).
//!
//! A simulation is a function `fn(&mut Sim, steps)` that draws every event,
//! fault and delay from [`Sim`]'s generator and advances [`Sim::now`]
//! itself: the same seed gives the same run, event for event. It checks its
//! invariants after every step and calls [`Sim::violated`] on the first
//! broken one, which panics with the seed, the step, the invariant and the
//! last events of the trace. [`run_seeds`] catches that panic (or any other
//! panic inside the real code under test) and prints the replay command.

use std::collections::VecDeque;
use std::fmt::{self, Display, Write as _};
use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};

use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

/// How many events a failure report shows, most recent last.
const TRACE_LEN: usize = 60;

/// One seeded run: generator, simulated clock, step counter and trace.
pub struct Sim {
    /// The seed this run replays with (`SEED=<seed>`).
    pub seed: u64,
    rng: ChaCha8Rng,
    /// Simulated time since the start of the run.
    now: Duration,
    /// The step being simulated (0 before the first).
    step: u64,
    /// Events recorded so far (the figure for events per second).
    events: u64,
    trace: VecDeque<String>,
    /// Set while a fault's effects may legitimately break an invariant
    /// (for example a bound gang losing a member); invariants that allow a
    /// repair window read it through [`Sim::since_fault`].
    last_fault: Option<Duration>,
    /// FNV-1a over every event line recorded, for determinism tests.
    hash: u64,
    /// `SIM_PRINT_TRACE` set: every event is printed as it is recorded
    /// (to diff two runs of a seed line by line).
    print_trace: bool,
}

impl Sim {
    pub fn new(seed: u64) -> Self {
        Sim {
            seed,
            rng: ChaCha8Rng::seed_from_u64(seed),
            now: Duration::ZERO,
            step: 0,
            events: 0,
            trace: VecDeque::with_capacity(TRACE_LEN),
            last_fault: None,
            hash: 0xcbf2_9ce4_8422_2325,
            print_trace: std::env::var_os("SIM_PRINT_TRACE").is_some(),
        }
    }

    /// Simulated time since the start of the run.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Moves simulated time forward.
    pub fn advance(&mut self, by: Duration) {
        self.now += by;
    }

    /// Starts the next step (a step is one event of the simulated world and
    /// everything it causes before the invariants are checked).
    pub fn next_step(&mut self) -> u64 {
        self.step += 1;
        self.step
    }

    pub fn step(&self) -> u64 {
        self.step
    }

    pub fn events(&self) -> u64 {
        self.events
    }

    /// `true` with probability `p` (0.0..=1.0).
    pub fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p.clamp(0.0, 1.0))
    }

    /// A number in `low..high` (`low` when the range is empty).
    pub fn below(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            low
        } else {
            self.rng.random_range(low..high)
        }
    }

    /// An index into a collection of `len` items, `None` when it is empty.
    pub fn index(&mut self, len: usize) -> Option<usize> {
        (len > 0).then(|| self.rng.random_range(0..len))
    }

    /// One item of `items`, `None` when it is empty.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        self.index(items.len()).map(|i| &items[i])
    }

    /// One index drawn by weight: `weights[i]` / sum. `None` when every
    /// weight is 0.
    pub fn weighted(&mut self, weights: &[u32]) -> Option<usize> {
        let total: u64 = weights.iter().map(|w| u64::from(*w)).sum();
        if total == 0 {
            return None;
        }
        let mut at = self.rng.random_range(0..total);
        for (i, w) in weights.iter().enumerate() {
            let w = u64::from(*w);
            if at < w {
                return Some(i);
            }
            at -= w;
        }
        None
    }

    /// A delay between `low` and `high` (inclusive of `low`).
    pub fn delay(&mut self, low: Duration, high: Duration) -> Duration {
        let (lo, hi) = (low.as_micros() as u64, high.as_micros() as u64);
        Duration::from_micros(self.below(lo, hi.max(lo + 1)))
    }

    /// Records an event in the trace.
    pub fn event(&mut self, what: impl Display) {
        self.events += 1;
        if self.trace.len() == TRACE_LEN {
            self.trace.pop_front();
        }
        let mut line = String::new();
        let _ = write!(
            line,
            "[{:>9.3}s #{:<6}] {what}",
            self.now.as_secs_f64(),
            self.step
        );
        if self.print_trace {
            eprintln!("TRACE {line}");
        }
        for b in line.bytes() {
            self.hash = (self.hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.trace.push_back(line);
    }

    /// A hash of every event recorded so far (time, step and text): two
    /// runs of one seed must agree on it.
    pub fn trace_hash(&self) -> u64 {
        self.hash
    }

    /// Records a fault: an event, and the moment invariants with a repair
    /// window count from.
    pub fn fault(&mut self, what: impl Display) {
        self.last_fault = Some(self.now);
        self.event(format_args!("FAULT {what}"));
    }

    /// Simulated time since the last fault, `None` before the first.
    pub fn since_fault(&self) -> Option<Duration> {
        self.last_fault.map(|at| self.now.saturating_sub(at))
    }

    /// Reports a broken invariant: panics with the seed, the step, the
    /// invariant, what broke it and the last events.
    #[track_caller]
    pub fn violated(&self, invariant: &str, detail: impl Display) -> ! {
        panic!("{}", self.report(invariant, &detail.to_string()))
    }

    /// Checks an invariant: `violated` when `holds` is false.
    #[track_caller]
    pub fn check(&self, holds: bool, invariant: &str, detail: impl FnOnce() -> String) {
        if !holds {
            self.violated(invariant, detail())
        }
    }

    fn report(&self, invariant: &str, detail: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "simulation failed: seed {} step {} at {:.3}s simulated\ninvariant: {invariant}\n{detail}\nlast {} events:",
            self.seed,
            self.step,
            self.now.as_secs_f64(),
            self.trace.len(),
        );
        for line in &self.trace {
            let _ = writeln!(out, "  {line}");
        }
        out
    }
}

/// What one seed's run did, for the figures.
#[derive(Debug, Default, Clone, Copy)]
pub struct Outcome {
    pub steps: u64,
    pub events: u64,
    pub simulated: Duration,
}

impl Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} steps, {} events, {:.1}s simulated",
            self.steps,
            self.events,
            self.simulated.as_secs_f64()
        )
    }
}

/// The seeds a test runs: `SEED=<n>` replays exactly that one; otherwise
/// `SIM_SEEDS=<n>` runs seeds `0..n`; otherwise `default`.
pub fn seeds(default: std::ops::Range<u64>) -> Vec<u64> {
    if let Some(seed) = env_u64("SEED") {
        return vec![seed];
    }
    match env_u64("SIM_SEEDS") {
        Some(n) => (0..n).collect(),
        None => default.collect(),
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    match value.trim().parse() {
        Ok(n) => Some(n),
        Err(_) => panic!("{name}={value:?} is not a number"),
    }
}

/// Runs `simulate` once per seed of [`seeds`]`(default)`, each with `steps`
/// steps (`SIM_STEPS=<n>` overrides). A failing seed panics with its report
/// and the command that replays it.
pub fn run_seeds(
    test: &str,
    default: std::ops::Range<u64>,
    steps: u64,
    simulate: impl Fn(&mut Sim, u64),
) -> Outcome {
    let steps = env_u64("SIM_STEPS").unwrap_or(steps);
    let mut total = Outcome::default();
    for seed in seeds(default) {
        let outcome = run_one(test, seed, steps, &simulate);
        total.steps += outcome.steps;
        total.events += outcome.events;
        total.simulated += outcome.simulated;
    }
    total
}

/// Runs one seed; on a panic (an invariant or the code under test), panics
/// again with the seed's report and its replay command.
pub fn run_one(test: &str, seed: u64, steps: u64, simulate: &impl Fn(&mut Sim, u64)) -> Outcome {
    let mut sim = Sim::new(seed);
    let result = panic::catch_unwind(AssertUnwindSafe(|| simulate(&mut sim, steps)));
    if let Err(payload) = result {
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("(panic without a message)");
        let body = if message.starts_with("simulation failed:") {
            message.to_string()
        } else {
            sim.report("the code under test panicked", message)
        };
        panic!(
            "{body}\nreplay: SEED={seed} SIM_STEPS={steps} cargo test --test it {test} -- --exact"
        );
    }
    Outcome {
        steps: sim.step(),
        events: sim.events(),
        simulated: sim.now(),
    }
}

/// The soak entry point: runs seeds from `SIM_SEED_START` (default 0) until
/// `SIM_SOAK_SECS` of wall time have passed, `SIM_STEPS` steps each, and
/// prints seeds, steps, events and events per second. Returns `None` when
/// `SIM_SOAK_SECS` is not set. A failing seed's replay command names
/// `replay`, the test that runs the same world for `SEED=<n>` (the soak
/// itself is ignored and does not read `SEED`).
pub fn soak(
    test: &str,
    replay: &str,
    steps: u64,
    simulate: impl Fn(&mut Sim, u64),
) -> Option<Outcome> {
    let secs = env_u64("SIM_SOAK_SECS")?;
    let steps = env_u64("SIM_STEPS").unwrap_or(steps);
    let start = env_u64("SIM_SEED_START").unwrap_or(0);
    let began = Instant::now();
    let mut total = Outcome::default();
    let mut seed = start;
    while began.elapsed() < Duration::from_secs(secs) {
        let outcome = run_one(replay, seed, steps, &simulate);
        total.steps += outcome.steps;
        total.events += outcome.events;
        total.simulated += outcome.simulated;
        seed += 1;
    }
    let wall = began.elapsed().as_secs_f64();
    println!(
        "{test}: seeds {start}..{seed} ({} seeds), {total}, {:.0} events/s, {:.0} steps/s wall",
        seed - start,
        total.events as f64 / wall,
        total.steps as f64 / wall,
    );
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_the_same_choices() {
        let draw = |seed| {
            let mut sim = Sim::new(seed);
            (0..32).map(|_| sim.below(0, 1_000_000)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn a_violation_reports_seed_step_invariant_and_trace() {
        let outcome = panic::catch_unwind(|| {
            run_one("cluster_sim::harness::x", 42, 3, &|sim: &mut Sim, steps| {
                for _ in 0..steps {
                    sim.next_step();
                    sim.advance(Duration::from_millis(1500));
                    sim.event("a pod was created");
                }
                sim.violated("no node overcommitted", "node-1: cpu 5 > 4");
            })
        });
        let payload = outcome.expect_err("the run fails");
        let report = payload.downcast_ref::<String>().expect("a String report");
        assert!(report.contains("seed 42 step 3"), "{report}");
        assert!(
            report.contains("invariant: no node overcommitted"),
            "{report}"
        );
        assert!(report.contains("node-1: cpu 5 > 4"), "{report}");
        assert!(report.contains("a pod was created"), "{report}");
        assert!(report.contains("SEED=42 SIM_STEPS=3"), "{report}");
    }

    #[test]
    fn a_panic_in_the_code_under_test_is_reported_with_its_seed() {
        let outcome = panic::catch_unwind(|| {
            run_one("cluster_sim::harness::x", 5, 1, &|sim: &mut Sim, _| {
                sim.next_step();
                sim.event("bind");
                panic!("index out of bounds");
            })
        });
        let payload = outcome.expect_err("the run fails");
        let report = payload.downcast_ref::<String>().expect("a String report");
        assert!(report.contains("seed 5 step 1"), "{report}");
        assert!(report.contains("index out of bounds"), "{report}");
    }

    #[test]
    fn weighted_draws_only_positive_weights() {
        let mut sim = Sim::new(1);
        for _ in 0..200 {
            let i = sim.weighted(&[0, 3, 0, 1]).expect("some weight");
            assert!(i == 1 || i == 3, "{i}");
        }
        assert_eq!(sim.weighted(&[0, 0]), None);
    }
}
