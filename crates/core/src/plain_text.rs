//! A command's output as clean text: what a reader of the terminal would copy, without escape
//! codes.
//!
//! [`PlainText`] is fed the raw PTY bytes of one command as they arrive. It keeps one line of
//! "cursor" state so carriage-return progress bars, backspaces and erase-in-line end as they
//! look on screen, turns `\r\n` into `\n`, drops every escape sequence (colours, titles,
//! shell-integration marks) and decodes UTF-8 across reads (invalid bytes become U+FFFD).
//! Trailing spaces and tabs are kept, so ordinary text output comes back byte for byte.
//! Memory is bounded: past [`CAPTURE_MAX_BYTES`] (or the bound given to
//! [`PlainText::with_max_bytes`]) the middle is dropped and counted.

/// Most text kept for one command (head and tail halves) when it is read back from the log.
pub const CAPTURE_MAX_BYTES: usize = 32 * 1024 * 1024;
/// How the line that stands for the dropped middle of a cut text ends.
pub const OMITTED_MARKER_END: &str = " bytes of output omitted ...]\n";

mod escapes;

use escapes::Escapes;

pub struct PlainText {
    parser: Escapes,
    sink: Sink,
}

struct Sink {
    /// Most bytes of text kept: a head of up to half of it, a tail of a quarter to a half.
    max_bytes: usize,
    /// The longest unfinished line kept as characters: beyond it, what the line holds is moved
    /// to the text, and the cursor cannot move back into it.
    line_max_chars: usize,
    /// Finished lines, each ending in `\n` (the head, once the cap is reached).
    head: String,
    /// Finished lines after the head was frozen, trimmed from the front when too long.
    tail: String,
    is_head_frozen: bool,
    omitted_bytes: u64,
    /// The unfinished line as text, while the cursor only wrote at its end (the usual case:
    /// it joins the text with one copy).
    line: String,
    /// How many characters `line` holds.
    line_chars: usize,
    /// The unfinished line one character per column, once the cursor went back into it (a
    /// progress bar, a backspace); used while `is_in_columns`.
    columns: Vec<char>,
    is_in_columns: bool,
    col: usize,
}

impl Default for PlainText {
    fn default() -> Self {
        Self::new()
    }
}

impl PlainText {
    pub fn new() -> Self {
        Self::with_max_bytes(CAPTURE_MAX_BYTES)
    }

    /// Keeps at most about `max_bytes` of text: the first half of that and the newest
    /// quarter to half, with the count of what was dropped between them.
    pub fn with_max_bytes(max_bytes: usize) -> Self {
        Self {
            parser: Escapes::new(),
            sink: Sink {
                max_bytes,
                line_max_chars: (max_bytes / 16).max(4096),
                head: String::new(),
                tail: String::new(),
                is_head_frozen: false,
                omitted_bytes: 0,
                line: String::new(),
                line_chars: 0,
                columns: Vec::new(),
                is_in_columns: false,
                col: 0,
            },
        }
    }

    /// Whether part of the text was dropped to stay within the bound.
    pub fn is_cut(&self) -> bool {
        self.sink.omitted_bytes > 0
    }

    /// Gives back what the buffers hold beyond their text (a finished command's capture
    /// stays as long as it is the last one).
    pub fn shrink_to_fit(&mut self) {
        self.sink.head.shrink_to_fit();
        self.sink.tail.shrink_to_fit();
        self.sink.line.shrink_to_fit();
        self.sink.columns.shrink_to_fit();
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        self.parser.advance(&mut self.sink, bytes);
    }

    /// The text so far, with the unfinished last line.
    pub fn text(&self) -> String {
        let s = &self.sink;
        let mut out = String::with_capacity(s.head.len() + s.tail.len() + s.line_bytes() + 64);
        out.push_str(&s.head);
        if s.omitted_bytes > 0 {
            out.push_str(&format!("[... {}{OMITTED_MARKER_END}", s.omitted_bytes));
        }
        out.push_str(&s.tail);
        if s.is_in_columns {
            out.extend(s.columns.iter());
        } else {
            out.push_str(&s.line);
        }
        out
    }

    /// Bytes of text held (an upper bound of the text's length).
    pub fn len(&self) -> usize {
        self.sink.head.len() + self.sink.tail.len() + self.sink.line_bytes()
    }

    /// Whether nothing was printed yet.
    pub fn is_empty(&self) -> bool {
        self.sink.head.is_empty() && self.sink.tail.is_empty() && self.sink.line_len() == 0
    }
}

impl Sink {
    /// Characters in the unfinished line.
    fn line_len(&self) -> usize {
        if self.is_in_columns {
            self.columns.len()
        } else {
            self.line_chars
        }
    }

    /// Bytes the unfinished line holds as text (an upper bound in columns).
    fn line_bytes(&self) -> usize {
        if self.is_in_columns {
            self.columns.len() * 4
        } else {
            self.line.len()
        }
    }

    /// The unfinished line, one character per column from now on.
    fn columns(&mut self) -> &mut Vec<char> {
        if !self.is_in_columns {
            self.columns.clear();
            self.columns.extend(self.line.chars());
            self.line.clear();
            self.line_chars = 0;
            self.is_in_columns = true;
        }
        &mut self.columns
    }

    fn commit(&mut self, is_line_end: bool) {
        let target = if self.is_head_frozen {
            &mut self.tail
        } else {
            &mut self.head
        };
        if self.is_in_columns {
            target.extend(self.columns.drain(..));
            self.is_in_columns = false;
        } else {
            target.push_str(&self.line);
            self.line.clear();
            self.line_chars = 0;
        }
        if is_line_end {
            target.push('\n');
        }
        self.col = 0;
        if !self.is_head_frozen && self.head.len() > self.max_bytes / 2 {
            self.is_head_frozen = true;
        } else if self.tail.len() > self.max_bytes / 2 {
            let mut cut = self.tail.len() - self.max_bytes / 4;
            while !self.tail.is_char_boundary(cut) {
                cut += 1;
            }
            self.omitted_bytes += cut as u64;
            self.tail.drain(..cut);
        }
    }

    /// Writes `n` spaces at the end of the unfinished line.
    fn pad(&mut self, n: usize) {
        if self.is_in_columns {
            self.columns.resize(self.columns.len() + n, ' ');
        } else {
            self.line.extend(std::iter::repeat_n(' ', n));
            self.line_chars += n;
        }
    }

    /// A line this long is not a progress bar: what it shows joins the text, and the cursor
    /// starts a line that continues it.
    fn wrap_if_full(&mut self) {
        if self.col >= self.line_max_chars {
            let len = self.line_len();
            if len < self.line_max_chars {
                self.pad(self.line_max_chars - len);
            }
            self.commit(false);
        }
    }

    /// A printable character at the cursor.
    fn print(&mut self, c: char) {
        self.print_str(c.encode_utf8(&mut [0; 4]));
    }

    /// Printable characters (no controls) at the cursor: appended whole while the cursor is
    /// at or past the line's end, over the line a column at a time once it went back.
    fn print_str(&mut self, mut text: &str) {
        'runs: while !text.is_empty() {
            self.wrap_if_full();
            if self.is_in_columns || self.col < self.line_chars {
                // Over the line (a progress bar's next frame): a column at a time, until the
                // line is full.
                self.columns();
                for (at, c) in text.char_indices() {
                    if self.col >= self.line_max_chars {
                        text = &text[at..];
                        continue 'runs;
                    }
                    if let Some(cell) = self.columns.get_mut(self.col) {
                        *cell = c;
                    } else {
                        self.columns.resize(self.col, ' ');
                        self.columns.push(c);
                    }
                    self.col += 1;
                }
                return;
            }
            let room = self.line_max_chars - self.col;
            let (now, chars, rest) = if text.is_ascii() {
                let n = text.len().min(room);
                (&text[..n], n, &text[n..])
            } else {
                match text.char_indices().nth(room) {
                    Some((at, _)) => (&text[..at], room, &text[at..]),
                    None => (text, text.chars().count(), ""),
                }
            };
            self.pad(self.col - self.line_chars);
            self.line.push_str(now);
            self.line_chars += chars;
            self.col += chars;
            text = rest;
        }
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' | 0x0b | 0x0c => self.commit(true),
            b'\r' => self.col = 0,
            0x08 => self.col = self.col.saturating_sub(1),
            b'\t' => self.print('\t'),
            _ => {}
        }
    }

    /// A CSI without intermediates, with its first parameter (0 when it has none).
    fn csi(&mut self, first_param: u16, action: u8) {
        let count = |default: usize| match usize::from(first_param) {
            0 => default,
            n => n,
        };
        match action {
            b'K' => match first_param {
                0 => self.erase_to_end(),
                1 => self.erase_to_cursor(),
                _ => self.erase_line(),
            },
            b'C' => self.forward(count(1)),
            b'D' => self.col = self.col.saturating_sub(count(1)),
            b'G' => {
                self.col = 0;
                self.forward(count(1) - 1);
            }
            _ => {}
        }
    }

    /// Moves the cursor right, never past the longest line kept.
    fn forward(&mut self, n: usize) {
        self.col = self.col.saturating_add(n).min(self.line_max_chars);
    }

    /// Erases the unfinished line from the cursor to its end.
    fn erase_to_end(&mut self) {
        if self.is_in_columns {
            self.columns.truncate(self.col);
        } else if self.col < self.line_chars {
            let end = self
                .line
                .char_indices()
                .nth(self.col)
                .map_or(self.line.len(), |(at, _)| at);
            self.line.truncate(end);
            self.line_chars = self.col;
        }
    }

    /// Erases the unfinished line from its start to the cursor.
    fn erase_to_cursor(&mut self) {
        let col = self.col;
        let columns = self.columns();
        let end = col.min(columns.len());
        columns[..end].fill(' ');
    }

    fn erase_line(&mut self) {
        self.columns.clear();
        self.line.clear();
        self.line_chars = 0;
        self.is_in_columns = false;
    }
}

/// The reference the parser is checked against: `vte` driving the same sink.
#[cfg(test)]
impl vte::Perform for Sink {
    fn print(&mut self, c: char) {
        Sink::print(self, c);
    }

    fn execute(&mut self, byte: u8) {
        Sink::execute(self, byte);
    }

    fn csi_dispatch(
        &mut self,
        params: &vte::Params,
        intermediates: &[u8],
        _ignore: bool,
        action: char,
    ) {
        if intermediates.is_empty() {
            let first = params
                .iter()
                .next()
                .and_then(|p| p.first().copied())
                .unwrap_or(0);
            self.csi(first, u8::try_from(action).unwrap_or(0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text `vte` makes of `chunks` with the same sink, one character at a time.
    fn clean_by_vte(chunks: &[&[u8]], max_bytes: usize) -> String {
        let mut parser = vte::Parser::new();
        let mut text = PlainText::with_max_bytes(max_bytes);
        for chunk in chunks {
            parser.advance(&mut text.sink, chunk);
        }
        text.text()
    }

    #[test]
    fn agrees_with_vte() {
        // Pieces that take every state of the grammar somewhere: escapes, CSI parameters and
        // intermediates, strings and their ends, C0 and C1 controls, UTF-8 whole, split and
        // invalid, cursor movements and erasures.
        let pieces: &[&[u8]] = &[
            b"a",
            b"bc",
            b" ",
            b"\r",
            b"\n",
            b"\x08",
            b"\t",
            b"\x1b",
            b"[",
            b"]",
            b"K",
            b"0",
            b"1",
            b"2",
            b"7",
            b";",
            b":",
            b"C",
            b"D",
            b"G",
            b"m",
            b"\x07",
            b"\x18",
            b"\x1a",
            b"\\",
            b"P",
            b"X",
            b"^",
            b"_",
            b"?",
            b"<",
            b" ",
            b"!",
            b"(",
            b"99999",
            b"\x0b",
            b"\x0c",
            b"\x00",
            b"\x7f",
            b"\x9c",
            b"\x9b",
            b"\xc2\x9b",
            b"\xc2\x85",
            "\u{e9}".as_bytes(),
            "\u{1f389}".as_bytes(),
            "\u{5168}".as_bytes(),
            b"\xc3",
            b"\xe2\x82",
            b"\xf0\x9f",
            b"\xff",
            b"\x80",
            b"\x1b[",
            b"\x1b]",
            b"\x1bP",
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for case in 0..100_000 {
            let mut bytes = Vec::new();
            for _ in 0..next() % 80 {
                bytes.extend_from_slice(pieces[(next() % pieces.len() as u64) as usize]);
            }
            let mut chunks = Vec::new();
            let mut at = 0;
            while at < bytes.len() {
                let end = (at + 1 + (next() % 12) as usize).min(bytes.len());
                chunks.push(&bytes[at..end]);
                at = end;
            }
            // A small bound sometimes, so the cut and the longest line are passed too.
            let max_bytes = if case % 4 == 0 { 256 } else { 1 << 20 };
            let mut ours = PlainText::with_max_bytes(max_bytes);
            for chunk in &chunks {
                ours.feed(chunk);
            }
            assert_eq!(
                ours.text(),
                clean_by_vte(&chunks, max_bytes),
                "case {case}: {:?} in {} chunks",
                String::from_utf8_lossy(&bytes),
                chunks.len()
            );
        }
    }

    fn clean(chunks: &[&[u8]]) -> String {
        let mut text = PlainText::new();
        for chunk in chunks {
            text.feed(chunk);
        }
        text.text()
    }

    #[test]
    fn colours_and_marks_vanish_and_crlf_becomes_lf() {
        let out = clean(&[b"\x1b[31mred\x1b[0m  \r\n\x1b]133;D;0;k=x\x07tab\there"]);
        assert_eq!(out, "red  \ntab\there");
    }

    #[test]
    fn progress_bars_end_as_they_look() {
        assert_eq!(clean(&[b"10%\r50%\r100%\r\n"]), "100%\n");
        assert_eq!(clean(&[b"abc\x08\x08X\r\n"]), "aXc\n");
        assert_eq!(clean(&[b"long line\r\x1b[Kshort\n"]), "short\n");
    }

    #[test]
    fn memory_is_bounded_by_the_cap_with_head_and_tail_kept() {
        let mut text = PlainText::with_max_bytes(64 * 1024);
        for i in 0..100_000 {
            text.feed(format!("line {i}\r\n").as_bytes());
        }
        assert!(text.is_cut());
        assert!(text.len() <= 64 * 1024 + 64);
        let out = text.text();
        assert!(out.starts_with("line 0\nline 1\n"));
        assert!(out.ends_with("line 99998\nline 99999\n"));
        assert!(out.contains("bytes of output omitted"));
    }

    #[test]
    fn a_line_without_end_and_cursor_jumps_stay_bounded() {
        let mut text = PlainText::with_max_bytes(64 * 1024);
        text.feed(&b"x".repeat(200_000));
        for _ in 0..1000 {
            text.feed(b"\x1b[65535Cy");
        }
        assert!(text.len() <= 64 * 1024 + 4096 * 4);
        assert!(text.text().starts_with(&"x".repeat(10_000)));
    }

    #[test]
    fn utf8_split_across_reads_is_decoded() {
        let bytes = "héllo 🎉".as_bytes();
        let (a, b) = bytes.split_at(2);
        let (b, c) = b.split_at(b.len() - 2);
        assert_eq!(clean(&[a, b, c]), "héllo 🎉");
    }
}

/// Output longer than this many characters (Unicode scalar values) is shortened
/// (docs/compatibility.md#truncation).
pub const TRUNCATE_CHARS: usize = 30_000;
/// The marker that replaces the middle of a shortened output, worded exactly as
/// docs/compatibility.md#truncation states it.
pub const TRUNCATION_MARKER: &str = "\n[... Observation truncated due to length ...]\n";

/// Keeps the first and last `max_chars / 2` characters of a longer text, with the marker.
pub fn truncate_middle(text: &str, max_chars: usize) -> String {
    let count = text.chars().count();
    if count <= max_chars {
        return text.to_owned();
    }
    let half = max_chars / 2;
    let head: String = text.chars().take(half).collect();
    let tail: String = text.chars().skip(count - half).collect();
    format!("{head}{TRUNCATION_MARKER}{tail}")
}

#[cfg(test)]
mod truncation_tests {
    use super::*;

    #[test]
    fn long_output_keeps_head_and_tail() {
        let text: String = (0..40_000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let short = truncate_middle(&text, TRUNCATE_CHARS);
        assert!(short.starts_with(&text[..15_000]));
        assert!(short.ends_with(&text[25_000..]));
        assert!(short.contains("Observation truncated"));
        assert_eq!(truncate_middle("é", 1), "é");
    }
}
