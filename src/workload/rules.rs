//! The validation rules themselves, written once over small views so that the
//! tree builder ([`crate::workload::Builder::validate`]) and the object
//! validators used by admission ([`crate::workload::validate_workload`] and
//! friends) cannot disagree.

use std::collections::BTreeMap;

use serde_json::Value;

use super::field::{FieldError, child, index};

/// At most this many templates (or child items) per list.
pub const MAX_TEMPLATES: usize = 8;
/// At most this many levels of templates (a root template is level 1).
pub const MAX_DEPTH: usize = 4;
/// At most this many resource claims per group.
pub const MAX_RESOURCE_CLAIMS: usize = 4;
/// At most this many topology constraints per group.
pub const MAX_TOPOLOGY_CONSTRAINTS: usize = 1;
/// Supported `preemptionPolicy` values.
pub const PREEMPTION_POLICIES: &[&str] = &["Never", "PreemptLowerPriority"];

const DNS_LABEL_MAX: usize = 63;
const DNS_SUBDOMAIN_MAX: usize = 253;

/// Errors collected by one validation pass.
pub type Errors = Vec<FieldError>;

// === names ===

fn is_label_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'
}

/// RFC 1123 label: lowercase alphanumerics and '-', alphanumeric at both ends.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= DNS_LABEL_MAX
        && s.chars().all(is_label_char)
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= DNS_SUBDOMAIN_MAX && s.split('.').all(is_dns_label)
}

/// Kubernetes qualified name (label key): optional DNS subdomain prefix and
/// `/`, then a name of at most 63 characters of `[A-Za-z0-9_.-]`,
/// alphanumeric at both ends.
pub fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if prefix.is_some_and(|p| !is_dns_subdomain(p)) {
        return false;
    }
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    !name.is_empty()
        && name.len() <= DNS_LABEL_MAX
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && ends_ok(name.chars().next())
        && ends_ok(name.chars().last())
}

const DNS_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
     and must start and end with an alphanumeric character (e.g. 'my-name', or '123-abc')";
const DNS_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
     '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')";
const QUALIFIED_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start \
     and end with an alphanumeric character, with an optional DNS subdomain prefix and '/' \
     (e.g. 'topology.kubernetes.io/zone')";

/// A required DNS label.
pub fn check_dns_label(value: &str, path: &str, errs: &mut Errors) {
    if value.is_empty() {
        errs.push(FieldError::required(path, ""));
    } else if !is_dns_label(value) {
        errs.push(FieldError::invalid(path, value, DNS_LABEL_MSG));
    }
}

/// A required DNS subdomain.
pub fn check_dns_subdomain(value: &str, path: &str, errs: &mut Errors) {
    if value.is_empty() {
        errs.push(FieldError::required(path, ""));
    } else if !is_dns_subdomain(value) {
        errs.push(FieldError::invalid(path, value, DNS_SUBDOMAIN_MSG));
    }
}

// === unions ===

/// Exactly one of the named members is set.
pub fn check_exactly_one(members: &[(&str, bool)], path: &str, errs: &mut Errors) {
    let set: Vec<&str> = members
        .iter()
        .filter(|(_, on)| *on)
        .map(|(n, _)| *n)
        .collect();
    if set.len() == 1 {
        return;
    }
    let names: Vec<String> = members.iter().map(|(n, _)| format!("`{n}`")).collect();
    let detail = format!("must specify exactly one of: {}", names.join(", "));
    if set.is_empty() {
        errs.push(FieldError::required(path, detail));
    } else {
        errs.push(FieldError::invalid(path, Value::from(set), detail));
    }
}

// === scheduling policy ===

/// The scheduling policy variants.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "camelCase")]
pub enum PolicyOption {
    /// `basic`: pod-by-pod (or group-by-group) scheduling.
    Basic,
    /// `gang`: all-or-nothing scheduling.
    Gang,
}

impl PolicyOption {
    /// The field name of the variant.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Basic => "basic",
            Self::Gang => "gang",
        }
    }
}

/// The disruption mode variants.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "camelCase")]
pub enum DisruptionModeOption {
    /// `single`: members may be disrupted one by one.
    Single,
    /// `all`: members may only be disrupted together.
    All,
}

impl DisruptionModeOption {
    /// The field name of the variant.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::All => "all",
        }
    }
}

/// A normalized scheduling policy block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyView {
    /// `basic` is set.
    pub basic: bool,
    /// `gang` is set; its minimum (`minCount` or `minGroupCount`), if given.
    pub gang: Option<Option<i32>>,
}

impl PolicyView {
    /// The variant, when exactly one is set.
    pub fn option(&self) -> Option<PolicyOption> {
        match (self.basic, self.gang.is_some()) {
            (true, false) => Some(PolicyOption::Basic),
            (false, true) => Some(PolicyOption::Gang),
            _ => None,
        }
    }
}

/// Structural rules of a policy block: exactly one variant, the gang minimum
/// (field `min_field`, `minCount` or `minGroupCount`) at least 1 when given.
pub fn check_policy(view: PolicyView, min_field: &str, path: &str, errs: &mut Errors) {
    check_exactly_one(
        &[("basic", view.basic), ("gang", view.gang.is_some())],
        path,
        errs,
    );
    if let Some(Some(min)) = view.gang {
        check_min_at_least_one(min, &child(&child(path, "gang"), min_field), errs);
    }
}

/// `minCount` / `minGroupCount` must be positive.
pub fn check_min_at_least_one(value: i32, path: &str, errs: &mut Errors) {
    if value < 1 {
        errs.push(FieldError::invalid(
            path,
            value,
            "must be greater than or equal to 1",
        ));
    }
}

/// Controller allow-list of policies (default deny).
pub fn check_policy_allowed(
    option: PolicyOption,
    allowed: &[PolicyOption],
    path: &str,
    errs: &mut Errors,
) {
    if !allowed.contains(&option) {
        let names: Vec<&str> = allowed.iter().map(|o| o.as_str()).collect();
        errs.push(FieldError::not_supported(path, option.as_str(), &names));
    }
}

// === disruption mode ===

/// A normalized disruption mode block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DisruptionView {
    /// `all` is set.
    pub all: bool,
    /// `single` is set.
    pub single: bool,
}

impl DisruptionView {
    /// The variant, when exactly one is set.
    pub fn option(&self) -> Option<DisruptionModeOption> {
        match (self.single, self.all) {
            (true, false) => Some(DisruptionModeOption::Single),
            (false, true) => Some(DisruptionModeOption::All),
            _ => None,
        }
    }
}

/// Exactly one disruption mode.
pub fn check_disruption(view: DisruptionView, path: &str, errs: &mut Errors) {
    check_exactly_one(&[("single", view.single), ("all", view.all)], path, errs);
}

/// Controller allow-list of disruption modes (default deny).
pub fn check_disruption_allowed(
    option: DisruptionModeOption,
    allowed: &[DisruptionModeOption],
    path: &str,
    errs: &mut Errors,
) {
    if !allowed.contains(&option) {
        let names: Vec<&str> = allowed.iter().map(|o| o.as_str()).collect();
        errs.push(FieldError::not_supported(path, option.as_str(), &names));
    }
}

/// Disruption mode `all` makes no sense with the `basic` policy: a group
/// scheduled member by member has no atomic unit to disrupt.
pub fn check_all_not_with_basic(
    policy: Option<PolicyOption>,
    mode: Option<DisruptionModeOption>,
    path: &str,
    errs: &mut Errors,
) {
    if policy == Some(PolicyOption::Basic) && mode == Some(DisruptionModeOption::All) {
        errs.push(FieldError::invalid(
            child(path, "all"),
            "all",
            "disruption mode all is not allowed with the basic scheduling policy",
        ));
    }
}

// === constraints ===

/// At most one topology constraint, each with a valid label key.
/// `path` is the `schedulingConstraints` block.
pub fn check_topology<'a>(keys: impl IntoIterator<Item = &'a str>, path: &str, errs: &mut Errors) {
    let topo = child(path, "topology");
    let keys: Vec<&str> = keys.into_iter().collect();
    if keys.len() > MAX_TOPOLOGY_CONSTRAINTS {
        errs.push(FieldError::too_many(
            &topo,
            keys.len(),
            MAX_TOPOLOGY_CONSTRAINTS,
        ));
    }
    for (i, key) in keys.iter().enumerate() {
        let p = child(&index(&topo, i), "key");
        if key.is_empty() {
            errs.push(FieldError::required(p, ""));
        } else if !is_qualified_name(key) {
            errs.push(FieldError::invalid(p, *key, QUALIFIED_NAME_MSG));
        }
    }
}

// === resource claims ===

/// A normalized resource claim entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClaimView<'a> {
    /// `name`.
    pub name: &'a str,
    /// `resourceClaimName`.
    pub claim: Option<&'a str>,
    /// `resourceClaimTemplateName`.
    pub template: Option<&'a str>,
}

/// At most four claims, unique DNS-label names, each naming exactly one of a
/// claim or a template, by DNS subdomain. `path` is the list.
pub fn check_claims(claims: &[ClaimView<'_>], path: &str, errs: &mut Errors) {
    if claims.len() > MAX_RESOURCE_CLAIMS {
        errs.push(FieldError::too_many(
            path,
            claims.len(),
            MAX_RESOURCE_CLAIMS,
        ));
    }
    let mut seen = BTreeMap::new();
    for (i, c) in claims.iter().enumerate() {
        let p = index(path, i);
        let name_path = child(&p, "name");
        check_dns_label(c.name, &name_path, errs);
        if !c.name.is_empty() && seen.insert(c.name, i).is_some() {
            errs.push(FieldError::duplicate(&name_path, c.name));
        }
        check_exactly_one(
            &[
                ("resourceClaimName", c.claim.is_some()),
                ("resourceClaimTemplateName", c.template.is_some()),
            ],
            &p,
            errs,
        );
        if let Some(v) = c.claim {
            check_dns_subdomain(v, &child(&p, "resourceClaimName"), errs);
        }
        if let Some(v) = c.template {
            check_dns_subdomain(v, &child(&p, "resourceClaimTemplateName"), errs);
        }
    }
}

// === priority ===

/// The priority configuration of one group or template.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PriorityView<'a> {
    /// `priorityClassName`.
    pub class_name: Option<&'a str>,
    /// `priority`.
    pub priority: Option<i32>,
    /// `preemptionPolicy`.
    pub preemption_policy: Option<&'a str>,
}

/// Field formats of the priority configuration. `paths` gives the path of
/// `priorityClassName` and `preemptionPolicy`.
pub fn check_priority(
    view: PriorityView<'_>,
    class_path: &str,
    preemption_path: &str,
    errs: &mut Errors,
) {
    if let Some(name) = view.class_name {
        check_dns_subdomain(name, class_path, errs);
    }
    if let Some(policy) = view.preemption_policy
        && !PREEMPTION_POLICIES.contains(&policy)
    {
        errs.push(FieldError::not_supported(
            preemption_path,
            policy,
            PREEMPTION_POLICIES,
        ));
    }
}

/// Where one template's priority configuration lives.
#[derive(Clone, Debug)]
pub struct PriorityEntry<'a> {
    /// The configuration.
    pub view: PriorityView<'a>,
    /// Path of `priorityClassName`.
    pub class_path: String,
    /// Path of `priority`.
    pub priority_path: String,
    /// Path of `preemptionPolicy`.
    pub preemption_path: String,
}

/// One priority configuration per Workload: every template carries the same
/// `priorityClassName`, `priority` and `preemptionPolicy` (set or unset alike)
/// as the first one.
pub fn check_one_priority(entries: &[PriorityEntry<'_>], errs: &mut Errors) {
    let Some(first) = entries.first() else { return };
    for e in &entries[1..] {
        if e.view.class_name != first.view.class_name {
            errs.push(FieldError::invalid(
                &e.class_path,
                opt_value(e.view.class_name),
                format!(
                    "must be the same in every template of the Workload (as {})",
                    first.class_path
                ),
            ));
        }
        if e.view.priority != first.view.priority {
            errs.push(FieldError::invalid(
                &e.priority_path,
                e.view.priority.map_or(Value::Null, Value::from),
                format!(
                    "must be the same in every template of the Workload (as {})",
                    first.priority_path
                ),
            ));
        }
        if e.view.preemption_policy != first.view.preemption_policy {
            errs.push(FieldError::invalid(
                &e.preemption_path,
                opt_value(e.view.preemption_policy),
                format!(
                    "must be the same in every template of the Workload (as {})",
                    first.preemption_path
                ),
            ));
        }
    }
}

fn opt_value(v: Option<&str>) -> Value {
    v.map_or(Value::Null, Value::from)
}

// === template lists ===

/// At most eight entries in one list of templates / child items.
pub fn check_template_count(count: usize, path: &str, errs: &mut Errors) {
    if count > MAX_TEMPLATES {
        errs.push(FieldError::too_many(path, count, MAX_TEMPLATES));
    }
}

/// Template names are DNS labels, unique across the whole Workload so that a
/// group's `workloadRef.templateName` resolves to exactly one template.
/// `seen` collects names across calls.
pub fn check_template_name<'a>(
    name: &'a str,
    path: &str,
    seen: &mut BTreeMap<&'a str, String>,
    errs: &mut Errors,
) {
    check_dns_label(name, path, errs);
    if name.is_empty() {
        return;
    }
    if seen.contains_key(name) {
        errs.push(FieldError::duplicate(path, name));
    } else {
        seen.insert(name, path.to_owned());
    }
}

/// Templates nest at most four levels deep. `depth` is the level of the
/// list at `path` (root list = 1).
pub fn check_depth(depth: usize, path: &str, errs: &mut Errors) -> bool {
    if depth > MAX_DEPTH {
        errs.push(FieldError::forbidden(
            path,
            format!("templates may nest at most {MAX_DEPTH} levels deep"),
        ));
        return false;
    }
    true
}

// === immutability ===

/// The message Kubernetes uses for immutable fields.
pub const IMMUTABLE: &str = "field is immutable";

/// An immutable field must be unchanged on update.
pub fn check_immutable<T: PartialEq + serde::Serialize>(
    new: &T,
    old: &T,
    path: &str,
    errs: &mut Errors,
) {
    if new != old {
        let value = serde_json::to_value(new).unwrap_or(Value::Null);
        errs.push(FieldError::invalid(path, value, IMMUTABLE));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_dns_label("workers-0"));
        assert!(!is_dns_label("Workers"));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(is_dns_subdomain("high.priority"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(is_qualified_name("topology.kubernetes.io/zone"));
        assert!(is_qualified_name("rack"));
        assert!(!is_qualified_name("bad key"));
        assert!(!is_qualified_name("/zone"));
        assert!(!is_qualified_name("Example.com/zone"));
    }
}
