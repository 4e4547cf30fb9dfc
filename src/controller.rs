//! The Run scheduling loop: workers take Run keys from the queue and run one
//! cycle each — decide and reserve in the cache, then write the status
//! through the [`ClusterWriter`], releasing the reservation if the write fails.

use crate::cache::{Decision, RunCache};
use crate::cluster::{ClusterWriter, EventKind, ObjectRef, WriteError};
use crate::crd::RunStatus;
use crate::metrics::{Endpoint, WriteResult};
use crate::model::refs::RunRef;
use crate::runs::queue::RunKey;
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// First retry delay after a failed write; doubles per consecutive failure.
const RETRY_BASE: Duration = Duration::from_millis(100);
/// Longest retry delay.
const RETRY_MAX: Duration = Duration::from_secs(30);
/// First re-check of a Run that stayed Pending; doubles per attempt.
const PENDING_BASE: Duration = Duration::from_secs(1);
/// Longest interval between re-checks of a Pending Run.
const PENDING_MAX: Duration = Duration::from_secs(120);

/// Counts one more attempt for `key` and returns `base * 2^(attempts-1)`,
/// capped at `max`.
fn backoff(
    attempts: &Mutex<HashMap<RunKey, u32>>,
    key: &RunKey,
    base: Duration,
    max: Duration,
) -> Duration {
    let n = {
        let mut a = attempts.lock();
        let n = a.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    base.saturating_mul(1u32 << (n - 1).min(16)).min(max)
}

/// What one cycle did, for tests and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CycleOutcome {
    Skipped,
    Scheduled { pod: String },
    Pending { reason: &'static str, written: bool },
    Failed { written: bool },
    Conflict,
    Gone,
    WriteFailed(String),
}

/// Runs scheduling cycles.
pub struct RunController {
    cache: Arc<RunCache>,
    writer: Arc<dyn ClusterWriter>,
    /// Consecutive failed writes per Run, for exponential retry backoff.
    failures: Mutex<HashMap<RunKey, u32>>,
    /// Consecutive Pending outcomes per Run, for the backoff re-check.
    pending: Mutex<HashMap<RunKey, u32>>,
}

impl RunController {
    pub fn new(cache: Arc<RunCache>, writer: Arc<dyn ClusterWriter>) -> Self {
        RunController {
            cache,
            writer,
            failures: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
        }
    }

    pub fn cache(&self) -> &Arc<RunCache> {
        &self.cache
    }

    async fn write(
        &self,
        key: &RunKey,
        rv: Option<&str>,
        status: &RunStatus,
    ) -> Result<(), WriteError> {
        let r = self
            .writer
            .write_run_status(&key.namespace, &key.name, rv, status)
            .await;
        if r.is_ok() {
            self.cache.metrics().write(WriteResult::Ok);
            self.failures.lock().remove(key);
        }
        r
    }

    /// Writes a Pending or Failed status, then records a Warning event with
    /// the status reason and message.
    async fn write_with_event(
        &self,
        key: &RunKey,
        uid: String,
        rv: Option<&str>,
        status: &RunStatus,
        reason: &str,
    ) -> Result<(), WriteError> {
        self.write(key, rv, status).await?;
        let message = status.message.as_deref().unwrap_or("");
        tracing::info!(run = %key, phase = status.phase.as_deref().unwrap_or(""), reason, message, "not scheduled");
        let run = RunRef {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            uid,
        };
        self.writer
            .record_event(&ObjectRef::run(&run), EventKind::Warning, reason, message)
            .await;
        Ok(())
    }

    /// One cycle for one Run.
    pub async fn cycle(&self, key: &RunKey) -> CycleOutcome {
        let start = Instant::now();
        let metrics = Arc::clone(self.cache.metrics());
        let outcome = match self.cache.schedule_one(key, Timestamp::now()) {
            Decision::Skip => CycleOutcome::Skipped,
            Decision::Reserved {
                uid,
                pod,
                resource_version,
                status,
            } => match self.write(key, resource_version.as_deref(), &status).await {
                Ok(()) => {
                    metrics.runs_scheduled.inc();
                    tracing::debug!(run = %key, %pod, "scheduled");
                    CycleOutcome::Scheduled { pod }
                }
                Err(e) => {
                    self.cache.release(&key.namespace, &uid, &pod);
                    self.failed_write(key, e)
                }
            },
            Decision::Pending {
                uid,
                reason,
                resource_version,
                status,
                write,
            } => {
                let rv = resource_version.as_deref();
                if write
                    && let Err(e) = self
                        .write_with_event(key, uid, rv, &status, reason.as_str())
                        .await
                {
                    return self.failed_write(key, e);
                }
                CycleOutcome::Pending {
                    reason: reason.as_str(),
                    written: write,
                }
            }
            Decision::Invalid {
                uid,
                resource_version,
                status,
                write,
            } => {
                let rv = resource_version.as_deref();
                let reason = crate::runs::status::INVALID_RESOURCE_REQUEST;
                if write && let Err(e) = self.write_with_event(key, uid, rv, &status, reason).await
                {
                    return self.failed_write(key, e);
                }
                CycleOutcome::Failed { written: write }
            }
        };
        metrics.observe(Endpoint::ScheduleCycle, start);
        self.pending_backoff(key, &outcome);
        outcome
    }

    /// A Run that stays Pending is re-checked on its own with exponential
    /// backoff (1s doubling to 2 min) besides the wakeups, which catch
    /// capacity changes at once; the periodic resync is only a fallback.
    fn pending_backoff(&self, key: &RunKey, outcome: &CycleOutcome) {
        match outcome {
            CycleOutcome::Pending { .. } => {
                let delay = backoff(&self.pending, key, PENDING_BASE, PENDING_MAX);
                self.cache.queue().add_after(key.clone(), delay);
            }
            CycleOutcome::Skipped | CycleOutcome::Conflict | CycleOutcome::WriteFailed(_) => {}
            CycleOutcome::Scheduled { .. } | CycleOutcome::Failed { .. } | CycleOutcome::Gone => {
                self.pending.lock().remove(key);
            }
        }
    }

    /// Requeues after a failed write with per-Run exponential backoff. A
    /// conflict usually resolves sooner: the watch delivers the newer object
    /// and that requeues the Run by itself.
    fn failed_write(&self, key: &RunKey, e: WriteError) -> CycleOutcome {
        let metrics = self.cache.metrics();
        let retry = |this: &Self| {
            let delay = backoff(&this.failures, key, RETRY_BASE, RETRY_MAX);
            this.cache.queue().add_after(key.clone(), delay);
        };
        match e {
            WriteError::Conflict => {
                metrics.write(WriteResult::Conflict);
                metrics.reservation_conflicts.inc();
                retry(self);
                CycleOutcome::Conflict
            }
            WriteError::NotFound => {
                metrics.write(WriteResult::NotFound);
                self.failures.lock().remove(key);
                CycleOutcome::Gone
            }
            WriteError::Other(msg) => {
                metrics.write(WriteResult::Error);
                tracing::warn!(run = %key, error = %msg, "run status write failed; retrying");
                retry(self);
                CycleOutcome::WriteFailed(msg)
            }
        }
    }

    /// Runs `workers` workers until the queue shuts down.
    pub async fn run(self: Arc<Self>, workers: usize, resync_every: Duration) {
        self.run_until(workers, resync_every, std::future::pending())
            .await
    }

    /// Runs `workers` workers and the periodic fallback resync until `stop`
    /// completes (leadership lost, shutdown) or the queue shuts down. Cycles
    /// in progress finish first.
    pub async fn run_until(
        self: Arc<Self>,
        workers: usize,
        resync_every: Duration,
        stop: impl Future<Output = ()> + Send,
    ) {
        let queue = Arc::clone(self.cache.queue());
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        // Everything waiting is worth a look when the loop (re)starts.
        self.cache.resync();
        struct AbortOnDrop(tokio::task::JoinHandle<()>);
        impl Drop for AbortOnDrop {
            fn drop(&mut self) {
                self.0.abort();
            }
        }
        let _resync = {
            let cache = Arc::clone(&self.cache);
            AbortOnDrop(tokio::spawn(async move {
                let mut tick = tokio::time::interval(resync_every);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    cache.resync();
                }
            }))
        };
        // A JoinSet aborts the workers if this future is dropped.
        let mut handles = tokio::task::JoinSet::new();
        for _ in 0..workers.max(1) {
            let this = Arc::clone(&self);
            let queue = Arc::clone(&queue);
            let mut stop_rx = stop_rx.clone();
            handles.spawn(async move {
                loop {
                    let key = tokio::select! {
                        biased;
                        _ = stop_rx.wait_for(|s| *s) => break,
                        k = queue.next() => match k { Some(k) => k, None => break },
                    };
                    this.cycle(&key).await;
                    queue.done(&key);
                }
            });
        }
        let all_done = async move { while handles.join_next().await.is_some() {} };
        tokio::pin!(all_done);
        tokio::select! {
            _ = &mut all_done => {}
            _ = stop => {
                let _ = stop_tx.send(true);
                all_done.await;
            }
        }
    }

    /// Drains the queue in this task until it is empty (tests, benchmarks).
    pub async fn drain(&self) -> usize {
        let queue = Arc::clone(self.cache.queue());
        let mut n = 0;
        while let Some(key) = queue.try_next() {
            self.cycle(&key).await;
            queue.done(&key);
            n += 1;
        }
        n
    }
}
