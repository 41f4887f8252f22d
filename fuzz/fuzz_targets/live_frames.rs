//! WebSocket frames (`ptyhub_protocol::live`): the body of a client's text frame goes through
//! what the server does with it before any terminal is involved ([`ClientFrame::from_text`],
//! then the size rules of a `resize`), and the same bytes through a client's reading of a
//! server frame. Neither may panic; a frame that parses reads back the same from its own text.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ptyhub_protocol::ids::TermSize;
use ptyhub_protocol::live::{ClientFrame, ServerFrame, resize_size};

fuzz_target!(|data: &[u8]| {
    // A text frame that is not UTF-8 is closed (1007) by the WebSocket layer before this.
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(frame) = ClientFrame::from_text(body) {
        let again = ClientFrame::from_text(&frame.to_text());
        assert_eq!(again.as_ref().ok(), Some(&frame), "{body:?}");
        if let ClientFrame::Resize { cols, rows, data } = frame
            && let Ok((cols, rows)) = resize_size(cols, rows, data)
            && let Ok(size) = TermSize::new(cols, rows)
        {
            assert!((1..=TermSize::MAX_DIM).contains(&size.cols));
            assert!((1..=TermSize::MAX_DIM).contains(&size.rows));
        }
    }
    if let Ok(frame) = serde_json::from_str::<ServerFrame>(body) {
        let again = serde_json::from_str::<ServerFrame>(&frame.to_text());
        assert_eq!(again.ok().as_ref(), Some(&frame), "{body:?}");
        let _ = frame.as_error();
    }
});
