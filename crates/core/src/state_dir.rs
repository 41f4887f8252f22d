//! The terminal resource on disk (docs/storage.md, docs/compatibility.md#files).
//!
//! ```text
//! <state>/home/<owner>/agent/<agent>/session/<session>/terminal/<terminal-id>/
//!   meta.json  state  status  owner  cwd  events.jsonl
//! ```
//! This module owns the layout, [`TerminalMeta`] (the `meta.json` record) and the one atomic
//! write used for every metadata file. It is shared by the holder, which writes the live state,
//! and the server, which creates the directory and reads it back after a restart.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

pub use ptyhub_protocol::api::TerminalState;
use ptyhub_protocol::api::{BackendKind, Retention, TerminalInfo, TmuxTarget};
use ptyhub_protocol::event::Seq;
use ptyhub_protocol::ids::{Name, TerminalId};
use ptyhub_protocol::rootfs::{GuestInfo, Network, WorkspaceId};
use serde::{Deserialize, Serialize};

/// Name of the append-only event log in a terminal directory.
pub const EVENTS_FILE: &str = "events.jsonl";
/// Name of the full metadata record in a terminal directory.
pub const META_FILE: &str = "meta.json";
/// The terminal's state as one word and a newline (a projection of `meta.json`).
const STATE_FILE: &str = "state";
/// The alias of [`STATE_FILE`]: a symbolic link to it.
const STATUS_FILE: &str = "status";

/// `meta.json`: the complete inspectable record of a terminal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TerminalMeta {
    pub id: TerminalId,
    pub agent: Name,
    pub session: Name,
    pub owner: String,
    pub cwd: String,
    pub command: Vec<String>,
    pub state: TerminalState,
    /// The holder's unix socket (a locator only: its loss never deletes history).
    pub socket: String,
    pub created_at: u64,
    /// Which start of the program this is; a closed terminal reopened with the same id gets
    /// the next instance and keeps appending to the same event log.
    pub instance: u32,
    pub cols: u16,
    pub rows: u16,
    /// The shell flavour the integration was written for (`bash`, `zsh`, `sh`).
    pub shell: String,
    #[serde(default)]
    pub holder_pid: Option<u32>,
    #[serde(default)]
    pub pid: Option<u32>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub signal: Option<i32>,
    #[serde(default)]
    pub ended_at: Option<u64>,
    /// Set when a client closed the terminal (it leaves the live list; history stays).
    #[serde(default)]
    pub closed: bool,
    /// Secret carried by the shell integration's marks, so program output cannot forge them.
    #[serde(default)]
    pub integration_nonce: String,
    /// The value of `PTYHUB_PROCESS_MARK` in the environment of every process of this instance
    /// of the terminal: how its processes are found once no holder leads to them (absent from
    /// a `meta.json` written before processes were marked).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub process_mark: String,
    /// A terminal that lives and dies with the one connection that opened it
    /// (`/v2/pty/ws`): never listed, closed when a restarted server finds it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub anonymous: bool,
    /// What hosts the terminal (absent from a `meta.json` written before backends were named:
    /// `native`).
    #[serde(default)]
    pub backend: BackendKind,
    /// The tmux socket and session of a `tmux` terminal (written by its holder once the
    /// session runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmux: Option<TmuxTarget>,
    /// The OS account the terminal's programs run as, when it is not the server's
    /// (docs/security.md#accounts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// What a `rootfs` terminal's shell runs in: the root, its workspace, its network and
    /// every host directory bound into it (absent on other backends, and from a `meta.json`
    /// of schema 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<GuestMeta>,
    /// Which layout of `meta.json` this is ([`META_SCHEMA`] when written by this ptyhub; 0 for
    /// one written before the layout was numbered). A reader takes what it knows of a newer one.
    #[serde(default)]
    pub schema: u32,
    /// `persistent` (absent) or `expiring`: an expiring terminal's directory is removed when
    /// it closes.
    #[serde(default, skip_serializing_if = "Retention::is_persistent")]
    pub retention: Retention,
    /// The terminal instance's cgroup (docs/backends.md#cgroups): its directories, limits and,
    /// once it ended, what its end killed; absent when the server put it in none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<crate::cgroup::CgroupRecord>,
}

/// The layout of `meta.json` this ptyhub writes (docs/storage.md#meta-json): 2 added
/// `retention`, `cgroup` and `rootfs`; a reader takes schema 0 and 1 as they are (every field
/// they lack has a default).
pub const META_SCHEMA: u32 = 2;

/// A `rootfs` terminal's sandbox, as `meta.json` records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestMeta {
    /// The root filesystem on the host (mounted read-only at `/`).
    pub tree: String,
    /// The named workspace at `/workspace`; absent for the terminal's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceId>,
    /// The directory the shell started in, as the shell sees it.
    pub guest_cwd: String,
    /// `shared` or `none`.
    pub network: Network,
    /// Every host directory bound into the sandbox besides the root.
    pub binds: Vec<GuestBind>,
    /// The host directory of the terminal's writable layer over the root (an overlay's
    /// `upper`, `work` and `merged`: `crate::holder::root_layer`); absent, the root is
    /// read-only (a server that is not root, or a terminal made before layers existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<String>,
}

/// One host directory bound into a sandbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestBind {
    /// The directory on the host.
    pub host: String,
    /// Where the sandbox sees it.
    pub guest: String,
    /// Mounted read-only.
    #[serde(default)]
    pub read_only: bool,
}

impl GuestMeta {
    /// The host directory bound at `guest`, if one is.
    pub fn host_of(&self, guest: &str) -> Option<&str> {
        self.binds
            .iter()
            .find(|bind| bind.guest == guest)
            .map(|bind| bind.host.as_str())
    }

    /// What the API shows of it.
    pub fn info(&self) -> GuestInfo {
        GuestInfo {
            workspace: self.workspace.as_ref().map(ToString::to_string),
            network: self.network,
            guest_cwd: self.guest_cwd.clone(),
            writable_root: self.layer.is_some(),
        }
    }
}

impl TerminalMeta {
    /// The terminal as the API shows it, with what only a live actor knows passed in.
    pub fn info(
        &self,
        last_activity: u64,
        running_command: Option<String>,
        last_seq: Seq,
    ) -> TerminalInfo {
        TerminalInfo {
            session_id: self.id.to_string(),
            agent: self.agent.to_string(),
            session: self.session.to_string(),
            owner: self.owner.clone(),
            state: self.state,
            working_dir: self.cwd.clone(),
            cols: self.cols,
            rows: self.rows,
            shell: self.shell.clone(),
            created_at: self.created_at,
            last_activity,
            running_command,
            exit_code: self.exit_code,
            signal: self.signal,
            instance: self.instance,
            last_seq,
            closed: self.closed,
            backend: self.backend,
            tmux: self.tmux.clone(),
            storage_error: None,
            holder_protocol: None,
            host_error: None,
            retention: self.retention,
            cgroup: self.cgroup.as_ref().map(crate::cgroup::CgroupRecord::info),
            lease: None,
            rootfs: self.rootfs.as_ref().map(GuestMeta::info),
        }
    }
}

/// The state directory root and its layout.
#[derive(Clone, Debug)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// Creates the root (mode 0700) if needed.
    pub fn open(root: impl Into<PathBuf>) -> io::Result<Self> {
        let root = root.into();
        create_private_dir(&root)?;
        // Whoever may write to it may rename or replace what is in it (every terminal's
        // directory and meta.json), whoever owns those.
        let mode = fs::symlink_metadata(&root)?.mode() & 0o777;
        if mode & 0o022 != 0 {
            return Err(refused(
                &root,
                &format!(
                    "its mode is {mode:04o}: others may write to it (chmod 700 it, or pick another)"
                ),
            ));
        }
        Ok(Self { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether new terminals can be made here now: creates a file in the root, writes a byte
    /// to it and removes it (what a read-only mount, an immutable directory or a full disk
    /// refuses; mode bits alone do not stop root).
    pub fn probe_writable(&self) -> io::Result<()> {
        let path = self
            .root
            .join(format!(".ready-probe-{}", crate::secret::random_token(12)));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut file| {
                use std::io::Write as _;
                file.write_all(b"\n")
            });
        let removed = std::fs::remove_file(&path);
        written?;
        removed
    }

    /// Takes the state directory for this server alone: a second server on the same directory
    /// would fight the first over every terminal.
    pub fn lock(&self) -> io::Result<StateLock> {
        let path = self.root.join("server.lock");
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(StateLock { _file: file }),
            Err(rustix::io::Errno::WOULDBLOCK) => Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "another ptyhub server uses the state dir {}; stop it first",
                    self.root.display()
                ),
            )),
            Err(error) => Err(error.into()),
        }
    }

    /// The directory of one terminal.
    pub fn terminal_dir(
        &self,
        owner: &str,
        agent: &Name,
        session: &Name,
        id: &TerminalId,
    ) -> PathBuf {
        self.root
            .join("home")
            .join(owner)
            .join("agent")
            .join(agent.as_str())
            .join("session")
            .join(session.as_str())
            .join("terminal")
            .join(id.as_str())
    }

    /// Every terminal directory under the root that holds a readable `meta.json`.
    pub fn discover(&self) -> Vec<(PathBuf, TerminalMeta)> {
        let mut found = Vec::new();
        let pattern = ["home", "*", "agent", "*", "session", "*", "terminal", "*"];
        let mut level = vec![self.root.clone()];
        for part in pattern {
            let mut next = Vec::new();
            for dir in level {
                if part == "*" {
                    if let Ok(entries) = fs::read_dir(&dir) {
                        next.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
                    }
                } else {
                    next.push(dir.join(part));
                }
            }
            level = next;
        }
        for dir in level {
            if let Ok(meta) = read_meta(&dir) {
                found.push((dir, meta));
            }
        }
        found
    }
}

/// Reads `meta.json` from a terminal directory.
pub fn read_meta(dir: &Path) -> io::Result<TerminalMeta> {
    let text = fs::read(dir.join(META_FILE))?;
    serde_json::from_slice(&text).map_err(io::Error::other)
}

/// Writes `meta.json` (flushed to disk) and its text projections `state`, `status`, `owner`
/// and `cwd` (atomic, but derived from meta.json and not worth an fsync each).
pub fn write_meta(dir: &Path, meta: &TerminalMeta) -> io::Result<()> {
    write_meta_as(dir, meta, Durability::Synced)
}

/// [`write_meta`] without the flush: for the holder's record at its start (the terminal's
/// first, which its creation hands it in the spec), which it flushes ([`flush_meta`]) once it
/// has said it is ready (a machine that crashes in between loses a terminal that had run
/// nothing). A flush on the way to a create's answer cost it 0.3 ms on an idle disk and
/// several on a busy one.
pub fn write_meta_unflushed(dir: &Path, meta: &TerminalMeta) -> io::Result<()> {
    write_meta_as(dir, meta, Durability::Atomic)
}

/// Flushes the `meta.json` a [`write_meta_unflushed`] wrote to disk.
pub fn flush_meta(dir: &Path) -> io::Result<()> {
    fs::File::open(dir.join(META_FILE))?.sync_data()
}

fn write_meta_as(dir: &Path, meta: &TerminalMeta, durability: Durability) -> io::Result<()> {
    let json = serde_json::to_vec_pretty(meta).map_err(io::Error::other)?;
    write_file(dir, META_FILE, &json, durability)?;
    for (name, text) in [
        (STATE_FILE, format!("{}\n", meta.state.as_str())),
        ("owner", format!("{}\n", meta.owner)),
        ("cwd", format!("{}\n", meta.cwd)),
    ] {
        // A projection that already says it stays: reading it back costs far less than a
        // new file and a rename (an inode made, and one let go, on every write).
        if fs::read(dir.join(name)).is_ok_and(|old| old == text.as_bytes()) {
            continue;
        }
        write_file(dir, name, text.as_bytes(), Durability::Atomic)?;
    }
    link_status(dir)
}

/// `status`, the alias of `state`, is a symbolic link to it, made once: a change of state
/// replaces one file, not two. A `status` that is a file (written by an older version) is
/// replaced by the link, atomically.
fn link_status(dir: &Path) -> io::Result<()> {
    if fs::symlink_metadata(dir.join(STATUS_FILE)).is_ok_and(|m| m.file_type().is_symlink()) {
        return Ok(());
    }
    let tmp = dir.join(format!(".{STATUS_FILE}.tmp.{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(STATE_FILE, &tmp)?;
    fs::rename(&tmp, dir.join(STATUS_FILE))
}

/// How hard a metadata write tries to survive a machine crash.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Durability {
    /// Readers see the old or the new content, never a mix.
    Atomic,
    /// Also flushed to disk before it replaces the old file.
    Synced,
}

/// Writes `name` in `dir` through a temporary file in the same directory and a rename, so a
/// reader sees the old content or the new, never a mix.
pub fn write_atomic(dir: &Path, name: &str, contents: &[u8]) -> io::Result<()> {
    write_file(dir, name, contents, Durability::Synced)
}

/// [`write_atomic`] without the flush to disk, for a file that lives for moments (a shell's
/// integration, which removes itself once read).
pub fn write_scratch(dir: &Path, name: &str, contents: &[u8]) -> io::Result<()> {
    write_file(dir, name, contents, Durability::Atomic)
}

fn write_file(dir: &Path, name: &str, contents: &[u8], durability: Durability) -> io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(contents)?;
    if durability == Durability::Synced {
        file.sync_data()?;
    }
    drop(file);
    fs::rename(&tmp, dir.join(name))
}

/// Creates a directory and its parents with mode 0700, and refuses one that is not this
/// user's own: a symlink, or a directory another user owns (who could replace what ptyhub
/// puts in it).
pub fn create_private_dir(path: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)?;
    check_own_dir(path)
}

/// [`create_private_dir`] for a directory of sockets: it must also be closed to everyone else
/// (no group or other permission bits), or anyone who may write to it could swap a socket.
pub fn create_socket_dir(path: &Path) -> io::Result<()> {
    create_private_dir(path)?;
    let mode = fs::symlink_metadata(path)?.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(refused(
            path,
            &format!("its mode is {mode:04o}; it must be 0700 (chmod 700 it, or pick another)"),
        ));
    }
    Ok(())
}

fn check_own_dir(path: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return Err(refused(path, "it is a symbolic link"));
    }
    if !meta.is_dir() {
        return Err(refused(path, "it is not a directory"));
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(refused(
            path,
            &format!(
                "it belongs to uid {}, not to this user (uid {me})",
                meta.uid()
            ),
        ));
    }
    Ok(())
}

fn refused(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("refusing to use {}: {why}", path.display()),
    )
}

/// The state directory's lock, held by the one server that uses it (released when dropped or
/// when the server exits; holders never inherit it).
#[derive(Debug)]
pub struct StateLock {
    _file: fs::File,
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// A write of the record rewrites only the projections whose text changes: the others keep
    /// their file (the same inode), and every file says what the record says.
    #[test]
    fn unchanged_projections_keep_their_files() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let backend = crate::backend::fake::FakeBackend::default();
        let mut meta = backend.host(dir.path())?.meta("n0nce");
        write_meta(dir.path(), &meta)?;
        let inode = |name: &str| fs::metadata(dir.path().join(name)).map(|m| m.ino());
        let (owner, state) = (inode("owner")?, inode("state")?);
        meta.state = TerminalState::Exited;
        meta.cwd = "/tmp".to_owned();
        write_meta(dir.path(), &meta)?;
        assert_eq!(inode("owner")?, owner);
        assert_ne!(inode("state")?, state);
        for (name, text) in [
            ("state", "exited\n"),
            ("status", "exited\n"),
            ("owner", "tester\n"),
            ("cwd", "/tmp\n"),
        ] {
            assert_eq!(fs::read_to_string(dir.path().join(name))?, text, "{name}");
        }
        assert_eq!(read_meta(dir.path())?.cwd, "/tmp");
        Ok(())
    }

    /// `status` is a link to `state`, made once; one an older version wrote as a file becomes
    /// the link.
    #[test]
    fn status_follows_state_through_a_link() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let backend = crate::backend::fake::FakeBackend::default();
        let mut meta = backend.host(dir.path())?.meta("n0nce");
        let names = |dir: &Path| -> io::Result<Vec<String>> {
            let mut names: Vec<String> = fs::read_dir(dir)?
                .map(|entry| entry.map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect::<io::Result<_>>()?;
            names.sort();
            Ok(names)
        };
        let projections = ["cwd", "owner", "state", "status"];
        fs::write(dir.path().join("status"), "created\n")?;
        write_meta(dir.path(), &meta)?;
        let status = dir.path().join("status");
        assert!(fs::symlink_metadata(&status)?.file_type().is_symlink());
        assert_eq!(fs::read_link(&status)?, Path::new("state"));
        let link = fs::symlink_metadata(&status)?.ino();
        meta.state = TerminalState::Exited;
        write_meta(dir.path(), &meta)?;
        assert_eq!(fs::read_to_string(&status)?, "exited\n");
        assert_eq!(fs::symlink_metadata(&status)?.ino(), link, "made once");
        let listed = names(dir.path())?;
        assert!(
            projections
                .iter()
                .all(|p| listed.iter().any(|name| name == p))
        );
        assert!(
            !listed.iter().any(|name| name.starts_with('.')),
            "no temporary file left: {listed:?}"
        );
        Ok(())
    }
}
