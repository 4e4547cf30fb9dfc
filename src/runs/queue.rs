//! A coalescing work queue of Run keys (client-go workqueue semantics).
//!
//! A key is queued at most once; a key being processed that is added again
//! is re-queued when its worker calls [`WorkQueue::done`], so one key is never
//! worked on by two workers at once and no wakeup is lost.

use parking_lot::Mutex;
use std::collections::{HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

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
}

/// The queue. Cheap to share behind an `Arc`.
pub struct WorkQueue<K> {
    inner: Mutex<Inner<K>>,
    notify: Notify,
}

impl<K: Clone + Eq + Hash + Send + 'static> Default for WorkQueue<K> {
    fn default() -> Self {
        WorkQueue {
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                dirty: HashSet::new(),
                processing: HashSet::new(),
                shutdown: false,
            }),
            notify: Notify::new(),
        }
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    /// Adds a key; returns false if it was already waiting (coalesced).
    pub fn add(&self, key: K) -> bool {
        let mut g = self.inner.lock();
        if g.shutdown || !g.dirty.insert(key.clone()) {
            return false;
        }
        if !g.processing.contains(&key) {
            g.queue.push_back(key);
            drop(g);
            self.notify.notify_one();
        }
        true
    }

    /// Adds a key after a delay (backoff, retries).
    pub fn add_after(self: &Arc<Self>, key: K, delay: Duration) {
        let q = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            q.add(key);
        });
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

    pub fn len(&self) -> usize {
        self.inner.lock().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of keys waiting or being worked on.
    pub fn outstanding(&self) -> usize {
        let g = self.inner.lock();
        g.dirty.len() + g.processing.len()
    }

    pub fn shutdown(&self) {
        self.inner.lock().shutdown = true;
        self.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
