//! Reads for group-aware preemption: the pods counted on a node, and how a
//! PodGroup may be disrupted (its own `disruptionMode`, or `All` on any
//! CompositePodGroup above it, following `parentCompositePodGroupName`).

use super::{ClusterState, Key, PodEntry};
use k8s_openapi::api::scheduling::v1alpha3::CompositePodGroup;

/// Parent references followed at most (the one hierarchy depth limit; a
/// cycle of bad references ends here).
use crate::model::refs::MAX_GROUP_DEPTH as MAX_DEPTH;

/// The set of pods a victim's disruption takes with it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// `Single` (the default): pods are disrupted one by one.
    Single,
    /// The PodGroup is `All`: all of its pods go together.
    Group(String),
    /// A CompositePodGroup above is `All`: all pods of every PodGroup
    /// beneath it go together (the topmost such CompositePodGroup).
    Composite(String),
}

// === impl ClusterState ===

impl ClusterState {
    /// Pods counted on a node (bound or assumed there), assumed versions first.
    pub fn pods_on<'a>(&'a self, node: &str) -> impl Iterator<Item = (&'a Key, &'a PodEntry)> {
        self.nodes
            .get(node)
            .into_iter()
            .flat_map(|s| s.pods.iter())
            .filter_map(|k| self.counted(k).map(|e| (k, e)))
    }

    /// How a PodGroup may be disrupted. An unknown PodGroup is `Single`,
    /// the API's default.
    pub fn disruption_scope(&self, namespace: &str, group: &str) -> Scope {
        let Some(g) = self.group(namespace, group) else {
            return Scope::Single;
        };
        let mut scope = if g
            .spec
            .disruption_mode
            .as_ref()
            .is_some_and(|m| m.all.is_some())
        {
            Scope::Group(group.to_owned())
        } else {
            Scope::Single
        };
        for (name, c) in self.ancestors(namespace, group) {
            if c.spec
                .disruption_mode
                .as_ref()
                .is_some_and(|m| m.all.is_some())
            {
                scope = Scope::Composite(name.to_owned());
            }
        }
        scope
    }

    /// The CompositePodGroups above a PodGroup, innermost first, following
    /// `parentCompositePodGroupName` while the parents exist.
    fn ancestors<'a>(
        &'a self,
        namespace: &'a str,
        group: &str,
    ) -> impl Iterator<Item = (&'a str, &'a CompositePodGroup)> + 'a {
        let first = self
            .group(namespace, group)
            .and_then(|g| g.spec.parent_composite_pod_group_name.as_deref());
        std::iter::successors(
            first.and_then(|n| Some((n, self.composite(namespace, n)?))),
            move |(_, c)| {
                let n = c.spec.parent_composite_pod_group_name.as_deref()?;
                Some((n, self.composite(namespace, n)?))
            },
        )
        .take(MAX_DEPTH)
    }

    /// The root CompositePodGroup above a PodGroup (`None` when the group
    /// has no parent, or the walk meets a missing parent or a cycle): the
    /// object whose priority is authoritative for the whole hierarchy.
    pub fn root_composite<'a>(
        &'a self,
        namespace: &'a str,
        group: &str,
    ) -> Option<&'a CompositePodGroup> {
        let mut seen: Vec<&str> = Vec::new();
        let mut root = None;
        for (name, c) in self.ancestors(namespace, group) {
            if seen.contains(&name) {
                return None;
            }
            seen.push(name);
            root = Some(c);
        }
        let root = root?;
        // The walk stopped at a root only when it has no parent.
        root.spec
            .parent_composite_pod_group_name
            .as_deref()
            .is_none_or(str::is_empty)
            .then_some(root)
    }

    /// Whether a PodGroup lies beneath a CompositePodGroup.
    fn beneath(&self, namespace: &str, group: &str, composite: &str) -> bool {
        self.ancestors(namespace, group)
            .any(|(name, _)| name == composite)
    }

    /// The pods of a scope that are counted on some node (pending members
    /// are not running and cannot be disrupted), sorted by key.
    pub fn scope_pods(&self, namespace: &str, scope: &Scope) -> Vec<(&Key, &PodEntry)> {
        let groups: Vec<&str> = match scope {
            Scope::Single => return Vec::new(),
            Scope::Group(g) => vec![g.as_str()],
            Scope::Composite(c) => self
                .groups
                .keys()
                .filter(|(ns, g)| ns == namespace && self.beneath(ns, g, c))
                .map(|(_, g)| g.as_str())
                .collect(),
        };
        let mut out: Vec<(&Key, &PodEntry)> = groups
            .into_iter()
            .filter_map(|g| {
                self.members
                    .get_key_value(&(namespace.to_owned(), g.to_owned()))
            })
            .flat_map(|((ns, _), members)| members.keys().map(move |n| (ns, n)))
            .filter_map(|(ns, n)| {
                let (k, _) = self.pods.get_key_value(&(ns.clone(), n.clone()))?;
                self.counted(k).map(|e| (k, e))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(b.0));
        out
    }
}
