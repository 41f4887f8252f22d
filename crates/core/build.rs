//! Names this build of the core for the holder handshake: `PTYHUB_BUILD_ID`, a hash of the
//! sources the server and its holders share (this crate's and the protocol crate's), the
//! package version, the profile and the lock file.
//!
//! The server runs its holders from the `ptyhub-holder` executable beside its own only when
//! that file answers `--build-id` with the same name (`holder::launch`): a `cargo run` that
//! rebuilt `ptyhub` alone leaves an older `ptyhub-holder` beside it, which must not host a
//! terminal for a server that speaks to it differently.

use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(PathBuf::new, Into::into);
    let mut hasher = DefaultHasher::new();
    for var in ["CARGO_PKG_VERSION", "PROFILE", "OPT_LEVEL", "DEBUG"] {
        hasher.write(std::env::var(var).unwrap_or_default().as_bytes());
        hasher.write_u8(0);
    }
    let sources = [manifest.join("src"), manifest.join("../protocol/src")];
    for dir in &sources {
        println!("cargo:rerun-if-changed={}", dir.display());
        let mut files = Vec::new();
        collect_files(dir, &mut files);
        files.sort();
        for file in files {
            hash_file(&mut hasher, dir, &file);
        }
    }
    let lock = manifest.join("../../Cargo.lock");
    if lock.exists() {
        println!("cargo:rerun-if-changed={}", lock.display());
        hash_file(&mut hasher, &manifest, &lock);
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-env=PTYHUB_BUILD_ID={:016x}", hasher.finish());
}

fn hash_file(hasher: &mut DefaultHasher, base: &Path, file: &Path) {
    let name = file.strip_prefix(base).unwrap_or(file);
    hasher.write(name.as_os_str().as_encoded_bytes());
    hasher.write_u8(0);
    hasher.write(&std::fs::read(file).unwrap_or_default());
    hasher.write_u8(0);
}

fn collect_files(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_files(&path, files);
        } else {
            files.push(path);
        }
    }
}
