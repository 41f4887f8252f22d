//! REST v1: `/v1/shell/*`, compatible with the published `agent-sandbox` 0.0.30 SDK
//! (docs/rest-v1.md, docs/compatibility.md#v1-quirks).
//!
//! The same terminals as v2 under the SDK's field names. HTTP statuses differ from v2's where
//! the SDK depends on them: the SDK retries 408, 409 and 429, so a busy terminal answers 400
//! ("Session already has a running command") rather than v2's 409 — a retried exec would run
//! the command twice.

use std::time::Duration;

use axum::Extension;
use axum::Json;
use axum::extract::{Path, State};
use axum::routing::{delete, get, post};
use ptyhub_core::exec::{self, ExecDir, ExecOptions, parse_seconds};
use ptyhub_core::registry::CreateSpec;
use ptyhub_core::terminal::OutputExtent;
use ptyhub_protocol::api::{CommandStatus, ConsoleRecord, Envelope, ExecParams};
use ptyhub_protocol::error::ApiError;
use ptyhub_protocol::ids::TerminalId;
use serde::{Deserialize, Serialize};

use crate::AppState;
use crate::auth::{Operation, Principal};
use crate::http_error::{HttpError, JsonBody};
use crate::wire_error::{Surface, WireError};

/// Longest `wait` of v1.
const WAIT_MAX_SECS: f64 = 3600.0;

type Answer<T> = Result<Json<Envelope<T>>, HttpError>;

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/shell/sessions/create", post(create))
        .route("/v1/shell/exec", post(exec))
        .route("/v1/shell/view", post(view))
        .route("/v1/shell/wait", post(wait))
        .route("/v1/shell/write", post(write))
        .route("/v1/shell/kill", post(kill))
        .route("/v1/shell/sessions", get(list).delete(cleanup_all))
        .route("/v1/shell/sessions/{id}", delete(cleanup))
        .route("/v1/shell/sessions/update", post(update))
        .route("/v1/shell/sessions/stats", get(stats))
        .route("/v1/shell/terminal-url", get(terminal_url))
        .route("/v1/capabilities", get(capabilities))
}

/// v1's statuses for failures (see the module docs).
fn v1_error(error: impl Into<ApiError>) -> HttpError {
    WireError::new(error, Surface::RestV1).into()
}

fn ok<T>(message: &str, data: T) -> Answer<T> {
    Ok(Json(Envelope::ok(message, data)))
}

#[derive(Deserialize, utoipa::ToSchema)]
struct CreateParams {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    exec_dir: Option<String>,
    #[serde(default)]
    no_change_timeout: Option<f64>,
    #[serde(default)]
    preserve_symlinks: Option<bool>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct CreateResponse {
    session_id: String,
    working_dir: String,
}

/// The directory a session starts in: as given with `preserve_symlinks`, else resolved.
fn working_dir(
    exec_dir: Option<&str>,
    preserve_symlinks: bool,
) -> Result<Option<ExecDir>, ApiError> {
    let Some(dir) = exec_dir else {
        return Ok(None);
    };
    let dir = ExecDir::parse(dir)?;
    Ok(Some(if preserve_symlinks {
        dir
    } else {
        dir.real_path()
    }))
}

/// Finds the terminal `id`, or creates it (v1 creates on first use).
async fn find_or_create(
    state: &AppState,
    principal: &Principal,
    id: Option<&str>,
    cwd: Option<String>,
) -> Result<(String, bool), ApiError> {
    if let Some(id) = id
        && let Ok(handle) = state.registry.get(&principal.owner, id).await
    {
        return Ok((handle.info().await?.session_id, false));
    }
    principal.allow(Operation::Create)?;
    let spec = CreateSpec {
        id: id.map(TerminalId::parse).transpose()?,
        cwd,
        ..CreateSpec::default()
    };
    let (handle, is_new) = state.registry.create(&principal.owner, spec).await?;
    Ok((handle.info().await?.session_id, is_new))
}

#[utoipa::path(post, path = "/v1/shell/sessions/create", tag = "v1", operation_id = "v1_create", request_body = CreateParams, responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<CreateResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn create(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    JsonBody(params): JsonBody<CreateParams>,
) -> Answer<CreateResponse> {
    // Creating needs `terminal.create` also when the id exists (as v2's create does); none of
    // v1's creation options makes the shell run anything of the client's choosing.
    principal.allow(Operation::Create).map_err(v1_error)?;
    let no_change =
        parse_seconds("no_change_timeout", params.no_change_timeout).map_err(v1_error)?;
    let cwd = working_dir(
        params.exec_dir.as_deref(),
        params.preserve_symlinks.unwrap_or(false),
    )
    .map_err(v1_error)?
    .map(ExecDir::into_string);
    let (session_id, is_new) = find_or_create(&state, &principal, params.id.as_deref(), cwd)
        .await
        .map_err(v1_error)?;
    if no_change.is_some() {
        if !is_new {
            // Changing an existing terminal's timeout is what `update` does.
            principal.allow(Operation::Type).map_err(v1_error)?;
        }
        state
            .registry
            .set_no_change_timeout(&principal.owner, &session_id, no_change)
            .await
            .map_err(v1_error)?;
    }
    let handle = state
        .registry
        .get(&principal.owner, &session_id)
        .await
        .map_err(v1_error)?;
    let info = handle.info().await.map_err(v1_error)?;
    ok(
        "Session created",
        CreateResponse {
            session_id,
            working_dir: info.working_dir,
        },
    )
}

#[derive(Deserialize, utoipa::ToSchema)]
struct ExecV1Params {
    command: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    exec_dir: Option<String>,
    #[serde(default)]
    async_mode: Option<bool>,
    #[serde(default)]
    timeout: Option<f64>,
    #[serde(default)]
    strict: Option<bool>,
    #[serde(default)]
    no_change_timeout: Option<f64>,
    #[serde(default)]
    hard_timeout: Option<f64>,
    #[serde(default)]
    preserve_symlinks: Option<bool>,
    #[serde(default)]
    truncate: Option<bool>,
    /// ptyhub's: answer as soon as the command waits for input, as v2 does (default false).
    #[serde(default)]
    return_on_input: Option<bool>,
}

#[utoipa::path(post, path = "/v1/shell/exec", tag = "v1", operation_id = "v1_exec", request_body = ExecV1Params, responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<ptyhub_protocol::api::CommandResult>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn exec(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    headers: axum::http::HeaderMap,
    JsonBody(params): JsonBody<ExecV1Params>,
) -> Result<axum::response::Response, HttpError> {
    use axum::response::IntoResponse;
    // Checked before the terminal is found or created: a refused exec changes nothing.
    principal.allow(Operation::Run).map_err(v1_error)?;
    let preserve = params.preserve_symlinks.unwrap_or(false);
    // `strict`: a missing exec_dir is an error; otherwise the command runs where the shell is.
    let exec_dir = match working_dir(params.exec_dir.as_deref(), preserve) {
        Ok(dir) => dir,
        Err(error) if params.strict.unwrap_or(false) => return Err(v1_error(error)),
        Err(_) => None,
    };
    let cwd = exec_dir.clone().map(ExecDir::into_string);
    let (session_id, is_new) = find_or_create(&state, &principal, params.id.as_deref(), cwd)
        .await
        .map_err(v1_error)?;
    let exec = ExecParams {
        command: params.command,
        is_async: params.async_mode.unwrap_or(false),
        timeout: params.timeout,
        no_change_timeout: params.no_change_timeout,
        hard_timeout: params.hard_timeout,
        truncate: params.truncate,
        exec_dir: None,
        // v1 answers always carry the console history.
        include_console: Some(true),
        // v1 waits for the command's end or its timeout, as its exec always has, unless the
        // caller asks for v2's early answer.
        return_on_input: Some(params.return_on_input.unwrap_or(false)),
        window: ptyhub_protocol::api::WindowParams::default(),
        on_lease: None,
    };
    // The directory was checked above; a new session already starts there.
    let options = ExecOptions::from_params(&exec)
        .map_err(v1_error)?
        .truncating_at(ptyhub_core::plain_text::TRUNCATE_CHARS)
        .in_dir(if is_new { None } else { exec_dir })
        .typed_by(principal.source());
    if crate::stream::wants_events(&headers) {
        let submitted = exec::submit(&state.registry, &principal.owner, &session_id, &options)
            .await
            .map_err(v1_error)?;
        return Ok(crate::stream::exec_events(submitted, &state.stopping));
    }
    let result = exec::run(&state.registry, &principal.owner, &session_id, &options)
        .await
        .map_err(v1_error)?;
    Ok(Json(Envelope::ok("Command executed", result)).into_response())
}

#[derive(Deserialize, utoipa::ToSchema)]
struct IdParams {
    id: String,
}

#[derive(Serialize, utoipa::ToSchema)]
struct ViewResponse {
    output: String,
    session_id: String,
    console: Vec<ConsoleRecord>,
    status: CommandStatus,
    command: Option<String>,
    exit_code: Option<i32>,
}

#[utoipa::path(post, path = "/v1/shell/view", tag = "v1", operation_id = "v1_view", request_body = IdParams, responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<ViewResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn view(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    headers: axum::http::HeaderMap,
    JsonBody(params): JsonBody<IdParams>,
) -> Result<axum::response::Response, HttpError> {
    use axum::response::IntoResponse;
    principal.allow(Operation::Read).map_err(v1_error)?;
    let handle = state
        .registry
        .get(&principal.owner, &params.id)
        .await
        .map_err(v1_error)?;
    if crate::stream::wants_events(&headers) {
        // Follows the running command until it ends, then the view.
        let viewed = handle.clone();
        let finish = async move { view_of(&viewed).await };
        return Ok(crate::stream::command_events(
            handle,
            None,
            finish,
            &state.stopping,
        ));
    }
    let view = view_of(&handle).await.map_err(v1_error)?;
    Ok(Json(Envelope::ok("Session viewed", view)).into_response())
}

async fn view_of(handle: &ptyhub_core::terminal::TerminalHandle) -> Result<ViewResponse, ApiError> {
    let screen = handle.screen().await?;
    let result = handle.command_result(None).await?;
    Ok(ViewResponse {
        output: screen.output,
        session_id: screen.session_id,
        console: result.console.unwrap_or_default(),
        status: screen.status,
        command: result.command,
        exit_code: screen.exit_code,
    })
}

#[derive(Deserialize, utoipa::ToSchema)]
struct WaitParams {
    id: String,
    #[serde(default)]
    seconds: Option<f64>,
    #[serde(default)]
    max_wait_seconds: Option<f64>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct StatusResponse {
    status: CommandStatus,
}

#[utoipa::path(post, path = "/v1/shell/wait", tag = "v1", operation_id = "v1_wait", request_body = WaitParams, responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<StatusResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn wait(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    JsonBody(params): JsonBody<WaitParams>,
) -> Answer<StatusResponse> {
    principal.allow(Operation::Read).map_err(v1_error)?;
    let limit = params
        .seconds
        .into_iter()
        .chain(params.max_wait_seconds)
        .fold(f64::INFINITY, f64::min);
    let limit = if limit.is_finite() { limit } else { 30.0 };
    if !(0.0..=WAIT_MAX_SECS).contains(&limit) {
        return Err(v1_error(ApiError::invalid(format!(
            "seconds must be between 0 and {WAIT_MAX_SECS}"
        ))));
    }
    let handle = state
        .registry
        .get(&principal.owner, &params.id)
        .await
        .map_err(v1_error)?;
    // Only the status is answered: nothing of a long output is read from the log.
    let result = handle
        .wait_command_for(
            None,
            Some(Duration::from_secs_f64(limit)),
            OutputExtent::Ends,
        )
        .await
        .map_err(v1_error)?;
    ok(
        "Wait finished",
        StatusResponse {
            status: result.status,
        },
    )
}

#[derive(Deserialize, utoipa::ToSchema)]
struct WriteParams {
    id: String,
    input: String,
    #[serde(default)]
    press_enter: bool,
}

#[utoipa::path(post, path = "/v1/shell/write", tag = "v1", operation_id = "v1_write", request_body = WriteParams, responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<StatusResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn write(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    JsonBody(params): JsonBody<WriteParams>,
) -> Answer<StatusResponse> {
    principal.allow(Operation::Type).map_err(v1_error)?;
    let handle = state
        .registry
        .get(&principal.owner, &params.id)
        .await
        .map_err(v1_error)?;
    let mut data = params.input.into_bytes();
    if params.press_enter {
        data.push(b'\r');
    }
    let source = principal.source();
    let writer = ptyhub_core::terminal::live::Writer::caller(source.clone());
    handle
        .wait_for_keyboard(
            &writer,
            ptyhub_protocol::api::OnLease::Refuse,
            Duration::ZERO,
        )
        .await
        .inspect_err(|error| ptyhub_core::stats::input_refused(error, data.len()))
        .map_err(v1_error)?;
    handle.input(data, source).await.map_err(v1_error)?;
    let result = handle.command_result(None).await.map_err(v1_error)?;
    ok(
        "Input written",
        StatusResponse {
            status: result.status,
        },
    )
}

#[derive(Serialize, utoipa::ToSchema)]
struct KillResponse {
    status: CommandStatus,
    exit_code: Option<i32>,
    returncode: Option<i32>,
}

/// Ends the command's whole process tree and closes the session; its history stays
/// (docs/compatibility.md#v1-quirks).
#[utoipa::path(post, path = "/v1/shell/kill", tag = "v1", operation_id = "v1_kill", request_body = IdParams, responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<KillResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn kill(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    JsonBody(params): JsonBody<IdParams>,
) -> Answer<KillResponse> {
    principal.allow(Operation::Close).map_err(v1_error)?;
    let handle = state
        .registry
        .get(&principal.owner, &params.id)
        .await
        .map_err(v1_error)?;
    let before = handle.command_result(None).await.map_err(v1_error)?;
    let exit_code = if before.status.is_running() {
        None
    } else {
        before.exit_code
    };
    state
        .registry
        .close(&principal.owner, &params.id)
        .await
        .map_err(v1_error)?;
    ok(
        "Process killed",
        KillResponse {
            status: CommandStatus::Terminated,
            exit_code,
            returncode: exit_code,
        },
    )
}

#[derive(Serialize, utoipa::ToSchema)]
struct SessionInfo {
    working_dir: String,
    created_at: String,
    last_used_at: String,
    age_seconds: u64,
    status: String,
    current_command: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct SessionsResponse {
    sessions: std::collections::BTreeMap<String, SessionInfo>,
}

#[utoipa::path(get, path = "/v1/shell/sessions", tag = "v1", operation_id = "v1_list", responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<SessionsResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn list(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
) -> Answer<SessionsResponse> {
    principal.allow(Operation::Read).map_err(v1_error)?;
    let now = ptyhub_core::state_dir::unix_now();
    let sessions = state
        .registry
        .list(&principal.owner, false)
        .await
        .into_iter()
        .map(|info| {
            let status = if info.running_command.is_some() {
                "running"
            } else {
                info.state.as_str()
            };
            (
                info.session_id.clone(),
                SessionInfo {
                    working_dir: info.working_dir,
                    created_at: rfc3339(info.created_at),
                    last_used_at: rfc3339(info.last_activity),
                    age_seconds: now.saturating_sub(info.created_at),
                    status: status.to_owned(),
                    current_command: info.running_command,
                },
            )
        })
        .collect();
    ok("Sessions listed", SessionsResponse { sessions })
}

#[utoipa::path(delete, path = "/v1/shell/sessions/{id}", tag = "v1", operation_id = "v1_cleanup", params(("id" = String, Path, description = "the terminal id")), responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<ptyhub_protocol::api::CloseResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn cleanup(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<axum::response::Response, HttpError> {
    principal.allow(Operation::Close).map_err(v1_error)?;
    crate::close::close_answer(&state, &principal, &id, "Session cleaned up")
        .await
        .map_err(v1_error)
}

#[derive(Deserialize, utoipa::ToSchema)]
struct UpdateParams {
    id: String,
    #[serde(default)]
    no_change_timeout: Option<f64>,
}

#[utoipa::path(post, path = "/v1/shell/sessions/update", tag = "v1", operation_id = "v1_update", request_body = UpdateParams, responses((status = 200, description = "inside the {success, message, data} envelope"), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn update(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    JsonBody(params): JsonBody<UpdateParams>,
) -> Answer<serde_json::Value> {
    principal.allow(Operation::Type).map_err(v1_error)?;
    let no_change =
        parse_seconds("no_change_timeout", params.no_change_timeout).map_err(v1_error)?;
    state
        .registry
        .set_no_change_timeout(&principal.owner, &params.id, no_change)
        .await
        .map_err(v1_error)?;
    ok(
        "Session updated",
        serde_json::json!({ "session_id": params.id, "no_change_timeout": params.no_change_timeout }),
    )
}

#[derive(Serialize, utoipa::ToSchema)]
struct StatsResponse {
    total_sessions: usize,
    active_sessions: usize,
    idle_sessions: usize,
    max_sessions: usize,
    session_timeout: u64,
    usage_ratio: f64,
}

#[utoipa::path(get, path = "/v1/shell/sessions/stats", tag = "v1", operation_id = "v1_stats", responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<StatsResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn stats(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
) -> Answer<StatsResponse> {
    principal.allow(Operation::Read).map_err(v1_error)?;
    let stats = state.registry.stats().await;
    ok(
        "Session stats",
        StatsResponse {
            total_sessions: stats.total,
            active_sessions: stats.active,
            idle_sessions: stats.idle,
            max_sessions: stats.max,
            session_timeout: stats.idle_close_secs,
            usage_ratio: stats.total as f64 / stats.max.max(1) as f64,
        },
    )
}

/// Closes every live terminal of the caller.
#[utoipa::path(delete, path = "/v1/shell/sessions", tag = "v1", operation_id = "v1_cleanup_all", responses((status = 200, description = "inside the {success, message, data} envelope"), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn cleanup_all(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
) -> Answer<serde_json::Value> {
    principal.allow(Operation::Close).map_err(v1_error)?;
    let mut closed = Vec::new();
    for info in state.registry.list(&principal.owner, false).await {
        if state
            .registry
            .close(&principal.owner, &info.session_id)
            .await
            .is_ok()
        {
            closed.push(info.session_id);
        }
    }
    ok(
        "Sessions cleaned up",
        serde_json::json!({ "closed": closed }),
    )
}

#[derive(Deserialize, utoipa::ToSchema)]
struct UrlQuery {
    #[serde(default)]
    session_id: Option<String>,
}

/// A link to the terminal's web page that works in a fresh browser (a one-time ticket in the
/// fragment, valid for ten minutes); without `session_id`, a new terminal's.
#[utoipa::path(get, path = "/v1/shell/terminal-url", tag = "v1", operation_id = "v1_terminal_url", responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<String>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn terminal_url(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    simple_cookie: Option<Extension<crate::auth::SimpleCookieRequest>>,
    headers: axum::http::HeaderMap,
    crate::http_error::QueryParams(query): crate::http_error::QueryParams<UrlQuery>,
) -> Answer<String> {
    let id = match query.session_id {
        Some(id) => {
            principal.allow(Operation::Read).map_err(v1_error)?;
            state
                .registry
                .get(&principal.owner, &id)
                .await
                .map_err(v1_error)?;
            id
        }
        None => {
            if simple_cookie.is_some() {
                return Err(v1_error(crate::auth::SimpleCookieRequest::refuse(
                    "a GET that creates a terminal",
                )));
            }
            find_or_create(&state, &principal, None, None)
                .await
                .map_err(v1_error)?
                .0
        }
    };
    // The address the caller reached us at; the local socket's clients name no port.
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|host| {
            host.rsplit_once(':').is_some_and(|(_, port)| {
                !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
            })
        })
        .map_or_else(|| state.listen.to_string(), str::to_owned);
    // A fresh browser has no login: the one-time ticket in the fragment (never sent to the
    // server, removed by the page) signs it in.
    let ticket = state.logins.issue_ticket(principal.clone());
    ok(
        "Terminal URL",
        format!(
            "{}://{host}/terminal?session_id={id}#ticket={ticket}",
            state.scheme.as_str()
        ),
    )
}

/// What this server's terminals can do: `exec.pty` is true when a default shell was found,
/// since exec needs one (docs/windows.md#unsupported); `backends` are those of
/// `GET /v2/backends`, each with its status.
#[utoipa::path(get, path = "/v1/capabilities", tag = "v1", operation_id = "v1_capabilities", responses((status = 200, description = "inside the {success, message, data} envelope"), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn capabilities(State(state): State<AppState>) -> Answer<serde_json::Value> {
    let shell = ptyhub_core::shell::default_shell().unwrap_or_default();
    let described = crate::v2::backends_response(&state);
    let backends: Vec<serde_json::Value> = described
        .backends
        .iter()
        .map(|backend| {
            serde_json::json!({
                "type": backend.kind,
                "status": backend.status,
                "reason": backend.reason,
                "default": backend.is_default,
                "supports": backend.supports,
            })
        })
        .collect();
    ok(
        "Capabilities",
        serde_json::json!({
            "shell": shell,
            "exec": { "pty": !shell.is_empty() },
            "backends": backends,
            "cgroups": described.cgroups,
            "compatibility": { "agent_sandbox": "0.0.30" },
            "api_versions": ["v1", "v2"],
            "limits": { "max_sessions": state.registry.stats().await.max },
        }),
    )
}

/// `YYYY-MM-DDTHH:MM:SSZ` for Unix seconds (proleptic Gregorian, UTC).
fn rfc3339(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or_default();
    let rem = secs % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn unix_seconds_format_as_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_735_689_601), "2025-01-01T00:00:01Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }
}

/// The OpenAPI description of these routes, generated from the handlers above.
#[derive(utoipa::OpenApi)]
#[openapi(paths(
    create,
    exec,
    view,
    wait,
    write,
    kill,
    list,
    cleanup,
    update,
    stats,
    cleanup_all,
    terminal_url,
    capabilities
))]
pub struct V1Doc;
