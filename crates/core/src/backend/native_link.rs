//! The native backend's connection to one holder: a writer for requests and a cancel-safe
//! reader of the holder's lines ([`HolderLine`]).

use std::path::Path;

use ptyhub_protocol::event::Seq;
use ptyhub_protocol::holder::{
    HOLDER_LINE_MAX_BYTES, HOLDER_PROTOCOL_MIN, HOLDER_PROTOCOL_VERSION, HolderLine, HolderRequest,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use super::{BoxFuture, LineStream, RequestSink};

/// Bytes read from the holder at a time.
const READ_BUFFER_BYTES: usize = 256 * 1024;

pub struct HolderLink {
    writer: OwnedWriteHalf,
}

/// The holder's lines, read by the terminal's actor itself (no task or channel in between: one
/// wake-up less per event on the latency path).
pub struct HolderLines {
    reader: BufReader<OwnedReadHalf>,
    /// A line being read; it survives a cancelled `next`, so no byte is lost.
    line: Vec<u8>,
}

impl HolderLines {
    /// The next line, or `None` once the holder is gone. Cancel-safe.
    pub async fn next(&mut self) -> Option<HolderLine> {
        loop {
            match self.reader.read_until(b'\n', &mut self.line).await {
                Ok(0) | Err(_) => return None,
                Ok(_) if self.line.last() != Some(&b'\n') => {
                    if self.line.len() > HOLDER_LINE_MAX_BYTES {
                        return None;
                    }
                }
                Ok(_) => {
                    let parsed = HolderLine::parse(&self.line);
                    self.line.clear();
                    match parsed {
                        Ok(line) => return Some(line),
                        Err(error) => tracing::warn!(%error, "unreadable line from holder"),
                    }
                }
            }
        }
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
        let lines = HolderLines {
            reader: BufReader::with_capacity(READ_BUFFER_BYTES, reader),
            line: Vec::new(),
        };
        Ok((link, lines))
    }

    pub async fn send(&mut self, request: &HolderRequest) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(request).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.writer.write_all(&line).await
    }
}

impl RequestSink for HolderLink {
    fn send<'a>(&'a mut self, request: &'a HolderRequest) -> BoxFuture<'a, std::io::Result<()>> {
        Box::pin(HolderLink::send(self, request))
    }
}

impl LineStream for HolderLines {
    fn next(&mut self) -> BoxFuture<'_, Option<HolderLine>> {
        Box::pin(HolderLines::next(self))
    }
}
