//! The agent's HTTP/1.1 API over a unix socket. Handlers decode, call
//! [`Agent`], encode; the JSON error shape is the service's
//! ([`crate::transport`]).
//!
//! Every connection carries its peer's credentials (`SO_PEERCRED`, read
//! once at accept); a request from a peer whose uid and gid are both outside
//! the [`PeerPolicy`] is refused with 403 before any handler runs.

use super::metrics::Refusal;
use super::{Agent, HoldView, Reservation, ReserveError, ReserveRequest};
use crate::transport::MAX_BODY_BYTES;
use crate::transport::parse_duration;
use crate::transport::{ApiError, JsonBody, Params};
use axum::Json;
use axum::Router;
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::{Path as UrlPath, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use serde_json::json;
use std::collections::BTreeSet;
use std::future::Future;
use std::os::unix::fs::{
    DirBuilderExt as _, FileTypeExt as _, MetadataExt as _, PermissionsExt as _,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::UnixListener;

/// The credentials of the process at the other end of a connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Peer {
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub pid: Option<i32>,
}

impl Connected<axum::serve::IncomingStream<'_, UnixListener>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, UnixListener>) -> Self {
        match stream.io().peer_cred() {
            Ok(c) => Peer {
                uid: Some(c.uid()),
                gid: Some(c.gid()),
                pid: c.pid(),
            },
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the peer credentials of a connection; refusing it");
                Peer::default()
            }
        }
    }
}

/// Which peers may use the socket: a peer is allowed when its uid or its
/// gid is listed. A peer whose credentials cannot be read is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerPolicy {
    pub uids: BTreeSet<u32>,
    pub gids: BTreeSet<u32>,
}

impl PeerPolicy {
    /// Only the uid owning the socket file (the agent's own).
    pub fn owner_only(socket: &BoundSocket) -> Self {
        PeerPolicy {
            uids: [socket.owner_uid()].into(),
            gids: BTreeSet::new(),
        }
    }

    pub fn allows(&self, peer: &Peer) -> bool {
        peer.uid.is_some_and(|u| self.uids.contains(&u))
            || peer.gid.is_some_and(|g| self.gids.contains(&g))
    }
}

/// Why the socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("{path}: another agent is listening on this socket")]
    InUse { path: PathBuf },
    #[error("{path}: exists and is not a socket; refusing to replace it")]
    NotASocket { path: PathBuf },
    #[error(
        "{dir}: the socket directory is writable by group or others (mode {mode:o}); refusing to serve from it (use a directory only the agent can write, e.g. a subdirectory the agent creates)"
    )]
    InsecureDir { dir: PathBuf, mode: u32 },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A listening socket and the file it owns; the file is removed when this
/// is dropped, unless another process has replaced it meanwhile.
pub struct BoundSocket {
    listener: UnixListener,
    file: SocketFile,
}

impl BoundSocket {
    pub fn path(&self) -> &Path {
        &self.file.path
    }

    /// The uid owning the socket file: the agent's own.
    pub fn owner_uid(&self) -> u32 {
        self.file.uid
    }
}

struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
    uid: u32,
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if let Ok(m) = std::fs::symlink_metadata(&self.path)
            && m.dev() == self.dev
            && m.ino() == self.ino
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Makes sure no one but the agent (and root) can write the socket's
/// directory: a missing one is created with mode 0750; one writable by
/// group or others is tightened when the agent owns it and it is not a
/// shared sticky directory (such as `/tmp`), and refused otherwise.
fn secure_dir(dir: &Path) -> Result<(), SocketError> {
    let io = |source| SocketError::Io {
        path: dir.to_owned(),
        source,
    };
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o750)
                .create(dir)
                .map_err(io);
        }
        Err(e) => return Err(io(e)),
    };
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 == 0 {
        return Ok(());
    }
    let own = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    if mode & 0o1000 == 0 && own == Some(meta.uid()) {
        let tightened = mode & !0o022;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(tightened)).map_err(io)?;
        tracing::info!(dir = %dir.display(), from = format!("{mode:o}"), to = format!("{tightened:o}"), "socket directory made writable by its owner only");
        return Ok(());
    }
    Err(SocketError::InsecureDir {
        dir: dir.to_owned(),
        mode,
    })
}

/// Binds the socket with mode 0660 in a directory only the agent can write
/// (see [`secure_dir`]). A socket file nobody listens on (left by a crashed
/// agent) is replaced; a live one is not stolen; a path that is not a
/// socket is never removed. Must run inside a tokio runtime.
pub fn bind(path: &Path) -> Result<BoundSocket, SocketError> {
    let io = |source| SocketError::Io {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        secure_dir(dir)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => {
                return Err(SocketError::InUse {
                    path: path.to_owned(),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                tracing::info!(path = %path.display(), "replacing a stale agent socket");
                std::fs::remove_file(path).map_err(io)?;
            }
            Err(e) => return Err(io(e)),
        },
        Ok(_) => {
            return Err(SocketError::NotASocket {
                path: path.to_owned(),
            });
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    let listener = UnixListener::bind(path).map_err(io)?;
    let meta = std::fs::symlink_metadata(path).map_err(io)?;
    let file = SocketFile {
        path: path.to_owned(),
        dev: meta.dev(),
        ino: meta.ino(),
        uid: meta.uid(),
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(io)?;
    Ok(BoundSocket { listener, file })
}

/// Serves until `shutdown` completes; then waiting callers are answered,
/// in-flight requests finish, and the socket file is removed.
pub async fn serve(
    socket: BoundSocket,
    agent: Arc<Agent>,
    policy: PeerPolicy,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let BoundSocket { listener, file } = socket;
    let closer = Arc::clone(&agent);
    let app = router(agent, policy).into_make_service_with_connect_info::<Peer>();
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            closer.close();
        })
        .await;
    drop(file);
    result
}

/// The agent's router. It needs [`Peer`] connect info: serve it with
/// `into_make_service_with_connect_info::<Peer>()` (as [`serve`] does).
pub fn router(agent: Arc<Agent>, policy: PeerPolicy) -> Router {
    let guard = Arc::new((policy, Arc::clone(&agent)));
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/v1/reservations", get(status).post(reserve))
        .route("/v1/reservations/{uid}", delete(release))
        .fallback(crate::transport::not_found)
        .method_not_allowed_fallback(crate::transport::method_not_allowed)
        .layer(crate::transport::body_limit(crate::transport::BodyLimit {
            bytes: MAX_BODY_BYTES,
            of: "the agent",
        }))
        .layer(axum::middleware::from_fn_with_state(guard, authorize))
        .with_state(agent)
}

/// Refuses peers outside the policy, before routing.
async fn authorize(
    State(guard): State<Arc<(PeerPolicy, Arc<Agent>)>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    req: Request,
    next: Next,
) -> Response {
    let (policy, agent) = &*guard;
    if policy.allows(&peer) {
        let mut req = req;
        req.extensions_mut().insert(peer);
        return next.run(req).await;
    }
    agent.metrics().refused(Refusal::Peer);
    let who = match (peer.uid, peer.gid) {
        (Some(u), Some(g)) => format!("peer uid {u} gid {g}"),
        _ => "a peer whose credentials cannot be read".to_owned(),
    };
    tracing::warn!(uid = ?peer.uid, gid = ?peer.gid, pid = ?peer.pid, "refused a caller not allowed on the agent socket");
    ApiError::new(
        StatusCode::FORBIDDEN,
        format!("{who} is not allowed on this socket (--runtimed-uid, --allow-uid, --allow-gid)"),
    )
    .into_response()
}

/// The metrics alone, for the optional TCP listener (no peer credentials
/// there; metrics carry no names unless the operator allows them).
pub fn metrics_router(agent: Arc<Agent>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .fallback(crate::transport::not_found)
        .with_state(agent)
}

async fn metrics(State(agent): State<Arc<Agent>>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        agent.metrics_text(),
    )
        .into_response()
}

/// Probe mode: asks the agent on `path` for `/readyz` with a bare HTTP/1.1
/// request. `Ok` when it answers 200.
pub async fn probe(path: &Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let work = async {
        let mut s = tokio::net::UnixStream::connect(path)
            .await
            .with_context(|| format!("connecting to {}", path.display()))?;
        s.write_all(b"GET /readyz HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")
            .await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        let text = String::from_utf8_lossy(&out);
        let status = text.lines().next().unwrap_or_default().to_owned();
        if status.split_whitespace().nth(1) == Some("200") {
            Ok(())
        } else {
            anyhow::bail!("{}: not ready: {status}", path.display())
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(5), work)
        .await
        .context("probe timed out")?
}

async fn readyz(State(agent): State<Arc<Agent>>) -> Response {
    if agent.is_synced() {
        "ok".into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "watches not synced").into_response()
    }
}

async fn status(State(agent): State<Arc<Agent>>) -> Response {
    Json(agent.status()).into_response()
}

async fn release(
    State(agent): State<Arc<Agent>>,
    axum::Extension(peer): axum::Extension<Peer>,
    UrlPath(uid): UrlPath<String>,
) -> Result<StatusCode, ApiError> {
    agent.release(&uid, peer.uid).map_err(reserve_error)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn reserve(
    State(agent): State<Arc<Agent>>,
    axum::Extension(peer): axum::Extension<Peer>,
    params: Params,
    JsonBody(req): JsonBody<ReserveRequest>,
) -> Result<Response, ApiError> {
    let wait = match params.get("wait") {
        Some(w) => {
            Some(parse_duration(w).map_err(|e| ApiError::bad_request(format!("wait: {e}")))?)
        }
        None => None,
    };
    let outcome = agent
        .reserve(req, wait, peer.uid)
        .await
        .map_err(reserve_error)?;
    Ok(match outcome {
        Reservation::Held(h) => (StatusCode::OK, Json(HoldView::from(&h))).into_response(),
        Reservation::Admitted(h) => (StatusCode::CREATED, Json(HoldView::from(&h))).into_response(),
        Reservation::Queued { run, info } => {
            let why = if !info.shortfall.is_empty() {
                let parts: Vec<String> = info
                    .shortfall
                    .iter()
                    .map(|(n, a)| format!("{n} short by {a}"))
                    .collect();
                let cap = if info.exceeds_capacity {
                    " (more than the pod's capacity)"
                } else {
                    ""
                };
                format!("does not fit: {}{cap}", parts.join(", "))
            } else if let Some(b) = &info.blocked_by {
                format!(
                    "fits, but waits behind {}/{} (uid {}), which was overtaken too often",
                    b.namespace, b.name, b.uid
                )
            } else {
                "waits for capacity".to_owned()
            };
            let body = json!({
                "error": format!("Run {}/{} {why}; queued at position {}", run.namespace, run.name, info.position),
                "uid": run.uid,
                "queued": true,
                "position": info.position,
                "shortfall": super::named(&info.shortfall),
                "blockedBy": info.blocked_by.map(|b| b.uid),
            });
            (StatusCode::CONFLICT, Json(body)).into_response()
        }
        Reservation::QueueFull { run, max } => {
            let body = json!({
                "error": format!("Run {}/{} does not fit and the queue is full ({max} Runs wait already); retry later", run.namespace, run.name),
                "uid": run.uid,
                "queued": false,
            });
            (StatusCode::TOO_MANY_REQUESTS, Json(body)).into_response()
        }
        Reservation::Dropped { run, why } => {
            let body = json!({
                "error": format!("Run {}/{} left the queue: {}", run.namespace, run.name, why.as_str()),
                "uid": run.uid,
                "queued": false,
            });
            (StatusCode::CONFLICT, Json(body)).into_response()
        }
    })
}

fn reserve_error(e: ReserveError) -> ApiError {
    let status = match e {
        ReserveError::NotSynced => StatusCode::SERVICE_UNAVAILABLE,
        ReserveError::UnknownRun { .. } => StatusCode::NOT_FOUND,
        ReserveError::NotYours { .. } => StatusCode::FORBIDDEN,
        ReserveError::Empty { .. }
        | ReserveError::Namespace { .. }
        | ReserveError::Request(_)
        | ReserveError::Mismatch { .. }
        | ReserveError::WrongName { .. } => StatusCode::UNPROCESSABLE_ENTITY,
    };
    ApiError::new(status, e.to_string())
}
