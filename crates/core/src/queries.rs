//! Terminal queries: a program asks the terminal for its cursor position, its status or its
//! device attributes, and waits for the answer on its input. Exactly one answer must reach it:
//! from the one writing client that answers queries, or from ptyhub when no writer is connected
//! (docs/websocket.md, "Terminal queries").
//!
//! [`QueryScanner`] finds queries in output (across reads); [`strip_answers`] removes answers
//! from the input of writers that must not answer.

use std::borrow::Cow;

/// A query a program can send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Query {
    /// `CSI 6 n`: cursor position report.
    CursorPosition,
    /// `CSI ? 6 n`: cursor position report, DEC form.
    DecCursorPosition,
    /// `CSI 5 n`: status report.
    Status,
    /// `CSI c` / `CSI 0 c`: primary device attributes.
    PrimaryAttributes,
    /// `CSI > c` / `CSI > 0 c`: secondary device attributes.
    SecondaryAttributes,
}

impl Query {
    /// The answer a VT terminal (as xterm.js does) gives, with the cursor at `row`, `col`
    /// (0-based).
    pub fn answer(self, row: usize, col: usize) -> Vec<u8> {
        match self {
            Self::CursorPosition => format!("\x1b[{};{}R", row + 1, col + 1).into_bytes(),
            Self::DecCursorPosition => format!("\x1b[?{};{}R", row + 1, col + 1).into_bytes(),
            Self::Status => b"\x1b[0n".to_vec(),
            Self::PrimaryAttributes => b"\x1b[?1;2c".to_vec(),
            Self::SecondaryAttributes => b"\x1b[>0;276;0c".to_vec(),
        }
    }
}

/// The answers to `queries`, one after the other, with the cursor at `cursor` (row, column;
/// 0-based).
pub fn answers(queries: &[Query], (row, col): (usize, usize)) -> Vec<u8> {
    queries
        .iter()
        .flat_map(|query| query.answer(row, col))
        .collect()
}

/// Parameters of a CSI sequence kept at most (longer ones are not queries).
const PARAMS_MAX: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Ground,
    Escape,
    Csi,
}

/// Finds queries in a byte stream that arrives in pieces.
#[derive(Debug)]
pub struct QueryScanner {
    state: State,
    prefix: Option<u8>,
    params: Vec<u8>,
}

impl Default for QueryScanner {
    fn default() -> Self {
        Self {
            state: State::Ground,
            prefix: None,
            params: Vec::with_capacity(PARAMS_MAX),
        }
    }
}

impl QueryScanner {
    /// Feeds output; calls `found` for every complete query.
    /// It runs on the output path: text between escapes is skipped, not stepped through.
    pub fn feed(&mut self, bytes: &[u8], mut found: impl FnMut(Query)) {
        let mut i = 0;
        while i < bytes.len() {
            if self.state == State::Ground {
                match memchr::memchr(0x1b, &bytes[i..]) {
                    Some(at) => {
                        self.state = State::Escape;
                        i += at + 1;
                        continue;
                    }
                    None => return,
                }
            }
            let byte = bytes[i];
            i += 1;
            match self.state {
                State::Ground => {}
                State::Escape => {
                    self.state = if byte == b'[' {
                        self.prefix = None;
                        self.params.clear();
                        State::Csi
                    } else if byte == 0x1b {
                        State::Escape
                    } else {
                        State::Ground
                    };
                }
                State::Csi => match byte {
                    b'?' | b'>' if self.prefix.is_none() && self.params.is_empty() => {
                        self.prefix = Some(byte);
                    }
                    b'0'..=b'9' | b';' if self.params.len() < PARAMS_MAX => {
                        self.params.push(byte);
                    }
                    0x40..=0x7e => {
                        if let Some(query) = classify(self.prefix, &self.params, byte) {
                            found(query);
                        }
                        self.state = State::Ground;
                    }
                    0x1b => self.state = State::Escape,
                    _ => self.state = State::Ground,
                },
            }
        }
    }
}

fn classify(prefix: Option<u8>, params: &[u8], last: u8) -> Option<Query> {
    match (prefix, params, last) {
        (None, b"6", b'n') => Some(Query::CursorPosition),
        (Some(b'?'), b"6", b'n') => Some(Query::DecCursorPosition),
        (None, b"5", b'n') => Some(Query::Status),
        (None, b"" | b"0", b'c') => Some(Query::PrimaryAttributes),
        (Some(b'>'), b"" | b"0", b'c') => Some(Query::SecondaryAttributes),
        _ => None,
    }
}

/// Removes answers to queries (cursor position reports, status reports, device attributes)
/// from input; everything else is kept byte for byte.
pub fn strip_answers(input: &[u8]) -> Cow<'_, [u8]> {
    let mut out: Option<Vec<u8>> = None;
    let mut i = 0;
    while i < input.len() {
        if let Some(len) = answer_len(&input[i..]) {
            out.get_or_insert_with(|| input[..i].to_vec());
            i += len;
            continue;
        }
        if let Some(out) = out.as_mut() {
            out.push(input[i]);
        }
        i += 1;
    }
    match out {
        Some(out) => Cow::Owned(out),
        None => Cow::Borrowed(input),
    }
}

/// The length of an answer sequence at the start of `bytes`, if one starts there.
fn answer_len(bytes: &[u8]) -> Option<usize> {
    let rest = bytes.strip_prefix(b"\x1b[")?;
    let (prefix, rest) = match rest.first() {
        Some(&p @ (b'?' | b'>')) => (Some(p), &rest[1..]),
        _ => (None, rest),
    };
    let params = rest
        .iter()
        .take_while(|b| b.is_ascii_digit() || **b == b';')
        .count();
    let last = *rest.get(params)?;
    let is_answer = match (prefix, last) {
        (None | Some(b'?'), b'R') => params > 0,
        (Some(b'?' | b'>'), b'c') => true,
        (None, b'n') => params > 0,
        _ => false,
    };
    is_answer.then_some(2 + usize::from(prefix.is_some()) + params + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(pieces: &[&[u8]]) -> Vec<Query> {
        let mut scanner = QueryScanner::default();
        let mut found = Vec::new();
        for piece in pieces {
            scanner.feed(piece, |q| found.push(q));
        }
        found
    }

    #[test]
    fn queries_are_found_across_reads_and_other_sequences_are_not() {
        assert_eq!(
            scan(&[b"abc\x1b[", b"6n def \x1b[c\x1b[>c \x1b[?6n \x1b[5n"]),
            vec![
                Query::CursorPosition,
                Query::PrimaryAttributes,
                Query::SecondaryAttributes,
                Query::DecCursorPosition,
                Query::Status
            ]
        );
        assert!(scan(&[b"\x1b[31mred\x1b[0m \x1b[2J \x1b[?2004h \x1b[16n"]).is_empty());
    }

    #[test]
    fn answers_are_stripped_and_keys_are_kept() {
        let input = b"ls\x1b[12;40R\x1b[?1;2c -la\x1b[>0;276;0c\x1b[0n\x1b[A\r";
        assert_eq!(strip_answers(input).as_ref(), b"ls -la\x1b[A\r");
        assert!(matches!(strip_answers(b"plain\x1b[B"), Cow::Borrowed(_)));
        assert_eq!(
            Query::CursorPosition.answer(11, 39),
            b"\x1b[12;40R".to_vec()
        );
    }
}
