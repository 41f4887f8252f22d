//! The append-only event log of a terminal as the holder writes and re-reads it, bounded by
//! rotation; readers other than the holder go through a [`TerminalLog`] (its [`LogReader`]s
//! follow rotations).
//!
//! The log is a directory of segments: the active `events.jsonl`, which the holder appends to,
//! and rotated segments `events.<first seq>.jsonl` (the `seq` of their first event, zero-padded
//! to 20 digits so names sort as numbers do), which never change again. Once the active segment
//! would pass the segment size (a quarter of what is kept), the holder renames it to its rotated
//! name, creates a new `events.jsonl`, and deletes the oldest rotated segments until they and a
//! full active segment fit in the limit (`--event-log-keep`, 64 MiB by default). The active
//! segment is never deleted, so the files stay within the limit unless one event alone is
//! larger than a segment.
//!
//! The holder is the only writer. Each event is one `write` of one whole line to a file opened
//! with `O_APPEND`, so a crash can at worst leave a torn last line, which [`EventLog::open`] cuts
//! off; a crash between the rename and the create leaves no `events.jsonl`, and the next open
//! creates it and continues the `seq` of the newest rotated segment. Subscribers are served
//! straight from the files by byte offset: offsets are global over the concatenation of the
//! kept segments (whose files stay open), so a subscriber's position survives rotations. A
//! subscriber whose position was deleted continues at the oldest kept event. The page cache
//! makes reading back as cheap as a memory ring, and a slow reader never loses a byte the log
//! still keeps.

mod reader;

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use ptyhub_protocol::event::{Event, EventKind, Seq, now_ts};

pub use reader::{LogReader, TerminalLog};
#[cfg(test)]
pub(crate) use reader::{newest_seq, oldest_seq, read_events};

use crate::state_dir::EVENTS_FILE;

/// How much of its event log a terminal keeps by default: 64 MiB (docs/storage.md, "Rotation").
pub const EVENT_LOG_KEEP_BYTES: u64 = 64 * 1024 * 1024;
/// The smallest limit accepted: below it, segments would hold only a few events each.
pub const EVENT_LOG_KEEP_MIN_BYTES: u64 = 64 * 1024;
/// A segment is rotated once it would pass the limit divided by this.
const SEGMENTS_PER_KEEP: u64 = 4;
/// No segment is rotated before it holds this much (unless one event is larger).
const SEGMENT_MIN_BYTES: u64 = 16 * 1024;
/// One sparse index entry is kept per this many bytes of log, to find a `seq` quickly.
const INDEX_STRIDE_BYTES: u64 = 256 * 1024;
/// Bytes read at a time when scanning a segment line by line.
const SCAN_BUFFER_BYTES: usize = 64 * 1024;

/// The file name of the rotated segment whose first event is `first`.
pub fn segment_file_name(first: Seq) -> String {
    format!("events.{:020}.jsonl", first.0)
}

/// The first `seq` named by a rotated segment's file name (`events.<20 digits>.jsonl`).
pub fn parse_segment_name(name: &str) -> Option<Seq> {
    let digits = name.strip_prefix("events.")?.strip_suffix(".jsonl")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(Seq)
}

/// The rotated segments in a terminal directory, oldest first, with their first `seq`.
pub fn list_segments(dir: &Path) -> io::Result<Vec<(Seq, PathBuf)>> {
    let mut segments = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if let Some(first) = entry.file_name().to_str().and_then(parse_segment_name) {
            segments.push((first, entry.path()));
        }
    }
    segments.sort_by_key(|(first, _)| *first);
    Ok(segments)
}

/// Reads the `seq` of a log line without parsing the rest (`{"seq":123,...`); `None` beyond
/// `u64::MAX`.
pub fn parse_seq_prefix(line: &[u8]) -> Option<Seq> {
    let rest = line.strip_prefix(b"{\"seq\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    // `u64::MAX` has 20 digits; longer cannot parse, and is not looked at.
    if digits == 0 || digits > 20 {
        return None;
    }
    let text = std::str::from_utf8(&rest[..digits]).ok()?;
    text.parse().ok().map(Seq)
}

/// The segment size for a limit: a quarter of it, with a floor.
fn segment_max_bytes(keep: u64) -> u64 {
    (keep / SEGMENTS_PER_KEEP).max(SEGMENT_MIN_BYTES)
}

/// One file of the log, open for reading by offset.
struct Segment {
    file: File,
    path: PathBuf,
    /// The global offset of its first byte.
    base: u64,
    /// Bytes of whole lines in it.
    len: u64,
}

impl Segment {
    fn end(&self) -> u64 {
        self.base + self.len
    }
}

/// The holder's log: the writer, and the reader its subscribers are served from.
pub struct EventLog {
    dir: PathBuf,
    keep: u64,
    segment_max: u64,
    /// Rotate before an append would make the active segment pass this (after a failed
    /// rotation, one more segment size, so a broken disk is not retried at every event).
    rotate_at: u64,
    /// Rotated segments, oldest first.
    rotated: VecDeque<Segment>,
    active: Segment,
    /// The `seq` of the active segment's first event, once it has one.
    active_first: Option<Seq>,
    last_seq: Seq,
    /// `(seq, global offset of the line holding seq)`, ascending: every segment's first line
    /// and then one roughly every [`INDEX_STRIDE_BYTES`].
    index: Vec<(Seq, u64)>,
    /// Bytes of a torn last line [`EventLog::open`] cut (0 when the log ended with a whole
    /// line).
    cut_at_open: u64,
    /// A failed append left part of a line the file could not be cut back from yet.
    is_tail_torn: bool,
    /// The lines last appended to the active segment, from global offset `recent_at` (at most
    /// [`RECENT_MAX_BYTES`]): a reader that is caught up (a holder's subscribers nearly always
    /// are) gets them from memory instead of reading back what was just written.
    recent: Vec<u8>,
    recent_at: u64,
}

/// At most this much of the last appended lines is kept in memory for [`EventLog::read_lines`].
const RECENT_MAX_BYTES: usize = 64 * 1024;

impl EventLog {
    /// Opens (or creates) the log in the terminal directory `dir`, keeping about `keep` bytes:
    /// indexes the kept segments, cuts a torn last line, creates a missing `events.jsonl` (a
    /// crash during a rotation) and applies the limit.
    pub fn open(dir: &Path, keep: u64) -> io::Result<Self> {
        let keep = keep.max(EVENT_LOG_KEEP_MIN_BYTES);
        let segment_max = segment_max_bytes(keep);
        let active_path = dir.join(EVENTS_FILE);
        let active_file = open_active(&active_path)?;
        let mut log = Self {
            dir: dir.to_path_buf(),
            keep,
            segment_max,
            rotate_at: segment_max,
            rotated: VecDeque::new(),
            active: Segment {
                file: active_file.try_clone()?,
                path: active_path,
                base: 0,
                len: 0,
            },
            active_first: None,
            last_seq: Seq::ZERO,
            index: Vec::new(),
            cut_at_open: 0,
            is_tail_torn: false,
            recent: Vec::new(),
            recent_at: 0,
        };
        let mut base = 0;
        for (_, path) in list_segments(dir)? {
            let file = open_segment(&path)?;
            let (len, first) = log.scan(&file, base)?;
            if first.is_none() {
                // Rotation never leaves an empty segment; whatever this is holds no event.
                drop(file);
                fs::remove_file(&path)?;
                continue;
            }
            log.rotated.push_back(Segment {
                file,
                path,
                base,
                len,
            });
            base += len;
        }
        let (len, first) = log.scan(&active_file, base)?;
        let file_len = active_file.metadata()?.len();
        if len != file_len {
            active_file.set_len(len)?;
            log.cut_at_open = file_len.saturating_sub(len);
        }
        log.active.base = base;
        log.active.len = len;
        log.active_first = first;
        log.trim();
        Ok(log)
    }

    /// Reads a segment's whole lines from its start: indexes them (the global offset of the
    /// segment is `base`), raises `last_seq`, and returns their length and first `seq`.
    fn scan(&mut self, file: &File, base: u64) -> io::Result<(u64, Option<Seq>)> {
        let mut reader = io::BufReader::with_capacity(
            SCAN_BUFFER_BYTES,
            ReadAt {
                file,
                pos: 0,
                end: u64::MAX,
            },
        );
        let mut offset = 0u64;
        let mut first = None;
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
                    self.index.push((seq, base + offset));
                    last_indexed = Some(offset);
                }
                first.get_or_insert(seq);
                self.last_seq = self.last_seq.max(seq);
            }
            offset += n as u64;
        }
        Ok((offset, first))
    }

    /// Bytes of a torn last line that opening the log cut (0 when there was none). The
    /// writer records the repair as the next event (`log.repaired`), which takes the `seq`
    /// the torn line was to have.
    pub fn cut_at_open(&self) -> u64 {
        self.cut_at_open
    }

    pub fn last_seq(&self) -> Seq {
        self.last_seq
    }

    /// The global end offset: where a fully caught-up subscriber is.
    pub fn len(&self) -> u64 {
        self.active.end()
    }

    /// Whether the log keeps no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == self.start()
    }

    /// The global offset of the oldest kept byte (the first line of the oldest segment).
    fn start(&self) -> u64 {
        self.rotated.front().unwrap_or(&self.active).base
    }

    /// Appends one event with the next `seq` and returns it. Rotates first when the event
    /// would make the active segment pass the segment size.
    pub fn append(&mut self, kind: EventKind) -> io::Result<Seq> {
        self.try_append(kind).map_err(|(error, _)| error)
    }

    /// [`Self::append`], giving the event back when the log refuses it (a writer that keeps
    /// it for later need not copy it first).
    pub fn try_append(&mut self, kind: EventKind) -> Result<Seq, (io::Error, EventKind)> {
        let seq = self.last_seq.next();
        let event = Event {
            seq,
            ts: now_ts(),
            kind,
        };
        let mut line = Vec::with_capacity(128);
        if let Err(error) = event.write_json_line(&mut line) {
            return Err((io::Error::other(error), event.kind));
        }
        self.write_line(seq, &line)
            .map_err(|error| (error, event.kind))
    }

    /// Writes one serialized event line with `seq`, rotating first when it is due.
    fn write_line(&mut self, seq: Seq, line: &[u8]) -> io::Result<Seq> {
        if self.active.len > 0 && self.active.len + line.len() as u64 > self.rotate_at {
            match self.rotate() {
                Ok(()) => self.rotate_at = self.segment_max,
                Err(error) => {
                    log_line!("holder: cannot rotate the event log: {error}");
                    self.rotate_at = self.active.len + self.segment_max;
                }
            }
        }
        if self.is_tail_torn {
            // A failed append left part of a line: cut it before anything follows it.
            self.active.file.set_len(self.active.len)?;
            self.is_tail_torn = false;
        }
        if let Err(error) = self.active.file.write_all(line) {
            // A full disk can take part of the line: cut it, so the file ends with whole lines
            // and the next append continues where readers expect it.
            self.is_tail_torn = self.active.file.set_len(self.active.len).is_err();
            return Err(error);
        }
        let offset = self.active.end();
        let is_first = self.active_first.is_none();
        if is_first
            || self
                .index
                .last()
                .is_none_or(|&(_, at)| offset - at >= INDEX_STRIDE_BYTES)
        {
            self.index.push((seq, offset));
        }
        if is_first {
            self.active_first = Some(seq);
        }
        self.active.len += line.len() as u64;
        self.last_seq = seq;
        self.keep_recent(offset, line);
        Ok(seq)
    }

    /// Keeps `line`, just written at `offset`, with the lines before it in memory while they
    /// follow on and fit.
    fn keep_recent(&mut self, offset: u64, line: &[u8]) {
        let is_next = self.recent_at + self.recent.len() as u64 == offset;
        if !is_next || self.recent.len() + line.len() > RECENT_MAX_BYTES {
            self.recent.clear();
            self.recent_at = offset;
        }
        if line.len() <= RECENT_MAX_BYTES {
            self.recent.extend_from_slice(line);
        } else {
            self.recent_at = offset + line.len() as u64;
        }
    }

    /// Readers had the last lines: they are read from the file from now on, and their memory
    /// goes (an idle holder stays small; a busy one allocates it again for the next lines).
    pub fn forget_recent(&mut self) {
        self.recent_at += self.recent.len() as u64;
        self.recent = Vec::new();
    }

    /// Renames the active segment to its rotated name, starts a new `events.jsonl`, and
    /// deletes the oldest rotated segments beyond the limit.
    fn rotate(&mut self) -> io::Result<()> {
        let Some(first) = self.active_first else {
            return Ok(());
        };
        let rotated_path = self.dir.join(segment_file_name(first));
        fs::rename(&self.active.path, &rotated_path)?;
        // A crash here leaves no `events.jsonl`: `open` creates it and continues the `seq`.
        let file = match open_active(&self.active.path) {
            Ok(file) => file,
            Err(error) => {
                // Keep appending to the same file under its usual name.
                fs::rename(&rotated_path, &self.active.path)?;
                return Err(error);
            }
        };
        let new_active = Segment {
            file,
            path: self.active.path.clone(),
            base: self.active.end(),
            len: 0,
        };
        let mut old = std::mem::replace(&mut self.active, new_active);
        old.path = rotated_path;
        self.rotated.push_back(old);
        self.active_first = None;
        // What a read gives never passes a segment's end.
        self.forget_recent();
        self.trim();
        Ok(())
    }

    /// Deletes the oldest rotated segments until they and a full active segment fit in the
    /// limit. Subscribers positioned in a deleted segment continue at the oldest kept event.
    fn trim(&mut self) {
        let mut rotated_len: u64 = self.rotated.iter().map(|s| s.len).sum();
        while rotated_len + self.segment_max.max(self.active.len) > self.keep {
            let Some(oldest) = self.rotated.pop_front() else {
                break;
            };
            match fs::remove_file(&oldest.path) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => {
                    log_line!("holder: cannot delete {}: {error}", oldest.path.display());
                    self.rotated.push_front(oldest);
                    break;
                }
            }
            rotated_len -= oldest.len;
        }
        let start = self.start();
        let stale = self.index.partition_point(|&(_, at)| at < start);
        self.index.drain(..stale);
    }

    /// The kept segment holding the global offset `offset`.
    fn segment_at(&self, offset: u64) -> Option<&Segment> {
        self.rotated
            .iter()
            .chain(std::iter::once(&self.active))
            .find(|s| s.base <= offset && offset < s.end())
    }

    /// The global offset of the first kept line whose `seq` is greater than `after` (the
    /// oldest kept line if `after` is older than it).
    pub fn offset_after(&self, after: Seq) -> io::Result<u64> {
        if after >= self.last_seq {
            return Ok(self.len());
        }
        let start = match self.index.partition_point(|&(seq, _)| seq <= after) {
            0 => return Ok(self.start()),
            i => self.index[i - 1].1,
        };
        let Some(segment) = self.segment_at(start) else {
            return Ok(self.len());
        };
        let mut reader = io::BufReader::with_capacity(
            SCAN_BUFFER_BYTES,
            ReadAt {
                file: &segment.file,
                pos: start - segment.base,
                end: segment.len,
            },
        );
        let mut offset = start;
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = io::BufRead::read_until(&mut reader, b'\n', &mut line)?;
            if n == 0 {
                // Every line of this segment is at or before `after`: the next one starts
                // right here (segments are contiguous).
                return Ok(segment.end());
            }
            if parse_seq_prefix(&line).is_some_and(|seq| seq > after) {
                return Ok(offset);
            }
            offset += n as u64;
        }
    }

    /// Appends to `out` whole lines starting at the global offset `offset` (or at the oldest
    /// kept line, if `offset` was deleted), at most about `max` bytes and never past the end
    /// of a segment, and returns the offset after the last line copied.
    pub fn read_lines(&self, offset: u64, max: usize, out: &mut Vec<u8>) -> io::Result<u64> {
        let offset = offset.max(self.start());
        if let Some(next) = self.read_recent(offset, max, out) {
            return Ok(next);
        }
        let Some(segment) = self.segment_at(offset) else {
            return Ok(offset);
        };
        let local = offset - segment.base;
        let available = segment.len - local;
        let want = usize::try_from(available)
            .unwrap_or(usize::MAX)
            .min(max.max(1));
        let start = out.len();
        out.resize(start + want, 0);
        let n = segment.file.read_at(&mut out[start..], local)?;
        out.truncate(start + n);
        let whole = match out[start..].iter().rposition(|&b| b == b'\n') {
            Some(last_nl) => last_nl + 1,
            None if n == want && (want as u64) < available => {
                // One line longer than `max`: read it whole rather than stall.
                out.truncate(start);
                let mut reader = io::BufReader::new(ReadAt {
                    file: &segment.file,
                    pos: local,
                    end: segment.len,
                });
                io::BufRead::read_until(&mut reader, b'\n', out)?;
                if out.last() == Some(&b'\n') {
                    out.len() - start
                } else {
                    0
                }
            }
            None => 0,
        };
        out.truncate(start + whole);
        Ok(offset + whole as u64)
    }

    /// [`Self::read_lines`] from the lines kept in memory, when they hold `offset` (a line's
    /// start): whole lines up to about `max` bytes (one longer line whole).
    fn read_recent(&self, offset: u64, max: usize, out: &mut Vec<u8>) -> Option<u64> {
        let local = usize::try_from(offset.checked_sub(self.recent_at)?).ok()?;
        let kept = self.recent.get(local..).filter(|kept| !kept.is_empty())?;
        let window = &kept[..kept.len().min(max.max(1))];
        let whole = match window.iter().rposition(|&b| b == b'\n') {
            Some(last_nl) => last_nl + 1,
            None => kept.iter().position(|&b| b == b'\n')? + 1,
        };
        out.extend_from_slice(&kept[..whole]);
        Some(offset + whole as u64)
    }
}

/// Opens (or creates) the active segment for appending and reading.
fn open_active(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|error| not_a_link(path, error))
}

/// Opens a log file for reading. A log file is never a symbolic link: one that is (planted in
/// the terminal's directory) is refused, never followed out of the state directory.
fn open_segment(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|error| not_a_link(path, error))
}

/// Says what `ELOOP` from an `O_NOFOLLOW` open means.
fn not_a_link(path: &Path, error: io::Error) -> io::Error {
    if error.raw_os_error() == Some(libc::ELOOP) {
        io::Error::new(
            error.kind(),
            format!(
                "{} is a symbolic link; a terminal's log files are never links, so it is not followed",
                path.display()
            ),
        )
    } else {
        error
    }
}

/// Reads a file by position (`pread`), so any number of readers share one descriptor without
/// moving its offset; stops at `end`.
struct ReadAt<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let room = usize::try_from(self.end.saturating_sub(self.pos)).unwrap_or(usize::MAX);
        let want = buf.len().min(room);
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
