//! Fixture builders. Each starts from the defaults most tests share and
//! takes chained setters for what a test cares about:
//!
//! ```
//! use kruntimes_scheduler::testkit::{node, pod, pod_group};
//! let n = node("n1").allocatable("8", "16Gi").label("zone", "z1");
//! let p = pod("w-0").requests(&[("cpu", "2")]).group("g").priority(10);
//! let g = pod_group("g").gang(2).topology("topology.kubernetes.io/rack");
//! let typed: k8s_openapi::api::core::v1::Pod = p.typed();
//! # let _ = (n, g, typed);
//! ```
//!
//! Objects are JSON ([`Obj`]) because that is what the standalone object
//! API, the test API server and kube-scheduler's extender bodies take;
//! [`Obj::typed`] deserializes into the k8s-openapi or crate type.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

/// The annotation prefix of a Runtime Pod's declared capacity.
pub const CAPACITY_PREFIX: &str = "kruntimes.io/capacity.";

/// A Kubernetes object (or a Run) under construction, as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct Obj(pub Value);

impl Obj {
    /// Sets the value at `path` (object keys; an index into an existing
    /// array), creating missing objects.
    pub fn set(mut self, path: &[&str], value: impl Into<Value>) -> Self {
        let (last, parents) = path.split_last().expect("a non-empty path");
        let mut at = &mut self.0;
        for k in parents {
            if let Some(i) = array_index(at, k) {
                at = &mut at[i];
                continue;
            }
            if !at.get(*k).is_some_and(|v| v.is_object() || v.is_array()) {
                at[*k] = Value::Object(Map::new());
            }
            at = &mut at[*k];
        }
        at[*last] = value.into();
        self
    }

    /// Removes the value at `path` (object keys; an index into an array on
    /// the way), if there is one.
    pub fn unset(mut self, path: &[&str]) -> Self {
        let (last, parents) = path.split_last().expect("a non-empty path");
        let mut at = &mut self.0;
        for k in parents {
            let next = match array_index(at, k) {
                Some(i) => at.get_mut(i),
                None => at.get_mut(*k),
            };
            match next {
                Some(v) => at = v,
                None => return self,
            }
        }
        if let Some(m) = at.as_object_mut() {
            m.remove(*last);
        }
        self
    }

    /// `metadata.namespace`.
    pub fn namespace(self, ns: &str) -> Self {
        self.set(&["metadata", "namespace"], ns)
    }

    /// `metadata.uid`.
    pub fn uid(self, uid: &str) -> Self {
        self.set(&["metadata", "uid"], uid)
    }

    /// One `metadata.labels` entry.
    pub fn label(self, key: &str, value: &str) -> Self {
        self.set(&["metadata", "labels", key], value)
    }

    /// `metadata.labels` entries, one per `(key, value)` (added to any
    /// there are): a Node's, a Pod's or a Run's labels.
    pub fn labels(self, pairs: &[(&str, &str)]) -> Self {
        pairs.iter().fold(self, |o, (k, v)| o.label(k, v))
    }

    /// One `metadata.annotations` entry.
    pub fn annotation(self, key: &str, value: &str) -> Self {
        self.set(&["metadata", "annotations", key], value)
    }

    /// The JSON value.
    pub fn value(self) -> Value {
        self.0
    }

    /// The JSON text.
    pub fn json(&self) -> String {
        self.0.to_string()
    }

    /// The typed object (`Pod`, `Node`, `PodGroup`, [`crate::crd::Run`], …).
    pub fn typed<T: DeserializeOwned>(self) -> T {
        serde_json::from_value(self.0).expect("the fixture is a valid object of that type")
    }
}

impl From<Obj> for Value {
    fn from(o: Obj) -> Value {
        o.0
    }
}

impl serde::Serialize for Obj {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// `k` as an index when `at` is an array that has it.
fn array_index(at: &Value, k: &str) -> Option<usize> {
    let i: usize = k.parse().ok()?;
    at.as_array().is_some_and(|a| i < a.len()).then_some(i)
}

fn quantities(pairs: &[(&str, &str)]) -> Value {
    Value::Object(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect(),
    )
}

// === Nodes and workload Pods ===

/// A Ready-less Node `name` with allocatable cpu 4, memory 8Gi, 110 pods.
pub fn node(name: &str) -> Obj {
    Obj(
        json!({"kind": "Node", "apiVersion": "v1", "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}),
    )
}

impl Obj {
    /// A Node's allocatable cpu and memory (pods stay 110).
    pub fn allocatable(self, cpu: &str, memory: &str) -> Self {
        self.set(&["status", "allocatable", "cpu"], cpu)
            .set(&["status", "allocatable", "memory"], memory)
    }
}

impl Obj {
    /// A Node's pod slots (`status.allocatable.pods`).
    pub fn pod_slots(self, pods: &str) -> Self {
        self.set(&["status", "allocatable", "pods"], pods)
    }
}

/// The rack label of [`racks`] and [`gang`].
pub const RACK: &str = "rack";

/// Racks of `nodes` Nodes each, named `<rack>-<i>` and labelled [`RACK`],
/// with `cpu` cores, 64Gi and 110 pod slots: `racks(&[("r1", 2, "4")])`.
pub fn racks(spec: &[(&str, usize, &str)]) -> Vec<Obj> {
    spec.iter()
        .flat_map(|&(rack, nodes, cpu)| {
            (0..nodes).map(move |i| {
                node(&format!("{rack}-{i}"))
                    .allocatable(cpu, "64Gi")
                    .label(RACK, rack)
            })
        })
        .collect()
}

/// A gang in namespace `ns`: the PodGroup `name` of minCount `n` (placed
/// by [`RACK`] when `by_rack`), then its `n` pending Pods `<name>-<i>`
/// requesting `cpu` each.
pub fn gang(name: &str, n: u32, cpu: &str, by_rack: bool) -> Vec<Obj> {
    let group = pod_group(name).namespace("ns").gang(n);
    let group = if by_rack { group.topology(RACK) } else { group };
    std::iter::once(group)
        .chain((0..n).map(|i| {
            pod(&format!("{name}-{i}"))
                .namespace("ns")
                .requests(&[("cpu", cpu)])
                .group(name)
        }))
        .collect()
}

/// A pending workload Pod `ml/name` (uid `<name>-uid`) with one container
/// `c` requesting cpu 1.
pub fn pod(name: &str) -> Obj {
    Obj(json!({"kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("{name}-uid")},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}}))
}

impl Obj {
    /// The first container's requests (replacing them).
    pub fn requests(self, pairs: &[(&str, &str)]) -> Self {
        let mut o = self;
        if o.0.pointer("/spec/containers/0").is_some() {
            o.0["spec"]["containers"][0]["resources"]["requests"] = quantities(pairs);
            o
        } else {
            // A Run.
            o.set(&["spec", "resources", "requests"], quantities(pairs))
        }
    }

    /// `spec.schedulingGroup.podGroupName`.
    pub fn group(self, group: &str) -> Self {
        self.set(&["spec", "schedulingGroup", "podGroupName"], group)
    }

    /// Bound to `node` (`spec.nodeName`), the phase left as it is.
    pub fn node_name(self, node: &str) -> Self {
        self.set(&["spec", "nodeName"], node)
    }

    /// Bound to `node` (`spec.nodeName`) and Running.
    pub fn on_node(self, node: &str) -> Self {
        self.set(&["spec", "nodeName"], node)
            .set(&["status", "phase"], "Running")
    }

    /// `spec.priority`.
    pub fn priority(self, priority: i32) -> Self {
        self.set(&["spec", "priority"], priority)
    }

    /// `spec.schedulerName`.
    pub fn scheduler(self, name: &str) -> Self {
        self.set(&["spec", "schedulerName"], name)
    }

    /// `status.phase`.
    pub fn phase(self, phase: &str) -> Self {
        self.set(&["status", "phase"], phase)
    }
}

// === kruntimes: Runtime Pods and Runs ===

/// A Ready Runtime Pod `ns/name` of runtime `py` (uid `uid-<name>`)
/// declaring `capacity` (`kruntimes.io/capacity.<k>` annotations), with a
/// runtimed heartbeat (`kruntimes.io/RuntimedReady` probe time) at
/// `heartbeat` (RFC 3339).
pub fn runtime_pod(name: &str, capacity: &[(&str, &str)], heartbeat: &str) -> Obj {
    let ann: Map<String, Value> = capacity
        .iter()
        .map(|(k, v)| (format!("{CAPACITY_PREFIX}{k}"), json!(v)))
        .collect();
    Obj(json!({"kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "labels": {"runtime": "py"}, "annotations": ann},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "kruntimes.io/RuntimedReady", "status": "True", "lastProbeTime": heartbeat}]}}))
}

impl Obj {
    /// A Runtime Pod's `runtime` label, or a Run's `spec.runtime`.
    pub fn runtime(self, runtime: &str) -> Self {
        if self.0["kind"] == "Run" {
            self.set(&["spec", "runtime"], runtime)
        } else {
            self.label("runtime", runtime)
        }
    }
}

/// A Run `ns/name` of runtime `py` (uid `uid-<name>`, resourceVersion 1)
/// requesting `requests`.
pub fn run(name: &str, requests: &[(&str, &str)]) -> Obj {
    Obj(json!({"kind": "Run", "apiVersion": "kruntimes.io/v1alpha1",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "resourceVersion": "1"},
        "spec": {"runtime": "py", "resources": {"requests": quantities(requests)}}}))
}

impl Obj {
    /// A Run's status: `phase`, and the Runtime Pod it is assigned to.
    pub fn status(self, phase: &str, assigned_pod: Option<&str>) -> Self {
        let o = self.set(&["status", "phase"], phase);
        match assigned_pod {
            Some(p) => o.set(&["status", "assignedPod"], p),
            None => o,
        }
    }

    /// Appends a `status.conditions` entry (a Run's or a Pod's) with
    /// `lastTransitionTime` `at` (RFC 3339).
    pub fn condition(self, type_: &str, status: &str, reason: &str, at: &str) -> Self {
        self.push(
            &["status", "conditions"],
            json!({"type": type_, "status": status, "reason": reason, "message": "",
                "lastTransitionTime": at}),
        )
    }

    /// Appends a required term to the Run's `spec.affinity.runAffinity`
    /// (`anti`: `runAntiAffinity`).
    pub fn requires(self, anti: bool, term: Value) -> Self {
        self.push(
            &[
                "spec",
                "affinity",
                affinity_kind(anti),
                "requiredDuringSchedulingIgnoredDuringExecution",
            ],
            term,
        )
    }

    /// Appends a preferred term of `weight` to the Run's
    /// `spec.affinity.runAffinity` (`anti`: `runAntiAffinity`).
    pub fn prefers(self, anti: bool, weight: i32, term: Value) -> Self {
        self.push(
            &[
                "spec",
                "affinity",
                affinity_kind(anti),
                "preferredDuringSchedulingIgnoredDuringExecution",
            ],
            json!({"weight": weight, "runAffinityTerm": term}),
        )
    }

    /// Appends `item` to the array at `path`, creating it.
    fn push(self, path: &[&str], item: Value) -> Self {
        let mut items = path
            .iter()
            .try_fold(&self.0, |at, k| at.get(*k))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        items.push(item);
        self.set(path, items)
    }
}

fn affinity_kind(anti: bool) -> &'static str {
    if anti {
        "runAntiAffinity"
    } else {
        "runAffinity"
    }
}

/// A Run affinity term selecting Runs labelled `labels` (`matchLabels`) on
/// the same Runtime Pod (topology key `kruntimes.io/runtime-pod`).
pub fn run_term(labels: &[(&str, &str)]) -> Value {
    json!({"labelSelector": {"matchLabels": quantities(labels)},
        "topologyKey": "kruntimes.io/runtime-pod"})
}

// === groups, priority, devices ===

/// A PodGroup `ml/name` with the `basic` scheduling policy.
pub fn pod_group(name: &str) -> Obj {
    Obj(
        json!({"kind": "PodGroup", "apiVersion": "scheduling.k8s.io/v1beta1",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"schedulingPolicy": {"basic": {}}}}),
    )
}

/// A CompositePodGroup `ml/name` with the `basic` scheduling policy and a
/// workload reference (workload `w`, template `name`).
pub fn composite(name: &str) -> Obj {
    Obj(
        json!({"kind": "CompositePodGroup", "apiVersion": "scheduling.k8s.io/v1alpha3",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"schedulingPolicy": {"basic": {}}, "workloadRef": {"workloadName": "w", "templateName": name}}}),
    )
}

impl Obj {
    /// Gang policy with `minCount` (a PodGroup) or `minGroupCount` (a
    /// CompositePodGroup).
    pub fn gang(self, min: u32) -> Self {
        let field = if self.0["kind"] == "CompositePodGroup" {
            "minGroupCount"
        } else {
            "minCount"
        };
        self.set(&["spec", "schedulingPolicy"], json!({"gang": {field: min}}))
    }

    /// One topology constraint on `key`.
    pub fn topology(self, key: &str) -> Self {
        self.set(
            &["spec", "schedulingConstraints"],
            json!({"topology": [{"key": key}]}),
        )
    }

    /// `spec.parentCompositePodGroupName`.
    pub fn parent(self, parent: &str) -> Self {
        self.set(&["spec", "parentCompositePodGroupName"], parent)
    }

    /// `spec.preemptionPolicy`.
    pub fn preemption_policy(self, policy: &str) -> Self {
        self.set(&["spec", "preemptionPolicy"], policy)
    }

    /// `spec.disruptionMode: {all: {}}`.
    pub fn disrupt_all(self) -> Self {
        self.set(&["spec", "disruptionMode"], json!({"all": {}}))
    }
}

/// A PriorityClass `name` of `value`.
pub fn priority_class(name: &str, value: i32) -> Obj {
    Obj(
        json!({"kind": "PriorityClass", "apiVersion": "scheduling.k8s.io/v1",
        "metadata": {"name": name}, "value": value}),
    )
}

/// A ResourceClaim `ns/name` asking for one device of `class`, unallocated.
pub fn claim(name: &str, class: &str) -> Obj {
    Obj(
        json!({"kind": "ResourceClaim", "apiVersion": "resource.k8s.io/v1",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class}}]}}}),
    )
}

/// A ResourceSlice `name` of `driver` on `node` publishing `devices`.
pub fn slice(name: &str, driver: &str, node: &str, devices: &[&str]) -> Obj {
    let devices: Vec<Value> = devices.iter().map(|d| json!({"name": d})).collect();
    Obj(
        json!({"kind": "ResourceSlice", "apiVersion": "resource.k8s.io/v1",
        "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}),
    )
}

/// A DeviceClass `name`; with `extended`, the extended resource its
/// devices satisfy (`spec.extendedResourceName`).
pub fn device_class(name: &str, extended: Option<&str>) -> Obj {
    let mut o = Obj(
        json!({"kind": "DeviceClass", "apiVersion": "resource.k8s.io/v1",
        "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {}}),
    );
    if let Some(e) = extended {
        o = o.set(&["spec", "extendedResourceName"], e);
    }
    o
}

impl Obj {
    /// A ResourceClaim's allocation: one result per `(driver, pool, device)`.
    pub fn allocated(self, devices: &[(&str, &str, &str)]) -> Self {
        let results: Vec<Value> = devices
            .iter()
            .map(|(driver, pool, device)| {
                json!({"request": "gpu", "driver": driver, "pool": pool, "device": device})
            })
            .collect();
        self.set(&["status", "allocation", "devices", "results"], results)
    }

    /// A ResourceClaim allocation result's (by index) device binding
    /// conditions: `bindingConditions` that must all be True before the
    /// pod binds, `bindingFailureConditions` any of which True fails it.
    pub fn binding_conditions(self, result: usize, conditions: &[&str], failures: &[&str]) -> Self {
        let i = result.to_string();
        let at = ["status", "allocation", "devices", "results", i.as_str()];
        self.set(
            &[&at[..], &["bindingConditions"]].concat(),
            json!(conditions),
        )
        .set(
            &[&at[..], &["bindingFailureConditions"]].concat(),
            json!(failures),
        )
    }

    /// Appends a ResourceClaim's `status.devices` entry for
    /// `(driver, pool, device)` with the condition types in `true_types`
    /// True (at `at`, RFC 3339) and one unrelated `Other=False`.
    pub fn device_status(self, device: (&str, &str, &str), true_types: &[&str], at: &str) -> Self {
        let conditions: Vec<(&str, &str)> = true_types
            .iter()
            .map(|t| (*t, "True"))
            .chain(std::iter::once(("Other", "False")))
            .collect();
        self.device_conditions(device, &conditions, at)
    }

    /// Appends a ResourceClaim's `status.devices` entry for
    /// `(driver, pool, device)` reporting exactly `conditions`
    /// (`(type, status)`, at `at`, RFC 3339), as a driver reports them.
    pub fn device_conditions(
        self,
        device: (&str, &str, &str),
        conditions: &[(&str, &str)],
        at: &str,
    ) -> Self {
        let (driver, pool, name) = device;
        let conditions: Vec<Value> = conditions
            .iter()
            .map(|(t, status)| {
                json!({"type": t, "status": status, "reason": "R", "message": "",
                    "lastTransitionTime": at})
            })
            .collect();
        self.push(
            &["status", "devices"],
            json!({"driver": driver, "pool": pool, "device": name, "conditions": conditions}),
        )
    }

    /// A ResourceClaim's `status.reservedFor`: pods `(name, uid)`.
    pub fn reserved_for(self, pods: &[(&str, &str)]) -> Self {
        let r: Vec<Value> = pods
            .iter()
            .map(|(n, u)| json!({"resource": "pods", "name": n, "uid": u}))
            .collect();
        self.set(&["status", "reservedFor"], r)
    }

    /// A ResourceSlice device's (by index) `nodeAllocatableResources`.
    pub fn node_allocatable(self, device: usize, resources: Value) -> Self {
        let mut o = self;
        o.0["spec"]["devices"][device]["nodeAllocatableResources"] = resources;
        o
    }

    /// A ResourceSlice available on the nodes a label selector matches
    /// (`spec.nodeSelector`, one term `key In [value]`) instead of one node.
    pub fn on_nodes_labelled(self, key: &str, value: &str) -> Self {
        self.unset(&["spec", "nodeName"]).set(
            &["spec", "nodeSelector"],
            json!({"nodeSelectorTerms": [{"matchExpressions": [
                {"key": key, "operator": "In", "values": [value]}]}]}),
        )
    }

    /// A ResourceSlice available on every node (`spec.allNodes`).
    pub fn on_all_nodes(self) -> Self {
        self.unset(&["spec", "nodeName"])
            .set(&["spec", "allNodes"], true)
    }

    /// A Pod's `spec.resourceClaims` entry `name` referring to a claim
    /// (`claim`) or a template (`template`), used by its first container.
    pub fn uses_claim(self, name: &str, claim: Option<&str>, template: Option<&str>) -> Self {
        let mut o = self;
        let mut entry = json!({"name": name});
        if let Some(c) = claim {
            entry["resourceClaimName"] = json!(c);
        }
        if let Some(t) = template {
            entry["resourceClaimTemplateName"] = json!(t);
        }
        match o.0["spec"]["resourceClaims"].as_array_mut() {
            Some(a) => a.push(entry),
            None => o.0["spec"]["resourceClaims"] = json!([entry]),
        }
        let c = &mut o.0["spec"]["containers"][0]["resources"]["claims"];
        match c.as_array_mut() {
            Some(a) => a.push(json!({"name": name})),
            None => *c = json!([{"name": name}]),
        }
        o
    }
}

/// `{"kind": "List", "items": objects}`, the body of `POST /v1/objects`.
pub fn list<I: IntoIterator<Item = O>, O: Into<Value>>(objects: I) -> Value {
    let items: Vec<Value> = objects.into_iter().map(Into::into).collect();
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::Run;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    use k8s_openapi::api::scheduling::v1alpha3::CompositePodGroup;
    use k8s_openapi::api::scheduling::v1beta1::PodGroup;

    #[test]
    fn every_builder_makes_a_valid_typed_object() {
        let n: Node = node("n1")
            .allocatable("8", "16Gi")
            .label("zone", "z")
            .typed();
        assert_eq!(n.metadata.labels.unwrap()["zone"], "z");
        let p: Pod = pod("p")
            .requests(&[("cpu", "2"), ("memory", "1Gi")])
            .group("g")
            .priority(7)
            .on_node("n1")
            .typed();
        let spec = p.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert_eq!(spec.priority, Some(7));
        assert_eq!(
            spec.scheduling_group.unwrap().pod_group_name.as_deref(),
            Some("g")
        );
        assert_eq!(p.metadata.uid.as_deref(), Some("p-uid"));
        let rp: Pod = runtime_pod("rp", &[("gpu", "4")], "2026-03-01T12:00:00Z")
            .runtime("rust")
            .typed();
        let meta = rp.metadata;
        assert_eq!(meta.annotations.unwrap()["kruntimes.io/capacity.gpu"], "4");
        assert_eq!(meta.labels.unwrap()["runtime"], "rust");
        let r: Run = run("r", &[("gpu", "1")])
            .runtime("rust")
            .status("Running", Some("rp"))
            .typed();
        assert_eq!(r.spec.runtime, "rust");
        assert_eq!(r.status.unwrap().assigned_pod.as_deref(), Some("rp"));
        let g: PodGroup = pod_group("g").gang(3).topology("rack").parent("c").typed();
        assert!(g.spec.scheduling_policy.gang.is_some());
        let c: CompositePodGroup = composite("c").gang(2).typed();
        assert!(c.spec.scheduling_policy.gang.is_some());
        let pc: PriorityClass = priority_class("high", 1000).typed();
        assert_eq!(pc.value, Some(1000));
        let _: ResourceClaim = claim("gpu", "gpu.example.com").typed();
        let s: ResourceSlice = slice("s", "gpu.example.com", "n1", &["gpu-0"]).typed();
        assert_eq!(s.spec.devices.map(|d| d.len()), Some(1));
    }

    #[test]
    fn device_entries_report_the_conditions_given() {
        let c = claim("c", "k")
            .device_status(("d", "p", "x"), &["A"], "t")
            .device_conditions(("d", "p", "y"), &[("A", "False"), ("B", "True")], "t");
        let reported = |i: usize| -> Vec<(String, String)> {
            c.0["status"]["devices"][i]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| (c["type"].to_string(), c["status"].to_string()))
                .collect()
        };
        let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> {
            p.iter()
                .map(|(t, s)| (format!("{t:?}"), format!("{s:?}")))
                .collect()
        };
        assert_eq!(reported(0), pairs(&[("A", "True"), ("Other", "False")]));
        assert_eq!(reported(1), pairs(&[("A", "False"), ("B", "True")]));
        assert_eq!(c.0["status"]["devices"][1]["device"], "y");
    }

    #[test]
    fn set_and_unset_create_and_remove_nested_fields() {
        let o = Obj(json!({"a": 1})).set(&["b", "c"], 2).set(&["a"], "x");
        assert_eq!(o.0, json!({"a": "x", "b": {"c": 2}}));
        let o = o.unset(&["b", "c"]).unset(&["missing", "x"]);
        assert_eq!(o.0, json!({"a": "x", "b": {}}));
        let a = Obj(json!({"l": [{"x": 1}, {"x": 2}]}))
            .set(&["l", "1", "y"], 3)
            .unset(&["l", "0", "x"])
            .unset(&["l", "5", "x"]);
        assert_eq!(a.0, json!({"l": [{}, {"x": 2, "y": 3}]}));
        let l = Obj(json!({}))
            .label("a", "1")
            .labels(&[("b", "2"), ("a", "3")]);
        assert_eq!(l.0, json!({"metadata": {"labels": {"a": "3", "b": "2"}}}));

        assert_eq!(list([o.clone()])["items"][0], o.0);
    }
}
