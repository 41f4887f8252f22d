//! REST payloads of the v2 API (`/v2/pty/sessions…`, docs/rest-v2.md) shared by the server,
//! the client and the tests; v1 reuses a few of them under its own field names. Requests are
//! `*Params`, answers `*Response` or plain records; every answer travels inside the
//! [`Envelope`] (docs/compatibility.md#envelope).
//!
//! Every field is snake_case on the wire. Seconds are JSON numbers (fractions allowed) between
//! 0 and 86,400; times of day are Unix seconds; `cols` and `rows` count character cells; an
//! `Option` field is `null` (or may be left out of a request) when it has no value.

use serde::{Deserialize, Serialize};

use crate::event::Seq;

/// `{success, message, data}`: the envelope of every successful answer.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Envelope<T> {
    /// Always `true` here: a failure is an [`ErrorBody`](crate::error::ErrorBody) instead.
    /// It says the request was accepted, not that a command succeeded (see `data.status`).
    pub success: bool,
    /// A short sentence for people ("Command executed"); clients never match on it.
    pub message: String,
    /// The answer itself: the route's `*Response` or record.
    pub data: T,
}

impl<T> Envelope<T> {
    /// A successful answer carrying `data`.
    pub fn ok(message: impl Into<String>, data: T) -> Self {
        Self {
            success: true,
            message: message.into(),
            data,
        }
    }
}

/// A terminal's lifecycle state, as the `state` file, `meta.json` and every answer spell it
/// (docs/storage.md). It describes the terminal's program, not a command: see
/// [`CommandStatus`] for that.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TerminalState {
    /// The directory and `meta.json` exist; the holder has not started the program yet.
    Created,
    /// The program runs: input, exec and send are accepted.
    Running,
    /// The program ended (`exit_code` / `signal` say how); the history stays readable, and
    /// requests that need the program answer `SESSION_NOT_RUNNING`.
    Exited,
    /// The program could not be started.
    Error,
}

impl TerminalState {
    /// The wire spelling, e.g. `running`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Running => "running",
            Self::Exited => "exited",
            Self::Error => "error",
        }
    }
}

/// What hosts a terminal's PTY, processes and event log (docs/backends.md). The name is the
/// wire's and `meta.json`'s spelling.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BackendKind {
    /// A holder process per terminal on this machine, owning the PTY.
    #[default]
    Native,
    /// A tmux session on a socket ptyhub owns, followed by a holder in tmux's control mode: a
    /// person can `tmux -S <socket> attach -t <session>` beside the agent.
    Tmux,
    /// A native holder whose shell runs in a Debian root filesystem entered with bubblewrap
    /// (its own pid, ipc, uts and cgroup namespaces; `/workspace` and a persistent `/root`).
    Rootfs,
}

impl BackendKind {
    /// Every backend, in the order `/v2/backends` lists them.
    pub const ALL: [Self; 3] = [Self::Native, Self::Tmux, Self::Rootfs];

    /// The wire spelling, e.g. `native`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Tmux => "tmux",
            Self::Rootfs => "rootfs",
        }
    }

    /// The backend a wire name spells, if any.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == name)
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a tmux-hosted terminal lives, so a person can attach to it:
/// `tmux -S <socket> attach -t <session>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TmuxTarget {
    /// The tmux server's socket (in a 0700 directory ptyhub owns).
    pub socket: String,
    /// The tmux session's name (the terminal id, with `.` spelled `_` as tmux requires).
    pub session: String,
}

/// Whether a backend can host terminals now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BackendStatus {
    /// Terminals can be created on it.
    Ready,
    /// It cannot host terminals here; `reason` says why.
    Failed,
    /// It can host terminals once its root filesystem is installed
    /// (`POST /v2/backends/{type}/install`); `install` shows an install that runs.
    NeedsRootfs,
}

/// One entry of `GET /v2/backends`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BackendInfo {
    /// The backend's name, as `backend` in create takes it.
    #[serde(rename = "type")]
    pub kind: BackendKind,
    /// Whether it can host terminals now.
    pub status: BackendStatus,
    /// Why it cannot (with status `failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Whether an explicit create without `backend` uses it.
    #[serde(rename = "default")]
    pub is_default: bool,
    /// The version of the program behind it, when it has one (tmux's `-V`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The shell new terminals start by default (native only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    /// What it supports, by name (docs/backends.md#supports).
    pub supports: Vec<String>,
    /// The latest install of its root filesystem this server ran (rootfs only), while it runs
    /// and after it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<crate::rootfs::InstallProgress>,
}

/// `GET /v2/backends`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BackendsResponse {
    /// Every backend this server knows, `native` first.
    pub backends: Vec<BackendInfo>,
    /// What an explicit create without `backend` uses now.
    pub default: BackendKind,
    /// Whether every new terminal gets a cgroup of its own, and where its limits are enforced.
    #[serde(default)]
    pub cgroups: CgroupsInfo,
}

/// The lifecycle of one command, as exec, wait, screen and the server-sent `result` event
/// report it (docs/compatibility.md#statuses). Only `completed` comes with an `exit_code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CommandStatus {
    /// The command has not ended: the caller's wait ended first, or it was `async`. It goes
    /// on; `wait` picks it up later.
    Running,
    /// The shell reported the command's end; `exit_code` is its exit code.
    Completed,
    /// No output for `no_change_timeout` seconds, so ptyhub pressed ^C; `exit_code` is null.
    NoChangeTimeout,
    /// `hard_timeout` seconds passed, so ptyhub pressed ^C; `exit_code` is null.
    HardTimeout,
    /// The terminal's program ended while the command ran (also v1 `kill`'s answer).
    Terminated,
}

impl CommandStatus {
    /// Whether the command has not ended yet.
    pub fn is_running(self) -> bool {
        self == Self::Running
    }
}

/// `POST /v2/pty/sessions`: open a terminal, or find the live one with the same id. Every
/// field may be left out.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSessionParams {
    /// Client-chosen id (`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`; `session_id` accepted): a
    /// live terminal with this id is returned as it is, a closed one is reopened as its next
    /// instance. Absent: `terminal-<agent>-<session>` when `agent` is given, else a minted
    /// `t-<12 letters and digits>`.
    #[serde(default, alias = "session_id")]
    pub id: Option<String>,
    /// An existing absolute working directory (default: the server's `$HOME`, else `/`).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Width in character cells, 1 to 1000. With neither `cols` nor `rows` the terminal is
    /// 120 × 40; a missing one of the two takes its part of that default.
    #[serde(default)]
    pub cols: Option<u16>,
    /// Height in character cells, 1 to 1000 (see `cols`).
    #[serde(default)]
    pub rows: Option<u16>,
    /// Variables added to the shell's environment (over the server's own). A name is 1 to
    /// 1024 bytes without `=` or NUL; a value at most 128 KiB without NUL.
    #[serde(default)]
    pub env: Option<std::collections::BTreeMap<String, String>>,
    /// The shell to run (a name on `PATH` or an absolute path); without it the user's login
    /// shell, else `bash`, else `sh`.
    #[serde(default)]
    pub shell: Option<String>,
    /// The agent scope the terminal belongs to (default `default`; 1 to 64 of
    /// `[A-Za-z0-9_.-]`). Given without an `id`, the id becomes `terminal-<agent>-<session>`.
    #[serde(default)]
    pub agent: Option<String>,
    /// The agent's session scope (default `default`), not a terminal id
    /// (docs/terminology.md#session).
    #[serde(default)]
    pub session: Option<String>,
    /// What hosts it: `native` or `tmux` (docs/backends.md). Absent: the server's default
    /// (`PTYHUB_BACKEND`). An unknown name is `INVALID_INPUT`; a known one that cannot host
    /// terminals here is `BACKEND_UNAVAILABLE`; neither creates anything.
    #[serde(default)]
    pub backend: Option<String>,
    /// The OS account its shell runs as (docs/security.md#accounts): only the server's own
    /// token or local socket may choose one, on a server that runs as root; an owner whose
    /// configured token names an account always gets that one. Re-creating a live terminal's
    /// id with another account is `INVALID_INPUT`.
    #[serde(default)]
    pub user: Option<String>,
    /// The workspace a `rootfs` terminal works in (`/workspace` inside): an id of
    /// `^[a-z0-9][a-z0-9_-]{0,63}$`, created on first use; absent, the terminal gets a
    /// workspace of its own. Given on another backend: `INVALID_INPUT`.
    #[serde(default)]
    pub workspace: Option<String>,
    /// A `rootfs` terminal's network: `shared` (the host's, the default) or `none` (only a
    /// loopback interface). Given on another backend: `INVALID_INPUT`.
    #[serde(default)]
    pub network: Option<String>,
    /// Limits of its cgroup (docs/backends.md#cgroups); a field left out takes the server's
    /// default (`pids_max`, `memory_max` in the config). A limit of 0 or beyond the bounds
    /// is `INVALID_INPUT`; a limit on a server that cannot create cgroups too.
    #[serde(default)]
    pub limits: Option<CgroupLimits>,
    /// `persistent` (the default) or `expiring`: an expiring terminal is reclaimed first under
    /// the live-terminal limit and its files are removed when it closes.
    #[serde(default)]
    pub retention: Option<Retention>,
}

/// How long a terminal's files outlive it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Retention {
    /// Its history stays on disk after it closes (a closed terminal can be read and reopened).
    #[default]
    Persistent,
    /// Reclaimed before any persistent terminal when the live limit is reached; its directory
    /// (history included) is removed when it closes.
    Expiring,
}

impl Retention {
    /// Whether this is the default, `persistent` (left out of `meta.json`).
    pub fn is_persistent(&self) -> bool {
        *self == Self::Persistent
    }
}

/// The limits of a terminal's cgroup (docs/backends.md#cgroups).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CgroupLimits {
    /// Processes (and threads) at most, 1 to 4194304 (`pids.max`); absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_max: Option<u64>,
    /// Bytes of memory at most, 1 MiB to 1 PiB (`memory.max`, v1 `memory.limit_in_bytes`):
    /// beyond it the kernel's out-of-memory killer ends a process of the terminal; absent: no
    /// limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max_bytes: Option<u64>,
}

/// A terminal's cgroup as its info shows it (docs/backends.md#cgroups).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CgroupInfo {
    /// The cgroup v2 directory its processes are in (membership, counting, kill).
    pub path: String,
    /// The cgroup v1 directories its processes are also in, where its limits live on a host
    /// whose v2 tree lacks those controllers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub v1_paths: Vec<String>,
    /// Its limits.
    pub limits: CgroupLimits,
    /// Processes in it now (null once it is removed).
    pub processes: Option<u64>,
    /// How many processes were still running when it was closed and had to be killed (null
    /// until then).
    pub killed: Option<u64>,
    /// How many processes the out-of-memory killer ended in it.
    pub oom_kills: u64,
}

/// Whether the server puts each terminal in a cgroup of its own (`GET /v2/backends`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CgroupsInfo {
    /// `ready`, or `failed` with `reason`.
    pub status: BackendStatus,
    /// Why terminals get no cgroup here (not root and no delegated cgroup v2 subtree, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The directory (per server state dir) that holds the terminals' cgroups in the v2 tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Where each limit is enforced: `v2`, `v1`, or absent when it cannot be (with the reason
    /// in `limits_reason`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<String>,
    /// Where the memory limit is enforced: `v2`, `v1`, or absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// Why a limit cannot be enforced, when one cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits_reason: Option<String>,
    /// The limits a create that gives none gets (the config's `pids_max`, `memory_max`).
    pub default_limits: CgroupLimits,
}

impl Default for CgroupsInfo {
    /// What a client reads from a server that predates cgroups: none.
    fn default() -> Self {
        Self {
            status: BackendStatus::Failed,
            reason: Some("this server does not put terminals in cgroups".to_owned()),
            path: None,
            pids: None,
            memory: None,
            limits_reason: None,
            default_limits: CgroupLimits::default(),
        }
    }
}

/// One terminal as create, list and status show it (`meta.json` plus what its actor knows).
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TerminalInfo {
    /// The terminal's id (the wire's word for it, docs/terminology.md#session): the `{id}` of
    /// every `/v2/pty/sessions/{id}` route.
    pub session_id: String,
    /// The agent scope it belongs to.
    pub agent: String,
    /// The agent's session scope it belongs to (not the terminal id).
    pub session: String,
    /// The principal it belongs to: the server user's uid for the server's own token and the
    /// local socket, else the `owner` of the config file's token.
    pub owner: String,
    /// The program's lifecycle state.
    pub state: TerminalState,
    /// The shell's working directory, followed while it runs (a `cd` moves it).
    pub working_dir: String,
    /// The PTY's width in character cells.
    pub cols: u16,
    /// The PTY's height in character cells.
    pub rows: u16,
    /// The shell integration in use: `bash`, `zsh` or `sh` (any other shell is driven as
    /// `sh`).
    pub shell: String,
    /// Unix seconds when the terminal was first created (kept when it is reopened).
    pub created_at: u64,
    /// Unix seconds of the last output or input (for a closed terminal, when it ended).
    pub last_activity: u64,
    /// The command running now, as the shell received it; null between commands.
    pub running_command: Option<String>,
    /// The program's exit code once it has exited normally; null while it runs.
    pub exit_code: Option<i32>,
    /// The number of the signal that ended the program; null otherwise.
    pub signal: Option<i32>,
    /// Which start of the program this is, from 1; a closed terminal reopened with its id
    /// gets the next one and its log continues (docs/terminology.md#instance).
    pub instance: u32,
    /// The `seq` of the newest event of its log: pass it as `since_seq` or `after_seq` to
    /// read only what comes after.
    pub last_seq: Seq,
    /// A client closed it: it is off the live list (shown with `include_closed=true`); its
    /// history stays readable.
    pub closed: bool,
    /// What hosts it.
    pub backend: BackendKind,
    /// Where a `tmux` terminal can be attached to by a person; absent on other backends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmux: Option<TmuxTarget>,
    /// Why the terminal's event log refuses appends (its disk is full, say): the terminal
    /// runs, its output is held back (nothing is lost) and the log takes it as soon as it
    /// can; absent while the log takes every append (docs/storage.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_error: Option<String>,
    /// The holder protocol version its host speaks with this server (docs/storage.md);
    /// absent while no host is connected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_protocol: Option<u32>,
    /// Why this server does not follow a host that still runs (`state` is then `error`): its
    /// holder speaks no protocol version this server does. The terminal's processes keep
    /// running and a server that speaks its version adopts it (docs/operations.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_error: Option<String>,
    /// What a `rootfs` terminal runs in (its workspace, network); absent on other backends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<crate::rootfs::GuestInfo>,
    /// `persistent` or `expiring` (see create's `retention`).
    #[serde(default)]
    pub retention: Retention,
    /// Its cgroup, with the live process count and what its close killed; absent when the
    /// server put it in none (docs/backends.md#cgroups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<CgroupInfo>,
    /// Who holds the keyboard (the input lease, docs/rest-v2.md#the-input-lease); absent
    /// while nobody does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseInfo>,
}

/// The input lease: who holds a terminal's keyboard. While someone does, input from every
/// other writer is refused with `INPUT_LEASED` (or waits, with `on_lease: "wait"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LeaseInfo {
    /// The holder's name, `<owner>/<token name>`.
    pub by: String,
    /// How the holder took it: `ws` (a live connection; the lease ends when it closes) or
    /// `rest` / `mcp` / `cli` (until released, taken over, or `expires_at`).
    pub via: crate::event::InputVia,
    /// The live connection that holds it (its id in `presence` frames); null for a lease
    /// taken over REST.
    pub connection: Option<u64>,
    /// Unix seconds when it was taken.
    pub since: f64,
    /// Unix seconds when a lease taken over REST ends by itself; null for a connection's.
    pub expires_at: Option<f64>,
}

/// `POST …/lease`: take the keyboard.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaseParams {
    /// Take it even when someone else holds it (they are told); without it, a held lease
    /// answers `INPUT_LEASED`.
    #[serde(default)]
    pub force: bool,
    /// Seconds the lease lasts unless released first (default 300, at most 3600).
    #[serde(default)]
    pub ttl_secs: Option<f64>,
}

/// The answer of `GET`, `POST` and `DELETE …/lease`: who holds the keyboard now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LeaseResponse {
    /// The terminal's id.
    pub session_id: String,
    /// Who holds the keyboard; null while nobody does.
    pub lease: Option<LeaseInfo>,
}

/// What input does while someone else holds the terminal's keyboard (the input lease).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnLease {
    /// Refuse it at once with `INPUT_LEASED`, naming the holder.
    #[default]
    Refuse,
    /// Wait for the lease to end, at most as long as the call may take (its `deadline` or
    /// `timeout`; 30 seconds for `input`), then type; still held then: `INPUT_LEASED`.
    Wait,
}

/// `POST …/exec` (also the body v1 exec is translated to): run one command in the
/// terminal's shell (docs/compatibility.md#exec).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExecParams {
    /// The command line(s) to run, 1 byte to 4 MiB and not only blanks; multi-line scripts
    /// and heredocs are fine.
    pub command: String,
    /// Return at once with status `running` (`async` on the wire, `async_mode` accepted);
    /// such a command has no `no_change_timeout`.
    #[serde(
        default,
        rename = "async",
        alias = "async_mode",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub is_async: bool,
    /// Seconds to wait for the result; the command goes on after it (status `running`).
    /// Absent: wait until the command ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<f64>,
    /// Seconds without output before ^C (absent: the terminal's default, else 120; only
    /// while a call waits) (docs/compatibility.md#timeouts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_change_timeout: Option<f64>,
    /// Seconds from submission before ^C whatever happens (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_timeout: Option<f64>,
    /// Keep the first and last 15,000 characters of a longer output (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncate: Option<bool>,
    /// An existing absolute directory to run the command in: the shell gets
    /// `cd -- '<dir>' && {`, the command and `}` as one submission, so a failing `cd` runs
    /// nothing; absent: where the shell already is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_dir: Option<String>,
    /// Carry the console history (`console`) in the answer (default false on v2 and MCP; v1
    /// always carries it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_console: Option<bool>,
    /// Answer as soon as the command waits for input (status `running`, `wait_reason:
    /// "stdin_read"` and the output so far) rather than when it ends or `timeout` passes.
    /// Default true on v2 and MCP; v1 waits as it always did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_on_input: Option<bool>,
    /// While someone else holds the keyboard: `refuse` (default, `INPUT_LEASED`) or `wait`
    /// for it within `timeout` (docs/rest-v2.md#the-input-lease).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_lease: Option<OnLease>,
    /// Which part of the output the answer carries (docs/compatibility.md#output-windows);
    /// given, it replaces the head-and-tail truncation.
    #[serde(flatten)]
    pub window: WindowParams,
}

/// Which part of a command's output an answer carries (docs/compatibility.md#output-windows).
/// Every field may be left out; sizes are counts of lines or characters, and a negative one
/// (or a zero where it means nothing) is refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WindowParams {
    /// The first N lines (of what `offset` and `grep` leave); not with `tail`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<i64>,
    /// The last N lines (of what `offset` and `grep` leave); not with `head`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<i64>,
    /// The line (0-based) to start from: a window's `next_offset` continues after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<i64>,
    /// At most this many characters of text (whole lines; one longer line is cut).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_chars: Option<i64>,
    /// At most this many tokens, estimated as characters / 4 rounded up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    /// Only lines matching this regular expression (Rust `regex` syntax), with `context`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grep: Option<String>,
    /// Lines before and after each `grep` match (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<i64>,
}

impl WindowParams {
    /// Whether no field was given.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Lines and characters an output window left out (each line's newline counts as one
/// character).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OmittedSpan {
    /// Whole or cut lines left out.
    pub lines: u64,
    /// Characters left out.
    pub chars: u64,
}

/// What was left out of an output window, relative to the lines it returned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Omitted {
    /// Before the first line returned.
    pub before: OmittedSpan,
    /// Between the first and the last line returned (lines `grep` did not select, and the
    /// cut part of a line longer than the character limit).
    pub between: OmittedSpan,
    /// After the last line returned.
    pub after: OmittedSpan,
}

/// Where an output window lies in the whole output (docs/compatibility.md#output-windows).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WindowInfo {
    /// Lines of the whole output.
    pub total_lines: u64,
    /// Characters of the whole output.
    pub total_chars: u64,
    /// The first line returned (0-based); with nothing returned, where the window started.
    pub first_line: u64,
    /// Lines returned (`grep`'s `--` separators not counted).
    pub lines: u64,
    /// The returned text's tokens, estimated as characters / 4 rounded up.
    pub estimated_tokens: u64,
    /// Lines `grep` matched in the part it searched (null without `grep`).
    pub matches: Option<u64>,
    /// What was left out.
    pub omitted: Omitted,
    /// Pass as `offset` (with the same other parameters) for the next window; null when
    /// nothing selected is left after this one.
    pub next_offset: Option<u64>,
}

/// Where a command of the timeline came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CommandOrigin {
    /// ptyhub submitted it (exec, v1 exec, jobs).
    Exec,
    /// Someone typed it at the prompt; the shell integration marked it.
    Typed,
}

/// One command of a terminal's timeline (docs/compatibility.md#command-timeline).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CommandEntry {
    /// Its number in the terminal, from 1 (the same after a server restart).
    pub id: u64,
    /// The command's text: as the caller sent it (exec), or as the line was shown when the
    /// shell accepted it, without the prompt (typed).
    pub command: String,
    /// Whether ptyhub submitted it or someone typed it.
    pub origin: CommandOrigin,
    /// The shell's working directory when it was submitted (exec) or accepted (typed), when
    /// known.
    pub cwd: Option<String>,
    /// The `seq` of the event where it began: the shell's start mark (a line the shell never
    /// ran: its submission).
    pub start_seq: Seq,
    /// The `seq` of the event where it ended; null while it runs.
    pub end_seq: Option<Seq>,
    /// Unix seconds (millisecond precision) of `start_seq`.
    pub started_at: f64,
    /// Seconds from `start_seq` to `end_seq`; null while it runs.
    pub duration: Option<f64>,
    /// The exit code when `status` is `completed`; null otherwise.
    pub exit_code: Option<i32>,
    /// Where the command is in its lifecycle.
    pub status: CommandStatus,
    /// Bytes the command printed, as the PTY gave them (escape codes included).
    pub output_bytes: u64,
}

/// `GET …/commands[?after=N&limit=M]`: a page of the timeline, oldest first.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CommandsResponse {
    /// The terminal's id.
    pub session_id: String,
    /// Commands with an id greater than `after`, oldest first.
    pub commands: Vec<CommandEntry>,
    /// Pass as `after` for the next page; null when this page is empty.
    pub next_after: Option<u64>,
    /// Whether later commands than this page's exist.
    pub has_more: bool,
}

/// `GET …/commands/{n}`: one command and a window of its output, read from the log.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CommandOutputResponse {
    /// The terminal's id.
    pub session_id: String,
    /// The command.
    #[serde(flatten)]
    pub command: CommandEntry,
    /// The window of its clean output (so far, while it runs).
    pub output: String,
    /// Where the window lies in the whole output.
    pub window: WindowInfo,
}

/// One finished command in the console history (docs/compatibility.md#console).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ConsoleRecord {
    /// The prompt line as shown before the command, without the echo of what was typed.
    pub ps1: String,
    /// The command as ptyhub submitted it; empty for a line a person typed that ptyhub did
    /// not submit.
    pub command: String,
    /// The command's clean output, truncated to 30,000 characters as exec's is.
    pub output: String,
}

/// The answer of exec and wait (and the server-sent `result` event): one command as it
/// stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CommandResult {
    /// The terminal's id.
    pub session_id: String,
    /// The command as the caller sent it (exec), or the current or last command's text
    /// (wait); null when no command ran yet.
    pub command: Option<String>,
    /// Where the command is in its lifecycle; `completed` when no command ran yet.
    pub status: CommandStatus,
    /// The command's own output as clean text (docs/compatibility.md#exec), truncated unless
    /// the exec said `truncate: false`; null while the command is running.
    pub output: Option<String>,
    /// The terminal's newest finished commands, oldest first (at most 100): always on v1, on
    /// v2 and MCP only when the exec asked (`include_console`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub console: Option<Vec<ConsoleRecord>>,
    /// The exit code when `status` is `completed`; null otherwise.
    pub exit_code: Option<i32>,
    /// The command's id in the terminal's timeline (v2 and MCP exec; absent on v1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_id: Option<u64>,
    /// Where `output` lies in the whole output, when the exec asked for a window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowInfo>,
    /// `stdin_read` when the exec answered because its command waits for input (status
    /// `running`; `output` is the output so far, ending with the question); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_reason: Option<WaitReason>,
    /// While the command runs (v2 and MCP): what holds the terminal, as `send` reports it;
    /// absent once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<RunningState>,
}

/// What holds a terminal while a command runs (an exec's answer before the command ended).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunningState {
    /// The program reading the terminal, else the foreground group's leader.
    pub foreground_program: Option<String>,
    /// What it waits on when it is blocked.
    pub waits_on: Option<WaitsOn>,
    /// A full-screen program holds the alternate screen.
    pub is_alternate_screen: bool,
    /// The terminal's input mode.
    pub input_mode: Option<InputMode>,
    /// The terminal echoes what is typed (off for a password prompt).
    pub is_echo: Option<bool>,
    /// How to leave a known pager, editor, monitor or REPL.
    pub hint: Option<String>,
}

/// `GET …/screen`: the emulated screen and the current (or last) command.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScreenResponse {
    /// The terminal's id.
    pub session_id: String,
    /// The running command (null between commands).
    pub command: Option<String>,
    /// The current (or last) command's status; `completed` when none ran yet.
    pub status: CommandStatus,
    /// The current (or last) command's output so far, untruncated; empty when none ran.
    pub output: String,
    /// The current (or last) command's exit code once it completed; null otherwise.
    pub exit_code: Option<i32>,
    /// The visible rows of the screen, top first, as text.
    pub screen: Vec<String>,
    /// The screen's width in character cells.
    pub cols: u16,
    /// The screen's height in character cells.
    pub rows: u16,
    /// The cursor's row, from 0 at the top.
    pub cursor_row: u16,
    /// The cursor's column, from 0 at the left.
    pub cursor_col: u16,
    /// A full-screen program (an editor, a pager) switched to the alternate screen.
    pub is_alternate_screen: bool,
    /// The program's lifecycle state.
    pub state: TerminalState,
    /// The last window title a program set (OSC 0 or 2); null when none did.
    #[serde(default)]
    pub title: Option<String>,
    /// The `seq` of the newest event this screen reflects.
    #[serde(default)]
    pub seq: Seq,
}

/// `POST …/input`: type text into the terminal as it is, without waiting for anything.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InputParams {
    /// The text to type, at most 4 MiB (escape sequences and control characters included).
    pub input: String,
    /// Press Enter (`\r`) after the text.
    #[serde(default)]
    pub press_enter: bool,
    /// While someone else holds the keyboard: `refuse` (default, `INPUT_LEASED`) or `wait`
    /// for it, 30 seconds at most (docs/rest-v2.md#the-input-lease).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_lease: Option<OnLease>,
}

/// What became of typed bytes, as the terminal's host reports it (each figure null from a
/// host that does not say). Input is taken whole or refused whole (`BUSY` when the program
/// left too much unread): never a silent short write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InputReceipt {
    /// Bytes the PTY took at once.
    pub written: Option<u64>,
    /// Bytes waiting in the host for the PTY to take them: the terminal's input queue is
    /// full because nothing reads it (they are written as it drains).
    pub pending: Option<u64>,
    /// Bytes in the terminal's input queue that no program has read yet (complete lines in
    /// canonical mode).
    pub unread: Option<u64>,
    /// Bytes typed earlier and never read that were discarded (`on_timeout: "flush"`).
    pub discarded: Option<u64>,
}

/// The answer of `input`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InputResponse {
    /// The terminal's id.
    pub session_id: String,
    /// How many bytes were typed.
    pub bytes: usize,
    /// What the terminal did with them.
    #[serde(flatten)]
    pub receipt: InputReceipt,
}

/// `POST …/wait`: wait for the current command to end; the answer is shaped as exec's.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WaitParams {
    /// Seconds to wait at most (default 30, at most 3600); the command goes on after it.
    #[serde(default)]
    pub seconds: Option<f64>,
    /// Keep the first and last 15,000 characters of a longer output (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncate: Option<bool>,
    /// Carry the console history (`console`) in the answer (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_console: Option<bool>,
    /// Which part of the output the answer carries (docs/compatibility.md#output-windows);
    /// given, it replaces the head-and-tail truncation.
    #[serde(flatten)]
    pub window: WindowParams,
}

/// `POST …/resize`: change the PTY's size (logged as a `pty.resize` event).
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResizeParams {
    /// The new width in character cells, 1 to 1000.
    pub cols: u16,
    /// The new height in character cells, 1 to 1000.
    pub rows: u16,
}

/// `GET …/events?after_seq=&limit=`: a page of the raw event log (closed terminals
/// included). An `after_seq` older than the oldest kept event starts at that event.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EventsResponse {
    /// The terminal's id.
    pub session_id: String,
    /// The lines of `events.jsonl` after `after_seq`, as JSON objects in `seq` order
    /// (docs/storage.md): at most `limit` (default and most 1000) and about 4 MiB.
    pub events: Vec<serde_json::Value>,
    /// The `seq` to pass as `after_seq` next: the last event of this page (`after_seq` when
    /// the page is empty).
    pub next_seq: Seq,
    /// The `seq` of the newest event of the log.
    pub last_seq: Seq,
    /// More events follow this page: ask again from `next_seq`.
    pub has_more: bool,
}

/// `DELETE …/{id}`: the terminal was closed (docs/compatibility.md#closing).
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CloseResponse {
    /// The terminal's id.
    pub session_id: String,
    /// The program's exit code, when it exited normally.
    pub exit_code: Option<i32>,
    /// The number of the signal that ended the program (closing sends SIGHUP, then SIGKILL).
    pub signal: Option<i32>,
}

/// `POST …/send`: type text, then wait until the terminal needs its caller
/// (docs/compatibility.md#send).
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendParams {
    /// Text to type, at most 4 MiB (escape sequences and control characters included);
    /// empty just waits.
    #[serde(default)]
    pub text: String,
    /// Press Enter (`\r`) after the text.
    #[serde(default)]
    pub submit: bool,
    /// Seconds to wait at most (default 30, at most 600).
    #[serde(default)]
    pub deadline: Option<f64>,
    /// Seconds of quiet output, while nothing reads, that count as idle (default 2).
    #[serde(default)]
    pub idle_window: Option<f64>,
    /// What becomes of typed input still unread when the deadline passes: `keep` (default:
    /// the program may read it later) or `flush` (discarded, so it can never run later).
    #[serde(default)]
    pub on_timeout: Option<OnTimeout>,
    /// While someone else holds the keyboard: `refuse` (default, `INPUT_LEASED`) or `wait`
    /// for it within `deadline` (docs/rest-v2.md#the-input-lease).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_lease: Option<OnLease>,
    /// Which part of the output the answer carries, as exec's (docs/compatibility.md#output-windows);
    /// without one, its newest 16,000 characters.
    #[serde(flatten)]
    pub window: WindowParams,
}

/// What a `send` does with its unread input when its deadline passes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnTimeout {
    /// Leave it queued: the program may read it later.
    #[default]
    Keep,
    /// Discard it.
    Flush,
}

/// Why a send returned (docs/compatibility.md#wait-reasons): the first reason that held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    /// Output settled and a process of the foreground group is blocked reading the terminal,
    /// as the kernel reports it: the program waits for input.
    StdinRead,
    /// Output was quiet for the idle window and nothing reads the terminal.
    InferredIdle,
    /// The deadline passed; the program goes on.
    Timeout,
    /// The terminal's program (the shell) exited; `exit_code` and `signal` say how.
    SessionExit,
}

/// What a blocked process of the foreground group waits on, as `/proc` tells it
/// (docs/compatibility.md#wait-reasons).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitsOn {
    /// The terminal itself (fd 0 or another descriptor open on it, such as `/dev/tty`):
    /// the program waits for input.
    Terminal,
    /// A network or unix socket (a hung download, a server that does not answer).
    Socket,
    /// A pipe (the other end of a pipeline, a subprocess's output).
    Pipe,
    /// A timer: `sleep`, a timeout with nothing else to wait for.
    Timer,
    /// A child process (the shell waits for the command it runs).
    Child,
    /// A regular file or another device.
    File,
}

/// How the terminal's line discipline hands typed input to the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InputMode {
    /// Line by line (ICANON): shells' `read`, `cat`, password prompts; Enter sends the line.
    Canonical,
    /// Key by key: line editors, REPLs, pagers and full-screen programs.
    Raw,
}

/// The answer of `send`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SendResponse {
    /// The terminal's id.
    pub session_id: String,
    /// Why the send returned; what to do next depends on it (docs/agent-guide.md).
    pub wait_reason: WaitReason,
    /// With `stdin_read` only: the terminal waits for a line with echo off (a password
    /// prompt such as `sudo`'s or `read -s`); false otherwise.
    pub is_password_prompt: bool,
    /// What the terminal printed since the send began, as clean text (its newest 16,000
    /// characters).
    pub output: String,
    /// Output was dropped from the front of `output` (it keeps the newest text).
    pub truncated: bool,
    /// An `observe` cursor just after the output this answer covers.
    pub cursor: String,
    /// Where `output` lies in all the output it was cut from, when the send asked for a window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowInfo>,
    /// The foreground program: the one reading the terminal when one does (`less` under
    /// `git log`), else the foreground group's leader (the shell at its prompt); null when the
    /// program exited or the backend cannot tell.
    pub foreground_program: Option<String>,
    /// What the foreground program waits on when it is blocked (`terminal` with
    /// `stdin_read`; a `socket` for a hung download); null while it runs or when unknown.
    pub waits_on: Option<WaitsOn>,
    /// Typed bytes no program has read yet (0 once the input was consumed); null when the
    /// backend cannot tell.
    pub input_queued: Option<u32>,
    /// What became of the text this send typed (null when it typed nothing); with
    /// `on_timeout: "flush"` and a timeout, `discarded` counts what was thrown away.
    pub input: Option<InputReceipt>,
    /// A full-screen program (an editor, a pager) holds the terminal's alternate screen.
    pub is_alternate_screen: bool,
    /// A program draws the screen (it holds the alternate screen, or moves the cursor to
    /// absolute positions in raw mode, as `top` does): `output` is then its rendered screen,
    /// trailing empty rows left out, rather than the flattened text of what it drew.
    pub is_full_screen: bool,
    /// The terminal's input mode; null when the backend cannot tell.
    pub input_mode: Option<InputMode>,
    /// The terminal echoes what is typed; null when the backend cannot tell.
    pub is_echo: Option<bool>,
    /// How to leave the foreground program when it is a known pager, editor, monitor or REPL
    /// (`a pager: send "q" to leave it`); null otherwise.
    pub hint: Option<String>,
    /// The shell is back at its prompt: no command runs (a `read` of the shell itself, or a
    /// script run by the shell, is a command).
    pub is_at_prompt: bool,
    /// The command (its id in the terminal's command list) that ended during this send,
    /// with `command_exit_code`; null when none did.
    pub command_id: Option<u64>,
    /// The exit code of the command that ended during this send (the shell is back at its
    /// prompt); null when none ended or its code is unknown.
    pub command_exit_code: Option<i32>,
    /// The program's lifecycle state when the send returned.
    pub state: TerminalState,
    /// The program's exit code once it has exited normally; null otherwise.
    pub exit_code: Option<i32>,
    /// The number of the signal that ended the program; null otherwise.
    pub signal: Option<i32>,
}

/// `POST …/signal`: signal the terminal's foreground process group
/// (docs/compatibility.md#signals).
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalParams {
    /// INT, TERM, KILL, HUP, QUIT, TSTP, CONT, WINCH, USR1 or USR2 (a `SIG` prefix is fine).
    pub signal: String,
}

/// The answer of `signal`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SignalResponse {
    /// The terminal's id.
    pub session_id: String,
    /// The signal delivered, without its `SIG` prefix (`INT`).
    pub signal: String,
    /// The foreground program that got it (its whole process group did); null when its name
    /// could not be read.
    pub program: Option<String>,
    /// Whether the foreground group was the shell itself (no command was running).
    pub is_shell: bool,
}

/// `GET …/observe`: a snapshot (no cursor) or what changed since a cursor.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ObserveResponse {
    /// `"kind": "snapshot"`, the answer without a cursor: the terminal as it looks now.
    Snapshot {
        /// The terminal's id.
        session_id: String,
        /// The screen, size, cursor, title, state and foreground program.
        snapshot: Snapshot,
        /// Pass it back to get what changes next (opaque, docs/terminology.md#cursor).
        cursor: String,
    },
    /// `"kind": "delta"`, the answer with a cursor: what happened since it.
    Delta {
        /// The terminal's id.
        session_id: String,
        /// What the terminal printed since the cursor, as clean text (its newest 16,000
        /// characters).
        output: String,
        /// Older text was dropped from the front of `output`.
        truncated: bool,
        /// The program's lifecycle state now.
        state: TerminalState,
        /// Pass it back to get what changes next.
        cursor: String,
    },
}

/// `GET …/snapshot`: the terminal as a person would see it now.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Snapshot {
    /// The visible rows of the screen, top first, as text.
    pub screen: Vec<String>,
    /// The screen's width in character cells.
    pub cols: u16,
    /// The screen's height in character cells.
    pub rows: u16,
    /// The cursor's row, from 0 at the top.
    pub cursor_row: u16,
    /// The cursor's column, from 0 at the left.
    pub cursor_col: u16,
    /// A full-screen program (an editor, a pager) switched to the alternate screen.
    pub is_alternate_screen: bool,
    /// The last window title a program set; null when none did.
    pub title: Option<String>,
    /// The program's lifecycle state.
    pub state: TerminalState,
    /// The foreground program: the one reading the terminal when one does, else the foreground
    /// group's leader; null when there is none or the backend cannot tell.
    pub foreground_program: Option<String>,
    /// The terminal's input mode; null when the backend cannot tell.
    pub input_mode: Option<InputMode>,
    /// The terminal echoes what is typed; null when the backend cannot tell.
    pub is_echo: Option<bool>,
    /// How to leave the foreground program when it is a known pager, editor, monitor or REPL;
    /// null otherwise.
    pub hint: Option<String>,
}

/// `GET …/scrollback?offset=&lines=`: rendered lines, newest-relative.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScrollbackResponse {
    /// The terminal's id.
    pub session_id: String,
    /// At most `lines` (default 100, at most 1000) rendered lines, oldest first; the last one
    /// is `offset` lines above the newest line.
    pub lines: Vec<String>,
    /// The `offset` asked for: how many of the newest lines this page skips.
    pub offset: usize,
    /// Lines held in all (scrollback and screen; at most 10,000 of scrollback are kept).
    pub total: usize,
    /// Older lines exist: ask again with `offset` raised by the page's length.
    pub has_more: bool,
}

/// `POST …/jobs`: run a command without waiting (docs/compatibility.md#jobs).
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobParams {
    /// The command to run, 1 byte to 4 MiB and not only blanks.
    pub command: String,
    /// Seconds from submission before ^C whatever happens (absent: none; a job has no
    /// `no_change_timeout`).
    #[serde(default)]
    pub hard_timeout: Option<f64>,
}

/// A job's lifecycle, the [`CommandStatus`] of its command in the jobs API's spelling
/// (`RUNNING` …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// The command has not ended.
    Running,
    /// A cancel was asked for; the command has not ended yet.
    Cancelling,
    /// The command ended after a cancel was asked for.
    Cancelled,
    /// Ended with exit code 0.
    Succeeded,
    /// Ended with another exit code.
    Failed,
    /// Interrupted by its `hard_timeout` (or, for a command exec started, its
    /// `no_change_timeout`).
    TimedOut,
    /// The terminal's program ended under it.
    Terminated,
}

/// One job as it stands: the answer of every jobs route and of `stop`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobResponse {
    /// The job's id, `job-<n>`: pass it to `…/jobs/{job}`, `…/await` and `…/cancel`.
    pub job_id: String,
    /// The terminal's id.
    pub session_id: String,
    /// The command as the shell received it.
    pub command: String,
    /// Where the job is in its lifecycle.
    pub state: JobState,
    /// The command's exit code once it ended normally; null otherwise.
    pub exit_code: Option<i32>,
    /// The output so far (the whole output once it ended), truncated like exec's.
    pub output: String,
}

/// `POST …/jobs/{job}/await`: wait for a job to end; giving up never cancels it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AwaitParams {
    /// Seconds to wait at most (default 30); the job goes on after it.
    #[serde(default)]
    pub seconds: Option<f64>,
}
