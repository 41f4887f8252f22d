//! Reading a terminal without changing it (docs/compatibility.md#observe): snapshots, opaque
//! cursors and deltas, and scrollback pages.
//!
//! A cursor names a terminal and a `seq` of its event log; it is opaque to clients
//! (`c1.<hex>`). A cursor of another terminal is `INVALID_CURSOR`; one older than the oldest
//! event the log keeps is `CURSOR_EXPIRED` (retryable: observe again without a cursor).

use crate::error::TerminalError;
use ptyhub_protocol::api::{ObserveResponse, ScrollbackResponse, Snapshot};
use ptyhub_protocol::event::{Event, EventKind, Seq};

use super::TerminalHandle;
use crate::backend::TerminalLog;
use crate::plain_text::PlainText;
use crate::terminal::send::SEND_OUTPUT_MAX_CHARS;
use crate::terminal::timeline::read_log_since;

/// Most lines one scrollback page returns.
pub const SCROLLBACK_PAGE_MAX: usize = 1000;
/// Bytes of event log a delta reads at a time.
const DELTA_READ_BYTES: usize = 1024 * 1024;

pub fn encode_cursor(id: &str, seq: Seq) -> String {
    let raw = format!("{id}:{seq}");
    let hex: String = raw.bytes().map(|b| format!("{b:02x}")).collect();
    format!("c1.{hex}")
}

fn decode_cursor(cursor: &str, id: &str) -> Result<Seq, TerminalError> {
    let invalid = || TerminalError::InvalidCursor {
        detail: "invalid cursor for this terminal".to_owned(),
    };
    let hex = cursor.strip_prefix("c1.").ok_or_else(invalid)?;
    if hex.len() % 2 != 0 || hex.len() > 512 {
        return Err(invalid());
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect();
    let raw = String::from_utf8(bytes.ok_or_else(invalid)?).map_err(|_| invalid())?;
    let (cursor_id, seq) = raw.rsplit_once(':').ok_or_else(invalid)?;
    if cursor_id != id {
        return Err(invalid());
    }
    seq.parse().map(Seq).map_err(|_| invalid())
}

pub async fn snapshot(handle: &TerminalHandle) -> Result<(Snapshot, String, Seq), TerminalError> {
    let screen = handle.screen().await?;
    let foreground = handle.foreground().await?;
    let snapshot = Snapshot {
        screen: screen.screen,
        cols: screen.cols,
        rows: screen.rows,
        cursor_row: screen.cursor_row,
        cursor_col: screen.cursor_col,
        is_alternate_screen: screen.is_alternate_screen,
        title: screen.title,
        state: screen.state,
        input_mode: foreground.as_ref().map(super::Foreground::input_mode),
        is_echo: foreground.as_ref().map(|f| f.is_echo),
        hint: foreground.as_ref().and_then(super::Foreground::leave_hint),
        foreground_program: foreground.and_then(|f| f.program),
    };
    Ok((snapshot, screen.session_id, screen.seq))
}

/// A snapshot without a cursor, the output after it with one. What it returns counts as given
/// to `caller` (a later `send` of the caller starts after it).
pub async fn observe(
    handle: &TerminalHandle,
    cursor: Option<&str>,
    caller: &str,
) -> Result<ObserveResponse, TerminalError> {
    let probe = handle.probe().await?;
    let Some(cursor) = cursor else {
        let (snapshot, session_id, seq) = snapshot(handle).await?;
        handle.set_read_mark(caller, seq, None);
        return Ok(ObserveResponse::Snapshot {
            cursor: encode_cursor(&session_id, seq),
            session_id,
            snapshot,
        });
    };
    let after = decode_cursor(cursor, &probe.id)?;
    let now = handle.seq_reaching(after, &probe.log).await;
    if after > now {
        return Err(TerminalError::InvalidCursor {
            detail: "cursor is ahead of this terminal".to_owned(),
        });
    }
    let log = probe.log.clone();
    let (output, truncated, last) =
        read_log_since(after, now, move || output_between(&log, after, now)).await??;
    handle.set_read_mark(caller, last, None);
    Ok(ObserveResponse::Delta {
        cursor: encode_cursor(&probe.id, last),
        session_id: probe.id,
        output,
        truncated,
        state: probe.state,
    })
}

/// The clean output of the log's events after `after` up to `now` (its newest
/// [`SEND_OUTPUT_MAX_CHARS`] characters), whether it was cut, and the last event's `seq`.
fn output_between(
    log: &TerminalLog,
    after: Seq,
    now: Seq,
) -> Result<(String, bool, Seq), TerminalError> {
    let expired = || {
        TerminalError::cursor_expired(
            "cursor is older than the history kept; observe again without a cursor",
        )
    };
    let cannot_read =
        |e: std::io::Error| TerminalError::internal(format!("cannot read the event log: {e}"));
    if log
        .oldest_seq()
        .map_err(cannot_read)?
        .is_some_and(|oldest| after.next() < oldest)
    {
        return Err(expired());
    }
    let mut text = PlainText::new();
    let mut first = None;
    let mut reader = log.reader(after);
    while reader
        .read_lines(DELTA_READ_BYTES, Some(now), &mut |seq, line| {
            first.get_or_insert(seq);
            if let Ok(Event {
                kind: EventKind::Output { data },
                ..
            }) = Event::from_json_line(line)
            {
                text.feed(&data);
            }
        })
        .map_err(cannot_read)?
        > 0
    {}
    let last = reader.last_seq();
    // The holder may have deleted the cursor's position since it was looked up.
    if first.is_some_and(|first| first > after.next()) {
        return Err(expired());
    }
    let text = text.text();
    let count = text.chars().count();
    let truncated = count > SEND_OUTPUT_MAX_CHARS;
    let output = if truncated {
        text.chars().skip(count - SEND_OUTPUT_MAX_CHARS).collect()
    } else {
        text
    };
    Ok((output, truncated, last))
}

pub async fn scrollback(
    handle: &TerminalHandle,
    offset: usize,
    lines: usize,
) -> Result<ScrollbackResponse, TerminalError> {
    let lines = lines.clamp(1, SCROLLBACK_PAGE_MAX);
    let (page, total) = handle.lines_page(offset, lines).await?;
    let probe = handle.probe().await?;
    let start = total.saturating_sub(offset).saturating_sub(lines);
    Ok(ScrollbackResponse {
        session_id: probe.id,
        lines: page,
        offset,
        total,
        has_more: start > 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_belong_to_one_terminal() {
        let cursor = encode_cursor("t-1", Seq(42));
        assert_eq!(decode_cursor(&cursor, "t-1").ok(), Some(Seq(42)));
        let foreign = decode_cursor(&cursor, "t-2").map_err(|e| e.code());
        assert_eq!(
            foreign,
            Err(ptyhub_protocol::error::ErrorCode::InvalidCursor)
        );
        assert!(decode_cursor("garbage", "t-1").is_err());
        assert!(decode_cursor("c1.zz", "t-1").is_err());
    }
}
