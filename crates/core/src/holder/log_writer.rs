//! The holder's writer of the event log when the disk can refuse: an event that cannot be
//! appended (the file system is full, or fails) waits, in order with every later one, and is
//! retried until it is written. Nothing is dropped: while events wait, the loop stops reading
//! the terminal's output, so its program is held back by the PTY as by a slow reader, and
//! subscribers are told why (`storage` messages). What the log is and how it rotates is
//! `event_log`'s; when to retry is each holder loop's.

use std::collections::VecDeque;
use std::io;
use std::ops::Deref;
use std::time::Instant;

use ptyhub_protocol::event::{EventKind, Seq};
use ptyhub_protocol::holder::HolderMessage;

use crate::event_log::EventLog;

/// How often a stalled log is tried again.
pub(super) const RETRY_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

pub(super) struct LogWriter {
    log: EventLog,
    /// Events not yet written, oldest first (empty while the log takes every append).
    unwritten: VecDeque<EventKind>,
    /// Why the oldest unwritten event was refused, and since when.
    stall: Option<(String, Instant)>,
    /// Whether subscribers were last told the log is stalled.
    is_announced: bool,
}

impl LogWriter {
    /// Takes the opened log; a torn last line it cut is recorded first (`log.repaired`).
    pub(super) fn new(log: EventLog) -> Self {
        let cut_bytes = log.cut_at_open();
        let mut writer = Self {
            log,
            unwritten: VecDeque::new(),
            stall: None,
            is_announced: false,
        };
        if cut_bytes > 0 {
            writer.append(EventKind::LogRepaired { cut_bytes });
        }
        writer
    }

    /// Appends `kind` now, or fails: for the events a holder cannot start without.
    pub(super) fn append_now(&mut self, kind: EventKind) -> io::Result<Seq> {
        self.log.append(kind)
    }

    /// Appends `kind` after every event still waiting; if the log refuses it, it waits too.
    pub(super) fn append(&mut self, kind: EventKind) {
        self.unwritten.push_back(kind);
        self.retry();
    }

    /// Writes what waits, oldest first, until the log refuses one. Returns whether nothing
    /// waits any more.
    pub(super) fn retry(&mut self) -> bool {
        while let Some(kind) = self.unwritten.pop_front() {
            match self.log.try_append(kind) {
                Ok(_) => {}
                Err((error, kind)) => {
                    self.unwritten.push_front(kind);
                    if self.stall.is_none() {
                        log_line!(
                            "holder: the event log refuses appends, holding output back: {error}"
                        );
                        self.stall = Some((error.to_string(), Instant::now()));
                    }
                    return false;
                }
            }
        }
        if let Some((_, since)) = self.stall.take() {
            log_line!(
                "holder: the event log takes appends again after {:.1} s",
                since.elapsed().as_secs_f64()
            );
        }
        true
    }

    /// Whether events wait: the loop must not read more output until they are written.
    pub(super) fn is_stalled(&self) -> bool {
        !self.unwritten.is_empty()
    }

    /// What subscribers should hear about storage: a `storage` message when the stall began
    /// or ended since they were last told.
    pub(super) fn take_change(&mut self) -> Option<HolderMessage> {
        let is_stalled = self.stall.is_some();
        if is_stalled == self.is_announced {
            return None;
        }
        self.is_announced = is_stalled;
        Some(self.storage_message())
    }

    /// The `storage` message that says how the log is now.
    pub(super) fn storage_message(&self) -> HolderMessage {
        HolderMessage::Storage {
            error: self.stall.as_ref().map(|(error, _)| error.clone()),
        }
    }

    /// Whether the log is stalled now (a new subscriber is told at once).
    pub(super) fn is_refusing(&self) -> bool {
        self.stall.is_some()
    }

    /// The lines kept in memory for the subscribers go (see [`EventLog::forget_recent`]): once
    /// they were served, and when the holder goes idle (an event logged after the last serve
    /// would otherwise keep a page of heap through the idle trim).
    pub(super) fn forget_recent(&mut self) {
        self.log.forget_recent();
    }
}

impl Deref for LogWriter {
    type Target = EventLog;

    fn deref(&self) -> &EventLog {
        &self.log
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use ptyhub_protocol::event::{EventKind, Seq};

    use super::LogWriter;
    use crate::event_log::{EVENT_LOG_KEEP_MIN_BYTES, EventLog};

    #[test]
    fn a_torn_tail_is_cut_and_recorded_with_the_seq_it_was_to_have() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut log = EventLog::open(dir.path(), EVENT_LOG_KEEP_MIN_BYTES)?;
        log.append(EventKind::Output {
            data: b"a".to_vec(),
        })?;
        log.append(EventKind::Output {
            data: b"b".to_vec(),
        })?;
        drop(log);
        // A crash in the middle of the third line, padded with NUL bytes by the file system.
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("events.jsonl"))?;
        file.write_all(b"{\"seq\":3,\"ts\":1.5,\"type\":\"pty.out\0\0\0\0")?;
        drop(file);

        let mut writer = LogWriter::new(EventLog::open(dir.path(), EVENT_LOG_KEEP_MIN_BYTES)?);
        assert!(!writer.is_stalled());
        writer.append(EventKind::Output {
            data: b"c".to_vec(),
        });
        let text = std::fs::read_to_string(dir.path().join("events.jsonl"))?;
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()
            .map_err(std::io::Error::other)?;
        let types: Vec<&str> = lines.iter().filter_map(|l| l["type"].as_str()).collect();
        assert_eq!(
            types,
            ["pty.output", "pty.output", "log.repaired", "pty.output"]
        );
        assert_eq!(lines[2]["seq"], 3);
        assert_eq!(lines[2]["cut_bytes"], 37);
        assert_eq!(writer.last_seq(), Seq(4));
        Ok(())
    }
}
