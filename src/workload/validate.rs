//! Validation of workload trees (for controllers and the CLI) and of
//! Workload, PodGroup and CompositePodGroup objects (for admission).
//!
//! Both go through the same per-group rule ([`check_group_structure`]) and the
//! shared rules in [`super::rules`]; only the source of field paths differs.

use k8s_openapi::api::scheduling::{v1alpha3, v1beta1};

use super::field::{FieldError, child, index};
use super::options::BuildOptions;
use super::rules::{
    self, ClaimView, DisruptionView, Errors, NameNode, PolicyView, PriorityPaths, PriorityView,
    check_all_not_with_basic, check_claims, check_depth, check_disruption,
    check_disruption_allowed, check_dns_label, check_immutable, check_list_unique,
    check_names_across_lists, check_one_priority, check_policy, check_policy_allowed,
    check_policy_variant, check_priority, check_template_count, check_topology,
    drop_too_many_under_immutable,
};
use super::tree::{
    Block, WorkloadItem, WorkloadTree, claim_views, composite_policy_view, disruption_view,
    leaf_policy_view, priority_view,
};

/// What [`crate::workload::Builder::validate`] validates against.
#[derive(Clone, Copy, Debug, Default)]
pub struct ValidationInput<'a> {
    /// The previously stored tree, on update; `None` on create.
    pub old: Option<&'a WorkloadTree>,
}

// === one group, shared by trees and objects ===

/// Normalized view of one group or template.
#[derive(Clone, Debug, Default)]
struct GroupView<'a> {
    policy: Option<PolicyView>,
    /// `minCount` (leaf) or `minGroupCount` (composite).
    min_field: &'static str,
    disruption: Option<DisruptionView>,
    topology: Option<Vec<&'a str>>,
    claims: Option<Vec<ClaimView<'a>>>,
    priority: PriorityView<'a>,
}

/// Paths of the blocks of one group.
#[derive(Clone, Debug, Default)]
struct GroupPaths {
    policy: String,
    constraints: String,
    disruption: String,
    claims: String,
    class: String,
    priority: String,
    preemption: String,
}

impl GroupPaths {
    fn under(base: &str) -> Self {
        Self {
            policy: child(base, "schedulingPolicy"),
            constraints: child(base, "schedulingConstraints"),
            disruption: child(base, "disruptionMode"),
            claims: child(base, "resourceClaims"),
            class: child(base, "priorityClassName"),
            priority: child(base, "priority"),
            preemption: child(base, "preemptionPolicy"),
        }
    }

    fn prio(&self) -> PriorityPaths<'_> {
        PriorityPaths {
            class: &self.class,
            priority: &self.priority,
            preemption: &self.preemption,
        }
    }
}

/// Structural rules of one group: policy union and minimum, disruption
/// union, topology, resource claims, priority field formats.
fn check_group_structure(v: &GroupView<'_>, p: &GroupPaths, errs: &mut Errors) {
    if let Some(policy) = v.policy {
        check_policy(policy, v.min_field, &p.policy, errs);
    }
    if let Some(d) = v.disruption {
        check_disruption(d, &p.disruption, errs);
    }
    if let Some(keys) = &v.topology {
        check_topology(keys.iter().copied(), &p.constraints, errs);
    }
    if let Some(claims) = &v.claims {
        check_claims(claims, &p.claims, errs);
    }
    check_priority(v.priority, p.prio(), errs);
}

/// Cross-field rule that holds for every group: `all` not with `basic`.
fn check_group_semantics(v: &GroupView<'_>, p: &GroupPaths, errs: &mut Errors) {
    check_all_not_with_basic(
        v.policy.and_then(|x| x.option()),
        v.disruption.and_then(|d| d.option()),
        &p.disruption,
        errs,
    );
}

// === trees ===

pub(crate) fn validate_tree(
    tree: &WorkloadTree,
    options: &BuildOptions,
    input: &ValidationInput<'_>,
) -> Vec<FieldError> {
    let mut w = TreeWalk {
        options,
        errs: Vec::new(),
        priorities: Vec::new(),
    };
    if tree.items.is_empty() {
        w.errs.push(FieldError::required(
            &tree.path,
            "at least one item is required",
        ));
    }
    let composites = tree.items.iter().filter(|i| i.is_composite()).count();
    if composites != 0 && composites != tree.items.len() {
        w.errs.push(FieldError::forbidden(
            &tree.path,
            "top-level items must be all leaves or all items with children: a Workload sets exactly one of \
             `podGroupTemplates` and `compositePodGroupTemplates`",
        ));
    }
    if let Some(owner) = &options.owner {
        check_owner(owner, &mut w.errs);
    }
    check_template_count(tree.items.len(), &tree.path, &mut w.errs);
    for item in &tree.items {
        w.item(item);
    }
    tree_list_unique(&tree.items, &mut w.errs);
    let (leaves, composites) = tree_name_nodes(&tree.items);
    check_names_across_lists(&leaves, &composites, &mut w.errs);
    check_depth(&composites, &mut w.errs);
    let views: Vec<PriorityView<'_>> = w.priorities.iter().map(OwnedPriority::view).collect();
    check_one_priority(&views, &tree.path, &mut w.errs);
    let mut errs = w.errs;
    if let Some(old) = input.old {
        immutable_items(&tree.items, &old.items, &tree.path, &mut errs);
        drop_too_many_under_immutable(&mut errs);
    }
    errs
}

/// The owner becomes the Workload's `spec.controllerRef`, so it must pass
/// that field's format rules (reported at `owner.*`): the group of
/// `apiVersion` a DNS subdomain, `kind` and `name` URL path segments. Empty
/// fields are the caller's to report.
fn check_owner(
    owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    errs: &mut Errors,
) {
    if let Some(group) = super::options::api_group(&owner.api_version)
        && !group.is_empty()
        && !rules::is_dns_subdomain(&group)
    {
        errs.push(FieldError::invalid(
            "owner.apiVersion",
            owner.api_version.as_str(),
            "the API group must be a lowercase RFC 1123 subdomain (it becomes spec.controllerRef.apiGroup)",
        ));
    }
    for (field, value) in [("kind", &owner.kind), ("name", &owner.name)] {
        let problems = rules::path_segment_problems(value);
        if !value.is_empty() && !problems.is_empty() {
            errs.push(FieldError::invalid(
                child("owner", field),
                value.as_str(),
                problems.join("; "),
            ));
        }
    }
}

/// Repeated names within one list of items: leaves and items with children
/// compile to separate template lists, so each is checked on its own.
fn tree_list_unique(items: &[WorkloadItem], errs: &mut Errors) {
    for composite in [false, true] {
        let names: Vec<(&str, &str)> = items
            .iter()
            .filter(|i| i.is_composite() == composite)
            .map(|i| (i.name.as_str(), i.path.as_str()))
            .collect();
        check_list_unique(&names, errs);
    }
}

/// The tree's items as the Workload-wide name rule sees them: the leaves of
/// a list, and its items with children.
fn tree_name_nodes(items: &[WorkloadItem]) -> (Vec<(&str, String)>, Vec<NameNode<'_>>) {
    let leaves = items
        .iter()
        .filter(|i| !i.is_composite())
        .map(|i| (i.name.as_str(), i.path.clone()))
        .collect();
    let composites = items
        .iter()
        .filter(|i| i.is_composite())
        .map(|i| {
            let (leaves, composites) = tree_name_nodes(&i.children);
            NameNode {
                name: &i.name,
                path: i.path.clone(),
                leaves,
                composites,
            }
        })
        .collect();
    (leaves, composites)
}

/// Owned priority configuration (merged configs are temporaries).
struct OwnedPriority {
    class_name: Option<String>,
    priority: Option<i32>,
    preemption_policy: Option<String>,
}

impl OwnedPriority {
    fn view(&self) -> PriorityView<'_> {
        PriorityView {
            class_name: self.class_name.as_deref(),
            priority: self.priority,
            preemption_policy: self.preemption_policy.as_deref(),
        }
    }
}

struct TreeWalk<'t> {
    options: &'t BuildOptions,
    errs: Errors,
    priorities: Vec<OwnedPriority>,
}

impl<'t> TreeWalk<'t> {
    fn item(&mut self, item: &'t WorkloadItem) {
        let errs = &mut self.errs;
        check_dns_label(&item.name, &child(&item.path, "name"), errs);
        let composite = item.is_composite();
        let input = &item.input;
        if composite {
            if let Some(s) = &input.scheduling_policy {
                errs.push(FieldError::forbidden(
                    &s.path,
                    "a pod group scheduling policy may only be set on an item without children",
                ));
            }
            if let Some(s) = &input.resource_claims {
                errs.push(FieldError::forbidden(
                    &s.path,
                    "resource claims may only be set on an item without children",
                ));
            }
        } else if let Some(s) = &input.composite_scheduling_policy {
            errs.push(FieldError::forbidden(
                &s.path,
                "a composite scheduling policy may only be set on an item with children",
            ));
        }

        let cfg = item.merged_config();
        let paths = GroupPaths {
            policy: item.block_path(Block::SchedulingPolicy),
            constraints: item.block_path(Block::SchedulingConstraints),
            disruption: item.block_path(Block::DisruptionMode),
            claims: item.block_path(Block::ResourceClaims),
            class: item.block_path(Block::PriorityClassName),
            priority: item.block_path(Block::Priority),
            preemption: item.block_path(Block::PreemptionPolicy),
        };
        let (policy, min_field) = if composite {
            (
                cfg.composite_scheduling_policy
                    .as_ref()
                    .map(composite_policy_view),
                "minGroupCount",
            )
        } else {
            (
                cfg.scheduling_policy.as_ref().map(leaf_policy_view),
                "minCount",
            )
        };
        let view = GroupView {
            policy,
            min_field,
            disruption: cfg.disruption_mode.as_ref().map(disruption_view),
            topology: cfg.scheduling_constraints.as_ref().map(|c| {
                c.topology
                    .iter()
                    .flatten()
                    .map(|t| t.key.as_str())
                    .collect()
            }),
            claims: if composite {
                None
            } else {
                cfg.resource_claims.as_deref().map(claim_views)
            },
            priority: priority_view(&cfg),
        };

        // Building-block structure (declarative validation).
        if !self.options.disable_declarative_validation {
            check_group_structure(&view, &paths, errs);
        }

        // What compiling needs, and controller policy: always.
        match view.policy {
            None => errs.push(FieldError::required(
                &paths.policy,
                "a scheduling policy must be set by the user or the controller",
            )),
            Some(PolicyView {
                gang: Some(None), ..
            }) => errs.push(FieldError::required(
                child(&child(&paths.policy, "gang"), min_field),
                "must be set by the user or filled in by the controller",
            )),
            Some(_) => {}
        }
        if let Some(option) = view.policy.and_then(|p| p.option()) {
            check_policy_allowed(option, &self.options.allowed_policies, &paths.policy, errs);
        }
        if let Some(option) = view.disruption.and_then(|d| d.option()) {
            check_disruption_allowed(
                option,
                &self.options.allowed_disruption_modes,
                &paths.disruption,
                errs,
            );
        }
        check_group_semantics(&view, &paths, errs);
        self.priorities.push(OwnedPriority {
            class_name: cfg.priority_class_name.clone(),
            priority: cfg.priority,
            preemption_policy: cfg.preemption_policy.clone(),
        });

        if composite {
            let children_path = child(&item.path, "children");
            let leaves = item.children.iter().filter(|c| !c.is_composite()).count();
            check_template_count(leaves, &children_path, &mut self.errs);
            check_template_count(item.children.len() - leaves, &children_path, &mut self.errs);
            for c in &item.children {
                self.item(c);
            }
            tree_list_unique(&item.children, &mut self.errs);
        }
    }
}

fn immutable_items(
    new: &[WorkloadItem],
    old: &[WorkloadItem],
    level_path: &str,
    errs: &mut Errors,
) {
    for n in new {
        match old.iter().find(|o| o.name == n.name) {
            Some(o) => immutable_item(n, o, errs),
            None => errs.push(FieldError::forbidden(
                &n.path,
                format!(
                    "item {:?} cannot be added after the Workload is created",
                    n.name
                ),
            )),
        }
    }
    for o in old {
        if !new.iter().any(|n| n.name == o.name) {
            errs.push(FieldError::forbidden(
                level_path,
                format!(
                    "item {:?} cannot be removed after the Workload is created",
                    o.name
                ),
            ));
        }
    }
}

fn immutable_item(n: &WorkloadItem, o: &WorkloadItem, errs: &mut Errors) {
    if n.is_composite() != o.is_composite() {
        errs.push(FieldError::forbidden(
            child(&n.path, "children"),
            "an item cannot change between having children and having none after the Workload is created",
        ));
        return;
    }
    let (nc, oc) = (n.merged_config(), o.merged_config());
    let policy_path = n.block_path(Block::SchedulingPolicy);
    if n.is_composite() {
        // The whole composite policy is immutable, minGroupCount included.
        let view = |c: &super::tree::ItemConfig| {
            c.composite_scheduling_policy
                .as_ref()
                .map(composite_policy_view)
        };
        if !check_policy_variant(view(&nc), view(&oc), &policy_path, errs) {
            check_immutable(
                &nc.composite_scheduling_policy,
                &oc.composite_scheduling_policy,
                &policy_path,
                errs,
            );
        }
    } else {
        // The variant is frozen; gang.minCount stays mutable.
        let view = |c: &super::tree::ItemConfig| c.scheduling_policy.as_ref().map(leaf_policy_view);
        check_policy_variant(view(&nc), view(&oc), &policy_path, errs);
        check_immutable(
            &nc.resource_claims,
            &oc.resource_claims,
            &n.block_path(Block::ResourceClaims),
            errs,
        );
    }
    check_immutable(
        &nc.scheduling_constraints,
        &oc.scheduling_constraints,
        &n.block_path(Block::SchedulingConstraints),
        errs,
    );
    check_immutable(
        &nc.disruption_mode,
        &oc.disruption_mode,
        &n.block_path(Block::DisruptionMode),
        errs,
    );
    check_immutable(
        &nc.priority_class_name,
        &oc.priority_class_name,
        &n.block_path(Block::PriorityClassName),
        errs,
    );
    check_immutable(
        &nc.priority,
        &oc.priority,
        &n.block_path(Block::Priority),
        errs,
    );
    check_immutable(
        &nc.preemption_policy,
        &oc.preemption_policy,
        &n.block_path(Block::PreemptionPolicy),
        errs,
    );
    immutable_items(&n.children, &o.children, &child(&n.path, "children"), errs);
}

// === objects: views ===

fn pod_policy_view(p: &v1beta1::PodGroupSchedulingPolicy) -> PolicyView {
    PolicyView {
        basic: p.basic.is_some(),
        gang: p.gang.as_ref().map(|g| Some(g.min_count)),
    }
}

fn pod_disruption_view(d: &v1beta1::DisruptionMode) -> DisruptionView {
    DisruptionView {
        all: d.all.is_some(),
        single: d.single.is_some(),
    }
}

fn pod_claim_views(claims: &[v1beta1::PodGroupResourceClaim]) -> Vec<ClaimView<'_>> {
    claims
        .iter()
        .map(|c| ClaimView {
            name: &c.name,
            claim: c.resource_claim_name.as_deref(),
            template: c.resource_claim_template_name.as_deref(),
        })
        .collect()
}

/// The leaf group fields shared by PodGroupTemplate and PodGroupSpec.
struct PodFields<'a> {
    policy: &'a v1beta1::PodGroupSchedulingPolicy,
    disruption: &'a Option<v1beta1::DisruptionMode>,
    constraints: &'a Option<v1beta1::PodGroupSchedulingConstraints>,
    claims: &'a Option<Vec<v1beta1::PodGroupResourceClaim>>,
    class: &'a Option<String>,
    priority: &'a Option<i32>,
    preemption: &'a Option<String>,
}

impl<'a> PodFields<'a> {
    fn of_template(t: &'a v1beta1::PodGroupTemplate) -> Self {
        Self {
            policy: &t.scheduling_policy,
            disruption: &t.disruption_mode,
            constraints: &t.scheduling_constraints,
            claims: &t.resource_claims,
            class: &t.priority_class_name,
            priority: &t.priority,
            preemption: &t.preemption_policy,
        }
    }

    fn of_spec(s: &'a v1beta1::PodGroupSpec) -> Self {
        Self {
            policy: &s.scheduling_policy,
            disruption: &s.disruption_mode,
            constraints: &s.scheduling_constraints,
            claims: &s.resource_claims,
            class: &s.priority_class_name,
            priority: &s.priority,
            preemption: &s.preemption_policy,
        }
    }

    fn view(&self) -> GroupView<'a> {
        GroupView {
            policy: Some(pod_policy_view(self.policy)),
            min_field: "minCount",
            disruption: self.disruption.as_ref().map(pod_disruption_view),
            topology: self.constraints.as_ref().map(|c| {
                c.topology
                    .iter()
                    .flatten()
                    .map(|t| t.key.as_str())
                    .collect()
            }),
            claims: self.claims.as_deref().map(pod_claim_views),
            priority: PriorityView {
                class_name: self.class.as_deref(),
                priority: *self.priority,
                preemption_policy: self.preemption.as_deref(),
            },
        }
    }

    /// Everything but `gang.minCount` is immutable.
    fn check_update(&self, old: &PodFields<'_>, p: &GroupPaths, errs: &mut Errors) {
        check_policy_variant(
            Some(pod_policy_view(self.policy)),
            Some(pod_policy_view(old.policy)),
            &p.policy,
            errs,
        );
        check_immutable(self.disruption, old.disruption, &p.disruption, errs);
        check_immutable(self.constraints, old.constraints, &p.constraints, errs);
        check_immutable(self.claims, old.claims, &p.claims, errs);
        check_immutable(self.class, old.class, &p.class, errs);
        check_immutable(self.priority, old.priority, &p.priority, errs);
        check_immutable(self.preemption, old.preemption, &p.preemption, errs);
    }
}

/// The view of a composite group. The v1beta1 template and the v1alpha3
/// spec are distinct types with the same field names, so one body serves
/// both through a macro.
macro_rules! composite_view {
    ($c:expr) => {{
        let c = $c;
        GroupView {
            policy: Some(PolicyView {
                basic: c.scheduling_policy.basic.is_some(),
                gang: c
                    .scheduling_policy
                    .gang
                    .as_ref()
                    .map(|g| Some(g.min_group_count)),
            }),
            min_field: "minGroupCount",
            disruption: c.disruption_mode.as_ref().map(|d| DisruptionView {
                all: d.all.is_some(),
                single: d.single.is_some(),
            }),
            topology: c.scheduling_constraints.as_ref().map(|k| {
                k.topology
                    .iter()
                    .flatten()
                    .map(|t| t.key.as_str())
                    .collect()
            }),
            claims: None,
            priority: PriorityView {
                class_name: c.priority_class_name.as_deref(),
                priority: c.priority,
                preemption_policy: c.preemption_policy.as_deref(),
            },
        }
    }};
}

fn composite_template_view(t: &v1beta1::CompositePodGroupTemplate) -> GroupView<'_> {
    composite_view!(t)
}

fn composite_spec_view(s: &v1alpha3::CompositePodGroupSpec) -> GroupView<'_> {
    composite_view!(s)
}

// === objects: Workload ===

/// Validates a Workload (`scheduling.k8s.io/v1beta1`), and with `old` the
/// update from `old`: exactly one of the template lists; per template the
/// group rules; at most 8 templates per list, names unique in the Workload,
/// depth at most 4; one priority configuration; immutable fields.
///
/// PriorityClass existence is not checked here (it needs a cache); see
/// [`workload_priority_classes`].
pub fn validate_workload(
    new: &v1beta1::Workload,
    old: Option<&v1beta1::Workload>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = &new.spec;
    let pods = spec.pod_group_templates.as_deref().unwrap_or_default();
    let composites = spec
        .composite_pod_group_templates
        .as_deref()
        .unwrap_or_default();
    rules::check_exactly_one(
        &[
            ("podGroupTemplates", !pods.is_empty()),
            ("compositePodGroupTemplates", !composites.is_empty()),
        ],
        "spec",
        &mut errs,
    );
    // On update a stored controllerRef is only checked for being unchanged.
    if let Some(r) = &spec.controller_ref
        && old.is_none_or(|o| o.spec.controller_ref.is_none())
    {
        check_controller_ref(r, "spec.controllerRef", &mut errs);
    }
    let mut walk = ObjectWalk {
        errs,
        priorities: Vec::new(),
    };
    walk.pod_templates(pods, "spec.podGroupTemplates");
    walk.composite_templates(composites, "spec.compositePodGroupTemplates");
    let ObjectWalk {
        mut errs,
        priorities,
    } = walk;
    let top_leaves: Vec<(&str, String)> = pods
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), index("spec.podGroupTemplates", i)))
        .collect();
    let nodes = composite_name_nodes(composites, "spec.compositePodGroupTemplates");
    check_names_across_lists(&top_leaves, &nodes, &mut errs);
    check_depth(&nodes, &mut errs);
    check_one_priority(&priorities, "spec", &mut errs);

    if let Some(old) = old {
        check_immutable(
            &spec.controller_ref,
            &old.spec.controller_ref,
            "spec.controllerRef",
            &mut errs,
        );
        immutable_pod_templates(
            pods,
            old.spec.pod_group_templates.as_deref().unwrap_or_default(),
            "spec.podGroupTemplates",
            &mut errs,
        );
        immutable_composite_templates(
            composites,
            old.spec
                .composite_pod_group_templates
                .as_deref()
                .unwrap_or_default(),
            "spec.compositePodGroupTemplates",
            &mut errs,
        );
        drop_too_many_under_immutable(&mut errs);
    }
    errs
}

/// `spec.controllerRef`: `apiGroup` (when set) a DNS subdomain, `kind` and
/// `name` required and usable as URL path segments (no `/` or `%`).
fn check_controller_ref(r: &v1beta1::TypedLocalObjectReference, path: &str, errs: &mut Errors) {
    if let Some(group) = r.api_group.as_deref().filter(|g| !g.is_empty()) {
        rules::check_dns_subdomain(group, &child(path, "apiGroup"), errs);
    }
    for (field, value) in [("kind", &r.kind), ("name", &r.name)] {
        let p = child(path, field);
        if value.is_empty() {
            errs.push(FieldError::required(p, ""));
            continue;
        }
        let problems = rules::path_segment_problems(value);
        if !problems.is_empty() {
            errs.push(FieldError::invalid(p, value.as_str(), problems.join("; ")));
        }
    }
}

/// The composite templates of a list as the Workload-wide name and depth
/// rules see them.
fn composite_name_nodes<'a>(
    list: &'a [v1beta1::CompositePodGroupTemplate],
    path: &str,
) -> Vec<NameNode<'a>> {
    list.iter()
        .enumerate()
        .map(|(i, t)| {
            let p = index(path, i);
            let pods_path = child(&p, "podGroupTemplates");
            NameNode {
                name: &t.name,
                leaves: t
                    .pod_group_templates
                    .iter()
                    .flatten()
                    .enumerate()
                    .map(|(j, l)| (l.name.as_str(), index(&pods_path, j)))
                    .collect(),
                composites: composite_name_nodes(
                    t.composite_pod_group_templates
                        .as_deref()
                        .unwrap_or_default(),
                    &child(&p, "compositePodGroupTemplates"),
                ),
                path: p,
            }
        })
        .collect()
}

struct ObjectWalk<'a> {
    errs: Errors,
    priorities: Vec<PriorityView<'a>>,
}

impl<'a> ObjectWalk<'a> {
    fn pod_templates(&mut self, list: &'a [v1beta1::PodGroupTemplate], path: &str) {
        check_template_count(list.len(), path, &mut self.errs);
        let mut names = Vec::with_capacity(list.len());
        for (i, t) in list.iter().enumerate() {
            let p = index(path, i);
            check_dns_label(&t.name, &child(&p, "name"), &mut self.errs);
            let paths = GroupPaths::under(&p);
            let view = PodFields::of_template(t).view();
            check_group_structure(&view, &paths, &mut self.errs);
            check_group_semantics(&view, &paths, &mut self.errs);
            self.priorities.push(view.priority);
            names.push(p);
        }
        let keyed: Vec<(&str, &str)> = list
            .iter()
            .zip(&names)
            .map(|(t, p)| (t.name.as_str(), p.as_str()))
            .collect();
        check_list_unique(&keyed, &mut self.errs);
    }

    fn composite_templates(&mut self, list: &'a [v1beta1::CompositePodGroupTemplate], path: &str) {
        if list.is_empty() {
            return;
        }
        check_template_count(list.len(), path, &mut self.errs);
        let mut names = Vec::with_capacity(list.len());
        for (i, t) in list.iter().enumerate() {
            let p = index(path, i);
            check_dns_label(&t.name, &child(&p, "name"), &mut self.errs);
            let paths = GroupPaths::under(&p);
            let view = composite_template_view(t);
            check_group_structure(&view, &paths, &mut self.errs);
            check_group_semantics(&view, &paths, &mut self.errs);
            self.priorities.push(view.priority);
            let pods = t.pod_group_templates.as_deref().unwrap_or_default();
            let composites = t
                .composite_pod_group_templates
                .as_deref()
                .unwrap_or_default();
            if pods.is_empty() && composites.is_empty() {
                self.errs.push(FieldError::invalid(
                    &p,
                    t.name.as_str(),
                    "must have at least one child PodGroupTemplate or CompositePodGroupTemplate",
                ));
            }
            if !pods.is_empty() {
                self.pod_templates(pods, &child(&p, "podGroupTemplates"));
            }
            self.composite_templates(composites, &child(&p, "compositePodGroupTemplates"));
            names.push(p);
        }
        let keyed: Vec<(&str, &str)> = list
            .iter()
            .zip(&names)
            .map(|(t, p)| (t.name.as_str(), p.as_str()))
            .collect();
        check_list_unique(&keyed, &mut self.errs);
    }
}

fn immutable_pod_templates(
    new: &[v1beta1::PodGroupTemplate],
    old: &[v1beta1::PodGroupTemplate],
    path: &str,
    errs: &mut Errors,
) {
    for (i, n) in new.iter().enumerate() {
        let p = index(path, i);
        match old.iter().find(|o| o.name == n.name) {
            Some(o) => PodFields::of_template(n).check_update(
                &PodFields::of_template(o),
                &GroupPaths::under(&p),
                errs,
            ),
            None => errs.push(FieldError::forbidden(
                &p,
                format!(
                    "template {:?} cannot be added after the Workload is created",
                    n.name
                ),
            )),
        }
    }
    for o in old {
        if !new.iter().any(|n| n.name == o.name) {
            errs.push(FieldError::forbidden(
                path,
                format!(
                    "template {:?} cannot be removed after the Workload is created",
                    o.name
                ),
            ));
        }
    }
}

/// Composite templates are immutable, except `gang.minCount` of the pod
/// group templates nested in them.
fn immutable_composite_templates(
    new: &[v1beta1::CompositePodGroupTemplate],
    old: &[v1beta1::CompositePodGroupTemplate],
    path: &str,
    errs: &mut Errors,
) {
    for (i, n) in new.iter().enumerate() {
        let p = index(path, i);
        let Some(o) = old.iter().find(|o| o.name == n.name) else {
            errs.push(FieldError::forbidden(
                &p,
                format!(
                    "template {:?} cannot be added after the Workload is created",
                    n.name
                ),
            ));
            continue;
        };
        let paths = GroupPaths::under(&p);
        check_composite_policy_update(
            composite_template_view(n).policy,
            composite_template_view(o).policy,
            &n.scheduling_policy,
            &o.scheduling_policy,
            &paths.policy,
            errs,
        );
        check_immutable(
            &n.disruption_mode,
            &o.disruption_mode,
            &paths.disruption,
            errs,
        );
        check_immutable(
            &n.scheduling_constraints,
            &o.scheduling_constraints,
            &paths.constraints,
            errs,
        );
        check_immutable(
            &n.priority_class_name,
            &o.priority_class_name,
            &paths.class,
            errs,
        );
        check_immutable(&n.priority, &o.priority, &paths.priority, errs);
        check_immutable(
            &n.preemption_policy,
            &o.preemption_policy,
            &paths.preemption,
            errs,
        );
        immutable_pod_templates(
            n.pod_group_templates.as_deref().unwrap_or_default(),
            o.pod_group_templates.as_deref().unwrap_or_default(),
            &child(&p, "podGroupTemplates"),
            errs,
        );
        immutable_composite_templates(
            n.composite_pod_group_templates
                .as_deref()
                .unwrap_or_default(),
            o.composite_pod_group_templates
                .as_deref()
                .unwrap_or_default(),
            &child(&p, "compositePodGroupTemplates"),
            errs,
        );
    }
    for o in old {
        if !new.iter().any(|n| n.name == o.name) {
            errs.push(FieldError::forbidden(
                path,
                format!(
                    "template {:?} cannot be removed after the Workload is created",
                    o.name
                ),
            ));
        }
    }
}

/// A composite policy is immutable as a whole (`minGroupCount` included);
/// a change of variant also names the variant fields.
fn check_composite_policy_update<T: PartialEq + serde::Serialize>(
    new_view: Option<PolicyView>,
    old_view: Option<PolicyView>,
    new: &T,
    old: &T,
    path: &str,
    errs: &mut Errors,
) {
    if !check_policy_variant(new_view, old_view, path, errs) {
        check_immutable(new, old, path, errs);
    }
}

// === objects: PodGroup, CompositePodGroup ===

/// Validates a PodGroup (`scheduling.k8s.io/v1beta1`), and with `old` the
/// update: the group rules, `workloadRef` and parent name formats, and
/// every spec field immutable except `schedulingPolicy.gang.minCount`.
pub fn validate_pod_group(
    new: &v1beta1::PodGroup,
    old: Option<&v1beta1::PodGroup>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = &new.spec;
    let paths = GroupPaths::under("spec");
    let fields = PodFields::of_spec(spec);
    let view = fields.view();
    check_group_structure(&view, &paths, &mut errs);
    check_group_semantics(&view, &paths, &mut errs);
    if let Some(r) = &spec.workload_ref {
        check_dns_label(&r.template_name, "spec.workloadRef.templateName", &mut errs);
        rules::check_dns_subdomain(&r.workload_name, "spec.workloadRef.workloadName", &mut errs);
    }
    if let Some(parent) = &spec.parent_composite_pod_group_name {
        rules::check_dns_subdomain(parent, "spec.parentCompositePodGroupName", &mut errs);
    }
    if let Some(old) = old {
        // A PodGroup also names the policy block when its variant changes.
        let (n, o) = (
            Some(pod_policy_view(&spec.scheduling_policy)),
            Some(pod_policy_view(&old.spec.scheduling_policy)),
        );
        if rules::policy_variant_changed(n, o) {
            check_immutable(
                &n.and_then(|v| v.option()),
                &o.and_then(|v| v.option()),
                &paths.policy,
                &mut errs,
            );
        }
        fields.check_update(&PodFields::of_spec(&old.spec), &paths, &mut errs);
        check_immutable(
            &spec.workload_ref,
            &old.spec.workload_ref,
            "spec.workloadRef",
            &mut errs,
        );
        check_immutable(
            &spec.parent_composite_pod_group_name,
            &old.spec.parent_composite_pod_group_name,
            "spec.parentCompositePodGroupName",
            &mut errs,
        );
        drop_too_many_under_immutable(&mut errs);
    }
    errs
}

/// Validates a CompositePodGroup (`scheduling.k8s.io/v1alpha3`), and with
/// `old` the update: the group rules, the required `workloadRef`, and every
/// spec field immutable (`minGroupCount` included).
pub fn validate_composite_pod_group(
    new: &v1alpha3::CompositePodGroup,
    old: Option<&v1alpha3::CompositePodGroup>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = &new.spec;
    let paths = GroupPaths::under("spec");
    let view = composite_spec_view(spec);
    check_group_structure(&view, &paths, &mut errs);
    check_group_semantics(&view, &paths, &mut errs);
    let wref = &spec.workload_ref;
    if wref.template_name.is_empty() && wref.workload_name.is_empty() {
        // Absent (it decodes as empty): the reference itself is missing.
        errs.push(FieldError::required(
            "spec.workloadRef",
            "a CompositePodGroup must name the Workload template it was created from",
        ));
    } else {
        check_dns_label(
            &wref.template_name,
            "spec.workloadRef.templateName",
            &mut errs,
        );
        rules::check_dns_subdomain(
            &wref.workload_name,
            "spec.workloadRef.workloadName",
            &mut errs,
        );
    }
    if let Some(parent) = &spec.parent_composite_pod_group_name {
        rules::check_dns_subdomain(parent, "spec.parentCompositePodGroupName", &mut errs);
    }
    if let Some(old) = old {
        let o = &old.spec;
        // The policy is immutable as a whole and reported only there: the
        // API server's check on the block short-circuits the variant fields
        // (upstream `TestDeclarativeValidateUpdate` for CompositePodGroup,
        // "invalid schedulingPolicy update").
        check_immutable(
            &spec.scheduling_policy,
            &o.scheduling_policy,
            &paths.policy,
            &mut errs,
        );
        check_immutable(
            &spec.disruption_mode,
            &o.disruption_mode,
            &paths.disruption,
            &mut errs,
        );
        check_immutable(
            &spec.scheduling_constraints,
            &o.scheduling_constraints,
            &paths.constraints,
            &mut errs,
        );
        check_immutable(
            &spec.priority_class_name,
            &o.priority_class_name,
            &paths.class,
            &mut errs,
        );
        check_immutable(&spec.priority, &o.priority, &paths.priority, &mut errs);
        check_immutable(
            &spec.preemption_policy,
            &o.preemption_policy,
            &paths.preemption,
            &mut errs,
        );
        check_immutable(
            &spec.workload_ref,
            &o.workload_ref,
            "spec.workloadRef",
            &mut errs,
        );
        check_immutable(
            &spec.parent_composite_pod_group_name,
            &o.parent_composite_pod_group_name,
            "spec.parentCompositePodGroupName",
            &mut errs,
        );
        drop_too_many_under_immutable(&mut errs);
    }
    errs
}

// === PriorityClass references ===

/// A PriorityClass an object names, and where; with the explicit
/// `priority` set beside it, which must equal the class's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PriorityClassRef {
    /// Field path of the `priorityClassName`.
    pub path: String,
    /// The class name.
    pub name: String,
    /// The explicit `priority` beside the class name, if any.
    pub priority: Option<i32>,
    /// Field path of that `priority`.
    pub priority_path: String,
}

impl PriorityClassRef {
    /// The reference of the group (or template) at `base` (`spec`,
    /// `spec.podGroupTemplates[0]`, ...), if it names a class.
    fn at(base: &str, class: Option<&String>, priority: Option<i32>) -> Option<Self> {
        class.map(|name| Self {
            path: child(base, "priorityClassName"),
            name: name.clone(),
            priority,
            priority_path: child(base, "priority"),
        })
    }
}

/// The PriorityClasses a Workload names, in template order, for the
/// admission webhook to check against its cache.
pub fn workload_priority_classes(w: &v1beta1::Workload) -> Vec<PriorityClassRef> {
    fn composite(
        t: &v1beta1::CompositePodGroupTemplate,
        path: &str,
        out: &mut Vec<PriorityClassRef>,
    ) {
        out.extend(PriorityClassRef::at(
            path,
            t.priority_class_name.as_ref(),
            t.priority,
        ));
        pods(
            t.pod_group_templates.as_deref().unwrap_or_default(),
            &child(path, "podGroupTemplates"),
            out,
        );
        for (i, c) in t.composite_pod_group_templates.iter().flatten().enumerate() {
            composite(
                c,
                &index(&child(path, "compositePodGroupTemplates"), i),
                out,
            );
        }
    }
    fn pods(list: &[v1beta1::PodGroupTemplate], path: &str, out: &mut Vec<PriorityClassRef>) {
        for (i, t) in list.iter().enumerate() {
            out.extend(PriorityClassRef::at(
                &index(path, i),
                t.priority_class_name.as_ref(),
                t.priority,
            ));
        }
    }
    let mut out = Vec::new();
    pods(
        w.spec.pod_group_templates.as_deref().unwrap_or_default(),
        "spec.podGroupTemplates",
        &mut out,
    );
    for (i, t) in w
        .spec
        .composite_pod_group_templates
        .iter()
        .flatten()
        .enumerate()
    {
        composite(t, &index("spec.compositePodGroupTemplates", i), &mut out);
    }
    out
}

/// The PriorityClass a PodGroup names, if any.
pub fn pod_group_priority_classes(pg: &v1beta1::PodGroup) -> Vec<PriorityClassRef> {
    PriorityClassRef::at(
        "spec",
        pg.spec.priority_class_name.as_ref(),
        pg.spec.priority,
    )
    .into_iter()
    .collect()
}

/// The PriorityClass a CompositePodGroup names, if any.
pub fn composite_pod_group_priority_classes(
    cpg: &v1alpha3::CompositePodGroup,
) -> Vec<PriorityClassRef> {
    PriorityClassRef::at(
        "spec",
        cpg.spec.priority_class_name.as_ref(),
        cpg.spec.priority,
    )
    .into_iter()
    .collect()
}
