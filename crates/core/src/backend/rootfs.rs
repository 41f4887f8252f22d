//! The `rootfs` backend: a native holder (PTY, log, subreaper, process facts, as
//! [`super::native`]) whose program is `bwrap`, which runs the shell in a Debian root made by
//! debootstrap (docs/backends.md#rootfs). The holder stays on the host and outlives the server
//! like every holder; bwrap is its child and the shell bwrap's grandchild, in pid, ipc, uts
//! and cgroup namespaces of their own (and a network namespace with `network: "none"`).
//!
//! What the sandbox sees: the root read-only at `/`, a fresh `/dev` and `/proc`, tmpfs `/tmp`,
//! `/var/tmp` and `/run`, and the host directories [`GuestMeta::binds`] names (the workspace at
//! `/workspace`, the owner's persistent home at `/root`, and the terminal's shell integration
//! at `/run/ptyhub`); nothing else of the host (the state dir, tokens, sockets). The server
//! runs as root, so bwrap drops every capability; any other user gets a user namespace
//! that maps it to root inside.
//!
//! Why not `--die-with-parent`: the shell must outlive the server and even its holder, as on
//! every backend; when bwrap's pid-namespace init dies every process inside dies with it, and
//! closing ends bwrap with the rest of the holder's tree.
//!
//! This module finds bwrap and says why the backend cannot host ([`Availability`]); the root
//! itself is provisioned by [`super::rootfs_install`]; the plan of one terminal's sandbox (its
//! binds and guest paths) is made by creation (`crate::creation`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ptyhub_protocol::api::BackendKind;
use ptyhub_protocol::event::Seq;
use ptyhub_protocol::rootfs::{InstallProgress, Network};

use super::native::NativeBackend;
use super::rootfs_install::{Installer, RootfsSource};
use super::{Availability, Backend, BackendLink, BoxFuture, LaunchError, TerminalLog};
use crate::holder::HolderSpec;
use crate::holder::launch::HolderLauncher;
use crate::state_dir::{GuestMeta, TerminalMeta};

/// The hostname inside every sandbox (its uts namespace is its own).
const GUEST_HOSTNAME: &str = "sandbox";
/// Where the shell integration of a sandboxed terminal is mounted.
pub const GUEST_RUN_DIR: &str = "/run/ptyhub";
/// Where a sandbox's workspace is mounted.
pub const GUEST_WORKSPACE: &str = "/workspace";
/// Where a sandbox's persistent home is mounted.
pub const GUEST_HOME: &str = "/root";
/// The shell every sandbox runs.
pub const GUEST_SHELL: &str = "/bin/bash";
/// `PATH` inside a sandbox (Debian's for root).
pub const GUEST_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What the rootfs backend is configured with.
#[derive(Clone, Debug)]
pub struct RootfsConfig {
    /// The rootfs dir (`<state>/rootfs/` by default; `PTYHUB_ROOTFS_DIR`, `rootfs_dir`).
    pub dir: PathBuf,
    /// The bwrap executable (default: `bwrap` on `PATH`).
    pub bwrap: Option<PathBuf>,
    /// The debootstrap executable (default: `debootstrap` on `PATH` or in `/usr/sbin`).
    pub debootstrap: Option<PathBuf>,
    /// Where apt's sources are read from (`/etc`; tests point it elsewhere).
    pub etc: PathBuf,
}

/// Terminals whose shells run in a Debian root under bubblewrap.
#[derive(Debug)]
pub struct RootfsBackend {
    /// The holder is the native one, only its program wrapped: everything after the launch
    /// is the native backend's.
    native: Arc<NativeBackend>,
    bwrap: Option<PathBuf>,
    /// Why it can never host here (no bwrap, no user namespaces), whatever is installed.
    failure: Option<String>,
    version: Option<String>,
    installer: Installer,
}

impl RootfsBackend {
    /// Looks for bwrap and debootstrap, and reads which Debian apt uses.
    pub fn new(launcher: HolderLauncher, config: RootfsConfig) -> Arc<Self> {
        let bwrap = config.bwrap.or_else(|| find_program("bwrap"));
        let debootstrap = config.debootstrap.or_else(|| find_program("debootstrap"));
        let (suite, mirror) = super::rootfs_install::apt_source(&config.etc);
        let source = RootfsSource {
            dir: config.dir,
            suite,
            mirror,
            debootstrap,
        };
        let version = bwrap.as_deref().and_then(bwrap_version);
        let failure = match &bwrap {
            None => Some("no bwrap (bubblewrap) on PATH (apt-get install bubblewrap)".to_owned()),
            Some(_) if !rustix::process::geteuid().is_root() && !user_namespaces_allowed() => Some(
                "unprivileged user namespaces are disabled and the server does not run as root"
                    .to_owned(),
            ),
            Some(_) => None,
        };
        Arc::new(Self {
            native: NativeBackend::new(launcher),
            bwrap,
            failure,
            version,
            installer: Installer::new(source),
        })
    }

    /// The root filesystem (whether or not it is installed yet).
    pub fn tree(&self) -> PathBuf {
        self.installer.source().tree()
    }

    fn is_installed(&self) -> bool {
        self.installer.source().is_ready()
    }
}

impl Backend for RootfsBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Rootfs
    }

    fn availability(&self) -> Availability {
        let failure = self.failure.clone().or_else(|| {
            let source = self.installer.source();
            match (&source.debootstrap, self.is_installed()) {
                (_, true) => None,
                (None, false) => Some("no debootstrap on PATH (apt-get install debootstrap)".to_owned()),
                (Some(_), false) => Some(format!(
                    "needs_rootfs: the Debian root ({}) is not installed yet (POST /v2/backends/rootfs/install or `ptyhub backend install rootfs`)",
                    source.suite
                )),
            }
        });
        Availability {
            failure,
            version: self.version.clone(),
        }
    }

    fn needs_install(&self) -> bool {
        self.failure.is_none()
            && self.installer.source().debootstrap.is_some()
            && !self.is_installed()
    }

    fn install(&self) -> Option<InstallProgress> {
        Some(match &self.failure {
            None => self.installer.start(),
            Some(failure) => self.installer.refused(failure),
        })
    }

    fn install_progress(&self) -> Option<InstallProgress> {
        self.installer.progress()
    }

    fn guest_root(&self) -> Option<PathBuf> {
        self.is_installed().then(|| self.tree())
    }

    fn launch<'a>(&'a self, spec: &'a HolderSpec) -> BoxFuture<'a, Result<(), LaunchError>> {
        Box::pin(async move {
            let (Some(bwrap), Some(guest)) = (&self.bwrap, &spec.sandbox) else {
                return Err(LaunchError::new(self.failure.clone().unwrap_or_else(
                    || "a rootfs terminal needs its sandbox plan".to_owned(),
                )));
            };
            let tree = Path::new(&guest.tree);
            // A root installed by an older ptyhub may lack the mount point (it is read-only
            // inside, so bwrap cannot make it).
            let _ = std::fs::create_dir_all(tree.join(GUEST_WORKSPACE.trim_start_matches('/')));
            if let Some(home) = guest.host_of(GUEST_HOME) {
                seed_home(Path::new(home), &tree.join("etc/skel"))
                    .map_err(|e| LaunchError::new(format!("cannot make the home {home}: {e}")))?;
            }
            let mut args = bwrap_args(guest, rustix::process::geteuid().is_root());
            args.push(spec.program.clone());
            args.extend(spec.args.iter().cloned());
            let mut wrapped = spec.clone();
            wrapped.program = bwrap.to_string_lossy().into_owned();
            wrapped.args = args;
            wrapped.cwd = guest
                .host_of(GUEST_WORKSPACE)
                .map_or_else(|| PathBuf::from("/"), PathBuf::from);
            self.native.launch(&wrapped).await
        })
    }

    fn connect<'a>(
        &'a self,
        meta: &'a TerminalMeta,
        after: Seq,
    ) -> BoxFuture<'a, std::io::Result<BackendLink>> {
        self.native.connect(meta, after)
    }

    fn log(&self, dir: &Path) -> TerminalLog {
        self.native.log(dir)
    }

    fn kill(&self, meta: &TerminalMeta) {
        // bwrap and everything inside carry the instance's mark (bwrap passes the environment
        // on) and live under the holder: the native search finds them all.
        self.native.kill(meta);
    }

    fn end_orphans(&self, meta: &TerminalMeta) {
        let is_orphaned = !self.native.holder_lives(meta);
        self.native.end_orphans(meta);
        // A holder that died could not remove the writable layer once its processes were
        // gone; they are now. A live holder removes it itself.
        if is_orphaned && let Some(guest) = &meta.rootfs {
            crate::holder::root_layer::remove(guest);
        }
    }
}

/// bwrap's arguments for `guest`, up to and including the `--` before the shell.
pub fn bwrap_args(guest: &GuestMeta, is_root: bool) -> Vec<String> {
    let mut args: Vec<String> = Vec::new();
    let mut push = |items: &[&str]| args.extend(items.iter().map(|s| (*s).to_owned()));
    match &guest.layer {
        // The overlay the holder's child mounted (the shared root under the terminal's layer).
        Some(layer) => {
            let merged = Path::new(layer).join(crate::holder::root_layer::MERGED);
            push(&["--bind", &merged.to_string_lossy(), "/"]);
        }
        None => push(&["--ro-bind", &guest.tree, "/"]),
    }
    push(&["--dev", "/dev", "--proc", "/proc"]);
    push(&["--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/run"]);
    for bind in &guest.binds {
        let how = if bind.read_only {
            "--ro-bind"
        } else {
            "--bind"
        };
        push(&[how, &bind.host, &bind.guest]);
    }
    push(&[
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]);
    if guest.network == Network::None {
        push(&["--unshare-net"]);
    }
    if is_root {
        // Root inside is the host's root: without capabilities it cannot mount, make device
        // nodes or reach past the files it owns.
        push(&["--cap-drop", "ALL"]);
    } else {
        push(&["--unshare-user", "--uid", "0", "--gid", "0"]);
    }
    push(&[
        "--hostname",
        GUEST_HOSTNAME,
        "--chdir",
        &guest.guest_cwd,
        "--",
    ]);
    args
}

/// Makes `home` from `skel` (the root's `/etc/skel`) when it does not exist yet: built beside
/// it and renamed, so a home is never half seeded.
fn seed_home(home: &Path, skel: &Path) -> std::io::Result<()> {
    if home.is_dir() {
        return Ok(());
    }
    let parent = home.parent().unwrap_or_else(|| Path::new("/"));
    crate::state_dir::create_private_dir(parent)?;
    let name = home
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let building = parent.join(format!(".{name}.seeding-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    crate::state_dir::create_private_dir(&building)?;
    if skel.is_dir() {
        copy_tree(skel, &building)?;
    }
    std::fs::rename(&building, home)
}

/// Copies the files, directories and symbolic links under `from` into `to`.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            std::fs::create_dir_all(&target)?;
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Whether this kernel lets an unprivileged user make user namespaces.
fn user_namespaces_allowed() -> bool {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .map(|t| t.trim().to_owned())
    };
    read("/proc/sys/kernel/unprivileged_userns_clone").is_none_or(|v| v != "0")
        && read("/proc/sys/user/max_user_namespaces").is_none_or(|v| v != "0")
}

/// `bwrap --version`'s answer (`bubblewrap 0.8.0`).
fn bwrap_version(program: &Path) -> Option<String> {
    let output = std::process::Command::new(program)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// `name` on `PATH`, or in the system directories a server's `PATH` may lack (`/usr/sbin`).
fn find_program(name: &str) -> Option<PathBuf> {
    super::tmux::find_on_path(name).or_else(|| {
        ["/usr/sbin", "/sbin", "/usr/bin"]
            .iter()
            .map(|dir| Path::new(dir).join(name))
            .find(|path| path.is_file())
    })
}

#[cfg(test)]
mod tests {
    use super::{GUEST_HOME, bwrap_args, seed_home};
    use crate::state_dir::{GuestBind, GuestMeta};
    use ptyhub_protocol::rootfs::Network;

    fn guest(network: Network) -> GuestMeta {
        GuestMeta {
            tree: "/r/bookworm".to_owned(),
            workspace: None,
            guest_cwd: "/workspace".to_owned(),
            network,
            layer: None,
            binds: vec![GuestBind {
                host: "/s/homes/0".to_owned(),
                guest: GUEST_HOME.to_owned(),
                read_only: false,
            }],
        }
    }

    #[test]
    fn the_sandbox_binds_only_what_it_names() {
        let args = bwrap_args(&guest(Network::Shared), true).join(" ");
        assert!(
            args.starts_with("--ro-bind /r/bookworm / --dev /dev --proc /proc"),
            "{args}"
        );
        assert!(args.contains("--bind /s/homes/0 /root"), "{args}");
        assert!(args.contains("--unshare-pid --unshare-ipc --unshare-uts --unshare-cgroup-try"));
        assert!(args.contains("--cap-drop ALL"));
        assert!(!args.contains("--unshare-net"));
        assert!(!args.contains("--die-with-parent"));
        assert!(args.ends_with("--chdir /workspace --"), "{args}");
        let none = bwrap_args(&guest(Network::None), false).join(" ");
        assert!(none.contains("--unshare-net"));
        assert!(none.contains("--unshare-user --uid 0 --gid 0"));
    }

    #[test]
    fn a_home_is_seeded_from_skel_once() {
        let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let skel = temp.path().join("skel");
        std::fs::create_dir_all(&skel).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(skel.join(".bashrc"), "# skel").unwrap_or_else(|e| panic!("{e}"));
        let home = temp.path().join("homes/0");
        seed_home(&home, &skel).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            std::fs::read_to_string(home.join(".bashrc"))
                .ok()
                .as_deref(),
            Some("# skel")
        );
        std::fs::write(home.join(".bashrc"), "# mine").unwrap_or_else(|e| panic!("{e}"));
        seed_home(&home, &skel).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            std::fs::read_to_string(home.join(".bashrc"))
                .ok()
                .as_deref(),
            Some("# mine")
        );
    }
}
