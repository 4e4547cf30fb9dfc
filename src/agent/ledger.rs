//! The reservation ledger of one Runtime Pod: capacity, reservations and the
//! queue of Runs waiting for capacity. Pure: no I/O, no clocks, no locks —
//! its single owner ([`super::Agent`]) serialises every call.
//!
//! # Queue policy: arrival order with bounded bypass
//!
//! Runs that do not fit wait in arrival order. Whenever capacity frees, the
//! queue is walked from the head and every Run that fits is admitted, so a
//! small Run may go ahead of a large one that is still waiting ("backfill").
//! Each time that happens, every waiting Run it overtook counts one bypass.
//! A Run whose bypass count has reached `max_bypass` stops the walk: nothing
//! behind it is admitted until it is. So a large Run at the head is
//! overtaken at most `max_bypass` times and then gets the next capacity that
//! frees; `max_bypass = 0` is strict FIFO.
//!
//! A Run that cannot fit even on an empty pod (it asks for more than the
//! capacity, or for a resource the pod does not declare) never blocks the
//! walk: it stays queued, since capacity may be raised, but waiting for it
//! would stop the pod forever.
//!
//! New requests join the tail and go through the same walk, so a newcomer
//! never jumps a Run whose bypass budget is spent.
//!
//! # Ownership and bounds
//!
//! Every request carries its caller (the peer uid on the socket). A hold or a
//! queue entry belongs to the caller that created it: asking again or
//! releasing it as someone else is refused ([`Decision::NotYours`],
//! [`NotYours`]). Holds adopted from the watch belong to nobody (only the
//! watch releases them), unless a caller had asked for that Run: then they
//! stay that caller's ([`AdmissionLedger::adopt`]). The queue holds at most `max_queue` Runs; a newcomer
//! that would queue beyond it is refused ([`Decision::QueueFull`]) and leaves
//! no trace.
//!
//! Every hold created or released by a request is recorded in
//! [`AdmissionLedger::take_changes`], so the owner can journal admissions.

use crate::model::refs::RunRef;
use crate::model::resources::Requests;
use std::collections::{HashMap, VecDeque};

pub use crate::model::resources::Amounts;

/// How a reservation came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Admitted through the ledger (a request, then maybe the queue).
    Admitted,
    /// Adopted from the watch: the Run was already Running or Ready here.
    Observed,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Admitted => "admitted",
            Origin::Observed => "observed",
        }
    }
}

/// A reservation held by a Run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub run: RunRef,
    pub requests: Requests,
    pub origin: Origin,
    /// The caller that asked for it; `None` for holds adopted from the watch.
    pub creator: Option<u32>,
}

/// A Run waiting for capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub run: RunRef,
    pub requests: Requests,
    /// How many later Runs were admitted ahead of this one.
    pub bypassed: u32,
    /// The caller that asked for it.
    pub creator: Option<u32>,
}

/// A change to the set of admitted holds, for the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// An `Admitted` hold was created (by a request or by the queue walk).
    Admitted(String),
    /// An `Admitted` hold was released.
    Released(String),
}

/// Refusal to act on a hold or queue entry created by another caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotYours {
    /// Who created it (`None`: adopted from the watch).
    pub creator: Option<u32>,
}

/// The answer to a reservation request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The uid already held a reservation (HTTP 200).
    AlreadyHeld(Hold),
    /// Reserved now (HTTP 201).
    Admitted(Hold),
    /// Does not fit (HTTP 409); the Run is queued.
    Queued(QueuedInfo),
    /// Does not fit and the queue is full (HTTP 429); nothing changed.
    QueueFull { max: usize },
    /// The uid is held or queued by another caller (HTTP 403); nothing
    /// changed.
    NotYours(NotYours),
}

/// Where a queued Run stands and why it waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedInfo {
    /// 1-based position in the queue.
    pub position: usize,
    /// Per resource, how much is missing (`request - free`); empty when the
    /// Run fits but waits behind a Run whose bypass budget is spent.
    pub shortfall: Amounts,
    /// The queued Run that blocks this one by the anti-starvation rule.
    pub blocked_by: Option<RunRef>,
    /// Whether the request exceeds the pod's capacity even when empty.
    pub exceeds_capacity: bool,
}

/// Result of a release or a removal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Released {
    /// The uid held a reservation, now released.
    pub held: bool,
    /// The uid was queued, now removed from the queue.
    pub dequeued: bool,
}

/// The ledger. See the module documentation for the queue policy.
#[derive(Debug, Clone)]
pub struct AdmissionLedger {
    /// Declared capacity (positive amounts) by resource name.
    capacity: Amounts,
    /// Sum of the requests of every hold.
    reserved: Amounts,
    /// Reservations by Run uid.
    holds: HashMap<String, Hold>,
    /// Runs waiting, in arrival order.
    queue: VecDeque<Waiting>,
    /// Bypasses a waiting Run tolerates before it blocks those behind it.
    max_bypass: u32,
    /// Longest queue.
    max_queue: usize,
    /// Admitted holds created and released since the last `take_changes`.
    changes: Vec<Change>,
}

impl AdmissionLedger {
    pub fn new(capacity: impl IntoIterator<Item = (String, u64)>, max_bypass: u32) -> Self {
        AdmissionLedger {
            capacity: capacity.into_iter().filter(|(_, a)| *a > 0).collect(),
            reserved: Amounts::new(),
            holds: HashMap::new(),
            queue: VecDeque::new(),
            max_bypass,
            max_queue: usize::MAX,
            changes: Vec::new(),
        }
    }

    /// Bounds the queue (at least one entry).
    pub fn with_max_queue(mut self, max_queue: usize) -> Self {
        self.max_queue = max_queue.max(1);
        self
    }

    pub fn max_queue(&self) -> usize {
        self.max_queue
    }

    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }

    /// Admitted holds created and released since the last call, in order.
    pub fn take_changes(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.changes)
    }

    /// Who may act on the uid: `Err` when it is held or queued by another
    /// caller than `caller`.
    pub fn check_owner(&self, uid: &str, caller: Option<u32>) -> Result<(), NotYours> {
        let creator = match self.holds.get(uid) {
            Some(h) => Some(h.creator),
            None => self
                .queue
                .iter()
                .find(|w| w.run.uid == uid)
                .map(|w| w.creator),
        };
        match creator {
            Some(c) if c != caller => Err(NotYours { creator: c }),
            _ => Ok(()),
        }
    }

    pub fn capacity(&self) -> &Amounts {
        &self.capacity
    }

    pub fn reserved(&self) -> &Amounts {
        &self.reserved
    }

    /// Capacity minus reserved, per declared resource (zero when
    /// over-committed after a capacity decrease).
    pub fn free(&self) -> Amounts {
        self.capacity
            .iter()
            .map(|(n, c)| (n.clone(), c.saturating_sub(self.reserved_of(n))))
            .collect()
    }

    pub fn holds(&self) -> impl Iterator<Item = &Hold> {
        self.holds.values()
    }

    pub fn hold(&self, uid: &str) -> Option<&Hold> {
        self.holds.get(uid)
    }

    pub fn queue(&self) -> impl Iterator<Item = &Waiting> {
        self.queue.iter()
    }

    pub fn is_queued(&self, uid: &str) -> bool {
        self.queue.iter().any(|w| w.run.uid == uid)
    }

    pub fn max_bypass(&self) -> u32 {
        self.max_bypass
    }

    fn reserved_of(&self, name: &str) -> u64 {
        self.reserved.get(name).copied().unwrap_or(0)
    }

    fn capacity_of(&self, name: &str) -> u64 {
        self.capacity.get(name).copied().unwrap_or(0)
    }

    /// Every requested resource is declared and fits in what is free.
    pub fn fits(&self, requests: &Requests) -> bool {
        requests.iter().all(|(n, a)| {
            self.reserved_of(n)
                .checked_add(a)
                .is_some_and(|sum| sum <= self.capacity_of(n))
        })
    }

    /// The request could fit on this pod if nothing else were reserved.
    pub fn could_ever_fit(&self, requests: &Requests) -> bool {
        requests.iter().all(|(n, a)| a <= self.capacity_of(n))
    }

    /// What is missing for `requests` to fit now.
    pub fn shortfall(&self, requests: &Requests) -> Amounts {
        requests
            .iter()
            .filter_map(|(n, a)| {
                let free = self.capacity_of(n).saturating_sub(self.reserved_of(n));
                (a > free).then(|| (n.to_owned(), a - free))
            })
            .collect()
    }

    fn add_reserved(&mut self, requests: &Requests) {
        for (n, a) in requests.iter() {
            let e = self.reserved.entry(n.to_owned()).or_insert(0);
            *e = e.saturating_add(a);
        }
    }

    fn sub_reserved(&mut self, requests: &Requests) {
        for (n, a) in requests.iter() {
            if let Some(e) = self.reserved.get_mut(n) {
                *e = e.saturating_sub(a);
                if *e == 0 {
                    self.reserved.remove(n);
                }
            }
        }
    }

    /// Asks for a reservation. A uid that holds one gets it back; a uid
    /// already queued keeps its place; a new uid joins the tail. Returns the
    /// decision and the uids the walk admitted (the requester's included
    /// when it got in).
    ///
    /// `caller` must be the creator of an existing hold or queue entry
    /// (holds adopted from the watch answer anyone: asking changes nothing);
    /// otherwise the answer is [`Decision::NotYours`].
    pub fn request(
        &mut self,
        run: RunRef,
        requests: Requests,
        caller: Option<u32>,
    ) -> (Decision, Vec<String>) {
        if let Some(h) = self.holds.get(&run.uid) {
            if h.creator.is_some() && h.creator != caller {
                return (
                    Decision::NotYours(NotYours { creator: h.creator }),
                    Vec::new(),
                );
            }
            return (Decision::AlreadyHeld(h.clone()), Vec::new());
        }
        if let Err(e) = self.check_owner(&run.uid, caller) {
            return (Decision::NotYours(e), Vec::new());
        }
        let uid = run.uid.clone();
        let newcomer = !self.is_queued(&uid);
        if newcomer {
            self.queue.push_back(Waiting {
                run,
                requests,
                bypassed: 0,
                creator: caller,
            });
        }
        let admitted = self.pump();
        if newcomer && self.queue.len() > self.max_queue && self.remove_queued(&uid) {
            return (
                Decision::QueueFull {
                    max: self.max_queue,
                },
                admitted,
            );
        }
        let decision = match self.holds.get(&uid) {
            Some(h) => Decision::Admitted(h.clone()),
            None => match self.queued_info(&uid) {
                Some(info) => Decision::Queued(info),
                // Unreachable: the uid is either held or queued after the walk.
                None => Decision::Queued(QueuedInfo {
                    position: 0,
                    shortfall: Amounts::new(),
                    blocked_by: None,
                    exceeds_capacity: false,
                }),
            },
        };
        (decision, admitted)
    }

    /// Where a queued uid stands, `None` when it is not queued.
    pub fn queued_info(&self, uid: &str) -> Option<QueuedInfo> {
        let pos = self.queue.iter().position(|w| w.run.uid == uid)?;
        let w = &self.queue[pos];
        let shortfall = self.shortfall(&w.requests);
        let blocked_by = if shortfall.is_empty() {
            self.queue
                .iter()
                .take(pos)
                .find(|b| self.blocks(b))
                .map(|b| b.run.clone())
        } else {
            None
        };
        Some(QueuedInfo {
            position: pos + 1,
            shortfall,
            blocked_by,
            exceeds_capacity: !self.could_ever_fit(&w.requests),
        })
    }

    /// Whether a waiting Run stops the walk (its bypass budget is spent and
    /// it could fit on this pod one day).
    fn blocks(&self, w: &Waiting) -> bool {
        w.bypassed >= self.max_bypass && self.could_ever_fit(&w.requests)
    }

    /// Walks the queue in arrival order and admits what fits, honouring the
    /// bypass budget. Returns the admitted uids in admission order.
    pub fn pump(&mut self) -> Vec<String> {
        let mut admitted = Vec::new();
        let mut kept: VecDeque<Waiting> = VecDeque::with_capacity(self.queue.len());
        let mut queue = std::mem::take(&mut self.queue);
        while let Some(mut w) = queue.pop_front() {
            if self.fits(&w.requests) {
                self.add_reserved(&w.requests);
                // Everyone still waiting ahead of it that could fit one day
                // was overtaken once more.
                for k in kept.iter_mut() {
                    if self.could_ever_fit(&k.requests) {
                        k.bypassed = k.bypassed.saturating_add(1);
                    }
                }
                admitted.push(w.run.uid.clone());
                self.changes.push(Change::Admitted(w.run.uid.clone()));
                self.holds.insert(
                    w.run.uid.clone(),
                    Hold {
                        run: w.run,
                        requests: w.requests,
                        origin: Origin::Admitted,
                        creator: w.creator,
                    },
                );
                continue;
            }
            let stop = self.blocks(&w);
            w.bypassed = w.bypassed.min(self.max_bypass);
            kept.push_back(w);
            if stop {
                kept.extend(queue.drain(..));
                break;
            }
        }
        self.queue = kept;
        admitted
    }

    /// Records a Run that already holds capacity (Running or Ready on this
    /// pod), whatever is free: an executing Run is never refused or revoked.
    /// Takes it out of the queue if it was waiting. Returns whether the uid
    /// was queued (its waiters count it as admitted).
    ///
    /// The hold belongs to the caller that queued the Run, else to
    /// `creator` (a caller known to have asked for it), else to the watch.
    pub fn adopt(&mut self, run: RunRef, requests: Requests, creator: Option<u32>) -> bool {
        if self.holds.contains_key(&run.uid) {
            return false;
        }
        let queued = self
            .queue
            .iter()
            .find(|w| w.run.uid == run.uid)
            .and_then(|w| w.creator);
        let was_queued = self.remove_queued(&run.uid);
        self.add_reserved(&requests);
        self.holds.insert(
            run.uid.clone(),
            Hold {
                run,
                requests,
                origin: Origin::Observed,
                creator: queued.or(creator),
            },
        );
        was_queued
    }

    /// Puts back an admitted hold recovered from the journal, whatever is
    /// free (it was admitted before the restart). Not recorded as a change:
    /// the journal has it already.
    pub fn restore(&mut self, run: RunRef, requests: Requests, creator: Option<u32>) {
        if self.holds.contains_key(&run.uid) {
            return;
        }
        self.remove_queued(&run.uid);
        self.add_reserved(&requests);
        self.holds.insert(
            run.uid.clone(),
            Hold {
                run,
                requests,
                origin: Origin::Admitted,
                creator,
            },
        );
    }

    fn remove_queued(&mut self, uid: &str) -> bool {
        let before = self.queue.len();
        self.queue.retain(|w| w.run.uid != uid);
        self.queue.len() != before
    }

    /// Releases the uid's reservation and removes it from the queue. Returns
    /// what was there and the uids the freed capacity admitted.
    pub fn release(&mut self, uid: &str) -> (Released, Vec<String>) {
        let mut r = Released {
            dequeued: self.remove_queued(uid),
            ..Released::default()
        };
        if let Some(h) = self.holds.remove(uid) {
            self.sub_reserved(&h.requests);
            if h.origin == Origin::Admitted {
                self.changes.push(Change::Released(uid.to_owned()));
            }
            r.held = true;
        }
        let admitted = if r.held || r.dequeued {
            self.pump()
        } else {
            Vec::new()
        };
        (r, admitted)
    }

    /// Replaces the capacity. Lowering it revokes nothing (reserved may
    /// exceed capacity until Runs finish); raising it admits what now fits.
    pub fn set_capacity(
        &mut self,
        capacity: impl IntoIterator<Item = (String, u64)>,
    ) -> Vec<String> {
        self.capacity = capacity.into_iter().filter(|(_, a)| *a > 0).collect();
        self.pump()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::resources::effective_requests;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn req(pairs: &[(&str, &str)]) -> Requests {
        let m: std::collections::BTreeMap<String, Quantity> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect();
        effective_requests(Some(&m)).expect("valid request")
    }

    fn run(uid: &str) -> RunRef {
        RunRef {
            namespace: "default".into(),
            name: format!("run-{uid}"),
            uid: uid.into(),
        }
    }

    fn cap(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
        pairs.iter().map(|(n, a)| (n.to_string(), *a)).collect()
    }

    fn uids(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    #[test]
    fn agent_ledger_admits_until_full_then_queues_with_shortfall() {
        let mut l = AdmissionLedger::new(cap(&[("runs", 2), ("gpu", 1)]), 4);
        let (d, a) = l.request(run("a"), req(&[("gpu", "1")]), Some(1));
        assert!(matches!(d, Decision::Admitted(_)));
        assert_eq!(uids(&a), ["a"]);
        let (d, _) = l.request(run("b"), req(&[("gpu", "1")]), Some(1));
        let Decision::Queued(info) = d else {
            panic!("{d:?}")
        };
        assert_eq!(info.position, 1);
        assert_eq!(info.shortfall, Amounts::from([("gpu".into(), 1)]));
        assert!(!info.exceeds_capacity);
        assert_eq!(l.reserved().get("runs"), Some(&1));
        assert_eq!(l.free().get("gpu"), Some(&0));
    }

    #[test]
    fn agent_ledger_same_uid_is_idempotent() {
        let mut l = AdmissionLedger::new(cap(&[("runs", 1)]), 4);
        assert!(matches!(
            l.request(run("a"), req(&[]), Some(1)).0,
            Decision::Admitted(_)
        ));
        assert!(matches!(
            l.request(run("a"), req(&[]), Some(1)).0,
            Decision::AlreadyHeld(_)
        ));
        assert_eq!(l.reserved().get("runs"), Some(&1));
        // A queued uid asking again keeps its place, no duplicate entry.
        l.request(run("b"), req(&[]), Some(1));
        l.request(run("c"), req(&[]), Some(1));
        let (d, _) = l.request(run("b"), req(&[]), Some(1));
        assert!(matches!(
            d,
            Decision::Queued(QueuedInfo { position: 1, .. })
        ));
        assert_eq!(l.queue().count(), 2);
    }

    #[test]
    fn agent_ledger_release_admits_in_arrival_order() {
        let mut l = AdmissionLedger::new(cap(&[("runs", 1)]), 0);
        l.request(run("a"), req(&[]), Some(1));
        for u in ["b", "c", "d"] {
            l.request(run(u), req(&[]), Some(1));
        }
        let (r, a) = l.release("a");
        assert!(r.held);
        assert_eq!(uids(&a), ["b"]);
        assert_eq!(uids(&l.release("b").1), ["c"]);
        assert_eq!(uids(&l.release("c").1), ["d"]);
        assert!(l.release("nope").1.is_empty());
    }

    #[test]
    fn agent_ledger_big_run_is_not_starved_by_small_ones() {
        // runs 4; "big" needs 3 while small ones keep two slots busy.
        let mut l = AdmissionLedger::new(cap(&[("runs", 4)]), 2);
        l.request(run("s1"), req(&[]), Some(1));
        l.request(run("s2"), req(&[]), Some(1));
        let (d, _) = l.request(run("big"), req(&[("runs", "3")]), Some(1));
        assert!(matches!(d, Decision::Queued(_)));
        // Two small ones may overtake (budget 2)...
        assert!(matches!(
            l.request(run("s3"), req(&[]), Some(1)).0,
            Decision::Admitted(_)
        ));
        assert!(matches!(
            l.request(run("s4"), req(&[]), Some(1)).0,
            Decision::Admitted(_)
        ));
        // ...then small ones wait behind the big one even though they fit.
        l.release("s1");
        let (d, _) = l.request(run("s5"), req(&[]), Some(1));
        let Decision::Queued(info) = d else {
            panic!("{d:?}")
        };
        assert!(info.shortfall.is_empty());
        assert_eq!(info.blocked_by.map(|r| r.uid), Some("big".to_owned()));
        assert!(l.release("s2").1.is_empty(), "big needs 3, only 2 free");
        assert_eq!(uids(&l.release("s3").1), ["big"]);
        assert_eq!(uids(&l.release("s4").1), ["s5"]);
    }

    #[test]
    fn agent_ledger_strict_fifo_with_zero_budget() {
        let mut l = AdmissionLedger::new(cap(&[("runs", 2)]), 0);
        l.request(run("a"), req(&[]), Some(1));
        l.request(run("big"), req(&[("runs", "2")]), Some(1));
        let (d, _) = l.request(run("small"), req(&[]), Some(1));
        assert!(matches!(d, Decision::Queued(_)));
        assert_eq!(uids(&l.release("a").1), ["big"]);
    }

    #[test]
    fn agent_ledger_impossible_runs_never_block() {
        let mut l = AdmissionLedger::new(cap(&[("runs", 2)]), 0);
        let (d, _) = l.request(run("huge"), req(&[("runs", "3")]), Some(1));
        let Decision::Queued(info) = d else {
            panic!("{d:?}")
        };
        assert!(info.exceeds_capacity);
        let (d, _) = l.request(run("gpu"), req(&[("gpu", "1")]), Some(1));
        assert!(matches!(
            d,
            Decision::Queued(QueuedInfo {
                exceeds_capacity: true,
                ..
            })
        ));
        assert!(matches!(
            l.request(run("ok"), req(&[]), Some(1)).0,
            Decision::Admitted(_)
        ));
        // Raising capacity lets the huge one in.
        let a = l.set_capacity(cap(&[("runs", 5), ("gpu", 1)]));
        assert_eq!(uids(&a), ["huge", "gpu"]);
    }

    #[test]
    fn agent_ledger_lowering_capacity_revokes_nothing() {
        let mut l = AdmissionLedger::new(cap(&[("runs", 3)]), 4);
        for u in ["a", "b", "c"] {
            l.request(run(u), req(&[]), Some(1));
        }
        assert!(l.set_capacity(cap(&[("runs", 1)])).is_empty());
        assert_eq!(l.holds().count(), 3);
        assert_eq!(l.free().get("runs"), Some(&0));
        assert!(matches!(
            l.request(run("d"), req(&[]), Some(1)).0,
            Decision::Queued(_)
        ));
        l.release("a");
        assert!(
            l.release("b").1.is_empty(),
            "one still reserved, capacity 1"
        );
        assert_eq!(uids(&l.release("c").1), ["d"]);
    }

    #[test]
    fn agent_ledger_adopt_counts_even_over_capacity() {
        let mut l = AdmissionLedger::new(cap(&[("runs", 1)]), 4);
        l.request(run("q"), req(&[]), Some(1));
        l.request(run("x"), req(&[]), Some(1));
        assert!(l.adopt(run("x"), req(&[]), None), "was queued");
        assert!(!l.adopt(run("y"), req(&[]), None));
        assert_eq!(l.reserved().get("runs"), Some(&3));
        assert!(
            !l.adopt(run("y"), req(&[]), None),
            "adopting twice changes nothing"
        );
        assert_eq!(l.reserved().get("runs"), Some(&3));
        assert_eq!(l.hold("y").map(|h| h.origin), Some(Origin::Observed));
    }

    #[test]
    fn agent_ledger_release_of_queued_uid_dequeues() {
        let mut l = AdmissionLedger::new(cap(&[("runs", 1)]), 4);
        l.request(run("a"), req(&[]), Some(1));
        l.request(run("b"), req(&[]), Some(1));
        let (r, a) = l.release("b");
        assert_eq!(
            r,
            Released {
                held: false,
                dequeued: true
            }
        );
        assert!(a.is_empty());
        assert_eq!(l.queue().count(), 0);
    }

    #[test]
    fn agent_ledger_owner_and_queue_bound() {
        let mut l = AdmissionLedger::new(cap(&[("runs", 1)]), 4).with_max_queue(1);
        assert!(matches!(
            l.request(run("a"), req(&[]), Some(1)).0,
            Decision::Admitted(_)
        ));
        // Another caller can neither ask for nor release a's hold.
        assert_eq!(
            l.request(run("a"), req(&[]), Some(2)).0,
            Decision::NotYours(NotYours { creator: Some(1) })
        );
        assert_eq!(
            l.check_owner("a", Some(2)),
            Err(NotYours { creator: Some(1) })
        );
        assert!(matches!(
            l.request(run("b"), req(&[]), Some(2)).0,
            Decision::Queued(_)
        ));
        assert_eq!(
            l.request(run("b"), req(&[]), Some(1)).0,
            Decision::NotYours(NotYours { creator: Some(2) })
        );
        // The queue is full: a newcomer is refused and leaves no trace...
        assert_eq!(
            l.request(run("c"), req(&[]), Some(1)).0,
            Decision::QueueFull { max: 1 }
        );
        assert!(!l.is_queued("c"));
        assert_eq!(l.queue_len(), 1);
        // ...while the queued one asking again keeps its place.
        assert!(matches!(
            l.request(run("b"), req(&[]), Some(2)).0,
            Decision::Queued(QueuedInfo { position: 1, .. })
        ));
        // A newcomer that fits at once is admitted even with a full queue.
        l.set_capacity(cap(&[("runs", 3)]));
        assert!(l.hold("b").is_some());
        assert!(matches!(
            l.request(run("d"), req(&[]), Some(1)).0,
            Decision::Admitted(_)
        ));
        assert_eq!(
            l.take_changes(),
            vec![
                Change::Admitted("a".into()),
                Change::Admitted("b".into()),
                Change::Admitted("d".into())
            ]
        );
        l.release("a");
        assert_eq!(l.take_changes(), vec![Change::Released("a".into())]);
    }
}
