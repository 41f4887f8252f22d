//! Server-sent events for exec and view, when the client sends `Accept: text/event-stream`
//! (docs/compatibility.md#sse). Shared by v1 and v2. Only the framing is this module's: what exec
//! submits, how long its caller waits and how its result is shaped are `ptyhub_core::exec`'s.
//!
//! Events, in order:
//! - `output` — `{"session_id", "output"}` with the text the command printed since the last
//!   event (its clean text, as in exec's `output`); `{"reset": true, "output"}` with the whole
//!   text when earlier text was rewritten (a carriage-return progress line);
//! - `result` — the same object the JSON answer would carry, once the command is no longer
//!   running or the caller's `timeout` passed;
//! - `server_stopping` — `{"reason"}` instead of the rest, when the server stops (a restart:
//!   the command runs on; ask for its result from the new server). Every event stream of the
//!   server ends so ([`event_stream`]).

use std::convert::Infallible;
use std::time::Duration;

use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use ptyhub_core::exec::Submitted;
use ptyhub_core::terminal::TerminalHandle;
use ptyhub_protocol::api::Envelope;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::stopping::{STOP_REASON, Stopping};
use crate::wire_error::{Surface, WireError};

/// Events buffered for a slow reader; the producer waits beyond it (nothing is skipped).
const EVENTS_QUEUED: usize = 64;

/// Whether the client asked for a stream.
pub fn wants_events(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"))
}

/// Streams a submitted exec: its output until it ends (at once when `async`, or when the
/// caller's `timeout` passes), then its result as exec answers it.
pub fn exec_events(submitted: Submitted, stopping: &Stopping) -> Response {
    let handle = submitted.handle().clone();
    let limit = submitted.wait_limit();
    command_events(
        handle,
        limit,
        async move { submitted.result_now().await },
        stopping,
    )
}

/// Streams the current command's output until it ends (or `limit` passes), then `finish`'s
/// result as the last event.
pub fn command_events<R, E, F>(
    handle: TerminalHandle,
    limit: Option<Duration>,
    finish: F,
    stopping: &Stopping,
) -> Response
where
    R: Serialize + Send + 'static,
    E: Into<ptyhub_protocol::ApiError>,
    F: std::future::Future<Output = Result<R, E>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Event>(EVENTS_QUEUED);
    // Counted among the live connections for as long as the stream produces.
    let counted =
        ptyhub_core::stats::global().live_opened(ptyhub_core::stats::LiveKind::CommandStream);
    tokio::spawn(async move {
        let _counted = counted;
        let deadline = limit.map(|d| tokio::time::Instant::now() + d);
        let mut seq = handle.seq();
        let mut sent = String::new();
        loop {
            // The command's text, not the screen: a stream never waits for emulation.
            let Ok(screen) = handle.command_progress().await else {
                break;
            };
            let delta = match screen.output.strip_prefix(sent.as_str()) {
                Some(new) if !new.is_empty() => Some(serde_json::json!({
                    "session_id": screen.session_id, "output": new
                })),
                Some(_) => None,
                None => Some(serde_json::json!({
                    "session_id": screen.session_id, "output": screen.output, "reset": true
                })),
            };
            if let Some(delta) = delta {
                sent.clone_from(&screen.output);
                let event = Event::default().event("output").data(delta.to_string());
                if tx.send(event).await.is_err() {
                    return;
                }
            }
            if !screen.status.is_running() {
                break;
            }
            let changed = async {
                let _ = seq.changed().await;
            };
            match deadline {
                Some(at) => {
                    if tokio::time::timeout_at(at, changed).await.is_err() {
                        break;
                    }
                }
                None => changed.await,
            }
        }
        let last = match finish.await {
            Ok(result) => serde_json::to_string(&Envelope::ok("Command executed", result)),
            Err(error) => serde_json::to_string(&WireError::new(error, Surface::RestV2).body()),
        };
        let event = Event::default()
            .event("result")
            .data(last.unwrap_or_default());
        let _ = tx.send(event).await;
    });
    event_stream(rx, stopping.clone())
}

/// The response of an event stream fed by `events`: until they end, or until the server
/// stops, which ends it with a last `server_stopping` event (events still queued then are
/// not sent: the stream's client reads what it missed from the next server).
pub fn event_stream(events: mpsc::Receiver<Event>, stopping: Stopping) -> Response {
    let stream = futures_util::stream::unfold(
        (events, Some(stopping)),
        |(mut events, stopping)| async move {
            let stop = stopping?;
            tokio::select! {
                biased;
                () = stop.cancelled() => {
                    let last = Event::default()
                        .event("server_stopping")
                        .data(serde_json::json!({ "reason": STOP_REASON }).to_string());
                    Some((Ok::<_, Infallible>(last), (events, None)))
                }
                event = events.recv() => event.map(|event| (Ok(event), (events, Some(stop)))),
            }
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
