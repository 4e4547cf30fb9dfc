//! PodGroups and CompositePodGroups, and each PodGroup's member pods as
//! counted.
//!
//! The group hierarchy as the snapshot holds it: the one walk from a group
//! up `parentCompositePodGroupName` to its root ([`ClusterState::chain`],
//! with its cycle and depth errors), and the reads for group-aware
//! preemption over it: the pods counted on a node, and how a PodGroup may
//! be disrupted (its own `disruptionMode`, or `All` on any
//! CompositePodGroup above it).

use super::{ClusterIndex, ClusterState, Key, PodEntry, key_of};
use crate::cache::index::Index;
use crate::model::refs::{self, GroupRef, MAX_GROUP_DEPTH};
use k8s_openapi::api::scheduling::v1alpha3::CompositePodGroup;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use smallvec::SmallVec;
use std::collections::BTreeMap;

/// A group object of the snapshot: a PodGroup or a CompositePodGroup.
#[derive(Debug, Clone, Copy)]
pub enum GroupObject<'a> {
    /// A PodGroup (the first level of a pod's chain).
    Pod(&'a PodGroup),
    /// A CompositePodGroup (every parent).
    Composite(&'a CompositePodGroup),
}

impl<'a> GroupObject<'a> {
    /// `parentCompositePodGroupName`, when set and not empty.
    pub fn parent(&self) -> Option<&'a str> {
        match self {
            GroupObject::Pod(g) => g.spec.parent_composite_pod_group_name.as_deref(),
            GroupObject::Composite(c) => c.spec.parent_composite_pod_group_name.as_deref(),
        }
        .filter(|p| !p.is_empty())
    }
}

/// One level of a chain: a group that exists, innermost first.
#[derive(Debug, Clone, Copy)]
pub struct Link<'s, 'n> {
    /// The namespace of the whole chain (parents are in the child's).
    pub namespace: &'n str,
    /// The group's name.
    pub name: &'n str,
    /// The object the snapshot holds for it.
    pub object: GroupObject<'s>,
}

impl Link<'_, '_> {
    /// The group as a reference.
    pub fn group(&self) -> GroupRef {
        match self.object {
            GroupObject::Pod(_) => GroupRef::group(self.namespace, self.name),
            GroupObject::Composite(_) => GroupRef::composite(self.namespace, self.name),
        }
    }
}

/// Why a chain ends before its root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainError {
    /// A group on the way is not in the snapshot (it may still come).
    Missing(GroupRef),
    /// A parent reference comes back to a group already on the chain: the
    /// groups from that one on, and it again.
    Cycle(Vec<GroupRef>),
    /// The chain is longer than [`MAX_GROUP_DEPTH`] levels: the groups
    /// walked and the parent that would be one too many.
    TooDeep(Vec<GroupRef>),
}

impl ChainError {
    /// The message users see for a broken hierarchy (`None` for a missing
    /// group, which each caller words for itself).
    pub fn broken_message(&self) -> Option<String> {
        match self {
            ChainError::Missing(_) => None,
            ChainError::Cycle(path) => Some(refs::cycle_message(path)),
            ChainError::TooDeep(path) => Some(refs::too_deep_message(path)),
        }
    }
}

/// The walk from a group to its root (see [`ClusterState::chain`]).
pub struct Chain<'s, 'n> {
    /// The snapshot walked.
    snap: &'s ClusterState,
    /// The namespace of every level.
    namespace: &'n str,
    /// Whether the first level is a CompositePodGroup.
    first_composite: bool,
    /// What the next call yields.
    next: Step<'n>,
    /// Names of the levels yielded so far, innermost first.
    seen: SmallVec<[&'n str; MAX_GROUP_DEPTH]>,
}

/// What a [`Chain`] does next.
enum Step<'a> {
    /// Visits the group of this name.
    Visit(&'a str),
    /// Ends with this error (after yielding the level that revealed it).
    Fail(ChainError),
    /// Has ended.
    Done,
}

impl Chain<'_, '_> {
    /// The reference of the level at `i` (levels past the first are composites).
    fn group_at(&self, i: usize, name: &str) -> GroupRef {
        if i == 0 && !self.first_composite {
            GroupRef::group(self.namespace, name)
        } else {
            GroupRef::composite(self.namespace, name)
        }
    }

    /// The levels from `from` on and then `next`, as references.
    fn path(&self, from: usize, next: &str) -> Vec<GroupRef> {
        let mut path: Vec<GroupRef> = (from..self.seen.len())
            .map(|i| self.group_at(i, self.seen[i]))
            .collect();
        path.push(GroupRef::composite(self.namespace, next));
        path
    }
}

impl<'s: 'n, 'n> Iterator for Chain<'s, 'n> {
    type Item = Result<Link<'s, 'n>, ChainError>;

    fn next(&mut self) -> Option<Self::Item> {
        let name = match std::mem::replace(&mut self.next, Step::Done) {
            Step::Visit(name) => name,
            Step::Fail(e) => return Some(Err(e)),
            Step::Done => return None,
        };
        let level = self.seen.len();
        let object = if level == 0 && !self.first_composite {
            self.snap.group(self.namespace, name).map(GroupObject::Pod)
        } else {
            self.snap
                .composite(self.namespace, name)
                .map(GroupObject::Composite)
        };
        let Some(object) = object else {
            return Some(Err(ChainError::Missing(self.group_at(level, name))));
        };
        self.seen.push(name);
        if let Some(parent) = object.parent() {
            // A parent is a composite: only a composite level can be it again.
            let again = (0..self.seen.len())
                .find(|&i| (i > 0 || self.first_composite) && self.seen[i] == parent);
            self.next = if let Some(i) = again {
                Step::Fail(ChainError::Cycle(self.path(i, parent)))
            } else if self.seen.len() >= MAX_GROUP_DEPTH {
                Step::Fail(ChainError::TooDeep(self.path(0, parent)))
            } else {
                Step::Visit(parent)
            };
        }
        Some(Ok(Link {
            namespace: self.namespace,
            name,
            object,
        }))
    }
}

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
    /// The walk from a group (a CompositePodGroup when `composite`) up
    /// `parentCompositePodGroupName` to its root, innermost first. It ends
    /// with an error at a group the snapshot does not hold, at a parent
    /// reference that comes back to a group already walked (a cycle), or
    /// when a parent would make the chain longer than [`MAX_GROUP_DEPTH`]
    /// levels.
    pub fn chain<'s, 'n>(
        &'s self,
        namespace: &'n str,
        composite: bool,
        name: &'n str,
    ) -> Chain<'s, 'n> {
        Chain {
            snap: self,
            namespace,
            first_composite: composite,
            next: Step::Visit(name),
            seen: SmallVec::new(),
        }
    }

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

    /// The CompositePodGroups above a PodGroup, innermost first, as far as
    /// its [`chain`](ClusterState::chain) goes.
    fn ancestors<'s: 'n, 'n>(
        &'s self,
        namespace: &'n str,
        group: &'n str,
    ) -> impl Iterator<Item = (&'n str, &'s CompositePodGroup)> + 'n {
        self.chain(namespace, false, group)
            .map_while(Result::ok)
            .filter_map(|l| match l.object {
                GroupObject::Composite(c) => Some((l.name, c)),
                GroupObject::Pod(_) => None,
            })
    }

    /// The root CompositePodGroup above a PodGroup (`None` when the group
    /// has no parent, or the walk meets a missing parent or a cycle): the
    /// object whose priority is authoritative for the whole hierarchy.
    pub fn root_composite(&self, namespace: &str, group: &str) -> Option<&CompositePodGroup> {
        let mut root = None;
        for link in self.chain(namespace, false, group) {
            root = Some(link.ok()?.object);
        }
        match root? {
            GroupObject::Composite(c) => Some(c),
            GroupObject::Pod(_) => None,
        }
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

// === impl ClusterState: the groups held ===

impl ClusterState {
    /// Remembers a deleted PodGroup's parent while member pods remain.
    fn depart(&mut self, key: Key, old: &PodGroup) {
        let parent = old
            .spec
            .parent_composite_pod_group_name
            .as_deref()
            .filter(|p| !p.is_empty());
        match parent {
            Some(p) if self.members.contains_key(&key) => {
                self.departed.insert(key, p.to_owned());
            }
            _ => {
                self.departed.remove(&key);
            }
        }
    }

    /// Whether any PodGroup was deleted while member pods remained.
    pub fn any_departed(&self) -> bool {
        !self.departed.is_empty()
    }

    /// PodGroups in `namespace` deleted while member pods remained whose
    /// parent was `parent`, sorted. Their members stay where they are
    /// (bound pods outlive their group), so they still fix the parent's
    /// topology domain: without them a composite whose child group was
    /// deleted and is coming back would plan its other children in
    /// another domain, and span two once the group returns.
    pub fn departed_groups(&self, namespace: &str, parent: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .departed
            .iter()
            .filter(|((ns, _), p)| ns == namespace && p.as_str() == parent)
            .map(|((_, n), _)| n.clone())
            .collect();
        v.sort();
        v
    }

    /// The CompositePodGroup a pod's PodGroup names as its parent (what a
    /// bind records on the pod: [`refs::PARENT_COMPOSITE_ANNOTATION`]).
    pub(super) fn pod_parent(&self, namespace: &str, pod: &str) -> Option<&str> {
        let group = self.pod(namespace, pod)?.group.as_deref()?;
        self.group(namespace, group)?
            .spec
            .parent_composite_pod_group_name
            .as_deref()
            .filter(|p| !p.is_empty())
    }

    /// A PodGroup.
    pub fn group(&self, namespace: &str, name: &str) -> Option<&PodGroup> {
        self.groups.get(&(namespace.to_owned(), name.to_owned()))
    }

    /// A CompositePodGroup.
    pub fn composite(&self, namespace: &str, name: &str) -> Option<&CompositePodGroup> {
        self.composites
            .get(&(namespace.to_owned(), name.to_owned()))
    }

    /// The member pods of a PodGroup as counted (the assumed version
    /// while one exists), with their names.
    pub fn member_pods<'a>(
        &'a self,
        namespace: &str,
        group: &str,
    ) -> impl Iterator<Item = (&'a str, &'a PodEntry)> + 'a {
        self.members(namespace, group)
            .into_iter()
            .flatten()
            .map(|(n, p)| (n.as_str(), p))
    }

    /// Member pods of a PodGroup by name (see [`ClusterState::member_pods`]).
    pub fn members(&self, namespace: &str, group: &str) -> Option<&BTreeMap<String, PodEntry>> {
        self.members.get(&(namespace.to_owned(), group.to_owned()))
    }
}

// === impl ClusterIndex ===

impl ClusterIndex {
    // PodGroups
    pub fn apply_pod_group(&self, g: &PodGroup) {
        let key = key_of(&g.metadata);
        let mut s = self.write();
        s.departed.remove(&key);
        s.groups.insert(key, g.clone());
    }
    pub fn delete_pod_group(&self, namespace: &str, name: &str) {
        let key = (namespace.to_owned(), name.to_owned());
        let mut s = self.write();
        if let Some(old) = s.groups.remove(&key) {
            s.depart(key, &old);
        }
    }
    pub fn reset_pod_groups(&self, gs: &[PodGroup]) {
        let mut s = self.write();
        let mut old = std::mem::replace(
            &mut s.groups,
            gs.iter()
                .map(|g| (key_of(&g.metadata), g.clone()))
                .collect(),
        );
        // Deletions the relist reveals depart like watched ones.
        old.retain(|k, _| !s.groups.contains_key(k));
        let ClusterState {
            groups, departed, ..
        } = &mut *s;
        departed.retain(|k, _| !groups.contains_key(k));
        for (key, g) in old {
            s.depart(key, &g);
        }
    }

    // CompositePodGroups
    pub fn apply_composite(&self, g: &CompositePodGroup) {
        self.write()
            .composites
            .insert(key_of(&g.metadata), g.clone());
    }
    pub fn delete_composite(&self, namespace: &str, name: &str) {
        self.write()
            .composites
            .remove(&(namespace.to_owned(), name.to_owned()));
    }
    pub fn reset_composites(&self, gs: &[CompositePodGroup]) {
        self.write().composites = gs
            .iter()
            .map(|g| (key_of(&g.metadata), g.clone()))
            .collect();
    }
}

impl Index<PodGroup> for ClusterIndex {
    fn apply(&self, obj: PodGroup) {
        self.apply_pod_group(&obj)
    }
    fn delete(&self, namespace: &str, name: &str) {
        self.delete_pod_group(namespace, name)
    }
    fn reset(&self, objs: Vec<PodGroup>) {
        self.reset_pod_groups(&objs)
    }
}

impl Index<CompositePodGroup> for ClusterIndex {
    fn apply(&self, obj: CompositePodGroup) {
        self.apply_composite(&obj)
    }
    fn delete(&self, namespace: &str, name: &str) {
        self.delete_composite(namespace, name)
    }
    fn reset(&self, objs: Vec<CompositePodGroup>) {
        self.reset_composites(&objs)
    }
}
