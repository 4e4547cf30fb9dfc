//! The agent's HTTP/1.1 API over a unix socket. Handlers decode, call
//! [`Agent`], encode; the JSON error shape is the service's
//! ([`crate::http::error`]).

use super::{Agent, HoldView, Reservation, ReserveError, ReserveRequest};
use crate::http::MAX_BODY_BYTES;
use crate::http::error::{ApiError, JsonBody, Params};
use crate::serve::parse_duration;
use axum::Json;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use serde_json::json;
use std::future::Future;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::UnixListener;

/// Why the socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("{path}: another agent is listening on this socket")]
    InUse { path: PathBuf },
    #[error("{path}: exists and is not a socket; refusing to replace it")]
    NotASocket { path: PathBuf },
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
}

struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
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

/// Binds the socket with mode 0660. A socket file nobody listens on (left
/// by a crashed agent) is replaced; a live one is not stolen; a path that
/// is not a socket is never removed. Must run inside a tokio runtime.
pub fn bind(path: &Path) -> Result<BoundSocket, SocketError> {
    let io = |source| SocketError::Io {
        path: path.to_owned(),
        source,
    };
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
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(io)?;
    Ok(BoundSocket { listener, file })
}

/// Serves until `shutdown` completes; then waiting callers are answered,
/// in-flight requests finish, and the socket file is removed.
pub async fn serve(
    socket: BoundSocket,
    agent: Arc<Agent>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let BoundSocket { listener, file } = socket;
    let closer = Arc::clone(&agent);
    let result = axum::serve(listener, router(agent))
        .with_graceful_shutdown(async move {
            shutdown.await;
            closer.close();
        })
        .await;
    drop(file);
    result
}

/// The agent's router.
pub fn router(agent: Arc<Agent>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/v1/reservations", get(status).post(reserve))
        .route("/v1/reservations/{uid}", delete(release))
        .fallback(crate::http::not_found)
        .method_not_allowed_fallback(crate::http::method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(agent)
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

async fn release(State(agent): State<Arc<Agent>>, UrlPath(uid): UrlPath<String>) -> StatusCode {
    agent.release(&uid);
    StatusCode::NO_CONTENT
}

async fn reserve(
    State(agent): State<Arc<Agent>>,
    params: Params,
    JsonBody(req): JsonBody<ReserveRequest>,
) -> Result<Response, ApiError> {
    let wait = match params.get("wait") {
        Some(w) => {
            Some(parse_duration(w).map_err(|e| ApiError::bad_request(format!("wait: {e}")))?)
        }
        None => None,
    };
    let outcome = agent.reserve(req, wait).await.map_err(reserve_error)?;
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
        ReserveError::Empty { .. }
        | ReserveError::Namespace { .. }
        | ReserveError::Request(_)
        | ReserveError::Mismatch { .. }
        | ReserveError::WrongName { .. } => StatusCode::UNPROCESSABLE_ENTITY,
    };
    ApiError::new(status, e.to_string())
}
