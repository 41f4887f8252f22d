//! The holder: one small process per terminal that owns the live truth.
//!
//! It is the terminal program's parent and a subreaper, owns the PTY master, appends every
//! output byte to `events.jsonl` whether or not a server is connected, keeps `meta.json` and
//! its projections current, and serves the holder protocol ([`ptyhub_protocol::holder`]) on a
//! unix socket. It has no emulator, no HTTP and no async runtime: a single `poll` loop
//! (the private `event_loop` module) over the master, the socket, its clients and a `signalfd`.
//!
//! Flow at a glance:
//! 1. [`run`] reads a [`HolderSpec`] from stdin, opens the log, binds the socket, opens the PTY
//!    and starts the program, records `running`, and prints one ready line to stdout;
//! 2. the loop drains the master into the log, streams the log to subscribers, writes their
//!    input to the master, and reaps children;
//! 3. when the program exits (or a `terminate` request ends it), every remaining process of the
//!    terminal is ended, a `process.exit` event and the `exited` state are written, subscribers
//!    are flushed, and the holder exits.
//!
//! A terminal hosted in tmux has a holder too, with the same protocol, log and lifecycle, whose
//! loop (the private `control` module) follows a tmux session in control mode instead of
//! owning a PTY; [`HolderSpec::tmux`] says which loop runs.
//!
//! The server side of the link is the native backend ([`crate::backend::native`]) or the tmux
//! one ([`crate::backend::tmux`]), which start holders with [`launch`].

mod clients;
mod control;
mod control_client;
mod event_loop;
pub mod launch;
mod log_writer;
mod pty;
/// A PTY pair as a holder opens one, for tests elsewhere in the crate.
#[cfg(test)]
pub(crate) use pty::open_pair as open_pty_pair;
pub mod root_layer;

use std::io::{self, Write};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Everything a holder needs to start a terminal. Sent by the server on the holder's stdin
/// (never on its command line, which other processes can read).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HolderSpec {
    /// The terminal directory (its `meta.json` is [`Self::meta`] when the spec has one, else
    /// the one the directory holds).
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub cols: u16,
    pub rows: u16,
    /// Bytes of event log to keep (rotated segments beyond it are deleted). Absent from the
    /// spec of a server that predates rotation: the default then.
    #[serde(default = "default_event_log_keep")]
    pub event_log_keep: u64,
    /// Set for a terminal hosted in tmux: the holder then follows a tmux session in control
    /// mode instead of owning a PTY (the `control` module).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmux: Option<TmuxSpec>,
    /// The account the program runs as (the holder stays the server's); absent: the
    /// holder's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<crate::os_user::OsUser>,
    /// Set for a `rootfs` terminal: the program is bwrap, which runs the shell two levels
    /// below it (bwrap, its pid-namespace init, the shell). The holder then takes that shell
    /// as the terminal's program for everything but its exit (its pid, its working directory,
    /// the foreground facts); bwrap's exit status is the shell's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::state_dir::GuestMeta>,
    /// A protocol version the holder answers every `hello` with instead of the one it picks:
    /// set only by a server started with the hidden `PTYHUB_TEST_HOLDER_PROTOCOL` variable
    /// (`launch.rs`), so a test can meet a holder of a version no server speaks yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_claim: Option<u32>,
    /// What the program gets as descriptor [`crate::shell::RC_DESCRIPTOR`], a file in memory
    /// (its shell integration, which reads itself from there). The holder lets it go once the
    /// program runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rc_text: Option<String>,
    /// The terminal's record as its creation made it: the holder writes it, with its own
    /// facts, as the terminal's first `meta.json`, so a create writes that file once. Absent
    /// (a holder that takes over a running tmux session, or a spec of an older server): the
    /// holder reads the `meta.json` the directory has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Box<crate::state_dir::TerminalMeta>>,
}

/// The holder's own diagnostics in its terminal's directory (normally empty, or absent).
pub const HOLDER_LOG_FILE: &str = "holder.log";

impl HolderSpec {
    /// The record the terminal starts from: the spec's, else the directory's `meta.json`.
    pub fn record(&self) -> io::Result<crate::state_dir::TerminalMeta> {
        Self::record_or_file(self.meta.as_deref().cloned(), &self.dir)
    }

    /// [`Self::record`], taken out of the spec (a holder keeps its spec for its life).
    pub fn take_meta(&mut self) -> io::Result<crate::state_dir::TerminalMeta> {
        Self::record_or_file(self.meta.take().map(|meta| *meta), &self.dir)
    }

    fn record_or_file(
        record: Option<crate::state_dir::TerminalMeta>,
        dir: &std::path::Path,
    ) -> io::Result<crate::state_dir::TerminalMeta> {
        record.map_or_else(|| crate::state_dir::read_meta(dir), Ok)
    }

    /// Whether the holder makes its `holder.log` itself, at its first diagnostic, instead of
    /// being started with the file as its stderr: a native holder's only child, the program,
    /// has the terminal as its stderr, so the file would stay empty and cost the create an
    /// inode. tmux and bwrap write to the stderr they inherit, so their terminals have the
    /// file from the start.
    pub fn is_log_deferred(&self) -> bool {
        self.tmux.is_none() && self.sandbox.is_none()
    }
}

/// The tmux session a control-mode holder hosts its terminal in.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TmuxSpec {
    /// The tmux executable.
    pub program: PathBuf,
    /// The tmux server's socket (one server per terminal instance).
    pub socket: PathBuf,
    /// The session's name.
    pub session: String,
    /// Attach to a session that already runs (its holder died) instead of creating one.
    #[serde(default)]
    pub is_reattach: bool,
}

fn default_event_log_keep() -> u64 {
    crate::event_log::EVENT_LOG_KEEP_BYTES
}

/// The one line a holder prints on stdout once it serves (or failed to start).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReadyLine {
    pub ready: bool,
    pub holder_pid: u32,
    pub child_pid: Option<u32>,
    pub error: Option<String>,
}

/// The hidden `holder` entry point. Returns the process exit code.
pub fn run() -> i32 {
    // Out of the server's session and process group before anything else, so that its
    // terminal's signals (a Ctrl-C to a `ptyhub serve` in the foreground, a hangup) and its
    // end never reach this holder. The launcher does not do it for the holder: a `pre_exec`
    // would make every launch a fork of the whole server (`launch.rs`). Refused only to a
    // process group leader (a holder started by hand from a shell), which stays where it is.
    if let Err(error) = rustix::process::setsid() {
        let _ = writeln!(io::stderr(), "holder: stays in its session: {error}");
    }
    match start_from_stdin() {
        Ok(mut holder) => {
            report_ready(&ReadyLine {
                ready: true,
                holder_pid: std::process::id(),
                child_pid: Some(holder.child_pid()),
                error: None,
            });
            detach_stdio();
            // The record of `running` reaches the disk now, off the create's way.
            if let Err(error) = crate::state_dir::flush_meta(holder.dir()) {
                log_line!("holder: cannot flush meta.json: {error}");
            }
            holder.run();
            0
        }
        Err(error) => {
            report_ready(&ReadyLine {
                ready: false,
                holder_pid: std::process::id(),
                child_pid: None,
                error: Some(error),
            });
            1
        }
    }
}

/// Reads the spec and starts the terminal. Not inlined: parsing the spec and starting the
/// program take stack frames that are gone by the time the loop runs, so the idle holder
/// hands their pages back (`memory::release_unused_stack`) instead of keeping them below
/// the loop's frames.
#[inline(never)]
fn start_from_stdin() -> Result<HolderLoop, String> {
    let line = read_spec_line().map_err(|e| e.to_string())?;
    let spec = serde_json::from_slice::<HolderSpec>(&line).map_err(|e| e.to_string())?;
    if spec.is_log_deferred() {
        crate::deferred_log::defer_to(spec.dir.join(HOLDER_LOG_FILE));
    }
    HolderLoop::start(spec).map_err(|e| e.to_string())
}

/// The holder's loop: over a PTY it owns, or over a tmux control-mode client.
enum HolderLoop {
    Pty(Box<event_loop::Holder>),
    Tmux(Box<control::ControlHolder>),
}

impl HolderLoop {
    fn start(spec: HolderSpec) -> io::Result<Self> {
        if spec.tmux.is_some() {
            control::ControlHolder::start(spec).map(|holder| Self::Tmux(Box::new(holder)))
        } else {
            event_loop::Holder::start(spec).map(|holder| Self::Pty(Box::new(holder)))
        }
    }

    fn child_pid(&self) -> u32 {
        match self {
            Self::Pty(holder) => holder.child_pid(),
            Self::Tmux(holder) => holder.child_pid(),
        }
    }

    /// The terminal's directory.
    fn dir(&self) -> &std::path::Path {
        match self {
            Self::Pty(holder) => holder.dir(),
            Self::Tmux(holder) => holder.dir(),
        }
    }

    fn run(&mut self) {
        match self {
            Self::Pty(holder) => holder.run(),
            Self::Tmux(holder) => holder.run(),
        }
    }
}

/// Reads the spec's line from stdin (without its newline), straight from the descriptor:
/// std's `stdin()` would keep an 8 KiB buffer for the rest of the holder's life, one in every
/// holder.
fn read_spec_line() -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match rustix::io::read(rustix::stdio::stdin(), &mut chunk) {
            Ok(0) => return Ok(line),
            Ok(n) => {
                let read = &chunk[..n];
                if let Some(end) = read.iter().position(|&b| b == b'\n') {
                    line.extend_from_slice(&read[..end]);
                    return Ok(line);
                }
                line.extend_from_slice(read);
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(error) => return Err(error.into()),
        }
    }
}

/// Writes the ready line to stdout, straight to the descriptor (as [`read_spec_line`] reads).
fn report_ready(line: &ReadyLine) {
    let Ok(mut text) = serde_json::to_vec(line) else {
        return;
    };
    text.push(b'\n');
    let mut rest = text.as_slice();
    while !rest.is_empty() {
        match rustix::io::write(rustix::stdio::stdout(), rest) {
            Ok(0) => return,
            Ok(n) => rest = &rest[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
    }
}

/// Points stdin and stdout at `/dev/null` so the launcher's pipes close; stderr stays (the
/// launcher points it at the terminal's `holder.log`).
fn detach_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        let _ = rustix::stdio::dup2_stdin(&null);
        let _ = rustix::stdio::dup2_stdout(&null);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A creation's spec carries the record (the holder writes it as the first `meta.json`);
    /// a spec without one, from an older server or a holder taking over a tmux session, has
    /// the holder read the directory's.
    #[test]
    fn the_record_comes_from_the_spec_else_from_the_directory() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let backend = crate::backend::fake::FakeBackend::default();
        let mut on_disk = backend.host(dir.path())?.meta("n0nce");
        on_disk.cwd = "/on/disk".to_owned();
        crate::state_dir::write_meta(dir.path(), &on_disk)?;
        let mut given = on_disk.clone();
        given.cwd = "/given".to_owned();
        let spec = serde_json::json!({
            "dir": dir.path(), "socket": dir.path().join("s"), "program": "sh", "args": [],
            "env": [], "cwd": "/", "cols": 80, "rows": 24,
        });
        let mut older: HolderSpec = serde_json::from_value(spec).map_err(io::Error::other)?;
        assert!(
            older.meta.is_none(),
            "a spec without the record still parses"
        );
        let mut spec = older.clone();
        spec.meta = Some(Box::new(given));
        let sent = serde_json::to_vec(&spec).map_err(io::Error::other)?;
        let mut received: HolderSpec = serde_json::from_slice(&sent).map_err(io::Error::other)?;
        assert_eq!(received.record()?.cwd, "/given");
        assert_eq!(received.take_meta()?.cwd, "/given");
        assert!(
            received.meta.is_none(),
            "taken, not kept for the holder's life"
        );
        assert_eq!(older.take_meta()?.cwd, "/on/disk");
        Ok(())
    }
}
