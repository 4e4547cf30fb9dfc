//! List paging as the API server does it (`limit` and `continue`); the
//! tests that drive the real `kube::Client` and watcher through it are in
//! `tests/it/list_paging.rs`.
//!
//! The API server's continue token is opaque to clients: base64 of
//! `{"v":"meta.k8s.io/v1","rv":N,"start":"KEY\u0000"}`, the resourceVersion
//! of the list's first page and the key after which the next page starts.
//! Pages after the first answer at that resourceVersion; once the history
//! is compacted past it, the token is `410 Expired` and the client lists
//! again from the start. Differences kept small on purpose: a continued
//! page shows objects as they are now (etcd would show them as of the
//! token's revision), and keys are `namespace/name`.

use base64::Engine as _;
use serde_json::{Value, json};

/// The continue token for a list at `rv` whose last item was `ns/name`.
pub fn encode(rv: u64, ns: &str, name: &str) -> String {
    let token = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": format!("{ns}/{name}\u{0}")});
    base64::engine::general_purpose::URL_SAFE.encode(token.to_string())
}

/// `(rv, (namespace, name))` of a token; `None` when it is not one.
pub fn decode(token: &str) -> Option<(u64, (String, String))> {
    let bytes = base64::engine::general_purpose::URL_SAFE
        .decode(token)
        .ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    if v["v"] != "meta.k8s.io/v1" {
        return None;
    }
    let rv = v["rv"].as_u64()?;
    let start = v["start"].as_str()?.strip_suffix('\u{0}')?;
    let (ns, name) = start.split_once('/')?;
    Some((rv, (ns.to_owned(), name.to_owned())))
}
