//! The VT screen of a terminal: an avt emulator with scrollback, fed through a stateful UTF-8
//! decoder (a multi-byte character split across two PTY reads is decoded whole; invalid bytes
//! become U+FFFD). The raw bytes stay untouched in the event log.

use serde::Serialize;

/// Scrollback lines kept by the emulator (docs/compatibility.md#defaults).
pub const SCROLLBACK_LINES: usize = 10_000;

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
}

impl Screen {
    pub fn new(cols: u16, rows: u16) -> Self {
        let vt = avt::Terminal::with_scrollback(
            usize::from(cols.max(1)),
            usize::from(rows.max(1)),
            Some(SCROLLBACK_LINES),
        );
        Self {
            // Both dimensions are at least 1, so construction cannot fail; fall back anyway.
            vt: vt.unwrap_or_else(|_| fallback_terminal()),
            decoder: Utf8Decoder::default(),
        }
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        let text = self.decoder.decode(bytes);
        self.vt.feed(text.as_str());
    }

    pub fn resize(&mut self, cols: u16, rows: u16) {
        self.vt
            .resize(usize::from(cols.max(1)), usize::from(rows.max(1)));
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
            lines: self
                .vt
                .screen()
                .visible_lines()
                .map(|line| line.text().trim_end().to_owned())
                .collect(),
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
        self.vt
            .screen()
            .all_lines()
            .map(|line| line.text().trim_end().to_owned())
            .collect()
    }

    /// Escape sequences that repaint this screen on a fresh terminal of the same size.
    pub fn dump(&self) -> String {
        self.vt.dump()
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
}
