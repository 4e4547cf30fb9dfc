//! kube-scheduler's extender v1 wire types (`k8s.io/kube-scheduler/extender/v1`).
//!
//! The Go structs have no JSON tags, so keys are the Go field names. Go
//! sends `null` for nil pointers, maps and slices; every optional field here
//! accepts `null` or absence. Embedded Pods and Nodes are ordinary
//! Kubernetes JSON; Nodes and victim Pods are kept as raw JSON so full-mode
//! answers echo exactly what kube-scheduler sent.

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// `v1.NodeList` as received and echoed (items kept verbatim).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeList {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub items: Vec<Value>,
}

/// `ExtenderArgs`: the body of filter and prioritize.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ExtenderArgs<'a> {
    #[serde(default)]
    pub pod: Option<Pod>,
    /// Full mode (`nodeCacheCapable: false`).
    #[serde(default)]
    pub nodes: Option<NodeList>,
    /// Cache-capable mode (names borrowed from the body when unescaped).
    #[serde(default, borrow, deserialize_with = "borrowed_names")]
    pub node_names: Option<Vec<Cow<'a, str>>>,
}

/// Node name → reason.
pub type FailedNodesMap = BTreeMap<String, String>;

/// `ExtenderFilterResult`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "PascalCase")]
pub struct ExtenderFilterResult<'a> {
    /// Full mode: the nodes that passed (`null` in cache-capable mode).
    pub nodes: Option<NodeList>,
    /// Cache-capable mode: the names that passed, `[]` when none.
    #[serde(borrow)]
    pub node_names: Option<Vec<Cow<'a, str>>>,
    /// Rejected here, but preemption might help.
    pub failed_nodes: FailedNodesMap,
    /// Rejected whatever is preempted.
    pub failed_and_unresolvable_nodes: FailedNodesMap,
    /// Set when the extender failed; kube-scheduler then retries the pod.
    pub error: String,
}

impl PartialEq for NodeList {
    fn eq(&self, other: &Self) -> bool {
        self.items == other.items
    }
}

/// `HostPriority`: one entry of the prioritize answer (`HostPriorityList`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct HostPriority<'a> {
    #[serde(borrow)]
    pub host: Cow<'a, str>,
    /// 0..=10 (`MaxExtenderPriority`).
    pub score: i64,
}

/// `ExtenderBindingArgs`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ExtenderBindingArgs {
    #[serde(default)]
    pub pod_name: String,
    #[serde(default)]
    pub pod_namespace: String,
    #[serde(default, rename = "PodUID")]
    pub pod_uid: String,
    #[serde(default)]
    pub node: String,
}

/// `ExtenderBindingResult`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct ExtenderBindingResult {
    pub error: String,
}

/// `MetaPod`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct MetaPod {
    #[serde(rename = "UID", default)]
    pub uid: String,
}

/// `MetaVictims`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct MetaVictims {
    #[serde(default, deserialize_with = "null_as_default")]
    pub pods: Vec<MetaPod>,
    #[serde(default, rename = "NumPDBViolations")]
    pub num_pdb_violations: i64,
}

/// `Victims` (full Pods).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Victims {
    #[serde(default, deserialize_with = "null_as_default")]
    pub pods: Vec<Value>,
    #[serde(default, rename = "NumPDBViolations")]
    pub num_pdb_violations: i64,
}

/// `ExtenderPreemptionArgs`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ExtenderPreemptionArgs {
    #[serde(default)]
    pub pod: Option<Pod>,
    /// Sent when the extender is not node-cache capable.
    #[serde(default)]
    pub node_name_to_victims: Option<BTreeMap<String, Option<Victims>>>,
    /// Sent when it is.
    #[serde(default)]
    pub node_name_to_meta_victims: Option<BTreeMap<String, Option<MetaVictims>>>,
}

/// `ExtenderPreemptionResult`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct ExtenderPreemptionResult {
    pub node_name_to_meta_victims: BTreeMap<String, MetaVictims>,
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Strings borrowed from the input when they have no escapes (serde's own
/// `Cow` impl always copies inside a `Vec`): a 5,000-name request then
/// decodes without 5,000 allocations.
fn borrowed_names<'de, D>(d: D) -> Result<Option<Vec<Cow<'de, str>>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    struct Name<'a>(Cow<'a, str>);
    impl<'de> Deserialize<'de> for Name<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Name<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a node name")
                }
                fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Name<'de>, E> {
                    Ok(Name(Cow::Borrowed(v)))
                }
                fn visit_str<E>(self, v: &str) -> Result<Name<'de>, E> {
                    Ok(Name(Cow::Owned(v.to_owned())))
                }
            }
            d.deserialize_str(V)
        }
    }
    let v: Option<Vec<Name<'de>>> = Option::deserialize(d)?;
    Ok(v.map(|v| v.into_iter().map(|n| n.0).collect()))
}
