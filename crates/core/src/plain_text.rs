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

pub struct PlainText {
    parser: vte::Parser,
    sink: Sink,
}

struct Sink {
    /// Most bytes of text kept: a head of up to half of it, a tail of a quarter to a half.
    max_bytes: usize,
    /// Finished lines, each ending in `\n` (the head, once the cap is reached).
    head: String,
    /// Finished lines after the head was frozen, trimmed from the front when too long.
    tail: String,
    is_head_frozen: bool,
    omitted_bytes: u64,
    line: Vec<char>,
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
            parser: vte::Parser::new(),
            sink: Sink {
                max_bytes,
                head: String::new(),
                tail: String::new(),
                is_head_frozen: false,
                omitted_bytes: 0,
                line: Vec::new(),
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
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        self.parser.advance(&mut self.sink, bytes);
    }

    /// The text so far, with the unfinished last line.
    pub fn text(&self) -> String {
        let s = &self.sink;
        let mut out = String::with_capacity(s.head.len() + s.tail.len() + s.line.len() + 64);
        out.push_str(&s.head);
        if s.omitted_bytes > 0 {
            out.push_str(&format!("[... {}{OMITTED_MARKER_END}", s.omitted_bytes));
        }
        out.push_str(&s.tail);
        out.extend(s.line.iter());
        out
    }

    /// Bytes of text held (an upper bound of the text's length).
    pub fn len(&self) -> usize {
        self.sink.head.len() + self.sink.tail.len() + self.sink.line.len() * 4
    }

    /// Whether nothing was printed yet.
    pub fn is_empty(&self) -> bool {
        self.sink.head.is_empty() && self.sink.tail.is_empty() && self.sink.line.is_empty()
    }
}

impl Sink {
    /// The longest unfinished line kept as characters (4 bytes each): beyond it, what the line
    /// holds is moved to the text, and the cursor cannot move back into it.
    fn line_max_chars(&self) -> usize {
        (self.max_bytes / 16).max(4096)
    }

    fn commit_line(&mut self) {
        self.commit(true);
    }

    fn commit(&mut self, is_line_end: bool) {
        let target = if self.is_head_frozen {
            &mut self.tail
        } else {
            &mut self.head
        };
        target.extend(self.line.drain(..));
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

    fn put(&mut self, c: char) {
        if self.col >= self.line_max_chars() {
            // A line this long is not a progress bar: keep what it shows and go on.
            self.line.resize(self.col.min(self.line_max_chars()), ' ');
            self.commit(false);
        }
        if self.col < self.line.len() {
            self.line[self.col] = c;
        } else {
            self.line.resize(self.col, ' ');
            self.line.push(c);
        }
        self.col += 1;
    }

    /// Moves the cursor right, never past the longest line kept.
    fn forward(&mut self, n: usize) {
        self.col = self.col.saturating_add(n).min(self.line_max_chars());
    }
}

fn first_param(params: &vte::Params, default: usize) -> usize {
    params
        .iter()
        .next()
        .and_then(|p| p.first().copied())
        .map(usize::from)
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

impl vte::Perform for Sink {
    fn print(&mut self, c: char) {
        self.put(c);
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' | 0x0b | 0x0c => self.commit_line(),
            b'\r' => self.col = 0,
            0x08 => self.col = self.col.saturating_sub(1),
            b'\t' => self.put('\t'),
            _ => {}
        }
    }

    fn csi_dispatch(
        &mut self,
        params: &vte::Params,
        intermediates: &[u8],
        _ignore: bool,
        action: char,
    ) {
        if !intermediates.is_empty() {
            return;
        }
        match action {
            'K' => match params
                .iter()
                .next()
                .and_then(|p| p.first().copied())
                .unwrap_or(0)
            {
                0 => self.line.truncate(self.col),
                1 => {
                    let end = self.col.min(self.line.len());
                    self.line[..end].fill(' ');
                }
                _ => self.line.clear(),
            },
            'C' => self.forward(first_param(params, 1)),
            'D' => self.col = self.col.saturating_sub(first_param(params, 1)),
            'G' => {
                self.col = 0;
                self.forward(first_param(params, 1) - 1);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
