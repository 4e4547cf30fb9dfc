//! Structural pruning of custom resources, as the API server does for a
//! CRD with a structural schema: on every create, update and status write,
//! fields the schema does not name are dropped at every level, unless the
//! level says `x-kubernetes-preserve-unknown-fields: true`. Objects
//! (`properties`) keep only their named fields; maps
//! (`additionalProperties`) keep every key and prune each value; lists
//! prune each item. `apiVersion`, `kind` and `metadata` at the root are
//! the API server's own and are kept.
//!
//! Runs are pruned to the schema generated from `crd::Run`, which mirrors
//! upstream kruntimes' `RunSpec`/`RunStatus` field for field: a status
//! field upstream does not have (such as `status.reason`) disappears, as
//! it does on a real cluster with kruntimes' CRD installed.

use kube::CustomResourceExt;
use serde_json::Value;
use std::sync::OnceLock;

/// The Run CRD's `openAPIV3Schema`.
pub fn run_schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let crd = kruntimes_scheduler::crd::Run::crd();
        let v = serde_json::to_value(&crd.spec.versions[0]).unwrap();
        v["schema"]["openAPIV3Schema"].clone()
    })
}

/// Prunes a whole object: the root's own fields are kept.
pub fn prune_object(schema: &Value, obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let props = schema.get("properties").and_then(Value::as_object);
    map.retain(|k, _| {
        matches!(k.as_str(), "apiVersion" | "kind" | "metadata")
            || props.is_some_and(|p| p.contains_key(k))
    });
    if let Some(props) = props {
        for (k, v) in map.iter_mut() {
            if let Some(s) = props.get(k) {
                prune(s, v);
            }
        }
    }
}

/// Prunes `v` to `schema`.
pub fn prune(schema: &Value, v: &mut Value) {
    let preserve = schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    match v {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            if let Some(props) = props {
                if !preserve && additional.is_none() {
                    map.retain(|k, _| props.contains_key(k));
                }
                for (k, v) in map.iter_mut() {
                    if let Some(s) = props.get(k) {
                        prune(s, v);
                    } else if let Some(a) = additional {
                        prune(a, v);
                    }
                }
            } else if let Some(a) = additional {
                for v in map.values_mut() {
                    prune(a, v);
                }
            } else if !preserve {
                // An object schema with neither: nothing is known.
                map.clear();
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for item in items {
                    prune(s, item);
                }
            }
        }
        _ => {}
    }
}
