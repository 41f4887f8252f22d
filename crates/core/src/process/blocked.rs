//! What a blocked process waits on, read from `/proc`: the system call each of its threads
//! sits in (`/proc/<pid>/task/<tid>/syscall`) and the descriptors that call waits on — the fd
//! of a `read`, the `pollfd` array of a `poll` and the `fd_set` of a `select` (read from the
//! process's memory), the interest list of an `epoll` instance (`/proc/<pid>/fdinfo`). A
//! program blocked in `poll` on a socket (a hung `curl`) is then told apart from one reading
//! the terminal, and a program that reads `/dev/tty` rather than fd 0 (`less`, `getpass`) is
//! seen reading.
//!
//! Reading another process's system call and memory needs the right to trace it: the holder
//! has it for its terminal's processes (same user, and their ancestor). Everything is
//! best-effort: a thread can move on between two reads, and what cannot be read is unknown,
//! not a guess.

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;

use ptyhub_protocol::api::WaitsOn;

/// The system calls that wait, by what their arguments name.
struct Calls {
    /// `read`-like: the fd is the first argument.
    reads: &'static [u64],
    /// `poll`/`ppoll`: a `pollfd` array and its length.
    polls: &'static [u64],
    /// `select`/`pselect6`: `nfds` and the read set.
    selects: &'static [u64],
    /// `epoll_wait` and its variants: the epoll fd.
    epolls: &'static [u64],
    /// Socket calls whose first argument is the socket (`accept`, `recvfrom`, `connect`...).
    sockets: &'static [u64],
    sleeps: &'static [u64],
    waits: &'static [u64],
}

#[cfg(target_arch = "x86_64")]
const CALLS: Calls = Calls {
    reads: &[0, 17, 19, 295],
    polls: &[7, 271],
    selects: &[23, 270],
    epolls: &[232, 281, 441],
    sockets: &[42, 43, 45, 47, 288, 299],
    sleeps: &[34, 35, 230],
    waits: &[61, 247],
};
#[cfg(target_arch = "aarch64")]
const CALLS: Calls = Calls {
    reads: &[63, 65, 67, 69],
    polls: &[73],
    selects: &[72],
    epolls: &[22, 441],
    sockets: &[202, 203, 207, 212, 242, 243],
    sleeps: &[101, 115],
    waits: &[95, 260],
};
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const CALLS: Calls = Calls {
    reads: &[],
    polls: &[],
    selects: &[],
    epolls: &[],
    sockets: &[],
    sleeps: &[],
    waits: &[],
};

/// Most descriptors looked at in one `poll`/`select`.
const FDS_MAX: u64 = 4096;
/// `POLLIN | POLLPRI`: a `pollfd` that waits to read.
const POLL_READ: i16 = 0x1 | 0x2;
/// `EPOLLIN | EPOLLPRI`.
const EPOLL_READ: u32 = 0x1 | 0x2;

/// What `pid` waits on, over all its threads: the terminal `tty` if any thread waits to read
/// it, else the first other target a thread waits on; `None` while it runs (or when nothing
/// can be read).
pub fn waits_on(pid: u32, tty: &Path) -> Option<WaitsOn> {
    let tasks: Vec<u32> = fs::read_dir(format!("/proc/{pid}/task"))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let mut found = None;
    for tid in tasks {
        match task_waits_on(pid, tid, tty) {
            Some(WaitsOn::Terminal) => return Some(WaitsOn::Terminal),
            Some(other) => found = Some(found.map_or(other, |f| stronger(f, other))),
            None => {}
        }
    }
    found
}

/// The more telling of two targets: a socket or a pipe says more than a timer or a child.
fn stronger(a: WaitsOn, b: WaitsOn) -> WaitsOn {
    if rank(b) < rank(a) { b } else { a }
}

fn rank(target: WaitsOn) -> u8 {
    match target {
        WaitsOn::Terminal => 0,
        WaitsOn::Socket => 1,
        WaitsOn::Pipe => 2,
        WaitsOn::File => 3,
        WaitsOn::Child => 4,
        WaitsOn::Timer => 5,
    }
}

fn task_waits_on(pid: u32, tid: u32, tty: &Path) -> Option<WaitsOn> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    let mut fields = text.split_whitespace();
    let number: u64 = fields.next()?.parse().ok()?;
    let args: Vec<u64> = fields
        .take(6)
        .filter_map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
        .collect();
    let arg = |i: usize| args.get(i).copied();
    if CALLS.reads.contains(&number) {
        return fd_target(pid, arg(0)?, tty);
    }
    if CALLS.sockets.contains(&number) {
        return Some(WaitsOn::Socket);
    }
    if CALLS.sleeps.contains(&number) {
        return Some(WaitsOn::Timer);
    }
    if CALLS.waits.contains(&number) {
        return Some(WaitsOn::Child);
    }
    let fds = if CALLS.polls.contains(&number) {
        poll_fds(pid, arg(0)?, arg(1)?)
    } else if CALLS.selects.contains(&number) {
        select_fds(pid, arg(0)?, arg(1)?)
    } else if CALLS.epolls.contains(&number) {
        epoll_fds(pid, arg(0)?)
    } else {
        return None;
    };
    let Some(fds) = fds else {
        // The wait's descriptors cannot be read: judge by fd 0, as a line editor's poll on its
        // input is the common case.
        return fd_target(pid, 0, tty).filter(|t| *t == WaitsOn::Terminal);
    };
    if fds.is_empty() {
        return Some(WaitsOn::Timer);
    }
    fds.into_iter()
        .filter_map(|fd| fd_target(pid, fd, tty))
        .reduce(stronger)
}

/// What the descriptor `fd` of `pid` is.
fn fd_target(pid: u32, fd: u64, tty: &Path) -> Option<WaitsOn> {
    let link = fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
    if link == tty || link == Path::new("/dev/tty") {
        return Some(WaitsOn::Terminal);
    }
    let text = link.to_string_lossy();
    Some(if text.starts_with("socket:") {
        WaitsOn::Socket
    } else if text.starts_with("pipe:") {
        WaitsOn::Pipe
    } else if text.starts_with("anon_inode:[timerfd]") {
        WaitsOn::Timer
    } else {
        WaitsOn::File
    })
}

/// Reads `len` bytes of `pid`'s memory at `address`.
fn read_memory(pid: u32, address: u64, len: usize) -> Option<Vec<u8>> {
    let file = fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, address).ok()?;
    Some(buf)
}

/// The descriptors a `poll(fds, nfds, …)` waits to read.
fn poll_fds(pid: u32, address: u64, nfds: u64) -> Option<Vec<u64>> {
    if nfds == 0 {
        return Some(Vec::new());
    }
    let count = usize::try_from(nfds.min(FDS_MAX)).ok()?;
    // `struct pollfd { int fd; short events; short revents; }`: 8 bytes.
    let bytes = read_memory(pid, address, count * 8)?;
    Some(
        bytes
            .chunks_exact(8)
            .filter_map(|entry| {
                let fd = i32::from_ne_bytes([entry[0], entry[1], entry[2], entry[3]]);
                let events = i16::from_ne_bytes([entry[4], entry[5]]);
                (fd >= 0 && events & POLL_READ != 0).then(|| u64::from(fd.unsigned_abs()))
            })
            .collect(),
    )
}

/// The descriptors a `select(nfds, readfds, …)` waits to read.
fn select_fds(pid: u32, nfds: u64, readfds: u64) -> Option<Vec<u64>> {
    if nfds == 0 || readfds == 0 {
        return Some(Vec::new());
    }
    let nfds = nfds.min(FDS_MAX);
    // An `fd_set` is an array of longs, one bit per descriptor.
    let len = usize::try_from(nfds.div_ceil(64) * 8).ok()?;
    let bytes = read_memory(pid, readfds, len)?;
    Some(
        (0..nfds)
            .filter(|&fd| {
                let byte = usize::try_from(fd / 8).ok().and_then(|i| bytes.get(i));
                byte.is_some_and(|b| b & (1 << (fd % 8)) != 0)
            })
            .collect(),
    )
}

/// The descriptors the epoll instance `epfd` of `pid` waits to read: its `fdinfo` lists one
/// `tfd: <fd> events: <hex> …` line per watched descriptor.
fn epoll_fds(pid: u32, epfd: u64) -> Option<Vec<u64>> {
    let info = fs::read_to_string(format!("/proc/{pid}/fdinfo/{epfd}")).ok()?;
    Some(epoll_targets(&info))
}

fn epoll_targets(info: &str) -> Vec<u64> {
    info.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            if words.next()? != "tfd:" {
                return None;
            }
            let fd: u64 = words.next()?.parse().ok()?;
            if words.next()? != "events:" {
                return None;
            }
            let events = u32::from_str_radix(words.next()?, 16).ok()?;
            (events & EPOLL_READ != 0).then_some(fd)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoll_fdinfo_names_the_descriptors_waited_on_for_reading() {
        let info = "pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t1057\n\
            tfd:        0 events:       19 data:                0  pos:0 ino:3 sdev:16\n\
            tfd:        5 events:        4 data:                5  pos:0 ino:9 sdev:8\n\
            tfd:        7 events:        1 data:                7  pos:0 ino:a sdev:8\n";
        assert_eq!(epoll_targets(info), vec![0, 7]);
    }

    #[test]
    fn a_socket_says_more_than_a_timer_and_the_terminal_most() {
        assert_eq!(stronger(WaitsOn::Timer, WaitsOn::Socket), WaitsOn::Socket);
        assert_eq!(stronger(WaitsOn::Socket, WaitsOn::Pipe), WaitsOn::Socket);
        assert_eq!(
            stronger(WaitsOn::Pipe, WaitsOn::Terminal),
            WaitsOn::Terminal
        );
    }

    /// A child blocked in `poll` on a pipe and in `read` of its stdin are told apart; its own
    /// memory is readable by its parent (this test), as the holder's is.
    #[test]
    fn a_process_polling_a_pipe_is_not_reading_its_stdin() {
        use std::process::{Command, Stdio};
        let mut child = Command::new("python3")
            .args([
                "-c",
                "import os, select\n\
                 r, w = os.pipe()\n\
                 p = select.poll(); p.register(r, select.POLLIN); p.poll()\n",
            ])
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("python3: {e}"));
        let pid = child.id();
        // Until it reaches its poll it reads files and maps libraries.
        let mut seen = None;
        for _ in 0..300 {
            seen = waits_on(pid, Path::new("/dev/no-such-tty"));
            if seen == Some(WaitsOn::Pipe) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(seen, Some(WaitsOn::Pipe));
    }
}
