//! Readers of a terminal's event log other than its holder: the server's replay and pages,
//! the screen, live connections catching up. They follow the holder's rotations without
//! missing or repeating an event.
//!
//! A reader knows the last `seq` it returned and reads one segment file at a time from its own
//! offset, whole lines only (the holder may be appending). At the end of a file it decides
//! what comes next:
//! 1. the file is still the active `events.jsonl` (same inode): nothing more for now;
//! 2. the file was `events.jsonl` when opened but has been renamed since: the holder rotated
//!    it, so it is read once more to its end (lines appended just before the rename), then
//! 3. the directory is listed again and the segment holding the next `seq` is opened. A
//!    segment deleted between the listing and the open is looked up again; lines at or before
//!    the last `seq` returned are skipped, so a segment read twice repeats nothing.
//!
//! If the next event was deleted (a reader slower than the limit), the reader continues at the
//! oldest kept event; [`oldest_seq`] tells a caller beforehand whether its position is still
//! kept (`CURSOR_EXPIRED` otherwise).

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use ptyhub_protocol::event::{Event, Seq};

use super::{list_segments, parse_seq_prefix};
use crate::state_dir::EVENTS_FILE;

/// Most bytes a reader reads at once, whatever its caller asks for.
const READ_CHUNK_MAX_BYTES: usize = 8 * 1024 * 1024;
/// Least bytes a reader reads at once.
const READ_CHUNK_MIN_BYTES: usize = 4096;
/// What a reader reads first: an interactive step's events fit, and the buffer comes from the
/// heap, not fresh pages (a 256 KiB buffer per read, mapped, zeroed and unmapped again, was
/// most of the screen thread's time during an exec round trip, and its unmapping interrupts
/// the other CPUs). It grows fourfold after each read that filled it and falls back after one
/// that did not fill half of it.
const READ_FIRST_BYTES: usize = 16 * 1024;
/// How many times a lookup is retried when the holder deletes the segment it found.
const LOOKUP_ATTEMPTS: usize = 16;
/// Events [`read_events`] reads at a time.
const READ_EVENTS_STEP_BYTES: usize = 1024 * 1024;

/// Where one terminal's event log is kept: the one way code other than the holder reads a
/// terminal's history. A backend hands it out ([`crate::backend::Backend::log`]), so nothing
/// opens a terminal's log files by itself; cheap to clone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TerminalLog {
    dir: PathBuf,
}

impl TerminalLog {
    /// The log kept in the terminal directory `dir` (segments `events*.jsonl`).
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
        }
    }

    /// A reader that returns the events after `after`, from the oldest kept one if `after`
    /// is older.
    pub fn reader(&self, after: Seq) -> LogReader {
        LogReader::new(&self.dir, after)
    }

    /// The `seq` of the oldest event kept (`None` when none is). A cursor before it expired.
    pub fn oldest_seq(&self) -> io::Result<Option<Seq>> {
        oldest_seq(&self.dir)
    }

    /// The `seq` of the newest event written (`None` when none is).
    pub fn newest_seq(&self) -> io::Result<Option<Seq>> {
        newest_seq(&self.dir)
    }

    /// Every event after `after`, in `seq` order, up to the newest one written by the time
    /// the reading gets there.
    pub fn read_events(&self, after: Seq, each: impl FnMut(Event)) -> io::Result<()> {
        read_events(&self.dir, after, each)
    }
}

/// A reader of a terminal's event log from its own position, for readers other than the
/// holder (the server's replay, live connections catching up). It reads whole lines only, so
/// it may run while the holder appends and rotates.
pub struct LogReader {
    dir: PathBuf,
    segment: Option<OpenSegment>,
    last: Seq,
    /// Rotations of the active segment this reader followed (step 2 above).
    rotations: u64,
    /// How much the next read asks for ([`READ_FIRST_BYTES`], more while reads fill it).
    read_size: usize,
}

/// The segment file a reader is in.
struct OpenSegment {
    file: File,
    /// Opened as `events.jsonl` and not yet seen renamed.
    is_active: bool,
    /// Offset in this file of the first byte not read yet.
    offset: u64,
}

impl LogReader {
    /// A reader of the log in the terminal directory `dir` that returns events after `after`.
    pub(crate) fn new(dir: &Path, after: Seq) -> Self {
        Self {
            dir: dir.to_path_buf(),
            segment: None,
            last: after,
            rotations: 0,
            read_size: READ_FIRST_BYTES,
        }
    }

    /// How many times the active segment this reader was in was rotated under it.
    pub(crate) fn rotations_followed(&self) -> u64 {
        self.rotations
    }

    /// The `seq` of the last event returned (or the starting point).
    pub fn last_seq(&self) -> Seq {
        self.last
    }

    /// Appends to `out` the next events, reading about `max_bytes` of log at most (one whole
    /// line at least), and returns how many it appended; 0 means there is nothing more now.
    pub fn read(&mut self, max_bytes: usize, out: &mut Vec<Event>) -> io::Result<usize> {
        let before = out.len();
        loop {
            let lines = self.read_lines(max_bytes, None, &mut |_, line| {
                if let Ok(event) = Event::from_json_line(line) {
                    out.push(event);
                }
            })?;
            if lines == 0 || out.len() > before {
                return Ok(out.len() - before);
            }
        }
    }

    /// Calls `each` with the `seq` and the text (without its newline) of the next lines, up to
    /// `until` if given (a later line stays unread), reading about `max_bytes` of log, and
    /// returns how many lines it passed; 0 means there is nothing more now.
    pub(crate) fn read_lines(
        &mut self,
        max_bytes: usize,
        until: Option<Seq>,
        each: &mut dyn FnMut(Seq, &[u8]),
    ) -> io::Result<usize> {
        let chunk = max_bytes.clamp(READ_CHUNK_MIN_BYTES, READ_CHUNK_MAX_BYTES);
        let mut buf = Vec::new();
        let mut passed = 0;
        loop {
            if until.is_some_and(|until| self.last >= until) {
                return Ok(passed);
            }
            if self.segment.is_none() {
                self.segment = locate(&self.dir, self.last)?;
            }
            let Some(segment) = self.segment.as_mut() else {
                return Ok(passed);
            };
            let size = self.read_size.min(chunk);
            buf.resize(size, 0);
            let n = segment.file.read_at(&mut buf, segment.offset)?;
            buf.truncate(n);
            if n == size {
                self.read_size = size.saturating_mul(4).min(READ_CHUNK_MAX_BYTES);
            } else if n < size / 2 {
                self.read_size = READ_FIRST_BYTES;
            }
            let whole = match buf.iter().rposition(|&b| b == b'\n') {
                Some(last_nl) => last_nl + 1,
                // A line longer than this read: read again, more.
                None if n == size && size < chunk => continue,
                None if n == size => {
                    // One line longer than the chunk: read it whole.
                    buf = read_line_at(&segment.file, segment.offset)?;
                    if buf.last() == Some(&b'\n') {
                        buf.len()
                    } else {
                        0
                    }
                }
                None => 0,
            };
            if whole > 0 {
                let mut consumed = 0;
                for line in buf[..whole].split_inclusive(|&b| b == b'\n') {
                    let seq = parse_seq_prefix(line).filter(|&seq| seq > self.last);
                    if let (Some(seq), Some(until)) = (seq, until)
                        && seq > until
                    {
                        break;
                    }
                    consumed += line.len();
                    if let Some(seq) = seq {
                        self.last = seq;
                        each(seq, &line[..line.len() - 1]);
                        passed += 1;
                    }
                }
                segment.offset += consumed as u64;
                if passed > 0 || consumed < whole {
                    return Ok(passed);
                }
                continue;
            }
            // At the end of this file's whole lines.
            if segment.is_active {
                if is_same_file(&segment.file, &self.dir.join(EVENTS_FILE))? {
                    return Ok(passed);
                }
                // Rotated since it was opened: read what was appended before the rename.
                segment.is_active = false;
                self.rotations += 1;
                continue;
            }
            match locate(&self.dir, self.last)? {
                Some(next) if !is_same_file_as(&next.file, &segment.file)? => {
                    self.segment = Some(next);
                }
                // The next segment does not exist yet (the holder is between a rename and
                // its create, or has stopped there).
                _ => return Ok(passed),
            }
        }
    }
}

/// Opens the segment that holds the event after `after`: the active `events.jsonl` when its
/// first event is not later than that, else the newest rotated segment that starts at or
/// before it, else (that event is no longer kept) the oldest kept one. `None` when the
/// directory holds no log file at all.
fn locate(dir: &Path, after: Seq) -> io::Result<Option<OpenSegment>> {
    let wanted = after.next();
    for _ in 0..LOOKUP_ATTEMPTS {
        let active = open_if_exists(&dir.join(EVENTS_FILE))?;
        let active_first = match &active {
            Some(file) => first_seq_of(file)?,
            None => None,
        };
        let rotated = list_segments(dir)?;
        if let Some(file) = active {
            let is_it = match active_first {
                Some(first) => first <= wanted || rotated.is_empty(),
                // Empty: the next event goes here unless a rotated segment holds it (an empty
                // active segment is read after the newest rotated one, never instead of it).
                None => rotated.is_empty(),
            };
            if is_it {
                let offset = match active_first {
                    Some(first) if first < wanted => offset_before(&file, wanted)?,
                    _ => 0,
                };
                return Ok(Some(OpenSegment {
                    file,
                    is_active: true,
                    offset,
                }));
            }
        }
        let pick = rotated
            .iter()
            .rev()
            .find(|(first, _)| *first <= wanted)
            .or_else(|| rotated.first());
        let Some((first, path)) = pick else {
            return Ok(None);
        };
        if let Some(file) = open_if_exists(path)? {
            let offset = if *first < wanted {
                offset_before(&file, wanted)?
            } else {
                0
            };
            return Ok(Some(OpenSegment {
                file,
                is_active: false,
                offset,
            }));
        }
        // Deleted since the listing: look again.
    }
    Ok(None)
}

/// Segments are searched by halves down to this many bytes, then read line by line.
const SEEK_SPAN_BYTES: u64 = 64 * 1024;

/// The offset of a line of `file` that comes before the one holding `wanted` (the file's start
/// at worst): found by halving the file on the `seq` of the first line after each midpoint, so
/// a reader that starts deep in a long log reads a few small pieces of it, not all of it up to
/// there. Whatever is unreadable at a midpoint (a line being written, padding left by a crash)
/// counts as past `wanted`: the search then looks earlier, never later.
fn offset_before(file: &File, wanted: Seq) -> io::Result<u64> {
    let mut low = 0;
    let mut high = file.metadata()?.len();
    while high - low > SEEK_SPAN_BYTES {
        let mid = low + (high - low) / 2;
        match seq_of_line_after(file, mid, high)? {
            Some((start, seq)) if seq < wanted => low = start,
            _ => high = mid,
        }
    }
    Ok(low)
}

/// The offset and `seq` of the first line that starts after `at` and before `end`.
fn seq_of_line_after(file: &File, at: u64, end: u64) -> io::Result<Option<(u64, Seq)>> {
    const PIECE: usize = 16 * 1024;
    let mut buf = [0u8; PIECE];
    let mut offset = at;
    // The end of the line `at` falls in.
    let start = loop {
        if offset >= end {
            return Ok(None);
        }
        let n = file.read_at(&mut buf, offset)?;
        if n == 0 {
            return Ok(None);
        }
        if let Some(nl) = buf[..n].iter().position(|&b| b == b'\n') {
            break offset + nl as u64 + 1;
        }
        offset += n as u64;
    };
    if start >= end {
        return Ok(None);
    }
    Ok(seq_at(file, start)?.map(|seq| (start, seq)))
}

fn open_if_exists(path: &Path) -> io::Result<Option<File>> {
    match super::open_segment(path) {
        Ok(file) => Ok(Some(file)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// Whether `file` is the file at `path` now (false if nothing is there).
fn is_same_file(file: &File, path: &Path) -> io::Result<bool> {
    let open = file.metadata()?;
    match std::fs::metadata(path) {
        Ok(there) => Ok(open.dev() == there.dev() && open.ino() == there.ino()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error),
    }
}

fn is_same_file_as(a: &File, b: &File) -> io::Result<bool> {
    let (a, b) = (a.metadata()?, b.metadata()?);
    Ok(a.dev() == b.dev() && a.ino() == b.ino())
}

/// The line starting at `offset` (with its newline, unless the file ends first).
fn read_line_at(file: &File, offset: u64) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = file.read_at(&mut chunk, offset + line.len() as u64)?;
        if n == 0 {
            return Ok(line);
        }
        if let Some(nl) = chunk[..n].iter().position(|&b| b == b'\n') {
            line.extend_from_slice(&chunk[..=nl]);
            return Ok(line);
        }
        line.extend_from_slice(&chunk[..n]);
    }
}

/// The `seq` of a file's first line, if that line is there (not torn).
fn first_seq_of(file: &File) -> io::Result<Option<Seq>> {
    seq_at(file, 0)
}

/// The `seq` of the line that starts at `offset`, if its number is there whole.
fn seq_at(file: &File, offset: u64) -> io::Result<Option<Seq>> {
    let mut head = [0u8; 48];
    let n = file.read_at(&mut head, offset)?;
    let head = &head[..n];
    let Some(seq) = parse_seq_prefix(head) else {
        return Ok(None);
    };
    // The number must be complete: followed by the next field, not by the end of what was read.
    let digits = seq.0.to_string().len();
    Ok((head.get(b"{\"seq\":".len() + digits) == Some(&b',')).then_some(seq))
}

/// The `seq` of a file's last whole line.
fn last_seq_of(file: &File) -> io::Result<Option<Seq>> {
    let len = file.metadata()?.len();
    let mut window = 4096u64;
    loop {
        let start = len.saturating_sub(window);
        let mut buf = vec![0u8; usize::try_from(len - start).unwrap_or(usize::MAX)];
        let n = file.read_at(&mut buf, start)?;
        buf.truncate(n);
        // A partial last line is being written: the one before it is the last whole one.
        let body = match buf.iter().rposition(|&b| b == b'\n') {
            Some(end) => &buf[..end],
            None if start == 0 => return Ok(None),
            None => {
                window *= 4;
                continue;
            }
        };
        match body.iter().rposition(|&b| b == b'\n') {
            Some(nl) => return Ok(parse_seq_prefix(&body[nl + 1..])),
            None if start == 0 => return Ok(parse_seq_prefix(body)),
            None => window *= 4,
        }
    }
}

/// The `seq` of the oldest event the log of the terminal directory `dir` keeps (`None` when
/// it keeps none). A cursor before it has expired.
pub(crate) fn oldest_seq(dir: &Path) -> io::Result<Option<Seq>> {
    for _ in 0..LOOKUP_ATTEMPTS {
        if let Some((first, _)) = list_segments(dir)?.first() {
            return Ok(Some(*first));
        }
        if let Some(file) = open_if_exists(&dir.join(EVENTS_FILE))?
            && let Some(first) = first_seq_of(&file)?
        {
            return Ok(Some(first));
        }
        // No event in `events.jsonl`: none at all, unless it was rotated after the listing.
        if list_segments(dir)?.is_empty() {
            return Ok(None);
        }
    }
    Ok(None)
}

/// The `seq` of the newest event in the log of the terminal directory `dir` (`None` when it
/// keeps none).
pub(crate) fn newest_seq(dir: &Path) -> io::Result<Option<Seq>> {
    for _ in 0..LOOKUP_ATTEMPTS {
        if let Some(file) = open_if_exists(&dir.join(EVENTS_FILE))?
            && let Some(last) = last_seq_of(&file)?
        {
            return Ok(Some(last));
        }
        // An empty (or missing) active segment: the newest event closes the newest rotated one.
        let Some((_, path)) = list_segments(dir)?.pop() else {
            return Ok(None);
        };
        if let Some(file) = open_if_exists(&path)? {
            return last_seq_of(&file);
        }
    }
    Ok(None)
}

/// Reads every event after `after` in the log of the terminal directory `dir`, in `seq` order,
/// up to the newest one written by the time the reading gets there.
pub(crate) fn read_events(dir: &Path, after: Seq, mut each: impl FnMut(Event)) -> io::Result<()> {
    let mut reader = LogReader::new(dir, after);
    let mut events = Vec::new();
    while reader.read(READ_EVENTS_STEP_BYTES, &mut events)? > 0 {
        events.drain(..).for_each(&mut each);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use ptyhub_protocol::event::EventKind;

    use super::*;
    use crate::event_log::{EVENT_LOG_KEEP_BYTES, EventLog};

    /// A log of 3,000 events of 1 byte to 100 KiB, in the active segment alone.
    fn long_log(dir: &Path) -> io::Result<()> {
        let mut log = EventLog::open(dir, EVENT_LOG_KEEP_BYTES)?;
        for i in 0..3_000_usize {
            let size = if i % 500 == 7 {
                100_000
            } else {
                1 + (i * 37) % 3_000
            };
            log.append(EventKind::Output {
                data: vec![b'a' + u8::try_from(i % 26).unwrap_or(0); size],
            })?;
        }
        Ok(())
    }

    /// The `seq` of the line at `offset` and how far after it the line holding `wanted` starts.
    fn seq_at_and_distance(dir: &Path, offset: u64, wanted: u64) -> (u64, u64) {
        let bytes = std::fs::read(dir.join(EVENTS_FILE)).unwrap_or_default();
        let at = usize::try_from(offset).unwrap_or(usize::MAX);
        let seq = parse_seq_prefix(&bytes[at..]).map_or(0, |s| s.0);
        let needle = format!("{{\"seq\":{wanted},");
        let found = bytes[at..]
            .windows(needle.len())
            .position(|w| w == needle.as_bytes())
            .unwrap_or(usize::MAX);
        (seq, found as u64)
    }

    #[test]
    fn a_seq_deep_in_a_segment_is_found_by_halves_and_read_from_there() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        long_log(dir.path())?;
        let file = File::open(dir.path().join(EVENTS_FILE))?;
        for wanted in [2, 9, 508, 1_500, 2_507, 2_999, 3_000] {
            let offset = offset_before(&file, Seq(wanted))?;
            let (seq, distance) = seq_at_and_distance(dir.path(), offset, wanted);
            assert!(
                seq < wanted,
                "the line at {offset} has seq {seq}, not before {wanted}"
            );
            // Within the last span halved, plus the longest line that span can end inside.
            assert!(
                distance <= SEEK_SPAN_BYTES + 140_000,
                "{wanted}: {distance} bytes to read before it"
            );
            let mut reader = LogReader::new(dir.path(), Seq(wanted - 1));
            let mut events = Vec::new();
            reader.read(64 * 1024, &mut events)?;
            assert_eq!(events.first().map(|e| e.seq.0), Some(wanted));
        }
        Ok(())
    }

    #[test]
    fn a_search_past_a_padded_or_torn_tail_looks_earlier_never_later() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        long_log(dir.path())?;
        {
            // What a crash can leave: a torn line, then zeros.
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(dir.path().join(EVENTS_FILE))?;
            file.write_all(b"{\"seq\":3001,\"ts\":1.0,\"type\":\"pty.out")?;
            file.write_all(&vec![0u8; 300_000])?;
        }
        let file = File::open(dir.path().join(EVENTS_FILE))?;
        for wanted in [2_999, 3_000, 3_001, 5_000] {
            let offset = offset_before(&file, Seq(wanted))?;
            let (seq, _) = seq_at_and_distance(dir.path(), offset, 2_999);
            assert!(
                seq < wanted.min(3_000),
                "{wanted}: the line at {offset} has seq {seq}"
            );
        }
        let mut reader = LogReader::new(dir.path(), Seq(2_998));
        let mut events = Vec::new();
        while reader.read(64 * 1024, &mut events)? > 0 {}
        let seqs: Vec<u64> = events.iter().map(|e| e.seq.0).collect();
        assert_eq!(seqs, [2_999, 3_000]);
        Ok(())
    }
}
