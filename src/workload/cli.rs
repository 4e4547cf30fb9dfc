//! The `workload` subcommand: compile and validate workload trees written
//! as YAML.
//!
//! # Tree file format
//!
//! One YAML document (field names are checked; unknown fields are errors):
//!
//! ```yaml
//! name: zone-rack                 # Workload name, a DNS subdomain (required)
//! namespace: default              # optional
//! owner:                          # optional: the controlling object; becomes the
//!   apiVersion: batch/v1          #   controller ownerReference of every object and
//!   kind: Job                     #   the Workload's spec.controllerRef
//!   name: trainer
//!   uid: 2c4c0f5e-0000-4000-8000-000000000001
//! allowedPolicies: [basic, gang]          # optional; the tree file's default is both
//! allowedDisruptionModes: [single, all]   # optional; the tree file's default is both
//! items:                          # top-level items: all leaves, or all with children
//!   - name: root                  # template name, DNS label, unique in the Workload
//!     schedulingPolicy:           # exactly one of basic / gang
//!       gang: {minGroupCount: 2}  # item with children: minGroupCount (default: number of children)
//!     schedulingConstraints:
//!       topology: [{key: topology.kubernetes.io/zone}]   # at most one
//!     disruptionMode: {all: {}}   # exactly one of single / all; all is not allowed with basic
//!     priorityClassName: high     # also: priority, preemptionPolicy (Never | PreemptLowerPriority)
//!     children:                   # an item with children becomes a CompositePodGroupTemplate
//!       - name: workers           # a leaf becomes a PodGroupTemplate
//!         podCount: 8             # optional: fills an unset gang minCount
//!         schedulingPolicy: {gang: {}}
//!         resourceClaims:         # leaf only, at most 4, each exactly one of the two names
//!           - {name: gpus, resourceClaimTemplateName: gpu-template}
//! ```
//!
//! An item without a `schedulingPolicy` gets `basic`. Errors name the path in
//! this file, e.g. `items[0].children[1].schedulingPolicy.gang.minCount`.
//!
//! `validate` also accepts Workload, PodGroup and CompositePodGroup objects
//! (one or more YAML documents with `apiVersion` and `kind`), and checks
//! them with the admission rules; `--old` gives the stored version to check
//! an update against.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use k8s_openapi::api::scheduling::v1alpha3::{
    TopologyConstraint, WorkloadPodGroupAllDisruptionMode, WorkloadPodGroupBasicSchedulingPolicy,
    WorkloadPodGroupDisruptionMode, WorkloadPodGroupGangSchedulingPolicy,
    WorkloadPodGroupResourceClaim, WorkloadPodGroupSchedulingConstraints,
    WorkloadPodGroupSchedulingPolicy, WorkloadPodGroupSingleDisruptionMode,
};
use k8s_openapi::api::scheduling::{v1alpha3, v1beta1};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::field::{FieldError, child, index};
use super::rules;
use super::tree::{
    CompositeBasicPolicy, CompositeGangPolicy, CompositeSchedulingPolicy, ItemConfig, ItemInput,
    Sourced, WorkloadItem, WorkloadTree, fill_min_count, fill_min_group_count,
};
use super::{BuildOptions, Builder, DisruptionModeOption, Group, PolicyOption, ValidationInput};

/// `kruntimes-scheduler workload ...`
#[derive(Debug, Clone, clap::Subcommand)]
pub enum WorkloadCommand {
    /// Compile a workload tree into a Workload plus one PodGroup or
    /// CompositePodGroup per template, printed as multi-document YAML.
    Compile {
        /// Tree file (YAML); `-` reads standard input.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Validate a workload tree, or Workload / PodGroup / CompositePodGroup
    /// objects; prints one field error per line and exits 1 if there are any.
    Validate {
        /// Tree or object file (YAML); `-` reads standard input.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// The previously stored version, to check an update (immutable fields).
        #[arg(long = "old")]
        old: Option<PathBuf>,
    },
}

/// Runs a `workload` subcommand. Invalid input (unreadable or malformed
/// files) is an error naming the file; validation failures print the field
/// errors and return exit code 1.
pub fn run(cmd: WorkloadCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        WorkloadCommand::Compile { file } => {
            let text = read_input(&file)?;
            match compile_to_yaml(&text)
                .with_context(|| format!("cannot compile {}", file.display()))?
            {
                Ok(yaml) => {
                    print!("{yaml}");
                    Ok(ExitCode::SUCCESS)
                }
                Err(errs) => {
                    for e in &errs {
                        eprintln!("{e}");
                    }
                    eprintln!(
                        "{}: {} error(s); nothing compiled",
                        file.display(),
                        errs.len()
                    );
                    Ok(ExitCode::from(1))
                }
            }
        }
        WorkloadCommand::Validate { file, old } => {
            let text = read_input(&file)?;
            let old_text = old.as_deref().map(read_input).transpose()?;
            let errs = validate_text(&text, old_text.as_deref()).with_context(|| match &old {
                Some(o) => format!("cannot validate {} against {}", file.display(), o.display()),
                None => format!("cannot validate {}", file.display()),
            })?;
            if errs.is_empty() {
                println!("{}: valid", file.display());
                Ok(ExitCode::SUCCESS)
            } else {
                for e in &errs {
                    println!("{e}");
                }
                Ok(ExitCode::from(1))
            }
        }
    }
}

fn read_input(path: &Path) -> anyhow::Result<String> {
    if path == Path::new("-") {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("cannot read standard input")?;
        return Ok(s);
    }
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Input that cannot be read as a tree or as objects.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// Not YAML, or not the expected shape.
    #[error("{0}")]
    Yaml(String),
    /// A tree file must be exactly one document.
    #[error("expected exactly one YAML document holding a workload tree, found {0}")]
    Documents(usize),
    /// An object of a kind `validate` does not handle.
    #[error(
        "document {index}: unsupported object {api_version}/{kind}; expected scheduling.k8s.io/v1beta1 Workload or PodGroup, or scheduling.k8s.io/v1alpha3 CompositePodGroup"
    )]
    Kind {
        /// Document index (0-based).
        index: usize,
        /// `apiVersion`.
        api_version: String,
        /// `kind`.
        kind: String,
    },
    /// A document could not be decoded as its kind.
    #[error("document {index} ({kind}): {message}")]
    Object {
        /// Document index (0-based).
        index: usize,
        /// `kind`.
        kind: String,
        /// Decoder message.
        message: String,
    },
    /// Compiling failed after validation passed (a bug).
    #[error(transparent)]
    Build(#[from] super::Error),
}

// === the tree file ===

/// What a tree file allows when it has no `allowedPolicies`: both policies.
pub const TREE_FILE_DEFAULT_POLICIES: &[PolicyOption] = &[PolicyOption::Basic, PolicyOption::Gang];
/// What a tree file allows when it has no `allowedDisruptionModes`: both modes.
pub const TREE_FILE_DEFAULT_DISRUPTION_MODES: &[DisruptionModeOption] =
    &[DisruptionModeOption::Single, DisruptionModeOption::All];

/// A tree file (see the module documentation for the format).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TreeFile {
    /// Workload name.
    pub name: String,
    /// Namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Controlling object.
    #[serde(default)]
    pub owner: Option<OwnerFile>,
    /// Allowed policies; absent: [`TREE_FILE_DEFAULT_POLICIES`] (an empty
    /// list allows none).
    #[serde(default)]
    pub allowed_policies: Option<Vec<PolicyOption>>,
    /// Allowed disruption modes; absent:
    /// [`TREE_FILE_DEFAULT_DISRUPTION_MODES`].
    #[serde(default)]
    pub allowed_disruption_modes: Option<Vec<DisruptionModeOption>>,
    /// Top-level items.
    #[serde(default)]
    pub items: Vec<ItemFile>,
}

/// The controlling object of a tree file.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OwnerFile {
    /// `apiVersion` of the owner, e.g. `batch/v1`.
    #[serde(default)]
    pub api_version: String,
    /// Kind, e.g. `Job`.
    #[serde(default)]
    pub kind: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// UID.
    #[serde(default)]
    pub uid: String,
}

/// One item of a tree file.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ItemFile {
    /// Template name.
    #[serde(default)]
    pub name: String,
    /// `basic: {}` or `gang: {minCount | minGroupCount}`.
    #[serde(default)]
    pub scheduling_policy: Option<PolicyFile>,
    /// `topology: [{key}]`.
    #[serde(default)]
    pub scheduling_constraints: Option<ConstraintsFile>,
    /// `single: {}` or `all: {}`.
    #[serde(default)]
    pub disruption_mode: Option<DisruptionFile>,
    /// Shared resource claims (leaf only).
    #[serde(default)]
    pub resource_claims: Option<Vec<ClaimFile>>,
    /// PriorityClass name.
    #[serde(default)]
    pub priority_class_name: Option<String>,
    /// Numeric priority.
    #[serde(default)]
    pub priority: Option<i32>,
    /// `Never` or `PreemptLowerPriority`.
    #[serde(default)]
    pub preemption_policy: Option<String>,
    /// Number of pods of a leaf; fills an unset gang `minCount`.
    #[serde(default)]
    pub pod_count: Option<i32>,
    /// Children.
    #[serde(default)]
    pub children: Vec<ItemFile>,
}

/// An empty object (`{}`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmptyFile {}

/// Scheduling policy block.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyFile {
    /// `basic: {}`.
    #[serde(default)]
    pub basic: Option<EmptyFile>,
    /// `gang: {...}`.
    #[serde(default)]
    pub gang: Option<GangFile>,
}

/// Gang block.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GangFile {
    /// Leaf minimum.
    #[serde(default)]
    pub min_count: Option<i32>,
    /// Composite minimum.
    #[serde(default)]
    pub min_group_count: Option<i32>,
}

/// Constraints block.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConstraintsFile {
    /// Topology constraints.
    #[serde(default)]
    pub topology: Vec<TopologyFile>,
}

/// One topology constraint.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TopologyFile {
    /// Node label key.
    #[serde(default)]
    pub key: String,
}

/// Disruption mode block.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DisruptionFile {
    /// `single: {}`.
    #[serde(default)]
    pub single: Option<EmptyFile>,
    /// `all: {}`.
    #[serde(default)]
    pub all: Option<EmptyFile>,
}

/// A resource claim.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimFile {
    /// Name in the group.
    #[serde(default)]
    pub name: String,
    /// An existing ResourceClaim.
    #[serde(default)]
    pub resource_claim_name: Option<String>,
    /// A ResourceClaimTemplate.
    #[serde(default)]
    pub resource_claim_template_name: Option<String>,
}

fn empty() -> Value {
    Value::Object(Map::new())
}

impl TreeFile {
    /// Parses one YAML document.
    pub fn parse(text: &str) -> Result<Self, InputError> {
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(text).map_err(|e| InputError::Yaml(e.to_string()))?;
        if docs.len() != 1 {
            return Err(InputError::Documents(docs.len()));
        }
        serde_saphyr::from_str(text).map_err(|e| InputError::Yaml(e.to_string()))
    }

    /// The builder for this file, plus errors found while reading it (file
    /// fields that are not building blocks: name, namespace, owner, and
    /// blocks set on the wrong kind of item).
    pub fn builder(&self) -> (Builder, Vec<FieldError>) {
        let mut errs = Vec::new();
        rules::check_dns_subdomain(&self.name, "name", &mut errs);
        if let Some(ns) = &self.namespace {
            rules::check_dns_label(ns, "namespace", &mut errs);
        }
        let owner = self.owner.as_ref().map(|o| {
            for (field, value) in [
                ("apiVersion", &o.api_version),
                ("kind", &o.kind),
                ("name", &o.name),
                ("uid", &o.uid),
            ] {
                if value.is_empty() {
                    errs.push(FieldError::required(child("owner", field), ""));
                }
            }
            OwnerReference {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
                uid: o.uid.clone(),
                ..OwnerReference::default()
            }
        });
        let items = self
            .items
            .iter()
            .enumerate()
            .map(|(i, item)| item.to_item(&index("items", i), &mut errs))
            .collect();
        // The library allows nothing unless told; a tree file is the user's
        // own description, so its default (documented above) is every option.
        let mut options = BuildOptions::new(self.name.clone())
            .allow_policies(
                self.allowed_policies
                    .clone()
                    .unwrap_or_else(|| TREE_FILE_DEFAULT_POLICIES.to_vec()),
            )
            .allow_disruption_modes(
                self.allowed_disruption_modes
                    .clone()
                    .unwrap_or_else(|| TREE_FILE_DEFAULT_DISRUPTION_MODES.to_vec()),
            );
        options.namespace = self.namespace.clone();
        options.owner = owner;
        (
            Builder::new(
                WorkloadTree {
                    items,
                    path: "items".to_owned(),
                },
                options,
            ),
            errs,
        )
    }
}

impl ItemFile {
    fn to_item(&self, path: &str, errs: &mut Vec<FieldError>) -> WorkloadItem {
        let composite = !self.children.is_empty();
        let mut input = ItemInput::default();
        if let Some(p) = &self.scheduling_policy {
            let ppath = child(path, "schedulingPolicy");
            let gang_path = child(&ppath, "gang");
            if composite {
                if p.gang.as_ref().is_some_and(|g| g.min_count.is_some()) {
                    errs.push(FieldError::forbidden(
                        child(&gang_path, "minCount"),
                        "an item with children takes minGroupCount, not minCount",
                    ));
                }
                input.composite_scheduling_policy = Some(Sourced::new(
                    ppath,
                    CompositeSchedulingPolicy {
                        basic: p.basic.as_ref().map(|_| CompositeBasicPolicy {}),
                        gang: p.gang.as_ref().map(|g| CompositeGangPolicy {
                            min_group_count: g.min_group_count,
                        }),
                    },
                ));
            } else {
                if p.gang.as_ref().is_some_and(|g| g.min_group_count.is_some()) {
                    errs.push(FieldError::forbidden(
                        child(&gang_path, "minGroupCount"),
                        "an item without children takes minCount, not minGroupCount",
                    ));
                }
                input.scheduling_policy = Some(Sourced::new(
                    ppath,
                    WorkloadPodGroupSchedulingPolicy {
                        basic: p
                            .basic
                            .as_ref()
                            .map(|_| WorkloadPodGroupBasicSchedulingPolicy(empty())),
                        gang: p
                            .gang
                            .as_ref()
                            .map(|g| WorkloadPodGroupGangSchedulingPolicy {
                                min_count: g.min_count,
                            }),
                    },
                ));
            }
        }
        if let Some(c) = &self.scheduling_constraints {
            input.scheduling_constraints = Some(Sourced::new(
                child(path, "schedulingConstraints"),
                WorkloadPodGroupSchedulingConstraints {
                    topology: Some(
                        c.topology
                            .iter()
                            .map(|t| TopologyConstraint { key: t.key.clone() })
                            .collect(),
                    ),
                },
            ));
        }
        if let Some(d) = &self.disruption_mode {
            input.disruption_mode = Some(Sourced::new(
                child(path, "disruptionMode"),
                WorkloadPodGroupDisruptionMode {
                    all: d
                        .all
                        .as_ref()
                        .map(|_| WorkloadPodGroupAllDisruptionMode(empty())),
                    single: d
                        .single
                        .as_ref()
                        .map(|_| WorkloadPodGroupSingleDisruptionMode(empty())),
                },
            ));
        }
        if let Some(claims) = &self.resource_claims {
            input.resource_claims = Some(Sourced::new(
                child(path, "resourceClaims"),
                claims
                    .iter()
                    .map(|c| WorkloadPodGroupResourceClaim {
                        name: c.name.clone(),
                        resource_claim_name: c.resource_claim_name.clone(),
                        resource_claim_template_name: c.resource_claim_template_name.clone(),
                    })
                    .collect(),
            ));
        }
        input.priority_class_name = self
            .priority_class_name
            .clone()
            .map(|v| Sourced::new(child(path, "priorityClassName"), v));
        input.priority = self
            .priority
            .map(|v| Sourced::new(child(path, "priority"), v));
        input.preemption_policy = self
            .preemption_policy
            .clone()
            .map(|v| Sourced::new(child(path, "preemptionPolicy"), v));

        // The CLI's controller defaults: basic scheduling.
        let defaults = if composite {
            ItemConfig {
                composite_scheduling_policy: Some(CompositeSchedulingPolicy {
                    basic: Some(CompositeBasicPolicy {}),
                    gang: None,
                }),
                ..ItemConfig::default()
            }
        } else {
            ItemConfig {
                scheduling_policy: Some(WorkloadPodGroupSchedulingPolicy {
                    basic: Some(WorkloadPodGroupBasicSchedulingPolicy(empty())),
                    gang: None,
                }),
                ..ItemConfig::default()
            }
        };
        let children_path = child(path, "children");
        let children: Vec<WorkloadItem> = self
            .children
            .iter()
            .enumerate()
            .map(|(i, c)| c.to_item(&index(&children_path, i), errs))
            .collect();
        let mut item = WorkloadItem {
            name: self.name.clone(),
            path: path.to_owned(),
            defaults,
            input,
            callbacks: Vec::new(),
            children,
        };
        if composite {
            if let Some(n) = self.pod_count {
                errs.push(FieldError::forbidden(
                    child(path, "podCount"),
                    format!("{n}: only an item without children has pods"),
                ));
            }
            let n = i32::try_from(item.children.len()).unwrap_or(i32::MAX);
            item.callbacks.push(fill_min_group_count(n));
        } else if let Some(n) = self.pod_count {
            item.callbacks.push(fill_min_count(n));
        }
        item
    }
}

// === commands as functions ===

/// Compiles a tree file to multi-document YAML: the Workload, then one
/// group per template (parents first). `Ok(Err(..))` carries field errors.
pub fn compile_to_yaml(text: &str) -> Result<Result<String, Vec<FieldError>>, InputError> {
    let file = TreeFile::parse(text)?;
    let (builder, mut errs) = file.builder();
    errs.extend(builder.validate(&ValidationInput::default()));
    if !errs.is_empty() {
        return Ok(Err(errs));
    }
    let mut docs = vec![to_yaml(builder.build_workload()?)?];
    for group in builder.default_instances()? {
        docs.push(match group {
            Group::Pod(pg) => to_yaml(&*pg)?,
            Group::Composite(cpg) => to_yaml(&*cpg)?,
        });
    }
    Ok(Ok(docs.join("---\n")))
}

fn to_yaml<T: serde::Serialize>(value: &T) -> Result<String, InputError> {
    serde_saphyr::to_string(value).map_err(|e| InputError::Yaml(e.to_string()))
}

/// Validates a tree file, or object documents, optionally as an update of
/// `old` (same format). Returns the field errors (empty when valid).
pub fn validate_text(text: &str, old: Option<&str>) -> Result<Vec<FieldError>, InputError> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|e| InputError::Yaml(e.to_string()))?;
    if docs.iter().any(|d| d.get("kind").is_some()) {
        let new = decode_objects(docs)?;
        let old = match old {
            Some(t) => decode_objects(
                serde_saphyr::from_multiple(t)
                    .map_err(|e| InputError::Yaml(format!("old: {e}")))?,
            )?,
            None => Vec::new(),
        };
        return Ok(validate_objects(&new, &old));
    }
    let file = TreeFile::parse(text)?;
    let (builder, mut errs) = file.builder();
    let old_builder = match old {
        Some(t) => Some(TreeFile::parse(t)?.builder().0),
        None => None,
    };
    let input = ValidationInput {
        old: old_builder.as_ref().and_then(|b| b.tree()),
    };
    errs.extend(builder.validate(&input));
    Ok(errs)
}

/// A decoded object document.
enum Object {
    Workload(Box<v1beta1::Workload>),
    PodGroup(Box<v1beta1::PodGroup>),
    Composite(Box<v1alpha3::CompositePodGroup>),
}

impl Object {
    fn key(&self) -> (&'static str, Option<&str>) {
        match self {
            Self::Workload(o) => ("Workload", o.metadata.name.as_deref()),
            Self::PodGroup(o) => ("PodGroup", o.metadata.name.as_deref()),
            Self::Composite(o) => ("CompositePodGroup", o.metadata.name.as_deref()),
        }
    }
}

fn decode_objects(docs: Vec<Value>) -> Result<Vec<Object>, InputError> {
    let mut out = Vec::new();
    for (index, doc) in docs.into_iter().enumerate() {
        let api_version = doc
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let kind = doc
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let err = |e: serde_json::Error| InputError::Object {
            index,
            kind: kind.clone(),
            message: e.to_string(),
        };
        let obj = match (api_version.as_str(), kind.as_str()) {
            ("scheduling.k8s.io/v1beta1", "Workload") => {
                Object::Workload(Box::new(serde_json::from_value(doc).map_err(err)?))
            }
            ("scheduling.k8s.io/v1beta1", "PodGroup") => {
                Object::PodGroup(Box::new(serde_json::from_value(doc).map_err(err)?))
            }
            ("scheduling.k8s.io/v1alpha3", "CompositePodGroup") => {
                Object::Composite(Box::new(serde_json::from_value(doc).map_err(err)?))
            }
            _ => {
                return Err(InputError::Kind {
                    index,
                    api_version,
                    kind,
                });
            }
        };
        out.push(obj);
    }
    Ok(out)
}

fn validate_objects(new: &[Object], old: &[Object]) -> Vec<FieldError> {
    let mut out = Vec::new();
    for obj in new {
        let key = obj.key();
        let prior = old.iter().find(|o| o.key() == key);
        let errs = match (obj, prior) {
            (Object::Workload(n), Some(Object::Workload(o))) => {
                super::validate_workload(n, Some(o))
            }
            (Object::Workload(n), _) => super::validate_workload(n, None),
            (Object::PodGroup(n), Some(Object::PodGroup(o))) => {
                super::validate_pod_group(n, Some(o))
            }
            (Object::PodGroup(n), _) => super::validate_pod_group(n, None),
            (Object::Composite(n), Some(Object::Composite(o))) => {
                super::validate_composite_pod_group(n, Some(o))
            }
            (Object::Composite(n), _) => super::validate_composite_pod_group(n, None),
        };
        let prefix = format!("{}/{}: ", key.0, key.1.unwrap_or(""));
        out.extend(errs.into_iter().map(|mut e| {
            e.path = format!("{prefix}{}", e.path);
            e
        }));
    }
    out
}
