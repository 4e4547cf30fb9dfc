//! ResourceSlices: the devices drivers publish, by `(driver, pool,
//! device)`, with the nodes each reaches, its capacity and the node
//! resources it maps.

use super::{ClusterIndex, ClusterState, name_of};
use crate::cache::index::Index;
use crate::pods::fit::{self, DeviceInfo, Reach};
use k8s_openapi::api::resource::v1::ResourceSlice;
use std::sync::Arc;

// === impl ClusterState ===

impl ClusterState {
    fn set_slice(&mut self, slice: &ResourceSlice) {
        let name = name_of(&slice.metadata);
        self.unset_slice(&name);
        let spec = &slice.spec;
        let reach_of = |node: Option<&String>,
                        selector: Option<&k8s_openapi::api::core::v1::NodeSelector>,
                        all: Option<bool>| {
            match (node, selector, all) {
                (Some(n), _, _) if !n.is_empty() => Reach::Node(n.clone()),
                (_, Some(sel), _) => {
                    Reach::Selector(Arc::new(crate::pods::selector::NodeRule::of_selector(sel)))
                }
                (_, _, Some(true)) => Reach::All,
                _ => Reach::Nowhere,
            }
        };
        let per_device = spec.per_device_node_selection == Some(true);
        let slice_reach = reach_of(
            spec.node_name.as_ref(),
            spec.node_selector.as_ref(),
            spec.all_nodes,
        );
        let mut keys = Vec::new();
        for d in spec.devices.iter().flatten() {
            let key = (spec.driver.clone(), spec.pool.name.clone(), d.name.clone());
            let mut node_allocatable = d.node_allocatable_resources.clone().unwrap_or_default();
            node_allocatable.retain(|res, _| {
                let valid = fit::node_allocatable_target(res);
                if !valid {
                    tracing::warn!(slice = %name, device = %d.name, resource = %res,
                        "nodeAllocatableResources names a resource that is not a node resource (cpu, memory, ephemeral-storage, hugepages-*); ignored");
                }
                valid
            });
            self.devices.insert(
                key.clone(),
                DeviceInfo {
                    reach: if per_device {
                        reach_of(d.node_name.as_ref(), d.node_selector.as_ref(), d.all_nodes)
                    } else {
                        slice_reach.clone()
                    },
                    capacity: d
                        .capacity
                        .iter()
                        .flatten()
                        .map(|(k, v)| (k.clone(), v.value.clone()))
                        .collect(),
                    node_allocatable,
                },
            );
            keys.push(key);
        }
        self.slices.insert(name, keys);
    }

    fn unset_slice(&mut self, name: &str) {
        if let Some(keys) = self.slices.remove(name) {
            for k in keys {
                self.devices.remove(&k);
            }
        }
    }
}

// === impl ClusterIndex ===

impl ClusterIndex {
    pub fn apply_slice(&self, sl: &ResourceSlice) {
        let mut s = self.write();
        s.set_slice(sl);
        s.recompute_dra_nodes();
    }
    pub fn delete_slice(&self, name: &str) {
        let mut s = self.write();
        s.unset_slice(name);
        s.recompute_dra_nodes();
    }
    pub fn reset_slices(&self, sls: &[ResourceSlice]) {
        let mut s = self.write();
        s.slices.clear();
        s.devices.clear();
        for sl in sls {
            s.set_slice(sl);
        }
        s.recompute_dra_nodes();
    }
}

impl Index<ResourceSlice> for ClusterIndex {
    fn apply(&self, obj: ResourceSlice) {
        self.apply_slice(&obj)
    }
    fn delete(&self, _namespace: &str, name: &str) {
        self.delete_slice(name)
    }
    fn reset(&self, objs: Vec<ResourceSlice>) {
        self.reset_slices(&objs)
    }
}
