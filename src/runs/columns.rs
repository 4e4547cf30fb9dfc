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
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
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
    /// Position of each name.
    positions: HashMap<Arc<str>, u32, foldhash::fast::RandomState>,
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
    /// Pods passing the clock-free rules, grouped by equal numbers.
    groups: Groups,
    /// `(heartbeat, position)` of every pod passing the clock-free rules,
    /// in time order: a decision finds the stale ones by two range reads.
    beats: BTreeSet<u128>,
}

/// `(heartbeat, position)` as one integer ordered as the pair is: the
/// heartbeat's nanoseconds since the epoch, offset to be positive (jiff's
/// range is within ±2^69 ns), above the 32 position bits; no heartbeat is
/// 0, below every heartbeat. Half the size of the pair in the tree.
fn beat(heartbeat: Option<Timestamp>, position: u32) -> u128 {
    let t = heartbeat.map_or(0, |t| (t.as_nanosecond() + (1i128 << 94)) as u128);
    (t << 32) | u128::from(position)
}

/// Position not in any group (`base_ok` false).
const NO_GROUP: u32 = u32::MAX;

/// Pods with the same capacity and usage of every resource: each such
/// state is filtered and scored once per decision, however many pods are
/// in it (a warm pool has a handful of states over thousands of pods).
#[derive(Debug, Default, Clone)]
struct Groups {
    list: Vec<Group>,
    /// Free entries of `list` (no members).
    free: Vec<u32>,
    by_key: HashMap<Box<[u64]>, u32>,
    /// Per position: its group, or [`NO_GROUP`].
    of: Vec<u32>,
}

#[derive(Debug, Default, Clone)]
struct Group {
    /// `(capacity, used)` per column, in column order.
    key: Box<[u64]>,
    /// Members in name order, with their positions.
    members: BTreeMap<Arc<str>, u32>,
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
pub struct Laid {
    /// `(id, amount, column)`; `None` when no pod here declares it.
    filter: SmallVec<[(ResId, u64, Option<u32>); 4]>,
    /// Requested amount per column (0 where not requested).
    per_col: SmallVec<[u64; 8]>,
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

    /// The position of the pod named `name`, if it is here.
    pub fn position(&self, name: &str) -> Option<u32> {
        self.positions.get(name).copied()
    }

    /// The filter for the pod at `i` (a request laid out by
    /// [`lay_out`](Self::lay_out)): what a scan of every pod finds for it.
    pub fn verdict_at(
        &self,
        i: u32,
        laid: &Laid,
        has_unknown: bool,
        window: &Freshness,
    ) -> Verdict {
        self.verdict(i as usize, laid, has_unknown, window)
    }

    /// The score of the feasible pod at `i`.
    pub fn score_at(&self, i: u32, laid: &Laid) -> Score {
        self.score(i as usize, laid)
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
        self.positions.insert(Arc::clone(&name), i);
        self.prefix.push(name_prefix(&name));
        self.names.push(name);
        self.base_ok.push(false);
        self.heartbeat.push(heartbeat);
        self.sum_den.push(0);
        self.groups.of.push(NO_GROUP);
        for c in &mut self.cols {
            c.cap.push(0);
            c.used.push(0);
            c.mult.push(0);
        }
        self.set_res(i, res);
        self.set_availability(i, base_ok, heartbeat);
        i
    }

    /// `(capacity, used)` per column of position `i`: its group's key.
    fn row_key(&self, i: usize) -> SmallVec<[u64; 8]> {
        self.cols
            .iter()
            .flat_map(|c| [c.cap[i], c.used[i]])
            .collect()
    }

    /// Puts position `i` in its group, if it passes the clock-free rules.
    /// Allocates only for a group that did not exist.
    fn enter(&mut self, i: usize) {
        if !self.base_ok[i] {
            return;
        }
        let key = self.row_key(i);
        let g = match self.groups.by_key.get(&key[..]) {
            Some(g) => *g,
            None => {
                let key: Box<[u64]> = key.into_iter().collect();
                let group = Group {
                    key: key.clone(),
                    members: BTreeMap::new(),
                };
                let g = match self.groups.free.pop() {
                    Some(g) => {
                        self.groups.list[g as usize] = group;
                        g
                    }
                    None => {
                        self.groups.list.push(group);
                        (self.groups.list.len() - 1) as u32
                    }
                };
                self.groups.by_key.insert(key, g);
                g
            }
        };
        self.groups.list[g as usize]
            .members
            .insert(Arc::clone(&self.names[i]), i as u32);
        self.groups.of[i] = g;
        self.beats.insert(beat(self.heartbeat[i], i as u32));
    }

    /// Takes position `i` out of its group (before its numbers, heartbeat
    /// or position change).
    fn leave(&mut self, i: usize) {
        let g = std::mem::replace(&mut self.groups.of[i], NO_GROUP);
        if g == NO_GROUP {
            return;
        }
        self.beats.remove(&beat(self.heartbeat[i], i as u32));
        let group = &mut self.groups.list[g as usize];
        group.members.remove(&*self.names[i]);
        if group.members.is_empty() {
            let key = std::mem::take(&mut group.key);
            self.groups.by_key.remove(&key);
            self.groups.free.push(g);
        }
    }

    /// Regroups every position (after the set of columns changed, which
    /// changes every key).
    fn regroup(&mut self) {
        let n = self.names.len();
        self.groups = Groups {
            of: vec![NO_GROUP; n],
            ..Groups::default()
        };
        self.beats.clear();
        for i in 0..n {
            self.enter(i);
        }
    }

    /// Removes the pod at `i` by moving the last one into its place;
    /// returns the name of the pod that moved to `i`, if any.
    pub fn swap_remove(&mut self, i: u32) -> Option<Arc<str>> {
        let i = i as usize;
        if i >= self.names.len() {
            return None;
        }
        let last = self.names.len() - 1;
        self.leave(i);
        if last != i {
            self.leave(last);
        }
        self.groups.of.swap_remove(i);
        self.positions.remove(&*self.names[i]);
        self.names.swap_remove(i);
        if let Some(moved) = self.names.get(i) {
            self.positions.insert(Arc::clone(moved), i as u32);
        }
        self.prefix.swap_remove(i);
        self.base_ok.swap_remove(i);
        self.heartbeat.swap_remove(i);
        self.sum_den.swap_remove(i);
        for c in &mut self.cols {
            c.cap.swap_remove(i);
            c.used.swap_remove(i);
            c.mult.swap_remove(i);
        }
        if last != i {
            self.enter(i);
        }
        self.names.get(i).cloned()
    }

    /// Renumbers the columns' resource ids through `map` (from
    /// [`ResourceNames::compact`](crate::model::resources::ResourceNames::compact),
    /// which keeps their order, so `ids` stay sorted), and drops the
    /// columns of freed ids and those no pod here declares or uses any
    /// more: a runtime whose pods churned unusual resource names scans
    /// only the resources they hold now.
    pub fn remap(&mut self, map: &[Option<ResId>]) {
        let ids = std::mem::take(&mut self.ids);
        let cols = std::mem::take(&mut self.cols);
        for (id, c) in ids.into_iter().zip(cols) {
            let held = c.cap.iter().chain(&c.used).any(|&v| v != 0);
            if let Some(Some(new)) = map.get(id as usize)
                && held
            {
                self.ids.push(*new);
                self.cols.push(c);
            }
        }
        self.regroup();
    }

    /// How many resource columns this group keeps.
    pub fn columns(&self) -> usize {
        self.ids.len()
    }

    pub fn set_availability(&mut self, i: u32, base_ok: bool, heartbeat: Option<Timestamp>) {
        let (i, at) = (i as usize, i);
        if self.base_ok[i] == base_ok && self.heartbeat[i] == heartbeat {
            return;
        }
        if base_ok && self.base_ok[i] {
            // Same group; only the heartbeat order changes.
            self.beats.remove(&beat(self.heartbeat[i], at));
            self.heartbeat[i] = heartbeat;
            self.beats.insert(beat(heartbeat, at));
            return;
        }
        self.leave(i);
        self.base_ok[i] = base_ok;
        self.heartbeat[i] = heartbeat;
        self.enter(i);
    }

    /// Copies a pod's capacity and usage into the columns.
    pub fn set_res(&mut self, i: u32, res: &PodResources) {
        let i = i as usize;
        self.leave(i);
        self.sum_den[i] = res.sum_den();
        let ledgers = res.as_slice();
        let mut added = false;
        // Columns this pod needs that do not exist yet.
        for l in ledgers {
            if let Err(pos) = self.ids.binary_search(&l.id) {
                added = true;
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
        if added {
            // Every key gained the new columns.
            self.regroup();
        } else {
            self.enter(i);
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
        if self.position(name) != Some(i as u32) {
            return Err(format!("{name}: position index differs"));
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
        let g = self.groups.of[i];
        if base_ok {
            let group = self
                .groups
                .list
                .get(g as usize)
                .ok_or_else(|| format!("{name}: available but in no group"))?;
            if *group.key != self.row_key(i)[..] {
                return Err(format!("{name}: group key differs from its numbers"));
            }
            if group.members.get(&*self.names[i]) != Some(&(i as u32)) {
                return Err(format!("{name}: not a member of its group at {i}"));
            }
            if !self.beats.contains(&beat(heartbeat, i as u32)) {
                return Err(format!("{name}: heartbeat not in the heartbeat order"));
            }
        } else if g != NO_GROUP {
            return Err(format!("{name}: unavailable but in group {g}"));
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

    /// Checks the groups as a whole (with [`check`](Self::check) for every
    /// position): no member, group or heartbeat is left over.
    pub fn check_groups(&self) -> Result<(), String> {
        if self.positions.len() != self.names.len() {
            return Err(format!(
                "{} positions indexed for {} pods",
                self.positions.len(),
                self.names.len()
            ));
        }
        let available = self.base_ok.iter().filter(|&&b| b).count();
        let members: usize = self.groups.list.iter().map(|g| g.members.len()).sum();
        if members != available || self.beats.len() != available {
            return Err(format!(
                "{available} available pods, {members} group members, {} heartbeats",
                self.beats.len()
            ));
        }
        for (gi, g) in self.groups.list.iter().enumerate() {
            let indexed = self.groups.by_key.get(&g.key) == Some(&(gi as u32));
            if g.members.is_empty() != self.groups.free.contains(&(gi as u32))
                || (!g.members.is_empty() && !indexed)
            {
                return Err(format!("group {gi} is neither live and indexed nor free"));
            }
        }
        if self.groups.by_key.len() + self.groups.free.len() != self.groups.list.len() {
            return Err("group index and free list do not cover the groups".into());
        }
        Ok(())
    }

    /// Resolves a request's resources to this group's columns, once per decision.
    pub fn lay_out(&self, request: &ResourceVec) -> Laid {
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
        match self.fits(i, laid) {
            Ok(()) => Verdict::Fits,
            Err(r) => Verdict::Rejected(r),
        }
    }

    /// The resource part of the filter for pod `i`: every requested
    /// resource in id order.
    #[inline]
    fn fits(&self, i: usize, laid: &Laid) -> Result<(), Rejection> {
        for &(id, requested, col) in &laid.filter {
            let Some(c) = col else {
                return Err(Rejection::NotDeclared(id));
            };
            let c = &self.cols[c as usize];
            let capacity = c.cap[i];
            if capacity == 0 {
                return Err(Rejection::NotDeclared(id));
            }
            let used = c.used[i];
            if used.checked_add(requested).is_none_or(|t| t > capacity) {
                return Err(Rejection::Insufficient {
                    resource: id,
                    requested,
                    used,
                    capacity,
                });
            }
        }
        Ok(())
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
    /// rejection counts, exactly as a scan of every pod would give them.
    ///
    /// Pods passing the clock-free rules sit in groups of equal numbers,
    /// and the stale ones among them come from the heartbeat order, so a
    /// decision filters and scores each group once and reads a pod only
    /// to break a tie by name: its cost follows the number of distinct
    /// states, not of pods.
    pub fn best(
        &self,
        request: &ResourceVec,
        has_unknown: bool,
        window: &Freshness,
    ) -> (Option<u32>, RejectionCounts) {
        if self.grouping_pays() {
            self.best_by_groups(request, has_unknown, window)
        } else {
            self.best_by_rows(request, has_unknown, window)
        }
    }

    /// Grouping pays while groups hold several pods each; when most pods'
    /// numbers differ (fewer than 3 pods per group), a scan of the rows
    /// reads less (sequential columns, no group to chase).
    fn grouping_pays(&self) -> bool {
        self.groups.by_key.len() * 3 <= self.beats.len()
    }

    /// [`best`](Self::best) by a scan of every position.
    pub(crate) fn best_by_rows(
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
        let mut best: Option<Leader> = None;
        for i in 0..self.len() {
            match self.verdict(i, &laid, has_unknown, window) {
                Verdict::Fits => Leader::offer(&mut best, self, &laid, i as u32),
                Verdict::Base => counts.unavailable += 1,
                Verdict::Rejected(r) => counts.record(&r),
            }
        }
        (best.map(|b| b.pod), counts)
    }

    /// Available pods outside the heartbeat window, sorted by position:
    /// two range reads of the heartbeat order.
    fn stale(&self, window: &Freshness) -> SmallVec<[u32; 16]> {
        let (oldest, newest) = window.bounds();
        let mut stale: SmallVec<[u32; 16]> = self
            .beats
            .range(..beat(Some(oldest), 0))
            .chain(self.beats.range((
                Bound::Excluded(beat(Some(newest), u32::MAX)),
                Bound::Unbounded,
            )))
            .map(|&k| k as u32)
            .collect();
        stale.sort_unstable();
        stale
    }

    /// Counts with every pod failing the clock-free rules, and every
    /// `stale` one, counted unavailable.
    fn unavailable_counts(&self, stale: &[u32]) -> RejectionCounts {
        RejectionCounts {
            total_pods: self.len(),
            unavailable: self.len() - self.beats.len() + stale.len(),
            ..RejectionCounts::default()
        }
    }

    /// How many members of group `gi` are not `stale`.
    fn fresh_in(&self, gi: usize, group: &Group, stale: &[u32]) -> usize {
        let gone = stale
            .iter()
            .filter(|&&i| self.groups.of[i as usize] == gi as u32)
            .count();
        group.members.len() - gone
    }

    /// [`best`](Self::best) by the groups of equal numbers.
    pub(crate) fn best_by_groups(
        &self,
        request: &ResourceVec,
        has_unknown: bool,
        window: &Freshness,
    ) -> (Option<u32>, RejectionCounts) {
        let laid = self.lay_out(request);
        let stale = self.stale(window);
        let mut counts = self.unavailable_counts(&stale);
        let mut best: Option<Leader> = None;
        for (gi, group) in self.groups.list.iter().enumerate() {
            // Members share their numbers; the first fresh one by name
            // stands for the group and is the one a tie would pick.
            let Some(first) = fresh_members(group, &stale, 1).next() else {
                continue;
            };
            match self.group_fits(first, &laid, has_unknown) {
                Ok(()) => Leader::offer(&mut best, self, &laid, first),
                Err(r) => counts.record_n(&r, self.fresh_in(gi, group, &stale)),
            }
        }
        (best.map(|b| b.pod), counts)
    }

    /// The filter for a group, through one fresh member: the clock-free
    /// rules and the heartbeat hold for it, so only the resources remain.
    fn group_fits(&self, member: u32, laid: &Laid, has_unknown: bool) -> Result<(), Rejection> {
        if has_unknown {
            return Err(Rejection::UnknownResource);
        }
        self.fits(member as usize, laid)
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
        if limit > 0 && self.grouping_pays() {
            self.plan_by_groups(request, has_unknown, window, limit)
        } else {
            self.plan_by_rows(request, has_unknown, window, limit)
        }
    }

    /// [`plan`](Self::plan) with a cut (`limit` > 0) by the groups: each
    /// group is filtered and scored once, and only the members a list
    /// shows are read (in name order), plus the pods failing the
    /// clock-free rules, which are in no group.
    pub(crate) fn plan_by_groups(
        &self,
        request: &ResourceVec,
        has_unknown: bool,
        window: &Freshness,
        limit: usize,
    ) -> ColumnPlan<'_> {
        let limit = limit.max(1);
        let laid = self.lay_out(request);
        let stale = self.stale(window);
        let mut counts = self.unavailable_counts(&stale);
        let mut feasible_groups: Vec<(Score, usize)> = Vec::new();
        let mut rejected: Vec<(u32, Verdict)> = Vec::new();
        for (gi, group) in self.groups.list.iter().enumerate() {
            let Some(first) = fresh_members(group, &stale, 1).next() else {
                continue;
            };
            match self.group_fits(first, &laid, has_unknown) {
                Ok(()) => feasible_groups.push((self.score(first as usize, &laid), gi)),
                Err(r) => {
                    counts.record_n(&r, self.fresh_in(gi, group, &stale));
                    rejected.extend(
                        fresh_members(group, &stale, limit)
                            .map(|i| (i, Verdict::Rejected(r.clone()))),
                    );
                }
            }
        }
        for &i in &stale {
            if let Err(u) = window.check(self.heartbeat[i as usize]) {
                rejected.push((i, Verdict::Rejected(Rejection::Unavailable(u))));
            }
        }
        if self.beats.len() < self.len() {
            rejected.extend(
                (0..self.len() as u32)
                    .filter(|&i| !self.base_ok[i as usize])
                    .map(|i| (i, Verdict::Base)),
            );
        }
        // Groups best first; groups of equal scores share their places
        // by member name.
        let by_score = |a: &Score, b: &Score| a.max.cmp(&b.max).then_with(|| a.sum.cmp(&b.sum));
        feasible_groups.sort_by(|a, b| by_score(&a.0, &b.0));
        let mut feasible: Vec<(u32, Score)> = Vec::new();
        let mut rest = &feasible_groups[..];
        while feasible.len() < limit && !rest.is_empty() {
            let tied = rest
                .iter()
                .take_while(|(s, _)| by_score(s, &rest[0].0).is_eq())
                .count();
            let want = limit - feasible.len();
            let mut members: Vec<u32> = rest[..tied]
                .iter()
                .flat_map(|(_, gi)| fresh_members(&self.groups.list[*gi], &stale, want))
                .collect();
            members.sort_unstable_by(|a, b| self.cmp_names(*a as usize, *b as usize));
            let score = &rest[0].0;
            feasible.extend(members.into_iter().take(want).map(|i| (i, score.clone())));
            rest = &rest[tied..];
        }
        self.column_plan(feasible, rejected, counts, limit)
    }

    /// [`plan`](Self::plan) by a scan of every position.
    pub(crate) fn plan_by_rows(
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
        // Scores computed once per feasible pod, not per comparison.
        let mut feasible: Vec<(u32, Score)> = Vec::new();
        let mut rejected: Vec<(u32, Verdict)> = Vec::new();
        for i in 0..self.len() {
            match self.verdict(i, &laid, has_unknown, window) {
                Verdict::Fits => feasible.push((i as u32, self.score(i, &laid))),
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
        cut(&mut feasible, limit, |a, b| {
            a.1.max
                .cmp(&b.1.max)
                .then_with(|| a.1.sum.cmp(&b.1.sum))
                .then_with(|| self.cmp_names(a.0 as usize, b.0 as usize))
        });
        self.column_plan(feasible, rejected, counts, limit)
    }

    /// The answer of a plan: `feasible` in its order, `rejected` cut to
    /// `limit` in name order, by name.
    fn column_plan(
        &self,
        feasible: Vec<(u32, Score)>,
        mut rejected: Vec<(u32, Verdict)>,
        counts: RejectionCounts,
        limit: usize,
    ) -> ColumnPlan<'_> {
        cut(&mut rejected, limit, |a, b| {
            self.cmp_names(a.0 as usize, b.0 as usize)
        });
        ColumnPlan {
            feasible: feasible
                .into_iter()
                .map(|(i, score)| (self.name(i), score))
                .collect(),
            rejected: rejected
                .into_iter()
                .map(|(i, v)| (self.name(i), v))
                .collect(),
            counts,
        }
    }
}

/// The feasible pod a decision keeps so far: its max, and its sum once a
/// tie needed it.
struct Leader {
    pod: u32,
    max: Ratio,
    sum: Option<RatioSum>,
}

impl Leader {
    /// Keeps `pod` (feasible) if it is better than the leader: lower max,
    /// then lower sum (computed only on a max tie), then name.
    #[inline]
    fn offer(best: &mut Option<Leader>, cols: &Columns, laid: &Laid, pod: u32) {
        let max = cols.max_ratio(pod as usize, laid);
        let better = match best {
            None => true,
            Some(b) => max
                .cmp(&b.max)
                .then_with(|| {
                    let bs = b.sum.get_or_insert_with(|| cols.sum(b.pod as usize, laid));
                    cols.sum(pod as usize, laid).cmp(bs)
                })
                .then_with(|| cols.cmp_names(pod as usize, b.pod as usize))
                .is_lt(),
        };
        if better {
            *best = Some(Leader {
                pod,
                max,
                sum: None,
            });
        }
    }
}

/// Up to `limit` members of a group that are not `stale`, by name.
fn fresh_members<'g>(
    g: &'g Group,
    stale: &'g [u32],
    limit: usize,
) -> impl Iterator<Item = u32> + 'g {
    g.members
        .values()
        .copied()
        .filter(move |i| stale.binary_search(i).is_err())
        .take(limit)
}

/// Sorts `v` by `cmp` keeping the first `limit` (0: all), selecting them
/// first so a cut costs linear time.
fn cut<T>(v: &mut Vec<T>, limit: usize, mut cmp: impl FnMut(&T, &T) -> Ordering) {
    if limit > 0 && v.len() > limit {
        v.select_nth_unstable_by(limit - 1, &mut cmp);
        v.truncate(limit);
    }
    v.sort_unstable_by(cmp);
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
    use super::{beat, name_prefix};
    use proptest::prelude::*;

    proptest! {
        /// The packed `(heartbeat, position)` orders as the pair does,
        /// over jiff's whole range and without a heartbeat.
        #[test]
        fn packed_beats_order_as_pairs(
            a in proptest::option::of(-377_705_116_800i64..253_402_207_200),
            an in 0i32..1_000_000_000,
            ai in any::<u32>(),
            b in proptest::option::of(-377_705_116_800i64..253_402_207_200),
            bn in 0i32..1_000_000_000,
            bi in any::<u32>(),
        ) {
            let ts = |s: Option<i64>, n: i32| {
                s.and_then(|s| k8s_openapi::jiff::Timestamp::new(s, n).ok())
            };
            let (ta, tb) = (ts(a, an), ts(b, bn));
            prop_assert_eq!(beat(ta, ai).cmp(&beat(tb, bi)), (ta, ai).cmp(&(tb, bi)));
        }

        /// Prefix order, then name order on equal prefixes, is name order,
        /// for names shorter and longer than the 16-byte prefix.
        #[test]
        fn prefix_then_name_is_name_order(a in "[a-c.-]{0,20}", b in "[a-c.-]{0,20}") {
            let by_prefix = name_prefix(&a).cmp(&name_prefix(&b)).then_with(|| a.cmp(&b));
            prop_assert_eq!(by_prefix, a.cmp(&b));
        }
    }
}
