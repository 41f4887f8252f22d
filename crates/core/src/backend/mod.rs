//! The seam between a terminal's actor and whatever hosts the terminal: its PTY, its process
//! tree and its event log.
//!
//! The actor ([`crate::terminal`]) does everything through a [`Backend`]: it launches a
//! terminal, connects to it (a [`RequestSink`] for requests and a cancel-safe [`LineStream`]
//! of the log's events from a `seq` plus control messages), and reads history through the
//! [`TerminalLog`] the backend hands out. Input, resize, signals to the foreground group, the
//! process facts (`status`) and ending the whole tree are requests on the link, in the
//! vocabulary of the holder protocol ([`ptyhub_protocol::holder`]); nothing in the actor reads
//! `/proc`, sends a signal or opens a log file by itself. A backend whose processes live in
//! another pid namespace, inside tmux or on another machine is therefore one more
//! implementation of this trait, not a change to the actor.
//!
//! Implementations:
//! - [`native`]: a holder process per terminal, over its unix socket;
//! - [`tmux`]: a tmux session on a socket ptyhub owns, followed by a holder in tmux's control
//!   mode (the same holder protocol, so the actor cannot tell it from native);
//! - [`rootfs`]: a native holder whose shell runs in a Debian root under bubblewrap, with the
//!   root's provisioning in [`rootfs_install`];
//! - a fake driven by recorded logs, for the actor's unit tests (`fake`, tests only).
//!
//! [`Backends`] is the set a server runs with: which backend each terminal's `meta.json`
//! names, which ones can host terminals now ([`Availability`]) and which one a create that
//! names none gets ([`DefaultBackend`], `PTYHUB_BACKEND`).

#[cfg(test)]
pub(crate) mod fake;
pub mod native;
mod native_link;
pub mod rootfs;
pub mod rootfs_install;
mod select;
pub mod tmux;

pub use select::{BackendChoice, Backends, DefaultBackend, supports};

use std::future::Future;
use std::path::Path;
use std::pin::Pin;

use ptyhub_protocol::api::BackendKind;
use ptyhub_protocol::event::{CommandNote, InputSource, Seq};
use ptyhub_protocol::holder::{HolderLine, HolderRequest};
use ptyhub_protocol::rootfs::InstallProgress;

pub use crate::event_log::TerminalLog;
use crate::holder::HolderSpec;
use crate::state_dir::TerminalMeta;

/// Whether a backend can host terminals here, as `/v2/backends` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Availability {
    /// `None` when ready, else why not (for a person: "no tmux binary on PATH").
    pub failure: Option<String>,
    /// The version of the program behind it, when it has one.
    pub version: Option<String>,
}

impl Availability {
    /// Ready, with no program version to report.
    pub fn ready() -> Self {
        Self {
            failure: None,
            version: None,
        }
    }

    /// Whether terminals can be created on it.
    pub fn is_ready(&self) -> bool {
        self.failure.is_none()
    }
}

/// A boxed future, so backends can be used as trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a terminal could not be started.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct LaunchError {
    /// What went wrong, for a person.
    pub reason: String,
}

impl LaunchError {
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
        }
    }
}

/// What hosts terminals. One value serves every terminal of its kind; it is shared by the
/// registry and every actor.
pub trait Backend: Send + Sync + 'static {
    /// Which backend this is (`meta.json`, the API and the WebSocket `ready` frame say it).
    fn kind(&self) -> BackendKind;

    /// Whether it can host terminals here. A backend that always can keeps this default.
    fn availability(&self) -> Availability {
        Availability::ready()
    }

    /// Whether it waits for a one-time install (the rootfs backend's root filesystem) before
    /// it can host terminals; its availability then fails with a message that says so.
    fn needs_install(&self) -> bool {
        false
    }

    /// Starts the one-time install this backend needs, or joins the one that runs, and
    /// answers with its progress; `None` for a backend that has nothing to install.
    fn install(&self) -> Option<InstallProgress> {
        None
    }

    /// The latest install's progress (running or ended), if this server ran one.
    fn install_progress(&self) -> Option<InstallProgress> {
        None
    }

    /// The root filesystem its shells run in, once it has one (the rootfs backend's).
    fn guest_root(&self) -> Option<std::path::PathBuf> {
        None
    }

    /// Starts the terminal described by `spec`, whose directory already holds its
    /// `meta.json`; returns once the terminal runs (its `meta.json` then says so).
    fn launch<'a>(&'a self, spec: &'a HolderSpec) -> BoxFuture<'a, Result<(), LaunchError>>;

    /// Connects to a running terminal and subscribes to its events after `after`.
    fn connect<'a>(
        &'a self,
        meta: &'a TerminalMeta,
        after: Seq,
    ) -> BoxFuture<'a, std::io::Result<BackendLink>>;

    /// The event log of the terminal kept in `dir`, to read from any `seq`.
    fn log(&self, dir: &Path) -> TerminalLog;

    /// Ends every process of a terminal whose host does not answer any more, the host
    /// included: the last resort of a close that did not finish in time, and the close of a
    /// terminal whose host is gone. Processes whose host died are found too.
    fn kill(&self, meta: &TerminalMeta);

    /// Ends the processes a vanished host left behind (a host killed with SIGKILL, or one a
    /// restarted server finds gone); does nothing while the host itself still lives. A
    /// backend whose processes cannot outlive their host keeps this default.
    fn end_orphans(&self, meta: &TerminalMeta) {
        let _ = meta;
    }
}

/// A live connection to one terminal's host.
pub struct BackendLink {
    pub requests: Box<dyn RequestSink>,
    pub lines: Box<dyn LineStream>,
}

/// Where the actor sends its requests (input, resize, signal, status, terminate).
pub trait RequestSink: Send {
    /// Sends one request; an error means the host is gone.
    fn send<'a>(&'a mut self, request: &'a HolderRequest) -> BoxFuture<'a, std::io::Result<()>>;

    /// Sends requests in order, as one write where the link can (the host then takes them in
    /// one wake-up: an exec's note and its input).
    fn send_all<'a>(
        &'a mut self,
        requests: &'a [HolderRequest],
    ) -> BoxFuture<'a, std::io::Result<()>> {
        Box::pin(async move {
            for request in requests {
                self.send(request).await?;
            }
            Ok(())
        })
    }

    /// Types an exec's command: its `note`, then its bytes, which nobody waits a receipt
    /// for. `is_queue_clear`: every input sent before was typed (answered, none pending).
    /// Returns whether the host answers with an `input_result`: here, the note and an
    /// `input` request in one write; a link that can type into the PTY itself does so.
    fn type_command<'a>(
        &'a mut self,
        note: CommandNote,
        data: &'a [u8],
        source: Option<InputSource>,
        is_queue_clear: bool,
    ) -> BoxFuture<'a, std::io::Result<bool>> {
        let _ = is_queue_clear;
        Box::pin(async move {
            self.send_all(&command_requests(note, data, source)).await?;
            Ok(true)
        })
    }
}

/// An exec's command sent through the host: its note, then an `input` request nobody waits a
/// receipt for.
pub fn command_requests(
    note: CommandNote,
    data: &[u8],
    source: Option<InputSource>,
) -> [HolderRequest; 2] {
    [
        HolderRequest::Note(note),
        HolderRequest::Input {
            data: data.to_vec(),
            discard_unread: false,
            source,
            no_receipt: true,
            is_logged: false,
        },
    ]
}

/// The host's lines: events of the log in `seq` order, then live ones, and control messages
/// (the answers to requests, in the order of the requests of each kind).
pub trait LineStream: Send {
    /// The next line, or `None` once the host is gone. Cancel-safe: a future dropped before
    /// it is ready loses nothing.
    fn next(&mut self) -> BoxFuture<'_, Option<HolderLine>>;
}
