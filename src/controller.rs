//! The Run scheduling loop: workers take Run keys from the queue and run one
//! cycle each — decide and reserve in the cache, then write the status
//! through the [`ClusterWriter`], releasing the reservation if the write fails.

use crate::cache::{Cache, Decision};
use crate::cluster::{ClusterWriter, WriteError};
use crate::metrics::{Endpoint, WriteResult};
use crate::runs::queue::RunKey;
use k8s_openapi::jiff::Timestamp;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Retry delay after a failed write (the watch usually requeues sooner).
const RETRY_AFTER: Duration = Duration::from_millis(200);

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
    cache: Arc<Cache>,
    writer: Arc<dyn ClusterWriter>,
}

impl RunController {
    pub fn new(cache: Arc<Cache>, writer: Arc<dyn ClusterWriter>) -> Self {
        RunController { cache, writer }
    }

    /// One cycle for one Run.
    pub async fn cycle(&self, key: &RunKey) -> CycleOutcome {
        let start = Instant::now();
        let metrics = self.cache.metrics();
        let outcome = match self.cache.schedule_one(key, Timestamp::now()) {
            Decision::Skip => CycleOutcome::Skipped,
            Decision::Reserved {
                uid,
                pod,
                resource_version,
                status,
            } => {
                match self
                    .writer
                    .write_run_status(
                        &key.namespace,
                        &key.name,
                        resource_version.as_deref(),
                        &status,
                    )
                    .await
                {
                    Ok(()) => {
                        metrics.write(WriteResult::Ok);
                        metrics.runs_scheduled.inc();
                        tracing::debug!(run = %key, %pod, "scheduled");
                        CycleOutcome::Scheduled { pod }
                    }
                    Err(e) => {
                        self.cache.release(&key.namespace, &uid, &pod);
                        self.failed_write(key, e)
                    }
                }
            }
            Decision::Pending {
                reason,
                resource_version,
                status,
                write,
            } => {
                if write {
                    match self
                        .writer
                        .write_run_status(
                            &key.namespace,
                            &key.name,
                            resource_version.as_deref(),
                            &status,
                        )
                        .await
                    {
                        Ok(()) => {
                            metrics.write(WriteResult::Ok);
                            tracing::info!(run = %key, reason = reason.as_str(), message = status.message.as_deref().unwrap_or(""), "pending");
                        }
                        Err(e) => return self.failed_write(key, e),
                    }
                }
                CycleOutcome::Pending {
                    reason: reason.as_str(),
                    written: write,
                }
            }
            Decision::Invalid {
                resource_version,
                status,
                write,
            } => {
                if write {
                    match self
                        .writer
                        .write_run_status(
                            &key.namespace,
                            &key.name,
                            resource_version.as_deref(),
                            &status,
                        )
                        .await
                    {
                        Ok(()) => {
                            metrics.write(WriteResult::Ok);
                            tracing::info!(run = %key, message = status.message.as_deref().unwrap_or(""), "invalid resource request");
                        }
                        Err(e) => return self.failed_write(key, e),
                    }
                }
                CycleOutcome::Failed { written: write }
            }
        };
        metrics.observe(Endpoint::ScheduleCycle, start);
        outcome
    }

    fn failed_write(&self, key: &RunKey, e: WriteError) -> CycleOutcome {
        let metrics = self.cache.metrics();
        match e {
            WriteError::Conflict => {
                metrics.write(WriteResult::Conflict);
                metrics.reservation_conflicts.inc();
                self.cache.queue().add_after(key.clone(), RETRY_AFTER);
                CycleOutcome::Conflict
            }
            WriteError::NotFound => {
                metrics.write(WriteResult::NotFound);
                CycleOutcome::Gone
            }
            WriteError::Other(msg) => {
                metrics.write(WriteResult::Error);
                tracing::warn!(run = %key, error = %msg, "run status write failed; retrying");
                self.cache.queue().add_after(key.clone(), RETRY_AFTER * 5);
                CycleOutcome::WriteFailed(msg)
            }
        }
    }

    /// Runs `workers` workers until the queue shuts down, plus the periodic
    /// fallback resync.
    pub async fn run(self: Arc<Self>, workers: usize, resync_every: Duration) {
        let queue = Arc::clone(self.cache.queue());
        let resync = {
            let cache = Arc::clone(&self.cache);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(resync_every);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    cache.resync();
                }
            })
        };
        let mut handles = Vec::new();
        for _ in 0..workers.max(1) {
            let this = Arc::clone(&self);
            let queue = Arc::clone(&queue);
            handles.push(tokio::spawn(async move {
                while let Some(key) = queue.next().await {
                    this.cycle(&key).await;
                    queue.done(&key);
                }
            }));
        }
        for h in handles {
            let _ = h.await;
        }
        resync.abort();
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
