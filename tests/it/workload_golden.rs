//! Golden tests of the workload builder: compiled YAML of the example trees
//! and the field errors of an invalid tree, compared byte for byte with the
//! files under `tests/data/workload/`. Run with `UPDATE_GOLDEN=1` to rewrite
//! the expected files after an intended change, and review the diff.

use std::path::{Path, PathBuf};

use kruntimes_scheduler::workload::cli::{compile_to_yaml, validate_text};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/workload")
        .join(name)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn check_golden(expected_path: &Path, actual: &str) {
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(expected_path, actual)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", expected_path.display()));
        return;
    }
    let expected = read(expected_path);
    assert!(
        expected == actual,
        "output differs from {} (rerun with UPDATE_GOLDEN=1 to accept)\n--- expected\n{expected}\n--- actual\n{actual}",
        expected_path.display()
    );
}

fn compile_case(case: &str) -> String {
    let input = read(&data(&format!("{case}.yaml")));
    let yaml = compile_to_yaml(&input)
        .unwrap_or_else(|e| panic!("{case}: {e}"))
        .unwrap_or_else(|errs| panic!("{case}: field errors: {errs:?}"));
    check_golden(&data(&format!("{case}.out.yaml")), &yaml);
    // The compiled objects pass the admission rules.
    let errs = validate_text(&yaml, None)
        .unwrap_or_else(|e| panic!("{case}: output does not decode: {e}"));
    assert!(
        errs.is_empty(),
        "{case}: compiled output fails admission: {errs:?}"
    );
    yaml
}

#[test]
fn single_gang_with_priority_and_all_disruption() {
    let yaml = compile_case("single-gang");
    assert!(
        yaml.contains("minCount: 4"),
        "podCount fills minCount:\n{yaml}"
    );
}

#[test]
fn gang_of_gangs() {
    compile_case("gang-of-gangs");
}

#[test]
fn zone_rack() {
    compile_case("zone-rack");
}

#[test]
fn zone_rack_example_is_the_tested_tree() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/workload/zone-rack.yaml");
    assert_eq!(read(&example), read(&data("zone-rack.yaml")));
}

#[test]
fn invalid_tree_errors() {
    let input = read(&data("invalid.yaml"));
    let errs = validate_text(&input, None).unwrap_or_else(|e| panic!("invalid.yaml: {e}"));
    assert!(!errs.is_empty());
    let text: String = errs.iter().map(|e| format!("{e}\n")).collect();
    check_golden(&data("invalid.errors.txt"), &text);
    // compile refuses it with the same errors
    let compiled = compile_to_yaml(&input).unwrap_or_else(|e| panic!("invalid.yaml: {e}"));
    assert_eq!(compiled.err(), Some(errs));
}
