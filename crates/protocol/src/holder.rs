//! The holder ↔ server protocol: newline-delimited JSON over the holder's unix socket.
//!
//! The server sends [`HolderRequest`]s. The holder answers with [`HolderMessage`]s and, after a
//! `subscribe`, streams the terminal's event log as the very lines of `events.jsonl`, first the
//! retained events after the requested `seq` (read back from the file), then live ones, so a
//! reader that remembers the last `seq` it applied never misses or repeats a byte.
//!
//! Flow at a glance:
//! 1. the server connects and sends `hello` with the range of versions it speaks; the holder
//!    answers `hello` with the version it picked (see *Versions* below);
//! 2. the server sends `subscribe { after_seq }` and reads event lines forever;
//! 3. at any time the server sends `input`, `resize`, `signal`, `note`, `status` or
//!    `terminate`; and, having asked for the PTY's master on a connection of its own
//!    (`master`), `typed` for the bytes it writes to the PTY itself.
//!
//! Versions (docs/storage.md#holder-protocol-versions): a server speaks every version from
//! [`HOLDER_PROTOCOL_MIN`] to [`HOLDER_PROTOCOL_VERSION`]. Its `hello` says `version` (the
//! oldest it speaks: the one field a holder of version 1 reads, which refuses any other
//! value) and `max_version`. A holder picks the newest version both speak and answers it; a
//! holder that shares none answers its own newest, and the server reports the terminal
//! instead of following it (it never ends it). Version 1 holders answer `1` to every server
//! that sends `version: 1`.

use serde::{Deserialize, Serialize};

use crate::event::{Event, Seq};

/// The newest version of the protocol this build speaks. Bumped on any change a peer must
/// know about; version 2 added the negotiated `hello` (`max_version`, a picked answer).
pub const HOLDER_PROTOCOL_VERSION: u32 = 2;

/// The oldest version this build still speaks: a server follows holders of every version from
/// here to [`HOLDER_PROTOCOL_VERSION`], and a holder answers every server whose range reaches
/// one of them.
pub const HOLDER_PROTOCOL_MIN: u32 = 1;

/// The version a holder speaks with a server that offers `offered_min..=offered_max`, when it
/// speaks `own_min..=own_max` itself: the newest both know, or `None` when they share none.
pub fn pick_version(offered_min: u32, offered_max: u32, own_min: u32, own_max: u32) -> Option<u32> {
    let picked = offered_max.min(own_max);
    (picked >= offered_min.max(own_min)).then_some(picked)
}

/// Longest line either side accepts, so a confused peer cannot make the other allocate without
/// bound. Input chunks are split by the sender to stay well below it.
pub const HOLDER_LINE_MAX_BYTES: usize = 8 * 1024 * 1024;

/// A request from the server to a holder.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum HolderRequest {
    /// The first request on a connection: the versions the server speaks. The holder answers
    /// [`HolderMessage::Hello`] with the one it picked (a holder of version 1 answers `error`
    /// unless `version` is 1).
    Hello {
        /// The oldest version the server speaks ([`HOLDER_PROTOCOL_MIN`]).
        version: u32,
        /// The newest version the server speaks ([`HOLDER_PROTOCOL_VERSION`]); absent from a
        /// server of version 1, which speaks `version` alone.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_version: Option<u32>,
    },
    /// Stream every kept event with `seq > after_seq` (from the oldest kept one if `after_seq`
    /// is older), then live events, until the connection ends.
    Subscribe {
        /// The `seq` of the last event the server has applied (`0`: the whole kept log).
        after_seq: Seq,
    },
    /// Bytes to write to the PTY, as typed. Answered by one `input_result`.
    Input {
        /// The bytes, as standard base64 in `data_b64`.
        #[serde(rename = "data_b64", with = "crate::event::b64")]
        data: Vec<u8>,
        /// First discard every byte typed earlier that no program has read yet (the holder's
        /// own queue and the terminal's input queue), so it can never run later.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        discard_unread: bool,
        /// Who typed the bytes: the holder logs them as a `pty.input` event with it (absent
        /// from an older server: the event then names nobody).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<crate::event::InputSource>,
        /// Nobody waits for this request's `input_result` (an exec's typing): the holder need
        /// not count the terminal's unread input for it, and may send it with the output that
        /// follows, a few milliseconds later at most (an older holder answers at once, whole).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        no_receipt: bool,
        /// The bytes are logged already: a `typed` request named them, and these are the ones
        /// the PTY did not take at once. The holder queues and types them and logs nothing.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_logged: bool,
    },
    /// Bytes the server writes to the PTY itself, through the descriptor `master` gave it:
    /// sent on the connection it asked `master` on, just before it writes them (no answer).
    /// The holder reads that connection whenever it wakes and before it logs what it read
    /// from the PTY, and logs them as a `pty.input` event (after a note before them): ahead
    /// of the output they cause.
    Typed {
        /// The bytes, as standard base64 in `data_b64`.
        #[serde(rename = "data_b64", with = "crate::event::b64")]
        data: Vec<u8>,
        /// Who typed the bytes, as in `input`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<crate::event::InputSource>,
    },
    /// Ask for a descriptor of the terminal's PTY master, so that the server can type an
    /// exec's command itself (no wake-up of the holder in between). Answered by one `master`
    /// line carrying the descriptor, or by `error` from a holder that has none to give (tmux
    /// holds its panes' PTYs; an older holder does not know the request).
    Master,
    /// Set the PTY's size; the holder logs it as a `pty.resize` event (no answer). A zero
    /// dimension is ignored.
    Resize {
        /// The new width in character cells.
        cols: u16,
        /// The new height in character cells.
        rows: u16,
    },
    /// Deliver a signal to the PTY's foreground process group. Answered by one `signaled`.
    Signal {
        /// The signal's number on the holder's machine.
        signal: i32,
        /// Do nothing if the foreground group is this one (the shell's own), and answer that
        /// there is no foreground group to signal.
        #[serde(default)]
        spare_pgid: Option<u32>,
    },
    /// Deliver a signal to every process of the terminal other than its program (the shell)
    /// that started at `since` or later: what a command started, the background jobs of its
    /// own included (no answer). An older holder answers `error` and signals nothing.
    SignalStartedSince {
        /// The signal's number on the holder's machine.
        signal: i32,
        /// Unix seconds: the command's start.
        since: f64,
    },
    /// Log a `command.note` event (no answer); the holder fills in a missing `cwd` with the
    /// program's working directory. An older holder answers `error` and logs nothing.
    Note(crate::event::CommandNote),
    /// Ask for a [`HolderStatus`].
    Status,
    /// End the whole process tree (SIGHUP, then SIGKILL after a grace), record the exit, and
    /// stop the holder. No answer: the `process.exit` event and the end of the stream tell.
    Terminate,
}

impl HolderRequest {
    /// Whether the server waits for an answer to it: `hello`, `subscribe`, `status`,
    /// `signal`, and `input` unless `no_receipt`.
    pub fn is_awaited(&self) -> bool {
        match self {
            Self::Hello { .. }
            | Self::Subscribe { .. }
            | Self::Status
            | Self::Signal { .. }
            | Self::Master => true,
            Self::Input { no_receipt, .. } => !no_receipt,
            Self::Typed { .. }
            | Self::Resize { .. }
            | Self::SignalStartedSince { .. }
            | Self::Note(_)
            | Self::Terminate => false,
        }
    }
}

/// A message from a holder that is not an event line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HolderMessage {
    /// The answer to `hello`.
    Hello {
        /// The version the holder picked from the server's range, which both then speak; the
        /// holder's own newest when they share none (the server then stops there).
        version: u32,
        /// The holder's process id.
        holder_pid: u32,
        /// The `seq` of the newest event in the log when the holder answered: a subscriber
        /// has replayed the history once it has applied this one.
        last_seq: Seq,
    },
    /// The answer to `status`.
    Status(HolderStatus),
    /// The answer to each `input` request, in order: whether its bytes were queued for the PTY.
    InputResult {
        /// The bytes were queued; false when the program has exited or has left too much
        /// input unread (the server answers `BUSY`).
        accepted: bool,
        /// Why the bytes were refused; null when accepted.
        error: Option<String>,
        /// Bytes of this request the PTY took at once; null from a holder that does not say.
        #[serde(default)]
        written: Option<u64>,
        /// Bytes waiting in the holder for the PTY to take them (the terminal's input queue is
        /// full: nothing reads it).
        #[serde(default)]
        pending: Option<u64>,
        /// Bytes in the terminal's input queue that no program has read yet.
        #[serde(default)]
        unread: Option<u64>,
        /// Bytes discarded by `discard_unread`.
        #[serde(default)]
        discarded: Option<u64>,
    },
    /// The answer to a `signal` request.
    Signaled {
        /// The process group that got the signal; null when there was no foreground group
        /// to signal (or it was the spared one).
        pgid: Option<u32>,
        /// The group leader's program name, read before the signal; null when unknown.
        program: Option<String>,
        /// Why the signal could not be delivered; null when it was.
        error: Option<String>,
    },
    /// The answer to `master`: the descriptor of the terminal's PTY master comes with this
    /// line (`SCM_RIGHTS`).
    Master,
    /// A request that failed outright: a line that is not a request, a version mismatch, a
    /// log that cannot be read. The server logs it.
    Error {
        /// What went wrong, for people.
        message: String,
    },
    /// Unasked, to every subscriber: the event log refuses appends (the disk is full) and the
    /// holder holds the terminal's output back until it takes them again, or it does again
    /// (`error` null). Sent on each change, and at once to a subscriber during a stall.
    Storage {
        /// Why the log refuses appends; null once it takes them again.
        error: Option<String>,
    },
    /// A message this reader does not know (sent by a newer holder).
    #[serde(other)]
    Unknown,
}

/// What the holder knows about the live process: the facts a client's `send`, `signal` and
/// `snapshot` are answered from. Fields added after the first version of the protocol default
/// to "unknown" when an older holder leaves them out.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HolderStatus {
    /// The holder's process id.
    pub holder_pid: u32,
    /// The terminal's program (the shell), the leader of its own session; its process group
    /// is "the shell's own".
    pub child_pid: Option<u32>,
    /// The PTY's foreground process group (`tcgetpgrp`).
    pub foreground_pgid: Option<u32>,
    /// The foreground group leader's program name (`/proc/<pgid>/comm`).
    pub foreground_program: Option<String>,
    /// The program's working directory, as last read from the kernel.
    pub cwd: Option<String>,
    /// The `seq` of the newest event in the log.
    pub last_seq: Seq,
    /// The program has exited; the foreground facts below mean nothing then.
    pub exited: bool,
    /// A process of the foreground group is blocked reading the terminal (or waiting on it
    /// with poll/select).
    #[serde(default)]
    pub is_reading: bool,
    /// The terminal is in canonical (line) mode (termios `ICANON`).
    #[serde(default)]
    pub is_canonical: bool,
    /// The terminal echoes what is typed (termios `ECHO`; canonical without echo: a password
    /// prompt).
    #[serde(default)]
    pub is_echo: bool,
    /// Processes of the terminal, the program and everything it started (all under the
    /// holder); null from a holder that does not count them.
    #[serde(default)]
    pub process_count: Option<u32>,
    /// The process of the foreground group that reads the terminal (it may not be the group's
    /// leader: `less` under `git log`); null when none does.
    #[serde(default)]
    pub reader_program: Option<String>,
    /// What the foreground group waits on when it is blocked (the terminal when it reads it);
    /// null while it runs or when the kernel does not tell.
    #[serde(default)]
    pub waits_on: Option<crate::api::WaitsOn>,
    /// Bytes typed into the terminal that no program has read yet (complete lines in
    /// canonical mode, every byte in raw mode); null when it cannot be read.
    #[serde(default)]
    pub input_queued: Option<u32>,
}

/// One line from a holder: an event of the log, or a control message.
#[derive(Clone, Debug, PartialEq)]
pub enum HolderLine {
    /// A line of the event log.
    Event(Event),
    /// A control message.
    Message(HolderMessage),
}

impl HolderLine {
    /// Event lines start with their `seq`; anything else is a control message.
    pub fn parse(line: &[u8]) -> Result<Self, serde_json::Error> {
        if line.starts_with(b"{\"seq\":") {
            Event::from_json_line(line).map(Self::Event)
        } else {
            serde_json::from_slice(line).map(Self::Message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        let input = HolderRequest::Input {
            data: b"ls\r".to_vec(),
            discard_unread: false,
            source: None,
            no_receipt: false,
            is_logged: false,
        };
        let line = serde_json::to_string(&input).unwrap_or_default();
        assert_eq!(line, r#"{"op":"input","data_b64":"bHMN"}"#);
        let back: HolderRequest = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, input);
        let quiet = HolderRequest::Input {
            data: b"ls\r".to_vec(),
            discard_unread: false,
            source: None,
            no_receipt: true,
            is_logged: false,
        };
        let line = serde_json::to_string(&quiet).unwrap_or_default();
        assert_eq!(
            line,
            r#"{"op":"input","data_b64":"bHMN","no_receipt":true}"#
        );
        let back: HolderRequest = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, quiet);
        // What the server types itself, and the rest of it the PTY did not take at once.
        let typed = HolderRequest::Typed {
            data: b"ls\r".to_vec(),
            source: None,
        };
        let line = serde_json::to_string(&typed).unwrap_or_default();
        assert_eq!(line, r#"{"op":"typed","data_b64":"bHMN"}"#);
        assert_eq!(
            serde_json::from_str::<HolderRequest>(&line).unwrap_or_else(|e| panic!("{e}")),
            typed
        );
        let rest = HolderRequest::Input {
            data: b"\r".to_vec(),
            discard_unread: false,
            source: None,
            no_receipt: true,
            is_logged: true,
        };
        let line = serde_json::to_string(&rest).unwrap_or_default();
        assert_eq!(
            line,
            r#"{"op":"input","data_b64":"DQ==","no_receipt":true,"is_logged":true}"#
        );
        assert_eq!(
            serde_json::to_string(&HolderRequest::Master).unwrap_or_default(),
            r#"{"op":"master"}"#
        );
        assert_eq!(
            serde_json::from_str::<HolderMessage>(r#"{"type":"master"}"#)
                .unwrap_or_else(|e| panic!("{e}")),
            HolderMessage::Master
        );
    }

    #[test]
    fn event_lines_and_messages_are_told_apart() {
        let event =
            HolderLine::parse(br#"{"seq":5,"ts":1.5,"type":"pty.output","data_b64":"aGk="}"#)
                .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(event, HolderLine::Event(_)));
        let hello =
            HolderLine::parse(br#"{"type":"hello","version":1,"holder_pid":9,"last_seq":4}"#)
                .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            hello,
            HolderLine::Message(HolderMessage::Hello { .. })
        ));
    }

    #[test]
    fn a_server_of_version_1_and_a_holder_of_version_1_read_the_new_hello() {
        // What a server of version 1 sends is still read, as a range of one version.
        let old: HolderRequest =
            serde_json::from_str(r#"{"op":"hello","version":1}"#).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            old,
            HolderRequest::Hello {
                version: 1,
                max_version: None
            }
        );
        // What this server sends keeps `version: 1`, the field a holder of version 1 checks;
        // the field it does not know is ignored by its reader (no `deny_unknown_fields`).
        let new = HolderRequest::Hello {
            version: HOLDER_PROTOCOL_MIN,
            max_version: Some(HOLDER_PROTOCOL_VERSION),
        };
        let line = serde_json::to_string(&new).unwrap_or_default();
        assert_eq!(line, r#"{"op":"hello","version":1,"max_version":2}"#);
    }

    #[test]
    fn the_newest_shared_version_is_picked() {
        assert_eq!(pick_version(1, 2, 1, 2), Some(2));
        assert_eq!(pick_version(1, 1, 1, 2), Some(1));
        assert_eq!(pick_version(1, 3, 1, 2), Some(2));
        assert_eq!(pick_version(3, 4, 1, 2), None);
        assert_eq!(pick_version(1, 2, 5, 7), None);
    }
}
