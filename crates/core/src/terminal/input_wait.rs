//! Waiting for a running command that may stop to ask for input: the wait ends when the
//! command ends, or as soon as — its output settled, the shell having started it — a process
//! of the terminal's foreground group is blocked reading the terminal with nothing typed left
//! unread (a program, or the shell's own `read`), the same kernel facts `send` reads
//! ([`super::send`]). An exec whose command asks a question
//! therefore answers `running` with the question, not after its timeout.
//!
//! The facts must agree with the actor's view: they count only once the actor has applied
//! the log as far as it was when they were read, and only when two looks in a row, with no
//! output between, see the question (a shell back at its prompt reads the terminal too, and
//! its command's end mark may still be on its way).
//!
//! While a command runs quietly the facts are looked at with a growing pause (from 25 ms to
//! half a second), so a long silent command costs a few `/proc` reads a second, not forty.

use std::time::Duration;

use ptyhub_protocol::api::{CommandResult, WaitReason};
use tokio::time::Instant;

use super::{OutputExtent, TerminalHandle};
use crate::error::TerminalError;

/// Output must have been quiet this long before a reading process counts as waiting.
const SETTLE: Duration = Duration::from_millis(60);
/// The first pause between two looks at the facts while output is quiet.
const FIRST_LOOK_AFTER: Duration = Duration::from_millis(25);
/// The longest pause between two looks.
const LOOK_AT_MOST_EVERY: Duration = Duration::from_millis(500);

/// How a wait for a command ended.
#[derive(Clone, Debug)]
pub struct CommandWait {
    /// The command as it stands: ended, or still running.
    pub result: CommandResult,
    /// `stdin_read` when the wait ended because the running command waits for input.
    pub wait_reason: Option<WaitReason>,
    /// The command's clean output so far, when it is still running.
    pub output_so_far: Option<String>,
}

/// Waits (at most `limit`, forever without one) until command `id` (or the running one) ends
/// or waits for input; the result carries `extent` of a long output, and the console history
/// only `with_console` (its up to 100 records are not copied for an answer that drops them).
pub async fn wait_command_or_input(
    handle: &TerminalHandle,
    id: Option<u64>,
    limit: Option<Duration>,
    extent: OutputExtent,
    with_console: bool,
) -> Result<CommandWait, TerminalError> {
    let ended = handle.wait_command_as(id, limit, extent, with_console);
    tokio::pin!(ended);
    let mut seq = handle.seq();
    seq.borrow_and_update();
    let mut last_output = Instant::now();
    let mut pause = FIRST_LOOK_AFTER;
    // A question is believed when two looks in a row see it with no output between (the
    // command's end mark may still be on its way to the log when the first look is taken).
    let mut seen_asking = false;
    loop {
        tokio::select! {
            result = &mut ended => {
                return Ok(CommandWait { result: result?, wait_reason: None, output_so_far: None });
            }
            changed = seq.changed() => {
                if changed.is_err() {
                    // The actor is gone: the wait's own answer says how.
                    let result = ended.await?;
                    return Ok(CommandWait { result, wait_reason: None, output_so_far: None });
                }
                last_output = Instant::now();
                pause = FIRST_LOOK_AFTER;
                seen_asking = false;
            }
            () = tokio::time::sleep(pause.max(SETTLE.saturating_sub(last_output.elapsed()))) => {
                if last_output.elapsed() < SETTLE {
                    continue;
                }
                match asks_for_input(handle, id).await? {
                    Some(wait) if seen_asking => return Ok(wait),
                    Some(_) => {
                        seen_asking = true;
                        pause = FIRST_LOOK_AFTER;
                        continue;
                    }
                    None => seen_asking = false,
                }
                pause = (pause * 2).min(LOOK_AT_MOST_EVERY);
            }
        }
    }
}

/// The command, when it is running and a program of it waits for input on the terminal.
async fn asks_for_input(
    handle: &TerminalHandle,
    id: Option<u64>,
) -> Result<Option<CommandWait>, TerminalError> {
    let Some(facts) = handle.foreground().await? else {
        return Ok(None);
    };
    // Facts ahead of what the actor applied would be judged against stale marks (the shell
    // back at its prompt, its command's end not applied yet): look again later.
    let applied = *handle.seq().borrow();
    let is_waiting = facts.is_current(applied)
        && facts.is_reading
        && facts.input_queued.is_none_or(|queued| queued == 0);
    if !is_waiting {
        return Ok(None);
    }
    // Before the shell starts the command its line editor reads the terminal: that is no
    // question of the command.
    let shell = handle.shell_state().await?;
    let is_this_command = shell
        .last_command
        .is_some_and(|c| id.is_none_or(|id| id == c.id));
    if !shell.is_command_running || !is_this_command {
        return Ok(None);
    }
    // Its output is the progress below: nothing of it is read from the log here.
    let result = handle.command_result_for(id, OutputExtent::Ends).await?;
    if !result.status.is_running() {
        return Ok(None);
    }
    let progress = handle.command_progress().await?;
    Ok(Some(CommandWait {
        result,
        wait_reason: Some(WaitReason::StdinRead),
        output_so_far: Some(progress.output),
    }))
}
