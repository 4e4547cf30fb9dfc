//! A coalescing work queue of Run keys (client-go workqueue semantics).
//!
//! A key is queued at most once; a key being processed that is added again
//! is re-queued when its worker calls [`WorkQueue::done`], so one key is never
//! worked on by two workers at once and no wakeup is lost.
//!
//! Delayed adds ([`WorkQueue::add_after`], client-go's delaying queue) wait
//! in one table served by one timer task: a key waits at most once, at the
//! earliest time asked for, so retries and backoffs of many Runs cost one
//! entry each, never one task each.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Namespace and name of a Run.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunKey {
    pub namespace: String,
    pub name: String,
}

impl RunKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        RunKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for RunKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

struct Inner<K> {
    queue: VecDeque<K>,
    dirty: HashSet<K>,
    processing: HashSet<K>,
    shutdown: bool,
    /// No loop consumes the queue (a standby replica): adds are dropped.
    parked: bool,
}

/// Keys waiting to be added, each once, at its earliest due time.
struct Delayed<K> {
    /// Each waiting key's due time and sequence number.
    by_key: HashMap<K, (Instant, u64)>,
    /// The same keys by `(due, sequence)`.
    by_due: BTreeMap<(Instant, u64), K>,
    next_seq: u64,
}

impl<K: Clone + Eq + Hash> Delayed<K> {
    /// Takes the keys due by `now`.
    fn take_due(&mut self, now: Instant) -> Vec<K> {
        let mut due = Vec::new();
        while let Some(entry) = self.by_due.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let k = entry.remove();
            self.by_key.remove(&k);
            due.push(k);
        }
        due
    }

    fn next_due(&self) -> Option<Instant> {
        self.by_due.keys().next().map(|(t, _)| *t)
    }
}

/// The queue. Cheap to share behind an `Arc`.
pub struct WorkQueue<K> {
    inner: Mutex<Inner<K>>,
    notify: Notify,
    delayed: Mutex<Delayed<K>>,
    /// Wakes the timer when an earlier due time arrives (or on shutdown).
    timer_wake: Arc<Notify>,
    /// The one timer task, started by the first delayed add (and again if
    /// it ever stopped).
    timer: Mutex<Option<JoinHandle<()>>>,
}

impl<K: Clone + Eq + Hash + Send + 'static> Default for WorkQueue<K> {
    fn default() -> Self {
        WorkQueue {
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                dirty: HashSet::new(),
                processing: HashSet::new(),
                shutdown: false,
                parked: false,
            }),
            notify: Notify::new(),
            delayed: Mutex::new(Delayed {
                by_key: HashMap::new(),
                by_due: BTreeMap::new(),
                next_seq: 0,
            }),
            timer_wake: Arc::new(Notify::new()),
            timer: Mutex::new(None),
        }
    }
}

impl<K> Drop for WorkQueue<K> {
    fn drop(&mut self) {
        if let Some(t) = self.timer.get_mut().take() {
            t.abort();
        }
    }
}

/// The timer: adds delayed keys when they are due; ends with the queue.
async fn timer<K: Clone + Eq + Hash + Send + 'static>(q: Weak<WorkQueue<K>>, wake: Arc<Notify>) {
    loop {
        let next = {
            let Some(q) = q.upgrade() else { return };
            if q.inner.lock().shutdown {
                return;
            }
            let due = q.delayed.lock().take_due(Instant::now());
            for k in due {
                q.add(k);
            }
            q.delayed.lock().next_due()
        };
        match next {
            Some(at) => {
                tokio::select! {
                    _ = wake.notified() => {}
                    _ = tokio::time::sleep_until(at) => {}
                }
            }
            None => wake.notified().await,
        }
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    /// Adds a key; returns false if it was already waiting (coalesced).
    pub fn add(&self, key: K) -> bool {
        let mut g = self.inner.lock();
        if g.shutdown || g.parked || !g.dirty.insert(key.clone()) {
            return false;
        }
        if !g.processing.contains(&key) {
            g.queue.push_back(key);
            drop(g);
            self.notify.notify_one();
        }
        true
    }

    /// Adds a key after a delay (backoff, retries). A key already waiting
    /// keeps the earlier of its two due times: one entry per key, one
    /// timer task per queue.
    pub fn add_after(self: &Arc<Self>, key: K, delay: Duration) {
        if delay.is_zero() {
            self.add(key);
            return;
        }
        {
            let g = self.inner.lock();
            if g.shutdown || g.parked {
                return;
            }
        }
        let due = Instant::now() + delay;
        let earliest = {
            let mut d = self.delayed.lock();
            match d.by_key.get(&key).copied() {
                Some((at, _)) if at <= due => return,
                Some(old) => {
                    d.by_due.remove(&old);
                }
                None => {}
            }
            let seq = d.next_seq;
            d.next_seq += 1;
            d.by_key.insert(key.clone(), (due, seq));
            d.by_due.insert((due, seq), key);
            d.next_due() == Some(due)
        };
        self.ensure_timer();
        if earliest {
            self.timer_wake.notify_one();
        }
    }

    /// Drops a key's delayed add, if one waits (the key is gone).
    pub fn forget_delayed(&self, key: &K) {
        let mut d = self.delayed.lock();
        if let Some(at) = d.by_key.remove(key) {
            d.by_due.remove(&at);
        }
    }

    /// Keys waiting for a delayed add.
    #[cfg(any(test, feature = "testkit"))]
    pub fn delayed_len(&self) -> usize {
        self.delayed.lock().by_key.len()
    }

    /// Starts the timer task unless it runs.
    fn ensure_timer(self: &Arc<Self>) {
        let mut t = self.timer.lock();
        if t.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        if t.is_some() {
            tracing::error!("the work queue's timer stopped; starting it again");
        }
        *t = Some(tokio::spawn(timer(
            Arc::downgrade(self),
            Arc::clone(&self.timer_wake),
        )));
    }

    /// Waits for the next key; `None` after shutdown.
    pub async fn next(&self) -> Option<K> {
        loop {
            let notified = self.notify.notified();
            {
                let mut g = self.inner.lock();
                if g.shutdown {
                    return None;
                }
                if let Some(k) = g.queue.pop_front() {
                    g.dirty.remove(&k);
                    g.processing.insert(k.clone());
                    if !g.queue.is_empty() {
                        self.notify.notify_one();
                    }
                    return Some(k);
                }
            }
            notified.await;
        }
    }

    /// Waits for the next key, then takes up to `max` keys (at least one)
    /// in one hold of the lock; `None` after shutdown. Each key taken is
    /// processing until [`done`](Self::done) (or
    /// [`done_all`](Self::done_all)) is called for it.
    pub async fn next_batch(&self, max: usize) -> Option<Vec<K>> {
        loop {
            let notified = self.notify.notified();
            {
                let mut g = self.inner.lock();
                if g.shutdown {
                    return None;
                }
                if !g.queue.is_empty() {
                    let n = g.queue.len().min(max.max(1));
                    let mut keys = Vec::with_capacity(n);
                    let Inner {
                        queue,
                        dirty,
                        processing,
                        ..
                    } = &mut *g;
                    for k in queue.drain(..n) {
                        dirty.remove(&k);
                        processing.insert(k.clone());
                        keys.push(k);
                    }
                    if !g.queue.is_empty() {
                        self.notify.notify_one();
                    }
                    return Some(keys);
                }
            }
            notified.await;
        }
    }

    /// Non-blocking variant of [`next`](Self::next).
    pub fn try_next(&self) -> Option<K> {
        let mut g = self.inner.lock();
        let k = g.queue.pop_front()?;
        g.dirty.remove(&k);
        g.processing.insert(k.clone());
        Some(k)
    }

    /// Marks a key finished; re-queues it if it was added meanwhile.
    pub fn done(&self, key: &K) {
        let mut g = self.inner.lock();
        g.processing.remove(key);
        if g.dirty.contains(key) {
            g.queue.push_back(key.clone());
            drop(g);
            self.notify.notify_one();
        }
    }

    /// [`done`](Self::done) for each of `keys`, in one hold of the lock.
    pub fn done_all(&self, keys: &[K]) {
        let mut g = self.inner.lock();
        let mut requeued = false;
        for key in keys {
            g.processing.remove(key);
            if g.dirty.contains(key) {
                g.queue.push_back(key.clone());
                requeued = true;
            }
        }
        drop(g);
        // One wakeup is enough: a worker that takes keys and leaves some
        // behind wakes the next one.
        if requeued {
            self.notify.notify_one();
        }
    }

    pub fn len(&self) -> usize {
        self.inner.lock().queue.len()
    }

    /// While no loop consumes the queue (a replica that does not hold the
    /// Lease): drops every waiting and delayed key, and every key added
    /// until [`unpark`](Self::unpark). Fed by the watches all along, a
    /// standby's queue would otherwise keep the key of every Run it ever
    /// saw change, deleted ones included.
    pub fn park(&self) {
        let mut g = self.inner.lock();
        g.parked = true;
        g.queue.clear();
        g.dirty.clear();
        drop(g);
        let mut d = self.delayed.lock();
        d.by_key.clear();
        d.by_due.clear();
    }

    /// Takes keys again (the loop starts; it queues what waits itself).
    pub fn unpark(&self) {
        self.inner.lock().parked = false;
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of keys waiting or being worked on (tests wait for zero).
    #[cfg(any(test, feature = "testkit"))]
    pub fn outstanding(&self) -> usize {
        let g = self.inner.lock();
        g.dirty.len() + g.processing.len()
    }

    pub fn shutdown(&self) {
        self.inner.lock().shutdown = true;
        self.notify.notify_waiters();
        let mut d = self.delayed.lock();
        d.by_key.clear();
        d.by_due.clear();
        drop(d);
        self.timer_wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_parked_queue_keeps_nothing_until_unparked() {
        let q: Arc<WorkQueue<u32>> = Arc::new(WorkQueue::default());
        q.add(1);
        q.add_after(2, Duration::from_secs(1));
        q.park();
        assert_eq!((q.len(), q.delayed_len(), q.outstanding()), (0, 0, 0));
        for k in 3..1000 {
            assert!(!q.add(k));
            q.add_after(k, Duration::from_secs(1));
        }
        assert_eq!((q.len(), q.delayed_len(), q.outstanding()), (0, 0, 0));
        q.unpark();
        assert!(q.add(7));
        assert_eq!(q.try_next(), Some(7));
    }

    #[test]
    fn coalesces_and_requeues_while_processing() {
        let q: WorkQueue<u32> = WorkQueue::default();
        assert!(q.add(1));
        assert!(!q.add(1));
        q.add(2);
        assert_eq!(q.len(), 2);
        let k = q.try_next().unwrap();
        assert_eq!(k, 1);
        // Added while processing: not handed out twice, re-queued on done.
        assert!(q.add(1));
        assert_eq!(q.try_next(), Some(2));
        assert_eq!(q.try_next(), None);
        q.done(&1);
        assert_eq!(q.try_next(), Some(1));
        q.done(&1);
        q.done(&2);
        assert_eq!(q.outstanding(), 0);
    }

    #[tokio::test]
    async fn batches_take_up_to_max_and_requeue_keys_added_meanwhile() {
        let q: WorkQueue<u32> = WorkQueue::default();
        for i in 0..5 {
            q.add(i);
        }
        assert_eq!(q.next_batch(3).await, Some(vec![0, 1, 2]));
        // Taken keys are processing: added again, they wait for done_all.
        assert!(q.add(1));
        assert_eq!(q.next_batch(0).await, Some(vec![3]));
        assert_eq!(q.next_batch(10).await, Some(vec![4]));
        assert!(q.is_empty());
        q.done_all(&[0, 1, 2]);
        assert_eq!(q.try_next(), Some(1));
        q.done(&1);
        q.done_all(&[3, 4]);
        assert_eq!(q.outstanding(), 0);
        q.shutdown();
        assert_eq!(q.next_batch(3).await, None);
    }

    #[tokio::test]
    async fn next_wakes_and_shutdown_ends() {
        let q: Arc<WorkQueue<u32>> = Arc::new(WorkQueue::default());
        let q2 = Arc::clone(&q);
        let h = tokio::spawn(async move { q2.next().await });
        tokio::task::yield_now().await;
        q.add(7);
        assert_eq!(h.await.unwrap(), Some(7));
        q.shutdown();
        assert_eq!(q.next().await, None);
    }

    /// Alive tasks of the test's runtime.
    fn tasks() -> usize {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_adds_share_one_timer_and_each_key_waits_once() {
        let q: Arc<WorkQueue<u32>> = Arc::new(WorkQueue::default());
        for i in 0..10_000 {
            q.add_after(i, Duration::from_secs(1 + u64::from(i % 10)));
        }
        // The same key again and again: still one entry, at the earliest time.
        for _ in 0..10_000 {
            q.add_after(7, Duration::from_secs(60));
        }
        q.add_after(9, Duration::from_millis(500));
        assert_eq!(q.delayed_len(), 10_000);
        assert!(tasks() <= 1, "{} tasks", tasks());
        assert!(q.is_empty());
        tokio::time::sleep(Duration::from_millis(600)).await;
        // 9 moved earlier; nothing else is due yet.
        assert_eq!(q.try_next(), Some(9));
        assert!(q.is_empty());
        tokio::time::sleep(Duration::from_millis(500)).await;
        // Everything due at 1s (i % 10 == 0, and 7 kept its 8s, not 60s).
        assert_eq!(q.len(), 1000);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(q.len(), 9_999);
        assert_eq!(q.delayed_len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_forgotten_or_shut_down_delayed_add_never_fires() {
        let q: Arc<WorkQueue<u32>> = Arc::new(WorkQueue::default());
        q.add_after(1, Duration::from_secs(1));
        q.add_after(2, Duration::from_secs(1));
        q.forget_delayed(&1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(q.try_next(), Some(2));
        assert_eq!(q.try_next(), None);
        q.add_after(3, Duration::from_secs(1));
        q.shutdown();
        assert_eq!(q.delayed_len(), 0);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(q.try_next(), None);
        // The timer ended with the shutdown.
        tokio::task::yield_now().await;
        assert_eq!(tasks(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_timer_ends_with_the_queue() {
        let q: Arc<WorkQueue<u32>> = Arc::new(WorkQueue::default());
        q.add_after(1, Duration::from_secs(1));
        assert_eq!(tasks(), 1);
        drop(q);
        tokio::task::yield_now().await;
        assert_eq!(tasks(), 0);
    }
}
