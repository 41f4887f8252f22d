//! A small typed ptyhub client over the local unix socket or HTTP, used by the CLI, MCP and
//! the tests. One connection per request.
//!
//! The typed routes ([`Client::create`], [`Client::list`], [`Client::terminal`] and the methods
//! of [`TerminalClient`]) take the `*Params` of `ptyhub_protocol::api` and return its
//! `*Response` types; the `{success, message, data}` envelope is opened in one place
//! ([`open_envelope`]), and a failure is a [`ClientError`]: the server's [`ApiError`], or a
//! transport failure that [`ClientError::into_api`] reports as `BACKEND_UNAVAILABLE`. The raw
//! requests ([`Client::send`], [`Client::send_raw`]) are for tests of the wire itself: they
//! return the status and body as they came.

use std::path::PathBuf;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use ptyhub_protocol::error::{ApiError, ErrorCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use http::Method;

mod terminal;

pub use terminal::{InputResponse, ListResponse, TerminalClient};

/// Where the server is.
#[derive(Clone, Debug)]
pub enum Target {
    /// The local unix socket (the peer's uid is the owner; no token).
    Unix(PathBuf),
    /// `host:port` over TCP, with a bearer token.
    Tcp { addr: String, token: String },
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach ptyhub at {target}: {source}")]
    Connect {
        target: String,
        source: std::io::Error,
    },
    #[error("http: {0}")]
    Http(String),
    #[error("{0}")]
    Api(ApiError),
    #[error("unexpected answer (HTTP {status}): {body}")]
    Unexpected { status: u16, body: String },
}

impl ClientError {
    /// The failure as an API error: the server's own, or `BACKEND_UNAVAILABLE` (retryable)
    /// when the server could not be reached or its answer was not understood.
    pub fn into_api(self) -> ApiError {
        match self {
            Self::Api(error) => error,
            other => ApiError::new(ErrorCode::BackendUnavailable, other.to_string()),
        }
    }
}

impl From<ClientError> for ApiError {
    fn from(error: ClientError) -> Self {
        error.into_api()
    }
}

/// A raw answer: status and JSON body.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

#[derive(Clone, Debug)]
pub struct Client {
    target: Target,
    /// Sent with every request and upgrade of this client (e.g. the local socket's act-as
    /// header); a raw request's own headers override them.
    headers: Vec<(String, String)>,
}

impl Client {
    pub fn new(target: Target) -> Self {
        Self {
            target,
            headers: Vec::new(),
        }
    }

    /// This client, sending `name: value` with every request and upgrade (a header of the
    /// same name given to one raw request replaces it for that request).
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn unix(path: impl Into<PathBuf>) -> Self {
        Self::new(Target::Unix(path.into()))
    }

    pub fn tcp(addr: impl Into<String>, token: impl Into<String>) -> Self {
        Self::new(Target::Tcp {
            addr: addr.into(),
            token: token.into(),
        })
    }

    /// Sends one request with an optional raw body; returns the status and JSON body.
    pub async fn send_raw(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Result<Answer, ClientError> {
        let (host, token) = match &self.target {
            Target::Unix(_) => ("localhost".to_owned(), None),
            Target::Tcp { addr, token } => (addr.clone(), Some(token.clone())),
        };
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, host)
            .header(http::header::CONTENT_TYPE, "application/json");
        if let Some(token) = token {
            builder = builder.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        if let Some(map) = builder.headers_mut() {
            self.insert_headers(map, headers);
        }
        let request = builder
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| ClientError::Http(e.to_string()))?;
        let response = send_on(self.connect().await?, request).await?;
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| ClientError::Http(e.to_string()))?
            .to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Ok(Answer { status, body })
    }

    /// Sends JSON and returns the raw answer.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, ClientError> {
        let bytes = body.map(|b| serde_json::to_vec(b).unwrap_or_default());
        self.send_raw(method, path, bytes, &[]).await
    }

    /// Sends `body` as JSON and returns `data` of a successful envelope, or the server's
    /// error: every typed route goes through here.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T, ClientError> {
        let bytes = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|e| ClientError::Http(format!("cannot encode the request: {e}")))?;
        let answer = self.send_raw(method, path, bytes, &[]).await?;
        open_envelope(answer.status, answer.body)
    }

    /// The extra headers: this client's, then the call's own (which win).
    fn insert_headers(&self, map: &mut http::HeaderMap, headers: &[(&str, &str)]) {
        let own = self.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
        for (name, value) in own.chain(headers.iter().copied()) {
            if let (Ok(name), Ok(value)) = (
                http::header::HeaderName::from_bytes(name.as_bytes()),
                http::HeaderValue::from_str(value),
            ) {
                map.insert(name, value);
            }
        }
    }
}

/// A byte stream to the server, over either transport.
pub trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// A live connection (docs/websocket.md).
pub type LiveSocket = tokio_tungstenite::WebSocketStream<Box<dyn Io>>;
pub use tokio_tungstenite::tungstenite::Message as LiveMessage;

impl Client {
    /// Opens a WebSocket on `path_and_query` (e.g. `/v2/pty/sessions/t-1/ws?mode=watch`). A
    /// refusal before the upgrade comes back as the server's error.
    pub async fn websocket(&self, path_and_query: &str) -> Result<LiveSocket, ClientError> {
        self.websocket_with(path_and_query, &[]).await
    }

    /// [`Client::websocket`] with extra request headers.
    pub async fn websocket_with(
        &self,
        path_and_query: &str,
        headers: &[(&str, &str)],
    ) -> Result<LiveSocket, ClientError> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
        let (host, token) = match &self.target {
            Target::Unix(_) => ("localhost", None),
            Target::Tcp { addr, token } => (addr.as_str(), Some(token.as_str())),
        };
        let stream = self.connect().await?;
        let mut request = format!("ws://{host}{path_and_query}")
            .into_client_request()
            .map_err(|e| ClientError::Http(e.to_string()))?;
        if let Some(token) = token
            && let Ok(value) = http::HeaderValue::from_str(&format!("Bearer {token}"))
        {
            request
                .headers_mut()
                .insert(http::header::AUTHORIZATION, value);
        }
        self.insert_headers(request.headers_mut(), headers);
        match tokio_tungstenite::client_async(request, stream).await {
            Ok((socket, _)) => Ok(socket),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                let status = response.status().as_u16();
                let body: Value = response
                    .body()
                    .as_deref()
                    .and_then(|b| serde_json::from_slice(b).ok())
                    .unwrap_or(Value::Null);
                Err(open_envelope::<Value>(status, body)
                    .err()
                    .unwrap_or(ClientError::Unexpected {
                        status,
                        body: "an upgrade refused with a successful body".to_owned(),
                    }))
            }
            Err(error) => Err(ClientError::Http(error.to_string())),
        }
    }
}

impl Client {
    /// A byte stream to the server.
    async fn connect(&self) -> Result<Box<dyn Io>, ClientError> {
        match &self.target {
            Target::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path)
                    .await
                    .map_err(|source| ClientError::Connect {
                        target: path.display().to_string(),
                        source,
                    })?;
                Ok(Box::new(stream))
            }
            Target::Tcp { addr, .. } => {
                let stream = tokio::net::TcpStream::connect(addr)
                    .await
                    .map_err(|source| ClientError::Connect {
                        target: addr.clone(),
                        source,
                    })?;
                // Requests are small and latency matters more than packet count.
                let _ = stream.set_nodelay(true);
                Ok(Box::new(stream))
            }
        }
    }
}

/// Opens an answer's envelope: `data` of `{success: true, message, data}`, or the server's
/// error from `{success: false, message, error: {code, retryable}}`. The one place the client
/// reads an envelope.
pub fn open_envelope<T: DeserializeOwned>(status: u16, mut body: Value) -> Result<T, ClientError> {
    let success = body.get("success").and_then(Value::as_bool);
    if success == Some(true)
        && let Some(data) = body.get_mut("data").map(Value::take)
    {
        return serde_json::from_value(data).map_err(|e| ClientError::Unexpected {
            status,
            body: format!("{e}: {body}"),
        });
    }
    let code = body
        .pointer("/error/code")
        .and_then(|c| serde_json::from_value::<ErrorCode>(c.clone()).ok());
    let message = body.get("message").and_then(Value::as_str);
    match (code, message) {
        (Some(code), Some(message)) => Err(ClientError::Api(ApiError::new(code, message))),
        _ => Err(ClientError::Unexpected {
            status,
            body: body.to_string(),
        }),
    }
}

async fn send_on<S>(
    stream: S,
    request: Request<Full<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, ClientError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| ClientError::Http(e.to_string()))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    sender
        .send_request(request)
        .await
        .map_err(|e| ClientError::Http(e.to_string()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_envelope_opens_to_its_data_or_the_servers_error() {
        let data: Result<u32, _> =
            open_envelope(200, json!({"success": true, "message": "ok", "data": 7}));
        assert!(matches!(data, Ok(7)));
        let body = json!({
            "success": false,
            "message": "session t-1 not found",
            "error": {"code": "SESSION_NOT_FOUND", "retryable": false},
        });
        match open_envelope::<u32>(200, body) {
            Err(ClientError::Api(error)) => {
                assert_eq!(error.code, ErrorCode::SessionNotFound);
                assert_eq!(error.message, "session t-1 not found");
            }
            other => panic!("expected the server's error, got {other:?}"),
        }
        let odd = open_envelope::<u32>(502, json!("bad gateway"));
        assert!(matches!(
            odd,
            Err(ClientError::Unexpected { status: 502, .. })
        ));
    }

    #[test]
    fn a_transport_failure_is_backend_unavailable() {
        let error = ClientError::Http("connection reset".to_owned()).into_api();
        assert_eq!(error.code, ErrorCode::BackendUnavailable);
        assert_eq!(error.message, "http: connection reset");
        assert!(error.code.is_retryable());
    }
}
