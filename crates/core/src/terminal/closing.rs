//! Closing a terminal from the actor: the host is asked to end the whole process tree; once it
//! is gone the terminal is marked closed and what memory held of it is dropped (its history
//! stays on disk). A host that does not finish in time is killed, and so is whatever a host
//! that is already gone left behind.

use crate::error::TerminalError;
use ptyhub_protocol::holder::HolderRequest;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Actor, CLOSE_TIMEOUT};
use crate::screen_worker::SharedScreen;
use crate::state_dir::{self, TerminalMeta};

impl Actor {
    pub(super) async fn close(
        &mut self,
        reply: oneshot::Sender<Result<TerminalMeta, TerminalError>>,
    ) {
        self.closers.push(reply);
        self.close_started.get_or_insert_with(Instant::now);
        match self.link.as_mut() {
            Some(link) if !self.is_exited || self.lines.is_some() => {
                if link.send(&HolderRequest::Terminate).await.is_err() {
                    self.holder_gone().await;
                }
            }
            _ => {
                // No host to ask: processes it left behind (it was killed, or a previous
                // server saw it go) are ended by the backend.
                self.backend.kill(&self.meta);
                self.finish_closing();
            }
        }
    }

    /// Marks the terminal closed once its holder is gone, and answers the closers.
    pub(super) fn finish_closing(&mut self) {
        if self.closers.is_empty() || self.lines.is_some() {
            return;
        }
        self.meta.closed = true;
        if let Err(error) = state_dir::write_meta(&self.dir, &self.meta) {
            tracing::warn!(%error, "cannot write meta.json");
        }
        self.close_started = None;
        // A closed terminal keeps its history on disk only: drop what memory held of it.
        self.tracker.forget_output();
        self.screen = SharedScreen::new(&self.log, 1, 1);
        crate::memory::trim_heap();
        for reply in self.closers.drain(..) {
            let _ = reply.send(Ok(self.meta.clone()));
        }
    }

    /// When a close that is under way gives up waiting for the host.
    pub(super) fn close_deadline(&self) -> Option<Instant> {
        self.close_started.map(|at| at + CLOSE_TIMEOUT)
    }

    /// Kills a host that did not end in time, and everything under it.
    pub(super) async fn on_close_timer(&mut self, now: Instant) {
        if self.close_deadline().is_some_and(|at| now >= at) {
            self.close_started = None;
            self.backend.kill(&self.meta);
            self.holder_gone().await;
        }
    }
}
