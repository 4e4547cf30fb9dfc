//! Run affinity and anti-affinity, as upstream kruntimes schedules them
//! (`internal/scheduler/affinity.go`, `score.go`, `score_affinity.go`,
//! `strategy_leastloaded.go`): terms with topology key
//! `kruntimes.io/runtime-pod` select active Runs of the namespace
//! (Scheduled, Running or Ready with an `assignedPod`, and the scheduler's
//! own assumed Runs) by labels; a required term passes a pod that holds a
//! matching Run, or any pod when no Run matches yet and the Run's own labels
//! match the term (it seeds the cohort); a required anti-affinity term fails
//! a pod that holds one. Feasible pods are scored by two weighted plugins,
//! each normalized to 0..100: preferred affinity (the weights of the
//! preferred terms a pod satisfies, scaled by the maximum) and least-loaded
//! (rank groups of equal load, least loaded 100, most loaded 0); the highest
//! total wins, ties by pod name. Pure: no cache, no clock.

use crate::crd::{RunAffinity, RunAffinityTerm, TOPOLOGY_RUNTIME_POD};
use crate::model::resources::ResourceVec;
use crate::model::runtime_pod::Freshness;
use crate::runs::columns::{Columns, Verdict};
use crate::runs::placement::{RejectionCounts, Score};
use crate::runs::targets::Targets;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::cmp::Ordering;
use std::collections::BTreeMap;
#[cfg(test)]
use std::collections::HashSet;
use std::sync::Arc;

/// Filter reason of a pod without the required cohort.
pub const UNSATISFIED_AFFINITY: &str = "UnsatisfiedRunAffinity";
/// Filter reason of a pod holding a Run the anti-affinity excludes.
pub const UNSATISFIED_ANTI_AFFINITY: &str = "UnsatisfiedRunAntiAffinity";

/// Highest normalized score of one plugin (upstream `maxPodScore`).
pub const MAX_SCORE: i64 = 100;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Requirement {
    Equals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed label selector (`metav1.LabelSelectorAsSelector`): every
/// requirement must hold; no requirements matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    reqs: Vec<Requirement>,
}

impl Selector {
    /// The requirements, all of which must hold.
    pub(crate) fn requirements(&self) -> &[Requirement] {
        &self.reqs
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.reqs.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }
}

fn is_name_part(s: &str, max: usize) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= max
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of
/// at most 63 characters.
fn check_key(k: &str) -> Result<(), String> {
    let ok = match k.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_name_part(name, 63),
        None => is_name_part(k, 63),
    };
    if ok {
        Ok(())
    } else {
        Err(format!("key: Invalid value: {k:?}: not a valid label key"))
    }
}

/// A label value: empty, or at most 63 characters of the name alphabet.
fn check_value(v: &str) -> Result<(), String> {
    if v.is_empty() || is_name_part(v, 63) {
        Ok(())
    } else {
        Err(format!(
            "values: Invalid value: {v:?}: not a valid label value"
        ))
    }
}

/// Parses a `LabelSelector` as `metav1.LabelSelectorAsSelector` does.
pub fn parse_selector(s: &LabelSelector) -> Result<Selector, String> {
    let mut reqs = Vec::new();
    for (k, v) in s.match_labels.iter().flatten() {
        check_key(k)?;
        check_value(v)?;
        reqs.push(Requirement::Equals(k.clone(), v.clone()));
    }
    for e in s.match_expressions.iter().flatten() {
        check_key(&e.key)?;
        let values = e.values.clone().unwrap_or_default();
        let r = match e.operator.as_str() {
            "In" | "NotIn" => {
                if values.is_empty() {
                    return Err(format!(
                        "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty (key {:?})",
                        e.key
                    ));
                }
                for v in &values {
                    check_value(v)?;
                }
                if e.operator == "In" {
                    Requirement::In(e.key.clone(), values)
                } else {
                    Requirement::NotIn(e.key.clone(), values)
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    return Err(format!(
                        "values: Invalid value: {values:?}: values set must be empty for exists and does not exist (key {:?})",
                        e.key
                    ));
                }
                if e.operator == "Exists" {
                    Requirement::Exists(e.key.clone())
                } else {
                    Requirement::DoesNotExist(e.key.clone())
                }
            }
            op => return Err(format!("{op:?} is not a valid label selector operator")),
        };
        reqs.push(r);
    }
    Ok(Selector { reqs })
}

/// One term, evaluated against the namespace's active Runs by a scan:
/// the reference [`Bound`] is tested against.
#[cfg(test)]
#[derive(Debug, Clone, Default)]
struct Rule {
    weight: i64,
    /// Pods holding a matching active or assumed Run.
    pods: HashSet<String>,
    /// No Run matches and the Run's own labels do: any pod passes.
    seedable: bool,
}

/// A Run's compiled affinity (upstream `runAffinity`) over a scan of its
/// targets: the reference [`Bound`] is tested against.
#[cfg(test)]
#[derive(Debug, Clone, Default)]
pub struct Affinity {
    required: Vec<Rule>,
    required_anti: Vec<Rule>,
    preferred: Vec<Rule>,
    preferred_anti: Vec<Rule>,
}

/// Compiles a term: its selector, checked topology key.
fn term_selector(term: &RunAffinityTerm) -> Result<Selector, String> {
    if term.topology_key != TOPOLOGY_RUNTIME_POD {
        return Err(format!(
            "unsupported run affinity topology key {:?}",
            term.topology_key
        ));
    }
    let sel = term
        .label_selector
        .as_ref()
        .ok_or_else(|| "run affinity term has no label selector".to_owned())?;
    parse_selector(sel).map_err(|e| format!("parse run affinity selector: {e}"))
}

#[cfg(test)]
impl Affinity {
    /// Builds the rules of `affinity` for a Run labelled `own`, against
    /// `targets`: `(pod, labels)` of every active or assumed Run of the
    /// namespace. An error fails the Run (upstream: `pod selection
    /// failed: pre-filter run affinity: ...`).
    pub fn build<'a>(
        affinity: &RunAffinity,
        own: &BTreeMap<String, String>,
        targets: impl Iterator<Item = (&'a str, &'a BTreeMap<String, String>)> + Clone,
    ) -> Result<Affinity, String> {
        let build = |term: &RunAffinityTerm, weight: i64, allow_seed: bool| {
            let sel = term_selector(term)?;
            let pods: HashSet<String> = targets
                .clone()
                .filter(|(_, l)| sel.matches(l))
                .map(|(p, _)| p.to_owned())
                .collect();
            let seedable = allow_seed && pods.is_empty() && sel.matches(own);
            Ok::<_, String>(Rule {
                weight,
                pods,
                seedable,
            })
        };
        let mut a = Affinity::default();
        for (rules, anti) in [
            (affinity.run_affinity.as_ref(), false),
            (affinity.run_anti_affinity.as_ref(), true),
        ] {
            let Some(rules) = rules else { continue };
            for t in &rules.required_during_scheduling_ignored_during_execution {
                let r = build(t, 0, !anti)?;
                if anti {
                    a.required_anti.push(r);
                } else {
                    a.required.push(r);
                }
            }
            for w in &rules.preferred_during_scheduling_ignored_during_execution {
                let r = build(&w.run_affinity_term, i64::from(w.weight), false)?;
                if anti {
                    a.preferred_anti.push(r);
                } else {
                    a.preferred.push(r);
                }
            }
        }
        Ok(a)
    }

    /// Whether `pod` passes the required terms; the filter reason if not.
    pub fn filter(&self, pod: &str) -> Result<(), &'static str> {
        if self
            .required
            .iter()
            .any(|r| !r.pods.contains(pod) && !r.seedable)
        {
            return Err(UNSATISFIED_AFFINITY);
        }
        if self.required_anti.iter().any(|r| r.pods.contains(pod)) {
            return Err(UNSATISFIED_ANTI_AFFINITY);
        }
        Ok(())
    }

    /// The raw preferred score: weights of preferred terms `pod` holds a
    /// match for, and of preferred anti terms it does not.
    pub fn preferred_score(&self, pod: &str) -> i64 {
        let hit: i64 = self
            .preferred
            .iter()
            .filter(|r| r.pods.contains(pod))
            .map(|r| r.weight)
            .sum();
        let miss: i64 = self
            .preferred_anti
            .iter()
            .filter(|r| !r.pods.contains(pod))
            .map(|r| r.weight)
            .sum();
        hit + miss
    }
}

/// A feasible pod after both score plugins.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked<'a> {
    pub pod: &'a str,
    pub load: Score,
    /// Preferred affinity score, normalized 0..100.
    pub affinity: i64,
    /// Least-loaded score, normalized 0..100.
    pub least_loaded: i64,
}

impl Ranked<'_> {
    pub fn total(&self) -> i64 {
        self.affinity + self.least_loaded
    }
}

/// Filters `feasible` (pods that fit, best load first) by the required
/// terms and ranks the rest as upstream's weighted plugins do. Returns the
/// ranked pods, best first, and the pods the affinity rejected with their
/// reason, in the order given.
#[cfg(test)]
pub fn rank<'a>(
    affinity: &Affinity,
    feasible: impl IntoIterator<Item = (&'a str, Score)>,
) -> (Vec<Ranked<'a>>, Vec<(&'a str, &'static str)>) {
    rank_with(
        |p| affinity.filter(p),
        |p| affinity.preferred_score(p),
        feasible,
    )
}

/// Filters `feasible` (pods that fit, best load first) by `filter` (the
/// required terms) and ranks the rest as upstream's weighted plugins do,
/// with `preferred_score` the raw preferred score of a pod. Returns the
/// ranked pods, best first, and the pods the filter rejected with their
/// reason, in the order given.
pub fn rank_with<'a>(
    filter: impl Fn(&str) -> Result<(), &'static str>,
    preferred_score: impl Fn(&str) -> i64,
    feasible: impl IntoIterator<Item = (&'a str, Score)>,
) -> (Vec<Ranked<'a>>, Vec<(&'a str, &'static str)>) {
    let mut kept: Vec<(&'a str, Score)> = Vec::new();
    let mut rejected = Vec::new();
    for (pod, s) in feasible {
        match filter(pod) {
            Ok(()) => kept.push((pod, s)),
            Err(why) => rejected.push((pod, why)),
        }
    }
    // Least loaded: rank groups of equal load, by load (stable).
    kept.sort_by(|a, b| a.1.cmp_load(&b.1).then(Ordering::Equal));
    let n = kept.len();
    let mut ranked: Vec<Ranked<'a>> = Vec::with_capacity(n);
    let mut start = 0;
    while start < n {
        let mut end = start + 1;
        while end < n && kept[end].1.cmp_load(&kept[start].1) == Ordering::Equal {
            end += 1;
        }
        let ll = if n == 1 {
            MAX_SCORE
        } else {
            (n - 1 - start) as i64 * MAX_SCORE / (n - 1) as i64
        };
        for (pod, s) in &kept[start..end] {
            ranked.push(Ranked {
                pod,
                load: s.clone(),
                affinity: preferred_score(pod),
                least_loaded: ll,
            });
        }
        start = end;
    }
    // Preferred affinity: normalized by the maximum.
    let max = ranked.iter().map(|r| r.affinity).max().unwrap_or(0);
    if max > 0 {
        for r in &mut ranked {
            r.affinity = r.affinity * MAX_SCORE / max;
        }
    }
    ranked.sort_by(|a, b| b.total().cmp(&a.total()).then_with(|| a.pod.cmp(b.pod)));
    (ranked, rejected)
}

/// A Run's terms, parsed once: upstream's pre-filter, without the
/// targets. Matched against the namespace's targets by [`Bound`].
#[derive(Debug, Clone, Default)]
pub struct Terms {
    required: Vec<Selector>,
    required_anti: Vec<Selector>,
    preferred: Vec<(i64, Selector)>,
    preferred_anti: Vec<(i64, Selector)>,
}

impl Terms {
    /// Parses every term, in the order [`Affinity::build`] does, failing
    /// with the same message on the first that cannot be parsed.
    pub fn compile(affinity: &RunAffinity) -> Result<Terms, String> {
        let mut t = Terms::default();
        for (rules, anti) in [
            (affinity.run_affinity.as_ref(), false),
            (affinity.run_anti_affinity.as_ref(), true),
        ] {
            let Some(rules) = rules else { continue };
            for term in &rules.required_during_scheduling_ignored_during_execution {
                let sel = term_selector(term)?;
                if anti {
                    t.required_anti.push(sel);
                } else {
                    t.required.push(sel);
                }
            }
            for w in &rules.preferred_during_scheduling_ignored_during_execution {
                let sel = term_selector(&w.run_affinity_term)?;
                let weight = i64::from(w.weight);
                if anti {
                    t.preferred_anti.push((weight, sel));
                } else {
                    t.preferred.push((weight, sel));
                }
            }
        }
        Ok(t)
    }
}

/// [`Terms`] of a Run labelled `own` against the namespace's indexed
/// targets: the same filter and preferred score as [`Affinity`] built
/// from a scan of every target, read per pod from the targets on it.
pub struct Bound<'a> {
    terms: &'a Terms,
    targets: &'a Targets,
    /// Per required term: no target matches and the Run's own labels do,
    /// so it seeds the cohort and every pod passes.
    seeds: Vec<bool>,
    /// The narrowest required term that does not pass every pod: only
    /// pods holding a target it matches can pass the filter.
    narrowest: Option<usize>,
}

impl<'a> Bound<'a> {
    pub fn new(terms: &'a Terms, own: &BTreeMap<String, String>, targets: &'a Targets) -> Self {
        let seeds: Vec<bool> = terms
            .required
            .iter()
            .map(|sel| sel.matches(own) && !targets.any_matching(sel))
            .collect();
        let narrowest = terms
            .required
            .iter()
            .enumerate()
            .filter(|(i, _)| !seeds[*i])
            .min_by_key(|(_, sel)| targets.cost(sel))
            .map(|(i, _)| i);
        Bound {
            terms,
            targets,
            seeds,
            narrowest,
        }
    }

    /// The pods that can pass the required terms, when a required term
    /// narrows them (each once, in no order); `None` when any pod can.
    pub fn candidates(&self) -> Option<Vec<Arc<str>>> {
        let i = self.narrowest?;
        Some(self.targets.matching(&self.terms.required[i]))
    }

    /// Whether `pod` passes the required terms; the filter reason if not.
    pub fn filter(&self, pod: &str) -> Result<(), &'static str> {
        let on_pod = |sel: &Selector| self.targets.pod_matches(pod, sel);
        if self
            .terms
            .required
            .iter()
            .zip(&self.seeds)
            .any(|(sel, seeds)| !seeds && !on_pod(sel))
        {
            return Err(UNSATISFIED_AFFINITY);
        }
        if self.terms.required_anti.iter().any(on_pod) {
            return Err(UNSATISFIED_ANTI_AFFINITY);
        }
        Ok(())
    }

    /// The raw preferred score, as [`Affinity::preferred_score`].
    pub fn preferred_score(&self, pod: &str) -> i64 {
        let on_pod = |sel: &Selector| self.targets.pod_matches(pod, sel);
        let hit: i64 = self
            .terms
            .preferred
            .iter()
            .filter(|(_, sel)| on_pod(sel))
            .map(|(w, _)| w)
            .sum();
        let miss: i64 = self
            .terms
            .preferred_anti
            .iter()
            .filter(|(_, sel)| !on_pod(sel))
            .map(|(w, _)| w)
            .sum();
        hit + miss
    }
}

/// A Run with affinity placed over one runtime's pods.
#[derive(Debug, Clone)]
pub struct Placed<'c> {
    /// Pods that fit and pass the required terms, ranked, best first.
    pub ranked: Vec<Ranked<'c>>,
    /// Rejections over every pod, the affinity's included.
    pub counts: RejectionCounts,
    /// Pods that fit but the terms refuse, with the reason: every such
    /// pod, or when `narrowed`, those among the candidates.
    pub refused: Vec<(&'c str, &'static str)>,
    /// Candidates were narrowed by a required term: every fitting pod
    /// outside them is refused with [`UNSATISFIED_AFFINITY`].
    pub narrowed: bool,
    /// Pods the terms were checked on: the fitting candidates when
    /// `narrowed`, every fitting pod otherwise.
    pub examined: usize,
}

/// Filters and ranks every pod of `cols` for a request with affinity, as
/// [`rank_with`] over the feasible pods of a full scan would. When a required
/// term narrows the candidates to the pods holding a target it matches,
/// only those are evaluated; the capacity counts over all pods come from
/// the grouped decision, and every other fitting pod is counted refused.
pub fn place<'c>(
    bound: &Bound<'_>,
    cols: &'c Columns,
    request: &ResourceVec,
    has_unknown: bool,
    window: &Freshness,
) -> Placed<'c> {
    let (feasible, mut counts, narrowed): (Vec<(&'c str, Score)>, RejectionCounts, bool) =
        match bound.candidates() {
            Some(candidates) => {
                let (_, counts) = cols.best(request, has_unknown, window);
                let laid = cols.lay_out(request);
                let fit: Vec<(&'c str, Score)> = candidates
                    .iter()
                    .filter_map(|p| cols.position(p))
                    .filter(|&i| cols.verdict_at(i, &laid, has_unknown, window) == Verdict::Fits)
                    .map(|i| (&**cols.name(i), cols.score_at(i, &laid)))
                    .collect();
                let fitting = counts.total_pods
                    - counts.insufficient
                    - counts.not_declared
                    - counts.unavailable;
                let mut counts = counts;
                counts.affinity += fitting - fit.len();
                (fit, counts, true)
            }
            None => {
                let p = cols.plan(request, has_unknown, window, 0);
                let fit = p.feasible.into_iter().map(|(n, s)| (&**n, s)).collect();
                (fit, p.counts, false)
            }
        };
    let examined = feasible.len();
    let (ranked, refused) = rank_with(|p| bound.filter(p), |p| bound.preferred_score(p), feasible);
    for (_, why) in &refused {
        if *why == UNSATISFIED_AFFINITY {
            counts.affinity += 1;
        } else {
            counts.anti_affinity += 1;
        }
    }
    Placed {
        ranked,
        counts,
        refused,
        narrowed,
        examined,
    }
}

/// Admission: every term's topology key, selector and weight, with the
/// field path named. Empty when valid.
pub fn violations(affinity: &RunAffinity) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut term = |path: String, t: &RunAffinityTerm| {
        if t.topology_key != TOPOLOGY_RUNTIME_POD {
            out.push((
                format!("{path}.topologyKey"),
                format!(
                    "Unsupported value: {:?}: supported values: \"{TOPOLOGY_RUNTIME_POD}\"",
                    t.topology_key
                ),
            ));
        }
        match &t.label_selector {
            None => out.push((format!("{path}.labelSelector"), "Required value".into())),
            Some(s)
                if s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
                    && s.match_expressions.as_ref().is_none_or(Vec::is_empty) =>
            {
                out.push((
                    format!("{path}.labelSelector"),
                    "Invalid value: labelSelector must not be empty".into(),
                ));
            }
            Some(s) => {
                if let Err(e) = parse_selector(s) {
                    out.push((format!("{path}.labelSelector"), e));
                }
            }
        }
    };
    let mut weights = Vec::new();
    for (rules, name) in [
        (affinity.run_affinity.as_ref(), "runAffinity"),
        (affinity.run_anti_affinity.as_ref(), "runAntiAffinity"),
    ] {
        let Some(rules) = rules else { continue };
        let base = format!("spec.affinity.{name}");
        for (i, t) in rules
            .required_during_scheduling_ignored_during_execution
            .iter()
            .enumerate()
        {
            term(
                format!("{base}.requiredDuringSchedulingIgnoredDuringExecution[{i}]"),
                t,
            );
        }
        for (i, w) in rules
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .enumerate()
        {
            let p = format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
            if !(1..=100).contains(&w.weight) {
                weights.push((
                    format!("{p}.weight"),
                    format!("Invalid value: {}: must be between 1 and 100", w.weight),
                ));
            }
            term(format!("{p}.runAffinityTerm"), &w.run_affinity_term);
        }
        for (list, n) in [
            (
                rules
                    .required_during_scheduling_ignored_during_execution
                    .len(),
                "requiredDuringSchedulingIgnoredDuringExecution",
            ),
            (
                rules
                    .preferred_during_scheduling_ignored_during_execution
                    .len(),
                "preferredDuringSchedulingIgnoredDuringExecution",
            ),
        ] {
            if list > 32 {
                weights.push((
                    format!("{base}.{n}"),
                    format!("Too many: {list}: must have at most 32 items"),
                ));
            }
        }
    }
    out.extend(weights);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).into()).collect()),
        }
    }

    /// `metav1.LabelSelectorAsSelector` semantics, as apimachinery's own
    /// selector tests state them.
    #[test]
    fn selectors_match_as_apimachinery() {
        let sel = |ml: &[(&str, &str)], me: Vec<LabelSelectorRequirement>| LabelSelector {
            match_labels: (!ml.is_empty()).then(|| labels(ml)),
            match_expressions: (!me.is_empty()).then_some(me),
        };
        let x = labels(&[("a", "1"), ("b", "2")]);
        let none = labels(&[]);
        for (s, on, want) in [
            (sel(&[], vec![]), &x, true),
            (sel(&[], vec![]), &none, true),
            (sel(&[("a", "1")], vec![]), &x, true),
            (sel(&[("a", "2")], vec![]), &x, false),
            (sel(&[("a", "1"), ("c", "3")], vec![]), &x, false),
            (sel(&[], vec![expr("a", "In", &["1", "9"])]), &x, true),
            (sel(&[], vec![expr("a", "In", &["9"])]), &x, false),
            (sel(&[], vec![expr("c", "In", &["9"])]), &x, false),
            (sel(&[], vec![expr("a", "NotIn", &["9"])]), &x, true),
            (sel(&[], vec![expr("a", "NotIn", &["1"])]), &x, false),
            (sel(&[], vec![expr("c", "NotIn", &["1"])]), &x, true),
            (sel(&[], vec![expr("a", "Exists", &[])]), &x, true),
            (sel(&[], vec![expr("c", "Exists", &[])]), &x, false),
            (sel(&[], vec![expr("c", "DoesNotExist", &[])]), &x, true),
            (sel(&[], vec![expr("a", "DoesNotExist", &[])]), &x, false),
            (sel(&[("b", "2")], vec![expr("a", "In", &["1"])]), &x, true),
            (sel(&[("a", "")], vec![]), &labels(&[("a", "")]), true),
        ] {
            assert_eq!(
                parse_selector(&s).unwrap().matches(on),
                want,
                "{s:?} on {on:?}"
            );
        }
        for bad in [
            sel(&[], vec![expr("a", "In", &[])]),
            sel(&[], vec![expr("a", "NotIn", &[])]),
            sel(&[], vec![expr("a", "Exists", &["1"])]),
            sel(&[], vec![expr("a", "Gt", &["1"])]),
            sel(&[], vec![expr("", "Exists", &[])]),
            sel(&[("bad key", "1")], vec![]),
            sel(&[("a", "bad value!")], vec![]),
            sel(&[("-a", "1")], vec![]),
            sel(&[("Example.com/a", "1")], vec![]),
        ] {
            assert!(parse_selector(&bad).is_err(), "{bad:?}");
        }
        assert!(parse_selector(&sel(&[("example.com/a-b.c_d", "x.Y-z_1")], vec![])).is_ok());
    }

    /// Upstream `TestScoreAndRankPodsNormalizesAndBreaksTiesByPodName`:
    /// raw preferred scores 1, 2, 2 normalize to 50, 100, 100; equal totals
    /// go by name.
    #[test]
    fn normalization_and_name_tie_break() {
        use crate::model::ratio::{Ratio, RatioSum};
        let load = Score {
            max: Ratio::new(1, 2),
            sum: RatioSum::default(),
        };
        let mut a = Affinity::default();
        for (w, pods) in [
            (1, vec!["pod-a", "pod-b", "pod-c"]),
            (1, vec!["pod-b", "pod-c"]),
        ] {
            a.preferred.push(Rule {
                weight: w,
                pods: pods.into_iter().map(str::to_owned).collect(),
                seedable: false,
            });
        }
        let (ranked, rejected) = rank(&a, ["pod-c", "pod-a", "pod-b"].map(|p| (p, load.clone())));
        assert!(rejected.is_empty());
        let got: Vec<(&str, i64)> = ranked.iter().map(|r| (r.pod, r.affinity)).collect();
        assert_eq!(got, [("pod-b", 100), ("pod-c", 100), ("pod-a", 50)]);
        assert!(ranked.iter().all(|r| r.least_loaded == MAX_SCORE));
    }
}

/// Terms matched through the target index answer as terms built from a
/// scan of every target: the same filter and preferred score on every
/// pod, and no pod outside the candidates passes.
#[cfg(test)]
mod bound {
    use super::*;
    use crate::crd::{RunAffinityRules, WeightedRunAffinityTerm};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use proptest::prelude::*;

    const KEYS: [&str; 3] = ["a", "b", "c"];
    const VALUES: [&str; 3] = ["x", "y", "z"];
    const PODS: usize = 5;

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

    fn term() -> impl Strategy<Value = RunAffinityTerm> {
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
            .prop_map(|(exprs, ml)| RunAffinityTerm {
                label_selector: Some(LabelSelector {
                    match_expressions: Some(exprs),
                    match_labels: ml,
                }),
                topology_key: TOPOLOGY_RUNTIME_POD.to_owned(),
            })
    }

    fn rules() -> impl Strategy<Value = Option<RunAffinityRules>> {
        let weighted =
            (1..=100i32, term()).prop_map(|(weight, run_affinity_term)| WeightedRunAffinityTerm {
                weight,
                run_affinity_term,
            });
        proptest::option::of(
            (
                proptest::collection::vec(term(), 0..3),
                proptest::collection::vec(weighted, 0..3),
            )
                .prop_map(|(required, preferred)| RunAffinityRules {
                    required_during_scheduling_ignored_during_execution: required,
                    preferred_during_scheduling_ignored_during_execution: preferred,
                }),
        )
    }

    proptest! {
        #[test]
        fn bound_terms_answer_as_a_scan(
            targets in proptest::collection::vec((0..PODS, labels()), 0..12),
            own in labels(),
            run_affinity in rules(),
            run_anti_affinity in rules(),
        ) {
            let aff = RunAffinity { run_affinity, run_anti_affinity };
            let pods: Vec<String> = (0..=PODS).map(|p| format!("p-{p}")).collect();
            let scan: Vec<(&str, &BTreeMap<String, String>)> =
                targets.iter().map(|(p, l)| (pods[*p].as_str(), l)).collect();
            let built = Affinity::build(&aff, &own, scan.iter().copied()).unwrap();
            let mut index = Targets::default();
            for (i, (p, l)) in scan.iter().enumerate() {
                let (pod, labels) = (Arc::from(*p), Arc::new((*l).clone()));
                index.set(&format!("r-{i}"), i % 2 == 0, Some((&pod, &labels)));
            }
            let terms = Terms::compile(&aff).unwrap();
            let bound = Bound::new(&terms, &own, &index);
            let candidates = bound.candidates();
            for pod in &pods {
                prop_assert_eq!(bound.filter(pod), built.filter(pod), "{}", pod);
                prop_assert_eq!(bound.preferred_score(pod), built.preferred_score(pod), "{}", pod);
                if let Some(c) = &candidates
                    && built.filter(pod).is_ok()
                {
                    prop_assert!(c.iter().any(|p| **p == **pod), "{} passes outside {:?}", pod, c);
                }
            }
        }
    }
}
