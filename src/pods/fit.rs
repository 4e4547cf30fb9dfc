//! Node fit: Kubernetes effective pod requests, and what allocated DRA
//! devices take from a node's allocatable resources.
//!
//! Amounts are exact integers: `cpu` in milli-cores (`MilliValue()`),
//! everything else in base units rounded up (`Value()`), as the upstream
//! scheduler counts them. A pod also takes one `pods` slot.

use crate::model::quantity::{self, ParsedQuantity, QuantityError};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus};
use k8s_openapi::api::resource::v1::NodeAllocatableResource;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;

/// Resource name → amount (cpu in milli-cores).
pub use crate::model::resources::Amounts;

/// The resource a pod slot is counted in.
pub const PODS: &str = "pods";

/// A quantity that cannot be counted, with the field it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {source}")]
pub struct FitError {
    pub field: String,
    pub source: QuantityError,
}

/// Decimal digits below the unit an amount of `resource` is counted in.
pub fn scale_of(resource: &str) -> u32 {
    if resource == "cpu" { 3 } else { 0 }
}

/// One quantity as an amount of `resource`.
pub fn amount(resource: &str, q: &Quantity) -> Result<u64, QuantityError> {
    quantity::parse(&q.0)?.to_scaled_ceil(scale_of(resource))
}

fn add_into(into: &mut Amounts, resource: &str, v: u64) {
    if v == 0 {
        return;
    }
    let e = into.entry(resource.to_owned()).or_insert(0);
    *e = e.saturating_add(v).min(quantity::MAX_AMOUNT);
}

fn add_amounts(into: &mut Amounts, other: &Amounts) {
    for (k, v) in other {
        add_into(into, k, *v);
    }
}

fn max_amounts(into: &mut Amounts, other: &Amounts) {
    for (k, v) in other {
        let e = into.entry(k.clone()).or_insert(0);
        *e = (*e).max(*v);
    }
}

/// Parses a resource list, naming the field on error.
pub fn parse_list(
    list: Option<&BTreeMap<String, Quantity>>,
    path: &str,
) -> Result<Amounts, FitError> {
    let mut out = Amounts::new();
    for (name, q) in list.into_iter().flatten() {
        let v = amount(name, q).map_err(|source| FitError {
            field: format!("{path}[{name}]"),
            source,
        })?;
        add_into(&mut out, name, v);
    }
    Ok(out)
}

fn container_requests(c: &Container, path: &str) -> Result<Amounts, FitError> {
    parse_list(
        c.resources.as_ref().and_then(|r| r.requests.as_ref()),
        &format!("{path}.resources.requests"),
    )
}

/// Resources that pod-level `spec.resources` may set.
fn pod_level_supported(resource: &str) -> bool {
    resource == "cpu" || resource == "memory" || resource.starts_with("hugepages-")
}

/// The resources a pod's pod-level `spec.resources.requests` names, each
/// with its headroom: the pod-level request minus the containers'
/// aggregate. DRA node-allocatable amounts of these resources lie inside the
/// pod-level budget (upstream `PodRequests` with the claims' status), so they
/// are not added on top; more than the headroom cannot run at all.
pub type PodLevel = BTreeMap<String, u64>;

/// Kubernetes effective pod requests (`resourcehelper.PodRequests`):
/// the larger of the containers' sum (plus restartable init containers,
/// i.e. sidecars, which keep running) and each init container's peak (an
/// init container runs alongside the sidecars started before it); then
/// pod-level `spec.resources.requests` replaces the aggregate for the
/// resources it names; then `spec.overhead` is added. Without `pods`.
pub fn pod_requests(spec: &PodSpec) -> Result<Amounts, FitError> {
    pod_demand(spec).map(|(r, _)| r)
}

/// [`pod_requests`], with the pod-level resources and their headroom for
/// DRA amounts ([`PodLevel`]).
pub fn pod_demand(spec: &PodSpec) -> Result<(Amounts, PodLevel), FitError> {
    demand(spec, &Amounts::new())
}

/// [`pod_demand`] as upstream's `PodRequests` with
/// `UseDRANodeAllocatableResourceClaimStatus` counts it: the amounts
/// `status.nodeAllocatableResourceClaimStatuses` records for claims the
/// spec does not name (so that no allocation of the pod's own accounts for
/// them, see [`status_dra`]) join the containers' aggregate, and pod-level
/// requests then replace that aggregate for the resources they name: a
/// claim's mapping never overrides them.
pub fn pod_demand_of(
    spec: &PodSpec,
    status: Option<&PodStatus>,
) -> Result<(Amounts, PodLevel), FitError> {
    demand(spec, &status_dra(spec, status)?)
}

/// What `status.nodeAllocatableResourceClaimStatuses` records for claims
/// that are not among the pod's own (`spec.resourceClaims`, resolved as
/// [`pod_claims`] does): each claim's mapping once, its per-pod overhead
/// once and its per-container overhead for every container it lists. The
/// pod's own claims are counted from their current allocations instead
/// (the DRA plugin recomputes the status, as upstream's does).
pub fn status_dra(spec: &PodSpec, status: Option<&PodStatus>) -> Result<Amounts, FitError> {
    let mut out = Amounts::new();
    let Some(entries) = status.and_then(|s| s.node_allocatable_resource_claim_statuses.as_ref())
    else {
        return Ok(out);
    };
    let own = pod_claims(spec, status);
    for (i, e) in entries.iter().enumerate() {
        if own.iter().any(|c| c.claim == e.resource_claim_name) {
            continue;
        }
        let at = |field: String| move |source| FitError { field, source };
        let base = format!("status.nodeAllocatableResourceClaimStatuses[{i}]");
        for (j, m) in e.mapping.iter().flatten().enumerate() {
            let v = amount(&m.name, &m.quantity).map_err(at(format!("{base}.mapping[{j}]")))?;
            add_into(&mut out, &m.name, v);
        }
        let containers = e.containers.as_ref().map_or(0, Vec::len) as u64;
        for (j, o) in e.overhead.iter().flatten().enumerate() {
            let field = format!("{base}.overhead[{j}]");
            if let Some(q) = &o.per_pod {
                let v = amount(&o.name, q).map_err(at(format!("{field}.perPod")))?;
                add_into(&mut out, &o.name, v);
            }
            if let Some(q) = &o.per_container {
                let v = amount(&o.name, q).map_err(at(format!("{field}.perContainer")))?;
                add_into(&mut out, &o.name, v.saturating_mul(containers));
            }
        }
    }
    Ok(out)
}

/// The pod's demand with `dra` (amounts recorded in its status) added to
/// the containers' aggregate before pod-level requests replace it.
fn demand(spec: &PodSpec, dra: &Amounts) -> Result<(Amounts, PodLevel), FitError> {
    let mut reqs = Amounts::new();
    for (i, c) in spec.containers.iter().enumerate() {
        add_amounts(
            &mut reqs,
            &container_requests(c, &format!("spec.containers[{i}]"))?,
        );
    }
    let mut sidecars = Amounts::new();
    let mut init_peak = Amounts::new();
    // An init container's peak is its own requests plus the sidecars
    // started before it. Only its own resources can raise the peak above the
    // final sum: for any other resource the peak is a part of the sidecars'
    // total, which the sum already holds. So each init container costs its
    // own entries, not the sidecars' (no copy of them per init container).
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let own = container_requests(c, &format!("spec.initContainers[{i}]"))?;
        if c.restart_policy.as_deref() == Some("Always") {
            add_amounts(&mut reqs, &own);
            add_amounts(&mut sidecars, &own);
        } else {
            for (k, v) in own {
                let with = v
                    .saturating_add(sidecars.get(&k).copied().unwrap_or(0))
                    .min(quantity::MAX_AMOUNT);
                let e = init_peak.entry(k).or_insert(0);
                *e = (*e).max(with);
            }
        }
    }
    max_amounts(&mut reqs, &init_peak);
    // The headroom for the pod's own claims is what the containers leave:
    // amounts recorded for other claims are not checked against it.
    add_amounts(&mut reqs, dra);
    let mut level = PodLevel::new();
    if let Some(pod_level) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        let pod_level = parse_list(Some(pod_level), "spec.resources.requests")?;
        for (k, v) in pod_level {
            if pod_level_supported(&k) {
                let total = reqs.get(&k).copied().unwrap_or(0);
                let aggregate = total.saturating_sub(dra.get(&k).copied().unwrap_or(0));
                level.insert(k.clone(), v.saturating_sub(aggregate));
                reqs.insert(k, v);
            }
        }
    }
    add_amounts(
        &mut reqs,
        &parse_list(spec.overhead.as_ref(), "spec.overhead")?,
    );
    reqs.retain(|_, v| *v > 0);
    Ok((reqs, level))
}

/// Why a pod's DRA amounts do not fit its own pod-level budget (upstream's
/// `validatePodLevelResourcesCoverDRA`): no node can help.
pub fn pod_level_short(resource: &str) -> String {
    format!(
        "pod level request for {resource} is insufficient to cover the aggregated container and node-allocatable DRA requests"
    )
}

/// A pod's requests plus what its claims take on a node (`dra`): added on
/// top for every resource the pod-level requests do not name, inside the
/// pod-level budget for those they name. `Err`: the DRA amount of a
/// pod-level resource exceeds its headroom ([`pod_level_short`]).
pub fn with_dra(requests: &Amounts, level: &PodLevel, dra: &Amounts) -> Result<Amounts, String> {
    let mut out = requests.clone();
    for (k, v) in dra {
        match level.get(k) {
            Some(headroom) if *v > *headroom => return Err(pod_level_short(k)),
            Some(_) => {}
            None => add_into(&mut out, k, *v),
        }
    }
    Ok(out)
}

/// Whether a node resource can be a `nodeAllocatableResources` target:
/// a resource of `status.allocatable` that is not an extended resource
/// (`cpu`, `memory`, `ephemeral-storage`, `hugepages-*`). Other names are
/// ignored, as upstream's DRA node fit checks only these.
pub fn node_allocatable_target(resource: &str) -> bool {
    matches!(resource, "cpu" | "memory" | "ephemeral-storage") || resource.starts_with("hugepages-")
}

/// Node allocatable (`status.allocatable`, else `status.capacity`).
/// Entries that do not parse are left out (the node offers none of them).
pub fn node_allocatable(status: Option<&k8s_openapi::api::core::v1::NodeStatus>) -> Amounts {
    let list = status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()));
    let mut out = Amounts::new();
    for (name, q) in list.into_iter().flatten() {
        if let Ok(v) = amount(name, q) {
            add_into(&mut out, name, v);
        }
    }
    out
}

// === DRA node-allocatable consumption ===

/// The nodes a published device is available on, from its ResourceSlice
/// (`spec.nodeName`, `spec.nodeSelector`, `spec.allNodes`) or, with
/// `spec.perDeviceNodeSelection`, from the device's own fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Reach {
    /// One node by name.
    Node(String),
    /// The nodes a NodeSelector matches.
    Selector(std::sync::Arc<crate::pods::selector::NodeRule>),
    /// Every node.
    All,
    /// No node (a slice that names none of the above).
    #[default]
    Nowhere,
}

impl Reach {
    /// Whether the device takes from the node of this name and labels.
    pub fn matches(&self, node: &str, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Reach::Node(n) => n == node,
            Reach::Selector(rule) => rule.matches(node, labels),
            Reach::All => true,
            Reach::Nowhere => false,
        }
    }

    /// The one node of a node-local device.
    pub fn node(&self) -> Option<&str> {
        match self {
            Reach::Node(n) => Some(n),
            _ => None,
        }
    }
}

/// What the cache knows of one device published in a ResourceSlice.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceInfo {
    /// The nodes it is available on.
    pub reach: Reach,
    /// `spec.devices[].capacity[*].value`.
    pub capacity: BTreeMap<String, Quantity>,
    /// `spec.devices[].nodeAllocatableResources`, valid targets only
    /// ([`node_allocatable_target`]).
    pub node_allocatable: BTreeMap<String, NodeAllocatableResource>,
}

impl DeviceInfo {
    /// Whether the device maps a node resource (`mapping`): a claim
    /// allocated such a device cannot be shared between pods.
    pub fn mapped(&self) -> bool {
        self.node_allocatable.values().any(|n| n.mapping.is_some())
    }
}

/// One allocated device of a claim (`status.allocation.devices.results[]`).
#[derive(Debug, Clone, Copy)]
pub struct AllocatedDevice<'a> {
    /// `consumedCapacity` of the result, when the device is shared by capacity.
    pub consumed: Option<&'a BTreeMap<String, Quantity>>,
    pub device: &'a DeviceInfo,
}

fn parsed(q: Option<&Quantity>, field: &str) -> Result<Option<ParsedQuantity>, FitError> {
    q.map(|q| {
        quantity::parse(&q.0).map_err(|source| FitError {
            field: field.to_owned(),
            source,
        })
    })
    .transpose()
}

fn scaled(resource: &str, q: &ParsedQuantity, field: &str) -> Result<u64, FitError> {
    q.to_scaled_ceil(scale_of(resource))
        .map_err(|source| FitError {
            field: field.to_owned(),
            source,
        })
}

/// The `mapping` part of a claim's devices: counted once per claim on the
/// node, however many pods share it. Per device and resource: with
/// `capacityKey`, `consumedCapacity[capacityKey]` (the device's whole
/// capacity of that key when the result records no consumption) times
/// `capacityMultiplier` (default 1); otherwise one device times
/// `deviceMultiplier` (default 1). Devices add up, so a claim of `n`
/// devices counts `n * deviceMultiplier`.
pub fn claim_mapping(devices: &[AllocatedDevice<'_>]) -> Result<Amounts, FitError> {
    let one = ParsedQuantity {
        negative: false,
        mantissa: 1,
        exp10: 0,
        pow1024: 0,
    };
    let mut out = Amounts::new();
    for d in devices {
        for (res, nar) in &d.device.node_allocatable {
            let Some(m) = nar
                .mapping
                .as_ref()
                .filter(|_| node_allocatable_target(res))
            else {
                continue;
            };
            let field = format!("nodeAllocatableResources[{res}].mapping");
            let value = match &m.capacity_key {
                Some(key) => {
                    let base = d
                        .consumed
                        .and_then(|c| c.get(key))
                        .or_else(|| d.device.capacity.get(key));
                    let Some(base) = parsed(base, &format!("consumedCapacity[{key}]"))? else {
                        continue;
                    };
                    let mult = parsed(
                        m.capacity_multiplier.as_ref(),
                        &format!("{field}.capacityMultiplier"),
                    )?
                    .unwrap_or(one);
                    base.checked_mul(&mult).map_err(|source| FitError {
                        field: field.clone(),
                        source,
                    })?
                }
                None => parsed(
                    m.device_multiplier.as_ref(),
                    &format!("{field}.deviceMultiplier"),
                )?
                .unwrap_or(one),
            };
            add_into(&mut out, res, scaled(res, &value, &field)?);
        }
    }
    Ok(out)
}

/// The `overhead` part of a claim's devices for one pod that references
/// the claim from `refs` containers: `perPod + perContainer * refs` per
/// device, counted for every pod referencing the claim.
pub fn claim_overhead(devices: &[AllocatedDevice<'_>], refs: u64) -> Result<Amounts, FitError> {
    let mut out = Amounts::new();
    let refs_q = ParsedQuantity {
        negative: false,
        mantissa: u128::from(refs),
        exp10: 0,
        pow1024: 0,
    };
    for d in devices {
        for (res, nar) in &d.device.node_allocatable {
            let Some(o) = nar
                .overhead
                .as_ref()
                .filter(|_| node_allocatable_target(res))
            else {
                continue;
            };
            let field = format!("nodeAllocatableResources[{res}].overhead");
            if let Some(p) = parsed(o.per_pod.as_ref(), &format!("{field}.perPod"))? {
                add_into(&mut out, res, scaled(res, &p, &field)?);
            }
            if let Some(c) = parsed(o.per_container.as_ref(), &format!("{field}.perContainer"))? {
                let total = c.checked_mul(&refs_q).map_err(|source| FitError {
                    field: field.clone(),
                    source,
                })?;
                add_into(&mut out, res, scaled(res, &total, &field)?);
            }
        }
    }
    Ok(out)
}

/// A pod's reference to a ResourceClaim in its namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClaimRef {
    /// The ResourceClaim's name.
    pub claim: String,
    /// How many containers (and init containers) use it.
    pub refs: u64,
}

/// The ResourceClaims a pod uses: `spec.resourceClaims[]` by name, or the
/// claim generated from a template (`status.resourceClaimStatuses`), with
/// the number of containers that list it in `resources.claims`.
pub fn pod_claims(spec: &PodSpec, status: Option<&PodStatus>) -> Vec<ClaimRef> {
    let mut out = Vec::new();
    for prc in spec.resource_claims.iter().flatten() {
        let claim = match &prc.resource_claim_name {
            Some(n) => Some(n.clone()),
            None => status
                .and_then(|s| s.resource_claim_statuses.as_ref())
                .and_then(|st| st.iter().find(|s| s.name == prc.name))
                .and_then(|s| s.resource_claim_name.clone()),
        };
        let Some(claim) = claim else { continue };
        out.push(ClaimRef {
            claim,
            refs: claim_refs(spec, &prc.name),
        });
    }
    out
}

/// How many containers (and init containers) list the pod claim `name` in
/// `resources.claims`.
pub fn claim_refs(spec: &PodSpec, name: &str) -> u64 {
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .filter(|c| {
            c.resources
                .as_ref()
                .and_then(|r| r.claims.as_ref())
                .is_some_and(|cl| cl.iter().any(|x| x.name == name))
        })
        .count() as u64
}

/// A pod as node accounting sees it.
#[derive(Debug, Clone, Copy)]
pub struct PodLoad<'a> {
    pub requests: &'a Amounts,
    /// Pod-level resources: their DRA amounts lie inside `requests`.
    pub level: &'a PodLevel,
    pub claims: &'a [ClaimRef],
}

/// Everything the pods on one node take: their effective requests, one
/// `pods` slot each, the overhead of every claim each pod references, and
/// the mapping of every distinct claim once (shared claims count once per
/// node). A pod's DRA amounts of the resources its pod-level requests name
/// lie inside those requests and are not added. `devices` resolves a claim
/// name to its allocated devices (`None` while unallocated). Claims whose
/// quantities do not parse count nothing and are reported in the second
/// value.
pub fn node_usage<'a, F>(pods: &[PodLoad<'_>], mut devices: F) -> (Amounts, Vec<FitError>)
where
    F: FnMut(&str) -> Option<Vec<AllocatedDevice<'a>>>,
{
    let mut used = Amounts::new();
    let mut errors = Vec::new();
    let mut mapped = std::collections::BTreeSet::new();
    for p in pods {
        add_amounts(&mut used, p.requests);
        add_into(&mut used, PODS, 1);
        let mut dra = Amounts::new();
        for c in p.claims {
            let Some(devs) = devices(&c.claim) else {
                continue;
            };
            match claim_overhead(&devs, c.refs) {
                Ok(o) => add_amounts(&mut dra, &o),
                Err(e) => errors.push(e),
            }
            if mapped.insert(c.claim.clone()) {
                match claim_mapping(&devs) {
                    Ok(m) => add_amounts(&mut dra, &m),
                    Err(e) => errors.push(e),
                }
            }
        }
        dra.retain(|k, _| !p.level.contains_key(k));
        add_amounts(&mut used, &dra);
    }
    (used, errors)
}

/// Why a pod does not fit a node, in upstream's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insufficient {
    pub resource: String,
    /// The request exceeds the node's whole allocatable: removing pods
    /// (preemption) cannot help.
    pub unresolvable: bool,
}

impl std::fmt::Display for Insufficient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.resource == PODS {
            f.write_str("Too many pods")
        } else {
            write!(f, "Insufficient {}", self.resource)
        }
    }
}

/// The pure fit check: every requested resource (plus one pod slot) fits
/// in `allocatable - used`. All shortfalls, in name order.
pub fn fits(request: &Amounts, allocatable: &Amounts, used: &Amounts) -> Vec<Insufficient> {
    let amount = |m: &Amounts, k: &str| m.get(k).copied().unwrap_or(0);
    shortfalls(
        request
            .iter()
            .filter(|(k, _)| k.as_str() != PODS)
            .map(|(k, v)| (k.as_str(), *v))
            .chain(std::iter::once((PODS, 1u64)))
            .map(|(k, want)| (k, want, amount(allocatable, k), amount(used, k))),
    )
}

/// The fit rule over resolved terms `(resource, wanted, allocatable, used)`:
/// a resource is short when `used + wanted > allocatable`, and the shortfall
/// is unresolvable (preemption cannot help) when `wanted > allocatable`.
/// Callers resolve the terms however they index nodes; the rule is here only.
pub fn shortfalls<'a>(
    terms: impl IntoIterator<Item = (&'a str, u64, u64, u64)>,
) -> Vec<Insufficient> {
    let mut out: Vec<Insufficient> = terms
        .into_iter()
        .filter(|&(_, want, alloc, used)| want > 0 && used.saturating_add(want) > alloc)
        .map(|(name, want, alloc, _)| Insufficient {
            resource: name.to_owned(),
            unresolvable: want > alloc,
        })
        .collect();
    out.sort_by(|a, b| a.resource.cmp(&b.resource));
    out
}

/// The scheduler-style message for shortfalls: `Insufficient cpu, Too many pods`.
pub fn describe(short: &[Insufficient]) -> String {
    use std::fmt::Write as _;
    let mut m = String::new();
    for (i, s) in short.iter().enumerate() {
        if i > 0 {
            m.push_str(", ");
        }
        let _ = write!(m, "{s}");
    }
    m
}
