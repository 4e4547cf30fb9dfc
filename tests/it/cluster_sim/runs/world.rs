//! The runtime world's state, its neighbours, its faults and its invariants.

use super::super::harness::Sim;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruntimes_scheduler::agent::journal::SyncMode;
use kruntimes_scheduler::agent::metrics::AgentMetrics;
use kruntimes_scheduler::agent::source::AgentConfig;
use kruntimes_scheduler::agent::{Agent, Reservation, ReserveError, ReserveRequest};
use kruntimes_scheduler::cache::{CacheConfig, RunCache};
use kruntimes_scheduler::cluster::{
    BindError, ClaimAllocationRef, ClusterWriter, PodBinding, WriteError,
};
use kruntimes_scheduler::controller::{CycleOutcome, RunController};
use kruntimes_scheduler::crd::{Run, RunStatus, phase};
use kruntimes_scheduler::metrics::Metrics;
use kruntimes_scheduler::model::refs::GroupRef;
use kruntimes_scheduler::runs::queue::WorkQueue;
use kruntimes_scheduler::testkit::builders::{run, runtime_pod};
use kube::runtime::watcher::Event;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const NS: &str = "ns";
/// The peer uid runtimed asks its agent with.
const RUNTIMED: Option<u32> = Some(1000);
/// `--resync-period`'s default: the scheduling loop's fallback re-check.
const RESYNC: Duration = Duration::from_secs(30);
/// runtimed refreshes its heartbeat this often (stale after 15 s).
const HEARTBEAT: Duration = Duration::from_secs(5);
/// Finished Runs are deleted this long after they finish.
const TTL: Duration = Duration::from_secs(60);
/// Liveness bound once faults stop: a Run that fits a pod (by the API
/// server's truth) is placed, and a placed Run whose agent is up is
/// admitted, within this much simulated time. The resync period, watch
/// delays and a margin: wakeups should make it seconds.
pub const LIVENESS_BOUND: Duration = Duration::from_secs(45);

/// The world's knobs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Share of the steps with faults and new Runs; the rest is quiet
    /// (faults stop, Runs drain) for liveness and memory.
    pub fault_share: f64,
    /// Probability that a scheduler status write is refused with a 409.
    pub conflict_p: f64,
    /// Probability that it fails with a 5xx.
    pub error_p: f64,
    /// Probability that it is throttled with a 429.
    pub throttle_p: f64,
    /// Whether the Run-scheduler leader is killed and a standby takes over
    /// (and a standby replica runs beside the leader at all). Off, the
    /// world draws exactly what it drew before handovers existed (the
    /// regression seeds that predate them replay their scenario).
    pub handovers: bool,
}

impl Config {
    /// The world before leader handovers and 429s: what the seeds found
    /// then replay with.
    pub fn without_handovers() -> Self {
        Config {
            throttle_p: 0.0,
            handovers: false,
            ..Config::default()
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            fault_share: 0.7,
            conflict_p: 0.08,
            error_p: 0.03,
            throttle_p: 0.03,
            handovers: true,
        }
    }
}

/// Figures of one or more runs.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    pub faults: BTreeMap<&'static str, u64>,
    pub runs_created: u64,
    pub runs_placed: u64,
    pub runs_finished: u64,
    pub cycles: u64,
    /// 409s from a stale resourceVersion (not injected).
    pub stale_conflicts: u64,
    /// Longest wait, once faults stopped, from "fits a pod" to placed.
    pub longest_fit_to_place: Duration,
    /// Longest wait, once faults stopped, from placed to admitted.
    pub longest_place_to_admit: Duration,
    /// Longest time from the last fault to a quiet world (every agent up,
    /// every watch caught up, every fitting Run placed).
    pub longest_repair: Duration,
    /// Leader handovers completed (warm standby, cold replacement).
    pub handovers: u64,
    /// Longest time from a leader's kill to its successor's Lease.
    pub longest_takeover: Duration,
    /// Longest time from a successor's Lease to its loop's start (a cold
    /// one waits for its lists).
    pub longest_takeover_to_first_cycle: Duration,
}

impl Figures {
    pub fn merge(&mut self, o: &Figures) {
        for (k, v) in &o.faults {
            *self.faults.entry(k).or_default() += v;
        }
        self.runs_created += o.runs_created;
        self.runs_placed += o.runs_placed;
        self.runs_finished += o.runs_finished;
        self.cycles += o.cycles;
        self.stale_conflicts += o.stale_conflicts;
        self.longest_fit_to_place = self.longest_fit_to_place.max(o.longest_fit_to_place);
        self.longest_place_to_admit = self.longest_place_to_admit.max(o.longest_place_to_admit);
        self.longest_repair = self.longest_repair.max(o.longest_repair);
        self.handovers += o.handovers;
        self.longest_takeover = self.longest_takeover.max(o.longest_takeover);
        self.longest_takeover_to_first_cycle = self
            .longest_takeover_to_first_cycle
            .max(o.longest_takeover_to_first_cycle);
    }
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} Runs created, {} placed, {} finished, {} cycles, {} stale-version 409s; faults:",
            self.runs_created,
            self.runs_placed,
            self.runs_finished,
            self.cycles,
            self.stale_conflicts
        )?;
        for (k, v) in &self.faults {
            write!(f, " {k}={v}")?;
        }
        write!(
            f,
            "; once faults stopped: longest fit->placed {:.1}s, placed->admitted {:.1}s (bound {}s), longest repair {:.1}s simulated",
            self.longest_fit_to_place.as_secs_f64(),
            self.longest_place_to_admit.as_secs_f64(),
            LIVENESS_BOUND.as_secs(),
            self.longest_repair.as_secs_f64(),
        )?;
        write!(
            f,
            "; {} handovers, longest kill->Lease {:.1}s, Lease->loop start {:.1}s",
            self.handovers,
            self.longest_takeover.as_secs_f64(),
            self.longest_takeover_to_first_cycle.as_secs_f64(),
        )
    }
}

// === the API server ===

/// One watch event as an object stream carries it.
#[derive(Clone)]
#[allow(clippy::large_enum_variant, reason = "a few in flight at a time")]
enum Change {
    Pod(Pod),
    Run(Run),
    RunGone(Run),
}

/// The API server's objects. Every change is logged for the watches.
#[derive(Default)]
struct Api {
    rv: u64,
    runs: BTreeMap<String, Run>,
    pods: BTreeMap<String, Pod>,
    log: Vec<Change>,
    /// The next scheduler write fails with this (drawn by the world).
    inject: Option<WriteError>,
    /// Status writes made by a leader whose cache was not synced.
    unsynced_writes: Vec<String>,
}

impl Api {
    fn bump(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    fn put_run(&mut self, mut r: Run) {
        r.metadata.resource_version = Some(self.bump());
        let name = r.metadata.name.clone().unwrap_or_default();
        self.log.push(Change::Run(r.clone()));
        self.runs.insert(name, r);
    }

    fn put_pod(&mut self, mut p: Pod) {
        p.metadata.resource_version = Some(self.bump());
        let name = p.metadata.name.clone().unwrap_or_default();
        self.log.push(Change::Pod(p.clone()));
        self.pods.insert(name, p);
    }

    fn delete_run(&mut self, name: &str) {
        if let Some(r) = self.runs.remove(name) {
            self.bump();
            self.log.push(Change::RunGone(r));
        }
    }
}

/// The scheduler's writer: status writes with the resourceVersion
/// precondition, plus the 409s, 5xx and 429s the world injects. It knows
/// the cache of the replica it writes for, to catch a write decided from
/// an unsynced cache.
struct ApiWriter(Arc<Mutex<Api>>, Arc<RunCache>);

/// What the real client path makes of a 429 on a status write
/// (`cluster::kube` maps every answer but 409 and 404 to
/// `WriteError::Other` with the client error's text).
fn throttled() -> WriteError {
    let status = kube::core::Status::failure(
        "the server has received too many requests and has asked us to try again later",
        "TooManyRequests",
    )
    .with_code(429);
    WriteError::Other(kube::Error::Api(Box::new(status)).to_string())
}

impl ClusterWriter for ApiWriter {
    fn write_run_status<'a>(
        &'a self,
        _namespace: &'a str,
        name: &'a str,
        resource_version: Option<&'a str>,
        status: &'a RunStatus,
    ) -> BoxFuture<'a, Result<(), WriteError>> {
        let mut api = self.0.lock();
        if !self.1.is_synced() {
            api.unsynced_writes.push(format!("{name}: {status:?}"));
        }
        let r = (|| {
            if let Some(e) = api.inject.take() {
                return Err(e);
            }
            let mut run = api.runs.get(name).cloned().ok_or(WriteError::NotFound)?;
            if resource_version
                .is_some_and(|rv| run.metadata.resource_version.as_deref() != Some(rv))
            {
                return Err(WriteError::Conflict);
            }
            run.status = Some(status.clone());
            api.put_run(run);
            Ok(())
        })();
        Box::pin(async move { r })
    }

    fn bind_pod<'a>(&'a self, b: &'a PodBinding) -> BoxFuture<'a, Result<(), BindError>> {
        let _ = b;
        Box::pin(async move { Err(BindError::NodeGone("no nodes in the runtime world".into())) })
    }

    fn clear_claim_allocation<'a>(
        &'a self,
        _c: &'a ClaimAllocationRef,
    ) -> BoxFuture<'a, Result<(), WriteError>> {
        Box::pin(async move { Err(WriteError::Other("no claims in the runtime world".into())) })
    }

    fn write_group_condition<'a>(
        &'a self,
        _g: &'a GroupRef,
        _c: &'a Condition,
    ) -> BoxFuture<'a, Result<(), WriteError>> {
        Box::pin(async move { Err(WriteError::Other("no groups in the runtime world".into())) })
    }
}

/// One watch (the Run cache's, or one agent's): changes in order, each
/// delivered at its time; dropped, it loses what happens until it relists.
#[derive(Default)]
struct Stream {
    queue: VecDeque<(Duration, Change)>,
    /// Down until this time; then it relists.
    down_until: Option<Duration>,
}

impl Stream {
    fn push(&mut self, at: Duration, c: Change) {
        if self.down_until.is_some() {
            return;
        }
        // A watch keeps the order of changes: never before the last one.
        let at = self.queue.back().map_or(at, |(last, _)| at.max(*last));
        self.queue.push_back((at, c));
    }

    fn due(&mut self, now: Duration) -> Vec<Change> {
        let mut out = Vec::new();
        while self.queue.front().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, c)) = self.queue.pop_front() {
                out.push(c);
            }
        }
        out
    }

    fn drop_until(&mut self, until: Duration) {
        self.queue.clear();
        self.down_until = Some(until);
    }

    /// Whether it is down and due to relist.
    fn relist_due(&mut self, now: Duration) -> bool {
        if self.down_until.is_some_and(|u| u <= now) {
            self.down_until = None;
            true
        } else {
            false
        }
    }

    fn is_quiet(&self) -> bool {
        self.queue.is_empty() && self.down_until.is_none()
    }
}

// === the Runtime Pods, runtimed and the agent ===

/// A Run runtimed executes.
struct Exec {
    name: String,
    requests: BTreeMap<String, u64>,
    ends_at: Duration,
    fails: bool,
}

struct RuntimePod {
    name: String,
    capacity: BTreeMap<String, u64>,
    journal: PathBuf,
    agent: Option<Arc<Agent>>,
    /// The agent is down until then (killed, or the pod restarting).
    agent_down_until: Option<Duration>,
    watch: Stream,
    /// Restarting until then: not Ready, nothing executes, no heartbeat.
    restarting_until: Option<Duration>,
    /// runtimed stopped heartbeating until then.
    stalled_until: Option<Duration>,
    next_heartbeat: Duration,
    executing: BTreeMap<String, Exec>,
}

fn agent_config(pod: &str) -> AgentConfig {
    AgentConfig::new(pod, NS)
}

/// A process-wide counter for the journal directories of concurrent tests.
static RUN_DIRS: AtomicU64 = AtomicU64::new(0);

/// What the world knows of a Run beyond its object: for the invariants.
struct RunInfo {
    requests: BTreeMap<String, u64>,
    app: String,
    /// `required` affinity to its own cohort (co-locate), `anti` (spread).
    required: Option<bool>,
    /// Since when it has continuously fit some pod while unplaced (quiet
    /// phase only).
    fits_since: Option<Duration>,
    /// Since when it has been placed and not admitted (quiet phase only).
    placed_since: Option<Duration>,
}

// === the Run-scheduler replicas ===

/// `--leader-elect-duration`'s default: a Lease not renewed for this long
/// has expired.
const LEASE: Duration = Duration::from_secs(15);
/// The renewal grace `run_cluster` derives from it (a third): the leader
/// renews this long before expiry.
const LEASE_GRACE: Duration = Duration::from_secs(5);

/// One scheduler replica's Run cache, fed by its own watch whether or not
/// it leads (as the real informers are), and its Run loop, standing by
/// (`RunController::stand_by`, as `serve::lead` has it) until it leads.
struct Replica {
    name: String,
    cache: Arc<RunCache>,
    controller: Arc<RunController>,
    watch: Stream,
    /// A cold replica's first list of Runs, and of Runtime Pods, completes
    /// then (its watch starts after both, and the cache is synced).
    runs_list_at: Option<Duration>,
    pods_list_at: Option<Duration>,
    /// Its Run watcher's requests for a fresh list (`RunCache::fresh_runs`,
    /// a new leader's loop asks before its first cycle), and the latest
    /// one it has taken: its next list answers it.
    relists: tokio::sync::watch::Receiver<u64>,
    asked: u64,
}

impl Replica {
    fn new(name: String, api: &Arc<Mutex<Api>>) -> Replica {
        let cache = Arc::new(RunCache::new(
            CacheConfig::default(),
            Arc::new(WorkQueue::default()),
            Arc::new(Metrics::default()),
        ));
        let writer = ApiWriter(Arc::clone(api), Arc::clone(&cache));
        let controller = Arc::new(RunController::new(Arc::clone(&cache), Arc::new(writer)));
        controller.stand_by();
        Replica {
            name,
            relists: cache.runs_relists(),
            asked: 0,
            cache,
            controller,
            watch: Stream::default(),
            runs_list_at: None,
            pods_list_at: None,
        }
    }

    /// A replica starting now: its lists complete 0.5 to 8 s later.
    fn cold(sim: &mut Sim, name: String, start: Duration, api: &Arc<Mutex<Api>>) -> Replica {
        let mut r = Replica::new(name, api);
        let runs = start + sim.delay(Duration::from_millis(500), Duration::from_secs(8));
        let pods = start + sim.delay(Duration::from_millis(500), Duration::from_secs(8));
        r.runs_list_at = Some(runs);
        r.pods_list_at = Some(pods);
        r.watch.drop_until(runs.max(pods));
        r
    }

    fn listing(&self) -> bool {
        self.runs_list_at.is_some() || self.pods_list_at.is_some()
    }

    /// Its lists, relists and due watch events; what happened, for the trace.
    fn feed(&mut self, now: Duration, api: &Mutex<Api>) -> Vec<String> {
        let mut out = Vec::new();
        // A fresh list asked for: the watcher drops its watch and lists at
        // once; one down (failing, in its backoff) lists when it comes
        // back, and that list answers.
        if self.relists.has_changed().unwrap_or(false) {
            self.asked = *self.relists.borrow_and_update();
            if self.watch.down_until.is_none() && !self.listing() {
                self.watch.drop_until(now);
            }
            out.push(format!("{} cache asked for a fresh list", self.name));
        }
        if self.runs_list_at.is_some_and(|t| t <= now) {
            self.runs_list_at = None;
            let runs: Vec<Run> = api.lock().runs.values().cloned().collect();
            self.cache.reset_runs(&runs);
            self.cache.runs_listed(self.asked);
            out.push(format!("{} listed {} Runs", self.name, runs.len()));
        }
        if self.pods_list_at.is_some_and(|t| t <= now) {
            self.pods_list_at = None;
            let pods: Vec<Pod> = api.lock().pods.values().cloned().collect();
            self.cache.reset_pods(&pods, ts(now));
            out.push(format!("{} listed {} pods", self.name, pods.len()));
        }
        if !self.listing() && self.watch.relist_due(now) {
            let (runs, pods): (Vec<Run>, Vec<Pod>) = {
                let api = api.lock();
                (
                    api.runs.values().cloned().collect(),
                    api.pods.values().cloned().collect(),
                )
            };
            self.cache.reset_runs(&runs);
            self.cache.runs_listed(self.asked);
            self.cache.reset_pods(&pods, ts(now));
            out.push(format!(
                "{} cache relisted {} Runs {} pods",
                self.name,
                runs.len(),
                pods.len()
            ));
            if !self.cache.is_synced() {
                self.cache.set_synced(true);
                out.push(format!("{} cache synced", self.name));
            }
        }
        for c in self.watch.due(now) {
            match c {
                Change::Pod(p) => self.cache.apply_pod(&p, ts(now)),
                Change::Run(r) => self.cache.apply_run(&r),
                Change::RunGone(r) => self
                    .cache
                    .delete_run(NS, r.metadata.name.as_deref().unwrap_or_default()),
            }
        }
        out
    }

    /// Whether every change has reached its cache.
    fn is_quiet(&self) -> bool {
        !self.listing() && self.watch.is_quiet()
    }
}

/// The replica holding the Lease: its Run loop over its cache.
struct Leader {
    r: Replica,
    /// The loop's start (`RunController::ready`: the cache synced, then a
    /// resync); no cycle before it completes.
    ready: tokio::task::JoinHandle<()>,
    /// When it won the Lease; whether its loop has started since.
    since: Duration,
    started: bool,
    /// It took over from a killed leader.
    succeeded: bool,
}

/// A leader killed; its successor takes the Lease at `at`.
#[derive(Debug, Clone, Copy)]
struct Handover {
    at: Duration,
    killed_at: Duration,
    /// The standby watching all along takes over; else a replacement pod
    /// whose cache lists after it starts.
    warm: bool,
    /// The old leader released the Lease as it went (a graceful stop).
    released: bool,
    /// When the cold replacement starts (its lists follow).
    cold_start: Duration,
}

pub struct World {
    cfg: Config,
    api: Arc<Mutex<Api>>,
    /// `None` between a leader's kill and its successor's Lease.
    leader: Option<Leader>,
    /// The replica that takes over next (warm, or still listing).
    standby: Option<Replica>,
    handover: Option<Handover>,
    /// A kill drawn this step, carried out part-way through its cycles.
    kill: Option<Handover>,
    next_replica: u64,
    pods: Vec<RuntimePod>,
    info: BTreeMap<String, RunInfo>,
    /// The `app` label of every Run ever created, deleted ones included: a
    /// cache may still see a deleted Run active (its deletion not yet
    /// delivered), and affinity is checked against what the cache sees.
    apps: BTreeMap<String, String>,
    next_run: u64,
    /// Watch delays are multiplied by this while the API server is slow.
    slow_until: Option<Duration>,
    next_resync: Duration,
    dir: PathBuf,
    fig: Figures,
    quiet_since: Option<Duration>,
    repaired: bool,
}

fn base() -> Timestamp {
    Timestamp::from_second(1_767_225_600).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// The simulated clock as a wall-clock time.
fn ts(now: Duration) -> Timestamp {
    base() + SignedDuration::try_from(now).unwrap_or(SignedDuration::ZERO)
}

fn kube_time(now: Duration) -> String {
    ts(now).strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn requests_of(r: &Run) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = r
        .requests()
        .into_iter()
        .flatten()
        .map(|(k, q)| (k.clone(), q.0.parse().unwrap_or(0)))
        .collect();
    out.entry("runs".into()).or_insert(1);
    out
}

fn fits(free: &BTreeMap<String, i64>, req: &BTreeMap<String, u64>) -> bool {
    req.iter()
        .all(|(k, v)| free.get(k).copied().unwrap_or(0) >= *v as i64)
}

fn phase_of(r: &Run) -> Option<&str> {
    r.status.as_ref().and_then(|s| s.phase.as_deref())
}

fn assigned(r: &Run) -> Option<&str> {
    r.status
        .as_ref()
        .filter(|s| s.consumes(None))
        .and_then(|s| s.assigned_pod.as_deref())
}

impl World {
    /// Runs `steps` steps of the world on `sim`; returns its figures.
    pub fn run(sim: &mut Sim, steps: u64, cfg: Config) -> Figures {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap_or_else(|e| panic!("a current-thread runtime: {e}"));
        rt.block_on(async move {
            let mut w = World::new(sim, cfg);
            let quiet_at = (steps as f64 * w.cfg.fault_share) as u64;
            for step in 1..=steps {
                sim.next_step();
                w.step(sim, step <= quiet_at).await;
                w.check(sim);
            }
            w.finish(sim);
            let _ = std::fs::remove_dir_all(&w.dir);
            w.fig.clone()
        })
    }

    fn new(sim: &mut Sim, cfg: Config) -> World {
        let api = Arc::new(Mutex::new(Api::default()));
        // A memory-backed directory when there is one: the journal's
        // snapshots sync, and a disk's syncs would be most of the run time.
        let shm = std::path::Path::new("/dev/shm");
        let tmp = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let dir = tmp.join(format!(
            "krs-sim-runs-{}-{}-{}",
            std::process::id(),
            sim.seed,
            RUN_DIRS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let handovers = cfg.handovers;
        let mut w = World {
            cfg,
            api,
            leader: None,
            standby: None,
            handover: None,
            kill: None,
            next_replica: 0,
            pods: Vec::new(),
            info: BTreeMap::new(),
            apps: BTreeMap::new(),
            next_run: 0,
            slow_until: None,
            next_resync: RESYNC,
            dir,
            fig: Figures::default(),
            quiet_since: None,
            repaired: true,
        };
        // The leader, and (with handovers) a standby watching beside it.
        let first = Replica::new(w.replica_name(), &w.api);
        w.lead(sim, first);
        if handovers {
            let standby = Replica::new(w.replica_name(), &w.api);
            w.standby = Some(standby);
        }
        let n = sim.below(2, 6);
        for i in 0..n {
            let runs = sim.below(1, 5);
            let gpu = if sim.chance(0.4) { sim.below(1, 3) } else { 0 };
            let mut capacity = BTreeMap::from([("runs".to_owned(), runs)]);
            if gpu > 0 {
                capacity.insert("gpu".into(), gpu);
            }
            let name = format!("rp-{i}");
            let journal = w.dir.join(format!("{name}.journal"));
            let pod = RuntimePod {
                name: name.clone(),
                capacity,
                journal,
                agent: None,
                agent_down_until: Some(Duration::ZERO),
                watch: Stream::default(),
                restarting_until: None,
                stalled_until: None,
                next_heartbeat: Duration::ZERO,
                executing: BTreeMap::new(),
            };
            w.ev(sim, format!("pod {name} capacity {:?}", pod.capacity));
            w.pods.push(pod);
            w.write_pod(sim, i as usize);
        }
        // The caches list first (an empty list of Runs, then the pods).
        for r in [&w.leader.as_ref().map(|l| &l.r), &w.standby.as_ref()]
            .into_iter()
            .flatten()
        {
            r.cache.reset_runs(&[]);
            r.cache.set_synced(true);
        }
        w
    }

    fn replica_name(&mut self) -> String {
        self.next_replica += 1;
        format!("scheduler-{}", self.next_replica - 1)
    }

    /// `r` wins the Lease: its Run loop starts over its cache as it is,
    /// with no reservations (`serve::lead` runs `run_until`, which waits
    /// for the cache's lists and resyncs before its first cycle).
    fn lead(&mut self, sim: &mut Sim, r: Replica) {
        let ready = tokio::spawn({
            let c = Arc::clone(&r.controller);
            async move { c.ready().await }
        });
        self.ev(
            sim,
            format!(
                "{} holds the Lease (cache synced: {})",
                r.name,
                r.cache.is_synced()
            ),
        );
        self.leader = Some(Leader {
            r,
            ready,
            since: sim.now(),
            started: false,
            succeeded: false,
        });
    }

    /// Records an event (the harness hashes and, with `SIM_PRINT_TRACE`,
    /// prints it).
    fn ev(&mut self, sim: &mut Sim, what: impl fmt::Display) {
        sim.event(what);
    }

    fn fault(&mut self, sim: &mut Sim, kind: &'static str, what: impl fmt::Display) {
        *self.fig.faults.entry(kind).or_default() += 1;
        self.repaired = false;
        let s = format!("{kind}: {what}");
        sim.fault(s);
    }

    /// A Runtime Pod object as its current state shows it.
    fn write_pod(&mut self, sim: &mut Sim, i: usize) {
        let now = sim.now();
        let p = &self.pods[i];
        let caps: Vec<(String, String)> = p
            .capacity
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect();
        let caps: Vec<(&str, &str)> = caps.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let restarting = p.restarting_until.is_some();
        let heartbeat = self
            .api
            .lock()
            .pods
            .get(&p.name)
            .and_then(|old| {
                old.status
                    .as_ref()?
                    .conditions
                    .as_ref()?
                    .iter()
                    .find(|c| c.type_ == "kruntimes.io/RuntimedReady")?
                    .last_probe_time
                    .clone()
            })
            .map(|t| t.0);
        let beat = if restarting || p.stalled_until.is_some() {
            heartbeat.map_or_else(
                || kube_time(now),
                |t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            )
        } else {
            kube_time(now)
        };
        let mut pod: Pod = runtime_pod(&p.name, &caps, &beat).typed();
        if restarting {
            // Its containers restart: neither Ready nor RuntimedReady.
            let conditions = pod.status.as_mut().and_then(|s| s.conditions.as_mut());
            for c in conditions.into_iter().flatten() {
                c.status = "False".into();
            }
        }
        self.api.lock().put_pod(pod);
        self.publish(sim);
    }

    /// Hands the API server's new changes to every watch, each with its delay.
    fn publish(&mut self, sim: &mut Sim) {
        let log = std::mem::take(&mut self.api.lock().log);
        let slow = if self.slow_until.is_some() { 10 } else { 1 };
        for c in log {
            if let Some(l) = &mut self.leader {
                let d = sim.delay(Duration::from_millis(1), Duration::from_millis(300)) * slow;
                l.r.watch.push(sim.now() + d, c.clone());
            }
            for p in &mut self.pods {
                let d = sim.delay(Duration::from_millis(1), Duration::from_millis(300)) * slow;
                p.watch.push(sim.now() + d, c.clone());
            }
            if let Some(r) = &mut self.standby {
                let d = sim.delay(Duration::from_millis(1), Duration::from_millis(300)) * slow;
                r.watch.push(sim.now() + d, c.clone());
            }
        }
    }

    // === one step ===

    async fn step(&mut self, sim: &mut Sim, faults: bool) {
        let dt = sim.delay(Duration::from_millis(20), Duration::from_millis(1500));
        sim.advance(dt);
        tokio::time::advance(dt).await;
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        let now = sim.now();
        if !faults && self.quiet_since.is_none() {
            self.quiet_since = Some(now);
            self.end_faults(sim);
        }
        if self.slow_until.is_some_and(|u| u <= now) {
            self.slow_until = None;
        }

        self.deliver(sim);
        if self.handover.is_some_and(|h| h.at <= now) {
            self.take_over(sim);
        }

        // One event of the world.
        let weights: [u32; 4] = if faults { [12, 3, 3, 6] } else { [0, 0, 0, 0] };
        match sim.weighted(&weights) {
            Some(0) => self.create_run(sim),
            Some(1) => self.cancel_run(sim),
            Some(2) => self.gc_or_nothing(sim),
            Some(3) => self.inject_fault(sim),
            _ => {}
        }

        if now >= self.next_resync {
            self.next_resync = now + RESYNC;
            // The leader's loop's fallback resync.
            let n = self
                .leader
                .as_ref()
                .filter(|l| l.ready.is_finished())
                .map_or(0, |l| l.r.cache.resync());
            if n > 0 {
                self.ev(sim, format!("resync queued {n}"));
            }
        }
        self.schedule(sim, faults).await;
        for i in 0..self.pods.len() {
            self.runtimed(sim, i).await;
        }
        self.ttl(sim);
    }

    /// Every fault's effect ends: the quiet phase starts repaired.
    fn end_faults(&mut self, sim: &mut Sim) {
        let now = sim.now();
        self.slow_until = None;
        let replicas = self.leader.iter_mut().map(|l| &mut l.r);
        for r in replicas.chain(self.standby.iter_mut()) {
            if r.watch.down_until.is_some() && !r.listing() {
                r.watch.down_until = Some(now);
            }
        }
        for p in &mut self.pods {
            if p.watch.down_until.is_some() {
                p.watch.down_until = Some(now);
            }
            if p.agent_down_until.is_some() {
                p.agent_down_until = Some(now);
            }
            if p.restarting_until.is_some() {
                p.restarting_until = Some(now);
            }
            if p.stalled_until.is_some() {
                p.stalled_until = Some(now);
            }
        }
        self.ev(sim, "faults stop");
    }

    /// Delivers due watch events and relists watches that are due to.
    fn deliver(&mut self, sim: &mut Sim) {
        let now = sim.now();
        let mut lines = Vec::new();
        let replicas = self.leader.iter_mut().map(|l| &mut l.r);
        for r in replicas.chain(self.standby.iter_mut()) {
            lines.extend(r.feed(now, &self.api));
        }
        for line in lines {
            self.ev(sim, line);
        }
        for i in 0..self.pods.len() {
            self.deliver_agent(sim, i);
        }
    }

    fn deliver_agent(&mut self, sim: &mut Sim, i: usize) {
        let now = sim.now();
        // An agent (re)starts: opens its journal, then lists.
        if self.pods[i].agent_down_until.is_some_and(|u| u <= now)
            && self.pods[i].restarting_until.is_none()
        {
            let p = &mut self.pods[i];
            p.agent_down_until = None;
            let agent = Agent::open_with(
                agent_config(&p.name),
                Duration::from_secs(30),
                Some(&p.journal),
                SyncMode::Inline,
                AgentMetrics::default(),
            )
            .unwrap_or_else(|e| panic!("journal {}: {e}", p.journal.display()));
            p.agent = Some(agent);
            p.watch = Stream {
                queue: VecDeque::new(),
                down_until: Some(now),
            };
            let held = self.pods[i]
                .agent
                .as_ref()
                .map_or(0, |a| a.status().reservations.len());
            let name = self.pods[i].name.clone();
            self.ev(
                sim,
                format!("agent {name} started, {held} holds from its journal"),
            );
        }
        let p = &mut self.pods[i];
        let Some(agent) = p.agent.clone() else {
            return;
        };
        if p.watch.relist_due(now) {
            let (runs, pod): (Vec<Run>, Option<Pod>) = {
                let api = self.api.lock();
                (
                    api.runs.values().cloned().collect(),
                    api.pods.get(&p.name).cloned(),
                )
            };
            agent.apply_pod_event(Event::Init);
            if let Some(pod) = pod {
                agent.apply_pod_event(Event::InitApply(pod));
            }
            agent.apply_pod_event(Event::InitDone);
            agent.apply_run_event(Event::Init);
            for r in runs {
                agent.apply_run_event(Event::InitApply(r));
            }
            agent.apply_run_event(Event::InitDone);
        }
        for c in p.watch.due(now) {
            match c {
                Change::Pod(pod) => {
                    if pod.metadata.name.as_deref() == Some(p.name.as_str()) {
                        agent.apply_pod_event(Event::Apply(pod));
                    }
                }
                Change::Run(r) => agent.apply_run_event(Event::Apply(r)),
                Change::RunGone(r) => agent.apply_run_event(Event::Delete(r)),
            }
        }
    }

    // === world events ===

    fn create_run(&mut self, sim: &mut Sim) {
        // Users stop submitting while the backlog is deep: the world stays
        // loaded, never runaway.
        let slots: u64 = self
            .pods
            .iter()
            .filter_map(|p| p.capacity.get("runs"))
            .sum();
        let waiting = {
            let api = self.api.lock();
            api.runs
                .values()
                .filter(|r| phase::is_unscheduled(phase_of(r)))
                .count() as u64
        };
        if waiting > 2 * slots {
            return;
        }
        let name = format!("r-{}", self.next_run);
        self.next_run += 1;
        // Every Run fits some pod when it is empty: load, not shape,
        // decides how long it waits.
        let gpu = self.pods.iter().any(|p| p.capacity.contains_key("gpu")) && sim.chance(0.2);
        let most = self
            .pods
            .iter()
            .filter(|p| !gpu || p.capacity.contains_key("gpu"))
            .filter_map(|p| p.capacity.get("runs").copied())
            .max()
            .unwrap_or(1);
        let n = sim.below(1, most.min(2) + 1);
        let mut reqs = vec![("runs".to_owned(), n.to_string())];
        if gpu {
            reqs.push(("gpu".into(), "1".into()));
        }
        let app = ["a", "b", "c"][sim.below(0, 3) as usize].to_owned();
        let r: Vec<(&str, &str)> = reqs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut obj = run(&name, &r)
            .uid(&format!("uid-{name}"))
            .label("app", &app);
        obj = obj.set(&["metadata", "creationTimestamp"], kube_time(sim.now()));
        let required = match sim.weighted(&[6, 1, 1, 1]) {
            Some(1) => Some(false),
            Some(2) => Some(true),
            Some(3) => {
                // Preferred only: scored, never required.
                obj = obj.set(
                    &[
                        "spec",
                        "affinity",
                        "runAffinity",
                        "preferredDuringSchedulingIgnoredDuringExecution",
                    ],
                    serde_json::json!([{"weight": 50, "runAffinityTerm": {
                        "labelSelector": {"matchLabels": {"app": app}},
                        "topologyKey": "kruntimes.io/runtime-pod"}}]),
                );
                None
            }
            _ => None,
        };
        if let Some(colocate) = required {
            let key = if colocate {
                "runAffinity"
            } else {
                "runAntiAffinity"
            };
            obj = obj.set(
                &[
                    "spec",
                    "affinity",
                    key,
                    "requiredDuringSchedulingIgnoredDuringExecution",
                ],
                serde_json::json!([{"labelSelector": {"matchLabels": {"app": app}},
                    "topologyKey": "kruntimes.io/runtime-pod"}]),
            );
        }
        if sim.chance(0.3) {
            obj = obj.set(
                &["spec", "retryPolicy"],
                serde_json::json!({"maxAttempts": 3, "backoff": "2s"}),
            );
        }
        let run: Run = obj.typed();
        let requests = requests_of(&run);
        self.apps.insert(name.clone(), app.clone());
        self.info.insert(
            name.clone(),
            RunInfo {
                requests: requests.clone(),
                app: app.clone(),
                required,
                fits_since: None,
                placed_since: None,
            },
        );
        self.fig.runs_created += 1;
        self.ev(
            sim,
            format!("create {name} {requests:?} app={app} required={required:?}"),
        );
        self.api.lock().put_run(run);
        self.publish(sim);
    }

    fn cancel_run(&mut self, sim: &mut Sim) {
        let live: Vec<String> = {
            let api = self.api.lock();
            api.runs
                .values()
                .filter(|r| !phase::is_terminal(phase_of(r)) && !r.spec.cancel_requested())
                .filter_map(|r| r.metadata.name.clone())
                .collect()
        };
        let Some(name) = sim.pick(&live).cloned() else {
            return;
        };
        {
            let mut api = self.api.lock();
            let Some(mut r) = api.runs.get(&name).cloned() else {
                return;
            };
            r.spec.cancel_requested = true;
            api.put_run(r);
        }
        self.ev(sim, format!("cancel requested {name}"));
        self.publish(sim);
    }

    /// Deletes one finished Run early (a user's delete), or nothing.
    fn gc_or_nothing(&mut self, sim: &mut Sim) {
        let done: Vec<String> = {
            let api = self.api.lock();
            api.runs
                .values()
                .filter(|r| phase::is_terminal(phase_of(r)))
                .filter_map(|r| r.metadata.name.clone())
                .collect()
        };
        if let Some(name) = sim.pick(&done).cloned() {
            self.api.lock().delete_run(&name);
            self.info.remove(&name);
            self.ev(sim, format!("delete {name}"));
            self.publish(sim);
        }
    }

    /// Finished Runs are deleted `TTL` after they finish.
    fn ttl(&mut self, sim: &mut Sim) {
        let now = ts(sim.now());
        let gone: Vec<String> = {
            let api = self.api.lock();
            api.runs
                .values()
                .filter(|r| phase::is_terminal(phase_of(r)))
                .filter(|r| {
                    r.status
                        .as_ref()
                        .and_then(|s| s.completion_time.as_ref())
                        .is_none_or(|t| {
                            t.0 + SignedDuration::try_from(TTL).unwrap_or(SignedDuration::ZERO)
                                <= now
                        })
                })
                .filter_map(|r| r.metadata.name.clone())
                .collect()
        };
        for name in gone {
            self.api.lock().delete_run(&name);
            self.info.remove(&name);
            self.ev(sim, format!("ttl deletes {name}"));
        }
        self.publish(sim);
    }

    fn inject_fault(&mut self, sim: &mut Sim) {
        let now = sim.now();
        let Some(i) = sim.index(self.pods.len()) else {
            return;
        };
        let name = self.pods[i].name.clone();
        let kill = if self.cfg.handovers { 1 } else { 0 };
        match sim.weighted(&[3, 2, 3, 3, 2, 2, kill]) {
            Some(0) => {
                let until = now + sim.delay(Duration::from_millis(100), Duration::from_secs(20));
                // The leader's Run cache watch, or (with handovers) the
                // standby's: its cache goes stale the same way.
                let standby = self.standby.as_ref().is_some_and(|r| !r.listing())
                    && (self.leader.is_none() || sim.chance(0.4));
                let r = if standby {
                    self.standby.as_mut()
                } else {
                    self.leader.as_mut().map(|l| &mut l.r)
                };
                let Some(r) = r.filter(|r| !r.listing()) else {
                    return;
                };
                r.watch.drop_until(until);
                let who = r.name.clone();
                self.fault(
                    sim,
                    "watch_dropped",
                    format!(
                        "{who}'s Run cache watch, relists at {:.1}s",
                        until.as_secs_f64()
                    ),
                );
            }
            Some(1) => {
                let until = now + sim.delay(Duration::from_secs(1), Duration::from_secs(30));
                self.slow_until = Some(until);
                self.fault(sim, "api_slow", "watch delays x10");
            }
            Some(2) => {
                if self.pods[i].agent.is_none() {
                    return;
                }
                let until = now + sim.delay(Duration::from_millis(200), Duration::from_secs(15));
                self.kill_agent(i, until);
                self.fault(
                    sim,
                    "agent_killed",
                    format!("{name}, back at {:.1}s", until.as_secs_f64()),
                );
            }
            Some(3) => {
                if self.pods[i].restarting_until.is_some() {
                    return;
                }
                let until = now + sim.delay(Duration::from_secs(1), Duration::from_secs(25));
                self.pods[i].restarting_until = Some(until);
                // Its containers stop: executions die, the agent too.
                self.kill_agent(i, until);
                let died: Vec<String> = self.pods[i].executing.keys().cloned().collect();
                self.pods[i].executing.clear();
                self.fault(
                    sim,
                    "runtime_pod_restart",
                    format!("{name} until {:.1}s, killed {died:?}", until.as_secs_f64()),
                );
                // The Runs it executed fail (and may be retried).
                for r in died {
                    self.end_run(sim, &name, &r, phase::FAILED, "the Runtime Pod restarted");
                }
                self.write_pod(sim, i);
            }
            Some(4) => {
                let until = now + sim.delay(Duration::from_secs(5), Duration::from_secs(40));
                self.pods[i].stalled_until = Some(until);
                self.fault(
                    sim,
                    "heartbeat_stalled",
                    format!("{name} until {:.1}s", until.as_secs_f64()),
                );
            }
            Some(6) => self.plan_kill(sim),
            Some(5) => {
                if self.pods[i].agent.is_none() {
                    return;
                }
                let until = now + sim.delay(Duration::from_millis(100), Duration::from_secs(10));
                self.pods[i].watch.drop_until(until);
                self.fault(
                    sim,
                    "agent_watch_dropped",
                    format!("{name}, relists at {:.1}s", until.as_secs_f64()),
                );
            }
            _ => {}
        }
    }

    /// Plans the kill of the Run-scheduler leader (carried out part-way
    /// through this step's cycles) and when its successor takes the Lease.
    fn plan_kill(&mut self, sim: &mut Sim) {
        if self.leader.is_none() || self.kill.is_some() || self.handover.is_some() {
            return;
        }
        let now = sim.now();
        // A graceful stop releases the Lease; a killed pod (node lost,
        // OOM) leaves it to expire.
        let released = sim.chance(0.5);
        let warm = self.standby.is_some() && sim.chance(0.5);
        // The leader renews `LEASE_GRACE` before expiry: the Lease it
        // leaves expires `LEASE_GRACE..LEASE` after the kill.
        let expiry = now + sim.delay(LEASE_GRACE, LEASE);
        // Taking an expired Lease: a forced release, a random 0.1-1 s
        // wait, then the lock (kube-lease-manager).
        let forced = sim.delay(Duration::from_millis(100), Duration::from_secs(1));
        let (at, cold_start) = if warm {
            // The standby sleeps until the expiry it last read; then the
            // Lease is free (released) or expired.
            (if released { expiry } else { expiry + forced }, now)
        } else {
            // A replacement pod starts and reads the Lease: free, it takes
            // it at once; held, it sleeps until the expiry.
            let start = now + sim.delay(Duration::from_secs(1), Duration::from_secs(10));
            let at = if released {
                start
            } else {
                start.max(expiry) + forced
            };
            (at, start)
        };
        self.kill = Some(Handover {
            at,
            killed_at: now,
            warm,
            released,
            cold_start,
        });
    }

    /// The leader dies: its cache, its loop and its queue are gone (what
    /// it reserved but did not write with them; what it wrote is in the
    /// API server). Without a warm standby, a replacement pod starts.
    fn kill_leader(&mut self, sim: &mut Sim, h: Handover) {
        let Some(l) = self.leader.take() else {
            return;
        };
        l.ready.abort();
        let assumed = l.r.cache.sizes()[1].1;
        drop(l);
        if !h.warm {
            let name = self.replica_name();
            self.standby = Some(Replica::cold(sim, name, h.cold_start, &self.api));
        }
        let kind = if h.warm {
            "leader_killed_warm_standby"
        } else {
            "leader_killed_cold_replacement"
        };
        let next = self
            .standby
            .as_ref()
            .map_or("?", |r| r.name.as_str())
            .to_owned();
        self.fault(
            sim,
            kind,
            format!(
                "{} Lease, {next} takes it at {:.1}s ({assumed} runtimes cached)",
                if h.released {
                    "released its"
                } else {
                    "left its"
                },
                h.at.as_secs_f64()
            ),
        );
        self.handover = Some(h);
    }

    /// The successor wins the Lease; a new standby starts (cold).
    fn take_over(&mut self, sim: &mut Sim) {
        let Some(h) = self.handover.take() else {
            return;
        };
        let next = match self.standby.take() {
            Some(r) => r,
            None => {
                let name = self.replica_name();
                Replica::cold(sim, name, sim.now(), &self.api)
            }
        };
        let now = sim.now();
        self.fig.handovers += 1;
        self.fig.longest_takeover = self.fig.longest_takeover.max(now - h.killed_at);
        self.lead(sim, next);
        if let Some(l) = &mut self.leader {
            l.succeeded = true;
        }
        let name = self.replica_name();
        self.standby = Some(Replica::cold(sim, name, now, &self.api));
    }

    fn kill_agent(&mut self, i: usize, until: Duration) {
        let p = &mut self.pods[i];
        // Dropped without closing: what it appended is in its journal.
        p.agent = None;
        p.agent_down_until = Some(until);
        p.watch = Stream::default();
    }

    // === the scheduling loop ===

    async fn schedule(&mut self, sim: &mut Sim, faults: bool) {
        let Some(l) = &mut self.leader else {
            return;
        };
        if !l.ready.is_finished() {
            // Still waiting for its lists: nothing cycles.
            if let Some(h) = self.kill.take() {
                self.kill_leader(sim, h);
            }
            return;
        }
        if !l.started {
            l.started = true;
            let waited = sim.now() - l.since;
            if l.succeeded {
                self.fig.longest_takeover_to_first_cycle =
                    self.fig.longest_takeover_to_first_cycle.max(waited);
            }
        }
        let controller = Arc::clone(&l.r.controller);
        let cache = Arc::clone(&l.r.cache);
        let queue = Arc::clone(cache.queue());
        // Take every ready key, put them in an order the seed chooses, cycle
        // some, and queue the rest again in that order.
        let mut keys = Vec::new();
        while let Some(k) = queue.try_next() {
            keys.push(k);
        }
        keys.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        for i in (1..keys.len()).rev() {
            let j = sim.below(0, i as u64 + 1) as usize;
            keys.swap(i, j);
        }
        // A planned kill strikes after this many cycles.
        let kill_after = self
            .kill
            .is_some()
            .then(|| sim.below(0, keys.len() as u64 + 1) as usize);
        // Workers are fast next to a step: every ready key is cycled, but
        // while faults strike some wait for a later step (a busy loop).
        for (n, key) in keys.iter().enumerate() {
            if kill_after == Some(n) {
                break;
            }
            if faults && sim.chance(0.1) {
                queue.add(key.clone());
                queue.done(key);
                continue;
            }
            let mut planned = None;
            if faults {
                let c = &self.cfg;
                let inject = match sim.weighted(&[
                    ((1.0 - c.conflict_p - c.error_p - c.throttle_p) * 1000.0) as u32,
                    (c.conflict_p * 1000.0) as u32,
                    (c.error_p * 1000.0) as u32,
                    (c.throttle_p * 1000.0) as u32,
                ]) {
                    Some(1) => Some((WriteError::Conflict, "status_write_409")),
                    Some(2) => Some((
                        WriteError::Other("injected: 503 Service Unavailable".into()),
                        "status_write_5xx",
                    )),
                    Some(3) => Some((throttled(), "status_write_429")),
                    _ => None,
                };
                planned = inject.as_ref().map(|(_, kind)| *kind);
                let inject = inject.map(|(e, _)| e);
                self.api.lock().inject = inject;
            }
            let affine = self
                .info
                .get(&key.name)
                .is_some_and(|i| i.required.is_some());
            let before = if affine {
                self.targets_seen_by_cache()
            } else {
                Vec::new()
            };
            let outcome = controller.cycle_at(key, ts(sim.now())).await;
            queue.done(key);
            self.fig.cycles += 1;
            // Counted only when a write met it (a cycle may write nothing).
            let unused = self.api.lock().inject.take().is_some();
            if let Some(kind) = planned.filter(|_| !unused) {
                self.fault(sim, kind, key.name.clone());
            } else if outcome == CycleOutcome::Conflict {
                self.fig.stale_conflicts += 1;
            }
            match &outcome {
                CycleOutcome::Skipped => {}
                CycleOutcome::Scheduled { pod } => {
                    self.fig.runs_placed += 1;
                    self.ev(sim, format!("placed {} on {pod}", key.name));
                    self.check_affinity(sim, &key.name, pod, &before);
                }
                o => self.ev(sim, format!("cycle {}: {o:?}", key.name)),
            }
            self.publish(sim);
        }
        if let Some(h) = self.kill.take() {
            self.kill_leader(sim, h);
        }
    }

    /// `(pod, app)` of every Run the Run cache counts on a pod (active or
    /// assumed): what a decision made now sees, read through its public API.
    fn targets_seen_by_cache(&self) -> Vec<(String, String, String)> {
        let Some(cache) = self.leader.as_ref().map(|l| &l.r.cache) else {
            return Vec::new();
        };
        // The deciding cache's own Runs: a Run the API server has deleted
        // may still be active there (the deletion not yet delivered), and
        // the decision rightly counts it.
        let mut out = Vec::new();
        for v in cache.runs(Some(NS)) {
            let Some(app) = self.apps.get(&v.name) else {
                continue;
            };
            let active = v
                .assigned_pod
                .clone()
                .filter(|p| !p.is_empty() && phase::is_active(v.phase.as_deref()));
            if let Some(pod) = cache.assumed_pod(NS, &v.uid).or(active) {
                out.push((v.name.clone(), pod, app.clone()));
            }
        }
        out
    }

    /// Required affinity and anti-affinity held when `name` was placed on
    /// `pod`: against what the cache saw, and (anti-affinity) against the
    /// API server's truth.
    fn check_affinity(
        &mut self,
        sim: &mut Sim,
        name: &str,
        pod: &str,
        seen: &[(String, String, String)],
    ) {
        let Some(info) = self.info.get(name) else {
            return;
        };
        let Some(colocate) = info.required else {
            return;
        };
        let app = info.app.clone();
        let others: Vec<&(String, String, String)> = seen
            .iter()
            .filter(|(n, _, a)| n != name && *a == app)
            .collect();
        if colocate {
            let here = others.iter().any(|(_, p, _)| p == pod);
            sim.check(here || others.is_empty(), "required Run affinity never violated", || {
                format!("{name} (app={app}) placed on {pod}, where no Run of app={app} is, while {others:?} are active")
            });
        } else {
            let clash: Vec<_> = others.iter().filter(|(_, p, _)| p == pod).collect();
            sim.check(
                clash.is_empty(),
                "required Run anti-affinity never violated",
                || format!("{name} (app={app}) placed on {pod} with {clash:?}"),
            );
            let api = self.api.lock();
            let truth: Vec<String> = api
                .runs
                .iter()
                .filter(|(n, r)| {
                    n.as_str() != name
                        && assigned(r) == Some(pod)
                        && self.info.get(n.as_str()).is_some_and(|i| i.app == app)
                })
                .map(|(n, _)| n.clone())
                .collect();
            sim.check(truth.is_empty(), "required Run anti-affinity never violated", || {
                format!("{name} (app={app}) placed on {pod}, where the API server shows {truth:?} active")
            });
        }
    }

    // === runtimed and its agent ===

    async fn runtimed(&mut self, sim: &mut Sim, i: usize) {
        let now = sim.now();
        if let Some(u) = self.pods[i].restarting_until {
            if u > now {
                return;
            }
            self.pods[i].restarting_until = None;
            let name = self.pods[i].name.clone();
            self.ev(sim, format!("pod {name} is back"));
            self.write_pod(sim, i);
            self.pods[i].next_heartbeat = now + HEARTBEAT;
        }
        if self.pods[i].stalled_until.is_some_and(|u| u <= now) {
            self.pods[i].stalled_until = None;
        }
        if self.pods[i].stalled_until.is_none() && self.pods[i].next_heartbeat <= now {
            self.pods[i].next_heartbeat = now + HEARTBEAT;
            self.write_pod(sim, i);
        }
        let pod = self.pods[i].name.clone();
        // Executions that end.
        let ended: Vec<(String, bool)> = self.pods[i]
            .executing
            .values()
            .filter(|e| e.ends_at <= now)
            .map(|e| (e.name.clone(), e.fails))
            .collect();
        for (name, fails) in ended {
            self.pods[i].executing.remove(&name);
            let (ph, why) = if fails {
                (phase::FAILED, "the Run's process exited 1")
            } else {
                (phase::SUCCEEDED, "")
            };
            self.end_run(sim, &pod, &name, ph, why);
        }
        // Runs placed here: cancelled ones end, the others ask the agent.
        let placed: Vec<Run> = {
            let api = self.api.lock();
            api.runs
                .values()
                .filter(|r| assigned(r) == Some(pod.as_str()))
                .cloned()
                .collect()
        };
        for r in placed {
            let name = r.metadata.name.clone().unwrap_or_default();
            if r.spec.cancel_requested() {
                self.pods[i].executing.remove(&name);
                self.end_run(sim, &pod, &name, phase::CANCELLED, "cancelled");
                continue;
            }
            if phase_of(&r) != Some(phase::SCHEDULED) || self.pods[i].executing.contains_key(&name)
            {
                continue;
            }
            let Some(agent) = self.pods[i].agent.clone() else {
                continue;
            };
            let req = ReserveRequest {
                namespace: NS.into(),
                name: name.clone(),
                uid: r.metadata.uid.clone().unwrap_or_default(),
                requests: None,
            };
            match agent.reserve(req, None, RUNTIMED).await {
                Ok(Reservation::Admitted(_) | Reservation::Held(_)) => {
                    let requests = requests_of(&r);
                    let ends_at = now + sim.delay(Duration::from_secs(1), Duration::from_secs(20));
                    let fails = sim.chance(0.15);
                    self.pods[i].executing.insert(
                        name.clone(),
                        Exec {
                            name: name.clone(),
                            requests,
                            ends_at,
                            fails,
                        },
                    );
                    self.ev(sim, format!("{pod} admits and starts {name}"));
                    let mut api = self.api.lock();
                    if let Some(mut r) = api.runs.get(&name).cloned() {
                        let s = r.status.get_or_insert_with(Default::default);
                        s.phase = Some(phase::RUNNING.into());
                        s.start_time = Some(Time(ts(now)));
                        api.put_run(r);
                    }
                }
                Ok(
                    Reservation::Queued { .. }
                    | Reservation::Dropped { .. }
                    | Reservation::QueueFull { .. },
                ) => {}
                Err(ReserveError::NotSynced | ReserveError::UnknownRun { .. }) => {}
                Err(e) => sim.violated(
                    "the agent answers runtimed's valid requests",
                    format!("{pod}: reserve {name}: {e}"),
                ),
            }
        }
        self.publish(sim);
    }

    /// runtimed ends a Run: its terminal phase, or (failed with attempts
    /// left) Pending for the next attempt, as the kruntimes controller does;
    /// and it releases its hold, or leaves that to the agent's watch.
    fn end_run(&mut self, sim: &mut Sim, pod: &str, name: &str, ph: &str, why: &str) {
        let now = sim.now();
        let mut api = self.api.lock();
        let Some(mut r) = api.runs.get(name).cloned() else {
            return;
        };
        let uid = r.metadata.uid.clone().unwrap_or_default();
        let max = r
            .spec
            .retry_policy
            .as_ref()
            .and_then(|p| p.max_attempts)
            .unwrap_or(1);
        let s = r.status.get_or_insert_with(RunStatus::default);
        let attempt = s.attempt.unwrap_or(1);
        let retry = ph == phase::FAILED && attempt < max && !r.spec.cancel_requested();
        let s = r.status.get_or_insert_with(RunStatus::default);
        if retry {
            *s = RunStatus {
                phase: Some(phase::PENDING.into()),
                attempt: Some(attempt + 1),
                message: Some(why.into()),
                conditions: vec![Condition {
                    type_: "Running".into(),
                    status: "False".into(),
                    reason: "Retrying".into(),
                    message: why.into(),
                    last_transition_time: Time(ts(now)),
                    observed_generation: None,
                }],
                ..Default::default()
            };
        } else {
            s.phase = Some(ph.into());
            s.message = Some(why.into());
            s.completion_time = Some(Time(ts(now)));
        }
        api.put_run(r);
        drop(api);
        self.fig.runs_finished += u64::from(!retry);
        let release = sim.chance(0.5);
        if release
            && let Some(a) = self
                .pods
                .iter()
                .find(|p| p.name == pod)
                .and_then(|p| p.agent.clone())
            && let Err(e) = a.release(&uid, RUNTIMED)
        {
            sim.violated(
                "runtimed may release its own holds",
                format!("{pod}: {name}: {e}"),
            );
        }
        let what = if retry { "retries" } else { ph };
        self.ev(sim, format!("{pod}: {name} {what} {why}"));
        self.publish(sim);
    }

    // === invariants ===

    fn replicas(&self) -> impl Iterator<Item = &Replica> {
        self.leader.iter().map(|l| &l.r).chain(self.standby.iter())
    }

    fn check(&mut self, sim: &mut Sim) {
        for r in self.replicas() {
            if let Err(e) = r.cache.check_invariants() {
                sim.violated(
                    "the Run cache's usage index matches a recount",
                    format!("{}: {e}", r.name),
                );
            }
        }
        let api = self.api.lock();
        sim.check(
            api.unsynced_writes.is_empty(),
            "no status written from an unsynced cache",
            || format!("{:?}", api.unsynced_writes),
        );
        // No Runtime Pod overcommitted by the scheduler's placements.
        for p in &self.pods {
            let mut used: BTreeMap<String, u64> = BTreeMap::new();
            for r in api
                .runs
                .values()
                .filter(|r| assigned(r) == Some(p.name.as_str()))
            {
                for (k, v) in requests_of(r) {
                    *used.entry(k).or_default() += v;
                }
            }
            for (k, v) in &used {
                let cap = p.capacity.get(k).copied().unwrap_or(0);
                sim.check(
                    *v <= cap,
                    "no Runtime Pod overcommitted by placements",
                    || format!("{}: {k} {v} placed > capacity {cap}", p.name),
                );
            }
            // No Run executed beyond its pod's capacity.
            let mut running: BTreeMap<&str, u64> = BTreeMap::new();
            for e in p.executing.values() {
                for (k, v) in &e.requests {
                    *running.entry(k).or_default() += v;
                }
            }
            for (k, v) in &running {
                let cap = p.capacity.get(*k).copied().unwrap_or(0);
                sim.check(
                    *v <= cap,
                    "no Run executed beyond its pod's capacity",
                    || {
                        format!(
                            "{}: {k} {v} executing > capacity {cap}: {:?}",
                            p.name,
                            p.executing.keys().collect::<Vec<_>>()
                        )
                    },
                );
            }
            // No agent admitting beyond its pod's capacity.
            if let Some(a) = &p.agent {
                let st = a.status();
                for (k, v) in &st.reserved {
                    let v: u64 = v.parse().unwrap_or(u64::MAX);
                    let cap = p.capacity.get(k).copied().unwrap_or(0);
                    let listed: u64 = st
                        .capacity
                        .get(k)
                        .and_then(|c| c.parse().ok())
                        .unwrap_or(cap);
                    sim.check(
                        v <= cap && v <= listed.max(cap),
                        "no agent admits beyond its pod's capacity",
                        || {
                            format!(
                                "{}: agent holds {k} {v} > capacity {cap}: {:?}",
                                p.name, st.reservations
                            )
                        },
                    );
                }
            }
        }
        // Memory: what the loop keeps is bounded by the Runs that exist.
        let live = api.runs.len();
        drop(api);
        for r in self.replicas() {
            let [(_, cached_runs), _, (_, cached_pods)] = r.cache.sizes();
            sim.check(
                cached_pods <= self.pods.len(),
                "no memory growth the live objects do not explain",
                || {
                    format!(
                        "{} caches {cached_pods} Runtime Pods, the world has {}",
                        r.name,
                        self.pods.len()
                    )
                },
            );
            let in_flight = r.watch.queue.len();
            // (A dropped watch misses deletions until it relists.)
            let down = r.watch.down_until.is_some();
            sim.check(down || cached_runs <= live + in_flight, "no memory growth the live objects do not explain", || {
                format!("{} caches {cached_runs} Runs, the API server {live}, {in_flight} changes in flight", r.name)
            });
            let queued = r.cache.queue().len();
            let delayed = r.cache.queue().delayed_len();
            sim.check(queued <= 2 * cached_runs.max(live) + 4 && delayed <= 2 * cached_runs.max(live) + 4, "no memory growth the live objects do not explain", || {
                format!("{}: {queued} queued, {delayed} delayed keys for {cached_runs} cached Runs ({live} live)", r.name)
            });
        }
        if let Some(l) = &self.leader {
            let [(_, cached_runs), ..] = l.r.cache.sizes();
            let backoff = l.r.controller.backoff_entries();
            sim.check(
                backoff <= 2 * cached_runs.max(live),
                "no memory growth the live objects do not explain",
                || format!("{backoff} backoff entries for {cached_runs} cached Runs ({live} live)"),
            );
        }
        if self.quiet_since.is_some() {
            self.liveness(sim);
        }
    }

    /// Once faults stop: a Run that fits some available pod is placed, and
    /// a placed Run is admitted, within [`LIVENESS_BOUND`].
    fn liveness(&mut self, sim: &mut Sim) {
        let now = sim.now();
        let api = self.api.lock();
        let mut free: BTreeMap<&str, BTreeMap<String, i64>> = BTreeMap::new();
        for p in &self.pods {
            if p.restarting_until.is_some() || p.stalled_until.is_some() {
                continue;
            }
            let f = free.entry(p.name.as_str()).or_default();
            for (k, v) in &p.capacity {
                f.insert(k.clone(), *v as i64);
            }
        }
        for r in api.runs.values() {
            if let Some(f) = assigned(r).and_then(|p| free.get_mut(p)) {
                for (k, v) in requests_of(r) {
                    *f.entry(k).or_default() -= v as i64;
                }
            }
        }
        // (pod, app) of every active Run, and the apps active anywhere.
        let mut app_on: BTreeSet<(&str, &str)> = BTreeSet::new();
        let mut app_anywhere: BTreeMap<&str, usize> = BTreeMap::new();
        for r in api.runs.values() {
            if let (Some(p), Some(a)) = (
                assigned(r),
                r.metadata.labels.as_ref().and_then(|l| l.get("app")),
            ) {
                app_on.insert((p, a.as_str()));
                *app_anywhere.entry(a.as_str()).or_default() += 1;
            }
        }
        let mut longest_fit = Duration::ZERO;
        let mut longest_admit = Duration::ZERO;
        let mut pending_fit = false;
        for (name, r) in &api.runs {
            let Some(info) = self.info.get_mut(name) else {
                continue;
            };
            let ph = phase_of(r);
            let waiting = phase::is_unscheduled(ph)
                && !r.spec.cancel_requested()
                && kruntimes_scheduler::runs::retry::retry_at(
                    &r.spec,
                    r.status.as_ref().unwrap_or(&RunStatus::default()),
                )
                .is_none_or(|at| at <= ts(now));
            // Fits some pod, as the API server's truth says; with required
            // affinity only where it also holds (or could seed).
            let fit = waiting
                && free.iter().any(|(pod, f)| {
                    fits(f, &info.requests)
                        && match info.required {
                            None => true,
                            Some(colocate) => {
                                // Its own Run counts neither way: it is not active.
                                let here = app_on.contains(&(*pod, info.app.as_str()));
                                let anywhere = app_anywhere.contains_key(info.app.as_str());
                                if colocate { here || !anywhere } else { !here }
                            }
                        }
                });
            if fit {
                pending_fit = true;
                let since = *info.fits_since.get_or_insert(now);
                longest_fit = longest_fit.max(now - since);
                sim.check(now - since <= LIVENESS_BOUND, "every Run that fits is placed once faults stop", || {
                    format!("{name} {:?} has fit a pod since {:.1}s and is still {ph:?}; free: {free:?}", info.requests, since.as_secs_f64())
                });
            } else {
                info.fits_since = None;
            }
            let agent_up = assigned(r)
                .and_then(|p| self.pods.iter().find(|x| x.name == p))
                .is_some_and(|p| p.agent.is_some());
            if ph == Some(phase::SCHEDULED) && agent_up && !r.spec.cancel_requested() {
                let since = *info.placed_since.get_or_insert(now);
                longest_admit = longest_admit.max(now - since);
                sim.check(
                    now - since <= LIVENESS_BOUND,
                    "every placed Run is admitted once faults stop",
                    || {
                        format!(
                            "{name} placed on {:?} since {:.1}s, not admitted",
                            assigned(r),
                            since.as_secs_f64()
                        )
                    },
                );
            } else {
                info.placed_since = None;
            }
        }
        drop(api);
        self.fig.longest_fit_to_place = self.fig.longest_fit_to_place.max(longest_fit);
        self.fig.longest_place_to_admit = self.fig.longest_place_to_admit.max(longest_admit);
        // Repaired: every watch caught up, every agent up, nothing fitting waits.
        // A leader whose loop runs, every replica's cache caught up.
        let quiet = self.leader.as_ref().is_some_and(|l| l.started)
            && self.handover.is_none()
            && self.replicas().all(Replica::is_quiet)
            && self
                .pods
                .iter()
                .all(|p| p.agent.is_some() && p.watch.is_quiet())
            && !pending_fit;
        if quiet && !self.repaired {
            self.repaired = true;
            if let Some(since) = sim.since_fault() {
                self.fig.longest_repair = self.fig.longest_repair.max(since);
                self.ev(
                    sim,
                    format!("repaired {:.1}s after the last fault", since.as_secs_f64()),
                );
            }
        }
    }

    /// The end of a run: the cache agrees with the API server, and what the
    /// loop and the agents keep is what the live objects explain.
    fn finish(&mut self, sim: &mut Sim) {
        let api = self.api.lock();
        let (live, pods) = (api.runs.len(), api.pods.len());
        for r in self.replicas().filter(|r| r.is_quiet()) {
            let [(_, cached_runs), _, (_, cached_pods)] = r.cache.sizes();
            sim.check(cached_runs == live && cached_pods == pods, "no memory growth the live objects do not explain", || {
                format!("at the end {} caches {cached_runs} Runs and {cached_pods} pods; the API server {live} and {pods}", r.name)
            });
        }
        let waiting = api
            .runs
            .values()
            .filter(|r| phase::is_unscheduled(phase_of(r)))
            .count();
        if let Some(l) = &self.leader {
            let backoff = l.r.controller.backoff_entries();
            sim.check(
                backoff <= 2 * waiting,
                "no memory growth the live objects do not explain",
                || format!("{backoff} backoff entries for {waiting} waiting Runs"),
            );
        }
        for p in &self.pods {
            let (Some(a), true) = (&p.agent, p.watch.is_quiet()) else {
                continue;
            };
            let st = a.status();
            let here: BTreeSet<&str> = api
                .runs
                .iter()
                .filter(|(_, r)| assigned(r) == Some(p.name.as_str()))
                .map(|(n, _)| n.as_str())
                .collect();
            for h in &st.reservations {
                sim.check(
                    here.contains(h.name.as_str()),
                    "no memory growth the live objects do not explain",
                    || {
                        format!(
                            "agent {} still holds {} ({}), not active there",
                            p.name, h.name, h.origin
                        )
                    },
                );
            }
        }
    }
}
