//! The CRDs in `manifests/components/crds/` are generated from the Rust types; this
//! fails when they drift. Regenerate with `UPDATE_MANIFESTS=1 cargo test --test it manifests::`.

use kruntimes_scheduler::crd::{Run, Runtime};
use kube::CustomResourceExt;
use std::path::Path;

fn check(file: &str, crd: &impl serde::Serialize) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("manifests/components/crds")
        .join(file);
    let generated = format!(
        "# Generated from src/crd.rs by `UPDATE_MANIFESTS=1 cargo test --test it manifests::`; do not edit.\n{}",
        serde_saphyr::to_string(crd).expect("CRD serializes")
    );
    if std::env::var_os("UPDATE_MANIFESTS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} differs from the CRD generated from src/crd.rs; run UPDATE_MANIFESTS=1 cargo test --test it manifests::",
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

#[test]
fn kustomization_lists_every_install_manifest_and_they_parse() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests");
    let k: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap())
            .unwrap();
    let listed: Vec<String> = k["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    let generated: Vec<String> = k["configMapGenerator"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["files"].as_array().cloned().unwrap_or_default())
        .filter_map(|f| f.as_str().map(|f| f.rsplit('=').next().unwrap().to_owned()))
        .collect();
    for f in &listed {
        let text = std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{f}: {e}"));
        for d in docs.iter().filter(|d| !d.is_null()) {
            assert!(
                d["apiVersion"].is_string() && d["kind"].is_string(),
                "{f}: {d}"
            );
            assert!(d["metadata"]["name"].is_string(), "{f}: {d}");
        }
    }
    // Every manifest outside components/ is installed or is a generator's
    // input; nothing else (examples live in examples/manifests/).
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path
                .strip_prefix(base)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if path.is_dir() {
                if rel != "components" {
                    walk(&path, base, out);
                }
            } else if rel.ends_with(".yaml") && rel != "kustomization.yaml" {
                out.push(rel);
            }
        }
    }
    let mut files = Vec::new();
    walk(&dir, &dir, &mut files);
    for name in files {
        assert!(
            listed.contains(&name) || generated.contains(&name),
            "manifests/{name} is neither installed by kustomization.yaml nor a generator input; examples belong in examples/manifests/"
        );
    }
}
