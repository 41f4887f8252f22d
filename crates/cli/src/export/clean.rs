//! What a recording leaves out of a terminal's output: the shell integration's private marks
//! and the bells the integration made the line editor ring. It owns only this byte filter;
//! the formats are `export`'s, and the web playback applies the same rule in `play.js`.
//!
//! - Every OSC 133 sequence carrying a `k=` parameter is dropped, whatever its nonce: ptyhub's
//!   marks (`ESC ] 133 ; A ; k=<nonce> BEL` …) carry the terminal's secret nonce, and a mark of
//!   another terminal (a nested ptyhub terminal) carries its own. Terminals draw nothing for
//!   OSC 133, so the screen a recording plays is unchanged. A sequence split across events is
//!   held until its end arrives.
//! - Any other text equal to a nonce seen in a dropped mark, or in the name of the
//!   integration's rc file in a `process.start` event's command, is replaced by `*` of its
//!   length within each piece of output (a `ps` listing would show that file name).
//! - A lone BEL between an exec's `command.note` and the start of the command it announced is
//!   dropped: exec clears the line first (`^E^U`), and a line editor rings the bell for it when
//!   the line is already empty. Bells anywhere else are the programs' own and stay.

use ptyhub_core::tracker::{OscEnd, find_osc_end};

/// An OSC longer than this is not a mark: its bytes pass through as text.
const MARK_MAX_BYTES: usize = 4096;
/// Nonces remembered for redaction (one per terminal instance met in the recording).
const NONCES_MAX: usize = 16;
/// A nonce shorter than this is not redacted elsewhere (it would hit ordinary words).
const NONCE_MIN_CHARS: usize = 8;

/// The names of the integration's rc files, which end in the nonce (`crates/core/src/shell.rs`).
const RC_PREFIXES: [&str; 3] = ["bashrc-", "shrc-", "zdotdir-"];

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;

/// The mark a dropped sequence was, for whoever follows commands through it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    PromptStart,
    CommandStart,
    CommandEnd { exit_code: Option<i32> },
    Other,
}

/// The stateful filter of one terminal's output, fed its events in `seq` order.
#[derive(Default)]
pub struct IntegrationFilter {
    /// The start of an escape sequence whose end has not arrived yet.
    pending: Vec<u8>,
    /// Between an exec's note and its command's start: lone bells are the integration's.
    is_after_exec_note: bool,
    nonces: Vec<Vec<u8>>,
}

/// The mark and nonce of an `OSC 133` body with a `k=` parameter; `None` for any other OSC.
fn private_mark(body: &[u8]) -> Option<(Mark, &[u8])> {
    let rest = body.strip_prefix(b"133;")?;
    let mut parts = rest.split(|&b| b == b';');
    let kind = parts.next()?;
    let params: Vec<&[u8]> = parts.collect();
    let nonce = params.iter().find_map(|p| p.strip_prefix(b"k="))?;
    let mark = match kind {
        b"A" => Mark::PromptStart,
        b"C" => Mark::CommandStart,
        b"D" => Mark::CommandEnd {
            exit_code: params
                .first()
                .and_then(|p| std::str::from_utf8(p).ok())
                .and_then(|p| p.parse().ok()),
        },
        _ => Mark::Other,
    };
    Some((mark, nonce))
}

impl IntegrationFilter {
    /// A `command.note` event: an exec's note opens the window in which bells are dropped.
    pub fn note(&mut self, origin: &str) {
        if origin == "exec" {
            self.is_after_exec_note = true;
        }
    }

    /// A `process.start` event's command as a recording keeps it: the integration's rc file
    /// is named after the nonce (`bashrc-<nonce>`), which is learnt here and redacted.
    pub fn start(&mut self, command: &mut serde_json::Value) {
        let Some(args) = command.as_array_mut() else {
            return;
        };
        for arg in args.iter() {
            let name = arg.as_str().unwrap_or_default().rsplit('/').next();
            if let Some(nonce) = name.and_then(|name| {
                RC_PREFIXES
                    .iter()
                    .find_map(|prefix| name.strip_prefix(prefix))
            }) {
                self.remember(nonce.as_bytes());
            }
        }
        for arg in args.iter_mut() {
            if let Some(text) = arg.as_str() {
                let mut bytes = text.as_bytes().to_vec();
                self.redact(&mut bytes);
                *arg = serde_json::Value::from(String::from_utf8_lossy(&bytes).into_owned());
            }
        }
    }

    /// The bytes of one output event as a recording keeps them.
    pub fn filter(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.filter_marks(chunk).0
    }

    /// As [`Self::filter`], with the marks it dropped, in order.
    pub fn filter_marks(&mut self, chunk: &[u8]) -> (Vec<u8>, Vec<Mark>) {
        let mut data = std::mem::take(&mut self.pending);
        data.extend_from_slice(chunk);
        let mut out = Vec::with_capacity(data.len());
        let mut marks = Vec::new();
        let mut i = 0;
        while i < data.len() {
            let b = data[i];
            if b == BEL && self.is_after_exec_note {
                i += 1;
                continue;
            }
            if b != ESC {
                out.push(b);
                i += 1;
                continue;
            }
            match data.get(i + 1) {
                None => {
                    self.pending = data[i..].to_vec();
                    break;
                }
                Some(b']') => {}
                Some(_) => {
                    out.push(b);
                    i += 1;
                    continue;
                }
            }
            let body = &data[i + 2..];
            match find_osc_end(body) {
                OscEnd::Complete { body_len, end_len } => {
                    let end = i + 2 + body_len + end_len;
                    if let Some((mark, nonce)) = private_mark(&body[..body_len]) {
                        self.remember(nonce);
                        if mark != Mark::Other {
                            self.is_after_exec_note = false;
                        }
                        marks.push(mark);
                    } else {
                        out.extend_from_slice(&data[i..end]);
                    }
                    i = end;
                }
                OscEnd::Aborted { at } => {
                    let end = i + 2 + at;
                    out.extend_from_slice(&data[i..end]);
                    i = end;
                }
                OscEnd::Incomplete if body.len() < MARK_MAX_BYTES => {
                    self.pending = data[i..].to_vec();
                    break;
                }
                OscEnd::Incomplete => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        self.redact(&mut out);
        (out, marks)
    }

    /// What is still held at the end of the recording (an escape that never ended).
    pub fn finish(&mut self) -> Vec<u8> {
        let mut rest = std::mem::take(&mut self.pending);
        self.redact(&mut rest);
        rest
    }

    fn remember(&mut self, nonce: &[u8]) {
        if nonce.len() >= NONCE_MIN_CHARS && !self.nonces.iter().any(|n| n == nonce) {
            if self.nonces.len() == NONCES_MAX {
                self.nonces.remove(0);
            }
            self.nonces.push(nonce.to_vec());
        }
    }

    fn redact(&self, out: &mut [u8]) {
        for nonce in &self.nonces {
            let mut from = 0;
            while let Some(at) = out[from..]
                .windows(nonce.len())
                .position(|w| w == nonce.as_slice())
            {
                let start = from + at;
                out[start..start + nonce.len()].fill(b'*');
                from = start + nonce.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: &str = "r5jyvbp1c6kesydik987ev3x";

    fn filtered(chunks: &[&[u8]]) -> Vec<u8> {
        let mut filter = IntegrationFilter::default();
        let mut out = Vec::new();
        for chunk in chunks {
            out.extend(filter.filter(chunk));
        }
        out.extend(filter.finish());
        out
    }

    #[test]
    fn marks_with_a_nonce_are_dropped_and_the_rest_is_kept() {
        let bytes = format!(
            "\x1b[?2004h\x1b]133;A;k={K}\x07$ echo hi\r\n\x1b]133;C;k={K}\x1b\\hi\r\n\
             \x1b]133;D;0;k={K}\x07\x1b]0;title\x07\x1b]133;A\x07$ \x07"
        );
        let out = filtered(&[bytes.as_bytes()]);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "\x1b[?2004h$ echo hi\r\nhi\r\n\x1b]0;title\x07\x1b]133;A\x07$ \x07"
        );
    }

    #[test]
    fn a_mark_split_across_events_is_still_dropped() {
        let bytes = format!("a\x1b]133;D;2;k={K}\x07b");
        let bytes = bytes.as_bytes();
        for cut in 0..bytes.len() {
            let out = filtered(&[&bytes[..cut], &bytes[cut..]]);
            assert_eq!(out, b"ab", "cut at {cut}");
        }
    }

    #[test]
    fn marks_are_reported_with_their_exit_codes() {
        let mut filter = IntegrationFilter::default();
        let bytes = format!("\x1b]133;C;k={K}\x07x\x1b]133;D;2;k={K}\x07\x1b]133;A;k={K}\x07");
        let (out, marks) = filter.filter_marks(bytes.as_bytes());
        assert_eq!(out, b"x");
        assert_eq!(
            marks,
            [
                Mark::CommandStart,
                Mark::CommandEnd { exit_code: Some(2) },
                Mark::PromptStart
            ]
        );
    }

    #[test]
    fn the_bell_of_an_exec_clearing_an_empty_line_is_dropped_and_others_stay() {
        let mut filter = IntegrationFilter::default();
        let prompt = format!("\x1b]133;A;k={K}\x07$ ");
        assert_eq!(filter.filter(prompt.as_bytes()), b"$ ");
        filter.note("exec");
        let echo = format!("\x07\x07ls\r\n\x1b]133;C;k={K}\x07out\x07\r\n");
        assert_eq!(filter.filter(echo.as_bytes()), b"ls\r\nout\x07\r\n");
        filter.note("typed");
        assert_eq!(filter.filter(b"\x07"), b"\x07");
    }

    #[test]
    fn the_nonce_never_shows_even_in_other_output() {
        let bytes = format!("\x1b]133;A;k={K}\x07bash --rcfile /run/bashrc-{K}\r\n");
        let out = filtered(&[bytes.as_bytes()]);
        let text = String::from_utf8_lossy(&out);
        assert!(!text.contains(K), "{text}");
        assert!(text.starts_with("bash --rcfile /run/bashrc-****"), "{text}");
    }

    #[test]
    fn the_nonce_in_the_shells_rc_file_name_is_redacted() {
        let mut filter = IntegrationFilter::default();
        let mut command =
            serde_json::json!(["/bin/bash", "--rcfile", format!("/run/bashrc-{K}"), "-i"]);
        filter.start(&mut command);
        assert_eq!(
            command,
            serde_json::json!([
                "/bin/bash",
                "--rcfile",
                format!("/run/bashrc-{}", "*".repeat(K.len())),
                "-i"
            ])
        );
        let echoed = format!("cat /run/bashrc-{K}");
        assert!(!String::from_utf8_lossy(&filter.filter(echoed.as_bytes())).contains(K));
    }

    #[test]
    fn a_stray_osc_start_does_not_swallow_what_follows() {
        let bytes = format!("\x1b]133;A;k=x\x1b[31mred\x1b]133;A;k={K}\x07");
        let out = filtered(&[bytes.as_bytes()]);
        assert_eq!(String::from_utf8_lossy(&out), "\x1b]133;A;k=x\x1b[31mred");
    }
}
