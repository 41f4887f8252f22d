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
/// disk that can be full, and a note about a problem must not become a crash.
macro_rules! log_line {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
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
pub mod workspace;
