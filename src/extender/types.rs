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
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// `v1.NodeList` as received and echoed (items kept verbatim).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeList {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// Each Node's JSON text as sent: the few fields fit reads are decoded
    /// from it, and a passing node is echoed byte for byte.
    #[serde(default, deserialize_with = "null_as_default")]
    pub items: Vec<Box<RawValue>>,
}

/// [`NodeList`] decoded into values, for naming a bad field.
#[derive(Debug, Deserialize)]
pub struct NodeListShape {
    #[serde(default)]
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
    /// Cache-capable mode: the `NodeNames` array as sent. Kept as raw JSON
    /// text: kube-scheduler sends the same list for pod after pod, so the
    /// text is the key under which its resolution to cache slots is reused
    /// (see [`ClusterState::resolve_names`](crate::cache::cluster_index::ClusterState::resolve_names)).
    #[serde(default, borrow)]
    pub node_names: Option<&'a RawValue>,
}

/// [`ExtenderArgs`] with every field owned: decodes from a `Value`, to name
/// the offending field of a body the fast path rejected.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ExtenderArgsShape {
    #[serde(default)]
    pub pod: Option<Pod>,
    #[serde(default)]
    pub nodes: Option<NodeListShape>,
    #[serde(default)]
    pub node_names: Option<Vec<String>>,
}

/// Node name → reason (`FailedNodesMap`), encoded as a JSON object. Built
/// as a list: names are unique in a request, and a reason shared by many
/// nodes is one allocation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FailedNodes<'a>(pub Vec<(Cow<'a, str>, Arc<str>)>);

impl FailedNodes<'_> {
    /// The reason given for a node.
    pub fn get(&self, node: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n == node).map(|(_, r)| &**r)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for FailedNodes<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, &**v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for FailedNodes<'static> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let m: Option<BTreeMap<String, String>> = Option::deserialize(d)?;
        Ok(FailedNodes(
            m.unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (Cow::Owned(k), Arc::from(v)))
                .collect(),
        ))
    }
}

/// `ExtenderFilterResult`.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "PascalCase")]
pub struct ExtenderFilterResult<'a> {
    /// Full mode: the nodes that passed (`null` in cache-capable mode).
    pub nodes: Option<NodeList>,
    /// Cache-capable mode: the names that passed, `[]` when none.
    pub node_names: Option<Vec<&'a str>>,
    /// Rejected here, but preemption might help.
    pub failed_nodes: FailedNodes<'a>,
    /// Rejected whatever is preempted.
    pub failed_and_unresolvable_nodes: FailedNodes<'a>,
    /// Set when the extender failed; kube-scheduler then retries the pod.
    pub error: String,
    /// Every node name (in `node_names` and as failed keys) is known to
    /// need no JSON escaping (from the resolved request list), so
    /// [`ExtenderFilterResult::write_json`] copies them without checking.
    /// Not part of the wire format.
    #[serde(skip)]
    pub names_plain: bool,
}

impl PartialEq for NodeList {
    fn eq(&self, other: &Self) -> bool {
        self.items.len() == other.items.len()
            && self
                .items
                .iter()
                .zip(&other.items)
                .all(|(a, b)| a.get() == b.get())
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
    pub pods: Vec<VictimPod>,
    #[serde(default, rename = "NumPDBViolations")]
    pub num_pdb_violations: i64,
}

/// A victim Pod of the full form. Only its uid is read (the cache knows
/// the rest), so the remainder of each Pod is skipped, not decoded.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct VictimPod {
    #[serde(default, deserialize_with = "null_as_default")]
    pub metadata: VictimMeta,
}

/// `metadata` of a [`VictimPod`].
#[derive(Debug, Clone, Default, Deserialize)]
pub struct VictimMeta {
    #[serde(default, deserialize_with = "null_as_default")]
    pub uid: String,
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

// === hot-path encoders ===
//
// Filter and prioritize answers are mostly node names: thousands of short
// strings that never need escaping (node names are DNS subdomains).
// serde_json escapes byte by byte, which was a quarter of a 5,000-node
// call; these writers copy a string that needs no escaping as is and hand
// any other string to serde_json. Each is checked against the serde
// encoding of the same value in the tests below.

/// Whether `s` can be written between quotes as is.
fn plain(s: &str) -> bool {
    // A fold (not `all`) so the check vectorises.
    s.bytes()
        .fold(true, |ok, b| ok & (b >= 0x20) & (b != b'"') & (b != b'\\'))
}

/// Writes a string known to need no escaping.
fn push_plain(buf: &mut Vec<u8>, s: &str) {
    buf.reserve(s.len() + 2);
    buf.push(b'"');
    buf.extend_from_slice(s.as_bytes());
    buf.push(b'"');
}

fn push_str(buf: &mut Vec<u8>, s: &str) {
    if plain(s) {
        buf.push(b'"');
        buf.extend_from_slice(s.as_bytes());
        buf.push(b'"');
    } else {
        // Writing a &str into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *buf, s);
    }
}

/// Writes a failed-nodes map. A reason shared by many nodes (one `Arc`) is
/// encoded once and copied; names of a clean request list are copied as is.
fn push_failed(buf: &mut Vec<u8>, key: &str, failed: &FailedNodes<'_>, names_plain: bool) {
    buf.extend_from_slice(key.as_bytes());
    buf.push(b'{');
    let mut last: Option<(&Arc<str>, std::ops::Range<usize>)> = None;
    for (i, (node, why)) in failed.0.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        if names_plain {
            push_plain(buf, node);
        } else {
            push_str(buf, node);
        }
        buf.push(b':');
        match &last {
            Some((prev, range)) if Arc::ptr_eq(prev, why) => {
                buf.extend_from_within(range.clone());
            }
            _ => {
                let start = buf.len();
                push_str(buf, why);
                last = Some((why, start..buf.len()));
            }
        }
    }
    buf.push(b'}');
}

impl ExtenderFilterResult<'_> {
    /// The JSON encoding (the same as serde's), into `buf`.
    pub fn write_json(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(b"{\"Nodes\":");
        match &self.nodes {
            // Writing into a Vec cannot fail.
            Some(list) => drop(serde_json::to_writer(&mut *buf, list)),
            None => buf.extend_from_slice(b"null"),
        }
        buf.extend_from_slice(b",\"NodeNames\":");
        match &self.node_names {
            Some(names) => {
                buf.push(b'[');
                for (i, n) in names.iter().enumerate() {
                    if i > 0 {
                        buf.push(b',');
                    }
                    if self.names_plain {
                        push_plain(buf, n);
                    } else {
                        push_str(buf, n);
                    }
                }
                buf.push(b']');
            }
            None => buf.extend_from_slice(b"null"),
        }
        push_failed(
            buf,
            ",\"FailedNodes\":",
            &self.failed_nodes,
            self.names_plain,
        );
        push_failed(
            buf,
            ",\"FailedAndUnresolvableNodes\":",
            &self.failed_and_unresolvable_nodes,
            self.names_plain,
        );
        buf.extend_from_slice(b",\"Error\":");
        push_str(buf, &self.error);
        buf.push(b'}');
    }
}

/// The JSON encoding of a `HostPriorityList` (the same as serde's), into
/// `buf`. `plain`: every host is known to need no escaping.
pub fn write_priorities(list: &[HostPriority<'_>], plain: bool, buf: &mut Vec<u8>) {
    buf.push(b'[');
    for (i, h) in list.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        buf.extend_from_slice(b"{\"Host\":");
        if plain {
            push_plain(buf, &h.host);
        } else {
            push_str(buf, &h.host);
        }
        buf.extend_from_slice(b",\"Score\":");
        match u8::try_from(h.score) {
            Ok(d @ 0..=9) => buf.push(b'0' + d),
            _ => {
                use std::io::Write as _;
                // Writing into a Vec cannot fail.
                let _ = write!(buf, "{}", h.score);
            }
        }
        buf.push(b'}');
    }
    buf.push(b']');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hot_path_encoders_match_serde() {
        let odd = "we\"ird\\name\u{1}\u{e9}";
        let failed = FailedNodes(vec![
            (Cow::Borrowed("n1"), Arc::from("Insufficient cpu")),
            (Cow::Borrowed(odd), Arc::from("a \"quoted\" reason")),
        ]);
        let cases = [
            ExtenderFilterResult::default(),
            ExtenderFilterResult {
                node_names: Some(vec!["n2", odd, ""]),
                failed_nodes: failed.clone(),
                failed_and_unresolvable_nodes: failed.clone(),
                error: "boom\n".into(),
                ..Default::default()
            },
            ExtenderFilterResult {
                nodes: Some(NodeList {
                    metadata: Some(json!({})),
                    items: vec![
                        RawValue::from_string(r#"{"metadata": {"name": "n1"}}"#.into()).unwrap(),
                    ],
                }),
                node_names: Some(vec![]),
                ..Default::default()
            },
        ];
        let shared: Arc<str> = Arc::from("outside \"rack\"=r1");
        let known_plain = ExtenderFilterResult {
            node_names: Some(vec!["n1", "node-2.example"]),
            names_plain: true,
            failed_and_unresolvable_nodes: FailedNodes(vec![
                (Cow::Borrowed("n3"), Arc::clone(&shared)),
                (Cow::Borrowed("n4"), Arc::clone(&shared)),
                (Cow::Borrowed("n5"), Arc::from("Insufficient cpu")),
                (Cow::Borrowed("n6"), shared),
            ]),
            ..Default::default()
        };
        for c in cases.iter().chain([&known_plain]) {
            let mut mine = Vec::new();
            c.write_json(&mut mine);
            let mine: Value = serde_json::from_slice(&mine).expect("valid JSON");
            assert_eq!(mine, serde_json::to_value(c).unwrap());
        }
        let list = [
            HostPriority {
                host: Cow::Borrowed("n1"),
                score: 10,
            },
            HostPriority {
                host: Cow::Owned(odd.to_owned()),
                score: 0,
            },
        ];
        for l in [&list[..], &[]] {
            let mut mine = Vec::new();
            write_priorities(l, false, &mut mine);
            let mine: Value = serde_json::from_slice(&mine).expect("valid JSON");
            assert_eq!(mine, serde_json::to_value(l).unwrap());
        }
        let plain = &list[..1];
        let mut mine = Vec::new();
        write_priorities(plain, true, &mut mine);
        let mine: Value = serde_json::from_slice(&mine).expect("valid JSON");
        assert_eq!(mine, serde_json::to_value(plain).unwrap());
    }
}
