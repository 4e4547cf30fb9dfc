//! Small builders for plugin and planner unit tests: Nodes with a rack
//! label, grouped Pods, PodGroups with a topology key, over a
//! [`ClusterIndex`] (no router, no HTTP).

use crate::cache::cluster_index::ClusterIndex;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use serde_json::json;

/// The rack label the builders use.
pub const RACK: &str = "rack";

/// A Node with `cpu` cores, `pods` pod slots and, when given, a rack.
pub fn node(name: &str, rack: Option<&str>, cpu: &str, pods: &str) -> Node {
    let labels = rack.map_or(json!({}), |r| json!({ RACK: r }));
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": cpu, "memory": "64Gi", "pods": pods}}}))
    .expect("node")
}

/// A Pod in namespace `ns` requesting `cpu`, in `group` when given, bound
/// to `node` when given.
pub fn pod(name: &str, group: Option<&str>, cpu: &str, node: Option<&str>) -> Pod {
    let mut spec = json!({"containers": [{"name": "c", "image": "i",
        "resources": {"requests": {"cpu": cpu}}}]});
    if let Some(g) = group {
        spec["schedulingGroup"] = json!({ "podGroupName": g });
    }
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns",
        "uid": format!("{name}-uid")}, "spec": spec}))
    .expect("pod")
}

/// A gang PodGroup of `min` in namespace `ns`, placed by rack when
/// `by_rack`.
pub fn group(name: &str, min: u32, by_rack: bool) -> PodGroup {
    let mut spec = json!({"schedulingPolicy": {"gang": {"minCount": min}}});
    if by_rack {
        spec["schedulingConstraints"] = json!({"topology": [{"key": RACK}]});
    }
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"}, "spec": spec}))
        .expect("group")
}

/// Racks of `nodes` nodes each, named `<rack>-<i>`, with `cpu` cores and
/// 110 pod slots: `racks(&[("r1", 2, "4")])`.
pub fn racks(spec: &[(&str, usize, &str)]) -> ClusterIndex {
    let cache = ClusterIndex::new();
    for (rack, nodes, cpu) in spec {
        for i in 0..*nodes {
            cache.apply_node(&node(&format!("{rack}-{i}"), Some(rack), cpu, "110"));
        }
    }
    cache
}

/// A gang of `n` members requesting `cpu` each: the group and its pods
/// applied to the cache, the pods returned.
pub fn gang(cache: &ClusterIndex, name: &str, n: u32, cpu: &str, by_rack: bool) -> Vec<Pod> {
    cache.apply_pod_group(&group(name, n, by_rack));
    (0..n)
        .map(|i| {
            let p = pod(&format!("{name}-{i}"), Some(name), cpu, None);
            cache.apply_pod(&p);
            p
        })
        .collect()
}

/// Every node name of the cache, sorted.
pub fn all_nodes(cache: &ClusterIndex) -> Vec<String> {
    cache.read().node_names()
}
