//! The WebSocket transport of live connections (docs/websocket.md). Thin: it validates the
//! query, asks the terminal for a [`Connection`], and translates frames both ways. Who may
//! connect, replay, lag and terminal-query rules live in `ptyhub_core::terminal::live`.

use std::collections::VecDeque;
use std::time::Duration;

use axum::Extension;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use futures_util::{SinkExt, StreamExt};
use ptyhub_core::error::TerminalError;
use ptyhub_core::exec::{ExecContext, ExecOptions};
use ptyhub_core::registry::CreateSpec;
use ptyhub_core::screen::incomplete_utf8_tail;
use ptyhub_core::terminal::TerminalHandle;
use ptyhub_core::terminal::live::{
    ConnectOptions, Connection, LiveFrame, LiveMode, REPLAY_BYTES_MAX, REPLAY_BYTES_MIN, Ready,
};
use ptyhub_protocol::api::{CommandResult, ExecParams};
use ptyhub_protocol::error::{ApiError, ErrorCode};
use ptyhub_protocol::event::Seq;
use ptyhub_protocol::ids::TermSize;
use ptyhub_protocol::live::{ClientFrame, ConnectionMode, LiveTransport, ServerFrame};
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::AppState;
use crate::auth::{Operation, Principal};
use crate::http_error::{HttpError, QueryParams};
use crate::stopping::{STOP_CLOSE_CODE, STOP_REASON, Stopping};
use crate::wire_error::{Surface, WireError};

mod writer;

/// Largest frame or message a client may send.
const CLIENT_MESSAGE_MAX_BYTES: usize = 1024 * 1024;
/// At most this much is read from a client's socket at a time. The WebSocket codec zeroes the
/// room of each read before it reads (its default, 128 KiB, cost two 128 KiB fills per client
/// frame, one for the frame and one for the read that finds no more); a larger frame still
/// arrives whole, in more reads.
const CLIENT_READ_BYTES: usize = 16 * 1024;
/// The server pings every client this often by default (`--ws-ping-secs`): under the 30 s
/// and 60 s idle timeouts that proxies and load balancers commonly apply, so a quiet
/// connection through one stays open on both of its legs (docs/scale-out.md)…
pub const PING_EVERY_DEFAULT: Duration = Duration::from_secs(20);
/// …and drops one it has heard nothing from (not even a pong) for this long, so a vanished
/// client cannot hold a terminal's relay slot or keep it from being idle.
const CLIENT_SILENCE_MAX: Duration = Duration::from_secs(90);
/// How long output that ends inside a UTF-8 character waits for the rest before it is sent
/// with a replacement character.
const SPLIT_CHARACTER_WAIT: Duration = Duration::from_millis(50);

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v2/pty/sessions/{id}/ws", get(session_ws))
        .route("/v1/shell/ws", get(v1_ws))
        .route("/v2/pty/ws", get(anonymous_ws))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WsQuery {
    session_id: Option<String>,
    protocol: Option<String>,
    mode: Option<String>,
    durable: Option<bool>,
    restore: Option<bool>,
    replay_bytes: Option<usize>,
    since_seq: Option<u64>,
    presence: Option<bool>,
}

impl WsQuery {
    fn transport(&self) -> Result<LiveTransport, ApiError> {
        match self.protocol.as_deref() {
            None | Some("json") => Ok(LiveTransport::Json),
            Some("binary") => Ok(LiveTransport::Binary),
            Some(other) => Err(ApiError::invalid(format!(
                "protocol must be json or binary, not {other:?}"
            ))),
        }
    }

    /// The connection's options; `presence` frames unless the route's default
    /// (`presence_default`) or the query says otherwise.
    fn options(&self, by: String, presence_default: bool) -> Result<ConnectOptions, ApiError> {
        let durable = self.durable.unwrap_or(false);
        let mode = match self.mode.as_deref() {
            None | Some("relay") => LiveMode::Relay { durable },
            Some("attach") => LiveMode::Attach,
            Some("watch") => LiveMode::Watch,
            Some(other) => {
                return Err(ApiError::invalid(format!(
                    "mode must be relay, attach or watch, not {other:?}"
                )));
            }
        };
        if durable && !matches!(mode, LiveMode::Relay { .. }) {
            return Err(ApiError::invalid(
                "durable applies to the relay connection only (attach and watch are never refused)",
            ));
        }
        let replay_bytes = self.replay_bytes.unwrap_or(REPLAY_BYTES_MAX);
        if !(REPLAY_BYTES_MIN..=REPLAY_BYTES_MAX).contains(&replay_bytes) {
            return Err(ApiError::invalid(format!(
                "replay_bytes must be between {REPLAY_BYTES_MIN} and {REPLAY_BYTES_MAX}"
            )));
        }
        Ok(ConnectOptions {
            mode,
            restore: self.restore.unwrap_or(false),
            replay_bytes,
            since_seq: self.since_seq.map(Seq),
            by,
            wants_presence: self.presence.unwrap_or(presence_default),
        })
    }
}

/// What a connection may do is what its mode needs.
fn require(principal: &Principal, mode: LiveMode) -> Result<(), ApiError> {
    principal.allow(if mode == LiveMode::Watch {
        Operation::Watch
    } else {
        Operation::Attach
    })
}

fn upgrade(ws: WebSocketUpgrade) -> WebSocketUpgrade {
    ws.max_message_size(CLIENT_MESSAGE_MAX_BYTES)
        .max_frame_size(CLIENT_MESSAGE_MAX_BYTES)
        .read_buffer_size(CLIENT_READ_BYTES)
}

/// What an admitted connection is: its transport, its options, and what its `resize` frames
/// answer when the principal may not resize (a writer's frames need `terminal.resize` as the
/// REST route does).
struct Admission {
    transport: LiveTransport,
    options: ConnectOptions,
    resize_refusal: Option<ApiError>,
    exec: ExecSetup,
    ping_every: Duration,
    stopping: Stopping,
    /// The route's clients know ptyhub's own frames (`server_stopping` among them); the
    /// compatible and anonymous routes get only the close that says the same.
    announces_stop: bool,
}

/// What a connection's `exec` frames need besides the connection: the terminal's default
/// `no_change_timeout` is the registry's, and a principal that may not run commands is
/// refused as REST exec refuses it.
#[derive(Clone)]
struct ExecSetup {
    registry: std::sync::Arc<ptyhub_core::registry::Registry>,
    owner: String,
    refusal: Option<ApiError>,
}

/// Checks made before the upgrade, answered as HTTP errors: the request itself is wrong (its
/// query), or it comes from another site's page, or the principal may not do this.
fn admit(
    state: &AppState,
    principal: &Principal,
    headers: &HeaderMap,
    query: &WsQuery,
    presence_default: bool,
) -> Result<Admission, ApiError> {
    let transport = query.transport()?;
    let options = query.options(principal.who(), presence_default)?;
    crate::auth::require_own_origin(state, headers)?;
    require(principal, options.mode)?;
    Ok(Admission {
        transport,
        options,
        resize_refusal: principal.allow(Operation::Resize).err(),
        exec: ExecSetup {
            registry: state.registry.clone(),
            owner: principal.owner.clone(),
            refusal: principal.allow(Operation::Run).err(),
        },
        ping_every: state.ws_ping_every,
        stopping: state.stopping.clone(),
        announces_stop: presence_default,
    })
}

/// `GET /v2/pty/sessions/{id}/ws`
async fn session_ws(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    QueryParams(query): QueryParams<WsQuery>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Result<Response, HttpError> {
    if query.session_id.is_some() {
        return Err(ApiError::invalid("session_id belongs in the path here").into());
    }
    let admission = admit(&state, &principal, &headers, &query, true)?;
    Ok(open(ws, admission, async move {
        let handle = state.registry.get(&principal.owner, &id).await?;
        Ok((handle, Preface::None))
    }))
}

/// `GET /v1/shell/ws?session_id=…`; without an id, a new terminal announced first.
async fn v1_ws(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    QueryParams(query): QueryParams<WsQuery>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Result<Response, HttpError> {
    // The compatible route sends only the frames its clients know, unless asked.
    let admission = admit(&state, &principal, &headers, &query, false)?;
    if query.session_id.is_none() {
        // The new terminal runs the default shell: nothing of the client's choosing.
        principal.allow(Operation::Create)?;
    }
    Ok(open(ws, admission, async move {
        match &query.session_id {
            Some(id) => Ok((
                state.registry.get(&principal.owner, id).await?,
                Preface::None,
            )),
            None => {
                let (handle, _) = state
                    .registry
                    .create(&principal.owner, CreateSpec::default())
                    .await?;
                Ok((handle, Preface::AnnounceId))
            }
        }
    }))
}

/// `GET /v2/pty/ws`: a terminal that lives and dies with the connection.
async fn anonymous_ws(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    QueryParams(query): QueryParams<WsQuery>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Result<Response, HttpError> {
    if query.durable.is_some() || query.restore.is_some() || query.since_seq.is_some() {
        return Err(ApiError::invalid(
            "durable, restore and since_seq need an existing session; an anonymous terminal ends with its connection",
        )
        .into());
    }
    if query.session_id.is_some() || query.mode.is_some() {
        return Err(ApiError::invalid(
            "an anonymous terminal takes no session_id or mode (it has one read-write connection)",
        )
        .into());
    }
    // One connection, nobody to be present with, unless asked.
    let admission = admit(&state, &principal, &headers, &query, false)?;
    // The new terminal runs the default shell: nothing of the client's choosing.
    principal.allow(Operation::Create)?;
    Ok(open(ws, admission, async move {
        let spec = CreateSpec {
            anonymous: true,
            ..CreateSpec::default()
        };
        let (handle, _) = state.registry.create(&principal.owner, spec).await?;
        let info = handle.info().await?;
        let preface = Preface::Anonymous {
            registry: state.registry.clone(),
            owner: principal.owner.clone(),
            id: info.session_id,
        };
        Ok((handle, preface))
    }))
}

/// What happens around the connection besides the frames of docs/websocket.md.
enum Preface {
    None,
    /// `/v1/shell/ws` opened a terminal: announce its id before `ready`.
    AnnounceId,
    /// `/v2/pty/ws`: never tell the id; close the terminal when the connection ends.
    Anonymous {
        registry: std::sync::Arc<ptyhub_core::registry::Registry>,
        owner: String,
        id: String,
    },
}

/// Upgrades, then finds the terminal (`target`) and connects. What can go wrong from here on
/// (an unknown terminal, a busy relay, an expired `since_seq`, a limit) is an `error` frame
/// with its code, which a browser can read (it never sees an HTTP status of an upgrade).
fn open(
    ws: WebSocketUpgrade,
    admission: Admission,
    target: impl Future<Output = Result<(TerminalHandle, Preface), ApiError>> + Send + 'static,
) -> Response {
    let Admission {
        transport,
        options,
        resize_refusal,
        exec,
        ping_every,
        stopping,
        announces_stop,
    } = admission;
    let mode = options.mode;
    let since_seq = options.since_seq;
    let tracked = stopping.clone();
    upgrade(ws).on_upgrade(move |socket| {
        tracked.track(async move {
            let (handle, preface) = match target.await {
                Ok(found) => found,
                Err(error) => return refuse(socket, error).await,
            };
            match handle.connect(options).await {
                Ok((connection, ready)) => {
                    let session = Session {
                        mode,
                        transport,
                        resize_refusal,
                        exec,
                        ping_every,
                        stopping,
                        announces_stop,
                        since_seq,
                    };
                    serve(socket, connection, ready, &session, &preface).await;
                }
                Err(error) => refuse(socket, error).await,
            }
            if let Preface::Anonymous {
                registry,
                owner,
                id,
            } = preface
                && let Err(error) = registry.close(&owner, &id).await
            {
                tracing::debug!(%id, %error, "anonymous terminal already gone");
            }
        })
    })
}

async fn refuse(mut socket: WebSocket, error: impl Into<ApiError>) {
    let _ = socket.send(error_frame(error)).await;
    let _ = socket.send(close_message(1008, "refused")).await;
}

fn close_message(code: u16, reason: &'static str) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: Utf8Bytes::from_static(reason),
    }))
}

fn frame_message(frame: &ServerFrame) -> Message {
    Message::Text(Utf8Bytes::from(frame.to_text()))
}

fn error_frame(error: impl Into<ApiError>) -> Message {
    frame_message(&WireError::new(error, Surface::WebSocket).frame())
}

/// The wire name of a connection's mode.
fn wire_mode(mode: LiveMode) -> ConnectionMode {
    match mode {
        LiveMode::Relay { .. } => ConnectionMode::Relay,
        LiveMode::Attach => ConnectionMode::Attach,
        LiveMode::Watch => ConnectionMode::Watch,
    }
}

/// What `serve` keeps of the admission.
struct Session {
    mode: LiveMode,
    transport: LiveTransport,
    resize_refusal: Option<ApiError>,
    exec: ExecSetup,
    /// How often the server pings the client.
    ping_every: Duration,
    stopping: Stopping,
    announces_stop: bool,
    /// Where the client asked its replay to start: it has every output byte up to it.
    since_seq: Option<Seq>,
}

async fn serve(
    socket: WebSocket,
    connection: Connection,
    ready: Ready,
    session: &Session,
    preface: &Preface,
) {
    let (mut sink, stream) = socket.split();
    let is_anonymous = matches!(preface, Preface::Anonymous { .. });
    if let Preface::AnnounceId = preface {
        let frame = ServerFrame::SessionId {
            session_id: ready.session_id.clone(),
        };
        if sink.send(frame_message(&frame)).await.is_err() {
            return;
        }
    }
    let ready_frame = ServerFrame::Ready {
        session_id: (!is_anonymous).then(|| ready.session_id.clone()),
        transport: session.transport,
        backend: ready.backend,
        resumed: ready.resumed,
        mode: wire_mode(session.mode),
        seq: ready.seq,
        cols: ready.cols,
        rows: ready.rows,
    };
    if sink.send(frame_message(&ready_frame)).await.is_err() {
        return;
    }
    let (control, control_rx) = mpsc::channel(CONTROL_MESSAGES_QUEUED);
    let (output, output_rx) = mpsc::channel(OUTPUT_BATCHES_QUEUED);
    let mut writer = tokio::spawn(writer::run(
        sink,
        control_rx,
        output_rx,
        connection.delivery(),
    ));
    let mut live = Live {
        connection,
        stream,
        session,
        session_id: &ready.session_id,
        control,
        output,
        text: TextFramer::default(),
        sent_up_to: session.since_seq,
        execs: tokio::task::JoinSet::new(),
        answers: VecDeque::new(),
        last_submitted: None,
    };
    if live.run(&mut writer).await == Ended::WriterDone {
        live.drain().await;
        return;
    }
    // Whatever is queued gets a short while to go out (a close, say); a client that reads
    // nothing must not keep the writer alive. The connection stays until then, so what the
    // writer still flushes counts as delivered.
    let Live {
        connection,
        control,
        output,
        ..
    } = live;
    drop((control, output));
    if tokio::time::timeout(WRITER_GRACE, &mut writer)
        .await
        .is_err()
    {
        writer.abort();
    }
    drop(connection);
}

/// Control messages (error replies, pongs, pings, closes) queued for the writer at most. The
/// client's frames are read only while there is room for an answer, so a client that sends
/// requests without reading the answers is held back by TCP, not by the server's memory.
const CONTROL_MESSAGES_QUEUED: usize = 16;
/// Batches of output queued for the writer besides the one it writes: the next frames are
/// taken from the connection only when there is room, so what a slow client costs is bounded
/// (docs/websocket.md, *Slow connections*), and the rest waits in the event log.
const OUTPUT_BATCHES_QUEUED: usize = 1;
/// Frames in one batch (written with one flush) at most…
const FRAMES_PER_FLUSH: usize = 64;
/// …and payload bytes: a batch is closed once it holds this much (one frame more at most).
const BATCH_MAX_BYTES: usize = 256 * 1024;
/// How long the writer may still write once the connection is over before it is stopped.
const WRITER_GRACE: Duration = Duration::from_secs(2);
/// How long the frames a client sent before its writer went are still acted on at most.
const DRAIN_MAX: Duration = Duration::from_secs(10);
/// `exec` frames of one connection waiting for their answers at most (one command runs in a
/// terminal at a time; the others are answered `BUSY` at once).
const EXECS_WAITING_MAX: usize = 8;
/// Longest `request_id` of an `exec` frame.
const REQUEST_ID_MAX_CHARS: usize = 128;

/// Why the connection's loop ended.
#[derive(PartialEq, Eq)]
enum Ended {
    /// The writer ended: a close went out after the last frame, or the client is gone.
    WriterDone,
    /// The client left, was silent too long, broke the protocol, or the stream ended.
    Client,
}

/// The reading side of one connection: the client's frames in, the terminal's frames encoded
/// and queued for the writer (`ws/writer.rs`) only when there is room.
struct Live<'a> {
    connection: Connection,
    stream: futures_util::stream::SplitStream<WebSocket>,
    session: &'a Session,
    session_id: &'a str,
    control: mpsc::Sender<Message>,
    output: mpsc::Sender<writer::Batch>,
    text: TextFramer,
    /// The newest `seq` up to which the client has (or is sent) every output byte: what it
    /// resumes from with `since_seq` when the server stops.
    sent_up_to: Option<Seq>,
    /// The `exec` frames waiting for their commands, each ending with its `exec_result`; they
    /// stop waiting when the connection ends, and their commands run on.
    execs: tokio::task::JoinSet<Message>,
    /// Answers of commands whose output is not all taken yet: each goes out after the output
    /// that was ready when it came, which holds the command's (the terminal publishes an
    /// event before a command it ends is answered).
    answers: VecDeque<Message>,
    /// Resolves once the newest `exec` frame's command was submitted or refused.
    last_submitted: Option<oneshot::Receiver<()>>,
}

impl Live<'_> {
    async fn run(&mut self, writer: &mut tokio::task::JoinHandle<()>) -> Ended {
        let ping_every = self.session.ping_every;
        let mut keepalive = tokio::time::interval_at(Instant::now() + ping_every, ping_every);
        let mut heard_at = Instant::now();
        // Room for one batch of output, taken before the frames that fill it.
        let mut permit: Option<mpsc::OwnedPermit<writer::Batch>> = None;
        // The last frames (and their close) are queued: nothing more is taken or acted on.
        let mut is_closing = false;
        loop {
            let flush_at = self.text.flush_at();
            tokio::select! {
                _ = &mut *writer => return Ended::WriterDone,
                () = self.session.stopping.cancelled(), if !is_closing => {
                    return self.say_stopping(permit.take()).await;
                }
                _ = keepalive.tick() => {
                    if heard_at.elapsed() > CLIENT_SILENCE_MAX {
                        let _ = self.control.try_send(close_message(1001, "client silent"));
                        return Ended::Client;
                    }
                    // One ping waiting is enough: while the writer is stuck, more pings would
                    // only take the room of answers.
                    if self.control.capacity() == self.control.max_capacity() {
                        let _ = self.control.try_send(Message::Ping(Default::default()));
                    }
                }
                reserved = self.output.clone().reserve_owned(), if permit.is_none() && !is_closing => {
                    match reserved {
                        Ok(reserved) => permit = Some(reserved),
                        Err(_) => return Ended::WriterDone,
                    }
                }
                frame = self.connection.next(), if permit.is_some() && !is_closing => {
                    let Some(frame) = frame else { return Ended::Client };
                    if let Some(permit) = permit.take() {
                        is_closing = self.queue(Some(frame), permit);
                    }
                }
                Some(joined) = self.execs.join_next(), if !is_closing => self.keep_answer(joined),
                () = std::future::ready(()),
                    if !self.answers.is_empty() && permit.is_some() && !is_closing =>
                {
                    if let Some(permit) = permit.take() {
                        is_closing = self.queue(None, permit);
                    }
                }
                () = sleep_until(flush_at), if permit.is_some() => {
                    if let Some((message, seq)) = self.text.flush()
                        && let Some(permit) = permit.take()
                    {
                        self.sent_up_to = self.sent_up_to.max(Some(seq));
                        let mut batch = writer::Batch {
                            delivered: Some(seq),
                            ..writer::Batch::default()
                        };
                        batch.push(message);
                        permit.send(batch);
                    }
                }
                message = self.stream.next(), if self.control.capacity() > 0 => {
                    heard_at = Instant::now();
                    let reply = match message {
                        Some(Ok(Message::Close(_))) | None => return Ended::Client,
                        Some(Err(error)) => {
                            if let Some(close) = protocol_error_close(error) {
                                let _ = self.control.try_send(close);
                            }
                            return Ended::Client;
                        }
                        // Once the last frames are queued, the client's frames are no longer
                        // acted on (the connection ends as soon as they are written).
                        Some(Ok(_)) if is_closing => None,
                        Some(Ok(message)) => self.on_message(message).await,
                    };
                    if let Some(reply) = reply {
                        // Room was checked before reading, and only this loop queues answers.
                        let _ = self.control.try_send(reply);
                    }
                }
            }
        }
    }

    /// The server stops: queues what the text framer holds, the `server_stopping` frame (on
    /// routes whose clients know it) and the close, after every batch already queued. Waits
    /// for room a short while at most; a client that reads nothing is just dropped.
    async fn say_stopping(&mut self, permit: Option<mpsc::OwnedPermit<writer::Batch>>) -> Ended {
        let permit = match permit {
            Some(permit) => permit,
            None => match tokio::time::timeout(WRITER_GRACE, self.output.clone().reserve_owned())
                .await
            {
                Ok(Ok(permit)) => permit,
                _ => return Ended::Client,
            },
        };
        let mut batch = writer::Batch::default();
        if let Some((message, seq)) = self.text.flush() {
            batch.push(message);
            batch.delivered = Some(seq);
            self.sent_up_to = self.sent_up_to.max(Some(seq));
        }
        if self.session.announces_stop {
            batch.push(frame_message(&ServerFrame::ServerStopping {
                reason: STOP_REASON.to_owned(),
                seq: self.sent_up_to,
            }));
        }
        batch.push(close_message(STOP_CLOSE_CODE, STOP_REASON));
        batch.is_closing = true;
        permit.send(batch);
        Ended::Client
    }

    /// The writer is gone (the client went away, or a write failed), but what the client sent
    /// before it went is still acted on, in order: input it typed is never dropped. Ends with
    /// its frames (a close, the end of the stream) or after [`DRAIN_MAX`].
    async fn drain(&mut self) {
        let drained = async {
            while let Some(Ok(message)) = self.stream.next().await {
                if matches!(message, Message::Close(_)) {
                    return;
                }
                // Nobody can read an answer any more.
                let _ = self.on_message(message).await;
            }
        };
        let _ = tokio::time::timeout(DRAIN_MAX, drained).await;
    }

    /// Acts on one data frame from the client; the answer to send, if any.
    async fn on_message(&mut self, message: Message) -> Option<Message> {
        match message {
            Message::Text(body) => match ClientFrame::from_text(body.as_str()) {
                Ok(ClientFrame::Exec { request_id, params }) => self.exec(request_id, &params),
                Ok(frame) => {
                    on_frame(
                        &self.connection,
                        frame,
                        self.session.resize_refusal.as_ref(),
                    )
                    .await
                }
                Err(error) => Some(error_frame(error)),
            },
            Message::Binary(bytes) => match self.session.transport {
                LiveTransport::Binary => self.connection.input(&bytes).await.err().map(error_frame),
                LiveTransport::Json => Some(error_frame(ApiError::invalid(
                    "binary frames need protocol=binary; send {\"type\":\"input\",\"data\":…}",
                ))),
            },
            Message::Ping(_) | Message::Pong(_) | Message::Close(_) => None,
        }
    }

    /// Starts an `exec` frame's command: checked here (who may, the parameters, how many
    /// wait on this connection), then submitted and waited for beside the connection, so
    /// output and other frames flow meanwhile; the answer is an `exec_result` frame.
    fn exec(&mut self, request_id: Option<String>, params: &ExecParams) -> Option<Message> {
        let refuse = |error: ApiError, request_id: Option<String>| {
            let frame = WireError::new(error, Surface::WebSocket).exec_frame(request_id);
            Some(frame_message(&frame))
        };
        if request_id
            .as_ref()
            .is_some_and(|id| id.chars().count() > REQUEST_ID_MAX_CHARS)
        {
            let error = ApiError::invalid(format!(
                "request_id is at most {REQUEST_ID_MAX_CHARS} characters; nothing was run"
            ));
            return refuse(error, None);
        }
        if let Some(refusal) = &self.session.exec.refusal {
            return refuse(refusal.clone(), request_id);
        }
        let checked = self
            .connection
            .exec_context()
            .and_then(|context| ExecOptions::from_params(params).map(|options| (context, options)));
        let (context, options) = match checked {
            Ok(checked) => checked,
            Err(error) => return refuse(error.into(), request_id),
        };
        if self.execs.len() + self.answers.len() >= EXECS_WAITING_MAX {
            let error = ApiError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "at most {EXECS_WAITING_MAX} exec frames wait for their answers on one connection; nothing was run"
                ),
            );
            return refuse(error, request_id);
        }
        let setup = self.session.exec.clone();
        let id = self.session_id.to_owned();
        // Commands are submitted in the order of their frames: each waits for the one
        // before to be submitted (or refused).
        let (submitted, next) = oneshot::channel();
        let before = self.last_submitted.replace(next);
        self.execs.spawn(async move {
            if let Some(before) = before {
                let _ = before.await;
            }
            let frame = match run_exec(&context, &options, &setup, &id, submitted).await {
                Ok(result) => ServerFrame::ExecResult {
                    request_id,
                    result: Some(Box::new(result)),
                    error: None,
                },
                Err(error) => WireError::new(error, Surface::WebSocket).exec_frame(request_id),
            };
            // The loop sends it after the output that came before it.
            frame_message(&frame)
        });
        None
    }

    /// Keeps a finished exec task's answer for the next batch; a task that panicked has no
    /// answer to give.
    fn keep_answer(&mut self, joined: Result<Message, tokio::task::JoinError>) {
        if let Ok(answer) = joined {
            self.answers.push_back(answer);
        }
    }

    /// Queues a batch for the writer in the room `permit` holds: `first` (else the first
    /// frame ready) and the frames ready after it, then the waiting answers. Returns whether
    /// the batch closes the connection.
    fn queue(
        &mut self,
        first: Option<LiveFrame>,
        permit: mpsc::OwnedPermit<writer::Batch>,
    ) -> bool {
        let batch = self.batch(first);
        let is_closing = batch.is_closing;
        self.sent_up_to = self.sent_up_to.max(batch.delivered);
        permit.send(batch);
        is_closing
    }

    /// Encodes `first` (else the first frame ready) and the frames ready after it (up to a
    /// batch's bounds) for one flush, then the waiting answers once no more output is ready.
    fn batch(&mut self, first: Option<LiveFrame>) -> writer::Batch {
        let mut batch = writer::Batch::default();
        let mut frame = first.or_else(|| self.connection.next_ready());
        let mut frames = 0;
        let mut is_full = false;
        while let Some(next) = frame.take() {
            let (messages, close) = encode(
                &next,
                self.session.transport,
                &mut self.text,
                self.session_id,
            );
            for message in messages {
                batch.push(message);
            }
            if let LiveFrame::Output { seq, .. } = next
                && !self.text.is_holding()
            {
                batch.delivered = Some(seq);
            }
            if let LiveFrame::Restored { seq } = next {
                self.sent_up_to = self.sent_up_to.max(Some(seq));
            }
            if let Some(close) = close {
                batch.push(close);
                batch.is_closing = true;
                break;
            }
            frames += 1;
            if frames < FRAMES_PER_FLUSH && batch.bytes < BATCH_MAX_BYTES {
                frame = self.connection.next_ready();
            } else {
                is_full = true;
            }
        }
        if !is_full && !batch.is_closing {
            // A command's answer is ready as soon as the terminal published its end: the
            // exec's task ran right after the terminal's turn. It goes out with the output
            // in one flush, not in a second send and a second wake-up of the client.
            while let Some(joined) = self.execs.try_join_next() {
                self.keep_answer(joined);
            }
            for answer in self.answers.drain(..) {
                batch.push(answer);
            }
        }
        batch
    }
}

/// The close that answers a frame the WebSocket protocol itself refuses (docs/websocket.md,
/// *Close codes*): 1007 for a text frame that is not UTF-8, 1009 for a frame over
/// [`CLIENT_MESSAGE_MAX_BYTES`], 1002 for any other protocol violation; `None` when the peer
/// is gone and nothing can be sent.
fn protocol_error_close(error: axum::Error) -> Option<Message> {
    use tungstenite::error::{Error, ProtocolError};
    let error = error.into_inner();
    let error = error.downcast_ref::<Error>()?;
    let (code, reason) = match error {
        Error::Utf8(_) => (1007, "invalid utf-8 in a text frame"),
        Error::Capacity(_) => (1009, "frame too large"),
        Error::Protocol(ProtocolError::ResetWithoutClosingHandshake) => return None,
        Error::Protocol(_) => (1002, "protocol error"),
        Error::AttackAttempt => (1008, "attack attempt"),
        _ => return None,
    };
    Some(close_message(code, reason))
}

/// An `exec` frame's command, as REST v2's exec runs and answers it: submitted as this
/// connection (`is_submitted` is told once it was submitted or refused), then answered.
async fn run_exec(
    context: &ExecContext,
    options: &ExecOptions,
    setup: &ExecSetup,
    id: &str,
    is_submitted: oneshot::Sender<()>,
) -> Result<CommandResult, TerminalError> {
    let terminal_default = setup.registry.no_change_timeout(&setup.owner, id).await;
    let submitted = context.submit(options, terminal_default).await;
    let _ = is_submitted.send(());
    submitted?.answer_for(&setup.owner).await
}

/// Acts on a client frame other than `exec`; `resize_refusal` answers a `resize` from a
/// principal that may not.
async fn on_frame(
    connection: &Connection,
    frame: ClientFrame,
    resize_refusal: Option<&ApiError>,
) -> Option<Message> {
    let outcome = match frame {
        ClientFrame::Input { data } => connection.input(data.as_bytes()).await,
        ClientFrame::Resize { .. } if let Some(refusal) = resize_refusal => {
            return Some(error_frame(refusal.clone()));
        }
        ClientFrame::Resize { cols, rows, data } => {
            let size = ptyhub_protocol::live::resize_size(cols, rows, data)
                .and_then(|(cols, rows)| TermSize::new(cols, rows));
            match size {
                Ok(size) => connection.resize(size.cols, size.rows).await,
                Err(error) => Err(error.into()),
            }
        }
        ClientFrame::LeaseTake { force } => connection.take_lease(force),
        ClientFrame::LeaseRelease => connection.release_lease(),
        ClientFrame::Ping { timestamp } => {
            return Some(frame_message(&ServerFrame::Pong { timestamp }));
        }
        // `Live::on_message` starts exec frames itself, beside the connection.
        ClientFrame::Exec { .. } => {
            return Some(error_frame(ApiError::internal("exec frame misrouted")));
        }
    };
    outcome.err().map(error_frame)
}

/// Turns a frame into messages; the second value is set when the connection closes after.
fn encode(
    frame: &LiveFrame,
    transport: LiveTransport,
    text: &mut TextFramer,
    session_id: &str,
) -> (Vec<Message>, Option<Message>) {
    let mut messages = Vec::new();
    let mut close = None;
    match frame {
        LiveFrame::Output {
            data,
            seq,
            is_replay,
        } => match transport {
            LiveTransport::Binary => messages.push(Message::Binary(data.clone())),
            LiveTransport::Json => messages.extend(text.push(data, *seq, *is_replay)),
        },
        other => {
            messages.extend(text.flush().map(|(message, _)| message));
            let wire = match other {
                LiveFrame::Restored { seq } => ServerFrame::TerminalRestored {
                    session_id: session_id.to_owned(),
                    seq: *seq,
                },
                LiveFrame::Resize { cols, rows, seq } => ServerFrame::Resize {
                    cols: *cols,
                    rows: *rows,
                    seq: *seq,
                },
                LiveFrame::Lagged { seq } => ServerFrame::Lagged { seq: *seq },
                LiveFrame::Exit {
                    exit_code,
                    signal,
                    seq,
                } => {
                    close = Some(close_message(1000, "exited"));
                    ServerFrame::Exit {
                        exit_code: *exit_code,
                        signal: *signal,
                        seq: *seq,
                    }
                }
                LiveFrame::Replaced => {
                    close = Some(close_message(1000, "relay replaced"));
                    ServerFrame::RelayReplaced
                }
                LiveFrame::Failed(error) => {
                    close = Some(close_message(1011, "failed"));
                    WireError::new(error.clone(), Surface::WebSocket).frame()
                }
                LiveFrame::Presence(presence) => ServerFrame::Presence(presence.clone()),
                LiveFrame::Output { .. } => return (messages, close),
            };
            messages.push(frame_message(&wire));
        }
    }
    (messages, close)
}

/// JSON frames carry text: output that ends inside a UTF-8 character is held (whole, so its
/// `seq` stays exact) until the rest arrives, or for [`SPLIT_CHARACTER_WAIT`] at most.
#[derive(Default)]
struct TextFramer {
    held: Vec<u8>,
    seq: Seq,
    is_replay: bool,
    since: Option<Instant>,
}

impl TextFramer {
    /// Output for a frame; `None` while it ends inside a character. Replay and live output
    /// never mix in one frame (`terminal_restored` flushes between them).
    fn push(&mut self, data: &[u8], seq: Seq, is_replay: bool) -> Option<Message> {
        self.held.extend_from_slice(data);
        self.seq = seq;
        self.is_replay = is_replay;
        if incomplete_utf8_tail(&self.held) > 0 {
            self.since.get_or_insert_with(Instant::now);
            return None;
        }
        self.since = None;
        let held = std::mem::take(&mut self.held);
        Some(self.message(&held))
    }

    fn message(&self, bytes: &[u8]) -> Message {
        let data = String::from_utf8_lossy(bytes).into_owned();
        let seq = self.seq;
        frame_message(&if self.is_replay {
            ServerFrame::RestoreOutput { data, seq }
        } else {
            ServerFrame::Output { data, seq }
        })
    }

    fn is_holding(&self) -> bool {
        !self.held.is_empty()
    }

    fn flush_at(&self) -> Option<Instant> {
        self.since.map(|since| since + SPLIT_CHARACTER_WAIT)
    }

    /// Sends what is held as it is (a split character becomes U+FFFD).
    fn flush(&mut self) -> Option<(Message, Seq)> {
        self.since = None;
        if self.held.is_empty() {
            return None;
        }
        let held = std::mem::take(&mut self.held);
        Some((self.message(&held), self.seq))
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_split_across_events_arrives_whole() {
        let mut framer = TextFramer::default();
        let euro = "€".as_bytes();
        assert!(framer.push(&[b'a', euro[0]], Seq(1), false).is_none());
        assert!(framer.is_holding());
        let Some(Message::Text(text)) = framer.push(&euro[1..], Seq(2), false) else {
            panic!("expected a text frame");
        };
        assert_eq!(text.as_str(), r#"{"type":"output","data":"a€","seq":2}"#);
        assert!(!framer.is_holding());
    }
}
