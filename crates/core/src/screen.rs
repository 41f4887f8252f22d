//! The VT screen of a terminal: an avt emulator with scrollback, fed through a stateful UTF-8
//! decoder (a multi-byte character split across two PTY reads is decoded whole; invalid bytes
//! become U+FFFD). The raw bytes stay untouched in the event log.
//!
//! Memory is bounded per terminal (docs/memory.md): the emulator keeps its cells (a character
//! with its colours, 16 bytes, for every column of a row) for the visible rows and the newest
//! [`EMULATOR_SCROLLBACK_LINES`] above them only; a row that scrolls further up is kept as its
//! text, trailing spaces trimmed, which is all a reader of the scrollback gets of it. Of those
//! older rows at most [`SCROLLBACK_LINES`] in all and [`SCROLLBACK_TEXT_MAX_BYTES`] of text are
//! kept, the oldest going first.

use std::collections::VecDeque;

use avt::observer::{Observation, Observer};
use serde::Serialize;

/// Scrollback lines kept (docs/compatibility.md#defaults), text rows and emulator rows together.
pub const SCROLLBACK_LINES: usize = 10_000;
/// Scrollback rows the emulator keeps as cells (and reflows on resize); older rows are text.
pub const EMULATOR_SCROLLBACK_LINES: usize = 200;
/// Most text (bytes, with a per-row overhead of 32 bytes counted) the rows older
/// than the emulator's hold: enough for all 10,000 rows of a 200-column terminal.
pub const SCROLLBACK_TEXT_MAX_BYTES: usize = 4 * 1024 * 1024;
/// What one text row costs beyond its characters (its pointer, length and allocation).
const TEXT_ROW_OVERHEAD_BYTES: usize = 32;

/// Decodes a byte stream to text, carrying an incomplete trailing sequence to the next call.
#[derive(Default)]
pub struct Utf8Decoder {
    carry: Vec<u8>,
}

impl Utf8Decoder {
    pub fn decode(&mut self, bytes: &[u8]) -> String {
        let mut data = std::mem::take(&mut self.carry);
        data.extend_from_slice(bytes);
        let mut out = String::with_capacity(data.len());
        let mut rest = &data[..];
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    out.push_str(text);
                    break;
                }
                Err(error) => {
                    let valid = error.valid_up_to();
                    out.push_str(std::str::from_utf8(&rest[..valid]).unwrap_or_default());
                    match error.error_len() {
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            rest = &rest[valid + bad..];
                        }
                        None => {
                            self.carry = rest[valid..].to_vec();
                            break;
                        }
                    }
                }
            }
        }
        out
    }

    /// What is left: an incomplete character at the very end, as U+FFFD.
    pub fn finish(&mut self) -> String {
        String::from_utf8_lossy(&std::mem::take(&mut self.carry)).into_owned()
    }
}

/// How many bytes at the end of `bytes` start a UTF-8 character that is not complete yet.
pub fn incomplete_utf8_tail(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(3) {
        let byte = bytes[bytes.len() - back];
        if byte & 0xC0 == 0x80 {
            continue; // a continuation byte: look further back for the lead byte
        }
        let needed = match byte {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return 0,
        };
        return if back < needed { back } else { 0 };
    }
    0
}

/// What a client sees of the screen.
#[derive(Clone, Debug, Serialize)]
pub struct ScreenView {
    pub cols: u16,
    pub rows: u16,
    /// The visible rows, trailing spaces trimmed.
    pub lines: Vec<String>,
    pub cursor_row: u16,
    pub cursor_col: u16,
    pub is_alternate_screen: bool,
}

impl ScreenView {
    /// Its last `n` rows that are not blank, joined with " / " (what a message quotes of it).
    pub fn tail(&self, n: usize) -> String {
        let mut rows: Vec<&str> = self
            .lines
            .iter()
            .map(|line| line.trim())
            .filter(|line| !line.is_empty())
            .rev()
            .take(n)
            .collect();
        rows.reverse();
        rows.join(" / ")
    }
}

pub struct Screen {
    vt: avt::Terminal,
    decoder: Utf8Decoder,
    /// Rows older than the emulator's scrollback, as text, oldest first.
    older: TextRows,
}

/// Scrollback rows kept as text, bounded in rows and bytes.
#[derive(Default)]
struct TextRows {
    rows: VecDeque<Box<str>>,
    bytes: usize,
}

/// A row's text without its trailing whitespace, as `line.text().trim_end()` gives it, built
/// from the cells before the trailing blanks only: a row that scrolls off is mostly blanks
/// (`seq` fills 7 of 200 columns), and rendering all of them and trimming them again was
/// most of the screen's cost under a flood of short lines.
fn row_text(line: &avt::Line) -> String {
    let cells = line.cells();
    // The second cell of a wide character has no character of its own (width 0).
    // Most cells scanned are blanks: the plain space is ruled out first.
    let end = cells
        .iter()
        .rposition(|cell| {
            let c = cell.char();
            c != ' ' && !c.is_whitespace() && cell.width() != 0
        })
        .map_or(0, |last| last + 1);
    let shown = cells[..end].iter().filter(|cell| cell.width() != 0);
    let bytes = shown.clone().map(|cell| cell.char().len_utf8()).sum();
    let mut text = String::with_capacity(bytes);
    text.extend(shown.map(|cell| cell.char()));
    text
}

impl TextRows {
    fn push(&mut self, text: String) {
        self.bytes += text.len() + TEXT_ROW_OVERHEAD_BYTES;
        self.rows.push_back(text.into_boxed_str());
        while self.rows.len() > SCROLLBACK_LINES - EMULATOR_SCROLLBACK_LINES
            || self.bytes > SCROLLBACK_TEXT_MAX_BYTES
        {
            let Some(old) = self.rows.pop_front() else {
                break;
            };
            self.bytes -= old.len() + TEXT_ROW_OVERHEAD_BYTES;
        }
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

/// Turns the rows the emulator evicts into text rows; a hard reset (RIS) clears them, as it
/// clears the emulator's own scrollback.
struct Evictions<'a>(&'a mut TextRows);

impl Observer for Evictions<'_> {
    type Output = ();

    fn before(&mut self, _: &mut Observation<'_>, operation: &avt::Operation) {
        if matches!(
            operation,
            avt::Operation::Function(avt::parser::Function::Ris)
        ) {
            self.0.clear();
        }
    }

    fn evicted(&mut self, _: &mut Observation<'_>, line: &avt::Line) {
        self.0.push(row_text(line));
    }

    fn end(&mut self, _: &mut Observation<'_>) {}
}

impl Screen {
    pub fn new(cols: u16, rows: u16) -> Self {
        let vt = avt::Terminal::with_scrollback(
            usize::from(cols.max(1)),
            usize::from(rows.max(1)),
            Some(EMULATOR_SCROLLBACK_LINES),
        );
        Self {
            // Both dimensions are at least 1, so construction cannot fail; fall back anyway.
            vt: vt.unwrap_or_else(|_| fallback_terminal()),
            decoder: Utf8Decoder::default(),
            older: TextRows::default(),
        }
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        let text = self.decoder.decode(bytes);
        self.vt.feed_with(text.as_str(), Evictions(&mut self.older));
    }

    pub fn resize(&mut self, cols: u16, rows: u16) {
        self.vt.resize_with(
            usize::from(cols.max(1)),
            usize::from(rows.max(1)),
            Evictions(&mut self.older),
        );
    }

    pub fn size(&self) -> (u16, u16) {
        let (cols, rows) = self.vt.size();
        (to_u16(cols), to_u16(rows))
    }

    pub fn view(&self) -> ScreenView {
        let (cols, rows) = self.size();
        let cursor = self.vt.cursor();
        ScreenView {
            cols,
            rows,
            lines: self.vt.screen().visible_lines().map(row_text).collect(),
            cursor_row: to_u16(cursor.row),
            cursor_col: to_u16(cursor.col),
            is_alternate_screen: self.vt.active_screen_kind() == avt::ScreenKind::Alternate,
        }
    }

    /// The cursor's `(row, col)`, 0-based.
    pub fn cursor(&self) -> (usize, usize) {
        let cursor = self.vt.cursor();
        (cursor.row, cursor.col)
    }

    /// Every rendered line, scrollback first, trailing spaces trimmed.
    pub fn all_lines(&self) -> Vec<String> {
        self.lines_page(0, usize::MAX).0
    }

    /// A page of [`Screen::all_lines`]: the `count` lines that end `offset` lines before the
    /// newest (clamped to what exists), and how many lines there are in all. Only the page's
    /// lines are rendered, so a page costs the same whatever the scrollback holds.
    pub fn lines_page(&self, offset: usize, count: usize) -> (Vec<String>, usize) {
        let screen = self.vt.screen();
        // The text rows are older than the emulator's rows only on the primary screen (the
        // alternate screen has no scrollback).
        let older_len = if self.vt.active_screen_kind() == avt::ScreenKind::Alternate {
            0
        } else {
            self.older.rows.len()
        };
        let total = older_len + screen.all_lines().count();
        let end = total.saturating_sub(offset);
        let start = end.saturating_sub(count);
        let mut page = Vec::with_capacity(end - start);
        if start < older_len {
            let upto = end.min(older_len);
            page.extend(
                self.older
                    .rows
                    .range(start..upto)
                    .map(|row| row.to_string()),
            );
        }
        let from = start.saturating_sub(older_len);
        let to = end.saturating_sub(older_len);
        page.extend(screen.all_lines().skip(from).take(to - from).map(row_text));
        (page, total)
    }

    /// Escape sequences that repaint this screen on a fresh terminal of the same size.
    pub fn dump(&self) -> String {
        self.vt.dump()
    }

    /// Puts the screen to sleep: the emulator and its cells go, and what it showed stays as
    /// the escape sequences that repaint it ([`Screen::dump`]: the visible rows of both
    /// buffers with their colours, the cursor, the modes and an unfinished sequence). The
    /// emulator's own scrollback rows join the older rows as their text, which is all a
    /// reader of the scrollback gets of them; only their reflow on a later resize is lost.
    pub fn sleep(mut self) -> SleepingScreen {
        let (cols, rows) = self.vt.size();
        let primary = self.vt.primary_screen();
        let scrolled = primary.all_lines().count().saturating_sub(rows);
        for line in primary.all_lines().take(scrolled) {
            self.older.push(row_text(line));
        }
        SleepingScreen {
            cols,
            rows,
            dump: self.vt.dump().into_boxed_str(),
            decoder: self.decoder,
            older: self.older,
        }
    }
}

/// A screen asleep ([`Screen::sleep`]): a few hundred bytes for an idle shell's prompt where the
/// emulator holds every cell of both buffers (80×24: about 70 KiB).
pub struct SleepingScreen {
    cols: usize,
    rows: usize,
    dump: Box<str>,
    decoder: Utf8Decoder,
    older: TextRows,
}

impl SleepingScreen {
    /// The screen again, as it was: a fresh emulator of the same size fed the dump.
    pub fn wake(self) -> Screen {
        let mut vt =
            avt::Terminal::with_scrollback(self.cols, self.rows, Some(EMULATOR_SCROLLBACK_LINES))
                .unwrap_or_else(|_| fallback_terminal());
        vt.feed(&*self.dump);
        Screen {
            vt,
            decoder: self.decoder,
            older: self.older,
        }
    }

    /// Bytes it holds (the dump and the older rows' text).
    pub fn held_bytes(&self) -> usize {
        self.dump.len() + self.older.bytes
    }
}

fn to_u16(n: usize) -> u16 {
    u16::try_from(n).unwrap_or(u16::MAX)
}

#[allow(
    clippy::expect_used,
    reason = "1x1 is a valid size by avt's own contract"
)]
fn fallback_terminal() -> avt::Terminal {
    avt::Terminal::new(1, 1).expect("1x1 terminal")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_characters_are_found_at_the_end_only() {
        assert_eq!(incomplete_utf8_tail(b"abc"), 0);
        assert_eq!(incomplete_utf8_tail("é".as_bytes()), 0);
        assert_eq!(incomplete_utf8_tail(&"é".as_bytes()[..1]), 1);
        assert_eq!(incomplete_utf8_tail(&"€".as_bytes()[..2]), 2);
        assert_eq!(incomplete_utf8_tail(&"😀".as_bytes()[..3]), 3);
        assert_eq!(incomplete_utf8_tail(b"ab\xff"), 0);
    }

    #[test]
    fn a_rows_text_is_its_rendered_text_without_trailing_whitespace() {
        let mut screen = Screen::new(12, 8);
        screen.feed(
            concat!(
                "plain\r\n",
                "trail   \r\n",
                "\x1b[41m   \x1b[0m\r\n", // coloured blanks only
                "a\tb\t\r\n",             // a tab moves the cursor; nothing is kept
                "宽字符 x\r\n",           // wide characters and their second cells
                "emoji 🎉\u{3000}\r\n",   // an ideographic space trims as whitespace
                "exactly-twelve",         // fills the row, then wraps
                "\r\n\x1b[5C\u{a0}",      // a no-break space after a cursor jump
            )
            .as_bytes(),
        );
        let rows: Vec<(String, String)> = screen
            .vt
            .screen()
            .all_lines()
            .map(|line| (row_text(line), line.text().trim_end().to_owned()))
            .collect();
        assert!(rows.iter().any(|(fast, _)| fast == "宽字符 x"));
        for (fast, rendered) in rows {
            assert_eq!(fast, rendered);
        }
    }

    #[test]
    fn split_characters_are_decoded_whole() {
        let mut decoder = Utf8Decoder::default();
        let bytes = "ab€🎉".as_bytes();
        let mut out = String::new();
        for b in bytes {
            out.push_str(&decoder.decode(&[*b]));
        }
        assert_eq!(out, "ab€🎉");
        assert_eq!(decoder.decode(b"\xffok"), "\u{FFFD}ok");
    }

    #[test]
    fn the_screen_shows_text_and_follows_resize() {
        let mut screen = Screen::new(20, 5);
        screen.feed(b"hello\r\n\x1b[31mworld\x1b[0m");
        let view = screen.view();
        assert_eq!(&view.lines[..2], ["hello", "world"]);
        assert_eq!((view.cursor_row, view.cursor_col), (1, 5));
        screen.resize(40, 10);
        assert_eq!(screen.size(), (40, 10));
    }

    #[test]
    fn scrollback_keeps_its_lines_as_text_past_the_emulators_rows() {
        let mut screen = Screen::new(20, 4);
        for i in 0..12_000 {
            screen.feed(format!("\x1b[1;3{}mline {i}\x1b[0m\r\n", i % 8).as_bytes());
        }
        let lines = screen.all_lines();
        // 10,000 scrollback lines and the 4 visible rows (the last one empty), in order.
        assert_eq!(lines.len(), SCROLLBACK_LINES + 4);
        let expected: Vec<String> = (1997..12_000).map(|i| format!("line {i}")).collect();
        assert_eq!(lines[..SCROLLBACK_LINES + 3], expected[..]);
        assert_eq!(lines[SCROLLBACK_LINES + 3], "");
        // A hard reset forgets the scrollback, text rows included.
        screen.feed(b"\x1bc");
        assert_eq!(screen.all_lines().len(), 4);
    }

    #[test]
    fn a_page_of_lines_is_the_same_slice_of_all_lines_on_either_side_of_the_text_rows() {
        let mut screen = Screen::new(20, 4);
        for i in 0..3_000 {
            screen.feed(format!("\x1b[1;3{}mline {i}\x1b[0m\r\n", i % 8).as_bytes());
        }
        let check = |screen: &Screen| {
            let all = screen.all_lines();
            let total = all.len();
            for (offset, count) in [
                (0, 100),
                (0, 1),
                (150, 100),
                (203, 10),
                (total.saturating_sub(5), 100),
                (total, 10),
                (total + 7, 10),
                (0, total + 50),
            ] {
                let end = total.saturating_sub(offset);
                let start = end.saturating_sub(count);
                assert_eq!(
                    screen.lines_page(offset, count),
                    (all[start..end].to_vec(), total),
                    "offset {offset}, count {count}"
                );
            }
        };
        check(&screen);
        // The alternate screen has no scrollback, text rows or not.
        screen.feed(b"\x1b[?1049hfull screen");
        check(&screen);
        assert_eq!(screen.lines_page(0, 100).1, 4);
    }

    /// Everything a reader gets of a screen (its rows, size, cursor, which buffer shows), and
    /// the dump, which holds what later output depends on (modes, pen, parser state).
    fn observed(screen: &Screen) -> String {
        let view = screen.view();
        format!(
            "{:?} {:?} {:?} {:?} {}",
            screen.all_lines(),
            screen.dump(),
            screen.size(),
            screen.cursor(),
            view.is_alternate_screen,
        )
    }

    #[test]
    fn a_screen_put_to_sleep_wakes_as_it_was_and_goes_on_alike() {
        let histories: [&[u8]; 6] = [
            b"\x1b]133;A\x07user@host:~$ \x1b]133;B\x07",
            b"\x1b[1;31mred\x1b[0m plain \x1b[38;5;200mpink\x1b[48;2;1;2;3m bg\x1b[0m\r\n\x1b[4munder",
            // A line that wraps, then more rows than the screen has (emulator scrollback).
            b"0123456789012345678901234567890123456789\r\nl1\r\nl2\r\nl3\r\nl4\r\nl5\r\nl6\r\nlast",
            // A full-screen program: the alternate screen, a scroll region, a saved cursor.
            b"before\r\n\x1b[?1049h\x1b[2J\x1b[H\x1b[2;4rtop\x1b7\x1b[3;5Hmid\x1b[?25l",
            // An escape sequence cut off in the middle, and a character cut off in the middle.
            b"half \x1b[3",
            b"caf\xc3",
        ];
        for (i, history) in histories.iter().enumerate() {
            let mut awake = Screen::new(20, 5);
            let mut slept = Screen::new(20, 5);
            awake.feed(history);
            slept.feed(history);
            let before = observed(&slept);
            let mut slept = slept.sleep().wake();
            assert_eq!(
                observed(&slept),
                before,
                "history {i}: the screen woke as it was"
            );
            // The same output and a resize after it give the same screen.
            for more in [
                &b"\x1b[0m\xa9 next\r\nrow"[..],
                b"\x1b[?1049l\x1b[rback\r\n",
            ] {
                awake.feed(more);
                slept.feed(more);
                assert_eq!(awake.view().lines, slept.view().lines, "history {i}");
                assert_eq!(awake.cursor(), slept.cursor(), "history {i}");
            }
            awake.resize(20, 3);
            slept.resize(20, 3);
            assert_eq!(awake.all_lines(), slept.all_lines(), "history {i}");
        }
    }

    #[test]
    fn a_sleeping_screen_holds_far_less_than_its_cells() {
        let mut screen = Screen::new(80, 24);
        screen.feed(b"\x1b]133;A\x07user@host:~$ \x1b]133;B\x07");
        let asleep = screen.sleep();
        assert!(asleep.held_bytes() < 1024, "{}", asleep.held_bytes());
    }

    #[test]
    fn scrollback_text_is_bounded_in_bytes() {
        let mut screen = Screen::new(1000, 2);
        let long = "x".repeat(1000);
        for _ in 0..5000 {
            screen.feed(format!("{long}\r\n").as_bytes());
        }
        let kept = SCROLLBACK_TEXT_MAX_BYTES / (1000 + TEXT_ROW_OVERHEAD_BYTES);
        assert_eq!(
            screen.all_lines().len(),
            kept + EMULATOR_SCROLLBACK_LINES + 2
        );
    }
}
