//! The validation rules themselves, written once over small views so that the
//! tree builder ([`crate::workload::Builder::validate`]) and the object
//! validators used by admission ([`crate::workload::validate_workload`] and
//! friends) cannot disagree.

use std::collections::BTreeMap;

use serde_json::Value;

use super::field::{FieldError, FieldErrorKind, child, index};

/// At most this many templates (or child items) per list.
pub const MAX_TEMPLATES: usize = 8;
/// At most this many levels of templates (a root template is level 1).
pub const MAX_DEPTH: usize = crate::model::refs::MAX_GROUP_DEPTH;
/// At most this many resource claims per group.
pub const MAX_RESOURCE_CLAIMS: usize = 4;
/// At most this many topology constraints per group.
pub const MAX_TOPOLOGY_CONSTRAINTS: usize = 1;
/// Supported `preemptionPolicy` values.
pub const PREEMPTION_POLICIES: &[&str] = &["Never", "PreemptLowerPriority"];

use crate::model::refs::{DNS_LABEL_MAX, DNS_SUBDOMAIN_MAX};

/// Errors collected by one validation pass.
pub type Errors = Vec<FieldError>;

// === names ===

pub use crate::model::refs::{is_dns_label, is_dns_subdomain};

/// Kubernetes qualified name (label key): optional DNS subdomain prefix and
/// `/`, then a name of at most 63 characters of `[A-Za-z0-9_.-]`,
/// alphanumeric at both ends.
#[cfg(test)]
pub fn is_qualified_name(s: &str) -> bool {
    qualified_name_problems(s).is_empty()
}

/// Why `s` is not a qualified name, worded as Kubernetes' `IsQualifiedName`
/// words it; empty when it is one.
pub fn qualified_name_problems(s: &str) -> Vec<String> {
    let parts: Vec<&str> = s.split('/').collect();
    let (prefix, name) = match parts.as_slice() {
        [name] => (None, *name),
        [prefix, name] => (Some(*prefix), *name),
        _ => return vec![format!("a qualified name {QUALIFIED_NAME_FORMAT}")],
    };
    let mut out = Vec::new();
    match prefix {
        Some("") => out.push("prefix part must be non-empty".to_owned()),
        Some(p) if p.len() > DNS_SUBDOMAIN_MAX => out.push(format!(
            "prefix part must be no more than {DNS_SUBDOMAIN_MAX} characters"
        )),
        Some(p) if !is_dns_subdomain(p) => out.push(format!("prefix part {DNS_SUBDOMAIN_MSG}")),
        _ => {}
    }
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if name.is_empty() {
        out.push("name part must be non-empty".to_owned());
    } else if name.len() > DNS_LABEL_MAX {
        out.push(format!(
            "name part must be no more than {DNS_LABEL_MAX} characters"
        ));
    }
    let well_formed = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && ends_ok(name.chars().next())
        && ends_ok(name.chars().last());
    if !name.is_empty() && !well_formed {
        out.push(format!("name part {QUALIFIED_NAME_FORMAT}"));
    }
    out
}

/// Kubernetes' `IsPathSegmentName`: the name may be used as one segment of
/// a URL path. Empty when it can.
pub fn path_segment_problems(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s == "." || s == ".." {
        out.push(format!("may not be '{s}'"));
    }
    for bad in ['/', '%'] {
        if s.contains(bad) {
            out.push(format!("may not contain '{bad}'"));
        }
    }
    out
}

const DNS_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
     and must start and end with an alphanumeric character (e.g. 'my-name', or '123-abc')";
const DNS_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
     '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')";
const QUALIFIED_NAME_FORMAT: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start \
     and end with an alphanumeric character (e.g. 'MyName', or 'my.name', or '123-abc'), with an optional \
     DNS subdomain prefix and '/' (e.g. 'topology.kubernetes.io/zone')";

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
    } else if value.len() > DNS_SUBDOMAIN_MAX {
        errs.push(FieldError::invalid(
            path,
            value,
            format!("must be no more than {DNS_SUBDOMAIN_MAX} characters"),
        ));
    } else if !is_dns_subdomain(value) {
        errs.push(FieldError::invalid(path, value, DNS_SUBDOMAIN_MSG));
    }
}

// === unions ===

/// Exactly one of the named members is set. Like the API server's union
/// rule, both an empty union and one with several members set are `Invalid`
/// at the union's path: the value is `""` or the set members (`"{a, b}"`).
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
    if set.is_empty() {
        errs.push(FieldError::invalid(
            path,
            "",
            format!("must specify one of: {}", names.join(", ")),
        ));
    } else {
        errs.push(FieldError::invalid(
            path,
            format!("{{{}}}", set.join(", ")),
            format!("must specify exactly one of: {}", names.join(", ")),
        ));
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
/// (field `min_field`, `minCount` or `minGroupCount`) at least 1 when given
/// (zero is `Required`, as the API server treats it as absent).
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

/// `minCount` / `minGroupCount` must be positive. Zero means "not set" to
/// the API server, which answers `Required` for it; a negative value is
/// `Invalid`.
pub fn check_min_at_least_one(value: i32, path: &str, errs: &mut Errors) {
    if value == 0 {
        errs.push(FieldError::required(path, ""));
    } else if value < 1 {
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
        } else {
            let problems = qualified_name_problems(key);
            if !problems.is_empty() {
                errs.push(FieldError::invalid(p, *key, problems.join("; ")));
            }
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

/// At most four claims, unique DNS-label names (a repeated name is a
/// `Duplicate` of the whole entry, `[i]`, as for any list keyed by name),
/// each naming exactly one of a claim or a template, by DNS subdomain.
/// `path` is the list.
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
            errs.push(FieldError::duplicate(&p, c.name));
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

/// The highest priority a user may set (`HighestUserDefinablePriority`);
/// larger values are reserved for system PriorityClasses.
pub const HIGHEST_USER_DEFINABLE_PRIORITY: i32 = 1_000_000_000;

/// Paths of one group's priority fields.
#[derive(Clone, Copy, Debug)]
pub struct PriorityPaths<'p> {
    /// `priorityClassName`.
    pub class: &'p str,
    /// `priority`.
    pub priority: &'p str,
    /// `preemptionPolicy`.
    pub preemption: &'p str,
}

/// Field formats of the priority configuration: a DNS-subdomain class name,
/// a priority of at most [`HIGHEST_USER_DEFINABLE_PRIORITY`], a supported
/// preemption policy.
pub fn check_priority(view: PriorityView<'_>, paths: PriorityPaths<'_>, errs: &mut Errors) {
    if let Some(name) = view.class_name {
        check_dns_subdomain(name, paths.class, errs);
    }
    if let Some(p) = view.priority
        && p > HIGHEST_USER_DEFINABLE_PRIORITY
    {
        errs.push(FieldError::invalid(
            paths.priority,
            p,
            format!("must be less than or equal to {HIGHEST_USER_DEFINABLE_PRIORITY}"),
        ));
    }
    if let Some(policy) = view.preemption_policy
        && !PREEMPTION_POLICIES.contains(&policy)
    {
        errs.push(FieldError::not_supported(
            paths.preemption,
            policy,
            PREEMPTION_POLICIES,
        ));
    }
}

/// One priority per Workload: every template carries the same
/// `priorityClassName` and `priority` (set or unset alike) as the first
/// one. `preemptionPolicy` may differ. Reported once, at `path` (the
/// Workload's `spec`), as the API server does.
pub fn check_one_priority<'a>(views: &[PriorityView<'a>], path: &str, errs: &mut Errors) {
    fn key<'a>(v: &PriorityView<'a>) -> (Option<&'a str>, Option<i32>) {
        (v.class_name.filter(|c| !c.is_empty()), v.priority)
    }
    let Some(first) = views.first().map(key) else {
        return;
    };
    if views.iter().any(|v| key(v) != first) {
        errs.push(FieldError::invalid(
            path,
            Value::Null,
            "detected multiple priority configurations: every template must have the same \
             priorityClassName and priority",
        ));
    }
}

// === template lists ===

/// At most eight entries in one list of templates / child items.
pub fn check_template_count(count: usize, path: &str, errs: &mut Errors) {
    if count > MAX_TEMPLATES {
        errs.push(FieldError::too_many(path, count, MAX_TEMPLATES));
    }
}

/// Within one list keyed by name, a name used again is a `Duplicate` of the
/// later entry, reported at the entry (`paths[i]`), as the API server does
/// for its map lists. Empty names are left to the name format rule.
pub fn check_list_unique(names: &[(&str, &str)], errs: &mut Errors) {
    let mut seen = std::collections::BTreeSet::new();
    for (name, path) in names {
        if !name.is_empty() && !seen.insert(*name) {
            errs.push(FieldError::duplicate(*path, *name));
        }
    }
}

/// One composite template (or item with children) for the Workload-wide
/// name rule: its name, path, and children by list.
#[derive(Clone, Debug, Default)]
pub struct NameNode<'a> {
    /// Template name.
    pub name: &'a str,
    /// Path of the template (its `name` field is reported).
    pub path: String,
    /// Pod group templates (leaves) under it: name and path.
    pub leaves: Vec<(&'a str, String)>,
    /// Composite templates under it.
    pub composites: Vec<NameNode<'a>>,
}

/// Template names are unique across the whole Workload, so that a group's
/// `workloadRef.templateName` resolves to exactly one template. A name that
/// repeats one from another list is a `Duplicate` at `<template>.name`; the
/// walk is the API server's: the top-level leaves, then per list of
/// composites their own names first, then each one's leaves and children.
/// Repeats within one list are [`check_list_unique`]'s.
pub fn check_names_across_lists(
    top_leaves: &[(&str, String)],
    top_composites: &[NameNode<'_>],
    errs: &mut Errors,
) {
    let mut names: std::collections::BTreeSet<&str> = top_leaves.iter().map(|(n, _)| *n).collect();
    composite_list_names(top_composites, &mut names, errs);
}

fn composite_list_names<'a>(
    list: &[NameNode<'a>],
    names: &mut std::collections::BTreeSet<&'a str>,
    errs: &mut Errors,
) {
    for t in list {
        if !t.name.is_empty() && names.contains(t.name) {
            errs.push(FieldError::duplicate(child(&t.path, "name"), t.name));
        }
    }
    names.extend(list.iter().map(|t| t.name));
    for t in list {
        for (name, path) in &t.leaves {
            if !name.is_empty() && names.contains(name) {
                errs.push(FieldError::duplicate(child(path, "name"), *name));
            }
        }
        names.extend(t.leaves.iter().map(|(n, _)| *n));
        composite_list_names(&t.composites, names, errs);
    }
}

impl NameNode<'_> {
    /// Levels of composite templates from this one down (itself = 1).
    pub fn height(&self) -> usize {
        1 + self
            .composites
            .iter()
            .map(NameNode::height)
            .max()
            .unwrap_or(0)
    }
}

/// Templates nest at most [`MAX_DEPTH`] levels deep, leaves included: a
/// composite template may not sit at level [`MAX_DEPTH`]. Reported once per
/// top-level template whose hierarchy is too deep, at that template.
pub fn check_depth(top_composites: &[NameNode<'_>], errs: &mut Errors) {
    for t in top_composites {
        if t.height() >= MAX_DEPTH {
            errs.push(FieldError::invalid(
                &t.path,
                t.name,
                format!("maximum template hierarchy depth is {MAX_DEPTH}"),
            ));
        }
    }
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

/// Whether a scheduling policy's variant (which of `basic` and `gang` is
/// set) differs between two versions.
pub fn policy_variant_changed(new: Option<PolicyView>, old: Option<PolicyView>) -> bool {
    let set = |v: Option<PolicyView>| v.map_or((false, false), |v| (v.basic, v.gang.is_some()));
    set(new) != set(old)
}

/// A scheduling policy's variant may not change on update. The API server
/// names the variant fields themselves, not the policy block (`path`) above
/// them: one newly set is immutable, one that was set cannot be cleared
/// (upstream `TestDeclarativeValidateUpdate` for Workload, "invalid update
/// from gang to basic policy"). Returns whether the variants differ.
pub fn check_policy_variant(
    new: Option<PolicyView>,
    old: Option<PolicyView>,
    path: &str,
    errs: &mut Errors,
) -> bool {
    if !policy_variant_changed(new, old) {
        return false;
    }
    let set = |v: Option<PolicyView>| v.map_or((false, false), |v| (v.basic, v.gang.is_some()));
    let (n, o) = (set(new), set(old));
    for (option, now, before) in [
        (PolicyOption::Basic, n.0, o.0),
        (PolicyOption::Gang, n.1, o.1),
    ] {
        let p = child(path, option.as_str());
        if now && !before {
            errs.push(FieldError::invalid(p, Value::Null, IMMUTABLE));
        } else if before && !now {
            errs.push(FieldError::invalid(
                p,
                Value::Null,
                "field cannot be cleared once set",
            ));
        }
    }
    true
}

/// The API server reports a changed immutable field once: list-size errors
/// (`Too many`) at or under a path already reported immutable are dropped.
pub fn drop_too_many_under_immutable(errs: &mut Errors) {
    let frozen: Vec<String> = errs
        .iter()
        .filter(|e| e.detail == IMMUTABLE)
        .map(|e| e.path.clone())
        .collect();
    errs.retain(|e| {
        e.kind != FieldErrorKind::TooMany
            || !frozen.iter().any(|f| {
                e.path == *f
                    || e.path
                        .strip_prefix(f.as_str())
                        .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
            })
    });
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
        // A subdomain's parts have no length limit of their own, only the total.
        assert!(is_dns_subdomain(&format!("{}.example.com", "a".repeat(64))));
        assert!(is_dns_subdomain(&"a".repeat(253)));
        assert!(!is_dns_subdomain(&"a".repeat(254)));
        assert!(is_qualified_name(&format!(
            "{}/{}",
            "a".repeat(253),
            "b".repeat(63)
        )));
    }

    #[test]
    fn qualified_name_problems_name_the_part() {
        assert_eq!(
            qualified_name_problems("example.com/Foo"),
            Vec::<String>::new()
        );
        let long_name = qualified_name_problems(&format!("foo/{}", "b".repeat(64)));
        assert_eq!(
            long_name,
            vec!["name part must be no more than 63 characters"]
        );
        let long_prefix = qualified_name_problems(&format!("{}/foo", "a".repeat(254)));
        assert_eq!(
            long_prefix,
            vec!["prefix part must be no more than 253 characters"]
        );
        assert!(
            qualified_name_problems("Example.com/foo")[0]
                .starts_with("prefix part a lowercase RFC 1123 subdomain")
        );
        assert_eq!(
            qualified_name_problems("/zone"),
            vec!["prefix part must be non-empty"]
        );
        assert!(qualified_name_problems("a/b/c")[0].starts_with("a qualified name must consist"));
        assert!(qualified_name_problems("bad key")[0].starts_with("name part must consist"));
    }

    #[test]
    fn path_segments() {
        assert_eq!(path_segment_problems("Deployment"), Vec::<String>::new());
        assert_eq!(path_segment_problems(".."), vec!["may not be '..'"]);
        assert_eq!(
            path_segment_problems("a/b%c"),
            vec!["may not contain '/'", "may not contain '%'"]
        );
    }

    #[test]
    fn too_many_is_dropped_only_under_an_immutable_path() {
        let mut errs = vec![
            FieldError::invalid("spec.schedulingConstraints", Value::Null, IMMUTABLE),
            FieldError::too_many("spec.schedulingConstraints.topology", 2, 1),
            FieldError::too_many("spec.schedulingConstraintsX", 2, 1),
            FieldError::too_many("spec.resourceClaims", 5, 4),
        ];
        drop_too_many_under_immutable(&mut errs);
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "spec.schedulingConstraints",
                "spec.schedulingConstraintsX",
                "spec.resourceClaims"
            ]
        );
    }
}
