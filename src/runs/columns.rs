//! Runtime Pods of one runtime in one namespace as columns: per resource,
//! capacity, usage (actual + assumed) and the sum multiplier, indexed by
//! the pod's position. A decision scans the columns without touching
//! per-pod structs and without allocating per pod or per resource.
//!
//! The per-pod [`PodResources`] stay the source of truth (views, the
//! invariant check, the reference [`evaluate`](super::placement::evaluate));
//! the cache copies a pod's numbers here after every change to them.
//!
//! Results are exactly those of [`evaluate`](super::placement::evaluate)
//! over the same pods: the same rejection (first failing requested
//! resource in id order), the same order (max ratio, then sum, then name).
//! Ratios compare by cross-multiplication; sums use each pod's common
//! denominator and fall back to exact big rationals only when that does
//! not fit 128 bits.

use super::placement::{Rejection, RejectionCounts, Score};
use crate::model::ratio::{Ratio, RatioSum};
use crate::model::resources::{PodResources, ResId, ResourceVec};
use crate::model::runtime_pod::Freshness;
use k8s_openapi::jiff::Timestamp;
use smallvec::SmallVec;
use std::cmp::Ordering;
use std::sync::Arc;

/// One resource's numbers, by pod position.
#[derive(Debug, Default, Clone)]
struct ResCol {
    /// Declared capacity; 0 when the pod does not declare the resource.
    cap: Vec<u64>,
    /// `actual + assumed`, saturating.
    used: Vec<u64>,
    /// `sum_den / capacity` of the pod (0 when unused or not fitting).
    mult: Vec<u64>,
}

/// The columns of one (namespace, runtime).
#[derive(Debug, Default, Clone)]
pub struct Columns {
    names: Vec<Arc<str>>,
    /// The first 16 bytes of each name, big-endian and zero-padded: name
    /// order without reading the name, unless two prefixes are equal.
    prefix: Vec<u128>,
    /// The clock-free candidate rules hold.
    base_ok: Vec<bool>,
    heartbeat: Vec<Option<Timestamp>>,
    /// The pod's common denominator of its capacities (0: add exactly).
    sum_den: Vec<u128>,
    /// Resource ids with a column, sorted; `cols` is parallel.
    ids: Vec<ResId>,
    cols: Vec<ResCol>,
}

/// Why a pod is rejected, without the pod's cold facts: `Base` means the
/// clock-free rules failed (the caller has the reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Fits,
    Base,
    Rejected(Rejection),
}

/// A request laid out against one [`Columns`]: per requested resource its
/// column (in id order), and the requested amount per column.
struct Laid {
    /// `(id, amount, column)`; `None` when no pod here declares it.
    filter: SmallVec<[(ResId, u64, Option<u32>); 4]>,
    /// Requested amount per column (0 where not requested).
    per_col: SmallVec<[u64; 8]>,
}

/// The ordering key of a feasible pod, computed lazily.
#[derive(Clone, Copy)]
struct Key {
    index: u32,
    max: Ratio,
}

impl Columns {
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn name(&self, i: u32) -> &Arc<str> {
        &self.names[i as usize]
    }

    /// Appends a pod; returns its position.
    pub fn push(
        &mut self,
        name: Arc<str>,
        res: &PodResources,
        base_ok: bool,
        heartbeat: Option<Timestamp>,
    ) -> u32 {
        let i = self.names.len() as u32;
        self.prefix.push(name_prefix(&name));
        self.names.push(name);
        self.base_ok.push(base_ok);
        self.heartbeat.push(heartbeat);
        self.sum_den.push(0);
        for c in &mut self.cols {
            c.cap.push(0);
            c.used.push(0);
            c.mult.push(0);
        }
        self.set_res(i, res);
        i
    }

    /// Removes the pod at `i` by moving the last one into its place;
    /// returns the name of the pod that moved to `i`, if any.
    pub fn swap_remove(&mut self, i: u32) -> Option<Arc<str>> {
        let i = i as usize;
        if i >= self.names.len() {
            return None;
        }
        self.names.swap_remove(i);
        self.prefix.swap_remove(i);
        self.base_ok.swap_remove(i);
        self.heartbeat.swap_remove(i);
        self.sum_den.swap_remove(i);
        for c in &mut self.cols {
            c.cap.swap_remove(i);
            c.used.swap_remove(i);
            c.mult.swap_remove(i);
        }
        self.names.get(i).cloned()
    }

    pub fn set_availability(&mut self, i: u32, base_ok: bool, heartbeat: Option<Timestamp>) {
        self.base_ok[i as usize] = base_ok;
        self.heartbeat[i as usize] = heartbeat;
    }

    /// Copies a pod's capacity and usage into the columns.
    pub fn set_res(&mut self, i: u32, res: &PodResources) {
        let i = i as usize;
        self.sum_den[i] = res.sum_den();
        let ledgers = res.as_slice();
        // Columns this pod needs that do not exist yet.
        for l in ledgers {
            if let Err(pos) = self.ids.binary_search(&l.id) {
                let n = self.names.len();
                self.ids.insert(pos, l.id);
                self.cols.insert(
                    pos,
                    ResCol {
                        cap: vec![0; n],
                        used: vec![0; n],
                        mult: vec![0; n],
                    },
                );
            }
        }
        let mut k = 0;
        for (id, c) in self.ids.iter().zip(self.cols.iter_mut()) {
            while k < ledgers.len() && ledgers[k].id < *id {
                k += 1;
            }
            match ledgers.get(k).filter(|l| l.id == *id) {
                Some(l) => {
                    c.cap[i] = l.capacity;
                    c.used[i] = l.actual.saturating_add(l.assumed);
                    c.mult[i] = l.mult;
                }
                None => {
                    c.cap[i] = 0;
                    c.used[i] = 0;
                    c.mult[i] = 0;
                }
            }
        }
    }

    /// Checks position `i` against the pod it should mirror (invariant
    /// checks): `Err` names the first difference.
    pub fn check(
        &self,
        i: u32,
        name: &str,
        res: &PodResources,
        base_ok: bool,
        heartbeat: Option<Timestamp>,
    ) -> Result<(), String> {
        let i = i as usize;
        if self.names.get(i).map(|n| &**n) != Some(name) {
            return Err(format!(
                "{name}: column position {i} holds {:?}",
                self.names.get(i)
            ));
        }
        if self.prefix[i] != name_prefix(name) {
            return Err(format!("{name}: name prefix differs"));
        }
        if self.base_ok[i] != base_ok || self.heartbeat[i] != heartbeat {
            return Err(format!("{name}: availability differs"));
        }
        if self.sum_den[i] != res.sum_den() {
            return Err(format!("{name}: sum denominator differs"));
        }
        for (id, c) in self.ids.iter().zip(&self.cols) {
            let l = res.as_slice().iter().find(|l| l.id == *id);
            let want = l.map_or((0, 0, 0), |l| {
                (l.capacity, l.actual.saturating_add(l.assumed), l.mult)
            });
            if (c.cap[i], c.used[i], c.mult[i]) != want {
                return Err(format!(
                    "{name}: resource {id}: columns {:?} != ledger {want:?}",
                    (c.cap[i], c.used[i], c.mult[i])
                ));
            }
        }
        if let Some(l) = res
            .as_slice()
            .iter()
            .find(|l| self.ids.binary_search(&l.id).is_err())
        {
            return Err(format!("{name}: resource {} has no column", l.id));
        }
        Ok(())
    }

    /// Resolves a request's resources to this group's columns, once per decision.
    fn lay_out(&self, request: &ResourceVec) -> Laid {
        let mut per_col: SmallVec<[u64; 8]> = SmallVec::from_elem(0, self.ids.len());
        let filter = request
            .iter()
            .map(|(id, amount)| {
                let col = self.ids.binary_search(&id).ok();
                if let Some(c) = col {
                    per_col[c] = amount;
                }
                (id, amount, col.map(|c| c as u32))
            })
            .collect();
        Laid { filter, per_col }
    }

    /// The filter for pod `i`: availability, then every requested resource
    /// in id order.
    #[inline]
    fn verdict(&self, i: usize, laid: &Laid, has_unknown: bool, window: &Freshness) -> Verdict {
        if !self.base_ok[i] {
            return Verdict::Base;
        }
        if let Err(u) = window.check(self.heartbeat[i]) {
            return Verdict::Rejected(Rejection::Unavailable(u));
        }
        if has_unknown {
            return Verdict::Rejected(Rejection::UnknownResource);
        }
        for &(id, requested, col) in &laid.filter {
            let Some(c) = col else {
                return Verdict::Rejected(Rejection::NotDeclared(id));
            };
            let c = &self.cols[c as usize];
            let capacity = c.cap[i];
            if capacity == 0 {
                return Verdict::Rejected(Rejection::NotDeclared(id));
            }
            let used = c.used[i];
            if used.checked_add(requested).is_none_or(|t| t > capacity) {
                return Verdict::Rejected(Rejection::Insufficient {
                    resource: id,
                    requested,
                    used,
                    capacity,
                });
            }
        }
        Verdict::Fits
    }

    /// The projected highest utilization of a feasible pod.
    #[inline]
    fn max_ratio(&self, i: usize, laid: &Laid) -> Ratio {
        let mut max = Ratio::ZERO;
        for (c, req) in self.cols.iter().zip(laid.per_col.iter()) {
            let cap = c.cap[i];
            if cap == 0 {
                continue;
            }
            let r = Ratio::new(u128::from(c.used[i]) + u128::from(*req), u128::from(cap));
            if r > max {
                max = r;
            }
        }
        max
    }

    /// The projected sum of utilizations of a feasible pod, exact.
    fn sum(&self, i: usize, laid: &Laid) -> RatioSum {
        let den = self.sum_den[i];
        if den != 0 {
            let mut num: u128 = 0;
            let mut fits = true;
            for (c, req) in self.cols.iter().zip(laid.per_col.iter()) {
                if c.cap[i] == 0 {
                    continue;
                }
                let projected = u128::from(c.used[i]) + u128::from(*req);
                // Fast path: both factors fit 64 bits, so one widening
                // multiply, no 128-bit overflow check (only the add can
                // overflow).
                let term = if projected >> 64 == 0 {
                    Some(u128::from(projected as u64) * u128::from(c.mult[i]))
                } else {
                    projected.checked_mul(u128::from(c.mult[i]))
                };
                match term.and_then(|t| t.checked_add(num)) {
                    Some(n) => num = n,
                    None => {
                        fits = false;
                        break;
                    }
                }
            }
            if fits {
                return RatioSum::Small(Ratio::new(num, den));
            }
        }
        let mut sum = RatioSum::default();
        for (c, req) in self.cols.iter().zip(laid.per_col.iter()) {
            let cap = c.cap[i];
            if cap > 0 {
                sum.add(Ratio::new(
                    u128::from(c.used[i]) + u128::from(*req),
                    u128::from(cap),
                ));
            }
        }
        sum
    }

    /// Orders two feasible pods: max, then sum (computed only on a max
    /// tie), then name.
    fn cmp_keys(&self, a: &Key, b: &Key, laid: &Laid) -> Ordering {
        a.max
            .cmp(&b.max)
            .then_with(|| {
                self.sum(a.index as usize, laid)
                    .cmp(&self.sum(b.index as usize, laid))
            })
            .then_with(|| self.cmp_names(a.index as usize, b.index as usize))
    }

    /// Name order of two positions: by prefix, by the names on a tie.
    #[inline]
    fn cmp_names(&self, a: usize, b: usize) -> Ordering {
        self.prefix[a]
            .cmp(&self.prefix[b])
            .then_with(|| self.names[a].cmp(&self.names[b]))
    }

    /// The full score of a feasible pod (for answers, not the scan).
    fn score(&self, i: usize, laid: &Laid) -> Score {
        Score {
            max: self.max_ratio(i, laid),
            sum: self.sum(i, laid),
        }
    }

    /// The decision: the least-loaded feasible pod (max, sum, name) and the
    /// rejection counts. `base` gives the reason of a pod failing the
    /// clock-free rules (only counted here, so only its kind matters).
    pub fn best(
        &self,
        request: &ResourceVec,
        has_unknown: bool,
        window: &Freshness,
    ) -> (Option<u32>, RejectionCounts) {
        let laid = self.lay_out(request);
        let mut counts = RejectionCounts {
            total_pods: self.len(),
            ..RejectionCounts::default()
        };
        let mut best: Option<Key> = None;
        // The best pod's sum, once a tie needed it.
        let mut best_sum: Option<RatioSum> = None;
        for i in 0..self.len() {
            match self.verdict(i, &laid, has_unknown, window) {
                Verdict::Fits => {}
                Verdict::Base => {
                    counts.unavailable += 1;
                    continue;
                }
                Verdict::Rejected(r) => {
                    counts.record(&r);
                    continue;
                }
            }
            let max = self.max_ratio(i, &laid);
            let key = Key {
                index: i as u32,
                max,
            };
            let Some(b) = &best else {
                best = Some(key);
                continue;
            };
            let better = match max.cmp(&b.max) {
                Ordering::Less => true,
                Ordering::Greater => false,
                Ordering::Equal => {
                    let bs = best_sum.get_or_insert_with(|| self.sum(b.index as usize, &laid));
                    match self.sum(i, &laid).cmp(bs) {
                        Ordering::Less => true,
                        Ordering::Greater => false,
                        Ordering::Equal => self.cmp_names(i, b.index as usize).is_lt(),
                    }
                }
            };
            if better {
                best = Some(key);
                best_sum = None;
            }
        }
        (best.map(|k| k.index), counts)
    }

    /// A dry run: feasible pods best first and rejected pods in name
    /// order, each list cut to `limit` (0: no limit), and counts over all.
    /// `Verdict::Base` rejections come back as-is for the caller to fill in.
    pub fn plan(
        &self,
        request: &ResourceVec,
        has_unknown: bool,
        window: &Freshness,
        limit: usize,
    ) -> ColumnPlan<'_> {
        let laid = self.lay_out(request);
        let mut counts = RejectionCounts {
            total_pods: self.len(),
            ..RejectionCounts::default()
        };
        let mut feasible: Vec<Key> = Vec::new();
        let mut rejected: Vec<(u32, Verdict)> = Vec::new();
        for i in 0..self.len() {
            match self.verdict(i, &laid, has_unknown, window) {
                Verdict::Fits => feasible.push(Key {
                    index: i as u32,
                    max: self.max_ratio(i, &laid),
                }),
                Verdict::Base => {
                    counts.unavailable += 1;
                    rejected.push((i as u32, Verdict::Base));
                }
                Verdict::Rejected(r) => {
                    counts.record(&r);
                    rejected.push((i as u32, Verdict::Rejected(r)));
                }
            }
        }
        let cmp = |a: &Key, b: &Key| self.cmp_keys(a, b, &laid);
        if limit > 0 && feasible.len() > limit {
            feasible.select_nth_unstable_by(limit - 1, cmp);
            feasible.truncate(limit);
        }
        feasible.sort_unstable_by(cmp);
        let by_name =
            |a: &(u32, Verdict), b: &(u32, Verdict)| self.cmp_names(a.0 as usize, b.0 as usize);
        if limit > 0 && rejected.len() > limit {
            rejected.select_nth_unstable_by(limit - 1, by_name);
            rejected.truncate(limit);
        }
        rejected.sort_unstable_by(by_name);
        ColumnPlan {
            feasible: feasible
                .iter()
                .map(|k| (self.name(k.index), self.score(k.index as usize, &laid)))
                .collect(),
            rejected: rejected
                .into_iter()
                .map(|(i, v)| (self.name(i), v))
                .collect(),
            counts,
        }
    }
}

/// The first 16 bytes of a name as a big-endian integer, zero-padded:
/// prefixes order as the names do, except that equal prefixes say nothing
/// (names may go on past 16 bytes).
fn name_prefix(name: &str) -> u128 {
    let mut b = [0u8; 16];
    let n = name.len().min(16);
    b[..n].copy_from_slice(&name.as_bytes()[..n]);
    u128::from_be_bytes(b)
}

/// What [`Columns::plan`] found.
pub struct ColumnPlan<'a> {
    pub feasible: Vec<(&'a Arc<str>, Score)>,
    pub rejected: Vec<(&'a Arc<str>, Verdict)>,
    pub counts: RejectionCounts,
}

#[cfg(test)]
mod tests {
    use super::name_prefix;
    use proptest::prelude::*;

    proptest! {
        /// Prefix order, then name order on equal prefixes, is name order,
        /// for names shorter and longer than the 16-byte prefix.
        #[test]
        fn prefix_then_name_is_name_order(a in "[a-c.-]{0,20}", b in "[a-c.-]{0,20}") {
            let by_prefix = name_prefix(&a).cmp(&name_prefix(&b)).then_with(|| a.cmp(&b));
            prop_assert_eq!(by_prefix, a.cmp(&b));
        }
    }
}
