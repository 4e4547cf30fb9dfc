//! Compiling a [`WorkloadTree`] into a Workload, and stamping PodGroups and
//! CompositePodGroups from its templates.

use std::sync::OnceLock;

use k8s_openapi::api::scheduling::{v1alpha3, v1beta1};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Map, Value};

use super::Error;
use super::options::{BuildOptions, api_group};
use super::rules::is_dns_subdomain;
use super::tree::{ItemConfig, WorkloadItem, WorkloadTree};
use super::validate::ValidationInput;

enum Source {
    Tree(WorkloadTree),
    Existing,
}

/// Validates and compiles a workload tree; stamps groups from the result.
pub struct Builder {
    source: Source,
    options: BuildOptions,
    compiled: OnceLock<v1beta1::Workload>,
}

impl Builder {
    /// A builder over a controller's tree (one item or several top-level items).
    pub fn new(tree: impl Into<WorkloadTree>, options: BuildOptions) -> Self {
        Self {
            source: Source::Tree(tree.into()),
            options,
            compiled: OnceLock::new(),
        }
    }

    /// A builder that only stamps groups from an existing Workload (compiled
    /// by a parent controller or written by hand). It never validates or
    /// recompiles: [`Builder::validate`] reports nothing and
    /// [`Builder::build_workload`] returns the given Workload. The groups get
    /// `options.owner` as their controller; `options.namespace` defaults to
    /// the Workload's namespace and `options.name` to its name.
    pub fn from_existing_workload(workload: v1beta1::Workload, mut options: BuildOptions) -> Self {
        if options.name.is_empty() {
            options.name = workload.metadata.name.clone().unwrap_or_default();
        }
        if options.namespace.is_none() {
            options.namespace = workload.metadata.namespace.clone();
        }
        let compiled = OnceLock::new();
        let _ = compiled.set(workload);
        Self {
            source: Source::Existing,
            options,
            compiled,
        }
    }

    /// The options this builder was made with.
    pub fn options(&self) -> &BuildOptions {
        &self.options
    }

    /// The tree, for a builder made with [`Builder::new`].
    pub fn tree(&self) -> Option<&WorkloadTree> {
        match &self.source {
            Source::Tree(t) => Some(t),
            Source::Existing => None,
        }
    }

    /// Validates the tree: building-block structure (unless switched off),
    /// tree shape, controller policy, and with `input.old` set, update
    /// immutability. Errors carry the user's field paths.
    pub fn validate(&self, input: &ValidationInput<'_>) -> Vec<super::FieldError> {
        match &self.source {
            Source::Tree(tree) => super::validate::validate_tree(tree, &self.options, input),
            Source::Existing => Vec::new(),
        }
    }

    /// Compiles the tree into a Workload (validating it as a create first),
    /// once; later calls return the cached result.
    pub fn build_workload(&self) -> Result<&v1beta1::Workload, Error> {
        if let Some(w) = self.compiled.get() {
            return Ok(w);
        }
        let Source::Tree(tree) = &self.source else {
            // An existing-Workload builder always has its Workload cached.
            return Err(Error::NotCompiled);
        };
        if !is_dns_subdomain(&self.options.name) {
            return Err(Error::InvalidName(self.options.name.clone()));
        }
        let strict = BuildOptions {
            disable_declarative_validation: false,
            ..self.options.clone()
        };
        let errs = super::validate::validate_tree(tree, &strict, &ValidationInput::default());
        if !errs.is_empty() {
            return Err(Error::Invalid(errs));
        }
        let workload = compile(tree, &self.options);
        Ok(self.compiled.get_or_init(|| workload))
    }

    /// The name [`Builder::new_pod_group`] and friends give the instance of
    /// `template` by default: `<workload>-<template>`.
    pub fn instance_name(&self, template: &str) -> String {
        format!("{}-{}", self.options.name, template)
    }

    /// Stamps a PodGroup called `name` from the PodGroupTemplate `template`.
    /// When the template sits under a composite template, the parent is the
    /// default instance of that composite ([`Builder::instance_name`]).
    pub fn new_pod_group(&self, name: &str, template: &str) -> Result<v1beta1::PodGroup, Error> {
        let found = self.find(template)?;
        let parent = found.parent.as_deref().map(|p| self.instance_name(p));
        self.pod_group(name, template, found, parent)
    }

    /// Like [`Builder::new_pod_group`] with an explicit parent
    /// CompositePodGroup name (or none).
    pub fn new_pod_group_with_parent(
        &self,
        name: &str,
        template: &str,
        parent: Option<&str>,
    ) -> Result<v1beta1::PodGroup, Error> {
        let found = self.find(template)?;
        self.pod_group(name, template, found, parent.map(str::to_owned))
    }

    /// Stamps a CompositePodGroup called `name` from the
    /// CompositePodGroupTemplate `template`; the parent, if any, is the
    /// default instance of the enclosing composite template.
    pub fn new_composite_pod_group(
        &self,
        name: &str,
        template: &str,
    ) -> Result<v1alpha3::CompositePodGroup, Error> {
        let found = self.find(template)?;
        let parent = found.parent.as_deref().map(|p| self.instance_name(p));
        self.composite_pod_group(name, template, found, parent)
    }

    /// One default instance of every template, parents before children:
    /// CompositePodGroups and PodGroups named by [`Builder::instance_name`].
    pub fn default_instances(&self) -> Result<Vec<Group>, Error> {
        let workload = self.build_workload()?;
        let mut out = Vec::new();
        let mut names = Vec::new();
        for t in workload.spec.composite_pod_group_templates.iter().flatten() {
            collect_composite_names(t, &mut names);
        }
        for t in workload.spec.pod_group_templates.iter().flatten() {
            names.push((false, t.name.clone()));
        }
        for (composite, template) in names {
            let name = self.instance_name(&template);
            if composite {
                out.push(Group::Composite(Box::new(
                    self.new_composite_pod_group(&name, &template)?,
                )));
            } else {
                out.push(Group::Pod(Box::new(self.new_pod_group(&name, &template)?)));
            }
        }
        Ok(out)
    }

    fn find(&self, template: &str) -> Result<Found, Error> {
        let workload = self.build_workload()?;
        let mut found = None;
        for t in workload.spec.pod_group_templates.iter().flatten() {
            if t.name == template {
                found = Some(Found {
                    parent: None,
                    template: FoundTemplate::Pod(t.clone()),
                });
            }
        }
        for t in workload.spec.composite_pod_group_templates.iter().flatten() {
            if found.is_none() {
                found = find_in_composite(t, template);
            }
        }
        found.ok_or_else(|| Error::TemplateNotFound {
            template: template.to_owned(),
            workload: self.options.name.clone(),
        })
    }

    fn meta(&self, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: self.options.namespace.clone(),
            owner_references: self
                .options
                .owner
                .clone()
                .map(|o| vec![controller_owner(o)]),
            ..ObjectMeta::default()
        }
    }

    fn pod_group(
        &self,
        name: &str,
        template: &str,
        found: Found,
        parent: Option<String>,
    ) -> Result<v1beta1::PodGroup, Error> {
        let FoundTemplate::Pod(t) = found.template else {
            return Err(Error::WrongTemplateKind {
                template: template.to_owned(),
                expected: "PodGroupTemplate",
            });
        };
        Ok(v1beta1::PodGroup {
            metadata: self.meta(name),
            spec: v1beta1::PodGroupSpec {
                disruption_mode: t.disruption_mode,
                parent_composite_pod_group_name: parent,
                preemption_policy: t.preemption_policy,
                priority: t.priority,
                priority_class_name: t.priority_class_name,
                resource_claims: t.resource_claims,
                scheduling_constraints: t.scheduling_constraints,
                scheduling_policy: t.scheduling_policy,
                workload_ref: Some(v1beta1::WorkloadReference {
                    template_name: t.name,
                    workload_name: self.options.name.clone(),
                }),
            },
            status: None,
        })
    }

    fn composite_pod_group(
        &self,
        name: &str,
        template: &str,
        found: Found,
        parent: Option<String>,
    ) -> Result<v1alpha3::CompositePodGroup, Error> {
        let FoundTemplate::Composite(t) = found.template else {
            return Err(Error::WrongTemplateKind {
                template: template.to_owned(),
                expected: "CompositePodGroupTemplate",
            });
        };
        let policy = v1alpha3::CompositePodGroupSchedulingPolicy {
            basic: t
                .scheduling_policy
                .basic
                .map(|_| v1alpha3::CompositeBasicSchedulingPolicy(empty())),
            gang: t
                .scheduling_policy
                .gang
                .map(|g| v1alpha3::CompositeGangSchedulingPolicy {
                    min_group_count: g.min_group_count,
                }),
        };
        let disruption_mode = t
            .disruption_mode
            .map(|d| v1alpha3::CompositeDisruptionMode {
                all: d.all.map(|_| v1alpha3::AllCompositeDisruptionMode(empty())),
                single: d
                    .single
                    .map(|_| v1alpha3::SingleCompositeDisruptionMode(empty())),
            });
        let scheduling_constraints =
            t.scheduling_constraints
                .map(|c| v1alpha3::CompositePodGroupSchedulingConstraints {
                    topology: c.topology.map(|ts| {
                        ts.into_iter()
                            .map(|k| v1alpha3::TopologyConstraint { key: k.key })
                            .collect()
                    }),
                });
        Ok(v1alpha3::CompositePodGroup {
            metadata: self.meta(name),
            spec: v1alpha3::CompositePodGroupSpec {
                disruption_mode,
                parent_composite_pod_group_name: parent,
                preemption_policy: t.preemption_policy,
                priority: t.priority,
                priority_class_name: t.priority_class_name,
                scheduling_constraints,
                scheduling_policy: policy,
                workload_ref: v1alpha3::WorkloadReference {
                    template_name: t.name,
                    workload_name: self.options.name.clone(),
                },
            },
            status: None,
        })
    }
}

/// A stamped group.
#[derive(Clone, Debug, PartialEq)]
pub enum Group {
    /// A PodGroup (`scheduling.k8s.io/v1beta1`).
    Pod(Box<v1beta1::PodGroup>),
    /// A CompositePodGroup (`scheduling.k8s.io/v1alpha3`).
    Composite(Box<v1alpha3::CompositePodGroup>),
}

struct Found {
    parent: Option<String>,
    template: FoundTemplate,
}

enum FoundTemplate {
    Pod(v1beta1::PodGroupTemplate),
    Composite(v1beta1::CompositePodGroupTemplate),
}

fn find_in_composite(t: &v1beta1::CompositePodGroupTemplate, name: &str) -> Option<Found> {
    if t.name == name {
        return Some(Found {
            parent: None,
            template: FoundTemplate::Composite(t.clone()),
        });
    }
    for c in t.pod_group_templates.iter().flatten() {
        if c.name == name {
            return Some(Found {
                parent: Some(t.name.clone()),
                template: FoundTemplate::Pod(c.clone()),
            });
        }
    }
    for c in t.composite_pod_group_templates.iter().flatten() {
        if c.name == name {
            return Some(Found {
                parent: Some(t.name.clone()),
                template: FoundTemplate::Composite(c.clone()),
            });
        }
        if let Some(found) = find_in_composite(c, name) {
            return Some(found);
        }
    }
    None
}

fn collect_composite_names(t: &v1beta1::CompositePodGroupTemplate, out: &mut Vec<(bool, String)>) {
    out.push((true, t.name.clone()));
    for c in t.composite_pod_group_templates.iter().flatten() {
        collect_composite_names(c, out);
    }
    for c in t.pod_group_templates.iter().flatten() {
        out.push((false, c.name.clone()));
    }
}

fn controller_owner(mut owner: OwnerReference) -> OwnerReference {
    owner.controller = Some(true);
    owner.block_owner_deletion.get_or_insert(true);
    owner
}

fn empty() -> Value {
    Value::Object(Map::new())
}

// === compile ===

fn compile(tree: &WorkloadTree, options: &BuildOptions) -> v1beta1::Workload {
    let mut pod_group_templates = Vec::new();
    let mut composite_pod_group_templates = Vec::new();
    for item in &tree.items {
        if item.is_composite() {
            composite_pod_group_templates.push(compile_composite(item));
        } else {
            pod_group_templates.push(compile_leaf(item));
        }
    }
    let controller_ref = options
        .owner
        .as_ref()
        .map(|o| v1beta1::TypedLocalObjectReference {
            api_group: api_group(&o.api_version),
            kind: o.kind.clone(),
            name: o.name.clone(),
        });
    v1beta1::Workload {
        metadata: ObjectMeta {
            name: Some(options.name.clone()),
            namespace: options.namespace.clone(),
            owner_references: options.owner.clone().map(|o| vec![controller_owner(o)]),
            ..ObjectMeta::default()
        },
        spec: v1beta1::WorkloadSpec {
            composite_pod_group_templates: non_empty(composite_pod_group_templates),
            controller_ref,
            pod_group_templates: non_empty(pod_group_templates),
        },
    }
}

fn non_empty<T>(v: Vec<T>) -> Option<Vec<T>> {
    if v.is_empty() { None } else { Some(v) }
}

fn compile_leaf(item: &WorkloadItem) -> v1beta1::PodGroupTemplate {
    let cfg = item.merged_config();
    let policy = cfg.scheduling_policy.as_ref();
    let scheduling_policy = v1beta1::PodGroupSchedulingPolicy {
        basic: policy
            .and_then(|p| p.basic.as_ref())
            .map(|_| v1beta1::BasicSchedulingPolicy(empty())),
        gang: policy
            .and_then(|p| p.gang.as_ref())
            .map(|g| v1beta1::GangSchedulingPolicy {
                min_count: g.min_count.unwrap_or(1),
            }),
    };
    let resource_claims = cfg.resource_claims.as_ref().and_then(|cs| {
        non_empty(
            cs.iter()
                .map(|c| v1beta1::PodGroupResourceClaim {
                    name: c.name.clone(),
                    resource_claim_name: c.resource_claim_name.clone(),
                    resource_claim_template_name: c.resource_claim_template_name.clone(),
                })
                .collect(),
        )
    });
    v1beta1::PodGroupTemplate {
        disruption_mode: disruption(&cfg),
        name: item.name.clone(),
        preemption_policy: cfg.preemption_policy.clone(),
        priority: cfg.priority,
        priority_class_name: cfg.priority_class_name.clone(),
        resource_claims,
        scheduling_constraints: topology(&cfg).map(|topology| {
            v1beta1::PodGroupSchedulingConstraints {
                topology: Some(topology),
            }
        }),
        scheduling_policy,
    }
}

fn compile_composite(item: &WorkloadItem) -> v1beta1::CompositePodGroupTemplate {
    let cfg = item.merged_config();
    let policy = cfg.composite_scheduling_policy.as_ref();
    let scheduling_policy = v1beta1::CompositePodGroupSchedulingPolicy {
        basic: policy
            .and_then(|p| p.basic.as_ref())
            .map(|_| v1beta1::CompositeBasicSchedulingPolicy(empty())),
        gang: policy.and_then(|p| p.gang.as_ref()).map(|g| {
            v1beta1::CompositeGangSchedulingPolicy {
                min_group_count: g.min_group_count.unwrap_or(1),
            }
        }),
    };
    let mut pods = Vec::new();
    let mut composites = Vec::new();
    for c in &item.children {
        if c.is_composite() {
            composites.push(compile_composite(c));
        } else {
            pods.push(compile_leaf(c));
        }
    }
    let disruption_mode = disruption(&cfg).map(|d| v1beta1::CompositeDisruptionMode {
        all: d.all.map(|_| v1beta1::AllCompositeDisruptionMode(empty())),
        single: d
            .single
            .map(|_| v1beta1::SingleCompositeDisruptionMode(empty())),
    });
    v1beta1::CompositePodGroupTemplate {
        composite_pod_group_templates: non_empty(composites),
        disruption_mode,
        name: item.name.clone(),
        pod_group_templates: non_empty(pods),
        preemption_policy: cfg.preemption_policy.clone(),
        priority: cfg.priority,
        priority_class_name: cfg.priority_class_name.clone(),
        scheduling_constraints: topology(&cfg).map(|topology| {
            v1beta1::CompositePodGroupSchedulingConstraints {
                topology: Some(topology),
            }
        }),
        scheduling_policy,
    }
}

fn disruption(cfg: &ItemConfig) -> Option<v1beta1::DisruptionMode> {
    cfg.disruption_mode
        .as_ref()
        .map(|d| v1beta1::DisruptionMode {
            all: d.all.as_ref().map(|_| v1beta1::AllDisruptionMode(empty())),
            single: d
                .single
                .as_ref()
                .map(|_| v1beta1::SingleDisruptionMode(empty())),
        })
}

fn topology(cfg: &ItemConfig) -> Option<Vec<v1beta1::TopologyConstraint>> {
    let keys = cfg.scheduling_constraints.as_ref()?.topology.as_ref()?;
    non_empty(
        keys.iter()
            .map(|t| v1beta1::TopologyConstraint { key: t.key.clone() })
            .collect(),
    )
}
