//! Reading Linux process facts from `/proc`: parents, program names, working directories.
//!
//! The holder uses these to find every process a terminal started (its descendants, including
//! ones that called `setsid`, which the subreaper keeps under it) and to name the foreground
//! program. Everything here is best-effort: a process can vanish between two reads.

use std::fs;

/// `(pid, ppid)` of every process visible in `/proc`.
fn parent_table() -> Vec<(u32, u32)> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            Some((pid, stat_field(&stat, 4)?.parse().ok()?))
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
    let table = parent_table();
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
