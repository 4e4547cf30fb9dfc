//! The kube-scheduler extender webhook: `POST /scheduler/filter`,
//! `/scheduler/prioritize`, `/scheduler/bind` and `/scheduler/preempt`.
//!
//! Handlers decode kube-scheduler's JSON, read one consistent snapshot of
//! the [`ClusterIndex`](crate::cache::cluster_index::ClusterIndex) (storage only), decide
//! and encode. Every answer kube-scheduler can parse is HTTP 200; failures
//! inside the extender are reported in `Error`. Only a body that is not the
//! protocol at all is an HTTP 4xx.
//!
//! Filter and prioritize are shaped as kube-scheduler's framework
//! ([`plugins`]):
//!
//! ```text
//!   filter:     PreFilter ([`plugins::FilterState`]: requests, priority verdict,
//!                          gang verdict, DRA-adjusted requests)
//!               └▶ per node: pod-wide rejection → gang domain → fit
//!   prioritize: PreScore ([`plugins::ScoreState`]: requests, gang preference)
//!               └▶ per node: gang preference, else least allocated
//! ```
//!
//! Every plugin is pure over the read-only snapshot. The one state that
//! outlives a request is the [`gang::GangPlanner`] (domain plans of
//! groups not placed yet, under its own lock), consulted by the gang
//! plugin and dropped from when a quorum binds. The group semantics the
//! gang plugin applies are in [`gang`]. Bind (node check → assume → device
//! gate → quorum hold → binding → forget on failure) is in [`bind`], with
//! the quorum hold in [`bind::permit`] and the device gate in
//! [`bind::device_gate`]; preemption in [`preempt`], with the follow-up evictions of
//! `All` groups across nodes in [`evict`].

pub mod bind;
pub mod evict;
pub mod gang;
pub mod limits;
pub mod plugins;
pub mod preempt;
pub mod scheduler_config;
pub mod state;
pub mod types;

pub use preempt::decide_preempt;
pub use state::ExtenderState;

use crate::cache::cluster_index::{ClusterIndex, ClusterState, NodeRefs};
use crate::metrics::{ExtenderError, Operation, Verb};
use crate::pods::fit::Amounts;
use crate::transport::{ApiError, Body, BodyLimit, body_limit, decode_json};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use gang::GangPlanner;
use plugins::fit::{self, Fit};
use plugins::{FilterState, ScoreState};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::borrow::Cow;
use std::sync::Arc;
use types::*;

/// The extender's routes over its own state, each timed by the latency
/// middleware (failed requests too), with the extender's body limits
/// ([`limits`]). It sets no fallback, so it merges into the service router.
pub fn router(state: ExtenderState) -> Router {
    let read_limit = state.limits.read_limit();
    let timed = |operation, verb| state.metrics.extender_latency(operation, verb);
    Router::new()
        .route(
            "/scheduler/filter",
            post(filter).route_layer(timed(Operation::ExtenderFilter, Verb::Filter)),
        )
        .route(
            "/scheduler/prioritize",
            post(prioritize).route_layer(timed(Operation::ExtenderPrioritize, Verb::Prioritize)),
        )
        .route(
            "/scheduler/bind",
            post(bind).route_layer(timed(Operation::ExtenderBind, Verb::Bind)),
        )
        .route(
            "/scheduler/preempt",
            post(preempt).route_layer(timed(Operation::ExtenderPreempt, Verb::Preempt)),
        )
        .layer(body_limit(BodyLimit {
            bytes: read_limit,
            of: "the extender (--extender-max-nodelist-bytes for Nodes or \
                 NodeNameToVictims, --extender-max-body-bytes otherwise)",
        }))
        .with_state(state)
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // Fast path; on failure decode again for an error naming the field.
    serde_json::from_slice(bytes).or_else(|_| decode_json(bytes))
}

/// [`decode`] for types borrowing from the body.
fn decode_borrowed<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|_| {
        match decode_json::<serde_json::Value>(bytes).and_then(|v| {
            serde_path_to_error::deserialize::<_, ExtenderArgsShape>(v)
                .map(drop)
                .map_err(|e| ApiError::unprocessable(format!("{}: {}", e.path(), e.inner())))
        }) {
            Err(e) => e,
            Ok(()) => ApiError::unprocessable("the body is not an extender request"),
        }
    })
}

/// The nodes of a request, resolved against a snapshot.
#[derive(Debug)]
pub enum Candidates<'a> {
    /// Cache-capable mode: names resolved to cache slots.
    Cached(Arc<NodeRefs>),
    /// Full mode: each given Node's name and allocatable, in `Nodes.items` order.
    Full(Vec<(Cow<'a, str>, Amounts)>),
}

impl Candidates<'_> {
    /// Resolves the nodes of a request. An error names the field that is
    /// not the protocol.
    pub fn of<'a>(
        snap: &ClusterState,
        args: &'a ExtenderArgs<'_>,
    ) -> Result<Candidates<'a>, ApiError> {
        match (args.node_names, &args.nodes) {
            (Some(raw), _) => snap
                .resolve_names(raw.get())
                .map(Candidates::Cached)
                .map_err(|e| ApiError::unprocessable(format!("NodeNames: {e}"))),
            (None, Some(list)) => Ok(Candidates::Full(
                list.items
                    .iter()
                    .map(|item| node_facts(item.get()))
                    .collect(),
            )),
            (None, None) => Ok(Candidates::Cached(Arc::default())),
        }
    }

    /// How many nodes the request names.
    pub fn len(&self) -> usize {
        match self {
            Candidates::Cached(refs) => refs.len(),
            Candidates::Full(list) => list.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every node name needs no JSON escaping (cache-capable lists are
    /// checked once when resolved).
    pub fn all_plain(&self) -> bool {
        matches!(self, Candidates::Cached(refs) if refs.all_plain())
    }

    /// The node names, in request order.
    pub fn names(&self) -> Vec<&str> {
        match self {
            Candidates::Cached(refs) => refs.iter().map(|(n, _)| n).collect(),
            Candidates::Full(list) => list.iter().map(|(n, _)| &**n).collect(),
        }
    }

    fn cache_capable(&self) -> bool {
        matches!(self, Candidates::Cached(_))
    }
}

/// The fields of a Node that full-mode fit reads.
#[derive(Default, serde::Deserialize)]
struct NodeFacts<'a> {
    #[serde(default, borrow)]
    metadata: NodeMeta<'a>,
    #[serde(default)]
    status: Option<NodeStatusFacts>,
}

#[derive(Default, serde::Deserialize)]
struct NodeMeta<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
}

#[derive(Default, serde::Deserialize)]
struct NodeStatusFacts {
    #[serde(default)]
    allocatable: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    capacity: Option<serde_json::Map<String, Value>>,
}

/// Name and `status.allocatable` (else `capacity`) of a Node's JSON text;
/// entries that are not quantities are left out, a Node that is not an
/// object has no name.
fn node_facts(json: &str) -> (Cow<'_, str>, Amounts) {
    let facts: NodeFacts<'_> = serde_json::from_str(json).unwrap_or_default();
    let list = facts
        .status
        .and_then(|s| s.allocatable.or(s.capacity))
        .unwrap_or_default();
    let mut out = Amounts::new();
    for (k, v) in list {
        if let Some(q) = v.as_str()
            && let Ok(a) = crate::model::quantity::parse(q)
                .and_then(|p| p.to_scaled_ceil(crate::pods::fit::scale_of(&k)))
            && a > 0
        {
            out.insert(k, a);
        }
    }
    (facts.metadata.name.unwrap_or_default(), out)
}

/// Reasons shared between nodes rejected for the same shortfall of the
/// same resolved request (a mask's bits name that request's entries).
#[derive(Default)]
struct Reasons(Vec<(u64, usize, Arc<str>)>);

impl Reasons {
    #[inline]
    fn short(&mut self, req: &fit::Resolved, short: u64) -> Arc<str> {
        let id = std::ptr::from_ref(req) as usize;
        if let Some((_, _, m)) = self.0.iter().find(|(k, r, _)| *k == short && *r == id) {
            return Arc::clone(m);
        }
        let m: Arc<str> = fit::short_message(req, short).into();
        self.0.push((short, id, Arc::clone(&m)));
        m
    }
}

/// A candidate node as [`decide_filter`] checks it: a cache slot, or a
/// node the request gave with its allocatable.
#[derive(Clone, Copy)]
enum FilterNode<'n> {
    /// Cache-capable mode: the node's slot.
    Cached(u32),
    /// Full mode: the node's allocatable from the request.
    Full(&'n Amounts),
}

/// One filter call's per-node verdict, with the reasons it shares among
/// the nodes it rejects.
struct NodeVerdicts<'s> {
    snap: &'s ClusterState,
    state: &'s FilterState,
    /// Every node fails with this (decided once for the pod).
    wide: Option<(Arc<str>, bool)>,
    outside: plugins::gang::OutsideReasons,
    reasons: Reasons,
    not_found: Arc<str>,
}

impl NodeVerdicts<'_> {
    /// One node's verdict: the pod-wide rejection, else the gang domain,
    /// else the pod's requests on that node, else the fit. Inlined into
    /// each loop of [`decide_filter`], where the kind of node is known.
    #[inline(always)]
    fn verdict(&mut self, name: &str, node: FilterNode<'_>) -> Result<(), (Arc<str>, bool)> {
        if let Some(w) = &self.wide {
            // Outside the group's domain no preemption helps, whatever the
            // pod-wide reason: the node fails unresolvable.
            if !w.1
                && let Some(level) = plugins::gang::filter(&self.state.verdict, name)
            {
                return Err((self.outside.get(&self.state.verdict, level), true));
            }
            return Err((Arc::clone(&w.0), w.1));
        }
        if let Some(level) = plugins::gang::filter(&self.state.verdict, name) {
            return Err((self.outside.get(&self.state.verdict, level), true));
        }
        let slot = match node {
            FilterNode::Cached(slot) => Some(slot),
            FilterNode::Full(_) => self.snap.find(name),
        };
        let resolved = self
            .state
            .requests
            .on(slot)
            .map_err(|r| (r.message.as_str().into(), r.unresolvable))?;
        match node {
            FilterNode::Cached(slot) => match fit::filter(self.snap, slot, resolved) {
                Fit::Fits => self.nominated(name, resolved, None),
                Fit::Short {
                    short,
                    unresolvable,
                } => Err((self.reasons.short(resolved, short), unresolvable)),
                Fit::NotFound => Err((Arc::clone(&self.not_found), true)),
                Fit::Other(r) => Err((r.message.into(), r.unresolvable)),
            },
            FilterNode::Full(alloc) => fit::check(self.snap, name, resolved, Some(alloc))
                .map_err(|r| (r.message.into(), r.unresolvable))
                .and_then(|()| self.nominated(name, resolved, Some(alloc))),
        }
    }

    /// A node that fits the pod, checked again with the pods kube-scheduler
    /// nominated there counted as its own filter counts them (rare: only
    /// nodes a preemption made room on; with none in the cluster the map is
    /// empty and the lookup returns before hashing).
    #[inline]
    fn nominated(
        &self,
        name: &str,
        resolved: &fit::Resolved,
        alloc: Option<&Amounts>,
    ) -> Result<(), (Arc<str>, bool)> {
        let Some((extra, count)) = self.state.nominated.get(name) else {
            return Ok(());
        };
        fit::check_with_nominated(self.snap, name, resolved, extra, *count, alloc).map_err(|r| {
            (
                format!(
                    "{} (counting the pods kube-scheduler nominated to the node)",
                    r.message
                )
                .into(),
                r.unresolvable,
            )
        })
    }
}

/// The filter decision, pure over a snapshot (plans aside): PreFilter
/// builds the pod's [`FilterState`]; then, per node, a pod-wide rejection,
/// the gang plugin's domain and the fit plugin (on the DRA-adjusted
/// requests), in that order.
pub fn decide_filter<'a>(
    snap: &ClusterState,
    planner: &GangPlanner,
    args: &ExtenderArgs<'_>,
    candidates: &'a Candidates<'_>,
    returning: bool,
) -> ExtenderFilterResult<'a> {
    let cache_capable = candidates.cache_capable();
    let mut out = ExtenderFilterResult {
        node_names: cache_capable.then(|| Vec::with_capacity(candidates.len())),
        names_plain: candidates.all_plain(),
        nodes: (!cache_capable).then(|| NodeList {
            metadata: Some(Value::Object(Default::default())),
            items: Vec::new(),
        }),
        ..Default::default()
    };
    let Some(pod) = &args.pod else {
        out.error = "the request has no Pod".into();
        return out;
    };
    let state = match FilterState::new(snap, planner, pod, &candidates.names(), returning) {
        Ok(state) => state,
        Err(e) => {
            out.error = e;
            return out;
        }
    };
    let wide = state
        .wide
        .as_ref()
        .map(|r| (Arc::<str>::from(r.message.as_str()), r.unresolvable));
    // Cache-capable, with many resources (the per-node check then walks
    // them all): resources no node offers reject every node at once, with
    // one shared reason, so the per-node cost stays bounded by the
    // resources the cluster has.
    let wide = match (wide, state.requests.on(None)) {
        (None, Ok(everywhere)) if cache_capable && everywhere.len() >= 64 => {
            limits::unoffered_reason(everywhere)
        }
        (w, _) => w,
    };
    let mut nodes = NodeVerdicts {
        snap,
        state: &state,
        wide,
        outside: plugins::gang::OutsideReasons::default(),
        reasons: Reasons::default(),
        not_found: fit::NOT_FOUND.into(),
    };
    let reject = |out: &mut ExtenderFilterResult<'a>,
                  name: &'a str,
                  (why, unresolvable): (Arc<str>, bool)| {
        let list = if unresolvable {
            &mut out.failed_and_unresolvable_nodes
        } else {
            &mut out.failed_nodes
        };
        list.0.push((Cow::Borrowed(name), why));
    };
    match candidates {
        Candidates::Cached(refs) => {
            for (name, slot) in refs.iter() {
                match nodes.verdict(name, FilterNode::Cached(slot)) {
                    Ok(()) => {
                        if let Some(names) = &mut out.node_names {
                            names.push(name);
                        }
                    }
                    Err(why) => reject(&mut out, name, why),
                }
            }
        }
        Candidates::Full(list) => {
            for (i, (name, alloc)) in list.iter().enumerate() {
                match nodes.verdict(name, FilterNode::Full(alloc)) {
                    Ok(()) => {
                        if let (Some(list), Some(src)) = (&mut out.nodes, &args.nodes)
                            && let Some(item) = src.items.get(i)
                        {
                            list.items.push(item.clone());
                        }
                    }
                    Err(why) => reject(&mut out, name, why),
                }
            }
        }
    }
    out
}

/// Every candidate fails, unresolvable, for one reason decided before
/// PreFilter (a gang too large to hold).
fn refuse_all<'a>(candidates: &'a Candidates<'_>, why: &str) -> ExtenderFilterResult<'a> {
    let cache_capable = candidates.cache_capable();
    let mut out = ExtenderFilterResult {
        node_names: cache_capable.then(Vec::new),
        names_plain: candidates.all_plain(),
        nodes: (!cache_capable).then(|| NodeList {
            metadata: Some(Value::Object(Default::default())),
            items: Vec::new(),
        }),
        ..Default::default()
    };
    let why: Arc<str> = why.into();
    let names: Vec<&'a str> = match candidates {
        Candidates::Cached(refs) => refs.iter().map(|(name, _)| name).collect(),
        Candidates::Full(list) => list.iter().map(|(name, _)| name.as_ref()).collect(),
    };
    for name in names {
        out.failed_and_unresolvable_nodes
            .0
            .push((Cow::Borrowed(name), Arc::clone(&why)));
    }
    out
}

/// The prioritize decision, for every node given, in order: PreScore builds
/// the pod's [`ScoreState`]; a node scores by the gang preference when the
/// pod's domain is known, else least allocated (cpu, memory) after placing
/// the pod, 0..=10.
pub fn decide_prioritize<'a>(
    snap: &ClusterState,
    planner: &GangPlanner,
    args: &ExtenderArgs<'_>,
    candidates: &'a Candidates<'_>,
) -> Vec<HostPriority<'a>> {
    let state = ScoreState::new(snap, planner, args.pod.as_ref());
    let host = |score: i64, name: &'a str| HostPriority {
        host: Cow::Borrowed(name),
        score,
    };
    match candidates {
        Candidates::Cached(refs) => refs
            .iter()
            .map(|(name, slot)| host(state.score(snap, name, Some(slot)), name))
            .collect(),
        Candidates::Full(list) => list
            .iter()
            .map(|(name, _)| host(state.score(snap, name, None), name))
            .collect(),
    }
}

/// An encoded JSON answer.
fn json_bytes(bytes: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

/// One filter call's work, body in, answer out: decode kube-scheduler's
/// `ExtenderArgs`, resolve its nodes and decide over one snapshot of
/// `nodes`, encode the `ExtenderFilterResult`. The handler and the benches
/// both call this, so the benches measure what is served (the handler
/// checks the structure limits first, [`limits::check`]).
pub fn filter_bytes(
    nodes: &ClusterIndex,
    planner: &GangPlanner,
    body: &[u8],
) -> Result<Vec<u8>, ApiError> {
    filter_answer(nodes, planner, None, body).map(|(bytes, _)| bytes)
}

/// [`filter_bytes`], with whether the answer carries `Error`. With the
/// gang holds: a reservation kept for the pod is dropped first (it is
/// being scheduled again, see [`bind::permit::Gangs::returning`]), and a
/// pod whose gang needs more members held at once than
/// `--max-held-binds` is refused on every node, unresolvable.
fn filter_answer(
    nodes: &ClusterIndex,
    planner: &GangPlanner,
    gangs: Option<(&bind::permit::Gangs, &crate::metrics::Metrics)>,
    body: &[u8],
) -> Result<(Vec<u8>, bool), ApiError> {
    let args: ExtenderArgs<'_> = decode_borrowed(body)?;
    let pod_key = args.pod.as_ref().map(|p| {
        (
            p.metadata.namespace.as_deref().unwrap_or("default"),
            p.metadata.name.as_deref().unwrap_or_default(),
        )
    });
    let returning = match (gangs, pod_key) {
        (Some((g, _)), Some((ns, name))) => g.returning(nodes, ns, name),
        _ => false,
    };
    let snap = nodes.read();
    let candidates = Candidates::of(&snap, &args)?;
    let refused = match (gangs, pod_key) {
        (Some((g, m)), Some((ns, name))) => g.too_large(&snap, ns, name).inspect(|_| {
            m.gang_too_large.inc();
        }),
        _ => None,
    };
    let out = match refused {
        Some(why) => refuse_all(&candidates, &why),
        None => decide_filter(&snap, planner, &args, &candidates, returning),
    };
    drop(snap);
    let mut bytes = Vec::with_capacity(body.len() + 1024);
    out.write_json(&mut bytes);
    Ok((bytes, !out.error.is_empty()))
}

/// An answer that carries the protocol's `Error`, marked for the latency
/// middleware (outcome `Error`).
fn with_error_mark(mut resp: Response, error: bool) -> Response {
    if error {
        resp.extensions_mut().insert(ExtenderError);
    }
    resp
}

/// [`filter_bytes`] for prioritize: the `HostPriorityList` of the body's
/// nodes.
pub fn prioritize_bytes(
    nodes: &ClusterIndex,
    planner: &GangPlanner,
    body: &[u8],
) -> Result<Vec<u8>, ApiError> {
    let args: ExtenderArgs<'_> = decode_borrowed(body)?;
    let snap = nodes.read();
    let candidates = Candidates::of(&snap, &args)?;
    let out = decide_prioritize(&snap, planner, &args, &candidates);
    drop(snap);
    let mut bytes = Vec::with_capacity(body.len() + 1024);
    write_priorities(&out, candidates.all_plain(), &mut bytes);
    Ok(bytes)
}

/// [`filter_bytes`] for preempt: the `ExtenderPreemptionResult` for the
/// body's candidates, decided over one snapshot.
pub fn preempt_bytes(nodes: &ClusterIndex, body: &[u8]) -> Result<Vec<u8>, ApiError> {
    preempt_plan_bytes(nodes, body).map(|(bytes, _)| bytes)
}

/// [`preempt_bytes`] with the follow-up evictions of the answer
/// ([`preempt::plan_preempt`]).
pub fn preempt_plan_bytes(
    nodes: &ClusterIndex,
    body: &[u8],
) -> Result<(Vec<u8>, Vec<evict::Intent>), ApiError> {
    let args: ExtenderPreemptionArgs = decode(body)?;
    let (out, intents) = preempt::plan_preempt(&nodes.read(), &args);
    let bytes = serde_json::to_vec(&out).map_err(|e| {
        ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding the preemption result: {e}"),
        )
    })?;
    Ok((bytes, intents))
}

/// Refuses every verb until the caches have synced (at start, and after a
/// restart of the extender): `503`, which kube-scheduler takes as an
/// extender error and retries the pod; never a node marked failed on a
/// cache that does not know it yet.
fn warm(s: &ExtenderState) -> Result<(), ApiError> {
    if (s.synced)() {
        return Ok(());
    }
    Err(ApiError::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "the extender's caches have not synced yet (starting or restarting); retry",
    ))
}

async fn filter(State(s): State<ExtenderState>, Body(body): Body) -> Result<Response, ApiError> {
    warm(&s)?;
    limits::check(&s.limits, limits::Verb::Filter, &body)?;
    let (bytes, error) = filter_answer(
        &s.nodes,
        s.gangs.planner(),
        Some((&s.gangs, &s.metrics)),
        &body,
    )?;
    s.gangs.publish(&s.nodes, &s.writer);
    Ok(with_error_mark(json_bytes(bytes), error))
}

async fn prioritize(
    State(s): State<ExtenderState>,
    Body(body): Body,
) -> Result<Response, ApiError> {
    warm(&s)?;
    limits::check(&s.limits, limits::Verb::Filter, &body)?;
    let bytes = prioritize_bytes(&s.nodes, s.gangs.planner(), &body)?;
    Ok(json_bytes(bytes))
}

async fn preempt(State(s): State<ExtenderState>, Body(body): Body) -> Result<Response, ApiError> {
    warm(&s)?;
    limits::check(&s.limits, limits::Verb::Preempt, &body)?;
    let (bytes, intents) = preempt_plan_bytes(&s.nodes, &body)?;
    s.evictions.expect(intents);
    Ok(json_bytes(bytes))
}

/// Binds through [`bind::Binder`]: node check, cache check (fail closed),
/// assume, device binding conditions, the gang's quorum, binding; on
/// failure the assumption is dropped and the reason returned in `Error`.
async fn bind(
    State(s): State<ExtenderState>,
    park: Option<axum::Extension<crate::tls::park::Park>>,
    Body(body): Body,
) -> Result<Response, ApiError> {
    warm(&s)?;
    limits::check(&s.limits, limits::Verb::Bind, &body)?;
    let args: ExtenderBindingArgs = decode(&body)?;
    let req = bind::BindRequest {
        namespace: if args.pod_namespace.is_empty() {
            "default".to_owned()
        } else {
            args.pod_namespace
        },
        name: args.pod_name,
        uid: args.pod_uid,
        node: args.node,
    };
    let error = match bind_one(&s, &req, park.as_ref().map(|p| &p.0)).await {
        Ok(()) => String::new(),
        Err(e) => {
            tracing::info!(pod = %format!("{}/{}", req.namespace, req.name), node = %req.node, error = %e, "bind failed");
            e.to_string()
        }
    };
    let failed = !error.is_empty();
    Ok(with_error_mark(
        Json(ExtenderBindingResult { error }).into_response(),
        failed,
    ))
}

/// One bind with the service's cache, writer, permit and device gate.
async fn bind_one(
    s: &ExtenderState,
    req: &bind::BindRequest,
    park: Option<&crate::tls::park::Park>,
) -> Result<(), bind::BindFailure> {
    let binder = bind::Binder {
        nodes: Arc::clone(&s.nodes),
        writer: Arc::clone(&s.writer),
        permit: Arc::clone(&s.gangs),
        devices: Arc::clone(&s.binding),
        metrics: Arc::clone(&s.metrics),
    };
    binder.bind_parked(req, park).await
}
