//! The tmux control-mode client a tmux terminal's holder runs (`tmux -S <socket> -C …` over
//! pipes): starting it with the command list that creates the terminal's session, and decoding
//! the pane output it reports. What the holder does with the lines is `control`'s.

use std::io;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};

use super::{HolderSpec, TmuxSpec};

/// The control client: its pipes and what is not yet a whole line.
pub(super) struct Control {
    pub(super) stdin: ChildStdin,
    pub(super) stdout: ChildStdout,
    pub(super) partial: Vec<u8>,
}

/// Starts the control client: for a new terminal one command list that starts a private
/// server with the terminal's environment, sets its options and creates the session; after a
/// holder's death, an attach to the session that still runs.
pub(super) fn spawn_control(
    spec: &HolderSpec,
    tmux: &TmuxSpec,
    cgroup: Option<&crate::cgroup::tree::Joiner>,
) -> io::Result<Control> {
    let mut cmd = Command::new(&tmux.program);
    let cgroup_fds = cgroup
        .map(crate::cgroup::tree::Joiner::raw_fds)
        .unwrap_or_default();
    cmd.arg("-S")
        .arg(&tmux.socket)
        .args(["-f", "/dev/null", "-C"]);
    if tmux.is_reattach {
        cmd.args(["attach-session", "-t", &format!("={}", tmux.session)]);
    } else {
        let term = spec
            .env
            .iter()
            .find(|(key, _)| key == "TERM")
            .map_or("xterm-256color", |(_, value)| value.as_str());
        let (cols, rows) = (spec.cols.to_string(), spec.rows.to_string());
        cmd.args(["start-server", ";"])
            .args(["set-option", "-g", "default-terminal", term, ";"])
            .args(["set-option", "-g", "remain-on-exit", "on", ";"])
            .args(["new-session", "-s", &tmux.session, "-x", &cols, "-y", &rows])
            .arg("-c")
            .arg(&spec.cwd)
            .arg("--")
            .arg(&spec.program)
            .args(&spec.args)
            // Set once the session exists: tmux 3.3 crashes when a server starts with it.
            .args([";", "set-option", "-g", "window-size", "manual"]);
    }
    // The server inherits this environment as the panes' global one.
    cmd.env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .env_remove("TMUX")
        .current_dir(&spec.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    #[allow(
        unsafe_code,
        reason = "pre_exec is unsafe by nature: the holder's signal mask must not reach tmux"
    )]
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe system
    // calls on values it owns by copy; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            super::pty::reset_signals();
            super::pty::normal_priority();
            crate::cgroup::tree::Joiner::join_self(&cgroup_fds)
        });
    }
    let mut child = cmd.spawn()?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(io::Error::other("the tmux client's pipes are missing"));
    };
    set_nonblocking(&stdout)?;
    Ok(Control {
        stdin,
        stdout,
        partial: Vec::new(),
    })
}

fn set_nonblocking(fd: &impl AsFd) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(fd)?;
    rustix::fs::fcntl_setfl(fd, flags | rustix::fs::OFlags::NONBLOCK)?;
    Ok(())
}

/// Decodes a `%output` value: tmux escapes bytes below 32 and `\` as three octal digits after
/// a backslash; every other byte is the pane's own.
pub(super) fn decode_output(data: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < data.len() {
        let byte = data[i];
        if byte == b'\\'
            && let Some(digits) = data.get(i + 1..i + 4)
            && digits.iter().all(|d| (b'0'..=b'7').contains(d))
        {
            let value = digits
                .iter()
                .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
            out.push(u8::try_from(value).unwrap_or(u8::MAX));
            i += 4;
        } else {
            out.push(byte);
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::decode_output;

    #[test]
    fn output_escapes_decode_to_the_panes_bytes() {
        let mut out = Vec::new();
        decode_output(br"a\033]133;A\007\134x\015\012caf\303\251 \\z", &mut out);
        assert_eq!(out, b"a\x1b]133;A\x07\\x\r\ncaf\xc3\xa9 \\\\z".to_vec());
        let mut raw = Vec::new();
        decode_output("é".as_bytes(), &mut raw);
        assert_eq!(raw, "é".as_bytes());
    }
}
