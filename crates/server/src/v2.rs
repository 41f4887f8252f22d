//! REST v2: `/v2/pty/sessions…`, the routes of docs/rest-v2.md. Thin: each handler checks the
//! principal's capability, validates its input, calls the registry, the terminal's handle or
//! a core use case (exec's rules are `ptyhub_core::exec`'s), and wraps the answer in the
//! envelope.

use std::time::Duration;

use axum::Extension;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use ptyhub_core::backend::BackendChoice;
use ptyhub_core::error::TerminalError;
use ptyhub_core::exec::{self, AnswerShape, ExecOptions, JobOptions, parse_seconds};
use ptyhub_core::registry::{CreateSpec, EVENTS_PAGE_MAX};
use ptyhub_protocol::api::{
    BackendInfo, BackendKind, BackendStatus, BackendsResponse, CommandResult, CreateSessionParams,
    Envelope, EventsResponse, ExecParams, InputParams, InputResponse, ResizeParams, ScreenResponse,
    SendParams, SendResponse, SignalParams, SignalResponse, TerminalInfo, WaitParams,
};
use ptyhub_protocol::error::ApiError;
use ptyhub_protocol::event::Seq;
use ptyhub_protocol::ids::{Name, TermSize, TerminalId};
use serde::{Deserialize, Serialize};

use crate::AppState;
use crate::auth::{Operation, Principal};
use crate::http_error::{HttpError, JsonBody, QueryParams};

/// Default and longest `wait`.
const WAIT_DEFAULT: Duration = Duration::from_secs(30);
const WAIT_MAX: Duration = Duration::from_secs(3600);
/// Longest accepted input or `send` text.
const TEXT_MAX_BYTES: usize = 4 * 1024 * 1024;

type Answer<T> = Result<Json<Envelope<T>>, HttpError>;

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v2/pty/sessions", post(create).get(list))
        .route("/v2/pty/sessions/{id}", get(status).delete(close))
        .route("/v2/pty/sessions/{id}/exec", post(exec))
        .route("/v2/pty/sessions/{id}/screen", get(screen))
        .route("/v2/pty/sessions/{id}/input", post(input))
        .route("/v2/pty/sessions/{id}/wait", post(wait))
        .route("/v2/pty/sessions/{id}/resize", post(resize))
        .route("/v2/pty/sessions/{id}/events", get(events))
        .route("/v2/pty/sessions/{id}/send", post(send))
        .route("/v2/pty/sessions/{id}/signal", post(signal))
        .route("/v2/pty/sessions/{id}/snapshot", get(snapshot))
        .route("/v2/pty/sessions/{id}/observe", get(observe))
        .route("/v2/pty/sessions/{id}/scrollback", get(scrollback))
        .route("/v2/pty/sessions/{id}/jobs", post(job_start))
        .route("/v2/pty/sessions/{id}/jobs/{job}", get(job_get))
        .route("/v2/pty/sessions/{id}/jobs/{job}/cancel", post(job_cancel))
        .route("/v2/pty/sessions/{id}/jobs/{job}/await", post(job_await))
        .route("/v2/pty/sessions/{id}/stop", post(stop))
        .route("/v2/pty/sessions/{id}/commands", get(commands))
        .route("/v2/pty/sessions/{id}/commands/{n}", get(command))
        .route(
            "/v2/pty/sessions/{id}/lease",
            get(lease::get).post(lease::take).delete(lease::release),
        )
        .route("/v2/pty/events", get(terminal_events))
        .route("/v2/version", get(version))
        .route("/v2/backends", get(backends))
        .merge(sandbox::routes())
}

fn ok<T>(message: &str, data: T) -> Answer<T> {
    Ok(Json(Envelope::ok(message, data)))
}

#[utoipa::path(post, path = "/v2/pty/sessions", tag = "v2", operation_id = "v2_create", request_body = CreateSessionParams, responses((status = 201, description = "a new terminal, inside the {success, message, data} envelope", body = Envelope<TerminalInfo>), (status = 200, description = "the terminal with that id, which exists already, inside the {success, message, data} envelope", body = Envelope<TerminalInfo>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn create(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    JsonBody(params): JsonBody<CreateSessionParams>,
) -> Result<(StatusCode, Json<Envelope<TerminalInfo>>), HttpError> {
    principal.allow(Operation::create(&params))?;
    let size = match (params.cols, params.rows) {
        (None, None) => None,
        (cols, rows) => Some(TermSize::new(
            cols.unwrap_or(TermSize::DEFAULT.cols),
            rows.unwrap_or(TermSize::DEFAULT.rows),
        )?),
    };
    let spec = CreateSpec {
        id: params.id.as_deref().map(TerminalId::parse).transpose()?,
        agent: params.agent.as_deref().map(Name::parse).transpose()?,
        session: params.session.as_deref().map(Name::parse).transpose()?,
        cwd: params.cwd,
        size,
        env: params.env.unwrap_or_default(),
        shell: params.shell,
        user: params.user,
        limits: params.limits,
        retention: params.retention.unwrap_or_default(),
        workspace: params.workspace,
        network: params.network,
        anonymous: false,
        backend: match params.backend.as_deref() {
            None => BackendChoice::ServerDefault,
            Some(name) => BackendChoice::Named(BackendKind::parse(name).ok_or_else(|| {
                TerminalError::invalid(format!(
                    "unknown backend {:?} (known: native, tmux, rootfs)",
                    ptyhub_protocol::ids::truncate_for_message(name)
                ))
            })?),
        },
    };
    let (handle, is_new) = state.registry.create(&principal.owner, spec).await?;
    let info = handle.info().await?;
    let (code, message) = if is_new {
        (StatusCode::CREATED, "Session created")
    } else {
        (StatusCode::OK, "Session already exists")
    };
    Ok((code, Json(Envelope::ok(message, info))))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(default)]
    include_closed: bool,
}

#[derive(Serialize, utoipa::ToSchema)]
struct ListResponse {
    sessions: Vec<TerminalInfo>,
}

#[utoipa::path(get, path = "/v2/pty/sessions", tag = "v2", operation_id = "v2_list", responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<ListResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn list(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    QueryParams(query): QueryParams<ListQuery>,
) -> Answer<ListResponse> {
    principal.allow(Operation::Read)?;
    let sessions = state
        .registry
        .list(&principal.owner, query.include_closed)
        .await;
    ok("Sessions listed", ListResponse { sessions })
}

#[utoipa::path(get, path = "/v2/pty/sessions/{id}", tag = "v2", operation_id = "v2_status", params(("id" = String, Path, description = "the terminal id")), responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<TerminalInfo>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn status(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Answer<TerminalInfo> {
    principal.allow(Operation::Read)?;
    let handle = state.registry.get(&principal.owner, &id).await?;
    ok("Session found", handle.info().await?)
}

#[utoipa::path(delete, path = "/v2/pty/sessions/{id}", tag = "v2", operation_id = "v2_close", params(("id" = String, Path, description = "the terminal id")), responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<ptyhub_protocol::api::CloseResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn close(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<axum::response::Response, HttpError> {
    principal.allow(Operation::Close)?;
    crate::close::close_answer(&state, &principal, &id, "Session closed")
        .await
        .map_err(HttpError::from)
}

#[utoipa::path(post, path = "/v2/pty/sessions/{id}/exec", tag = "v2", operation_id = "v2_exec", params(("id" = String, Path, description = "the terminal id")), request_body = ExecParams, responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<CommandResult>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn exec(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
    JsonBody(params): JsonBody<ExecParams>,
) -> Result<axum::response::Response, HttpError> {
    use axum::response::IntoResponse;
    principal.allow(Operation::Run)?;
    let options = ExecOptions::from_params(&params)?.typed_by(principal.source());
    if crate::stream::wants_events(&headers) {
        let submitted = exec::submit(&state.registry, &principal.owner, &id, &options).await?;
        return Ok(crate::stream::exec_events(submitted, &state.stopping));
    }
    let submitted = exec::submit(&state.registry, &principal.owner, &id, &options).await?;
    let result = submitted.answer_for(&principal.owner).await?;
    Ok(Json(Envelope::ok("Command executed", result)).into_response())
}

#[utoipa::path(get, path = "/v2/pty/sessions/{id}/screen", tag = "v2", operation_id = "v2_screen", params(("id" = String, Path, description = "the terminal id")), responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<ScreenResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn screen(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Answer<ScreenResponse> {
    principal.allow(Operation::Read)?;
    let handle = state.registry.get(&principal.owner, &id).await?;
    ok("Screen read", handle.screen().await?)
}

#[utoipa::path(post, path = "/v2/pty/sessions/{id}/input", tag = "v2", operation_id = "v2_input", params(("id" = String, Path, description = "the terminal id")), request_body = InputParams, responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<InputResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn input(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    JsonBody(params): JsonBody<InputParams>,
) -> Answer<InputResponse> {
    principal.allow(Operation::Type)?;
    if params.input.len() > TEXT_MAX_BYTES {
        return Err(ApiError::invalid("input too long").into());
    }
    let handle = state.registry.get(&principal.owner, &id).await?;
    let mut data = params.input.into_bytes();
    if params.press_enter {
        data.push(b'\r');
    }
    let bytes = data.len();
    let source = principal.source();
    let writer = ptyhub_core::terminal::live::Writer::caller(source.clone());
    handle
        .wait_for_keyboard(
            &writer,
            params.on_lease.unwrap_or_default(),
            ptyhub_core::terminal::live::LEASE_WAIT_DEFAULT,
        )
        .await
        .inspect_err(|error| ptyhub_core::stats::input_refused(error, bytes))?;
    let receipt = handle.input(data, source).await?;
    ok(
        "Input sent",
        InputResponse {
            session_id: id,
            bytes,
            receipt,
        },
    )
}

#[utoipa::path(post, path = "/v2/pty/sessions/{id}/wait", tag = "v2", operation_id = "v2_wait", params(("id" = String, Path, description = "the terminal id")), request_body = WaitParams, responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<CommandResult>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn wait(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    JsonBody(params): JsonBody<WaitParams>,
) -> Answer<CommandResult> {
    principal.allow(Operation::Read)?;
    let limit = parse_seconds("seconds", params.seconds)?
        .unwrap_or(WAIT_DEFAULT)
        .min(WAIT_MAX);
    let shape = AnswerShape::from_params(params.truncate, params.include_console, &params.window)?;
    let handle = state.registry.get(&principal.owner, &id).await?;
    let result = handle
        .wait_command_as(
            None,
            Some(limit),
            shape.output_extent(),
            shape.is_console_included(),
        )
        .await?;
    ok("Wait finished", shape.apply(result))
}

#[utoipa::path(post, path = "/v2/pty/sessions/{id}/resize", tag = "v2", operation_id = "v2_resize", params(("id" = String, Path, description = "the terminal id")), request_body = ResizeParams, responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<TermSize>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn resize(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    JsonBody(params): JsonBody<ResizeParams>,
) -> Answer<TermSize> {
    principal.allow(Operation::Resize)?;
    let size = TermSize::new(params.cols, params.rows)?;
    let handle = state.registry.get(&principal.owner, &id).await?;
    handle.resize(size.cols, size.rows).await?;
    ok("Session resized", size)
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    #[serde(default)]
    after_seq: u64,
    #[serde(default)]
    limit: Option<usize>,
}

#[utoipa::path(get, path = "/v2/pty/sessions/{id}/events", tag = "v2", operation_id = "v2_events", params(("id" = String, Path, description = "the terminal id")), responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<EventsResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn events(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    QueryParams(query): QueryParams<EventsQuery>,
) -> Answer<EventsResponse> {
    principal.allow(Operation::Read)?;
    let limit = query.limit.unwrap_or(EVENTS_PAGE_MAX);
    let page = state
        .registry
        .events(&principal.owner, &id, Seq(query.after_seq), limit)
        .await?;
    ok("Events read", page)
}

/// Default and longest `send` deadline.
const SEND_DEADLINE_DEFAULT: Duration = Duration::from_secs(30);
const SEND_DEADLINE_MAX: Duration = Duration::from_secs(600);
/// Default idle window of `send`.
const SEND_IDLE_DEFAULT: Duration = Duration::from_secs(2);

#[utoipa::path(post, path = "/v2/pty/sessions/{id}/send", tag = "v2", operation_id = "v2_send", params(("id" = String, Path, description = "the terminal id")), request_body = SendParams, responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<SendResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn send(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    JsonBody(params): JsonBody<SendParams>,
) -> Answer<SendResponse> {
    principal.allow(Operation::Run)?;
    if params.text.len() > TEXT_MAX_BYTES {
        return Err(ApiError::invalid("text too long").into());
    }
    let deadline = parse_seconds("deadline", params.deadline)?
        .unwrap_or(SEND_DEADLINE_DEFAULT)
        .min(SEND_DEADLINE_MAX);
    let idle_window =
        parse_seconds("idle_window", params.idle_window)?.unwrap_or(SEND_IDLE_DEFAULT);
    let handle = state.registry.get(&principal.owner, &id).await?;
    let mut text = params.text.into_bytes();
    if params.submit {
        text.push(b'\r');
    }
    let request = ptyhub_core::terminal::send::SendRequest {
        text,
        deadline,
        idle_window,
        caller: principal.owner.clone(),
        flush_on_timeout: params.on_timeout == Some(ptyhub_protocol::api::OnTimeout::Flush),
        window: ptyhub_core::output_window::OutputWindow::from_params(&params.window)?,
        source: principal.source(),
        on_lease: params.on_lease.unwrap_or_default(),
    };
    ok(
        "Sent",
        ptyhub_core::terminal::send::send(&handle, request).await?,
    )
}

#[utoipa::path(get, path = "/v2/version", tag = "v2", operation_id = "v2_version", responses((status = 200, description = "inside the {success, message, data} envelope"), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn version() -> Json<Envelope<serde_json::Value>> {
    Json(Envelope::ok(
        "Version",
        serde_json::json!({ "apiVersion": "1.0", "server": env!("CARGO_PKG_VERSION") }),
    ))
}

#[utoipa::path(get, path = "/v2/backends", tag = "v2", operation_id = "v2_backends", responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<BackendsResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn backends(State(state): State<AppState>) -> Json<Envelope<BackendsResponse>> {
    Json(Envelope::ok("Backends", backends_response(&state)))
}

/// Every backend of this server with its status and what it supports, and the cgroups: what
/// `GET /v2/backends` answers and v1's capabilities list.
pub(crate) fn backends_response(state: &AppState) -> BackendsResponse {
    let backends = state.registry.backends();
    let shell = ptyhub_core::shell::default_shell();
    let list = backends
        .describe()
        .into_iter()
        .map(|(kind, availability, is_default)| {
            let backend = backends.for_kind(kind);
            // Every backend on the host runs a shell: without one none can host a terminal (a
            // sandbox runs the root's own).
            let failure = availability.failure.or_else(|| {
                (shell.is_none() && kind != BackendKind::Rootfs)
                    .then(|| "no shell found (bash, sh or the login shell)".to_owned())
            });
            BackendInfo {
                kind,
                status: match &failure {
                    None => BackendStatus::Ready,
                    Some(_) if backend.needs_install() => BackendStatus::NeedsRootfs,
                    Some(_) => BackendStatus::Failed,
                },
                install: backend.install_progress(),
                reason: failure,
                is_default,
                version: availability.version,
                shell: (kind == BackendKind::Native)
                    .then(|| shell.clone())
                    .flatten(),
                supports: ptyhub_core::backend::supports(kind)
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
            }
        })
        .collect();
    BackendsResponse {
        backends: list,
        default: backends.default_kind(),
        cgroups: backends.cgroups().describe(),
    }
}

#[utoipa::path(post, path = "/v2/pty/sessions/{id}/signal", tag = "v2", operation_id = "v2_signal", params(("id" = String, Path, description = "the terminal id")), request_body = SignalParams, responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<SignalResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn signal(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    JsonBody(params): JsonBody<SignalParams>,
) -> Answer<SignalResponse> {
    principal.allow(Operation::Signal)?;
    let handle = state.registry.get(&principal.owner, &id).await?;
    ok(
        "Signal sent",
        ptyhub_core::terminal::signal::signal(&handle, &params.signal).await?,
    )
}

#[utoipa::path(get, path = "/v2/pty/sessions/{id}/snapshot", tag = "v2", operation_id = "v2_snapshot", params(("id" = String, Path, description = "the terminal id")), responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<ptyhub_protocol::api::Snapshot>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn snapshot(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Answer<ptyhub_protocol::api::Snapshot> {
    principal.allow(Operation::Read)?;
    let handle = state.registry.get(&principal.owner, &id).await?;
    let (snapshot, _, _) = ptyhub_core::terminal::observe::snapshot(&handle).await?;
    ok("Snapshot", snapshot)
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ObserveQuery {
    #[serde(default)]
    cursor: Option<String>,
}

#[utoipa::path(get, path = "/v2/pty/sessions/{id}/observe", tag = "v2", operation_id = "v2_observe", params(("id" = String, Path, description = "the terminal id")), responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<ptyhub_protocol::api::ObserveResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn observe(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    QueryParams(query): QueryParams<ObserveQuery>,
) -> Answer<ptyhub_protocol::api::ObserveResponse> {
    principal.allow(Operation::Read)?;
    let handle = state.registry.get(&principal.owner, &id).await?;
    ok(
        "Observed",
        ptyhub_core::terminal::observe::observe(&handle, query.cursor.as_deref(), &principal.owner)
            .await?,
    )
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ScrollbackQuery {
    #[serde(default)]
    offset: usize,
    #[serde(default)]
    lines: Option<usize>,
}

#[utoipa::path(get, path = "/v2/pty/sessions/{id}/scrollback", tag = "v2", operation_id = "v2_scrollback", params(("id" = String, Path, description = "the terminal id")), responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<ptyhub_protocol::api::ScrollbackResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn scrollback(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    QueryParams(query): QueryParams<ScrollbackQuery>,
) -> Answer<ptyhub_protocol::api::ScrollbackResponse> {
    principal.allow(Operation::Read)?;
    let handle = state.registry.get(&principal.owner, &id).await?;
    let page = ptyhub_core::terminal::observe::scrollback(
        &handle,
        query.offset,
        query.lines.unwrap_or(100),
    )
    .await?;
    ok("Scrollback", page)
}

use ptyhub_core::terminal::jobs;
use ptyhub_protocol::api::{AwaitParams, JobParams, JobResponse};

#[utoipa::path(post, path = "/v2/pty/sessions/{id}/jobs", tag = "v2", operation_id = "v2_job_start", params(("id" = String, Path, description = "the terminal id")), request_body = JobParams, responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<JobResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn job_start(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    JsonBody(params): JsonBody<JobParams>,
) -> Answer<JobResponse> {
    principal.allow(Operation::Run)?;
    let job = JobOptions::from_params(params)?;
    let handle = state.registry.get(&principal.owner, &id).await?;
    ok(
        "Job started",
        jobs::start(&handle, job.command, job.hard_timeout, principal.source()).await?,
    )
}

#[utoipa::path(get, path = "/v2/pty/sessions/{id}/jobs/{job}", tag = "v2", operation_id = "v2_job_get", params(("id" = String, Path, description = "the terminal id"), ("job" = String, Path, description = "the job id")), responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<JobResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn job_get(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path((id, job)): Path<(String, String)>,
) -> Answer<JobResponse> {
    principal.allow(Operation::Read)?;
    let handle = state.registry.get(&principal.owner, &id).await?;
    ok("Job", jobs::get(&handle, &job).await?)
}

#[utoipa::path(post, path = "/v2/pty/sessions/{id}/jobs/{job}/cancel", tag = "v2", operation_id = "v2_job_cancel", params(("id" = String, Path, description = "the terminal id"), ("job" = String, Path, description = "the job id")), responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<JobResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn job_cancel(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path((id, job)): Path<(String, String)>,
) -> Answer<JobResponse> {
    principal.allow(Operation::Stop)?;
    let handle = state.registry.get(&principal.owner, &id).await?;
    ok("Job cancelling", jobs::cancel(&handle, &job).await?)
}

#[utoipa::path(post, path = "/v2/pty/sessions/{id}/jobs/{job}/await", tag = "v2", operation_id = "v2_job_await", params(("id" = String, Path, description = "the terminal id"), ("job" = String, Path, description = "the job id")), request_body = AwaitParams, responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<JobResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn job_await(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path((id, job)): Path<(String, String)>,
    JsonBody(params): JsonBody<AwaitParams>,
) -> Answer<JobResponse> {
    principal.allow(Operation::Read)?;
    let limit = parse_seconds("seconds", params.seconds)?
        .unwrap_or(WAIT_DEFAULT)
        .min(WAIT_MAX);
    let handle = state.registry.get(&principal.owner, &id).await?;
    ok("Job awaited", jobs::wait(&handle, &job, limit).await?)
}

/// Stops the running job; the terminal lives on.
#[utoipa::path(post, path = "/v2/pty/sessions/{id}/stop", tag = "v2", operation_id = "v2_stop", params(("id" = String, Path, description = "the terminal id")), responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<JobResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn stop(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Answer<JobResponse> {
    principal.allow(Operation::Stop)?;
    let handle = state.registry.get(&principal.owner, &id).await?;
    let job = handle.cancel(None).await?;
    ok(
        "Job stopping",
        jobs::get(&handle, &jobs::job_id(job)).await?,
    )
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct CommandsQuery {
    #[serde(default)]
    after: u64,
    #[serde(default)]
    limit: Option<usize>,
}

/// The terminal's command timeline, oldest first after `after`.
#[utoipa::path(get, path = "/v2/pty/sessions/{id}/commands", tag = "v2", operation_id = "v2_commands", params(("id" = String, Path, description = "the terminal id")), responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<ptyhub_protocol::api::CommandsResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn commands(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    QueryParams(query): QueryParams<CommandsQuery>,
) -> Answer<ptyhub_protocol::api::CommandsResponse> {
    principal.allow(Operation::Read)?;
    let handle = state.registry.get(&principal.owner, &id).await?;
    ok(
        "Commands listed",
        timeline::list(&handle, query.after, query.limit).await?,
    )
}

/// The window parameters as a query string (docs/compatibility.md#output-windows).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct WindowQuery {
    head: Option<i64>,
    tail: Option<i64>,
    offset: Option<i64>,
    max_chars: Option<i64>,
    max_tokens: Option<i64>,
    grep: Option<String>,
    context: Option<i64>,
}

/// One command of the timeline with a window of its output, read from the log.
#[utoipa::path(get, path = "/v2/pty/sessions/{id}/commands/{n}", tag = "v2", operation_id = "v2_command", params(("id" = String, Path, description = "the terminal id"), ("n" = u64, Path, description = "the command's id in the timeline")), responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<ptyhub_protocol::api::CommandOutputResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn command(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path((id, n)): Path<(String, String)>,
    QueryParams(query): QueryParams<WindowQuery>,
) -> Answer<ptyhub_protocol::api::CommandOutputResponse> {
    principal.allow(Operation::Read)?;
    let handle = state.registry.get(&principal.owner, &id).await?;
    let n: u64 = n.parse().map_err(|_| {
        ApiError::invalid(format!("command id must be a positive number, not {n:?}"))
    })?;
    let params = ptyhub_protocol::api::WindowParams {
        head: query.head,
        tail: query.tail,
        offset: query.offset,
        max_chars: query.max_chars,
        max_tokens: query.max_tokens,
        grep: query.grep,
        context: query.context,
    };
    ok("Command read", timeline::get(&handle, n, &params).await?)
}

use ptyhub_core::terminal::timeline;

mod dashboard;
mod lease;
mod sandbox;

/// The owner's terminals as one stream of server-sent events, for the dashboard at `/`:
/// `page` (a page of terminals with their facts, when it changed) and `preview` (the bottom of
/// a screen on the page, when its log moved). docs/web.md has the fields.
#[utoipa::path(get, path = "/v2/pty/events", tag = "v2", operation_id = "v2_terminal_events", params(dashboard::DashboardQuery), responses((status = 200, description = "server-sent events: `page` events carry a DashboardPage, `preview` events a screen's bottom rows", content_type = "text/event-stream", body = dashboard::DashboardPage), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
async fn terminal_events(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    QueryParams(query): QueryParams<dashboard::DashboardQuery>,
) -> Result<axum::response::Response, HttpError> {
    principal.allow(Operation::Read)?;
    Ok(dashboard::events(
        state.registry.clone(),
        principal.owner.clone(),
        query,
        state.stopping.clone(),
    ))
}

/// The OpenAPI description of these routes, generated from the handlers above.
#[derive(utoipa::OpenApi)]
#[openapi(paths(
    create,
    list,
    status,
    close,
    exec,
    screen,
    input,
    wait,
    resize,
    events,
    send,
    version,
    backends,
    signal,
    snapshot,
    observe,
    scrollback,
    job_start,
    job_get,
    job_cancel,
    job_await,
    stop,
    commands,
    command,
    terminal_events,
    lease::get,
    lease::take,
    lease::release,
    sandbox::install,
    sandbox::list,
    sandbox::status,
    sandbox::delete
))]
pub struct V2Doc;
