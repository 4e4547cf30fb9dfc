//! The CRDs in `manifests/crds/` are generated from the Rust types; this
//! fails when they drift. Regenerate with `UPDATE_MANIFESTS=1 cargo test --test manifests`.

use kruntimes_scheduler::crd::{Run, Runtime};
use kube::CustomResourceExt;
use std::path::Path;

fn check(file: &str, crd: &impl serde::Serialize) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("manifests/crds")
        .join(file);
    let generated = format!(
        "# Generated from src/crd.rs by `UPDATE_MANIFESTS=1 cargo test --test manifests`; do not edit.\n{}",
        serde_saphyr::to_string(crd).expect("CRD serializes")
    );
    if std::env::var_os("UPDATE_MANIFESTS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} differs from the CRD generated from src/crd.rs; run UPDATE_MANIFESTS=1 cargo test --test manifests",
        path.display()
    );
}

#[test]
fn run_crd_matches_the_rust_type() {
    let crd = Run::crd();
    assert_eq!(crd.spec.group, "kruntimes.io");
    assert_eq!(crd.spec.scope, "Namespaced");
    let v = &crd.spec.versions[0];
    assert_eq!(v.name, "v1alpha1");
    assert!(
        v.subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some(),
        "status subresource"
    );
    check("runs.kruntimes.io.yaml", &crd);
}

#[test]
fn runtime_crd_matches_the_rust_type() {
    check("runtimes.kruntimes.io.yaml", &Runtime::crd());
}
