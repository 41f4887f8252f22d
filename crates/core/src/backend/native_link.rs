//! The native backend's connection to one holder: a writer for requests and a cancel-safe
//! reader of the holder's lines ([`HolderLine`]).

use std::path::Path;

use ptyhub_protocol::event::Seq;
use ptyhub_protocol::holder::{
    HOLDER_LINE_MAX_BYTES, HOLDER_PROTOCOL_MIN, HOLDER_PROTOCOL_VERSION, HolderLine, HolderRequest,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use super::{BoxFuture, LineStream, RequestSink};

/// Bytes asked of the socket in one read: the smallest (what an idle terminal's buffer holds at
/// most) and the largest (a flood's, reached by doubling while reads fill what was asked).
const READ_MIN_BYTES: usize = 8 * 1024;
const READ_MAX_BYTES: usize = 256 * 1024;

pub struct HolderLink {
    writer: OwnedWriteHalf,
}

/// The holder's lines, read by the terminal's actor itself (no task or channel in between: one
/// wake-up less per event on the latency path).
///
/// Its buffer follows the traffic: reads grow from [`READ_MIN_BYTES`] to [`READ_MAX_BYTES`]
/// while they fill what they asked for and fall back once they do not, and a buffer emptied
/// outside a flood is let go, so an idle terminal holds no buffer here (docs/memory.md).
pub struct HolderLines {
    reader: OwnedReadHalf,
    /// Bytes read and not returned yet: `buf[start..]`; no `\n` in `buf[start..scanned]`.
    buf: Vec<u8>,
    start: usize,
    scanned: usize,
    read_size: usize,
}

impl HolderLines {
    fn new(reader: OwnedReadHalf) -> Self {
        Self {
            reader,
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            read_size: READ_MIN_BYTES,
        }
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
            match self.reader.read_buf(&mut self.buf).await {
                Ok(0) | Err(_) => return None,
                Ok(n) if n == asked => self.read_size = (self.read_size * 2).min(READ_MAX_BYTES),
                Ok(n) if n < self.read_size / 4 => self.read_size = READ_MIN_BYTES,
                Ok(_) => {}
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
        let stream = UnixStream::connect(socket).await?;
        let (reader, writer) = stream.into_split();
        let mut link = Self { writer };
        link.send(&HolderRequest::Hello {
            version: HOLDER_PROTOCOL_MIN,
            max_version: Some(HOLDER_PROTOCOL_VERSION),
        })
        .await?;
        link.send(&HolderRequest::Subscribe { after_seq }).await?;
        Ok((link, HolderLines::new(reader)))
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
        self.writer.write_all(&lines).await
    }
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
        let (reader, _writer) = ours.into_split();
        let mut lines = HolderLines::new(reader);
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
}
