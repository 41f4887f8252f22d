//! `send`: type text, then return when the terminal needs something, with the reason — read
//! from the kernel by the terminal's backend, not guessed from silence where the kernel can
//! tell:
//! 1. `session_exit` — the terminal's program ended;
//! 2. `stdin_read` — once output has settled, a process of the foreground group is blocked
//!    reading the terminal (the shell at its prompt, a REPL, `read`, a `[Y/n]` question; a
//!    password prompt when echo is off);
//! 3. `inferred_idle` — output was quiet for the idle window and nothing reads;
//! 4. `timeout` — the deadline passed (the program goes on).
//!
//! The answer carries what was printed since the send began.

use std::time::Duration;

use crate::error::TerminalError;
use ptyhub_protocol::api::{SendResponse, WaitReason};
use ptyhub_protocol::event::{EventKind, Seq};
use tokio::time::Instant;

use super::TerminalHandle;
use crate::backend::TerminalLog;
use crate::plain_text::PlainText;

/// How often the terminal's state is looked at while waiting.
const POLL_EVERY: Duration = Duration::from_millis(25);
/// Output must have been quiet this long before a reading process counts as waiting.
const SETTLE: Duration = Duration::from_millis(60);
/// Most characters of output returned (the newest are kept).
pub const SEND_OUTPUT_MAX_CHARS: usize = 16_000;

/// What to send and how long to wait.
#[derive(Clone, Debug)]
pub struct SendRequest {
    pub text: Vec<u8>,
    pub deadline: Duration,
    pub idle_window: Duration,
}

pub async fn send(
    handle: &TerminalHandle,
    request: SendRequest,
) -> Result<SendResponse, TerminalError> {
    let _exclusive = handle.try_send_lock()?;
    let probe = handle.probe().await?;
    if probe.is_exited {
        return Err(TerminalError::NotRunning { id: probe.id });
    }
    let mut seq = handle.seq();
    let start_seq = *seq.borrow_and_update();
    let started = Instant::now();
    if !request.text.is_empty() {
        handle.input(request.text).await?;
    }
    let deadline = started + request.deadline;
    let mut last_output = Instant::now();
    let reason = loop {
        if seq.has_changed().unwrap_or(false) {
            seq.borrow_and_update();
            last_output = Instant::now();
        }
        let probe = handle.probe().await?;
        if probe.is_exited {
            break WaitReason::SessionExit;
        }
        let now = Instant::now();
        let quiet = now - last_output;
        // The process facts only matter once output is quiet: while it flows, nobody waits.
        let is_reading = if quiet >= SETTLE.min(request.idle_window) {
            let foreground = handle.foreground().await?;
            foreground.as_ref().is_some_and(|f| f.is_reading)
        } else {
            false
        };
        if quiet >= SETTLE && now - started >= SETTLE && is_reading {
            break WaitReason::StdinRead;
        }
        if quiet >= request.idle_window && !is_reading {
            break WaitReason::InferredIdle;
        }
        if now >= deadline {
            break WaitReason::Timeout;
        }
        tokio::select! {
            _ = seq.changed() => {}
            () = tokio::time::sleep(POLL_EVERY.min(deadline.saturating_duration_since(now))) => {}
        }
    };
    let probe = handle.probe().await?;
    let foreground = if probe.is_exited {
        None
    } else {
        handle.foreground().await?
    };
    let (output, truncated) = output_since(&probe.log, start_seq);
    Ok(SendResponse {
        session_id: probe.id,
        wait_reason: reason,
        is_password_prompt: reason == WaitReason::StdinRead
            && foreground.as_ref().is_some_and(|f| f.is_password),
        output,
        truncated,
        foreground_program: foreground.and_then(|f| f.program),
        state: probe.state,
        exit_code: probe.exit_code,
        signal: probe.signal,
    })
}

/// The clean text of the output after `after`, and whether its front was dropped.
fn output_since(log: &TerminalLog, after: Seq) -> (String, bool) {
    let mut text = PlainText::new();
    let _ = log.read_events(after, |event| {
        if let EventKind::Output { data } = event.kind {
            text.feed(&data);
        }
    });
    let text = text.text();
    let count = text.chars().count();
    if count <= SEND_OUTPUT_MAX_CHARS {
        return (text, false);
    }
    (
        text.chars().skip(count - SEND_OUTPUT_MAX_CHARS).collect(),
        true,
    )
}
