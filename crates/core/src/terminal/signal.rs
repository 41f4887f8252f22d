//! Signals to a terminal's foreground process group: the group that owns the terminal right
//! now, as its backend reads it from the kernel, never a guessed pid.

use crate::error::TerminalError;
use ptyhub_protocol::api::SignalResponse;

use super::TerminalHandle;
use crate::process::SIGNALS;

/// The signal number for an allowed name (`INT`, `sigint`, `SIGINT`).
pub fn parse(name: &str) -> Result<(&'static str, i32), TerminalError> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    SIGNALS
        .iter()
        .find(|(n, _)| *n == bare)
        .map(|&(n, signal)| (n, signal.as_raw()))
        .ok_or_else(|| {
            let names: Vec<&str> = SIGNALS.iter().map(|(n, _)| *n).collect();
            TerminalError::invalid(format!(
                "unknown signal {:?}: use one of {}",
                ptyhub_protocol::ids::truncate_for_message(name),
                names.join(", ")
            ))
        })
}

pub async fn signal(handle: &TerminalHandle, name: &str) -> Result<SignalResponse, TerminalError> {
    let (name, number) = parse(name)?;
    let signaled = handle.signal_foreground(number).await?;
    let probe = handle.probe().await?;
    Ok(SignalResponse {
        session_id: probe.id,
        signal: name.to_owned(),
        program: signaled.program,
        is_shell: signaled.is_shell,
    })
}

#[cfg(test)]
mod tests {
    use super::parse;
    use rustix::process::Signal;

    #[test]
    fn names_with_or_without_sig_are_accepted_and_others_refused() {
        assert_eq!(parse("INT").map(|p| p.1).ok(), Some(Signal::INT.as_raw()));
        assert_eq!(
            parse("sigterm").map(|p| p.1).ok(),
            Some(Signal::TERM.as_raw())
        );
        assert!(parse("SEGV").is_err());
        assert!(parse("9").is_err());
    }
}
