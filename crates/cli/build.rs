//! Links the `ptyhub` binary as a classic (non-PIE) executable on Linux, and names the commit
//! it was built from for `ptyhub --version`.
//!
//! There is one holder process per terminal, all running this binary; without runtime
//! relocations its read-only data stays shared between them instead of becoming ~120 KiB of
//! private dirty pages in every holder (measured with bench/run.py; see ARCHITECTURE.md).
//!
//! The version is `PTYHUB_VERSION`: the package version, then the short commit of the git
//! checkout being built and `+dirty` when its tracked files differ from that commit
//! (`0.1.0 (1a2b3c4+dirty)`). Outside a git checkout (a source tarball) it is the package
//! version alone. The script runs again when the checkout's `HEAD`, the branch it names, the
//! index or this package's sources change, so a new commit is named without a clean build.

use std::path::Path;
use std::process::Command;

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    let package = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let version = match commit() {
        Some(commit) => format!("{package} ({commit})"),
        None => package,
    };
    println!("cargo:rustc-env=PTYHUB_VERSION={version}");
}

/// The checkout's short commit with `+dirty` when its tracked files changed, or `None`
/// outside a git checkout (or without git). Asks cargo to run this script again when the
/// commit may have changed.
fn commit() -> Option<String> {
    let short = git(&["rev-parse", "--short", "HEAD"])?;
    // `HEAD` names the branch; the branch's file (or `packed-refs`) names the commit; the
    // index changes with every commit and every `git add`. Paths come from git itself, so a
    // worktree's own `HEAD` and the shared refs are both found.
    for path in ["HEAD", "index", "packed-refs"] {
        rerun_if_changed(git(&["rev-parse", "--git-path", path]));
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        rerun_if_changed(git(&["rev-parse", "--git-path", &branch]));
    }
    // An edit of this package's sources builds the binary again, so it may make the tree
    // dirty: this script runs again then too.
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=build.rs");
    let is_dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some();
    Some(if is_dirty {
        format!("{short}+dirty")
    } else {
        short
    })
}

fn rerun_if_changed(path: Option<String>) {
    let Some(path) = path else { return };
    let path = manifest_dir().join(path);
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// One line git prints for `args`, run in this package's directory.
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(manifest_dir())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}

fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| Path::new(".").to_owned(), Into::into)
}
