//! Opening a PTY pair and starting the terminal's program on it.
//!
//! The master is opened with `O_CLOEXEC` atomically and the slave through `TIOCGPTPEER`, so no
//! other process can grab either. The child gets its own session with the slave as controlling
//! terminal, default signal dispositions, an empty signal mask, and every inherited descriptor
//! above 2 marked close-on-exec. The holder keeps no slave descriptor, so reading the master
//! fails with `EIO` once every process of the terminal has closed it.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use rustix::pty::{OpenptFlags, grantpt, ioctl_tiocgptpeer, openpt, unlockpt};
use rustix::termios::{Winsize, tcsetwinsize};

use super::HolderSpec;

/// `CLOSE_RANGE_CLOEXEC` from `<linux/close_range.h>`.
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// Opens a PTY pair of the given size. Returns `(master, slave)`; the master is non-blocking.
pub fn open_pair(cols: u16, rows: u16) -> io::Result<(OwnedFd, OwnedFd)> {
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let master = openpt(flags)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let slave = ioctl_tiocgptpeer(&master, flags)?;
    let fl = rustix::fs::fcntl_getfl(&master)?;
    rustix::fs::fcntl_setfl(&master, fl | rustix::fs::OFlags::NONBLOCK)?;
    set_size(&master, cols, rows)?;
    Ok((master, slave))
}

/// Sets the window size of the PTY (the kernel then sends `SIGWINCH` to the foreground group).
pub fn set_size(master: &OwnedFd, cols: u16, rows: u16) -> io::Result<()> {
    tcsetwinsize(
        master,
        Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )?;
    Ok(())
}

/// Bytes typed into the terminal that no program has read yet (`FIONREAD` on its slave side,
/// opened for the moment through the master: complete lines in canonical mode).
pub fn unread_input(master: &OwnedFd) -> Option<u64> {
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let slave = ioctl_tiocgptpeer(master, flags).ok()?;
    rustix::io::ioctl_fionread(&slave).ok()
}

/// Discards the terminal's unread input (`tcflush(TCIFLUSH)` on its slave side); returns how
/// many bytes of complete lines it held (a partial line in canonical mode goes too).
pub fn discard_unread_input(master: &OwnedFd) -> Option<u64> {
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let slave = ioctl_tiocgptpeer(master, flags).ok()?;
    crate::process::discard_unread(&slave)
}

/// A file in memory holding `text`, for a program to inherit as
/// [`crate::shell::RC_DESCRIPTOR`]: on that very descriptor if this process does not use it,
/// so that std's pipe for exec errors, made during the spawn, cannot be it (the child puts the
/// file there just before exec).
fn memory_file_holding_rc_descriptor(text: &str) -> io::Result<OwnedFd> {
    use rustix::fs::{MemfdFlags, memfd_create};
    use std::io::Write as _;
    let mut file = std::fs::File::from(memfd_create("ptyhub-integration", MemfdFlags::CLOEXEC)?);
    file.write_all(text.as_bytes())?;
    let file = OwnedFd::from(file);
    let lowest = rustix::io::fcntl_dupfd_cloexec(&file, crate::shell::RC_DESCRIPTOR)?;
    if std::os::fd::AsRawFd::as_raw_fd(&lowest) == crate::shell::RC_DESCRIPTOR {
        Ok(lowest)
    } else {
        // Taken by the holder itself for its whole life: no pipe can be made on it either.
        Ok(file)
    }
}

/// Whether the terminal hides what is typed: canonical mode without echo (termios `ICANON`
/// set, `ECHO` cleared), as `read -s`, `sudo`, `passwd` and `getpass` set it. A line editor
/// (readline, zle) clears both and echoes by itself, so what it reads is not hidden. Read
/// through the master, which reports the terminal's modes on Linux.
pub fn hides_input(master: &OwnedFd) -> bool {
    use rustix::termios::LocalModes;
    rustix::termios::tcgetattr(master).is_ok_and(|t| {
        t.local_modes.contains(LocalModes::ICANON) && !t.local_modes.contains(LocalModes::ECHO)
    })
}

/// Gives a process about to exec an empty signal mask and default dispositions for the signals
/// the holder handles itself (it blocks them for its `signalfd`), so the program starts as
/// from a shell. Makes only async-signal-safe calls: for `pre_exec`.
#[allow(
    unsafe_code,
    reason = "libc signal calls between fork and exec, where std has nothing to offer"
)]
pub(super) fn reset_signals() {
    // SAFETY: sigemptyset/sigprocmask/signal are async-signal-safe and act on a local set.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        for sig in [
            libc::SIGHUP,
            libc::SIGPIPE,
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGCHLD,
        ] {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
}

/// Gives the child the normal priority, best effort: the server (and the holder it starts)
/// may run above it ([`crate::process::raise_server_priority`]), and the terminal's programs
/// are the work it serves, not part of it. Makes only async-signal-safe calls: for
/// `pre_exec`, after `setsid` (a new session is a new scheduler group, at the normal
/// priority).
#[allow(
    unsafe_code,
    reason = "setpriority between fork and exec, where std has nothing to offer"
)]
pub(super) fn normal_priority() {
    // SAFETY: a plain system call on the calling process.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 0);
    }
}

/// Starts the spec's program on `slave` and returns its pid. Consumes the slave descriptor.
pub fn spawn(
    spec: &HolderSpec,
    slave: OwnedFd,
    cgroup: Option<&crate::cgroup::tree::Joiner>,
) -> io::Result<u32> {
    let mut cmd = Command::new(&spec.program);
    // The descriptors of the cgroup's `cgroup.procs`, opened by the caller: the child joins
    // the terminal's cgroup before exec, so the program is in it from its first instruction.
    let cgroup_fds = cgroup
        .map(crate::cgroup::tree::Joiner::raw_fds)
        .unwrap_or_default();
    // A sandbox's writable root, mounted by the child in a mount namespace of its own.
    let root_layer = match &spec.sandbox {
        Some(guest) => super::root_layer::RootLayer::of(guest)?,
        None => None,
    };
    // The integration the program reads itself through (`shell::RC_DESCRIPTOR`): in memory,
    // so nothing is left of it on disk whatever happens.
    let rc_file = spec
        .rc_text
        .as_deref()
        .map(memory_file_holding_rc_descriptor)
        .transpose()?;
    let rc_fd = rc_file.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
    if let Some(user) = &spec.user {
        // The terminal is the account's own (its programs open `/dev/tty`), and the program
        // runs as it: std switches groups (dropping the supplementary ones) and then the user
        // before it changes to `cwd`.
        rustix::fs::fchown(
            &slave,
            Some(rustix::fs::Uid::from_raw(user.uid)),
            Some(rustix::fs::Gid::from_raw(user.gid)),
        )?;
        cmd.uid(user.uid).gid(user.gid);
    }
    cmd.args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spec.cwd)
        .stdin(Stdio::from(slave.try_clone()?))
        .stdout(Stdio::from(slave.try_clone()?))
        .stderr(Stdio::from(slave));
    #[allow(
        unsafe_code,
        reason = "pre_exec is unsafe by nature: the child's session and controlling tty"
    )]
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe system
    // calls on values it owns by copy; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            reset_signals();
            normal_priority();
            crate::cgroup::tree::Joiner::join_self(&cgroup_fds)?;
            if let Some(layer) = &root_layer {
                layer.mount_in_child()?;
            }
            // Mark, do not close: std's exec-error pipe must survive until exec.
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC);
            // After the marking: the one descriptor the program is meant to inherit.
            if let Some(fd) = rc_fd {
                let target = crate::shell::RC_DESCRIPTOR;
                let kept = if fd == target {
                    libc::fcntl(fd, libc::F_SETFD, 0)
                } else {
                    libc::dup2(fd, target)
                };
                if kept < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    // The program has its own descriptor of it.
    drop(rc_file);
    Ok(child.id())
}
