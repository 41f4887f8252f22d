//! The native backend: a holder process per terminal on this machine
//! ([`crate::holder`]), reached over its unix socket. Starting one is [`HolderLauncher`]'s
//! job; everything the holder cannot do for itself because it no longer answers or is gone
//! (ending its process tree, or what it left behind) is done here from `/proc`.
//!
//! A terminal's processes are found two ways: under its holder through parent links while the
//! holder lives (it is a subreaper, so `setsid` escapees stay under it), and by the
//! `PTYHUB_PROCESS_MARK` each inherits, whose value is unique to the terminal's instance
//! ([`crate::process::marked_processes`]): once the holder is dead its processes were
//! reparented and only the mark (and the sessions of marked processes) leads to them.

use std::path::Path;
use std::sync::Arc;

use ptyhub_protocol::api::BackendKind;
use ptyhub_protocol::event::Seq;

use super::native_link::HolderLink;
use super::{Backend, BackendLink, BoxFuture, LaunchError, TerminalLog};
use crate::holder::HolderSpec;
use crate::holder::launch::HolderLauncher;
use crate::process;
use crate::state_dir::TerminalMeta;

/// Terminals hosted by holder processes started from `launcher`.
#[derive(Clone, Debug)]
pub struct NativeBackend {
    launcher: HolderLauncher,
}

impl NativeBackend {
    pub fn new(launcher: HolderLauncher) -> Arc<Self> {
        Arc::new(Self { launcher })
    }
}

/// The terminal's holder, if it still runs: the recorded pid, alive, and a holder
/// ([`HolderLauncher::is_holder`]).
pub(super) fn live_holder(launcher: &HolderLauncher, meta: &TerminalMeta) -> Option<u32> {
    meta.holder_pid
        .filter(|&pid| process::is_alive(pid) && launcher.is_holder(pid))
}

/// Ends every process of a terminal: those carrying its instance's mark, and its live
/// holder's tree with the holder.
pub(super) fn end_terminal(launcher: &HolderLauncher, meta: &TerminalMeta) {
    let holder = live_holder(launcher, meta);
    let ended = process::stop_then_kill(|| {
        let mut pids = process::marked_processes(&meta.process_mark);
        if let Some(holder) = holder {
            pids.extend(process::descendants(holder));
            pids.push(holder);
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    });
    if ended > 0 {
        tracing::info!(id = %meta.id, ended, "ended the processes of a terminal");
    }
    // What the marks cannot lead to (a process that cleared its environment and left every
    // marked session) is still in the terminal's cgroup.
    if let Some(record) = meta.cgroup.as_ref().filter(|record| !record.is_removed) {
        let killed = crate::cgroup::tree::kill_and_wait(record);
        if killed > 0 {
            tracing::info!(id = %meta.id, killed, "killed the processes of a terminal's cgroup");
        }
    }
}

impl Backend for NativeBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Native
    }

    fn launch<'a>(&'a self, spec: &'a HolderSpec) -> BoxFuture<'a, Result<(), LaunchError>> {
        Box::pin(async move { self.launcher.launch(spec).await.map(|_| ()) })
    }

    fn connect<'a>(
        &'a self,
        meta: &'a TerminalMeta,
        after: Seq,
    ) -> BoxFuture<'a, std::io::Result<BackendLink>> {
        Box::pin(async move {
            let (link, lines) = HolderLink::connect(Path::new(&meta.socket), after).await?;
            Ok(BackendLink {
                requests: Box::new(link),
                lines: Box::new(lines),
            })
        })
    }

    fn log(&self, dir: &Path) -> TerminalLog {
        TerminalLog::in_dir(dir)
    }

    fn kill(&self, meta: &TerminalMeta) {
        end_terminal(&self.launcher, meta);
    }

    fn end_orphans(&self, meta: &TerminalMeta) {
        // A live holder ends its own tree (on close, or when its program exits).
        if !self.holder_lives(meta) {
            self.kill(meta);
        }
    }
}

impl NativeBackend {
    /// Whether the terminal's holder still runs.
    pub(super) fn holder_lives(&self, meta: &TerminalMeta) -> bool {
        live_holder(&self.launcher, meta).is_some()
    }
}
