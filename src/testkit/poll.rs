//! Waiting for something another task does, bounded.

use std::future::Future;
use std::time::Duration;

/// How often a condition is checked.
const EVERY: Duration = Duration::from_millis(25);

/// Waits until `cond` holds, checking every 25 ms for at most `within`;
/// panics naming `what` if it never does. Under paused tokio time the
/// sleeps take no real time.
pub async fn wait_until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let tries = within.as_millis().div_ceil(EVERY.as_millis()).max(1);
    for _ in 0..tries {
        if cond() {
            return;
        }
        tokio::time::sleep(EVERY).await;
    }
    assert!(cond(), "timed out after {within:?} waiting for {what}");
}

/// [`wait_until`] for a condition that must itself await (an HTTP call).
pub async fn wait_until_async<F, Fut>(what: &str, within: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let tries = within.as_millis().div_ceil(EVERY.as_millis()).max(1);
    for _ in 0..tries {
        if cond().await {
            return;
        }
        tokio::time::sleep(EVERY).await;
    }
    assert!(
        cond().await,
        "timed out after {within:?} waiting for {what}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(start_paused = true)]
    async fn returns_once_the_condition_holds() {
        let n = Arc::new(AtomicU32::new(0));
        let m = Arc::clone(&n);
        wait_until("three checks", Duration::from_secs(1), move || {
            m.fetch_add(1, Ordering::Relaxed) >= 2
        })
        .await;
        assert_eq!(n.load(Ordering::Relaxed), 3);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "timed out after 100ms waiting for never")]
    async fn gives_up_naming_what_it_waited_for() {
        wait_until("never", Duration::from_millis(100), || false).await;
    }

    #[tokio::test(start_paused = true)]
    async fn async_conditions_are_awaited() {
        let mut n = 0;
        wait_until_async("two", Duration::from_secs(1), || {
            n += 1;
            let done = n >= 2;
            async move { done }
        })
        .await;
        assert_eq!(n, 2);
    }
}
