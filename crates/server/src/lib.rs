//! ptyhub's transports: REST over TCP (bearer token or the web page's login cookie; HTTPS with
//! [`tls`], which an address beyond loopback needs unless plain HTTP is asked for) and over
//! the local unix socket (peer uid), sharing one router, and the web pages for people
//! ([`web`]). Handlers are thin; terminals live in `ptyhub-core`. What the listeners defend
//! against (Host, Origin, descriptor exhaustion) is docs/security.md.
//!
//! Entry type: [`Server`] — [`Server::bind`] then [`Server::run`] with a shutdown token.

pub mod auth;
pub mod close;
pub mod http_error;
pub mod listener;
pub mod login;
pub mod mcp;
pub mod mcp_http;
pub mod metrics;
pub mod stopping;
pub mod stream;
pub mod tls;
pub mod v1;
pub mod v2;
pub mod web;
pub mod wire_error;
pub mod ws;

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use ptyhub_core::registry::Registry;
use tokio_util::sync::CancellationToken;

/// Connections the `--metrics-listen` listener serves at once (scrapers are few).
const METRICS_CONNECTIONS_MAX: usize = 64;

/// Largest request body accepted.
pub const BODY_MAX_BYTES: usize = 16 * 1024 * 1024;

/// The health route: answered without a credential and without touching a terminal, also
/// while the server is out of file descriptors ([`listener`]).
pub const HEALTH_PATH: &str = "/healthz";

/// The readiness route: 200 once the state directory takes a file and discovery has finished,
/// else 503 with the reason; without a credential and without data.
pub const READY_PATH: &str = "/readyz";

/// Shared by every handler.
#[derive(Clone)]
pub struct AppState {
    pub registry: Arc<Registry>,
    pub token: Arc<str>,
    pub listen: SocketAddr,
    /// How the TCP listener serves (`https` with TLS): the scheme of its own pages' origin.
    pub scheme: auth::Scheme,
    pub logins: Arc<login::Logins>,
    /// Tokens of the configuration file, each for one owner with some capabilities.
    pub grants: Arc<[auth::Grant]>,
    /// How often every WebSocket client is pinged ([`ws::PING_EVERY_DEFAULT`] by default).
    pub ws_ping_every: std::time::Duration,
    /// The server's stop, which every WebSocket and event stream hears ([`stopping`]).
    pub stopping: stopping::Stopping,
    /// What the server measures of its requests (`/metrics`).
    pub metrics: Arc<metrics::Metrics>,
}

/// What the server needs to start.
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub token: String,
    pub socket_path: PathBuf,
    pub registry: Arc<Registry>,
    pub grants: Vec<auth::Grant>,
    /// What the TCP listener lets its clients hold.
    pub tcp_limits: listener::ServeLimits,
    /// What the local socket lets its clients hold (its own budget: a flood of TCP connections
    /// never takes the CLI's socket down).
    pub unix_limits: listener::ServeLimits,
    /// The longest wait of one tool call over `/mcp` ([`mcp::WAIT_CAP_DEFAULT`] by default).
    pub mcp_wait_cap: std::time::Duration,
    /// TLS for the TCP listener (certificate chain and key, PEM).
    pub tls: Option<tls::TlsFiles>,
    /// Plain HTTP on an address beyond loopback is meant ([`tls::check_listen`]).
    pub allow_plain_http: bool,
    /// How often every WebSocket client is pinged ([`ws::PING_EVERY_DEFAULT`] by default).
    pub ws_ping_every: std::time::Duration,
    /// A listener of its own that serves `/metrics` alone, without a token.
    pub metrics_listen: Option<SocketAddr>,
}

/// A bound server: both listeners are open, so the addresses can be announced before serving.
pub struct Server {
    tcp: tokio::net::TcpListener,
    unix: tokio::net::UnixListener,
    state: AppState,
    tcp_limits: listener::ServeLimits,
    unix_limits: listener::ServeLimits,
    mcp_wait_cap: std::time::Duration,
    tls: Option<tokio_rustls::TlsAcceptor>,
    metrics_tcp: Option<tokio::net::TcpListener>,
    pub local_addr: SocketAddr,
    pub socket_path: PathBuf,
    /// Where `--metrics-listen` serves, if it was given.
    pub metrics_addr: Option<SocketAddr>,
}

impl Server {
    pub async fn bind(config: ServerConfig) -> std::io::Result<Self> {
        tls::check_listen(config.listen, config.tls.is_some(), config.allow_plain_http)?;
        let tls = config.tls.as_ref().map(tls::load).transpose()?;
        let tcp = tokio::net::TcpListener::bind(config.listen).await?;
        let local_addr = tcp.local_addr()?;
        if let Some(parent) = config.socket_path.parent() {
            ptyhub_core::state_dir::create_socket_dir(parent)?;
        }
        // A socket that answers belongs to a live server: never take it over.
        if std::os::unix::net::UnixStream::connect(&config.socket_path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!(
                    "another ptyhub server answers on {}; stop it first, or give this one \
                     its own --socket",
                    config.socket_path.display()
                ),
            ));
        }
        let metrics_tcp = match config.metrics_listen {
            Some(addr) => Some(tokio::net::TcpListener::bind(addr).await?),
            None => None,
        };
        let metrics_addr = metrics_tcp
            .as_ref()
            .map(tokio::net::TcpListener::local_addr)
            .transpose()?;
        let _ = std::fs::remove_file(&config.socket_path);
        let unix = tokio::net::UnixListener::bind(&config.socket_path)?;
        std::fs::set_permissions(&config.socket_path, std::fs::Permissions::from_mode(0o600))?;
        Ok(Self {
            tcp,
            unix,
            state: AppState {
                registry: config.registry,
                token: config.token.into(),
                listen: local_addr,
                scheme: if tls.is_some() {
                    auth::Scheme::Https
                } else {
                    auth::Scheme::Http
                },
                logins: Arc::new(login::Logins::new(local_addr.port())),
                grants: config.grants.into(),
                ws_ping_every: config.ws_ping_every,
                stopping: stopping::Stopping::default(),
                metrics: Arc::default(),
            },
            tcp_limits: config.tcp_limits,
            unix_limits: config.unix_limits,
            mcp_wait_cap: config.mcp_wait_cap,
            tls: tls.map(tokio_rustls::TlsAcceptor::from),
            metrics_tcp,
            local_addr,
            socket_path: config.socket_path,
            metrics_addr,
        })
    }

    /// Every route that shows or changes data (the caller puts them behind authentication).
    fn data_routes(&self) -> axum::Router<AppState> {
        v2::routes()
            .route("/openapi.json", axum::routing::get(openapi_json))
            .route(
                metrics::METRICS_PATH,
                axum::routing::get(metrics::scrape_authenticated),
            )
            .merge(v1::routes())
            .merge(ws::routes())
            .nest_service(
                "/mcp",
                mcp_http::service(
                    self.state.clone(),
                    self.socket_path.clone(),
                    self.mcp_wait_cap,
                )
                .with_state(self.state.clone()),
            )
    }

    /// The data routes (already behind authentication) and the web pages, which hold no data
    /// and are served to anyone.
    fn router(&self, data: axum::Router<AppState>) -> axum::Router<AppState> {
        web::routes()
            .route(HEALTH_PATH, axum::routing::get(health))
            .route(READY_PATH, axum::routing::get(ready))
            .merge(data)
            .fallback(http_error::no_route)
            .layer(DefaultBodyLimit::max(BODY_MAX_BYTES))
            .layer(axum::middleware::from_fn_with_state(
                Arc::clone(&self.state.metrics),
                metrics::observe_request,
            ))
    }

    /// Serves until `shutdown` is cancelled, then tells every live connection why
    /// ([`stopping`]) and waits for them. Terminals keep running afterwards.
    pub async fn run(self, shutdown: CancellationToken) -> std::io::Result<()> {
        let stopping = self.state.stopping.clone();
        let stop_told = {
            let shutdown = shutdown.clone();
            async move {
                shutdown.cancelled().await;
                stopping.stop().await;
            }
        };
        let tcp_app = self
            .router(
                self.data_routes()
                    .layer(axum::middleware::from_fn_with_state(
                        self.state.clone(),
                        auth::tcp_auth,
                    )),
            )
            .layer(axum::middleware::from_fn_with_state(
                self.state.clone(),
                auth::host_check,
            ))
            .with_state(self.state.clone());
        let unix_app = self
            .router(
                self.data_routes()
                    .layer(axum::middleware::from_fn_with_state(
                        self.state.clone(),
                        auth::unix_auth,
                    )),
            )
            .with_state(self.state.clone());
        let tcp = listener::serve(
            self.tcp,
            tcp_app,
            self.tcp_limits,
            self.tls.clone(),
            listener::OnExhausted::Shed,
            shutdown.clone(),
        );
        let metrics = async {
            if let Some(metrics_tcp) = self.metrics_tcp {
                listener::serve(
                    metrics_tcp,
                    metrics::metrics_router(self.state.clone()),
                    listener::ServeLimits {
                        max_connections: METRICS_CONNECTIONS_MAX,
                        header_read_timeout: self.tcp_limits.header_read_timeout,
                    },
                    None,
                    listener::OnExhausted::Shed,
                    shutdown.clone(),
                )
                .await;
            }
        };
        // The local socket is the operator's way in: served even when descriptors run out.
        let unix = listener::serve(
            self.unix,
            unix_app,
            self.unix_limits,
            None,
            listener::OnExhausted::Serve,
            shutdown.clone(),
        );
        tokio::join!(tcp, unix, stop_told, metrics);
        let _ = std::fs::remove_file(&self.socket_path);
        Ok(())
    }
}

/// The OpenAPI 3.1 description of REST v1 and v2, generated from the handlers.
pub fn openapi() -> utoipa::openapi::OpenApi {
    use utoipa::OpenApi as _;
    let mut doc = v2::V2Doc::openapi();
    doc.merge(v1::V1Doc::openapi());
    doc.info = utoipa::openapi::InfoBuilder::new()
        .title("ptyhub")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some(
            "Persistent terminals for AI agents. Every answer is wrapped in {success, message, data}; \
             errors are {success: false, message, error: {code, retryable}}. v1 is compatible with \
             the agent-sandbox 0.0.30 SDK.",
        ))
        .build();
    doc
}

/// `GET /healthz`: the server answers (it holds no data, so it needs no credential).
async fn health() -> axum::Json<ptyhub_protocol::api::Envelope<serde_json::Value>> {
    axum::Json(ptyhub_protocol::api::Envelope::ok(
        "ok",
        serde_json::json!({ "status": "ok" }),
    ))
}

/// `GET /readyz`: whether the server can take new work now. Ready once discovery of the
/// terminals already in the state directory has finished and the directory takes a new file
/// (a real probe: one is created and removed); otherwise 503 with the reason, which names no
/// path or terminal.
async fn ready(
    axum::extract::State(state): axum::extract::State<AppState>,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let refusal = if !state.registry.is_discovered() {
        Some("discovering the terminals in the state directory".to_owned())
    } else {
        state
            .registry
            .state_dir()
            .probe_writable()
            .err()
            .map(|error| format!("the state directory does not take new files: {error}"))
    };
    match refusal {
        None => axum::Json(ptyhub_protocol::api::Envelope::ok(
            "ready",
            serde_json::json!({ "status": "ready" }),
        ))
        .into_response(),
        Some(reason) => {
            let error = ptyhub_protocol::error::ApiError::new(
                ptyhub_protocol::error::ErrorCode::BackendUnavailable,
                reason,
            );
            let wire = wire_error::WireError::new(error, wire_error::Surface::RestV2);
            (wire.status, axum::Json(wire.body())).into_response()
        }
    }
}

async fn openapi_json() -> axum::Json<utoipa::openapi::OpenApi> {
    axum::Json(openapi())
}
