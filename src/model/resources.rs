//! Resource names, resource vectors and effective Run requests.

use super::quantity::{self, MAX_AMOUNT, QuantityError};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use smallvec::SmallVec;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

/// The built-in resource every Run requests (at least 1) and every Runtime Pod has.
pub const RUNS: &str = "runs";

/// Integer amounts by resource name (the agent's ledger, node fit).
pub type Amounts = BTreeMap<String, u64>;

/// Interned resource name: an index into [`ResourceNames`].
pub type ResId = u32;

/// The id of [`RUNS`] in every [`ResourceNames`].
pub const RUNS_ID: ResId = 0;

/// Interns names as dense ids, each name kept once and shared. Ids are
/// stable until [`Interner::compact`] renumbers them (an owner whose names
/// churn frees the ones nothing uses any more).
#[derive(Debug, Clone, Default)]
pub struct Interner {
    by_name: HashMap<Arc<str>, u32>,
    names: Vec<Arc<str>>,
}

impl Interner {
    pub fn intern(&mut self, name: &str) -> u32 {
        if let Some(id) = self.by_name.get(name) {
            return *id;
        }
        let id = self.names.len() as u32;
        let name: Arc<str> = Arc::from(name);
        self.names.push(Arc::clone(&name));
        self.by_name.insert(name, id);
        id
    }

    pub fn lookup(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    /// Names interned.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Keeps the names whose ids `held` yields, renumbered densely in their
    /// old order, and frees the others; returns each old id's new id
    /// (`None`: freed). Every id held elsewhere must be renumbered through
    /// it ([`ResourceVec::remap`]); the order of ids is kept, so sorted
    /// vectors stay sorted.
    pub fn compact(&mut self, held: impl IntoIterator<Item = u32>) -> Vec<Option<u32>> {
        let mut live = vec![false; self.names.len()];
        for id in held {
            if let Some(l) = live.get_mut(id as usize) {
                *l = true;
            }
        }
        let old = std::mem::take(&mut self.names);
        self.by_name = HashMap::new();
        let mut map = Vec::with_capacity(old.len());
        for (name, live) in old.into_iter().zip(live) {
            if live {
                let new = self.names.len() as u32;
                self.by_name.insert(Arc::clone(&name), new);
                self.names.push(name);
                map.push(Some(new));
            } else {
                map.push(None);
            }
        }
        map
    }

    /// The name of `id` (`"?"` for an id never interned).
    pub fn name(&self, id: u32) -> &str {
        self.names.get(id as usize).map_or("?", |n| &**n)
    }

    /// The shared name of `id`.
    pub fn shared(&self, id: u32) -> Option<&Arc<str>> {
        self.names.get(id as usize)
    }
}

/// Interns resource names so the hot path compares integers, not strings;
/// [`RUNS`] is always [`RUNS_ID`].
#[derive(Debug, Clone)]
pub struct ResourceNames(Interner);

impl Default for ResourceNames {
    fn default() -> Self {
        let mut n = Self(Interner::default());
        n.intern(RUNS);
        n
    }
}

impl ResourceNames {
    pub fn intern(&mut self, name: &str) -> ResId {
        self.0.intern(name)
    }

    pub fn lookup(&self, name: &str) -> Option<ResId> {
        self.0.lookup(name)
    }

    /// Names interned.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// [`Interner::compact`], always keeping `runs`.
    pub fn compact(&mut self, held: impl IntoIterator<Item = ResId>) -> Vec<Option<ResId>> {
        self.0.compact(std::iter::once(RUNS_ID).chain(held))
    }

    pub fn name(&self, id: ResId) -> &str {
        self.0.name(id)
    }
}

/// A sparse vector of non-zero amounts, sorted by resource id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceVec(SmallVec<[(ResId, u64); 4]>);

impl ResourceVec {
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds from unsorted pairs; zero amounts dropped, duplicates summed (saturating).
    pub fn from_pairs(pairs: impl IntoIterator<Item = (ResId, u64)>) -> Self {
        let mut v = Self::new();
        for (id, amount) in pairs {
            v.add_one(id, amount);
        }
        v
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Renumbers ids through `map` (from [`ResourceNames::compact`], which
    /// keeps their order); amounts of freed ids are dropped. Gives back
    /// spare storage.
    pub fn remap(&mut self, map: &[Option<ResId>]) {
        self.0 = self
            .0
            .iter()
            .filter_map(|&(id, a)| Some((map.get(id as usize).copied().flatten()?, a)))
            .collect();
        self.0.shrink_to_fit();
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn get(&self, id: ResId) -> u64 {
        match self.0.binary_search_by_key(&id, |(i, _)| *i) {
            Ok(pos) => self.0[pos].1,
            Err(_) => 0,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (ResId, u64)> + '_ {
        self.0.iter().copied()
    }

    /// The entries, sorted by id.
    pub fn as_slice(&self) -> &[(ResId, u64)] {
        &self.0
    }

    /// Adds, saturating at [`MAX_AMOUNT`] (a saturated pod simply looks full).
    pub fn add_one(&mut self, id: ResId, amount: u64) {
        if amount == 0 {
            return;
        }
        match self.0.binary_search_by_key(&id, |(i, _)| *i) {
            Ok(pos) => self.0[pos].1 = self.0[pos].1.saturating_add(amount).min(MAX_AMOUNT),
            Err(pos) => self.0.insert(pos, (id, amount.min(MAX_AMOUNT))),
        }
    }

    /// Subtracts, saturating at zero; entries reaching zero are removed.
    pub fn sub_one(&mut self, id: ResId, amount: u64) {
        if let Ok(pos) = self.0.binary_search_by_key(&id, |(i, _)| *i) {
            let left = self.0[pos].1.saturating_sub(amount);
            if left == 0 {
                self.0.remove(pos);
            } else {
                self.0[pos].1 = left;
            }
        }
    }

    pub fn add(&mut self, other: &ResourceVec) {
        for (id, a) in other.iter() {
            self.add_one(id, a);
        }
    }

    pub fn sub(&mut self, other: &ResourceVec) {
        for (id, a) in other.iter() {
            self.sub_one(id, a);
        }
    }

    /// Renders as a name → integer-string map (the HTTP shape).
    pub fn to_named(&self, names: &ResourceNames) -> BTreeMap<String, String> {
        self.iter()
            .map(|(id, a)| (names.name(id).to_owned(), a.to_string()))
            .collect()
    }
}

/// One resource of one Runtime Pod: declared capacity, usage of active Runs
/// and reservations not yet observed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResourceAccount {
    pub id: ResId,
    pub capacity: u64,
    pub actual: u64,
    pub assumed: u64,
    /// `sum_den / capacity` (see [`PodResources::sum_den`]); 0 when unused.
    pub mult: u64,
}

impl ResourceAccount {
    fn is_zero(&self) -> bool {
        self.capacity == 0 && self.actual == 0 && self.assumed == 0
    }
}

/// Everything placement reads about one pod's resources, inline and sorted
/// by id, so a decision walks one small array per pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodResources(SmallVec<[ResourceAccount; 4]>, u128);

impl PodResources {
    pub fn as_slice(&self) -> &[ResourceAccount] {
        &self.0
    }

    /// The least common multiple of the declared capacities, so the sum of
    /// utilizations is `Σ (used + request) * mult / sum_den` with no
    /// per-decision gcd. 0 when it does not fit (callers add exactly instead).
    pub fn sum_den(&self) -> u128 {
        self.1
    }

    fn recompute_sum_den(&mut self) {
        let mut den: u128 = 1;
        for l in self.0.iter().filter(|l| l.capacity > 0) {
            let c = u128::from(l.capacity);
            let g = crate::model::ratio::gcd(den, c);
            match den.checked_mul(c / g) {
                Some(d) => den = d,
                None => {
                    den = 0;
                    break;
                }
            }
        }
        for l in self.0.iter_mut() {
            l.mult = match (den, l.capacity) {
                (0, _) | (_, 0) => 0,
                (d, c) => u64::try_from(d / u128::from(c)).unwrap_or(0),
            };
        }
        if self.0.iter().any(|l| l.capacity > 0 && l.mult == 0) {
            den = 0;
        }
        self.1 = den;
    }

    /// True when nothing is declared, used or reserved.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn entry(&mut self, id: ResId) -> &mut ResourceAccount {
        let pos = match self.0.binary_search_by_key(&id, |l| l.id) {
            Ok(pos) => pos,
            Err(pos) => {
                self.0.insert(
                    pos,
                    ResourceAccount {
                        id,
                        ..ResourceAccount::default()
                    },
                );
                pos
            }
        };
        &mut self.0[pos]
    }

    fn prune(&mut self) {
        self.0.retain(|l| !l.is_zero());
    }

    /// Replaces the declared capacity.
    pub fn set_capacity(&mut self, capacity: &ResourceVec) {
        for l in self.0.iter_mut() {
            l.capacity = 0;
        }
        for (id, c) in capacity.iter() {
            self.entry(id).capacity = c;
        }
        self.prune();
        self.recompute_sum_den();
    }

    /// Adds (saturating) to actual usage.
    pub fn add_actual(&mut self, v: &ResourceVec) {
        for (id, a) in v.iter() {
            let l = self.entry(id);
            l.actual = l.actual.saturating_add(a).min(MAX_AMOUNT);
        }
    }

    /// Subtracts (saturating at zero) from actual usage.
    pub fn sub_actual(&mut self, v: &ResourceVec) {
        for (id, a) in v.iter() {
            let l = self.entry(id);
            l.actual = l.actual.saturating_sub(a);
        }
        self.prune();
    }

    /// Adds (saturating) to assumed reservations.
    pub fn add_assumed(&mut self, v: &ResourceVec) {
        for (id, a) in v.iter() {
            let l = self.entry(id);
            l.assumed = l.assumed.saturating_add(a).min(MAX_AMOUNT);
        }
    }

    /// Subtracts (saturating at zero) from assumed reservations.
    pub fn sub_assumed(&mut self, v: &ResourceVec) {
        for (id, a) in v.iter() {
            let l = self.entry(id);
            l.assumed = l.assumed.saturating_sub(a);
        }
        self.prune();
    }

    /// Renumbers the ledgers' ids through `map` (from
    /// [`ResourceNames::compact`], which keeps their order); a ledger of a
    /// freed id is dropped (the sweep frees only ids no ledger holds).
    pub fn remap(&mut self, map: &[Option<ResId>]) {
        self.0
            .retain(|l| map.get(l.id as usize).copied().flatten().is_some());
        for l in self.0.iter_mut() {
            if let Some(Some(new)) = map.get(l.id as usize) {
                l.id = *new;
            }
        }
        self.0.shrink_to_fit();
    }

    pub fn capacity(&self) -> ResourceVec {
        ResourceVec::from_pairs(self.0.iter().map(|l| (l.id, l.capacity)))
    }

    pub fn actual(&self) -> ResourceVec {
        ResourceVec::from_pairs(self.0.iter().map(|l| (l.id, l.actual)))
    }

    pub fn assumed(&self) -> ResourceVec {
        ResourceVec::from_pairs(self.0.iter().map(|l| (l.id, l.assumed)))
    }

    /// No usage and no reservation counted here.
    #[cfg(test)]
    pub fn is_unused(&self) -> bool {
        self.0.iter().all(|l| l.actual == 0 && l.assumed == 0)
    }
}

/// A Run's effective request: non-zero integer amounts by resource name, with
/// `runs` always present (absent or zero means 1). Sorted by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requests(Vec<(String, u64)>);

impl Requests {
    /// The request of a Run that asks for nothing: `runs: 1`.
    #[cfg(test)]
    pub fn runs_only() -> Self {
        Requests(vec![(RUNS.to_owned(), 1)])
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.0.iter().map(|(n, a)| (n.as_str(), *a))
    }

    pub fn get(&self, name: &str) -> u64 {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| *a)
            .unwrap_or(0)
    }

    /// Interns every name (cache side, where new names may appear).
    pub fn intern(&self, names: &mut ResourceNames) -> ResourceVec {
        ResourceVec::from_pairs(self.0.iter().map(|(n, a)| (names.intern(n), *a)))
    }

    /// Resolves names without interning: names nobody declares come back in
    /// `unknown` (read side, which must not mutate the cache).
    pub fn resolve(&self, names: &ResourceNames) -> (ResourceVec, Vec<String>) {
        let mut known = ResourceVec::new();
        let mut unknown = Vec::new();
        for (n, a) in &self.0 {
            match names.lookup(n) {
                Some(id) => known.add_one(id, *a),
                None => unknown.push(n.clone()),
            }
        }
        (known, unknown)
    }

    pub fn to_named(&self) -> BTreeMap<String, String> {
        self.0
            .iter()
            .map(|(n, a)| (n.clone(), a.to_string()))
            .collect()
    }
}

/// An invalid entry in `spec.resources.requests`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("spec.resources.requests[{resource}]: Invalid value: {value:?}: {error}")]
    Quantity {
        resource: String,
        value: String,
        error: QuantityError,
    },
    #[error("spec.resources.requests[{resource}]: Invalid value: {resource:?}: {detail}")]
    Name { resource: String, detail: String },
}

impl RequestError {
    pub fn resource(&self) -> &str {
        match self {
            RequestError::Quantity { resource, .. } | RequestError::Name { resource, .. } => {
                resource
            }
        }
    }
}

/// The effective request of a Run (DESIGN section 3): every entry must be a
/// non-negative integer under a valid resource name; zero entries are
/// dropped; `runs` defaults to 1. The first invalid entry (by name) is the error.
pub fn effective_requests(
    requests: Option<&BTreeMap<String, Quantity>>,
) -> Result<Requests, RequestError> {
    let mut out: Vec<(String, u64)> = Vec::new();
    if let Some(reqs) = requests {
        for (name, q) in reqs {
            if let Err(detail) = validate_resource_name(name) {
                return Err(RequestError::Name {
                    resource: name.clone(),
                    detail,
                });
            }
            let amount = quantity::amount_of(q).map_err(|error| RequestError::Quantity {
                resource: name.clone(),
                value: q.0.clone(),
                error,
            })?;
            if amount > 0 {
                out.push((name.clone(), amount));
            }
        }
    }
    if !out.iter().any(|(n, _)| n == RUNS) {
        let pos = out.partition_point(|(n, _)| n.as_str() < RUNS);
        out.insert(pos, (RUNS.to_owned(), 1));
    }
    Ok(Requests(out))
}

/// Every invalid entry of a request list (admission reports all of them).
pub fn request_errors(requests: Option<&BTreeMap<String, Quantity>>) -> Vec<RequestError> {
    let mut errs = Vec::new();
    for (name, q) in requests.into_iter().flatten() {
        if let Err(detail) = validate_resource_name(name) {
            errs.push(RequestError::Name {
                resource: name.clone(),
                detail,
            });
            continue;
        }
        if let Err(error) = quantity::amount_of(q) {
            errs.push(RequestError::Quantity {
                resource: name.clone(),
                value: q.0.clone(),
                error,
            });
        }
    }
    errs
}

/// The request used for *accounting* a Run that is already active on a pod,
/// whatever its spec says: invalid entries cannot be refused any more, so
/// fractional amounts are rounded up and negative or malformed ones ignored.
/// This never under-counts a well-formed request.
pub fn accounted_requests(requests: Option<&BTreeMap<String, Quantity>>) -> Requests {
    let mut out: Vec<(String, u64)> = Vec::new();
    for (name, q) in requests.into_iter().flatten() {
        let amount = match quantity::parse(&q.0) {
            Ok(p) => match p.to_amount() {
                Ok(a) => a,
                Err(QuantityError::Fractional) => ceil_amount(&p),
                Err(QuantityError::TooLarge) => MAX_AMOUNT,
                Err(_) => 0,
            },
            Err(QuantityError::TooLarge) => MAX_AMOUNT,
            Err(_) => 0,
        };
        if amount > 0 {
            out.push((name.clone(), amount));
        }
    }
    if !out.iter().any(|(n, _)| n == RUNS) {
        let pos = out.partition_point(|(n, _)| n.as_str() < RUNS);
        out.insert(pos, (RUNS.to_owned(), 1));
    }
    Requests(out)
}

/// Rounds a positive fractional quantity up to the next integer.
fn ceil_amount(p: &quantity::ParsedQuantity) -> u64 {
    // value = mantissa * 1024^k / 10^n with n > 0.
    let n = p.exp10.unsigned_abs();
    let Some(den) = 10u128.checked_pow(n) else {
        return 1;
    };
    let shift = 10 * p.pow1024;
    let num = if shift == 0 {
        Some(p.mantissa)
    } else if shift < 128 && p.mantissa.leading_zeros() >= shift {
        Some(p.mantissa << shift)
    } else {
        None
    };
    match num {
        Some(num) => u64::try_from(num.div_ceil(den))
            .unwrap_or(MAX_AMOUNT)
            .min(MAX_AMOUNT),
        None => MAX_AMOUNT,
    }
}

/// Kubernetes qualified-name rules (`[prefix/]name`), as for resource names.
pub fn validate_resource_name(name: &str) -> Result<(), String> {
    let (prefix, local) = match name.split_once('/') {
        Some((p, l)) => (Some(p), l),
        None => (None, name),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Err("prefix part must be non-empty".into());
        }
        if !is_dns1123_subdomain(p) {
            return Err("prefix part must be a lowercase RFC 1123 subdomain".into());
        }
    }
    if local.is_empty() {
        return Err("name part must be non-empty".into());
    }
    if local.len() > 63 {
        return Err("name part must be no more than 63 characters".into());
    }
    let b = local.as_bytes();
    let alnum = |c: u8| c.is_ascii_alphanumeric();
    if !alnum(b[0])
        || !alnum(b[b.len() - 1])
        || !b
            .iter()
            .all(|&c| alnum(c) || c == b'-' || c == b'_' || c == b'.')
    {
        return Err("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into());
    }
    Ok(())
}

fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                && !b.iter().any(|c| c.is_ascii_uppercase())
        })
}

impl fmt::Display for Requests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (n, a)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{n}={a}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reqs(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect()
    }

    #[test]
    fn runs_defaults_to_one() {
        assert_eq!(effective_requests(None).unwrap(), Requests::runs_only());
        assert_eq!(
            effective_requests(Some(&reqs(&[]))).unwrap(),
            Requests::runs_only()
        );
        assert_eq!(
            effective_requests(Some(&reqs(&[("runs", "0")]))).unwrap(),
            Requests::runs_only()
        );
        let r = effective_requests(Some(&reqs(&[("runs", "3"), ("gpu", "1k")]))).unwrap();
        assert_eq!(
            r.iter().collect::<Vec<_>>(),
            vec![("gpu", 1000), ("runs", 3)]
        );
    }

    #[test]
    fn zero_entries_dropped() {
        let r = effective_requests(Some(&reqs(&[
            ("gpu", "0"),
            ("mem", "0Ki"),
            ("cpu", "1000m"),
        ])))
        .unwrap();
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![("cpu", 1), ("runs", 1)]);
    }

    #[test]
    fn invalid_entries_name_the_field() {
        for (name, value, needle) in [
            ("gpu", "1.5", "must be an integer"),
            ("cpu", "500m", "must be an integer"),
            ("gpu", "-1", "greater than or equal to 0"),
            ("gpu", "lots", "quantities must match"),
            ("gpu", "1e30", "less than or equal to"),
        ] {
            let e = effective_requests(Some(&reqs(&[(name, value), ("runs", "1")]))).unwrap_err();
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!(
                    "spec.resources.requests[{name}]: Invalid value: \"{value}\""
                )),
                "{msg}"
            );
            assert!(msg.contains(needle), "{msg}");
        }
        let e = effective_requests(Some(&reqs(&[("bad name", "1")]))).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("spec.resources.requests[bad name]"),
            "{e}"
        );
    }

    #[test]
    fn all_errors_listed() {
        let errs = request_errors(Some(&reqs(&[
            ("a", "-1"),
            ("b", "2"),
            ("c", "0.5"),
            ("-x", "1"),
        ])));
        let names: Vec<_> = errs.iter().map(|e| e.resource().to_owned()).collect();
        assert_eq!(names, vec!["-x", "a", "c"]);
    }

    #[test]
    fn accounting_never_undercounts() {
        let r = accounted_requests(Some(&reqs(&[
            ("gpu", "1.5"),
            ("bad", "-3"),
            ("mem", "x"),
            ("c", "1Ki"),
        ])));
        assert_eq!(
            r.iter().collect::<Vec<_>>(),
            vec![("c", 1024), ("gpu", 2), ("runs", 1)]
        );
        let r = accounted_requests(Some(&reqs(&[("cpu", "1m")])));
        assert_eq!(r.get("cpu"), 1);
    }

    #[test]
    fn resource_names() {
        for ok in ["runs", "gpu", "nvidia.com/gpu", "a_b.c-d", "x"] {
            assert!(validate_resource_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a b",
            "/a",
            "A_B.com/x",
            "a/",
            &"x".repeat(64),
            "a/b/c",
        ] {
            assert!(validate_resource_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pod_resources_keep_capacity_and_usage_apart() {
        let mut p = PodResources::default();
        p.set_capacity(&ResourceVec::from_pairs([(0, 4), (2, 1)]));
        p.add_actual(&ResourceVec::from_pairs([(0, 1), (5, 2)]));
        p.add_assumed(&ResourceVec::from_pairs([(0, 1)]));
        assert_eq!(p.capacity(), ResourceVec::from_pairs([(0, 4), (2, 1)]));
        assert_eq!(p.actual(), ResourceVec::from_pairs([(0, 1), (5, 2)]));
        assert_eq!(p.as_slice().len(), 3);
        p.set_capacity(&ResourceVec::new());
        p.sub_actual(&ResourceVec::from_pairs([(0, 1), (5, 2)]));
        assert!(!p.is_unused());
        p.sub_assumed(&ResourceVec::from_pairs([(0, 1)]));
        assert!(p.is_empty());
    }

    #[test]
    fn vec_ops() {
        let mut v = ResourceVec::from_pairs([(3, 1), (1, 2), (3, 4), (2, 0)]);
        assert_eq!(v.iter().collect::<Vec<_>>(), vec![(1, 2), (3, 5)]);
        v.sub_one(1, 5);
        assert_eq!(v.get(1), 0);
        assert_eq!(v.len(), 1);
        v.add_one(3, u64::MAX);
        assert_eq!(v.get(3), MAX_AMOUNT);
    }
}
