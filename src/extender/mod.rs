//! The kube-scheduler extender webhook: `POST /scheduler/filter`,
//! `/scheduler/prioritize`, `/scheduler/bind` and `/scheduler/preempt`.
//!
//! Handlers decode kube-scheduler's JSON, read one consistent snapshot of
//! the [`NodeCache`](crate::cache::nodes::NodeCache), call the pure domain
//! in [`crate::pods`] and encode. Every answer kube-scheduler can parse is
//! HTTP 200; failures inside the extender are reported in `Error`. Only a
//! body that is not the protocol at all is an HTTP 4xx.

pub mod binding;
pub mod gang;
pub mod hold;
pub mod limits;
pub mod preempt;
pub mod selector;
pub mod state;
pub mod types;

pub use preempt::decide_preempt;
pub use state::ExtenderState;

use crate::cache::nodes::{Fit, NOT_FOUND, NodeRefs, NodeState, Rejection, Resolved};
use crate::cluster::PodBinding;
use crate::metrics::{Endpoint, GangWait, GangWaitLabels};
use crate::pods::fit::{self, Amounts};
use crate::pods::priority;
use crate::transport::{ApiError, decode_json};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use hold::Held;
use k8s_openapi::api::core::v1::Pod;
use limits::ExtenderBody;
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
    let timed = |endpoint| state.metrics.latency(endpoint);
    Router::new()
        .route(
            "/scheduler/filter",
            post(filter).route_layer(timed(Endpoint::ExtenderFilter)),
        )
        .route(
            "/scheduler/prioritize",
            post(prioritize).route_layer(timed(Endpoint::ExtenderPrioritize)),
        )
        .route(
            "/scheduler/bind",
            post(bind).route_layer(timed(Endpoint::ExtenderBind)),
        )
        .route(
            "/scheduler/preempt",
            post(preempt).route_layer(timed(Endpoint::ExtenderPreempt)),
        )
        .layer(DefaultBodyLimit::max(read_limit))
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
        snap: &NodeState,
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
            && let Ok(a) =
                crate::model::quantity::parse(q).and_then(|p| p.to_scaled_ceil(fit::scale_of(&k)))
            && a > 0
        {
            out.insert(k, a);
        }
    }
    (facts.metadata.name.unwrap_or_default(), out)
}

/// Why the pod cannot go anywhere, before looking at nodes (group rules).
fn pod_wide_rejection(snap: &NodeState, pod: &Pod) -> Option<Rejection> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let spec = pod.spec.as_ref()?;
    let group = spec.scheduling_group.as_ref()?.pod_group_name.as_deref()?;
    let group_eff = snap.group_priority(ns, group)?;
    let pod_eff = priority::resolve(
        priority::Declared {
            priority: spec.priority,
            class_name: spec.priority_class_name.as_deref(),
            preemption_policy: spec.preemption_policy.as_deref(),
        },
        snap.classes(),
    );
    let verdict = if snap.semantics().group_preemption_policy {
        priority::check_member(&pod_eff, &group_eff)
    } else {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let others: Vec<String> = snap
            .member_pods(ns, group)
            .filter(|(n, p)| *n != name && !p.terminal)
            .map(|(_, p)| priority::resolve(p.declared(), snap.classes()).preemption_policy)
            .collect();
        priority::check_member_without_group_policy(
            &pod_eff,
            group_eff.priority,
            others.iter().map(String::as_str),
        )
    };
    verdict.err().map(|m| Rejection {
        message: m.to_owned(),
        unresolvable: true,
    })
}

/// The pod's requests resolved for fit, with what its own allocated
/// ResourceClaims take from a node (the same request everywhere but the
/// returned slots).
fn resolve_with_claims(
    snap: &NodeState,
    pod: &Pod,
    requests: &Amounts,
) -> (Resolved, Vec<(u32, Resolved)>) {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let claims: Vec<fit::ClaimRef> = pod
        .spec
        .as_ref()
        .map(|s| fit::pod_claims(s, pod.status.as_ref()))
        .unwrap_or_default()
        .into_iter()
        .map(|c| fit::ClaimRef {
            claim: format!("{ns}/{}", c.claim),
            refs: c.refs,
        })
        .collect();
    if claims.is_empty() {
        return (snap.resolve(requests), Vec::new());
    }
    let load = snap.pending_claims_load(&claims);
    let plus = |extra: &Amounts| {
        let mut r = requests.clone();
        for (k, v) in extra {
            let e = r.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(*v);
        }
        snap.resolve(&r)
    };
    let special = load.on.iter().map(|(slot, a)| (*slot, plus(a))).collect();
    (plus(&load.everywhere), special)
}

/// Reasons shared between nodes rejected for the same shortfall.
#[derive(Default)]
struct Reasons(Vec<(u64, Arc<str>)>);

impl Reasons {
    fn short(&mut self, snap: &NodeState, req: &Resolved, short: u64) -> Arc<str> {
        if let Some((_, m)) = self.0.iter().find(|(k, _)| *k == short) {
            return Arc::clone(m);
        }
        let m: Arc<str> = snap.short_message(req, short).into();
        self.0.push((short, Arc::clone(&m)));
        m
    }
}

/// The filter decision, pure over a snapshot.
pub fn decide_filter<'a>(
    snap: &NodeState,
    args: &ExtenderArgs<'_>,
    candidates: &'a Candidates<'_>,
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
    let requests = match pod.spec.as_ref().map(fit::pod_requests).transpose() {
        Ok(r) => r.unwrap_or_default(),
        Err(e) => {
            out.error = format!("pod requests: {e}");
            return out;
        }
    };
    let wide = pod_wide_rejection(snap, pod);
    let gate = match wide {
        Some(_) => gang::Gate::default(),
        None => gang::filter_gate(snap, pod, &requests, &candidates.names()),
    };
    let wide = wide
        .or(gate.wide.clone())
        .map(|r| (Arc::<str>::from(r.message), r.unresolvable));
    let (resolved, special) = resolve_with_claims(snap, pod, &requests);
    // Cache-capable, with many resources (the per-node check then walks
    // them all): resources no node offers reject every node at once, with
    // one shared reason, so the per-node cost stays bounded by the
    // resources the cluster has.
    let wide = match wide {
        None if cache_capable && resolved.len() >= 64 => limits::unoffered_reason(&resolved),
        w => w,
    };
    let mut outside: Vec<Option<Arc<str>>> = Vec::new();
    let mut outside_reason = |level: usize| -> Arc<str> {
        if outside.len() <= level {
            outside.resize(level + 1, None);
        }
        Arc::clone(outside[level].get_or_insert_with(|| gate.outside_message(level).into()))
    };
    let request_on = |slot: Option<u32>| -> &Resolved {
        slot.and_then(|slot| special.iter().find(|(s, _)| *s == slot))
            .map_or(&resolved, |(_, r)| r)
    };
    let mut reasons = Reasons::default();
    let not_found: Arc<str> = NOT_FOUND.into();
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
                if let Some(w) = &wide {
                    reject(&mut out, name, (Arc::clone(&w.0), w.1));
                    continue;
                }
                if let Some(level) = gate.outside(name) {
                    reject(&mut out, name, (outside_reason(level), true));
                    continue;
                }
                let resolved = request_on(Some(slot));
                match snap.fit_at(slot, resolved) {
                    Fit::Fits => {
                        if let Some(names) = &mut out.node_names {
                            names.push(name);
                        }
                    }
                    Fit::Short {
                        short,
                        unresolvable,
                    } => reject(
                        &mut out,
                        name,
                        (reasons.short(snap, resolved, short), unresolvable),
                    ),
                    Fit::NotFound => reject(&mut out, name, (Arc::clone(&not_found), true)),
                    Fit::Other(r) => reject(&mut out, name, (r.message.into(), r.unresolvable)),
                }
            }
        }
        Candidates::Full(list) => {
            for (i, (name, alloc)) in list.iter().enumerate() {
                let verdict = match &wide {
                    Some(w) => Err((Arc::clone(&w.0), w.1)),
                    None if let Some(level) = gate.outside(name) => {
                        Err((outside_reason(level), true))
                    }
                    None => snap
                        .check(name, request_on(snap.find(name)), Some(alloc))
                        .map_err(|r| (r.message.into(), r.unresolvable)),
                };
                match verdict {
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

/// The prioritize decision: least allocated (cpu, memory) after placing the
/// pod, 0..=10, for every node given, in order.
pub fn decide_prioritize<'a>(
    snap: &NodeState,
    args: &ExtenderArgs<'_>,
    candidates: &'a Candidates<'_>,
) -> Vec<HostPriority<'a>> {
    let requests = args
        .pod
        .as_ref()
        .and_then(|p| p.spec.as_ref())
        .and_then(|s| fit::pod_requests(s).ok())
        .unwrap_or_default();
    let resolved = snap.resolve(&requests);
    let prefer = args
        .pod
        .as_ref()
        .and_then(|p| gang::prefer(snap, p, &requests));
    let score = |score: i64, name: &'a str| HostPriority {
        host: Cow::Borrowed(name),
        score: score.clamp(0, 10),
    };
    match candidates {
        Candidates::Cached(refs) => refs
            .iter()
            .map(|(name, slot)| {
                let s = match &prefer {
                    Some(p) => p.score(name),
                    None => snap.score_at(slot, &resolved),
                };
                score(s, name)
            })
            .collect(),
        Candidates::Full(list) => list
            .iter()
            .map(|(name, _)| {
                let s = match &prefer {
                    Some(p) => p.score(name),
                    None => snap.score(name, &resolved),
                };
                score(s, name)
            })
            .collect(),
    }
}

/// An encoded JSON answer.
fn json_bytes(bytes: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

async fn filter(
    State(s): State<ExtenderState>,
    ExtenderBody(body): ExtenderBody,
) -> Result<Response, ApiError> {
    limits::check(&s.limits, limits::Verb::Filter, &body)?;
    let args: ExtenderArgs<'_> = decode_borrowed(&body)?;
    let snap = s.nodes.read();
    let candidates = Candidates::of(&snap, &args)?;
    let out = decide_filter(&snap, &args, &candidates);
    drop(snap);
    let mut bytes = Vec::with_capacity(body.len() + 1024);
    out.write_json(&mut bytes);
    s.gangs.publish(&s.nodes, &s.writer);
    Ok(json_bytes(bytes))
}

async fn prioritize(
    State(s): State<ExtenderState>,
    ExtenderBody(body): ExtenderBody,
) -> Result<Response, ApiError> {
    limits::check(&s.limits, limits::Verb::Filter, &body)?;
    let args: ExtenderArgs<'_> = decode_borrowed(&body)?;
    let snap = s.nodes.read();
    let candidates = Candidates::of(&snap, &args)?;
    let out = decide_prioritize(&snap, &args, &candidates);
    drop(snap);
    let mut bytes = Vec::with_capacity(body.len() + 1024);
    write_priorities(&out, candidates.all_plain(), &mut bytes);
    Ok(json_bytes(bytes))
}

async fn preempt(
    State(s): State<ExtenderState>,
    ExtenderBody(body): ExtenderBody,
) -> Result<Json<ExtenderPreemptionResult>, ApiError> {
    limits::check(&s.limits, limits::Verb::Preempt, &body)?;
    let args: ExtenderPreemptionArgs = decode(&body)?;
    let out = decide_preempt(&s.nodes.read(), &args);
    Ok(Json(out))
}

/// Binds: the node must exist; the pod is assumed on it (counted there at
/// once), its devices' binding conditions are awaited
/// ([`binding::BindingGate`]) and the binding created; on failure the
/// assumption is dropped and the reason returned in `Error`.
async fn bind(
    State(s): State<ExtenderState>,
    ExtenderBody(body): ExtenderBody,
) -> Result<Json<ExtenderBindingResult>, ApiError> {
    limits::check(&s.limits, limits::Verb::Bind, &body)?;
    let args: ExtenderBindingArgs = decode(&body)?;
    let error = match bind_one(&s, &args).await {
        Ok(()) => String::new(),
        Err(e) => {
            tracing::info!(pod = %format!("{}/{}", args.pod_namespace, args.pod_name), node = %args.node, error = %e, "bind failed");
            e
        }
    };
    Ok(Json(ExtenderBindingResult { error }))
}

async fn bind_one(s: &ExtenderState, args: &ExtenderBindingArgs) -> Result<(), String> {
    if args.pod_name.is_empty() || args.node.is_empty() {
        return Err("PodName and Node are required".into());
    }
    let namespace = if args.pod_namespace.is_empty() {
        "default"
    } else {
        &args.pod_namespace
    };
    if !s.nodes.read().has_node(&args.node) {
        return Err(crate::cluster::BindError::NodeGone(args.node.clone()).to_string());
    }
    let binding = PodBinding {
        namespace: namespace.to_owned(),
        name: args.pod_name.clone(),
        uid: args.pod_uid.clone(),
        node: args.node.clone(),
    };
    let assumed = s
        .nodes
        .assume(namespace, &args.pod_name, &args.pod_uid, &args.node);
    // Order: node check, assume, device binding conditions, the group's
    // quorum (gang members wait here, assumed), binding.
    let result = async {
        s.binding
            .wait_for_devices(
                &s.nodes,
                s.writer.as_ref(),
                namespace,
                &args.pod_name,
                &args.pod_uid,
            )
            .await?;
        let held = s
            .gangs
            .hold(&s.nodes, s.writer.as_ref(), namespace, &args.pod_name)
            .await;
        let outcome = match held {
            Ok(Held::Free) => None,
            Ok(Held::Quorum) => Some(GangWait::Quorum),
            Ok(Held::Waited) => Some(GangWait::Released),
            Err(_) => Some(GangWait::Expired),
        };
        if let Some(outcome) = outcome {
            s.metrics
                .gang_waits
                .get_or_create(&GangWaitLabels { outcome })
                .inc();
        }
        held?;
        s.writer.bind_pod(&binding).await.map_err(|e| e.to_string())
    }
    .await;
    match result {
        Ok(()) => {
            s.gangs
                .bound(&s.nodes, s.writer.as_ref(), namespace, &args.pod_name)
                .await;
            Ok(())
        }
        Err(e) => {
            if assumed {
                s.nodes.forget(namespace, &args.pod_name);
            }
            Err(e)
        }
    }
}
