//! MCP tools for terminals, served over stdio by `ptyhub mcp` and over streamable HTTP at
//! `/mcp`. A thin bridge: every tool is one typed REST v2 call of `ptyhub_client` on the
//! server's local socket, with the same words and semantics; results are the call's `data` as
//! JSON text, failures carry the error code and whether retrying can help ([`error_text`]).
//! Over `/mcp`, each call carries the HTTP caller's principal (`auth::ACT_AS_HEADER`), so a
//! tool can do exactly what the caller's token may.
//!
//! Every tool that waits (terminal_exec, terminal_send, terminal_wait and the Codex pair of
//! `codex`) caps its wait at the server's MCP wait cap ([`WAIT_CAP_DEFAULT`], under the
//! 60-second request timeout of common MCP clients), reports progress while it waits when the
//! call carries a `progressToken` (`with_progress`), and answers what it has when the cap is
//! reached, with the way to continue the same wait.

mod codex;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ptyhub_client::{Client, ClientError};
use ptyhub_protocol::api::{
    CreateSessionParams, ExecParams, ResizeParams, SendParams, SignalParams, WaitParams,
    WindowParams,
};
use ptyhub_protocol::error::ApiError;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Extensions, ProgressNotificationParam, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};

use crate::auth::{ACT_AS_HEADER, Principal, VIA_HEADER};
use crate::wire_error::{Surface, WireError};

pub const INSTRUCTIONS: &str = "Persistent terminals (real PTY shells) that outlive this conversation. \
Open a terminal once and keep using its id. Use terminal_exec for shell commands that end: it \
returns the command's own output and exit code. Use terminal_send for interactive programs \
(REPLs, installers, password prompts): it types text and returns when the terminal needs you \
again, with a wait_reason: stdin_read (a program waits for input; is_password_prompt tells a \
hidden prompt), inferred_idle (quiet and nobody reads: still working), timeout (deadline \
passed, still running), session_exit (the shell ended). Never poll in a loop: send and exec \
wait on the server. A wait is capped under the client's request timeout: an exec still running \
then answers status running (continue with terminal_wait), a send answers timeout (continue \
with an empty send); nothing re-runs. exec_command and write_stdin are the Codex pair: one \
command in a fresh terminal, reached again by its session ID.";

/// How long one MCP tool call waits at most unless configured otherwise: under the 60-second
/// request timeout most MCP clients use, with room for the answer to travel.
pub const WAIT_CAP_DEFAULT: Duration = Duration::from_secs(50);

/// How often a waiting call that carries a `progressToken` reports progress (more often when
/// the cap is short: twice per cap).
const PROGRESS_EVERY: Duration = Duration::from_secs(20);

/// The note a capped exec or wait answer carries while its command still runs.
const CONTINUE_NOTE: &str = "still running (the wait was capped; the command goes on): call \
terminal_wait with this id to keep waiting, terminal_send to type into it, or terminal_signal \
INT to stop it; nothing re-runs";

#[derive(Clone)]
pub struct PtyhubMcp {
    client: Client,
    /// The longest wait of one tool call.
    wait_cap: Duration,
    /// The Codex pair's session IDs of this MCP connection.
    sessions: Arc<codex::Sessions>,
    #[allow(dead_code, reason = "read by the tool_handler macro")]
    tool_router: ToolRouter<Self>,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct OpenArgs {
    /// Optional id to create or reuse (letters, digits, `_.-`). Reusing an id returns the same terminal.
    id: Option<String>,
    /// Absolute working directory (default: the home directory).
    cwd: Option<String>,
    /// Terminal width in columns (default 120).
    cols: Option<u16>,
    /// Terminal height in rows (default 40).
    rows: Option<u16>,
    /// What hosts it: `native` or `tmux` (a person can then `tmux attach` to it); default:
    /// the server's.
    backend: Option<String>,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct IdArgs {
    /// The terminal's id (from terminal_open or terminal_list).
    id: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct ExecArgs {
    /// The terminal's id.
    id: String,
    /// Shell command (multi-line scripts and heredocs are fine).
    command: String,
    /// Seconds to wait for it (default and at most: the server's MCP wait cap, 50 s unless configured). If it is still running after this, status is "running", it goes on, and terminal_wait continues the wait.
    timeout: Option<f64>,
    /// Only the first N lines of the output (not with tail).
    head: Option<i64>,
    /// Only the last N lines of the output (not with head).
    tail: Option<i64>,
    /// At most this many characters of output (whole lines).
    max_chars: Option<i64>,
    /// At most this many tokens of output (estimated as characters / 4).
    max_tokens: Option<i64>,
    /// Only lines matching this regular expression.
    grep: Option<String>,
    /// The output line (0-based) to start from (a window's next_offset).
    offset: Option<i64>,
    /// Lines of context around each grep match.
    context: Option<i64>,
    /// Include the console history of the terminal's last commands (default false).
    include_console: Option<bool>,
    /// While a person holds the terminal's keyboard (the input lease): "refuse" (default: fail with INPUT_LEASED at once) or "wait" for them to hand it back, within timeout.
    on_lease: Option<String>,
}

/// The `on_lease` of a tool's arguments: `wait`, else refuse.
fn on_lease(asked: Option<&str>) -> Option<ptyhub_protocol::api::OnLease> {
    asked.map(|asked| match asked {
        "wait" => ptyhub_protocol::api::OnLease::Wait,
        _ => ptyhub_protocol::api::OnLease::Refuse,
    })
}

#[derive(Deserialize, schemars::JsonSchema)]
struct WaitArgs {
    /// The terminal's id.
    id: String,
    /// Seconds to wait at most (default and at most: the server's MCP wait cap, 50 s unless configured).
    timeout: Option<f64>,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct CommandsArgs {
    /// The terminal's id.
    id: String,
    /// A command's id (command_id of terminal_exec, or id from the list): read its output again. Absent: list the terminal's commands.
    command_id: Option<u64>,
    /// When listing: only commands with an id above this (next_after of the previous list).
    after: Option<u64>,
    /// Only the first N lines of the output (not with tail).
    head: Option<i64>,
    /// Only the last N lines of the output (not with head).
    tail: Option<i64>,
    /// The output line (0-based) to start from (a window's next_offset).
    offset: Option<i64>,
    /// At most this many characters of output (whole lines).
    max_chars: Option<i64>,
    /// At most this many tokens of output (estimated as characters / 4).
    max_tokens: Option<i64>,
    /// Only lines matching this regular expression.
    grep: Option<String>,
    /// Lines of context around each grep match.
    context: Option<i64>,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct SendArgs {
    /// The terminal's id.
    id: String,
    /// Text to type; may be empty to just wait. Control keys as escapes, e.g. "\u0003" for Ctrl-C.
    text: Option<String>,
    /// Press Enter after the text.
    submit: Option<bool>,
    /// Seconds to wait at most (default 30, at most the server's MCP wait cap, 50 by default).
    deadline: Option<f64>,
    /// Seconds of quiet output, while nothing reads, that count as idle (default 2).
    idle_window: Option<f64>,
    /// While a person holds the terminal's keyboard (the input lease): "refuse" (default: fail with INPUT_LEASED at once) or "wait" for them to hand it back, within deadline.
    on_lease: Option<String>,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct ReadArgs {
    /// The terminal's id.
    id: String,
    /// "snapshot" (the screen now), "observe" (with cursor: only what changed since; without: a snapshot and a cursor), or "scrollback" (older lines).
    mode: Option<String>,
    /// For "observe": the cursor from the previous observe.
    cursor: Option<String>,
    /// For "scrollback": how many lines above the newest to end at (default 0).
    offset: Option<usize>,
    /// For "scrollback": how many lines (default 100, at most 1000).
    lines: Option<usize>,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct SignalArgs {
    /// The terminal's id.
    id: String,
    /// INT, TERM, KILL, HUP, QUIT, TSTP, CONT, WINCH, USR1 or USR2. It goes to the foreground program's whole process group.
    signal: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct ResizeArgs {
    /// The terminal's id.
    id: String,
    cols: u16,
    rows: u16,
}

/// A send's deadline when the call gives none (the REST default).
const SEND_DEADLINE_DEFAULT_SECS: f64 = 30.0;

/// A failed tool call's text: `CODE: message (retryable: bool)`.
pub fn error_text(error: &ApiError) -> String {
    WireError::new(error.clone(), Surface::Mcp).tool_text()
}

/// A call's answer as a tool result: its `data` as compact JSON (keys sorted, as
/// `serde_json::Value` keeps them; a screen without its trailing empty rows), or the error.
fn tool_result<T: Serialize>(answer: Result<T, ClientError>) -> CallToolResult {
    value_result(answer_value(answer))
}

/// A call's answer as JSON, or its error.
fn answer_value<T: Serialize>(
    answer: Result<T, ClientError>,
) -> Result<serde_json::Value, ApiError> {
    answer.map_err(ClientError::into_api).and_then(|data| {
        serde_json::to_value(&data)
            .map_err(|e| ApiError::internal(format!("cannot encode the answer: {e}")))
    })
}

/// An answer's JSON (or error) as a tool result.
fn value_result(answer: Result<serde_json::Value, ApiError>) -> CallToolResult {
    match answer {
        Ok(mut data) => {
            trim_screen(&mut data);
            drop_nulls(&mut data);
            let text = serde_json::to_string(&data).unwrap_or_default();
            CallToolResult::success(vec![ContentBlock::text(text)])
        }
        Err(error) => error_result(&error),
    }
}

/// A failed tool call.
fn error_result(error: &ApiError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(error_text(error))])
}

/// Marks an exec or wait answer whose command still runs after a wait that ended by time (not
/// because the command asks for input) with the way to continue it.
fn note_running(data: &mut serde_json::Value) {
    let is_running = data.get("status").and_then(serde_json::Value::as_str) == Some("running");
    let asks = data.get("wait_reason").is_some_and(|r| !r.is_null());
    if let (true, false, Some(object)) = (is_running, asks, data.as_object_mut()) {
        object.insert("note".to_owned(), CONTINUE_NOTE.into());
    }
}

/// Runs `wait` and, while it runs, sends `notifications/progress` to a caller whose request
/// carried a `progressToken`: every [`PROGRESS_EVERY`], or twice per `cap` when that is
/// shorter. `progress` is the seconds waited, `total` the cap.
async fn with_progress<F: Future>(
    context: &RequestContext<RoleServer>,
    cap: Duration,
    wait: F,
) -> F::Output {
    let Some(token) = context.meta.get_progress_token() else {
        return wait.await;
    };
    let every = PROGRESS_EVERY.min(cap / 2).max(Duration::from_millis(100));
    let started = tokio::time::Instant::now();
    let mut ticks = tokio::time::interval_at(started + every, every);
    tokio::pin!(wait);
    loop {
        tokio::select! {
            answer = &mut wait => return answer,
            _ = ticks.tick() => {
                let waited = started.elapsed().as_secs_f64();
                let progress = ProgressNotificationParam::new(token.clone(), waited)
                    .with_total(cap.as_secs_f64())
                    .with_message(format!(
                        "waited {waited:.0} s of at most {:.0} s",
                        cap.as_secs_f64()
                    ));
                // A client that went away is no reason to stop the wait: its answer is dropped
                // by the transport.
                let _ = context.peer.notify_progress(progress).await;
            }
        }
    }
}

/// Drops the empty rows at the bottom of a `screen` (of the answer, or of the snapshot an
/// `observe` answer holds): they cost a model characters and tell it nothing (`rows` still
/// gives the screen's height).
/// Leaves out every `null` field: a model reads an absent field as "nothing there" as well,
/// and an answer's nulls are a good part of its characters.
fn drop_nulls(data: &mut serde_json::Value) {
    match data {
        serde_json::Value::Object(map) => {
            map.retain(|_, value| !value.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

fn trim_screen(data: &mut serde_json::Value) {
    if let Some(rows) = data
        .get_mut("screen")
        .and_then(serde_json::Value::as_array_mut)
    {
        while rows
            .last()
            .is_some_and(|row| row.as_str().is_some_and(|r| r.trim().is_empty()))
        {
            rows.pop();
        }
    }
    if let Some(snapshot) = data.get_mut("snapshot") {
        trim_screen(snapshot);
    }
}

#[tool_router]
impl PtyhubMcp {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            wait_cap: WAIT_CAP_DEFAULT,
            sessions: Arc::default(),
            tool_router: Self::tool_router() + Self::codex_router(),
        }
    }

    /// The same tools with another cap on each call's wait (at least 1 s).
    #[must_use]
    pub fn with_wait_cap(mut self, cap: Duration) -> Self {
        self.wait_cap = cap.max(Duration::from_secs(1));
        self
    }

    /// Seconds a call waits: what it asked (else `default`), at most the cap. A bad value
    /// (negative, not a number) passes through for the server to refuse.
    fn capped_secs(&self, asked: Option<f64>, default: Option<f64>) -> f64 {
        let cap = self.wait_cap.as_secs_f64();
        match asked.or(default) {
            Some(secs) if secs.is_nan() || secs < 0.0 => secs,
            Some(secs) => secs.min(cap),
            None => cap,
        }
    }

    /// The client for one tool call. Over `/mcp` it acts for the principal of the HTTP
    /// request that carried the call (its token's owner and capabilities), never for more;
    /// over stdio, for the local user.
    fn client_for(&self, context: &Extensions) -> Client {
        let principal = context
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Principal>());
        let client = self.client.clone().with_header(VIA_HEADER, "mcp");
        match principal {
            Some(principal) => client.with_header(ACT_AS_HEADER, principal.act_as_value()),
            None => client,
        }
    }

    #[tool(
        description = "Open a persistent terminal (a real bash on a PTY) and return its id. Reusing an id returns that terminal."
    )]
    async fn terminal_open(
        &self,
        context: Extensions,
        Parameters(a): Parameters<OpenArgs>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let params = CreateSessionParams {
            id: a.id,
            cwd: a.cwd,
            cols: a.cols,
            rows: a.rows,
            backend: a.backend,
            ..CreateSessionParams::default()
        };
        Ok(tool_result(self.client_for(&context).create(&params).await))
    }

    #[tool(
        description = "List your live terminals with state, working directory and the command running in each."
    )]
    async fn terminal_list(&self, context: Extensions) -> Result<CallToolResult, rmcp::ErrorData> {
        Ok(tool_result(self.client_for(&context).list(false).await))
    }

    #[tool(
        description = "Run a shell command in a terminal and wait for it: returns status (completed, running, no_change_timeout, hard_timeout), the command's own output (no prompt or echo; long output keeps its head and tail) and exit_code. cd and export persist. It answers early, status running with wait_reason stdin_read and the output so far, when the command asks for input (answer with terminal_send). The wait is capped (50 s unless the server says otherwise): a command still running then answers status running with command_id and a note; call terminal_wait to keep waiting (nothing re-runs). To get only the part of a long output you need, pass tail (last lines), head, grep (+ context), or max_tokens; window tells what was left out and next_offset continues. For interactive programs use terminal_send instead."
    )]
    async fn terminal_exec(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(a): Parameters<ExecArgs>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let params = ExecParams {
            command: a.command,
            timeout: Some(self.capped_secs(a.timeout, None)),
            include_console: a.include_console,
            on_lease: on_lease(a.on_lease.as_deref()),
            window: WindowParams {
                head: a.head,
                tail: a.tail,
                max_chars: a.max_chars,
                max_tokens: a.max_tokens,
                grep: a.grep,
                context: a.context,
                offset: a.offset,
            },
            ..ExecParams::default()
        };
        let client = self.client_for(&context.extensions);
        let terminal = client.terminal(&a.id);
        let answer = with_progress(&context, self.wait_cap, terminal.exec(&params)).await;
        Ok(value_result(answer_value(answer).map(|mut data| {
            note_running(&mut data);
            data
        })))
    }

    #[tool(
        description = "Keep waiting for the command running in a terminal (after terminal_exec answered status running because its wait was capped): returns like terminal_exec when it ends, or status running again when this wait is capped too (call terminal_wait again). Nothing re-runs."
    )]
    async fn terminal_wait(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(a): Parameters<WaitArgs>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let params = WaitParams {
            seconds: Some(self.capped_secs(a.timeout, None)),
            ..WaitParams::default()
        };
        let client = self.client_for(&context.extensions);
        let terminal = client.terminal(&a.id);
        let answer = with_progress(&context, self.wait_cap, terminal.wait(&params)).await;
        Ok(value_result(answer_value(answer).map(|mut data| {
            note_running(&mut data);
            data
        })))
    }

    #[tool(
        description = "The commands a terminal ran (by exec or typed), with exit codes, and the output of any of them read again without re-running it: pass command_id with tail, head, grep (+ context), offset or max_tokens to get just the part you need (window.next_offset continues). Without command_id: the list, oldest first (after pages on)."
    )]
    async fn terminal_commands(
        &self,
        context: Extensions,
        Parameters(a): Parameters<CommandsArgs>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let client = self.client_for(&context);
        let terminal = client.terminal(&a.id);
        Ok(match a.command_id {
            Some(n) => {
                let window = WindowParams {
                    head: a.head,
                    tail: a.tail,
                    offset: a.offset,
                    max_chars: a.max_chars,
                    max_tokens: a.max_tokens,
                    grep: a.grep,
                    context: a.context,
                };
                tool_result(terminal.command(n, &window).await)
            }
            None => tool_result(terminal.commands(a.after.unwrap_or(0), None).await),
        })
    }

    #[tool(
        description = "Type text into a terminal (optionally pressing Enter) and wait until it needs you again. wait_reason: stdin_read = a program waits for input (answer with another send; is_password_prompt = input is hidden), inferred_idle = no output and nobody reads (still working: send empty text to keep waiting), timeout = deadline passed (still running), session_exit = the shell ended. output = what was printed since your last send or read (the rendered screen when is_full_screen). waits_on = what a blocked program waits on (socket: a network call that may hang). command_exit_code = exit code of the command that just ended. hint = how to leave a pager, editor or REPL. The deadline is capped (50 s unless the server says otherwise): past it the answer is timeout; send empty text to keep waiting without losing output."
    )]
    async fn terminal_send(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(a): Parameters<SendArgs>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let params = SendParams {
            text: a.text.unwrap_or_default(),
            submit: a.submit.unwrap_or(false),
            deadline: Some(self.capped_secs(a.deadline, Some(SEND_DEADLINE_DEFAULT_SECS))),
            idle_window: a.idle_window,
            on_timeout: None,
            on_lease: on_lease(a.on_lease.as_deref()),
            ..SendParams::default()
        };
        let client = self.client_for(&context.extensions);
        let terminal = client.terminal(&a.id);
        Ok(tool_result(
            with_progress(&context, self.wait_cap, terminal.send(&params)).await,
        ))
    }

    #[tool(
        description = "Read a terminal without changing it: mode snapshot (the visible screen, also of full-screen programs), observe (pass the cursor from the last observe to get only what changed since; an expired cursor means observe again without one), or scrollback (older lines)."
    )]
    async fn terminal_read(
        &self,
        context: Extensions,
        Parameters(a): Parameters<ReadArgs>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let client = self.client_for(&context);
        let terminal = client.terminal(&a.id);
        Ok(match a.mode.as_deref().unwrap_or("snapshot") {
            "snapshot" => tool_result(terminal.snapshot().await),
            "observe" => tool_result(terminal.observe(a.cursor.as_deref()).await),
            "scrollback" => tool_result(
                terminal
                    .scrollback(a.offset.unwrap_or(0), a.lines.unwrap_or(100))
                    .await,
            ),
            other => {
                CallToolResult::error(vec![ContentBlock::text(error_text(&ApiError::invalid(
                    format!("unknown mode {other:?}: use snapshot, observe or scrollback"),
                )))])
            }
        })
    }

    #[tool(
        description = "Send a signal (INT to interrupt, TERM, KILL, ...) to the program in the foreground of a terminal; the shell itself stays unless it is the foreground."
    )]
    async fn terminal_signal(
        &self,
        context: Extensions,
        Parameters(a): Parameters<SignalArgs>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let params = SignalParams { signal: a.signal };
        let client = self.client_for(&context);
        Ok(tool_result(client.terminal(&a.id).signal(&params).await))
    }

    #[tool(description = "Resize a terminal (the program sees the new size at once).")]
    async fn terminal_resize(
        &self,
        context: Extensions,
        Parameters(a): Parameters<ResizeArgs>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let params = ResizeParams {
            cols: a.cols,
            rows: a.rows,
        };
        let client = self.client_for(&context);
        Ok(tool_result(client.terminal(&a.id).resize(&params).await))
    }

    #[tool(
        description = "Close a terminal: every process it started ends; its history stays on disk."
    )]
    async fn terminal_close(
        &self,
        context: Extensions,
        Parameters(a): Parameters<IdArgs>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let client = self.client_for(&context);
        Ok(tool_result(client.terminal(&a.id).close().await))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for PtyhubMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_instructions(INSTRUCTIONS)
    }
}

/// The streamable HTTP endpoint (`/mcp`): each MCP session bridges to the server's own socket.
pub fn http_service(
    socket: std::path::PathBuf,
    wait_cap: Duration,
    sessions: Arc<rmcp::transport::streamable_http_server::session::local::LocalSessionManager>,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    PtyhubMcp,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    StreamableHttpService::new(
        move || Ok(PtyhubMcp::new(Client::unix(socket.clone())).with_wait_cap(wait_cap)),
        sessions,
        StreamableHttpServerConfig::default(),
    )
}

#[cfg(test)]
mod tests {
    use ptyhub_protocol::error::{ApiError, ErrorCode};

    use super::{drop_nulls, error_text};

    #[test]
    fn answers_leave_out_null_fields_at_every_depth() {
        let mut answer = serde_json::json!({
            "output": "hi", "exit_code": null, "is_at_prompt": false,
            "input": { "written": 2, "pending": null },
            "commands": [{ "id": 1, "exit_code": null }],
        });
        drop_nulls(&mut answer);
        assert_eq!(
            answer,
            serde_json::json!({
                "output": "hi", "is_at_prompt": false, "input": { "written": 2 },
                "commands": [{ "id": 1 }],
            })
        );
    }

    #[test]
    fn a_failed_call_reads_code_message_and_retryable() {
        let busy = ApiError::new(ErrorCode::Busy, "a command is running");
        assert_eq!(
            error_text(&busy),
            "BUSY: a command is running (retryable: true)"
        );
        let gone = ApiError::not_found("t-1");
        assert_eq!(
            error_text(&gone),
            "SESSION_NOT_FOUND: session t-1 not found (retryable: false)"
        );
    }
}
