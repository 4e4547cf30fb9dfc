//! Unit tests of the workload builder: every rule with its expected field
//! paths, for trees and for objects, plus the controller callback flow.

use k8s_openapi::api::scheduling::v1alpha3::{
    CompositePodGroup, WorkloadPodGroupBasicSchedulingPolicy, WorkloadPodGroupGangSchedulingPolicy,
    WorkloadPodGroupSchedulingPolicy,
};
use k8s_openapi::api::scheduling::v1beta1::{PodGroup, Workload};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use rstest::rstest;

use super::cli::TreeFile;
use super::*;

use FieldErrorKind::{Duplicate, Forbidden, Invalid, NotSupported, Required, TooMany};

// === fixtures ===

/// Errors of a tree written in the CLI format, as (path, kind).
fn tree_errors(yaml: &str) -> Vec<(String, FieldErrorKind)> {
    let file = match TreeFile::parse(yaml) {
        Ok(f) => f,
        Err(e) => panic!("fixture does not parse: {e}\n{yaml}"),
    };
    let (builder, mut errs) = file.builder();
    errs.extend(builder.validate(&ValidationInput::default()));
    errs.into_iter().map(|e| (e.path, e.kind)).collect()
}

fn update_errors(old: &str, new: &str) -> Vec<(String, FieldErrorKind)> {
    let parse = |y: &str| match TreeFile::parse(y) {
        Ok(f) => f.builder().0,
        Err(e) => panic!("fixture does not parse: {e}\n{y}"),
    };
    let (old, new) = (parse(old), parse(new));
    let input = ValidationInput { old: old.tree() };
    new.validate(&input)
        .into_iter()
        .map(|e| (e.path, e.kind))
        .collect()
}

fn parse<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
    match serde_saphyr::from_str(yaml) {
        Ok(v) => v,
        Err(e) => panic!("fixture does not parse: {e}\n{yaml}"),
    }
}

fn paths(errs: Vec<FieldError>) -> Vec<(String, FieldErrorKind)> {
    errs.into_iter().map(|e| (e.path, e.kind)).collect()
}

fn e(path: &str, kind: FieldErrorKind) -> (String, FieldErrorKind) {
    (path.to_owned(), kind)
}

fn leaf(body: &str) -> String {
    format!("name: w\nitems:\n  - name: a\n{}", indent(body, 4))
}

fn indent(s: &str, n: usize) -> String {
    s.lines()
        .map(|l| format!("{}{l}\n", " ".repeat(n)))
        .collect()
}

fn children(n: usize, depth_suffix: &str) -> String {
    (0..n)
        .map(|i| format!("      - name: c{i}{depth_suffix}\n"))
        .collect()
}

// === trees: one rule per case ===

#[rstest]
#[case::valid_gang(leaf("schedulingPolicy: {gang: {minCount: 2}}"), vec![])]
#[case::default_basic(leaf("priority: 5"), vec![])]
#[case::policy_both(
    leaf("schedulingPolicy: {basic: {}, gang: {minCount: 2}}"),
    vec![e("items[0].schedulingPolicy", Invalid)]
)]
#[case::policy_none(leaf("schedulingPolicy: {}"), vec![e("items[0].schedulingPolicy", Invalid)])]
#[case::min_count_zero(
    leaf("schedulingPolicy: {gang: {minCount: 0}}"),
    vec![e("items[0].schedulingPolicy.gang.minCount", Required)]
)]
#[case::min_count_negative(
    leaf("schedulingPolicy: {gang: {minCount: -1}}"),
    vec![e("items[0].schedulingPolicy.gang.minCount", Invalid)]
)]
#[case::min_count_unresolved(
    leaf("schedulingPolicy: {gang: {}}"),
    vec![e("items[0].schedulingPolicy.gang.minCount", Required)]
)]
#[case::min_count_from_pod_count(leaf("podCount: 3\nschedulingPolicy: {gang: {}}"), vec![])]
#[case::min_group_count_zero(
    "name: w\nitems:\n  - name: a\n    schedulingPolicy: {gang: {minGroupCount: 0}}\n    children:\n      - name: b\n".to_owned(),
    vec![e("items[0].schedulingPolicy.gang.minGroupCount", Required)]
)]
#[case::min_count_on_composite(
    "name: w\nitems:\n  - name: a\n    schedulingPolicy: {gang: {minCount: 2}}\n    children:\n      - name: b\n".to_owned(),
    vec![e("items[0].schedulingPolicy.gang.minCount", Forbidden)]
)]
#[case::min_group_count_on_leaf(
    leaf("schedulingPolicy: {gang: {minCount: 1, minGroupCount: 2}}"),
    vec![e("items[0].schedulingPolicy.gang.minGroupCount", Forbidden)]
)]
#[case::disruption_both(
    leaf("schedulingPolicy: {gang: {minCount: 1}}\ndisruptionMode: {all: {}, single: {}}"),
    vec![e("items[0].disruptionMode", Invalid)]
)]
#[case::disruption_none(leaf("disruptionMode: {}"), vec![e("items[0].disruptionMode", Invalid)])]
#[case::all_with_basic(leaf("disruptionMode: {all: {}}"), vec![e("items[0].disruptionMode.all", Invalid)])]
#[case::all_with_gang(leaf("schedulingPolicy: {gang: {minCount: 1}}\ndisruptionMode: {all: {}}"), vec![])]
#[case::two_topologies(
    leaf("schedulingConstraints: {topology: [{key: a}, {key: b}]}"),
    vec![e("items[0].schedulingConstraints.topology", TooMany)]
)]
#[case::bad_topology_key(
    leaf("schedulingConstraints: {topology: [{key: 'not a key'}]}"),
    vec![e("items[0].schedulingConstraints.topology[0].key", Invalid)]
)]
#[case::empty_topology_key(
    leaf("schedulingConstraints: {topology: [{key: ''}]}"),
    vec![e("items[0].schedulingConstraints.topology[0].key", Required)]
)]
#[case::five_claims(
    leaf("resourceClaims:\n- {name: a, resourceClaimName: x}\n- {name: b, resourceClaimName: x}\n- {name: c, resourceClaimName: x}\n- {name: d, resourceClaimName: x}\n- {name: e, resourceClaimName: x}"),
    vec![e("items[0].resourceClaims", TooMany)]
)]
#[case::claim_neither(leaf("resourceClaims: [{name: a}]"), vec![e("items[0].resourceClaims[0]", Invalid)])]
#[case::claim_both(
    leaf("resourceClaims: [{name: a, resourceClaimName: x, resourceClaimTemplateName: y}]"),
    vec![e("items[0].resourceClaims[0]", Invalid)]
)]
#[case::claim_duplicate(
    leaf("resourceClaims: [{name: a, resourceClaimName: x}, {name: a, resourceClaimTemplateName: y}]"),
    vec![e("items[0].resourceClaims[1]", Duplicate)]
)]
#[case::claim_bad_names(
    leaf("resourceClaims: [{name: A, resourceClaimName: 'x_y'}]"),
    vec![e("items[0].resourceClaims[0].name", Invalid), e("items[0].resourceClaims[0].resourceClaimName", Invalid)]
)]
#[case::claims_on_composite(
    "name: w\nitems:\n  - name: a\n    resourceClaims: [{name: a, resourceClaimName: x}]\n    children:\n      - name: b\n".to_owned(),
    vec![e("items[0].resourceClaims", Forbidden)]
)]
#[case::bad_preemption(leaf("preemptionPolicy: Sometimes"), vec![e("items[0].preemptionPolicy", NotSupported)])]
#[case::bad_priority_class(leaf("priorityClassName: High"), vec![e("items[0].priorityClassName", Invalid)])]
#[case::item_name_empty(leaf("priority: 1").replace("name: a", "name: ''"), vec![e("items[0].name", Required)])]
#[case::item_name_invalid(leaf("priority: 1").replace("name: a", "name: A_b"), vec![e("items[0].name", Invalid)])]
#[case::workload_name_invalid(leaf("priority: 1").replace("name: w", "name: W"), vec![e("name", Invalid)])]
#[case::duplicate_names(
    "name: w\nitems:\n  - name: a\n    children:\n      - name: b\n      - name: b\n".to_owned(),
    vec![e("items[0].children[1]", Duplicate)]
)]
#[case::duplicate_with_parent(
    "name: w\nitems:\n  - name: a\n    children:\n      - name: a\n".to_owned(),
    vec![e("items[0].children[0].name", Duplicate)]
)]
#[case::nine_children(
    format!("name: w\nitems:\n  - name: a\n    children:\n{}", children(9, "")),
    vec![e("items[0].children", TooMany)]
)]
#[case::eight_children(format!("name: w\nitems:\n  - name: a\n    children:\n{}", children(8, "")), vec![])]
#[case::nine_top_level(
    format!("name: w\nitems:\n{}", (0..9).map(|i| format!("  - name: t{i}\n")).collect::<String>()),
    vec![e("items", TooMany)]
)]
#[case::no_items("name: w\nitems: []\n".to_owned(), vec![e("items", Required)])]
#[case::mixed_top_level(
    "name: w\nitems:\n  - name: a\n  - name: b\n    children:\n      - name: c\n".to_owned(),
    vec![e("items", Forbidden)]
)]
#[case::depth_four(
    "name: w\nitems:\n- name: l1\n  children:\n  - name: l2\n    children:\n    - name: l3\n      children:\n      - name: l4\n".to_owned(),
    vec![]
)]
#[case::depth_five(
    "name: w\nitems:\n- name: l1\n  children:\n  - name: l2\n    children:\n    - name: l3\n      children:\n      - name: l4\n        children:\n        - name: l5\n".to_owned(),
    vec![e("items[0]", Invalid)]
)]
#[case::one_priority(
    "name: w\nitems:\n  - name: a\n    priorityClassName: high\n    children:\n      - name: b\n        priorityClassName: high\n      - name: c\n        priorityClassName: low\n".to_owned(),
    vec![e("items", Invalid)]
)]
#[case::one_priority_preemption_may_differ(
    "name: w\nitems:\n  - name: a\n    preemptionPolicy: Never\n    children:\n      - name: b\n        preemptionPolicy: PreemptLowerPriority\n".to_owned(),
    vec![]
)]
#[case::priority_too_high(leaf("priority: 1000000001"), vec![e("items[0].priority", Invalid)])]
#[case::priority_highest_user_definable(leaf("priority: 1000000000"), vec![])]
#[case::one_priority_unset_differs(
    "name: w\nitems:\n  - name: a\n    priority: 10\n    children:\n      - name: b\n".to_owned(),
    vec![e("items", Invalid)]
)]
#[case::policy_not_allowed(
    format!("allowedPolicies: [basic]\n{}", leaf("schedulingPolicy: {gang: {minCount: 1}}")),
    vec![e("items[0].schedulingPolicy", NotSupported)]
)]
#[case::default_policy_not_allowed(
    format!("allowedPolicies: [gang]\n{}", leaf("priority: 1")),
    vec![e("items[0].schedulingPolicy", NotSupported)]
)]
#[case::disruption_not_allowed(
    format!("allowedDisruptionModes: [single]\n{}", leaf("schedulingPolicy: {gang: {minCount: 1}}\ndisruptionMode: {all: {}}")),
    vec![e("items[0].disruptionMode", NotSupported)]
)]
#[case::nothing_allowed(
    format!("allowedPolicies: []\n{}", leaf("priority: 1")),
    vec![e("items[0].schedulingPolicy", NotSupported)]
)]
#[case::owner_incomplete(
    format!("owner: {{apiVersion: batch/v1, kind: Job, name: j}}\n{}", leaf("priority: 1")),
    vec![e("owner.uid", Required)]
)]
#[case::owner_name_not_a_path_segment(
    format!("owner: {{apiVersion: batch/v1, kind: Job, name: 'a/b', uid: u}}\n{}", leaf("priority: 1")),
    vec![e("owner.name", Invalid)]
)]
#[case::owner_group_not_a_subdomain(
    format!("owner: {{apiVersion: Batch_x/v1, kind: Job, name: j, uid: u}}\n{}", leaf("priority: 1")),
    vec![e("owner.apiVersion", Invalid)]
)]
#[case::owner_core_group(
    format!("owner: {{apiVersion: v1, kind: Pod, name: p, uid: u}}\n{}", leaf("priority: 1")),
    vec![]
)]
fn tree_rules(#[case] yaml: String, #[case] expected: Vec<(String, FieldErrorKind)>) {
    assert_eq!(tree_errors(&yaml), expected, "\n{yaml}");
}

#[test]
fn unknown_fields_are_rejected() {
    let Err(err) = TreeFile::parse(&leaf("schedulingPolicy: {gang: {minCont: 2}}")) else {
        panic!("typo accepted");
    };
    assert!(err.to_string().contains("minCont"), "{err}");
}

#[test]
fn declarative_validation_can_be_switched_off() {
    let policy = WorkloadPodGroupSchedulingPolicy {
        basic: Some(WorkloadPodGroupBasicSchedulingPolicy(serde_json::json!({}))),
        gang: Some(WorkloadPodGroupGangSchedulingPolicy { min_count: Some(2) }),
    };
    let item = WorkloadItem::leaf("job").at("spec").with_input(ItemInput {
        scheduling_policy: Some(Sourced::new("spec.scheduling.schedulingPolicy", policy)),
        priority_class_name: Some(Sourced::new(
            "spec.priorityClassName",
            "Bad_Name".to_owned(),
        )),
        ..ItemInput::default()
    });
    let mut options = BuildOptions::new("job");
    let on = Builder::new(item.clone(), options.clone()).validate(&ValidationInput::default());
    assert_eq!(
        paths(on),
        vec![
            e("spec.scheduling.schedulingPolicy", Invalid),
            e("spec.priorityClassName", Invalid)
        ]
    );
    // Built-in controller: structure is the API server's job; policy checks remain.
    options.disable_declarative_validation = true;
    options.allowed_policies = vec![PolicyOption::Basic];
    let off = Builder::new(item, options).validate(&ValidationInput::default());
    assert_eq!(off, vec![]);
}

// === trees: updates ===

const ZONE_RACK: &str = "name: w
items:
  - name: root
    schedulingPolicy: {gang: {minGroupCount: 2}}
    schedulingConstraints: {topology: [{key: zone}]}
    children:
      - name: workers
        schedulingPolicy: {gang: {minCount: 8}}
      - name: driver
        schedulingPolicy: {gang: {minCount: 1}}
";

#[rstest]
#[case::unchanged(ZONE_RACK.to_owned(), vec![])]
#[case::min_count_is_mutable(ZONE_RACK.replace("minCount: 8", "minCount: 6"), vec![])]
#[case::min_group_count_is_not(
    ZONE_RACK.replace("minGroupCount: 2", "minGroupCount: 1"),
    vec![e("items[0].schedulingPolicy", Invalid)]
)]
#[case::policy_variant_is_not(
    ZONE_RACK.replace("{gang: {minCount: 1}}", "{basic: {}}"),
    vec![
        e("items[0].children[1].schedulingPolicy.basic", Invalid),
        e("items[0].children[1].schedulingPolicy.gang", Invalid),
    ]
)]
#[case::topology_is_not(
    ZONE_RACK.replace("key: zone", "key: region"),
    vec![e("items[0].schedulingConstraints", Invalid)]
)]
#[case::priority_is_not(
    ZONE_RACK.replace("      - name: driver\n", "      - name: driver\n        priority: 3\n"),
    vec![e("items", Invalid), e("items[0].children[1].priority", Invalid)]
)]
#[case::item_added(
    format!("{ZONE_RACK}      - name: extra\n"),
    vec![e("items[0].children[2]", Forbidden)]
)]
#[case::item_removed(
    ZONE_RACK.replace("      - name: driver\n        schedulingPolicy: {gang: {minCount: 1}}\n", ""),
    vec![e("items[0].children", Forbidden)]
)]
#[case::topology_list_reported_once(
    ZONE_RACK.replace("[{key: zone}]", "[{key: zone}, {key: rack}]"),
    vec![e("items[0].schedulingConstraints", Invalid)]
)]
fn tree_updates(#[case] new: String, #[case] expected: Vec<(String, FieldErrorKind)>) {
    assert_eq!(update_errors(ZONE_RACK, &new), expected, "\n{new}");
}

// === controllers ===

/// A Job-like controller: the user's `spec.scheduling` blocks, the
/// controller's default (`basic`), and a callback filling `minCount` from
/// `spec.parallelism`.
fn job_item(policy: Option<WorkloadPodGroupSchedulingPolicy>, parallelism: i32) -> WorkloadItem {
    WorkloadItem::leaf("job")
        .at("spec")
        .with_defaults(ItemConfig {
            scheduling_policy: Some(WorkloadPodGroupSchedulingPolicy {
                basic: Some(WorkloadPodGroupBasicSchedulingPolicy(serde_json::json!({}))),
                gang: None,
            }),
            priority_class_name: Some("batch-low".to_owned()),
            ..ItemConfig::default()
        })
        .with_input(ItemInput {
            scheduling_policy: policy.map(|p| Sourced::new("spec.scheduling.schedulingPolicy", p)),
            ..ItemInput::default()
        })
        .with_callback(fill_min_count(parallelism))
}

/// Options for a controller that supports both policies and both modes.
fn opts(name: &str) -> BuildOptions {
    BuildOptions::new(name)
        .allow_policies([PolicyOption::Basic, PolicyOption::Gang])
        .allow_disruption_modes([DisruptionModeOption::Single, DisruptionModeOption::All])
}

fn gang(min_count: Option<i32>) -> WorkloadPodGroupSchedulingPolicy {
    WorkloadPodGroupSchedulingPolicy {
        basic: None,
        gang: Some(WorkloadPodGroupGangSchedulingPolicy { min_count }),
    }
}

fn job_owner() -> OwnerReference {
    OwnerReference {
        api_version: "batch/v1".to_owned(),
        kind: "Job".to_owned(),
        name: "train".to_owned(),
        uid: "0b5e9c1e-1111-4222-8333-944455566677".to_owned(),
        ..OwnerReference::default()
    }
}

#[test]
fn job_callback_fills_min_count_from_parallelism() -> Result<()> {
    let options = opts("train").in_namespace("ml").owned_by(job_owner());
    let builder = Builder::new(job_item(Some(gang(None)), 5), options);
    assert_eq!(builder.validate(&ValidationInput::default()), vec![]);
    let workload = builder.build_workload()?;
    let template = &workload
        .spec
        .pod_group_templates
        .as_deref()
        .unwrap_or_default()[0];
    assert_eq!(
        template
            .scheduling_policy
            .gang
            .as_ref()
            .map(|g| g.min_count),
        Some(5)
    );
    assert_eq!(template.priority_class_name.as_deref(), Some("batch-low"));

    let pg = builder.new_pod_group("train-0", "job")?;
    assert_eq!(pg.spec.scheduling_policy.gang.map(|g| g.min_count), Some(5));
    assert_eq!(pg.spec.priority_class_name.as_deref(), Some("batch-low"));
    assert_eq!(pg.spec.parent_composite_pod_group_name, None);
    let wref = pg
        .spec
        .workload_ref
        .as_ref()
        .map(|r| (r.workload_name.as_str(), r.template_name.as_str()));
    assert_eq!(wref, Some(("train", "job")));
    assert_eq!(pg.metadata.namespace.as_deref(), Some("ml"));
    let owners = pg.metadata.owner_references.unwrap_or_default();
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].controller, Some(true));
    assert_eq!(owners[0].name, "train");
    assert_eq!(
        validate_pod_group(&builder.new_pod_group("train-0", "job")?, None),
        vec![]
    );
    Ok(())
}

#[test]
fn options_allow_nothing_by_default() {
    // A controller that states nothing supports nothing: even the default
    // `basic` policy of the Job-like item is refused, and so is a mode.
    let builder = Builder::new(job_item(None, 5), BuildOptions::new("train"));
    assert_eq!(
        paths(builder.validate(&ValidationInput::default())),
        vec![e("spec.schedulingPolicy", NotSupported)]
    );
    assert!(matches!(builder.build_workload(), Err(Error::Invalid(_))));
    let gang_only = BuildOptions::new("train").allow_policies([PolicyOption::Gang]);
    let item = job_item(Some(gang(None)), 5).with_defaults(ItemConfig {
        disruption_mode: Some(
            k8s_openapi::api::scheduling::v1alpha3::WorkloadPodGroupDisruptionMode {
                all: Some(Default::default()),
                single: None,
            },
        ),
        ..ItemConfig::default()
    });
    let errs = Builder::new(item.clone(), gang_only.clone()).validate(&ValidationInput::default());
    assert_eq!(
        errs.iter().map(ToString::to_string).collect::<Vec<_>>(),
        vec![r#"spec.disruptionMode: Unsupported value: "all": no values are supported"#]
    );
    let both = gang_only.allow_disruption_modes([DisruptionModeOption::All]);
    assert_eq!(
        Builder::new(item, both).validate(&ValidationInput::default()),
        vec![]
    );
    // The tree file keeps its own documented default: every option.
    let (builder, errs) = TreeFile::parse(&leaf("priority: 1"))
        .map(|f| f.builder())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(errs, vec![]);
    assert_eq!(
        builder.options().allowed_policies,
        cli::TREE_FILE_DEFAULT_POLICIES.to_vec()
    );
    assert_eq!(
        builder.options().allowed_disruption_modes,
        cli::TREE_FILE_DEFAULT_DISRUPTION_MODES.to_vec()
    );
}

#[test]
fn job_user_min_count_wins_over_parallelism() -> Result<()> {
    let builder = Builder::new(job_item(Some(gang(Some(2))), 5), opts("train"));
    let pg = builder.new_pod_group("p", "job")?;
    assert_eq!(pg.spec.scheduling_policy.gang.map(|g| g.min_count), Some(2));
    Ok(())
}

#[test]
fn job_without_scheduling_stays_basic() -> Result<()> {
    let builder = Builder::new(job_item(None, 5), opts("train"));
    let pg = builder.new_pod_group("p", "job")?;
    assert!(pg.spec.scheduling_policy.basic.is_some());
    assert!(pg.spec.scheduling_policy.gang.is_none());
    Ok(())
}

#[test]
fn job_errors_point_at_the_jobs_fields() {
    let item = job_item(Some(gang(Some(0))), 5);
    let errs = Builder::new(item, opts("train")).validate(&ValidationInput::default());
    assert_eq!(
        errs.iter().map(ToString::to_string).collect::<Vec<_>>(),
        vec!["spec.scheduling.schedulingPolicy.gang.minCount: Required value"]
    );
    // build refuses an invalid tree
    let builder = Builder::new(job_item(Some(gang(Some(0))), 5), opts("train"));
    assert!(matches!(builder.build_workload(), Err(Error::Invalid(errs)) if errs.len() == 1));
}

#[test]
fn job_update_checks_immutability_against_stored_config() {
    let old: WorkloadTree = job_item(Some(gang(None)), 4).into();
    let scaled = Builder::new(job_item(Some(gang(None)), 8), opts("train"));
    assert_eq!(
        scaled.validate(&ValidationInput { old: Some(&old) }),
        vec![]
    );
    let switched = Builder::new(job_item(None, 8), opts("train"));
    // the policy came from the controller default now: reported at its default path
    assert_eq!(
        paths(switched.validate(&ValidationInput { old: Some(&old) })),
        vec![
            e("spec.schedulingPolicy.basic", Invalid),
            e("spec.schedulingPolicy.gang", Invalid),
        ]
    );
}

#[test]
fn build_is_cached_and_templates_are_looked_up() -> Result<()> {
    let file = TreeFile::parse(ZONE_RACK).map_err(|_| Error::NotCompiled)?;
    let (builder, errs) = file.builder();
    assert_eq!(errs, vec![]);
    let first: *const Workload = builder.build_workload()?;
    let second: *const Workload = builder.build_workload()?;
    assert_eq!(first, second);
    let pg = builder.new_pod_group("workers-0", "workers")?;
    assert_eq!(
        pg.spec.parent_composite_pod_group_name.as_deref(),
        Some("w-root")
    );
    let pg = builder.new_pod_group_with_parent("workers-1", "workers", Some("root-7"))?;
    assert_eq!(
        pg.spec.parent_composite_pod_group_name.as_deref(),
        Some("root-7")
    );
    let cpg = builder.new_composite_pod_group("root-7", "root")?;
    assert_eq!(
        cpg.spec.scheduling_policy.gang.map(|g| g.min_group_count),
        Some(2)
    );
    assert_eq!(cpg.spec.parent_composite_pod_group_name, None);
    assert!(matches!(
        builder.new_pod_group("x", "nope"),
        Err(Error::TemplateNotFound { .. })
    ));
    assert!(matches!(
        builder.new_pod_group("x", "root"),
        Err(Error::WrongTemplateKind { .. })
    ));
    assert!(matches!(
        builder.new_composite_pod_group("x", "workers"),
        Err(Error::WrongTemplateKind { .. })
    ));
    Ok(())
}

#[test]
fn existing_workload_builder_only_stamps() -> Result<()> {
    let parent = Builder::new(job_item(Some(gang(Some(3))), 3), opts("train"));
    let mut workload = parent.build_workload()?.clone();
    workload.metadata.namespace = Some("team".to_owned());
    // Even a Workload our rules reject is used as is: it is not recompiled.
    workload
        .spec
        .pod_group_templates
        .iter_mut()
        .flatten()
        .for_each(|t| t.priority = Some(7));
    let mut options = BuildOptions::new("");
    options.owner = Some(job_owner());
    let child = Builder::from_existing_workload(workload.clone(), options);
    assert_eq!(child.validate(&ValidationInput::default()), vec![]);
    assert_eq!(child.build_workload()?, &workload);
    let pg = child.new_pod_group("train-pg-0", "job")?;
    assert_eq!(pg.metadata.namespace.as_deref(), Some("team"));
    assert_eq!(pg.spec.priority, Some(7));
    assert_eq!(
        pg.spec.workload_ref.map(|r| r.workload_name),
        Some("train".to_owned())
    );
    assert_eq!(
        pg.metadata.owner_references.map(|o| o[0].kind.clone()),
        Some("Job".to_owned())
    );
    Ok(())
}

// === objects ===

const WORKLOAD: &str = "apiVersion: scheduling.k8s.io/v1beta1
kind: Workload
metadata: {name: w}
spec:
  podGroupTemplates:
    - name: a
      schedulingPolicy: {gang: {minCount: 2}}
      priorityClassName: high
    - name: b
      schedulingPolicy: {basic: {}}
      priorityClassName: high
";

const COMPOSITE_WORKLOAD: &str = "apiVersion: scheduling.k8s.io/v1beta1
kind: Workload
metadata: {name: w}
spec:
  compositePodGroupTemplates:
    - name: root
      schedulingPolicy: {gang: {minGroupCount: 2}}
      podGroupTemplates:
        - name: a
          schedulingPolicy: {gang: {minCount: 2}}
        - name: b
          schedulingPolicy: {gang: {minCount: 2}}
";

fn nested(depth: usize) -> String {
    // `depth` levels of composite templates with one pod group template at the bottom.
    let mut s = String::from(
        "apiVersion: scheduling.k8s.io/v1beta1\nkind: Workload\nmetadata: {name: w}\nspec:\n",
    );
    let mut pad = String::from("  ");
    s.push_str(&format!("{pad}compositePodGroupTemplates:\n"));
    for level in 1..=depth {
        s.push_str(&format!(
            "{pad}- name: c{level}\n{pad}  schedulingPolicy: {{basic: {{}}}}\n"
        ));
        pad.push_str("  ");
        if level < depth {
            s.push_str(&format!("{pad}compositePodGroupTemplates:\n"));
        }
    }
    s.push_str(&format!(
        "{pad}podGroupTemplates:\n{pad}- name: leaf\n{pad}  schedulingPolicy: {{basic: {{}}}}\n"
    ));
    s
}

#[rstest]
#[case::valid(WORKLOAD.to_owned(), vec![])]
#[case::valid_composite(COMPOSITE_WORKLOAD.to_owned(), vec![])]
#[case::no_templates(
    "apiVersion: scheduling.k8s.io/v1beta1\nkind: Workload\nmetadata: {name: w}\nspec: {}\n".to_owned(),
    vec![e("spec", Invalid)]
)]
#[case::both_lists(
    format!("{COMPOSITE_WORKLOAD}  podGroupTemplates:\n    - name: z\n      schedulingPolicy: {{basic: {{}}}}\n"),
    vec![e("spec", Invalid)]
)]
#[case::min_count_zero(
    WORKLOAD.replace("minCount: 2", "minCount: 0"),
    vec![e("spec.podGroupTemplates[0].schedulingPolicy.gang.minCount", Required)]
)]
#[case::min_group_count_zero(
    COMPOSITE_WORKLOAD.replace("minGroupCount: 2", "minGroupCount: 0"),
    vec![e("spec.compositePodGroupTemplates[0].schedulingPolicy.gang.minGroupCount", Required)]
)]
#[case::policy_both(
    WORKLOAD.replace("{basic: {}}", "{basic: {}, gang: {minCount: 1}}"),
    vec![e("spec.podGroupTemplates[1].schedulingPolicy", Invalid)]
)]
#[case::policy_none(
    WORKLOAD.replace("{basic: {}}", "{}"),
    vec![e("spec.podGroupTemplates[1].schedulingPolicy", Invalid)]
)]
#[case::all_with_basic(
    WORKLOAD.replace("      schedulingPolicy: {basic: {}}", "      schedulingPolicy: {basic: {}}\n      disruptionMode: {all: {}}"),
    vec![e("spec.podGroupTemplates[1].disruptionMode.all", Invalid)]
)]
#[case::composite_all_with_basic(
    COMPOSITE_WORKLOAD.replace("{gang: {minGroupCount: 2}}", "{basic: {}}\n      disruptionMode: {all: {}}"),
    vec![e("spec.compositePodGroupTemplates[0].disruptionMode.all", Invalid)]
)]
#[case::two_topologies(
    WORKLOAD.replace("      priorityClassName: high\n    - name: b", "      priorityClassName: high\n      schedulingConstraints: {topology: [{key: a}, {key: b}]}\n    - name: b"),
    vec![e("spec.podGroupTemplates[0].schedulingConstraints.topology", TooMany)]
)]
#[case::claim_neither(
    WORKLOAD.replace("    - name: b\n", "      resourceClaims: [{name: gpu}]\n    - name: b\n"),
    vec![e("spec.podGroupTemplates[0].resourceClaims[0]", Invalid)]
)]
#[case::nine_templates(
    format!("apiVersion: scheduling.k8s.io/v1beta1\nkind: Workload\nmetadata: {{name: w}}\nspec:\n  podGroupTemplates:\n{}",
        (0..9).map(|i| format!("    - name: t{i}\n      schedulingPolicy: {{basic: {{}}}}\n")).collect::<String>()),
    vec![e("spec.podGroupTemplates", TooMany)]
)]
#[case::duplicate_names(WORKLOAD.replace("name: b", "name: a"), vec![e("spec.podGroupTemplates[1]", Duplicate)])]
#[case::duplicate_across_levels(
    COMPOSITE_WORKLOAD.replace("name: b", "name: root"),
    vec![e("spec.compositePodGroupTemplates[0].podGroupTemplates[1].name", Duplicate)]
)]
#[case::depth_four(nested(3), vec![])]
#[case::depth_five(
    nested(4),
    vec![e("spec.compositePodGroupTemplates[0]", Invalid)]
)]
#[case::composite_without_children(
    COMPOSITE_WORKLOAD.split("      podGroupTemplates:").next().unwrap_or_default().to_owned(),
    vec![e("spec.compositePodGroupTemplates[0]", Invalid)]
)]
#[case::one_priority(
    WORKLOAD.replacen("priorityClassName: high", "priorityClassName: low", 1),
    vec![e("spec", Invalid)]
)]
#[case::bad_preemption(
    WORKLOAD.replace("priorityClassName: high", "priorityClassName: high\n      preemptionPolicy: Always"),
    vec![e("spec.podGroupTemplates[0].preemptionPolicy", NotSupported), e("spec.podGroupTemplates[1].preemptionPolicy", NotSupported)]
)]
#[case::controller_ref_incomplete(
    format!("{WORKLOAD}  controllerRef: {{kind: Job, name: ''}}\n"),
    vec![e("spec.controllerRef.name", Required)]
)]
fn workload_rules(#[case] yaml: String, #[case] expected: Vec<(String, FieldErrorKind)>) {
    let w: Workload = parse(&yaml);
    assert_eq!(paths(validate_workload(&w, None)), expected, "\n{yaml}");
}

#[rstest]
#[case::unchanged(WORKLOAD, WORKLOAD.to_owned(), vec![])]
#[case::min_count_is_mutable(WORKLOAD, WORKLOAD.replace("minCount: 2", "minCount: 5"), vec![])]
#[case::variant_is_not(
    WORKLOAD, WORKLOAD.replace("{basic: {}}", "{gang: {minCount: 1}}"),
    vec![
        e("spec.podGroupTemplates[1].schedulingPolicy.basic", Invalid),
        e("spec.podGroupTemplates[1].schedulingPolicy.gang", Invalid),
    ]
)]
#[case::priority_class_is_not(
    WORKLOAD, WORKLOAD.replace("priorityClassName: high", "priorityClassName: higher"),
    vec![e("spec.podGroupTemplates[0].priorityClassName", Invalid), e("spec.podGroupTemplates[1].priorityClassName", Invalid)]
)]
#[case::template_added(
    WORKLOAD, format!("{WORKLOAD}    - name: c\n      schedulingPolicy: {{basic: {{}}}}\n      priorityClassName: high\n"),
    vec![e("spec.podGroupTemplates[2]", Forbidden)]
)]
#[case::template_removed(
    WORKLOAD, WORKLOAD.replace("    - name: b\n      schedulingPolicy: {basic: {}}\n      priorityClassName: high\n", ""),
    vec![e("spec.podGroupTemplates", Forbidden)]
)]
#[case::nested_min_count_is_mutable(
    COMPOSITE_WORKLOAD, COMPOSITE_WORKLOAD.replacen("minCount: 2", "minCount: 3", 1), vec![]
)]
#[case::min_group_count_is_not(
    COMPOSITE_WORKLOAD, COMPOSITE_WORKLOAD.replace("minGroupCount: 2", "minGroupCount: 1"),
    vec![e("spec.compositePodGroupTemplates[0].schedulingPolicy", Invalid)]
)]
fn workload_updates(
    #[case] old: &str,
    #[case] new: String,
    #[case] expected: Vec<(String, FieldErrorKind)>,
) {
    let (old, new_w): (Workload, Workload) = (parse(old), parse(&new));
    assert_eq!(
        paths(validate_workload(&new_w, Some(&old))),
        expected,
        "\n{new}"
    );
}

const POD_GROUP: &str = "apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {name: pg}
spec:
  schedulingPolicy: {gang: {minCount: 4}}
  priorityClassName: high
  workloadRef: {workloadName: w, templateName: a}
";

#[rstest]
#[case::valid(POD_GROUP.to_owned(), vec![])]
#[case::min_count_zero(
    POD_GROUP.replace("minCount: 4", "minCount: 0"),
    vec![e("spec.schedulingPolicy.gang.minCount", Required)]
)]
#[case::all_with_basic(
    POD_GROUP.replace("{gang: {minCount: 4}}", "{basic: {}}\n  disruptionMode: {all: {}}"),
    vec![e("spec.disruptionMode.all", Invalid)]
)]
#[case::claim_both(
    format!("{POD_GROUP}  resourceClaims: [{{name: g, resourceClaimName: a, resourceClaimTemplateName: b}}]\n"),
    vec![e("spec.resourceClaims[0]", Invalid)]
)]
#[case::bad_workload_ref(
    POD_GROUP.replace("templateName: a", "templateName: ''"),
    vec![e("spec.workloadRef.templateName", Required)]
)]
fn pod_group_rules(#[case] yaml: String, #[case] expected: Vec<(String, FieldErrorKind)>) {
    let pg: PodGroup = parse(&yaml);
    assert_eq!(paths(validate_pod_group(&pg, None)), expected, "\n{yaml}");
}

#[rstest]
#[case::min_count_is_mutable(POD_GROUP.replace("minCount: 4", "minCount: 2"), vec![])]
#[case::variant_is_not(
    POD_GROUP.replace("{gang: {minCount: 4}}", "{basic: {}}"),
    vec![e("spec.schedulingPolicy", Invalid), e("spec.schedulingPolicy.basic", Invalid), e("spec.schedulingPolicy.gang", Invalid)]
)]
#[case::priority_class_is_not(
    POD_GROUP.replace("priorityClassName: high", "priorityClassName: low"),
    vec![e("spec.priorityClassName", Invalid)]
)]
#[case::workload_ref_is_not(POD_GROUP.replace("workloadName: w", "workloadName: v"), vec![e("spec.workloadRef", Invalid)])]
#[case::parent_is_not(
    format!("{POD_GROUP}  parentCompositePodGroupName: p\n"),
    vec![e("spec.parentCompositePodGroupName", Invalid)]
)]
fn pod_group_updates(#[case] new: String, #[case] expected: Vec<(String, FieldErrorKind)>) {
    let (old, new_pg): (PodGroup, PodGroup) = (parse(POD_GROUP), parse(&new));
    assert_eq!(
        paths(validate_pod_group(&new_pg, Some(&old))),
        expected,
        "\n{new}"
    );
}

const COMPOSITE: &str = "apiVersion: scheduling.k8s.io/v1alpha3
kind: CompositePodGroup
metadata: {name: cpg}
spec:
  schedulingPolicy: {gang: {minGroupCount: 2}}
  schedulingConstraints: {topology: [{key: topology.kubernetes.io/zone}]}
  workloadRef: {workloadName: w, templateName: root}
";

#[rstest]
#[case::valid(COMPOSITE.to_owned(), None, vec![])]
#[case::min_group_count_zero(
    COMPOSITE.replace("minGroupCount: 2", "minGroupCount: 0"), None,
    vec![e("spec.schedulingPolicy.gang.minGroupCount", Required)]
)]
#[case::two_topologies(
    COMPOSITE.replace("[{key: topology.kubernetes.io/zone}]", "[{key: a}, {key: b}]"), None,
    vec![e("spec.schedulingConstraints.topology", TooMany)]
)]
#[case::workload_ref_required(
    COMPOSITE.replace("workloadName: w", "workloadName: ''"), None,
    vec![e("spec.workloadRef.workloadName", Required)]
)]
#[case::min_group_count_is_immutable(
    COMPOSITE.replace("minGroupCount: 2", "minGroupCount: 3"), Some(COMPOSITE),
    vec![e("spec.schedulingPolicy", Invalid)]
)]
#[case::constraints_are_immutable(
    COMPOSITE.replace("zone", "region"), Some(COMPOSITE),
    vec![e("spec.schedulingConstraints", Invalid)]
)]
fn composite_pod_group_rules(
    #[case] yaml: String,
    #[case] old: Option<&str>,
    #[case] expected: Vec<(String, FieldErrorKind)>,
) {
    let new: CompositePodGroup = parse(&yaml);
    let old: Option<CompositePodGroup> = old.map(parse);
    assert_eq!(
        paths(validate_composite_pod_group(&new, old.as_ref())),
        expected,
        "\n{yaml}"
    );
}

#[test]
fn priority_class_references() {
    let w: Workload = parse(WORKLOAD);
    let refs = workload_priority_classes(&w);
    assert_eq!(
        refs,
        vec![
            PriorityClassRef {
                path: "spec.podGroupTemplates[0].priorityClassName".to_owned(),
                name: "high".to_owned(),
                priority: None,
                priority_path: "spec.podGroupTemplates[0].priority".to_owned(),
            },
            PriorityClassRef {
                path: "spec.podGroupTemplates[1].priorityClassName".to_owned(),
                name: "high".to_owned(),
                priority: None,
                priority_path: "spec.podGroupTemplates[1].priority".to_owned(),
            },
        ]
    );
    let pg: PodGroup = parse(POD_GROUP);
    assert_eq!(pod_group_priority_classes(&pg).len(), 1);
    let cpg: CompositePodGroup = parse(COMPOSITE);
    assert_eq!(composite_pod_group_priority_classes(&cpg), vec![]);
}

#[test]
fn error_messages_render_like_the_api_server() {
    let w: Workload = parse(&WORKLOAD.replace("minCount: 2", "minCount: -1"));
    let errs = validate_workload(&w, None);
    assert_eq!(
        errs[0].to_string(),
        "spec.podGroupTemplates[0].schedulingPolicy.gang.minCount: Invalid value: -1: must be greater than or equal to 1"
    );
    let w: Workload = parse(&WORKLOAD.replace("minCount: 2", "minCount: 0"));
    assert_eq!(
        validate_workload(&w, None)[0].to_string(),
        "spec.podGroupTemplates[0].schedulingPolicy.gang.minCount: Required value"
    );
    let w: Workload = parse(&WORKLOAD.replace("{basic: {}}", "{basic: {}, gang: {minCount: 1}}"));
    assert_eq!(
        validate_workload(&w, None)[0].to_string(),
        r#"spec.podGroupTemplates[1].schedulingPolicy: Invalid value: "{basic, gang}": must specify exactly one of: `basic`, `gang`"#
    );
    let w: Workload =
        parse(&WORKLOAD.replacen("priorityClassName: high", "priorityClassName: low", 1));
    assert_eq!(
        validate_workload(&w, None)[0].to_string(),
        "spec: Invalid value: null: detected multiple priority configurations: every template must have the same priorityClassName and priority"
    );
}
