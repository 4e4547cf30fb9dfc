//! The affinity targets of one namespace, indexed: every Run active on a
//! Runtime Pod (Scheduled, Running or Ready with an `assignedPod`) and every
//! Run the scheduler assumed on one, by pod and by label.
//!
//! A decision with affinity reads the targets of the few pods it considers
//! (per pod, a handful of Runs) and finds the pods of a required term
//! through the posting list of its narrowest requirement, instead of
//! matching every target against every term. The cache keeps the index in
//! step with its Run entries and reservations; its invariant check holds it
//! to a recount.

use super::affinity::{Requirement, Selector};
use smallvec::SmallVec;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

type Fast = foldhash::fast::RandomState;

/// Labels of a target Run (shared with its cache entry and by its
/// entries in the index).
pub type Labels = Arc<BTreeMap<String, String>>;

/// Pods holding a target that carries one label value, with how many
/// such targets each holds.
type Posting = HashMap<Arc<str>, u32, Fast>;

/// Targets by Run name: the pod and labels of each.
type ByRun = HashMap<Arc<str>, (Arc<str>, Labels), Fast>;

/// The targets on one pod: `(run, assumed, labels)`.
type OnPod = SmallVec<[(Arc<str>, bool, Labels); 2]>;

/// The index of one namespace's affinity targets.
#[derive(Debug, Default, Clone)]
pub struct Targets {
    /// Every target by Run name, with its pod and labels: Runs active on
    /// a pod (`[0]`) and Runs this scheduler assumed on one (`[1]`).
    by_run: [ByRun; 2],
    /// Per pod, the targets on it.
    on_pod: HashMap<Arc<str>, OnPod, Fast>,
    /// Per label key and value, the pods holding a target that carries
    /// it, with how many such targets each holds.
    postings: HashMap<String, HashMap<String, Posting, Fast>, Fast>,
}

impl Targets {
    /// How many targets are held.
    pub fn len(&self) -> usize {
        self.by_run[0].len() + self.by_run[1].len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sets Run `run`'s target, active on a pod (`assumed: false`) or
    /// assumed there by this scheduler (`true`), to `(pod, labels)`, or
    /// removes it (`None`). Nothing changes (and nothing is allocated)
    /// when it already holds the same.
    pub fn set(&mut self, run: &str, assumed: bool, target: Option<(&Arc<str>, &Labels)>) {
        let map = &self.by_run[usize::from(assumed)];
        if let Some((pod, labels)) = map.get(run) {
            if let Some((p, l)) = target
                && pod == p
                && (Arc::ptr_eq(labels, l) || labels == l)
            {
                return;
            }
            self.remove(run, assumed);
        }
        let Some((pod, labels)) = target else { return };
        let run: Arc<str> = match self.by_run[usize::from(!assumed)].get_key_value(run) {
            Some((k, _)) => Arc::clone(k),
            None => Arc::from(run),
        };
        for (k, v) in labels.iter() {
            let values = match self.postings.get_mut(k) {
                Some(m) => m,
                None => self.postings.entry(k.clone()).or_default(),
            };
            let pods = match values.get_mut(v) {
                Some(m) => m,
                None => values.entry(v.clone()).or_default(),
            };
            *pods.entry(Arc::clone(pod)).or_default() += 1;
        }
        self.on_pod.entry(Arc::clone(pod)).or_default().push((
            Arc::clone(&run),
            assumed,
            Arc::clone(labels),
        ));
        self.by_run[usize::from(assumed)].insert(run, (Arc::clone(pod), Arc::clone(labels)));
    }

    fn remove(&mut self, run: &str, assumed: bool) {
        let Some((pod, labels)) = self.by_run[usize::from(assumed)].remove(run) else {
            return;
        };
        if let Some(list) = self.on_pod.get_mut(&pod) {
            if let Some(at) = list
                .iter()
                .position(|(r, a, _)| *a == assumed && **r == *run)
            {
                list.swap_remove(at);
            }
            if list.is_empty() {
                self.on_pod.remove(&pod);
            }
        }
        for (k, v) in labels.iter() {
            let Some(values) = self.postings.get_mut(k) else {
                continue;
            };
            if let Some(pods) = values.get_mut(v) {
                if let Some(n) = pods.get_mut(&pod) {
                    *n -= 1;
                    if *n == 0 {
                        pods.remove(&pod);
                    }
                }
                if pods.is_empty() {
                    values.remove(v);
                }
            }
            if values.is_empty() {
                self.postings.remove(k);
            }
        }
    }

    /// The labels of the targets on `pod`.
    #[inline]
    pub fn on(&self, pod: &str) -> impl Iterator<Item = &BTreeMap<String, String>> {
        self.on_pod
            .get(pod)
            .into_iter()
            .flatten()
            .map(|(_, _, l)| &**l)
    }

    /// Whether a target on `pod` matches `sel`.
    #[inline]
    pub fn pod_matches(&self, pod: &str, sel: &Selector) -> bool {
        self.on(pod).any(|l| sel.matches(l))
    }

    /// Every target as `(run, assumed, pod, labels)` (for checks against
    /// a recount).
    pub fn iter(&self) -> impl Iterator<Item = (&str, bool, &str, &BTreeMap<String, String>)> {
        self.by_run
            .iter()
            .enumerate()
            .flat_map(|(i, m)| m.iter().map(move |(r, (p, l))| (&**r, i == 1, &**p, &**l)))
    }

    /// Pods of the posting lists a requirement reads (a superset of the
    /// pods holding a target it matches), with how many entries that is;
    /// `None` when it names no label a target must carry (`NotIn`,
    /// `DoesNotExist`).
    fn narrowed(&self, r: &Requirement) -> Option<(usize, Vec<&Posting>)> {
        let values = |k: &str| self.postings.get(k);
        let lists: Vec<&Posting> = match r {
            Requirement::Equals(k, v) => values(k).and_then(|m| m.get(v)).into_iter().collect(),
            Requirement::In(k, vs) => match values(k) {
                Some(m) => {
                    let mut seen: Vec<&str> = Vec::new();
                    vs.iter()
                        .filter(|v| {
                            let new = !seen.contains(&v.as_str());
                            seen.push(v);
                            new
                        })
                        .filter_map(|v| m.get(v))
                        .collect()
                }
                None => Vec::new(),
            },
            Requirement::Exists(k) => values(k).into_iter().flat_map(|m| m.values()).collect(),
            Requirement::NotIn(..) | Requirement::DoesNotExist(_) => return None,
        };
        Some((lists.iter().map(|l| l.len()).sum(), lists))
    }

    /// The candidate pods of `sel`: those of its narrowest requirement's
    /// posting lists (possibly repeated), or every pod holding a target.
    /// Returns how many entries reading them costs, and the pods.
    fn candidates(&self, sel: &Selector) -> (usize, Box<dyn Iterator<Item = &Arc<str>> + '_>) {
        let mut best: Option<(usize, Vec<&Posting>)> = None;
        for r in sel.requirements() {
            if let Some((n, lists)) = self.narrowed(r)
                && best.as_ref().is_none_or(|(m, _)| n < *m)
            {
                best = Some((n, lists));
            }
        }
        match best {
            Some((n, lists)) => (n, Box::new(lists.into_iter().flat_map(|l| l.keys()))),
            None => (self.on_pod.len(), Box::new(self.on_pod.keys())),
        }
    }

    /// How many pod entries [`matching`](Self::matching) reads for `sel`.
    pub fn cost(&self, sel: &Selector) -> usize {
        self.candidates(sel).0
    }

    /// The pods holding a target `sel` matches, each once, in no order.
    pub fn matching(&self, sel: &Selector) -> Vec<Arc<str>> {
        let (_, pods) = self.candidates(sel);
        let mut out: Vec<Arc<str>> = pods.filter(|p| self.pod_matches(p, sel)).cloned().collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Whether any target matches `sel`.
    pub fn any_matching(&self, sel: &Selector) -> bool {
        let (_, mut pods) = self.candidates(sel);
        pods.any(|p| self.pod_matches(p, sel))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::affinity::parse_selector;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    const KEYS: [&str; 3] = ["a", "b", "c"];
    const VALUES: [&str; 3] = ["x", "y", "z"];

    fn labels() -> impl Strategy<Value = BTreeMap<String, String>> {
        proptest::collection::vec(proptest::option::of(0..VALUES.len()), KEYS.len()).prop_map(
            |vs| {
                KEYS.iter()
                    .zip(vs)
                    .filter_map(|(k, v)| Some(((*k).to_owned(), VALUES[v?].to_owned())))
                    .collect()
            },
        )
    }

    fn selector() -> impl Strategy<Value = LabelSelector> {
        let req = (
            0..5u8,
            0..KEYS.len(),
            proptest::collection::vec(0..VALUES.len(), 1..3),
        )
            .prop_map(|(op, k, vs)| {
                let (operator, values) = match op {
                    0 | 1 => ("In", Some(vs)),
                    2 => ("NotIn", Some(vs)),
                    3 => ("Exists", None),
                    _ => ("DoesNotExist", None),
                };
                LabelSelectorRequirement {
                    key: KEYS[k].to_owned(),
                    operator: operator.to_owned(),
                    values: values.map(|vs| vs.into_iter().map(|v| VALUES[v].to_owned()).collect()),
                }
            });
        (
            proptest::collection::vec(req, 0..3),
            proptest::option::of(labels()),
        )
            .prop_map(|(exprs, ml)| LabelSelector {
                match_expressions: Some(exprs),
                match_labels: ml,
            })
    }

    /// An operation on the index: set target `(run, assumed)` on a pod
    /// with labels, or remove it.
    type Op = (u8, bool, Option<(u8, BTreeMap<String, String>)>);

    proptest! {
        /// Whatever targets came and went, the index answers as a scan of
        /// the targets held: the pods matching a selector, whether any
        /// does, and the targets on each pod.
        #[test]
        fn index_answers_as_a_scan(
            ops in proptest::collection::vec(
                (0u8..8, any::<bool>(), proptest::option::weighted(0.8, (0u8..5, labels()))),
                0..40,
            ),
            sels in proptest::collection::vec(selector(), 1..6),
        ) {
            let mut t = Targets::default();
            let mut model: BTreeMap<(String, bool), (String, BTreeMap<String, String>)> =
                BTreeMap::new();
            for (run, assumed, target) in ops as Vec<Op> {
                let key = (format!("r-{run}"), assumed);
                match target {
                    Some((pod, l)) => {
                        let pod = format!("p-{pod}");
                        t.set(&key.0, assumed, Some((&Arc::from(pod.as_str()), &Arc::new(l.clone()))));
                        model.insert(key, (pod, l));
                    }
                    None => {
                        t.set(&key.0, assumed, None);
                        model.remove(&key);
                    }
                }
            }
            let held: BTreeMap<(String, bool), (String, BTreeMap<String, String>)> = t
                .iter()
                .map(|(r, a, p, l)| ((r.to_owned(), a), (p.to_owned(), l.clone())))
                .collect();
            prop_assert_eq!(&held, &model);
            prop_assert_eq!(t.len(), model.len());
            for s in &sels {
                let sel = parse_selector(s).unwrap();
                let want: BTreeSet<&str> = model
                    .values()
                    .filter(|(_, l)| sel.matches(l))
                    .map(|(p, _)| p.as_str())
                    .collect();
                let got = t.matching(&sel);
                prop_assert_eq!(got.iter().map(|p| &**p).collect::<BTreeSet<_>>(), want.clone());
                prop_assert_eq!(got.len(), want.len());
                prop_assert_eq!(t.any_matching(&sel), !want.is_empty());
            }
            for pod in 0..5 {
                let pod = format!("p-{pod}");
                let mut want: Vec<&BTreeMap<String, String>> =
                    model.values().filter(|(p, _)| *p == pod).map(|(_, l)| l).collect();
                let mut got: Vec<&BTreeMap<String, String>> = t.on(&pod).collect();
                want.sort();
                got.sort();
                prop_assert_eq!(got, want);
            }
            if model.is_empty() {
                prop_assert!(t.postings.is_empty() && t.on_pod.is_empty());
            }
        }
    }
}
