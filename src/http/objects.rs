//! Standalone mode's object API: `POST|GET|DELETE /v1/objects` and the
//! runtimed heartbeat helper.

use super::RunApiState;
use crate::cluster::load::parse_documents;
use crate::cluster::standalone::{Kind, StandaloneStore, StoreError};
use crate::transport::{ApiError, Body, Params};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use std::sync::Arc;

fn store(s: &RunApiState) -> Result<&Arc<StandaloneStore>, ApiError> {
    s.store.as_ref().ok_or_else(|| {
        ApiError::not_found("this endpoint is only served in standalone mode (serve --state PATH)")
    })
}

fn kind(params: &Params) -> Result<Kind, ApiError> {
    let k = params.require("kind")?;
    Kind::parse(k).ok_or_else(|| {
        ApiError::bad_request(format!(
            "kind: Unsupported value: {k:?}: supported values: {}",
            Kind::ALL.map(Kind::as_str).join(", ")
        ))
    })
}

/// Upserts one object, a `List`, or multi-document YAML. All or nothing.
/// Answers `{"items": [...]}`, the stored objects.
pub(super) async fn upsert(
    State(s): State<RunApiState>,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let store = store(&s)?;
    let text = std::str::from_utf8(&body)
        .map_err(|_| ApiError::bad_request("request body is not UTF-8"))?;
    if text.trim().is_empty() {
        return Err(ApiError::bad_request(
            "request body is empty; expected an object, a List or YAML documents",
        ));
    }
    // Parsing and applying a big List takes a while, and so do rendering
    // and dropping its answer: all off the async workers, so the rest of
    // the API keeps answering meanwhile.
    let store = Arc::clone(store);
    let answer = tokio::task::spawn_blocking(move || {
        let text = std::str::from_utf8(&body).unwrap_or_default();
        let objects =
            parse_documents(text, "body").map_err(|e| ApiError::bad_request(e.to_string()))?;
        let items = store.upsert_json(objects).map_err(|e| match e {
            StoreError::Invalid(m) => ApiError::unprocessable(m),
            StoreError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, m),
        })?;
        Ok::<_, ApiError>(items_json(&items))
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        )],
        answer,
    )
        .into_response())
}

/// `{"items":[...]}` from the items' JSON texts (compact, as
/// `serde_json` writes them).
fn items_json(items: &[String]) -> Vec<u8> {
    let len = items.iter().map(|t| t.len() + 1).sum::<usize>();
    let mut out = Vec::with_capacity(len + 12);
    out.extend_from_slice(b"{\"items\":[");
    for (i, t) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(t.as_bytes());
    }
    out.extend_from_slice(b"]}");
    out
}

/// `GET /v1/objects?kind=K[&namespace=NS][&name=N]`.
pub(super) async fn list(
    State(s): State<RunApiState>,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    let store = store(&s)?;
    let kind = kind(&params)?;
    Ok(Json(
        json!({ "items": store.list(kind, params.get("namespace"), params.get("name")) }),
    ))
}

/// `DELETE /v1/objects?kind=K&namespace=NS&name=N` → 204 or 404.
pub(super) async fn delete(
    State(s): State<RunApiState>,
    params: Params,
) -> Result<Response, ApiError> {
    let store = store(&s)?;
    let kind = kind(&params)?;
    let namespace = params.get("namespace").unwrap_or("default");
    let name = params.require("name")?;
    if store.delete(kind, namespace, name) {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::not_found(format!(
            "{} {namespace}/{name} not found",
            kind.as_str()
        )))
    }
}

/// `POST /v1/runtime-pods/heartbeat?namespace=NS[&name=N][&runtime=R]`:
/// stamps a fresh runtimed heartbeat on matching Runtime Pods, as runtimed
/// would. Standalone mode only.
pub(super) async fn heartbeat(
    State(s): State<RunApiState>,
    params: Params,
) -> Result<Json<Value>, ApiError> {
    let store = store(&s)?;
    let namespace = params.get("namespace").unwrap_or("default");
    let pods = store.heartbeat(
        namespace,
        params.get("name"),
        params.get("runtime"),
        Timestamp::now(),
    );
    if pods.is_empty() {
        return Err(ApiError::not_found(format!(
            "no Runtime Pods matched in namespace {namespace}"
        )));
    }
    Ok(Json(json!({ "pods": pods })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_items_answer_is_what_serde_json_writes() {
        let items = [
            json!({"a": 1, "b": {"c": "é\"\n"}}),
            json!({"kind": "Run", "x": [1, 2]}),
        ];
        let texts: Vec<String> = items.iter().map(Value::to_string).collect();
        assert_eq!(
            items_json(&texts),
            serde_json::to_vec(&json!({ "items": items })).unwrap()
        );
        assert_eq!(items_json(&[]), br#"{"items":[]}"#);
    }
}
