//! `send`: type text, then return when the terminal needs something, with the reason — read
//! from the kernel by the terminal's backend, not guessed from silence where the kernel can
//! tell:
//! 1. `session_exit` — the terminal's program ended;
//! 2. `stdin_read` — once output has settled (or, after a typed command, as soon as the
//!    shell's marks say that it ended and the line editor is back: the shell has printed all
//!    it prints before it reads), a process of the foreground group is blocked
//!    reading the terminal itself (fd 0 or `/dev/tty`: the shell at its prompt, a REPL,
//!    `read`, a `[Y/n]` question, a pager; a password prompt when echo is off), and what the
//!    send typed has left the terminal's input queue;
//! 3. `inferred_idle` — output was quiet for the idle window and nothing reads the terminal
//!    (the answer says what the program waits on when the kernel tells: a socket, a pipe…);
//! 4. `timeout` — the deadline passed (the program goes on).
//!
//! Nothing is typed before the shell can take it: a new shell's first prompt and its line
//! editor are waited for, as exec waits for them. The answer carries everything printed since
//! the caller's previous `send` or `observe` answer on this terminal (since the send began for
//! a first call), its newest characters when that is long, and a cursor after it.

use std::time::Duration;

use crate::error::TerminalError;
use ptyhub_protocol::api::{InputReceipt, SendResponse, WaitReason, WaitsOn};
use ptyhub_protocol::event::{EventKind, Seq};
use tokio::time::Instant;

use super::{CommandBrief, Foreground, TerminalHandle};
use crate::backend::TerminalLog;
use crate::plain_text::PlainText;
use crate::terminal::observe::encode_cursor;
use crate::terminal::timeline::read_log_since;

/// How often the terminal's state is looked at while waiting.
const POLL_EVERY: Duration = Duration::from_millis(25);
/// Output must have been quiet this long before a reading process counts as waiting.
const SETTLE: Duration = Duration::from_millis(60);
/// How often the host's facts are looked at once the shell is back at its prompt after the
/// typed command: its line editor is about to read, and the answer is due the moment it does.
const PROMPT_POLL_EVERY: Duration = Duration::from_millis(1);
/// Most characters of output returned (the newest are kept).
pub const SEND_OUTPUT_MAX_CHARS: usize = 16_000;
/// How long a send waits for a new shell's first prompt before it types anyway.
const READY_WAIT: Duration = Duration::from_secs(20);
/// How long a shell at its prompt may take to open its line editor (bracketed paste on)
/// before the send types anyway (an editor configured without bracketed paste).
const EDITOR_WAIT: Duration = Duration::from_secs(2);

/// What to send and how long to wait.
#[derive(Clone, Debug)]
pub struct SendRequest {
    pub text: Vec<u8>,
    pub deadline: Duration,
    pub idle_window: Duration,
    /// Who sends (the owner acting), so the answer can hold all it has not been given yet.
    pub caller: String,
    /// At the deadline, discard what was typed and is still unread.
    pub flush_on_timeout: bool,
    /// The part of the output the answer carries; `None`: its newest characters.
    pub window: Option<crate::output_window::OutputWindow>,
    /// Who types (the log's `pty.input` event names them, and the input lease applies).
    pub source: ptyhub_protocol::event::InputSource,
    /// What the text waits for while someone else holds the keyboard (within the deadline).
    pub on_lease: ptyhub_protocol::api::OnLease,
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
    let started = Instant::now();
    let deadline = started + request.deadline;
    if !request.text.is_empty() {
        let writer = super::live::Writer::caller(request.source.clone());
        handle
            .wait_for_keyboard(&writer, request.on_lease, request.deadline)
            .await
            .inspect_err(|error| crate::stats::input_refused(error, request.text.len()))?;
    }
    let mut seq = handle.seq();
    let (now_command, is_starting) = wait_until_ready(handle, &mut seq, deadline).await?;
    let start_seq = *seq.borrow_and_update();
    let mark = handle
        .read_mark(&request.caller)
        .filter(|mark| mark.seq <= start_seq);
    // A shell still starting has printed nothing anyone was given: all of it is news.
    let first_unseen = if is_starting { Seq::ZERO } else { start_seq };
    let output_from = mark.map_or(first_unseen, |m| m.seq);
    // A command that ended since the caller's last answer is news to it.
    let before = match mark {
        Some(mark) if mark.command.is_some() => mark.command,
        _ => now_command,
    };
    // A shell whose startup files still run gets nothing typed: they would read it.
    let mut input = if request.text.is_empty() || is_starting {
        None
    } else {
        Some(handle.input(request.text, request.source).await?)
    };
    let typed_at = Instant::now();
    // The command known before the text was typed: one after it started from what was typed.
    // Asked after the typing, a command as quick as `true` could already have ended, be taken
    // for the known one, and leave the answer to the 60 ms settle (1 send in 50 or so).
    let typed_after = input.as_ref().map(|_| now_command.map(|c| c.id));
    let mut last_output = typed_at;
    let mut facts = None;
    let reason = loop {
        if seq.has_changed().unwrap_or(false) {
            seq.borrow_and_update();
            last_output = Instant::now();
        }
        let probe = handle.probe().await?;
        if probe.is_exited {
            break WaitReason::SessionExit;
        }
        // The shell's own marks say that a command started since the typing has ended and
        // the line editor is back: the shell printed all it prints before it reads, so no
        // settling is needed, only the host's word that it reads and took everything typed.
        let is_prompt_back = match typed_after {
            Some(known) => is_prompt_back(&handle.shell_state().await?, known),
            None => false,
        };
        let now = Instant::now();
        let quiet = now - last_output;
        // The process facts only matter once output is quiet (while it flows, nobody waits)
        // or the prompt is back.
        let (is_reading, is_consumed, is_current) =
            if is_prompt_back || quiet >= SETTLE.min(request.idle_window) {
                facts = handle.foreground().await?;
                // Facts ahead of what the actor applied are judged on the next look: its view of
                // the output (quiet or not, the command's marks) is older than they are.
                let applied = *seq.borrow();
                let current = facts.as_ref().is_none_or(|f| f.is_current(applied));
                let reading = facts.as_ref().is_some_and(|f| f.is_reading);
                let consumed = facts
                    .as_ref()
                    .is_none_or(|f| f.input_queued.is_none_or(|queued| queued == 0));
                (reading, consumed, current)
            } else {
                (false, false, false)
            };
        let is_settled = is_prompt_back || (quiet >= SETTLE && now - typed_at >= SETTLE);
        if is_current && is_settled && is_reading && is_consumed {
            break WaitReason::StdinRead;
        }
        if is_current && quiet >= request.idle_window && !is_reading {
            break WaitReason::InferredIdle;
        }
        if now >= deadline {
            break WaitReason::Timeout;
        }
        let every = if is_prompt_back {
            PROMPT_POLL_EVERY
        } else {
            POLL_EVERY
        };
        tokio::select! {
            _ = seq.changed() => {}
            () = tokio::time::sleep(every.min(deadline.saturating_duration_since(now))) => {}
        }
    };
    if reason == WaitReason::Timeout && request.flush_on_timeout {
        let flushed = handle.discard_unread_input().await?;
        let receipt = input.get_or_insert_with(InputReceipt::default);
        receipt.discarded = flushed.discarded;
    }
    let probe = handle.probe().await?;
    let foreground = if probe.is_exited {
        None
    } else if facts.is_some() && reason != WaitReason::Timeout {
        facts
    } else {
        handle.foreground().await?
    };
    let shell = if probe.is_exited {
        None
    } else {
        Some(handle.shell_state().await?)
    };
    let after = shell.as_ref().and_then(|s| s.last_command);
    let is_at_prompt =
        shell.is_some_and(|s| s.is_at_prompt) && foreground.as_ref().is_some_and(|f| f.is_shell);
    let ended = after.filter(|a| !a.status.is_running() && is_new(before, *a));
    let since = {
        let (log, is_short) = (probe.log.clone(), request.window.is_none());
        let now = *handle.seq().borrow();
        read_log_since(output_from, now, move || {
            output_since(&log, output_from, is_short)
        })
        .await?
    };
    let (mut output, last_seq) = (since.text, since.last_seq);
    // A full-screen program's drawing is no text to read: its rendered screen is.
    let (is_alternate_screen, is_full_screen) = match &foreground {
        Some(facts) if !facts.is_shell => {
            let view = handle.view().await?;
            let is_drawn = view.is_alternate_screen || (!facts.is_canonical && since.is_drawn);
            if is_drawn {
                output = rendered(&view.lines);
            }
            (view.is_alternate_screen, is_drawn)
        }
        _ => (false, false),
    };
    let window = request.window.as_ref().map(|window| {
        let cut = window.apply(&output);
        output = cut.text;
        cut.info
    });
    handle.set_read_mark(&request.caller, last_seq, Some(after));
    Ok(SendResponse {
        cursor: encode_cursor(&probe.id, last_seq),
        window,
        session_id: probe.id,
        wait_reason: reason,
        is_password_prompt: reason == WaitReason::StdinRead
            && foreground.as_ref().is_some_and(|f| f.is_password),
        output,
        truncated: since.truncated && !is_full_screen,
        waits_on: foreground
            .as_ref()
            .and_then(|f| f.waits_on)
            .filter(|w| reason != WaitReason::StdinRead || *w == WaitsOn::Terminal),
        input_queued: foreground.as_ref().and_then(|f| f.input_queued),
        input,
        is_alternate_screen,
        is_full_screen,
        input_mode: foreground.as_ref().map(Foreground::input_mode),
        is_echo: foreground.as_ref().map(|f| f.is_echo),
        hint: if is_starting {
            Some(STARTING_HINT.to_owned())
        } else {
            foreground.as_ref().and_then(Foreground::leave_hint)
        },
        foreground_program: foreground.and_then(|f| f.program),
        is_at_prompt,
        command_id: ended.map(|c| c.id),
        command_exit_code: ended.and_then(|c| c.exit_code),
        state: probe.state,
        exit_code: probe.exit_code,
        signal: probe.signal,
    })
}

/// A screen's rows as text, without its trailing empty rows.
fn rendered(lines: &[String]) -> String {
    let used = lines
        .iter()
        .rposition(|line| !line.trim_end().is_empty())
        .map_or(0, |last| last + 1);
    lines[..used].join("\n")
}

/// Whether the shell is back at its prompt, its line editor ready, after a command that
/// started since `known` was the last one (`None`: none had run).
fn is_prompt_back(shell: &super::ShellState, known: Option<u64>) -> bool {
    shell.is_at_prompt
        && shell.is_ready
        && !shell.is_editor_silent
        && shell
            .last_command
            .is_some_and(|c| !c.status.is_running() && known.is_none_or(|id| c.id > id))
}

/// Whether `after` is a command that ended since `before` was looked at.
fn is_new(before: Option<CommandBrief>, after: CommandBrief) -> bool {
    before.is_none_or(|b| b.id != after.id || b.status.is_running())
}

/// The hint of a send to a shell that has not shown its first prompt.
const STARTING_HINT: &str = "the shell has not shown its first prompt: its startup files are still running (the output shows what they printed), and nothing was typed";

/// Waits (at most until `deadline`) until input typed now reaches its reader as typed;
/// returns the running or last command as it was then, and whether the shell is still
/// starting (its first prompt not shown).
async fn wait_until_ready(
    handle: &TerminalHandle,
    seq: &mut tokio::sync::watch::Receiver<Seq>,
    deadline: Instant,
) -> Result<(Option<CommandBrief>, bool), TerminalError> {
    let started = Instant::now();
    let limit = deadline.min(started + READY_WAIT);
    let mut at_prompt_since = None;
    loop {
        let state = handle.shell_state().await?;
        let now = Instant::now();
        if state.is_at_prompt {
            at_prompt_since.get_or_insert(now);
        } else {
            at_prompt_since = None;
        }
        let editor_late = at_prompt_since.is_some_and(|since| now - since >= EDITOR_WAIT);
        let is_silent_editor_reading =
            state.is_editor_silent && handle.silent_editor_reads().await?;
        if state.is_ready || is_silent_editor_reading || editor_late || now >= limit {
            return Ok((state.last_command, state.is_starting));
        }
        tokio::select! {
            _ = seq.changed() => {}
            () = tokio::time::sleep(POLL_EVERY.min(limit.saturating_duration_since(now))) => {}
        }
    }
}

/// The output after a `seq`, as `send` answers it.
struct OutputSince {
    /// Its clean text (the newest characters when long).
    text: String,
    /// The front of `text` was dropped.
    truncated: bool,
    /// The `seq` of the last event read.
    last_seq: Seq,
    /// It moves the cursor to absolute positions or erases the display: a program draws the
    /// screen rather than printing lines.
    is_drawn: bool,
}

/// Most characters of output a send with a window cuts its window from (the newest are kept).
const WINDOWED_OUTPUT_MAX_CHARS: usize = 4_000_000;

/// The output after `after`: its newest [`SEND_OUTPUT_MAX_CHARS`] characters when `is_short`,
/// else its newest [`WINDOWED_OUTPUT_MAX_CHARS`] (for a window to be cut from).
fn output_since(log: &TerminalLog, after: Seq, is_short: bool) -> OutputSince {
    let mut text = PlainText::new();
    let mut last_seq = after;
    let mut is_drawn = false;
    let _ = log.read_events(after, |event| {
        last_seq = last_seq.max(event.seq);
        if let EventKind::Output { data } = event.kind {
            is_drawn = is_drawn || draws_screen(&data);
            text.feed(&data);
        }
    });
    let text = text.text();
    let count = text.chars().count();
    let keep = if is_short {
        SEND_OUTPUT_MAX_CHARS
    } else {
        WINDOWED_OUTPUT_MAX_CHARS
    };
    let truncated = count > keep;
    let text = if truncated {
        text.chars().skip(count - keep).collect()
    } else {
        text
    };
    OutputSince {
        text,
        truncated,
        last_seq,
        is_drawn,
    }
}

/// Whether `data` holds a cursor position (`CSI row;col H` / `f`) or a display erase
/// (`CSI J`), the sequences of a program that draws the screen.
fn draws_screen(data: &[u8]) -> bool {
    data.windows(2)
        .enumerate()
        .filter(|(_, pair)| pair == b"\x1b[")
        .any(|(at, _)| {
            let params = data[at + 2..]
                .iter()
                .position(|b| !(b.is_ascii_digit() || *b == b';'))
                .map(|len| (len, data[at + 2 + len]));
            matches!(params, Some((_, b'H' | b'f' | b'J')))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_positions_and_erases_are_drawing_and_colours_are_not() {
        assert!(draws_screen(b"\x1b[H\x1b[2Jtop - 14:30"));
        assert!(draws_screen(b"x\x1b[12;40Hy"));
        assert!(!draws_screen(b"\x1b[1;31mred\x1b[0m plain\r\n"));
        assert!(!draws_screen(b"\x1b[K\x1b[?2004h"));
    }

    #[test]
    fn a_rendered_screen_leaves_out_its_empty_rows() {
        let lines = [
            "top".to_owned(),
            "  PID".to_owned(),
            String::new(),
            "  ".to_owned(),
        ];
        assert_eq!(rendered(&lines), "top\n  PID");
        assert_eq!(rendered(&[String::new()]), "");
    }
}
