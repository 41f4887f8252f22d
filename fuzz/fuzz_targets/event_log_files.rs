//! The event log on hostile files (`ptyhub_core::event_log` and its reader): segments and an
//! active `events.jsonl` with torn lines, NUL padding, huge lines, bad base64, lines out of
//! order and segment names that lie. Readers (the server's side) must end, return events in
//! strictly increasing `seq` after their start whatever size they read in, and agree with each
//! other; the holder's open must repair what it can so that its next append is read back.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use ptyhub_core::event_log::{EventLog, TerminalLog, segment_file_name};
use ptyhub_protocol::event::{Event, EventKind, Seq};

/// Most bytes of a generated long line (past every read chunk of the readers).
const HUGE_LINE_MAX_BYTES: u32 = 300 * 1024;

#[derive(Arbitrary, Debug)]
struct Input {
    /// Rotated segments: the `seq` their name claims (small, so names and contents meet) and
    /// their bytes.
    segments: Vec<(u8, Vec<u8>)>,
    /// The active segment's bytes; `None` leaves it missing (a crash during a rotation).
    active: Option<Vec<u8>>,
    /// NUL bytes appended to the active segment (a crash on a filesystem that pads).
    nul_padding: u16,
    /// A long valid output line appended to the active segment: its `seq` and length.
    huge: Option<(u8, u32)>,
    after: u8,
    /// The read size of the second reader.
    small_read: u16,
}

fn read_all(log: &TerminalLog, after: Seq, max_bytes: usize, bound: usize) -> Vec<Seq> {
    let mut reader = log.reader(after);
    let mut events = Vec::new();
    let mut calls = 0;
    loop {
        let before = events.len();
        let n = reader.read(max_bytes, &mut events).unwrap_or(0);
        assert_eq!(events.len() - before, n);
        if n == 0 {
            break;
        }
        calls += 1;
        assert!(calls <= bound, "the reader does not end");
    }
    events.into_iter().map(|e: Event| e.seq).collect()
}

fuzz_target!(|input: Input| {
    let Ok(dir) = tempfile::tempdir_in(if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    }) else {
        return;
    };
    let path = dir.path();
    let mut total_bytes = 0usize;
    for (first, bytes) in input.segments.iter().take(4) {
        total_bytes += bytes.len();
        let _ = std::fs::write(path.join(segment_file_name(Seq(u64::from(*first)))), bytes);
    }
    if let Some(active) = &input.active {
        let mut bytes = active.clone();
        if let Some((seq, len)) = input.huge {
            let len = (len % HUGE_LINE_MAX_BYTES) as usize;
            bytes.extend_from_slice(
                format!("{{\"seq\":{seq},\"ts\":0,\"type\":\"pty.output\",\"data_b64\":\"")
                    .as_bytes(),
            );
            bytes.resize(bytes.len() + len / 4 * 4, b'A');
            bytes.extend_from_slice(b"\"}\n");
        }
        bytes.resize(bytes.len() + usize::from(input.nul_padding), 0);
        total_bytes += bytes.len();
        let _ = std::fs::write(path.join("events.jsonl"), &bytes);
    }

    // Readers: strictly increasing seqs after the start, the same whatever the read size.
    let log = TerminalLog::in_dir(path);
    let after = Seq(u64::from(input.after));
    let bound = total_bytes + 16;
    let big = read_all(&log, after, 64 * 1024, bound);
    assert!(big.windows(2).all(|w| w[0] < w[1]), "{big:?}");
    assert!(big.iter().all(|&seq| seq > after), "{big:?}");
    let small = read_all(&log, after, usize::from(input.small_read), bound);
    assert_eq!(big, small);
    let mut all = Vec::new();
    let _ = log.read_events(after, |event| all.push(event.seq));
    assert_eq!(big, all);
    let _ = log.oldest_seq();
    let _ = log.newest_seq();

    // The holder: opening repairs the tail, and the next append is there to read.
    let Ok(mut holder) = EventLog::open(path, 0) else {
        return;
    };
    let Ok(seq) = holder.append(EventKind::Output {
        data: b"after".to_vec(),
    }) else {
        return;
    };
    let mut events = Vec::new();
    let _ = log.read_events(Seq(seq.0 - 1), |event| events.push(event));
    assert!(
        events.iter().any(|e| e.seq == seq
            && e.kind
                == EventKind::Output {
                    data: b"after".to_vec()
                }),
        "the appended event {seq:?} is not read back: {events:?}"
    );
});
