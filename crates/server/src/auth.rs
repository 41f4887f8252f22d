//! Who a request acts for, and what it may do: the one policy function of the server.
//!
//! A request over TCP carries a bearer token, or the web page's login cookie (a random secret
//! that stands for the principal that signed in, [`crate::login`]); the generated local token,
//! and every login or ticket made with it, acts for the server's own user with every capability.
//! A cookie is sent by the browser on its own, so a request that uses one must come from this
//! server's own pages (`Origin`, checked by `is_same_origin`: the same scheme, host and port);
//! requests with a bearer token are not asked, except where [`require_own_origin`] applies
//! (signing in and out, WebSocket upgrades, `/mcp`). A request over the local unix socket acts
//! for the peer's uid (`SO_PEERCRED`); the server's own user (or root) gets every capability.
//! The owner is the only principal that sees a terminal.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ptyhub_protocol::api::CreateSessionParams;
use ptyhub_protocol::error::{ApiError, ErrorCode};
use ptyhub_protocol::event::{InputSource, InputVia};

use crate::AppState;
use crate::http_error::HttpError;

/// One operation a principal may be granted; none implies another
/// (docs/compatibility.md#capabilities).
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

    /// The capability named `name` (`terminal.read`, …).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }

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
    /// The credential's non-secret name: `server` for the server's own token (and the logins
    /// made with it), a configured token's `name`, `local` for the unix socket's peer.
    pub name: String,
    /// How the request arrived, as its client declares it ([`VIA_HEADER`]): what its input is
    /// attributed to, never a right.
    pub via: InputVia,
}

/// A token from the configuration file: it acts for `owner` with `capabilities` only.
#[derive(Clone, Debug)]
pub struct Grant {
    pub token: String,
    pub owner: String,
    pub capabilities: Vec<Capability>,
    /// The token's non-secret name (what its input is attributed to).
    pub name: String,
}

/// The header by which a client says how its requests arrive, for the attribution of what
/// they type (`pty.input` events, presence): `mcp` (the MCP bridge) or `cli` (the `ptyhub`
/// command line); absent or anything else: `rest`.
pub const VIA_HEADER: &str = "x-ptyhub-via";

/// How a request with `headers` arrived, as [`VIA_HEADER`] declares it.
fn declared_via(headers: &HeaderMap) -> InputVia {
    match headers.get(VIA_HEADER).and_then(|v| v.to_str().ok()) {
        Some("mcp") => InputVia::Mcp,
        Some("cli") => InputVia::Cli,
        _ => InputVia::Rest,
    }
}

/// The header by which a client of the local socket (the server's own user, who may do
/// anything) asks to act with less: `<owner> <capability>,<capability>…`. The MCP endpoint's
/// bridge uses it so a tool call has exactly the rights of the token that made it.
pub const ACT_AS_HEADER: &str = "x-ptyhub-act-as";

impl Principal {
    /// The value of [`ACT_AS_HEADER`] for this principal.
    pub fn act_as_value(&self) -> String {
        let capabilities: Vec<&str> = self.capabilities.iter().map(|c| c.as_str()).collect();
        format!(
            "{} {} name={}",
            self.owner,
            capabilities.join(","),
            self.name
        )
    }

    /// This principal narrowed to what `value` ([`ACT_AS_HEADER`]) asks for: an owner, then
    /// capabilities separated by commas, then optionally `name=<token name>`.
    fn narrowed(&self, value: &str) -> Result<Self, ApiError> {
        let invalid = || {
            ApiError::invalid(format!(
                "{ACT_AS_HEADER} must be '<owner> <capability>,… [name=<name>]'"
            ))
        };
        let mut words = value.split_whitespace();
        let owner = words.next().unwrap_or_default();
        if ptyhub_protocol::ids::Name::parse(owner).is_err() {
            return Err(invalid());
        }
        let mut capabilities = Vec::new();
        let mut name = self.name.clone();
        for word in words {
            if let Some(named) = word.strip_prefix("name=") {
                ptyhub_protocol::ids::Name::parse(named).map_err(|_| invalid())?;
                named.clone_into(&mut name);
                continue;
            }
            for capability in word.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                let capability = Capability::parse(capability).ok_or_else(invalid)?;
                if self.capabilities.contains(&capability) {
                    capabilities.push(capability);
                }
            }
        }
        Ok(Self {
            owner: owner.to_owned(),
            capabilities,
            name,
            via: self.via,
        })
    }

    /// The owner with every capability, for the server's own token.
    pub(crate) fn everything(owner: String) -> Self {
        Self {
            owner,
            capabilities: Capability::ALL.to_vec(),
            name: "server".to_owned(),
            via: InputVia::Rest,
        }
    }

    /// Who this principal is in `pty.input` events and presence: `<owner>/<name>`.
    pub fn who(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    /// What this principal's input is attributed to.
    pub fn source(&self) -> InputSource {
        InputSource {
            by: self.who(),
            via: self.via,
        }
    }

    /// Refuses `operation` unless this principal has every capability it needs
    /// ([`Operation::needs`]); the message names the first one missing and why it is needed.
    pub fn allow(&self, operation: Operation) -> Result<(), ApiError> {
        match operation
            .needs()
            .iter()
            .find(|capability| !self.capabilities.contains(capability))
        {
            None => Ok(()),
            Some(missing) => Err(ApiError::new(
                ErrorCode::PermissionDenied,
                format!(
                    "missing capability {}: {} needs {}",
                    missing.as_str(),
                    operation.describe(),
                    operation
                        .needs()
                        .iter()
                        .map(|c| c.as_str())
                        .collect::<Vec<_>>()
                        .join(" and ")
                ),
            )),
        }
    }
}

/// Everything a client can ask of a terminal, by what it does and what its answer tells: the
/// one table of which capabilities each needs (docs/compatibility.md#capabilities). A
/// transport names the operation of its route, frame or tool and asks
/// [`Principal::allow`] before it changes anything; it never checks a capability itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Create (or reopen) a terminal that runs the default shell with the server's
    /// environment: only where it starts (`cwd`), its size and its id are the client's.
    Create,
    /// Create a terminal with options that make it run something of the client's choosing
    /// (`shell`, `env`: `PROMPT_COMMAND`, `BASH_ENV`, `PATH` and the like run code), which is
    /// typing by another road.
    CreateRunning,
    /// List terminals, or answer with what a terminal shows or printed (status, screen,
    /// events, snapshot, observe, scrollback, wait, view, a job's state and output).
    Read,
    /// Type bytes into a terminal, or change how it runs commands, without answering with
    /// its output (input, v1 write and update).
    Type,
    /// Type a command or text and answer with what it printed (exec, send, starting a job).
    Run,
    /// Change the terminal's size.
    Resize,
    /// Send a signal to the foreground program.
    Signal,
    /// Stop the running job and answer with its state and output so far.
    Stop,
    /// Close a terminal (every process it started ends).
    Close,
    /// A live connection that only watches.
    Watch,
    /// A live connection that may type (relay, attach).
    Attach,
}

impl Operation {
    /// The operation of creating with `params`: [`Self::CreateRunning`] with a shell or any
    /// variable of the client's own in the shell's environment (many of them run code, and a
    /// list of the harmless ones would never be complete), else [`Self::Create`].
    pub fn create(params: &CreateSessionParams) -> Self {
        if params.shell.is_some() || params.env.as_ref().is_some_and(|env| !env.is_empty()) {
            Self::CreateRunning
        } else {
            Self::Create
        }
    }

    /// The capabilities this operation needs, all of them.
    pub fn needs(self) -> &'static [Capability] {
        match self {
            Self::Create => &[Capability::Create],
            Self::CreateRunning => &[Capability::Create, Capability::Write],
            Self::Read | Self::Watch => &[Capability::Read],
            Self::Type => &[Capability::Write],
            Self::Run | Self::Attach => &[Capability::Write, Capability::Read],
            Self::Resize => &[Capability::Resize],
            Self::Signal => &[Capability::Signal],
            Self::Stop => &[Capability::Stop, Capability::Read],
            Self::Close => &[Capability::Kill],
        }
    }

    /// What the refusal calls this operation.
    fn describe(self) -> &'static str {
        match self {
            Self::Create => "creating a terminal",
            Self::CreateRunning => "creating a terminal with a shell or environment of your choice",
            Self::Read => "reading a terminal",
            Self::Type => "typing into a terminal",
            Self::Run => "running a command (exec, send, jobs), which answers with its output,",
            Self::Resize => "resizing a terminal",
            Self::Signal => "signalling a terminal",
            Self::Stop => "stopping a job, which answers with its output,",
            Self::Close => "closing a terminal",
            Self::Watch => "watching a terminal",
            Self::Attach => "a connection that types",
        }
    }
}

/// The peer of a local unix-socket connection.
#[derive(Clone, Copy, Debug)]
pub struct UnixPeer {
    pub uid: Option<u32>,
}

impl UnixPeer {
    /// The peer of `stream`, as the kernel names it.
    pub fn of(stream: &tokio::net::UnixStream) -> Self {
        Self {
            uid: stream.peer_cred().ok().map(|cred| cred.uid()),
        }
    }
}

/// What a request presents: the input of the single policy decision.
enum Credential<'a> {
    /// `Authorization: Bearer …` over TCP.
    Bearer(&'a str),
    /// The web page's login cookie over TCP; `is_same_origin` tells whether the request came
    /// from this server's own pages (see [`is_same_origin`]).
    Login {
        value: &'a str,
        is_same_origin: bool,
    },
    /// A one-time ticket, exchanged for a login.
    Ticket(&'a str),
    /// Nothing, over TCP.
    Missing,
    /// The peer of a local unix-socket connection.
    PeerUid(Option<u32>),
}

fn resolve(state: &AppState, credential: Credential<'_>) -> Result<Principal, ApiError> {
    let server_uid = rustix::process::getuid().as_raw();
    match credential {
        Credential::Bearer(token) if constant_time_eq(token.as_bytes(), state.token.as_bytes()) => {
            Ok(Principal::everything(server_uid.to_string()))
        }
        Credential::Bearer(token) => state
            .grants
            .iter()
            .find(|grant| constant_time_eq(token.as_bytes(), grant.token.as_bytes()))
            .map(|grant| Principal {
                owner: grant.owner.clone(),
                capabilities: grant.capabilities.clone(),
                name: grant.name.clone(),
                via: InputVia::Rest,
            })
            .ok_or_else(|| ApiError::new(ErrorCode::Unauthenticated, "invalid token")),
        Credential::Login {
            is_same_origin: false,
            ..
        } => Err(ApiError::new(
            ErrorCode::PermissionDenied,
            "the login cookie is accepted only from this server's own pages (Origin)",
        )),
        Credential::Login { value, .. } => state.logins.find(value).ok_or_else(|| {
            ApiError::new(
                ErrorCode::Unauthenticated,
                "the login has ended; sign in again",
            )
        }),
        Credential::Ticket(ticket) => state.logins.redeem_ticket(ticket).ok_or_else(|| {
            ApiError::new(
                ErrorCode::Unauthenticated,
                "the ticket is unknown, used or expired",
            )
        }),
        Credential::Missing => Err(ApiError::new(
            ErrorCode::Unauthenticated,
            "missing bearer token (Authorization: Bearer <token>)",
        )),
        Credential::PeerUid(Some(uid)) if uid == server_uid || uid == 0 => Ok(Principal {
            name: "local".to_owned(),
            ..Principal::everything(server_uid.to_string())
        }),
        Credential::PeerUid(_) => Err(ApiError::new(
            ErrorCode::PermissionDenied,
            "the local socket serves only the server's own user",
        )),
    }
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The value of the cookie `name`, from any `Cookie` header.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(key, value)| (key == name).then_some(value))
}

/// The credential of a TCP request: its bearer token if it has one, else its login cookie.
fn tcp_credential<'a>(state: &AppState, method: &Method, headers: &'a HeaderMap) -> Credential<'a> {
    if let Some(token) = bearer(headers) {
        return Credential::Bearer(token);
    }
    match cookie(headers, state.logins.cookie_name()) {
        Some(value) => Credential::Login {
            value,
            is_same_origin: is_same_origin(state.scheme, method, headers),
        },
        None => Credential::Missing,
    }
}

/// Whether a request comes from this server's own pages as far as the browser tells (the
/// defence against cross-site request forgery for cookie-authenticated requests): its `Origin`
/// is this server's own ([`origin_is_own`]), or it has no `Origin` and only reads (`GET`/`HEAD`,
/// not a WebSocket upgrade). Browsers send `Origin` with every WebSocket upgrade and every
/// `POST`, `PUT` and `DELETE`.
fn is_same_origin(scheme: Scheme, method: &Method, headers: &HeaderMap) -> bool {
    match headers.get(header::ORIGIN) {
        Some(origin) => origin_is_own(scheme, origin, headers.get(header::HOST)),
        None => {
            (method == Method::GET || method == Method::HEAD)
                && !headers.contains_key(header::UPGRADE)
        }
    }
}

/// How the TCP listener serves: the scheme of its own pages' origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
        }
    }

    /// The port an origin or `Host` of this scheme means when it names none.
    fn default_port(self) -> u16 {
        match self {
            Self::Http => 80,
            Self::Https => 443,
        }
    }
}

/// A host and port as an `Origin` or `Host` header names them (`name:port`, `[v6]:port`, or
/// without the port: the scheme's default).
fn host_and_port(authority: &str, scheme: Scheme) -> Option<(&str, u16)> {
    if authority.is_empty() || authority.contains(['/', '@', '?', '#', ' ']) {
        return None;
    }
    let (name, port) = match authority.rsplit_once(':') {
        // A bare IPv6 address has colons but no brackets: it names no port.
        Some((name, port)) if !name.contains(':') || name.ends_with(']') => {
            (name, port.parse::<u16>().ok()?)
        }
        _ => (authority, scheme.default_port()),
    };
    (!name.is_empty()).then_some((name, port))
}

/// Whether `origin` is this server's own: the same scheme as the listener serves, and the host
/// and port of the request's `Host` (which [`host_check`] has already found to be this
/// machine). `https://127.0.0.1:PORT` is not the plain-HTTP server's origin, nor is another
/// port on the same host.
fn origin_is_own(scheme: Scheme, origin: &HeaderValue, host: Option<&HeaderValue>) -> bool {
    let (Ok(origin), Some(Ok(host))) = (origin.to_str(), host.map(HeaderValue::to_str)) else {
        return false;
    };
    let Some(authority) = origin
        .strip_prefix(scheme.as_str())
        .and_then(|rest| rest.strip_prefix("://"))
    else {
        return false;
    };
    match (
        host_and_port(authority, scheme),
        host_and_port(host, scheme),
    ) {
        (Some((origin_name, origin_port)), Some((host_name, host_port))) => {
            origin_name.eq_ignore_ascii_case(host_name) && origin_port == host_port
        }
        _ => false,
    }
}

/// How a browser signs in (`POST /auth/session`).
pub enum SignIn<'a> {
    Token(&'a str),
    Ticket(&'a str),
}

/// Refuses a request whose `Origin` is not this server's own (the same scheme, host and
/// port; programs that send no `Origin` pass): the check for signing in and out, which carry
/// no login yet, for WebSocket upgrades and for `/mcp`, whatever their credential.
pub fn require_own_origin(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    match headers.get(header::ORIGIN) {
        Some(origin) if !origin_is_own(state.scheme, origin, headers.get(header::HOST)) => {
            Err(ApiError::new(
                ErrorCode::PermissionDenied,
                "accepted only from this server's own pages (Origin)",
            ))
        }
        _ => Ok(()),
    }
}

/// The principal a sign-in stands for (a browser's must come from this server's own pages).
pub fn sign_in(
    state: &AppState,
    headers: &HeaderMap,
    sign_in: SignIn<'_>,
) -> Result<Principal, ApiError> {
    require_own_origin(state, headers)?;
    resolve(
        state,
        match sign_in {
            SignIn::Token(token) => Credential::Bearer(token),
            SignIn::Ticket(ticket) => Credential::Ticket(ticket),
        },
    )
}

/// Whether a `Host` header names this machine (no DNS rebinding through a foreign name). An
/// unspecified address (`0.0.0.0`, `::`) names no machine, even when the server listens on it.
fn is_local_host(host: Option<&str>, listen: SocketAddr) -> bool {
    let Some(host) = host else {
        return true; // HTTP/1.0 clients may send none.
    };
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    if name
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified())
    {
        return false;
    }
    matches!(name, "localhost" | "127.0.0.1" | "::1")
        || (!listen.ip().is_unspecified() && name == listen.ip().to_string())
}

/// Middleware for everything on the TCP listener, pages included: the `Host` check. A request
/// with more than one `Host` header is malformed (RFC 9112 §3.2): which one a proxy or a check
/// reads would decide where it goes.
pub async fn host_check(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let mut hosts = request.headers().get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return HttpError::from(ApiError::invalid("more than one Host header")).into_response();
    }
    let host = match host.map(HeaderValue::to_str) {
        Some(Ok(host)) => Some(host),
        Some(Err(_)) => {
            return HttpError::from(ApiError::invalid("the Host header is not text"))
                .into_response();
        }
        None => None,
    };
    if is_local_host(host, state.listen) {
        next.run(request).await
    } else {
        HttpError::from(ApiError::new(
            ErrorCode::PermissionDenied,
            "Host header is not allowed",
        ))
        .into_response()
    }
}

/// Marks a request that carried only the login cookie and no `Origin`: a simple request that
/// any page can make a browser send (an `<img>` tag), so it may read but must change nothing.
#[derive(Clone, Copy, Debug)]
pub struct SimpleCookieRequest;

impl SimpleCookieRequest {
    /// Refuses a state change (`what`) asked by a simple cookie request.
    pub fn refuse(what: &str) -> ApiError {
        ApiError::new(
            ErrorCode::PermissionDenied,
            format!(
                "{what} needs the token, or a request from this server's own page (with Origin):                  with only the login cookie any page could make the browser ask"
            ),
        )
    }
}

/// Middleware for the data routes on the TCP listener: the bearer token or the login cookie.
pub async fn tcp_auth(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let credential = tcp_credential(&state, request.method(), request.headers());
    let is_simple_cookie = matches!(credential, Credential::Login { .. })
        && !request.headers().contains_key(header::ORIGIN);
    match resolve(&state, credential) {
        Ok(mut principal) => {
            principal.via = declared_via(request.headers());
            request.extensions_mut().insert(principal);
            if is_simple_cookie {
                request.extensions_mut().insert(SimpleCookieRequest);
            }
            next.run(request).await
        }
        Err(error) => HttpError::from(error).into_response(),
    }
}

/// Middleware for the unix socket: the peer's uid, narrowed by [`ACT_AS_HEADER`] if sent.
pub async fn unix_auth(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<UnixPeer>,
    mut request: Request,
    next: Next,
) -> Response {
    let via = declared_via(request.headers());
    let resolved = resolve(&state, Credential::PeerUid(peer.uid))
        .map(|principal| Principal { via, ..principal })
        .and_then(|principal| match request.headers().get(ACT_AS_HEADER) {
            Some(value) => principal.narrowed(value.to_str().unwrap_or_default()),
            None => Ok(principal),
        });
    match resolved {
        Ok(principal) => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(error) => HttpError::from(error).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                name.clone(),
                HeaderValue::from_str(value).unwrap_or_else(|_| HeaderValue::from_static("")),
            );
        }
        map
    }

    #[test]
    fn the_origin_must_be_this_host() {
        let http = Scheme::Http;
        let host = (header::HOST, "127.0.0.1:18091");
        let same = headers(&[host.clone(), (header::ORIGIN, "http://127.0.0.1:18091")]);
        assert!(is_same_origin(http, &Method::POST, &same));
        let foreign_port = headers(&[host.clone(), (header::ORIGIN, "http://127.0.0.1:8080")]);
        assert!(!is_same_origin(http, &Method::POST, &foreign_port));
        assert!(
            !is_same_origin(http, &Method::GET, &foreign_port),
            "a foreign origin never acts"
        );
        let foreign_site = headers(&[host.clone(), (header::ORIGIN, "http://evil.example")]);
        assert!(!is_same_origin(http, &Method::GET, &foreign_site));
        let null = headers(&[host.clone(), (header::ORIGIN, "null")]);
        assert!(!is_same_origin(http, &Method::GET, &null));
        let other_scheme = headers(&[host.clone(), (header::ORIGIN, "https://127.0.0.1:18091")]);
        assert!(
            !is_same_origin(http, &Method::DELETE, &other_scheme),
            "https is another origin than the plain-HTTP server's"
        );
        assert!(is_same_origin(
            Scheme::Https,
            &Method::DELETE,
            &other_scheme
        ));
        assert!(!is_same_origin(Scheme::Https, &Method::DELETE, &same));
    }

    #[test]
    fn origins_compare_host_and_port_with_the_schemes_default() {
        let own = |scheme, origin: &str, host: &str| {
            origin_is_own(
                scheme,
                &HeaderValue::from_str(origin).unwrap_or_else(|_| HeaderValue::from_static("")),
                Some(&HeaderValue::from_str(host).unwrap_or_else(|_| HeaderValue::from_static(""))),
            )
        };
        assert!(own(Scheme::Http, "http://localhost", "localhost:80"));
        assert!(own(Scheme::Http, "http://LOCALHOST:80", "localhost"));
        assert!(own(Scheme::Https, "https://localhost", "localhost:443"));
        assert!(!own(Scheme::Https, "https://localhost", "localhost:80"));
        assert!(own(Scheme::Http, "http://[::1]:5", "[::1]:5"));
        assert!(!own(Scheme::Http, "http://[::1]:5", "[::1]:6"));
        assert!(!own(Scheme::Http, "http://127.0.0.1:5", "localhost:5"));
        assert!(!own(Scheme::Http, "http://127.0.0.1:5/", "127.0.0.1:5"));
        assert!(!own(Scheme::Http, "http://a@127.0.0.1:5", "127.0.0.1:5"));
        assert!(!own(Scheme::Http, "http:127.0.0.1:5", "127.0.0.1:5"));
        assert!(!own(Scheme::Http, "ws://127.0.0.1:5", "127.0.0.1:5"));
    }

    #[test]
    fn unspecified_addresses_name_no_host() {
        let any: SocketAddr = "0.0.0.0:18091".parse().unwrap_or_else(|e| panic!("{e}"));
        assert!(!is_local_host(Some("0.0.0.0:18091"), any));
        assert!(!is_local_host(Some("0.0.0.0"), any));
        assert!(!is_local_host(Some("[::]:18091"), any));
        assert!(is_local_host(Some("127.0.0.1:18091"), any));
        let lan: SocketAddr = "192.168.1.5:1".parse().unwrap_or_else(|e| panic!("{e}"));
        assert!(is_local_host(Some("192.168.1.5:1"), lan));
        assert!(!is_local_host(Some("evil.example"), lan));
    }

    #[test]
    fn without_an_origin_a_cookie_only_reads() {
        let http = Scheme::Http;
        let plain = headers(&[(header::HOST, "localhost:1")]);
        assert!(is_same_origin(http, &Method::GET, &plain));
        assert!(is_same_origin(http, &Method::HEAD, &plain));
        assert!(!is_same_origin(http, &Method::POST, &plain));
        assert!(!is_same_origin(http, &Method::DELETE, &plain));
        let upgrade = headers(&[
            (header::HOST, "localhost:1"),
            (header::UPGRADE, "websocket"),
        ]);
        assert!(
            !is_same_origin(http, &Method::GET, &upgrade),
            "every upgrade needs an Origin"
        );
        let no_host = headers(&[(header::ORIGIN, "http://localhost:1")]);
        assert!(!is_same_origin(http, &Method::GET, &no_host));
    }

    fn principal(capabilities: &[Capability]) -> Principal {
        Principal {
            owner: "bot".to_owned(),
            capabilities: capabilities.to_vec(),
            name: "token-1".to_owned(),
            via: InputVia::Rest,
        }
    }

    #[test]
    fn the_act_as_header_carries_the_name_and_an_older_one_still_parses() {
        let bridge = Principal::everything("1000".to_owned());
        let caller = principal(&[Capability::Read, Capability::Write]);
        let narrowed = bridge
            .narrowed(&caller.act_as_value())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(narrowed.who(), "bot/token-1");
        assert!(narrowed.allow(Operation::Run).is_ok());
        let older = bridge
            .narrowed("bot terminal.read")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(older.who(), "bot/server", "the bridge's own name");
        assert!(older.allow(Operation::Type).is_err());
        let nothing = principal(&[]);
        let none = bridge
            .narrowed(&nothing.act_as_value())
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(none.allow(Operation::Read).is_err(), "no capability");
        assert!(bridge.narrowed("bot terminal.read name=a/b").is_err());
    }

    #[test]
    fn what_answers_with_output_needs_read_and_what_runs_code_needs_write() {
        let writer = principal(&[Capability::Create, Capability::Write]);
        let refusal = writer
            .allow(Operation::Run)
            .err()
            .map(|e| (e.code, e.message));
        assert_eq!(
            refusal.as_ref().map(|(code, _)| *code),
            Some(ErrorCode::PermissionDenied)
        );
        assert!(
            refusal.is_some_and(
                |(_, message)| message.starts_with("missing capability terminal.read:")
            ),
            "the refusal names the missing capability"
        );
        assert!(writer.allow(Operation::Type).is_ok());
        let creator = principal(&[Capability::Create, Capability::Read]);
        let plain = CreateSessionParams::default();
        assert!(creator.allow(Operation::create(&plain)).is_ok());
        let with_env = CreateSessionParams {
            env: Some([("PROMPT_COMMAND".to_owned(), "id".to_owned())].into()),
            ..CreateSessionParams::default()
        };
        let with_shell = CreateSessionParams {
            shell: Some("sh".to_owned()),
            ..CreateSessionParams::default()
        };
        let empty_env = CreateSessionParams {
            env: Some(std::collections::BTreeMap::new()),
            ..CreateSessionParams::default()
        };
        assert!(creator.allow(Operation::create(&with_env)).is_err());
        assert!(creator.allow(Operation::create(&with_shell)).is_err());
        assert!(creator.allow(Operation::create(&empty_env)).is_ok());
        assert!(writer.allow(Operation::create(&with_env)).is_ok());
        assert!(creator.allow(Operation::Watch).is_ok());
        assert!(creator.allow(Operation::Attach).is_err());
    }

    #[test]
    fn cookies_are_found_by_name() {
        let map = headers(&[
            (header::COOKIE, "a=1; ptyhub_login_1=x.y"),
            (header::COOKIE, "ptyhub_login_2=z"),
        ]);
        assert_eq!(cookie(&map, "ptyhub_login_1"), Some("x.y"));
        assert_eq!(cookie(&map, "ptyhub_login_2"), Some("z"));
        assert_eq!(cookie(&map, "ptyhub_login"), None);
    }
}
