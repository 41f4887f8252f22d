//! The sandbox of a new `rootfs` terminal: checking what the client asked for (workspace,
//! network, a directory inside, the shell) before anything exists, then making its host
//! directories (a named workspace on first use, or the terminal's own; the integration's
//! directory) and the [`GuestMeta`] that `meta.json` records and the backend mounts. Which
//! flags bwrap gets is the backend's (`crate::backend::rootfs`).

use std::path::{Component, Path, PathBuf};

use ptyhub_protocol::rootfs::{Network, WorkspaceId};

use super::{CreateSpec, GuestPlan};
use crate::backend::Backend;
use crate::backend::rootfs::{GUEST_HOME, GUEST_RUN_DIR, GUEST_WORKSPACE};
use crate::error::TerminalError;
use crate::holder::root_layer::{MERGED, UPPER, WORK};
use crate::registry::RegistryConfig;
use crate::shell::{self, ShellLaunch};
use crate::state_dir::{self, GuestBind, GuestMeta};
use crate::workspace::Workspaces;

/// The directory of a terminal's own workspace, in its terminal directory.
const OWN_WORKSPACE_DIR: &str = "workspace";
/// The directory of a terminal's shell integration, in its terminal directory.
const GUEST_RUN_HOST_DIR: &str = "guest-run";
/// The directory of a terminal's writable layer over the root, in its terminal directory.
const ROOT_LAYER_DIR: &str = "root-layer";
/// The directory of the state dir that holds each owner's persistent sandbox home.
pub const HOMES_DIR: &str = "homes";

impl GuestPlan {
    /// Checks the sandbox part of `spec`; creates nothing.
    pub(super) fn new(spec: &CreateSpec) -> Result<Self, TerminalError> {
        let workspace = spec
            .workspace
            .as_deref()
            .map(WorkspaceId::parse)
            .transpose()?;
        let network = spec
            .network
            .as_deref()
            .map(Network::parse)
            .transpose()?
            .unwrap_or_default();
        if let Some(asked) = &spec.shell
            && asked != "bash"
            && asked != crate::backend::rootfs::GUEST_SHELL
        {
            return Err(TerminalError::invalid(format!(
                "a rootfs terminal runs bash, not {:?}",
                ptyhub_protocol::ids::truncate_for_message(asked)
            )));
        }
        let cwd = match spec.cwd.as_deref() {
            None => GUEST_WORKSPACE.to_owned(),
            Some(cwd) => guest_dir(cwd)?,
        };
        Ok(Self {
            workspace,
            network,
            cwd,
        })
    }

    /// Refuses a starting directory that does not exist inside (before anything is made).
    pub(super) fn check_cwd(
        &self,
        owner: &str,
        terminal_dir: &Path,
        config: &RegistryConfig,
    ) -> Result<(), TerminalError> {
        let root = config.state_dir.root();
        let (mount, host) = if Path::new(&self.cwd).starts_with(GUEST_HOME) {
            (GUEST_HOME, root.join(HOMES_DIR).join(owner))
        } else {
            (
                GUEST_WORKSPACE,
                self.workspace_dir(owner, terminal_dir, config),
            )
        };
        let rest = Path::new(&self.cwd)
            .strip_prefix(mount)
            .unwrap_or_else(|_| Path::new(""));
        // The mount point itself always exists (a new workspace or home is made for it).
        if rest.as_os_str().is_empty() || host.join(rest).is_dir() {
            Ok(())
        } else {
            Err(TerminalError::invalid(format!(
                "cwd {:?} is not an existing directory inside the sandbox",
                self.cwd
            )))
        }
    }

    fn workspace_dir(&self, owner: &str, terminal_dir: &Path, config: &RegistryConfig) -> PathBuf {
        match &self.workspace {
            Some(id) => Workspaces::under(config.state_dir.root()).dir(owner, id),
            None => terminal_dir.join(OWN_WORKSPACE_DIR),
        }
    }

    /// Makes the sandbox's host directories (the terminal directory exists) and describes
    /// the sandbox.
    pub(super) fn prepare(
        &self,
        owner: &str,
        terminal_dir: &Path,
        config: &RegistryConfig,
        backend: &dyn Backend,
    ) -> Result<GuestMeta, TerminalError> {
        let Some(tree) = backend.guest_root() else {
            return Err(TerminalError::LaunchFailed {
                reason: "needs_rootfs: the root filesystem is not installed".to_owned(),
            });
        };
        let cannot = |what: &Path, e: std::io::Error| {
            TerminalError::internal(format!("cannot create {}: {e}", what.display()))
        };
        let workspace = self.workspace_dir(owner, terminal_dir, config);
        state_dir::create_private_dir(&workspace).map_err(|e| cannot(&workspace, e))?;
        let run = terminal_dir.join(GUEST_RUN_HOST_DIR);
        // What an earlier instance left (its integration removes its files once read).
        let _ = std::fs::remove_dir_all(&run);
        state_dir::create_private_dir(&run).map_err(|e| cannot(&run, e))?;
        // A writable root needs a mount namespace and an overlay, which only root may make.
        let layer = if rustix::process::geteuid().is_root() {
            let layer = terminal_dir.join(ROOT_LAYER_DIR);
            for part in [UPPER, WORK, MERGED] {
                let dir = layer.join(part);
                state_dir::create_private_dir(&dir).map_err(|e| cannot(&dir, e))?;
            }
            seed_layer(&layer.join(UPPER)).map_err(|e| cannot(&layer, e))?;
            Some(layer.to_string_lossy().into_owned())
        } else {
            None
        };
        let home = config.state_dir.root().join(HOMES_DIR).join(owner);
        let bind = |host: &Path, guest: &str| GuestBind {
            host: host.to_string_lossy().into_owned(),
            guest: guest.to_owned(),
            read_only: false,
        };
        Ok(GuestMeta {
            tree: tree.to_string_lossy().into_owned(),
            workspace: self.workspace.clone(),
            guest_cwd: self.cwd.clone(),
            network: self.network,
            layer,
            binds: vec![
                bind(&workspace, GUEST_WORKSPACE),
                bind(&home, GUEST_HOME),
                bind(&run, GUEST_RUN_DIR),
            ],
        })
    }
}

/// apt's setting for a sandbox, in a new layer: root inside has no capabilities, so apt may
/// not switch to its `_apt` account to download; it downloads as root instead.
const APT_SANDBOX_CONF: (&str, &str) = (
    "etc/apt/apt.conf.d/00ptyhub-sandbox",
    "// Written by ptyhub: the sandbox's root has no capabilities to switch accounts.\nAPT::Sandbox::User \"root\";\n",
);

/// Puts what every writable root starts with into its upper layer (directories as the root
/// has them, so the overlay shows them unchanged).
fn seed_layer(upper: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let (path, text) = APT_SANDBOX_CONF;
    let mut dir = upper.to_path_buf();
    let parts: Vec<_> = Path::new(path).components().collect();
    let Some((name, dirs)) = parts.split_last() else {
        return Ok(());
    };
    for part in dirs {
        dir.push(part);
        if !dir.is_dir() {
            std::fs::create_dir(&dir)?;
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    }
    let file = dir.join(name);
    std::fs::write(&file, text)?;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))
}

/// A directory inside the sandbox as `cwd` names it: absolute, without `.` or `..`, under
/// `/workspace` or `/root`.
fn guest_dir(cwd: &str) -> Result<String, TerminalError> {
    let path = Path::new(cwd);
    // Components drop a `.` inside a path, so the text itself is checked for `.` and `..`.
    let is_plain = path.is_absolute()
        && cwd.split('/').all(|part| part != "." && part != "..")
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !is_plain || !(path.starts_with(GUEST_WORKSPACE) || path.starts_with(GUEST_HOME)) {
        return Err(TerminalError::invalid(format!(
            "a rootfs terminal's cwd is a directory under {GUEST_WORKSPACE} or {GUEST_HOME} without . or .. (not {:?})",
            ptyhub_protocol::ids::truncate_for_message(cwd)
        )));
    }
    Ok(path.to_string_lossy().trim_end_matches('/').to_owned())
}

/// The shell integration of a sandboxed shell: written into the directory bound at
/// [`GUEST_RUN_DIR`] and named by its path inside. It removes its files once read, as on
/// every backend (the directory is the terminal's own and holds nothing else).
pub(super) fn prepare_guest(
    guest: &GuestMeta,
    program: &str,
    nonce: &str,
) -> std::io::Result<ShellLaunch> {
    let Some(run) = guest.host_of(GUEST_RUN_DIR) else {
        return Err(std::io::Error::other(
            "the sandbox has no integration directory",
        ));
    };
    let mut launch = shell::prepare_in(program, nonce, Path::new(run), true)?;
    let inside = |text: &str| match text.strip_prefix(run) {
        Some(rest) => format!("{GUEST_RUN_DIR}{rest}"),
        None => text.to_owned(),
    };
    launch.args = launch.args.iter().map(|arg| inside(arg)).collect();
    launch.env = launch
        .env
        .iter()
        .map(|(k, v)| (k.clone(), inside(v)))
        .collect();
    launch.files = vec![PathBuf::from(run)];
    Ok(launch)
}

#[cfg(test)]
mod tests {
    use super::guest_dir;

    #[test]
    fn a_guest_cwd_stays_under_the_workspace_or_home() {
        assert_eq!(
            guest_dir("/workspace/src/").ok().as_deref(),
            Some("/workspace/src")
        );
        assert_eq!(guest_dir("/root").ok().as_deref(), Some("/root"));
        for bad in [
            "/workspace/../etc",
            "/etc",
            "workspace",
            "/workspace/./x",
            "/workspacex",
        ] {
            assert!(guest_dir(bad).is_err(), "{bad}");
        }
    }
}
