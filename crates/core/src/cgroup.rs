//! A cgroup per terminal: finding where this server may create cgroups, making a terminal's
//! cgroup with its limits before its shell starts, and describing it (`GET /v2/backends`).
//!
//! Membership and teardown go through cgroup v2 (`cgroup.procs`, `cgroup.kill`,
//! `cgroup.events`); limits through the v2 `pids` and `memory` controllers where they are
//! enabled, else through the v1 `pids` and `memory` hierarchies (a hybrid host mounts a v2
//! tree without those controllers beside them). Nothing here assumes paths: the v2 tree and
//! the v1 hierarchies are found in `/proc/self/mountinfo`, and the server's own place in each
//! in `/proc/self/cgroup`; a terminal's cgroups sit under the server's own (so limits the
//! server is under still apply), in one directory per state dir (`ptyhub-<hash>`), named
//! after the terminal and its instance. The layout is in docs/backends.md#cgroups.
//!
//! [`Cgroups`] is the server's view, detected once at start; [`CgroupRecord`] is one
//! terminal's, kept in its `meta.json` so a restarted server (and the holder) find it. What a
//! terminal's cgroup does while it lives and when it ends (joining it before exec, counting,
//! the out-of-memory count, the kill and the removal) is [`tree`]'s.

pub mod tree;

use std::path::{Path, PathBuf};

use ptyhub_protocol::api::{BackendStatus, CgroupInfo, CgroupLimits, CgroupsInfo};
use serde::{Deserialize, Serialize};

use crate::error::TerminalError;

/// The largest `pids_max` taken (the kernel's own limit on process ids, `PID_MAX_LIMIT`).
pub const PIDS_MAX_LIMIT: u64 = 4_194_304;
/// The smallest `memory_max_bytes` taken: less cannot run a shell, and is a unit mistake.
pub const MEMORY_MAX_MIN_BYTES: u64 = 1024 * 1024;
/// The largest `memory_max_bytes` taken (1 PiB): more is a unit mistake, not a limit.
pub const MEMORY_MAX_LIMIT_BYTES: u64 = 1 << 50;

/// One terminal's cgroup, as its `meta.json` keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupRecord {
    /// The cgroup v2 directory (membership, counting, kill).
    pub path: String,
    /// The cgroup v1 directories the processes join too (where the limits live on a hybrid).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub v1_paths: Vec<String>,
    /// The limits written when it was made.
    #[serde(default)]
    pub limits: CgroupLimits,
    /// How many processes still ran when the terminal ended and were killed (set then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub killed: Option<u64>,
    /// Processes the out-of-memory killer ended in it so far.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub oom_kills: u64,
    /// Set once its directories are removed (the terminal's processes are all gone).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_removed: bool,
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl CgroupRecord {
    /// Every directory of the cgroup, the v2 one first.
    pub fn dirs(&self) -> impl Iterator<Item = &Path> {
        std::iter::once(Path::new(&self.path)).chain(self.v1_paths.iter().map(Path::new))
    }

    /// The cgroup as the terminal's info shows it, with its live process count.
    pub fn info(&self) -> CgroupInfo {
        CgroupInfo {
            path: self.path.clone(),
            v1_paths: self.v1_paths.clone(),
            limits: self.limits,
            processes: if self.is_removed {
                None
            } else {
                tree::process_count(self)
            },
            killed: self.killed,
            oom_kills: self.oom_kills.max(tree::oom_kills(self)),
        }
    }
}

/// Where a limit is enforced.
#[derive(Clone, Debug, PartialEq, Eq)]
enum LimitHome {
    /// In the v2 directory (the controller is enabled there).
    Unified,
    /// In this v1 instance directory.
    V1(PathBuf),
}

impl LimitHome {
    fn name(&self) -> &'static str {
        match self {
            Self::Unified => "v2",
            Self::V1(_) => "v1",
        }
    }
}

/// Where this server's terminals' cgroups go. The instance directories exist only while a
/// terminal's cgroup is in them: made (again) for each new one, removed with the last.
#[derive(Clone, Debug)]
struct Layout {
    /// The instance directory in the v2 tree (`…/ptyhub-<hash>`).
    unified: PathBuf,
    /// The v2 controllers enabled for the terminals' cgroups (in `unified`'s
    /// `cgroup.subtree_control`, again whenever it is made).
    controllers: Vec<String>,
    pids: Option<LimitHome>,
    memory: Option<LimitHome>,
    /// Why a limit has no home.
    limits_reason: Option<String>,
}

/// The server's cgroups: where terminals' cgroups go, or why they get none, and the default
/// limits from the configuration.
#[derive(Clone, Debug)]
pub struct Cgroups {
    layout: Result<Layout, String>,
    defaults: CgroupLimits,
}

impl Default for Cgroups {
    /// No cgroups (unit tests, and servers built without them).
    fn default() -> Self {
        Self::none("cgroups are not enabled on this server")
    }
}

impl Cgroups {
    /// No cgroups, for `reason`.
    pub fn none(reason: impl Into<String>) -> Self {
        Self {
            layout: Err(reason.into()),
            defaults: CgroupLimits::default(),
        }
    }

    /// Finds where this server can create cgroups for the state dir at `state_dir` and
    /// creates its instance directories; `defaults` are the limits a create without any gets.
    pub fn detect(state_dir: &Path, defaults: CgroupLimits) -> Self {
        let name = instance_name(state_dir);
        let layout = match (
            std::fs::read_to_string("/proc/self/mountinfo"),
            std::fs::read_to_string("/proc/self/cgroup"),
        ) {
            (Ok(mounts), Ok(own)) => Layout::detect(&mounts, &own, &name),
            (Err(error), _) | (_, Err(error)) => Err(format!("cannot read /proc/self: {error}")),
        };
        if let Err(reason) = &layout {
            tracing::info!(%reason, "terminals get no cgroup");
        }
        Self { layout, defaults }
    }

    /// Whether new terminals get a cgroup.
    pub fn is_ready(&self) -> bool {
        self.layout.is_ok()
    }

    /// What `GET /v2/backends` shows.
    pub fn describe(&self) -> CgroupsInfo {
        match &self.layout {
            Ok(layout) => CgroupsInfo {
                status: BackendStatus::Ready,
                reason: None,
                path: Some(layout.unified.to_string_lossy().into_owned()),
                pids: layout.pids.as_ref().map(|home| home.name().to_owned()),
                memory: layout.memory.as_ref().map(|home| home.name().to_owned()),
                limits_reason: layout.limits_reason.clone(),
                default_limits: self.defaults,
            },
            Err(reason) => CgroupsInfo {
                status: BackendStatus::Failed,
                reason: Some(reason.clone()),
                path: None,
                pids: None,
                memory: None,
                limits_reason: None,
                default_limits: self.defaults,
            },
        }
    }

    /// The limits a terminal gets: what its creator asked for over the defaults, checked.
    /// Creates nothing; a bad limit is `INVALID_INPUT`, and so is a limit asked for that this
    /// server cannot enforce.
    pub fn limits_for(&self, asked: Option<&CgroupLimits>) -> Result<CgroupLimits, TerminalError> {
        if let Some(asked) = asked {
            check_limits(asked)?;
        }
        let limits = CgroupLimits {
            pids_max: asked.and_then(|a| a.pids_max).or(self.defaults.pids_max),
            memory_max_bytes: asked
                .and_then(|a| a.memory_max_bytes)
                .or(self.defaults.memory_max_bytes),
        };
        let Some(asked) = asked else {
            return Ok(limits);
        };
        let cannot = |what: &str, why: &str| {
            TerminalError::invalid(format!("{what} cannot be enforced on this server: {why}"))
        };
        match &self.layout {
            Err(reason) if asked.pids_max.is_some() || asked.memory_max_bytes.is_some() => {
                Err(cannot("limits", reason))
            }
            Ok(layout) if asked.pids_max.is_some() && layout.pids.is_none() => Err(cannot(
                "pids_max",
                layout
                    .limits_reason
                    .as_deref()
                    .unwrap_or("no pids controller"),
            )),
            Ok(layout) if asked.memory_max_bytes.is_some() && layout.memory.is_none() => {
                Err(cannot(
                    "memory_max_bytes",
                    layout
                        .limits_reason
                        .as_deref()
                        .unwrap_or("no memory controller"),
                ))
            }
            _ => Ok(limits),
        }
    }

    /// Creates the cgroup of a terminal instance named `name` with `limits` (checked by
    /// [`Self::limits_for`]); `None` when this server puts terminals in no cgroup. A limit
    /// that cannot be written removes what was made.
    pub fn create(
        &self,
        name: &str,
        limits: CgroupLimits,
    ) -> Result<Option<CgroupRecord>, TerminalError> {
        let Ok(layout) = &self.layout else {
            return Ok(None);
        };
        let mut record = CgroupRecord {
            path: layout.unified.join(name).to_string_lossy().into_owned(),
            v1_paths: Vec::new(),
            limits,
            ..CgroupRecord::default()
        };
        let made = layout.make(name, limits, &mut record);
        if let Err(error) = made {
            tree::remove_dirs(&record);
            return Err(TerminalError::internal(format!(
                "cannot create the terminal's cgroup: {error}"
            )));
        }
        Ok(Some(record))
    }
}

impl Layout {
    fn detect(mounts: &str, own: &str, name: &str) -> Result<Self, String> {
        let unified_mount = mount_of(mounts, None).ok_or_else(|| {
            "no cgroup v2 tree is mounted (cgroup.kill and cgroup.events are needed)".to_owned()
        })?;
        let own_unified = own_path(own, None).unwrap_or_else(|| "/".to_owned());
        let mut base = within(&unified_mount, &own_unified);
        let is_root = rustix::process::geteuid().is_root();
        // The v2 controllers a terminal's cgroup can have: those of the base, once enabled
        // below it. A base that holds processes cannot enable them (no internal processes),
        // except the root; a server running as root then uses the tree's root.
        let wanted = ["pids", "memory"];
        let mut enabled = enable_controllers(&base, &wanted);
        if enabled.len() < available(&base, &wanted).len() && is_root && base != unified_mount.0 {
            let root = unified_mount.0.clone();
            let at_root = enable_controllers(&root, &wanted);
            if at_root.len() > enabled.len() {
                base = root;
                enabled = at_root;
            }
        }
        let unified = base.join(name);
        make_dir(&unified).map_err(|error| {
            format!(
                "cannot create cgroups in {}: {error} (run ptyhub as root, or start it in a \
                 delegated cgroup v2 subtree)",
                base.display()
            )
        })?;
        if !unified.join("cgroup.procs").exists() {
            return Err(format!("{} is not a cgroup", unified.display()));
        }
        let enabled = enable_controllers(&unified, &enabled);
        let mut reasons = Vec::new();
        let mut home = |controller: &str| -> Option<LimitHome> {
            if enabled.iter().any(|c| c == controller) {
                return Some(LimitHome::Unified);
            }
            let Some(mount) = mount_of(mounts, Some(controller)) else {
                reasons.push(format!(
                    "no {controller} controller in the cgroup v2 tree and no v1 {controller} hierarchy"
                ));
                return None;
            };
            let own = own_path(own, Some(controller)).unwrap_or_else(|| "/".to_owned());
            let dir = within(&mount, &own).join(name);
            match make_dir(&dir) {
                Ok(()) => {
                    // A probe: it is made again when a terminal needs it.
                    remove_if_empty(&dir);
                    Some(LimitHome::V1(dir))
                }
                Err(error) => {
                    reasons.push(format!("cannot create {}: {error}", dir.display()));
                    None
                }
            }
        };
        let pids = home("pids");
        let memory = home("memory");
        remove_if_empty(&unified);
        Ok(Self {
            unified,
            controllers: enabled,
            pids,
            memory,
            limits_reason: (!reasons.is_empty()).then(|| reasons.join("; ")),
        })
    }

    /// Makes the terminal's directories and writes its limits into `record`'s directories.
    fn make(
        &self,
        name: &str,
        limits: CgroupLimits,
        record: &mut CgroupRecord,
    ) -> std::io::Result<()> {
        make_within(&self.unified, name, || {
            enable_controllers(&self.unified, &self.controllers);
        })?;
        let v1_dir = |home: &LimitHome, record: &mut CgroupRecord| -> std::io::Result<PathBuf> {
            match home {
                LimitHome::Unified => Ok(PathBuf::from(&record.path)),
                LimitHome::V1(base) => {
                    let dir = make_within(base, name, || {})?;
                    let text = dir.to_string_lossy().into_owned();
                    if !record.v1_paths.contains(&text) {
                        record.v1_paths.push(text);
                    }
                    Ok(dir)
                }
            }
        };
        if let (Some(max), Some(home)) = (limits.pids_max, &self.pids) {
            let dir = v1_dir(home, record)?;
            std::fs::write(dir.join("pids.max"), max.to_string())?;
        }
        if let (Some(max), Some(home)) = (limits.memory_max_bytes, &self.memory) {
            let dir = v1_dir(home, record)?;
            let value = max.to_string();
            if matches!(home, LimitHome::Unified) {
                std::fs::write(dir.join("memory.max"), &value)?;
                // Without swap the limit is the limit: a hog is killed, not swapped out.
                let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            } else {
                std::fs::write(dir.join("memory.limit_in_bytes"), &value)?;
                let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), &value);
            }
        }
        Ok(())
    }
}

/// Checks limits a client gave: 0, and sizes beyond the bounds, are `INVALID_INPUT`.
pub fn check_limits(limits: &CgroupLimits) -> Result<(), TerminalError> {
    if let Some(max) = limits.pids_max
        && !(1..=PIDS_MAX_LIMIT).contains(&max)
    {
        return Err(TerminalError::invalid(format!(
            "limits.pids_max must be 1 to {PIDS_MAX_LIMIT}, not {max}"
        )));
    }
    if let Some(max) = limits.memory_max_bytes
        && !(MEMORY_MAX_MIN_BYTES..=MEMORY_MAX_LIMIT_BYTES).contains(&max)
    {
        return Err(TerminalError::invalid(format!(
            "limits.memory_max_bytes must be {MEMORY_MAX_MIN_BYTES} (1 MiB) to \
             {MEMORY_MAX_LIMIT_BYTES} (1 PiB), not {max}"
        )));
    }
    Ok(())
}

/// Kills the processes of every terminal cgroup of the state dir at `state_dir` and removes
/// those cgroups and the instance directories, and removes the server's screen cpu cgroup
/// ([`screen_cpu_group`]) once its screen thread is gone: for tests, which must leave no cgroup
/// behind whatever their terminals did. Creates nothing.
pub fn remove_all(state_dir: &Path) {
    let (Ok(mounts), Ok(own)) = (
        std::fs::read_to_string("/proc/self/mountinfo"),
        std::fs::read_to_string("/proc/self/cgroup"),
    ) else {
        return;
    };
    let name = instance_name(state_dir);
    let mut bases = Vec::new();
    for controller in [None, Some("pids"), Some("memory")] {
        if let Some(mount) = mount_of(&mounts, controller) {
            let own = own_path(&own, controller).unwrap_or_else(|| "/".to_owned());
            bases.push(within(&mount, &own).join(&name));
            bases.push(mount.0.join(&name));
        }
    }
    if let Some(dir) = screen_cpu_group_dir(state_dir) {
        remove_if_empty(&dir);
    }
    for base in bases {
        let Ok(children) = std::fs::read_dir(&base) else {
            continue;
        };
        for child in children.flatten().filter(|e| e.path().is_dir()) {
            let mut record = CgroupRecord {
                path: child.path().to_string_lossy().into_owned(),
                ..CgroupRecord::default()
            };
            tree::teardown(&mut record);
        }
        let _ = std::fs::remove_dir(&base);
    }
}

/// Where the server's screen thread runs apart from the server's session group, as
/// [`screen_cpu_group`] made it.
#[derive(Debug)]
pub struct ScreenCpuGroup {
    /// The cgroup's directory.
    pub dir: PathBuf,
    /// The cgroup the server runs in, in the same hierarchy.
    home: PathBuf,
}

impl ScreenCpuGroup {
    /// Moves thread `tid` of this process into the group (a v1 hierarchy takes threads one
    /// by one).
    pub fn join_thread(&self, tid: i32) -> std::io::Result<()> {
        std::fs::write(self.dir.join("tasks"), tid.to_string())
    }

    /// Moves thread `tid` (if any) back to where the server runs and removes the group.
    pub fn remove(&self, tid: Option<i32>) {
        if let Some(tid) = tid {
            let _ = std::fs::write(self.home.join("tasks"), tid.to_string());
        }
        remove_if_empty(&self.dir);
    }
}

/// The screen thread's group weighs what a normal group does (1024): it leaves the server's
/// session group for a weight of its own, not for less than a program's.
pub const SCREEN_CPU_SHARES: u32 = 1024;

/// The name of the screen cpu cgroup of the server of `state_dir`, beside its instance directory.
pub fn screen_cpu_group_name(state_dir: &Path) -> String {
    format!("{}-screen", instance_name(state_dir))
}

/// Makes (or finds) the cgroup in which the server's screen thread runs with a normal
/// weight: `<v1 cpu hierarchy>/<server's cgroup>/ptyhub-<hash>-screen` with `cpu.shares`
/// [`SCREEN_CPU_SHARES`] (and `cpu.idle` 0 where the kernel has it: a group a killed server
/// left behind may still be idle). A thread in a cgroup of its own leaves the scheduler group
/// the kernel makes of the server's session (autogroup), whose weight it otherwise had whenever
/// it was the server's only runnable thread. Never idle: the thread holds a screen's lock while
/// it applies a slice, and an idle group gets no CPU at all on a busy machine, so a reader of
/// that screen waited as long as the machine stayed busy. Only a v1 `cpu` hierarchy moves one
/// thread of a process apart from the others; on a host whose `cpu` controller is in the v2
/// tree alone the thread keeps its nice value and its rests (docs/backends.md#priority). Errors
/// say why none was made.
pub fn screen_cpu_group(state_dir: &Path) -> Result<ScreenCpuGroup, String> {
    let (home, dir) = screen_cpu_group_place(state_dir)?;
    make_dir(&dir).map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
    let idle = dir.join("cpu.idle");
    let not_idle = if idle.exists() {
        std::fs::write(&idle, "0")
    } else {
        Ok(())
    };
    let made = not_idle
        .and_then(|()| std::fs::write(dir.join("cpu.shares"), SCREEN_CPU_SHARES.to_string()));
    if let Err(error) = made {
        remove_if_empty(&dir);
        return Err(format!("cannot weigh {}: {error}", dir.display()));
    }
    Ok(ScreenCpuGroup { dir, home })
}

/// Where the screen cpu cgroup of the server of `state_dir` is (or would be): the server's own
/// cgroup in the v1 `cpu` hierarchy, and the group's directory in it.
fn screen_cpu_group_place(state_dir: &Path) -> Result<(PathBuf, PathBuf), String> {
    let read = |path: &str| {
        std::fs::read_to_string(path).map_err(|error| format!("cannot read {path}: {error}"))
    };
    let (mounts, own) = (read("/proc/self/mountinfo")?, read("/proc/self/cgroup")?);
    let mount = mount_of(&mounts, Some("cpu"))
        .ok_or_else(|| "no v1 cpu hierarchy is mounted".to_owned())?;
    let own = own_path(&own, Some("cpu")).unwrap_or_else(|| "/".to_owned());
    let home = within(&mount, &own);
    let dir = home.join(screen_cpu_group_name(state_dir));
    Ok((home, dir))
}

/// The directory of the screen cpu cgroup a server of `state_dir` started by this process
/// would make ([`screen_cpu_group`]); `None` without a v1 `cpu` hierarchy.
pub fn screen_cpu_group_dir(state_dir: &Path) -> Option<PathBuf> {
    screen_cpu_group_place(state_dir).ok().map(|(_, dir)| dir)
}

/// The cgroup name of a terminal instance: its id and the start of its process mark (ids are
/// unique per owner only; the mark is unique per instance).
pub fn terminal_cgroup_name(id: &str, process_mark: &str) -> String {
    let mark: String = process_mark.chars().take(12).collect();
    format!("{id}-{mark}")
}

/// `ptyhub-<hash of the state dir>`: one directory per server state dir.
pub fn instance_name(state_dir: &Path) -> String {
    let path = std::fs::canonicalize(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
    // FNV-1a: stable across builds and machines, which std's hasher does not promise.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in path.as_os_str().as_encoded_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("ptyhub-{hash:016x}")
}

/// A mount: its mount point and the path of the hierarchy it shows (the mount's root).
type Mount = (PathBuf, String);

/// The cgroup2 mount (`controller` `None`), or the v1 hierarchy that has `controller`.
fn mount_of(mountinfo: &str, controller: Option<&str>) -> Option<Mount> {
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let fields: Vec<&str> = before.split(' ').collect();
        let (root, point) = (fields.get(3)?, fields.get(4)?);
        let mut after = after.split(' ');
        let fstype = after.next()?;
        let options = after.nth(1).unwrap_or("");
        let is_match = match controller {
            None => fstype == "cgroup2",
            Some(controller) => {
                fstype == "cgroup" && options.split(',').any(|option| option == controller)
            }
        };
        is_match.then(|| (PathBuf::from(unescape(point)), unescape(root)))
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let mut out = Vec::with_capacity(field.len());
    let bytes = field.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some(code) = field
                .get(i + 1..i + 4)
                .and_then(|digits| u8::from_str_radix(digits, 8).ok())
        {
            out.push(code);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The server's own cgroup path in the v2 tree (`controller` `None`) or a v1 hierarchy.
fn own_path(proc_cgroup: &str, controller: Option<&str>) -> Option<String> {
    proc_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let is_match = match controller {
            None => id == "0" && controllers.is_empty(),
            Some(controller) => controllers.split(',').any(|c| c == controller),
        };
        is_match.then(|| path.to_owned())
    })
}

/// The directory of cgroup `path` (as `/proc/self/cgroup` names it) under `mount`.
fn within(mount: &Mount, path: &str) -> PathBuf {
    let (point, root) = mount;
    let relative = path
        .strip_prefix(root.as_str())
        .unwrap_or(path)
        .trim_start_matches('/');
    if relative.is_empty() {
        point.clone()
    } else {
        point.join(relative)
    }
}

/// Which of `wanted` the v2 cgroup at `dir` offers (`cgroup.controllers`).
fn available(dir: &Path, wanted: &[&str]) -> Vec<String> {
    let offered = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    wanted
        .iter()
        .filter(|c| offered.split_whitespace().any(|o| o == **c))
        .map(|c| (*c).to_owned())
        .collect()
}

/// Enables what it can of `wanted` for the children of the v2 cgroup at `dir`; returns the
/// ones enabled there now.
fn enable_controllers(dir: &Path, wanted: &[impl AsRef<str>]) -> Vec<String> {
    let wanted: Vec<&str> = wanted.iter().map(AsRef::as_ref).collect();
    let control = dir.join("cgroup.subtree_control");
    for controller in available(dir, &wanted) {
        let _ = std::fs::write(&control, format!("+{controller}"));
    }
    let enabled = std::fs::read_to_string(&control).unwrap_or_default();
    wanted
        .iter()
        .filter(|c| enabled.split_whitespace().any(|e| e == **c))
        .map(|c| (*c).to_owned())
        .collect()
}

/// Makes `instance/name`, and `instance` first (then `prepare` it); again when a teardown
/// removed `instance` in between (the last terminal's cgroup went).
fn make_within(instance: &Path, name: &str, prepare: impl Fn()) -> std::io::Result<PathBuf> {
    let dir = instance.join(name);
    let mut tries = 0;
    loop {
        if !instance.exists() {
            make_dir(instance)?;
            prepare();
        }
        match make_dir(&dir) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && tries < 3 => tries += 1,
            Err(error) => return Err(error),
            Ok(()) => return Ok(dir),
        }
    }
}

/// Removes a cgroup directory if nothing is in it (a cgroup with children or processes stays).
pub(crate) fn remove_if_empty(dir: &Path) {
    let _ = std::fs::remove_dir(dir);
}

/// Creates a cgroup directory (one that exists is fine).
fn make_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(error) if error.kind() != std::io::ErrorKind::AlreadyExists => Err(error),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use ptyhub_protocol::api::CgroupLimits;
    use ptyhub_protocol::error::ErrorCode;

    use super::{Cgroups, instance_name, mount_of, own_path, within};

    const HYBRID: &str = "\
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const OWN: &str = "8:pids:/\n4:memory:/box/17\n0::/\n";

    #[test]
    fn the_trees_and_the_servers_place_in_them_are_read_not_assumed() {
        let unified = mount_of(HYBRID, None).unwrap_or_else(|| panic!("no v2"));
        assert_eq!(unified.0, PathBuf::from("/sys/fs/cgroup/unified"));
        let memory = mount_of(HYBRID, Some("memory")).unwrap_or_else(|| panic!("no memory"));
        assert_eq!(
            within(&memory, &own_path(OWN, Some("memory")).unwrap_or_default()),
            Path::new("/sys/fs/cgroup/memory/box/17")
        );
        assert_eq!(own_path(OWN, None).as_deref(), Some("/"));
        assert_eq!(within(&unified, "/"), Path::new("/sys/fs/cgroup/unified"));
        assert!(mount_of(HYBRID, Some("freezer")).is_none());
        let pure = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let pure = mount_of(pure, None).unwrap_or_else(|| panic!("no v2"));
        assert_eq!(
            within(&pure, "/user.slice/app.service"),
            Path::new("/sys/fs/cgroup/user.slice/app.service")
        );
    }

    #[test]
    fn bad_limits_are_invalid_input_and_a_server_without_cgroups_takes_none() {
        let none = Cgroups::none("not root");
        for bad in [
            CgroupLimits {
                pids_max: Some(0),
                memory_max_bytes: None,
            },
            CgroupLimits {
                pids_max: None,
                memory_max_bytes: Some(0),
            },
            CgroupLimits {
                pids_max: Some(u64::MAX),
                memory_max_bytes: None,
            },
            CgroupLimits {
                pids_max: None,
                memory_max_bytes: Some(u64::MAX),
            },
            // A limit that is fine, but cannot be enforced without cgroups.
            CgroupLimits {
                pids_max: Some(64),
                memory_max_bytes: None,
            },
        ] {
            assert_eq!(
                none.limits_for(Some(&bad)).map_err(|e| e.code()),
                Err(ErrorCode::InvalidInput),
                "{bad:?}"
            );
        }
        assert_eq!(none.limits_for(None).ok(), Some(CgroupLimits::default()));
        assert!(
            none.create("t-1-abc", CgroupLimits::default())
                .is_ok_and(|made| made.is_none())
        );
    }

    #[test]
    fn one_directory_per_state_dir() {
        let a = instance_name(Path::new("/nonexistent/a"));
        assert_eq!(a, instance_name(Path::new("/nonexistent/a")));
        assert_ne!(a, instance_name(Path::new("/nonexistent/b")));
        assert!(a.starts_with("ptyhub-") && a.len() == "ptyhub-".len() + 16);
    }
}
