//! Serving one listener's connections, with the limits that keep a server answering under
//! abuse: at most [`ServeLimits::max_connections`] connections at a time (the next ones wait
//! in the kernel's backlog, so idle connections cannot exhaust the process's descriptors and
//! take the other listener down with them), and a [`ServeLimits::header_read_timeout`] for
//! every request's headers (and a TLS handshake), which also ends a keep-alive connection left
//! idle that long (a client that trickles headers, or opens connections and never speaks, is
//! cut off). A request being answered (a long exec, an event stream) and an upgraded WebSocket
//! are not affected. On shutdown the listener stops accepting and every connection finishes
//! what it is answering.
//!
//! When the process runs out of file descriptors (`EMFILE`, `ENFILE`), accepting fails while
//! connections pile up in the backlog. The listener then keeps one spare descriptor for this
//! moment: it frees it, takes one waiting connection with it and answers it as its
//! [`OnExhausted`] says — the TCP listener answers `GET /healthz` and refuses everything else
//! with a 503 at once (a TLS connection is closed: a handshake would hold the spare), the
//! local socket serves the connection as usual (it is the operator's way in). It logs the
//! condition once when it starts and once when it ends, backs off instead of spinning, and
//! accepts as usual again as soon as descriptors are free. Connections already open are
//! never touched.
//!
//! This is what `axum::serve` does, plus those limits (it sets no header timer and no cap,
//! and on `EMFILE` it logs and sleeps a second per attempt).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use crate::auth::UnixPeer;

/// How much one listener lets its clients hold.
#[derive(Clone, Copy, Debug)]
pub struct ServeLimits {
    /// Connections served at once.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers, and how long a keep-alive
    /// connection may sit idle between requests.
    pub header_read_timeout: Duration,
}

/// What a listener does with the connection it takes with its spare descriptor when the
/// process has none left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnExhausted {
    /// Answer `GET /healthz` and refuse the rest with a 503 (`BACKEND_UNAVAILABLE`), at once.
    Shed,
    /// Serve it as usual.
    Serve,
}

/// A listening socket whose accept errors are the caller's to handle.
pub trait Acceptor: Send + 'static {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// Who the peer is, for the `ConnectInfo` extractor.
    type Peer: Clone + Send + Sync + 'static;
    fn accept_one(&mut self) -> impl Future<Output = io::Result<(Self::Io, Self::Peer)>> + Send;
}

impl Acceptor for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    type Peer = SocketAddr;

    async fn accept_one(&mut self) -> io::Result<(Self::Io, Self::Peer)> {
        let (stream, addr) = self.accept().await?;
        // Answers are small and latency matters more than packet count.
        let _ = stream.set_nodelay(true);
        Ok((stream, addr))
    }
}

impl Acceptor for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    type Peer = UnixPeer;

    async fn accept_one(&mut self) -> io::Result<(Self::Io, Self::Peer)> {
        let (stream, _) = self.accept().await?;
        let peer = UnixPeer::of(&stream);
        Ok((stream, peer))
    }
}

/// How long a connection taken with the spare descriptor may take to show its request line.
const SHED_READ_WAIT: Duration = Duration::from_millis(50);
/// How long a listener out of descriptors waits before it tries again.
const EXHAUSTED_BACKOFF: Duration = Duration::from_millis(10);
/// How long a listener waits after an accept error of another kind.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `listener` with `router` until `shutdown` is cancelled, then waits for the
/// connections to finish. `tls` makes every connection start with a TLS handshake.
pub async fn serve<A: Acceptor>(
    mut listener: A,
    router: Router,
    limits: ServeLimits,
    tls: Option<tokio_rustls::TlsAcceptor>,
    on_exhausted: OnExhausted,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    // Dropped at shutdown: every connection then finishes what it answers and closes; each
    // holds a receiver until it has, so `closed` tells when all are done.
    let (stop, stopped) = watch::channel(());
    let mut spare = Spare::open();
    loop {
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            () = shutdown.cancelled() => break,
        };
        spare.restore();
        let accepted = tokio::select! {
            accepted = listener.accept_one() => accepted,
            () = shutdown.cancelled() => break,
        };
        let (io, peer) = match accepted {
            Ok(accepted) => {
                Exhaustion::accepted();
                accepted
            }
            Err(error) if is_exhaustion(&error) => {
                Exhaustion::seen(&error);
                // The spare's descriptor is the one the waiting connection gets.
                if spare.release() {
                    let taken = tokio::select! {
                        taken = tokio::time::timeout(EXHAUSTED_BACKOFF, listener.accept_one()) => taken,
                        () = shutdown.cancelled() => break,
                    };
                    if let Ok(Ok((io, peer))) = taken {
                        Exhaustion::answered_with_spare();
                        match (on_exhausted, &tls) {
                            (OnExhausted::Serve, _) => {
                                spawn_connection(
                                    io,
                                    peer,
                                    &router,
                                    limits,
                                    tls.clone(),
                                    &stopped,
                                    slot,
                                );
                                continue;
                            }
                            (OnExhausted::Shed, Some(_)) => drop(io),
                            (OnExhausted::Shed, None) => shed(io, &router, peer).await,
                        }
                    }
                }
                tokio::time::sleep(EXHAUSTED_BACKOFF).await;
                continue;
            }
            Err(error) if is_connection_error(&error) => continue,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                continue;
            }
        };
        spawn_connection(io, peer, &router, limits, tls.clone(), &stopped, slot);
    }
    drop(listener);
    drop(stopped);
    let _ = stop.send(());
    stop.closed().await;
}

/// Serves one connection in its own task (after its TLS handshake, if any) until it ends or
/// the listener stops; `slot` is given back when it does.
fn spawn_connection<I, P>(
    io: I,
    peer: P,
    router: &Router,
    limits: ServeLimits,
    tls: Option<tokio_rustls::TlsAcceptor>,
    stopped: &watch::Receiver<()>,
    slot: tokio::sync::OwnedSemaphorePermit,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    P: Clone + Send + Sync + 'static,
{
    let router = router.clone();
    let mut stopping = stopped.clone();
    tokio::spawn(async move {
        match tls {
            None => serve_http(io, router, peer, limits, &mut stopping).await,
            Some(acceptor) => {
                // The handshake counts against the header timer: a client that opens a
                // connection and never completes it is cut off the same way.
                match tokio::time::timeout(limits.header_read_timeout, acceptor.accept(io)).await {
                    Ok(Ok(stream)) => serve_http(stream, router, peer, limits, &mut stopping).await,
                    Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
                    Err(_) => tracing::debug!("TLS handshake timed out"),
                }
            }
        }
        drop(stopping);
        drop(slot);
    });
}

/// Speaks HTTP/1.1 on `io` with `router` until the connection ends, or finishes what it
/// answers once the listener stops.
async fn serve_http<I, P>(
    io: I,
    router: Router,
    peer: P,
    limits: ServeLimits,
    stopping: &mut watch::Receiver<()>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    P: Clone + Send + Sync + 'static,
{
    let service = router.map_request(move |request: http::Request<Incoming>| {
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(ConnectInfo(peer.clone()));
        request
    });
    // HTTP/1 only, so the header timer runs from the first moment: a client that never
    // sends a byte is cut off too.
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(service))
        .with_upgrades();
    tokio::pin!(connection);
    let outcome = tokio::select! {
        outcome = connection.as_mut() => outcome,
        _ = stopping.changed() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = outcome {
        tracing::trace!(%error, "connection ended with an error");
    }
}

/// Answers a connection taken with the spare descriptor, at once and without keeping it:
/// `GET /healthz` as the router does, anything else with a 503.
async fn shed<I, P>(mut io: I, router: &Router, peer: P)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    P: Clone + Send + Sync + 'static,
{
    let mut head = [0u8; 512];
    let mut len = 0;
    let _ = tokio::time::timeout(SHED_READ_WAIT, async {
        while len < head.len() && !head[..len].contains(&b'\n') {
            match io.read(&mut head[len..]).await {
                Ok(0) | Err(_) => break,
                Ok(read) => len += read,
            }
        }
    })
    .await;
    let is_health = head[..len].starts_with(b"GET /healthz ");
    let answer = if is_health {
        let request = http::Request::get(crate::HEALTH_PATH)
            .extension(ConnectInfo(peer))
            .body(Body::empty());
        match request {
            Ok(request) => router.clone().oneshot(request).await.ok(),
            Err(_) => None,
        }
    } else {
        None
    };
    let (status, body) = match answer {
        Some(response) if response.status().is_success() => {
            let status = response.status();
            let body = axum::body::to_bytes(response.into_body(), 4096)
                .await
                .unwrap_or_default();
            (status, body.to_vec())
        }
        _ => {
            let error = ptyhub_protocol::error::ApiError::new(
                ptyhub_protocol::error::ErrorCode::BackendUnavailable,
                "the server is out of file descriptors and takes no new work now; try again shortly",
            );
            let wire = crate::wire_error::WireError::new(error, crate::wire_error::Surface::RestV2);
            (
                wire.status,
                serde_json::to_vec(&wire.body()).unwrap_or_default(),
            )
        }
    };
    let mut response = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    );
    if !status.is_success() {
        response.push_str("Retry-After: 1\r\n");
    }
    response.push_str("\r\n");
    let mut bytes = response.into_bytes();
    bytes.extend_from_slice(&body);
    let _ = tokio::time::timeout(SHED_READ_WAIT, async {
        let _ = io.write_all(&bytes).await;
        let _ = io.shutdown().await;
    })
    .await;
}

/// Whether an accept failed because the process or the system has no descriptor left.
fn is_exhaustion(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(code) if code == libc_errno::EMFILE || code == libc_errno::ENFILE
    )
}

/// Whether an accept failed for the one connection only (the peer went away first).
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// The errno values this module tells apart (the same on every Linux architecture).
mod libc_errno {
    pub const ENFILE: i32 = rustix::io::Errno::NFILE.raw_os_error();
    pub const EMFILE: i32 = rustix::io::Errno::MFILE.raw_os_error();
}

/// Stretches of time without descriptors, for the log: one line when one starts and one when
/// it ends, however many accepts fail in between and on whichever listener. Descriptors are
/// the process's, so this record is too (one for both listeners).
struct Exhaustion {
    /// When the stretch started.
    since: std::time::Instant,
    /// When an accept last failed for want of one.
    last_seen: std::time::Instant,
    /// Connections answered with a spare descriptor in the current stretch.
    answered: u64,
}

/// A stretch ends once accepts have succeeded for this long without another failure (a
/// descriptor freed for a moment in the middle of a flood does not end it).
const EXHAUSTION_QUIET: Duration = Duration::from_secs(1);

/// The current stretch (`None`: descriptors are available).
static EXHAUSTION: std::sync::Mutex<Option<Exhaustion>> = std::sync::Mutex::new(None);

impl Exhaustion {
    fn with<T>(f: impl FnOnce(&mut Option<Exhaustion>) -> T) -> T {
        // A panic while holding the lock leaves a record that is still whole.
        let mut record = EXHAUSTION
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut record)
    }

    /// An accept failed for want of a descriptor.
    fn seen(error: &io::Error) {
        Self::with(|record| {
            let now = std::time::Instant::now();
            match record {
                Some(exhaustion) => exhaustion.last_seen = now,
                None => {
                    tracing::warn!(
                        %error,
                        "out of file descriptors: new TCP connections are answered 503 \
                         (/healthz still answers, the local socket and open connections go \
                         on) until some are free"
                    );
                    *record = Some(Exhaustion {
                        since: now,
                        last_seen: now,
                        answered: 0,
                    });
                }
            }
        });
    }

    fn answered_with_spare() {
        Self::with(|record| {
            if let Some(exhaustion) = record {
                exhaustion.answered += 1;
            }
        });
    }

    /// An accept succeeded: the stretch ends if none failed for [`EXHAUSTION_QUIET`].
    fn accepted() {
        Self::with(|record| {
            if let Some(exhaustion) = record
                && exhaustion.last_seen.elapsed() >= EXHAUSTION_QUIET
            {
                tracing::warn!(
                    after_ms = exhaustion.since.elapsed().as_millis(),
                    answered_with_the_spare = exhaustion.answered,
                    "file descriptors are free again: accepting connections as usual"
                );
                *record = None;
            }
        });
    }
}

/// The descriptor a listener keeps for the moment the process has no other: freed to take one
/// waiting connection, opened again as soon as a descriptor is free.
struct Spare(Option<std::fs::File>);

impl Spare {
    fn open() -> Self {
        let mut spare = Self(None);
        spare.restore();
        spare
    }

    /// Opens the spare again if it is out (this fails while no descriptor is free).
    fn restore(&mut self) {
        if self.0.is_none() {
            self.0 = std::fs::File::open("/dev/null").ok();
        }
    }

    /// Closes the spare; whether there was one.
    fn release(&mut self) -> bool {
        self.0.take().is_some()
    }
}
