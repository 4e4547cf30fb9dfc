//! Pods: what the cache keeps of each ([`PodEntry`]), where a pod is
//! counted (its node, or the node a bind assumed it on) and what it adds
//! there, the group member and claim user indexes, and the assumptions
//! binds make until the watch shows the pod bound.

use super::nodes::{Load, USED};
use super::{ClusterIndex, ClusterState, Key, key_of};
use crate::cache::index::Index;
use crate::model::refs::PARENT_COMPOSITE_ANNOTATION;
use crate::model::resources::ResourceVec;
use crate::pods::fit::{self, Amounts, ClaimRef, PodLevel, PodLoad};
use crate::pods::priority::Declared;
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashSet;
use std::sync::Arc;

/// What the cache keeps of a Pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodEntry {
    /// `metadata.uid`.
    pub uid: String,
    /// `spec.nodeName` (or the node it is assumed on).
    pub node: Option<String>,
    /// Effective requests (`None` when a quantity does not parse).
    pub requests: Option<Amounts>,
    /// Pod-level requests: the resources whose DRA amounts lie inside
    /// `requests`, with their headroom ([`fit::PodLevel`]).
    pub level: PodLevel,
    /// `spec.schedulingGroup.podGroupName`.
    pub group: Option<String>,
    /// Annotation [`PARENT_COMPOSITE_ANNOTATION`]: the parent its PodGroup
    /// named when the pod was bound. Read only while the PodGroup is
    /// missing ([`ClusterState::departed_groups`]).
    pub bound_parent: Option<String>,
    /// `spec.priority`.
    pub priority: Option<i32>,
    /// `spec.priorityClassName`.
    pub priority_class: Option<String>,
    /// `spec.preemptionPolicy`.
    pub preemption_policy: Option<String>,
    /// ResourceClaims used, names qualified as `namespace/name`.
    pub claims: Vec<ClaimRef>,
    /// `Succeeded` or `Failed`: counts nowhere.
    pub terminal: bool,
    /// `metadata.deletionTimestamp` is set: the pod is being deleted (it
    /// still counts on its node until it is gone).
    pub deleting: bool,
    /// `status.nominatedNodeName`: where kube-scheduler preempted for it.
    pub nominated: Option<String>,
    /// Assumed by a bind still waiting for its devices' binding conditions
    /// ([`ClusterIndex::set_awaiting_devices`]): counted on its node, but not
    /// placed for its gang's quorum, so no other member is released on the
    /// strength of a member whose devices may never be ready.
    pub awaiting_devices: bool,
    /// Assumed by a bind whose Binding was sent
    /// ([`ClusterIndex::mark_binding_sent`]): it may exist on the API server
    /// whatever became of the call, so the pod is bound nowhere else until
    /// the watch shows where it is ([`ClusterState::binding_elsewhere`]).
    pub binding_sent: bool,
    /// The bind that made this assumption answered kube-scheduler with a
    /// failure while the assumption stays ([`ClusterIndex::mark_unreserved`]):
    /// a member kept reserved for its gang, or a Binding whose outcome is
    /// unknown. kube-scheduler ran Unreserve and forgot the pod, so from
    /// then on its filter counts the pod where it is nominated, not here
    /// ([`ClusterState::nominated_pods`]).
    pub unreserved: bool,
    /// `nodeSelector` and required node affinity (group feasibility).
    pub node_rule: Option<Arc<crate::pods::selector::NodeRule>>,
}

impl PodEntry {
    /// Extracts what fit and grouping read.
    pub fn from_pod(pod: &Pod) -> PodEntry {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let spec = pod.spec.as_ref();
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let demand = spec.map_or(Some((Amounts::new(), PodLevel::new())), |s| {
            fit::pod_demand_of(s, pod.status.as_ref()).ok()
        });
        let (requests, level) = match demand {
            Some((r, l)) => (Some(r), l),
            None => (None, PodLevel::new()),
        };
        PodEntry {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            node: spec
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            requests,
            level,
            group: spec
                .and_then(|s| s.scheduling_group.as_ref())
                .and_then(|g| g.pod_group_name.clone()),
            bound_parent: pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(PARENT_COMPOSITE_ANNOTATION))
                .filter(|p| !p.is_empty())
                .cloned(),
            priority: spec.and_then(|s| s.priority),
            priority_class: spec.and_then(|s| s.priority_class_name.clone()),
            preemption_policy: spec.and_then(|s| s.preemption_policy.clone()),
            claims: spec
                .map(|s| fit::pod_claims(s, pod.status.as_ref()))
                .unwrap_or_default()
                .into_iter()
                .map(|c| ClaimRef {
                    claim: format!("{ns}/{}", c.claim),
                    refs: c.refs,
                })
                .collect(),
            terminal: matches!(phase, Some("Succeeded" | "Failed")),
            deleting: pod.metadata.deletion_timestamp.is_some(),
            nominated: pod
                .status
                .as_ref()
                .and_then(|s| s.nominated_node_name.clone())
                .filter(|n| !n.is_empty()),
            node_rule: spec
                .and_then(crate::pods::selector::NodeRule::of)
                .map(Arc::new),
            awaiting_devices: false,
            binding_sent: false,
            unreserved: false,
        }
    }

    /// The pod's own priority fields, as [`crate::pods::priority::resolve`] reads them.
    pub fn declared(&self) -> Declared<'_> {
        Declared {
            priority: self.priority,
            class_name: self.priority_class.as_deref(),
            preemption_policy: self.preemption_policy.as_deref(),
        }
    }
}

/// Where a pod is counted and, without claims, what it adds there.
struct Counted {
    /// The node the pod is counted on.
    node: String,
    /// Its plain load (`None`: it has claims and is recounted with them).
    plain: Option<Load>,
}

// === impl ClusterState ===

impl ClusterState {
    /// A cached pod (the assumed version while one exists).
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&PodEntry> {
        let k = (namespace.to_owned(), name.to_owned());
        self.assumed.get(&k).or_else(|| self.pods.get(&k))
    }

    /// The resourceVersion of gated claim `claim` (`namespace/name`) the
    /// device gate last let a bind of pod `uid` pass on, and until when that
    /// counts, while the pod is pending (see [`ClusterIndex::record_passed`]).
    pub fn passed_version(
        &self,
        namespace: &str,
        pod: &str,
        uid: &str,
        claim: &str,
    ) -> Option<(&str, tokio::time::Instant)> {
        let (u, until, claims) = self.passed.get(&(namespace.to_owned(), pod.to_owned()))?;
        if u != uid {
            return None;
        }
        claims
            .iter()
            .find(|(c, _)| c == claim)
            .map(|(_, rv)| (rv.as_str(), *until))
    }

    /// Pending pods kube-scheduler nominated to a node
    /// (`status.nominatedNodeName`: its preemption made room there for
    /// them), with that node, in key order. kube-scheduler counts them on
    /// that node when it filters any pod of no higher priority
    /// (`RunFilterPluginsWithNominatedPods`), so room they hold is not
    /// offered to such pods. A pod a bind here assumed is counted on its
    /// node instead, and left out while kube-scheduler holds it assumed
    /// too (it drops a nomination when it assumes the pod). Once the bind
    /// answered a failure the assumption outlives ([`PodEntry::unreserved`]:
    /// kept for its gang, or an unknown outcome), kube-scheduler has
    /// forgotten the pod, and a nomination the watch shows for another node
    /// (a preemption made for its retry) holds that room in its filter: it
    /// is counted there as well (simulation seed 600229: a sibling's
    /// uncertain bind kept it assumed on one node, its new nomination went
    /// uncounted on another, and a kept member's room there went to a
    /// member kube-scheduler then had no room left for).
    pub fn nominated_pods(&self) -> impl Iterator<Item = (&Key, &PodEntry, &str)> {
        self.nominated.iter().filter_map(|k| {
            let p = self.pods.get(k)?;
            let node = p.nominated.as_deref()?;
            match self.assumed.get(k) {
                Some(a) if !a.unreserved || a.node.as_deref() == Some(node) => None,
                _ => Some((k, p, node)),
            }
        })
    }

    /// Pods with passed claim versions remembered.
    pub fn passed_pods(&self) -> usize {
        self.passed.len()
    }

    /// A pod as the watch shows it (not its assumed version).
    pub fn watched_pod(&self, namespace: &str, name: &str) -> Option<&PodEntry> {
        self.pods.get(&(namespace.to_owned(), name.to_owned()))
    }

    /// Whether a pod is assumed (bound here, not yet seen bound).
    pub fn is_assumed(&self, namespace: &str, name: &str) -> bool {
        self.assumed
            .contains_key(&(namespace.to_owned(), name.to_owned()))
    }

    /// The node a Binding of the pod was sent for, when it is not `node`
    /// and the watch does not show the pod yet: the call may be in flight,
    /// or have answered without telling whether it was created (or created
    /// it, the watch not showing it yet). Binding the pod elsewhere then
    /// would count it on the new node while it may be on that one.
    pub fn binding_elsewhere(&self, namespace: &str, name: &str, node: &str) -> Option<&str> {
        let k = (namespace.to_owned(), name.to_owned());
        let a = self.assumed.get(&k)?;
        let node_sent = a.node.as_deref()?;
        (a.binding_sent && node_sent != node).then_some(node_sent)
    }

    /// The entry counted for a key: assumed wins over the watched one.
    pub(super) fn counted(&self, k: &Key) -> Option<&PodEntry> {
        self.assumed
            .get(k)
            .or_else(|| self.pods.get(k))
            .filter(|p| !p.terminal && p.node.is_some())
    }

    pub(super) fn counted_node(&self, k: &Key) -> Option<String> {
        self.counted(k).and_then(|p| p.node.clone())
    }

    /// Where a pod counts and its plain load (`None` with claims).
    fn counted_load(&mut self, k: &Key) -> Option<Counted> {
        let p = self
            .assumed
            .get(k)
            .or_else(|| self.pods.get(k))
            .filter(|p| !p.terminal && p.node.is_some())?;
        let plain = p.claims.is_empty().then(|| {
            let mut load: Load = p
                .requests
                .iter()
                .flatten()
                .filter(|(_, a)| **a > 0)
                .map(|(n, a)| (self.names.intern(n), *a))
                .collect();
            load.push((self.names.intern(fit::PODS), 1));
            load
        });
        Some(Counted {
            node: p.node.clone()?,
            plain,
        })
    }

    /// Moves a pod's index entry from `before` to where it counts now, and
    /// recomputes both nodes: plain pods by their own load alone, so the
    /// cost does not grow with the pods already on the node.
    fn reindex(&mut self, k: &Key, before: Option<Counted>) {
        let after = self.counted_load(k);
        if let Some(b) = &before
            && let Some(slot) = self.nodes.get_mut(&b.node)
        {
            slot.pods.remove(k);
            match &b.plain {
                Some(load) => self.names_freed += slot.plain.sub(load),
                None => {
                    slot.claimed.remove(k);
                }
            }
        }
        if let Some(a) = &after {
            let slot = self.nodes.entry(&a.node);
            slot.pods.insert(k.clone());
            match &a.plain {
                Some(load) => slot.plain.add(load),
                None => {
                    slot.claimed.insert(k.clone());
                }
            }
        }
        let mut nodes: Vec<&str> = before
            .iter()
            .chain(after.iter())
            .map(|c| c.node.as_str())
            .collect();
        nodes.dedup();
        for n in nodes {
            self.recompute(n);
        }
        self.refresh_member(k);
    }

    /// Marks the assumption bind `token` made with `mark` (nothing when
    /// the assumption is gone or another bind's), its member copy kept in
    /// step. `mark` answers whether it changed anything.
    fn mark_assumed(&mut self, k: &Key, token: u64, mark: impl FnOnce(&mut PodEntry) -> bool) {
        if self.assume_tokens.get(k) == Some(&token)
            && let Some(e) = self.assumed.get_mut(k)
            && mark(e)
        {
            self.refresh_member(k);
        }
    }

    /// Copies the pod's counted version into its group's member view.
    fn refresh_member(&mut self, k: &Key) {
        let Some(v) = self.assumed.get(k).or_else(|| self.pods.get(k)) else {
            return;
        };
        let Some(g) = &v.group else { return };
        if let Some(m) = self.members.get_mut(&(k.0.clone(), g.clone()))
            && let Some(slot) = m.get_mut(&k.1)
            && slot != v
        {
            *slot = v.clone();
        }
    }

    /// Recomputes what is counted on one node; drops an empty slot.
    pub(super) fn recompute(&mut self, node: &str) {
        let Some(slot) = self.nodes.get(node) else {
            return;
        };
        let mut vec = ResourceVec::new();
        for &(id, a) in &slot.plain.0 {
            vec.add_one(id, u64::try_from(a).unwrap_or(u64::MAX));
        }
        let entries: Vec<&PodEntry> = slot
            .claimed
            .iter()
            .filter_map(|k| self.counted(k))
            .collect();
        let empty = Amounts::new();
        let loads: Vec<PodLoad<'_>> = entries
            .iter()
            .map(|p| PodLoad {
                requests: p.requests.as_ref().unwrap_or(&empty),
                level: &p.level,
                claims: &p.claims,
            })
            .collect();
        let (used, errors) = fit::node_usage(&loads, |claim| self.devices_on(claim, node));
        for e in errors {
            tracing::warn!(node, error = %e, "DRA node-allocatable quantity ignored");
        }
        for (n, a) in &used {
            vec.add_one(self.names.intern(n), *a);
        }
        if let Some(i) = self.nodes.find(node) {
            self.nodes.set_col(i, USED, &vec);
            let slot = &mut self.nodes.slots[i as usize];
            self.names_freed += slot.used.iter().filter(|(id, _)| vec.get(*id) == 0).count();
            slot.used = vec;
        }
        self.nodes.release_if_empty(node);
    }

    /// Forgets a departed group whose last member `old` was (once the
    /// pod is gone, not while an update re-indexes it: a kubelet status
    /// write must not drop the memory).
    fn forget_departed_if_gone(&mut self, namespace: &str, old: &PodEntry) {
        if self.departed.is_empty() {
            return;
        }
        if let Some(g) = &old.group {
            let gk = (namespace.to_owned(), g.clone());
            if !self.members.contains_key(&gk) {
                self.departed.remove(&gk);
            }
        }
    }

    fn index_pod(&mut self, k: &Key, p: &PodEntry, add: bool) {
        if let Some(g) = &p.group {
            let gk = (k.0.clone(), g.clone());
            if add {
                // A bound member of a PodGroup this cache does not hold
                // departs under the parent it was bound under: the group
                // was deleted before this process saw it go.
                if let Some(parent) = &p.bound_parent
                    && p.node.is_some()
                    && !self.groups.contains_key(&gk)
                {
                    self.departed
                        .entry(gk.clone())
                        .or_insert_with(|| parent.clone());
                }
                self.members
                    .entry(gk)
                    .or_default()
                    .insert(k.1.clone(), p.clone());
            } else if let Some(m) = self.members.get_mut(&gk) {
                m.remove(&k.1);
                if m.is_empty() {
                    self.members.remove(&gk);
                }
            }
        }
        for c in &p.claims {
            if add {
                self.claim_users
                    .entry(c.claim.clone())
                    .or_default()
                    .insert(k.clone());
            } else if let Some(u) = self.claim_users.get_mut(&c.claim) {
                u.remove(k);
                if u.is_empty() {
                    self.claim_users.remove(&c.claim);
                }
            }
        }
    }

    fn put_pod(&mut self, k: Key, entry: PodEntry) {
        // Skipped while nothing is remembered: this runs for every pod event.
        if !self.passed.is_empty()
            && (entry.node.is_some()
                || entry.terminal
                || self
                    .passed
                    .get(&k)
                    .is_some_and(|(uid, _, _)| *uid != entry.uid))
        {
            self.passed.remove(&k);
        }
        let before = self.counted_load(&k);
        let old = self.pods.remove(&k);
        if let Some(old) = &old {
            self.index_pod(&k, old, false);
        }
        // The watch confirms an assumption once it shows the pod bound, or
        // shows a different pod (new uid) under the name.
        if let Some(a) = self.assumed.get(&k)
            && (entry.node.is_some() || a.uid != entry.uid || entry.terminal)
        {
            self.assumed.remove(&k);
            self.assume_tokens.remove(&k);
        }
        self.index_pod(&k, &entry, true);
        if let Some(old) = &old {
            self.forget_departed_if_gone(&k.0, old);
        }
        if entry.nominated.is_some() && entry.node.is_none() && !entry.terminal && !entry.deleting {
            self.nominated.insert(k.clone());
        } else if !self.nominated.is_empty() {
            self.nominated.remove(&k);
        }
        self.pods.insert(k.clone(), entry);
        self.reindex(&k, before);
    }

    fn remove_pod(&mut self, k: &Key) {
        if !self.passed.is_empty() {
            self.passed.remove(k);
        }
        let before = self.counted_load(k);
        if let Some(old) = self.pods.remove(k) {
            self.index_pod(k, &old, false);
            self.forget_departed_if_gone(&k.0, &old);
        }
        self.nominated.remove(k);
        self.assumed.remove(k);
        self.assume_tokens.remove(k);
        self.reindex(k, before);
    }
}

// === impl ClusterIndex ===

impl ClusterIndex {
    pub fn apply_pod(&self, pod: &Pod) {
        self.apply_pod_entry(key_of(&pod.metadata), PodEntry::from_pod(pod));
    }
    /// Applies an already extracted pod (watchers strip pods early).
    pub fn apply_pod_entry(&self, key: Key, entry: PodEntry) {
        self.write().put_pod(key, entry);
        self.pod_changes.notify_waiters();
    }
    pub fn delete_pod(&self, namespace: &str, name: &str) {
        self.write()
            .remove_pod(&(namespace.to_owned(), name.to_owned()));
        self.pod_changes.notify_waiters();
    }
    /// Notified after every Pod change: register (`notified()`, then
    /// `enable()`) before reading the state, then await.
    pub fn pod_changes(&self) -> &tokio::sync::Notify {
        &self.pod_changes
    }
    /// Deletes every pod not in `keep` (the end of a relist applied pod by pod).
    pub fn retain_pods(&self, keep: &HashSet<Key>) {
        let mut s = self.write();
        let gone: Vec<Key> = s
            .pods
            .keys()
            .filter(|k| !keep.contains(*k))
            .cloned()
            .collect();
        for k in gone {
            s.remove_pod(&k);
        }
        drop(s);
        self.pod_relists
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        self.pod_changes.notify_waiters();
    }
    /// Pod relists completed so far ([`ClusterIndex::reset_pods`],
    /// [`ClusterIndex::retain_pods`]): changes made and undone between two
    /// of them were never seen.
    pub fn pod_relists(&self) -> u64 {
        self.pod_relists.load(std::sync::atomic::Ordering::Acquire)
    }
    pub fn reset_pods(&self, pods: Vec<(Key, PodEntry)>) {
        let mut s = self.write();
        let keep: HashSet<&Key> = pods.iter().map(|(k, _)| k).collect();
        let gone: Vec<Key> = s
            .pods
            .keys()
            .filter(|k| !keep.contains(k))
            .cloned()
            .collect();
        for k in gone {
            s.remove_pod(&k);
        }
        for (k, e) in pods {
            s.put_pod(k, e);
        }
        drop(s);
        self.pod_relists
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        self.pod_changes.notify_waiters();
    }

    /// Remembers the versions of pod `uid`'s gated claims a bind of it
    /// passed the device gate on, while the pod is cached, pending, under
    /// that uid, until `until`. A later bind of the pod decides nothing on
    /// those versions meanwhile: kube-scheduler's Unreserve and PreBind
    /// write each claim before it binds the pod again.
    pub fn record_passed(
        &self,
        namespace: &str,
        pod: &str,
        uid: &str,
        until: tokio::time::Instant,
        claims: Vec<(String, String)>,
    ) {
        let k = (namespace.to_owned(), pod.to_owned());
        let mut s = self.write();
        if claims.is_empty()
            || !s
                .pods
                .get(&k)
                .is_some_and(|p| p.uid == uid && p.node.is_none() && !p.terminal)
        {
            return;
        }
        s.passed.insert(k, (uid.to_owned(), until, claims));
    }

    /// Remembers, for pod `uid` whose bind just failed, the versions of its
    /// gated claims the cache shows reserved for it, while the pod is
    /// cached, pending, under that uid, until `until`. kube-scheduler's
    /// Unreserve takes the pod out of each claim's `reservedFor` before its
    /// next binding cycle reserves it again, so a cache that has not shown
    /// that yet is behind (a watch gap may hide a deallocation and a new
    /// allocation, while the old one's conditions read `True`): the next
    /// bind's device gate decides nothing on it
    /// ([`ClusterState::passed_version`]; simulation seed 8862). Nothing is
    /// remembered for an index the standalone store feeds: it shows every
    /// write as it is made, and no kube-scheduler unreserves there.
    pub fn record_bind_ended(
        &self,
        namespace: &str,
        pod: &str,
        uid: &str,
        until: tokio::time::Instant,
    ) {
        if self.store_backed.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let k = (namespace.to_owned(), pod.to_owned());
        let mut s = self.write();
        let Some(p) = s.pods.get(&k) else {
            return;
        };
        if p.uid != uid || p.node.is_some() || p.terminal {
            return;
        }
        let mut claims: Vec<(String, String)> = p
            .claims
            .iter()
            .filter_map(|c| {
                let b = s.claim_binding(&c.claim)?;
                b.reserved_for
                    .iter()
                    .any(|r| r == uid)
                    .then(|| (c.claim.clone(), b.resource_version.clone()))
            })
            .collect();
        if claims.is_empty() {
            return;
        }
        if let Some((u, t, old)) = s.passed.get(&k)
            && u == uid
        {
            let until = until.max(*t);
            for (c, rv) in old {
                if !claims.iter().any(|(n, _)| n == c) {
                    claims.push((c.clone(), rv.clone()));
                }
            }
            s.passed.insert(k, (uid.to_owned(), until, claims));
            return;
        }
        s.passed.insert(k, (uid.to_owned(), until, claims));
    }

    /// The index is fed by the standalone store, which writes through it
    /// (no watch, so it never lags): see [`ClusterIndex::record_bind_ended`].
    pub fn set_store_backed(&self) {
        self.store_backed
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Counts a pod on `node` until the watch shows it bound (or gone).
    /// False when the pod is not cached (nothing to count).
    pub fn assume(&self, namespace: &str, name: &str, uid: &str, node: &str) -> bool {
        self.assume_for(namespace, name, uid, node).is_some()
    }

    /// [`ClusterIndex::assume`] for one bind: returns the token that
    /// [`ClusterIndex::forget_for`] needs to undo this assumption and no
    /// later one (a retried bind of the same pod takes a new token).
    pub fn assume_for(&self, namespace: &str, name: &str, uid: &str, node: &str) -> Option<u64> {
        let no_check = |_: &ClusterState, _: &PodEntry| Ok::<(), std::convert::Infallible>(());
        match self.assume_checked(namespace, name, uid, node, false, no_check) {
            Ok(token) => token,
            Err(never) => match never {},
        }
    }

    /// [`ClusterIndex::assume_for`] once `check` passes, the assumption
    /// marked as waiting for the pod's devices when `awaiting` and the pod
    /// uses ResourceClaims (in one step, so no quorum reads it placed in
    /// between); under the same write lock, so two binds to one node cannot both pass on the
    /// room only one of them has. `check` reads the state without the pod
    /// on `node`; it is skipped when the pod is counted there already (a
    /// retried bind of a kept or uncertain pod). `Ok(None)`: the pod is
    /// not cached (or was replaced).
    pub fn assume_checked<E>(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        node: &str,
        awaiting: bool,
        check: impl FnOnce(&ClusterState, &PodEntry) -> Result<(), E>,
    ) -> Result<Option<u64>, E> {
        let mut s = self.write();
        let k = (namespace.to_owned(), name.to_owned());
        let Some(mut e) = s.pods.get(&k).cloned() else {
            return Ok(None);
        };
        if !uid.is_empty() && e.uid != uid {
            return Ok(None);
        }
        let before = s.counted_load(&k);
        if before.as_ref().is_none_or(|b| b.node != node) {
            check(&s, &e)?;
        }
        // A retry to the node an earlier Binding was sent for keeps that
        // mark: the earlier one may still land.
        e.binding_sent = s
            .assumed
            .get(&k)
            .is_some_and(|a| a.binding_sent && a.node.as_deref() == Some(node));
        e.node = Some(node.to_owned());
        e.awaiting_devices = awaiting && !e.claims.is_empty();
        s.assumed.insert(k.clone(), e);
        let token = s.next_token;
        s.next_token += 1;
        s.assume_tokens.insert(k.clone(), token);
        s.reindex(&k, before);
        Ok(Some(token))
    }

    /// Marks the assumption bind `token` made as waiting for the pod's
    /// devices (`true`, before the device gate) or past them (`false`).
    /// Nothing when the assumption is gone or another bind's.
    pub fn set_awaiting_devices(&self, namespace: &str, name: &str, token: u64, awaiting: bool) {
        let k = (namespace.to_owned(), name.to_owned());
        self.write().mark_assumed(&k, token, |e| {
            let changed = e.awaiting_devices != awaiting;
            e.awaiting_devices = awaiting;
            changed
        });
    }

    /// Marks the assumption bind `token` made as having sent its Binding
    /// (see [`PodEntry::binding_sent`]; nothing when the assumption is gone
    /// or another bind's), and returns what the Binding records: the
    /// parent the pod's PodGroup names ([`ClusterState::pod_parent`]). One
    /// lock for both: every bind takes it.
    pub fn mark_binding_sent(&self, namespace: &str, name: &str, token: u64) -> Option<String> {
        let mut s = self.write();
        let k = (namespace.to_owned(), name.to_owned());
        s.mark_assumed(&k, token, |e| {
            e.binding_sent = true;
            true
        });
        s.pod_parent(namespace, name).map(str::to_owned)
    }

    /// Marks the assumption bind `token` made as kept past a failure that
    /// bind answered kube-scheduler (see [`PodEntry::unreserved`]; nothing
    /// when the assumption is gone or another bind's).
    pub fn mark_unreserved(&self, namespace: &str, name: &str, token: u64) {
        let k = (namespace.to_owned(), name.to_owned());
        self.write().mark_assumed(&k, token, |e| {
            e.unreserved = true;
            true
        });
    }

    /// Drops an assumption (the bind failed), whichever bind made it.
    pub fn forget(&self, namespace: &str, name: &str) {
        let mut s = self.write();
        let k = (namespace.to_owned(), name.to_owned());
        let before = s.counted_load(&k);
        if s.assumed.remove(&k).is_some() {
            s.assume_tokens.remove(&k);
            s.reindex(&k, before);
        }
    }

    /// Drops the assumption bind `token` made, if it is still the pod's
    /// (a newer bind's assumption is left alone). Whether it was dropped.
    pub fn forget_for(&self, namespace: &str, name: &str, token: u64) -> bool {
        let mut s = self.write();
        let k = (namespace.to_owned(), name.to_owned());
        if s.assume_tokens.get(&k) != Some(&token) {
            return false;
        }
        let before = s.counted_load(&k);
        s.assume_tokens.remove(&k);
        if s.assumed.remove(&k).is_some() {
            s.reindex(&k, before);
        }
        true
    }
}

/// Every Pod, reduced at once to what node fit reads.
impl Index<Pod> for ClusterIndex {
    fn apply(&self, obj: Pod) {
        self.apply_pod_entry(key_of(&obj.metadata), PodEntry::from_pod(&obj))
    }
    fn delete(&self, namespace: &str, name: &str) {
        self.delete_pod(namespace, name)
    }
    fn reset(&self, objs: Vec<Pod>) {
        self.reset_pods(
            objs.iter()
                .map(|p| (key_of(&p.metadata), PodEntry::from_pod(p)))
                .collect(),
        )
    }
    const PAGED_RELIST: bool = true;
    fn retain(&self, keep: &HashSet<Key>) {
        self.retain_pods(keep)
    }
}
