//! The holder's subscribers: accepting connections on its socket, reading their request lines,
//! and feeding each from the event log at its own offset, and the requests that mean the same
//! in both holder loops (the PTY one and the tmux control-mode one): `hello`, `subscribe`,
//! and the `pty.input` event of an `input`. What the other requests do is each loop's (the PTY
//! loop keeps an exec's `note` for the input after it; tmux's logs it at once, `log_note`).

use std::io::{self, Write};
use std::os::unix::net::{UnixListener, UnixStream};

use ptyhub_protocol::event::{CommandNote, EventKind, InputEvent, InputSource, Seq};
use ptyhub_protocol::holder::{
    HOLDER_LINE_MAX_BYTES, HOLDER_PROTOCOL_MIN, HOLDER_PROTOCOL_VERSION, HolderMessage,
    HolderRequest, pick_version,
};

use super::log_writer::LogWriter;
use crate::event_log::EventLog;

/// A subscriber's send buffer is refilled from the log when it holds less than this.
const CLIENT_FILL_BYTES: usize = 256 * 1024;

pub(super) struct Client {
    pub(super) stream: UnixStream,
    inbox: Vec<u8>,
    outbox: Vec<u8>,
    sent: usize,
    /// Global log offset up to which events were queued, once subscribed. Offsets stay valid
    /// across rotations; one that was deleted continues at the oldest kept event.
    pub(super) cursor: Option<u64>,
    pub(super) is_dead: bool,
    /// The server types into the PTY itself and sends its `typed` requests here (the
    /// connection it was given the master on).
    pub(super) is_typist: bool,
}

impl Client {
    /// A client on `stream`, which is non-blocking: nothing read, nothing queued, not
    /// subscribed.
    pub(super) fn new(stream: UnixStream) -> Self {
        Self {
            stream,
            inbox: Vec::new(),
            outbox: Vec::new(),
            sent: 0,
            cursor: None,
            is_dead: false,
            is_typist: false,
        }
    }

    /// Answers `hello` (the server speaks `version..=max_version`, or `version` alone): the
    /// protocol this holder picked, its pid and newest `seq`. With no version in common it
    /// answers its own newest, and the server stops there; `claim` (the spec's
    /// `protocol_claim`) replaces the pick.
    pub(super) fn answer_hello(
        &mut self,
        version: u32,
        max_version: Option<u32>,
        claim: Option<u32>,
        log: &EventLog,
    ) {
        let offered_max = max_version.unwrap_or(version);
        let picked = pick_version(
            version,
            offered_max,
            HOLDER_PROTOCOL_MIN,
            HOLDER_PROTOCOL_VERSION,
        );
        self.send_message(&HolderMessage::Hello {
            version: claim.or(picked).unwrap_or(HOLDER_PROTOCOL_VERSION),
            holder_pid: std::process::id(),
            last_seq: log.last_seq(),
        });
    }

    /// Subscribes to the log's events after `after_seq` (and says at once if the log refuses
    /// appends).
    pub(super) fn subscribe(&mut self, after_seq: Seq, log: &LogWriter) {
        match log.offset_after(after_seq) {
            Ok(offset) => self.cursor = Some(offset),
            Err(error) => self.send_message(&HolderMessage::Error {
                message: format!("cannot read the event log: {error}"),
            }),
        }
        if log.is_refusing() {
            self.send_message(&log.storage_message());
        }
    }

    /// Answers what both holder loops answer alike (`hello`, `subscribe`) and hands any
    /// other request back to the loop.
    pub(super) fn answer_common(
        &mut self,
        request: HolderRequest,
        claim: Option<u32>,
        log: &LogWriter,
    ) -> Option<HolderRequest> {
        match request {
            HolderRequest::Hello {
                version,
                max_version,
            } => self.answer_hello(version, max_version, claim, log),
            HolderRequest::Subscribe { after_seq } => self.subscribe(after_seq, log),
            other => return Some(other),
        }
        None
    }

    pub(super) fn pending(&self) -> usize {
        self.outbox.len() - self.sent
    }

    pub(super) fn send_message(&mut self, message: &HolderMessage) {
        if serde_json::to_writer(&mut self.outbox, message).is_ok() {
            self.outbox.push(b'\n');
        }
    }

    /// Sends `message` now with `fds` attached (`SCM_RIGHTS`), when nothing else waits to be
    /// sent before it (else, or when the socket refuses, the message is not sent and false is
    /// returned). What the socket did not take of the line is queued after it.
    pub(super) fn send_with_fds(
        &mut self,
        message: &HolderMessage,
        fds: &[std::os::fd::BorrowedFd<'_>],
    ) -> bool {
        use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        if self.pending() > 0 {
            return false;
        }
        let Ok(mut line) = serde_json::to_vec(message) else {
            return false;
        };
        line.push(b'\n');
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(fds)) {
            return false;
        }
        match rustix::net::sendmsg(
            &self.stream,
            &[io::IoSlice::new(&line)],
            &mut control,
            SendFlags::NOSIGNAL,
        ) {
            Ok(sent) => {
                self.outbox.extend_from_slice(&line[sent..]);
                true
            }
            Err(_) => false,
        }
    }

    /// Whether everything queued was sent and the cursor reached the log's end `log_len`.
    pub(super) fn is_caught_up(&self, log_len: u64) -> bool {
        self.pending() == 0 && self.cursor.is_none_or(|at| at >= log_len)
    }
}

/// Lets go of the send buffers of subscribers that have sent everything (an idle holder keeps
/// no buffer sized for its last burst; the next one allocates anew).
pub(super) fn release_idle_buffers(clients: &mut [Client]) {
    for client in clients {
        if client.pending() == 0 {
            client.outbox = Vec::new();
            client.sent = 0;
        }
    }
}

/// Accepts every pending connection.
pub(super) fn accept(listener: &UnixListener, clients: &mut Vec<Client>) {
    while let Ok((stream, _)) = listener.accept() {
        if stream.set_nonblocking(true).is_ok() {
            clients.push(Client::new(stream));
        }
    }
}

/// What a read of a subscriber's socket takes at least room for: a request line is mostly
/// far smaller, and a longer one (typed input) takes a few reads.
const CLIENT_READ_BYTES: usize = 4096;

/// Reads what the client sent and returns its complete request lines; a line longer than the
/// protocol allows ends the client. The bytes go straight into the client's inbox (no buffer
/// of its own to zero and copy from), which is let go once it holds no partial line.
pub(super) fn read_lines(client: &mut Client) -> Vec<Vec<u8>> {
    loop {
        client.inbox.reserve(CLIENT_READ_BYTES);
        let room = client.inbox.capacity() - client.inbox.len();
        match rustix::io::read(
            &client.stream,
            rustix::buffer::spare_capacity(&mut client.inbox),
        ) {
            Ok(0) => {
                client.is_dead = true;
                break;
            }
            // Less than there was room for: the socket is empty for now, and the next poll
            // says when it is not (no read that only finds nothing).
            Ok(n) if n < room => break,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => break,
            Err(_) => {
                client.is_dead = true;
                break;
            }
        }
    }
    let mut consumed = 0;
    let mut lines = Vec::new();
    for line in client.inbox.split_inclusive(|&b| b == b'\n') {
        if line.last() != Some(&b'\n') {
            break;
        }
        consumed += line.len();
        lines.push(line.to_vec());
    }
    if consumed == client.inbox.len() {
        client.inbox = Vec::new();
    } else {
        client.inbox.drain(..consumed);
    }
    if client.inbox.len() > HOLDER_LINE_MAX_BYTES {
        client.send_message(&HolderMessage::Error {
            message: "request line too long".to_owned(),
        });
        client.inbox = Vec::new();
        client.is_dead = true;
    }
    lines
}

/// Tops up every subscriber from the log and writes what its socket takes; drops dead ones.
pub(super) fn serve(clients: &mut Vec<Client>, log: &EventLog) {
    let log_len = log.len();
    for client in clients.iter_mut() {
        if client.is_dead {
            continue;
        }
        while let Some(at) = client.cursor
            && at < log_len
            && client.pending() < CLIENT_FILL_BYTES
        {
            match log.read_lines(at, CLIENT_FILL_BYTES, &mut client.outbox) {
                Ok(next) if next > at => client.cursor = Some(next),
                _ => break,
            }
        }
        while client.pending() > 0 {
            match client.stream.write(&client.outbox[client.sent..]) {
                Ok(n) => client.sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    client.is_dead = true;
                    break;
                }
            }
        }
        if client.sent == client.outbox.len() {
            client.outbox.clear();
            client.sent = 0;
        } else if client.sent > CLIENT_FILL_BYTES {
            client.outbox.drain(..client.sent);
            client.sent = 0;
        }
    }
    clients.retain(|c| !c.is_dead);
}

/// Logs a `command.note`, with the program's working directory (`cwd`) when the note names
/// none.
pub(super) fn log_note(log: &mut LogWriter, mut note: CommandNote, cwd: impl FnOnce() -> String) {
    if note.cwd.is_none() {
        note.cwd = Some(cwd());
    }
    log.append(EventKind::CommandNote(note));
}

/// Logs typed bytes as a `pty.input` event with who typed them; only their count when the
/// terminal hides what is typed (`is_hidden`: a password prompt). Nothing for no bytes (a
/// request that only discards unread input).
pub(super) fn log_input(
    log: &mut LogWriter,
    data: &[u8],
    source: Option<&InputSource>,
    is_hidden: bool,
) {
    if !data.is_empty() {
        log.append(EventKind::Input(InputEvent::new(data, source, is_hidden)));
    }
}

/// Tells every subscriber when the log began or stopped refusing appends.
pub(super) fn announce_storage(clients: &mut [Client], log: &mut LogWriter) {
    if let Some(message) = log.take_change() {
        for client in clients.iter_mut().filter(|c| c.cursor.is_some()) {
            client.send_message(&message);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client_pair() -> (Client, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap_or_else(|e| panic!("pair: {e}"));
        ours.set_nonblocking(true)
            .unwrap_or_else(|e| panic!("nonblocking: {e}"));
        (Client::new(ours), theirs)
    }

    #[test]
    fn whole_lines_are_returned_and_a_partial_one_waits_for_its_end() {
        let (mut client, mut peer) = client_pair();
        peer.write_all(b"{\"a\":1}\n{\"b\":2}\n{\"c\"")
            .unwrap_or_else(|e| panic!("write: {e}"));
        let lines = read_lines(&mut client);
        assert_eq!(
            lines,
            vec![b"{\"a\":1}\n".to_vec(), b"{\"b\":2}\n".to_vec()]
        );
        assert!(!client.is_dead);
        assert_eq!(read_lines(&mut client), Vec::<Vec<u8>>::new());
        // A line longer than one read's room arrives whole.
        let long = vec![b'x'; 3 * CLIENT_READ_BYTES + 17];
        peer.write_all(b":3}\n")
            .unwrap_or_else(|e| panic!("write: {e}"));
        peer.write_all(&long)
            .unwrap_or_else(|e| panic!("write: {e}"));
        peer.write_all(b"\n")
            .unwrap_or_else(|e| panic!("write: {e}"));
        let lines = read_lines(&mut client);
        assert_eq!(lines.len(), 2, "{:?}", lines.first());
        assert_eq!(lines[0], b"{\"c\":3}\n".to_vec());
        assert_eq!(lines[1].len(), long.len() + 1);
        assert!(client.inbox.is_empty() && client.inbox.capacity() == 0);
        drop(peer);
        assert!(read_lines(&mut client).is_empty());
        assert!(client.is_dead, "the peer's close ends the client");
    }

    #[test]
    fn a_line_longer_than_the_protocol_allows_ends_the_client() {
        let (mut client, peer) = client_pair();
        let writer = std::thread::spawn(move || {
            let mut peer = peer;
            let chunk = vec![b'x'; 64 * 1024];
            let mut sent = 0;
            while sent <= HOLDER_LINE_MAX_BYTES {
                if peer.write_all(&chunk).is_err() {
                    break;
                }
                sent += chunk.len();
            }
        });
        while !client.is_dead {
            assert!(read_lines(&mut client).is_empty());
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(client.inbox.is_empty());
        let error = String::from_utf8_lossy(&client.outbox).into_owned();
        assert!(error.contains("request line too long"), "{error}");
        drop(client);
        writer.join().unwrap_or_else(|_| panic!("writer panicked"));
    }
}
