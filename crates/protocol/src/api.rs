//! REST payloads of the v2 API (`/v2/pty/sessions…`, seed 000) shared by the server, the
//! client and the tests. Requests are `*Params`, answers `*Response` or plain records;
//! every answer travels inside the [`Envelope`].

use serde::{Deserialize, Serialize};

use crate::event::Seq;

/// `{success, message, data}`: the envelope of every successful answer.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Envelope<T> {
    pub success: bool,
    pub message: String,
    pub data: T,
}

impl<T> Envelope<T> {
    pub fn ok(message: impl Into<String>, data: T) -> Self {
        Self {
            success: true,
            message: message.into(),
            data,
        }
    }
}

/// A terminal's lifecycle state (`state` file; seed 001).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TerminalState {
    Created,
    Running,
    Exited,
    Error,
}

impl TerminalState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Running => "running",
            Self::Exited => "exited",
            Self::Error => "error",
        }
    }
}

/// What hosts a terminal's PTY, processes and event log. Only `native` (a holder process per
/// terminal) exists today; the name is the wire's and `meta.json`'s spelling.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BackendKind {
    /// A holder process per terminal on this machine.
    #[default]
    Native,
}

impl BackendKind {
    /// The wire spelling, e.g. `native`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Native => "native",
        }
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The lifecycle of one command (seed 000's statuses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CommandStatus {
    Running,
    Completed,
    NoChangeTimeout,
    HardTimeout,
    Terminated,
}

impl CommandStatus {
    pub fn is_running(self) -> bool {
        self == Self::Running
    }
}

/// `POST /v2/pty/sessions`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSessionParams {
    /// Client-chosen id; an existing id returns the existing terminal.
    #[serde(default, alias = "session_id")]
    pub id: Option<String>,
    /// Absolute working directory (default: the server user's home).
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub cols: Option<u16>,
    #[serde(default)]
    pub rows: Option<u16>,
    #[serde(default)]
    pub env: Option<std::collections::BTreeMap<String, String>>,
    /// The shell to run (a name on `PATH` or an absolute path).
    #[serde(default)]
    pub shell: Option<String>,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub session: Option<String>,
}

/// One terminal as lists and status show it.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TerminalInfo {
    pub session_id: String,
    pub agent: String,
    pub session: String,
    pub owner: String,
    pub state: TerminalState,
    pub working_dir: String,
    pub cols: u16,
    pub rows: u16,
    pub shell: String,
    pub created_at: u64,
    /// Unix seconds of the last output or input.
    pub last_activity: u64,
    /// The command running now, if any.
    pub running_command: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub instance: u32,
    pub last_seq: Seq,
    pub closed: bool,
    pub backend: BackendKind,
}

/// `POST …/exec`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExecParams {
    pub command: String,
    /// Return at once with status `running`.
    #[serde(default, rename = "async", alias = "async_mode")]
    pub is_async: bool,
    /// Seconds to wait for the result; the command goes on after it (status `running`).
    #[serde(default)]
    pub timeout: Option<f64>,
    /// Seconds without output before ^C (default 120; only while a call waits).
    #[serde(default)]
    pub no_change_timeout: Option<f64>,
    /// Seconds before ^C whatever happens.
    #[serde(default)]
    pub hard_timeout: Option<f64>,
    /// Keep the first and last 15,000 characters of a longer output (default true).
    #[serde(default)]
    pub truncate: Option<bool>,
    /// Change to this directory first.
    #[serde(default)]
    pub exec_dir: Option<String>,
}

/// One finished command in the console history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ConsoleRecord {
    pub ps1: String,
    pub command: String,
    pub output: String,
}

/// The result of exec / wait / screen: one command as it stands.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CommandResult {
    pub session_id: String,
    pub command: Option<String>,
    pub status: CommandStatus,
    /// The command's own output (only once it is no longer running, for exec).
    pub output: Option<String>,
    pub console: Vec<ConsoleRecord>,
    pub exit_code: Option<i32>,
}

/// `GET …/screen`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScreenResponse {
    pub session_id: String,
    /// The running command (null between commands).
    pub command: Option<String>,
    /// The current (or last) command's status; `completed` when none ran yet.
    pub status: CommandStatus,
    /// The current (or last) command's output so far.
    pub output: String,
    pub exit_code: Option<i32>,
    /// The visible rows of the screen.
    pub screen: Vec<String>,
    pub cols: u16,
    pub rows: u16,
    pub cursor_row: u16,
    pub cursor_col: u16,
    pub is_alternate_screen: bool,
    pub state: TerminalState,
    /// The last window title a program set.
    #[serde(default)]
    pub title: Option<String>,
    /// The event `seq` this screen reflects.
    #[serde(default)]
    pub seq: Seq,
}

/// `POST …/input`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InputParams {
    pub input: String,
    #[serde(default)]
    pub press_enter: bool,
}

/// `POST …/wait`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WaitParams {
    #[serde(default)]
    pub seconds: Option<f64>,
}

/// `POST …/resize`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResizeParams {
    pub cols: u16,
    pub rows: u16,
}

/// `GET …/events?after_seq=&limit=`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EventsResponse {
    pub session_id: String,
    pub events: Vec<serde_json::Value>,
    /// The `seq` to pass as `after_seq` next.
    pub next_seq: Seq,
    pub last_seq: Seq,
    pub has_more: bool,
}

/// `DELETE …/{id}`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CloseResponse {
    pub session_id: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
}

/// `POST …/send` (seed 002): write text, then wait until the terminal needs something.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendParams {
    /// Text to type (escape sequences and control characters included).
    #[serde(default)]
    pub text: String,
    /// Press Enter after the text.
    #[serde(default)]
    pub submit: bool,
    /// Seconds to wait at most (default 30).
    #[serde(default)]
    pub deadline: Option<f64>,
    /// Seconds of quiet output, while nothing reads, that count as idle (default 2).
    #[serde(default)]
    pub idle_window: Option<f64>,
}

/// Why a send returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    /// A process of the foreground group is blocked reading the terminal (from `/proc`).
    StdinRead,
    /// Output was quiet for the idle window and nothing reads the terminal.
    InferredIdle,
    /// The deadline passed; the program goes on.
    Timeout,
    /// The terminal's program exited.
    SessionExit,
}

/// The answer of `send`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SendResponse {
    pub session_id: String,
    pub wait_reason: WaitReason,
    /// The terminal waits for input with echo off (a password prompt).
    pub is_password_prompt: bool,
    /// What the terminal printed since the send began, as clean text.
    pub output: String,
    /// Output was dropped from the front of `output` (it keeps the newest text).
    pub truncated: bool,
    /// The foreground program's name.
    pub foreground_program: Option<String>,
    pub state: TerminalState,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
}

/// `POST …/signal`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalParams {
    /// INT, TERM, KILL, HUP, QUIT, TSTP, CONT, WINCH, USR1 or USR2 (a `SIG` prefix is fine).
    pub signal: String,
}

/// The answer of `signal`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SignalResponse {
    pub session_id: String,
    pub signal: String,
    /// The foreground program that got it (its whole process group did).
    pub program: Option<String>,
    /// Whether the foreground group was the shell itself (no command was running).
    pub is_shell: bool,
}

/// `GET …/observe`: a snapshot (no cursor) or what changed since a cursor.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ObserveResponse {
    Snapshot {
        session_id: String,
        snapshot: Snapshot,
        /// Pass it back to get what changes next.
        cursor: String,
    },
    Delta {
        session_id: String,
        /// What the terminal printed since the cursor, as clean text (the newest kept).
        output: String,
        truncated: bool,
        state: TerminalState,
        cursor: String,
    },
}

/// `GET …/snapshot`: the terminal as a person would see it now.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Snapshot {
    pub screen: Vec<String>,
    pub cols: u16,
    pub rows: u16,
    pub cursor_row: u16,
    pub cursor_col: u16,
    pub is_alternate_screen: bool,
    pub title: Option<String>,
    pub state: TerminalState,
    pub foreground_program: Option<String>,
}

/// `GET …/scrollback?offset=&lines=`: rendered lines, newest-relative.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScrollbackResponse {
    pub session_id: String,
    /// Oldest first; the last one is `offset` lines above the newest line.
    pub lines: Vec<String>,
    pub offset: usize,
    /// Lines held in all (scrollback and screen).
    pub total: usize,
    pub has_more: bool,
}

/// `POST …/jobs`: run a command without waiting (seed 003's `execute`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobParams {
    pub command: String,
    /// Seconds before ^C whatever happens.
    #[serde(default)]
    pub hard_timeout: Option<f64>,
}

/// A job's lifecycle (seed 003).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    Running,
    /// A cancel was asked for; the command has not ended yet.
    Cancelling,
    Cancelled,
    /// Ended with exit code 0.
    Succeeded,
    /// Ended with another exit code.
    Failed,
    /// Interrupted by its hard timeout.
    TimedOut,
    /// The terminal's program ended under it.
    Terminated,
}

/// One job as it stands.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobResponse {
    pub job_id: String,
    pub session_id: String,
    pub command: String,
    pub state: JobState,
    pub exit_code: Option<i32>,
    /// The output so far (the whole output once it ended), truncated like exec's.
    pub output: String,
}

/// `POST …/jobs/{job}/await`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AwaitParams {
    /// Seconds to wait at most (default 30); the job goes on after it.
    #[serde(default)]
    pub seconds: Option<f64>,
}
