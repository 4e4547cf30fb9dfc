//! Structure limits of extender requests, checked before any per-item work.
//!
//! A request is scanned once ([`check`]) without building anything: the
//! scan counts containers, resource entries and node names while serde
//! skips the rest, and stops at the first count over its limit. Only a
//! request within every limit is then decoded and decided, so the cost of a
//! call is bounded by a multiple of its size.
//!
//! The limits are what the API server itself allows, so no request
//! kube-scheduler can send about a real Pod is refused:
//!
//! - A Pod is at most [`API_MAX_REQUEST_BODY_BYTES`] of JSON: the API
//!   server's `MaxRequestBodyBytes` (`k8s.io/apiserver/pkg/server/config.go`,
//!   3 MiB, twice etcd's default 1.5 MiB request limit). It rejects a larger
//!   create or update, so no stored Pod is larger.
//! - Containers, init containers and ephemeral containers: at most
//!   [`MAX_CONTAINERS`] together. Pod validation (`ValidatePodSpec`) sets no
//!   count, but requires each container's `name` and `image`, so the
//!   smallest container is `{"name":"a","image":"b"}` (24 bytes) and a Pod
//!   the API server accepted holds at most 3 MiB / 24 of them.
//! - Resource entries per list (`requests`, `limits`, `claims` of a
//!   container; `overhead` and pod-level `resources`): at most
//!   [`MAX_RESOURCES_PER_LIST`]. Validation requires a resource name other
//!   than the standard ones to be a qualified name with a `/`
//!   (`validateContainerResourceName`), so the smallest entry is
//!   `"a/b":"0",` (10 bytes); a standard name (`cpu`) is shorter but there
//!   are only a few. 3 MiB / 10 entries at most.
//! - A node name is at most [`MAX_NODE_NAME_BYTES`]: Node names are DNS
//!   subdomains (`ValidateNodeName = NameIsDNSSubdomain`,
//!   `DNS1123SubdomainMaxLength` = 253 in `k8s.io/apimachinery`).
//! - Bind's pod name (a DNS subdomain, 253), namespace (a DNS label,
//!   `DNS1123LabelMaxLength` = 63) and UID (at most [`MAX_UID_BYTES`]).
//!
//! Body sizes differ by mode: a cache-capable request (`NodeNames`, UID-only
//! victims) carries one Pod and a list of names, and is held to
//! [`Limits::body`] (`--extender-max-body-bytes`); a full-mode request
//! (`Nodes`, full victim Pods) carries whole Node or Pod objects and is held
//! to [`Limits::nodelist`] (`--extender-max-nodelist-bytes`).

use crate::transport::ApiError;
use axum::http::StatusCode;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::fmt;
use std::sync::Arc;

/// The API server's `MaxRequestBodyBytes`: no Pod it accepted is larger.
pub const API_MAX_REQUEST_BODY_BYTES: usize = 3 * 1024 * 1024;
/// The smallest valid container, `{"name":"a","image":"b"}`.
const MIN_CONTAINER_JSON_BYTES: usize = 24;
/// Containers, init containers and ephemeral containers of one Pod, together.
pub const MAX_CONTAINERS: usize = API_MAX_REQUEST_BODY_BYTES / MIN_CONTAINER_JSON_BYTES;
/// The smallest resource entry with a name validation accepts for an
/// extended resource, `"a/b":"0",`.
const MIN_RESOURCE_ENTRY_BYTES: usize = 10;
/// Entries of one resource list.
pub const MAX_RESOURCES_PER_LIST: usize = API_MAX_REQUEST_BODY_BYTES / MIN_RESOURCE_ENTRY_BYTES;
/// `DNS1123SubdomainMaxLength`: node names and pod names.
pub const MAX_NODE_NAME_BYTES: usize = 253;
/// `DNS1123LabelMaxLength`: namespaces.
pub const MAX_NAMESPACE_BYTES: usize = 63;
/// A UID as the API server writes it is a 36-byte UUID; 128 leaves room
/// for any other form without letting one be large.
pub const MAX_UID_BYTES: usize = 128;

/// Default `--extender-max-body-bytes`: one Pod at the API server's
/// largest plus the names of a very large cluster.
pub const DEFAULT_BODY_BYTES: usize = 8 * 1024 * 1024;
/// Default `--extender-max-nodelist-bytes`: a full NodeList of a large
/// cluster, or the full victim Pods of a preemption.
pub const DEFAULT_NODELIST_BYTES: usize = 64 * 1024 * 1024;

/// Body limits per mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Cache-capable requests and bind (`--extender-max-body-bytes`).
    pub body: usize,
    /// Full-mode requests: `Nodes`, `NodeNameToVictims`
    /// (`--extender-max-nodelist-bytes`).
    pub nodelist: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body: DEFAULT_BODY_BYTES,
            nodelist: DEFAULT_NODELIST_BYTES,
        }
    }
}

impl Limits {
    /// The most any extender request may read.
    pub fn read_limit(&self) -> usize {
        self.body.max(self.nodelist)
    }
}

/// How many resource names a reason lists before summing up the rest.
const REASON_NAMES: usize = 8;

/// The reason every cached node fails for resources no node offers, naming
/// at most a few of them (a reason is copied once per node in the answer).
/// `None` when every requested resource is offered somewhere.
pub fn unoffered_reason(resolved: &super::plugins::fit::Resolved) -> Option<(Arc<str>, bool)> {
    let mut names = resolved.unoffered();
    let first: Vec<&str> = names.by_ref().take(REASON_NAMES).collect();
    if first.is_empty() {
        return None;
    }
    let rest = names.count();
    let mut m = first
        .iter()
        .map(|n| format!("Insufficient {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    if rest > 0 {
        m.push_str(&format!(" (and {rest} more resources no node offers)"));
    }
    Some((m.into(), true))
}

/// Which verb a body is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// Filter and prioritize (`ExtenderArgs`).
    Filter,
    /// `ExtenderPreemptionArgs`.
    Preempt,
    /// `ExtenderBindingArgs`.
    Bind,
}

/// The top-level fields that carry many items, borrowed as JSON text.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Top<'a> {
    #[serde(default, borrow)]
    pod: Option<&'a RawValue>,
    #[serde(default, borrow)]
    nodes: Option<&'a RawValue>,
    #[serde(default, borrow)]
    node_names: Option<&'a RawValue>,
    #[serde(default, borrow)]
    node_name_to_victims: Option<&'a RawValue>,
    #[serde(default, borrow)]
    node_name_to_meta_victims: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pod_name: Option<&'a RawValue>,
    #[serde(default, borrow, rename = "PodNamespace")]
    pod_namespace: Option<&'a RawValue>,
    #[serde(default, borrow, rename = "PodUID")]
    pod_uid: Option<&'a RawValue>,
    #[serde(default, borrow)]
    node: Option<&'a RawValue>,
}

/// Checks a request body against the structure limits and its mode's body
/// limit. A body that is not JSON of the right shape passes: the decode
/// that follows names its fault.
pub fn check(limits: &Limits, verb: Verb, body: &[u8]) -> Result<(), ApiError> {
    let Ok(top) = serde_json::from_slice::<Top<'_>>(body) else {
        return Ok(());
    };
    let full = match verb {
        Verb::Filter => top.nodes.is_some() && top.node_names.is_none(),
        Verb::Preempt => {
            top.node_name_to_victims.is_some() && top.node_name_to_meta_victims.is_none()
        }
        Verb::Bind => false,
    };
    if !full && body.len() > limits.body {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "request body is {} bytes, more than --extender-max-body-bytes ({}) \
                 for a request without Nodes or NodeNameToVictims",
                body.len(),
                limits.body
            ),
        ));
    }
    if let Some(pod) = top.pod {
        check_pod(pod.get())?;
    }
    if verb == Verb::Filter
        && let Some(names) = top.node_names
    {
        scan(names.get(), NodeNames)?;
    }
    if verb == Verb::Preempt {
        for (field, victims) in [
            ("NodeNameToVictims", top.node_name_to_victims),
            ("NodeNameToMetaVictims", top.node_name_to_meta_victims),
        ] {
            if let Some(v) = victims {
                scan(v.get(), VictimMap(field))?;
            }
        }
    }
    if verb == Verb::Bind {
        for (field, value, max) in [
            ("PodName", top.pod_name, MAX_NODE_NAME_BYTES),
            ("PodNamespace", top.pod_namespace, MAX_NAMESPACE_BYTES),
            ("PodUID", top.pod_uid, MAX_UID_BYTES),
            ("Node", top.node, MAX_NODE_NAME_BYTES),
        ] {
            if let Some(v) = value {
                scan(v.get(), ShortString { field, max })?;
            }
        }
    }
    Ok(())
}

/// Checks one Pod's JSON text: its size and its counts.
pub fn check_pod(json: &str) -> Result<(), ApiError> {
    if json.len() > API_MAX_REQUEST_BODY_BYTES {
        return Err(over(format!(
            "Pod: {} bytes of JSON, more than the API server accepts for a Pod \
             ({API_MAX_REQUEST_BODY_BYTES} bytes, its MaxRequestBodyBytes)",
            json.len()
        )));
    }
    scan(json, PodScan)
}

/// A limit error: 413, the message names the field and the limit.
fn over(message: String) -> ApiError {
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, message)
}

/// Marks a scan error that is a limit (not a syntax or shape fault).
const LIMIT: &str = "\u{0}limit:";

fn limit<E: de::Error>(message: String) -> E {
    E::custom(format!("{LIMIT}{message}"))
}

/// Runs a scanner over JSON text; a limit it hits is a 413, anything else
/// passes (the decode names it).
fn scan<'de, T: DeserializeSeed<'de, Value = ()>>(json: &'de str, seed: T) -> Result<(), ApiError> {
    let mut de = serde_json::Deserializer::from_str(json);
    match seed.deserialize(&mut de) {
        Ok(()) => Ok(()),
        Err(e) => {
            let text = e.to_string();
            match text.strip_prefix(LIMIT) {
                Some(rest) => {
                    let message = rest.rsplit_once(" at line ").map_or(rest, |(m, _)| m);
                    Err(over(message.to_owned()))
                }
                None => Ok(()),
            }
        }
    }
}

/// A map's keys, matched against known names without allocating.
struct Field(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Field {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for Field {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.0.iter().position(|f| *f == v))
    }
}

/// An object scanned field by field: known fields go to `value`, the rest
/// is skipped. `null` counts as an empty object.
trait ObjectScan {
    const FIELDS: &'static [&'static str];
    fn value<'de, A: MapAccess<'de>>(&mut self, field: usize, map: &mut A) -> Result<(), A::Error>;
}

struct Object<T>(T);

impl<'de, T: ObjectScan> DeserializeSeed<'de> for Object<T> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: ObjectScan> Visitor<'de> for Object<T> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(Field(T::FIELDS))? {
            match key {
                Some(i) => self.0.value(i, &mut map)?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

struct PodScan;

impl<'de> DeserializeSeed<'de> for PodScan {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        Object(self).deserialize(d)
    }
}

impl ObjectScan for PodScan {
    const FIELDS: &'static [&'static str] = &["spec"];

    fn value<'de, A: MapAccess<'de>>(&mut self, _: usize, map: &mut A) -> Result<(), A::Error> {
        map.next_value_seed(Object(SpecScan { containers: 0 }))
    }
}

struct SpecScan {
    /// Containers of every kind seen so far.
    containers: usize,
}

impl ObjectScan for SpecScan {
    const FIELDS: &'static [&'static str] = &[
        "containers",
        "initContainers",
        "ephemeralContainers",
        "overhead",
        "resources",
    ];

    fn value<'de, A: MapAccess<'de>>(&mut self, i: usize, map: &mut A) -> Result<(), A::Error> {
        match i {
            0..=2 => map.next_value_seed(ContainerList {
                field: Self::FIELDS[i],
                total: &mut self.containers,
            }),
            3 => map.next_value_seed(Entries {
                path: || "Pod.spec.overhead".to_owned(),
            }),
            _ => map.next_value_seed(Object(ResourcesScan {
                path: || "Pod.spec.resources".to_owned(),
            })),
        }
    }
}

struct ContainerList<'t> {
    field: &'static str,
    total: &'t mut usize,
}

impl<'de> DeserializeSeed<'de> for ContainerList<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ContainerList<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of containers")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let field = self.field;
        let mut index = 0;
        loop {
            if *self.total >= MAX_CONTAINERS {
                if seq.next_element::<IgnoredAny>()?.is_none() {
                    return Ok(());
                }
                return Err(limit(format!(
                    "Pod.spec.{field}: more than {MAX_CONTAINERS} containers, init containers \
                     and ephemeral containers in all, more than a Pod the API server accepts \
                     can hold ({API_MAX_REQUEST_BODY_BYTES} bytes / \
                     {MIN_CONTAINER_JSON_BYTES} bytes per container)"
                )));
            }
            let seed = Object(ContainerScan { field, index });
            if seq.next_element_seed(seed)?.is_none() {
                return Ok(());
            }
            *self.total += 1;
            index += 1;
        }
    }
}

struct ContainerScan {
    field: &'static str,
    index: usize,
}

impl ObjectScan for ContainerScan {
    const FIELDS: &'static [&'static str] = &["resources"];

    fn value<'de, A: MapAccess<'de>>(&mut self, _: usize, map: &mut A) -> Result<(), A::Error> {
        let (field, index) = (self.field, self.index);
        map.next_value_seed(Object(ResourcesScan {
            path: move || format!("Pod.spec.{field}[{index}].resources"),
        }))
    }
}

struct ResourcesScan<P> {
    path: P,
}

impl<P: Fn() -> String + Copy> ObjectScan for ResourcesScan<P> {
    const FIELDS: &'static [&'static str] = &["requests", "limits", "claims"];

    fn value<'de, A: MapAccess<'de>>(&mut self, i: usize, map: &mut A) -> Result<(), A::Error> {
        let path = self.path;
        map.next_value_seed(Entries {
            path: move || format!("{}.{}", path(), Self::FIELDS[i]),
        })
    }
}

/// A resource list (an object) or a claims list (an array): entries counted.
struct Entries<P> {
    path: P,
}

impl<'de, P: Fn() -> String> DeserializeSeed<'de> for Entries<P> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<P: Fn() -> String> Entries<P> {
    fn check<E: de::Error>(&self, n: usize) -> Result<(), E> {
        if n > MAX_RESOURCES_PER_LIST {
            return Err(limit(format!(
                "{}: more than {MAX_RESOURCES_PER_LIST} entries, more than a Pod the API \
                 server accepts can hold ({API_MAX_REQUEST_BODY_BYTES} bytes / \
                 {MIN_RESOURCE_ENTRY_BYTES} bytes per entry)",
                (self.path)()
            )));
        }
        Ok(())
    }
}

impl<'de, P: Fn() -> String> Visitor<'de> for Entries<P> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a resource list")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut n = 0;
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
            n += 1;
            self.check(n)?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut n = 0;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            n += 1;
            self.check(n)?;
        }
        Ok(())
    }
}

/// A string field no longer than `max` bytes.
struct ShortString {
    field: &'static str,
    max: usize,
}

impl<'de> DeserializeSeed<'de> for ShortString {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for ShortString {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        if v.len() > self.max {
            return Err(limit(format!(
                "{}: {} bytes, longer than the API server allows ({} bytes)",
                self.field,
                v.len(),
                self.max
            )));
        }
        Ok(())
    }
}

/// `NodeNames`: every name a valid length.
struct NodeNames;

impl<'de> DeserializeSeed<'de> for NodeNames {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NodeNames {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of node names")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq
            .next_element_seed(ShortString {
                field: "NodeNames[]",
                max: MAX_NODE_NAME_BYTES,
            })?
            .is_some()
        {}
        Ok(())
    }
}

/// `NodeNameToVictims` / `NodeNameToMetaVictims`: every key a valid node
/// name length.
struct VictimMap(&'static str);

impl<'de> DeserializeSeed<'de> for VictimMap {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for VictimMap {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of node names")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map
            .next_key_seed(ShortString {
                field: self.0,
                max: MAX_NODE_NAME_BYTES,
            })?
            .is_some()
        {
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Smaller than any valid container, so the count is reached before
    /// the Pod size limit.
    fn pod_with(field: &str, n: usize) -> String {
        let one = "{}";
        let list = vec![one; n].join(",");
        format!(r#"{{"Pod":{{"spec":{{"{field}":[{list}]}}}},"NodeNames":["n1"]}}"#)
    }

    fn refused(verb: Verb, body: &str) -> String {
        let e = check(&Limits::default(), verb, body.as_bytes()).unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", e.message);
        e.message
    }

    #[test]
    fn containers_are_counted_across_kinds_up_to_the_limit() {
        let at = pod_with("containers", MAX_CONTAINERS);
        check(&Limits::default(), Verb::Filter, at.as_bytes()).unwrap();
        let m = refused(
            Verb::Filter,
            &pod_with("initContainers", MAX_CONTAINERS + 1),
        );
        assert!(
            m.starts_with("Pod.spec.initContainers: more than 131072"),
            "{m}"
        );
        assert!(!m.contains("line"), "{m}");
        // Split across kinds, the total counts.
        let one = "{}";
        let half = vec![one; MAX_CONTAINERS / 2 + 1].join(",");
        let body = format!(
            r#"{{"Pod":{{"spec":{{"containers":[{half}],"ephemeralContainers":[{half}]}}}}}}"#
        );
        let m = refused(Verb::Preempt, &body);
        assert!(m.starts_with("Pod.spec.ephemeralContainers"), "{m}");
    }

    #[test]
    fn resource_lists_are_bounded_and_named() {
        let entries: Vec<String> = (0..=MAX_RESOURCES_PER_LIST)
            .map(|_| r#""r":0"#.to_owned())
            .collect();
        let body = format!(
            r#"{{"Pod":{{"spec":{{"containers":[{{"name":"a"}},{{"name":"b","resources":{{"limits":{{{}}}}}}}]}}}}}}"#,
            entries.join(",")
        );
        let m = refused(Verb::Filter, &body);
        assert!(
            m.starts_with("Pod.spec.containers[1].resources.limits: more than 314572 entries"),
            "{m}"
        );
        let ok = format!(
            r#"{{"Pod":{{"spec":{{"overhead":{{{}}}}}}}}}"#,
            entries[..MAX_RESOURCES_PER_LIST].join(",")
        );
        check(&Limits::default(), Verb::Filter, ok.as_bytes()).unwrap();
    }

    #[test]
    fn names_longer_than_the_api_allows_are_refused() {
        let long = "n".repeat(MAX_NODE_NAME_BYTES + 1);
        let fine = "n".repeat(MAX_NODE_NAME_BYTES);
        let m = refused(Verb::Filter, &format!(r#"{{"NodeNames":["a","{long}"]}}"#));
        assert!(m.starts_with("NodeNames[]: 254 bytes"), "{m}");
        check(
            &Limits::default(),
            Verb::Filter,
            format!(r#"{{"NodeNames":["{fine}"]}}"#).as_bytes(),
        )
        .unwrap();
        let m = refused(
            Verb::Preempt,
            &format!(r#"{{"NodeNameToMetaVictims":{{"{long}":null}}}}"#),
        );
        assert!(m.starts_with("NodeNameToMetaVictims: 254 bytes"), "{m}");
        let m = refused(
            Verb::Bind,
            &format!(r#"{{"PodName":"p","PodNamespace":"{long}","Node":"n"}}"#),
        );
        assert!(m.starts_with("PodNamespace: 254 bytes"), "{m}");
        check(
            &Limits::default(),
            Verb::Bind,
            br#"{"PodName":"p","PodNamespace":"ns","PodUID":"u","Node":"n"}"#,
        )
        .unwrap();
    }

    #[test]
    fn the_body_limit_follows_the_mode() {
        let limits = Limits {
            body: 100,
            nodelist: 1000,
        };
        let pad = " ".repeat(200);
        let cached = format!(r#"{{"NodeNames":["n1"]{pad}}}"#);
        let e = check(&limits, Verb::Filter, cached.as_bytes()).unwrap_err();
        assert!(
            e.message.contains("--extender-max-body-bytes (100)"),
            "{}",
            e.message
        );
        let full = format!(r#"{{"Nodes":{{"items":[]}}{pad}}}"#);
        check(&limits, Verb::Filter, full.as_bytes()).unwrap();
        let victims = format!(r#"{{"NodeNameToVictims":{{}}{pad}}}"#);
        check(&limits, Verb::Preempt, victims.as_bytes()).unwrap();
        // Both forms sent: the UID-only one is used, so the small limit.
        let both = format!(r#"{{"NodeNameToVictims":{{}},"NodeNameToMetaVictims":{{}}{pad}}}"#);
        assert!(check(&limits, Verb::Preempt, both.as_bytes()).is_err());
        assert!(check(&limits, Verb::Bind, format!("{{{pad}}}").as_bytes()).is_err());
        assert_eq!(limits.read_limit(), 1000);
    }

    #[test]
    fn a_pod_larger_than_the_api_server_accepts_is_refused() {
        let big = "x".repeat(API_MAX_REQUEST_BODY_BYTES);
        let body = format!(r#"{{"Pod":{{"metadata":{{"name":"{big}"}}}},"Nodes":null}}"#);
        let limits = Limits {
            body: 8 << 20,
            nodelist: 8 << 20,
        };
        let e = check(&limits, Verb::Filter, body.as_bytes()).unwrap_err();
        assert!(e.message.starts_with("Pod: 3145"), "{}", e.message);
    }

    #[test]
    fn malformed_bodies_are_left_to_the_decode() {
        for body in [
            &b"not json"[..],
            br#"{"Pod":{"spec":{"containers":"x"}}}"#,
            br#"{"Pod":{"spec":{"containers":[1,2]}}}"#,
            br#"{"NodeNames":[1]}"#,
            br#"[]"#,
        ] {
            check(&Limits::default(), Verb::Filter, body).unwrap();
        }
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let body = format!(r#"{{"Pod":{deep}}}"#);
        check(&Limits::default(), Verb::Filter, body.as_bytes()).unwrap();
    }
}
