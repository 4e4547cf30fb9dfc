//! AdmissionReview plumbing shared by every webhook: decoding the review,
//! decoding the object under review with field paths, and building the
//! verdicts (allow, allow with a patch, deny with every violation).

use base64::Engine as _;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::response::{StatusCause, StatusDetails, StatusSummary};
use kube::core::{DynamicObject, GroupVersionKind};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::workload::{FieldError, FieldErrorKind};

/// The request every decision function judges.
pub type Request = AdmissionRequest<DynamicObject>;

/// The only AdmissionReview version served.
pub const API_VERSION: &str = "admission.k8s.io/v1";
/// The AdmissionReview kind.
pub const KIND: &str = "AdmissionReview";

/// Why a review body cannot be judged at all (HTTP 400).
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// No body.
    #[error("request body is empty; expected an admission.k8s.io/v1 AdmissionReview")]
    Empty,
    /// Not JSON, or not shaped like an AdmissionReview.
    #[error("malformed AdmissionReview: {0}")]
    Malformed(String),
    /// Another version or kind.
    #[error(
        "unsupported apiVersion {api_version:?} / kind {kind:?}: only admission.k8s.io/v1 AdmissionReview is served"
    )]
    Version {
        /// What the body said.
        api_version: String,
        /// What the body said.
        kind: String,
    },
    /// A review without `request`.
    #[error("AdmissionReview has no request")]
    NoRequest,
}

/// Decodes an AdmissionReview body into its request.
pub fn decode_review(bytes: &[u8]) -> Result<Request, ReviewError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ReviewError::Empty);
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let review: AdmissionReview<DynamicObject> =
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            if path == "." {
                ReviewError::Malformed(inner.to_string())
            } else {
                ReviewError::Malformed(format!("{path}: {inner}"))
            }
        })?;
    if review.types.api_version != API_VERSION || review.types.kind != KIND {
        return Err(ReviewError::Version {
            api_version: review.types.api_version,
            kind: review.types.kind,
        });
    }
    review.try_into().map_err(|_| ReviewError::NoRequest)
}

/// Encodes a response as the AdmissionReview the API server expects: the
/// request's `apiVersion`/`kind`, and the patch as a base64 string (the Go
/// `[]byte` encoding).
pub fn encode_review(response: AdmissionResponse) -> Value {
    let mut review = response.into_review();
    if review.types.api_version.is_empty() {
        review.types.api_version = API_VERSION.to_owned();
    }
    if review.types.kind.is_empty() {
        review.types.kind = KIND.to_owned();
    }
    let patch = review.response.as_mut().and_then(|r| r.patch.take());
    let mut value = serde_json::to_value(&review).unwrap_or(Value::Null);
    if let (Some(patch), Some(resp)) = (patch, value.get_mut("response")) {
        resp["patch"] = Value::String(base64::engine::general_purpose::STANDARD.encode(patch));
    }
    value
}

// === what a webhook handles ===

/// The group/version/kind a webhook judges.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// Version.
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
}

impl Target {
    fn matches(&self, gvk: &GroupVersionKind) -> bool {
        gvk.group == self.group && gvk.version == self.version && gvk.kind == self.kind
    }

    fn describe(&self) -> String {
        if self.group.is_empty() {
            format!("{}/{}", self.version, self.kind)
        } else {
            format!("{}/{} {}", self.group, self.version, self.kind)
        }
    }
}

/// What a webhook does with a request, before judging the object.
pub enum Scope<'a> {
    /// Judge the object (`CREATE`), with the old one on `UPDATE`.
    Judge {
        /// `request.object`.
        new: &'a DynamicObject,
        /// `request.oldObject`, on `UPDATE`.
        old: Option<&'a DynamicObject>,
    },
    /// Nothing to judge (other operations, subresources): allow.
    Skip,
}

/// Checks that the request is for `target` and carries the objects the
/// operation needs. `Err` says why the request cannot be judged (answer it
/// with [`bad_request`]).
pub fn scope<'a>(req: &'a Request, target: &Target) -> Result<Scope<'a>, String> {
    if !target.matches(&req.kind) {
        return Err(format!(
            "this webhook judges {}; got {}/{} {} (check the webhook configuration's rules)",
            target.describe(),
            req.kind.group,
            req.kind.version,
            req.kind.kind
        ));
    }
    if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
        return Ok(Scope::Skip);
    }
    match req.operation {
        Operation::Create | Operation::Update => {}
        Operation::Delete | Operation::Connect => return Ok(Scope::Skip),
    }
    let Some(new) = req.object.as_ref() else {
        return Err("request.object is required".to_owned());
    };
    let old = if req.operation == Operation::Update {
        match req.old_object.as_ref() {
            Some(old) => Some(old),
            None => {
                return Err("request.oldObject is required for UPDATE".to_owned());
            }
        }
    } else {
        None
    };
    Ok(Scope::Judge { new, old })
}

/// Decodes the object under review into its typed form; a shape error names
/// the field.
pub fn decode_object<T: DeserializeOwned>(obj: &DynamicObject) -> Result<T, Violation> {
    let value = serde_json::to_value(obj).map_err(|e| Violation::bad_request(e.to_string()))?;
    serde_path_to_error::deserialize(&value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let message = inner.to_string();
        // A required field that is absent is named itself, not its parent.
        if let Some(name) = message
            .strip_prefix("missing field `")
            .and_then(|m| m.split('`').next())
        {
            let field = if path == "." {
                name.to_owned()
            } else {
                format!("{path}.{name}")
            };
            let mut v = Violation::invalid(&field, format!("{field}: Required value"));
            v.cause = "FieldValueRequired";
            return v;
        }
        if path == "." {
            Violation::invalid(".", message)
        } else {
            Violation::invalid(&path, format!("{path}: Invalid value: {message}"))
        }
    })
}

// === verdicts ===

/// One reason to refuse a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Suggested HTTP code: 422 invalid, 403 forbidden, 400 bad request,
    /// 503 cannot be judged now.
    pub code: u16,
    /// Field path, when there is one.
    pub field: String,
    /// Kubernetes `StatusCause` reason (`FieldValueInvalid`, ...).
    pub cause: &'static str,
    /// The full line, starting with the field path.
    pub message: String,
}

impl Violation {
    /// A malformed request (no field to blame).
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            code: 400,
            field: String::new(),
            cause: "BadRequest",
            message: message.into(),
        }
    }

    /// An invalid field value (422).
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: 422,
            field: field.into(),
            cause: "FieldValueInvalid",
            message: message.into(),
        }
    }

    /// A reference to something that does not exist (403, as Kubernetes'
    /// own Priority admission plugin answers).
    pub fn forbidden(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: 403,
            field: field.into(),
            cause: "FieldValueNotFound",
            message: message.into(),
        }
    }

    /// A value the API server's admission would refuse (403, as Kubernetes'
    /// own Priority admission plugin answers a priority that differs from
    /// its class).
    pub fn forbidden_value(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: 403,
            field: field.into(),
            cause: "FieldValueForbidden",
            message: message.into(),
        }
    }

    /// A check that cannot be made now; fail closed (503).
    pub fn unavailable(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: 503,
            field: field.into(),
            cause: "InternalError",
            message: message.into(),
        }
    }
}

impl From<&FieldError> for Violation {
    fn from(e: &FieldError) -> Self {
        let cause = match e.kind {
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::Duplicate => "FieldValueDuplicate",
            FieldErrorKind::NotSupported => "FieldValueNotSupported",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::TooMany => "FieldValueTooMany",
        };
        Self {
            code: 422,
            field: e.path.clone(),
            cause,
            message: e.to_string(),
        }
    }
}

/// Allows the request unchanged.
pub fn allow(req: &Request) -> AdmissionResponse {
    AdmissionResponse::from(req)
}

/// Allows with a JSON patch (and warnings).
pub fn allow_with_patch(
    req: &Request,
    patch: json_patch::Patch,
    warnings: Vec<String>,
) -> AdmissionResponse {
    match AdmissionResponse::from(req).with_patch(patch) {
        Ok(mut resp) => {
            if !warnings.is_empty() {
                resp.warnings = Some(warnings);
            }
            resp
        }
        Err(e) => deny(
            req,
            "",
            vec![Violation {
                code: 500,
                field: String::new(),
                cause: "InternalError",
                message: e.to_string(),
            }],
        ),
    }
}

/// Denies a request that cannot be judged (HTTP 200, `status.code` 400).
pub fn bad_request(req: &Request, message: impl Into<String>) -> AdmissionResponse {
    deny(req, "", vec![Violation::bad_request(message)])
}

/// Denies with every violation. The code is 422 when any field is invalid,
/// else the most severe of the others; the message names every field.
pub fn deny(req: &Request, what: &str, violations: Vec<Violation>) -> AdmissionResponse {
    let code = if violations.iter().any(|v| v.code == 422) {
        422
    } else {
        violations.iter().map(|v| v.code).max().unwrap_or(400)
    };
    let (reason, verb) = match code {
        422 => ("Invalid", "is invalid"),
        403 => ("Forbidden", "is forbidden"),
        503 => ("ServiceUnavailable", "cannot be admitted now"),
        500 => ("InternalError", "cannot be admitted"),
        _ => ("BadRequest", "cannot be admitted"),
    };
    let lines: Vec<&str> = violations.iter().map(|v| v.message.as_str()).collect();
    let message = if what.is_empty() {
        lines.join("; ")
    } else {
        format!("{what} {verb}: {}", lines.join("; "))
    };
    let causes = violations
        .iter()
        .map(|v| StatusCause {
            reason: v.cause.to_owned(),
            message: v.message.clone(),
            field: v.field.clone(),
        })
        .collect();
    let mut resp = AdmissionResponse::from(req).deny(&message);
    resp.result.status = Some(StatusSummary::Failure);
    resp.result.code = code;
    resp.result.reason = reason.to_owned();
    resp.result.details = Some(StatusDetails {
        name: req.name.clone(),
        group: req.kind.group.clone(),
        kind: req.kind.kind.clone(),
        uid: String::new(),
        causes,
        retry_after_seconds: if code == 503 { 1 } else { 0 },
    });
    resp
}

/// How a denial names the object: `PodGroup "workers"` (or the
/// `generateName` prefix when the name is not chosen yet).
pub fn describe(req: &Request, obj: &DynamicObject) -> String {
    let name = obj
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| Some(req.name.clone()).filter(|n| !n.is_empty()))
        .or_else(|| obj.metadata.generate_name.clone().map(|g| format!("{g}*")))
        .unwrap_or_default();
    format!("{} {name:?}", req.kind.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Obj {
        spec: Spec,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Spec {
        workload_ref: String,
        count: i32,
    }

    fn object(data: Value) -> DynamicObject {
        match serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "X", "metadata": {"name": "x"}, "spec": data
        })) {
            Ok(o) => o,
            Err(e) => panic!("fixture: {e}"),
        }
    }

    #[test]
    fn an_absent_required_field_is_named_itself() {
        let Err(v) = decode_object::<Obj>(&object(serde_json::json!({"count": 1}))) else {
            panic!("decoded without workloadRef");
        };
        assert_eq!(v.field, "spec.workloadRef");
        assert_eq!(v.cause, "FieldValueRequired");
        assert_eq!(v.message, "spec.workloadRef: Required value");
    }

    #[test]
    fn a_wrong_type_is_invalid_at_the_field() {
        let Err(v) = decode_object::<Obj>(&object(
            serde_json::json!({"workloadRef": "w", "count": "one"}),
        )) else {
            panic!("decoded a string as a number");
        };
        assert_eq!(v.field, "spec.count");
        assert_eq!(v.cause, "FieldValueInvalid");
    }
}
