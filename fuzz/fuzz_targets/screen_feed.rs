//! The VT feed into the screen (`ptyhub_core::screen`) and the plain-text capture
//! (`ptyhub_core::plain_text`): hostile program output, cut into reads at arbitrary places and
//! mixed with resizes, must never panic or hang, and must leave a screen of the size asked.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use ptyhub_core::plain_text::{PlainText, truncate_middle};
use ptyhub_core::screen::{Screen, Utf8Decoder, incomplete_utf8_tail};

/// Larger screens only slow the fuzzer down; the code paths are the same.
const DIM_MAX: u16 = 300;

#[derive(Arbitrary, Debug)]
enum Step {
    Feed(Vec<u8>),
    Resize { cols: u16, rows: u16 },
    View,
}

#[derive(Arbitrary, Debug)]
struct Input {
    cols: u16,
    rows: u16,
    steps: Vec<Step>,
}

fn dim(n: u16) -> u16 {
    n % DIM_MAX + 1
}

fuzz_target!(|input: Input| {
    let mut screen = Screen::new(dim(input.cols), dim(input.rows));
    let mut plain = PlainText::new();
    let mut decoder = Utf8Decoder::default();
    let mut all = Vec::new();
    let mut decoded = String::new();
    for step in &input.steps {
        match step {
            Step::Feed(bytes) => {
                screen.feed(bytes);
                plain.feed(bytes);
                decoded.push_str(&decoder.decode(bytes));
                all.extend_from_slice(bytes);
                assert!(incomplete_utf8_tail(bytes) <= bytes.len().min(3));
            }
            Step::Resize { cols, rows } => {
                screen.resize(dim(*cols), dim(*rows));
                assert_eq!(screen.size(), (dim(*cols), dim(*rows)));
            }
            Step::View => {
                let view = screen.view();
                assert_eq!(view.lines.len(), usize::from(view.rows));
                let _ = screen.all_lines();
                let _ = screen.dump();
            }
        }
    }
    // Decoding in pieces gives what decoding the whole does.
    decoded.push_str(&decoder.finish());
    assert_eq!(decoded, String::from_utf8_lossy(&all));
    let view = screen.view();
    assert_eq!(view.lines.len(), usize::from(view.rows));
    // The dump repaints the screen on a fresh one of the same size without panicking.
    let (cols, rows) = screen.size();
    let mut copy = Screen::new(cols, rows);
    copy.feed(screen.dump().as_bytes());
    let text = plain.text();
    let _ = truncate_middle(&text, 64);
});
