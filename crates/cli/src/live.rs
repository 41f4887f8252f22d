//! `ptyhub terminal watch` and `attach`: a live connection (docs/websocket.md) between the
//! local terminal and a ptyhub terminal, as a peer of every other connection.
//!
//! Both put the local terminal in raw mode for as long as they run and restore it on every
//! way out (detach, the terminal's exit, a dropped connection, an error). `watch` never
//! writes: what is typed is read and dropped (a detach key or ^C ends it), so neither keys nor
//! the local terminal's answers to queries ever reach the program. `attach` forwards every
//! key but the detach key, and keeps the terminal's size equal to the local one.
//!
//! A server that stops (a restart, an upgrade) says why and up to which `seq` this client has
//! every byte (docs/websocket.md, `server_stopping`): the reason is printed on stderr, and the
//! session reconnects with `since_seq` (raw mode, keys and screen stay as they are), so the
//! output continues exactly where it stopped. A connection that is lost without that word
//! ends the session as before.
//!
//! Keys and output move on their own threads: a local terminal (or pipe) that takes output
//! slowly, or not at all, holds back only the output (the connection is then read no
//! further, and the server holds the rest), never the keys, so ^C and the detach key always
//! get through.

#![allow(clippy::print_stderr, reason = "status lines go to the local terminal")]

use std::io::Write as _;
use std::os::fd::AsFd;

use std::os::fd::OwnedFd;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use ptyhub_client::{Client, ClientError, LiveMessage, LiveSocket};
use ptyhub_protocol::error::ErrorCode;
use ptyhub_protocol::event::Seq;
use ptyhub_protocol::live::{ClientFrame, ServerFrame};
use rustix::event::{EventfdFlags, PollFd, PollFlags};
use rustix::termios::{self, OptionalActions, Termios};
use tokio::sync::mpsc;

/// The detach key unless `--detach-key` says otherwise: Ctrl-] (as telnet and dtach use).
pub const DETACH_KEY_DEFAULT: &str = "ctrl-]";

/// Parses `ctrl-X` (or a single character) into the byte the terminal sends.
pub fn parse_detach_key(spec: &str) -> Result<u8, String> {
    let lower = spec.to_ascii_lowercase();
    let key = match lower
        .strip_prefix("ctrl-")
        .or_else(|| lower.strip_prefix("c-"))
    {
        Some(rest) if rest.len() == 1 => {
            let c = rest.as_bytes()[0];
            match c {
                b'a'..=b'z' => c - b'a' + 1,
                b'@' => 0,
                b'[' | b'\\' | b']' | b'^' | b'_' => c - b'@',
                _ => return Err(format!("no control key for {spec:?}")),
            }
        }
        None if spec.len() == 1 => spec.as_bytes()[0],
        _ => {
            return Err(format!(
                "detach key must look like ctrl-] or ctrl-q, not {spec:?}"
            ));
        }
    };
    Ok(key)
}

/// Restores the local terminal's modes when dropped.
struct RawMode {
    saved: Option<Termios>,
}

impl RawMode {
    fn enter() -> Self {
        let stdin = std::io::stdin();
        let Ok(saved) = termios::tcgetattr(stdin.as_fd()) else {
            return Self { saved: None }; // not a terminal: nothing to change or restore
        };
        let mut raw = saved.clone();
        raw.make_raw();
        if termios::tcsetattr(stdin.as_fd(), OptionalActions::Now, &raw).is_err() {
            return Self { saved: None };
        }
        Self { saved: Some(saved) }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            let _ = termios::tcsetattr(std::io::stdin().as_fd(), OptionalActions::Now, saved);
        }
    }
}

/// Reads keys on a thread that only reads once `poll` says a read will not block, and that
/// can be stopped: when the session ends, no key typed afterwards is swallowed by a read
/// still waiting (what a blocking reader on stdin would do).
struct Keys {
    received: mpsc::Receiver<Vec<u8>>,
    stop: OwnedFd,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Keys {
    fn start() -> std::io::Result<Self> {
        let stop = rustix::event::eventfd(0, EventfdFlags::CLOEXEC)?;
        let stop_seen = stop.try_clone()?;
        let (sender, received) = mpsc::channel(16);
        let thread = std::thread::Builder::new()
            .name("keys".to_owned())
            .spawn(move || {
                let stdin = std::io::stdin();
                let mut buf = [0u8; 4096];
                loop {
                    let mut fds = [
                        PollFd::new(&stdin, PollFlags::IN),
                        PollFd::new(&stop_seen, PollFlags::IN),
                    ];
                    if rustix::event::poll(&mut fds, None).is_err() {
                        continue;
                    }
                    if !fds[1].revents().is_empty() {
                        return;
                    }
                    if fds[0].revents().is_empty() {
                        continue;
                    }
                    match rustix::io::read(&stdin, &mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if sender.blocking_send(buf[..n].to_vec()).is_err() {
                                return;
                            }
                        }
                    }
                }
            })?;
        Ok(Self {
            received,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let _ = rustix::io::write(&self.stop, &1u64.to_ne_bytes());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Chunks of output queued for the local terminal at most; beyond them the connection is
/// read no further until the local terminal takes some.
const OUTPUT_CHUNKS_QUEUED: usize = 64;
/// How long the last output (and the reset of the local terminal's modes) may take to go
/// out at the end; a local terminal that takes nothing does not keep the client alive.
const OUTPUT_DRAIN: std::time::Duration = std::time::Duration::from_secs(1);
/// How long a detaching client waits for the server's close after its own.
const CLOSE_HANDSHAKE_MAX: std::time::Duration = std::time::Duration::from_secs(2);

/// The thread that writes output to stdout, in order.
struct Screen {
    queue: mpsc::Sender<Vec<u8>>,
    /// Told when the thread ends: stdout failed, or the queue was closed and written.
    done: mpsc::Receiver<()>,
}

impl Screen {
    fn start() -> std::io::Result<Self> {
        let (queue, mut chunks) = mpsc::channel::<Vec<u8>>(OUTPUT_CHUNKS_QUEUED);
        let (finished, done) = mpsc::channel(1);
        std::thread::Builder::new()
            .name("screen".to_owned())
            .spawn(move || {
                let mut stdout = std::io::stdout();
                while let Some(chunk) = chunks.blocking_recv() {
                    if stdout
                        .write_all(&chunk)
                        .and_then(|()| stdout.flush())
                        .is_err()
                    {
                        break;
                    }
                }
                let _ = finished.blocking_send(());
            })?;
        Ok(Self { queue, done })
    }

    /// Queues the last bytes, then gives the thread [`OUTPUT_DRAIN`] to write everything.
    async fn finish(self, last: &[u8]) {
        let Self { queue, mut done } = self;
        let _ = tokio::time::timeout(OUTPUT_DRAIN, async move {
            let _ = queue.send(last.to_vec()).await;
            drop(queue);
            done.recv().await
        })
        .await;
    }
}

/// The local terminal's size, if stdout is one.
fn local_size() -> Option<(u16, u16)> {
    let size = termios::tcgetwinsize(std::io::stdout().as_fd()).ok()?;
    (size.ws_col > 0 && size.ws_row > 0).then_some((size.ws_col, size.ws_row))
}

/// Leaves modes a program may have set on the local terminal (alternate screen, hidden
/// cursor, bracketed paste, mouse reporting, colours).
const LOCAL_RESET: &[u8] =
    b"\x1b[0m\x1b[?1049l\x1b[?25h\x1b[?2004l\x1b[?1000l\x1b[?1002l\x1b[?1006l\x1b[?1l\x1b>";

pub struct LiveArgs {
    pub terminal: String,
    pub is_watch: bool,
    pub detach_key: u8,
    pub replay_bytes: usize,
    pub since_seq: Option<u64>,
}

type LiveSink = SplitSink<LiveSocket, LiveMessage>;
type LiveStream = SplitStream<LiveSocket>;

/// How long a session waits for a stopped server to come back, and how often it tries.
const RECONNECT_FOR: std::time::Duration = std::time::Duration::from_secs(60);
const RECONNECT_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// The connection's path: a replay from `since_seq` when given, else the restore.
fn live_path(args: &LiveArgs, since_seq: Option<u64>) -> String {
    let mode = if args.is_watch { "watch" } else { "attach" };
    let replay = match since_seq {
        Some(seq) => format!("since_seq={seq}"),
        None => format!("restore=true&replay_bytes={}", args.replay_bytes),
    };
    format!(
        "/v2/pty/sessions/{}/ws?mode={mode}&protocol=binary&{replay}",
        args.terminal
    )
}

/// Connects and waits for `ready`: the first frame says whether the terminal took us or why
/// not (`error`).
async fn open(client: &Client, path: &str) -> Result<(LiveSink, LiveStream), ClientError> {
    let socket = client.websocket(path).await?;
    let (sink, mut stream) = socket.split();
    loop {
        match stream.next().await {
            Some(Ok(LiveMessage::Text(text))) => match parse_frame(text.as_str()) {
                Some(ServerFrame::Ready { .. }) => return Ok((sink, stream)),
                Some(frame @ ServerFrame::Error { .. }) => {
                    if let Some(error) = frame.as_error() {
                        return Err(ClientError::Api(error));
                    }
                }
                _ => {}
            },
            Some(Ok(_)) => {}
            Some(Err(error)) => return Err(ClientError::Http(error.to_string())),
            None => {
                return Err(ClientError::Http(
                    "the server closed the connection".to_owned(),
                ));
            }
        }
    }
}

/// Connects again after the server stopped, until one answers or [`RECONNECT_FOR`] passes; a
/// refusal by the terminal itself (it is gone, say) ends the wait at once.
async fn reopen(client: &Client, path: &str) -> Result<(LiveSink, LiveStream), String> {
    let deadline = tokio::time::Instant::now() + RECONNECT_FOR;
    loop {
        match open(client, path).await {
            Ok(opened) => return Ok(opened),
            Err(ClientError::Api(error)) => {
                return Err(format!("{}: {}", error.code, error.message));
            }
            Err(error) if tokio::time::Instant::now() >= deadline => {
                return Err(format!("the server did not come back: {error}"));
            }
            Err(_) => tokio::time::sleep(RECONNECT_EVERY).await,
        }
    }
}

/// Runs a live session; returns the exit status for the shell.
pub async fn run(client: &Client, args: LiveArgs) -> Result<i32, ClientError> {
    let mode = if args.is_watch { "watch" } else { "attach" };
    // Only once the terminal took us does the local terminal change.
    let (mut sink, mut stream) = open(client, &live_path(&args, args.since_seq)).await?;
    let raw = RawMode::enter();
    let key_name = detach_key_name(args.detach_key);
    eprint!(
        "[ptyhub: {mode} {} — {key_name} to detach]\r\n",
        args.terminal
    );
    let mut winch = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
        .map_err(|e| ClientError::Http(format!("cannot watch the window size: {e}")))?;
    if !args.is_watch
        && let Some((cols, rows)) = local_size()
    {
        let _ = sink.send(resize_frame(cols, rows)).await;
    }
    let mut keys =
        Keys::start().map_err(|e| ClientError::Http(format!("cannot read the keyboard: {e}")))?;
    let mut screen =
        Screen::start().map_err(|e| ClientError::Http(format!("cannot write the screen: {e}")))?;
    let mut is_stdin_open = true;
    // Output the screen thread has no room for yet: the connection waits until it has.
    let mut held: Option<Vec<u8>> = None;
    // What the server said when it stopped: why, and up to where this client has every byte.
    let mut stopping: Option<(String, Option<Seq>)> = None;
    let outcome = 'session: loop {
        let outcome = loop {
            tokio::select! {
                permit = screen.queue.reserve(), if held.is_some() => match permit {
                    Ok(permit) => permit.send(held.take().unwrap_or_default()),
                    Err(_) => break Outcome::Ended("the local output closed".to_owned(), 1),
                },
                _ = screen.done.recv() => {
                    break Outcome::Ended("the local output closed".to_owned(), 1);
                }
                message = stream.next(), if held.is_none() => match message {
                    Some(Ok(LiveMessage::Binary(bytes))) => {
                        match screen.queue.try_send(bytes.to_vec()) {
                            Ok(()) => {}
                            Err(mpsc::error::TrySendError::Full(bytes)) => held = Some(bytes),
                            Err(mpsc::error::TrySendError::Closed(_)) => {
                                break Outcome::Ended("the local output closed".to_owned(), 1);
                            }
                        }
                    }
                    Some(Ok(LiveMessage::Text(text))) => match parse_frame(text.as_str()) {
                        Some(ServerFrame::ServerStopping { reason, seq }) => {
                            stopping = Some((reason, seq));
                        }
                        _ => if let Some(outcome) = control_frame(text.as_str()) {
                            break outcome;
                        },
                    },
                    Some(Ok(LiveMessage::Close(_))) | None => {
                        match stopping.take() {
                            Some((reason, seq)) => break Outcome::Stopped(reason, seq),
                            None => break Outcome::Ended("the connection closed".to_owned(), 1),
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(error)) => break Outcome::Ended(format!("connection lost: {error}"), 1),
                },
                read = keys.received.recv(), if is_stdin_open => match read {
                    None => {
                        // No more keys (stdin is not a terminal or was closed): watch on.
                        is_stdin_open = false;
                    }
                    Some(typed) => {
                        let n = typed.len();
                        let detach_at = typed.iter().position(|&b| {
                            b == args.detach_key || (args.is_watch && b == 0x03)
                        });
                        let forward = &typed[..detach_at.unwrap_or(n)];
                        if !args.is_watch && !forward.is_empty() {
                            let _ = sink.send(LiveMessage::Binary(forward.to_vec().into())).await;
                        }
                        if detach_at.is_some() {
                            break Outcome::Detached;
                        }
                    }
                },
                _ = winch.recv() => {
                    if !args.is_watch && let Some((cols, rows)) = local_size() {
                        let _ = sink.send(resize_frame(cols, rows)).await;
                    }
                }
            }
        };
        let Outcome::Stopped(reason, seq) = outcome else {
            break 'session outcome;
        };
        // The server stopped and said why: say it, and resume exactly where it stopped once a
        // server answers again. The detach key still works meanwhile; other keys wait and are
        // sent once connected again.
        eprint!("\r\n[ptyhub: {reason}; reconnecting]\r\n");
        let path = live_path(&args, seq.map(|seq| seq.0).or(args.since_seq));
        let mut typed_meanwhile = Vec::new();
        let reopened = loop {
            tokio::select! {
                reopened = reopen(client, &path) => break Some(reopened),
                read = keys.received.recv(), if is_stdin_open => match read {
                    Some(typed) => {
                        let detach_at = typed.iter().position(|&b| {
                            b == args.detach_key || (args.is_watch && b == 0x03)
                        });
                        typed_meanwhile.extend_from_slice(&typed[..detach_at.unwrap_or(typed.len())]);
                        if detach_at.is_some() {
                            break None;
                        }
                    }
                    None => is_stdin_open = false,
                },
            }
        };
        match reopened {
            None => break 'session Outcome::Detached,
            Some(Err(why)) => break 'session Outcome::Ended(why, 1),
            Some(Ok((new_sink, new_stream))) => {
                (sink, stream) = (new_sink, new_stream);
                eprint!("[ptyhub: {mode} {} again]\r\n", args.terminal);
                if !args.is_watch {
                    if let Some((cols, rows)) = local_size() {
                        let _ = sink.send(resize_frame(cols, rows)).await;
                    }
                    if !typed_meanwhile.is_empty() {
                        let _ = sink.send(LiveMessage::Binary(typed_meanwhile.into())).await;
                    }
                }
            }
        }
    };
    drop(keys);
    let _ = sink.send(LiveMessage::Close(None)).await;
    // The closing handshake, briefly: a socket closed with frames unread is reset by the
    // kernel, which then discards keys not yet sent (docs/websocket.md).
    let _ = tokio::time::timeout(CLOSE_HANDSHAKE_MAX, async {
        while let Some(Ok(_)) = stream.next().await {}
    })
    .await;
    if let Some(bytes) = held {
        let _ = screen.queue.try_send(bytes);
    }
    screen.finish(LOCAL_RESET).await;
    drop(raw);
    Ok(match outcome {
        Outcome::Detached => {
            eprintln!("\n[ptyhub: detached from {}]", args.terminal);
            0
        }
        Outcome::Exited(code) => {
            eprintln!("\n[ptyhub: {} exited with code {code}]", args.terminal);
            0
        }
        Outcome::Ended(why, status) => {
            eprintln!("\n[ptyhub: {why}]");
            status
        }
        // A stop is followed by a reconnect above, so it never ends a session by itself.
        Outcome::Stopped(why, _) => {
            eprintln!("\n[ptyhub: {why}]");
            1
        }
    })
}

enum Outcome {
    Detached,
    Exited(i32),
    Ended(String, i32),
    /// The server stopped, saying why and up to where this client has every byte.
    Stopped(String, Option<Seq>),
}

/// A JSON frame from the server; `None` for one this client does not know.
fn parse_frame(text: &str) -> Option<ServerFrame> {
    serde_json::from_str(text).ok()
}

/// Acts on a JSON frame in binary mode; `Some` ends the session.
fn control_frame(text: &str) -> Option<Outcome> {
    match parse_frame(text)? {
        ServerFrame::Exit { exit_code, .. } => Some(Outcome::Exited(exit_code.unwrap_or(-1))),
        ServerFrame::Error { data, code } => {
            // A refused keystroke is not the end of a session; anything else is.
            let is_refused_key = matches!(
                code,
                ErrorCode::InvalidInput | ErrorCode::PermissionDenied | ErrorCode::Busy
            );
            (!is_refused_key).then(|| Outcome::Ended(format!("{code}: {data}"), 2))
        }
        ServerFrame::RelayReplaced => Some(Outcome::Ended(
            "replaced by another connection".to_owned(),
            1,
        )),
        _ => None,
    }
}

fn resize_frame(cols: u16, rows: u16) -> LiveMessage {
    LiveMessage::Text(ClientFrame::resize(cols, rows).to_text().into())
}

fn detach_key_name(key: u8) -> String {
    match key {
        0..=31 => format!("Ctrl-{}", char::from(key + b'@')),
        _ => char::from(key).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detach_keys_parse_to_control_bytes() {
        assert_eq!(parse_detach_key("ctrl-]"), Ok(0x1d));
        assert_eq!(parse_detach_key("Ctrl-Q"), Ok(0x11));
        assert_eq!(parse_detach_key("c-\\"), Ok(0x1c));
        assert_eq!(parse_detach_key("q"), Ok(b'q'));
        assert!(parse_detach_key("ctrl-1").is_err());
        assert!(parse_detach_key("meta-x").is_err());
        assert_eq!(detach_key_name(0x1d), "Ctrl-]");
    }
}
