//! Who a request acts for, and what it may do: the one policy function of the server.
//!
//! A request over TCP carries a bearer token; the generated local token acts for the server's
//! own user with every capability. A request over the local unix socket acts for the peer's
//! uid (`SO_PEERCRED`); the server's own user (or root) gets every capability. The owner is the
//! only principal that sees a terminal.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ptyhub_protocol::error::{ApiError, ErrorCode};

use crate::AppState;
use crate::http_error::HttpError;

/// One operation a principal may be granted (seed 001).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capability {
    Create,
    Read,
    Write,
    Resize,
    Signal,
    Stop,
    Kill,
}

impl Capability {
    pub const ALL: [Self; 7] = [
        Self::Create,
        Self::Read,
        Self::Write,
        Self::Resize,
        Self::Signal,
        Self::Stop,
        Self::Kill,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "terminal.create",
            Self::Read => "terminal.read",
            Self::Write => "terminal.write",
            Self::Resize => "terminal.resize",
            Self::Signal => "terminal.signal",
            Self::Stop => "terminal.stop",
            Self::Kill => "terminal.kill",
        }
    }
}

/// The principal a request resolved to.
#[derive(Clone, Debug)]
pub struct Principal {
    pub owner: String,
    capabilities: Vec<Capability>,
}

impl Principal {
    pub fn require(&self, capability: Capability) -> Result<(), ApiError> {
        if self.capabilities.contains(&capability) {
            Ok(())
        } else {
            Err(ApiError::new(
                ErrorCode::PermissionDenied,
                format!("missing capability {}", capability.as_str()),
            ))
        }
    }
}

/// The peer of a local unix-socket connection.
#[derive(Clone, Copy, Debug)]
pub struct UnixPeer {
    pub uid: Option<u32>,
}

impl
    axum::extract::connect_info::Connected<
        axum::serve::IncomingStream<'_, tokio::net::UnixListener>,
    > for UnixPeer
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, tokio::net::UnixListener>) -> Self {
        Self {
            uid: stream.io().peer_cred().ok().map(|cred| cred.uid()),
        }
    }
}

/// What a credential resolves to: the single policy decision.
enum Credential<'a> {
    Bearer(Option<&'a str>),
    PeerUid(Option<u32>),
}

fn resolve(state: &AppState, credential: Credential<'_>) -> Result<Principal, ApiError> {
    let server_uid = rustix::process::getuid().as_raw();
    let everything = |owner: String| Principal {
        owner,
        capabilities: Capability::ALL.to_vec(),
    };
    match credential {
        Credential::Bearer(Some(token))
            if constant_time_eq(token.as_bytes(), state.token.as_bytes()) =>
        {
            Ok(everything(server_uid.to_string()))
        }
        Credential::Bearer(Some(_)) => {
            Err(ApiError::new(ErrorCode::Unauthenticated, "invalid token"))
        }
        Credential::Bearer(None) => Err(ApiError::new(
            ErrorCode::Unauthenticated,
            "missing bearer token (Authorization: Bearer <token>)",
        )),
        Credential::PeerUid(Some(uid)) if uid == server_uid || uid == 0 => {
            Ok(everything(server_uid.to_string()))
        }
        Credential::PeerUid(_) => Err(ApiError::new(
            ErrorCode::PermissionDenied,
            "the local socket serves only the server's own user",
        )),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Whether a `Host` header names this machine (no DNS rebinding through a foreign name).
fn is_local_host(request: &Request, listen: SocketAddr) -> bool {
    let Some(host) = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
    else {
        return true; // HTTP/1.0 clients may send none.
    };
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    matches!(name, "localhost" | "127.0.0.1" | "::1") || name == listen.ip().to_string()
}

/// Middleware for the TCP listener: Host check, then bearer token.
pub async fn tcp_auth(
    State(state): State<AppState>,
    ConnectInfo(_peer): ConnectInfo<SocketAddr>,
    mut request: Request,
    next: Next,
) -> Response {
    if !is_local_host(&request, state.listen) {
        return HttpError::from(ApiError::new(
            ErrorCode::PermissionDenied,
            "Host header is not allowed",
        ))
        .into_response();
    }
    match resolve(&state, Credential::Bearer(bearer(&request))) {
        Ok(principal) => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(error) => HttpError::from(error).into_response(),
    }
}

/// Middleware for the unix socket: the peer's uid.
pub async fn unix_auth(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<UnixPeer>,
    mut request: Request,
    next: Next,
) -> Response {
    match resolve(&state, Credential::PeerUid(peer.uid)) {
        Ok(principal) => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(error) => HttpError::from(error).into_response(),
    }
}
