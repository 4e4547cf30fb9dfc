//! Sets `KRUNTIMES_REVISION` for `kruntimes_build_info`: the
//! `KRUNTIMES_REVISION` environment variable when set (image builds without
//! a git checkout pass it as a build argument), else `git rev-parse` of the
//! checkout, else nothing (the binary says `unknown`). No network.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

/// Reruns the script when the checked-out commit moves (HEAD, or the
/// branch it names). Only existing files are named: a missing one would
/// rerun the script on every build.
fn watch_head() {
    let mut paths = Vec::new();
    paths.extend(git(&["rev-parse", "--git-path", "HEAD"]));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        paths.extend(git(&["rev-parse", "--git-path", &branch]));
    }
    for p in paths.iter().filter(|p| Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={p}");
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=KRUNTIMES_REVISION");
    let given = std::env::var("KRUNTIMES_REVISION")
        .ok()
        .filter(|r| !r.trim().is_empty());
    let revision = given.or_else(|| {
        let r = git(&["rev-parse", "--short=12", "HEAD"]);
        if r.is_some() {
            watch_head();
        }
        r
    });
    // Only characters a label value and a version string need.
    if let Some(r) = revision.filter(|r| {
        r.len() <= 64
            && r.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
    }) {
        println!("cargo:rustc-env=KRUNTIMES_REVISION={r}");
    }
}
