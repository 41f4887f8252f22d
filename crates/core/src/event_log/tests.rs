use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

fn output(text: &str) -> EventKind {
    EventKind::Output {
        data: text.as_bytes().to_vec(),
    }
}

/// Bytes of every log file in `dir`.
fn log_bytes(dir: &Path) -> io::Result<u64> {
    let mut total = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name == EVENTS_FILE || parse_segment_name(&name).is_some() {
            total += entry.metadata()?.len();
        }
    }
    Ok(total)
}

/// Every `seq` a fresh reader returns after `after`, read in small steps.
fn read_seqs(dir: &Path, after: Seq) -> io::Result<Vec<u64>> {
    let mut reader = LogReader::new(dir, after);
    let mut events = Vec::new();
    while reader.read(700, &mut events)? > 0 {}
    Ok(events.iter().map(|e| e.seq.0).collect())
}

/// The `seq`s of the log lines in `bytes`.
fn line_seqs(bytes: &[u8]) -> Vec<u64> {
    bytes
        .split(|&b| b == b'\n')
        .filter_map(parse_seq_prefix)
        .map(|s| s.0)
        .collect()
}

#[test]
fn segment_names_sort_as_their_seqs_do() {
    assert_eq!(
        segment_file_name(Seq(1)),
        "events.00000000000000000001.jsonl"
    );
    assert_eq!(
        parse_segment_name(&segment_file_name(Seq(u64::MAX))),
        Some(Seq(u64::MAX))
    );
    assert!(segment_file_name(Seq(9)) < segment_file_name(Seq(10)));
    for other in [
        "events.jsonl",
        "events.1.jsonl",
        "events.0000000000000000000x.jsonl",
        "events.00000000000000000001.jsonl.tmp",
    ] {
        assert_eq!(parse_segment_name(other), None, "{other}");
    }
}

#[test]
fn seq_continues_across_reopen_and_a_torn_line_is_cut() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join(EVENTS_FILE);
    let mut log = EventLog::open(dir.path(), EVENT_LOG_KEEP_BYTES)?;
    assert_eq!(log.append(output("a"))?, Seq(1));
    assert_eq!(log.append(output("b"))?, Seq(2));
    drop(log);
    fs::OpenOptions::new()
        .append(true)
        .open(&path)?
        .write_all(b"{\"seq\":3,\"ts\":1,\"ty")?;
    // The signature of a power loss on ext4: NUL bytes after the torn line.
    fs::OpenOptions::new()
        .append(true)
        .open(&path)?
        .write_all(&[0u8; 512])?;
    let mut log = EventLog::open(dir.path(), EVENT_LOG_KEEP_BYTES)?;
    assert_eq!(log.last_seq(), Seq(2));
    assert_eq!(log.append(output("c"))?, Seq(3));
    let mut seqs = Vec::new();
    read_events(dir.path(), Seq::ZERO, |e| seqs.push(e.seq.0))?;
    assert_eq!(seqs, vec![1, 2, 3]);
    Ok(())
}

#[test]
fn a_reader_follows_the_log_in_bounded_steps_from_any_seq() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut log = EventLog::open(dir.path(), EVENT_LOG_KEEP_BYTES)?;
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
fn a_reader_reads_small_and_long_lines_whole_whatever_its_first_read_size() -> io::Result<()> {
    // Lines shorter and longer than a reader's first read (16 KiB), and longer than a read
    // grown fourfold, in one log: each comes back whole, once, in order.
    let dir = tempfile::tempdir()?;
    let mut log = EventLog::open(dir.path(), EVENT_LOG_KEEP_BYTES)?;
    let sizes = [3, 20_000, 5, 70_000, 300_000, 1, 16_300, 2_000_000, 7];
    for (i, &size) in sizes.iter().enumerate() {
        let text = char::from(b'a' + u8::try_from(i).unwrap_or(0)).to_string();
        log.append(output(&text.repeat(size)))?;
    }
    for step in [4096, 256 * 1024, 8 * 1024 * 1024] {
        let mut reader = LogReader::new(dir.path(), Seq::ZERO);
        let mut events = Vec::new();
        while reader.read(step, &mut events)? > 0 {}
        let lengths: Vec<usize> = events
            .iter()
            .map(|e| match &e.kind {
                EventKind::Output { data } => data.len(),
                _ => 0,
            })
            .collect();
        assert_eq!(lengths, sizes, "step {step}");
    }
    Ok(())
}

#[test]
fn offset_after_finds_every_seq_in_a_large_log() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut log = EventLog::open(dir.path(), EVENT_LOG_KEEP_BYTES)?;
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

#[test]
fn rotation_keeps_the_files_within_the_limit_and_the_seq_continues() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let keep = EVENT_LOG_KEEP_MIN_BYTES;
    let mut log = EventLog::open(dir.path(), keep)?;
    for i in 0..2000u32 {
        log.append(output(&format!("{i:05} {}", "r".repeat(300))))?;
        let on_disk = log_bytes(dir.path())?;
        assert!(on_disk <= keep, "{on_disk} bytes on disk after event {i}");
    }
    let segments = list_segments(dir.path())?;
    assert!(segments.len() >= 2, "{segments:?}");
    for (first, path) in &segments {
        let text = fs::read(path)?;
        assert_eq!(
            line_seqs(&text).first(),
            Some(&first.0),
            "{}",
            path.display()
        );
    }
    let oldest = oldest_seq(dir.path())?.map(|s| s.0);
    assert!(oldest > Some(1), "old events were deleted: {oldest:?}");
    assert_eq!(newest_seq(dir.path())?, Some(Seq(2000)));
    let seqs = read_seqs(dir.path(), Seq::ZERO)?;
    assert_eq!(seqs, (oldest.unwrap_or(0)..=2000).collect::<Vec<_>>());
    let middle = seqs[seqs.len() / 2];
    assert_eq!(
        read_seqs(dir.path(), Seq(middle))?,
        (middle + 1..=2000).collect::<Vec<_>>()
    );

    drop(log);
    let mut log = EventLog::open(dir.path(), keep)?;
    assert_eq!(log.last_seq(), Seq(2000));
    assert_eq!(log.append(output("after reopen"))?, Seq(2001));
    Ok(())
}

#[test]
fn a_crash_between_rename_and_create_leaves_a_log_that_continues() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let keep = EVENT_LOG_KEEP_MIN_BYTES;
    let mut log = EventLog::open(dir.path(), keep)?;
    while list_segments(dir.path())?.len() < 2 {
        log.append(output(&"c".repeat(500)))?;
    }
    for _ in 0..5 {
        log.append(output(&"c".repeat(500)))?;
    }
    let last = log.last_seq();
    // A reader in the middle of the active segment when the holder dies.
    let active = dir.path().join(EVENTS_FILE);
    let active_first = line_seqs(&fs::read(&active)?)[0];
    let mut reader = LogReader::new(dir.path(), Seq(active_first));
    let mut events = Vec::new();
    reader.read(600, &mut events)?;
    assert_eq!(events.first().map(|e| e.seq.0), Some(active_first + 1));
    drop(log);
    // The rename of a rotation, and no create after it.
    fs::rename(
        &active,
        dir.path().join(segment_file_name(Seq(active_first))),
    )?;

    assert_eq!(newest_seq(dir.path())?, Some(last));
    let oldest = oldest_seq(dir.path())?.map_or(0, |s| s.0);
    assert_eq!(
        read_seqs(dir.path(), Seq::ZERO)?,
        (oldest..=last.0).collect::<Vec<_>>()
    );
    while reader.read(600, &mut events)? > 0 {}
    assert_eq!(
        reader.last_seq(),
        last,
        "the reader finished the renamed file"
    );

    let mut log = EventLog::open(dir.path(), keep)?;
    assert!(active.exists());
    assert_eq!(log.last_seq(), last);
    assert_eq!(log.append(output("next"))?, last.next());
    events.clear();
    while reader.read(600, &mut events)? > 0 {}
    let seqs: Vec<u64> = events.iter().map(|e| e.seq.0).collect();
    assert_eq!(
        seqs,
        vec![last.0 + 1],
        "the reader moved on to the new file"
    );
    let oldest = oldest_seq(dir.path())?.map_or(0, |s| s.0);
    assert_eq!(
        read_seqs(dir.path(), Seq::ZERO)?,
        (oldest..=last.0 + 1).collect::<Vec<_>>()
    );
    Ok(())
}

#[test]
fn a_reader_reads_what_was_appended_just_before_a_rotation() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut log = EventLog::open(dir.path(), 1024 * 1024)?;
    let mut reader = LogReader::new(dir.path(), Seq::ZERO);
    let mut events = Vec::new();
    let event = "e".repeat(1000);
    log.append(output(&event))?;
    let line = log.len();
    // Fill the active segment to just below the size that rotates it.
    while log.active.len + 2 * line + 16 <= log.segment_max {
        log.append(output(&event))?;
    }
    while reader.read(4096, &mut events)? > 0 {}
    // The reader is at the end of `events.jsonl`. One more event lands in it, and the next
    // one rotates it away before the reader looks again.
    let before_rename = log.append(output(&event))?;
    let mut big = log.append(output(&event))?;
    while list_segments(dir.path())?.is_empty() {
        big = log.append(output(&event))?;
    }
    while reader.read(4096, &mut events)? > 0 {}
    let seqs: Vec<u64> = events.iter().map(|e| e.seq.0).collect();
    assert_eq!(seqs, (1..=big.0).collect::<Vec<_>>());
    assert!(before_rename < big);
    Ok(())
}

#[test]
fn a_reader_crosses_segments_while_the_writer_rotates() -> io::Result<()> {
    for round in 0..10 {
        let dir = tempfile::tempdir()?;
        // Large enough that nothing is deleted: every event must arrive exactly once.
        let keep = 1024 * 1024;
        let total = 5000u64;
        let path = dir.path().to_path_buf();
        let is_done = Arc::new(AtomicBool::new(false));
        let writer = {
            let is_done = Arc::clone(&is_done);
            std::thread::spawn(move || -> io::Result<()> {
                let mut log = EventLog::open(&path, keep)?;
                for i in 0..total {
                    log.append(output(&format!("{i:06}{}", "w".repeat(90))))?;
                    if i % 50 == 0 {
                        std::thread::yield_now();
                    }
                }
                is_done.store(true, Ordering::Release);
                Ok(())
            })
        };
        let mut reader = LogReader::new(dir.path(), Seq::ZERO);
        let mut events = Vec::new();
        loop {
            let was_done = is_done.load(Ordering::Acquire);
            let n = reader.read(300 + round * 97, &mut events)?;
            if n == 0 && was_done {
                break;
            }
        }
        writer
            .join()
            .map_err(|_| io::Error::other("writer panicked"))??;
        assert!(list_segments(dir.path())?.len() >= 2);
        let seqs: Vec<u64> = events.iter().map(|e| e.seq.0).collect();
        assert_eq!(seqs, (1..=total).collect::<Vec<_>>(), "round {round}");
        for (i, event) in events.iter().enumerate() {
            let EventKind::Output { data } = &event.kind else {
                return Err(io::Error::other("not an output event"));
            };
            assert!(data.starts_with(format!("{i:06}").as_bytes()));
        }
    }
    Ok(())
}

#[test]
fn a_reader_slower_than_the_limit_continues_at_the_oldest_kept_event() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let keep = EVENT_LOG_KEEP_MIN_BYTES;
    let mut log = EventLog::open(dir.path(), keep)?;
    for _ in 0..20 {
        log.append(output(&"s".repeat(200)))?;
    }
    let mut reader = LogReader::new(dir.path(), Seq::ZERO);
    let mut events = Vec::new();
    reader.read(500, &mut events)?;
    for _ in 0..3000 {
        log.append(output(&"s".repeat(200)))?;
    }
    let oldest = oldest_seq(dir.path())?.map_or(0, |s| s.0);
    assert!(oldest > 1000);
    while reader.read(500, &mut events)? > 0 {}
    let seqs: Vec<u64> = events.iter().map(|e| e.seq.0).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order, no repeat");
    assert_eq!(seqs.last(), Some(&3020));
    let from_oldest = seqs.iter().position(|&s| s == oldest);
    assert!(from_oldest.is_some(), "the oldest kept event was read");
    let tail = &seqs[from_oldest.unwrap_or(0)..];
    assert_eq!(tail, (oldest..=3020).collect::<Vec<_>>().as_slice());
    Ok(())
}

#[test]
fn subscribers_by_global_offset_follow_rotations() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let keep = EVENT_LOG_KEEP_MIN_BYTES;
    let mut log = EventLog::open(dir.path(), keep)?;
    // A subscriber that keeps up, reading in small steps between appends.
    let mut cursor = log.offset_after(Seq::ZERO)?;
    let mut seen = Vec::new();
    for i in 0..1500u32 {
        log.append(output(&format!("{i} {}", "g".repeat(i as usize % 700))))?;
        while cursor < log.len() {
            let mut out = Vec::new();
            let next = log.read_lines(cursor, 1000, &mut out)?;
            assert!(next > cursor);
            cursor = next;
            seen.extend(line_seqs(&out));
        }
    }
    assert!(list_segments(dir.path())?.len() >= 2);
    assert!(oldest_seq(dir.path())? > Some(Seq(100)));
    assert_eq!(seen, (1..=1500).collect::<Vec<_>>());

    // A subscriber that stopped reading: its position was deleted.
    let stalled = cursor;
    for _ in 0..1000 {
        log.append(output(&"h".repeat(300)))?;
    }
    let oldest = oldest_seq(dir.path())?.map_or(0, |s| s.0);
    assert!(oldest > 1500);
    let mut cursor = stalled;
    let mut seen = Vec::new();
    while cursor < log.len() {
        let mut out = Vec::new();
        cursor = log.read_lines(cursor, 4096, &mut out)?;
        seen.extend(line_seqs(&out));
    }
    assert_eq!(seen, (oldest..=2500).collect::<Vec<_>>());

    // `offset_after` finds every kept seq, in any segment.
    for after in [0, oldest - 1, oldest, oldest + 1, 2000, 2100, 2499, 2500] {
        let offset = log.offset_after(Seq(after))?;
        let mut out = Vec::new();
        log.read_lines(offset, 100_000, &mut out)?;
        let expected = match after {
            2500 => None,
            after if after < oldest => Some(oldest),
            after => Some(after + 1),
        };
        assert_eq!(line_seqs(&out).first().copied(), expected, "after {after}");
    }
    Ok(())
}

#[test]
fn a_directory_without_a_log_has_no_events() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    assert_eq!(oldest_seq(dir.path())?, None);
    assert_eq!(newest_seq(dir.path())?, None);
    let mut events = Vec::new();
    assert_eq!(
        LogReader::new(dir.path(), Seq::ZERO).read(100, &mut events)?,
        0
    );
    let log = EventLog::open(dir.path(), EVENT_LOG_KEEP_BYTES)?;
    assert!(log.is_empty());
    assert_eq!(oldest_seq(dir.path())?, None);
    assert_eq!(newest_seq(dir.path())?, None);
    Ok(())
}

#[test]
fn a_log_file_that_is_a_symbolic_link_is_refused_not_followed() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let elsewhere = tempfile::tempdir()?;
    // Another log outside the terminal's directory, with one event.
    let mut other = EventLog::open(elsewhere.path(), EVENT_LOG_KEEP_MIN_BYTES)?;
    other.append(EventKind::Output {
        data: b"secret".to_vec(),
    })?;
    drop(other);
    let target = elsewhere.path().join("events.jsonl");
    let before = fs::read(&target)?;
    std::os::unix::fs::symlink(&target, dir.path().join("events.jsonl"))?;
    let refused = EventLog::open(dir.path(), EVENT_LOG_KEEP_MIN_BYTES).err();
    assert!(
        refused
            .as_ref()
            .is_some_and(|e| e.to_string().contains("symbolic link")),
        "{refused:?}"
    );
    assert_eq!(fs::read(&target)?, before, "the target is untouched");
    // Readers do not follow it either.
    let mut reader = TerminalLog::in_dir(dir.path()).reader(Seq::ZERO);
    let mut events = Vec::new();
    let read = reader.read(1 << 20, &mut events);
    assert!(read.is_err() && events.is_empty(), "{read:?} {events:?}");
    Ok(())
}

/// The fuzz target `event_line` found a line whose `seq` has 20 digits (every `seq` from
/// 10^19 up to `u64::MAX`) that parsed as an event but whose prefix read as none.
#[test]
fn a_seq_of_twenty_digits_reads_from_the_prefix() {
    for seq in [
        10_000_000_000_000_000_000,
        14_544_444_444_444_444_457,
        u64::MAX,
    ] {
        let line = format!(r#"{{"seq":{seq},"ts":1.5,"type":"x"}}"#);
        assert_eq!(parse_seq_prefix(line.as_bytes()), Some(Seq(seq)), "{line}");
    }
    // One more than the largest, or more digits: none.
    for text in ["18446744073709551616", "100000000000000000000"] {
        let line = format!(r#"{{"seq":{text},"ts":1.5}}"#);
        assert_eq!(parse_seq_prefix(line.as_bytes()), None, "{line}");
    }
}

/// The lines just appended are read back from memory exactly as from the file: the same bytes
/// and the same next offset for every start and size, a line longer than the size whole, and
/// a line too long to keep read from the file.
#[test]
fn the_last_lines_read_from_memory_as_from_the_file() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut log = EventLog::open(dir.path(), EVENT_LOG_KEEP_MIN_BYTES)?;
    log.append(output("before"))?;
    log.forget_recent();
    let first = log.len();
    for i in 0..40usize {
        log.append(output(&"m".repeat(i * 37 % 900)))?;
    }
    let read_all = |log: &EventLog, max: usize| -> io::Result<Vec<(u64, Vec<u8>)>> {
        let mut cursor = first;
        let mut reads = Vec::new();
        while cursor < log.len() {
            let mut out = Vec::new();
            let next = log.read_lines(cursor, max, &mut out)?;
            assert!(next > cursor, "no progress at {cursor} with {max}");
            reads.push((next, out));
            cursor = next;
        }
        Ok(reads)
    };
    for max in (1..3000).step_by(7).chain([4096, 100_000]) {
        let from_memory = read_all(&log, max)?;
        let kept = std::mem::take(&mut log.recent);
        let from_file = read_all(&log, max)?;
        log.recent = kept;
        assert_eq!(from_memory, from_file, "max {max}");
    }
    // Earlier lines than the kept ones, and a line too long to keep, come from the file.
    let mut out = Vec::new();
    log.read_lines(0, 100_000, &mut out)?;
    assert!(line_seqs(&out).starts_with(&[1, 2]));
    let long_at = log.len();
    log.append(output(&"L".repeat(RECENT_MAX_BYTES)))?;
    assert!(log.recent.is_empty());
    let mut out = Vec::new();
    assert_eq!(log.read_lines(long_at, 10, &mut out)?, log.len());
    assert_eq!(line_seqs(&out), vec![42]);
    Ok(())
}
