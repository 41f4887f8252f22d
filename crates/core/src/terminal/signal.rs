//! Signals to a terminal's foreground process group (seed 002): the group that owns the
//! terminal right now, read from the kernel, never a guessed pid.

use ptyhub_protocol::api::SignalResponse;
use ptyhub_protocol::error::{ApiError, ErrorCode};

use super::TerminalHandle;
use crate::process;

/// The signals a client may send, by name.
const ALLOWED: [(&str, i32); 10] = [
    ("INT", libc::SIGINT),
    ("TERM", libc::SIGTERM),
    ("KILL", libc::SIGKILL),
    ("HUP", libc::SIGHUP),
    ("QUIT", libc::SIGQUIT),
    ("TSTP", libc::SIGTSTP),
    ("CONT", libc::SIGCONT),
    ("WINCH", libc::SIGWINCH),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
];

/// The signal number for an allowed name (`INT`, `sigint`, `SIGINT`).
pub fn parse(name: &str) -> Result<(&'static str, i32), ApiError> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    ALLOWED
        .iter()
        .find(|(n, _)| *n == bare)
        .copied()
        .ok_or_else(|| {
            let names: Vec<&str> = ALLOWED.iter().map(|(n, _)| *n).collect();
            ApiError::invalid(format!(
                "unknown signal {:?}: use one of {}",
                ptyhub_protocol::ids::truncate_for_message(name),
                names.join(", ")
            ))
        })
}

pub async fn signal(handle: &TerminalHandle, name: &str) -> Result<SignalResponse, ApiError> {
    let (name, number) = parse(name)?;
    let probe = handle.probe().await?;
    let not_running = || {
        ApiError::new(
            ErrorCode::SessionNotRunning,
            format!("session {} is not running (its program exited)", probe.id),
        )
    };
    let pid = probe
        .pid
        .filter(|_| !probe.is_exited)
        .ok_or_else(not_running)?;
    let foreground = process::foreground(pid).ok_or_else(not_running)?;
    // SAFETY: killpg on the terminal's own foreground group, with an allowed signal number.
    let rc = unsafe { libc::killpg(foreground.pgid as libc::pid_t, number) };
    if rc != 0 {
        return Err(ApiError::internal(format!(
            "cannot signal the foreground group: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(SignalResponse {
        session_id: probe.id,
        signal: name.to_owned(),
        program: foreground.program,
        is_shell: foreground.pgid == pid,
    })
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn names_with_or_without_sig_are_accepted_and_others_refused() {
        assert_eq!(parse("INT").map(|p| p.1).ok(), Some(libc::SIGINT));
        assert_eq!(parse("sigterm").map(|p| p.1).ok(), Some(libc::SIGTERM));
        assert!(parse("SEGV").is_err());
        assert!(parse("9").is_err());
    }
}
