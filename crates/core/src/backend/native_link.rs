//! The native backend's connection to one holder: a writer for requests and a cancel-safe
//! reader of the holder's lines ([`HolderLine`]).

use std::path::Path;

use ptyhub_protocol::event::Seq;
use ptyhub_protocol::holder::{
    HOLDER_LINE_MAX_BYTES, HOLDER_PROTOCOL_MIN, HOLDER_PROTOCOL_VERSION, HolderLine, HolderRequest,
};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::net::UnixStream;

use super::{BoxFuture, LineStream, RequestSink};

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
    writer: std::os::unix::net::UnixStream,
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
            match ready.try_io(|socket| {
                rustix::io::read(socket.get_ref(), rustix::buffer::spare_capacity(buf))
                    .map_err(std::io::Error::from)
            }) {
                Ok(read) => return read,
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
        let mut link = Self { writer };
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
        let mut lines = Vec::new();
        for request in requests {
            serde_json::to_writer(&mut lines, request).map_err(std::io::Error::other)?;
            lines.push(b'\n');
        }
        let mut rest = &lines[..];
        while !rest.is_empty() {
            match rustix::io::write(&self.writer, rest) {
                Ok(n) => rest = &rest[n..],
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => {
                    // The holder is behind: wait for room, registered for writing only now.
                    let room = register(self.writer.try_clone()?, Interest::WRITABLE)?;
                    drop(room.writable().await?);
                }
                Err(error) => return Err(error.into()),
            }
        }
        Ok(())
    }
}

/// Registers `socket` with the runtime for `interest` alone.
fn register(
    socket: std::os::unix::net::UnixStream,
    interest: Interest,
) -> std::io::Result<AsyncFd<std::os::unix::net::UnixStream>> {
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
}
