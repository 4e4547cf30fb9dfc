//! The Run scheduling loop: workers take Run keys from the queue and run one
//! cycle each — decide and reserve in the cache, then write the status
//! through the [`ClusterWriter`], releasing the reservation if the write fails.

use crate::cache::{Decision, RunCache};
use crate::cluster::{ClusterWriter, EventKind, EventReason, ObjectRef, WriteError};
use crate::crd::RunStatus;
use crate::health::{self, AbortOnDrop, Exit};
use crate::metrics::{
    Operation, RuntimeLabels, StageLabels, SyncLabels, Task, WriteResult, sync_result,
};
use crate::model::refs::RunRef;
use crate::runs::queue::{RunKey, WorkQueue};
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

/// Whether a Failed status is upstream's selection failure (an affinity
/// that cannot be compiled), not an invalid request.
fn is_selection_error(status: &RunStatus) -> bool {
    status
        .message
        .as_deref()
        .is_some_and(|m| m.starts_with("pod selection failed:"))
}

/// What one cycle did, for tests and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CycleOutcome {
    Skipped,
    Scheduled {
        pod: String,
    },
    Pending {
        reason: &'static str,
        written: bool,
    },
    Failed {
        written: bool,
    },
    Cancelled {
        written: bool,
    },
    /// In a retry backoff; looked at again when it ends.
    BackingOff {
        until: Timestamp,
    },
    Conflict,
    Gone,
    WriteFailed(String),
}

/// Runs scheduling cycles.
pub struct RunController {
    cache: Arc<RunCache>,
    writer: Arc<dyn ClusterWriter>,
    /// Consecutive failed writes per Run, for exponential retry backoff.
    /// Pruned when a cycle finds the Run gone or not to be scheduled (a
    /// deleted Run is handed to a worker once more for that).
    failures: Mutex<HashMap<RunKey, u32>>,
    /// Consecutive Pending outcomes per Run, for the backoff re-check
    /// (pruned like `failures`).
    pending: Mutex<HashMap<RunKey, u32>>,
}

/// A reservation made by a cycle and not yet settled by its status write:
/// released if the cycle is dropped (leadership lost, shutdown) or panics
/// before the write answered, so it never outlives the cycle unwritten.
struct Unsettled<'a> {
    cache: &'a RunCache,
    namespace: &'a str,
    uid: &'a str,
    pod: &'a str,
    settled: bool,
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.cache.release(self.namespace, self.uid, self.pod);
        }
    }
}

/// Keys a worker takes from the queue at once: one queue lock round trip
/// per batch instead of two per key.
const WORKER_BATCH: usize = 64;

/// How long a worker cycles before it yields its runtime thread.
const WORKER_SLICE: Duration = Duration::from_micros(250);

/// Marks a worker's batch of keys done however its cycles end (returned,
/// dropped or panicked), so no key is left "processing" for good. After a
/// panic the Run whose cycle panicked is retried with the write-failure
/// backoff; keys of the batch whose cycle never started are queued again.
struct Done<'a> {
    controller: &'a RunController,
    queue: &'a Arc<WorkQueue<RunKey>>,
    keys: &'a [RunKey],
    /// Keys whose cycle has returned (a prefix of `keys`).
    finished: usize,
    /// Whether the cycle of `keys[finished]` has started.
    running: bool,
}

impl Drop for Done<'_> {
    fn drop(&mut self) {
        let mut unstarted = self.finished;
        if self.running
            && let Some(key) = self.keys.get(self.finished)
        {
            unstarted += 1;
            if std::thread::panicking() {
                let delay = backoff(&self.controller.failures, key, RETRY_BASE, RETRY_MAX);
                tracing::error!(run = %key, retry_in = ?delay, "a scheduling cycle panicked");
                self.queue.add_after(key.clone(), delay);
            }
        }
        for key in self.keys.get(unstarted..).unwrap_or_default() {
            self.queue.add(key.clone());
        }
        self.queue.done_all(self.keys);
    }
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

    /// Runs with retry or Pending backoff state (bounded by the Runs that
    /// exist and wait).
    #[cfg(any(test, feature = "testkit"))]
    pub fn backoff_entries(&self) -> usize {
        self.failures.lock().len() + self.pending.lock().len()
    }

    /// Drops a Run's backoff state and its delayed retry.
    fn forget(&self, key: &RunKey) {
        self.failures.lock().remove(key);
        self.pending.lock().remove(key);
        self.cache.queue().forget_delayed(key);
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
        reason: EventReason,
    ) -> Result<(), WriteError> {
        self.write(key, rv, status).await?;
        let message = status.message.as_deref().unwrap_or("");
        tracing::info!(run = %key, phase = status.phase.as_deref().unwrap_or(""), %reason, message, "not scheduled");
        self.event(key, uid, EventKind::Warning, reason, message)
            .await;
        Ok(())
    }

    /// Records an Event on a Run.
    async fn event(
        &self,
        key: &RunKey,
        uid: String,
        kind: EventKind,
        reason: EventReason,
        message: &str,
    ) {
        let run = RunRef {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            uid,
        };
        self.writer
            .record_event(&ObjectRef::run(&run), kind, reason, message)
            .await;
    }

    /// One cycle for one Run, at the wall clock's time.
    pub async fn cycle(&self, key: &RunKey) -> CycleOutcome {
        self.cycle_at(key, Timestamp::now()).await
    }

    /// One cycle for one Run with `now` as the time its decision reads
    /// (heartbeat freshness, retry backoffs, condition times): the
    /// scheduling loop passes the wall clock, a simulation its own clock.
    pub async fn cycle_at(&self, key: &RunKey, now: Timestamp) -> CycleOutcome {
        let start = Instant::now();
        let metrics = Arc::clone(self.cache.metrics());
        let runtime = self.cache.runtime_of(key).unwrap_or_default();
        let upstream = &metrics.upstream;
        let sync = |result: &'static str| {
            upstream
                .sync_total
                .get_or_create(&SyncLabels {
                    runtime: runtime.clone(),
                    result,
                })
                .inc();
        };
        let no_pods = || {
            upstream
                .no_pods_total
                .get_or_create(&RuntimeLabels {
                    runtime: runtime.clone(),
                })
                .inc();
        };
        let decision = self.cache.schedule_one(key, now);
        // Upstream times a sync from after its cancel and request checks.
        let timed = matches!(
            &decision,
            Decision::Reserved { .. } | Decision::Pending { .. } | Decision::BackingOff { .. }
        ) || matches!(&decision, Decision::Invalid { status, .. } if is_selection_error(status));
        let outcome = match decision {
            Decision::Skip => CycleOutcome::Skipped,
            Decision::Reserved {
                uid,
                pod,
                resource_version,
                status,
                created,
                rejections,
            } => {
                metrics.decision_rejections(&rejections, None);
                let mut unsettled = Unsettled {
                    cache: &self.cache,
                    namespace: &key.namespace,
                    uid: &uid,
                    pod: &pod,
                    settled: false,
                };
                let written = self.write(key, resource_version.as_deref(), &status).await;
                // Kept on success; released by the guard on failure.
                unsettled.settled = written.is_ok();
                drop(unsettled);
                match written {
                    Ok(()) => {
                        metrics.runs_scheduled.inc();
                        sync(sync_result::SCHEDULED);
                        if let Some(created) = created {
                            let waited = now.duration_since(created);
                            metrics.run_scheduled_after(waited.as_secs_f64());
                            if !waited.is_negative() {
                                upstream
                                    .run_queue_duration
                                    .get_or_create(&RuntimeLabels {
                                        runtime: runtime.clone(),
                                    })
                                    .observe(waited.as_secs_f64());
                            }
                        }
                        tracing::debug!(run = %key, %pod, "scheduled");
                        let message = status.message.as_deref().unwrap_or("");
                        self.event(key, uid, EventKind::Normal, EventReason::Scheduled, message)
                            .await;
                        CycleOutcome::Scheduled { pod }
                    }
                    Err(e) => self.failed_write(key, e),
                }
            }
            Decision::Pending {
                uid,
                reason,
                resource_version,
                status,
                write,
                rejections,
            } => {
                metrics.decision_rejections(&rejections, Some(reason));
                let rv = resource_version.as_deref();
                no_pods();
                if write
                    && let Err(e) = self
                        .write_with_event(key, uid, rv, &status, reason.into())
                        .await
                {
                    return self.failed_write(key, e);
                }
                sync(sync_result::NO_PODS);
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
                let reason = EventReason::InvalidResourceRequest;
                let selection = is_selection_error(&status);
                if selection {
                    no_pods();
                }
                if write && let Err(e) = self.write_with_event(key, uid, rv, &status, reason).await
                {
                    return self.failed_write(key, e);
                }
                if selection {
                    sync(sync_result::SELECTION_ERROR);
                }
                CycleOutcome::Failed { written: write }
            }
            Decision::Cancelled {
                uid,
                resource_version,
                status,
                write,
            } => {
                let rv = resource_version.as_deref();
                if write {
                    if let Err(e) = self.write(key, rv, &status).await {
                        return self.failed_write(key, e);
                    }
                    tracing::info!(run = %key, "cancelled while pending");
                    let message = status.message.as_deref().unwrap_or("");
                    self.event(key, uid, EventKind::Normal, EventReason::Cancelled, message)
                        .await;
                }
                CycleOutcome::Cancelled { written: write }
            }
            Decision::BackingOff { until } => {
                // One timer at the end of the backoff, no polling before.
                let delay = until
                    .duration_since(now)
                    .try_into()
                    .unwrap_or(Duration::ZERO);
                self.cache.queue().forget_delayed(key);
                self.cache
                    .queue()
                    .add_after(key.clone(), delay.max(Duration::from_millis(1)));
                CycleOutcome::BackingOff { until }
            }
        };
        metrics.observe(Operation::ScheduleCycle, start);
        if timed {
            upstream
                .sync_duration
                .get_or_create(&RuntimeLabels {
                    runtime: runtime.clone(),
                })
                .observe(start.elapsed().as_secs_f64());
        }
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
            // Gone, or nothing to schedule (assigned, terminal, deleting):
            // no backoff state is kept for it.
            CycleOutcome::Skipped | CycleOutcome::Gone => self.forget(key),
            CycleOutcome::Conflict | CycleOutcome::WriteFailed(_) => {}
            // Its own timer is set; the Pending re-check count starts over.
            CycleOutcome::BackingOff { .. } => {
                self.pending.lock().remove(key);
            }
            CycleOutcome::Scheduled { .. }
            | CycleOutcome::Failed { .. }
            | CycleOutcome::Cancelled { .. } => {
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
                metrics
                    .upstream
                    .reservation_conflicts
                    .get_or_create(&StageLabels { stage: "bind" })
                    .inc();
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

    /// What a replica does while it does not hold the Lease (at start, and
    /// whenever its loop stops): its queue takes no keys (nothing consumes
    /// them, and its watches keep feeding it: the key of every Run deleted
    /// meanwhile would stay for good), and its reservations and backoff
    /// state go (the next leader starts from what the API server shows,
    /// and [`ready`](Self::ready) queues every waiting Run). Returns the
    /// reservations dropped.
    pub fn stand_by(&self) -> usize {
        self.cache.queue().park();
        self.failures.lock().clear();
        self.pending.lock().clear();
        self.cache.clear_assumptions()
    }

    /// What the loop does before its first cycle when it (re)starts (a new
    /// leader, a restarted process): waits until the cache's initial lists
    /// are in, then for a list of Runs read after that
    /// ([`RunCache::fresh_runs`]), then queues every waiting Run. A cold
    /// replica that wins the Lease before its lists complete would
    /// otherwise decide from a half-listed cache (Runs listed, Runtime Pods
    /// not yet: every Run written Pending for want of pods, with a Warning
    /// Event each); a warm standby whose watch lags or is down would decide
    /// without the old leader's last placements, and place onto the
    /// capacity they use.
    ///
    /// The queue stays parked while it waits: nothing consumes it yet, and
    /// the wait lasts as long as the Run watch stays down, while a relist
    /// (the fresh list itself) hands it the key of every Run deleted
    /// meanwhile. Taken out of it only then, it loses nothing: every add
    /// is of a waiting Run, which the resync after it queues, or of a
    /// deleted one, whose retry state [`stand_by`](Self::stand_by) already
    /// dropped.
    pub async fn ready(&self) {
        self.cache.synced().await;
        self.cache.fresh_runs().await;
        self.cache.queue().unpark();
        // Everything waiting is worth a look when the loop (re)starts.
        self.cache.resync();
    }

    /// Runs `workers` workers until the queue shuts down.
    pub async fn run(self: Arc<Self>, workers: usize, resync_every: Duration) {
        self.run_until(workers, resync_every, std::future::pending())
            .await
    }

    /// Runs `workers` workers and the periodic fallback resync until `stop`
    /// completes (leadership lost, shutdown) or the queue shuts down. Cycles
    /// in progress finish first. Nothing is cycled before the cache is
    /// synced and a fresh list of Runs is in ([`RunController::ready`],
    /// which then takes a queue parked by
    /// [`stand_by`](RunController::stand_by) out of it).
    pub async fn run_until(
        self: Arc<Self>,
        workers: usize,
        resync_every: Duration,
        stop: impl Future<Output = ()> + Send,
    ) {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::pin!(stop);
        tokio::select! {
            biased;
            _ = &mut stop => return,
            _ = self.ready() => {}
        }
        let metrics = Arc::clone(self.cache.metrics());
        // The fallback resync, restarted if it panics.
        let _resync = {
            let cache = Arc::clone(&self.cache);
            let metrics = Arc::clone(&metrics);
            AbortOnDrop(tokio::spawn(health::supervise(
                "run-resync",
                move || {
                    let cache = Arc::clone(&cache);
                    async move {
                        let mut tick = tokio::time::interval(resync_every);
                        tick.tick().await;
                        loop {
                            tick.tick().await;
                            cache.resync();
                        }
                    }
                },
                move |_| {
                    metrics.task_restart(Task::RunResync);
                    true
                },
            )))
        };
        // Workers, each restarted if it panics; a JoinSet aborts them if
        // this future is dropped.
        let mut handles = tokio::task::JoinSet::new();
        for _ in 0..workers.max(1) {
            let this = Arc::clone(&self);
            let stop_rx = stop_rx.clone();
            let metrics = Arc::clone(&metrics);
            handles.spawn(health::supervise(
                "run-worker",
                move || Arc::clone(&this).work(stop_rx.clone()),
                move |exit| match exit {
                    Exit::Ended => false,
                    Exit::Panicked(_) => {
                        metrics.task_restart(Task::RunWorker);
                        true
                    }
                },
            ));
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

    /// One worker: takes keys from the queue in batches and cycles them
    /// until `stop` turns true or the queue shuts down. Every key is marked
    /// done however its cycle ends; keys of a batch left unstarted when
    /// `stop` turns true are queued again.
    async fn work(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let queue = Arc::clone(self.cache.queue());
        let mut slice = Instant::now();
        loop {
            let keys = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => break,
                k = queue.next_batch(WORKER_BATCH) => match k { Some(k) => k, None => break },
            };
            let mut done = Done {
                controller: &self,
                queue: &queue,
                keys: &keys,
                finished: 0,
                running: false,
            };
            for key in &keys {
                if *stop.borrow() {
                    break;
                }
                done.running = true;
                self.cycle(key).await;
                done.running = false;
                done.finished += 1;
                // A cycle whose writes complete at once (the in-memory
                // store) and a queue that always has a next key never
                // return `Pending`: without this, the workers would keep
                // the runtime's threads to themselves while a big backlog
                // drains, and HTTP requests would wait for the whole
                // backlog.
                if slice.elapsed() >= WORKER_SLICE {
                    tokio::task::yield_now().await;
                    slice = Instant::now();
                }
            }
            drop(done);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CacheConfig;
    use crate::cluster::kinds::Kind;
    use crate::cluster::standalone::{StandaloneStore, kube_time};
    use crate::cluster::{BindError, ClaimAllocationRef, PodBinding};
    use crate::crd::Run;
    use crate::metrics::Metrics;
    use crate::model::refs::GroupRef;
    use crate::testkit::builders::{run, runtime_pod};
    use futures::future::BoxFuture;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn store() -> Arc<StandaloneStore> {
        let queue = Arc::new(WorkQueue::default());
        let cache = Arc::new(RunCache::new(
            CacheConfig::default(),
            queue,
            Arc::new(Metrics::default()),
        ));
        Arc::new(StandaloneStore::new(cache))
    }

    /// [`store`] holding a fresh Runtime Pod `rp-1` with one `runs` slot
    /// and the Pending Run `r1` that fits it.
    fn store_with_one_slot_and_r1() -> Arc<StandaloneStore> {
        let store = store();
        let heartbeat = kube_time(Timestamp::now());
        store
            .upsert(vec![
                runtime_pod("rp-1", &[("runs", "1")], &heartbeat).value(),
                run("r1", &[]).value(),
            ])
            .unwrap();
        store
    }

    #[tokio::test(start_paused = true)]
    async fn deleted_runs_leave_no_backoff_state_or_delayed_retry() {
        let store = store();
        let controller = RunController::new(Arc::clone(store.cache()), store.clone());
        // No Runtime Pod: every Run stays Pending, with a Pending backoff
        // re-check each.
        let runs: Vec<_> = (0..1000)
            .map(|i| run(&format!("r{i}"), &[("runs", "1")]).value())
            .collect();
        store.upsert(runs).unwrap();
        // (The Pending write comes back through the store: twice each.)
        assert!(controller.drain().await >= 1000);
        assert_eq!(controller.backoff_entries(), 1000);
        assert_eq!(store.cache().queue().delayed_len(), 1000);
        for i in 0..1000 {
            assert!(store.delete(Kind::Run, "ns", &format!("r{i}")));
        }
        // Each deletion hands the key to the loop once more.
        assert_eq!(controller.drain().await, 1000);
        assert_eq!(controller.backoff_entries(), 0);
        assert_eq!(store.cache().queue().delayed_len(), 0);
    }

    #[tokio::test]
    async fn a_batch_left_part_way_marks_its_keys_done_and_queues_the_unstarted_again() {
        let store = store();
        let controller = RunController::new(Arc::clone(store.cache()), store.clone());
        let queue = Arc::clone(store.cache().queue());
        for name in ["a", "b", "c", "d"] {
            queue.add(RunKey::new("ns", name));
        }
        let keys = queue.next_batch(WORKER_BATCH).await.unwrap();
        assert_eq!(keys.len(), 4);
        // "a" finished, "b" was dropped mid-cycle (as on shutdown), "c"
        // and "d" never started.
        drop(Done {
            controller: &controller,
            queue: &queue,
            keys: &keys,
            finished: 1,
            running: true,
        });
        assert_eq!(queue.try_next(), Some(RunKey::new("ns", "c")));
        assert_eq!(queue.try_next(), Some(RunKey::new("ns", "d")));
        assert_eq!(queue.try_next(), None);
        assert_eq!(queue.outstanding(), 2);
        assert_eq!(controller.backoff_entries(), 0);
    }

    /// Delegates to the store, but its first `n` Run status writes panic.
    struct Panicking {
        store: Arc<StandaloneStore>,
        panics: AtomicUsize,
    }

    impl ClusterWriter for Panicking {
        fn write_run_status<'a>(
            &'a self,
            namespace: &'a str,
            name: &'a str,
            resource_version: Option<&'a str>,
            status: &'a RunStatus,
        ) -> BoxFuture<'a, Result<(), WriteError>> {
            if self
                .panics
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                panic!("injected: the status write panicked");
            }
            self.store
                .write_run_status(namespace, name, resource_version, status)
        }
        fn bind_pod<'a>(&'a self, b: &'a PodBinding) -> BoxFuture<'a, Result<(), BindError>> {
            self.store.bind_pod(b)
        }
        fn clear_claim_allocation<'a>(
            &'a self,
            c: &'a ClaimAllocationRef,
        ) -> BoxFuture<'a, Result<(), WriteError>> {
            self.store.clear_claim_allocation(c)
        }
        fn write_group_condition<'a>(
            &'a self,
            g: &'a GroupRef,
            c: &'a Condition,
        ) -> BoxFuture<'a, Result<(), WriteError>> {
            self.store.write_group_condition(g, c)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_cycle_restarts_its_worker_releases_its_reservation_and_retries() {
        let store = store_with_one_slot_and_r1();
        let writer = Arc::new(Panicking {
            store: Arc::clone(&store),
            panics: AtomicUsize::new(2),
        });
        let controller = Arc::new(RunController::new(Arc::clone(store.cache()), writer));
        let cache = Arc::clone(store.cache());
        cache.set_synced(true);
        let queue = Arc::clone(cache.queue());
        let task = tokio::spawn(Arc::clone(&controller).run(1, Duration::from_secs(3600)));
        crate::testkit::wait_until("the Run scheduled", Duration::from_secs(60), || {
            cache
                .run_status(&RunKey::new("ns", "r1"))
                .is_some_and(|(_, s)| s.phase.as_deref() == Some("Scheduled"))
        })
        .await;
        // Twice panicked, twice restarted. The reservations of the panicked
        // cycles were released (a kept one would make every later cycle
        // skip the Run), and the last was handed over to actual usage.
        let text = cache.metrics().encode();
        assert!(
            text.contains("kruntimes_task_restarts_total{task=\"RunWorker\"} 2"),
            "{text}"
        );
        cache.check_invariants().unwrap();
        assert_eq!(cache.assumed_pod("ns", "uid-r1"), None);
        queue.shutdown();
        task.await.unwrap();
    }

    /// A replica that wins the Lease before its initial lists are in
    /// decides nothing until they are: no placement, no status written.
    #[tokio::test(start_paused = true)]
    async fn the_loop_decides_nothing_before_the_cache_is_synced() {
        let store = store_with_one_slot_and_r1();
        let cache = Arc::clone(store.cache());
        assert!(!cache.is_synced());
        let controller = Arc::new(RunController::new(Arc::clone(&cache), store.clone()));
        let task = tokio::spawn(Arc::clone(&controller).run(1, Duration::from_secs(3600)));
        tokio::time::sleep(Duration::from_secs(10)).await;
        let key = RunKey::new("ns", "r1");
        let (_, status) = cache.run_status(&key).unwrap();
        assert_eq!(status, RunStatus::default(), "decided before sync");
        assert_eq!(cache.assumed_pod("ns", "uid-r1"), None);
        cache.set_synced(true);
        crate::testkit::wait_until("the Run scheduled", Duration::from_secs(60), || {
            cache
                .run_status(&key)
                .is_some_and(|(_, s)| s.phase.as_deref() == Some("Scheduled"))
        })
        .await;
        cache.queue().shutdown();
        task.await.unwrap();
    }

    /// A new leader whose watch missed the old leader's last placement (the
    /// watch down or lagging when it was written) decides nothing until a
    /// list of Runs asked for after it took the Lease is in: it does not
    /// place a Run onto the capacity that placement uses.
    #[tokio::test(start_paused = true)]
    async fn a_new_leader_decides_nothing_before_a_fresh_list_of_runs() {
        // The API server, and the old leader's cache.
        let api = store();
        let heartbeat = kube_time(Timestamp::now());
        api.upsert(vec![
            runtime_pod("rp-1", &[("runs", "1")], &heartbeat).value(),
            run("r0", &[]).value(),
        ])
        .unwrap();
        let listed = |kind| -> Vec<serde_json::Value> { api.list(kind, Some("ns"), None) };
        let runs = |values: Vec<serde_json::Value>| -> Vec<Run> {
            values
                .into_iter()
                .map(|v| serde_json::from_value(v).unwrap())
                .collect()
        };
        let before = runs(listed(Kind::Run));
        // The old leader places r0 on rp-1, its only room.
        let old = RunController::new(Arc::clone(api.cache()), api.clone());
        old.drain().await;
        let status = |name: &str| api.cache().run_status(&RunKey::new("ns", name)).unwrap().1;
        assert_eq!(status("r0").assigned_pod.as_deref(), Some("rp-1"));
        api.upsert(vec![run("r1", &[]).value()]).unwrap();

        // The standby's cache: the pod and r1, but r0 still waiting.
        let cache = Arc::new(RunCache::new(
            CacheConfig::default(),
            Arc::new(WorkQueue::default()),
            Arc::new(Metrics::default()),
        ));
        let pods: Vec<Pod> = listed(Kind::Pod)
            .into_iter()
            .map(|v| serde_json::from_value(v).unwrap())
            .collect();
        cache.reset_pods(&pods, Timestamp::now());
        let mut stale = before;
        stale.extend(runs(api.list(Kind::Run, Some("ns"), Some("r1"))));
        cache.reset_runs(&stale);
        cache.set_synced(true);
        // Its Run watcher, which follows requests for a fresh list.
        let mut relists = cache.runs_relists();

        // It takes the Lease.
        let controller = Arc::new(RunController::new(Arc::clone(&cache), api.clone()));
        let task = tokio::spawn(Arc::clone(&controller).run(1, Duration::from_secs(3600)));
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            status("r1"),
            RunStatus::default(),
            "decided before a fresh list"
        );
        assert_eq!(cache.assumed_pod("ns", "uid-r1"), None);

        // The watcher lists again.
        assert!(relists.has_changed().unwrap());
        let asked = *relists.borrow_and_update();
        cache.reset_runs(&runs(listed(Kind::Run)));
        cache.runs_listed(asked);
        crate::testkit::wait_until("r1 written Pending", Duration::from_secs(60), || {
            status("r1").phase.as_deref() == Some("Pending")
        })
        .await;
        assert_eq!(status("r1").assigned_pod, None);
        assert_eq!(status("r0").assigned_pod.as_deref(), Some("rp-1"));
        cache.queue().shutdown();
        task.await.unwrap();
    }

    /// A new leader waiting for its fresh list (its Run watch down) is fed
    /// by its watches all along, and the list itself hands it the key of
    /// every Run deleted meanwhile: its queue, which nothing consumes yet,
    /// takes none of them. The loop starts with the Runs that wait.
    #[tokio::test(start_paused = true)]
    async fn a_new_leader_waiting_for_a_fresh_list_queues_no_keys() {
        let store = store();
        let cache = Arc::clone(store.cache());
        let runs: Vec<_> = (0..100)
            .map(|i| run(&format!("r{i}"), &[]).value())
            .collect();
        store.upsert(runs).unwrap();
        cache.set_synced(true);
        let mut relists = cache.runs_relists();
        let controller = Arc::new(RunController::new(Arc::clone(&cache), store.clone()));
        controller.stand_by();
        // It takes the Lease.
        let ready = tokio::spawn({
            let controller = Arc::clone(&controller);
            async move { controller.ready().await }
        });
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(!ready.is_finished());
        // Runs deleted and created while it waits.
        for i in 0..100 {
            assert!(store.delete(Kind::Run, "ns", &format!("r{i}")));
        }
        let fresh: Vec<_> = (100..110)
            .map(|i| run(&format!("r{i}"), &[]).value())
            .collect();
        store.upsert(fresh).unwrap();
        assert_eq!(cache.queue().len(), 0, "keys queued before the loop");
        // The fresh list.
        assert!(relists.has_changed().unwrap());
        let asked = *relists.borrow_and_update();
        let listed: Vec<Run> = store
            .list(Kind::Run, Some("ns"), None)
            .into_iter()
            .map(|v| serde_json::from_value(v).unwrap())
            .collect();
        cache.reset_runs(&listed);
        cache.runs_listed(asked);
        ready.await.unwrap();
        // The waiting Runs, and nothing else.
        assert_eq!(cache.queue().len(), 10);
        assert_eq!(cache.queue().delayed_len(), 0);
    }
}
