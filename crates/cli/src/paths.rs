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

/// Refuses to talk to a server socket whose directory another user could write to (that user
/// could have put their own socket there and would receive the request), or a socket of
/// another user. Root's directories and sockets are trusted too.
pub fn check_socket(socket: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let is_trusted = |uid: u32| uid == me || uid == 0;
    let dir = socket.parent().unwrap_or_else(|| Path::new("/"));
    let refuse =
        |why: String| anyhow::anyhow!("refusing to use the socket {}: {why}", socket.display());
    if let Ok(meta) = std::fs::metadata(dir) {
        if !is_trusted(meta.uid()) {
            return Err(refuse(format!(
                "its directory belongs to uid {}",
                meta.uid()
            )));
        }
        let sticky = meta.mode() & 0o1000 != 0;
        if meta.mode() & 0o022 != 0 && !sticky {
            return Err(refuse(format!(
                "its directory has mode {:04o}: others could replace it",
                meta.mode() & 0o777
            )));
        }
    }
    if let Ok(meta) = std::fs::symlink_metadata(socket)
        && !is_trusted(meta.uid())
    {
        return Err(refuse(format!("it belongs to uid {}", meta.uid())));
    }
    Ok(())
}
