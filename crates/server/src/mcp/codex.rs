//! The Codex tool pair over MCP: `exec_command` runs one command in a fresh terminal of the
//! caller and `write_stdin` types into it and reads what it printed since, both answering in
//! Codex's text format (`Wall time`, `Process exited with code N` or `Process running with
//! session ID N`, `Original token count`, `Output:`) with ptyhub's wait reason, what the program
//! waits on and a hint on lines of their own. A command still running after its yield keeps its
//! terminal, reached by an integer session ID that [`Sessions`] maps to the terminal's id for
//! one MCP connection; a command that ended closes its terminal (its history stays on disk).
//! It owns no terminal logic: exec_command is a create and a v2 exec, write_stdin a v2 send.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ptyhub_client::{Client, ClientError};
use ptyhub_protocol::api::{
    CommandStatus, CreateSessionParams, ExecParams, InputMode, SendParams, WaitReason, WaitsOn,
    WindowParams,
};
use ptyhub_protocol::error::{ApiError, ErrorCode};
use rmcp::RoleServer;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_router};
use serde::Deserialize;

use super::{PtyhubMcp, error_result, with_progress};

/// The shortest and longest yield Codex allows, in milliseconds.
const YIELD_MIN_MS: i64 = 250;
const YIELD_MAX_MS: i64 = 30_000;
/// exec_command's yield when none is given, in milliseconds.
const EXEC_YIELD_DEFAULT_MS: i64 = 10_000;
/// write_stdin's yield when none is given, in milliseconds.
const WRITE_YIELD_DEFAULT_MS: i64 = 250;
/// The least an empty write_stdin (a poll) waits, in milliseconds.
const EMPTY_POLL_MIN_MS: i64 = 5_000;
/// Output tokens an answer carries when none is given (a token is about 4 characters).
const MAX_OUTPUT_TOKENS_DEFAULT: usize = 10_000;
/// Characters per estimated token, as the output windows count them.
const CHARS_PER_TOKEN: usize = 4;
/// The line of an answer whose program waits for a line typed without echo.
const PASSWORD_NOTE: &str = "Password prompt: what is typed is not shown";

/// The session IDs of one MCP connection: each names the terminal of a command still running.
#[derive(Default)]
pub(super) struct Sessions {
    inner: Mutex<SessionMap>,
}

#[derive(Default)]
struct SessionMap {
    last: u64,
    terminals: HashMap<u64, String>,
}

impl Sessions {
    fn map(&self) -> std::sync::MutexGuard<'_, SessionMap> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A new session ID for a terminal.
    fn add(&self, terminal: String) -> u64 {
        let mut map = self.map();
        map.last += 1;
        let id = map.last;
        map.terminals.insert(id, terminal);
        id
    }

    fn get(&self, id: u64) -> Option<String> {
        self.map().terminals.get(&id).cloned()
    }

    fn forget(&self, id: u64) {
        self.map().terminals.remove(&id);
    }
}

#[derive(Deserialize, schemars::JsonSchema)]
struct ExecCommandArgs {
    /// The shell command to run (bash; multi-line scripts are fine).
    cmd: String,
    /// An absolute working directory (default: the home directory).
    workdir: Option<String>,
    /// Ask for a TTY. ptyhub always runs the command on a real PTY, so this changes nothing.
    tty: Option<bool>,
    /// Milliseconds to wait for the command to end or ask for input (default 10000, clamped to 250..30000).
    yield_time_ms: Option<i64>,
    /// At most this many tokens of output (about 4 characters each; default 10000): a longer output keeps its head and tail.
    max_output_tokens: Option<i64>,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct WriteStdinArgs {
    /// The session ID exec_command answered ("Process running with session ID N").
    session_id: u64,
    /// Characters to type as they are ("\n" presses Enter, "\u0003" is Ctrl-C); empty just waits for more output.
    chars: Option<String>,
    /// Milliseconds to wait for output (default 250, clamped to 250..30000; an empty chars waits at least 5000). Returns early when the command ends or asks for input.
    yield_time_ms: Option<i64>,
    /// At most this many tokens of output (about 4 characters each; default 10000): a longer output keeps its head and tail.
    max_output_tokens: Option<i64>,
}

/// How a command stands when an answer is written.
enum Process {
    /// It ended with this exit code (unknown when a timeout or the shell's end stopped it).
    Exited(Option<i32>),
    /// It still runs, reachable by this session ID.
    Running(u64),
}

/// One answer in Codex's text format.
struct Answer {
    started: Instant,
    process: Process,
    /// ptyhub's additions, each a line of its own (`Wait reason: stdin_read`).
    notes: Vec<String>,
    output: String,
    max_tokens: usize,
}

impl Answer {
    fn text(&self) -> String {
        let mut text = format!(
            "Wall time: {:.4} seconds\n",
            self.started.elapsed().as_secs_f64()
        );
        match self.process {
            Process::Exited(Some(code)) => text += &format!("Process exited with code {code}\n"),
            Process::Exited(None) => text += "Process exited (exit code unknown)\n",
            Process::Running(id) => text += &format!("Process running with session ID {id}\n"),
        }
        for note in &self.notes {
            text += note;
            text.push('\n');
        }
        let (output, original) = cut_to_tokens(&self.output, self.max_tokens);
        if let Some(tokens) = original {
            text += &format!("Original token count: {tokens}\n");
        }
        text += "Output:\n";
        text += &output;
        text
    }

    fn result(&self) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(self.text())])
    }
}

/// Estimated tokens of a text: characters / 4, rounded up.
fn tokens_of(chars: usize) -> usize {
    chars.div_ceil(CHARS_PER_TOKEN)
}

/// `output` cut to `max_tokens` by keeping its head and tail (half the budget each) with a
/// marker between them, and its original token count when it was cut.
fn cut_to_tokens(output: &str, max_tokens: usize) -> (String, Option<usize>) {
    let chars = output.chars().count();
    let tokens = tokens_of(chars);
    if tokens <= max_tokens {
        return (output.to_owned(), None);
    }
    let budget = max_tokens * CHARS_PER_TOKEN;
    let head: String = output.chars().take(budget / 2).collect();
    let tail_chars = budget - budget / 2;
    let tail: String = output.chars().skip(chars - tail_chars).collect();
    let removed = tokens.saturating_sub(max_tokens);
    (
        format!("{head}\n…{removed} tokens truncated…\n{tail}"),
        Some(tokens),
    )
}

/// A yield in milliseconds clamped to Codex's bounds, then as seconds under the cap.
fn yield_secs(asked: Option<i64>, default: i64, least: i64, cap: Duration) -> f64 {
    let ms = asked
        .unwrap_or(default)
        .clamp(YIELD_MIN_MS, YIELD_MAX_MS)
        .max(least);
    #[allow(clippy::cast_precision_loss, reason = "at most 30000")]
    let secs = ms as f64 / 1000.0;
    secs.min(cap.as_secs_f64())
}

/// `max_output_tokens` checked: absent is the default, negative is refused.
fn max_tokens(asked: Option<i64>) -> Result<usize, ApiError> {
    match asked {
        None => Ok(MAX_OUTPUT_TOKENS_DEFAULT),
        Some(n) => usize::try_from(n).map_err(|_| {
            ApiError::invalid(format!("max_output_tokens must be 0 or more, not {n}"))
        }),
    }
}

/// Text typed by write_stdin: a line feed is the Enter key, which a terminal sends as `\r`
/// (the line discipline turns it into `\n` for a program reading lines, and line editors such
/// as bash's take only `\r` as Enter in raw mode).
fn typed(chars: &str) -> String {
    chars.replace("\r\n", "\r").replace('\n', "\r")
}

/// The output of a send that saw its command end, without the shell's prompt that follows it
/// (the last line, which has no line end).
fn without_prompt(output: &str) -> String {
    match output.rfind('\n') {
        Some(end) => output[..end].to_owned(),
        None => String::new(),
    }
}

/// The `Waiting on` line for what a blocked program waits on, in words.
fn wait_notes(
    reason: Option<WaitReason>,
    waits_on: Option<String>,
    hint: Option<String>,
) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(reason) = reason {
        let name = serde_json::to_value(reason)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        notes.push(format!("Wait reason: {name}"));
    }
    if let Some(what) = waits_on {
        notes.push(format!("Waiting on: {what}"));
    }
    if let Some(hint) = hint {
        notes.push(format!("Hint: {hint}"));
    }
    notes
}

/// Closes a terminal whose command ended; a failure changes nothing for the caller (the
/// terminal idles out later).
async fn close_quietly(client: &Client, terminal: &str) {
    let _ = client.terminal(terminal).close().await;
}

#[tool_router(router = codex_router, vis = "pub(super)")]
impl PtyhubMcp {
    #[tool(
        description = "Run a command (Codex's exec_command) in a fresh terminal (a real PTY; cwd = workdir) and wait up to yield_time_ms (250..30000, default 10000) for it to end or ask for input. Answers text: Wall time, then 'Process exited with code N' (the terminal is closed) or 'Process running with session ID N' (it goes on: continue with write_stdin), 'Original token count' when the output was cut to max_output_tokens (head and tail kept), ptyhub's 'Wait reason' (stdin_read: it asks for input), 'Waiting on' and 'Hint' lines, then 'Output:' and the output. For a shell that keeps cd and exports across commands use terminal_open and terminal_exec."
    )]
    async fn exec_command(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(a): Parameters<ExecCommandArgs>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let started = Instant::now();
        let max_tokens = match max_tokens(a.max_output_tokens) {
            Ok(n) => n,
            Err(error) => return Ok(error_result(&error)),
        };
        if a.cmd.trim().is_empty() {
            return Ok(error_result(&ApiError::invalid("cmd must not be empty")));
        }
        let _ = a.tty;
        let timeout = yield_secs(a.yield_time_ms, EXEC_YIELD_DEFAULT_MS, 0, self.wait_cap);
        let client = self.client_for(&context.extensions);
        let create = CreateSessionParams {
            cwd: a.workdir,
            ..CreateSessionParams::default()
        };
        let terminal = match client.create(&create).await {
            Ok(info) => info.session_id,
            Err(error) => return Ok(error_result(&error.into_api())),
        };
        // A subshell, so that `exit N` ends the command with N as `bash -c` would, not the
        // terminal's shell.
        let params = ExecParams {
            command: format!("(\n{}\n)", a.cmd),
            timeout: Some(timeout),
            ..ExecParams::default()
        };
        let ran = with_progress(
            &context,
            self.wait_cap,
            client.terminal(&terminal).exec(&params),
        )
        .await;
        let result = match ran {
            Ok(result) => result,
            Err(error) => {
                close_quietly(&client, &terminal).await;
                return Ok(error_result(&error.into_api()));
            }
        };
        if !result.status.is_running() {
            close_quietly(&client, &terminal).await;
            let mut notes = Vec::new();
            if result.status != CommandStatus::Completed {
                let status = serde_json::to_value(result.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                notes.push(format!("Status: {status}"));
            }
            return Ok(Answer {
                started,
                process: Process::Exited(result.exit_code),
                notes,
                output: result.output.unwrap_or_default(),
                max_tokens,
            }
            .result());
        }
        // Still running: the output so far is the exec's (it asks for input) or the
        // timeline's (the yield passed).
        let output = match (result.output, result.command_id) {
            (Some(output), _) => output,
            (None, Some(n)) => output_so_far(&client, &terminal, n).await,
            (None, None) => String::new(),
        };
        let session = self.sessions.add(terminal);
        // What holds the terminal, as the exec saw it; a waits_on of `terminal` only repeats
        // stdin_read.
        let running = result.running.unwrap_or_default();
        let waits_on = running
            .waits_on
            .filter(|w| *w != WaitsOn::Terminal)
            .and_then(|w| serde_json::to_value(w).ok())
            .and_then(|v| v.as_str().map(str::to_owned));
        let mut notes = wait_notes(result.wait_reason, waits_on, running.hint);
        if result.wait_reason == Some(WaitReason::StdinRead)
            && running.input_mode == Some(InputMode::Canonical)
            && running.is_echo == Some(false)
        {
            notes.push(PASSWORD_NOTE.to_owned());
        }
        Ok(Answer {
            started,
            process: Process::Running(session),
            notes,
            output,
            max_tokens,
        }
        .result())
    }

    #[tool(
        description = "Type into the command of an exec_command session (Codex's write_stdin) and return what it printed since the last answer, in exec_command's format. chars are typed as they are (\"\\n\" presses Enter; nothing is added); an empty chars polls for more output. Waits up to yield_time_ms (250..30000, default 250; a poll waits at least 5000) and returns early when the command ends (then 'Process exited with code N', the terminal is closed and the session ID forgotten) or asks for input ('Wait reason: stdin_read'). An unknown session ID is an error."
    )]
    async fn write_stdin(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(a): Parameters<WriteStdinArgs>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let started = Instant::now();
        let max_tokens = match max_tokens(a.max_output_tokens) {
            Ok(n) => n,
            Err(error) => return Ok(error_result(&error)),
        };
        let Some(terminal) = self.sessions.get(a.session_id) else {
            return Ok(error_result(&ApiError::new(
                ErrorCode::SessionNotFound,
                format!(
                    "unknown session_id {}: its process ended, or exec_command of another MCP \
                     connection started it",
                    a.session_id
                ),
            )));
        };
        let client = self.client_for(&context.extensions);
        let mut chars = a.chars.unwrap_or_default();
        let mut notes = Vec::new();
        // Typed after its command ended, the text would run in the terminal's shell: it is
        // not typed, and the answer reports the end.
        if !chars.is_empty() && ended(&client, &terminal).await {
            chars.clear();
            notes.push("Input not typed: the process had already exited".to_owned());
        }
        let least = if chars.is_empty() {
            EMPTY_POLL_MIN_MS
        } else {
            0
        };
        let wait = yield_secs(
            a.yield_time_ms,
            WRITE_YIELD_DEFAULT_MS,
            least,
            self.wait_cap,
        );
        let params = SendParams {
            text: typed(&chars),
            submit: false,
            deadline: Some(wait),
            // Quiet output alone does not end the wait: only the command's end, its asking
            // for input, or the yield.
            idle_window: Some(wait),
            on_timeout: None,
            ..SendParams::default()
        };
        let sent = with_progress(
            &context,
            self.wait_cap,
            client.terminal(&terminal).send(&params),
        )
        .await;
        let answer = match sent {
            Ok(answer) => answer,
            Err(error) => {
                let error = error.into_api();
                if matches!(
                    error.code,
                    ErrorCode::SessionNotFound | ErrorCode::SessionNotRunning
                ) {
                    self.sessions.forget(a.session_id);
                }
                return Ok(error_result(&error));
            }
        };
        let waits_on = answer
            .waits_on
            .filter(|w| *w != WaitsOn::Terminal)
            .and_then(|w| serde_json::to_value(w).ok())
            .and_then(|v| v.as_str().map(str::to_owned));
        let (process, output) = if answer.wait_reason == WaitReason::SessionExit {
            (Process::Exited(answer.exit_code), answer.output)
        } else if answer.is_at_prompt {
            (
                Process::Exited(answer.command_exit_code),
                without_prompt(&answer.output),
            )
        } else {
            notes.extend(wait_notes(Some(answer.wait_reason), waits_on, answer.hint));
            if answer.is_password_prompt {
                notes.push(PASSWORD_NOTE.to_owned());
            }
            (Process::Running(a.session_id), answer.output)
        };
        if let Process::Exited(_) = process {
            self.sessions.forget(a.session_id);
            close_quietly(&client, &terminal).await;
        }
        Ok(Answer {
            started,
            process,
            notes,
            output,
            max_tokens,
        }
        .result())
    }
}

/// Whether the terminal's command has ended (its shell runs no command, or the shell itself
/// ended); false when that cannot be read, so the caller's text is typed as asked.
async fn ended(client: &Client, terminal: &str) -> bool {
    client
        .terminal(terminal)
        .status()
        .await
        .is_ok_and(|info| info.running_command.is_none())
}

/// The output a running command printed so far, from the terminal's command timeline (empty
/// when it cannot be read).
async fn output_so_far(client: &Client, terminal: &str, command: u64) -> String {
    let read: Result<_, ClientError> = client
        .terminal(terminal)
        .command(command, &WindowParams::default())
        .await;
    read.map(|c| c.output).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::{cut_to_tokens, typed, without_prompt, yield_secs};
    use std::time::Duration;

    #[test]
    fn a_long_output_keeps_head_and_tail_within_the_budget() {
        let output = "a".repeat(100) + &"z".repeat(100);
        let (cut, original) = cut_to_tokens(&output, 10);
        assert_eq!(original, Some(50));
        assert!(cut.starts_with(&"a".repeat(20)), "{cut}");
        assert!(cut.ends_with(&"z".repeat(20)), "{cut}");
        assert!(cut.contains("…40 tokens truncated…"), "{cut}");
        assert_eq!(cut_to_tokens("short", 10), ("short".to_owned(), None));
    }

    #[test]
    fn yields_are_clamped_to_codex_bounds_and_the_cap() {
        let cap = Duration::from_secs(50);
        assert!((yield_secs(Some(1), 10_000, 0, cap) - 0.25).abs() < 1e-9);
        assert!((yield_secs(Some(99_000), 10_000, 0, cap) - 30.0).abs() < 1e-9);
        assert!((yield_secs(None, 250, 5_000, cap) - 5.0).abs() < 1e-9);
        assert!((yield_secs(None, 10_000, 0, Duration::from_secs(2)) - 2.0).abs() < 1e-9);
    }

    #[test]
    fn enter_is_typed_as_a_carriage_return_and_the_prompt_is_dropped() {
        assert_eq!(typed("bob\n"), "bob\r");
        assert_eq!(typed("a\r\nb"), "a\rb");
        assert_eq!(without_prompt("bob\nhi bob\nroot@vm:~# "), "bob\nhi bob");
        assert_eq!(without_prompt("root@vm:~# "), "");
    }
}
