//! The server's stop as its live clients see it (docs/operations.md#restarts-and-upgrades).
//! On `SIGTERM` or `SIGINT` the listeners stop accepting and open requests finish; what would
//! never finish by itself, a WebSocket or an event stream, is told here: each WebSocket gets a
//! `server_stopping` frame and a close with [`STOP_CLOSE_CODE`] and [`STOP_REASON`], each
//! event stream a last `server_stopping` event. The server waits for them (bounded by the
//! binary's grace) before it exits; every terminal keeps running and a new server adopts it.
//!
//! It owns the stop signal and the set of live-connection tasks, not what each transport
//! sends (`ws.rs`, `stream.rs`).

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TrackedFuture;

/// The WebSocket close code of a server that stops: 1012, "service restart" (RFC 6455's
/// registry), which tells a client to come back.
pub const STOP_CLOSE_CODE: u16 = 1012;
/// What the close and the last frame or event say.
pub const STOP_REASON: &str = "server restarting";

/// The stop signal and the live connections that must hear it, shared by every transport.
#[derive(Clone, Debug, Default)]
pub struct Stopping {
    token: CancellationToken,
    tasks: TaskTracker,
}

impl Stopping {
    /// Resolves once the server stops.
    pub async fn cancelled(&self) {
        self.token.cancelled().await;
    }

    /// Wraps `future` (a live connection the HTTP layer drives) as one the server waits for.
    pub fn track<F: Future>(&self, future: F) -> TrackedFuture<F> {
        self.tasks.track_future(future)
    }

    /// Tells every live connection, then waits until each has said its last word and ended.
    pub(crate) async fn stop(&self) {
        self.token.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}
