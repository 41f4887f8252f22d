//! The lines of a terminal's `events.jsonl` (docs/storage.md, "events.jsonl").
//!
//! One JSON object a line, `seq` strictly increasing from 1 across every instance of the
//! terminal. `pty.output` carries the raw PTY bytes as standard base64 in `data_b64`;
//! `process.exit` carries `exit_code` and `signal`. New types may be added; the meaning of an
//! existing one never changes, and readers skip types they do not know.

use base64_simd::STANDARD as B64;
use serde::{Deserialize, Serialize};

/// A position in a terminal's event log: the `seq` of the last event a reader has seen.
/// `Seq(0)` means "before the first event".
#[derive(
    utoipa::ToSchema,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
)]
#[serde(transparent)]
pub struct Seq(pub u64);

impl Seq {
    /// Before the first event: reading after it reads the whole (kept) log.
    pub const ZERO: Self = Self(0);

    /// The position right after this one.
    #[must_use]
    pub fn next(self) -> Self {
        Self(self.0 + 1)
    }
}

impl std::fmt::Display for Seq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// One line of `events.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The event's position: strictly increasing from 1 across every instance and segment.
    pub seq: Seq,
    /// Unix time in seconds, with millisecond precision.
    pub ts: f64,
    /// What happened: the `type` field and its own fields, flattened into the line.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened. Serialized as the `type` field plus the variant's fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
#[non_exhaustive]
pub enum EventKind {
    /// Bytes the terminal's program wrote, exactly as read from the PTY.
    #[serde(rename = "pty.output")]
    Output {
        /// The bytes, as standard base64 in `data_b64` (the holder writes at most 64 KiB an
        /// event).
        #[serde(rename = "data_b64", with = "b64")]
        data: Vec<u8>,
    },
    /// The PTY (and so the screen) changed size. Replaying it keeps the screen faithful.
    #[serde(rename = "pty.resize")]
    Resize {
        /// The new width in character cells.
        cols: u16,
        /// The new height in character cells.
        rows: u16,
    },
    /// A new instance of the terminal's program started (a terminal may be restarted).
    #[serde(rename = "process.start")]
    Start {
        /// Which start of the program this is, from 1.
        instance: u32,
        /// The program's process id.
        pid: u32,
        /// The program and its arguments.
        command: Vec<String>,
        /// The PTY's width in character cells at the start.
        cols: u16,
        /// The PTY's height in character cells at the start.
        rows: u16,
    },
    /// The terminal's top-level process ended.
    #[serde(rename = "process.exit")]
    Exit {
        /// The exit code when the program exited by itself; null when a signal ended it.
        exit_code: Option<i32>,
        /// The number of the signal that ended it; null when it exited by itself.
        signal: Option<i32>,
    },
    /// What ptyhub knows of a command that the output alone does not tell: its text and
    /// working directory (docs/storage.md, "command.note").
    #[serde(rename = "command.note")]
    CommandNote(CommandNote),
    /// The holder found the log's last line torn (a crash in the middle of a write, or a file
    /// system that padded it with NUL bytes) and cut it before appending again. The torn line
    /// was never whole, so no reader had it; its `seq`, if it had one, is not used again.
    #[serde(rename = "log.repaired")]
    LogRepaired {
        /// Bytes cut from the end of the log.
        cut_bytes: u64,
    },
    /// The kernel's out-of-memory killer ended processes in the terminal's cgroup (its
    /// `memory_max_bytes` was reached): written by the holder when it sees the cgroup's count
    /// rise (docs/storage.md, "cgroup.oom").
    #[serde(rename = "cgroup.oom")]
    CgroupOom {
        /// Processes killed since the previous `cgroup.oom` event of this instance.
        count: u64,
        /// Processes killed in this instance's cgroup so far.
        total: u64,
    },
    /// Bytes typed into the terminal, as the holder passed them to the program, with who
    /// typed them (docs/storage.md, "pty.input"). Readers that replay output skip it: what was
    /// typed and echoed is in the `pty.output` events already.
    #[serde(rename = "pty.input")]
    Input(InputEvent),
    /// An event type this reader does not know (written by a newer ptyhub).
    #[serde(other)]
    Unknown,
}

/// A `pty.input` event: what was typed and by whom. Typed while the terminal did not echo (a
/// password prompt: termios `ECHO` cleared), it keeps only the byte count (`redacted`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputEvent {
    /// The bytes, as standard base64 in `data_b64`; absent when `redacted`.
    #[serde(
        rename = "data_b64",
        with = "b64",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub data: Vec<u8>,
    /// How many bytes were typed (also when they are redacted).
    pub bytes: u64,
    /// The terminal did not echo when they were typed: their bytes are not kept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
    /// Who typed them ([`InputSource::by`]); absent when the server did not say (an older
    /// server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// How they arrived ([`InputSource::via`]); absent with `by`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<InputVia>,
}

impl InputEvent {
    /// The event of `data` typed by `source`: the bytes themselves, or only their count when
    /// `is_echo_off` (what is typed at a password prompt is never kept).
    pub fn new(data: &[u8], source: Option<&InputSource>, is_echo_off: bool) -> Self {
        Self {
            data: if is_echo_off {
                Vec::new()
            } else {
                data.to_vec()
            },
            bytes: data.len() as u64,
            redacted: is_echo_off,
            by: source.map(|s| s.by.clone()),
            via: source.map(|s| s.via),
        }
    }
}

/// Who typed input, as its `pty.input` event records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InputSource {
    /// The principal's non-secret name, `<owner>/<token name>` (never the token), or
    /// `ptyhub` for what ptyhub typed itself (answers to terminal queries, an exec's ^C).
    pub by: String,
    /// How the input arrived.
    pub via: InputVia,
}

impl InputSource {
    /// What ptyhub types on its own: answers to terminal queries, the ^C of a timeout.
    pub fn ptyhub() -> Self {
        Self {
            by: "ptyhub".to_owned(),
            via: InputVia::Ptyhub,
        }
    }
}

/// How input arrived at the terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InputVia {
    /// A WebSocket live connection (the web page, `ptyhub terminal attach`).
    Ws,
    /// REST (v1 or v2).
    Rest,
    /// An MCP tool call.
    Mcp,
    /// The `ptyhub` command line (over REST).
    Cli,
    /// ptyhub itself.
    Ptyhub,
    /// A way this reader does not know (written by a newer ptyhub).
    #[serde(other)]
    Other,
}

impl InputVia {
    /// The wire spelling, e.g. `ws`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ws => "ws",
            Self::Rest => "rest",
            Self::Mcp => "mcp",
            Self::Cli => "cli",
            Self::Ptyhub => "ptyhub",
            Self::Other => "other",
        }
    }
}

/// A `command.note` event: the server asks the holder to log it when it submits a command
/// (before the command's bytes) and when the shell accepts a line someone typed (after its
/// start mark), so that a server that restarts rebuilds the timeline with the same ids, texts
/// and directories.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandNote {
    /// The command's number in the terminal's timeline.
    pub id: u64,
    /// Whether ptyhub submitted it or someone typed it.
    pub origin: crate::api::CommandOrigin,
    /// Its text: as the caller sent it (exec), or as shown when the shell accepted it
    /// (typed); at most [`CommandNote::TEXT_MAX_BYTES`].
    pub command: String,
    /// What the shell was given, when it differs from `command` (an exec with `exec_dir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell_text: Option<String>,
    /// The shell's working directory (filled in by the holder when the server leaves it out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

impl CommandNote {
    /// Longest text a note keeps, in bytes (longer ones are cut at a character boundary).
    pub const TEXT_MAX_BYTES: usize = 64 * 1024;

    /// `text`, cut to [`CommandNote::TEXT_MAX_BYTES`].
    pub fn bounded(text: &str) -> String {
        let mut end = text.len().min(Self::TEXT_MAX_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text[..end].to_owned()
    }
}

impl Event {
    /// Parses one log line (its newline may be there or not). Output events (nearly every
    /// line) take a fast path: in the shape [`Self::write_json_line`] writes them, no JSON
    /// parser reads them at all (`from_output_line`); in another shape, one borrows
    /// the base64 text instead of buffering the whole object first.
    pub fn from_json_line(line: &[u8]) -> Result<Self, serde_json::Error> {
        if let Some(event) = Self::from_output_line(line) {
            return Ok(event);
        }
        #[derive(Deserialize)]
        struct Fast<'a> {
            seq: Seq,
            ts: f64,
            #[serde(rename = "type")]
            kind: &'a str,
            data_b64: Option<&'a str>,
        }
        if let Ok(fast) = serde_json::from_slice::<Fast<'_>>(line)
            && fast.kind == "pty.output"
            && let Some(text) = fast.data_b64
            && let Ok(data) = decode_b64(text)
        {
            return Ok(Self {
                seq: fast.seq,
                ts: fast.ts,
                kind: EventKind::Output { data },
            });
        }
        serde_json::from_slice(line)
    }

    /// An output event in exactly the shape [`Self::write_json_line`] writes, read without a
    /// JSON parser: a JSON parser would scan the base64 text for escapes and check it is UTF-8,
    /// which costs the server and its screen thread more than decoding it (a flood is almost
    /// all base64). Base64 has no character JSON escapes, so the text is the rest of the line
    /// up to its closing `"}`, and the decoder refuses anything that is not base64. `None` for
    /// any other line (the JSON parsers then read it, as they read whatever another writer
    /// may have written).
    fn from_output_line(line: &[u8]) -> Option<Self> {
        const DATA: &[u8] = b",\"type\":\"pty.output\",\"data_b64\":\"";
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let rest = line.strip_prefix(b"{\"seq\":")?;
        let seq_end = rest.iter().position(|&b| b == b',')?;
        let (seq, rest) = rest.split_at(seq_end);
        let rest = rest.strip_prefix(b",\"ts\":")?;
        let ts_end = rest.iter().position(|&b| b == b',')?;
        let (ts, rest) = rest.split_at(ts_end);
        let text = rest.strip_prefix(DATA)?.strip_suffix(b"\"}")?;
        let is_plain_number = !seq.is_empty()
            && seq.iter().all(u8::is_ascii_digit)
            && (seq.len() == 1 || seq[0] != b'0');
        if !is_plain_number {
            return None;
        }
        Some(Self {
            seq: Seq(std::str::from_utf8(seq).ok()?.parse().ok()?),
            ts: serde_json::from_slice(ts).ok()?,
            kind: EventKind::Output {
                data: decode_b64(text).ok()?,
            },
        })
    }

    /// Writes the event as one log line (with its newline). Output events are formatted
    /// directly: base64 needs no JSON escaping.
    pub fn write_json_line(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        match &self.kind {
            EventKind::Output { data } => {
                use std::io::Write as _;
                let _ = write!(out, "{{\"seq\":{},\"ts\":", self.seq.0);
                serde_json::to_writer(&mut *out, &self.ts)?;
                out.extend_from_slice(b",\"type\":\"pty.output\",\"data_b64\":\"");
                B64.encode_append(data, out);
                out.extend_from_slice(b"\"}\n");
            }
            _ => {
                serde_json::to_writer(&mut *out, self)?;
                out.push(b'\n');
            }
        }
        Ok(())
    }
}

/// Serde adapter: bytes as standard base64 text.
pub mod b64 {
    use super::{decode_b64, encode_b64};
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `bytes` as one base64 string.
    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&encode_b64(bytes))
    }

    /// Reads one base64 string back into bytes; anything else is an error.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        decode_b64(text.as_bytes()).map_err(serde::de::Error::custom)
    }
}

/// Encodes bytes as standard base64 (the encoding of `data_b64`).
pub fn encode_b64(bytes: &[u8]) -> String {
    B64.encode_to_string(bytes)
}

/// Decodes standard base64 (padded, canonical: what [`encode_b64`] writes), given as text or
/// as its bytes.
pub fn decode_b64(text: impl AsRef<[u8]>) -> Result<Vec<u8>, base64_simd::Error> {
    B64.decode_to_vec(text)
}

/// The current Unix time in seconds with millisecond precision.
pub fn now_ts() -> f64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (now.as_millis() as f64) / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_event_matches_the_documented_format() {
        let event = Event {
            seq: Seq(1),
            ts: 1735689601.0,
            kind: EventKind::Output {
                data: b"cargo build\n".to_vec(),
            },
        };
        let line = serde_json::to_string(&event).unwrap_or_default();
        assert_eq!(
            line,
            r#"{"seq":1,"ts":1735689601.0,"type":"pty.output","data_b64":"Y2FyZ28gYnVpbGQK"}"#
        );
        let back: Event = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, event);
        let mut fast = Vec::new();
        event
            .write_json_line(&mut fast)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(fast, format!("{line}\n").into_bytes());
        assert_eq!(Event::from_json_line(&fast).ok(), Some(event));
    }

    /// The log's `data_b64` is standard padded base64 as any decoder reads it, whatever the
    /// length (the SIMD paths handle blocks and tails apart), and what another encoder wrote
    /// reads back; a non-canonical tail is refused as before.
    #[test]
    fn output_data_is_standard_base64_both_ways() -> Result<(), serde_json::Error> {
        use base64::Engine as _;
        let reference = base64::engine::general_purpose::STANDARD;
        let sizes = (0..200).chain([1021, 4096, 4097, 65_535, 65_536]);
        for size in sizes {
            let data: Vec<u8> = (0..size).map(|i| (i * 7919 % 256) as u8).collect();
            let event = Event {
                seq: Seq(7),
                ts: 1.5,
                kind: EventKind::Output { data: data.clone() },
            };
            let mut line = Vec::new();
            event.write_json_line(&mut line)?;
            let value: serde_json::Value = serde_json::from_slice(&line)?;
            let text = value["data_b64"].as_str().unwrap_or_default();
            assert_eq!(text, reference.encode(&data), "size {size}");
            let theirs = format!(
                r#"{{"seq":7,"ts":1.5,"type":"pty.output","data_b64":"{}"}}"#,
                reference.encode(&data)
            );
            match Event::from_json_line(theirs.as_bytes())?.kind {
                EventKind::Output { data: read } => assert_eq!(read, data, "size {size}"),
                other => panic!("size {size}: not output: {other:?}"),
            }
        }
        // "QR==" has bits set past its one byte: no encoder writes it.
        let bad = br#"{"seq":1,"ts":1,"type":"pty.output","data_b64":"QR=="}"#;
        assert!(Event::from_json_line(bad).is_err());
        assert!(decode_b64("QR==").is_err());
        assert_eq!(decode_b64("QQ==").ok(), Some(b"A".to_vec()));
        Ok(())
    }

    /// The output line read without a JSON parser gives what serde gives for every line our
    /// writer writes, and any other shape goes to serde: spacing, another field order, an
    /// escape in the base64, a number serde refuses, a line of another type.
    #[test]
    fn output_lines_read_without_a_json_parser_match_serde() -> Result<(), serde_json::Error> {
        let serde_reads = |line: &[u8]| serde_json::from_slice::<Event>(line).ok();
        for (i, size) in (0..70).chain([4095, 65_536]).enumerate() {
            let event = Event {
                seq: Seq([0, 1, 9, 10, 123_456_789, u64::MAX][i % 6]),
                ts: [0.0, 1.5, 1_796_514_473.414, 1e-7, 12_345_678_901_234_567.0][i % 5],
                kind: EventKind::Output {
                    data: (0..size).map(|b| (b * 31 % 256) as u8).collect(),
                },
            };
            let mut line = Vec::new();
            event.write_json_line(&mut line)?;
            let fast = Event::from_output_line(&line);
            assert_eq!(
                fast,
                Some(event.clone()),
                "{}",
                String::from_utf8_lossy(&line)
            );
            assert_eq!(fast, serde_reads(&line));
            assert_eq!(Event::from_output_line(&line[..line.len() - 1]), fast);
        }
        let others: [&[u8]; 10] = [
            br#"{"seq": 1,"ts":1.5,"type":"pty.output","data_b64":"aGk="}"#,
            br#"{"seq":1,"type":"pty.output","ts":1.5,"data_b64":"aGk="}"#,
            br#"{"seq":1,"ts":1.5,"type":"pty.output","data_b64":"a\/k="}"#,
            br#"{"seq":1,"ts":1.5,"type":"pty.output","data_b64":"aGk=","x":1}"#,
            br#"{"seq":01,"ts":1.5,"type":"pty.output","data_b64":"aGk="}"#,
            br#"{"seq":-1,"ts":1.5,"type":"pty.output","data_b64":"aGk="}"#,
            br#"{"seq":18446744073709551616,"ts":1.5,"type":"pty.output","data_b64":"aGk="}"#,
            br#"{"seq":1,"ts":1.5,"type":"pty.input","data_b64":"aGk=","bytes":2}"#,
            br#"{"seq":1,"ts":1.5,"type":"pty.output","data_b64":"aGk"}"#,
            br#"{"seq":1,"ts":"1.5","type":"pty.output","data_b64":"aGk="}"#,
        ];
        for line in others {
            assert_eq!(
                Event::from_output_line(line),
                None,
                "{}",
                String::from_utf8_lossy(line)
            );
            assert_eq!(
                Event::from_json_line(line).ok(),
                serde_reads(line),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        Ok(())
    }

    #[test]
    fn exit_event_and_unknown_types_parse() {
        let exit: Event = serde_json::from_str(
            r#"{"seq":2,"ts":1735689602,"type":"process.exit","exit_code":0}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            exit.kind,
            EventKind::Exit {
                exit_code: Some(0),
                signal: None
            }
        );
        let future: Event = serde_json::from_str(r#"{"seq":3,"ts":1,"type":"pty.future","x":1}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(future.kind, EventKind::Unknown);
    }

    #[test]
    fn input_events_keep_their_bytes_or_only_their_count() {
        let source = InputSource {
            by: "alice/ci".to_owned(),
            via: InputVia::Rest,
        };
        let typed = Event {
            seq: Seq(4),
            ts: 2.0,
            kind: EventKind::Input(InputEvent::new(b"ls\r", Some(&source), false)),
        };
        let line = serde_json::to_string(&typed).unwrap_or_default();
        assert_eq!(
            line,
            r#"{"seq":4,"ts":2.0,"type":"pty.input","data_b64":"bHMN","bytes":3,"by":"alice/ci","via":"rest"}"#
        );
        assert_eq!(Event::from_json_line(line.as_bytes()).ok(), Some(typed));
        let secret = Event {
            seq: Seq(5),
            ts: 2.0,
            kind: EventKind::Input(InputEvent::new(b"hunter2\r", Some(&source), true)),
        };
        let line = serde_json::to_string(&secret).unwrap_or_default();
        assert_eq!(
            line,
            r#"{"seq":5,"ts":2.0,"type":"pty.input","bytes":8,"redacted":true,"by":"alice/ci","via":"rest"}"#
        );
        assert!(!line.contains("aHVudGVy"), "no byte of the secret is kept");
        assert_eq!(Event::from_json_line(line.as_bytes()).ok(), Some(secret));
        let older: Event = serde_json::from_str(
            r#"{"seq":6,"ts":2,"type":"pty.input","data_b64":"eA==","bytes":1}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            older.kind,
            EventKind::Input(InputEvent { by: None, .. })
        ));
    }
}
