//! A test API server that speaks the Kubernetes HTTP protocol for what the
//! scheduler uses, so the real `kube::Client`, watcher and lease code run:
//! lists with resourceVersion, paged by `limit` and `continue` (an opaque
//! token with the list's resourceVersion, `remainingItemCount`, `410
//! Expired` for a token older than the compacted history), watch
//! streams with bookmarks, `410 Expired` for a compacted resourceVersion,
//! label selectors (including objects leaving a selector), status merge
//! patches with resourceVersion preconditions (`409 Conflict`),
//! ResourceClaim status merge patches with uid and resourceVersion
//! preconditions, events, Leases with server-side apply ownership of
//! `holderIdentity`, and `pods/eviction` (a `policy/v1` Eviction with a
//! uid precondition; `201` and the pod deleted, or `429` while a
//! PodDisruptionBudget refuses it).
//!
//! Fault injection: conflicts on the next N status patches, delivery lag on
//! Run watch events, dropping every open watch, compacting history, lists
//! and watches of chosen resources failing (500), and the Lease API failing.
#![allow(dead_code)]

pub mod paging;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

pub mod prune;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Res {
    Pods,
    Runs,
    Runtimes,
    Leases,
    Events,
    Nodes,
    ResourceClaims,
    PodGroups,
    CompositePodGroups,
    PriorityClasses,
    ResourceSlices,
    DeviceClasses,
    Secrets,
    ValidatingWebhookConfigurations,
    MutatingWebhookConfigurations,
    ClusterRoles,
}

/// How the server answers `PATCH .../{name}/status` of a resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StatusPatch {
    /// Runs: resourceVersion precondition, injected conflicts, recorded writes.
    Run,
    /// ResourceClaims: uid and resourceVersion preconditions, merge patch only.
    Claim,
    /// PodGroups and CompositePodGroups: server-side apply of conditions,
    /// or a merge patch.
    Group,
}

/// One row per resource the server knows. The kind and apiVersion of
/// stored objects come from it, and so do the routes of the watched kinds:
/// the collection across namespaces (list or watch) and the status
/// subresource. Serving a new watched kind is one row.
struct Row {
    res: Res,
    kind: &'static str,
    api_version: &'static str,
    plural: &'static str,
    /// `GET /api(s)/{apiVersion}/{plural}`: list, or watch with `?watch=true`.
    list_watch: bool,
    status: Option<StatusPatch>,
}

#[rustfmt::skip]
static TABLE: [Row; 16] = [
    Row { res: Res::Pods, kind: "Pod", api_version: "v1", plural: "pods", list_watch: true, status: None },
    Row { res: Res::Runs, kind: "Run", api_version: "kruntimes.io/v1alpha1", plural: "runs", list_watch: true, status: Some(StatusPatch::Run) },
    Row { res: Res::Runtimes, kind: "Runtime", api_version: "kruntimes.io/v1alpha1", plural: "runtimes", list_watch: true, status: None },
    Row { res: Res::Leases, kind: "Lease", api_version: "coordination.k8s.io/v1", plural: "leases", list_watch: false, status: None },
    Row { res: Res::Events, kind: "Event", api_version: "events.k8s.io/v1", plural: "events", list_watch: false, status: None },
    Row { res: Res::Nodes, kind: "Node", api_version: "v1", plural: "nodes", list_watch: true, status: None },
    Row { res: Res::ResourceClaims, kind: "ResourceClaim", api_version: "resource.k8s.io/v1", plural: "resourceclaims", list_watch: true, status: Some(StatusPatch::Claim) },
    Row { res: Res::PodGroups, kind: "PodGroup", api_version: "scheduling.k8s.io/v1beta1", plural: "podgroups", list_watch: true, status: Some(StatusPatch::Group) },
    Row { res: Res::CompositePodGroups, kind: "CompositePodGroup", api_version: "scheduling.k8s.io/v1alpha3", plural: "compositepodgroups", list_watch: true, status: Some(StatusPatch::Group) },
    Row { res: Res::PriorityClasses, kind: "PriorityClass", api_version: "scheduling.k8s.io/v1", plural: "priorityclasses", list_watch: true, status: None },
    Row { res: Res::ResourceSlices, kind: "ResourceSlice", api_version: "resource.k8s.io/v1", plural: "resourceslices", list_watch: true, status: None },
    Row { res: Res::DeviceClasses, kind: "DeviceClass", api_version: "resource.k8s.io/v1", plural: "deviceclasses", list_watch: true, status: None },
    Row { res: Res::Secrets, kind: "Secret", api_version: "v1", plural: "secrets", list_watch: false, status: None },
    Row { res: Res::ValidatingWebhookConfigurations, kind: "ValidatingWebhookConfiguration", api_version: "admissionregistration.k8s.io/v1", plural: "validatingwebhookconfigurations", list_watch: false, status: None },
    Row { res: Res::MutatingWebhookConfigurations, kind: "MutatingWebhookConfiguration", api_version: "admissionregistration.k8s.io/v1", plural: "mutatingwebhookconfigurations", list_watch: false, status: None },
    Row { res: Res::ClusterRoles, kind: "ClusterRole", api_version: "rbac.authorization.k8s.io/v1", plural: "clusterroles", list_watch: false, status: None },
];

impl Res {
    fn row(self) -> &'static Row {
        TABLE
            .iter()
            .find(|r| r.res == self)
            .expect("every resource has a row")
    }

    fn kind(self) -> &'static str {
        self.row().kind
    }

    fn api_version(self) -> &'static str {
        self.row().api_version
    }

    /// `/api/v1` for the core group, else `/apis/{group}/{version}`.
    fn prefix(self) -> String {
        match self.api_version() {
            "v1" => "/api/v1".to_owned(),
            gv => format!("/apis/{gv}"),
        }
    }

    /// `{plural}.{group}` (`{plural}` in the core group), as API errors name it.
    fn qualified(self) -> String {
        let row = self.row();
        match row.api_version.split_once('/') {
            Some((group, _)) => format!("{}.{group}", row.plural),
            None => row.plural.to_owned(),
        }
    }
}

/// The routes of every watched kind in [`TABLE`].
fn table_routes() -> Router<FakeApi> {
    let mut router = Router::new();
    for row in &TABLE {
        let res = row.res;
        if row.list_watch {
            router = router.route(
                &format!("{}/{}", res.prefix(), row.plural),
                get(
                    move |State(api): State<FakeApi>, Query(p): Query<HashMap<String, String>>| {
                        list_or_watch(api, res, p)
                    },
                ),
            );
        }
        let status_path = format!(
            "{}/namespaces/{{ns}}/{}/{{name}}/status",
            res.prefix(),
            row.plural
        );
        router = match row.status {
            None => router,
            Some(StatusPatch::Run) => {
                router.route(&status_path, axum::routing::patch(patch_run_status))
            }
            Some(StatusPatch::Claim) => {
                router.route(&status_path, axum::routing::patch(patch_claim_status))
            }
            Some(StatusPatch::Group) => router.route(
                &status_path,
                axum::routing::patch(
                    move |State(api): State<FakeApi>,
                          Path((ns, name)): Path<(String, String)>,
                          headers: HeaderMap,
                          body: Bytes| async move {
                        patch_group_status(api, res, ns, name, headers, body)
                    },
                ),
            ),
        };
    }
    router
}

struct Entry {
    rv: u64,
    res: Res,
    deleted: bool,
    prev: Option<Value>,
    obj: Value,
}

#[derive(Default)]
pub struct Inner {
    rv: u64,
    objects: BTreeMap<(Res, String, String), Value>,
    log: Vec<Entry>,
    /// Watches from a resourceVersion at or below this get 410.
    compacted: u64,
    /// Incremented to close every open watch.
    drop_gen: u64,
    /// The next N Run status patches answer 409.
    pub fail_status_patches: usize,
    /// Delay before each Run watch event is delivered.
    pub run_watch_lag: Duration,
    /// Every accepted Run status patch: (namespace/name, status).
    pub status_writes: Vec<(String, Value)>,
    /// Status patches refused with 409.
    pub conflicts: usize,
    /// Resources answered with 404, as for an API group the cluster does not serve.
    pub unserved: Vec<Res>,
    /// Resources whose lists and watches fail with 500 until removed.
    pub failing: Vec<Res>,
    /// Every Lease request fails with 500 while set.
    pub fail_leases: bool,
    /// Every accepted `pods/binding`: (namespace/name, node).
    pub bindings: Vec<(String, String)>,
    /// PodDisruptionBudget refusals: `namespace/name` → how many more
    /// evictions of that pod answer 429 before one is allowed.
    pub pdb_refusals: HashMap<String, usize>,
    /// Every eviction answered: (namespace/name, HTTP code, Eviction body).
    pub evictions: Vec<(String, u16, Value)>,
    /// Every accepted ResourceClaim status patch: (namespace/name, patch body).
    pub claim_status_patches: Vec<(String, Value)>,
    /// Field manager owning each Lease's holderIdentity.
    lease_owner: HashMap<(String, String), String>,
    /// Every request received, in order (see [`Request`]).
    pub requests: Vec<Request>,
    /// TokenReview: bearer token → user name; other tokens are not authenticated.
    pub tokens: HashMap<String, String>,
    /// SubjectAccessReview: (user, `"VERB RESOURCE.GROUP"` or `"VERB /path"`) allowed.
    pub grants: Vec<(String, String)>,
    /// Secrets and webhook configurations (see that section).
    pub webhooks: WebhookState,
}

#[derive(Clone)]
pub struct FakeApi {
    pub inner: Arc<Mutex<Inner>>,
    changed: Arc<tokio::sync::watch::Sender<u64>>,
    pub url: String,
}

/// `GET` of one Pod (`/v1/explain/pod` reads the pod it explains).
async fn get_pod(
    State(api): State<FakeApi>,
    axum::extract::Path((ns, name)): axum::extract::Path<(String, String)>,
) -> Response {
    get_one(&api, Res::Pods, "pods", &ns, &name)
}

/// One stored object, or the API server's 404 Status naming `resource`
/// (`plural` or `plural.group`).
fn get_one(api: &FakeApi, res: Res, resource: &str, ns: &str, name: &str) -> Response {
    match api.get(res, ns, name) {
        Some(o) => axum::Json(o).into_response(),
        None => status(404, "NotFound", &format!("{resource} \"{name}\" not found")),
    }
}

/// `GET` of one ResourceClaim (the device gate reads each gated claim
/// before a bind passes).
async fn get_claim(
    State(api): State<FakeApi>,
    axum::extract::Path((ns, name)): axum::extract::Path<(String, String)>,
) -> Response {
    get_one(
        &api,
        Res::ResourceClaims,
        "resourceclaims.resource.k8s.io",
        &ns,
        &name,
    )
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code});
    (StatusCode::from_u16(code).unwrap(), axum::Json(body)).into_response()
}

fn matches(selector: Option<&str>, obj: &Value) -> bool {
    let Some(sel) = selector.filter(|s| !s.is_empty()) else {
        return true;
    };
    let labels = obj.pointer("/metadata/labels");
    sel.split(',').all(|term| match term.split_once('=') {
        Some((k, v)) => {
            labels
                .and_then(|l| l.get(k.trim_end_matches('!')))
                .and_then(Value::as_str)
                == Some(v)
        }
        None => labels.and_then(|l| l.get(term)).is_some(),
    })
}

impl FakeApi {
    pub async fn start() -> FakeApi {
        let (tx, _) = tokio::sync::watch::channel(0u64);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let api = FakeApi {
            inner: Arc::new(Mutex::new(Inner::default())),
            changed: Arc::new(tx),
            url,
        };
        let router = Router::new()
            .route(
                "/apis/events.k8s.io/v1/namespaces/{ns}/events",
                axum::routing::post(create_event),
            )
            .route(
                "/apis/events.k8s.io/v1/namespaces/{ns}/events/{name}",
                axum::routing::patch(patch_event),
            )
            .merge(
                Router::new()
                    .route(
                        "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
                        axum::routing::post(create_lease),
                    )
                    .route(
                        "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
                        get(get_lease).patch(patch_lease).put(put_lease),
                    )
                    .route_layer(axum::middleware::from_fn_with_state(
                        api.clone(),
                        lease_faults,
                    )),
            )
            .route(
                "/apis/authentication.k8s.io/v1/tokenreviews",
                axum::routing::post(token_review),
            )
            .route(
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                axum::routing::post(subject_access_review),
            )
            .route(
                "/api/v1/namespaces/{ns}/pods/{name}/binding",
                axum::routing::post(create_binding),
            )
            .route(
                "/api/v1/namespaces/{ns}/pods/{name}/eviction",
                axum::routing::post(create_eviction),
            )
            .route("/api/v1/namespaces/{ns}/pods/{name}", get(get_pod))
            .route(
                "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}",
                get(get_claim),
            )
            .merge(table_routes())
            .merge(webhook_routes())
            .fallback(|| async {
                status(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                )
            })
            .layer(axum::middleware::from_fn_with_state(
                api.clone(),
                record_request,
            ))
            .with_state(api.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        api
    }

    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url.parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    fn record(&self, inner: &mut Inner, res: Res, deleted: bool, prev: Option<Value>, obj: Value) {
        inner.log.push(Entry {
            rv: inner.rv,
            res,
            deleted,
            prev,
            obj,
        });
        let _ = self.changed.send(inner.rv);
    }

    /// Creates or replaces an object (uid and resourceVersion assigned).
    pub fn put(&self, res: Res, mut obj: Value) -> Value {
        let mut g = self.inner.lock();
        g.rv += 1;
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_owned();
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap()
            .to_owned();
        let key = (res, ns.clone(), name.clone());
        let prev = g.objects.get(&key).cloned();
        obj["apiVersion"] = json!(res.api_version());
        obj["kind"] = json!(res.kind());
        obj["metadata"]["namespace"] = json!(ns);
        let uid = prev
            .as_ref()
            .and_then(|p| p.pointer("/metadata/uid").cloned())
            .unwrap_or_else(|| json!(format!("uid-{}-{}-{}", res.kind(), ns, name)));
        obj["metadata"]["uid"] = uid;
        obj["metadata"]["resourceVersion"] = json!(g.rv.to_string());
        if res == Res::Runs {
            prune::prune_object(prune::run_schema(), &mut obj);
        }
        g.objects.insert(key, obj.clone());
        self.record(&mut g, res, false, prev, obj.clone());
        obj
    }

    pub fn delete(&self, res: Res, ns: &str, name: &str) {
        let mut g = self.inner.lock();
        if let Some(mut obj) = g.objects.remove(&(res, ns.to_owned(), name.to_owned())) {
            g.rv += 1;
            obj["metadata"]["resourceVersion"] = json!(g.rv.to_string());
            self.record(&mut g, res, true, None, obj);
        }
    }

    pub fn get(&self, res: Res, ns: &str, name: &str) -> Option<Value> {
        self.inner
            .lock()
            .objects
            .get(&(res, ns.to_owned(), name.to_owned()))
            .cloned()
    }

    pub fn list(&self, res: Res) -> Vec<Value> {
        self.inner
            .lock()
            .objects
            .iter()
            .filter(|((r, _, _), _)| *r == res)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Lists and watches of `res` fail (500) while `failing`; open watches
    /// are closed, so watchers meet the failure at once.
    pub fn fail_lists(&self, res: Res, failing: bool) {
        let mut g = self.inner.lock();
        g.failing.retain(|r| *r != res);
        if failing {
            g.failing.push(res);
            g.drop_gen += 1;
            let _ = self.changed.send(g.rv);
        }
    }

    /// Closes every open watch and forgets history, so watchers must relist.
    pub fn drop_watches_and_compact(&self) {
        let mut g = self.inner.lock();
        g.drop_gen += 1;
        g.compacted = g.rv;
        let _ = self.changed.send(g.rv);
    }

    /// A list, paged as the API server pages it (see [`paging`]): at most
    /// `limit` items (when given and positive); while more follow, an
    /// opaque `continue` token carrying the list's resourceVersion and the
    /// last key returned, and `remainingItemCount` when no selector
    /// filters; a continued page answers at the token's resourceVersion,
    /// and a token older than the compacted history is `410 Expired`.
    fn list_response(&self, res: Res, params: &HashMap<String, String>) -> Response {
        use std::ops::Bound;
        let selector = params.get("labelSelector").map(String::as_str);
        let limit = params
            .get("limit")
            .and_then(|l| l.parse::<usize>().ok())
            .filter(|l| *l > 0);
        let g = self.inner.lock();
        let (list_rv, start) = match params.get("continue").filter(|c| !c.is_empty()) {
            Some(token) => match paging::decode(token) {
                Some((rv, _)) if rv < g.compacted => {
                    return status(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent list result. \
                         You can start a new list without the continue parameter.",
                    );
                }
                Some((rv, (ns, name))) => (rv, Bound::Excluded((res, ns, name))),
                None => return status(400, "BadRequest", "invalid continue token"),
            },
            None => (g.rv, Bound::Included((res, String::new(), String::new()))),
        };
        let mut items: Vec<Value> = Vec::new();
        let mut last: Option<(&str, &str)> = None;
        let mut remaining = 0usize;
        for ((r, ns, name), v) in g.objects.range((start, Bound::Unbounded)) {
            if *r != res {
                break;
            }
            if !matches(selector, v) {
                continue;
            }
            if limit.is_some_and(|l| items.len() == l) {
                remaining += 1;
                continue;
            }
            items.push(v.clone());
            last = Some((ns, name));
        }
        let mut meta = json!({"resourceVersion": list_rv.to_string()});
        if remaining > 0
            && let Some((ns, name)) = last
        {
            meta["continue"] = json!(paging::encode(list_rv, ns, name));
            // The API server counts what is left only when nothing filters.
            if selector.is_none() {
                meta["remainingItemCount"] = json!(remaining);
            }
        }
        let body = json!({"apiVersion": res.api_version(), "kind": format!("{}List", res.kind()),
            "metadata": meta, "items": items});
        axum::Json(body).into_response()
    }

    fn watch_response(&self, res: Res, params: &HashMap<String, String>) -> Response {
        let from: u64 = params
            .get("resourceVersion")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let selector = params.get("labelSelector").cloned();
        let bookmarks = params
            .get("allowWatchBookmarks")
            .is_some_and(|v| v == "true");
        let (gen0, compacted) = {
            let g = self.inner.lock();
            (g.drop_gen, g.compacted)
        };
        if from < compacted {
            let ev = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": "too old resource version", "reason": "Expired", "code": 410}});
            return Response::new(Body::from(format!("{ev}\n")));
        }
        let api = self.clone();
        let rx = self.changed.subscribe();
        let stream = futures::stream::unfold((from, rx), move |(mut last, mut rx)| {
            let api = api.clone();
            let selector = selector.clone();
            async move {
                loop {
                    let (next, lag, dropped) = {
                        let g = api.inner.lock();
                        let dropped = g.drop_gen != gen0;
                        let next = g.log.iter().find(|e| e.rv > last && e.res == res).map(|e| {
                            let now_in = !e.deleted && matches(selector.as_deref(), &e.obj);
                            let was_in = e
                                .prev
                                .as_ref()
                                .is_some_and(|p| matches(selector.as_deref(), p));
                            let ty = match (was_in, now_in, e.deleted) {
                                (_, _, true) if matches(selector.as_deref(), &e.obj) => {
                                    Some("DELETED")
                                }
                                (_, _, true) => None,
                                (false, true, _) => Some("ADDED"),
                                (true, true, _) => Some("MODIFIED"),
                                (true, false, _) => Some("DELETED"),
                                (false, false, _) => None,
                            };
                            (e.rv, ty.map(|t| json!({"type": t, "object": e.obj})))
                        });
                        (next, g.run_watch_lag, dropped)
                    };
                    if dropped {
                        return None;
                    }
                    match next {
                        Some((rv, ev)) => {
                            last = rv;
                            if let Some(ev) = ev {
                                if res == Res::Runs && !lag.is_zero() {
                                    tokio::time::sleep(lag).await;
                                }
                                return Some((
                                    Ok::<_, Infallible>(Bytes::from(format!("{ev}\n"))),
                                    (last, rx),
                                ));
                            }
                        }
                        None => {
                            let woke =
                                tokio::time::timeout(Duration::from_millis(500), rx.changed())
                                    .await;
                            if woke.is_err() && bookmarks {
                                let rv = api.inner.lock().rv;
                                let ev = json!({"type": "BOOKMARK", "object": {"apiVersion": res.api_version(),
                                    "kind": res.kind(), "metadata": {"resourceVersion": rv.to_string()}}});
                                return Some((Ok(Bytes::from(format!("{ev}\n"))), (last, rx)));
                            }
                            if let Ok(Err(_)) = woke {
                                return None;
                            }
                        }
                    }
                }
            }
        });
        Response::new(Body::from_stream(stream))
    }
}

async fn list_or_watch(api: FakeApi, res: Res, params: HashMap<String, String>) -> Response {
    if api.inner.lock().unserved.contains(&res) {
        return status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
    }
    if api.inner.lock().failing.contains(&res) {
        return status(500, "InternalError", "injected: the list or watch failed");
    }
    if params.get("watch").is_some_and(|w| w == "true" || w == "1") {
        api.watch_response(res, &params)
    } else {
        api.list_response(res, &params)
    }
}

/// `PATCH resourceclaims/{name}/status` (JSON merge patch): `metadata.uid`
/// and `metadata.resourceVersion` in the patch are preconditions (409);
/// only `status` is changed.
async fn patch_claim_status(
    State(api): State<FakeApi>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let merge_patch = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("application/merge-patch+json"));
    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
        return status(400, "BadRequest", "invalid patch");
    };
    if !merge_patch {
        return status(415, "UnsupportedMediaType", "expected a merge patch");
    }
    let mut g = api.inner.lock();
    let key = (Res::ResourceClaims, ns.clone(), name.clone());
    let Some(cur) = g.objects.get(&key).cloned() else {
        return status(
            404,
            "NotFound",
            &format!("resourceclaims.resource.k8s.io \"{name}\" not found"),
        );
    };
    for field in ["uid", "resourceVersion"] {
        if let Some(want) = patch
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_str)
            && cur
                .pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_str)
                != Some(want)
        {
            return status(
                409,
                "Conflict",
                &format!(
                    "Operation cannot be fulfilled on resourceclaims.resource.k8s.io \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
                ),
            );
        }
    }
    let mut obj = cur.clone();
    if let Some(st) = patch.get("status") {
        json_patch::merge(
            obj.as_object_mut()
                .unwrap()
                .entry("status")
                .or_insert(json!({})),
            st,
        );
    }
    g.rv += 1;
    obj["metadata"]["resourceVersion"] = json!(g.rv.to_string());
    g.claim_status_patches.push((format!("{ns}/{name}"), patch));
    g.objects.insert(key, obj.clone());
    api.record(&mut g, Res::ResourceClaims, false, Some(cur), obj.clone());
    axum::Json(obj).into_response()
}

/// `PATCH {podgroups,compositepodgroups}/{name}/status`: server-side apply
/// (conditions merged by type, as their `listType=map` says) or a JSON
/// merge patch.
fn patch_group_status(
    api: FakeApi,
    res: Res,
    ns: String,
    name: String,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
        return status(400, "BadRequest", "invalid patch");
    };
    let Some(mut cur) = api.get(res, &ns, &name) else {
        return status(
            404,
            "NotFound",
            &format!("{} \"{name}\" not found", res.qualified()),
        );
    };
    let apply = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.contains("apply-patch"));
    if apply {
        let mut conds: Vec<Value> = cur
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for c in patch
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match conds.iter_mut().find(|x| x["type"] == c["type"]) {
                Some(x) => *x = c.clone(),
                None => conds.push(c.clone()),
            }
        }
        cur["status"]["conditions"] = json!(conds);
    } else if let Some(s) = patch.get("status") {
        json_patch::merge(
            cur.as_object_mut()
                .unwrap()
                .entry("status")
                .or_insert(json!({})),
            s,
        );
    }
    axum::Json(api.put(res, cur)).into_response()
}

/// `POST pods/{name}/binding`: the pod must exist, have the Binding's
/// `metadata.uid` (when given) and no node yet; sets `spec.nodeName` and
/// copies the Binding's annotations onto the pod.
async fn create_binding(
    State(api): State<FakeApi>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let Ok(b) = serde_json::from_slice::<Value>(&body) else {
        return status(400, "BadRequest", "invalid binding");
    };
    let Some(mut pod) = api.get(Res::Pods, &ns, &name) else {
        return status(404, "NotFound", &format!("pods \"{name}\" not found"));
    };
    let uid = pod
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if let Some(want) = b.pointer("/metadata/uid").and_then(Value::as_str)
        && !want.is_empty()
        && want != uid
    {
        return status(
            409,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on pods/binding \"{name}\": Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"
            ),
        );
    }
    if let Some(node) = pod.pointer("/spec/nodeName").and_then(Value::as_str) {
        return status(
            409,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on pods/binding \"{name}\": pod {name} is already assigned to node \"{node}\""
            ),
        );
    }
    let Some(node) = b.pointer("/target/name").and_then(Value::as_str) else {
        return status(400, "BadRequest", "target.name: Required value");
    };
    pod["spec"]["nodeName"] = json!(node);
    // As the API server's binding storage does (setPodNodeAndMetadata):
    // the Binding's annotations are copied onto the pod in the same write.
    if let Some(annotations) = b
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
    {
        for (k, v) in annotations {
            pod["metadata"]["annotations"][k] = v.clone();
        }
    }
    api.inner
        .lock()
        .bindings
        .push((format!("{ns}/{name}"), node.to_owned()));
    api.put(Res::Pods, pod);
    let ok = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});
    (StatusCode::CREATED, axum::Json(ok)).into_response()
}

/// `POST pods/{name}/eviction`, as the API server's eviction REST answers:
/// the body must be a `policy/v1` Eviction naming the pod of the path
/// (400 otherwise); 404 for a missing pod; 409 when
/// `deleteOptions.preconditions.uid` is not the pod's; 429 with a
/// `TooManyRequests` Status (cause `DisruptionBudget`) while
/// [`Inner::pdb_refusals`] holds refusals for it; else 201 and the pod is
/// deleted.
async fn create_eviction(
    State(api): State<FakeApi>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let Ok(ev) = serde_json::from_slice::<Value>(&body) else {
        return status(400, "BadRequest", "invalid eviction");
    };
    let key = format!("{ns}/{name}");
    let answer = |code: u16, resp: Response| {
        api.inner
            .lock()
            .evictions
            .push((key.clone(), code, ev.clone()));
        resp
    };
    if ev["kind"] != "Eviction" || ev["apiVersion"] != "policy/v1" {
        return answer(
            400,
            status(400, "BadRequest", "the body is not a policy/v1 Eviction"),
        );
    }
    if ev.pointer("/metadata/name").and_then(Value::as_str) != Some(name.as_str()) {
        return answer(
            400,
            status(
                400,
                "BadRequest",
                "name in URL does not match name in Eviction object",
            ),
        );
    }
    let Some(pod) = api.get(Res::Pods, &ns, &name) else {
        return answer(
            404,
            status(404, "NotFound", &format!("pods \"{name}\" not found")),
        );
    };
    let uid = pod
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if let Some(want) = ev
        .pointer("/deleteOptions/preconditions/uid")
        .and_then(Value::as_str)
        && want != uid
    {
        return answer(
            409,
            status(
                409,
                "Conflict",
                &format!(
                    "Operation cannot be fulfilled on Pod \"{name}\": Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"
                ),
            ),
        );
    }
    let refused = {
        let mut g = api.inner.lock();
        match g.pdb_refusals.get_mut(&key) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    };
    if refused {
        let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "reason": "TooManyRequests", "code": 429,
            "details": {"causes": [{"reason": "DisruptionBudget",
                "message": "The disruption budget pdb needs 3 healthy pods and has 3 currently"}]}});
        return answer(
            429,
            (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response(),
        );
    }
    api.delete(Res::Pods, &ns, &name);
    let ok = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});
    answer(201, (StatusCode::CREATED, axum::Json(ok)).into_response())
}

async fn patch_run_status(
    State(api): State<FakeApi>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
        return status(400, "BadRequest", "invalid patch");
    };
    let mut g = api.inner.lock();
    let key = (Res::Runs, ns.clone(), name.clone());
    let Some(cur) = g.objects.get(&key).cloned() else {
        return status(
            404,
            "NotFound",
            &format!("runs.kruntimes.io \"{name}\" not found"),
        );
    };
    if g.fail_status_patches > 0 {
        g.fail_status_patches -= 1;
        g.conflicts += 1;
        return status(
            409,
            "Conflict",
            "Operation cannot be fulfilled: injected conflict",
        );
    }
    if let Some(want) = patch
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        && cur
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            != Some(want)
    {
        g.conflicts += 1;
        return status(
            409,
            "Conflict",
            "Operation cannot be fulfilled on runs.kruntimes.io: the object has been modified",
        );
    }
    let mut obj = cur.clone();
    if let Some(s) = patch.get("status") {
        json_patch::merge(
            obj.as_object_mut()
                .unwrap()
                .entry("status")
                .or_insert(json!({})),
            s,
        );
    }
    prune::prune_object(prune::run_schema(), &mut obj);
    g.rv += 1;
    obj["metadata"]["resourceVersion"] = json!(g.rv.to_string());
    g.status_writes
        .push((format!("{ns}/{name}"), obj["status"].clone()));
    g.objects.insert(key, obj.clone());
    api.record(&mut g, Res::Runs, false, Some(cur), obj.clone());
    axum::Json(obj).into_response()
}

async fn create_event(State(api): State<FakeApi>, Path(ns): Path<String>, body: Bytes) -> Response {
    let Ok(mut ev) = serde_json::from_slice::<Value>(&body) else {
        return status(400, "BadRequest", "invalid event");
    };
    ev["metadata"]["namespace"] = json!(ns);
    let stored = api.put(Res::Events, ev);
    (StatusCode::CREATED, axum::Json(stored)).into_response()
}

async fn patch_event(
    State(api): State<FakeApi>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let Some(mut cur) = api.get(Res::Events, &ns, &name) else {
        return status(404, "NotFound", "event not found");
    };
    if let Ok(p) = serde_json::from_slice::<Value>(&body) {
        json_patch::merge(&mut cur, &p);
    }
    axum::Json(api.put(Res::Events, cur)).into_response()
}

/// Every Lease request fails while `fail_leases` is set.
async fn lease_faults(
    State(api): State<FakeApi>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if api.inner.lock().fail_leases {
        return status(500, "InternalError", "injected: the Lease API failed");
    }
    next.run(req).await
}

async fn get_lease(
    State(api): State<FakeApi>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    get_one(&api, Res::Leases, "leases.coordination.k8s.io", &ns, &name)
}

async fn create_lease(State(api): State<FakeApi>, Path(ns): Path<String>, body: Bytes) -> Response {
    let Ok(mut lease) = serde_json::from_slice::<Value>(&body) else {
        return status(400, "BadRequest", "invalid lease");
    };
    let name = lease
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if api.get(Res::Leases, &ns, &name).is_some() {
        return status(409, "AlreadyExists", "lease already exists");
    }
    lease["metadata"]["namespace"] = json!(ns);
    (StatusCode::CREATED, axum::Json(api.put(Res::Leases, lease))).into_response()
}

async fn put_lease(
    State(api): State<FakeApi>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let Ok(mut lease) = serde_json::from_slice::<Value>(&body) else {
        return status(400, "BadRequest", "invalid lease");
    };
    if let Some(cur) = api.get(Res::Leases, &ns, &name)
        && lease.pointer("/metadata/resourceVersion") != cur.pointer("/metadata/resourceVersion")
    {
        return status(409, "Conflict", "the object has been modified");
    }
    lease["metadata"]["namespace"] = json!(ns);
    axum::Json(api.put(Res::Leases, lease)).into_response()
}

async fn patch_lease(
    State(api): State<FakeApi>,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
        return status(400, "BadRequest", "invalid patch");
    };
    let apply = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.contains("apply-patch"));
    let manager = q.get("fieldManager").cloned().unwrap_or_default();
    let key = (ns.clone(), name.clone());
    let cur = api.get(Res::Leases, &ns, &name);
    let mut lease = match cur.clone() {
        Some(l) => l,
        None if apply => json!({"metadata": {"name": name, "namespace": ns}, "spec": {}}),
        None => return status(404, "NotFound", "lease not found"),
    };
    let sets_holder = patch.pointer("/spec/holderIdentity");
    {
        let mut g = api.inner.lock();
        let holder = lease
            .pointer("/spec/holderIdentity")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if apply
            && let (Some(new), Some(holder)) =
                (sets_holder.and_then(Value::as_str), holder.as_deref())
            && new != holder
            && g.lease_owner.get(&key).is_some_and(|o| *o != manager)
        {
            return status(
                409,
                "Conflict",
                "Apply failed with 1 conflict: conflict with another manager: .spec.holderIdentity",
            );
        }
        match sets_holder {
            Some(Value::Null) => {
                g.lease_owner.remove(&key);
            }
            Some(_) => {
                g.lease_owner.insert(key, manager);
            }
            None => {}
        }
    }
    let mut p = patch.clone();
    if let Some(o) = p.as_object_mut() {
        o.remove("apiVersion");
        o.remove("kind");
    }
    json_patch::merge(&mut lease, &p);
    axum::Json(api.put(Res::Leases, lease)).into_response()
}

// === request recording (RBAC checks) ===

/// One request as the API server's authorizer sees it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Request {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// API group (`""` for the core group).
    pub group: String,
    pub resource: String,
    /// `status`, `binding`, `eviction`, ... or `""`.
    pub subresource: String,
    /// `""` for cluster-scoped requests and requests across all namespaces.
    pub namespace: String,
    /// `""` for collection requests.
    pub name: String,
}

impl Request {
    /// Decodes a resource request path (`/api/v1/...`, `/apis/G/V/...`) and
    /// method into the authorizer's attributes; `None` for non-resource paths.
    pub fn parse(method: &str, path: &str, query: Option<&str>) -> Option<Request> {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, rest) = match segs.as_slice() {
            ["api", _v, rest @ ..] => ("", rest),
            ["apis", g, _v, rest @ ..] => (*g, rest),
            _ => return None,
        };
        let (namespace, rest) = match rest {
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (*ns, rest),
            _ => ("", rest),
        };
        let resource = rest.first()?;
        let name = rest.get(1).copied().unwrap_or("");
        let subresource = rest.get(2).copied().unwrap_or("");
        let watch =
            query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
        let verb = match (method, name.is_empty()) {
            ("GET", true) if watch => "watch",
            ("GET", true) => "list",
            ("GET", false) => "get",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", true) => "deletecollection",
            ("DELETE", false) => "delete",
            _ => return None,
        };
        Some(Request {
            verb: verb.into(),
            group: group.into(),
            resource: (*resource).into(),
            subresource: subresource.into(),
            namespace: namespace.into(),
            name: name.into(),
        })
    }
}

async fn record_request(
    State(api): State<FakeApi>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(r) = Request::parse(req.method().as_str(), req.uri().path(), req.uri().query()) {
        api.inner.lock().requests.push(r);
    }
    next.run(req).await
}

// === TokenReview and SubjectAccessReview ===

async fn token_review(State(api): State<FakeApi>, body: Bytes) -> Response {
    let mut review: Value = serde_json::from_slice(&body).unwrap_or_default();
    let token = review["spec"]["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let user = api.inner.lock().tokens.get(&token).cloned();
    review["status"] = match user {
        Some(u) => {
            json!({"authenticated": true, "user": {"username": u, "groups": ["system:authenticated"]}})
        }
        None => json!({"authenticated": false, "error": "invalid bearer token"}),
    };
    (StatusCode::CREATED, axum::Json(review)).into_response()
}

async fn subject_access_review(State(api): State<FakeApi>, body: Bytes) -> Response {
    let mut review: Value = serde_json::from_slice(&body).unwrap_or_default();
    let spec = &review["spec"];
    let user = spec["user"].as_str().unwrap_or_default().to_owned();
    let what = if let Some(r) = spec.get("resourceAttributes") {
        format!(
            "{} {}.{}",
            r["verb"].as_str().unwrap_or_default(),
            r["resource"].as_str().unwrap_or_default(),
            r["group"].as_str().unwrap_or_default()
        )
    } else {
        let n = &spec["nonResourceAttributes"];
        format!(
            "{} {}",
            n["verb"].as_str().unwrap_or_default(),
            n["path"].as_str().unwrap_or_default()
        )
    };
    let allowed = api.inner.lock().grants.contains(&(user, what));
    review["status"] = json!({"allowed": allowed});
    (StatusCode::CREATED, axum::Json(review)).into_response()
}

// === Secrets, webhook configurations, ClusterRoles ===
//
// For self-managed webhook certificates: Secrets (get; create answering
// 409 AlreadyExists; update with a resourceVersion precondition answering
// 409 Conflict), Validating/MutatingWebhookConfigurations (server-side
// apply PATCH with fieldManager and force, get, delete) and ClusterRoles
// (get). No garbage collector: tests assert the ownerReference.

/// Counters and fault injection of this section.
#[derive(Default)]
pub struct WebhookState {
    /// Secrets created (201).
    pub secret_creates: usize,
    /// Secret creates refused with 409 AlreadyExists.
    pub secret_create_conflicts: usize,
    /// Secrets updated (200).
    pub secret_updates: usize,
    /// Secret updates refused with 409 Conflict.
    pub secret_update_conflicts: usize,
    /// Each Secret POST waits on this barrier first, so racing creators
    /// all pass their GET before any create lands.
    pub create_gate: Option<Arc<tokio::sync::Barrier>>,
    /// Each Secret PUT waits on this barrier first, so racing updaters all
    /// send the same resourceVersion.
    pub update_gate: Option<Arc<tokio::sync::Barrier>>,
    /// Every accepted apply: (kind, name, fieldManager, force).
    pub applies: Vec<(Res, String, String, bool)>,
    /// Field manager of each configuration (one manager owns all fields).
    managers: HashMap<(Res, String), String>,
}

fn webhook_routes() -> Router<FakeApi> {
    Router::new()
        .route(
            "/api/v1/namespaces/{ns}/secrets",
            axum::routing::post(create_secret),
        )
        .route(
            "/api/v1/namespaces/{ns}/secrets/{name}",
            get(get_secret).put(put_secret),
        )
        .route(
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{name}",
            get(get_validating)
                .patch(apply_validating)
                .delete(delete_validating),
        )
        .route(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}",
            get(get_mutating)
                .patch(apply_mutating)
                .delete(delete_mutating),
        )
        .route(
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}",
            get(get_cluster_role),
        )
}

impl FakeApi {
    /// Stores a cluster-scoped object (key namespace ""), assigning uid and
    /// resourceVersion; keeps the uid and creationTimestamp of a previous version.
    pub fn put_cluster(&self, res: Res, mut obj: Value) -> Value {
        let mut g = self.inner.lock();
        g.rv += 1;
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap()
            .to_owned();
        let key = (res, String::new(), name.clone());
        let prev = g.objects.get(&key).cloned();
        obj["apiVersion"] = json!(res.api_version());
        obj["kind"] = json!(res.kind());
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        let uid = prev
            .as_ref()
            .and_then(|p| p.pointer("/metadata/uid").cloned())
            .unwrap_or_else(|| json!(format!("uid-{}-{}-{}", res.kind(), name, g.rv)));
        obj["metadata"]["uid"] = uid;
        obj["metadata"]["creationTimestamp"] = prev
            .as_ref()
            .and_then(|p| p.pointer("/metadata/creationTimestamp").cloned())
            .unwrap_or_else(|| json!("2026-01-01T00:00:00Z"));
        obj["metadata"]["resourceVersion"] = json!(g.rv.to_string());
        g.objects.insert(key, obj.clone());
        self.record(&mut g, res, false, prev, obj.clone());
        obj
    }

    /// Adds a ClusterRole and returns its uid.
    pub fn add_cluster_role(&self, name: &str) -> String {
        let obj = self.put_cluster(
            Res::ClusterRoles,
            json!({"metadata": {"name": name}, "rules": []}),
        );
        obj["metadata"]["uid"].as_str().unwrap().to_owned()
    }

    /// A cluster-scoped object.
    pub fn get_cluster(&self, res: Res, name: &str) -> Option<Value> {
        self.get(res, "", name)
    }
}

fn not_found(res: Res, name: &str) -> Response {
    let plural = match res {
        Res::Secrets => "secrets",
        Res::ValidatingWebhookConfigurations => {
            "validatingwebhookconfigurations.admissionregistration.k8s.io"
        }
        Res::MutatingWebhookConfigurations => {
            "mutatingwebhookconfigurations.admissionregistration.k8s.io"
        }
        Res::ClusterRoles => "clusterroles.rbac.authorization.k8s.io",
        _ => "objects",
    };
    status(404, "NotFound", &format!("{plural} \"{name}\" not found"))
}

async fn get_secret(
    State(api): State<FakeApi>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    match api.get(Res::Secrets, &ns, &name) {
        Some(s) => axum::Json(s).into_response(),
        None => not_found(Res::Secrets, &name),
    }
}

/// `POST secrets`: 409 AlreadyExists when the name is taken.
async fn create_secret(
    State(api): State<FakeApi>,
    Path(ns): Path<String>,
    body: Bytes,
) -> Response {
    let Ok(mut obj) = serde_json::from_slice::<Value>(&body) else {
        return status(400, "BadRequest", "invalid Secret");
    };
    let Some(name) = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return status(422, "Invalid", "metadata.name: Required value");
    };
    let gate = api.inner.lock().webhooks.create_gate.clone();
    if let Some(gate) = gate {
        gate.wait().await;
    }
    {
        let mut g = api.inner.lock();
        if g.objects
            .contains_key(&(Res::Secrets, ns.clone(), name.clone()))
        {
            g.webhooks.secret_create_conflicts += 1;
            return status(
                409,
                "AlreadyExists",
                &format!("secrets \"{name}\" already exists"),
            );
        }
        g.webhooks.secret_creates += 1;
    }
    obj["metadata"]["namespace"] = json!(ns);
    (StatusCode::CREATED, axum::Json(api.put(Res::Secrets, obj))).into_response()
}

/// `PUT secrets/{name}`: `metadata.resourceVersion` is a precondition (409);
/// the type is immutable (422).
async fn put_secret(
    State(api): State<FakeApi>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let Ok(mut obj) = serde_json::from_slice::<Value>(&body) else {
        return status(400, "BadRequest", "invalid Secret");
    };
    let gate = api.inner.lock().webhooks.update_gate.clone();
    if let Some(gate) = gate {
        gate.wait().await;
    }
    {
        let mut g = api.inner.lock();
        let Some(cur) = g.objects.get(&(Res::Secrets, ns.clone(), name.clone())) else {
            return not_found(Res::Secrets, &name);
        };
        let cur_rv = cur.pointer("/metadata/resourceVersion").cloned();
        let cur_type = cur.get("type").cloned();
        if let Some(want) = obj.pointer("/metadata/resourceVersion")
            && Some(want) != cur_rv.as_ref()
        {
            g.webhooks.secret_update_conflicts += 1;
            return status(
                409,
                "Conflict",
                &format!(
                    "Operation cannot be fulfilled on secrets \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
                ),
            );
        }
        if obj.get("type").is_some() && obj.get("type") != cur_type.as_ref() {
            return status(422, "Invalid", "type: Invalid value: field is immutable");
        }
        g.webhooks.secret_updates += 1;
    }
    obj["metadata"]["namespace"] = json!(ns);
    axum::Json(api.put(Res::Secrets, obj)).into_response()
}

async fn get_cluster_object(api: FakeApi, res: Res, name: String) -> Response {
    match api.get_cluster(res, &name) {
        Some(o) => axum::Json(o).into_response(),
        None => not_found(res, &name),
    }
}

async fn get_cluster_role(State(api): State<FakeApi>, Path(name): Path<String>) -> Response {
    get_cluster_object(api, Res::ClusterRoles, name).await
}

async fn get_validating(State(api): State<FakeApi>, Path(name): Path<String>) -> Response {
    get_cluster_object(api, Res::ValidatingWebhookConfigurations, name).await
}

async fn get_mutating(State(api): State<FakeApi>, Path(name): Path<String>) -> Response {
    get_cluster_object(api, Res::MutatingWebhookConfigurations, name).await
}

async fn delete_cluster_object(api: FakeApi, res: Res, name: String) -> Response {
    if api.get_cluster(res, &name).is_none() {
        return not_found(res, &name);
    }
    api.delete(res, "", &name);
    let ok = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "details": {"name": name, "kind": res.kind()}});
    axum::Json(ok).into_response()
}

async fn delete_validating(State(api): State<FakeApi>, Path(name): Path<String>) -> Response {
    delete_cluster_object(api, Res::ValidatingWebhookConfigurations, name).await
}

async fn delete_mutating(State(api): State<FakeApi>, Path(name): Path<String>) -> Response {
    delete_cluster_object(api, Res::MutatingWebhookConfigurations, name).await
}

async fn apply_validating(
    State(api): State<FakeApi>,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    apply_config(
        api,
        Res::ValidatingWebhookConfigurations,
        name,
        q,
        headers,
        body,
    )
}

async fn apply_mutating(
    State(api): State<FakeApi>,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    apply_config(
        api,
        Res::MutatingWebhookConfigurations,
        name,
        q,
        headers,
        body,
    )
}

/// Server-side apply of a whole webhook configuration: only
/// `application/apply-patch+yaml` (415 otherwise), `fieldManager` required
/// (400), the body's kind and name must match (400). The applied fields
/// (labels, ownerReferences, webhooks) replace those of the previous
/// apply; another manager's object needs `force=true` (409 otherwise).
fn apply_config(
    api: FakeApi,
    res: Res,
    name: String,
    q: HashMap<String, String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let apply = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("application/apply-patch+yaml"));
    if !apply {
        return status(
            415,
            "UnsupportedMediaType",
            "only server-side apply is served here",
        );
    }
    let Some(manager) = q.get("fieldManager").filter(|m| !m.is_empty()).cloned() else {
        return status(
            400,
            "BadRequest",
            "fieldManager is required for apply requests",
        );
    };
    let force = q.get("force").is_some_and(|f| f == "true");
    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
        return status(400, "BadRequest", "invalid apply body");
    };
    if patch["kind"] != json!(res.kind())
        || patch["apiVersion"] != json!(res.api_version())
        || patch.pointer("/metadata/name") != Some(&json!(name))
    {
        return status(
            400,
            "BadRequest",
            "apiVersion, kind and metadata.name must match the request",
        );
    }
    {
        let mut g = api.inner.lock();
        let key = (res, name.clone());
        if let Some(owner) = g.webhooks.managers.get(&key)
            && *owner != manager
            && !force
        {
            return status(
                409,
                "Conflict",
                &format!("Apply failed with 1 conflict: conflict with \"{owner}\": .webhooks"),
            );
        }
        g.webhooks.managers.insert(key, manager.clone());
        g.webhooks.applies.push((res, name.clone(), manager, force));
    }
    let mut obj = api
        .get_cluster(res, &name)
        .unwrap_or_else(|| json!({"metadata": {"name": name}}));
    for field in ["labels", "annotations", "ownerReferences"] {
        match patch["metadata"].get(field) {
            Some(v) => obj["metadata"][field] = v.clone(),
            None => {
                if let Some(m) = obj["metadata"].as_object_mut() {
                    m.remove(field);
                }
            }
        }
    }
    obj["webhooks"] = patch.get("webhooks").cloned().unwrap_or(json!([]));
    axum::Json(api.put_cluster(res, obj)).into_response()
}
