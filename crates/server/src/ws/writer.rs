//! The task that writes one WebSocket connection: it owns the socket's sending half, so a
//! client that reads slowly (or not at all) holds up only this task, never the loop that
//! reads the client's frames (its input and `^C` reach the terminal whatever the output
//! costs). It does not decide what is sent: the connection's loop in `ws.rs` encodes frames
//! into [`Batch`]es and queues them, with control messages (error replies, pongs, pings,
//! closes) on a queue of their own that goes first.
//!
//! Flow at a glance:
//! 1. take the next control message if one waits, else the next batch of output;
//! 2. write the batch's messages and flush them once;
//! 3. only then record the batch's `seq` as delivered (a durable relay's next replay starts
//!    after it);
//! 4. end after a close, once both queues are closed and empty, or when the socket fails.

use axum::extract::ws::{Message, WebSocket};
use futures_util::SinkExt;
use futures_util::stream::SplitSink;
use ptyhub_core::terminal::live::Delivery;
use ptyhub_protocol::event::Seq;
use tokio::sync::mpsc;

/// Output ready to go out with one flush.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) messages: Vec<Message>,
    /// The bytes of the messages' payloads.
    pub(super) bytes: usize,
    /// Set when, once this batch is flushed, the client has every output byte up to it.
    pub(super) delivered: Option<Seq>,
    /// The batch ends with a close: nothing follows it.
    pub(super) is_closing: bool,
}

impl Batch {
    pub(super) fn push(&mut self, message: Message) {
        self.bytes += payload_len(&message);
        self.messages.push(message);
    }
}

/// The bytes a message carries.
fn payload_len(message: &Message) -> usize {
    match message {
        Message::Text(text) => text.len(),
        Message::Binary(bytes) | Message::Ping(bytes) | Message::Pong(bytes) => bytes.len(),
        Message::Close(_) => 0,
    }
}

/// Writes until a close went out, both queues are closed and drained, or the client is gone.
pub(super) async fn run(
    mut sink: SplitSink<WebSocket, Message>,
    mut control: mpsc::Receiver<Message>,
    mut output: mpsc::Receiver<Batch>,
    delivery: Delivery,
) {
    let mut is_control_open = true;
    loop {
        tokio::select! {
            biased;
            message = control.recv(), if is_control_open => match message {
                Some(message) => {
                    let is_close = matches!(message, Message::Close(_));
                    if sink.send(message).await.is_err() || is_close {
                        return;
                    }
                }
                None => is_control_open = false,
            },
            batch = output.recv() => {
                let Some(batch) = batch else { return };
                for message in batch.messages {
                    if sink.feed(message).await.is_err() {
                        return;
                    }
                }
                if sink.flush().await.is_err() {
                    return;
                }
                // Only what was flushed counts as delivered.
                if let Some(seq) = batch.delivered {
                    delivery.delivered(seq);
                }
                if batch.is_closing {
                    return;
                }
            }
        }
    }
}
