//! The ptyhub terminal core: everything about terminals, nothing about HTTP.
//!
//! - [`backend`]: the seam between a terminal's actor and what hosts it ([`backend::Backend`];
//!   [`backend::native`], a holder process per terminal, and [`backend::tmux`], a tmux session
//!   followed by a holder in control mode);
//! - [`holder`]: the per-terminal holder process (PTY or tmux control mode, program, event
//!   log, socket) and the backends' launcher for it;
//! - [`event_log`]: a terminal's `events.jsonl` segments, written by the holder and read by
//!   everyone else through a [`event_log::TerminalLog`];
//! - [`cgroup`]: a cgroup per terminal (where, its limits, counting, the kill that leaves
//!   nothing);
//! - [`memory`]: handing freed heap memory back to the system;
//! - [`state_dir`]: the resource on disk (`meta.json`, `state`, `events.jsonl`, …);
//! - [`shell`]: the injected shell integration (OSC 133 marks with a per-terminal nonce);
//! - [`tracker`]: command tracking from the marks (exec results, exit codes, console records);
//! - [`plain_text`]: a command's output as clean text (no escape codes);
//! - [`output_window`]: the part of an output an answer carries (`head`, `tail`, `grep`, …);
//! - [`screen`]: the VT screen (avt) with stateful UTF-8 decoding;
//! - [`terminal`]: the server-side actor per terminal and its [`terminal::TerminalHandle`];
//! - [`exec`]: exec, the main use case: its defaults, `exec_dir`, `async`, timeouts,
//!   truncation, and the submit-and-wait flow every transport only translates;
//! - [`registry`]: the set of terminals by owner, the live limit, discovery after a restart;
//! - [`error`]: [`error::TerminalError`], the one error type of the core;
//! - [`creation`]: a client's request checked and turned into a running terminal;
//! - [`secret`]: random nonces and tokens;
//! - [`process`]: process facts from `/proc` and signals, for the holder side of the seam;
//! - [`screen_worker`]: the background thread that brings every screen up to its log;
//! - [`hints`]: how to leave a known pager, editor or REPL that holds the terminal;
//! - [`queries`]: terminal queries in output and their answers in input (one answer reaches
//!   the program);
//! - [`stats`]: the process's counters of what terminals do (read by the server's
//!   `/metrics`).

/// `eprintln!` that never panics: writes one line to stderr and ignores a failure, which
/// `eprintln!` turns into a panic. The holder's stderr is its terminal's `holder.log`, on a
/// disk that can be full, and a note about a problem must not become a crash; a holder that
/// opens that file only when it first has something to say opens it here
/// ([`deferred_log`]).
macro_rules! log_line {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        $crate::deferred_log::open();
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// A native holder's `holder.log`, made when the holder first writes a diagnostic (or
/// panics) rather than by every create: normally it stays empty, and a file per terminal
/// costs a create an inode (`HolderSpec::is_log_deferred`).
pub(crate) mod deferred_log {
    use std::path::PathBuf;
    use std::sync::Mutex;

    static PATH: Mutex<Option<PathBuf>> = Mutex::new(None);

    /// Diagnostics go to `path` from the first one on; until then stderr is `/dev/null`.
    pub(crate) fn defer_to(path: PathBuf) {
        *PATH
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(path);
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            open();
            report(info);
        }));
    }

    /// Opens the deferred file as stderr, once; nothing where none is deferred (the server).
    pub(crate) fn open() {
        let Some(path) = PATH
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        else {
            return;
        };
        if let Ok(file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            let _ = rustix::stdio::dup2_stderr(&file);
        }
    }
}

pub mod backend;
pub mod cgroup;
pub mod creation;
pub mod error;
pub mod event_log;
pub mod exec;
pub mod hints;
pub mod holder;
pub mod memory;
pub mod os_user;
pub mod output_window;
pub mod plain_text;
pub mod process;
pub mod queries;
pub mod registry;
pub mod screen;
pub mod screen_worker;
pub mod secret;
pub mod shell;
pub mod state_dir;
pub mod stats;
pub mod terminal;
pub mod tracker;
pub mod typing_counter;
pub mod workspace;
