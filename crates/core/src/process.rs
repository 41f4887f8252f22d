//! Linux process facts and actions, for the holder side of the backend seam: parents, program
//! names, working directories and the foreground group's state from `/proc`, and signals.
//!
//! The holder uses these to find every process a terminal started (its descendants, including
//! ones that called `setsid`, which the subreaper keeps under it), to name the foreground
//! program and tell whether it waits for input; the native backend uses them to end the tree
//! of a holder that no longer answers. The terminal actor never calls them: it asks its
//! backend. Everything here is best-effort: a process can vanish between two reads.

use std::fs;

use rustix::process::Signal;

/// One visible process: its pid, parent and process group.
#[derive(Clone, Copy, Debug)]
struct ProcessEntry {
    pid: u32,
    ppid: u32,
    pgrp: u32,
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
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            Some(ProcessEntry {
                pid,
                ppid: stat_field(&stat, 4)?.parse().ok()?,
                pgrp: stat_field(&stat, 5)?.parse().ok()?,
            })
        })
        .collect()
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

/// Every descendant of `root` (not `root` itself), parents before children.
pub fn descendants(root: u32) -> Vec<u32> {
    descendants_in(&process_table(), root)
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

#[cfg(test)]
mod tests {
    use super::*;

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
    /// The group leader's program name.
    pub program: Option<String>,
    /// A process of the group is blocked reading the terminal (or waiting on it with
    /// poll/select, as line editors and REPLs do).
    pub is_reading: bool,
    /// The terminal is in canonical (line) mode.
    pub is_canonical: bool,
    /// The terminal echoes what is typed.
    pub is_echo: bool,
}

/// `(read, poll-family)` system call numbers of this architecture.
#[cfg(target_arch = "x86_64")]
const READ_SYSCALLS: (&[u64], &[u64]) = (&[0, 17, 19], &[7, 23, 232, 270, 271, 281, 441]);
#[cfg(target_arch = "aarch64")]
const READ_SYSCALLS: (&[u64], &[u64]) = (&[63, 65, 67], &[22, 72, 73, 441]);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const READ_SYSCALLS: (&[u64], &[u64]) = (&[], &[]);

/// The facts of a terminal from one read of `/proc`: the foreground state of the terminal
/// whose session leader (the shell) is `leader`, and how many processes run under `root`
/// (the holder).
pub fn terminal_facts(root: u32, leader: u32) -> (Option<Foreground>, usize) {
    let table = process_table();
    let count = descendants_in(&table, root).len();
    (foreground_in(&table, leader), count)
}

/// Reads the foreground state of the terminal whose session leader (the shell) is `leader`.
pub fn foreground(leader: u32) -> Option<Foreground> {
    foreground_in(&process_table(), leader)
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
    let is_reading = members.iter().any(|&pid| is_reading_tty(pid, &tty));
    let (is_canonical, is_echo) = line_modes(&tty);
    Some(Foreground {
        pgid,
        program: comm(pgid).or_else(|| members.first().and_then(|&p| comm(p))),
        is_reading,
        is_canonical,
        is_echo,
    })
}

/// Whether `pid` is blocked in a read of fd 0 (or a poll/select including it) while its fd 0
/// is the terminal `tty`.
fn is_reading_tty(pid: u32, tty: &std::path::Path) -> bool {
    let is_on_tty = fs::read_link(format!("/proc/{pid}/fd/0")).is_ok_and(|p| p == tty);
    if !is_on_tty {
        return false;
    }
    let Ok(syscall) = fs::read_to_string(format!("/proc/{pid}/syscall")) else {
        return false;
    };
    let mut fields = syscall.split_whitespace();
    let number = fields.next().and_then(|n| n.parse::<u64>().ok());
    let arg0 = fields
        .next()
        .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok());
    let (reads, polls) = READ_SYSCALLS;
    match number {
        Some(n) if reads.contains(&n) => arg0 == Some(0),
        Some(n) if polls.contains(&n) => true,
        _ => false,
    }
}

/// Whether the terminal is in canonical mode and echoes (`(false, false)` when it cannot be
/// read). ICANON without ECHO is what `read -s`, `sudo` and `ssh` password prompts set.
fn line_modes(tty: &std::path::Path) -> (bool, bool) {
    use rustix::fs::{Mode, OFlags};
    use rustix::termios::LocalModes;
    let flags = OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::open(tty, flags, Mode::empty()) else {
        return (false, false);
    };
    rustix::termios::tcgetattr(&fd).map_or((false, false), |t| {
        (
            t.local_modes.contains(LocalModes::ICANON),
            t.local_modes.contains(LocalModes::ECHO),
        )
    })
}
