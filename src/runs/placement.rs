//! Filter and least-loaded score for one Run against one Runtime Pod, and the
//! Pending summary when nothing fits. Pure functions over resource vectors.

use crate::model::ratio::{Ratio, RatioSum};
use crate::model::resources::{PodResources, ResId, ResourceNames, ResourceVec};
use crate::model::runtime_pod::Unavailable;
use std::cmp::Ordering;
use std::fmt::{self, Write as _};

/// The fixed set of reasons a Run stays Pending (and a pod is rejected).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PendingReason {
    NoRuntimePods,
    InsufficientCapacity,
    ResourceNotDeclared,
    RuntimePodUnavailable,
    /// No pod holds the Run's required cohort (upstream's filter reason).
    UnsatisfiedRunAffinity,
    /// Every fitting pod holds a Run its anti-affinity excludes.
    UnsatisfiedRunAntiAffinity,
}

impl PendingReason {
    pub const ALL: [PendingReason; 6] = [
        PendingReason::NoRuntimePods,
        PendingReason::InsufficientCapacity,
        PendingReason::ResourceNotDeclared,
        PendingReason::RuntimePodUnavailable,
        PendingReason::UnsatisfiedRunAffinity,
        PendingReason::UnsatisfiedRunAntiAffinity,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PendingReason::NoRuntimePods => "NoRuntimePods",
            PendingReason::InsufficientCapacity => "InsufficientCapacity",
            PendingReason::ResourceNotDeclared => "ResourceNotDeclared",
            PendingReason::RuntimePodUnavailable => "RuntimePodUnavailable",
            PendingReason::UnsatisfiedRunAffinity => "UnsatisfiedRunAffinity",
            PendingReason::UnsatisfiedRunAntiAffinity => "UnsatisfiedRunAntiAffinity",
        }
    }
}

impl fmt::Display for PendingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why one pod cannot take the Run. Small and allocation-free for the
/// capacity cases; rendered to text only when someone asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    Unavailable(Unavailable),
    /// The pod does not declare this (interned) resource.
    NotDeclared(ResId),
    /// The request names a resource no pod anywhere declares.
    UnknownResource,
    Insufficient {
        resource: ResId,
        requested: u64,
        used: u64,
        capacity: u64,
    },
}

impl Rejection {
    pub fn reason(&self) -> PendingReason {
        match self {
            Rejection::Unavailable(_) => PendingReason::RuntimePodUnavailable,
            Rejection::NotDeclared(_) | Rejection::UnknownResource => {
                PendingReason::ResourceNotDeclared
            }
            Rejection::Insufficient { .. } => PendingReason::InsufficientCapacity,
        }
    }

    /// `"<Reason>: <detail>"`, the shape of `plan`'s `rejected` values.
    pub fn describe(&self, names: &ResourceNames, unknown: &[String]) -> String {
        let detail = match self {
            Rejection::Unavailable(u) => u.to_string(),
            Rejection::NotDeclared(id) => {
                format!("pod does not declare resource {:?}", names.name(*id))
            }
            Rejection::UnknownResource => {
                format!(
                    "pod does not declare resource {:?}",
                    unknown.first().map(String::as_str).unwrap_or("?")
                )
            }
            Rejection::Insufficient {
                resource,
                requested,
                used,
                capacity,
            } => format!(
                "{}: requested {requested}, used {used} of {capacity}, free {}",
                names.name(*resource),
                capacity.saturating_sub(*used)
            ),
        };
        format!("{}: {detail}", self.reason())
    }
}

/// Projected utilization of a feasible pod: the highest ratio over its
/// declared resources and the sum of them. Lower is better.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Score {
    pub max: Ratio,
    pub sum: RatioSum,
}

impl Score {
    /// Orders by max, then sum (exact); callers break ties by pod name.
    pub fn cmp_load(&self, other: &Score) -> Ordering {
        self.max
            .cmp(&other.max)
            .then_with(|| self.sum.cmp(&other.sum))
    }
}

/// Filter then score: feasible iff the pod declares every requested resource
/// and `actual + assumed + request <= capacity` for each. `has_unknown` says
/// the request names a resource that no pod declares (so no pod can take it).
/// Utilization counts every declared resource of the pod.
pub fn evaluate(
    pod: &PodResources,
    request: &ResourceVec,
    has_unknown: bool,
) -> Result<Score, Rejection> {
    if has_unknown {
        return Err(Rejection::UnknownResource);
    }
    // One merge-walk over two id-sorted arrays: no lookups, no allocation.
    let req = request.as_slice();
    let mut ir = 0;
    let mut max = Ratio::ZERO;
    // Σ projected * mult over sum_den; None once it would overflow.
    let sum_den = pod.sum_den();
    let mut fast_sum: Option<u128> = (sum_den != 0).then_some(0);
    for l in pod.as_slice() {
        if ir < req.len() && req[ir].0 < l.id {
            return Err(Rejection::NotDeclared(req[ir].0));
        }
        let requested = if ir < req.len() && req[ir].0 == l.id {
            ir += 1;
            req[ir - 1].1
        } else {
            0
        };
        if l.capacity == 0 {
            if requested > 0 {
                return Err(Rejection::NotDeclared(l.id));
            }
            continue;
        }
        let used = l.actual.saturating_add(l.assumed);
        if requested > 0
            && used
                .checked_add(requested)
                .is_none_or(|total| total > l.capacity)
        {
            return Err(Rejection::Insufficient {
                resource: l.id,
                requested,
                used,
                capacity: l.capacity,
            });
        }
        let ratio = Ratio::new(
            u128::from(used) + u128::from(requested),
            u128::from(l.capacity),
        );
        if ratio > max {
            max = ratio;
        }
        fast_sum = fast_sum.and_then(|s| {
            (u128::from(used) + u128::from(requested))
                .checked_mul(u128::from(l.mult))?
                .checked_add(s)
        });
    }
    if ir < req.len() {
        return Err(Rejection::NotDeclared(req[ir].0));
    }
    let sum = match fast_sum {
        Some(num) => RatioSum::Small(Ratio::new(num, sum_den)),
        None => exact_sum(pod, request),
    };
    Ok(Score { max, sum })
}

/// The utilization sum added term by term (capacities whose common
/// denominator does not fit 128 bits).
fn exact_sum(pod: &PodResources, request: &ResourceVec) -> RatioSum {
    let mut sum = RatioSum::default();
    for l in pod.as_slice().iter().filter(|l| l.capacity > 0) {
        let projected =
            u128::from(l.actual.saturating_add(l.assumed)) + u128::from(request.get(l.id));
        sum.add(Ratio::new(projected, u128::from(l.capacity)));
    }
    sum
}

/// Counts of rejections per reason while planning one Run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RejectionCounts {
    pub total_pods: usize,
    pub insufficient: usize,
    pub not_declared: usize,
    pub unavailable: usize,
    /// Pods that fit but lack the required cohort.
    pub affinity: usize,
    /// Pods that fit but hold an excluded Run.
    pub anti_affinity: usize,
}

impl RejectionCounts {
    pub fn record(&mut self, r: &Rejection) {
        self.record_n(r, 1);
    }

    /// Records `n` pods rejected for the same reason.
    pub fn record_n(&mut self, r: &Rejection, n: usize) {
        match r.reason() {
            PendingReason::InsufficientCapacity => self.insufficient += n,
            PendingReason::ResourceNotDeclared => self.not_declared += n,
            PendingReason::RuntimePodUnavailable => self.unavailable += n,
            PendingReason::UnsatisfiedRunAffinity => self.affinity += n,
            PendingReason::UnsatisfiedRunAntiAffinity => self.anti_affinity += n,
            PendingReason::NoRuntimePods => {}
        }
    }

    /// The Pending reason when no pod is feasible: no pods at all →
    /// `NoRuntimePods`; otherwise the reason closest to being resolved by
    /// waiting: capacity on an available pod that declares the resources
    /// frees up by itself (`InsufficientCapacity`); a resource no available
    /// pod declares needs a configuration change (`ResourceNotDeclared`);
    /// only unavailable pods left → `RuntimePodUnavailable`.
    pub fn pending_reason(&self) -> PendingReason {
        if self.total_pods == 0 {
            PendingReason::NoRuntimePods
        } else if self.affinity > 0 {
            PendingReason::UnsatisfiedRunAffinity
        } else if self.anti_affinity > 0 {
            PendingReason::UnsatisfiedRunAntiAffinity
        } else if self.insufficient > 0 {
            PendingReason::InsufficientCapacity
        } else if self.not_declared > 0 {
            PendingReason::ResourceNotDeclared
        } else {
            PendingReason::RuntimePodUnavailable
        }
    }

    /// A bounded, name-free message, at most 256 chars: upstream's wording
    /// (`waiting for available runtime pods for runtime "X"`), then the
    /// counts per reason.
    pub fn message(&self, runtime: &str) -> String {
        let mut m = if self.affinity > 0 {
            format!(
                "waiting for available runtime pods satisfying required Run affinity for runtime {runtime:?}"
            )
        } else if self.anti_affinity > 0 {
            format!(
                "waiting for available runtime pods satisfying required Run anti-affinity for runtime {runtime:?}"
            )
        } else {
            waiting_message(runtime)
        };
        if self.total_pods == 0 {
            m.push_str(": no Runtime Pods of this runtime in this namespace");
        } else {
            let _ = write!(m, ": 0/{} Runtime Pods can take this Run:", self.total_pods);
            let mut first = true;
            for (n, reason) in [
                (self.insufficient, PendingReason::InsufficientCapacity),
                (self.not_declared, PendingReason::ResourceNotDeclared),
                (self.unavailable, PendingReason::RuntimePodUnavailable),
                (self.affinity, PendingReason::UnsatisfiedRunAffinity),
                (
                    self.anti_affinity,
                    PendingReason::UnsatisfiedRunAntiAffinity,
                ),
            ] {
                if n > 0 {
                    let _ = write!(m, "{} {n} {reason}", if first { "" } else { "," });
                    first = false;
                }
            }
        }
        truncate(m, MAX_MESSAGE)
    }
}

/// Upstream's Pending message (`waitingMessageForFilterRejections` without
/// an affinity rejection). Runtime names are label values, so Go's `%q` and
/// Rust's `{:?}` quote them alike.
pub fn waiting_message(runtime: &str) -> String {
    format!("waiting for available runtime pods for runtime {runtime:?}")
}

/// Upper bound of a Pending message; truncation on a char boundary.
use crate::model::refs::{MAX_MESSAGE, truncate};

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(
        cap: &ResourceVec,
        actual: &ResourceVec,
        assumed: &ResourceVec,
        req: &ResourceVec,
        unknown: bool,
    ) -> Result<Score, Rejection> {
        let mut p = PodResources::default();
        p.set_capacity(cap);
        p.add_actual(actual);
        p.add_assumed(assumed);
        evaluate(&p, req, unknown)
    }

    fn rv(pairs: &[(ResId, u64)]) -> ResourceVec {
        ResourceVec::from_pairs(pairs.iter().copied())
    }

    #[test]
    fn filter_rules() {
        let cap = rv(&[(0, 4), (1, 2)]);
        let none = ResourceVec::new();
        assert!(ev(&cap, &none, &none, &rv(&[(0, 4)]), false).is_ok());
        assert_eq!(
            ev(&cap, &rv(&[(0, 3)]), &rv(&[(0, 1)]), &rv(&[(0, 1)]), false),
            Err(Rejection::Insufficient {
                resource: 0,
                requested: 1,
                used: 4,
                capacity: 4
            })
        );
        assert_eq!(
            ev(&cap, &none, &none, &rv(&[(0, 1), (2, 1)]), false),
            Err(Rejection::NotDeclared(2))
        );
        assert_eq!(
            ev(&cap, &none, &none, &rv(&[(0, 1)]), true),
            Err(Rejection::UnknownResource)
        );
        assert_eq!(
            ev(&cap, &none, &none, &rv(&[(0, 1), (5, 1)]), false),
            Err(Rejection::NotDeclared(5))
        );
        assert_eq!(
            ev(&rv(&[(1, 2)]), &none, &none, &rv(&[(0, 1), (1, 1)]), false),
            Err(Rejection::NotDeclared(0))
        );
        // Over-committed pods (an older scheduler) never overflow.
        assert!(
            ev(
                &cap,
                &rv(&[(0, u64::MAX)]),
                &rv(&[(0, u64::MAX)]),
                &rv(&[(0, 1)]),
                false
            )
            .is_err()
        );
    }

    #[test]
    fn score_counts_every_declared_resource() {
        // capacity runs=4, gpu=2; usage runs=2; request runs=1 → 3/4 and 0/2.
        let s = ev(
            &rv(&[(0, 4), (1, 2)]),
            &rv(&[(0, 2)]),
            &ResourceVec::new(),
            &rv(&[(0, 1)]),
            false,
        )
        .unwrap();
        assert_eq!(s.max.to_string(), "3/4");
        assert_eq!(s.sum.to_string(), "3/4");
        let s2 = ev(
            &rv(&[(0, 4), (1, 2)]),
            &rv(&[(0, 1), (1, 1)]),
            &ResourceVec::new(),
            &rv(&[(0, 1)]),
            false,
        )
        .unwrap();
        assert_eq!(s2.max.to_string(), "1/2");
        assert_eq!(s2.sum.to_string(), "1/1");
        assert_eq!(s2.cmp_load(&s), Ordering::Less);
        // Equal max, sum breaks the tie.
        let a = ev(
            &rv(&[(0, 2), (1, 4)]),
            &ResourceVec::new(),
            &ResourceVec::new(),
            &rv(&[(0, 1)]),
            false,
        )
        .unwrap();
        let b = ev(
            &rv(&[(0, 2), (1, 4)]),
            &rv(&[(1, 1)]),
            &ResourceVec::new(),
            &rv(&[(0, 1)]),
            false,
        )
        .unwrap();
        assert_eq!(a.max, b.max);
        assert_eq!(a.cmp_load(&b), Ordering::Less);
    }

    #[test]
    fn fast_and_exact_sums_agree() {
        let caps: [u64; 6] = [1, 3, 8, 1 << 36, 999_999_937, (1 << 63) - 25];
        for a in caps {
            for b in caps {
                for c in caps {
                    let cap = rv(&[(0, a), (1, b), (2, c)]);
                    let used = rv(&[(0, a / 2), (1, b / 3), (2, c - 1)]);
                    let mut p = PodResources::default();
                    p.set_capacity(&cap);
                    p.add_actual(&used);
                    let s = evaluate(&p, &rv(&[]), false).unwrap();
                    assert_eq!(
                        s.sum,
                        exact_sum(&p, &rv(&[])),
                        "{a} {b} {c} (den {})",
                        p.sum_den()
                    );
                }
            }
        }
    }

    #[test]
    fn pending_reason_and_message() {
        let c = RejectionCounts::default();
        assert_eq!(c.pending_reason(), PendingReason::NoRuntimePods);
        let c = RejectionCounts {
            total_pods: 5,
            insufficient: 2,
            not_declared: 1,
            unavailable: 2,
            ..Default::default()
        };
        assert_eq!(c.pending_reason(), PendingReason::InsufficientCapacity);
        assert_eq!(
            c.message("python"),
            "waiting for available runtime pods for runtime \"python\": 0/5 Runtime Pods can take this Run: 2 InsufficientCapacity, 1 ResourceNotDeclared, 2 RuntimePodUnavailable"
        );
        let c = RejectionCounts {
            total_pods: 2,
            insufficient: 0,
            not_declared: 1,
            unavailable: 1,
            ..Default::default()
        };
        assert_eq!(c.pending_reason(), PendingReason::ResourceNotDeclared);
        let c = RejectionCounts {
            total_pods: 2,
            insufficient: 0,
            not_declared: 0,
            unavailable: 2,
            ..Default::default()
        };
        assert_eq!(c.pending_reason(), PendingReason::RuntimePodUnavailable);
        let long = RejectionCounts::default().message(&"é".repeat(400));
        assert!(long.len() <= MAX_MESSAGE && long.ends_with("..."));
    }
}
