//! The native backend's connection to one holder: a writer for requests and a cancel-safe
//! reader of the holder's lines ([`HolderLine`]).

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream as StdStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ptyhub_protocol::event::{CommandNote, InputSource, Seq};
use ptyhub_protocol::holder::{
    HOLDER_LINE_MAX_BYTES, HOLDER_PROTOCOL_MIN, HOLDER_PROTOCOL_VERSION, HolderLine, HolderMessage,
    HolderRequest,
};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::net::UnixStream;

use super::{BoxFuture, LineStream, RequestSink, command_requests};
use crate::typing_counter::TypingCounter;

/// Bytes asked of the socket in one read: the smallest (what an idle terminal's buffer holds at
/// most) and the largest (a flood's, reached by doubling while reads fill what was asked).
const READ_MIN_BYTES: usize = 8 * 1024;
const READ_MAX_BYTES: usize = 256 * 1024;

/// Requests are written to the socket as they come; only a write the socket cannot take at
/// once waits for room, through a registration of its own made for that wait.
///
/// The link's socket is registered for reading alone: a Unix socket tells every registration
/// that asked for writability each time its peer reads (the holder reading a request would
/// wake a runtime thread for nothing once per request).
pub struct HolderLink {
    writer: StdStream,
    /// The holder's socket, for the typing connection.
    socket: PathBuf,
    typist: Typist,
    /// A request the holder acts on without answering (a resize, a signal) went out after the
    /// last `input`: a command typed into the PTY now could run before the holder has acted
    /// on it (`stty size` would read the old size), so the next one goes through the holder,
    /// in order.
    has_unanswered_action: bool,
}

/// How long the holder may take to hand over its PTY's master.
const MASTER_WAIT: Duration = Duration::from_secs(2);

/// Largest note and `typed` record (as lines) sent on the typing connection: far below what a
/// Unix socket holds, so the write never waits. The holder reads that connection only once
/// the counter moved, which is after the write; a longer command goes through the holder.
const TYPED_RECORDS_MAX_BYTES: usize = 32 * 1024;

/// The server's own way into the PTY, asked for at the first exec: a connection of its own
/// to the holder, on which the holder gave the PTY's master and takes `typed` requests.
enum Typist {
    Unasked,
    /// The holder has none to give (tmux's, an older one, an exited program) or the
    /// connection broke: commands go through the holder.
    Refused,
    Ready {
        stream: StdStream,
        master: OwnedFd,
        /// Bumped once each `typed` record is sent, before its bytes are written.
        counter: TypingCounter,
    },
}

/// The holder's lines, read by the terminal's actor itself (no task or channel in between: one
/// wake-up less per event on the latency path).
///
/// Its buffer follows the traffic: reads grow from [`READ_MIN_BYTES`] to [`READ_MAX_BYTES`]
/// while they fill what they asked for and fall back once they do not, and a buffer emptied
/// outside a flood is let go, so an idle terminal holds no buffer here (docs/memory.md).
pub struct HolderLines {
    reader: AsyncFd<std::os::unix::net::UnixStream>,
    /// Bytes read and not returned yet: `buf[start..]`; no `\n` in `buf[start..scanned]`.
    buf: Vec<u8>,
    start: usize,
    scanned: usize,
    read_size: usize,
}

impl HolderLines {
    /// Reads `reader` (non-blocking), registered with the runtime for reading only.
    fn new(reader: std::os::unix::net::UnixStream) -> std::io::Result<Self> {
        Ok(Self {
            reader: register(reader, Interest::READABLE)?,
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            read_size: READ_MIN_BYTES,
        })
    }

    /// The next line, or `None` once the holder is gone. Cancel-safe: a read either completes
    /// into the buffer or takes nothing.
    pub async fn next(&mut self) -> Option<HolderLine> {
        loop {
            while let Some(at) = memchr::memchr(b'\n', &self.buf[self.scanned..]) {
                let end = self.scanned + at + 1;
                let parsed = HolderLine::parse(&self.buf[self.start..end]);
                self.start = end;
                self.scanned = end;
                if self.start == self.buf.len() {
                    self.let_go();
                }
                match parsed {
                    Ok(line) => return Some(line),
                    Err(error) => tracing::warn!(%error, "unreadable line from holder"),
                }
            }
            self.scanned = self.buf.len();
            if self.buf.len() - self.start > HOLDER_LINE_MAX_BYTES {
                return None;
            }
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.scanned -= self.start;
                self.start = 0;
            }
            self.buf.reserve(self.read_size);
            let asked = self.buf.capacity() - self.buf.len();
            match self.read_some().await {
                Ok(0) | Err(_) => return None,
                Ok(n) if n == asked => self.read_size = (self.read_size * 2).min(READ_MAX_BYTES),
                Ok(n) if n < self.read_size / 4 => self.read_size = READ_MIN_BYTES,
                Ok(_) => {}
            }
        }
    }

    /// Reads what the socket has into the buffer's spare room, once it has something.
    async fn read_some(&mut self) -> std::io::Result<usize> {
        loop {
            let mut ready = self.reader.readable().await?;
            let buf = &mut self.buf;
            let room = buf.capacity() - buf.len();
            match ready.try_io(|socket| {
                rustix::io::read(socket.get_ref(), rustix::buffer::spare_capacity(buf))
                    .map_err(std::io::Error::from)
            }) {
                Ok(read) => {
                    // Less than there was room for: the socket is empty, and the next read
                    // waits for the runtime to say otherwise instead of finding nothing
                    // (readiness that came since the wait began is kept).
                    if read.as_ref().is_ok_and(|&n| n > 0 && n < room) {
                        ready.clear_ready();
                    }
                    return read;
                }
                Err(_would_block) => {}
            }
        }
    }

    /// Empties the buffer (everything in it was returned). It is freed unless a flood is on
    /// (reads larger than the smallest, which the next read reuses): an idle terminal holds no
    /// buffer here.
    fn let_go(&mut self) {
        if self.read_size == READ_MIN_BYTES || self.buf.capacity() > 2 * self.read_size {
            self.buf = Vec::new();
        } else {
            self.buf.clear();
        }
        self.start = 0;
        self.scanned = 0;
    }
}

impl HolderLink {
    /// Connects, greets with the versions this server speaks, and subscribes from `after_seq`.
    /// Returns the link and the stream of lines (it ends when the holder goes away); the
    /// holder's `hello` answer, the first line, says which version it picked, and the actor
    /// checks it (`terminal/host.rs`). Nothing but `hello` and `subscribe` is sent before.
    pub async fn connect(socket: &Path, after_seq: Seq) -> std::io::Result<(Self, HolderLines)> {
        let reader = UnixStream::connect(socket).await?.into_std()?;
        let writer = reader.try_clone()?;
        let mut link = Self {
            writer,
            socket: socket.to_path_buf(),
            typist: Typist::Unasked,
            has_unanswered_action: false,
        };
        link.send(&HolderRequest::Hello {
            version: HOLDER_PROTOCOL_MIN,
            max_version: Some(HOLDER_PROTOCOL_VERSION),
        })
        .await?;
        link.send(&HolderRequest::Subscribe { after_seq }).await?;
        Ok((link, HolderLines::new(reader)?))
    }

    pub async fn send(&mut self, request: &HolderRequest) -> std::io::Result<()> {
        self.send_all(std::slice::from_ref(request)).await
    }

    /// Sends `requests` as one write: one line each.
    pub async fn send_all(&mut self, requests: &[HolderRequest]) -> std::io::Result<()> {
        for request in requests {
            match request {
                HolderRequest::Resize { .. }
                | HolderRequest::Signal { .. }
                | HolderRequest::SignalStartedSince { .. } => self.has_unanswered_action = true,
                // Answered once the holder took it, so after what was sent before: the
                // terminal's actor types nothing itself until then (`is_queue_clear`).
                HolderRequest::Input { .. } => self.has_unanswered_action = false,
                _ => {}
            }
        }
        write_all(&self.writer, &lines_of(requests)?).await
    }

    /// Types an exec's command into the PTY itself when it can: the holder was asked for the
    /// master (once), every input sent before was typed (`is_queue_clear`), the holder has
    /// acted on every resize and signal sent before (an `input` went after them and was
    /// answered: `has_unanswered_action` is false), the program left
    /// no output unread (so what it printed before the command is logged before it), and the
    /// command is short enough ([`TYPED_RECORDS_MAX_BYTES`]).
    /// The note and a `typed` request go to the holder first, then the bytes to the PTY;
    /// what the PTY does not take at once follows as an `input` the holder queues without
    /// logging it again. Returns whether the holder answers with an `input_result`.
    pub async fn type_command(
        &mut self,
        note: CommandNote,
        data: &[u8],
        source: Option<InputSource>,
        is_queue_clear: bool,
    ) -> std::io::Result<bool> {
        if is_queue_clear && matches!(self.typist, Typist::Unasked) {
            self.typist = match open_typist(&self.socket).await {
                Some((stream, master, counter)) => Typist::Ready {
                    stream,
                    master,
                    counter,
                },
                None => Typist::Refused,
            };
        }
        let typed = if is_queue_clear && !self.has_unanswered_action {
            self.type_into_pty(&note, data, source.as_ref()).await?
        } else {
            None
        };
        let requests = match typed {
            Some(written) if written == data.len() => return Ok(false),
            Some(written) => vec![HolderRequest::Input {
                data: data[written..].to_vec(),
                discard_unread: false,
                source,
                no_receipt: true,
                is_logged: true,
            }],
            None => command_requests(note, data, source).to_vec(),
        };
        self.send_all(&requests).await?;
        Ok(true)
    }

    /// Sends the note and a `typed` record on the typing connection, bumps the counter and
    /// writes the bytes to the PTY: how many it took at once, or `None` when this link cannot
    /// type now (no master, output waits unread, the records are too long, the connection
    /// broke).
    async fn type_into_pty(
        &mut self,
        note: &CommandNote,
        data: &[u8],
        source: Option<&InputSource>,
    ) -> std::io::Result<Option<usize>> {
        let Typist::Ready {
            stream,
            master,
            counter,
        } = &self.typist
        else {
            return Ok(None);
        };
        if !rustix::io::ioctl_fionread(master).is_ok_and(|n| n == 0) {
            return Ok(None);
        }
        // The holder reads the records when it next wakes, after the bytes are typed: where
        // the command starts is read here, before (the shell at its prompt is the terminal's
        // foreground group).
        let mut note = note.clone();
        if note.cwd.is_none() {
            note.cwd = rustix::termios::tcgetpgrp(master).ok().and_then(|shell| {
                u32::try_from(shell.as_raw_nonzero().get())
                    .ok()
                    .and_then(crate::process::cwd)
            });
        }
        let records = lines_of(&[
            HolderRequest::Note(note),
            HolderRequest::Typed {
                data: data.to_vec(),
                source: source.cloned(),
            },
        ])?;
        if records.len() > TYPED_RECORDS_MAX_BYTES {
            return Ok(None);
        }
        if let Err(error) = write_all(stream, &records).await {
            tracing::debug!(%error, "typing connection lost; typing through the holder");
            self.typist = Typist::Refused;
            return Ok(None);
        }
        counter.bump();
        Ok(Some(write_now(master, data)))
    }
}

/// `requests` as lines, one after the other.
fn lines_of(requests: &[HolderRequest]) -> std::io::Result<Vec<u8>> {
    let mut lines = Vec::new();
    for request in requests {
        serde_json::to_writer(&mut lines, request).map_err(std::io::Error::other)?;
        lines.push(b'\n');
    }
    Ok(lines)
}

/// Writes all of `bytes` to the non-blocking `socket`; only a write that finds it full waits
/// for room, through a registration for writing made for that wait.
async fn write_all(socket: &StdStream, bytes: &[u8]) -> std::io::Result<()> {
    let mut rest = bytes;
    while !rest.is_empty() {
        match rustix::io::write(socket, rest) {
            Ok(n) => rest = &rest[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => {
                let room = register(socket.try_clone()?, Interest::WRITABLE)?;
                drop(room.writable().await?);
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

/// Writes what the PTY takes of `data` now (its master is non-blocking): the count written.
fn write_now(master: &OwnedFd, data: &[u8]) -> usize {
    let mut written = 0;
    while written < data.len() {
        match rustix::io::write(master, &data[written..]) {
            Ok(n) => written += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
    }
    written
}

/// Asks the holder at `socket`, on a connection of its own, for its PTY's master: the
/// connection, the master and the typing counter, or `None` when it gives none (in time).
async fn open_typist(socket: &Path) -> Option<(StdStream, OwnedFd, TypingCounter)> {
    let asked = async {
        let stream = UnixStream::connect(socket).await?.into_std()?;
        write_all(&stream, &lines_of(&[HolderRequest::Master])?).await?;
        let registered = register(stream, Interest::READABLE)?;
        let mut line = Vec::new();
        let mut fds = Vec::new();
        loop {
            let mut ready = registered.readable().await?;
            let received = ready.try_io(|socket| receive_with_fds(socket.get_ref()));
            let Ok(received) = received else {
                continue;
            };
            let (bytes, more) = received?;
            if bytes.is_empty() && more.is_empty() {
                return std::io::Result::Ok(None);
            }
            line.extend_from_slice(&bytes);
            fds.extend(more);
            if let Some(end) = memchr::memchr(b'\n', &line) {
                let is_master = matches!(
                    HolderLine::parse(&line[..=end]),
                    Ok(HolderLine::Message(HolderMessage::Master))
                );
                let mut fds = fds.into_iter();
                return Ok(match (is_master, fds.next(), fds.next()) {
                    (true, Some(master), Some(counter)) => Some((
                        registered.into_inner(),
                        master,
                        TypingCounter::map(&counter)?,
                    )),
                    _ => None,
                });
            }
        }
    };
    match tokio::time::timeout(MASTER_WAIT, asked).await {
        Ok(Ok(typist)) => typist,
        Ok(Err(error)) => {
            tracing::debug!(%error, "no PTY master from the holder");
            None
        }
        Err(_) => None,
    }
}

/// One `recvmsg`: the bytes and the descriptors that came with them.
fn receive_with_fds(socket: &StdStream) -> std::io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut buf = [0u8; 512];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received = rustix::net::recvmsg(
        socket,
        &mut [std::io::IoSliceMut::new(&mut buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    Ok((buf[..received.bytes].to_vec(), fds))
}

/// Registers `socket` with the runtime for `interest` alone.
fn register(socket: StdStream, interest: Interest) -> std::io::Result<AsyncFd<StdStream>> {
    #[allow(
        unsafe_code,
        reason = "tokio's registration with an interest is an unsafe fn"
    )]
    // SAFETY: the AsyncFd owns the socket, so its descriptor stays open, and the same one,
    // until the AsyncFd is dropped.
    let registered = unsafe { AsyncFd::register_with_interest(socket, interest) };
    Ok(registered?)
}

impl RequestSink for HolderLink {
    fn send<'a>(&'a mut self, request: &'a HolderRequest) -> BoxFuture<'a, std::io::Result<()>> {
        Box::pin(HolderLink::send(self, request))
    }

    fn type_command<'a>(
        &'a mut self,
        note: CommandNote,
        data: &'a [u8],
        source: Option<InputSource>,
        is_queue_clear: bool,
    ) -> BoxFuture<'a, std::io::Result<bool>> {
        Box::pin(HolderLink::type_command(
            self,
            note,
            data,
            source,
            is_queue_clear,
        ))
    }

    fn send_all<'a>(
        &'a mut self,
        requests: &'a [HolderRequest],
    ) -> BoxFuture<'a, std::io::Result<()>> {
        Box::pin(HolderLink::send_all(self, requests))
    }
}

impl LineStream for HolderLines {
    fn next(&mut self) -> BoxFuture<'_, Option<HolderLine>> {
        Box::pin(HolderLines::next(self))
    }
}

#[cfg(test)]
mod tests {
    use ptyhub_protocol::event::{Event, EventKind, Seq};
    use tokio::io::AsyncWriteExt;

    use super::*;

    /// Lines split anywhere across writes, a flood of them and one larger than the largest
    /// read all come back whole and in order, and the buffer is let go once they are read.
    #[tokio::test]
    async fn lines_come_back_whole_whatever_the_reads() -> std::io::Result<()> {
        let (ours, theirs) = UnixStream::pair()?;
        let mut lines = HolderLines::new(ours.into_std()?)?;
        let sizes: Vec<usize> = (0..400)
            .map(|i| match i {
                7 => 3 * READ_MAX_BYTES,
                _ => (i * 7919) % 5000,
            })
            .collect();
        let mut bytes = Vec::new();
        for (i, size) in sizes.iter().enumerate() {
            let event = Event {
                seq: Seq(i as u64 + 1),
                ts: 0.0,
                kind: EventKind::Output {
                    data: vec![b'a' + (i % 26) as u8; *size],
                },
            };
            event
                .write_json_line(&mut bytes)
                .map_err(std::io::Error::other)?;
        }
        let writer = tokio::spawn(async move {
            let mut theirs = theirs;
            // Odd chunk sizes, so lines end mid-read and reads end mid-line.
            for chunk in bytes.chunks(12_289) {
                theirs.write_all(chunk).await?;
            }
            std::io::Result::Ok(())
        });
        for (i, size) in sizes.iter().enumerate() {
            match lines.next().await {
                Some(HolderLine::Event(event)) => {
                    assert_eq!(event.seq, Seq(i as u64 + 1));
                    match event.kind {
                        EventKind::Output { data } => assert_eq!(data.len(), *size),
                        other => panic!("event {i}: {other:?}"),
                    }
                }
                other => panic!("line {i}: {other:?}"),
            }
        }
        writer.await.map_err(std::io::Error::other)??;
        assert!(
            lines.buf.capacity() <= 2 * READ_MAX_BYTES,
            "{}",
            lines.buf.capacity()
        );
        assert!(
            lines.next().await.is_none(),
            "the holder's end ends the lines"
        );
        Ok(())
    }

    /// Each line alone, the reader waiting in between: a read that took less than it had room
    /// for ends the socket's readiness, and the next line still wakes it (none is lost, in
    /// either order of the write and the wait).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_line_after_a_short_read_wakes_the_reader() -> std::io::Result<()> {
        let (ours, mut theirs) = UnixStream::pair()?;
        let mut lines = HolderLines::new(ours.into_std()?)?;
        for i in 1..=200u64 {
            let mut bytes = Vec::new();
            let event = Event {
                seq: Seq(i),
                ts: 0.0,
                kind: EventKind::Output {
                    data: vec![b'x'; 10],
                },
            };
            event
                .write_json_line(&mut bytes)
                .map_err(std::io::Error::other)?;
            let wait = tokio::time::timeout(Duration::from_secs(10), lines.next());
            let write = async {
                if i % 2 == 0 {
                    tokio::task::yield_now().await;
                }
                theirs.write_all(&bytes).await
            };
            let (line, written) = tokio::join!(wait, write);
            written?;
            match line {
                Ok(Some(HolderLine::Event(event))) => assert_eq!(event.seq, Seq(i)),
                other => panic!("line {i}: {other:?}"),
            }
        }
        Ok(())
    }

    /// A request larger than the socket takes at once waits for the holder to read and
    /// arrives whole, after the greeting, on a link registered for reading only.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_the_socket_cannot_take_at_once_waits_for_room() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("holder.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path)?;
        let (mut link, _lines) = HolderLink::connect(&path, Seq(0)).await?;
        let (peer, _) = listener.accept()?;
        let data: Vec<u8> = (0..4 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
        let request = HolderRequest::Input {
            data: data.clone(),
            discard_unread: false,
            source: None,
            no_receipt: true,
            is_logged: false,
        };
        // The holder reads only after a pause: the write fills the socket and waits.
        let reader = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            let mut all = Vec::new();
            let mut peer = std::io::BufReader::new(peer);
            for _ in 0..3 {
                let mut line = Vec::new();
                std::io::BufRead::read_until(&mut peer, b'\n', &mut line)?;
                all.push(line);
            }
            std::io::Result::Ok(all)
        });
        link.send(&request).await?;
        let lines = reader
            .join()
            .map_err(|_| std::io::Error::other("reader panicked"))??;
        assert!(
            lines[0].starts_with(b"{\"op\":\"hello\""),
            "{:?}",
            String::from_utf8_lossy(&lines[0])
        );
        match serde_json::from_slice::<HolderRequest>(&lines[2])? {
            HolderRequest::Input { data: got, .. } => {
                assert!(got == data, "the input arrived changed")
            }
            other => panic!("{other:?}"),
        }
        Ok(())
    }

    /// A fake holder: it gives `master` (a PTY's, or any descriptor standing for one) and a
    /// typing counter on the typing connection, and reads what the server sends on both
    /// connections.
    struct FakeHolder {
        main: std::io::BufReader<StdStream>,
        typing: std::io::BufReader<StdStream>,
        master: OwnedFd,
        slave: OwnedFd,
        counter: TypingCounter,
    }

    fn line(reader: &mut std::io::BufReader<StdStream>) -> std::io::Result<HolderRequest> {
        let mut line = Vec::new();
        std::io::BufRead::read_until(reader, b'\n', &mut line)?;
        serde_json::from_slice(&line).map_err(std::io::Error::other)
    }

    /// Answers a typing connection's `master` on `listener` with `fds`.
    fn give_master(
        listener: &std::os::unix::net::UnixListener,
        fds: [std::os::fd::BorrowedFd<'_>; 2],
    ) -> std::io::Result<std::io::BufReader<StdStream>> {
        use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        let (stream, _) = listener.accept()?;
        let mut typing = std::io::BufReader::new(stream);
        assert_eq!(line(&mut typing)?, HolderRequest::Master);
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
        rustix::net::sendmsg(
            typing.get_ref(),
            &[std::io::IoSlice::new(b"{\"type\":\"master\"}\n")],
            &mut control,
            SendFlags::NOSIGNAL,
        )?;
        Ok(typing)
    }

    /// A link to a fake holder that gives `master`, after the server's first command (`data`,
    /// typed with note 1): the link, the holder, and whether that command waits for an answer.
    async fn typed_first(
        dir: &Path,
        master: OwnedFd,
        slave: OwnedFd,
        data: &[u8],
    ) -> std::io::Result<(HolderLink, FakeHolder, bool)> {
        use std::os::fd::AsFd;
        let path = dir.join("holder.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path)?;
        let (mut link, _lines) = HolderLink::connect(&path, Seq(0)).await?;
        let (main, _) = listener.accept()?;
        let mut main = std::io::BufReader::new(main);
        assert!(matches!(line(&mut main)?, HolderRequest::Hello { .. }));
        assert!(matches!(line(&mut main)?, HolderRequest::Subscribe { .. }));
        let counter = TypingCounter::create()?;
        let given = (
            master.try_clone()?,
            counter
                .fd()
                .ok_or_else(|| std::io::Error::other("no counter to give"))?
                .try_clone_to_owned()?,
        );
        // The link asks on its first command; the fake holder answers on a thread.
        let giver =
            std::thread::spawn(move || give_master(&listener, [given.0.as_fd(), given.1.as_fd()]));
        let expects_answer = link.type_command(note(1), data, None, true).await?;
        let typing = giver
            .join()
            .map_err(|_| std::io::Error::other("giver panicked"))??;
        let holder = FakeHolder {
            main,
            typing,
            master,
            slave,
            counter,
        };
        Ok((link, holder, expects_answer))
    }

    fn note(id: u64) -> CommandNote {
        CommandNote {
            id,
            origin: ptyhub_protocol::api::CommandOrigin::Exec,
            command: "echo hi".to_owned(),
            shell_text: None,
            cwd: None,
        }
    }

    /// With the master given, an exec's command goes into the PTY from the server, its note
    /// and a `typed` record on the typing connection first, and no answer is expected; with
    /// output left unread, a command too long for the typing connection, or input not all
    /// typed yet, it goes through the holder.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_command_is_typed_into_the_pty_when_the_holder_gave_its_master() -> std::io::Result<()>
    {
        let dir = tempfile::tempdir()?;
        let (master, slave) = crate::holder::open_pty_pair(80, 24)?;
        let (mut link, mut holder, expects_answer) =
            typed_first(dir.path(), master, slave, b"echo hi\r").await?;
        assert!(
            !expects_answer,
            "typed by the server: no input_result comes"
        );
        assert_eq!(
            holder.counter.get(),
            1,
            "the record was counted before the bytes went"
        );
        assert_eq!(line(&mut holder.typing)?, HolderRequest::Note(note(1)));
        assert_eq!(
            line(&mut holder.typing)?,
            HolderRequest::Typed {
                data: b"echo hi\r".to_vec(),
                source: None
            }
        );
        let mut typed_in = vec![0u8; 4096];
        let n = rustix::io::read(&holder.slave, &mut typed_in)?;
        assert_eq!(&typed_in[..n], b"echo hi\n", "the program got the command");

        // Output the holder has not read yet (the echo, and more): the command goes through
        // the holder, after it.
        rustix::io::write(&holder.slave, b"late output\n")?;
        assert!(link.type_command(note(2), b"true\r", None, true).await?);
        assert_eq!(line(&mut holder.main)?, HolderRequest::Note(note(2)));
        match line(&mut holder.main)? {
            HolderRequest::Input {
                data,
                is_logged,
                no_receipt,
                ..
            } => {
                assert_eq!(data, b"true\r");
                assert!(!is_logged && no_receipt);
            }
            other => panic!("{other:?}"),
        }
        let mut out = vec![0u8; 64];
        rustix::io::read(&holder.master, &mut out)?;

        // A command too long for the typing connection: through the holder.
        let long = vec![b'x'; TYPED_RECORDS_MAX_BYTES];
        assert!(link.type_command(note(4), &long, None, true).await?);
        assert_eq!(line(&mut holder.main)?, HolderRequest::Note(note(4)));
        assert!(matches!(
            line(&mut holder.main)?,
            HolderRequest::Input { .. }
        ));

        // Input sent before and not answered yet: through the holder, in order.
        assert!(link.type_command(note(3), b"ls\r", None, false).await?);
        assert_eq!(line(&mut holder.main)?, HolderRequest::Note(note(3)));
        assert!(matches!(
            line(&mut holder.main)?,
            HolderRequest::Input { .. }
        ));
        Ok(())
    }

    /// What the master does not take at once goes to the holder to queue, marked as logged
    /// already (the `typed` record says all of it). A socket stands for the master here: one
    /// that is full takes nothing, every time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_the_pty_does_not_take_is_queued_by_the_holder_and_logged_once()
    -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let (full, reader) = StdStream::pair()?;
        full.set_nonblocking(true)?;
        while rustix::io::write(&full, &[b'z'; 4096]).is_ok() {}
        let (_link, mut holder, expects_answer) =
            typed_first(dir.path(), full.into(), reader.into(), b"echo hi\r").await?;
        assert!(expects_answer, "the holder answers the rest's input");
        assert_eq!(line(&mut holder.typing)?, HolderRequest::Note(note(1)));
        assert!(matches!(
            line(&mut holder.typing)?,
            HolderRequest::Typed { .. }
        ));
        match line(&mut holder.main)? {
            HolderRequest::Input {
                data, is_logged, ..
            } => {
                assert_eq!(data, b"echo hi\r", "what the master did not take");
                assert!(is_logged, "the typed record logged it already");
            }
            other => panic!("{other:?}"),
        }
        Ok(())
    }
}
