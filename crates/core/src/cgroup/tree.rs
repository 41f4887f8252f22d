//! One terminal's cgroup while it lives and when it ends: the holder joins the program to it
//! between fork and exec ([`Joiner`]), so the program and its whole tree are in it from their
//! first instruction; counting its processes; the out-of-memory count ([`OomWatch`] turns a
//! rise into a `cgroup.oom` event); and the teardown ([`teardown`]): kill everything in it
//! (`cgroup.kill`, or where a kernel lacks it: freeze, SIGKILL every pid of `cgroup.procs`,
//! thaw, again until empty), wait for `cgroup.events` to say `populated 0`, remove its
//! directories. Making the cgroup and choosing its place is the parent module's.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use ptyhub_protocol::event::EventKind;
use rustix::process::Signal;

use super::CgroupRecord;

/// How long a teardown waits for the killed processes to leave the cgroup.
const EMPTY_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a teardown looks whether the cgroup is empty.
const EMPTY_POLL: Duration = Duration::from_millis(5);
/// How often the holder reads the out-of-memory count while the terminal runs.
pub const OOM_CHECK_EVERY: Duration = Duration::from_millis(250);

/// The `cgroup.procs` files of a terminal's cgroup, opened before the fork so that the child
/// joins with one `write` each (async-signal-safe, no allocation).
pub struct Joiner {
    procs: Vec<OwnedFd>,
}

impl Joiner {
    /// Opens the `cgroup.procs` of every directory of `record`.
    pub fn open(record: &CgroupRecord) -> io::Result<Self> {
        let procs = record
            .dirs()
            .map(|dir| {
                rustix::fs::open(
                    dir.join("cgroup.procs"),
                    rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                )
                .map_err(|e| io::Error::other(format!("cannot open {}: {e}", dir.display())))
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Self { procs })
    }

    /// The raw descriptors, for a `pre_exec` closure (which must own what it uses by copy).
    pub fn raw_fds(&self) -> Vec<i32> {
        self.procs.iter().map(AsRawFd::as_raw_fd).collect()
    }

    /// Moves the calling process into every directory (`0` is "the writer" to the kernel).
    /// Only async-signal-safe calls: for `pre_exec`.
    #[allow(
        unsafe_code,
        reason = "a raw write between fork and exec, where nothing may allocate"
    )]
    pub fn join_self(fds: &[i32]) -> io::Result<()> {
        for &fd in fds {
            // SAFETY: `fd` is a descriptor the parent opened and keeps open until the spawn
            // returns; the buffer is a static byte.
            let written = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
            if written != 1 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// How many processes are in the cgroup now: `pids.current` where the v2 `pids` controller
/// is enabled, else the lines of `cgroup.procs`; `None` when it cannot be read.
pub fn process_count(record: &CgroupRecord) -> Option<u64> {
    let dir = Path::new(&record.path);
    if let Some(count) = read_number(&dir.join("pids.current")) {
        return Some(count);
    }
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).ok()?;
    Some(procs.lines().filter(|line| !line.trim().is_empty()).count() as u64)
}

/// How many processes the out-of-memory killer ended in the cgroup: v2 `memory.events`
/// `oom_kill`, or v1 `memory.oom_control` `oom_kill`, whichever is larger.
pub fn oom_kills(record: &CgroupRecord) -> u64 {
    record
        .dirs()
        .filter_map(|dir| {
            ["memory.events", "memory.oom_control"]
                .iter()
                .find_map(|file| read_key(&dir.join(file), "oom_kill"))
        })
        .max()
        .unwrap_or(0)
}

/// Turns a rise of the cgroup's out-of-memory count into a `cgroup.oom` event; the holder
/// asks at most every [`OOM_CHECK_EVERY`] while the terminal runs and once when it ends.
#[derive(Debug)]
pub struct OomWatch {
    last_check: Instant,
}

impl Default for OomWatch {
    fn default() -> Self {
        Self {
            last_check: Instant::now(),
        }
    }
}

impl OomWatch {
    /// The event to log when the count rose since `record.oom_kills` (which it then holds);
    /// `is_due` forces a check.
    pub fn check(&mut self, record: &mut CgroupRecord, is_due: bool) -> Option<EventKind> {
        if !is_due && self.last_check.elapsed() < OOM_CHECK_EVERY {
            return None;
        }
        self.last_check = Instant::now();
        let total = oom_kills(record);
        (total > record.oom_kills).then(|| {
            let count = total - record.oom_kills;
            record.oom_kills = total;
            EventKind::CgroupOom { count, total }
        })
    }
}

/// Notes how many processes a close must kill (the processes in the cgroup when the
/// terminal's end began), once.
pub fn note_ending(record: &mut CgroupRecord) {
    if record.killed.is_none() {
        record.killed = process_count(record);
    }
}

/// Ends every process in the cgroup, waits until it is empty and removes its directories.
/// Sets `killed` (when [`note_ending`] did not), the out-of-memory count and `is_removed`.
pub fn teardown(record: &mut CgroupRecord) {
    if record.is_removed {
        return;
    }
    let remaining = process_count(record).unwrap_or(0);
    record.killed = Some(record.killed.unwrap_or(0).max(remaining));
    record.oom_kills = record.oom_kills.max(oom_kills(record));
    kill_all(record);
    if !wait_empty(record, EMPTY_TIMEOUT) {
        tracing::warn!(path = %record.path, "processes stayed in a terminal's cgroup");
    }
    remove_dirs(record);
    let is_removed = record.dirs().all(|dir| !dir.exists());
    record.is_removed = is_removed;
}

/// Kills every process in the cgroup and waits until it is empty (its directories stay, for
/// the close to account for and remove); returns how many processes were in it.
pub fn kill_and_wait(record: &CgroupRecord) -> u64 {
    let count = process_count(record).unwrap_or(0);
    if count > 0
        || record
            .v1_paths
            .iter()
            .any(|dir| !is_unlisted(Path::new(dir)))
    {
        kill_all(record);
        if !wait_empty(record, EMPTY_TIMEOUT) {
            tracing::warn!(path = %record.path, "processes stayed in a terminal's cgroup");
        }
    }
    count
}

/// Kills every process in the cgroup and returns without waiting.
pub fn kill_all(record: &CgroupRecord) {
    let dir = Path::new(&record.path);
    if !dir.exists() {
        return;
    }
    if std::fs::write(dir.join("cgroup.kill"), "1").is_ok() {
        // The v1 directories hold the same processes; one that joined only those (a join
        // that failed half way) is killed by pid below.
        kill_listed(record.v1_paths.iter().map(Path::new));
        return;
    }
    // No cgroup.kill: freeze so nothing forks away, kill every pid listed, thaw (a frozen
    // process dies once thawed), until none is left.
    let freeze = dir.join("cgroup.freeze");
    for _ in 0..100 {
        let _ = std::fs::write(&freeze, "1");
        let killed = kill_listed(record.dirs());
        let _ = std::fs::write(&freeze, "0");
        if killed == 0 {
            break;
        }
    }
}

/// Sends SIGKILL to every pid in the `cgroup.procs` of `dirs`; returns how many.
fn kill_listed<'a>(dirs: impl Iterator<Item = &'a Path>) -> usize {
    let mut count = 0;
    for dir in dirs {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs
            .lines()
            .filter_map(|line| line.trim().parse::<u32>().ok())
        {
            crate::process::kill(pid, Signal::KILL);
            count += 1;
        }
    }
    count
}

/// Whether the cgroup emptied within `timeout` (`cgroup.events` says `populated 0`, and no
/// v1 directory lists a process).
fn wait_empty(record: &CgroupRecord, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let unified = Path::new(&record.path);
        let is_empty = read_key(&unified.join("cgroup.events"), "populated")
            .map_or_else(|| is_unlisted(unified), |populated| populated == 0)
            && record
                .v1_paths
                .iter()
                .all(|dir| is_unlisted(Path::new(dir)));
        if is_empty {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(EMPTY_POLL);
    }
}

/// Whether a cgroup directory lists no process (a removed one lists none).
fn is_unlisted(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.procs")).map_or(true, |procs| procs.trim().is_empty())
}

/// Removes the cgroup's directories (those that are gone already are fine), and the instance
/// directory each is in when it was the last one there.
pub fn remove_dirs(record: &CgroupRecord) {
    for dir in record.dirs() {
        // A cgroup whose last process just left can be busy for a moment.
        for _ in 0..100 {
            match std::fs::remove_dir(dir) {
                Err(error) if error.kind() == io::ErrorKind::NotFound => break,
                Err(_) => std::thread::sleep(EMPTY_POLL),
                Ok(()) => break,
            }
        }
        if let Some(instance) = dir.parent().filter(|parent| {
            parent
                .file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("ptyhub-"))
        }) {
            super::remove_if_empty(instance);
        }
    }
}

fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The value of `key` in a flat-keyed cgroup file (`key value` lines).
fn read_key(path: &Path, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(' ')?;
        (name == key).then(|| value.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::process::Command;

    use super::{CgroupRecord, Joiner, process_count, teardown};

    /// A fresh cgroup in the first v1 `pids` hierarchy or, failing that, the v2 tree, when
    /// this process may make one; `None` says why not.
    fn scratch(kind: &str) -> Result<PathBuf, String> {
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
        let controller = (kind == "v1").then_some("pids");
        let mount = super::super::mount_of(&mounts, controller)
            .ok_or_else(|| format!("no {kind} cgroup mount"))?;
        let dir = mount.0.join(format!("ptyhub-test-{}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        Ok(dir)
    }

    /// The teardown without `cgroup.kill` (a v1 hierarchy has none, as an old kernel's v2
    /// has none): freeze where it can, SIGKILL every listed pid, until none is left. With it
    /// (v2): one write. Either way a process joined through [`Joiner`] is killed and the
    /// directory removed.
    #[test]
    fn teardown_kills_what_joined_and_removes_the_cgroup_with_or_without_cgroup_kill() {
        for kind in ["v1", "v2"] {
            let dir = match scratch(kind) {
                Ok(dir) => dir,
                Err(reason) => {
                    #[allow(clippy::print_stderr, reason = "a skipped check says so")]
                    {
                        eprintln!("SKIPPED the {kind} teardown check: {reason}");
                    }
                    continue;
                }
            };
            let mut record = CgroupRecord {
                path: dir.to_string_lossy().into_owned(),
                ..CgroupRecord::default()
            };
            let joiner = Joiner::open(&record).unwrap_or_else(|e| panic!("open: {e}"));
            let fds = joiner.raw_fds();
            let mut command = Command::new("sleep");
            command.arg("1000");
            #[allow(unsafe_code, reason = "the test joins the child as the holder does")]
            // SAFETY: only the async-signal-safe join runs between fork and exec.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
                    Joiner::join_self(&fds)
                });
            }
            let mut child = command.spawn().unwrap_or_else(|e| panic!("spawn: {e}"));
            drop(joiner);
            assert_eq!(process_count(&record), Some(1), "{kind}");
            // Reaped by this thread while the teardown waits (the holder reaps its own).
            let reaper = std::thread::spawn(move || child.wait());
            teardown(&mut record);
            let status = reaper.join().unwrap_or_else(|_| panic!("reaper"));
            assert!(
                status.is_ok_and(|s| !s.success()),
                "{kind}: sleep was not killed"
            );
            assert_eq!(record.killed, Some(1), "{kind}");
            assert!(
                record.is_removed && !dir.exists(),
                "{kind}: {}",
                dir.display()
            );
        }
    }
}
