//! `/mcp` over HTTP: the checks in front of rmcp's streamable HTTP service ([`crate::mcp`]).
//!
//! Two rules, both answered before rmcp sees the request:
//! 1. **Origin.** A request whose `Origin` is not this server's own is refused (403) whatever
//!    its credential, exactly as a WebSocket upgrade is: a page of another site must not drive
//!    tools with a token it got hold of, nor with the browser's login cookie.
//! 2. **A session belongs to the principal that opened it.** The `mcp-session-id` rmcp
//!    answers an `initialize` with is recorded with the principal of that request (owner and
//!    capabilities); a request that carries the id with any other principal (another owner's
//!    token, or a narrower grant of the same owner) is answered as an unknown session is — 404
//!    `Not Found: Session not found` on POST, GET and DELETE — so it can neither use nor end
//!    the session, nor learn that it exists.
//!
//! This module does not authenticate (the router's auth middleware put the [`Principal`] in
//! the request) and knows nothing of the tools.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use crate::AppState;
use crate::auth::Principal;
use crate::http_error::HttpError;

/// The header that names an MCP session (streamable HTTP transport).
const SESSION_HEADER: &str = "mcp-session-id";
/// Sessions recorded before the first sweep of those rmcp has ended (each sweep sets the next
/// at twice the sessions still open, so sweeping costs O(1) per session opened).
const SWEEP_AT_MIN: usize = 64;

/// The `/mcp` service: the checks of this module in front of rmcp's.
pub fn service(
    state: AppState,
    socket: std::path::PathBuf,
    wait_cap: std::time::Duration,
) -> axum::Router<AppState> {
    let sessions = Arc::new(LocalSessionManager::default());
    let guard = Arc::new(Guard {
        state,
        sessions: Arc::clone(&sessions),
        owners: Mutex::new(Owners {
            by_session: HashMap::new(),
            sweep_at: SWEEP_AT_MIN,
        }),
    });
    axum::Router::new()
        .fallback_service(crate::mcp::http_service(socket, wait_cap, sessions))
        .layer(axum::middleware::from_fn_with_state(guard, check))
}

struct Guard {
    state: AppState,
    sessions: Arc<LocalSessionManager>,
    owners: Mutex<Owners>,
}

struct Owners {
    /// Session id → the principal that opened it ([`principal_key`]).
    by_session: HashMap<String, String>,
    sweep_at: usize,
}

/// What identifies a principal for its sessions: its owner and capabilities.
fn principal_key(request: &Request) -> String {
    request
        .extensions()
        .get::<Principal>()
        .map(Principal::act_as_value)
        .unwrap_or_default()
}

/// rmcp's own answer for a session it does not know, byte for byte.
fn unknown_session() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response()
}

async fn check(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    if let Err(error) = crate::auth::require_own_origin(&guard.state, request.headers()) {
        return HttpError::from(error).into_response();
    }
    let principal = principal_key(&request);
    let session = match request.headers().get(SESSION_HEADER).map(|v| v.to_str()) {
        None => None,
        Some(Ok(id)) => Some(id.to_owned()),
        Some(Err(_)) => return unknown_session(),
    };
    let Some(session) = session else {
        let response = next.run(request).await;
        if let Some(id) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
        {
            guard.remember(id.to_owned(), principal).await;
        }
        return response;
    };
    if guard.owner_of(&session).as_deref() != Some(principal.as_str()) {
        return unknown_session();
    }
    let is_delete = request.method() == Method::DELETE;
    let response = next.run(request).await;
    if is_delete && response.status().is_success() {
        guard.forget(&session);
    }
    response
}

impl Guard {
    fn owner_of(&self, session: &str) -> Option<String> {
        self.lock().by_session.get(session).cloned()
    }

    fn forget(&self, session: &str) {
        self.lock().by_session.remove(session);
    }

    /// Records `session` as `principal`'s, first dropping the sessions rmcp has ended (idle
    /// ones time out there) once enough have been recorded.
    async fn remember(&self, session: String, principal: String) {
        let recorded: Option<Vec<String>> = {
            let owners = self.lock();
            (owners.by_session.len() >= owners.sweep_at)
                .then(|| owners.by_session.keys().cloned().collect())
        };
        let mut ended = Vec::new();
        for id in recorded.unwrap_or_default() {
            let key: rmcp::transport::streamable_http_server::SessionId = id.as_str().into();
            if !self.sessions.has_session(&key).await.unwrap_or(false) {
                ended.push(id);
            }
        }
        let mut owners = self.lock();
        for id in &ended {
            owners.by_session.remove(id);
        }
        owners.by_session.insert(session, principal);
        if owners.by_session.len() >= owners.sweep_at {
            owners.sweep_at = (owners.by_session.len() * 2).max(SWEEP_AT_MIN);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Owners> {
        // A panic while holding the lock leaves a map that is still whole.
        self.owners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
