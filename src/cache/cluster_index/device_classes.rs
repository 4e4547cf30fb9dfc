//! DeviceClasses: which extended resources DRA satisfies.

use super::{ClusterIndex, ClusterState};
use crate::cache::index::Index;
use crate::pods::dra::DeviceClasses;
use k8s_openapi::api::resource::v1::DeviceClass;

// === impl ClusterState ===

impl ClusterState {
    /// The DeviceClasses (which extended resources DRA satisfies).
    pub fn device_classes(&self) -> &DeviceClasses {
        &self.device_classes
    }
}

// === impl ClusterIndex ===

impl ClusterIndex {
    pub fn apply_device_class(&self, c: &DeviceClass) {
        self.state.write().device_classes.apply(c);
    }
    pub fn delete_device_class(&self, name: &str) {
        self.state.write().device_classes.delete(name);
    }
    pub fn reset_device_classes(&self, cs: &[DeviceClass]) {
        self.state.write().device_classes.reset(cs);
    }
}

impl Index<DeviceClass> for ClusterIndex {
    fn apply(&self, obj: DeviceClass) {
        self.apply_device_class(&obj)
    }
    fn delete(&self, _namespace: &str, name: &str) {
        self.delete_device_class(name)
    }
    fn reset(&self, objs: Vec<DeviceClass>) {
        self.reset_device_classes(&objs)
    }
}
