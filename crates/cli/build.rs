//! Links the binaries as classic (non-PIE) executables on Linux, `ptyhub-holder` statically
//! where the C toolchain can, and names the commit they were built from for `ptyhub --version`.
//!
//! There is one holder process per terminal, all running one of these binaries; without
//! runtime relocations their read-only data stays shared between them instead of becoming
//! ~120 KiB of private dirty pages in every holder (measured with bench/run.py; see
//! ARCHITECTURE.md).
//!
//! The version is `PTYHUB_VERSION`: the package version, then the short commit of the git
//! checkout being built and `+dirty` when its tracked files differ from that commit
//! (`0.1.0 (1a2b3c4+dirty)`). Outside a git checkout (a source tarball) it is the package
//! version alone. The script runs again when the checkout's `HEAD`, the branch it names, the
//! index or this package's sources change, so a new commit is named without a clean build.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    link_holder_statically();
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

/// Links `ptyhub-holder` statically (glibc and libgcc's unwinder from their static archives)
/// when this is a native glibc build whose C toolchain has those archives (Debian's
/// libc6-dev does; elsewhere they may be a package of their own, and the holder is then
/// linked dynamically, with a warning). A static holder writes no relocations and loads no
/// library at its start, so each holder process has fewer pages of its own
/// (docs/memory.md). It may: the holder looks nothing up in the system's account or host
/// databases, which static glibc would load NSS modules for.
///
/// Cargo has no per-binary codegen flags, so this asks the linker itself: `-static`, and a
/// directory searched before the system's holding one linker script for each library rustc
/// names for a glibc program (`-lc`, `-lgcc_s`, ...), which names the static archive instead.
fn link_holder_statically() {
    println!("cargo:rerun-if-env-changed=PTYHUB_DYNAMIC_HOLDER");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux"
        || var("CARGO_CFG_TARGET_ENV") != "gnu"
        || var("TARGET") != var("HOST")
        || std::env::var_os("PTYHUB_DYNAMIC_HOLDER").is_some()
    {
        return;
    }
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        return;
    };
    let dir = out.join("holder-static-libs");
    let linker = std::env::var("RUSTC_LINKER").unwrap_or_else(|_| "cc".to_owned());
    let mut scripts = Vec::new();
    for (library, archives) in STATIC_LIBRARIES {
        let mut paths = Vec::new();
        for archive in *archives {
            match static_archive(&linker, archive) {
                Some(path) => paths.push(path.display().to_string()),
                None => {
                    println!(
                        "cargo:warning=ptyhub-holder is linked dynamically: {linker} has no {archive}"
                    );
                    return;
                }
            }
        }
        scripts.push((
            format!("lib{library}.so"),
            format!("GROUP ( {} )\n", paths.join(" ")),
        ));
    }
    let written = std::fs::create_dir_all(&dir).and_then(|()| {
        scripts
            .iter()
            .try_for_each(|(name, script)| std::fs::write(dir.join(name), script))
    });
    if let Err(error) = written {
        println!("cargo:warning=ptyhub-holder is linked dynamically: {error}");
        return;
    }
    println!("cargo:rustc-link-arg-bin=ptyhub-holder=-static");
    println!("cargo:rustc-link-arg-bin=ptyhub-holder=-L{}", dir.display());
}

/// The libraries rustc links a glibc program with, and the static archives that stand for
/// each (libgcc_s, the shared unwinder, has none of its own: libgcc_eh and libgcc are it).
const STATIC_LIBRARIES: &[(&str, &[&str])] = &[
    ("c", &["libc.a"]),
    ("m", &["libm.a"]),
    ("rt", &["librt.a"]),
    ("pthread", &["libpthread.a"]),
    ("dl", &["libdl.a"]),
    ("util", &["libutil.a"]),
    ("gcc_s", &["libgcc_eh.a", "libgcc.a"]),
];

/// Where `linker` finds the archive `name`, if it has it.
fn static_archive(linker: &str, name: &str) -> Option<PathBuf> {
    let output = Command::new(linker)
        .arg(format!("-print-file-name={name}"))
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8(output.stdout).ok()?.trim());
    (output.status.success() && path.is_absolute() && path.exists()).then_some(path)
}
