//! Runtime Pod facts: capacity from annotations and the candidate rules.

use super::quantity;
use super::resources::RUNS;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::fmt;
use std::time::Duration;

/// Annotation prefix of a Runtime Pod's logical capacities.
pub const CAPACITY_PREFIX: &str = "kruntimes.io/capacity.";
/// Pod condition runtimed keeps fresh; `lastProbeTime` is its heartbeat.
pub const RUNTIMED_READY: &str = "kruntimes.io/RuntimedReady";

/// Everything the Run scheduler needs to know about a pod; the cache keeps
/// this instead of the whole Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    pub uid: String,
    /// Value of the runtime label, if the pod has it.
    pub runtime: Option<String>,
    pub phase: Option<String>,
    pub deleting: bool,
    pub ready: bool,
    pub runtimed_ready: bool,
    /// `lastProbeTime` of the `kruntimes.io/RuntimedReady` condition.
    pub heartbeat: Option<Timestamp>,
    /// Declared capacities (positive integers), sorted by name; `runs`
    /// always present.
    pub capacity: Vec<(String, u64)>,
}

/// The window of fresh heartbeats at one instant: `[now - stale_after,
/// now + stale_after]` (the future side tolerates clock skew).
#[derive(Debug, Clone, Copy)]
pub struct Freshness {
    pub now: Timestamp,
    pub stale_after: Duration,
    oldest: Timestamp,
    newest: Timestamp,
}

impl Freshness {
    pub fn new(now: Timestamp, stale_after: Duration) -> Self {
        let window = SignedDuration::try_from(stale_after).unwrap_or(SignedDuration::MAX);
        Freshness {
            now,
            stale_after,
            oldest: now.checked_sub(window).unwrap_or(Timestamp::MIN),
            newest: now.checked_add(window).unwrap_or(Timestamp::MAX),
        }
    }
}

/// Why a Runtime Pod is not a candidate (reason `RuntimePodUnavailable`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unavailable {
    NotRunning(Option<String>),
    Deleting,
    NotReady,
    RuntimedNotReady,
    NoHeartbeat,
    StaleHeartbeat {
        age_secs: i64,
        stale_after_secs: u64,
    },
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unavailable::NotRunning(p) => {
                write!(f, "pod phase is {}", p.as_deref().unwrap_or("unknown"))
            }
            Unavailable::Deleting => f.write_str("pod is being deleted"),
            Unavailable::NotReady => f.write_str("pod is not Ready"),
            Unavailable::RuntimedNotReady => write!(f, "condition {RUNTIMED_READY} is not True"),
            Unavailable::NoHeartbeat => write!(
                f,
                "condition {RUNTIMED_READY} has no lastProbeTime heartbeat"
            ),
            Unavailable::StaleHeartbeat {
                age_secs,
                stale_after_secs,
            } => {
                write!(
                    f,
                    "runtimed heartbeat is {age_secs}s old (stale after {stale_after_secs}s)"
                )
            }
        }
    }
}

impl PodFacts {
    /// Extracts the facts from a Pod.
    pub fn from_pod(pod: &Pod, runtime_label_key: &str, default_runs_capacity: u64) -> Self {
        let meta = &pod.metadata;
        let runtime = meta
            .labels
            .as_ref()
            .and_then(|l| l.get(runtime_label_key))
            .cloned();
        let status = pod.status.as_ref();
        let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
        let cond = |t: &str| conditions.iter().find(|c| c.type_ == t);
        let ready = cond("Ready").is_some_and(|c| c.status == "True");
        let rt = cond(RUNTIMED_READY);
        let capacity = capacity_from_annotations(
            meta.annotations
                .iter()
                .flatten()
                .map(|(k, v)| (k.as_str(), v.as_str())),
            default_runs_capacity,
        );
        PodFacts {
            uid: meta.uid.clone().unwrap_or_default(),
            runtime,
            phase: status.and_then(|s| s.phase.clone()),
            deleting: meta.deletion_timestamp.is_some(),
            ready,
            runtimed_ready: rt.is_some_and(|c| c.status == "True"),
            heartbeat: rt.and_then(|c| c.last_probe_time.as_ref()).map(|t| t.0),
            capacity,
        }
    }

    /// The candidate rules of DESIGN section 3 (namespace and runtime label
    /// are matched by the caller's index): phase Running, not being deleted,
    /// Ready, `kruntimes.io/RuntimedReady=True` with a heartbeat no older than
    /// `stale_after`. A heartbeat from the future (clock skew) counts as fresh
    /// only within the same window.
    pub fn availability(&self, now: Timestamp, stale_after: Duration) -> Result<(), Unavailable> {
        self.available_in(&Freshness::new(now, stale_after))
    }

    /// [`availability`](Self::availability) with the freshness window
    /// computed once per decision instead of once per pod.
    pub fn available_in(&self, w: &Freshness) -> Result<(), Unavailable> {
        self.static_availability()?;
        w.check(self.heartbeat)
    }

    /// The candidate rules that do not depend on the clock.
    pub fn static_availability(&self) -> Result<(), Unavailable> {
        if self.phase.as_deref() != Some("Running") {
            return Err(Unavailable::NotRunning(self.phase.clone()));
        }
        if self.deleting {
            return Err(Unavailable::Deleting);
        }
        if !self.ready {
            return Err(Unavailable::NotReady);
        }
        if !self.runtimed_ready {
            return Err(Unavailable::RuntimedNotReady);
        }
        if self.heartbeat.is_none() {
            return Err(Unavailable::NoHeartbeat);
        }
        Ok(())
    }
}

impl Freshness {
    /// The oldest and the newest heartbeat inside the window (both
    /// included): [`check`](Self::check) passes exactly between them.
    pub fn bounds(&self) -> (Timestamp, Timestamp) {
        (self.oldest, self.newest)
    }

    /// Whether a heartbeat is inside the window.
    #[inline]
    pub fn check(&self, heartbeat: Option<Timestamp>) -> Result<(), Unavailable> {
        let Some(hb) = heartbeat else {
            return Err(Unavailable::NoHeartbeat);
        };
        let w = self;
        if hb < w.oldest || hb > w.newest {
            return Err(Unavailable::StaleHeartbeat {
                age_secs: w.now.duration_since(hb).as_secs(),
                stale_after_secs: w.stale_after.as_secs(),
            });
        }
        Ok(())
    }
}

/// Capacities from `kruntimes.io/capacity.<resource>` annotations. Any
/// positive quantity counts, as upstream's `runtimepod.Capacity` reads it;
/// requests and usage are integers, so a fractional capacity is held as its
/// floor, which admits exactly what upstream's exact comparison admits
/// (`1500m` takes one Run of 1, not two). Values that do not parse or are
/// not positive are ignored as if absent; `runs` falls back to
/// `default_runs` when absent or ignored. Sorted by resource name.
pub fn capacity_from_annotations<'a>(
    annotations: impl IntoIterator<Item = (&'a str, &'a str)>,
    default_runs: u64,
) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = annotations
        .into_iter()
        .filter_map(|(k, v)| {
            let name = k.strip_prefix(CAPACITY_PREFIX)?;
            if name.is_empty() {
                return None;
            }
            let a = quantity::parse(v).ok()?.floor_positive()?;
            Some((name.to_owned(), a))
        })
        .collect();
    out.sort();
    out.dedup_by(|a, b| a.0 == b.0);
    if default_runs > 0 && !out.iter().any(|(n, _)| n == RUNS) {
        let pos = out.partition_point(|(n, _)| n.as_str() < RUNS);
        out.insert(pos, (RUNS.to_owned(), default_runs));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    /// The Ready Runtime Pod `default/rp-1` (uid `u1`, runtime `python`)
    /// with `annotations`, its runtimed heartbeat at `heartbeat` (none: a
    /// `RuntimedReady` condition without a probe time).
    fn mk_pod(annotations: &[(&str, &str)], heartbeat: Option<&str>) -> Pod {
        let p = annotations.iter().fold(
            testkit::runtime_pod("rp-1", &[], heartbeat.unwrap_or_default())
                .namespace("default")
                .uid("u1")
                .runtime("python"),
            |p, (k, v)| p.annotation(k, v),
        );
        match heartbeat {
            Some(_) => p,
            None => p.unset(&["status", "conditions", "1", "lastProbeTime"]),
        }
        .typed()
    }

    const NOW: &str = "2026-01-01T00:00:30Z";
    const FRESH: &str = "2026-01-01T00:00:20Z";

    #[test]
    fn capacity_parsing() {
        let cap = capacity_from_annotations(
            [
                ("kruntimes.io/capacity.gpu", "2"),
                ("kruntimes.io/capacity.mem", "1Ki"),
                ("kruntimes.io/capacity.half", "1.5"),
                ("kruntimes.io/capacity.milli", "2500m"),
                ("kruntimes.io/capacity.tiny", "500m"),
                ("kruntimes.io/capacity.huge", "1e40"),
                ("kruntimes.io/capacity.bad", "one"),
                ("kruntimes.io/capacity.neg", "-1"),
                ("kruntimes.io/capacity.zero", "0"),
                ("kruntimes.io/capacity.", "3"),
                ("other/capacity.x", "3"),
            ],
            2,
        );
        assert_eq!(
            cap,
            vec![
                ("gpu".into(), 2),
                ("half".into(), 1),
                ("huge".into(), quantity::MAX_AMOUNT),
                ("mem".into(), 1024),
                ("milli".into(), 2),
                ("runs".into(), 2),
                ("tiny".into(), 0)
            ]
        );
        // A fractional runs capacity below 1 declares runs: no fallback.
        let cap = capacity_from_annotations([("kruntimes.io/capacity.runs", "500m")], 2);
        assert_eq!(cap, vec![("runs".into(), 0)]);
        let cap = capacity_from_annotations([("kruntimes.io/capacity.runs", "5")], 2);
        assert_eq!(cap, vec![("runs".into(), 5)]);
        let cap = capacity_from_annotations([("kruntimes.io/capacity.runs", "zero")], 3);
        assert_eq!(cap, vec![("runs".into(), 3)]);
    }

    #[test]
    fn candidate_rules() {
        let now = ts(NOW);
        let stale = Duration::from_secs(15);
        let facts = |p: &Pod| PodFacts::from_pod(p, "runtime", 2);
        let ok = mk_pod(&[], Some(FRESH));
        assert_eq!(facts(&ok).availability(now, stale), Ok(()));
        assert_eq!(facts(&ok).runtime.as_deref(), Some("python"));

        let mut p = ok.clone();
        p.status.as_mut().unwrap().phase = Some("Pending".into());
        assert_eq!(
            facts(&p).availability(now, stale),
            Err(Unavailable::NotRunning(Some("Pending".into())))
        );

        let mut p = ok.clone();
        p.metadata.deletion_timestamp = Some(Time(now));
        assert_eq!(
            facts(&p).availability(now, stale),
            Err(Unavailable::Deleting)
        );

        let mut p = ok.clone();
        p.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
        assert_eq!(
            facts(&p).availability(now, stale),
            Err(Unavailable::NotReady)
        );

        let mut p = ok.clone();
        p.status.as_mut().unwrap().conditions.as_mut().unwrap()[1].status = "Unknown".into();
        assert_eq!(
            facts(&p).availability(now, stale),
            Err(Unavailable::RuntimedNotReady)
        );

        let mut p = ok.clone();
        p.status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()
            .remove(1);
        assert_eq!(
            facts(&p).availability(now, stale),
            Err(Unavailable::RuntimedNotReady)
        );

        let p = mk_pod(&[], None);
        assert_eq!(
            facts(&p).availability(now, stale),
            Err(Unavailable::NoHeartbeat)
        );

        let p = mk_pod(&[], Some("2026-01-01T00:00:14Z"));
        assert_eq!(
            facts(&p).availability(now, stale),
            Err(Unavailable::StaleHeartbeat {
                age_secs: 16,
                stale_after_secs: 15
            })
        );
        let p = mk_pod(&[], Some("2026-01-01T00:00:15Z"));
        assert_eq!(
            facts(&p).availability(now, stale),
            Ok(()),
            "exactly at the limit is fresh"
        );
        let p = mk_pod(&[], Some("2026-01-01T00:00:40Z"));
        assert_eq!(
            facts(&p).availability(now, stale),
            Ok(()),
            "small skew tolerated"
        );
        let p = mk_pod(&[], Some("2026-01-01T01:00:00Z"));
        assert!(
            facts(&p).availability(now, stale).is_err(),
            "far future is not fresh"
        );
    }

    #[test]
    fn unavailable_messages() {
        let u = Unavailable::StaleHeartbeat {
            age_secs: 42,
            stale_after_secs: 15,
        };
        assert_eq!(
            u.to_string(),
            "runtimed heartbeat is 42s old (stale after 15s)"
        );
    }
}
