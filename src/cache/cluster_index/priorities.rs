//! PriorityClasses by name, whether they have been listed once (until
//! then lookups answer "not synced" and admission fails closed), and a
//! group's resolved priority (the root CompositePodGroup's when it has
//! one).

use super::{ClusterIndex, ClusterState, name_of};
use crate::cache::index::Index;
use crate::pods::priority::{self, Class, Classes, Declared, Effective};
use k8s_openapi::api::scheduling::v1::PriorityClass;

// === impl ClusterState ===

impl ClusterState {
    /// PriorityClasses.
    pub fn classes(&self) -> &Classes {
        &self.classes
    }

    /// A PodGroup's resolved priority and preemption policy: the root
    /// CompositePodGroup's when the group is in a hierarchy (the root is
    /// authoritative), else its own.
    pub fn group_priority(&self, namespace: &str, name: &str) -> Option<Effective> {
        let g = self.group(namespace, name)?;
        let declared = match self.root_composite(namespace, name) {
            Some(root) => Declared {
                priority: root.spec.priority,
                class_name: root.spec.priority_class_name.as_deref(),
                preemption_policy: root.spec.preemption_policy.as_deref(),
            },
            None => Declared {
                priority: g.spec.priority,
                class_name: g.spec.priority_class_name.as_deref(),
                preemption_policy: g.spec.preemption_policy.as_deref(),
            },
        };
        Some(priority::resolve(declared, &self.classes))
    }
}

// === impl ClusterIndex ===

impl ClusterIndex {
    /// Whether the PriorityClasses have been listed once.
    pub fn priority_classes_synced(&self) -> bool {
        self.classes_synced
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Marks the PriorityClasses synced (standalone mode: the store is the
    /// whole truth from the start) or not.
    pub fn set_priority_classes_synced(&self, synced: bool) {
        self.classes_synced
            .store(synced, std::sync::atomic::Ordering::Release);
    }

    /// One PriorityClass by name, or "not synced" before the first list.
    pub fn lookup_priority_class(&self, name: &str) -> priority::ClassLookup {
        priority::lookup(
            &self.state.read().classes,
            self.priority_classes_synced(),
            name,
        )
    }

    fn class_of(pc: &PriorityClass) -> Class {
        Class {
            value: pc.value.unwrap_or(0),
            preemption_policy: pc.preemption_policy.clone(),
            global_default: pc.global_default.unwrap_or(false),
        }
    }
    pub fn apply_priority_class(&self, pc: &PriorityClass) {
        self.write()
            .classes
            .insert(name_of(&pc.metadata), Self::class_of(pc));
    }
    pub fn delete_priority_class(&self, name: &str) {
        self.write().classes.remove(name);
    }
    /// An index holding exactly these PriorityClasses, synced: for running
    /// the admission webhooks without watchers (embedding, tests).
    pub fn with_priority_classes(pcs: &[PriorityClass]) -> Self {
        let index = Self::new();
        index.reset_priority_classes(pcs);
        index
    }
    /// Replaces every PriorityClass (a relist); marks them synced.
    pub fn reset_priority_classes(&self, pcs: &[PriorityClass]) {
        self.write().classes = pcs
            .iter()
            .map(|pc| (name_of(&pc.metadata), Self::class_of(pc)))
            .collect();
        self.set_priority_classes_synced(true);
    }
}

impl Index<PriorityClass> for ClusterIndex {
    fn apply(&self, obj: PriorityClass) {
        self.apply_priority_class(&obj)
    }
    fn delete(&self, _namespace: &str, name: &str) {
        self.delete_priority_class(name)
    }
    fn reset(&self, objs: Vec<PriorityClass>) {
        self.reset_priority_classes(&objs)
    }
}
