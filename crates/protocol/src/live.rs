//! The frames of a live connection (docs/websocket.md): [`ServerFrame`] for what the server
//! sends, [`ClientFrame`] for what a client sends, both JSON text frames tagged by `type`.
//!
//! This module owns the shapes only; who may connect, replay and lag are the terminal's rules
//! (`ptyhub_core::terminal::live`), and the server's WebSocket transport turns them into these
//! frames. Output in the binary transport (`protocol=binary`) travels as binary frames and has
//! no type here. Every variant has a fixture under `crates/protocol/tests/fixtures/live/`, so a
//! drift in a shape fails a test, and the web page is checked against the same fixtures.

use serde::{Deserialize, Serialize};

use crate::api::{BackendKind, CommandResult, ExecParams};
use crate::error::{ApiError, ErrorCode};
use crate::event::Seq;

/// How output travels on a connection (the `protocol` query parameter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LiveTransport {
    /// Output as `output` / `restore_output` text frames.
    #[default]
    Json,
    /// Output as raw PTY bytes in binary frames; every other frame stays JSON.
    Binary,
}

impl LiveTransport {
    /// The wire spelling, e.g. `binary`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Binary => "binary",
        }
    }
}

/// What a connection may do (the `mode` query parameter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionMode {
    /// The one agent relay of a terminal (read and write).
    #[default]
    Relay,
    /// Any number of read-write peers.
    Attach,
    /// Any number of read-only peers.
    Watch,
}

impl ConnectionMode {
    /// The wire spelling, e.g. `watch`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Relay => "relay",
            Self::Attach => "attach",
            Self::Watch => "watch",
        }
    }
}

/// A frame the server sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame {
    /// `/v1/shell/ws` opened a new terminal: its id, before `ready`.
    SessionId {
        /// The new terminal's id.
        session_id: String,
    },
    /// The connection is live.
    Ready {
        /// The terminal's id; `null` for an anonymous terminal (`/v2/pty/ws`).
        session_id: Option<String>,
        /// How output travels on this connection.
        transport: LiveTransport,
        /// What hosts the terminal.
        backend: BackendKind,
        /// A durable relay connection existed before this one.
        resumed: bool,
        /// What this connection may do.
        mode: ConnectionMode,
        /// The last event already in the log (or the last one a replay covers).
        seq: Seq,
        /// The terminal's width.
        cols: u16,
        /// The terminal's height.
        rows: u16,
    },
    /// Replayed output (JSON transport).
    RestoreOutput {
        /// The bytes as UTF-8 text (a character is never cut in two).
        data: String,
        /// The last event whose bytes this frame completes.
        seq: Seq,
    },
    /// The replay is complete; live output follows.
    TerminalRestored {
        /// The terminal's id.
        session_id: String,
        /// The last event the replay covered.
        seq: Seq,
    },
    /// Live output (JSON transport).
    Output {
        /// The bytes as UTF-8 text (a character is never cut in two).
        data: String,
        /// The last event whose bytes this frame completes.
        seq: Seq,
    },
    /// The terminal changed size (every connection sees it).
    Resize {
        /// The new width.
        cols: u16,
        /// The new height.
        rows: u16,
        /// The resize event's seq.
        seq: Seq,
    },
    /// This connection fell behind the live stream; what follows comes from the log.
    Lagged {
        /// The last event delivered before the connection fell behind.
        seq: Seq,
    },
    /// The terminal's program ended; the connection closes after it.
    Exit {
        /// Its exit code (`null` when a signal ended it).
        exit_code: Option<i32>,
        /// The signal that ended it, if any.
        signal: Option<i32>,
        /// The exit event's seq.
        seq: Seq,
    },
    /// The answer to a `ping`.
    Pong {
        /// The ping's `timestamp`, as it was sent (`null` when it had none).
        timestamp: Option<serde_json::Value>,
    },
    /// A newer durable relay took over; the connection closes after it.
    RelayReplaced,
    /// The server stops (a restart or an upgrade; docs/operations.md): the connection closes
    /// after it with code 1012 and the same reason. The terminal keeps running; reconnect
    /// with `since_seq` to resume exactly.
    ServerStopping {
        /// Why, for people (`server restarting`).
        reason: String,
        /// The newest event up to which this connection was sent every output byte: the
        /// `since_seq` to resume from; null when it was sent none (reconnect as at first).
        seq: Option<Seq>,
    },
    /// Who is here (docs/websocket.md#presence): sent when the connection goes live, then
    /// whenever someone joins or leaves, the keyboard changes hands, or typing starts or
    /// stops (at most a few a second).
    Presence(Presence),
    /// The answer to an `exec` frame: the command's result as REST v2's exec gives it, or
    /// why it did not run. It carries the frame's `request_id` back.
    ExecResult {
        /// The `request_id` of the `exec` frame this answers (`null` when it had none).
        request_id: Option<String>,
        /// The command as it stands (absent when it was refused).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<Box<CommandResult>>,
        /// Why it did not run (absent when it ran).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<FrameError>,
    },
    /// A refused frame or connection.
    Error {
        /// What went wrong, for people.
        data: String,
        /// One of the REST error codes.
        code: ErrorCode,
    },
}

impl ServerFrame {
    /// The `error` frame of `error`.
    pub fn error(error: &ApiError) -> Self {
        Self::Error {
            data: error.message.clone(),
            code: error.code,
        }
    }

    /// The error an `error` frame carries.
    pub fn as_error(&self) -> Option<ApiError> {
        match self {
            Self::Error { data, code } => Some(ApiError::new(*code, data.clone())),
            _ => None,
        }
    }

    /// The frame as JSON text.
    pub fn to_text(&self) -> String {
        to_text(self)
    }
}

/// The `presence` frame: the terminal's live connections, who holds the keyboard, who typed
/// last.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Presence {
    /// This connection's id among `connections`.
    pub you: u64,
    /// Every live connection of the terminal, oldest first.
    pub connections: Vec<PresencePeer>,
    /// Who holds the keyboard; null while nobody does.
    pub lease: Option<crate::api::LeaseInfo>,
    /// The last input anyone typed (any transport); null before any.
    pub last_input: Option<LastInput>,
}

/// One live connection in a `presence` frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PresencePeer {
    /// The connection's id (`you`, `lease.connection`).
    pub id: u64,
    /// Who connected, `<owner>/<token name>`.
    pub by: String,
    /// What it may do.
    pub mode: ConnectionMode,
}

/// The last input in a `presence` frame.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LastInput {
    /// Who typed it; null when the log does not say (an older server).
    pub by: Option<String>,
    /// How it arrived.
    pub via: Option<crate::event::InputVia>,
    /// Unix seconds when it was typed.
    pub at: f64,
    /// It was typed within the last two seconds.
    pub is_typing: bool,
}

/// A frame a client sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientFrame {
    /// Bytes for the terminal (a line runs when it carries `\n` or `\r`).
    Input {
        /// The text to write.
        data: String,
    },
    /// Resize the PTY, the screen and every attachment: `cols` and `rows`, or (an older
    /// spelling) `data: {cols, rows}`.
    Resize {
        /// The new width.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cols: Option<u16>,
        /// The new height.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rows: Option<u16>,
        /// The size under `data`, instead of `cols` and `rows`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<ResizeData>,
    },
    /// Take the keyboard (the input lease): input from every other writer is refused while
    /// this connection holds it. Held by someone else: an `INPUT_LEASED` error, unless
    /// `force` (the holder is told by a `presence` frame). Writers only.
    LeaseTake {
        /// Take it from whoever holds it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        force: bool,
    },
    /// Hand the keyboard back (nothing happens when this connection does not hold it).
    LeaseRelease,
    /// Runs a command as REST v2's exec does (`params` are its body) and answers with an
    /// `exec_result` frame carrying `request_id`. Writers only.
    Exec {
        /// The client's name for this request (at most 128 characters), carried back by
        /// the answer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
        /// What exec's body holds: `command`, `timeout`, `exec_dir`, …
        params: Box<ExecParams>,
    },
    /// Asks for a `pong`.
    Ping {
        /// Anything; the `pong` carries it back.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timestamp: Option<serde_json::Value>,
    },
}

/// Why an `exec` frame's command did not run: an error code and its message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameError {
    /// One of the REST error codes.
    pub code: ErrorCode,
    /// What went wrong, for people.
    pub message: String,
}

impl From<&ApiError> for FrameError {
    fn from(error: &ApiError) -> Self {
        Self {
            code: error.code,
            message: error.message.clone(),
        }
    }
}

/// The `data` of a `resize` frame in its older spelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResizeData {
    /// The new width.
    pub cols: u16,
    /// The new height.
    pub rows: u16,
}

impl ClientFrame {
    /// A `resize` frame in its usual spelling (`cols` and `rows`).
    pub fn resize(cols: u16, rows: u16) -> Self {
        Self::Resize {
            cols: Some(cols),
            rows: Some(rows),
            data: None,
        }
    }

    /// The frame as JSON text.
    pub fn to_text(&self) -> String {
        to_text(self)
    }

    /// Reads the body of a text frame as a client sent it; the error says what a client may
    /// send. Every client frame is a JSON object: serde would also read an internally tagged
    /// frame from an array (`["input","ls\r"]`), which no client means as input.
    pub fn from_text(body: &str) -> Result<Self, ApiError> {
        if !body.trim_start().starts_with('{') {
            return Err(ApiError::invalid(
                "a frame is a JSON object, e.g. {\"type\":\"input\",\"data\":…}; nothing was written to the terminal",
            ));
        }
        serde_json::from_str(body).map_err(|error| {
            // A frame of a known type says what is wrong with it (an `exec` frame's params
            // are a whole body); anything else lists what a client may send.
            let kind = serde_json::from_str::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned));
            match kind.as_deref() {
                Some("exec") => ApiError::invalid(format!(
                    "an exec frame is {{\"type\":\"exec\",\"request_id\":…,\"params\":{{\"command\":…}}}}: {error}; nothing was run"
                )),
                _ => ApiError::invalid(
                    "unknown frame: send {\"type\":\"input\",\"data\":…}, {\"type\":\"resize\",\"cols\":…,\"rows\":…}, {\"type\":\"exec\",\"params\":{\"command\":…}}, {\"type\":\"lease_take\"}, {\"type\":\"lease_release\"} or {\"type\":\"ping\"}; nothing was written to the terminal",
                ),
            }
        })
    }
}

/// The size a `resize` frame asks for: `cols` and `rows`, or else `data`.
pub fn resize_size(
    cols: Option<u16>,
    rows: Option<u16>,
    data: Option<ResizeData>,
) -> Result<(u16, u16), ApiError> {
    match (cols, rows, data) {
        (Some(cols), Some(rows), _) => Ok((cols, rows)),
        (None, None, Some(data)) => Ok((data.cols, data.rows)),
        _ => Err(ApiError::invalid(
            "resize needs cols and rows (or data: {cols, rows})",
        )),
    }
}

fn to_text(frame: &impl Serialize) -> String {
    // These types hold only strings, numbers and JSON values, which always serialize.
    serde_json::to_string(frame).unwrap_or_else(|_| "{}".to_owned())
}
