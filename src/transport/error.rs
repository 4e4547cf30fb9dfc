//! One JSON error shape, `{"error": "..."}`, for every failure the API
//! returns — including body-parse rejections.

use axum::Json;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde_json::json;

/// An HTTP error with a message for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

/// The raw body, with rejections (size limit, read errors) as [`ApiError`].
pub struct Body(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let limit = req
            .extensions()
            .get::<super::BodyLimit>()
            .copied()
            .unwrap_or_default();
        match Bytes::from_request(req, state).await {
            Ok(b) => Ok(Body(b)),
            Err(rej) => {
                let status = rej.status();
                let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
                    format!(
                        "request body is larger than {} bytes, the limit of {}",
                        limit.bytes, limit.of
                    )
                } else {
                    rej.body_text()
                };
                Err(ApiError::new(status, message))
            }
        }
    }
}

/// A JSON body decoded with field paths in errors: syntax errors are 400,
/// well-formed JSON of the wrong shape is 422 naming the field.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let Body(bytes) = Body::from_request(req, state).await?;
        decode_json(&bytes).map(JsonBody)
    }
}

/// Decodes JSON, naming the offending field on a shape error.
pub fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "request body is empty; expected a JSON object",
        ));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() || inner.is_io() {
            ApiError::bad_request(format!("malformed JSON: {inner}"))
        } else if path == "." {
            ApiError::unprocessable(format!("{inner}"))
        } else {
            ApiError::unprocessable(format!("{path}: {inner}"))
        }
    })
}

/// Query parameters as a map, with rejections as [`ApiError`].
pub struct Params(pub std::collections::BTreeMap<String, String>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<std::collections::BTreeMap<String, String>>::from_request_parts(
            parts, state,
        )
        .await
        .map(|q| Params(q.0))
        .map_err(|e| ApiError::bad_request(format!("invalid query string: {}", e.body_text())))
    }
}

impl Params {
    /// A parameter, `None` when absent or empty.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    /// A required parameter.
    pub fn require(&self, key: &str) -> Result<&str, ApiError> {
        self.get(key)
            .ok_or_else(|| ApiError::bad_request(format!("query parameter {key} is required")))
    }
}
