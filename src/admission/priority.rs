//! How admission checks PriorityClass names: through [`PriorityLookup`],
//! a small read-only trait.
//!
//! The service has one PriorityClass index, the cluster index's
//! ([`ClusterIndex`], fed by its watcher or the standalone store), which
//! implements the trait; webhooks embedded without watchers use a cluster
//! index of their own ([`ClusterIndex::with_priority_classes`]). Until the
//! index has seen its initial list it is *not synced* and every lookup
//! answers [`ClassLookup::NotSynced`]: admission then fails closed instead
//! of guessing.

use crate::cache::cluster_index::ClusterIndex;
use crate::workload::PriorityClassRef;

pub use crate::pods::priority::ClassLookup;

/// A PriorityClass reference that does not resolve, or resolves to a value
/// other than the explicit `priority` beside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassProblem {
    /// The reference (field path and class name).
    pub reference: PriorityClassRef,
    /// [`ClassLookup::Missing`] or [`ClassLookup::NotSynced`]; or
    /// [`ClassLookup::Found`] with the class's value when the explicit
    /// `priority` differs from it (the problem is then at
    /// [`PriorityClassRef::priority_path`]).
    pub lookup: ClassLookup,
}

impl ClassProblem {
    /// The field the problem is about.
    pub fn field(&self) -> &str {
        match self.lookup {
            ClassLookup::Found(_) => &self.reference.priority_path,
            _ => &self.reference.path,
        }
    }
}

impl std::fmt::Display for ClassProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ClassProblem { reference, lookup } = self;
        match lookup {
            ClassLookup::Found(value) => write!(
                f,
                "{}: Forbidden: the integer value of priority ({}) must not differ from the value \
                 {value} of PriorityClass {:?} named in {}: the priority admission controller \
                 computes {value} from that PriorityClass",
                reference.priority_path,
                reference.priority.unwrap_or_default(),
                reference.name,
                reference.path
            ),
            ClassLookup::NotSynced => write!(
                f,
                "{}: Internal error: cannot check that PriorityClass {:?} exists: the scheduler's \
                 PriorityClass cache is not synced yet, so the request is refused (fail closed); retry shortly",
                reference.path, reference.name
            ),
            _ => write!(
                f,
                "{}: Not found: {:?}: no PriorityClass with this name exists",
                reference.path, reference.name
            ),
        }
    }
}

/// Read access to a PriorityClass index.
pub trait PriorityLookup: Send + Sync + std::fmt::Debug {
    /// Looks one name up.
    fn lookup(&self, name: &str) -> ClassLookup;

    /// Every reference that does not resolve, in order, and every explicit
    /// `priority` that differs from its class's value. Nothing is written
    /// back: a group's priority stays what its author wrote.
    fn check(&self, refs: &[PriorityClassRef]) -> Vec<ClassProblem> {
        refs.iter()
            .filter_map(|r| match self.lookup(&r.name) {
                ClassLookup::Found(value) if r.priority.is_none_or(|p| p == value) => None,
                lookup => Some(ClassProblem {
                    reference: r.clone(),
                    lookup,
                }),
            })
            .collect()
    }
}

/// The service's one index: the cluster index's PriorityClasses.
impl PriorityLookup for ClusterIndex {
    fn lookup(&self, name: &str) -> ClassLookup {
        self.lookup_priority_class(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit;
    use k8s_openapi::api::scheduling::v1::PriorityClass;

    #[test]
    fn the_cluster_index_is_the_lookup_and_fails_closed_until_listed() {
        let nodes = ClusterIndex::new();
        let lookup: &dyn PriorityLookup = &nodes;
        nodes.apply_priority_class(&testkit::priority_class("high", 1000).typed::<PriorityClass>());
        assert_eq!(lookup.lookup("high"), ClassLookup::NotSynced);
        nodes.reset_priority_classes(&[
            testkit::priority_class("high", 1000).typed::<PriorityClass>()
        ]);
        assert!(nodes.priority_classes_synced());
        assert_eq!(lookup.lookup("high"), ClassLookup::Found(1000));
        assert_eq!(lookup.lookup("low"), ClassLookup::Missing);
        nodes.apply_priority_class(&testkit::priority_class("low", 1).typed::<PriorityClass>());
        nodes.delete_priority_class("high");
        assert_eq!(lookup.lookup("low"), ClassLookup::Found(1));
        assert_eq!(lookup.lookup("high"), ClassLookup::Missing);
        // The same index the extender resolves priorities from.
        assert_eq!(nodes.read().classes().get("low").map(|c| c.value), Some(1));
        nodes.set_priority_classes_synced(false);
        assert_eq!(lookup.lookup("low"), ClassLookup::NotSynced);
    }

    #[test]
    fn fails_closed_until_synced() {
        let index = ClusterIndex::new();
        let index: &dyn PriorityLookup = {
            index.apply_priority_class(
                &testkit::priority_class("high", 1000).typed::<PriorityClass>(),
            );
            &index
        };
        assert_eq!(index.lookup("high"), ClassLookup::NotSynced);
        let listed = ClusterIndex::with_priority_classes(&[
            testkit::priority_class("high", 1000).typed::<PriorityClass>()
        ]);
        let index: &dyn PriorityLookup = &listed;
        assert_eq!(index.lookup("high"), ClassLookup::Found(1000));
        assert_eq!(index.lookup("low"), ClassLookup::Missing);
    }

    #[test]
    fn apply_delete_reset() {
        let nodes = ClusterIndex::with_priority_classes(&[
            testkit::priority_class("a", 1).typed::<PriorityClass>()
        ]);
        let index: &dyn PriorityLookup = &nodes;
        nodes.apply_priority_class(&testkit::priority_class("b", 2).typed::<PriorityClass>());
        nodes.apply_priority_class(&testkit::priority_class("a", 3).typed::<PriorityClass>());
        assert_eq!(index.lookup("a"), ClassLookup::Found(3));
        nodes.delete_priority_class("a");
        assert_eq!(index.lookup("a"), ClassLookup::Missing);
        nodes.reset_priority_classes(&[testkit::priority_class("c", 4).typed::<PriorityClass>()]);
        assert_eq!(index.lookup("b"), ClassLookup::Missing);
        assert_eq!(index.lookup("c"), ClassLookup::Found(4));
        let problems = index.check(&[
            PriorityClassRef {
                path: "spec.priorityClassName".into(),
                name: "c".into(),
                priority: None,
                priority_path: "spec.priority".into(),
            },
            PriorityClassRef {
                path: "spec.x".into(),
                name: "zz".into(),
                priority: None,
                priority_path: "spec.y".into(),
            },
        ]);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].to_string().starts_with("spec.x: Not found"));
    }

    #[test]
    fn explicit_priority_must_match_the_class() {
        let nodes = ClusterIndex::with_priority_classes(&[
            testkit::priority_class("high", 1000).typed::<PriorityClass>()
        ]);
        let index: &dyn PriorityLookup = &nodes;
        let at = |priority| PriorityClassRef {
            path: "spec.priorityClassName".into(),
            name: "high".into(),
            priority,
            priority_path: "spec.priority".into(),
        };
        assert_eq!(index.check(&[at(None), at(Some(1000))]), vec![]);
        let problems = index.check(&[at(Some(5))]);
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].lookup, ClassLookup::Found(1000));
        assert_eq!(problems[0].field(), "spec.priority");
        let text = problems[0].to_string();
        assert!(
            text.starts_with("spec.priority: Forbidden: the integer value of priority (5)")
                && text.contains("1000"),
            "{text}"
        );
    }
}
