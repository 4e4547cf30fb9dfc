//! Field errors modelled on Kubernetes `field.Error`.
//!
//! A [`FieldError`] names the field path it is about, using the path of the
//! user's own object (for a controller: the field of its API the building
//! block came from), and renders like the API server does:
//!
//! ```text
//! spec.podGroupTemplates[0].schedulingPolicy.gang.minCount: Invalid value: -1: must be greater than or equal to 1
//! ```

use std::fmt;

use serde::Serialize;
use serde_json::Value;

/// The kind of a field error; the names follow Kubernetes `field.ErrorType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum FieldErrorKind {
    /// A required value is missing (`Required value`).
    Required,
    /// The value is malformed or out of range (`Invalid value`).
    Invalid,
    /// The value must be unique and is not (`Duplicate value`).
    Duplicate,
    /// The value is not one of the supported ones (`Unsupported value`).
    NotSupported,
    /// The field may not be set here (`Forbidden`).
    Forbidden,
    /// The list has too many items (`Too many`).
    TooMany,
}

impl fmt::Display for FieldErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Required => "Required value",
            Self::Invalid => "Invalid value",
            Self::Duplicate => "Duplicate value",
            Self::NotSupported => "Unsupported value",
            Self::Forbidden => "Forbidden",
            Self::TooMany => "Too many",
        })
    }
}

/// One validation failure, located by field path.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FieldError {
    /// Field path, e.g. `spec.podGroupTemplates[0].schedulingPolicy`.
    pub path: String,
    /// What is wrong.
    pub kind: FieldErrorKind,
    /// The offending value, when the kind shows one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// Human-readable explanation (may be empty).
    pub detail: String,
}

impl FieldError {
    fn new(
        path: impl Into<String>,
        kind: FieldErrorKind,
        value: Option<Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            path: path.into(),
            kind,
            value,
            detail: detail.into(),
        }
    }

    /// `Required value`.
    pub fn required(path: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(path, FieldErrorKind::Required, None, detail)
    }

    /// `Invalid value`.
    pub fn invalid(
        path: impl Into<String>,
        value: impl Into<Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(path, FieldErrorKind::Invalid, Some(value.into()), detail)
    }

    /// `Duplicate value`.
    pub fn duplicate(path: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(path, FieldErrorKind::Duplicate, Some(value.into()), "")
    }

    /// `Unsupported value`, listing what is supported.
    pub fn not_supported(
        path: impl Into<String>,
        value: impl Into<Value>,
        supported: &[&str],
    ) -> Self {
        let detail = if supported.is_empty() {
            "no values are supported".to_owned()
        } else {
            let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
            format!("supported values: {}", list.join(", "))
        };
        Self::new(
            path,
            FieldErrorKind::NotSupported,
            Some(value.into()),
            detail,
        )
    }

    /// `Forbidden`.
    pub fn forbidden(path: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(path, FieldErrorKind::Forbidden, None, detail)
    }

    /// `Too many`: a list of `actual` items where at most `max` are allowed.
    pub fn too_many(path: impl Into<String>, actual: usize, max: usize) -> Self {
        Self::new(
            path,
            FieldErrorKind::TooMany,
            Some(Value::from(actual)),
            format!("must have at most {max} items"),
        )
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.kind)?;
        if let Some(value) = &self.value {
            // Strings are quoted, numbers bare, structures as compact JSON.
            write!(f, ": {value}")?;
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

impl std::error::Error for FieldError {}

/// Appends a child field name to a path (`spec` + `name` = `spec.name`).
pub fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// Appends a list index to a path (`spec.items` + 2 = `spec.items[2]`).
pub fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_kubernetes() {
        let e = FieldError::invalid(
            "spec.podGroupTemplates[0].schedulingPolicy.gang.minCount",
            -1,
            "must be greater than or equal to 1",
        );
        assert_eq!(
            e.to_string(),
            "spec.podGroupTemplates[0].schedulingPolicy.gang.minCount: Invalid value: -1: must be greater than or equal to 1"
        );
        assert_eq!(
            FieldError::required("a.b", "").to_string(),
            "a.b: Required value"
        );
        assert_eq!(
            FieldError::not_supported("p", "gang", &["basic"]).to_string(),
            r#"p: Unsupported value: "gang": supported values: "basic""#
        );
        assert_eq!(
            FieldError::too_many("t", 9, 8).to_string(),
            "t: Too many: 9: must have at most 8 items"
        );
        assert_eq!(
            FieldError::duplicate("n", "a").to_string(),
            r#"n: Duplicate value: "a""#
        );
    }
}
