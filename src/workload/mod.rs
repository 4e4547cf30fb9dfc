//! The workload builder: compiles a controller's workload tree into
//! `Workload`, `PodGroup` and `CompositePodGroup` objects, and validates
//! them with one set of rules shared with admission.
//!
//! ```text
//!  WorkloadTree ──validate──▶ Vec<FieldError>   (user field paths)
//!      │ items: leaf ─────────▶ PodGroupTemplate
//!      │        with children ▶ CompositePodGroupTemplate
//!      ▼
//!  Builder::build_workload ──▶ Workload (scheduling.k8s.io/v1beta1), cached
//!      │
//!      ├─ new_pod_group(name, template) ──────────▶ PodGroup (v1beta1)
//!      └─ new_composite_pod_group(name, template) ▶ CompositePodGroup (v1alpha3)
//!
//!  validate_workload / validate_pod_group / validate_composite_pod_group
//!      ── the same rules over stored objects, for the admission webhook
//! ```
//!
//! A controller builds one [`WorkloadItem`] per logical component, with its
//! own defaults, the user's building blocks (each with the field path it came
//! from) and optional callbacks:
//!
//! ```
//! use kruntimes_scheduler::workload::{Builder, BuildOptions, ItemInput, PolicyOption, Sourced, ValidationInput, WorkloadItem, fill_min_count};
//! use k8s_openapi::api::scheduling::v1alpha3::{WorkloadPodGroupSchedulingPolicy, WorkloadPodGroupGangSchedulingPolicy};
//!
//! // A Job-like controller: `spec.scheduling.schedulingPolicy` is the user's
//! // block; an unset gang minCount defaults to the Job's parallelism.
//! let input = ItemInput {
//!     scheduling_policy: Some(Sourced::new(
//!         "spec.scheduling.schedulingPolicy",
//!         WorkloadPodGroupSchedulingPolicy {
//!             gang: Some(WorkloadPodGroupGangSchedulingPolicy { min_count: None }),
//!             ..Default::default()
//!         },
//!     )),
//!     ..Default::default()
//! };
//! let item = WorkloadItem::leaf("job").at("spec").with_input(input).with_callback(fill_min_count(4));
//! // Options allow nothing by default: the controller names what it supports.
//! let options = BuildOptions::new("my-job").allow_policies([PolicyOption::Basic, PolicyOption::Gang]);
//! let builder = Builder::new(item, options);
//! assert!(builder.validate(&ValidationInput::default()).is_empty());
//! let workload = builder.build_workload()?;
//! let pod_group = builder.new_pod_group("my-job-0", "job")?;
//! assert_eq!(pod_group.spec.scheduling_policy.gang.map(|g| g.min_count), Some(4));
//! # let _ = workload;
//! # Ok::<(), kruntimes_scheduler::workload::Error>(())
//! ```

mod build;
pub mod cli;
mod field;
mod options;
mod rules;
mod tree;
mod validate;

pub use build::{Builder, Group};
pub use field::{FieldError, FieldErrorKind};
pub use options::BuildOptions;
pub use rules::{
    DisruptionModeOption, HIGHEST_USER_DEFINABLE_PRIORITY, MAX_DEPTH, MAX_RESOURCE_CLAIMS,
    MAX_TEMPLATES, MAX_TOPOLOGY_CONSTRAINTS, PREEMPTION_POLICIES, PolicyOption, is_dns_label,
    is_dns_subdomain,
};
pub use tree::{
    Callback, CompositeBasicPolicy, CompositeGangPolicy, CompositeSchedulingPolicy, ItemConfig,
    ItemInput, Sourced, WorkloadItem, WorkloadTree, fill_min_count, fill_min_group_count,
};
pub use validate::{
    PriorityClassRef, ValidationInput, composite_pod_group_priority_classes,
    pod_group_priority_classes, validate_composite_pod_group, validate_pod_group,
    validate_workload, workload_priority_classes,
};

/// Errors of the workload builder.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The tree does not validate; the field errors say why.
    #[error("invalid workload: {}", join(.0))]
    Invalid(Vec<FieldError>),
    /// The Workload name is not a DNS subdomain.
    #[error("invalid Workload name {0:?}: must be a lowercase RFC 1123 subdomain")]
    InvalidName(String),
    /// No template of that name in the Workload.
    #[error("no template named {template:?} in Workload {workload:?}")]
    TemplateNotFound {
        /// Requested template.
        template: String,
        /// Workload name.
        workload: String,
    },
    /// The template exists but is of the other kind.
    #[error("template {template:?} is not a {expected}")]
    WrongTemplateKind {
        /// Requested template.
        template: String,
        /// The kind that was needed.
        expected: &'static str,
    },
    /// Internal: a builder without a compiled Workload and without a tree.
    #[error("no Workload to stamp groups from")]
    NotCompiled,
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn join(errs: &[FieldError]) -> String {
    errs.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod upstream_tests;
