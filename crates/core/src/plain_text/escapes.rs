//! The escape-sequence grammar the clean text reads: the state machine of the DEC ANSI parser
//! (vt100.net's, as the `vte` crate implements it, byte for byte in what the text shows),
//! keeping only what [`Sink`] acts on: printed text, C0 controls, and the first parameter of a
//! CSI without intermediates. Printed text reaches the sink a run at a time, not a character
//! at a time, and nothing of a string (OSC, DCS, APC) is kept; the text of a flood costs a
//! fraction of what `vte` took for it. The test `agrees_with_vte` (plain_text.rs) feeds both
//! the same random bytes.

use super::Sink;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Ground,
    Escape,
    EscapeIntermediate,
    CsiEntry,
    CsiParam,
    CsiIntermediate,
    CsiIgnore,
    DcsEntry,
    DcsParam,
    DcsIntermediate,
    DcsIgnore,
    DcsPassthrough,
    OscString,
    SosPmApcString,
}

const ESC: u8 = 0x1b;
const REPLACEMENT: char = '\u{FFFD}';

/// Where the parser is in the bytes of a command's output.
pub(super) struct Escapes {
    state: State,
    /// A CSI's first parameter: its digits before the first `;` or `:` (saturating).
    first_param: u16,
    /// Whether the first parameter has ended.
    is_first_param_done: bool,
    /// Whether the CSI has intermediates or a private marker (the sink ignores those).
    has_intermediates: bool,
    /// The start of a UTF-8 character the last bytes fed ended in.
    partial: [u8; 4],
    partial_len: usize,
}

impl Escapes {
    pub(super) fn new() -> Self {
        Self {
            state: State::Ground,
            first_param: 0,
            is_first_param_done: false,
            has_intermediates: false,
            partial: [0; 4],
            partial_len: 0,
        }
    }

    pub(super) fn advance(&mut self, sink: &mut Sink, bytes: &[u8]) {
        let mut i = 0;
        if self.partial_len != 0 {
            i += self.advance_partial(sink, bytes);
        }
        while i < bytes.len() {
            if self.state == State::Ground {
                i += self.advance_ground(sink, &bytes[i..]);
            } else {
                self.step(sink, bytes[i]);
                i += 1;
            }
        }
    }

    /// Text up to the next escape; returns the bytes taken.
    fn advance_ground(&mut self, sink: &mut Sink, bytes: &[u8]) -> usize {
        let len = bytes.len();
        let plain = memchr::memchr(ESC, bytes).unwrap_or(len);
        if plain == 0 {
            self.state = State::Escape;
            return 1;
        }
        match std::str::from_utf8(&bytes[..plain]) {
            Ok(text) => {
                dispatch_text(sink, text);
                if plain < len {
                    self.state = State::Escape;
                    plain + 1
                } else {
                    plain
                }
            }
            Err(error) => {
                let valid = error.valid_up_to();
                dispatch_text(sink, std::str::from_utf8(&bytes[..valid]).unwrap_or(""));
                match error.error_len() {
                    Some(invalid) => {
                        // A lone byte of the C1 range is a control, anything else invalid
                        // one replacement character.
                        if invalid == 1 && bytes[valid] <= 0x9f {
                            sink.execute(bytes[valid]);
                        } else {
                            sink.print(REPLACEMENT);
                        }
                        valid + invalid
                    }
                    None if plain < len => {
                        // A character cut off by an escape.
                        sink.print(REPLACEMENT);
                        self.state = State::Escape;
                        plain + 1
                    }
                    None => {
                        // A character cut off by the end of what was fed: kept for the next.
                        let rest = &bytes[valid..];
                        self.partial[..rest.len()].copy_from_slice(rest);
                        self.partial_len = rest.len();
                        len
                    }
                }
            }
        }
    }

    /// Completes the character the last bytes fed ended in; returns the bytes taken.
    fn advance_partial(&mut self, sink: &mut Sink, bytes: &[u8]) -> usize {
        let old = self.partial_len;
        let to_copy = bytes.len().min(self.partial.len() - old);
        self.partial[old..old + to_copy].copy_from_slice(&bytes[..to_copy]);
        self.partial_len += to_copy;
        let held = &self.partial[..self.partial_len];
        let (first, taken) = match std::str::from_utf8(held) {
            Ok(text) => {
                let first = text.chars().next().unwrap_or(REPLACEMENT);
                (first, first.len_utf8())
            }
            Err(error) if error.valid_up_to() > 0 => {
                let valid = error.valid_up_to();
                let text = std::str::from_utf8(&held[..valid]).unwrap_or("");
                // As vte does: the first character, and every valid byte counted as taken.
                (text.chars().next().unwrap_or(REPLACEMENT), valid)
            }
            Err(error) => match error.error_len() {
                Some(invalid) => (REPLACEMENT, invalid),
                // Still not whole: everything fed is held.
                None => return to_copy,
            },
        };
        sink.print(first);
        self.partial_len = 0;
        taken.saturating_sub(old)
    }

    /// One byte outside the ground state.
    fn step(&mut self, sink: &mut Sink, byte: u8) {
        let is_c0 = matches!(byte, 0x00..=0x17 | 0x19 | 0x1c..=0x1f);
        match self.state {
            State::Ground => {}
            State::Escape => match byte {
                _ if is_c0 => sink.execute(byte),
                0x20..=0x2f => self.state = State::EscapeIntermediate,
                b'P' => self.state = State::DcsEntry,
                b'X' | b'^' | b'_' => self.state = State::SosPmApcString,
                b'[' => {
                    self.first_param = 0;
                    self.is_first_param_done = false;
                    self.has_intermediates = false;
                    self.state = State::CsiEntry;
                }
                b']' => self.state = State::OscString,
                0x30..=0x7e => self.state = State::Ground,
                0x18 | 0x1a => {
                    sink.execute(byte);
                    self.state = State::Ground;
                }
                // ESC again, DEL and bytes above the ASCII range change nothing.
                _ => {}
            },
            State::EscapeIntermediate => match byte {
                _ if is_c0 => sink.execute(byte),
                0x20..=0x2f | 0x7f => {}
                0x30..=0x7e => self.state = State::Ground,
                _ => self.anywhere(sink, byte),
            },
            State::CsiEntry | State::CsiParam => match byte {
                _ if is_c0 => sink.execute(byte),
                0x20..=0x2f => {
                    self.has_intermediates = true;
                    self.state = State::CsiIntermediate;
                }
                b'0'..=b'9' => {
                    if !self.is_first_param_done {
                        self.first_param = self
                            .first_param
                            .saturating_mul(10)
                            .saturating_add(u16::from(byte - b'0'));
                    }
                    self.state = State::CsiParam;
                }
                b':' | b';' => {
                    self.is_first_param_done = true;
                    self.state = State::CsiParam;
                }
                0x3c..=0x3f if self.state == State::CsiEntry => {
                    self.has_intermediates = true;
                    self.state = State::CsiParam;
                }
                0x3c..=0x3f => self.state = State::CsiIgnore,
                0x40..=0x7e => self.csi_dispatch(sink, byte),
                0x7f => {}
                _ => self.anywhere(sink, byte),
            },
            State::CsiIntermediate => match byte {
                _ if is_c0 => sink.execute(byte),
                0x20..=0x2f | 0x7f => {}
                0x30..=0x3f => self.state = State::CsiIgnore,
                0x40..=0x7e => self.csi_dispatch(sink, byte),
                _ => self.anywhere(sink, byte),
            },
            State::CsiIgnore => match byte {
                _ if is_c0 => sink.execute(byte),
                0x20..=0x3f | 0x7f => {}
                0x40..=0x7e => self.state = State::Ground,
                _ => self.anywhere(sink, byte),
            },
            State::DcsEntry | State::DcsParam | State::DcsIntermediate => match byte {
                _ if is_c0 => {}
                0x7f => {}
                0x20..=0x2f => self.state = State::DcsIntermediate,
                0x30..=0x3f => {
                    self.state = match (self.state, byte) {
                        (State::DcsEntry, _) | (State::DcsParam, 0x30..=0x3b) => State::DcsParam,
                        _ => State::DcsIgnore,
                    };
                }
                0x40..=0x7e => self.state = State::DcsPassthrough,
                _ => self.anywhere(sink, byte),
            },
            State::DcsPassthrough => match byte {
                0x18 | 0x1a => {
                    sink.execute(byte);
                    self.state = State::Ground;
                }
                ESC => self.state = State::Escape,
                0x9c => self.state = State::Ground,
                _ => {}
            },
            State::OscString => match byte {
                0x07 => self.state = State::Ground,
                0x18 | 0x1a => {
                    sink.execute(byte);
                    self.state = State::Ground;
                }
                ESC => self.state = State::Escape,
                _ => {}
            },
            State::DcsIgnore | State::SosPmApcString => self.anywhere(sink, byte),
        }
    }

    /// What every state but the ground does with CAN, SUB and ESC.
    fn anywhere(&mut self, sink: &mut Sink, byte: u8) {
        match byte {
            0x18 | 0x1a => {
                sink.execute(byte);
                self.state = State::Ground;
            }
            ESC => self.state = State::Escape,
            _ => {}
        }
    }

    fn csi_dispatch(&mut self, sink: &mut Sink, action: u8) {
        if !self.has_intermediates {
            sink.csi(self.first_param, action);
        }
        self.state = State::Ground;
    }
}

/// Text between escapes: runs of printable characters to the sink whole, C0 controls and the
/// C1 range (U+0080 to U+009F) as controls.
fn dispatch_text(sink: &mut Sink, text: &str) {
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        i += printable_prefix(&bytes[i..]);
        let Some(&byte) = bytes.get(i) else {
            break;
        };
        let (control, len) = match bytes.get(i + 1) {
            _ if byte < 0x20 => (byte, 1),
            // U+0080 to U+009F: C2 and the code point's own byte.
            Some(&next) if next <= 0x9f => (next, 2),
            _ => {
                i += 1;
                continue;
            }
        };
        if let Some(run) = text.get(start..i).filter(|run| !run.is_empty()) {
            sink.print_str(run);
        }
        sink.execute(control);
        i += len;
        start = i;
    }
    if let Some(run) = text.get(start..).filter(|run| !run.is_empty()) {
        sink.print_str(run);
    }
}

/// How many bytes of `bytes` come before the first that may start a control: a byte under
/// 0x20, or 0xC2 (the first byte of U+0080 to U+00BF). Eight bytes at a time.
fn printable_prefix(bytes: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut at = 0;
    for word in bytes.chunks_exact(8) {
        let mut eight = [0; 8];
        eight.copy_from_slice(word);
        let x = u64::from_le_bytes(eight);
        // A byte under 0x20, or a byte equal to 0xC2 (zero once xored with it).
        let low = x.wrapping_sub(ONES * 0x20) & !x & HIGHS;
        let c2 = x ^ (ONES * 0xc2);
        let is_c2 = c2.wrapping_sub(ONES) & !c2 & HIGHS;
        if low | is_c2 != 0 {
            break;
        }
        at += 8;
    }
    at + bytes[at..]
        .iter()
        .position(|&b| b < 0x20 || b == 0xc2)
        .unwrap_or(bytes.len() - at)
}
