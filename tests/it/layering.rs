//! The crate's module graph follows the layer table in `src/lib.rs`: a
//! module imports only modules of a lower layer. The table is parsed from
//! the crate docs, so the docs and this test cannot drift apart.
//!
//! The test kit is the one exception: any layer's tests may build their
//! fixtures with it. The compiler keeps it out of production code (it
//! exists only under `cfg(test)` or the `testkit` feature, and CI lints the
//! library and binaries without that feature), so a `crate::testkit` path
//! is always a test's, wherever it is.
//!
//! `LAYERING_SRC=<dir>` checks another source tree (e.g. an older commit's
//! `src/` with this tree's `lib.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Module name → layer, from the `//! | N | `a`, `b` | … |` rows.
fn parse_layers(lib_rs: &str) -> Result<BTreeMap<String, usize>, String> {
    let mut layers = BTreeMap::new();
    for line in lib_rs.lines() {
        let Some(row) = line.trim().strip_prefix("//!") else {
            continue;
        };
        let cells: Vec<&str> = row.trim().split('|').map(str::trim).collect();
        // `| 3 | `cache` | … |` splits into ["", "3", "`cache`", "…", ""].
        let [_, layer, modules, ..] = cells.as_slice() else {
            continue;
        };
        let Ok(layer) = layer.parse::<usize>() else {
            continue;
        };
        for m in modules.split(',') {
            let m = m.trim().trim_matches('`');
            if m.is_empty() {
                return Err(format!("layer {layer} has an empty module name: {line}"));
            }
            if let Some(old) = layers.insert(m.to_owned(), layer) {
                return Err(format!("module {m} is in layers {old} and {layer}"));
            }
        }
    }
    if layers.is_empty() {
        return Err("src/lib.rs has no layer table (`//! | 0 | `module` | … |`)".into());
    }
    Ok(layers)
}

/// The top-level modules named by `crate::` (or, in the binary,
/// `kruntimes_scheduler::`) paths in one file's code, with 1-based lines.
/// Comments are skipped: a doc link is not a dependency.
fn referenced_modules(source: &str, root: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_group = false;
    for (i, line) in source.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        // A `use crate::{a, b::c};` group may span lines.
        if in_group {
            rest = collect_group(rest, i + 1, &mut out, &mut in_group);
        }
        while let Some(at) = rest.find(root) {
            let before = rest[..at].chars().next_back();
            let after = &rest[at + root.len()..];
            rest = after;
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            if let Some(group) = after.strip_prefix('{') {
                in_group = true;
                rest = collect_group(group, i + 1, &mut out, &mut in_group);
                continue;
            }
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push((i + 1, name));
            }
        }
    }
    out
}

/// Reads the first path segment of each item of a `{…}` group, up to its
/// closing brace (nested braces belong to the items). Returns what follows.
fn collect_group<'a>(
    text: &'a str,
    line: usize,
    out: &mut Vec<(usize, String)>,
    in_group: &mut bool,
) -> &'a str {
    let mut depth = 0usize;
    let mut item_start = true;
    for (at, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                *in_group = false;
                return &text[at + 1..];
            }
            '}' => depth -= 1,
            ',' if depth == 0 => item_start = true,
            c if item_start && (c.is_alphanumeric() || c == '_') => {
                let name: String = text[at..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if name != "self" {
                    out.push((line, name));
                }
                item_start = false;
            }
            _ => {}
        }
    }
    ""
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The file's top-level module: `src/cache/cluster_index.rs` → `cache`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("file under src");
    let first = rel
        .components()
        .next()
        .expect("non-empty path")
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

/// Checks a module graph against the layers: every edge must point to a
/// strictly lower layer, and every module must have a layer. `files` are
/// `(module, path for messages, source)`.
/// The test kit: fixtures any layer's tests may use (see the module docs).
const TESTKIT: &str = "testkit";

fn violations(layers: &BTreeMap<String, usize>, files: &[(String, String, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    for (module, path, source) in files {
        if module == "lib" {
            continue;
        }
        let Some(&from) = layers.get(module) else {
            problems.push(format!(
                "{path}: module {module} has no layer in src/lib.rs's table"
            ));
            continue;
        };
        let root = if module == "main" {
            "kruntimes_scheduler::"
        } else {
            "crate::"
        };
        for (line, target) in referenced_modules(source, root) {
            if &target == module || target == TESTKIT {
                continue;
            }
            match layers.get(&target) {
                None => problems.push(format!(
                    "{path}:{line}: {module} imports {target}, which has no layer"
                )),
                Some(&to) if to >= from => problems.push(format!(
                    "{path}:{line}: {module} (layer {from}) imports {target} (layer {to})"
                )),
                Some(_) => {}
            }
        }
    }
    problems
}

fn load(src: &Path) -> Vec<(String, String, String)> {
    let mut paths = Vec::new();
    rust_files(src, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let source =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (module_of(src, &p), p.display().to_string(), source)
        })
        .collect()
}

#[test]
fn no_module_imports_a_higher_layer() {
    let src = std::env::var_os("LAYERING_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("src/lib.rs");
    let layers = parse_layers(&lib).unwrap_or_else(|e| panic!("{e}"));
    let files = load(&src);
    // Every module the crate declares has a layer.
    for line in lib.lines() {
        if let Some(m) = line.trim().strip_prefix("pub mod ") {
            let m = m.trim_end_matches(';');
            assert!(
                layers.contains_key(m),
                "pub mod {m} has no layer in the table"
            );
        }
    }
    let problems = violations(&layers, &files);
    assert!(
        problems.is_empty(),
        "{} import(s) against the layer order:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

// === the checker itself ===

const TABLE: &str = "\
//! | layer | modules | what |
//! |-------|---------|------|
//! | 0 | `transport`, `model` | leaves |
//! | 3 | `cache` | storage |
//! | 5 | `extender`, `admission` | surfaces |
//! | 6 | `http` | composition |
";

fn file(module: &str, source: &str) -> (String, String, String) {
    (module.into(), format!("src/{module}.rs"), source.into())
}

#[test]
fn the_table_is_read_from_the_docs() {
    let layers = parse_layers(TABLE).expect("table");
    assert_eq!(layers["transport"], 0);
    assert_eq!(layers["admission"], 5);
    assert_eq!(layers["http"], 6);
    assert_eq!(layers.len(), 6);
    assert!(parse_layers("//! no table here").is_err());
    assert!(parse_layers("//! | 0 | `a` | x |\n//! | 1 | `a` | y |").is_err());
}

#[test]
fn paths_are_found_in_uses_groups_and_expressions_but_not_comments() {
    let src = "use crate::cache::cluster_index::ClusterIndex;\n\
               use crate::{\n    admission::{self, AdmissionState},\n    model,\n};\n\
               // see crate::http::router\n\
               /// [`x`](crate::http::AppState)\n\
               let n = crate::transport::parse_duration(s);\n\
               let m = mycrate::http::x;\n";
    let found = referenced_modules(src, "crate::");
    assert_eq!(
        found,
        vec![
            (1, "cache".to_owned()),
            (3, "admission".to_owned()),
            (4, "model".to_owned()),
            (8, "transport".to_owned()),
        ]
    );
}

#[test]
fn upward_and_sideways_imports_fail() {
    // The cycles of the old tree: the cache used admission's PriorityClass
    // index, the extender took its state and errors from http, and admission
    // and the extender are peers.
    let layers = parse_layers(TABLE).expect("table");
    let files = [
        file(
            "cache",
            "use crate::admission::PriorityClasses;\nuse crate::model::refs::GroupRef;",
        ),
        file(
            "extender",
            "use crate::http::AppState;\nuse crate::cache::cluster_index::ClusterIndex;",
        ),
        file("admission", "fn f() { crate::extender::router(); }"),
        file(
            "http",
            "use crate::extender::ExtenderState;\nuse crate::transport::ApiError;",
        ),
        file("transport", "use axum::Router;"),
        file("stray", "use crate::cache::RunCache;"),
        // A leaf's tests build fixtures with the test kit (layer 1).
        file(
            "model",
            "#[cfg(test)]\nmod tests {\n    use crate::testkit;\n}",
        ),
    ];
    let problems = violations(&layers, &files);
    assert_eq!(
        problems,
        vec![
            "src/cache.rs:1: cache (layer 3) imports admission (layer 5)",
            "src/extender.rs:1: extender (layer 5) imports http (layer 6)",
            "src/admission.rs:1: admission (layer 5) imports extender (layer 5)",
            "src/stray.rs: module stray has no layer in src/lib.rs's table",
        ]
    );
    // The same graph without the bad edges passes.
    let good = [
        file("cache", "use crate::model::refs::GroupRef;"),
        file("extender", "use crate::cache::cluster_index::ClusterIndex;"),
        file("http", "use crate::extender::ExtenderState;"),
    ];
    assert_eq!(violations(&layers, &good), Vec::<String>::new());
}
