//! The web pages for people: the terminal list at `/`, one terminal at `/terminal` (xterm.js
//! over the WebSocket of `docs/websocket.md`), the playback of a terminal's history at `/play`,
//! their files under `/assets/` (embedded in the
//! binary), and the browser's sign-in at `/auth/session` and `/auth/logout`. Pages and files
//! hold no data and are served to anyone; a page's script signs in, then uses the data routes
//! like any other client.
//!
//! Flow at a glance (a browser):
//! 1. The serve banner's `/#token=…`, or `/v1/shell/terminal-url`'s `…#ticket=…`, opens a page;
//!    a fragment is never sent to the server.
//! 2. The page's script posts the token or the one-time ticket to `/auth/session` and removes
//!    the fragment from the address bar and history (`history.replaceState`).
//! 3. The answer sets an `HttpOnly; SameSite=Strict` cookie holding a random login secret
//!    ([`crate::login`]), never the token.
//! 4. Later requests carry the cookie; `auth::resolve` accepts it only from this server's own
//!    pages (`Origin`). Without a login the page shows a form to paste the token.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ptyhub_protocol::api::Envelope;
use ptyhub_protocol::error::ApiError;
use serde::Deserialize;

use crate::AppState;
use crate::auth::{self, SignIn};
use crate::http_error::{HttpError, JsonBody};

/// The page files (`assets/`), embedded at build time.
#[derive(rust_embed::Embed)]
#[folder = "assets/"]
struct Assets;

/// Vendored files live under a versioned path (`vendor/<name>@<version>/`), so they never change.
const CACHE_IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// Everything else may change with the binary: the browser revalidates (`ETag`).
const CACHE_REVALIDATE: &str = "no-cache";
/// What the pages may load: only this server (xterm.js adds `<style>` elements of its own).
const PAGE_POLICY: &str = "default-src 'self'; style-src 'self' 'unsafe-inline'; \
                           img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; \
                           form-action 'none'";

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/", get(index_page))
        .route("/terminal", get(terminal_page))
        .route("/play", get(play_page))
        .route("/assets/{*path}", get(asset))
        .route("/auth/session", post(sign_in))
        .route("/auth/logout", post(sign_out))
}

async fn index_page(headers: HeaderMap) -> Response {
    serve_file("index.html", &headers)
}

async fn terminal_page(headers: HeaderMap) -> Response {
    serve_file("terminal.html", &headers)
}

async fn play_page(headers: HeaderMap) -> Response {
    serve_file("play.html", &headers)
}

async fn asset(
    axum::extract::Path(path): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    serve_file(&path, &headers)
}

/// One embedded file with its type and caching, `304` when the browser's copy is current.
fn serve_file(path: &str, request: &HeaderMap) -> Response {
    let Some(file) = Assets::get(path) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let etag = etag(&file.metadata.sha256_hash());
    let is_current = request
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|tags| {
            tags.split(',')
                .map(|tag| tag.trim().trim_start_matches("W/"))
                .any(|tag| tag == etag || tag == "*")
        });
    let content_type = content_type(path);
    let mut response = if is_current {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, content_type)], file.data).into_response()
    };
    let headers = response.headers_mut();
    let cache = if path.starts_with("vendor/") {
        CACHE_IMMUTABLE
    } else {
        CACHE_REVALIDATE
    };
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    if let Ok(etag) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, etag);
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if content_type.starts_with("text/html") {
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(PAGE_POLICY),
        );
        headers.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
        headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    }
    response
}

/// A strong entity tag from the file's SHA-256 (its first 128 bits).
fn etag(sha256: &[u8; 32]) -> String {
    let hex: String = sha256[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

fn content_type(path: &str) -> &'static str {
    let name = path.rsplit('/').next().unwrap_or(path);
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("md") => "text/markdown; charset=utf-8",
        None => "text/plain; charset=utf-8", // LICENSE
        Some(_) => "application/octet-stream",
    }
}

#[derive(Deserialize)]
struct SignInParams {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    ticket: Option<String>,
}

/// `POST /auth/session` with `{token}` or `{ticket}`: sets the login cookie.
async fn sign_in(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonBody(params): JsonBody<SignInParams>,
) -> Result<Response, HttpError> {
    let how = match (&params.token, &params.ticket) {
        (Some(token), None) => SignIn::Token(token),
        (None, Some(ticket)) => SignIn::Ticket(ticket),
        _ => return Err(ApiError::invalid("give either token or ticket").into()),
    };
    let principal = auth::sign_in(&state, &headers, how)?;
    let owner = principal.owner.clone();
    let value = state.logins.open(principal);
    let cookie = format!(
        "{}={value}; HttpOnly; SameSite=Strict; Path=/",
        state.logins.cookie_name()
    );
    Ok((
        [
            (header::SET_COOKIE, cookie),
            (header::CACHE_CONTROL, "no-store".to_owned()),
        ],
        Json(Envelope::ok(
            "Signed in",
            serde_json::json!({ "owner": owner }),
        )),
    )
        .into_response())
}

/// `POST /auth/logout`: ends the login of the cookie it carries and clears the cookie.
async fn sign_out(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    auth::require_own_origin(&state, &headers)?;
    let name = state.logins.cookie_name();
    if let Some(value) = auth::cookie(&headers, name) {
        state.logins.close(value);
    }
    let cookie = format!("{name}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    Ok((
        [(header::SET_COOKIE, cookie)],
        Json(Envelope::ok("Signed out", serde_json::Value::Null)),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_a_page_names_is_embedded() {
        let mut checked = 0;
        for page in ["index.html", "terminal.html", "play.html"] {
            let file = Assets::get(page).unwrap_or_else(|| panic!("{page} is not embedded"));
            let text = String::from_utf8_lossy(&file.data).into_owned();
            for reference in text
                .split(['"', '\''])
                .filter_map(|s| s.strip_prefix("/assets/"))
            {
                assert!(
                    Assets::get(reference).is_some(),
                    "{page} names /assets/{reference}, which is not embedded"
                );
                checked += 1;
            }
        }
        assert!(
            checked >= 6,
            "the pages load their scripts and styles from /assets/"
        );
    }

    #[test]
    fn vendored_files_are_cached_for_good_and_pages_revalidate() {
        let vendored = Assets::iter()
            .find(|path| path.starts_with("vendor/") && path.ends_with("xterm.js"))
            .unwrap_or_else(|| panic!("xterm.js is not vendored"));
        let response = serve_file(&vendored, &HeaderMap::new());
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[header::CACHE_CONTROL], CACHE_IMMUTABLE);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/javascript; charset=utf-8"
        );
        let page = serve_file("terminal.html", &HeaderMap::new());
        assert_eq!(page.headers()[header::CACHE_CONTROL], CACHE_REVALIDATE);
        assert!(page.headers().contains_key(header::CONTENT_SECURITY_POLICY));
        let mut again = HeaderMap::new();
        again.insert(header::IF_NONE_MATCH, page.headers()[header::ETAG].clone());
        assert_eq!(
            serve_file("terminal.html", &again).status(),
            StatusCode::NOT_MODIFIED
        );
        assert_eq!(
            serve_file("nope.js", &again).status(),
            StatusCode::NOT_FOUND
        );
    }
}
