//! MCP tools for terminals, served over stdio by `ptyhub mcp` and over streamable HTTP at
//! `/mcp`. A thin bridge: every tool is one typed REST v2 call of `ptyhub_client` on the
//! server's local socket, with the same words and semantics; results are the call's `data` as
//! JSON text, failures carry the error code and whether retrying can help ([`error_text`]).
//! Over `/mcp`, each call carries the HTTP caller's principal (`auth::ACT_AS_HEADER`), so a
//! tool can do exactly what the caller's token may.

use ptyhub_client::{Client, ClientError};
use ptyhub_protocol::api::{
    CreateSessionParams, ExecParams, ResizeParams, SendParams, SignalParams, WindowParams,
};
use ptyhub_protocol::error::ApiError;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Extensions, ServerCapabilities, ServerConfig};
use rmcp::{ServerHandler, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};

use crate::auth::{ACT_AS_HEADER, Principal};
use crate::wire_error::{Surface, WireError};

pub const INSTRUCTIONS: &str = "Persistent terminals (real PTY shells) that outlive this conversation. \
Open a terminal once and keep using its id. Use terminal_exec for shell commands that end: it \
returns the command's own output and exit code. Use terminal_send for interactive programs \
(REPLs, installers, password prompts): it types text and returns when the terminal needs you \
again, with a wait_reason: stdin_read (a program waits for input; is_password_prompt tells a \
hidden prompt), inferred_idle (quiet and nobody reads: still working), timeout (deadline \
passed, still running), session_exit (the shell ended). Never poll in a loop: send and exec \
wait on the server.";

#[derive(Clone)]
pub struct PtyhubMcp {
    client: Client,
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
    /// Seconds to wait for it (default: until it ends or prints nothing for 120 s, then ^C). If it is still running after this, status is "running" and it goes on.
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
    /// Seconds to wait at most (default 30).
    deadline: Option<f64>,
    /// Seconds of quiet output, while nothing reads, that count as idle (default 2).
    idle_window: Option<f64>,
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

/// A failed tool call's text: `CODE: message (retryable: bool)`.
pub fn error_text(error: &ApiError) -> String {
    WireError::new(error.clone(), Surface::Mcp).tool_text()
}

/// A call's answer as a tool result: its `data` as compact JSON (keys sorted, as
/// `serde_json::Value` keeps them; a screen without its trailing empty rows), or the error.
fn tool_result<T: Serialize>(answer: Result<T, ClientError>) -> CallToolResult {
    match answer.map_err(ClientError::into_api).and_then(|data| {
        serde_json::to_value(&data)
            .map_err(|e| ApiError::internal(format!("cannot encode the answer: {e}")))
    }) {
        Ok(mut data) => {
            trim_screen(&mut data);
            let text = serde_json::to_string(&data).unwrap_or_default();
            CallToolResult::success(vec![ContentBlock::text(text)])
        }
        Err(error) => CallToolResult::error(vec![ContentBlock::text(error_text(&error))]),
    }
}

/// Drops the empty rows at the bottom of a `screen` (of the answer, or of the snapshot an
/// `observe` answer holds): they cost a model characters and tell it nothing (`rows` still
/// gives the screen's height).
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
            tool_router: Self::tool_router(),
        }
    }

    /// The client for one tool call. Over `/mcp` it acts for the principal of the HTTP
    /// request that carried the call (its token's owner and capabilities), never for more;
    /// over stdio, for the local user.
    fn client_for(&self, context: &Extensions) -> Client {
        let principal = context
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Principal>());
        match principal {
            Some(principal) => self
                .client
                .clone()
                .with_header(ACT_AS_HEADER, principal.act_as_value()),
            None => self.client.clone(),
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
        description = "Run a shell command in a terminal and wait for it: returns status (completed, running, no_change_timeout, hard_timeout), the command's own output (no prompt or echo; long output keeps its head and tail) and exit_code. cd and export persist. To get only the part of a long output you need, pass tail (last lines), head, grep (+ context), or max_tokens; window tells what was left out and next_offset continues. For interactive programs use terminal_send instead."
    )]
    async fn terminal_exec(
        &self,
        context: Extensions,
        Parameters(a): Parameters<ExecArgs>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let params = ExecParams {
            command: a.command,
            timeout: a.timeout,
            include_console: a.include_console,
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
        let client = self.client_for(&context);
        Ok(tool_result(client.terminal(&a.id).exec(&params).await))
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
        description = "Type text into a terminal (optionally pressing Enter) and wait until it needs you again. wait_reason: stdin_read = a program waits for input (answer with another send; is_password_prompt = input is hidden), inferred_idle = no output and nobody reads (still working: send empty text to keep waiting), timeout = deadline passed (still running), session_exit = the shell ended. output = what was printed since your last send or read (the rendered screen when is_full_screen). waits_on = what a blocked program waits on (socket: a network call that may hang). command_exit_code = exit code of the command that just ended. hint = how to leave a pager, editor or REPL."
    )]
    async fn terminal_send(
        &self,
        context: Extensions,
        Parameters(a): Parameters<SendArgs>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let params = SendParams {
            text: a.text.unwrap_or_default(),
            submit: a.submit.unwrap_or(false),
            deadline: a.deadline,
            idle_window: a.idle_window,
            on_timeout: None,
            ..SendParams::default()
        };
        let client = self.client_for(&context);
        Ok(tool_result(client.terminal(&a.id).send(&params).await))
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

#[tool_handler]
impl ServerHandler for PtyhubMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_instructions(INSTRUCTIONS)
    }
}

/// The streamable HTTP endpoint (`/mcp`): each MCP session bridges to the server's own socket.
pub fn http_service(
    socket: std::path::PathBuf,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    PtyhubMcp,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    StreamableHttpService::new(
        move || Ok(PtyhubMcp::new(Client::unix(socket.clone()))),
        std::sync::Arc::default(),
        StreamableHttpServerConfig::default(),
    )
}

#[cfg(test)]
mod tests {
    use ptyhub_protocol::error::{ApiError, ErrorCode};

    use super::error_text;

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
