//! Retry backoff of a Pending Run, as upstream kruntimes computes it
//! (`internal/scheduler/reconciler.go` `pendingRetryDelay`,
//! `internal/retry`): a Run reset to `Pending` for attempt `n > 1` with
//! condition `Running=False` is placed only once
//! `Running.lastTransitionTime + backoff * 2^(n-2)` (capped at 60 s) has
//! passed. Pure: the caller passes the clock.

use crate::crd::{RunSpec, RunStatus, phase};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::time::Duration;

/// Longest backoff (upstream `retry.MaxBackoff`).
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Backoff of a policy that sets none (upstream `retry.WithDefaults`).
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);

/// Parses a Go duration string (`time.ParseDuration`, what
/// `metav1.Duration` decodes): `300ms`, `1.5s`, `1m30s`, `2h`; units
/// `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`. `None` when it is not one.
pub fn parse_go_duration(s: &str) -> Option<SignedDuration> {
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(SignedDuration::ZERO);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, r) = rest.split_at(int_len);
        let (frac_part, r) = match r.strip_prefix('.') {
            Some(r) => {
                let n = r.bytes().take_while(u8::is_ascii_digit).count();
                r.split_at(n)
            }
            None => ("", r),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        let unit_len = r
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(r.len(), |(i, _)| i);
        let (unit, r) = r.split_at(unit_len);
        let per: i128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        let int: i128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().ok()?
        };
        let mut v = int.checked_mul(per)?;
        let mut scale = per;
        for d in frac_part.bytes().take(18) {
            scale /= 10;
            v = v.checked_add(i128::from(d - b'0') * scale)?;
        }
        total = total.checked_add(v)?;
        if total > i128::from(i64::MAX) {
            return None;
        }
        rest = r;
    }
    let ns = i64::try_from(total).ok()?;
    let d = SignedDuration::from_nanos(ns);
    Some(if neg { -d } else { d })
}

/// The delay before attempt `attempt` (2 is the first retry): the policy's
/// backoff (default 1 s when unset, unparsable or not positive) doubled per
/// retry after the first, capped at [`MAX_BACKOFF`].
pub fn backoff(spec: &RunSpec, attempt: i32) -> Duration {
    let base = spec
        .retry_policy
        .as_ref()
        .and_then(|p| p.backoff.as_deref())
        .and_then(parse_go_duration)
        .filter(|d| d.is_positive())
        .and_then(|d| Duration::try_from(d).ok())
        .unwrap_or(DEFAULT_BACKOFF);
    let retries = attempt.saturating_sub(2).max(0) as u32;
    let factor = 1u32.checked_shl(retries.min(31)).unwrap_or(u32::MAX);
    base.saturating_mul(factor).min(MAX_BACKOFF)
}

/// When a Pending Run in a retry backoff may be placed: `None` when it is
/// not backing off (not `Pending`, first attempt, or no `Running=False`).
pub fn retry_at(spec: &RunSpec, status: &RunStatus) -> Option<Timestamp> {
    if status.phase.as_deref() != Some(phase::PENDING) {
        return None;
    }
    let attempt = status.attempt.unwrap_or(0);
    if attempt <= 1 {
        return None;
    }
    let running = status.conditions.iter().find(|c| c.type_ == "Running")?;
    if running.status != "False" {
        return None;
    }
    let d = SignedDuration::try_from(backoff(spec, attempt)).ok()?;
    running.last_transition_time.0.checked_add(d).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit;

    /// The test kit's Run's spec, with `spec.retryPolicy.backoff`.
    fn spec(backoff: Option<&str>) -> RunSpec {
        let r = testkit::run("r", &[]);
        match backoff {
            Some(b) => r.set(&["spec", "retryPolicy", "backoff"], b),
            None => r,
        }
        .typed::<crate::crd::Run>()
        .spec
    }

    #[test]
    fn go_durations() {
        let ms = |s: &str| parse_go_duration(s).map(|d| d.as_millis());
        assert_eq!(ms("1s"), Some(1000));
        assert_eq!(ms("300ms"), Some(300));
        assert_eq!(ms("1.5s"), Some(1500));
        assert_eq!(ms("1m30s"), Some(90_000));
        assert_eq!(ms("2h"), Some(7_200_000));
        assert_eq!(ms("0"), Some(0));
        assert_eq!(ms("-2s"), Some(-2000));
        for bad in ["", "s", "1", "1x", "1.s.", "5 s", "9999999999999h"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }

    /// Upstream `internal/retry` `Backoff` with `WithDefaults`.
    #[test]
    fn upstream_backoff_table() {
        for (backoff_s, attempt, want_ms) in [
            (None, 2, 1000),
            (None, 3, 2000),
            (None, 4, 4000),
            (Some("2s"), 2, 2000),
            (Some("2s"), 3, 4000),
            (Some("2s"), 6, 32_000),
            (Some("2s"), 7, 60_000),
            (Some("10s"), 100, 60_000),
            (Some("0s"), 2, 1000),
            (Some("-1s"), 2, 1000),
            (Some("nonsense"), 2, 1000),
            (Some("500ms"), 1, 500),
        ] {
            assert_eq!(
                backoff(&spec(backoff_s), attempt).as_millis(),
                want_ms,
                "{backoff_s:?} attempt {attempt}"
            );
        }
    }

    #[test]
    fn backing_off_only_when_upstream_is() {
        let status = |phase: &str, attempt: i32, running: Option<&str>| -> RunStatus {
            let r = testkit::run("r", &[])
                .set(&["status", "phase"], phase)
                .set(&["status", "attempt"], attempt);
            match running {
                Some(st) => r.condition("Running", st, "RuntimeError", "2026-01-01T00:00:00Z"),
                None => r,
            }
            .typed::<crate::crd::Run>()
            .status
            .unwrap_or_default()
        };
        let s = spec(Some("5s"));
        assert_eq!(
            retry_at(&s, &status("Pending", 2, Some("False"))),
            Some("2026-01-01T00:00:05Z".parse().unwrap())
        );
        assert_eq!(
            retry_at(&s, &status("Pending", 3, Some("False"))),
            Some("2026-01-01T00:00:10Z".parse().unwrap())
        );
        assert_eq!(retry_at(&s, &status("Pending", 1, Some("False"))), None);
        assert_eq!(retry_at(&s, &status("Pending", 2, Some("True"))), None);
        assert_eq!(retry_at(&s, &status("Pending", 2, None)), None);
        assert_eq!(retry_at(&s, &status("", 2, Some("False"))), None);
        assert_eq!(retry_at(&s, &status("Scheduled", 2, Some("False"))), None);
    }
}
