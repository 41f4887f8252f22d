//! The append-only event log (`events.jsonl`) as the holder writes and re-reads it.
//!
//! The holder is the only writer. Each event is one `write` of one whole line to a file
//! opened with `O_APPEND`, so a crash can at worst leave a torn last line, which [`EventLog::open`]
//! cuts off. Readers (subscribers) are served straight from the file: the page cache makes
//! that as cheap as a memory ring, and it means a slow reader can never lose a byte.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use ptyhub_protocol::event::{Event, EventKind, Seq, now_ts};

/// One sparse index entry is kept per this many bytes of log, to find a `seq` quickly.
const INDEX_STRIDE_BYTES: u64 = 256 * 1024;

pub struct EventLog {
    file: File,
    len: u64,
    last_seq: Seq,
    /// `(seq, offset of the line holding seq)`, ascending, roughly every [`INDEX_STRIDE_BYTES`].
    index: Vec<(Seq, u64)>,
}

impl EventLog {
    /// Opens (or creates) the log, cuts a torn last line and indexes what is there.
    pub fn open(path: &Path) -> io::Result<Self> {
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)?;
        let mut log = Self {
            file: file.try_clone()?,
            len: 0,
            last_seq: Seq::ZERO,
            index: Vec::new(),
        };
        let mut reader = io::BufReader::with_capacity(64 * 1024, &mut file);
        reader.seek(SeekFrom::Start(0))?;
        let mut offset = 0u64;
        let mut last_indexed = None::<u64>;
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = io::BufRead::read_until(&mut reader, b'\n', &mut line)?;
            if n == 0 || line.last() != Some(&b'\n') {
                break;
            }
            if let Some(seq) = parse_seq_prefix(&line) {
                if last_indexed.is_none_or(|at| offset - at >= INDEX_STRIDE_BYTES) {
                    log.index.push((seq, offset));
                    last_indexed = Some(offset);
                }
                log.last_seq = seq;
            }
            offset += n as u64;
        }
        drop(reader);
        if offset != file.metadata()?.len() {
            file.set_len(offset)?;
        }
        log.len = offset;
        Ok(log)
    }

    pub fn last_seq(&self) -> Seq {
        self.last_seq
    }

    /// Bytes in the file: the end offset a fully caught-up reader has reached.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends one event with the next `seq` and returns it.
    pub fn append(&mut self, kind: EventKind) -> io::Result<Seq> {
        let seq = self.last_seq.next();
        let event = Event {
            seq,
            ts: now_ts(),
            kind,
        };
        let mut line = Vec::with_capacity(128);
        event.write_json_line(&mut line).map_err(io::Error::other)?;
        self.file.write_all(&line)?;
        if self
            .index
            .last()
            .is_none_or(|&(_, at)| self.len - at >= INDEX_STRIDE_BYTES)
        {
            self.index.push((seq, self.len));
        }
        self.len += line.len() as u64;
        self.last_seq = seq;
        Ok(seq)
    }

    /// The offset of the first line whose `seq` is greater than `after`.
    pub fn offset_after(&self, after: Seq) -> io::Result<u64> {
        if after >= self.last_seq {
            return Ok(self.len);
        }
        let start = match self.index.partition_point(|&(seq, _)| seq <= after) {
            0 => 0,
            i => self.index[i - 1].1,
        };
        let mut reader = io::BufReader::with_capacity(64 * 1024, self.file.try_clone()?);
        reader.seek(SeekFrom::Start(start))?;
        let mut offset = start;
        let mut line = Vec::new();
        while offset < self.len {
            line.clear();
            let n = io::BufRead::read_until(&mut reader, b'\n', &mut line)?;
            if n == 0 {
                break;
            }
            if parse_seq_prefix(&line).is_some_and(|seq| seq > after) {
                return Ok(offset);
            }
            offset += n as u64;
        }
        Ok(self.len)
    }

    /// Appends to `out` whole lines starting at `offset`, at most about `max` bytes, and
    /// returns the offset after the last line copied.
    pub fn read_lines(&self, offset: u64, max: usize, out: &mut Vec<u8>) -> io::Result<u64> {
        let want = usize::try_from(self.len.saturating_sub(offset))
            .unwrap_or(usize::MAX)
            .min(max.max(1));
        if want == 0 {
            return Ok(offset);
        }
        let start = out.len();
        out.resize(start + want, 0);
        let n = self.file.read_at(&mut out[start..], offset)?;
        out.truncate(start + n);
        let whole = match out[start..].iter().rposition(|&b| b == b'\n') {
            Some(last_nl) => last_nl + 1,
            None if n == want && want < self.len as usize => {
                // One line longer than `max`: read it whole rather than stall.
                out.truncate(start);
                let mut rest = Vec::new();
                let mut file = self.file.try_clone()?;
                file.seek(SeekFrom::Start(offset))?;
                io::BufRead::read_until(&mut io::BufReader::new(file), b'\n', &mut rest)?;
                out.extend_from_slice(&rest);
                rest.len()
            }
            None => 0,
        };
        out.truncate(start + whole);
        Ok(offset + whole as u64)
    }
}

/// Reads the `seq` of a log line without parsing the rest (`{"seq":123,...`).
pub fn parse_seq_prefix(line: &[u8]) -> Option<Seq> {
    let rest = line.strip_prefix(b"{\"seq\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 19 {
        return None;
    }
    let text = std::str::from_utf8(&rest[..digits]).ok()?;
    text.parse().ok().map(Seq)
}

/// A reader of a terminal's event log from its own position, for readers other than the
/// holder (the server's replay, live connections catching up). It reads whole lines only, so
/// it may run while the holder appends.
pub struct LogReader {
    path: std::path::PathBuf,
    file: Option<File>,
    offset: u64,
    last: Seq,
    buf: Vec<u8>,
}

impl LogReader {
    /// A reader of the log in the terminal directory `dir` that returns events after `after`.
    pub fn new(dir: &Path, after: Seq) -> Self {
        Self {
            path: dir.join(crate::state_dir::EVENTS_FILE),
            file: None,
            offset: 0,
            last: after,
            buf: Vec::new(),
        }
    }

    /// The `seq` of the last event returned (or the starting point).
    pub fn last_seq(&self) -> Seq {
        self.last
    }

    /// Appends to `out` the next events, reading about `max_bytes` of log at most (one whole
    /// line at least), and returns how many it appended; 0 means there is nothing more now.
    pub fn read(&mut self, max_bytes: usize, out: &mut Vec<Event>) -> io::Result<usize> {
        if self.file.is_none() {
            self.file = Some(File::open(&self.path)?);
        }
        let Some(file) = self.file.as_ref() else {
            return Ok(0);
        };
        let before = out.len();
        loop {
            self.buf.resize(max_bytes.max(4096), 0);
            let n = file.read_at(&mut self.buf, self.offset)?;
            let is_at_end = n < self.buf.len();
            let whole = match self.buf[..n].iter().rposition(|&b| b == b'\n') {
                Some(last_nl) => last_nl + 1,
                None if n == self.buf.len() => {
                    // One line longer than the buffer: read it whole.
                    let mut line = Vec::new();
                    let mut file = file;
                    file.seek(SeekFrom::Start(self.offset))?;
                    io::BufRead::read_until(&mut io::BufReader::new(file), b'\n', &mut line)?;
                    if line.last() != Some(&b'\n') {
                        return Ok(out.len() - before);
                    }
                    self.buf = line;
                    self.buf.len()
                }
                None => return Ok(out.len() - before),
            };
            self.offset += whole as u64;
            for line in self.buf[..whole].split(|&b| b == b'\n') {
                if parse_seq_prefix(line).is_some_and(|seq| seq > self.last)
                    && let Ok(event) = Event::from_json_line(line)
                {
                    self.last = event.seq;
                    out.push(event);
                }
            }
            if out.len() > before || is_at_end {
                return Ok(out.len() - before);
            }
        }
    }
}

/// Reads a whole log file into events (for a server replaying a terminal with no holder).
pub fn read_events(path: &Path, after: Seq, mut each: impl FnMut(Event)) -> io::Result<()> {
    let mut file = File::open(path)?;
    let mut text = Vec::new();
    file.read_to_end(&mut text)?;
    for line in text.split(|&b| b == b'\n') {
        if parse_seq_prefix(line).is_some_and(|seq| seq > after)
            && let Ok(event) = Event::from_json_line(line)
        {
            each(event);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(text: &str) -> EventKind {
        EventKind::Output {
            data: text.as_bytes().to_vec(),
        }
    }

    #[test]
    fn seq_continues_across_reopen_and_a_torn_line_is_cut() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("events.jsonl");
        let mut log = EventLog::open(&path)?;
        assert_eq!(log.append(output("a"))?, Seq(1));
        assert_eq!(log.append(output("b"))?, Seq(2));
        drop(log);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)?
            .write_all(b"{\"seq\":3,\"ts\":1,\"ty")?;
        // The signature of a power loss on ext4: NUL bytes after the torn line.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)?
            .write_all(&[0u8; 512])?;
        let mut log = EventLog::open(&path)?;
        assert_eq!(log.last_seq(), Seq(2));
        assert_eq!(log.append(output("c"))?, Seq(3));
        let mut seqs = Vec::new();
        read_events(&path, Seq::ZERO, |e| seqs.push(e.seq.0))?;
        assert_eq!(seqs, vec![1, 2, 3]);
        Ok(())
    }

    #[test]
    fn a_reader_follows_the_log_in_bounded_steps_from_any_seq() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut log = EventLog::open(&dir.path().join(crate::state_dir::EVENTS_FILE))?;
        for i in 0..50 {
            log.append(output(&format!("{i:03}").repeat(100)))?;
        }
        let mut reader = LogReader::new(dir.path(), Seq(9));
        let mut events = Vec::new();
        while reader.read(1000, &mut events)? > 0 {}
        let seqs: Vec<u64> = events.iter().map(|e| e.seq.0).collect();
        assert_eq!(seqs, (10..=50).collect::<Vec<_>>());
        log.append(output(&"y".repeat(20_000)))?;
        events.clear();
        assert_eq!(
            reader.read(1000, &mut events)?,
            1,
            "a line longer than the step"
        );
        assert_eq!(reader.last_seq(), Seq(51));
        assert_eq!(reader.read(1000, &mut events)?, 0);
        Ok(())
    }

    #[test]
    fn offset_after_finds_every_seq_in_a_large_log() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("events.jsonl");
        let mut log = EventLog::open(&path)?;
        let chunk = "x".repeat(5000);
        for _ in 0..400 {
            log.append(output(&chunk))?;
        }
        for after in [0u64, 1, 57, 199, 200, 333, 399, 400] {
            let offset = log.offset_after(Seq(after))?;
            let mut out = Vec::new();
            log.read_lines(offset, 100_000, &mut out)?;
            let first = out.split(|&b| b == b'\n').next().and_then(parse_seq_prefix);
            let expected = (after < 400).then_some(Seq(after + 1));
            assert_eq!(first, expected, "after {after}");
        }
        Ok(())
    }
}
