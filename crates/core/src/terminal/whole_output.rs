//! Answers that carry a command's whole output although the actor keeps only part of it.
//!
//! The command tracker keeps the running (or last) command's clean text in memory up to
//! [`LIVE_OUTPUT_MAX_BYTES`] (its head and its newest part, docs/memory.md). An answer built
//! from that text whose middle was dropped gets the whole text instead, read back from the
//! event log between the command's marks ([`timeline::read_output_then`], on a blocking thread
//! and a few at a time, as the timeline reads it); that is exactly the text the tracker would have built. This module
//! only decides when and does the swap on the handle's side; it keeps nothing.

use ptyhub_protocol::api::CommandStatus;

use super::{TerminalHandle, timeline};
use crate::plain_text::OMITTED_MARKER_END;
use crate::tracker::{LIVE_OUTPUT_ENDS_CHARS, LIVE_OUTPUT_MAX_BYTES};

/// How much of a long output an answer needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputExtent {
    /// All of it: read back from the log when memory kept only part of it.
    Whole,
    /// Only its first and last characters, at most [`LIVE_OUTPUT_ENDS_CHARS`] in all (a
    /// truncated answer): the kept text always has them, so the log is not read.
    Ends,
}

impl OutputExtent {
    /// What a truncated answer of `chars` characters (half from each end) needs.
    pub fn for_truncation(chars: usize) -> Self {
        if chars <= LIVE_OUTPUT_ENDS_CHARS {
            Self::Ends
        } else {
            Self::Whole
        }
    }
}

/// Whether `text` may be a kept part rather than the whole: a cut text is longer than its
/// head and holds the omission marker. A false positive only costs a read of the log.
pub fn may_be_cut(text: &str) -> bool {
    text.len() >= LIVE_OUTPUT_MAX_BYTES / 2 && text.contains(OMITTED_MARKER_END)
}

/// The whole output of command `id` (the running or last command when `None`) if `output`
/// was cut, and the command is still the one whose status is `status`; `None` otherwise or
/// when the log cannot give it (the caller keeps what it has).
pub async fn restore(
    handle: &TerminalHandle,
    id: Option<u64>,
    status: CommandStatus,
    output: &str,
) -> Option<String> {
    if !may_be_cut(output) {
        return None;
    }
    let id = match id {
        Some(id) => id,
        None => handle.shell_state().await.ok()?.last_command?.id,
    };
    let (_, source) = handle.command_source(id).await.ok()?;
    // A command that started in between is not the one the answer describes.
    let source = source.filter(|source| source.entry.status == status)?;
    match timeline::read_output_then(source, |text| text).await {
        Ok(text) => Some(text),
        Err(error) => {
            tracing::debug!(%error, id, "cannot read a command's whole output back");
            None
        }
    }
}
