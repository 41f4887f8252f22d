//! The typed routes of REST v2 (docs/rest-v2.md): one method per route, taking the route's
//! `*Params` and returning its answer type. Paths are built here only; the envelope is
//! opened by the client's one `call`.

use ptyhub_protocol::api::BackendsResponse;
use ptyhub_protocol::api::{
    CloseResponse, CommandOutputResponse, CommandResult, CommandsResponse, CreateSessionParams,
    EventsResponse, ExecParams, InputParams, ObserveResponse, ResizeParams, ScreenResponse,
    ScrollbackResponse, SendParams, SendResponse, SignalParams, SignalResponse, Snapshot,
    TerminalInfo, WaitParams, WindowParams,
};
use ptyhub_protocol::event::Seq;
use ptyhub_protocol::ids::TermSize;
use ptyhub_protocol::rootfs::{InstallProgress, WorkspaceInfo, WorkspacesResponse};
use serde::{Deserialize, Serialize};

use crate::{Client, ClientError, Method};

/// `GET /v2/pty/sessions`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ListResponse {
    /// The terminals, oldest first.
    pub sessions: Vec<TerminalInfo>,
}

/// `POST …/input`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InputResponse {
    /// The terminal written to.
    pub session_id: String,
    /// Bytes written (with the Enter of `press_enter`).
    pub bytes: usize,
}

/// No request body.
const NO_BODY: Option<&()> = None;

impl Client {
    /// `POST /v2/pty/sessions`: creates a terminal, or finds the one with the asked id.
    pub async fn create(&self, params: &CreateSessionParams) -> Result<TerminalInfo, ClientError> {
        self.call(Method::POST, "/v2/pty/sessions", Some(params))
            .await
    }

    /// `GET /v2/pty/sessions`: the caller's terminals, closed ones too when asked.
    pub async fn list(&self, include_closed: bool) -> Result<ListResponse, ClientError> {
        let path = if include_closed {
            "/v2/pty/sessions?include_closed=true"
        } else {
            "/v2/pty/sessions"
        };
        self.call(Method::GET, path, NO_BODY).await
    }

    /// `GET /v2/backends`: every backend with its status.
    pub async fn backends(&self) -> Result<BackendsResponse, ClientError> {
        self.call(Method::GET, "/v2/backends", NO_BODY).await
    }

    /// `POST /v2/backends/{kind}/install`: starts (or joins) the install of a backend's root
    /// filesystem; answers at once with its progress.
    pub async fn install_backend(&self, kind: &str) -> Result<InstallProgress, ClientError> {
        let path = format!("/v2/backends/{}/install", encode(kind));
        self.call(Method::POST, &path, NO_BODY).await
    }

    /// `GET /v2/workspaces`: the caller's workspaces.
    pub async fn workspaces(&self) -> Result<WorkspacesResponse, ClientError> {
        self.call(Method::GET, "/v2/workspaces", NO_BODY).await
    }

    /// `GET /v2/workspaces/{id}`.
    pub async fn workspace(&self, id: &str) -> Result<WorkspaceInfo, ClientError> {
        let path = format!("/v2/workspaces/{}", encode(id));
        self.call(Method::GET, &path, NO_BODY).await
    }

    /// `DELETE /v2/workspaces/{id}`: deletes it with its files (refused while in use).
    pub async fn delete_workspace(&self, id: &str) -> Result<serde_json::Value, ClientError> {
        let path = format!("/v2/workspaces/{}", encode(id));
        self.call(Method::DELETE, &path, NO_BODY).await
    }

    /// The routes of one terminal.
    pub fn terminal<'a>(&'a self, id: &'a str) -> TerminalClient<'a> {
        TerminalClient { client: self, id }
    }
}

/// The routes under `/v2/pty/sessions/{id}`.
#[derive(Clone, Copy, Debug)]
pub struct TerminalClient<'a> {
    client: &'a Client,
    id: &'a str,
}

impl TerminalClient<'_> {
    fn path(&self, rest: &str) -> String {
        format!("/v2/pty/sessions/{}{rest}", encode(self.id))
    }

    /// `GET …/{id}`: the terminal as lists show it.
    pub async fn status(&self) -> Result<TerminalInfo, ClientError> {
        self.client.call(Method::GET, &self.path(""), NO_BODY).await
    }

    /// `DELETE …/{id}`: ends its processes (its history stays). A gone id is
    /// `SESSION_NOT_FOUND`.
    pub async fn close(&self) -> Result<CloseResponse, ClientError> {
        self.client
            .call(Method::DELETE, &self.path(""), NO_BODY)
            .await
    }

    /// `POST …/exec`: runs a command and waits for it as `params` say.
    pub async fn exec(&self, params: &ExecParams) -> Result<CommandResult, ClientError> {
        self.client
            .call(Method::POST, &self.path("/exec"), Some(params))
            .await
    }

    /// `POST …/send`: types text, then waits until the terminal needs something.
    pub async fn send(&self, params: &SendParams) -> Result<SendResponse, ClientError> {
        self.client
            .call(Method::POST, &self.path("/send"), Some(params))
            .await
    }

    /// `POST …/signal`: signals the foreground process group.
    pub async fn signal(&self, params: &SignalParams) -> Result<SignalResponse, ClientError> {
        self.client
            .call(Method::POST, &self.path("/signal"), Some(params))
            .await
    }

    /// `GET …/screen`: the screen and the current command.
    pub async fn screen(&self) -> Result<ScreenResponse, ClientError> {
        self.client
            .call(Method::GET, &self.path("/screen"), NO_BODY)
            .await
    }

    /// `POST …/input`: writes text without waiting.
    pub async fn input(&self, params: &InputParams) -> Result<InputResponse, ClientError> {
        self.client
            .call(Method::POST, &self.path("/input"), Some(params))
            .await
    }

    /// `POST …/wait`: waits for the running command.
    pub async fn wait(&self, params: &WaitParams) -> Result<CommandResult, ClientError> {
        self.client
            .call(Method::POST, &self.path("/wait"), Some(params))
            .await
    }

    /// `POST …/resize`: the new size.
    pub async fn resize(&self, params: &ResizeParams) -> Result<TermSize, ClientError> {
        self.client
            .call(Method::POST, &self.path("/resize"), Some(params))
            .await
    }

    /// `GET …/events?after_seq=&limit=`: a page of the event log.
    pub async fn events(
        &self,
        after_seq: Seq,
        limit: Option<usize>,
    ) -> Result<EventsResponse, ClientError> {
        let mut rest = format!("/events?after_seq={}", after_seq.0);
        if let Some(limit) = limit {
            rest.push_str(&format!("&limit={limit}"));
        }
        self.client
            .call(Method::GET, &self.path(&rest), NO_BODY)
            .await
    }

    /// `GET …/snapshot`: the terminal as a person would see it now.
    pub async fn snapshot(&self) -> Result<Snapshot, ClientError> {
        self.client
            .call(Method::GET, &self.path("/snapshot"), NO_BODY)
            .await
    }

    /// `GET …/observe?cursor=`: a snapshot and a cursor, or what changed since `cursor`.
    pub async fn observe(&self, cursor: Option<&str>) -> Result<ObserveResponse, ClientError> {
        let rest = match cursor {
            Some(cursor) => format!("/observe?cursor={}", encode(cursor)),
            None => "/observe".to_owned(),
        };
        self.client
            .call(Method::GET, &self.path(&rest), NO_BODY)
            .await
    }

    /// `GET …/scrollback?offset=&lines=`: rendered lines above the newest.
    pub async fn scrollback(
        &self,
        offset: usize,
        lines: usize,
    ) -> Result<ScrollbackResponse, ClientError> {
        let rest = format!("/scrollback?offset={offset}&lines={lines}");
        self.client
            .call(Method::GET, &self.path(&rest), NO_BODY)
            .await
    }

    /// `GET …/commands?after=N&limit=M`: a page of the command timeline.
    pub async fn commands(
        &self,
        after: u64,
        limit: Option<usize>,
    ) -> Result<CommandsResponse, ClientError> {
        let mut rest = format!("/commands?after={after}");
        if let Some(limit) = limit {
            rest.push_str(&format!("&limit={limit}"));
        }
        self.client
            .call(Method::GET, &self.path(&rest), NO_BODY)
            .await
    }

    /// `GET …/commands/{n}`: command `n` with the window `params` of its output.
    pub async fn command(
        &self,
        n: u64,
        params: &WindowParams,
    ) -> Result<CommandOutputResponse, ClientError> {
        let numbers = [
            ("head", params.head),
            ("tail", params.tail),
            ("offset", params.offset),
            ("max_chars", params.max_chars),
            ("max_tokens", params.max_tokens),
            ("context", params.context),
        ];
        let mut query: Vec<String> = numbers
            .iter()
            .filter_map(|(name, value)| value.map(|v| format!("{name}={v}")))
            .collect();
        if let Some(grep) = &params.grep {
            query.push(format!("grep={}", encode(grep)));
        }
        let mut rest = format!("/commands/{n}");
        if !query.is_empty() {
            rest.push('?');
            rest.push_str(&query.join("&"));
        }
        self.client
            .call(Method::GET, &self.path(&rest), NO_BODY)
            .await
    }
}

/// Percent-encodes everything but the unreserved characters of a URI, so an id or a cursor
/// stays one path segment or one query value.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::encode;

    #[test]
    fn ids_and_cursors_stay_one_segment() {
        assert_eq!(encode("terminal-a_b.1"), "terminal-a_b.1");
        assert_eq!(encode("../x?y"), "..%2Fx%3Fy");
        assert_eq!(encode("a+b=="), "a%2Bb%3D%3D");
    }
}
