//! Faults injected through the real code paths, for tests of how the
//! process survives them. Compiled only into test builds (`cfg(test)` or
//! the `testkit` feature), like the rest of the kit.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// An annotation that makes a watcher panic while it hands the object to
/// its index (a stand-in for a bug triggered by one object's shape).
pub const PANIC_WHEN_WATCHED: &str = "testkit.kruntimes.io/panic-when-watched";

/// Panics when the object carries [`PANIC_WHEN_WATCHED`].
pub fn on_watched(meta: &ObjectMeta) {
    if meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(PANIC_WHEN_WATCHED))
    {
        panic!(
            "injected fault: {PANIC_WHEN_WATCHED} on {}/{}",
            meta.namespace.as_deref().unwrap_or(""),
            meta.name.as_deref().unwrap_or("")
        );
    }
}
