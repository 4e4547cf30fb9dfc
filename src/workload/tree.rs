//! The controller-side description of a workload: a tree of items.
//!
//! Each [`WorkloadItem`] is one logical component of the controller's
//! workload. A leaf compiles to a `PodGroupTemplate`; an item with children
//! compiles to a `CompositePodGroupTemplate` over them.
//!
//! An item carries three layers of configuration, merged in this order:
//!
//! 1. `defaults` ([`ItemConfig`]): the controller's own defaults, applied to
//!    whatever the user left unset (block by block);
//! 2. `input` ([`ItemInput`]): the user's building blocks, each with the field
//!    path in the controller's API it came from ([`Sourced`]), so errors point
//!    at the user's own fields;
//! 3. `callbacks`: functions that adjust the merged [`ItemConfig`], e.g. fill
//!    an unset gang `minCount` from a Job's parallelism
//!    ([`fill_min_count`]).

use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::scheduling::v1alpha3::{
    WorkloadPodGroupDisruptionMode, WorkloadPodGroupResourceClaim,
    WorkloadPodGroupSchedulingConstraints, WorkloadPodGroupSchedulingPolicy,
};
use serde::{Deserialize, Serialize};

use super::field::child;
use super::rules::{ClaimView, DisruptionView, PolicyView, PriorityView};

/// `basic` of a composite scheduling policy (an empty object).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompositeBasicPolicy {}

/// `gang` of a composite scheduling policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompositeGangPolicy {
    /// Minimum number of child groups that must be schedulable together.
    /// Optional in the building block: the controller may fill it in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_group_count: Option<i32>,
}

/// The composite-level scheduling policy building block (the counterpart
/// of `WorkloadPodGroupSchedulingPolicy` for groups of groups). Exactly one
/// member must be set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompositeSchedulingPolicy {
    /// Child groups are admitted independently.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic: Option<CompositeBasicPolicy>,
    /// Child groups are admitted all-or-nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<CompositeGangPolicy>,
}

/// A value together with the field path (in the user's object) it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Sourced<T> {
    /// Field path, e.g. `spec.scheduling.schedulingPolicy`.
    pub path: String,
    /// The value.
    pub value: T,
}

impl<T> Sourced<T> {
    /// A value found at `path`.
    pub fn new(path: impl Into<String>, value: T) -> Self {
        Self {
            path: path.into(),
            value,
        }
    }
}

/// The scheduling configuration of one item: controller defaults, and the
/// result of merging defaults, user input and callbacks.
///
/// Leaf items use `scheduling_policy` and `resource_claims`; items with
/// children use `composite_scheduling_policy`. The other fields apply to both.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ItemConfig {
    /// Leaf scheduling policy (`basic` or `gang` with optional `minCount`).
    pub scheduling_policy: Option<WorkloadPodGroupSchedulingPolicy>,
    /// Composite scheduling policy (`basic` or `gang` with optional `minGroupCount`).
    pub composite_scheduling_policy: Option<CompositeSchedulingPolicy>,
    /// Topology constraints.
    pub scheduling_constraints: Option<WorkloadPodGroupSchedulingConstraints>,
    /// Disruption mode (`single` or `all`).
    pub disruption_mode: Option<WorkloadPodGroupDisruptionMode>,
    /// Shared resource claims (leaf only).
    pub resource_claims: Option<Vec<WorkloadPodGroupResourceClaim>>,
    /// PriorityClass name.
    pub priority_class_name: Option<String>,
    /// Numeric priority.
    pub priority: Option<i32>,
    /// `Never` or `PreemptLowerPriority`.
    pub preemption_policy: Option<String>,
}

/// The user's building blocks for one item, each with its field path.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ItemInput {
    /// Leaf scheduling policy.
    pub scheduling_policy: Option<Sourced<WorkloadPodGroupSchedulingPolicy>>,
    /// Composite scheduling policy.
    pub composite_scheduling_policy: Option<Sourced<CompositeSchedulingPolicy>>,
    /// Scheduling constraints.
    pub scheduling_constraints: Option<Sourced<WorkloadPodGroupSchedulingConstraints>>,
    /// Disruption mode.
    pub disruption_mode: Option<Sourced<WorkloadPodGroupDisruptionMode>>,
    /// Shared resource claims.
    pub resource_claims: Option<Sourced<Vec<WorkloadPodGroupResourceClaim>>>,
    /// PriorityClass name.
    pub priority_class_name: Option<Sourced<String>>,
    /// Numeric priority.
    pub priority: Option<Sourced<i32>>,
    /// Preemption policy.
    pub preemption_policy: Option<Sourced<String>>,
}

/// A callback adjusting an item's merged configuration.
pub type Callback = Arc<dyn Fn(&mut ItemConfig) + Send + Sync>;

/// A callback that fills an unset gang `minCount` (leaf) with `min_count`,
/// e.g. a Job's parallelism. It leaves a set value and `basic` alone.
pub fn fill_min_count(min_count: i32) -> Callback {
    Arc::new(move |cfg: &mut ItemConfig| {
        if let Some(gang) = cfg.scheduling_policy.as_mut().and_then(|p| p.gang.as_mut()) {
            gang.min_count.get_or_insert(min_count);
        }
    })
}

/// A callback that fills an unset composite gang `minGroupCount` with the
/// given number (typically the number of children).
pub fn fill_min_group_count(min_group_count: i32) -> Callback {
    Arc::new(move |cfg: &mut ItemConfig| {
        if let Some(gang) = cfg
            .composite_scheduling_policy
            .as_mut()
            .and_then(|p| p.gang.as_mut())
        {
            gang.min_group_count.get_or_insert(min_group_count);
        }
    })
}

/// One node of the workload tree.
#[derive(Clone, Default)]
pub struct WorkloadItem {
    /// Template name, a DNS label unique within the Workload.
    pub name: String,
    /// Field path of this component in the user's object (e.g. `spec` for a
    /// Job, `spec.replicatedJobs[1]` for one part of a JobSet). Errors about
    /// the item itself are reported at `<path>.name` / `<path>.children`, and
    /// errors about a block that only the controller set (no user input)
    /// at `<path>.<block>`.
    pub path: String,
    /// Controller defaults.
    pub defaults: ItemConfig,
    /// User input.
    pub input: ItemInput,
    /// Adjustments applied after merging defaults and input, in order.
    pub callbacks: Vec<Callback>,
    /// Child items; none for a leaf.
    pub children: Vec<WorkloadItem>,
}

impl fmt::Debug for WorkloadItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkloadItem")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("defaults", &self.defaults)
            .field("input", &self.input)
            .field("callbacks", &self.callbacks.len())
            .field("children", &self.children)
            .finish()
    }
}

impl WorkloadItem {
    /// A leaf item (compiles to a PodGroupTemplate).
    pub fn leaf(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    /// An item with children (compiles to a CompositePodGroupTemplate).
    pub fn composite(name: impl Into<String>, children: Vec<WorkloadItem>) -> Self {
        Self {
            name: name.into(),
            children,
            ..Self::default()
        }
    }

    /// Sets the item's field path.
    pub fn at(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }

    /// Sets the controller defaults.
    pub fn with_defaults(mut self, defaults: ItemConfig) -> Self {
        self.defaults = defaults;
        self
    }

    /// Sets the user input.
    pub fn with_input(mut self, input: ItemInput) -> Self {
        self.input = input;
        self
    }

    /// Adds a callback.
    pub fn with_callback(mut self, callback: Callback) -> Self {
        self.callbacks.push(callback);
        self
    }

    /// Whether this item compiles to a CompositePodGroupTemplate.
    pub fn is_composite(&self) -> bool {
        !self.children.is_empty()
    }

    /// Defaults, then user input block by block, then callbacks.
    ///
    /// A user `gang` block without a minimum inherits the default gang's
    /// minimum, if the controller default is also `gang`.
    pub fn merged_config(&self) -> ItemConfig {
        let d = &self.defaults;
        let i = &self.input;
        let mut scheduling_policy = pick(&i.scheduling_policy, &d.scheduling_policy);
        if let (Some(p), Some(dp)) = (scheduling_policy.as_mut(), d.scheduling_policy.as_ref())
            && let (Some(g), Some(dg)) = (p.gang.as_mut(), dp.gang.as_ref())
            && g.min_count.is_none()
        {
            g.min_count = dg.min_count;
        }
        let mut composite_scheduling_policy = pick(
            &i.composite_scheduling_policy,
            &d.composite_scheduling_policy,
        );
        if let (Some(p), Some(dp)) = (
            composite_scheduling_policy.as_mut(),
            d.composite_scheduling_policy.as_ref(),
        ) && let (Some(g), Some(dg)) = (p.gang.as_mut(), dp.gang.as_ref())
            && g.min_group_count.is_none()
        {
            g.min_group_count = dg.min_group_count;
        }
        let mut cfg = ItemConfig {
            scheduling_policy,
            composite_scheduling_policy,
            scheduling_constraints: pick(&i.scheduling_constraints, &d.scheduling_constraints),
            disruption_mode: pick(&i.disruption_mode, &d.disruption_mode),
            resource_claims: pick(&i.resource_claims, &d.resource_claims),
            priority_class_name: pick(&i.priority_class_name, &d.priority_class_name),
            priority: pick(&i.priority, &d.priority),
            preemption_policy: pick(&i.preemption_policy, &d.preemption_policy),
        };
        for cb in &self.callbacks {
            cb(&mut cfg);
        }
        cfg
    }

    /// Where a block of this item is reported: the user's path when the user
    /// set it, else `<path>.<field>`.
    pub(crate) fn block_path(&self, block: Block) -> String {
        let i = &self.input;
        let user = match block {
            Block::SchedulingPolicy => i
                .scheduling_policy
                .as_ref()
                .map(|s| &s.path)
                .or(i.composite_scheduling_policy.as_ref().map(|s| &s.path)),
            Block::SchedulingConstraints => i.scheduling_constraints.as_ref().map(|s| &s.path),
            Block::DisruptionMode => i.disruption_mode.as_ref().map(|s| &s.path),
            Block::ResourceClaims => i.resource_claims.as_ref().map(|s| &s.path),
            Block::PriorityClassName => i.priority_class_name.as_ref().map(|s| &s.path),
            Block::Priority => i.priority.as_ref().map(|s| &s.path),
            Block::PreemptionPolicy => i.preemption_policy.as_ref().map(|s| &s.path),
        };
        user.cloned()
            .unwrap_or_else(|| child(&self.path, block.field()))
    }
}

fn pick<T: Clone>(input: &Option<Sourced<T>>, default: &Option<T>) -> Option<T> {
    input
        .as_ref()
        .map(|s| s.value.clone())
        .or_else(|| default.clone())
}

/// The configuration blocks of an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Block {
    SchedulingPolicy,
    SchedulingConstraints,
    DisruptionMode,
    ResourceClaims,
    PriorityClassName,
    Priority,
    PreemptionPolicy,
}

impl Block {
    fn field(self) -> &'static str {
        match self {
            Self::SchedulingPolicy => "schedulingPolicy",
            Self::SchedulingConstraints => "schedulingConstraints",
            Self::DisruptionMode => "disruptionMode",
            Self::ResourceClaims => "resourceClaims",
            Self::PriorityClassName => "priorityClassName",
            Self::Priority => "priority",
            Self::PreemptionPolicy => "preemptionPolicy",
        }
    }
}

/// The whole tree: the top-level items of one Workload. All top-level items
/// must be of one kind (all leaves or all composites), because a Workload
/// sets exactly one of `podGroupTemplates` and `compositePodGroupTemplates`.
#[derive(Clone, Debug, Default)]
pub struct WorkloadTree {
    /// Top-level items.
    pub items: Vec<WorkloadItem>,
    /// Field path of the list of top-level items, for errors about the list.
    pub path: String,
}

impl From<WorkloadItem> for WorkloadTree {
    fn from(item: WorkloadItem) -> Self {
        let path = item.path.clone();
        Self {
            items: vec![item],
            path,
        }
    }
}

impl From<Vec<WorkloadItem>> for WorkloadTree {
    fn from(items: Vec<WorkloadItem>) -> Self {
        Self {
            items,
            path: String::new(),
        }
    }
}

// === views for the shared rules ===

pub(crate) fn leaf_policy_view(p: &WorkloadPodGroupSchedulingPolicy) -> PolicyView {
    PolicyView {
        basic: p.basic.is_some(),
        gang: p.gang.as_ref().map(|g| g.min_count),
    }
}

pub(crate) fn composite_policy_view(p: &CompositeSchedulingPolicy) -> PolicyView {
    PolicyView {
        basic: p.basic.is_some(),
        gang: p.gang.as_ref().map(|g| g.min_group_count),
    }
}

pub(crate) fn disruption_view(d: &WorkloadPodGroupDisruptionMode) -> DisruptionView {
    DisruptionView {
        all: d.all.is_some(),
        single: d.single.is_some(),
    }
}

pub(crate) fn claim_views(claims: &[WorkloadPodGroupResourceClaim]) -> Vec<ClaimView<'_>> {
    claims
        .iter()
        .map(|c| ClaimView {
            name: &c.name,
            claim: c.resource_claim_name.as_deref(),
            template: c.resource_claim_template_name.as_deref(),
        })
        .collect()
}

pub(crate) fn priority_view(cfg: &ItemConfig) -> PriorityView<'_> {
    PriorityView {
        class_name: cfg.priority_class_name.as_deref(),
        priority: cfg.priority,
        preemption_policy: cfg.preemption_policy.as_deref(),
    }
}
