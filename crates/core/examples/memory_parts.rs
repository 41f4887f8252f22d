//! Where a terminal's memory goes: the parts the server keeps per terminal (the VT screen with
//! its scrollback, the command tracker with the last command's clean text and the console
//! records, a clean-text capture), each fed the same output in this process under a counting
//! allocator, so the bytes each part holds afterwards (and the most it held while fed) are
//! exact, not read from a process's pages.
//!
//! Run by `bench/memory.py --parts`; by hand: `cargo run -p ptyhub-core --example memory_parts
//! -- 5` (MiB of output, default 5). It prints one JSON object. It does not start a server.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

use ptyhub_core::plain_text::PlainText;
use ptyhub_core::screen::{SCROLLBACK_LINES, Screen};
use ptyhub_core::tracker::CommandTracker;

/// Counts the bytes allocated now and the most allocated at once since the last reset.
struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

#[allow(unsafe_code, reason = "a global allocator is an unsafe trait")]
// SAFETY: every call is passed to the system allocator unchanged; the counters are atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let now = NOW.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) };
        NOW.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const NONCE: &str = "n0nce";

/// `mib` MiB of base64 lines of 76 characters (what `base64` prints), in 64 KiB reads.
fn flood(mib: f64) -> Vec<Vec<u8>> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let total = (mib * 1024.0 * 1024.0) as usize;
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut bytes = Vec::with_capacity(total + 80);
    while bytes.len() < total {
        for _ in 0..76 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            bytes.push(ALPHABET[(state >> 58) as usize]);
        }
        bytes.extend_from_slice(b"\r\n");
    }
    bytes.chunks(64 * 1024).map(<[u8]>::to_vec).collect()
}

fn mark(kind: &str) -> Vec<u8> {
    format!("\x1b]133;{kind};k={NONCE}\x07").into_bytes()
}

/// Runs `make` then `feed` and reports what the value holds afterwards and at its peak.
fn measure<T>(part: &str, make: impl FnOnce() -> T, feed: impl FnOnce(&mut T)) -> String {
    let before = NOW.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let mut value = make();
    feed(&mut value);
    let held = NOW.load(Ordering::Relaxed).saturating_sub(before);
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    drop(value);
    format!(r#"{{"part": "{part}", "held": {held}, "peak": {peak}}}"#)
}

fn main() -> std::io::Result<()> {
    let mib: f64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5.0);
    let chunks = flood(mib);
    let mut parts = Vec::new();
    // What an idle terminal holds: a shell that printed its prompt and nothing else.
    let prompt = [mark("A"), b"user@host:~$ ".to_vec(), mark("B")].concat();
    for (cols, rows) in [(80, 24), (200, 50)] {
        parts.push(measure(
            &format!("VT screen {cols}x{rows} of an idle terminal (one prompt)"),
            || Screen::new(cols, rows),
            |screen| screen.feed(&prompt),
        ));
    }
    parts.push(measure(
        "command tracker of an idle terminal (one prompt)",
        || CommandTracker::new(NONCE),
        |tracker| {
            tracker.feed(&prompt);
        },
    ));
    parts.push(measure(
        "VT screen 80x24 (cells for the screen and the newest rows, text for older rows)",
        || Screen::new(80, 24),
        |screen| chunks.iter().for_each(|c| screen.feed(c)),
    ));
    parts.push(measure(
        "avt alone with 10,000 rows of scrollback as cells (what the screen was)",
        || avt::Terminal::with_scrollback(80, 24, Some(SCROLLBACK_LINES)),
        |vt| {
            if let Ok(vt) = vt {
                chunks
                    .iter()
                    .for_each(|c| vt.feed(String::from_utf8_lossy(c).as_ref()));
            }
        },
    ));
    parts.push(measure(
        "command tracker after the command (its kept text, console record, timeline entry)",
        || CommandTracker::new(NONCE),
        |tracker| {
            tracker.feed(&[mark("A"), b"$ ".to_vec()].concat());
            tracker.submit("flood", "flood");
            tracker.feed(&[b"flood\r\n".to_vec(), mark("C")].concat());
            chunks.iter().for_each(|c| {
                tracker.feed(c);
            });
            tracker.feed(&[mark("D;0"), mark("A"), b"$ ".to_vec()].concat());
        },
    ));
    parts.push(measure(
        "the whole clean text of the command (what the tracker kept before)",
        PlainText::new,
        |text| chunks.iter().for_each(|c| text.feed(c)),
    ));
    parts.push(measure(
        "an unterminated OSC followed by the output, in a clean-text capture (vte without std)",
        PlainText::new,
        |text| {
            text.feed(b"\x1b]0;");
            chunks.iter().for_each(|c| text.feed(c));
        },
    ));
    let mut out = std::io::stdout().lock();
    writeln!(out, r#"{{"mib": {mib}, "parts": [{}]}}"#, parts.join(", "))
}
