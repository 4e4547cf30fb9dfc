//! What the controller asks of a build ([`BuildOptions`]), read by both
//! validation and compilation.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::rules::{DisruptionModeOption, PolicyOption};

/// How to build: identity of the Workload and what the controller supports.
///
/// Scheduling policies and disruption modes are *forbidden by default*: a
/// controller lists every option it supports, so an option added to the API
/// later stays rejected until the controller's allow-list names it.
///
/// ```
/// use kruntimes_scheduler::workload::{BuildOptions, DisruptionModeOption, PolicyOption};
///
/// let options = BuildOptions::new("train")
///     .allow_policies([PolicyOption::Gang])
///     .allow_disruption_modes([DisruptionModeOption::Single]);
/// assert_eq!(options.allowed_policies, vec![PolicyOption::Gang]);
/// assert!(BuildOptions::new("train").allowed_policies.is_empty());
/// ```
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// Workload name (a DNS subdomain).
    pub name: String,
    /// Namespace of the Workload and of the groups stamped from it.
    pub namespace: Option<String>,
    /// The controlling object (a Job, a JobSet, ...). It becomes the
    /// Workload's controller owner reference and `spec.controllerRef`, and
    /// the controller owner reference of every stamped group.
    pub owner: Option<OwnerReference>,
    /// Scheduling policies the controller supports; anything else is
    /// rejected. Empty (nothing allowed) unless set.
    pub allowed_policies: Vec<PolicyOption>,
    /// Disruption modes the controller supports; anything else is rejected.
    /// Empty (nothing allowed) unless set.
    pub allowed_disruption_modes: Vec<DisruptionModeOption>,
    /// Skip the structural rules of the building blocks (for built-in
    /// controllers whose API server already validated them). Controller
    /// policy, tree shape and update immutability are still checked.
    pub disable_declarative_validation: bool,
}

impl BuildOptions {
    /// Options for a Workload called `name` that allow *no* scheduling
    /// policy and *no* disruption mode: state what the controller supports
    /// with [`BuildOptions::allow_policies`] and
    /// [`BuildOptions::allow_disruption_modes`].
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            namespace: None,
            owner: None,
            allowed_policies: Vec::new(),
            allowed_disruption_modes: Vec::new(),
            disable_declarative_validation: false,
        }
    }

    /// Allows these scheduling policies (in addition to any already allowed).
    pub fn allow_policies(mut self, policies: impl IntoIterator<Item = PolicyOption>) -> Self {
        for p in policies {
            if !self.allowed_policies.contains(&p) {
                self.allowed_policies.push(p);
            }
        }
        self
    }

    /// Allows these disruption modes (in addition to any already allowed).
    pub fn allow_disruption_modes(
        mut self,
        modes: impl IntoIterator<Item = DisruptionModeOption>,
    ) -> Self {
        for m in modes {
            if !self.allowed_disruption_modes.contains(&m) {
                self.allowed_disruption_modes.push(m);
            }
        }
        self
    }

    /// Sets the namespace.
    pub fn in_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Sets the controlling object.
    pub fn owned_by(mut self, owner: OwnerReference) -> Self {
        self.owner = Some(owner);
        self
    }
}

/// `batch/v1` → `batch`; `v1` → none (core group).
pub(super) fn api_group(api_version: &str) -> Option<String> {
    api_version.split_once('/').map(|(g, _)| g.to_owned())
}
