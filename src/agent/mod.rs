//! `agent`: execution-time admission for one Runtime Pod, on a unix socket.
//!
//! ```text
//!  kube watchers / --state file          runtimed (HTTP over the socket)
//!        │ Event<Pod>, Event<Run>                  │ POST/DELETE/GET /v1/reservations
//!        ▼                                         ▼
//!  source::AgentState ──────────────▶ Agent (one lock: state + waiters)
//!   (own Pod's capacity,                  │
//!    Runs assigned here)                  ▼
//!                                   ledger::AdmissionLedger (capacity, holds, FIFO queue
//!                                                   with bounded bypass)
//! ```
//!
//! Scheduler accounting is a plan; the agent is the authorization. The
//! check-and-reserve of a Run's full effective request happens under one
//! lock, so concurrent callers cannot both take the last unit. Runs already
//! Running or Ready on the pod when the watch lists hold reservations from
//! the start; Runs admitted but still Scheduled come back from the
//! [`journal`], written before each admission is answered; and nothing is
//! admitted before both watches have listed once, so a restarted agent
//! never double-admits.
//!
//! Callers are the peers of the socket, identified by `SO_PEERCRED`
//! ([`server::PeerPolicy`]); a hold is released only by the caller that
//! created it or by the watch ([`source::AgentState`]), and the queue is
//! bounded ([`ledger`]).

pub mod journal;
pub mod ledger;
pub mod metrics;
#[cfg(test)]
mod proptests;
pub mod server;
pub mod source;

use crate::cluster::load::load_path;
use crate::model::quantity::QuantityError;
use crate::model::refs::RunRef;
use crate::model::resources::{RequestError, Requests, effective_requests};
use crate::transport::parse_duration;
use anyhow::Context as _;
use journal::{Durability, Journal, JournalHold, SyncMode};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::runtime::watcher::Event;
use ledger::{Amounts, Change, Decision, Hold, NotYours, Origin, QueuedInfo};
use metrics::{AgentMetrics, Outcome, Refusal};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use source::{AgentConfig, AgentState, Effects, Gone};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

use crate::crd::Run;

/// Flags of `agent`.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// Unix socket to serve on (created with mode 0660). Its directory is
    /// created with mode 0750 when missing, and must not be writable by
    /// group or others.
    #[arg(long, env = "KRS_AGENT_SOCKET")]
    pub socket: PathBuf,
    /// Name of the Runtime Pod this agent guards (its own pod).
    #[arg(long, env = "KRS_AGENT_POD")]
    pub pod: String,
    /// Namespace of that pod.
    #[arg(long, env = "KRS_AGENT_NAMESPACE")]
    pub namespace: String,
    /// Standalone mode: read the Pod and its Runs from a YAML/JSON file or
    /// directory instead of watching the cluster.
    #[arg(long, env = "KRS_STATE")]
    pub state: Option<PathBuf>,
    /// `runs` capacity when the pod has no `kruntimes.io/capacity.runs`.
    #[arg(long, env = "KRS_DEFAULT_RUNS_CAPACITY", default_value_t = 2)]
    pub default_runs_capacity: u64,
    /// How many later Runs may be admitted ahead of a queued Run before it
    /// blocks everything behind it (0 = strict FIFO).
    #[arg(long, env = "KRS_AGENT_MAX_BYPASS", default_value_t = 4)]
    pub max_bypass: u32,
    /// Longest `?wait=` honoured; longer waits are shortened to this.
    #[arg(long, env = "KRS_AGENT_MAX_WAIT", default_value = "5m", value_parser = parse_duration)]
    pub max_wait: Duration,
    /// Longest queue; a Run that would queue beyond it gets 429.
    #[arg(long, env = "KRS_AGENT_MAX_QUEUE", default_value_t = 1024)]
    pub max_queue: usize,
    /// How long a reservation made from the request body may wait, once the
    /// watches have synced, for the watch to show its Run on this pod.
    #[arg(long, env = "KRS_AGENT_UNSEEN_TTL", default_value = "2m", value_parser = parse_duration)]
    pub unseen_ttl: Duration,
    /// Run condition type that, when `True`, marks the Run's function
    /// released: its hold is released as for a terminal Run (empty: none).
    #[arg(long, env = "KRS_RELEASED_CONDITION", default_value = crate::crd::DEFAULT_RELEASED_CONDITION)]
    pub released_condition: String,
    /// Journal of admitted reservations (default: `agent.journal` beside
    /// the socket, in the pod's socket volume).
    #[arg(long, env = "KRS_AGENT_JOURNAL")]
    pub journal: Option<PathBuf>,
    /// Keep no journal: admissions of Runs still `Scheduled` are forgotten
    /// when the agent restarts.
    #[arg(long, env = "KRS_AGENT_NO_JOURNAL", conflicts_with = "journal")]
    pub no_journal: bool,
    /// The uid runtimed runs as: allowed on the socket besides the agent's
    /// own uid.
    #[arg(long, env = "KRS_AGENT_RUNTIMED_UID")]
    pub runtimed_uid: Option<u32>,
    /// Further peer uids allowed on the socket (comma-separated).
    #[arg(long, env = "KRS_AGENT_ALLOW_UID", value_delimiter = ',')]
    pub allow_uid: Vec<u32>,
    /// Peer gids allowed on the socket (comma-separated); none by default.
    #[arg(long, env = "KRS_AGENT_ALLOW_GID", value_delimiter = ',')]
    pub allow_gid: Vec<u32>,
    /// Also serve `/metrics` on this TCP address (e.g. `0.0.0.0:9102`).
    #[arg(long, env = "KRS_AGENT_METRICS_ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Resource names reported as metric labels besides `runs`
    /// (comma-separated); others are not reported.
    #[arg(long, env = "KRS_AGENT_METRICS_RESOURCE", value_delimiter = ',')]
    pub metrics_resource: Vec<String>,
    /// Probe mode: ask the agent on `--socket` whether it is ready, exit 0
    /// when it is (for a startup probe), 1 otherwise.
    #[arg(long)]
    pub probe: bool,
}

impl AgentArgs {
    pub fn config(&self) -> AgentConfig {
        AgentConfig {
            pod: self.pod.clone(),
            namespace: self.namespace.clone(),
            default_runs_capacity: self.default_runs_capacity,
            max_bypass: self.max_bypass,
            max_queue: self.max_queue.max(1),
            unseen_ttl: self.unseen_ttl,
            released_condition: Some(self.released_condition.clone()).filter(|c| !c.is_empty()),
        }
    }

    /// The journal's path, `None` with `--no-journal`.
    pub fn journal_path(&self) -> Option<PathBuf> {
        if self.no_journal {
            return None;
        }
        Some(self.journal.clone().unwrap_or_else(|| {
            self.socket
                .parent()
                .unwrap_or(std::path::Path::new("."))
                .join("agent.journal")
        }))
    }
}

/// Who asks: the peer uid read from the socket; `None` for in-process
/// callers (the agent itself).
pub type Caller = Option<u32>;

/// Body of `POST /v1/reservations`.
#[derive(Debug, Clone, Deserialize)]
pub struct ReserveRequest {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The Run's `spec.resources.requests`; when absent, taken from the
    /// watched Run. Values are quantity strings (numbers are accepted).
    #[serde(default)]
    pub requests: Option<BTreeMap<String, serde_json::Value>>,
}

/// The outcome of a reservation request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// The uid already held a reservation (200).
    Held(Hold),
    /// Reserved by this call, or while it waited (201).
    Admitted(Hold),
    /// Does not fit; queued (409).
    Queued { run: RunRef, info: QueuedInfo },
    /// Left the queue while waiting, without admission (409, not queued).
    Dropped { run: RunRef, why: Gone },
    /// Does not fit and the queue is full (429, not queued).
    QueueFull { run: RunRef, max: usize },
}

/// Why a reservation request is refused outright.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReserveError {
    #[error("the agent is starting: waiting for the first list of its Pod and Runs")]
    NotSynced,
    #[error("{field}: must not be empty")]
    Empty { field: &'static str },
    #[error("namespace: Invalid value: {got:?}: this agent admits Runs of namespace {want:?}")]
    Namespace { got: String, want: String },
    #[error("{0}")]
    Request(#[from] RequestError),
    #[error(
        "requests: Invalid value: {given}: does not match spec.resources.requests of Run {namespace}/{name} ({actual})"
    )]
    Mismatch {
        namespace: String,
        name: String,
        given: String,
        actual: String,
    },
    #[error("uid: Invalid value: {uid:?}: belongs to Run {namespace}/{actual}, not {name}")]
    WrongName {
        uid: String,
        namespace: String,
        name: String,
        actual: String,
    },
    #[error(
        "uid: {uid:?} is {what} by another caller ({creator}); only it may ask again or release it"
    )]
    NotYours {
        uid: String,
        what: &'static str,
        creator: String,
    },
    #[error(
        "Run {namespace}/{name} (uid {uid}) is not assigned to pod {pod} in this agent's watch yet; retry, or pass \"requests\""
    )]
    UnknownRun {
        namespace: String,
        name: String,
        uid: String,
        pod: String,
    },
}

/// What a waiting caller hears.
#[derive(Debug)]
enum WaitOutcome {
    /// Admitted; the answer waits for the journal up to this sequence.
    Admitted(Hold, u64),
    Dropped(Gone),
}

/// Everything under the one lock: state, journal and the callers waiting.
struct Inner {
    state: AgentState,
    /// Appended under the lock, so its order is the ledger's.
    journal: Option<Journal>,
    /// Callers of `?wait=` by uid.
    waiters: HashMap<String, Vec<oneshot::Sender<WaitOutcome>>>,
}

impl Inner {
    /// After every update: journals the admitted holds created and released,
    /// compacts when due, and tells waiters. Called under the lock, so no
    /// admission can slip between a caller's check and its registration.
    /// Returns the journal sequence that makes the update durable.
    fn settle(&mut self, fx: Effects, metrics: &AgentMetrics) -> u64 {
        let changes = self.state.ledger.take_changes();
        if !changes.is_empty() {
            let now = Instant::now();
            for c in changes {
                match c {
                    Change::Admitted(uid) => {
                        if let Some(at) = self.state.requested_at(&uid) {
                            metrics
                                .wait_seconds
                                .observe(now.saturating_duration_since(at).as_secs_f64());
                        }
                        if let (Some(j), Some(h)) =
                            (self.journal.as_mut(), self.state.ledger.hold(&uid))
                        {
                            j.admit(h);
                        }
                    }
                    Change::Released(uid) => {
                        if let Some(j) = self.journal.as_mut() {
                            j.release(&uid);
                        }
                    }
                }
            }
            // Counting the live holds walks the ledger: only once enough
            // records have gathered for a compaction to be possible.
            if let Some(j) = self.journal.as_mut()
                && j.may_compact()
            {
                let admitted = |h: &&Hold| h.origin == Origin::Admitted;
                let live = self.state.ledger.holds().filter(admitted).count();
                if j.wants_compaction(live) {
                    let live: Vec<JournalHold> = self
                        .state
                        .ledger
                        .holds()
                        .filter(admitted)
                        .map(JournalHold::from)
                        .collect();
                    j.compact(&live);
                }
            }
        }
        let seq = self.journal.as_ref().map_or(0, Journal::last);
        self.dispatch(fx, seq);
        seq
    }

    fn dispatch(&mut self, fx: Effects, seq: u64) {
        for uid in fx.admitted {
            let Some(ws) = self.waiters.remove(&uid) else {
                continue;
            };
            if let Some(h) = self.state.ledger.hold(&uid) {
                for w in ws {
                    let _ = w.send(WaitOutcome::Admitted(h.clone(), seq));
                }
            }
        }
        for (uid, why) in fx.dropped {
            for w in self.waiters.remove(&uid).into_iter().flatten() {
                let _ = w.send(WaitOutcome::Dropped(why));
            }
        }
    }
}

/// The agent: the single owner of the ledger and its feeding cache.
pub struct Agent {
    config: AgentConfig,
    inner: Mutex<Inner>,
    max_wait: Duration,
    closing: watch::Sender<bool>,
    durability: Option<Durability>,
    metrics: AgentMetrics,
}

/// Quantities as integer strings, by resource name.
pub type NamedAmounts = BTreeMap<String, String>;

fn named(a: &Amounts) -> NamedAmounts {
    a.iter().map(|(n, v)| (n.clone(), v.to_string())).collect()
}

/// A reservation as shown by the API.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct HoldView {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub requests: NamedAmounts,
    /// `admitted` (through the API) or `observed` (already executing).
    pub origin: &'static str,
}

impl From<&Hold> for HoldView {
    fn from(h: &Hold) -> Self {
        HoldView {
            uid: h.run.uid.clone(),
            namespace: h.run.namespace.clone(),
            name: h.run.name.clone(),
            requests: h.requests.to_named(),
            origin: h.origin.as_str(),
        }
    }
}

/// A queued Run as shown by the API.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct QueuedView {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub requests: NamedAmounts,
    pub position: usize,
    pub bypassed: u32,
    pub shortfall: NamedAmounts,
}

/// `GET /v1/reservations`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StatusView {
    pub pod: String,
    pub namespace: String,
    pub synced: bool,
    pub max_bypass: u32,
    pub capacity: NamedAmounts,
    pub reserved: NamedAmounts,
    pub free: NamedAmounts,
    /// Reservations, sorted by namespace and name.
    pub reservations: Vec<HoldView>,
    /// Queued Runs in arrival order.
    pub queued: Vec<QueuedView>,
}

impl Agent {
    /// An agent that knows nothing yet (no capacity, not synced) and keeps
    /// no journal: feed it events before it admits anything.
    pub fn new(config: AgentConfig, max_wait: Duration) -> Arc<Self> {
        Self::build(config, max_wait, None, AgentMetrics::default())
    }

    /// An agent with a journal at `journal` (when given): the holds it
    /// recovers are reserved at once, before any watch event, and the first
    /// Run list drops those whose Run is terminal, deleted or assigned
    /// elsewhere. Fails only when the journal cannot be written.
    pub fn open(
        config: AgentConfig,
        max_wait: Duration,
        journal: Option<&std::path::Path>,
        metrics: AgentMetrics,
    ) -> std::io::Result<Arc<Self>> {
        Self::open_with(config, max_wait, journal, SyncMode::Auto, metrics)
    }

    /// [`Self::open`] with the journal's [`SyncMode`] chosen by the caller
    /// (`Auto` detects a memory-backed file system).
    pub fn open_with(
        config: AgentConfig,
        max_wait: Duration,
        journal: Option<&std::path::Path>,
        mode: SyncMode,
        metrics: AgentMetrics,
    ) -> std::io::Result<Arc<Self>> {
        let Some(path) = journal else {
            return Ok(Self::build(config, max_wait, None, metrics));
        };
        let (journal, recovered) = Journal::open_with(path, metrics.journal.clone(), mode)?;
        tracing::info!(
            path = %path.display(),
            holds = recovered.holds.len(),
            records = recovered.records,
            sync = journal.mode().as_str(),
            "journal opened"
        );
        let agent = Self::build(config, max_wait, Some(journal), metrics);
        agent
            .inner
            .lock()
            .state
            .recover(recovered.holds, Instant::now());
        Ok(agent)
    }

    fn build(
        config: AgentConfig,
        max_wait: Duration,
        journal: Option<Journal>,
        metrics: AgentMetrics,
    ) -> Arc<Self> {
        Arc::new(Agent {
            durability: journal.as_ref().map(Journal::durability),
            inner: Mutex::new(Inner {
                state: AgentState::new(config.clone()),
                journal,
                waiters: HashMap::new(),
            }),
            config,
            max_wait,
            closing: watch::Sender::new(false),
            metrics,
        })
    }

    pub fn metrics(&self) -> &AgentMetrics {
        &self.metrics
    }

    /// The metrics as OpenMetrics text, gauges read now.
    pub fn metrics_text(&self) -> String {
        {
            let g = self.inner.lock();
            let l = &g.state.ledger;
            self.metrics
                .queue_length
                .set(i64::try_from(l.queue_len()).unwrap_or(i64::MAX));
            self.metrics
                .set_amounts(l.capacity(), l.reserved(), &l.free());
        }
        self.metrics.encode()
    }

    /// Waits until the journal holds every record up to `seq`.
    async fn durable(&self, seq: u64) {
        if let Some(d) = &self.durability {
            d.wait(seq).await;
        }
    }

    /// Releases what was made from the request body for Runs the watch has
    /// not shown here within the bound. Returns when the next check is due.
    pub fn sweep(&self) -> Option<Instant> {
        let mut g = self.inner.lock();
        let fx = g.state.sweep(Instant::now());
        g.settle(fx, &self.metrics);
        g.state.next_sweep()
    }

    /// Runs [`Self::sweep`] whenever it is due, forever.
    pub async fn sweeper(self: Arc<Self>) {
        let ttl = self.config.unseen_ttl;
        loop {
            let synced = self.is_synced();
            let next = self.sweep();
            let now = Instant::now();
            let at = if synced {
                next.unwrap_or(now + ttl).min(now + ttl)
            } else {
                now + Duration::from_secs(1)
            };
            let at = at.max(now + Duration::from_millis(10));
            tokio::time::sleep_until(at.into()).await;
        }
    }

    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }

    /// Both watches have listed once.
    pub fn is_synced(&self) -> bool {
        self.inner.lock().state.is_synced()
    }

    /// Feeds one event of the watch on the agent's Pod.
    pub fn apply_pod_event(&self, event: Event<Pod>) {
        let mut g = self.inner.lock();
        let fx = g.state.apply_pod_event(event);
        g.settle(fx, &self.metrics);
    }

    /// Feeds one event of the watch on the Runs of the namespace.
    pub fn apply_run_event(&self, event: Event<Run>) {
        let fx = source::facts_event(event, self.config.released_condition.as_deref());
        self.apply_facts_event(fx);
    }

    /// Feeds one Run event already stripped to its facts.
    pub fn apply_facts_event(&self, event: Event<Option<source::RunFacts>>) {
        let mut g = self.inner.lock();
        let fx = g.state.apply_facts_event(event);
        g.settle(fx, &self.metrics);
    }

    /// Releases a reservation, or takes the uid out of the queue, for
    /// `caller`: refused when another caller created it (or the watch did).
    /// Unknown uids are fine (idempotent).
    pub fn release(&self, uid: &str, caller: Caller) -> Result<(), ReserveError> {
        let mut g = self.inner.lock();
        match g.state.release_by(uid, caller) {
            Ok(fx) => {
                g.settle(fx, &self.metrics);
                self.metrics.releases.inc();
                Ok(())
            }
            Err(e) => {
                self.metrics.refused(Refusal::NotYours);
                Err(not_yours(uid, &g.state, e))
            }
        }
    }

    /// Wakes every waiting caller (they answer "still queued") and refuses
    /// further waits: used on shutdown.
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// The Run's effective request: from the watched Run when known (the
    /// body, if any, must agree), else from the body.
    fn resolve(&self, state: &AgentState, req: &ReserveRequest) -> Result<Requests, ReserveError> {
        let given = match &req.requests {
            Some(m) => Some(effective_requests(Some(&to_quantities(m)?))?),
            None => None,
        };
        match (state.known_run(&req.uid), given) {
            (Some(k), given) => {
                if k.run.name != req.name {
                    return Err(ReserveError::WrongName {
                        uid: req.uid.clone(),
                        namespace: k.run.namespace.clone(),
                        name: req.name.clone(),
                        actual: k.run.name.clone(),
                    });
                }
                let actual = k.requests.clone()?;
                match given {
                    Some(g) if g != actual => Err(ReserveError::Mismatch {
                        namespace: k.run.namespace.clone(),
                        name: k.run.name.clone(),
                        given: g.to_string(),
                        actual: actual.to_string(),
                    }),
                    _ => Ok(actual),
                }
            }
            (None, Some(g)) => Ok(g),
            (None, None) => Err(ReserveError::UnknownRun {
                namespace: req.namespace.clone(),
                name: req.name.clone(),
                uid: req.uid.clone(),
                pod: self.config.pod.clone(),
            }),
        }
    }

    /// `POST /v1/reservations`: checks and reserves atomically; with `wait`,
    /// holds the call until the Run is admitted or the wait ends. An
    /// admission is answered once the journal holds it.
    pub async fn reserve(
        &self,
        req: ReserveRequest,
        wait: Option<Duration>,
        caller: Caller,
    ) -> Result<Reservation, ReserveError> {
        let r = self.reserve_inner(req, wait, caller).await;
        self.metrics.outcome(match &r {
            Ok(Reservation::Admitted(_)) => Outcome::Admitted,
            Ok(Reservation::Held(_)) => Outcome::Held,
            Ok(Reservation::Queued { .. }) => Outcome::Queued,
            Ok(Reservation::Dropped { .. }) => Outcome::Dropped,
            Ok(Reservation::QueueFull { .. }) => Outcome::QueueFull,
            Err(ReserveError::NotYours { .. }) => Outcome::NotYours,
            Err(ReserveError::NotSynced) => Outcome::Unavailable,
            Err(_) => Outcome::Invalid,
        });
        r
    }

    async fn reserve_inner(
        &self,
        req: ReserveRequest,
        wait: Option<Duration>,
        caller: Caller,
    ) -> Result<Reservation, ReserveError> {
        for (field, v) in [
            ("namespace", &req.namespace),
            ("name", &req.name),
            ("uid", &req.uid),
        ] {
            if v.is_empty() {
                return Err(ReserveError::Empty { field });
            }
        }
        if req.namespace != self.config.namespace {
            return Err(ReserveError::Namespace {
                got: req.namespace,
                want: self.config.namespace.clone(),
            });
        }
        let wait = wait.map(|w| w.min(self.max_wait)).filter(|w| !w.is_zero());
        let mut closing = self.closing.subscribe();
        let run = RunRef {
            namespace: req.namespace.clone(),
            name: req.name.clone(),
            uid: req.uid.clone(),
        };
        let rx = {
            let mut g = self.inner.lock();
            if !g.state.is_synced() {
                return Err(ReserveError::NotSynced);
            }
            let requests = self.resolve(&g.state, &req)?;
            let (decision, fx) = g
                .state
                .request(run.clone(), requests, caller, Instant::now());
            let seq = g.settle(fx, &self.metrics);
            match decision {
                Decision::AlreadyHeld(h) => Err((Reservation::Held(h), seq)),
                Decision::Admitted(h) => Err((Reservation::Admitted(h), seq)),
                Decision::QueueFull { max } => return Ok(Reservation::QueueFull { run, max }),
                Decision::NotYours(e) => return Err(not_yours(&run.uid, &g.state, e)),
                Decision::Queued(info) => {
                    if wait.is_none() || *closing.borrow_and_update() {
                        return Ok(Reservation::Queued { run, info });
                    }
                    let (tx, rx) = oneshot::channel();
                    let ws = g.waiters.entry(run.uid.clone()).or_default();
                    ws.retain(|w| !w.is_closed());
                    ws.push(tx);
                    Ok(rx)
                }
            }
        };
        // Held or admitted now: answered once durable.
        let rx = match rx {
            Ok(rx) => rx,
            Err((answer, seq)) => {
                self.durable(seq).await;
                return Ok(answer);
            }
        };
        let wait = wait.unwrap_or_default();
        let heard = tokio::select! {
            r = rx => r.ok(),
            _ = tokio::time::sleep(wait) => None,
            _ = async { let _ = closing.wait_for(|c| *c).await; } => None,
        };
        match heard {
            Some(WaitOutcome::Admitted(h, seq)) => {
                self.durable(seq).await;
                return Ok(Reservation::Admitted(h));
            }
            Some(WaitOutcome::Dropped(why)) => return Ok(Reservation::Dropped { run, why }),
            None => {}
        }
        // Timed out (or shutting down): answer from the ledger as it is now.
        let (answer, seq) = {
            let g = self.inner.lock();
            let seq = g.journal.as_ref().map_or(0, Journal::last);
            if let Some(h) = g.state.ledger.hold(&run.uid) {
                (Reservation::Admitted(h.clone()), seq)
            } else {
                match g.state.ledger.queued_info(&run.uid) {
                    Some(info) => return Ok(Reservation::Queued { run, info }),
                    None => {
                        return Ok(Reservation::Dropped {
                            run,
                            why: Gone::Withdrawn,
                        });
                    }
                }
            }
        };
        self.durable(seq).await;
        Ok(answer)
    }

    /// `GET /v1/reservations`: one consistent snapshot.
    pub fn status(&self) -> StatusView {
        let g = self.inner.lock();
        let l = &g.state.ledger;
        let mut reservations: Vec<HoldView> = l.holds().map(HoldView::from).collect();
        reservations
            .sort_by(|a, b| (&a.namespace, &a.name, &a.uid).cmp(&(&b.namespace, &b.name, &b.uid)));
        let queued = l
            .queue()
            .enumerate()
            .map(|(i, w)| QueuedView {
                uid: w.run.uid.clone(),
                namespace: w.run.namespace.clone(),
                name: w.run.name.clone(),
                requests: w.requests.to_named(),
                position: i + 1,
                bypassed: w.bypassed,
                shortfall: named(&l.shortfall(&w.requests)),
            })
            .collect();
        StatusView {
            pod: self.config.pod.clone(),
            namespace: self.config.namespace.clone(),
            synced: g.state.is_synced(),
            max_bypass: l.max_bypass(),
            capacity: named(l.capacity()),
            reserved: named(l.reserved()),
            free: named(&l.free()),
            reservations,
            queued,
        }
    }
}

fn not_yours(uid: &str, state: &AgentState, e: NotYours) -> ReserveError {
    ReserveError::NotYours {
        uid: uid.to_owned(),
        what: if state.ledger.hold(uid).is_some() {
            "held"
        } else {
            "queued"
        },
        creator: match e.creator {
            Some(u) => format!("uid {u}"),
            None => "the watch, which alone releases it".to_owned(),
        },
    }
}

/// Request values from JSON: strings as quantities, numbers by their text;
/// anything else is malformed.
fn to_quantities(
    m: &BTreeMap<String, serde_json::Value>,
) -> Result<BTreeMap<String, Quantity>, RequestError> {
    m.iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => Ok((k.clone(), Quantity(s.clone()))),
            serde_json::Value::Number(n) => Ok((k.clone(), Quantity(n.to_string()))),
            other => Err(RequestError::Quantity {
                resource: k.clone(),
                value: other.to_string(),
                error: QuantityError::Malformed,
            }),
        })
        .collect()
}

/// Runs `agent` until SIGINT/SIGTERM.
pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    if args.probe {
        return server::probe(&args.socket).await;
    }
    // Bind first: a live agent on the socket stops this one before it does
    // anything else (the journal included).
    let socket = server::bind(&args.socket)?;
    let journal = args.journal_path();
    let metrics = AgentMetrics::new(args.metrics_resource.iter().cloned());
    let agent = Agent::open(args.config(), args.max_wait, journal.as_deref(), metrics)
        .with_context(|| match &journal {
            Some(p) => format!("opening the journal {}", p.display()),
            None => "starting the agent".to_owned(),
        })?;
    let mut policy = server::PeerPolicy::owner_only(&socket);
    policy.uids.extend(args.runtimed_uid);
    policy.uids.extend(args.allow_uid.iter().copied());
    policy.gids.extend(args.allow_gid.iter().copied());
    tracing::info!(uids = ?policy.uids, gids = ?policy.gids, "peers allowed on the socket");
    let sweeper = tokio::spawn(Arc::clone(&agent).sweeper());
    let metrics_task = match args.metrics_addr {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding --metrics-addr {addr}"))?;
            let app = server::metrics_router(Arc::clone(&agent));
            tracing::info!(%addr, "serving agent metrics");
            Some(tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, app).await {
                    tracing::warn!(error = %e, "metrics listener stopped");
                }
            }))
        }
        None => None,
    };
    let watch_task = match &args.state {
        Some(path) => {
            let objects =
                load_path(path).with_context(|| format!("reading --state {}", path.display()))?;
            let list = source::standalone_events(&objects, agent.config())
                .map_err(|e| anyhow::anyhow!("loading --state {}: {e}", path.display()))?;
            if list.pods.len() <= 2 {
                tracing::warn!(pod = %args.pod, namespace = %args.namespace, "standalone mode: the pod is not in --state; it has no capacity");
            }
            list.pods.into_iter().for_each(|e| agent.apply_pod_event(e));
            list.runs.into_iter().for_each(|e| agent.apply_run_event(e));
            tracing::info!(path = %path.display(), "standalone mode: state loaded");
            None
        }
        None => {
            let client = kube::Client::try_default()
                .await
                .context("building the Kubernetes client (in-cluster config or kubeconfig)")?;
            Some(tokio::spawn(source::watch(Arc::clone(&agent), client)))
        }
    };
    tracing::info!(socket = %args.socket.display(), pod = %args.pod, namespace = %args.namespace, "agent listening");
    let result = server::serve(
        socket,
        Arc::clone(&agent),
        policy,
        crate::transport::shutdown_signal(),
    )
    .await;
    for t in watch_task.into_iter().chain(metrics_task) {
        t.abort();
    }
    sweeper.abort();
    result.context("serving the agent socket")
}
