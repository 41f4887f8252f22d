//! The command timeline of a terminal (docs/compatibility.md#command-timeline): the pages of
//! its commands, and one command with a window of its output read back from the event log,
//! never re-run.
//!
//! The actor answers from its tracker's records ([`crate::tracker::TimelineEntry`]) with the
//! positions of each command's output; this module reads those events from the log on a
//! blocking thread (the actor never reads a log file itself), takes the text between the
//! command's `C` and `D` marks as the tracker would, and cuts the window
//! ([`crate::output_window`]). It does not keep the records or decide their ids (the tracker
//! does).

use ptyhub_protocol::api::{CommandEntry, CommandOutputResponse, CommandsResponse, WindowParams};
use ptyhub_protocol::event::{EventKind, Seq};

use super::TerminalHandle;
use crate::backend::TerminalLog;
use crate::error::TerminalError;
use crate::output_window::OutputWindow;
use crate::plain_text::PlainText;
use crate::tracker::{Mark, MarkScanner, OutputStart, Token};

/// Commands a page holds when the caller does not say.
pub const PAGE_DEFAULT: usize = 100;
/// Most commands a page holds.
pub const PAGE_MAX: usize = 1000;
/// The window of `GET …/commands/{n}` when the caller gives no window parameter: the first
/// 30,000 characters, as many whole lines as fit, with `next_offset` for the rest.
pub const DEFAULT_WINDOW_CHARS: u64 = 30_000;
/// Bytes of log read at a time.
const READ_STEP_BYTES: usize = 1024 * 1024;
/// Texts read back from logs at once, across every terminal (whole outputs, a send's or an
/// observe's output since a cursor). Each read builds its text in memory (up to what a log
/// keeps), so a burst of answers (twenty floods ending together) costs a few texts at a time
/// instead of twenty.
const WHOLE_READS_AT_ONCE: usize = 2;
static WHOLE_READS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(WHOLE_READS_AT_ONCE);

/// One command as the actor knows it: where its output lies, and how to read it.
#[derive(Clone, Debug)]
pub struct CommandSource {
    pub entry: CommandEntry,
    pub output_start: Option<OutputStart>,
    /// The output of a line the shell never ran.
    pub unstarted_output: Option<String>,
    pub log: TerminalLog,
    pub nonce: String,
}

/// A page of the timeline: commands with an id above `after`, oldest first, at most `limit`
/// (1 to [`PAGE_MAX`], default [`PAGE_DEFAULT`]).
pub async fn list(
    handle: &TerminalHandle,
    after: u64,
    limit: Option<usize>,
) -> Result<CommandsResponse, TerminalError> {
    let limit = match limit {
        None => PAGE_DEFAULT,
        Some(n) if (1..=PAGE_MAX).contains(&n) => n,
        Some(n) => {
            return Err(TerminalError::invalid(format!(
                "limit must be 1 to {PAGE_MAX}, not {n}"
            )));
        }
    };
    let (session_id, commands, has_more) = handle.commands(after, limit).await?;
    Ok(CommandsResponse {
        session_id,
        next_after: commands.last().map(|c| c.id),
        commands,
        has_more,
    })
}

/// Command `id` of the timeline with a window of its output (the first
/// [`DEFAULT_WINDOW_CHARS`] characters when `params` has no field).
pub async fn get(
    handle: &TerminalHandle,
    id: u64,
    params: &WindowParams,
) -> Result<CommandOutputResponse, TerminalError> {
    let window = OutputWindow::from_params(params)?
        .unwrap_or_else(|| OutputWindow::first_chars(DEFAULT_WINDOW_CHARS));
    let (session_id, source) = handle.command_source(id).await?;
    let source = source.ok_or_else(|| TerminalError::CommandNotFound { id: id.to_string() })?;
    let entry = source.entry.clone();
    let cut = read_output_then(source, move |text| window.apply(&text)).await?;
    Ok(CommandOutputResponse {
        session_id,
        command: entry,
        output: cut.text,
        window: cut.info,
    })
}

/// [`read_output`] on a blocking thread, then `then` on its text there too (a window's cut
/// costs CPU in proportion to the text), with at most two such reads
/// under way in the server.
pub async fn read_output_then<T: Send + 'static>(
    source: CommandSource,
    then: impl FnOnce(String) -> T + Send + 'static,
) -> Result<T, TerminalError> {
    read_log_off_runtime(move || read_output(&source).map(then)).await?
}

/// A read of the log that builds a text, on a blocking thread with at most two such reads
/// under way in the server: its CPU grows with the output (100 MB is a second), and on the
/// runtime thread it would hold every other request and terminal as long.
pub async fn read_log_off_runtime<T: Send + 'static>(
    read: impl FnOnce() -> T + Send + 'static,
) -> Result<T, TerminalError> {
    let _permit = WHOLE_READS
        .acquire()
        .await
        .map_err(|e| TerminalError::internal(format!("output reader failed: {e}")))?;
    tokio::task::spawn_blocking(read)
        .await
        .map_err(|e| TerminalError::internal(format!("output reader failed: {e}")))
}

/// Most events of output a read of the log since a cursor takes on the caller's thread (a
/// send's, an observe's): at most 64 KiB each, so milliseconds at worst. More are read with
/// [`read_log_off_runtime`].
pub const INLINE_LOG_READ_EVENTS: u64 = 16;

/// `read`, of the log after `after` up to about `now`: where it is asked when that is a few
/// events ([`INLINE_LOG_READ_EVENTS`]), else off the runtime thread.
pub async fn read_log_since<T: Send + 'static>(
    after: Seq,
    now: Seq,
    read: impl FnOnce() -> T + Send + 'static,
) -> Result<T, TerminalError> {
    if now.0.saturating_sub(after.0) <= INLINE_LOG_READ_EVENTS {
        Ok(read())
    } else {
        read_log_off_runtime(read).await
    }
}

/// The clean output of a command, read from the log: the text after its `C` mark up to its
/// end (`D`, the next prompt, or the end of the log while it runs), without the last newline.
pub fn read_output(source: &CommandSource) -> Result<String, TerminalError> {
    let Some(start) = source.output_start else {
        return Ok(source.unstarted_output.clone().unwrap_or_default());
    };
    let cannot_read =
        |e: std::io::Error| TerminalError::internal(format!("cannot read the event log: {e}"));
    let oldest = source.log.oldest_seq().map_err(cannot_read)?;
    if oldest.is_some_and(|oldest| oldest > start.seq) {
        return Err(TerminalError::cursor_expired(format!(
            "the output of command {} is older than the oldest event the log keeps",
            source.entry.id
        )));
    }
    let end = source.entry.end_seq;
    let mut reader = source.log.reader(Seq(start.seq.0.saturating_sub(1)));
    let mut scanner = MarkScanner::new(&source.nonce);
    let mut text = PlainText::new();
    let mut marks_to_skip = start.marks_before + 1;
    let mut events = Vec::new();
    'read: loop {
        events.clear();
        if reader
            .read(READ_STEP_BYTES, &mut events)
            .map_err(cannot_read)?
            == 0
        {
            break;
        }
        for event in events.drain(..) {
            if end.is_some_and(|end| event.seq > end) {
                break 'read;
            }
            let EventKind::Output { data } = event.kind else {
                continue;
            };
            for token in scanner.scan(&data) {
                match token {
                    Token::Mark(Mark::CommandStart) if marks_to_skip > 0 => marks_to_skip -= 1,
                    Token::Mark(Mark::CommandEnd { .. } | Mark::PromptStart)
                        if marks_to_skip == 0 =>
                    {
                        break 'read;
                    }
                    Token::Text(bytes) if marks_to_skip == 0 => text.feed(&bytes),
                    _ => {}
                }
            }
        }
    }
    let mut output = text.text();
    if output.ends_with('\n') {
        output.pop();
    }
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read of a few events runs where it is asked; one further back runs on a blocking
    /// thread, so the runtime thread that asked goes on meanwhile.
    #[tokio::test(flavor = "current_thread")]
    async fn a_read_far_back_runs_off_the_runtime_thread() -> Result<(), TerminalError> {
        let here = std::thread::current().id();
        let near = Seq(INLINE_LOG_READ_EVENTS);
        let thread = read_log_since(Seq::ZERO, near, || std::thread::current().id()).await?;
        assert_eq!(thread, here);
        let far = Seq(INLINE_LOG_READ_EVENTS + 1);
        let thread = read_log_since(Seq::ZERO, far, || std::thread::current().id()).await?;
        assert_ne!(thread, here);
        Ok(())
    }
}
