//! Readiness that tells the truth, and supervision of background tasks.
//!
//! ```text
//!   watchers ──listed / failed / down──▶ Health ──▶ /readyz (503 naming the cause)
//!   supervise(task) ── panicked or ended ──▶ log, count, restart with backoff
//! ```
//!
//! [`Health`] keeps, per watched kind, whether it has listed, since when
//! it has been failing and with what error, and whether its watcher task is
//! down (it ended or panicked and waits for its restart). `/readyz` is 503
//! while a kind has not listed, has been failing for longer than
//! `--watch-failure-grace`, or has its task down, and names each cause; a
//! watch heals when its next list completes.
//!
//! [`supervise`] runs a task and restarts it with backoff when it panics
//! (or ends when it must not), so a panic is logged, counted and survived,
//! never silently lost.

use crate::metrics::Metrics;
use kube::runtime::watcher::DefaultBackoff;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Default `--watch-failure-grace`.
pub const DEFAULT_WATCH_FAILURE_GRACE: Duration = Duration::from_secs(60);

/// Longest error text kept per watch (the readiness answer quotes it).
const MAX_ERROR_CHARS: usize = 256;

/// What is known of one watched kind.
#[derive(Debug, Default)]
struct WatchState {
    /// Its last list completed, and nothing failed since.
    listed: bool,
    /// The first error since the watch last listed.
    failing_since: Option<Instant>,
    /// The last error since then.
    last_error: Option<String>,
    /// Its watcher task ended or panicked and waits for its restart.
    down: Option<String>,
}

/// The readiness of the process's watches, and the counters of their
/// failures. Share it behind an `Arc`.
#[derive(Debug)]
pub struct Health {
    /// `--watch-failure-grace`.
    grace: Duration,
    metrics: Arc<Metrics>,
    /// By kind-table name.
    watches: Mutex<BTreeMap<&'static str, WatchState>>,
    /// Kinds whose API the cluster does not serve, with what to enable
    /// (detail only: they never make the process unready).
    missing_apis: Mutex<BTreeMap<&'static str, String>>,
}

// === impl Health ===

impl Health {
    pub fn new(metrics: Arc<Metrics>, grace: Duration) -> Self {
        Health {
            grace,
            metrics,
            watches: Mutex::new(BTreeMap::new()),
            missing_apis: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// `--watch-failure-grace`.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// The API of a kind this process reads is not served (found at
    /// start): `kruntimes_api_served{kind} 0` and a line of the readiness
    /// detail ([`Health::missing_apis`]). Readiness is not affected: the
    /// features that need the API are off, the rest works.
    pub fn api_missing(&self, kind: &'static str, detail: &str) {
        self.metrics.api_served(kind, false);
        self.missing_apis
            .lock()
            .insert(kind, detail.chars().take(MAX_ERROR_CHARS).collect());
    }

    /// The API of a kind this process reads is served.
    pub fn api_served(&self, kind: &'static str) {
        self.metrics.api_served(kind, true);
        self.missing_apis.lock().remove(kind);
    }

    /// One line per kind whose API is not served, naming what to enable.
    pub fn missing_apis(&self) -> Vec<String> {
        self.missing_apis
            .lock()
            .values()
            .map(|d| format!("optional API missing: {d}"))
            .collect()
    }

    /// A kind about to be watched: not ready until it has listed.
    pub fn watch_planned(&self, kind: &'static str) {
        self.metrics.watch_started(kind);
        self.watches.lock().entry(kind).or_default();
    }

    /// A kind's list completed: it is healthy again.
    pub fn watch_listed(&self, kind: &'static str) {
        let mut w = self.watches.lock();
        let s = w.entry(kind).or_default();
        if s.failing_since.is_some() || s.down.is_some() {
            tracing::info!(kind, "watch healed");
        }
        *s = WatchState {
            listed: true,
            ..WatchState::default()
        };
    }

    /// A kind's watch failed (a list or watch call, or an object whose
    /// handling panicked); counted.
    pub fn watch_failed(&self, kind: &'static str, error: &str) {
        self.metrics.watch_error(kind);
        let mut w = self.watches.lock();
        let s = w.entry(kind).or_default();
        s.failing_since.get_or_insert_with(Instant::now);
        s.last_error = Some(error.chars().take(MAX_ERROR_CHARS).collect());
    }

    /// A kind's watcher task ended or panicked (`why`): not ready until
    /// the restarted watch lists.
    pub fn watch_down(&self, kind: &'static str, why: &str) {
        let mut w = self.watches.lock();
        let s = w.entry(kind).or_default();
        s.failing_since.get_or_insert_with(Instant::now);
        s.down = Some(why.chars().take(MAX_ERROR_CHARS).collect());
    }

    /// A kind's watch starts again (after an error, or its task's end);
    /// counted.
    pub fn watch_restarting(&self, kind: &'static str) {
        self.metrics.watch_restart(kind);
    }

    /// `Ok` when every watch is ready; else why not, one line per cause,
    /// naming the kind.
    pub fn readiness(&self) -> Result<(), Vec<String>> {
        let now = Instant::now();
        let w = self.watches.lock();
        let mut causes = Vec::new();
        for (kind, s) in w.iter() {
            let failing = s.failing_since.map(|t| now.saturating_duration_since(t));
            let error = s.last_error.as_deref().unwrap_or("");
            if let Some(why) = &s.down {
                causes.push(format!("watch {kind}: its watcher task {why}; restarting"));
            } else if let Some(f) = failing.filter(|f| *f > self.grace) {
                causes.push(format!(
                    "watch {kind}: failing for {} (more than --watch-failure-grace {}): {error}",
                    humantime::format_duration(Duration::from_secs(f.as_secs())),
                    humantime::format_duration(self.grace),
                ));
            } else if !s.listed {
                match &s.last_error {
                    Some(e) => causes.push(format!("watch {kind}: not listed yet: {e}")),
                    None => causes.push(format!("watch {kind}: not listed yet")),
                }
            }
        }
        if causes.is_empty() {
            Ok(())
        } else {
            Err(causes)
        }
    }
}

// === supervision ===

/// How one run of a supervised task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// Its future completed.
    Ended,
    /// It panicked, with this message.
    Panicked(String),
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Ended => f.write_str("ended"),
            Exit::Panicked(m) => write!(f, "panicked: {m}"),
        }
    }
}

/// Aborts a task when dropped: a supervisor (or any owner) that is itself
/// cancelled takes its task with it.
#[derive(Debug)]
pub struct AbortOnDrop<T>(pub JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The message of a panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

/// Runs `start()`'s future as a task named `name`; each time it panics or
/// ends, logs it and asks `restart` (which counts it) whether to start it
/// again, then does so after a backoff (0.8s doubling to 30s, jittered,
/// back to the start after two quiet minutes). Returns when `restart` says
/// no, or when the task was cancelled from outside. Dropping the returned
/// future aborts the running task.
pub async fn supervise<F, Fut, R>(name: &str, mut start: F, mut restart: R)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
    R: FnMut(&Exit) -> bool,
{
    let mut backoff = DefaultBackoff::default();
    loop {
        let mut task = AbortOnDrop(tokio::spawn(start()));
        let exit = match (&mut task.0).await {
            Ok(()) => Exit::Ended,
            Err(e) if e.is_panic() => Exit::Panicked(panic_message(&*e.into_panic())),
            // Aborted from outside (shutdown): nothing to restart.
            Err(_) => return,
        };
        if !restart(&exit) {
            if let Exit::Panicked(m) = &exit {
                tracing::error!(task = name, panic = %m, "background task panicked; not restarted");
            }
            return;
        }
        let delay = backoff.next().unwrap_or(Duration::from_secs(30));
        tracing::error!(task = name, %exit, restart_in = ?delay, "background task stopped; restarting");
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn health(grace: Duration) -> Health {
        Health::new(Arc::new(Metrics::default()), grace)
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_failing_longer_than_the_grace_is_not_ready_until_it_lists() {
        let h = health(Duration::from_secs(60));
        h.watch_planned("Pod");
        let causes = h.readiness().unwrap_err();
        assert_eq!(causes, ["watch Pod: not listed yet"]);
        h.watch_listed("Pod");
        assert!(h.readiness().is_ok());
        // Failing, but within the grace: still ready.
        h.watch_failed("Pod", "connection refused");
        tokio::time::advance(Duration::from_secs(59)).await;
        h.watch_failed("Pod", "connection refused again");
        assert!(h.readiness().is_ok());
        tokio::time::advance(Duration::from_secs(2)).await;
        let causes = h.readiness().unwrap_err();
        assert_eq!(
            causes,
            [
                "watch Pod: failing for 1m 1s (more than --watch-failure-grace 1m): connection refused again"
            ]
        );
        // Healed by its next list.
        h.watch_listed("Pod");
        assert!(h.readiness().is_ok());
        let text = h.metrics().encode();
        assert!(
            text.contains("kruntimes_watch_errors_total{kind=\"Pod\"} 2"),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_watcher_task_down_is_not_ready_at_once_and_names_why() {
        let h = health(Duration::from_secs(60));
        h.watch_planned("Node");
        h.watch_planned("Pod");
        h.watch_listed("Node");
        h.watch_listed("Pod");
        h.watch_down("Node", "panicked: boom");
        h.watch_restarting("Node");
        assert_eq!(
            h.readiness().unwrap_err(),
            ["watch Node: its watcher task panicked: boom; restarting"]
        );
        h.watch_listed("Node");
        assert!(h.readiness().is_ok());
        let text = h.metrics().encode();
        assert!(text.contains("kruntimes_watch_restarts_total{kind=\"Node\"} 1"));
        assert!(text.contains("kruntimes_watch_restarts_total{kind=\"Pod\"} 0"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_task_is_restarted_with_backoff_until_told_not_to() {
        let runs = Arc::new(AtomicUsize::new(0));
        let exits = Arc::new(Mutex::new(Vec::new()));
        let started = Instant::now();
        let r = Arc::clone(&runs);
        let e = Arc::clone(&exits);
        supervise(
            "test",
            move || {
                let n = r.fetch_add(1, Ordering::SeqCst);
                async move {
                    if n < 3 {
                        panic!("run {n} failed");
                    }
                }
            },
            move |exit| {
                e.lock().push(exit.clone());
                matches!(exit, Exit::Panicked(_))
            },
        )
        .await;
        assert_eq!(runs.load(Ordering::SeqCst), 4);
        assert_eq!(
            *exits.lock(),
            [
                Exit::Panicked("run 0 failed".into()),
                Exit::Panicked("run 1 failed".into()),
                Exit::Panicked("run 2 failed".into()),
                Exit::Ended
            ]
        );
        // Three restarts, each after a backoff of at least 0.4s (jittered 0.8s, 1.6s, 3.2s).
        assert!(started.elapsed() >= Duration::from_millis(1200));
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_supervisor_aborts_its_task() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let sup = tokio::spawn(supervise(
            "test",
            {
                let mut tx = Some(tx);
                move || {
                    let tx = tx.take();
                    async move {
                        // Holds the sender until aborted.
                        let _tx = tx;
                        std::future::pending::<()>().await;
                    }
                }
            },
            |_| true,
        ));
        tokio::task::yield_now().await;
        sup.abort();
        // The task was aborted: its sender is dropped.
        assert!(rx.await.is_err());
    }
}
