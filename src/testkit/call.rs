//! One request through a router, as a client sees the answer.

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;

/// An answer: status, the body parsed as JSON (`Null` if it is not JSON)
/// and the body as text.
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub body: Value,
    pub text: String,
}

/// Sends `method uri` with `body` (JSON content type; no body if `None`)
/// through `router` and collects the answer.
pub async fn call(router: Router, method: Method, uri: &str, body: Option<&str>) -> Resp {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(
            body.map(|b| Body::from(b.to_owned()))
                .unwrap_or_else(Body::empty),
        )
        .expect("request");
    let resp = router.oneshot(req).await.expect("infallible router");
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("body");
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Resp { status, body, text }
}

/// `GET uri`.
pub async fn get(router: Router, uri: &str) -> Resp {
    call(router, Method::GET, uri, None).await
}

/// `POST uri` with a JSON body.
pub async fn post(router: Router, uri: &str, body: &str) -> Resp {
    call(router, Method::POST, uri, Some(body)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::{get as route_get, post as route_post};

    #[tokio::test]
    async fn answers_status_json_and_text() {
        let r = Router::new()
            .route(
                "/a",
                route_get(|| async { axum::Json(serde_json::json!({"ok": true})) }),
            )
            .route(
                "/b",
                route_post(|body: String| async move { (StatusCode::CREATED, body) }),
            );
        let a = get(r.clone(), "/a").await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(a.body["ok"], true);
        let b = post(r.clone(), "/b", "plain").await;
        assert_eq!(b.status, StatusCode::CREATED);
        assert_eq!(b.body, Value::Null);
        assert_eq!(b.text, "plain");
        assert_eq!(get(r, "/missing").await.status, StatusCode::NOT_FOUND);
    }
}
