//! The server's connection to one holder: a writer for requests and a reader task that turns
//! the holder's lines into [`HolderLine`]s on a bounded channel.

use std::path::Path;

use ptyhub_protocol::event::Seq;
use ptyhub_protocol::holder::{
    HOLDER_LINE_MAX_BYTES, HOLDER_PROTOCOL_VERSION, HolderLine, HolderRequest,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::mpsc;

/// Lines parsed ahead of the actor. Small: the holder buffers the rest in its log file, so a
/// busy actor slows the stream down without losing anything.
const LINES_AHEAD: usize = 64;
/// Input is sent in pieces of at most this many bytes (well below the line limit).
const INPUT_PIECE_BYTES: usize = 1024 * 1024;

pub struct HolderLink {
    writer: OwnedWriteHalf,
}

impl HolderLink {
    /// Connects, greets, and subscribes from `after_seq`. Returns the link and the stream of
    /// lines (it ends when the holder goes away).
    pub async fn connect(
        socket: &Path,
        after_seq: Seq,
    ) -> std::io::Result<(Self, mpsc::Receiver<HolderLine>)> {
        let stream = UnixStream::connect(socket).await?;
        let (reader, writer) = stream.into_split();
        let mut link = Self { writer };
        link.send(&HolderRequest::Hello {
            version: HOLDER_PROTOCOL_VERSION,
        })
        .await?;
        link.send(&HolderRequest::Subscribe { after_seq }).await?;
        let (tx, rx) = mpsc::channel(LINES_AHEAD);
        tokio::spawn(async move {
            let mut reader = BufReader::with_capacity(256 * 1024, reader);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) if line.len() > HOLDER_LINE_MAX_BYTES => break,
                    Ok(_) => match HolderLine::parse(&line) {
                        Ok(parsed) => {
                            if tx.send(parsed).await.is_err() {
                                break;
                            }
                        }
                        Err(error) => tracing::warn!(%error, "unreadable line from holder"),
                    },
                }
            }
        });
        Ok((link, rx))
    }

    pub async fn send(&mut self, request: &HolderRequest) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(request).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.writer.write_all(&line).await
    }

    /// Writes bytes to the PTY, in pieces.
    pub async fn input(&mut self, data: &[u8]) -> std::io::Result<()> {
        for piece in data.chunks(INPUT_PIECE_BYTES) {
            self.send(&HolderRequest::Input {
                data: piece.to_vec(),
            })
            .await?;
        }
        Ok(())
    }
}
