//! A small typed ptyhub client over the local unix socket or HTTP, used by the CLI and the
//! tests. One connection per request; answers are unwrapped from the envelope, and failures
//! come back as the server's [`ApiError`].

use std::path::PathBuf;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use ptyhub_protocol::error::{ApiError, ErrorCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use http::Method;

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

/// A raw answer: status and JSON body.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

#[derive(Clone, Debug)]
pub struct Client {
    target: Target,
}

impl Client {
    pub fn new(target: Target) -> Self {
        Self { target }
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
            for (name, value) in headers {
                if let (Ok(name), Ok(value)) = (
                    http::header::HeaderName::from_bytes(name.as_bytes()),
                    http::header::HeaderValue::from_str(value),
                ) {
                    map.insert(name, value);
                }
            }
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

    /// Sends JSON and returns `data` of a successful envelope, or the server's error.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, ClientError> {
        let answer = self.send(method, path, body).await?;
        let success = answer.body.get("success").and_then(Value::as_bool);
        if success == Some(true)
            && let Some(data) = answer.body.get("data")
        {
            return serde_json::from_value(data.clone()).map_err(|e| ClientError::Unexpected {
                status: answer.status,
                body: format!("{e}: {}", answer.body),
            });
        }
        Err(api_error(answer.status, &answer.body))
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
        for (name, value) in headers {
            if let (Ok(name), Ok(value)) = (
                http::header::HeaderName::from_bytes(name.as_bytes()),
                http::HeaderValue::from_str(value),
            ) {
                request.headers_mut().insert(name, value);
            }
        }
        match tokio_tungstenite::client_async(request, stream).await {
            Ok((socket, _)) => Ok(socket),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                let status = response.status().as_u16();
                let body: Value = response
                    .body()
                    .as_deref()
                    .and_then(|b| serde_json::from_slice(b).ok())
                    .unwrap_or(Value::Null);
                Err(api_error(status, &body))
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

/// The server's error in an answer's body.
fn api_error(status: u16, body: &Value) -> ClientError {
    let code = body
        .pointer("/error/code")
        .and_then(|c| serde_json::from_value::<ErrorCode>(c.clone()).ok());
    let message = body.get("message").and_then(Value::as_str);
    match (code, message) {
        (Some(code), Some(message)) => ClientError::Api(ApiError::new(code, message)),
        _ => ClientError::Unexpected {
            status,
            body: body.to_string(),
        },
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
