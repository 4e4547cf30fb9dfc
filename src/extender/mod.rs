//! The kube-scheduler extender webhook: `POST /scheduler/filter`,
//! `/scheduler/prioritize`, `/scheduler/bind` and `/scheduler/preempt`.
//!
//! Handlers decode kube-scheduler's JSON, read one consistent snapshot of
//! the [`NodeCache`](crate::cache::nodes::NodeCache), call the pure domain
//! in [`crate::pods`] and encode. Every answer kube-scheduler can parse is
//! HTTP 200; failures inside the extender are reported in `Error`. Only a
//! body that is not the protocol at all is an HTTP 4xx.

pub mod gang;
pub mod hold;
pub mod types;

use crate::cache::nodes::{NodeState, Rejection};
use crate::cluster::PodBinding;
use crate::http::AppState;
use crate::http::error::{ApiError, Body, decode_json};
use crate::metrics::Endpoint;
use crate::pods::fit::{self, Amounts};
use crate::pods::priority;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use k8s_openapi::api::core::v1::Pod;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::time::Instant;
use types::*;

/// Largest extender request: a full NodeList of a big cluster is large.
pub const MAX_EXTENDER_BODY_BYTES: usize = 64 * 1024 * 1024;

/// The extender's routes (merged into [`crate::http::router`]).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/scheduler/filter", post(filter))
        .route("/scheduler/prioritize", post(prioritize))
        .route("/scheduler/bind", post(bind))
        .route("/scheduler/preempt", post(preempt))
        .layer(DefaultBodyLimit::max(MAX_EXTENDER_BODY_BYTES))
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // Fast path; on failure decode again for an error naming the field.
    serde_json::from_slice(bytes).or_else(|_| decode_json(bytes))
}

/// [`decode`] for types borrowing from the body.
fn decode_borrowed<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|_| {
        match decode_json::<serde_json::Value>(bytes).and_then(|v| {
            serde_path_to_error::deserialize::<_, ExtenderArgs<'static>>(v)
                .map(drop)
                .map_err(|e| ApiError::unprocessable(format!("{}: {}", e.path(), e.inner())))
        }) {
            Err(e) => e,
            Ok(()) => ApiError::unprocessable("the body is not an extender request"),
        }
    })
}

/// The node names of a request, and in full mode each node's allocatable.
fn requested_nodes<'a>(args: &'a ExtenderArgs<'_>) -> Vec<(&'a str, Option<Amounts>)> {
    match (&args.node_names, &args.nodes) {
        (Some(names), _) => names.iter().map(|n| (n.as_ref(), None)).collect(),
        (None, Some(list)) => list
            .items
            .iter()
            .map(|item| {
                let name = item
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                (name, Some(allocatable_of(item)))
            })
            .collect(),
        (None, None) => Vec::new(),
    }
}

/// The node names of a request.
fn request_names<'a>(args: &'a ExtenderArgs<'_>) -> Vec<&'a str> {
    match (&args.node_names, &args.nodes) {
        (Some(names), _) => names.iter().map(|n| n.as_ref()).collect(),
        (None, Some(list)) => list
            .items
            .iter()
            .filter_map(|i| i.pointer("/metadata/name").and_then(Value::as_str))
            .collect(),
        (None, None) => Vec::new(),
    }
}

/// `status.allocatable` (else `capacity`) of a raw Node; bad entries left out.
fn allocatable_of(node: &Value) -> Amounts {
    let list = node
        .pointer("/status/allocatable")
        .or_else(|| node.pointer("/status/capacity"))
        .and_then(Value::as_object);
    let mut out = Amounts::new();
    for (k, v) in list.into_iter().flatten() {
        if let Some(q) = v.as_str()
            && let Ok(a) =
                crate::model::quantity::parse(q).and_then(|p| p.to_scaled_ceil(fit::scale_of(k)))
            && a > 0
        {
            out.insert(k.clone(), a);
        }
    }
    out
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
    priority::check_member(&pod_eff, &group_eff)
        .err()
        .map(|m| Rejection {
            message: m.to_owned(),
            unresolvable: true,
        })
}

/// The filter decision, pure over a snapshot.
pub fn decide_filter<'a>(snap: &NodeState, args: &'a ExtenderArgs<'_>) -> ExtenderFilterResult<'a> {
    let cache_capable = args.node_names.is_some() || args.nodes.is_none();
    let mut out = ExtenderFilterResult {
        node_names: cache_capable.then(Vec::new),
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
        None => gang::filter_gate(snap, pod, &requests, &request_names(args)),
    };
    let wide = wide.or(gate.wide.clone());
    let resolved = snap.resolve(&requests);
    for (i, (name, alloc)) in requested_nodes(args).into_iter().enumerate() {
        let verdict = match &wide {
            Some(r) => Err(r.clone()),
            None => match gate.node(name) {
                Some(r) => Err(r),
                None => snap.check(name, &resolved, alloc.as_ref()),
            },
        };
        match verdict {
            Ok(()) => {
                if let Some(names) = &mut out.node_names {
                    names.push(std::borrow::Cow::Borrowed(name));
                } else if let (Some(list), Some(src)) = (&mut out.nodes, &args.nodes)
                    && let Some(item) = src.items.get(i)
                {
                    list.items.push(item.clone());
                }
            }
            Err(r) if r.unresolvable => {
                out.failed_and_unresolvable_nodes
                    .insert(name.to_owned(), r.message);
            }
            Err(r) => {
                out.failed_nodes.insert(name.to_owned(), r.message);
            }
        }
    }
    out
}

/// The prioritize decision: least allocated (cpu, memory) after placing the
/// pod, 0..=10, for every node given, in order.
pub fn decide_prioritize<'a>(
    snap: &NodeState,
    args: &'a ExtenderArgs<'_>,
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
    requested_nodes(args)
        .into_iter()
        .map(|(name, _)| HostPriority {
            host: std::borrow::Cow::Borrowed(name),
            score: match &prefer {
                Some(p) => p.score(name),
                None => snap.score(name, &resolved),
            }
            .clamp(0, 10),
        })
        .collect()
}

/// The preempt decision of this stage: kube-scheduler's candidates, as
/// `MetaVictims`, restricted to nodes that exist.
pub fn decide_preempt(snap: &NodeState, args: &ExtenderPreemptionArgs) -> ExtenderPreemptionResult {
    let mut out = ExtenderPreemptionResult::default();
    if let Some(meta) = &args.node_name_to_meta_victims {
        for (node, v) in meta {
            if snap.has_node(node) {
                out.node_name_to_meta_victims
                    .insert(node.clone(), v.clone().unwrap_or_default());
            }
        }
    } else if let Some(full) = &args.node_name_to_victims {
        for (node, v) in full {
            if !snap.has_node(node) {
                continue;
            }
            let v = v.clone().unwrap_or_default();
            out.node_name_to_meta_victims.insert(
                node.clone(),
                MetaVictims {
                    pods: v
                        .pods
                        .iter()
                        .map(|p| MetaPod {
                            uid: p
                                .pointer("/metadata/uid")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                        })
                        .collect(),
                    num_pdb_violations: v.num_pdb_violations,
                },
            );
        }
    }
    out
}

fn json_response<T: serde::Serialize>(v: &T) -> Result<Response, ApiError> {
    let bytes = serde_json::to_vec(v)
        .map_err(|e| ApiError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, "application/json")], bytes).into_response())
}

async fn filter(State(s): State<AppState>, Body(body): Body) -> Result<Response, ApiError> {
    let start = Instant::now();
    let args: ExtenderArgs<'_> = decode_borrowed(&body)?;
    let out = decide_filter(&s.nodes.read(), &args);
    s.gangs.publish(&s.nodes, &s.writer);
    let resp = json_response(&out);
    s.metrics.observe(Endpoint::ExtenderFilter, start);
    resp
}

async fn prioritize(State(s): State<AppState>, Body(body): Body) -> Result<Response, ApiError> {
    let start = Instant::now();
    let args: ExtenderArgs<'_> = decode_borrowed(&body)?;
    let out = decide_prioritize(&s.nodes.read(), &args);
    let resp = json_response(&out);
    s.metrics.observe(Endpoint::ExtenderPrioritize, start);
    resp
}

async fn preempt(
    State(s): State<AppState>,
    Body(body): Body,
) -> Result<Json<ExtenderPreemptionResult>, ApiError> {
    let start = Instant::now();
    let args: ExtenderPreemptionArgs = decode(&body)?;
    let out = decide_preempt(&s.nodes.read(), &args);
    s.metrics.observe(Endpoint::ExtenderPreempt, start);
    Ok(Json(out))
}

/// Binds: the node must exist; the pod is assumed on it (counted there at
/// once) and the binding created; on failure the assumption is dropped and
/// the reason returned in `Error`.
async fn bind(
    State(s): State<AppState>,
    Body(body): Body,
) -> Result<Json<ExtenderBindingResult>, ApiError> {
    let start = Instant::now();
    let args: ExtenderBindingArgs = decode(&body)?;
    let error = match bind_one(&s, &args).await {
        Ok(()) => String::new(),
        Err(e) => {
            tracing::info!(pod = %format!("{}/{}", args.pod_namespace, args.pod_name), node = %args.node, error = %e, "bind failed");
            e
        }
    };
    s.metrics.observe(Endpoint::ExtenderBind, start);
    Ok(Json(ExtenderBindingResult { error }))
}

async fn bind_one(s: &AppState, args: &ExtenderBindingArgs) -> Result<(), String> {
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
    // Gang members wait here (assumed) for their group's quorum.
    if let Err(e) = s
        .gangs
        .hold(&s.nodes, s.writer.as_ref(), namespace, &args.pod_name)
        .await
    {
        if assumed {
            s.nodes.forget(namespace, &args.pod_name);
        }
        return Err(e);
    }
    match s.writer.bind_pod(&binding).await {
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
            Err(e.to_string())
        }
    }
}
