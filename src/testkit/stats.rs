//! The one percentile definition every printed figure uses.

use std::time::{Duration, Instant};

/// The `p`-th quantile (`0.0..=1.0`) of `sorted` (ascending) by the
/// **nearest-rank** method: the smallest sample such that at least
/// `p × n` samples are no larger, i.e. the sample at 1-based rank
/// `⌈p × n⌉` (rank 1 for `p = 0`). It is always one of the samples, never
/// an interpolation: p50 of 200 samples is the 100th, p99 the 198th.
///
/// # Panics
///
/// If `sorted` is empty or `p` is outside `0.0..=1.0`.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> T {
    assert!(!sorted.is_empty(), "percentile of no samples");
    assert!((0.0..=1.0).contains(&p), "percentile {p} is not in 0..=1");
    let n = sorted.len();
    // Guard against 0.99 × 100 = 98.99999… style float error before ceil.
    let rank = ((p * n as f64) - 1e-9).ceil().max(1.0) as usize;
    sorted[rank.min(n) - 1]
}

/// Times `n` calls of `f` and returns the durations sorted ascending,
/// ready for [`percentile`].
pub fn time_calls(n: usize, mut f: impl FnMut()) -> Vec<Duration> {
    let mut t: Vec<Duration> = (0..n)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    t.sort();
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_picks_a_sample_at_rank_ceil_p_n() {
        let v: Vec<u32> = (1..=200).collect();
        assert_eq!(percentile(&v, 0.5), 100);
        assert_eq!(percentile(&v, 0.99), 198);
        assert_eq!(percentile(&v, 1.0), 200);
        assert_eq!(percentile(&v, 0.0), 1);
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&v, 0.5), 50);
        assert_eq!(percentile(&[7u32], 0.99), 7);
        let v = [1u32, 2, 3];
        assert_eq!(percentile(&v, 0.5), 2);
        assert_eq!(percentile(&v, 0.34), 2);
        assert_eq!(percentile(&v, 0.33), 1);
    }

    #[test]
    fn time_calls_sorts_what_it_measured() {
        let mut i = 0u64;
        let t = time_calls(5, || {
            i += 1;
            std::thread::sleep(Duration::from_micros(10 * (5 - i)));
        });
        assert_eq!(i, 5);
        assert_eq!(t.len(), 5);
        assert!(t.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    #[should_panic(expected = "percentile of no samples")]
    fn no_samples_is_a_test_bug() {
        percentile::<u32>(&[], 0.5);
    }
}
