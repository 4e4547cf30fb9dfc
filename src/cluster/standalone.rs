//! The in-memory cluster of standalone mode (`--state`).
//!
//! Objects are kept verbatim as JSON, keyed by kind, namespace and name, with
//! a store-wide resourceVersion counter. Every change, including the
//! scheduler's own status writes, is applied to the caches exactly as a
//! watch event would be, in store order, through the same [`Index`] calls.
//!
//! Which kinds are accepted, how each is checked and decoded, and which
//! index receives it all come from the kind table ([`super::kinds`]):
//! adding a kind there adds it here, to the object API and to `--state`
//! loading.

use super::{
    BindError, ClaimAllocationRef, ClusterWriter, EventKind, EventReason, ObjectRef, PodBinding,
    WriteError,
};
use crate::cache::RunCache;
use crate::cache::cluster_index::ClusterIndex;
use crate::cache::index::{Index, Indexes};
use crate::crd::{Run, RunStatus};
use crate::model::refs::GroupRef;
use crate::model::runtime_pod::RUNTIMED_READY;
use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use serde::Deserialize as _;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;

use super::kinds::Decoded;
/// Kinds the standalone store accepts: the kind table's.
pub use super::kinds::Kind;

/// A rejected object: HTTP 409 for conflicts, 422 for everything else.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Conflict(String),
}

type Key = (Kind, String, String);

/// A stored object as its JSON text: what `GET /v1/objects` echoes back,
/// at the cost of its bytes (a `Value` tree of the same object costs
/// several times more). The caches hold the facts they read.
struct Stored(Box<str>);

impl Stored {
    fn new(v: &Value) -> Stored {
        Stored(v.to_string().into_boxed_str())
    }

    /// An object already serialized (compact JSON text).
    fn from_text(text: String) -> Stored {
        Stored(text.into_boxed_str())
    }

    /// The object's JSON text.
    fn text(&self) -> &str {
        &self.0
    }

    /// The object as a tree, to read or change it.
    fn value(&self) -> Value {
        // Written by `new` from a `Value`: always parses.
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }
}

#[derive(Default)]
struct Inner {
    objects: BTreeMap<Key, Stored>,
    resource_version: u64,
    /// Keys a batched upsert has checked but not written yet: other
    /// writers get a conflict on them until it has.
    held: HashSet<Key>,
}

/// Objects an upsert writes per hold of the store lock: a big `List` is
/// checked whole, then written in batches so the scheduler's own writes
/// and readers get the lock in between.
pub const UPSERT_BATCH: usize = 256;

/// The store. Share it behind an `Arc`.
pub struct StandaloneStore {
    /// The Run cache and the cluster index, fed like watchers feed them.
    ix: Indexes,
    inner: Mutex<Inner>,
    /// Serializes the object API's writers (upsert, delete, heartbeat), so
    /// a batched upsert is never interleaved with another one.
    writes: Mutex<()>,
    /// The last [`MAX_EVENTS`] Events recorded, oldest first.
    events: Mutex<VecDeque<RecordedEvent>>,
}

/// Events the standalone store keeps (older ones are dropped).
pub const MAX_EVENTS: usize = 1024;

/// An Event the scheduler recorded in standalone mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedEvent {
    /// The object's kind, namespace, name and uid.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub event_type: EventKind,
    pub reason: EventReason,
    pub note: String,
}

/// An object checked and ready to store.
struct Prepared {
    kind: Kind,
    namespace: String,
    name: String,
    value: Value,
}

/// An object checked against its Kubernetes type, with what the check
/// decoded: the index gets that decode, not another one.
struct Checked {
    p: Prepared,
    decoded: Decoded,
}

fn prepare(v: Value, index: usize) -> Result<Checked, StoreError> {
    let p = prepare_unchecked(v, index)?;
    // Check the whole object against its Kubernetes type.
    let decoded = p
        .kind
        .decode(&p.value)
        .map_err(|e| invalid_as_type(&p, index, &e))?;
    Ok(Checked { p, decoded })
}

/// Why an object is not valid as its kind's type, saying which object.
fn invalid_as_type(p: &Prepared, index: usize, e: &super::kinds::DecodeError) -> StoreError {
    let (kind, namespace, name) = (p.kind.as_str(), &p.namespace, &p.name);
    let what = if p.kind.cluster_scoped() {
        format!("object {index} ({kind} {name})")
    } else {
        format!("object {index} ({kind} {namespace}/{name})")
    };
    let path = e.path().to_string();
    let path = if path == "." {
        String::new()
    } else {
        format!("{path}: ")
    };
    StoreError::Invalid(format!("{what}: {path}{}", e.inner()))
}

/// [`prepare`] up to the check against the kind's type.
fn prepare_unchecked(mut v: Value, index: usize) -> Result<Prepared, StoreError> {
    let at = |msg: String| StoreError::Invalid(format!("object {index}: {msg}"));
    let Some(obj) = v.as_object_mut() else {
        return Err(at("must be an object".into()));
    };
    let kind_str = obj
        .get("kind")
        .and_then(Value::as_str)
        .ok_or_else(|| at("kind: Required value".into()))?;
    // Only the kind's own name is accepted (not `Kind::parse`'s lower-case
    // or plural forms).
    let kind = Kind::ALL
        .into_iter()
        .find(|k| k.as_str() == kind_str)
        .ok_or_else(|| {
            at(format!(
                "kind: Unsupported value: {kind_str:?}: supported values: {}",
                Kind::ALL.map(Kind::as_str).join(", ")
            ))
        })?;
    match obj.get("apiVersion") {
        None | Some(Value::Null) => {
            obj.insert("apiVersion".into(), json!(kind.api_version()));
        }
        Some(Value::String(a)) if a == kind.api_version() => {}
        Some(other) => {
            return Err(at(format!(
                "apiVersion: Invalid value: {other}: {} must be {}",
                kind.as_str(),
                kind.api_version()
            )));
        }
    }
    let meta = obj.entry("metadata").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else {
        return Err(at("metadata: must be an object".into()));
    };
    let name = match meta.get("name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => n.to_owned(),
        _ => {
            return Err(at(format!(
                "{}: metadata.name: Required value",
                kind.as_str()
            )));
        }
    };
    let namespace = match meta.get("namespace") {
        _ if kind.cluster_scoped() => {
            meta.remove("namespace");
            String::new()
        }
        None | Some(Value::Null) => "default".to_owned(),
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(other) => return Err(at(format!("metadata.namespace: Invalid value: {other}"))),
    };
    if !kind.cluster_scoped() {
        meta.insert("namespace".into(), json!(namespace));
    }
    Ok(Prepared {
        kind,
        namespace,
        name,
        value: v,
    })
}

/// A stored Run's JSON text with `status` replaced and
/// `metadata.resourceVersion` set to `rv`; a conflict if `want_rv` is given
/// and is not the current resourceVersion. Only the top level and
/// `metadata` are parsed: everything else is copied verbatim.
fn with_status(
    stored: &str,
    want_rv: Option<&str>,
    status: &RawValue,
    rv: u64,
) -> Result<String, WriteError> {
    let other = |e: serde_json::Error| WriteError::Other(e.to_string());
    let mut top: BTreeMap<String, &RawValue> = serde_json::from_str(stored).map_err(other)?;
    let mut meta: serde_json::Map<String, Value> = match top.get("metadata") {
        Some(m) => serde_json::from_str(m.get()).map_err(other)?,
        None => serde_json::Map::new(),
    };
    if let Some(want) = want_rv
        && meta.get("resourceVersion").and_then(Value::as_str) != Some(want)
    {
        return Err(WriteError::Conflict);
    }
    meta.insert("resourceVersion".into(), json!(rv.to_string()));
    let meta = serde_json::value::to_raw_value(&meta).map_err(other)?;
    top.insert("metadata".into(), &meta);
    top.insert("status".into(), status);
    serde_json::to_string(&top).map_err(other)
}

/// A timestamp as the API server writes it.
pub fn kube_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

// === impl StandaloneStore ===

impl StandaloneStore {
    pub fn new(cache: Arc<RunCache>) -> Self {
        Self::with_nodes(cache, Arc::new(ClusterIndex::new()))
    }

    /// A store feeding both the Run cache and the extender's node cache.
    pub fn with_nodes(cache: Arc<RunCache>, nodes: Arc<ClusterIndex>) -> Self {
        StandaloneStore {
            ix: Indexes::new(cache, nodes),
            inner: Mutex::new(Inner::default()),
            writes: Mutex::new(()),
            events: Mutex::new(VecDeque::new()),
        }
    }

    /// The Events recorded (the last [`MAX_EVENTS`]), oldest first.
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.events.lock().iter().cloned().collect()
    }

    pub fn nodes(&self) -> &Arc<ClusterIndex> {
        &self.ix.nodes
    }

    pub fn cache(&self) -> &Arc<RunCache> {
        &self.ix.runs
    }

    /// Upserts objects all-or-nothing: every object is checked before any is
    /// stored. Returns the stored objects (with uid and resourceVersion).
    ///
    /// The objects are written (and fed to the caches) in store order, in
    /// batches of [`UPSERT_BATCH`]; between batches the lock is free, and
    /// the keys still to be written refuse other writers with a conflict.
    pub fn upsert(&self, objects: Vec<Value>) -> Result<Vec<Value>, StoreError> {
        self.upsert_as(objects, |v, _| v)
    }

    /// [`upsert`](Self::upsert), returning each stored object as its JSON
    /// text (what the store keeps, so nothing is serialized twice).
    pub fn upsert_json(&self, objects: Vec<Value>) -> Result<Vec<String>, StoreError> {
        let out = self.upsert_as(objects, |v, stored| (stored.text().to_owned(), v))?;
        // The trees are dropped here, without the store lock.
        Ok(out.into_iter().map(|(text, _)| text).collect())
    }

    /// [`upsert`](Self::upsert), answering `answer(object, stored)` for
    /// each object written.
    fn upsert_as<T>(
        &self,
        objects: Vec<Value>,
        answer: impl Fn(Value, &Stored) -> T,
    ) -> Result<Vec<T>, StoreError> {
        let prepared = objects
            .into_iter()
            .enumerate()
            .map(|(i, v)| prepare(v, i))
            .collect::<Result<Vec<_>, _>>()?;
        let _writes = self.writes.lock();
        let mut inner = self.inner.lock();
        // Preconditions first, so a conflict changes nothing.
        for Checked { p, .. } in &prepared {
            let key = (p.kind, p.namespace.clone(), p.name.clone());
            if let (Some(cur), Some(want)) = (
                inner.objects.get(&key).map(Stored::value),
                p.value
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str),
            ) && cur
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                != Some(want)
            {
                return Err(StoreError::Conflict(format!(
                    "{} {}/{}: metadata.resourceVersion {want:?} is not the current one",
                    p.kind.as_str(),
                    p.namespace,
                    p.name
                )));
            }
        }
        let batched = prepared.len() > UPSERT_BATCH;
        if batched {
            inner.held = prepared
                .iter()
                .map(|Checked { p, .. }| (p.kind, p.namespace.clone(), p.name.clone()))
                .collect();
        }
        let mut out = Vec::with_capacity(prepared.len());
        let mut prepared = prepared.into_iter().peekable();
        while prepared.peek().is_some() {
            let now = Timestamp::now();
            for c in prepared.by_ref().take(UPSERT_BATCH) {
                out.push(self.write_one(&mut inner, c, now, &answer));
            }
            if prepared.peek().is_some() {
                drop(inner);
                std::thread::yield_now();
                inner = self.inner.lock();
            }
        }
        if batched {
            inner.held = HashSet::new();
        }
        Ok(out)
    }

    /// Stores one object as part of filling a new store (`--state` at
    /// startup), as [`upsert`](Self::upsert) of the whole list onto the
    /// empty store would, one object at a time so the list is never held:
    /// the same checks and errors (`index` is the object's position in the
    /// list), the same stored object, in the same order. Unlike `upsert` it
    /// neither checks resourceVersion preconditions (an empty store has no
    /// object to check them against) nor undoes earlier objects when one
    /// is refused: a refused `--state` ends the process.
    pub fn preload(&self, object: Value, index: usize) -> Result<(), StoreError> {
        let checked = prepare(object, index)?;
        let _writes = self.writes.lock();
        let mut inner = self.inner.lock();
        self.write_one(&mut inner, checked, Timestamp::now(), |_, _| ());
        Ok(())
    }

    /// Stores one checked object and feeds its index the check's decode,
    /// with only the metadata the store writes decoded again.
    fn write_one<T>(
        &self,
        inner: &mut Inner,
        Checked { mut p, decoded }: Checked,
        now: Timestamp,
        answer: impl Fn(Value, &Stored) -> T,
    ) -> T {
        let key = (p.kind, p.namespace, p.name);
        inner.resource_version += 1;
        let rv = inner.resource_version.to_string();
        let existing = inner.objects.get(&key).map(Stored::value);
        let existing = existing.as_ref();
        let existing_uid = existing
            .and_then(|e| e.pointer("/metadata/uid"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let existing_created = existing
            .and_then(|e| e.pointer("/metadata/creationTimestamp"))
            .cloned();
        #[allow(
            clippy::expect_used,
            reason = "`prepare` rejected every object without an object `metadata`"
        )]
        let meta = p.value["metadata"]
            .as_object_mut()
            .expect("checked in prepare");
        let uid = match meta.get("uid").and_then(Value::as_str) {
            Some(u) if !u.is_empty() => u.to_owned(),
            _ => existing_uid
                .clone()
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
        };
        let same_object = existing_uid.as_deref() == Some(uid.as_str());
        if !same_object && existing.is_some() {
            // Same name, new uid: the old object is deleted first.
            self.forget(&key);
        }
        meta.insert("uid".into(), json!(uid));
        meta.insert("resourceVersion".into(), json!(rv));
        if !meta.contains_key("creationTimestamp") {
            let created = existing_created
                .filter(|_| same_object)
                .unwrap_or_else(|| json!(kube_time(now)));
            meta.insert("creationTimestamp".into(), created);
        }
        if p.kind != Kind::Pod && !meta.contains_key("generation") {
            meta.insert("generation".into(), json!(1));
        }
        match ObjectMeta::deserialize(&p.value["metadata"]) {
            Ok(meta) => decoded.apply_with_meta(&self.ix, meta),
            Err(e) => {
                tracing::error!(kind = key.0.as_str(), error = %e, "stored object no longer parses")
            }
        }
        inner.held.remove(&key);
        let stored = Stored::new(&p.value);
        let out = answer(p.value, &stored);
        inner.objects.insert(key, stored);
        out
    }

    /// Objects of a kind, optionally one namespace and name.
    pub fn list(&self, kind: Kind, namespace: Option<&str>, name: Option<&str>) -> Vec<Value> {
        let inner = self.inner.lock();
        inner
            .objects
            .iter()
            .filter(|((k, ns, n), _)| {
                *k == kind
                    && (kind.cluster_scoped() || namespace.is_none_or(|x| x == ns))
                    && name.is_none_or(|x| x == n)
            })
            .map(|(_, v)| v.value())
            .collect()
    }

    /// Deletes one object; false if it did not exist.
    pub fn delete(&self, kind: Kind, namespace: &str, name: &str) -> bool {
        let _writes = self.writes.lock();
        let mut inner = self.inner.lock();
        let namespace = if kind.cluster_scoped() { "" } else { namespace };
        let key = (kind, namespace.to_owned(), name.to_owned());
        if inner.objects.remove(&key).is_none() {
            return false;
        }
        inner.resource_version += 1;
        self.forget(&key);
        true
    }

    /// Refreshes the `kruntimes.io/RuntimedReady` heartbeat of matching
    /// Runtime Pods to `now`, as runtimed does. Returns the pods touched.
    pub fn heartbeat(
        &self,
        namespace: &str,
        name: Option<&str>,
        runtime: Option<&str>,
        now: Timestamp,
    ) -> Vec<String> {
        let label_key = self.ix.runs.config().runtime_label_key.clone();
        let _writes = self.writes.lock();
        let mut inner = self.inner.lock();
        let mut touched = Vec::new();
        let keys: Vec<Key> = inner
            .objects
            .keys()
            .filter(|(k, ns, n)| *k == Kind::Pod && ns == namespace && name.is_none_or(|x| x == n))
            .cloned()
            .collect();
        for key in keys {
            let rv = (inner.resource_version + 1).to_string();
            let Some(mut v) = inner.objects.get(&key).map(Stored::value) else {
                continue;
            };
            let Some(rt) = v
                .pointer(&format!(
                    "/metadata/labels/{}",
                    label_key.replace('~', "~0").replace('/', "~1")
                ))
                .and_then(Value::as_str)
            else {
                continue;
            };
            if runtime.is_some_and(|r| r != rt) {
                continue;
            }
            let stamp = json!(kube_time(now));
            #[allow(clippy::expect_used, reason = "the store keeps only JSON objects")]
            let obj = v.as_object_mut().expect("stored objects are objects");
            let status = obj.entry("status").or_insert_with(|| json!({}));
            if !status.is_object() {
                *status = json!({});
            }
            #[allow(clippy::expect_used, reason = "`status` was made an object just above")]
            let conds = status
                .as_object_mut()
                .expect("object")
                .entry("conditions")
                .or_insert_with(|| json!([]));
            if !conds.is_array() {
                *conds = json!([]);
            }
            #[allow(
                clippy::expect_used,
                reason = "`conditions` was made an array just above"
            )]
            let arr = conds.as_array_mut().expect("array");
            match arr.iter_mut().find(|c| c["type"] == RUNTIMED_READY) {
                Some(c) => {
                    if c["status"] != "True" {
                        c["lastTransitionTime"] = stamp.clone();
                    }
                    c["status"] = json!("True");
                    c["lastProbeTime"] = stamp;
                }
                None => arr.push(json!({
                    "type": RUNTIMED_READY, "status": "True",
                    "lastProbeTime": stamp, "lastTransitionTime": stamp,
                })),
            }
            v["metadata"]["resourceVersion"] = json!(rv);
            inner.objects.insert(key.clone(), Stored::new(&v));
            inner.resource_version += 1;
            self.observe(Kind::Pod, &v);
            touched.push(key.2.clone());
        }
        touched
    }

    /// Feeds one stored object to its index, as a watch event would.
    fn observe(&self, kind: Kind, v: &Value) {
        // Objects were type-checked in `prepare`; a failure here is a bug, logged, never a panic.
        if let Err(e) = kind.apply(&self.ix, v) {
            tracing::error!(kind = kind.as_str(), error = %e, "stored object no longer parses");
        }
    }

    fn forget(&self, (kind, ns, name): &Key) {
        kind.delete(&self.ix, ns, name)
    }
}

impl ClusterWriter for StandaloneStore {
    /// Logs the Event and keeps it (bounded) for [`StandaloneStore::events`].
    fn record_event<'a>(
        &'a self,
        object: &'a ObjectRef,
        kind: EventKind,
        reason: EventReason,
        note: &'a str,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            super::log_event(object, kind, reason, note);
            let mut events = self.events.lock();
            if events.len() >= MAX_EVENTS {
                events.pop_front();
            }
            events.push_back(RecordedEvent {
                kind: object.kind.clone(),
                namespace: object.namespace.clone(),
                name: object.name.clone(),
                uid: object.uid.clone(),
                event_type: kind,
                reason,
                note: crate::model::refs::truncate(note.to_owned(), 1024),
            });
        })
    }

    fn write_group_condition<'a>(
        &'a self,
        group: &'a GroupRef,
        condition: &'a Condition,
    ) -> BoxFuture<'a, Result<(), WriteError>> {
        Box::pin(async move {
            let kind = if group.composite {
                Kind::CompositePodGroup
            } else {
                Kind::PodGroup
            };
            let cond =
                serde_json::to_value(condition).map_err(|e| WriteError::Other(e.to_string()))?;
            let mut inner = self.inner.lock();
            let key = (kind, group.namespace.clone(), group.name.clone());
            if inner.held.contains(&key) {
                return Err(WriteError::Conflict);
            }
            if !inner.objects.contains_key(&key) {
                return Err(WriteError::NotFound);
            }
            inner.resource_version += 1;
            let rv = inner.resource_version.to_string();
            let mut stored = inner.objects.get(&key).map(Stored::value);
            let Some(obj) = stored.as_mut().and_then(Value::as_object_mut) else {
                return Err(WriteError::Other("stored group is not an object".into()));
            };
            let status = obj.entry("status").or_insert_with(|| json!({}));
            if !status.is_object() {
                *status = json!({});
            }
            let conds = status
                .as_object_mut()
                .ok_or_else(|| WriteError::Other("status is not an object".into()))?
                .entry("conditions")
                .or_insert_with(|| json!([]));
            if !conds.is_array() {
                *conds = json!([]);
            }
            let arr = conds
                .as_array_mut()
                .ok_or_else(|| WriteError::Other("conditions is not a list".into()))?;
            match arr.iter_mut().find(|c| c["type"] == cond["type"]) {
                Some(c) => *c = cond,
                None => arr.push(cond),
            }
            let mut v = Value::Object(std::mem::take(obj));
            v["metadata"]["resourceVersion"] = json!(rv);
            inner.objects.insert(key, Stored::new(&v));
            self.observe(kind, &v);
            Ok(())
        })
    }

    /// Splices the new status and resourceVersion into the stored text
    /// (the rest of the Run is copied as it is, never parsed into a tree),
    /// then feeds the cache the Run decoded once from the new text.
    fn write_run_status<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        resource_version: Option<&'a str>,
        status: &'a RunStatus,
    ) -> BoxFuture<'a, Result<(), WriteError>> {
        Box::pin(async move {
            let other = |e: serde_json::Error| WriteError::Other(e.to_string());
            // Serialized before the lock is taken.
            let status = serde_json::value::to_raw_value(status).map_err(other)?;
            let mut inner = self.inner.lock();
            let key = (Kind::Run, namespace.to_owned(), name.to_owned());
            if inner.held.contains(&key) {
                return Err(WriteError::Conflict);
            }
            let Some(stored) = inner.objects.get(&key) else {
                return Err(WriteError::NotFound);
            };
            let rv = inner.resource_version + 1;
            let text = with_status(stored.text(), resource_version, &status, rv)?;
            inner.resource_version = rv;
            let run = serde_json::from_str::<Run>(&text);
            inner.objects.insert(key, Stored::from_text(text));
            match run {
                Ok(run) => Index::<Run>::apply(&**self.cache(), run),
                Err(e) => {
                    tracing::error!(kind = Kind::Run.as_str(), error = %e, "stored object no longer parses");
                }
            }
            Ok(())
        })
    }

    fn clear_claim_allocation<'a>(
        &'a self,
        c: &'a ClaimAllocationRef,
    ) -> BoxFuture<'a, Result<(), WriteError>> {
        Box::pin(async move {
            let mut inner = self.inner.lock();
            let key = (Kind::ResourceClaim, c.namespace.clone(), c.name.clone());
            if inner.held.contains(&key) {
                return Err(WriteError::Conflict);
            }
            let Some(mut obj) = inner.objects.get(&key).map(Stored::value) else {
                return Err(WriteError::NotFound);
            };
            let cur = &obj;
            let meta = |field: &str| {
                cur.pointer(&format!("/metadata/{field}"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            if (!c.uid.is_empty() && meta("uid") != c.uid)
                || (!c.resource_version.is_empty() && meta("resourceVersion") != c.resource_version)
            {
                return Err(WriteError::Conflict);
            }
            inner.resource_version += 1;
            let rv = inner.resource_version.to_string();
            if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
                for field in ["allocation", "devices", "reservedFor"] {
                    status.remove(field);
                }
            }
            obj["metadata"]["resourceVersion"] = json!(rv);
            inner.objects.insert(key, Stored::new(&obj));
            self.observe(Kind::ResourceClaim, &obj);
            Ok(())
        })
    }

    /// The in-memory cluster has no PodDisruptionBudgets: an eviction is
    /// the pod's deletion, with the uid as precondition.
    fn evict_pod<'a>(
        &'a self,
        pod: &'a super::PodId,
    ) -> BoxFuture<'a, Result<(), super::EvictError>> {
        Box::pin(async move {
            use super::EvictError;
            let _writes = self.writes.lock();
            let mut inner = self.inner.lock();
            let key = (Kind::Pod, pod.namespace.clone(), pod.name.clone());
            if inner.held.contains(&key) {
                return Err(EvictError::Other {
                    pod: pod.to_string(),
                    message: "the pod is being replaced by an apply in progress".into(),
                });
            }
            let Some(obj) = inner.objects.get(&key).map(Stored::value) else {
                return Err(EvictError::Gone(pod.to_string()));
            };
            let uid = obj
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if !pod.uid.is_empty() && uid != pod.uid {
                return Err(EvictError::Replaced(pod.to_string()));
            }
            inner.objects.remove(&key);
            inner.resource_version += 1;
            self.forget(&key);
            Ok(())
        })
    }

    fn bind_pod<'a>(&'a self, b: &'a PodBinding) -> BoxFuture<'a, Result<(), BindError>> {
        Box::pin(async move {
            let mut inner = self.inner.lock();
            let (namespace, name) = (b.namespace.clone(), b.name.clone());
            if !inner
                .objects
                .contains_key(&(Kind::Node, String::new(), b.node.clone()))
            {
                return Err(BindError::NodeGone(b.node.clone()));
            }
            let key = (Kind::Pod, namespace.clone(), name.clone());
            if inner.held.contains(&key) {
                return Err(BindError::Other {
                    namespace,
                    name,
                    message: "the pod is being replaced by an apply in progress".into(),
                });
            }
            let Some(mut obj) = inner.objects.get(&key).map(Stored::value) else {
                return Err(BindError::PodGone { namespace, name });
            };
            let cur = &obj;
            let actual = cur
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            if !b.uid.is_empty() && actual != b.uid {
                return Err(BindError::UidChanged {
                    namespace,
                    name,
                    expected: b.uid.clone(),
                    actual,
                });
            }
            if let Some(node) = cur
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
            {
                return Err(BindError::AlreadyBound {
                    namespace,
                    name,
                    node: node.to_owned(),
                });
            }
            inner.resource_version += 1;
            let rv = inner.resource_version.to_string();
            let Some(o) = obj.as_object_mut() else {
                return Err(BindError::Other {
                    namespace,
                    name,
                    message: "stored pod is not an object".into(),
                });
            };
            let spec = o.entry("spec").or_insert_with(|| json!({}));
            if !spec.is_object() {
                *spec = json!({});
            }
            spec["nodeName"] = json!(b.node);
            let meta = o.entry("metadata").or_insert_with(|| json!({}));
            if !meta.is_object() {
                *meta = json!({});
            }
            // The Binding's annotations land on the pod, as the API
            // server's binding storage copies them.
            if !b.annotations.is_empty() {
                let annotations = &mut meta["annotations"];
                if !annotations.is_object() {
                    *annotations = json!({});
                }
                for (k, v) in &b.annotations {
                    annotations[k.as_str()] = json!(v);
                }
            }
            obj["metadata"]["resourceVersion"] = json!(rv);
            inner.objects.insert(key, Stored::new(&obj));
            self.observe(Kind::Pod, &obj);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_write_replaces_status_and_resource_version_and_keeps_the_rest() {
        let stored = json!({"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "ns", "resourceVersion": "7", "x-extra": [1, {"b": "é\""}]},
            "spec": {"runtime": "py", "unknown": {"kept": true}},
            "status": {"phase": "Pending", "message": "old"}});
        let status = RunStatus {
            phase: Some("Scheduled".into()),
            assigned_pod: Some("rp-1".into()),
            ..RunStatus::default()
        };
        let raw = serde_json::value::to_raw_value(&status).unwrap();
        let text = with_status(&stored.to_string(), Some("7"), &raw, 8).unwrap();
        let mut want = stored.clone();
        want["metadata"]["resourceVersion"] = json!("8");
        want["status"] = serde_json::to_value(&status).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), want);
        // Without a precondition; and a stale one is a conflict.
        assert!(with_status(&stored.to_string(), None, &raw, 8).is_ok());
        assert_eq!(
            with_status(&stored.to_string(), Some("6"), &raw, 8),
            Err(WriteError::Conflict)
        );
    }
}
