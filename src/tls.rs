//! HTTPS serving with certificates reloaded while running.
//!
//! The serving certificate lives in an [`ArcSwap`] behind a rustls
//! [`ResolvesServerCert`]: the handshake path only loads a pointer, and a
//! reloader task swaps in a new [`CertifiedKey`] when the files change.
//!
//! Change detection reads the two files (following symlinks) once a second
//! and compares their bytes with the last pair it saw. That covers in-place
//! rewrites, renames over the files, and the Kubernetes Secret volume, where
//! `tls.crt` is a symlink to `..data/tls.crt` and an update swaps the
//! `..data` directory symlink atomically (watching the file paths' inodes
//! alone misses that). A new pair that does not parse, or whose key does
//! not match the certificate, is logged and the old certificate stays in
//! service.
//!
//! Only the `ring` provider is compiled in (see `Cargo.toml`), and the
//! server config names it explicitly, so no process-wide default is needed.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use parking_lot::Mutex;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt as _;
use tower_http::timeout::TimeoutBody;

pub mod park;

/// What errors name for a certificate held in memory.
const MEMORY_CERT: &str = "<in-memory certificate>";
/// What errors name for a key held in memory.
const MEMORY_KEY: &str = "<in-memory key>";

/// How often the certificate files are checked for changes.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(1);
/// A TLS handshake that takes longer than this is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// An HTTP/1 request whose headers take longer than this is dropped.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for open connections to finish.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// `--tls-cert` / `--tls-key`: TLS is on when both are given.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// PEM certificate chain to serve (leaf first); reloaded when it changes.
    #[arg(long, env = "KRS_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of the certificate (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "KRS_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

impl TlsArgs {
    /// Loads the certificate when TLS is configured (`None`: plain HTTP).
    /// A missing or broken file at startup is an error, not a panic.
    pub fn load(&self) -> Result<Option<TlsConfigHandle>, TlsError> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => TlsConfigHandle::from_files(cert, key).map(Some),
            (None, None) => Ok(None),
            _ => Err(TlsError::Incomplete),
        }
    }
}

/// Why a certificate pair could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Only one of `--tls-cert` and `--tls-key` was given.
    #[error("--tls-cert and --tls-key must be given together")]
    Incomplete,
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The certificate file holds no PEM certificate.
    #[error("{path}: no PEM certificate found ({detail})")]
    NoCertificate {
        /// The file.
        path: PathBuf,
        /// What the PEM parser said.
        detail: String,
    },
    /// The key file holds no usable PEM private key.
    #[error("{path}: no PEM private key found ({detail})")]
    NoKey {
        /// The file.
        path: PathBuf,
        /// What the PEM parser said.
        detail: String,
    },
    /// rustls refused the pair (unsupported key, key not matching the certificate).
    #[error("certificate {cert} with key {key}: {source}")]
    Rejected {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls said.
        source: rustls::Error,
    },
}

/// The serving certificate, swappable without locks on the handshake path.
#[derive(Debug)]
pub struct CertResolver {
    /// The certificate presented to every client.
    current: ArcSwap<CertifiedKey>,
}

impl CertResolver {
    /// A resolver presenting `key`.
    pub fn new(key: Arc<CertifiedKey>) -> Self {
        Self {
            current: ArcSwap::new(key),
        }
    }

    /// The certificate presented now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.load_full()
    }

    /// Presents `key` from the next handshake on.
    pub fn set(&self, key: Arc<CertifiedKey>) {
        self.current.store(key);
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// A rustls server configuration whose certificate follows two files.
#[derive(Clone, Debug)]
pub struct TlsConfigHandle {
    /// ALPN h2 + http/1.1, TLS 1.2 and 1.3, the resolver below.
    config: Arc<ServerConfig>,
    /// The swappable certificate.
    resolver: Arc<CertResolver>,
    /// The files and the bytes last seen in them; `None` for a certificate
    /// held in memory and set by its owner (see [`TlsConfigHandle::from_pem`]).
    files: Option<Arc<CertFiles>>,
}

#[derive(Debug)]
struct CertFiles {
    /// Certificate chain path.
    cert: PathBuf,
    /// Private key path.
    key: PathBuf,
    /// Contents of (cert, key) at the last load attempt.
    seen: Mutex<(Vec<u8>, Vec<u8>)>,
}

// === impl TlsConfigHandle ===

impl TlsConfigHandle {
    /// Loads the pair and builds the server configuration.
    pub fn from_files(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let (cert_bytes, key_bytes) = read_pair(cert, key)?;
        let certified = parse_pair(cert, key, &cert_bytes, &key_bytes)?;
        let files = CertFiles {
            cert: cert.to_owned(),
            key: key.to_owned(),
            seen: Mutex::new((cert_bytes, key_bytes)),
        };
        Self::build(certified, Some(Arc::new(files)), cert, key)
    }

    /// A configuration serving a PEM pair held in memory (chain leaf first,
    /// key PKCS#8, PKCS#1 or SEC1). Nothing is watched: the owner swaps the
    /// certificate with [`TlsConfigHandle::set_pem`].
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, TlsError> {
        let (cert, key) = (Path::new(MEMORY_CERT), Path::new(MEMORY_KEY));
        let certified = parse_pair(cert, key, cert_pem, key_pem)?;
        Self::build(certified, None, cert, key)
    }

    /// Serves a new in-memory PEM pair from the next handshake on. A pair that
    /// does not parse, or whose key does not match, is refused and the
    /// current certificate stays.
    pub fn set_pem(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<(), TlsError> {
        let certified = parse_pair(
            Path::new(MEMORY_CERT),
            Path::new(MEMORY_KEY),
            cert_pem,
            key_pem,
        )?;
        self.resolver.set(Arc::new(certified));
        Ok(())
    }

    fn build(
        certified: CertifiedKey,
        files: Option<Arc<CertFiles>>,
        cert: &Path,
        key: &Path,
    ) -> Result<Self, TlsError> {
        let resolver = Arc::new(CertResolver::new(Arc::new(certified)));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|source| TlsError::Rejected {
                cert: cert.to_owned(),
                key: key.to_owned(),
                source,
            })?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self {
            config: Arc::new(config),
            resolver,
            files,
        })
    }

    /// The rustls configuration (shared; the certificate inside changes).
    pub fn server_config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.config)
    }

    /// The certificate presented now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.resolver.current()
    }

    /// Re-reads the files: `Ok(true)` when a new certificate is now served,
    /// `Ok(false)` when the files did not change, `Err` when they changed
    /// but the new pair is unusable (the old certificate stays; the same
    /// bytes are not retried, a further change is).
    /// A certificate held in memory has no files: `Ok(false)`.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let Some(files) = self.files.as_deref() else {
            return Ok(false);
        };
        let (cert_bytes, key_bytes) = read_pair(&files.cert, &files.key)?;
        {
            let mut seen = files.seen.lock();
            if seen.0 == cert_bytes && seen.1 == key_bytes {
                return Ok(false);
            }
            *seen = (cert_bytes.clone(), key_bytes.clone());
        }
        let certified = parse_pair(&files.cert, &files.key, &cert_bytes, &key_bytes)?;
        self.resolver.set(Arc::new(certified));
        Ok(true)
    }

    /// Polls the files every `interval` and reloads on change, forever.
    /// Returns at once for a certificate held in memory.
    pub async fn watch(self, interval: Duration) {
        let Some(files) = self.files.clone() else {
            return;
        };
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_read_error: Option<String> = None;
        loop {
            tick.tick().await;
            let this = self.clone();
            let outcome = tokio::task::spawn_blocking(move || this.reload()).await;
            match outcome {
                Ok(Ok(true)) => {
                    last_read_error = None;
                    tracing::info!(cert = %files.cert.display(), "TLS certificate reloaded");
                }
                Ok(Ok(false)) => last_read_error = None,
                Ok(Err(e @ TlsError::Read { .. })) => {
                    // Files briefly missing during a swap: say it once.
                    let msg = e.to_string();
                    if last_read_error.as_deref() != Some(&msg) {
                        tracing::warn!(error = %msg, "TLS certificate files unreadable; still serving the previous certificate");
                        last_read_error = Some(msg);
                    }
                }
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "new TLS certificate rejected; still serving the previous certificate");
                }
                Err(e) => tracing::error!(error = %e, "TLS reload task failed"),
            }
        }
    }
}

fn read_pair(cert: &Path, key: &Path) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    let read = |p: &Path| {
        std::fs::read(p).map_err(|source| TlsError::Read {
            path: p.to_owned(),
            source,
        })
    };
    Ok((read(cert)?, read(key)?))
}

fn parse_pair(
    cert: &Path,
    key: &Path,
    cert_bytes: &[u8],
    key_bytes: &[u8],
) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::NoCertificate {
            path: cert.to_owned(),
            detail: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert.to_owned(),
            detail: "the file has no CERTIFICATE block".into(),
        });
    }
    let private = PrivateKeyDer::from_pem_slice(key_bytes).map_err(|e| TlsError::NoKey {
        path: key.to_owned(),
        detail: e.to_string(),
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let certified =
        CertifiedKey::from_der(chain, private, &provider).map_err(|source| TlsError::Rejected {
            cert: cert.to_owned(),
            key: key.to_owned(),
            source,
        })?;
    // `from_der` tolerates keys whose public half it cannot compute; insist.
    certified
        .keys_match()
        .map_err(|source| TlsError::Rejected {
            cert: cert.to_owned(),
            key: key.to_owned(),
            source,
        })?;
    Ok(certified)
}

// === serving ===

/// Bounds of one listener's connections and requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Open connections at once; further ones wait in the listen backlog
    /// until one closes.
    pub max_connections: usize,
    /// Requests being handled at once over all connections; further ones
    /// wait for a slot.
    pub max_in_flight: usize,
    /// An HTTP/1 request's headers must arrive within this.
    pub header_read_timeout: Duration,
    /// A request body must arrive within this (the request then fails).
    pub body_read_timeout: Duration,
    /// A connection with no request in flight for this long is closed
    /// (HTTP/1 keep-alive and HTTP/2 alike).
    pub idle_timeout: Duration,
    /// HTTP/2: a PING is sent after this long without frames, and the
    /// connection closed when it is not answered within the same time.
    pub h2_keep_alive: Duration,
    /// Requests parked at once (a gang member's bind held for quorum,
    /// see [`crate::tls::park`]): they count neither against
    /// `max_in_flight` nor, with their connection, against
    /// `max_connections`, but against this. A request that would park
    /// beyond it stays counted as before.
    pub max_parked: usize,
}

/// Default [`ConnLimits::max_parked`]: the extender's default
/// `--max-held-binds`.
pub const DEFAULT_MAX_PARKED: usize = 10_000;

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_connections: 1024,
            max_in_flight: 256,
            header_read_timeout: HEADER_READ_TIMEOUT,
            body_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(120),
            h2_keep_alive: Duration::from_secs(30),
            max_parked: DEFAULT_MAX_PARKED,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` resolves: HTTPS (HTTP/1.1
/// and HTTP/2 by ALPN) when `tls` is given, plain HTTP otherwise. Each
/// connection runs in its own task; TLS handshakes happen there too, with a
/// timeout, so a slow client cannot stall the accept loop. With TLS, the
/// certificate files are watched for the lifetime of the server. On
/// shutdown, open connections get [`SHUTDOWN_GRACE`] to finish. Default
/// [`ConnLimits`]; see [`serve_with`].
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<TlsConfigHandle>,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    serve_with(listener, router, tls, ConnLimits::default(), shutdown).await
}

/// [`serve`] within `limits`: at most `max_connections` connections are
/// accepted (the rest wait in the backlog), at most `max_in_flight`
/// requests are handled at once, headers and bodies must arrive in time,
/// and idle connections are closed.
///
/// A request that parks ([`crate::tls::park`]) gives its in-flight
/// slot back, and its connection's slot when nothing else is in flight on
/// it, and holds one of `max_parked` until it ends. Its connection then
/// takes a connection slot again if one is free, and is closed after the
/// response otherwise; so open connections stay below `max_connections`
/// plus `max_parked`, and the verbs that do not park always find a slot.
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    tls: Option<TlsConfigHandle>,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let acceptor = tls
        .as_ref()
        .map(|t| tokio_rustls::TlsAcceptor::from(t.server_config()));
    let reloader = tls.map(|t| tokio::spawn(t.watch(RELOAD_INTERVAL)));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.h2_keep_alive)
        .keep_alive_timeout(limits.h2_keep_alive);
    let builder = Arc::new(builder);
    let max_connections = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let connections = Arc::new(Semaphore::new(max_connections));
    let in_flight = Arc::new(Semaphore::new(
        limits.max_in_flight.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let max_parked = limits.max_parked.clamp(1, Semaphore::MAX_PERMITS);
    let parked = Arc::new(Semaphore::new(max_parked));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // A connection slot first: beyond the bound, clients wait in the
        // listen backlog rather than being accepted and starved.
        let permit = tokio::select! {
            p = Arc::clone(&connections).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // E.g. out of file descriptors: back off, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let conn = ConnCtx {
            builder: Arc::clone(&builder),
            router: router.clone(),
            in_flight: Arc::clone(&in_flight),
            parked: Arc::clone(&parked),
            connections: Arc::clone(&connections),
            limits,
            stopped: stopped.clone(),
        };
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            match acceptor {
                None => conn.serve(TokioIo::new(stream), permit).await,
                Some(acceptor) => {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => conn.serve(TokioIo::new(tls), permit).await,
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
            }
        });
    }
    drop(listener);
    if let Some(r) = reloader {
        r.abort();
    }
    let _ = stop.send(true);
    // Every connection holds a slot until it ends, or a parked request on
    // it holds a parked slot: all slots back means all connections closed.
    let all = u32::try_from(max_connections).unwrap_or(u32::MAX);
    let all_parked = u32::try_from(max_parked).unwrap_or(u32::MAX);
    let drained = async {
        let _ = connections.acquire_many(all).await;
        let _ = parked.acquire_many(all_parked).await;
    };
    tokio::select! {
        () = drained => {}
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {
            tracing::warn!("connections still open after the shutdown grace period; closing them");
        }
    }
    Ok(())
}

/// What one connection's task needs.
struct ConnCtx {
    builder: Arc<auto::Builder<TokioExecutor>>,
    router: Router,
    in_flight: Arc<Semaphore>,
    /// The parked budget ([`ConnLimits::max_parked`]).
    parked: Arc<Semaphore>,
    /// The connection budget, to take a slot again after parking.
    connections: Arc<Semaphore>,
    limits: ConnLimits,
    stopped: tokio::sync::watch::Receiver<bool>,
}

/// Requests in flight on one connection, and when the last one ended.
#[derive(Default)]
struct Activity {
    busy: std::sync::atomic::AtomicUsize,
    last: Mutex<Option<tokio::time::Instant>>,
    /// Requests in flight that parked.
    parked: std::sync::atomic::AtomicUsize,
    /// The connection's slot in the connection budget; `None` while every
    /// request in flight on it is parked (or after, when none was free).
    slot: Mutex<Option<tokio::sync::OwnedSemaphorePermit>>,
    /// Close after the responses in flight: no connection slot was free
    /// when its parked requests ended.
    close: tokio::sync::Notify,
}

/// One request's slots, and its [`Parking`](crate::tls::park::Parking).
struct RequestSlots {
    activity: Arc<Activity>,
    in_flight: Mutex<Option<tokio::sync::OwnedSemaphorePermit>>,
    parked_budget: Arc<Semaphore>,
    parked: Mutex<Option<tokio::sync::OwnedSemaphorePermit>>,
    connections: Arc<Semaphore>,
}

impl crate::tls::park::Parking for RequestSlots {
    fn park(&self) -> bool {
        let mut parked = self.parked.lock();
        if parked.is_some() {
            return true;
        }
        let Ok(p) = Arc::clone(&self.parked_budget).try_acquire_owned() else {
            return false;
        };
        *parked = Some(p);
        drop(self.in_flight.lock().take());
        use std::sync::atomic::Ordering::SeqCst;
        let now_parked = self.activity.parked.fetch_add(1, SeqCst) + 1;
        if now_parked >= self.activity.busy.load(SeqCst) {
            drop(self.activity.slot.lock().take());
        }
        true
    }
}

impl RequestSlots {
    /// The request ended: a parked one gives its parked slot back and its
    /// connection takes a connection slot again, or closes.
    fn finish(&self) {
        if self.parked.lock().take().is_none() {
            return;
        }
        use std::sync::atomic::Ordering::SeqCst;
        self.activity.parked.fetch_sub(1, SeqCst);
        let mut slot = self.activity.slot.lock();
        if slot.is_none() {
            match Arc::clone(&self.connections).try_acquire_owned() {
                Ok(p) => *slot = Some(p),
                Err(_) => self.activity.close.notify_one(),
            }
        }
    }
}

/// Marks a request in flight on its connection until dropped.
struct Busy(Arc<Activity>);

impl Busy {
    fn new(a: &Arc<Activity>) -> Self {
        a.busy.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Busy(Arc::clone(a))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        *self.0.last.lock() = Some(tokio::time::Instant::now());
        self.0
            .busy
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Ends a request's slots however its future ends (dropped included).
struct Finish(Arc<RequestSlots>);

impl Drop for Finish {
    fn drop(&mut self) {
        self.0.finish();
    }
}

impl ConnCtx {
    async fn serve<I>(mut self, io: TokioIo<I>, slot: tokio::sync::OwnedSemaphorePermit)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = Arc::new(Activity::default());
        *activity.last.lock() = Some(tokio::time::Instant::now());
        *activity.slot.lock() = Some(slot);
        let (router, in_flight, body_timeout) = (
            self.router.clone(),
            Arc::clone(&self.in_flight),
            self.limits.body_read_timeout,
        );
        let (parked, connections) = (Arc::clone(&self.parked), Arc::clone(&self.connections));
        let act = Arc::clone(&activity);
        let service = hyper::service::service_fn(move |req: axum::http::Request<Incoming>| {
            let (router, in_flight, busy) =
                (router.clone(), Arc::clone(&in_flight), Busy::new(&act));
            let (parked, connections, act) = (
                Arc::clone(&parked),
                Arc::clone(&connections),
                Arc::clone(&act),
            );
            async move {
                let _busy = busy;
                // Closed only when the server is dropped; then serve anyway.
                let permit = in_flight.acquire_owned().await.ok();
                let slots = Arc::new(RequestSlots {
                    activity: act,
                    in_flight: Mutex::new(permit),
                    parked_budget: parked,
                    parked: Mutex::new(None),
                    connections,
                });
                let finish = Finish(Arc::clone(&slots));
                let mut req = req.map(|b| axum::body::Body::new(TimeoutBody::new(body_timeout, b)));
                req.extensions_mut()
                    .insert(crate::tls::park::Park::new(slots));
                let r = router.oneshot(req).await;
                drop(finish);
                r
            }
        });
        let conn = self.builder.serve_connection(io, service);
        let mut conn = std::pin::pin!(conn);
        let idle = self.limits.idle_timeout;
        let mut closing = false;
        loop {
            let wake = (*activity.last.lock()).map_or_else(tokio::time::Instant::now, |t| t + idle);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                    return;
                }
                () = activity.close.notified(), if !closing => {
                    // Parked requests ended with no connection slot free:
                    // finish the responses and close.
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
                changed = self.stopped.changed(), if !closing => {
                    if changed.is_err() || *self.stopped.borrow() {
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                }
                () = tokio::time::sleep_until(wake), if !closing => {
                    let quiet = activity.busy.load(std::sync::atomic::Ordering::SeqCst) == 0
                        && (*activity.last.lock()).is_some_and(|t| t.elapsed() >= idle);
                    if quiet {
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    } else if activity.busy.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                        // Busy: look again after another idle period.
                        *activity.last.lock() = Some(tokio::time::Instant::now());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_require_both_files() {
        let only_cert = TlsArgs {
            tls_cert: Some("c".into()),
            tls_key: None,
        };
        assert!(matches!(only_cert.load(), Err(TlsError::Incomplete)));
        assert!(matches!(TlsArgs::default().load(), Ok(None)));
    }
}
