//! One line of a terminal's event log (`ptyhub_protocol::event::Event::from_json_line` and the
//! log's `seq` prefix): hostile bytes must parse or be refused without panicking, an event
//! that parses writes a line that parses back to it, and the prefix agrees with the event.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ptyhub_core::event_log::parse_seq_prefix;
use ptyhub_protocol::event::Event;

fuzz_target!(|data: &[u8]| {
    let Ok(event) = Event::from_json_line(data) else {
        return;
    };
    let mut line = Vec::new();
    if event.write_json_line(&mut line).is_err() {
        return;
    }
    assert_eq!(line.last(), Some(&b'\n'));
    let again = Event::from_json_line(&line[..line.len() - 1])
        .unwrap_or_else(|e| panic!("{} does not read back: {e}", String::from_utf8_lossy(&line)));
    assert_eq!(again.seq, event.seq);
    assert_eq!(parse_seq_prefix(&line), Some(event.seq));
    if let Some(seq) = parse_seq_prefix(data) {
        assert_eq!(seq, event.seq, "{}", String::from_utf8_lossy(data));
    }
});
