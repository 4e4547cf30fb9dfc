//! `agent`: execution-time admission for one Runtime Pod, on a unix socket.
//!
//! ```text
//!  kube watchers / --state file          runtimed (HTTP over the socket)
//!        │ Event<Pod>, Event<Run>                  │ POST/DELETE/GET /v1/reservations
//!        ▼                                         ▼
//!  source::AgentState ──────────────▶ Agent (one lock: state + waiters)
//!   (own Pod's capacity,                  │
//!    Runs assigned here)                  ▼
//!                                   ledger::Ledger (capacity, holds, FIFO queue
//!                                                   with bounded bypass)
//! ```
//!
//! Scheduler accounting is a plan; the agent is the authorization. The
//! check-and-reserve of a Run's full effective request happens under one
//! lock, so concurrent callers cannot both take the last unit. Runs already
//! Running or Ready on the pod when the watch lists hold reservations from
//! the start, and nothing is admitted before both watches have listed once,
//! so a restarted agent never double-admits.

pub mod ledger;
pub mod server;
pub mod source;

use crate::cluster::load::load_path;
use crate::model::quantity::QuantityError;
use crate::model::resources::{RequestError, Requests, effective_requests};
use crate::serve::parse_duration;
use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::runtime::watcher::Event;
use ledger::{Amounts, Decision, Hold, QueuedInfo, RunRef};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use source::{AgentConfig, AgentState, Effects, Gone};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, watch};

use crate::crd::Run;

/// Flags of `agent`.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// Unix socket to serve on (created with mode 0660).
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
}

impl AgentArgs {
    pub fn config(&self) -> AgentConfig {
        AgentConfig {
            pod: self.pod.clone(),
            namespace: self.namespace.clone(),
            default_runs_capacity: self.default_runs_capacity,
            max_bypass: self.max_bypass,
        }
    }
}

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
    Admitted(Hold),
    Dropped(Gone),
}

/// Everything under the one lock: state and the callers waiting on it.
struct Inner {
    state: AgentState,
    /// Callers of `?wait=` by uid.
    waiters: HashMap<String, Vec<oneshot::Sender<WaitOutcome>>>,
}

impl Inner {
    /// Tells waiters what an update did. Called under the lock, so no
    /// admission can slip between a caller's check and its registration.
    fn dispatch(&mut self, fx: Effects) {
        for uid in fx.admitted {
            let Some(ws) = self.waiters.remove(&uid) else {
                continue;
            };
            if let Some(h) = self.state.ledger.hold(&uid) {
                for w in ws {
                    let _ = w.send(WaitOutcome::Admitted(h.clone()));
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
    /// An agent that knows nothing yet (no capacity, not synced): feed it
    /// events before it admits anything.
    pub fn new(config: AgentConfig, max_wait: Duration) -> Arc<Self> {
        Arc::new(Agent {
            inner: Mutex::new(Inner {
                state: AgentState::new(config.clone()),
                waiters: HashMap::new(),
            }),
            config,
            max_wait,
            closing: watch::Sender::new(false),
        })
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
        g.dispatch(fx);
    }

    /// Feeds one event of the watch on the Runs of the namespace.
    pub fn apply_run_event(&self, event: Event<Run>) {
        let mut g = self.inner.lock();
        let fx = g.state.apply_run_event(event);
        g.dispatch(fx);
    }

    /// Releases a reservation, or takes the uid out of the queue. Unknown
    /// uids are fine (idempotent).
    pub fn release(&self, uid: &str) {
        let mut g = self.inner.lock();
        let fx = g.state.release(uid);
        g.dispatch(fx);
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
    /// holds the call until the Run is admitted or the wait ends.
    pub async fn reserve(
        &self,
        req: ReserveRequest,
        wait: Option<Duration>,
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
            let (decision, admitted) = g.state.ledger.request(run.clone(), requests);
            g.dispatch(Effects {
                admitted,
                dropped: Vec::new(),
            });
            match decision {
                Decision::AlreadyHeld(h) => return Ok(Reservation::Held(h)),
                Decision::Admitted(h) => return Ok(Reservation::Admitted(h)),
                Decision::Queued(info) => {
                    if wait.is_none() || *closing.borrow_and_update() {
                        return Ok(Reservation::Queued { run, info });
                    }
                }
            }
            let (tx, rx) = oneshot::channel();
            let ws = g.waiters.entry(run.uid.clone()).or_default();
            ws.retain(|w| !w.is_closed());
            ws.push(tx);
            rx
        };
        let wait = wait.unwrap_or_default();
        tokio::select! {
            r = rx => match r {
                Ok(WaitOutcome::Admitted(h)) => return Ok(Reservation::Admitted(h)),
                Ok(WaitOutcome::Dropped(why)) => return Ok(Reservation::Dropped { run, why }),
                Err(_) => {}
            },
            _ = tokio::time::sleep(wait) => {}
            _ = closing.wait_for(|c| *c) => {}
        }
        // Timed out (or shutting down): answer from the ledger as it is now.
        let g = self.inner.lock();
        if let Some(h) = g.state.ledger.hold(&run.uid) {
            return Ok(Reservation::Admitted(h.clone()));
        }
        match g.state.ledger.queued_info(&run.uid) {
            Some(info) => Ok(Reservation::Queued { run, info }),
            None => Ok(Reservation::Dropped {
                run,
                why: Gone::Withdrawn,
            }),
        }
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
    let agent = Agent::new(args.config(), args.max_wait);
    // Bind first: a live agent on the socket stops this one before it does
    // anything else.
    let socket = server::bind(&args.socket)?;
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
    let result = server::serve(socket, Arc::clone(&agent), crate::serve::shutdown_signal()).await;
    if let Some(t) = watch_task {
        t.abort();
    }
    result.context("serving the agent socket")
}
