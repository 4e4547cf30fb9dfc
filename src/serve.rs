//! `serve`: assembles cache, store, scheduling loop and HTTP server.

use crate::cache::{Cache, CacheConfig};
use crate::cluster::ClusterWriter;
use crate::cluster::load::load_path;
use crate::cluster::standalone::StandaloneStore;
use crate::controller::RunController;
use crate::http::{AppState, router};
use crate::metrics::Metrics;
use crate::runs::queue::WorkQueue;
use anyhow::Context as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Parses `500ms`, `15s`, `5m`, `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("invalid duration {s:?} ({e}); write e.g. 500ms, 15s, 5m, 1h"))
}

/// Flags of `serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "KRS_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Standalone mode: a YAML/JSON file or a directory of them holding the
    /// cluster state (Pods, Runs, Runtimes). Without it, cluster mode.
    #[arg(long, env = "KRS_STATE")]
    pub state: Option<PathBuf>,
    /// Pod label whose value names the Runtime a pod serves.
    #[arg(long, env = "KRS_RUNTIME_LABEL_KEY", default_value = "runtime")]
    pub runtime_label_key: String,
    /// `runs` capacity of a Runtime Pod without `kruntimes.io/capacity.runs`.
    #[arg(long, env = "KRS_DEFAULT_RUNS_CAPACITY", default_value_t = 2)]
    pub default_runs_capacity: u64,
    /// A Runtime Pod whose runtimed heartbeat is older than this is unavailable.
    #[arg(long, env = "KRS_HEARTBEAT_STALE_AFTER", default_value = "15s", value_parser = parse_duration)]
    pub heartbeat_stale_after: Duration,
    /// Concurrent scheduling workers.
    #[arg(long, env = "KRS_WORKERS", default_value_t = 2)]
    pub workers: usize,
    /// Fallback: how often every Pending Run is retried even without a wakeup.
    #[arg(long, env = "KRS_RESYNC_PERIOD", default_value = "30s", value_parser = parse_duration)]
    pub resync_period: Duration,
}

impl ServeArgs {
    pub fn cache_config(&self) -> CacheConfig {
        CacheConfig {
            runtime_label_key: self.runtime_label_key.clone(),
            default_runs_capacity: self.default_runs_capacity,
            heartbeat_stale_after: self.heartbeat_stale_after,
        }
    }
}

/// A standalone service, assembled but not yet listening.
pub struct Standalone {
    pub state: AppState,
    pub store: Arc<StandaloneStore>,
    pub controller: Arc<RunController>,
}

/// Builds the standalone service from objects already read.
pub fn standalone(
    config: CacheConfig,
    objects: Vec<serde_json::Value>,
) -> anyhow::Result<Standalone> {
    let metrics = Arc::new(Metrics::default());
    let queue = Arc::new(WorkQueue::default());
    let cache = Arc::new(Cache::new(config, queue, Arc::clone(&metrics)));
    let store = Arc::new(StandaloneStore::new(Arc::clone(&cache)));
    store.upsert(objects).map_err(|e| anyhow::anyhow!("{e}"))?;
    cache.set_synced(true);
    let writer: Arc<dyn ClusterWriter> = store.clone();
    let controller = Arc::new(RunController::new(Arc::clone(&cache), writer));
    let state = AppState {
        cache,
        store: Some(Arc::clone(&store)),
        metrics,
    };
    Ok(Standalone {
        state,
        store,
        controller,
    })
}

/// Runs `serve` until SIGINT/SIGTERM.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let Some(path) = &args.state else {
        anyhow::bail!(
            "cluster mode is not available in this version: pass --state PATH to run standalone on a file or directory of objects"
        );
    };
    let objects = load_path(path).with_context(|| format!("reading --state {}", path.display()))?;
    let count = objects.len();
    let app = standalone(args.cache_config(), objects)
        .with_context(|| format!("loading --state {}", path.display()))?;
    tracing::info!(path = %path.display(), objects = count, "standalone mode: state loaded");
    let loop_task = tokio::spawn(Arc::clone(&app.controller).run(args.workers, args.resync_period));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding --listen {}", args.listen))?;
    tracing::info!(addr = %listener.local_addr()?, "listening (HTTP)");
    let queue = Arc::clone(app.state.cache.queue());
    axum::serve(listener, router(app.state))
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    queue.shutdown();
    let _ = loop_task.await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down");
}
