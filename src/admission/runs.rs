//! Run webhooks: default `runs: "1"`, validate quantities and names, keep
//! the effective request immutable. The rules are the scheduler's own
//! ([`crate::model::resources`]), so admission and placement cannot disagree.

use std::collections::BTreeMap;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::core::admission::AdmissionResponse;
use serde_json::{Value, json};

use super::review::{self, Request, Scope, Target, Violation};
use crate::crd::RunResources;
use crate::model::resources::{RUNS, effective_requests, request_errors};

/// `kruntimes.io/v1alpha1` Run.
pub const RUN: Target = Target {
    group: "kruntimes.io",
    version: "v1alpha1",
    kind: "Run",
};

/// The requests path every message about requests starts with.
const REQUESTS_PATH: &str = "spec.resources.requests";

/// `POST /admission/mutate/runs`: on CREATE, adds
/// `spec.resources.requests.runs: "1"` when it is absent (creating
/// `spec.resources` and `requests` as needed). UPDATE is left alone: the
/// request is immutable, and absent already means `runs: 1`.
pub fn mutate_run(req: &Request) -> AdmissionResponse {
    let new = match review::scope(req, &RUN) {
        Ok(Scope::Judge { new, old: None }) => new,
        Ok(_) => return review::allow(req),
        Err(msg) => return review::bad_request(req, msg),
    };
    match default_runs_patch(&new.data) {
        Some(patch) => review::allow_with_patch(req, patch, Vec::new()),
        None => review::allow(req),
    }
}

/// The patch that defaults `runs` in a Run's JSON (without `metadata`),
/// `None` when nothing is to be added (already set, or a shape only
/// validation can judge).
pub fn default_runs_patch(data: &Value) -> Option<Patch> {
    let add = |tokens: &[&str], value: Value| {
        Some(Patch(vec![PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(tokens.iter().copied()),
            value,
        })]))
    };
    let one = || json!("1");
    let spec = match data.get("spec") {
        None | Some(Value::Null) => {
            return add(&["spec"], json!({"resources": {"requests": {RUNS: one()}}}));
        }
        Some(Value::Object(spec)) => spec,
        Some(_) => return None,
    };
    let resources = match spec.get("resources") {
        None | Some(Value::Null) => {
            return add(&["spec", "resources"], json!({"requests": {RUNS: one()}}));
        }
        Some(Value::Object(r)) => r,
        Some(_) => return None,
    };
    let requests = match resources.get("requests") {
        None | Some(Value::Null) => {
            return add(&["spec", "resources", "requests"], json!({RUNS: one()}));
        }
        Some(Value::Object(r)) => r,
        Some(_) => return None,
    };
    match requests.get(RUNS) {
        None | Some(Value::Null) => add(&["spec", "resources", "requests", RUNS], one()),
        Some(_) => None,
    }
}

/// `POST /admission/validate/runs`: every request entry is a non-negative
/// integer under a valid resource name (all offenders listed); on UPDATE
/// the effective request does not change (absent ≡ `runs: "1"`, zero ≡
/// absent). An UPDATE that leaves `spec.resources.requests` exactly as
/// stored is not judged again (ratcheting, as Kubernetes does for CRD
/// validation), so a Run stored before the webhook existed can still have
/// its labels, finalizers or status changed.
pub fn validate_run(req: &Request) -> AdmissionResponse {
    let (new, old) = match review::scope(req, &RUN) {
        Ok(Scope::Judge { new, old }) => (new, old),
        Ok(Scope::Skip) => return review::allow(req),
        Err(msg) => return review::bad_request(req, msg),
    };
    let what = review::describe(req, new);
    let new_requests = match requests_of(&new.data) {
        Ok(r) => r,
        Err(v) => return review::deny(req, &what, vec![v]),
    };
    let old_requests = match old.map(|o| requests_of(&o.data)).transpose() {
        Ok(r) => r,
        Err(v) => {
            return review::bad_request(req, format!("oldObject: {}", v.message));
        }
    };
    let mut violations = run_violations(
        new_requests.as_ref(),
        old_requests.as_ref().map(Option::as_ref),
    );
    violations.extend(affinity_violations(&new.data));
    if violations.is_empty() {
        review::allow(req)
    } else {
        review::deny(req, &what, violations)
    }
}

/// `spec.affinity`: its shape, every term's topology key, selector and
/// weight, with the field named (the scheduler's own parser, so a Run
/// admitted here never fails placement for its selector).
pub fn affinity_violations(data: &Value) -> Vec<Violation> {
    let Some(raw) = data.pointer("/spec/affinity").filter(|v| !v.is_null()) else {
        return Vec::new();
    };
    match serde_json::from_value::<crate::crd::RunAffinity>(raw.clone()) {
        Err(e) => vec![Violation::invalid(
            "spec.affinity",
            format!("spec.affinity: Invalid value: {e}"),
        )],
        Ok(a) => crate::runs::affinity::violations(&a)
            .into_iter()
            .map(|(field, msg)| {
                let line = format!("{field}: {msg}");
                Violation::invalid(field, line)
            })
            .collect(),
    }
}

/// The rules themselves, over the request maps: `old` is `Some` on UPDATE
/// (holding the stored requests, themselves maybe absent).
pub fn run_violations(
    new: Option<&BTreeMap<String, Quantity>>,
    old: Option<Option<&BTreeMap<String, Quantity>>>,
) -> Vec<Violation> {
    if let Some(old) = old
        && old == new
    {
        return Vec::new();
    }
    let mut out: Vec<Violation> = request_errors(new)
        .iter()
        .map(|e| Violation::invalid(format!("{REQUESTS_PATH}[{}]", e.resource()), e.to_string()))
        .collect();
    if let Some(old) = old {
        let before = effective_requests(old);
        let after = effective_requests(new);
        let unchanged = matches!((&before, &after), (Ok(b), Ok(a)) if a == b);
        if !unchanged {
            let shown = |r: &Result<_, _>, raw: Option<&BTreeMap<String, Quantity>>| match r {
                Ok(r) => format!("{r}"),
                Err(_) => format!("{:?}", raw_map(raw)),
            };
            out.push(Violation::invalid(
                REQUESTS_PATH,
                format!(
                    "{REQUESTS_PATH}: Invalid value: {}: field is immutable: the effective request may not \
                     change after creation (was {}, now {})",
                    serde_json::to_string(&raw_map(new)).unwrap_or_default(),
                    shown(&before, old),
                    shown(&after, new),
                ),
            ));
        }
    }
    out
}

fn raw_map(r: Option<&BTreeMap<String, Quantity>>) -> BTreeMap<&str, &str> {
    r.into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.0.as_str()))
        .collect()
}

/// `spec.resources.requests` of a Run's JSON, decoded with the CRD type.
fn requests_of(data: &Value) -> Result<Option<BTreeMap<String, Quantity>>, Violation> {
    let Some(resources) = data.pointer("/spec/resources").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    serde_path_to_error::deserialize::<_, RunResources>(resources)
        .map(|r| r.requests)
        .map_err(|e| {
            let path = e.path().to_string();
            let field = if path == "." {
                "spec.resources".to_owned()
            } else {
                format!("spec.resources.{path}")
            };
            let inner = e.into_inner();
            Violation::invalid(&field, format!("{field}: Invalid value: {inner}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect()
    }

    #[test]
    fn absent_equals_runs_one_on_update() {
        assert!(run_violations(Some(&q(&[("runs", "1")])), Some(None)).is_empty());
        assert!(run_violations(None, Some(Some(&q(&[("runs", "1"), ("gpu", "0")])))).is_empty());
        let v = run_violations(Some(&q(&[("runs", "2")])), Some(None));
        assert_eq!(v.len(), 1);
        assert!(v[0].message.contains("field is immutable"), "{v:?}");
    }

    #[test]
    fn every_invalid_entry_listed() {
        let v = run_violations(Some(&q(&[("a", "-1"), ("b", "1.5"), ("c", "2")])), None);
        let fields: Vec<_> = v.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            fields,
            vec!["spec.resources.requests[a]", "spec.resources.requests[b]"]
        );
    }

    #[test]
    fn unchanged_invalid_requests_ratchet() {
        let bad = q(&[("gpu", "1.5")]);
        assert!(run_violations(Some(&bad), Some(Some(&bad))).is_empty());
        assert_eq!(run_violations(Some(&bad), None).len(), 1);
    }
}
