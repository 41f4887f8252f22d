//! Default locations (docs/compatibility.md#defaults): the state dir, the runtime dir, the token
//! file.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// `$XDG_STATE_HOME/ptyhub`, else `~/.local/state/ptyhub`.
pub fn state_dir() -> PathBuf {
    match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("ptyhub"),
        None => home().join(".local/state/ptyhub"),
    }
}

/// `$XDG_RUNTIME_DIR/ptyhub`, else `/tmp/ptyhub-<uid>`.
pub fn runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("ptyhub"),
        None => PathBuf::from(format!(
            "/tmp/ptyhub-{}",
            rustix::process::getuid().as_raw()
        )),
    }
}

fn home() -> PathBuf {
    std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from)
}

/// Reads `<state>/token`, or generates one (mode 0600) on first start.
pub fn load_or_create_token(state: &Path) -> anyhow::Result<String> {
    let path = state.join("token");
    if let Ok(text) = std::fs::read_to_string(&path) {
        let token = text.trim().to_owned();
        if !token.is_empty() {
            return Ok(token);
        }
    }
    let token = ptyhub_core::secret::random_token(40);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    file.write_all(format!("{token}\n").as_bytes())?;
    Ok(token)
}
