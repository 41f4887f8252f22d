//! Serving one listener's connections, with the limits that keep a server answering under
//! abuse: at most [`ServeLimits::max_connections`] connections at a time (the next ones wait
//! in the kernel's backlog, so idle connections cannot exhaust the process's descriptors and
//! take the other listener down with them), and a [`ServeLimits::header_read_timeout`] for
//! every request's headers, which also ends a keep-alive connection left idle that long (a
//! client that trickles headers, or opens connections and never speaks, is cut off). A
//! request being answered (a long exec, an event stream) and an upgraded WebSocket are not
//! affected. On shutdown the listener stops accepting and every connection finishes what it
//! is answering.
//!
//! This is what `axum::serve` does, plus those limits (it sets no header timer and no cap).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::serve::Listener;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

/// How much one listener lets its clients hold.
#[derive(Clone, Copy, Debug)]
pub struct ServeLimits {
    /// Connections served at once.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers, and how long a keep-alive
    /// connection may sit idle between requests.
    pub header_read_timeout: Duration,
}

/// Serves `listener` with `router` until `shutdown` is cancelled, then waits for the
/// connections to finish. `connect_info` names the peer for the `ConnectInfo` extractor.
pub async fn serve<L, C>(
    mut listener: L,
    router: Router,
    limits: ServeLimits,
    connect_info: impl Fn(&L::Io, &L::Addr) -> C,
    shutdown: CancellationToken,
) where
    L: Listener,
    C: Clone + Send + Sync + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    // Dropped at shutdown: every connection then finishes what it answers and closes; each
    // holds a receiver until it has, so `closed` tells when all are done.
    let (stop, stopped) = watch::channel(());
    loop {
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            () = shutdown.cancelled() => break,
        };
        let (io, addr) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let info = connect_info(&io, &addr);
        let service = router
            .clone()
            .map_request(move |request: http::Request<Incoming>| {
                let mut request = request.map(Body::new);
                request.extensions_mut().insert(ConnectInfo(info.clone()));
                request
            });
        let mut stopping = stopped.clone();
        let header_read_timeout = limits.header_read_timeout;
        tokio::spawn(async move {
            // HTTP/1 only, so the header timer runs from the first moment: a client that never
            // sends a byte is cut off too.
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout)
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
            drop(stopping);
            drop(slot);
        });
    }
    drop(listener);
    drop(stopped);
    let _ = stop.send(());
    stop.closed().await;
}
