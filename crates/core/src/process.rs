//! Linux process facts and actions, for the holder side of the backend seam: parents, program
//! names, working directories and the foreground group's state from `/proc`, and signals.
//!
//! The holder uses these to find every process a terminal started (its descendants, including
//! ones that called `setsid`, which the subreaper keeps under it), to name the foreground
//! program and tell whether it waits for input; the native backend uses them to end the tree
//! of a holder that no longer answers, and to find a terminal's processes by their
//! [`PROCESS_MARK_VAR`] once the holder is gone (they were reparented, so no parent link
//! leads to them). The terminal actor never calls them: it asks its backend. Everything here
//! is best-effort: a process can vanish between two reads.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use ptyhub_protocol::api::WaitsOn;
use rustix::process::Signal;

mod blocked;

/// The environment variable every process of a terminal inherits, with a value unique to the
/// terminal's instance (`process_mark` in its `meta.json`): what finds the terminal's
/// processes when no parent link leads to them any more.
pub const PROCESS_MARK_VAR: &str = "PTYHUB_PROCESS_MARK";

/// Most rounds of [`stop_then_kill`]: each stops what the previous round's processes forked.
const STOP_ROUNDS_MAX: usize = 16;

/// One visible process: its pid, parent, process group, session and owner, and whether it is
/// a zombie.
#[derive(Clone, Copy, Debug)]
struct ProcessEntry {
    pid: u32,
    ppid: u32,
    pgrp: u32,
    sid: u32,
    uid: u32,
    is_zombie: bool,
}

/// Every process visible in `/proc`, read once.
fn process_table() -> Vec<ProcessEntry> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            process_entry(pid)
        })
        .collect()
}

/// `root` and the processes under it, each read once, found through the
/// kernel's per-thread `children` lists (`/proc/<pid>/task/<tid>/children`): the cost follows
/// the terminal's own processes, not the machine's. Reading every process in `/proc` instead
/// made each `status` of a holder (which `send` asks for every millisecond while it waits)
/// and each create cost a read of every process on the machine: 1,000 of them beside 500
/// terminals. `None` where the kernel keeps no such lists (built without
/// `CONFIG_PROC_CHILDREN`).
fn subtree_table(root: u32) -> Option<Vec<ProcessEntry>> {
    if !has_children_lists(root) {
        return None;
    }
    let mut found: Vec<ProcessEntry> = process_entry(root).into_iter().collect();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for child in child_pids(parent) {
            if let Some(entry) = process_entry(child) {
                found.push(entry);
                frontier.push(child);
            }
        }
    }
    Some(found)
}

/// Whether the kernel keeps `children` lists, asked of `pid`'s main thread (which exists as
/// long as `pid` runs).
fn has_children_lists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}/task/{pid}/children")).exists()
}

/// The children of `pid`, from every one of its threads' `children` lists.
fn child_pids(pid: u32) -> Vec<u32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for task in tasks.flatten() {
        let mut path = task.path();
        path.push("children");
        if let Ok(text) = fs::read_to_string(&path) {
            pids.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    pids
}

/// One process's entry, read from `/proc/<pid>` (`None` once it is gone).
fn process_entry(pid: u32) -> Option<ProcessEntry> {
    let uid = fs::metadata(format!("/proc/{pid}")).ok()?.uid();
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(ProcessEntry {
        pid,
        ppid: stat_field(&stat, 4)?.parse().ok()?,
        pgrp: stat_field(&stat, 5)?.parse().ok()?,
        sid: stat_field(&stat, 6)?.parse().ok()?,
        uid,
        is_zombie: stat_field(&stat, 3)? == "Z",
    })
}

/// Field `n` (1-based, as in proc(5)) of a `/proc/<pid>/stat` line. The program name (field
/// 2) may hold spaces and parentheses, so fields are counted after its closing parenthesis.
pub fn stat_field(stat: &str, n: usize) -> Option<&str> {
    let after_comm = stat.rfind(')')?;
    if n < 3 {
        return None;
    }
    stat[after_comm + 1..].split_whitespace().nth(n - 3)
}

/// The processes of `pids` that started at `since` (Unix seconds) or later, to the kernel's
/// clock tick (10 ms: one started in the same tick just before `since` counts as after).
pub fn started_since(pids: &[u32], since: f64) -> Vec<u32> {
    let Some(boot) = boot_time() else {
        return Vec::new();
    };
    // The kernel keeps a start in whole ticks since boot, rounded down.
    let since_ticks = ((since - boot) * CLOCK_TICKS_PER_SEC).floor();
    pids.iter()
        .copied()
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| stat_field(&stat, 22)?.parse::<f64>().ok())
                .is_some_and(|start| start >= since_ticks)
        })
        .collect()
}

/// Clock ticks per second of `/proc/<pid>/stat`'s times (`USER_HZ`, 100 on Linux).
const CLOCK_TICKS_PER_SEC: f64 = 100.0;

/// When the machine booted, in Unix seconds: the wall clock less the time since boot (the
/// clock process start times count from).
fn boot_time() -> Option<f64> {
    let read = |clock| {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        #[allow(unsafe_code, reason = "clock_gettime writes the timespec it is given")]
        // SAFETY: `now` is a valid, writable timespec for the duration of the call.
        let rc = unsafe { libc::clock_gettime(clock, &raw mut now) };
        #[allow(
            clippy::cast_precision_loss,
            reason = "seconds since 1970 fit an f64 to the ns"
        )]
        (rc == 0).then(|| now.tv_sec as f64 + now.tv_nsec as f64 / 1e9)
    };
    Some(read(libc::CLOCK_REALTIME)? - read(libc::CLOCK_BOOTTIME)?)
}

/// The children of `parent`, by pid.
pub fn children(parent: u32) -> Vec<u32> {
    let mut pids: Vec<u32> = if has_children_lists(parent) {
        child_pids(parent)
    } else {
        process_table()
            .iter()
            .filter(|entry| entry.ppid == parent)
            .map(|entry| entry.pid)
            .collect()
    };
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Every descendant of `root` (not `root` itself), parents before children.
pub fn descendants(root: u32) -> Vec<u32> {
    descendants_in(&subtree_table(root).unwrap_or_else(process_table), root)
}

fn descendants_in(table: &[ProcessEntry], root: u32) -> Vec<u32> {
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            table
                .iter()
                .filter(|entry| entry.ppid == parent)
                .map(|entry| entry.pid),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// The program name of a process (`/proc/<pid>/comm`).
pub fn comm(pid: u32) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(text.trim_end_matches('\n').to_owned())
}

/// The working directory of a process.
pub fn cwd(pid: u32) -> Option<String> {
    fs::read_link(format!("/proc/{pid}/cwd"))
        .ok()
        .and_then(|p| p.to_str().map(str::to_owned))
}

/// Whether a process exists (and is not a zombie).
pub fn is_alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat_field(&stat, 3).map(|state| state != "Z"))
        .unwrap_or(false)
}

/// The executable a process runs (without the ` (deleted)` the kernel appends once the file
/// was replaced).
pub fn exe(pid: u32) -> Option<PathBuf> {
    let link = fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let text = link.to_str()?;
    Some(PathBuf::from(
        text.strip_suffix(" (deleted)").unwrap_or(text),
    ))
}

/// The arguments a process was started with (`/proc/<pid>/cmdline`), the program first.
pub fn cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|&b| b == 0)
            .filter(|arg| !arg.is_empty())
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect(),
    )
}

/// One process of this user, as [`members_of`] sees it.
#[derive(Clone, Copy, Debug)]
struct Member {
    pid: u32,
    ppid: u32,
    sid: u32,
    /// Its environment carries the terminal's mark.
    is_marked: bool,
}

/// Every live process of this user (this process excepted) that belongs to the terminal whose
/// processes carry `PTYHUB_PROCESS_MARK=<mark>`: see `members_of`. Empty for an empty mark.
pub fn marked_processes(mark: &str) -> Vec<u32> {
    if mark.is_empty() {
        return Vec::new();
    }
    let entry = format!("{PROCESS_MARK_VAR}={mark}");
    let me = std::process::id();
    let euid = rustix::process::geteuid().as_raw();
    let processes = process_table();
    // Where our session's leader lives outside our pid namespace this is 0, which
    // `members_of` never takes whole anyway.
    let own_session = own_session();
    let table: Vec<Member> = processes
        .into_iter()
        // Root's terminals may run as other accounts (docs/security.md): their processes are
        // root's to find too; anyone else finds only its own.
        .filter(|p| p.pid != me && (p.uid == euid || euid == 0) && !p.is_zombie)
        .map(|p| {
            // A process whose environment cannot be read is judged by its session and parent.
            let environ = fs::read(format!("/proc/{}/environ", p.pid)).unwrap_or_default();
            Member {
                pid: p.pid,
                ppid: p.ppid,
                sid: p.sid,
                is_marked: environ_has(&environ, entry.as_bytes()),
            }
        })
        .collect();
    let spared: Vec<u32> = vec![own_session, me];
    members_of(&table, &spared)
        .into_iter()
        .filter(|&pid| pid != me)
        .collect()
}

/// Whether a NUL-separated environment block holds exactly the entry `entry` (`NAME=value`).
fn environ_has(environ: &[u8], entry: &[u8]) -> bool {
    environ.split(|&b| b == 0).any(|item| item == entry)
}

/// The terminal's processes in `table`: every marked process; every process in the session of
/// a marked one (the shell is a session leader, so a job that cleared its environment stays
/// in the shell's session, and so does one of a `setsid` escapee); and every descendant of
/// those. Sessions 0 and 1 and the `spared` ones (the server's own) are never taken whole.
fn members_of(table: &[Member], spared_sessions: &[u32]) -> Vec<u32> {
    let sessions: HashSet<u32> = table
        .iter()
        .filter(|m| m.is_marked && m.sid > 1 && !spared_sessions.contains(&m.sid))
        .map(|m| m.sid)
        .collect();
    let mut found: Vec<u32> = table
        .iter()
        .filter(|m| m.is_marked || sessions.contains(&m.sid))
        .map(|m| m.pid)
        .collect();
    let mut seen: HashSet<u32> = found.iter().copied().collect();
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        for child in table.iter().filter(|m| m.ppid == parent) {
            if seen.insert(child.pid) {
                found.push(child.pid);
            }
        }
        i += 1;
    }
    found.retain(|&pid| pid > 1);
    found
}

/// Ends every process `find` reports: stops them (a stopped process cannot fork), asks `find`
/// again until a round finds no process it has not stopped yet, then kills them all. Returns
/// how many it ended.
pub fn stop_then_kill(mut find: impl FnMut() -> Vec<u32>) -> usize {
    let mut stopped: Vec<u32> = Vec::new();
    for _ in 0..STOP_ROUNDS_MAX {
        let fresh: Vec<u32> = find()
            .into_iter()
            .filter(|pid| !stopped.contains(pid))
            .collect();
        if fresh.is_empty() {
            break;
        }
        for &pid in &fresh {
            kill(pid, Signal::STOP);
        }
        stopped.extend(fresh);
    }
    for &pid in &stopped {
        kill(pid, Signal::KILL);
    }
    stopped.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subtree_is_found_from_its_own_processes_as_from_all_of_them() -> std::io::Result<()> {
        // A shell with two children and a grandchild: the children lists find the same
        // processes as a read of every process does.
        let mut shell = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & (sleep 30 & wait) & wait"])
            .spawn()?;
        let root = shell.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut found = Vec::new();
        while std::time::Instant::now() < deadline {
            found = descendants(root);
            if found.len() >= 3 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let mut everywhere = descendants_in(&process_table(), root);
        let _ = shell.kill();
        for pid in &found {
            kill(*pid, Signal::KILL);
        }
        let _ = shell.wait();
        let mut sorted = found.clone();
        sorted.sort_unstable();
        everywhere.sort_unstable();
        assert_eq!(
            sorted.len(),
            3,
            "a sleep, the subshell and its sleep: {found:?}"
        );
        assert_eq!(sorted, everywhere);
        Ok(())
    }

    #[test]
    fn stat_fields_are_counted_after_the_program_name() {
        let stat = "42 (a (weird) name) S 7 42 42 0";
        assert_eq!(stat_field(stat, 3), Some("S"));
        assert_eq!(stat_field(stat, 4), Some("7"));
        assert_eq!(stat_field(stat, 5), Some("42"));
    }

    #[test]
    fn own_process_is_alive_and_named() {
        let me = std::process::id();
        assert!(is_alive(me));
        assert!(comm(me).is_some());
        assert!(descendants(me).is_empty() || !descendants(me).contains(&me));
    }

    fn member(pid: u32, ppid: u32, sid: u32, is_marked: bool) -> Member {
        Member {
            pid,
            ppid,
            sid,
            is_marked,
        }
    }

    #[test]
    fn the_mark_is_one_whole_environment_entry() {
        let environ = b"HOME=/h\0PTYHUB_PROCESS_MARK=abc\0TERM=x\0";
        assert!(environ_has(environ, b"PTYHUB_PROCESS_MARK=abc"));
        // Another instance's mark, a prefix of it, or the value under another name: no match.
        assert!(!environ_has(environ, b"PTYHUB_PROCESS_MARK=ab"));
        assert!(!environ_has(
            b"PTYHUB_PROCESS_MARK=abcd\0",
            b"PTYHUB_PROCESS_MARK=abc"
        ));
        assert!(!environ_has(
            b"X_PTYHUB_PROCESS_MARK=abc\0",
            b"PTYHUB_PROCESS_MARK=abc"
        ));
        assert!(!environ_has(
            b"OTHER=PTYHUB_PROCESS_MARK=abc\0",
            b"PTYHUB_PROCESS_MARK=abc"
        ));
        // The last entry may lack its terminator.
        assert!(environ_has(
            b"A=1\0PTYHUB_PROCESS_MARK=abc",
            b"PTYHUB_PROCESS_MARK=abc"
        ));
    }

    #[test]
    fn a_terminal_is_its_marked_processes_their_sessions_and_their_children() {
        let table = [
            // The server (pid 10, session 10) and an unrelated shell (session 50).
            member(10, 1, 10, false),
            member(50, 1, 50, false),
            member(51, 50, 50, false),
            // The terminal's shell (reparented to init) and a job that cleared its environment.
            member(100, 1, 100, true),
            member(101, 100, 100, false),
            // A `setsid` escapee, and a child of it that cleared its environment.
            member(200, 1, 200, true),
            member(201, 200, 200, false),
            // An unmarked process left in the shell's session after its parent died.
            member(102, 1, 100, false),
            // Unmarked, in its own session, child of nobody marked: not the terminal's.
            member(300, 1, 300, false),
        ];
        let mut found = members_of(&table, &[10]);
        found.sort_unstable();
        assert_eq!(found, vec![100, 101, 102, 200, 201]);
    }

    #[test]
    fn a_marked_process_in_a_spared_session_does_not_bring_its_session() {
        // A marked process in the server's own session (or init's) brings itself and its
        // children only: the session is not the terminal's.
        let table = [
            member(10, 1, 10, false),
            member(11, 10, 10, true),
            member(12, 11, 10, false),
            member(13, 10, 10, false),
            member(20, 1, 1, true),
            member(21, 1, 1, false),
        ];
        let mut found = members_of(&table, &[10]);
        found.sort_unstable();
        assert_eq!(found, vec![11, 12, 20]);
    }

    #[test]
    fn no_mark_finds_nothing() {
        assert!(marked_processes("").is_empty());
        assert!(marked_processes("no-process-carries-this-mark").is_empty());
    }
}

/// The signals a client may send, by name, and the signal each is on this system.
pub const SIGNALS: [(&str, Signal); 10] = [
    ("INT", Signal::INT),
    ("TERM", Signal::TERM),
    ("KILL", Signal::KILL),
    ("HUP", Signal::HUP),
    ("QUIT", Signal::QUIT),
    ("TSTP", Signal::TSTP),
    ("CONT", Signal::CONT),
    ("WINCH", Signal::WINCH),
    ("USR1", Signal::USR1),
    ("USR2", Signal::USR2),
];

/// The nice value the server's threads take where they may (root, or `CAP_SYS_NICE`).
pub const SERVER_NICE: i32 = -10;
/// The nice value of the server's session group where the kernel groups by session. The
/// group's weight is shared by all of the server's runnable threads and weighed against one
/// group per terminal's programs and one per holder: at -10 (9.3 sessions' worth) twenty floods
/// left the server a fifth of the CPU while it needed half to keep up with their output, and an
/// idle terminal's exec waited behind it (adversarial L1: canary p50 27–31 ms, p99 104–130;
/// at -20, 12–14 ms and 57–76).
pub const SERVER_GROUP_NICE: i32 = -20;

/// Puts the server ahead of the terminals it serves under contention, best effort: nice
/// [`SERVER_NICE`] for the calling thread (the threads it starts afterwards inherit it) and,
/// where the kernel groups processes by session (autogroup) and the session is the server's
/// own, [`SERVER_GROUP_NICE`] for its group, which is where nice counts across sessions. Each terminal is a session, a group of equal weight, so
/// without it twenty terminals printing at full speed left the server a twenty-first of the
/// CPU, and an idle terminal's exec took seconds (adversarial L1). The terminals' programs run
/// at the normal priority (the holder resets it). Says what it could not do; a server that is
/// not privileged runs as it is.
pub fn raise_server_priority() -> Vec<String> {
    let mut refused = Vec::new();
    // SAFETY: a plain system call on the calling thread.
    #[allow(
        unsafe_code,
        reason = "setpriority has no safe spelling in std or rustix"
    )]
    let set = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, SERVER_NICE) };
    if set < 0 {
        refused.push(format!(
            "nice {SERVER_NICE}: {}",
            std::io::Error::last_os_error()
        ));
    }
    let autogroup = std::path::Path::new("/proc/self/autogroup");
    // The group is the session's: changed only when the session is the server's own (a
    // service, or `setsid ptyhub serve`), never the shell's that started it.
    let is_leader = own_session() == std::process::id();
    if autogroup.exists() {
        if !is_leader {
            refused.push(
                "the session group: the server does not lead its session (start it with \
                 setsid, or as a service)"
                    .to_owned(),
            );
        } else if let Err(error) = fs::write(autogroup, SERVER_GROUP_NICE.to_string()) {
            refused.push(format!(
                "the session group's nice {SERVER_GROUP_NICE}: {error}"
            ));
        }
    }
    refused
}

/// This process's session id, as its pid namespace sees it: 0 where the session's leader lives
/// outside that namespace (a container, a CI runner). Asked of libc, not rustix, whose `Pid`
/// refuses the kernel's 0 with a panic.
fn own_session() -> u32 {
    // SAFETY: a plain system call with no pointers.
    #[allow(unsafe_code, reason = "rustix's getsid cannot return the kernel's 0")]
    let session = unsafe { libc::getsid(0) };
    u32::try_from(session).unwrap_or(0)
}

/// Sends `signal` to `pid`, best-effort (a vanished process is not an error worth reporting).
pub fn kill(pid: u32, signal: Signal) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// Sends `signal` to the process group `pgid`.
pub fn kill_group(pgid: u32, signal: Signal) -> std::io::Result<()> {
    let pgid = i32::try_from(pgid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    rustix::process::kill_process_group(pgid, signal).map_err(std::io::Error::from)
}

/// What the terminal's foreground process group is doing, read from `/proc`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Foreground {
    pub pgid: u32,
    /// The program that reads the terminal when one of the group does (`less` under
    /// `git log`), else the group leader's program name.
    pub program: Option<String>,
    /// A process of the group is blocked reading the terminal: through fd 0 or another
    /// descriptor open on it (`/dev/tty`), in `read` or waiting on it with poll/select/epoll.
    pub is_reading: bool,
    /// The reading process's program name, when one reads.
    pub reader: Option<String>,
    /// What the group waits on when it is blocked (the terminal when it reads it).
    pub waits_on: Option<WaitsOn>,
    /// The terminal is in canonical (line) mode.
    pub is_canonical: bool,
    /// The terminal echoes what is typed.
    pub is_echo: bool,
    /// Bytes typed that no program has read yet.
    pub input_queued: Option<u32>,
}

/// The facts of a terminal from one read of `/proc`: the foreground state of the terminal
/// whose session leader (the shell) is `leader`, and how many processes run under `root`
/// (the holder).
pub fn terminal_facts(root: u32, leader: u32) -> (Option<Foreground>, usize) {
    // The foreground group's members are the leader or its descendants, and the leader is
    // the root or one of its descendants (a tmux pane's shell is both).
    let table = subtree_table(root).unwrap_or_else(process_table);
    let count = descendants_in(&table, root).len();
    (foreground_in(&table, leader), count)
}

fn foreground_in(table: &[ProcessEntry], leader: u32) -> Option<Foreground> {
    let stat = fs::read_to_string(format!("/proc/{leader}/stat")).ok()?;
    let tpgid: i64 = stat_field(&stat, 8)?.parse().ok()?;
    let pgid = u32::try_from(tpgid).ok().filter(|&p| p > 0)?;
    let tty = fs::read_link(format!("/proc/{leader}/fd/0")).ok()?;
    let members: Vec<u32> = table
        .iter()
        .filter(|entry| entry.pgrp == pgid)
        .map(|entry| entry.pid)
        .collect();
    let mut reader = None;
    let mut waits_on = None;
    for &pid in &members {
        match blocked::waits_on(pid, &tty) {
            Some(WaitsOn::Terminal) => {
                reader = Some(pid);
                waits_on = Some(WaitsOn::Terminal);
                break;
            }
            // The leader's wait speaks for the group unless another member reads.
            Some(other) if waits_on.is_none() || pid == pgid => waits_on = Some(other),
            _ => {}
        }
    }
    let line = line_state(&tty);
    let leader_program = comm(pgid).or_else(|| members.first().and_then(|&p| comm(p)));
    let reader_program = reader.and_then(comm);
    Some(Foreground {
        pgid,
        program: reader_program.clone().or(leader_program),
        is_reading: reader.is_some(),
        reader: reader_program,
        waits_on,
        is_canonical: line.is_canonical,
        is_echo: line.is_echo,
        input_queued: line.input_queued,
    })
}

/// The terminal `pid`'s standard input is on (its `/proc/<pid>/fd/0`).
pub fn terminal_of(pid: u32) -> Option<PathBuf> {
    fs::read_link(format!("/proc/{pid}/fd/0")).ok()
}

/// Discards the unread input of the terminal `tty` (`tcflush(TCIFLUSH)`); returns how many
/// bytes of complete lines it held (a partial line in canonical mode goes too).
pub fn discard_unread_input(tty: &std::path::Path) -> Option<u64> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::open(tty, flags, Mode::empty()).ok()?;
    discard_unread(&fd)
}

/// Discards the unread input of the terminal open as `fd`; returns how many bytes it held.
pub fn discard_unread(fd: impl std::os::fd::AsFd) -> Option<u64> {
    let unread = rustix::io::ioctl_fionread(&fd).ok();
    rustix::termios::tcflush(&fd, rustix::termios::QueueSelector::IFlush).ok()?;
    unread
}

/// Whether the terminal `tty` hides what is typed: canonical mode without echo, a password
/// prompt (a line editor clears both and echoes by itself). False when its modes cannot be
/// read.
pub fn hides_input(tty: &std::path::Path) -> bool {
    let line = line_state(tty);
    line.is_canonical && !line.is_echo
}

/// The terminal's line discipline as one open of it sees it.
#[derive(Default)]
struct LineState {
    is_canonical: bool,
    is_echo: bool,
    input_queued: Option<u32>,
}

/// Whether the terminal is in canonical mode and echoes (false when it cannot be read), and
/// how many typed bytes wait to be read. ICANON without ECHO is what `read -s`, `sudo`,
/// `getpass` and `ssh` password prompts set.
fn line_state(tty: &std::path::Path) -> LineState {
    use rustix::fs::{Mode, OFlags};
    use rustix::termios::LocalModes;
    let flags = OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::open(tty, flags, Mode::empty()) else {
        return LineState::default();
    };
    let (is_canonical, is_echo) = rustix::termios::tcgetattr(&fd).map_or((false, false), |t| {
        (
            t.local_modes.contains(LocalModes::ICANON),
            t.local_modes.contains(LocalModes::ECHO),
        )
    });
    LineState {
        is_canonical,
        is_echo,
        input_queued: rustix::io::ioctl_fionread(&fd)
            .ok()
            .and_then(|n| u32::try_from(n).ok()),
    }
}
