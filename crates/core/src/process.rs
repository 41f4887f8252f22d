//! Reading Linux process facts from `/proc`: parents, program names, working directories.
//!
//! The holder uses these to find every process a terminal started (its descendants, including
//! ones that called `setsid`, which the subreaper keeps under it) and to name the foreground
//! program. Everything here is best-effort: a process can vanish between two reads.

use std::fs;

/// `(pid, field n of its stat line)` of every process visible in `/proc`.
fn stat_table(n: usize) -> Vec<(u32, u32)> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            Some((pid, stat_field(&stat, n)?.parse().ok()?))
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
    let table = stat_table(4);
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            table
                .iter()
                .filter(|&&(_, ppid)| ppid == parent)
                .map(|&(pid, _)| pid),
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

/// What the terminal's foreground process group is doing, read from `/proc` (rust-stack.md §3).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Foreground {
    pub pgid: u32,
    /// The group leader's program name.
    pub program: Option<String>,
    /// A process of the group is blocked reading the terminal (or waiting on it with
    /// poll/select, as line editors and REPLs do).
    pub is_reading: bool,
    /// The terminal is in line mode without echo: a password prompt.
    pub is_password: bool,
}

/// `(read, poll-family)` system call numbers of this architecture.
#[cfg(target_arch = "x86_64")]
const READ_SYSCALLS: (&[u64], &[u64]) = (&[0, 17, 19], &[7, 23, 232, 270, 271, 281, 441]);
#[cfg(target_arch = "aarch64")]
const READ_SYSCALLS: (&[u64], &[u64]) = (&[63, 65, 67], &[22, 72, 73, 441]);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const READ_SYSCALLS: (&[u64], &[u64]) = (&[], &[]);

/// Reads the foreground state of the terminal whose session leader (the shell) is `leader`.
pub fn foreground(leader: u32) -> Option<Foreground> {
    let stat = fs::read_to_string(format!("/proc/{leader}/stat")).ok()?;
    let tpgid: i64 = stat_field(&stat, 8)?.parse().ok()?;
    let pgid = u32::try_from(tpgid).ok().filter(|&p| p > 0)?;
    let tty = fs::read_link(format!("/proc/{leader}/fd/0")).ok()?;
    let members = group_members(pgid);
    let is_reading = members.iter().any(|&pid| is_reading_tty(pid, &tty));
    Some(Foreground {
        pgid,
        program: comm(pgid).or_else(|| members.first().and_then(|&p| comm(p))),
        is_reading,
        is_password: is_password_mode(&tty),
    })
}

fn group_members(pgid: u32) -> Vec<u32> {
    stat_table(5)
        .into_iter()
        .filter(|&(_, group)| group == pgid)
        .map(|(pid, _)| pid)
        .collect()
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

/// ICANON set and ECHO clear on the terminal: what `read -s`, `sudo` and `ssh` prompts do.
fn is_password_mode(tty: &std::path::Path) -> bool {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::open(tty, flags, Mode::empty()) else {
        return false;
    };
    rustix::termios::tcgetattr(&fd).is_ok_and(|t| {
        use rustix::termios::LocalModes;
        t.local_modes.contains(LocalModes::ICANON) && !t.local_modes.contains(LocalModes::ECHO)
    })
}
