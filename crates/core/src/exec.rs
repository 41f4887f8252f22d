//! Exec, ptyhub's main use case: run one command in a terminal's shell and report it. This
//! module owns exec's rules so that every transport (REST v1 and v2, their server-sent events,
//! MCP through REST v2) only translates: the defaults (`no_change_timeout` 120 s), the seconds
//! fields (finite, 0 to a day), the command's bounds, `exec_dir` (an existing absolute
//! directory, entered by a quoted `cd` joined to the command: [`ExecOptions::shell_text`]),
//! `async` (nobody waits, so no `no_change_timeout`), how long the caller waits, and the
//! truncation of the answer's output.
//!
//! It does not own the command's life in the shell (the terminal actor in [`crate::terminal`]:
//! the timers that press ^C, `BUSY`, parking until the shell is ready), capability checks (the
//! transport's), or how an error maps to a status code.
//!
//! Entry types: [`ExecOptions`] (validated parameters) and [`Submitted`] (a command the shell
//! has). Jobs ([`crate::terminal::jobs`]) are commands nobody waits for; [`JobOptions`] checks
//! their start parameters by the same rules.
//!
//! # Flow at a glance
//! 1. [`ExecOptions::from_params`] validates the caller's [`ExecParams`] (no terminal involved).
//! 2. [`submit`] finds the terminal, resolves `no_change_timeout` (the caller's, else the
//!    terminal's default, else [`NO_CHANGE_TIMEOUT_DEFAULT`]; none when `async`) and hands the
//!    shell the command, as one list `cd -- '<exec_dir>' && { … }` when one was given.
//! 3. [`Submitted::wait_for_result`] waits as the caller asked (not at all when `async`, up to
//!    `timeout` otherwise, until the command ends without one) and shapes the result: the
//!    command as the caller sent it, the output truncated unless `truncate` was false. A
//!    stream follows the output itself for [`Submitted::wait_limit`], then takes
//!    [`Submitted::result_now`].
//!
//! [`run`] is steps 2 and 3.

use std::path::Path;
use std::time::Duration;

use crate::error::TerminalError;
use ptyhub_protocol::api::{
    CommandResult, ExecParams, JobParams, OnLease, RunningState, WindowParams,
};
use ptyhub_protocol::event::InputSource;

use crate::output_window::OutputWindow;
use crate::plain_text::{TRUNCATE_CHARS, truncate_middle};
use crate::registry::Registry;
use crate::terminal::live::{LEASE_WAIT_DEFAULT, Writer};
use crate::terminal::{CommandBrief, ExecRequest, OutputExtent, TerminalHandle};

/// `no_change_timeout` of a waiting exec when neither the caller nor the terminal set one:
/// seconds without output before ^C.
pub const NO_CHANGE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(120);
/// Longest accepted seconds field of any kind (a day).
pub const TIMEOUT_MAX_SECS: f64 = 86_400.0;
/// Longest accepted command text.
pub const COMMAND_MAX_BYTES: usize = 4 * 1024 * 1024;

/// A seconds field of the API (exec's timeouts, and every other one: `wait`, `send`, jobs,
/// a terminal's default `no_change_timeout`): finite and between 0 and a day.
pub fn parse_seconds(name: &str, value: Option<f64>) -> Result<Option<Duration>, TerminalError> {
    match value {
        None => Ok(None),
        Some(s) if s.is_finite() && (0.0..=TIMEOUT_MAX_SECS).contains(&s) => {
            Ok(Some(Duration::from_secs_f64(s)))
        }
        Some(s) => Err(TerminalError::invalid(format!(
            "{name} must be between 0 and {TIMEOUT_MAX_SECS} seconds, not {s}"
        ))),
    }
}

/// Why a command text is refused.
enum CommandProblem {
    Empty,
    TooLong,
}

/// A command is something other than blanks, and at most [`COMMAND_MAX_BYTES`].
fn command_problem(command: &str) -> Option<CommandProblem> {
    if command.trim().is_empty() {
        Some(CommandProblem::Empty)
    } else if command.len() > COMMAND_MAX_BYTES {
        Some(CommandProblem::TooLong)
    } else {
        None
    }
}

/// How many characters of a long output a v2 or MCP exec answer keeps by default (the first
/// and last 5,000): enough for a model's next step; the whole output stays readable through
/// the timeline's windows.
pub const AGENT_TRUNCATE_CHARS: usize = 10_000;

/// A command's output as exec answers it: longer than [`TRUNCATE_CHARS`] characters, only its
/// first and last halves of that with a marker between (exec unless `truncate` is false, jobs,
/// console records and kept results follow the same rule).
pub fn truncate_output(text: &str) -> String {
    truncate_middle(text, TRUNCATE_CHARS)
}

/// A directory a command runs in: absolute and existing when it was checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecDir(String);

impl ExecDir {
    /// Checks that `dir` is an absolute path to an existing directory.
    pub fn parse(dir: &str) -> Result<Self, TerminalError> {
        let path = Path::new(dir);
        if !path.is_absolute() || !path.is_dir() {
            return Err(TerminalError::invalid(format!(
                "exec_dir {dir:?} is not an existing absolute directory"
            )));
        }
        Ok(Self(dir.to_owned()))
    }

    /// The same directory with symlinks resolved (as given if that fails).
    #[must_use]
    pub fn real_path(self) -> Self {
        match std::fs::canonicalize(&self.0) {
            Ok(path) => Self(path.to_string_lossy().into_owned()),
            Err(_) => self,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }

    /// The shell line that enters the directory: `cd -- '<dir>'`, single-quoted for any POSIX
    /// shell (a `'` in the name becomes `'\''`; spaces and newlines stay inside the quotes).
    pub fn cd_line(&self) -> String {
        format!("cd -- '{}'", self.0.replace('\'', r"'\''"))
    }
}

/// Exec's parameters, validated.
#[derive(Clone, Debug)]
pub struct ExecOptions {
    /// The command as the caller sent it (the answer reports this, not the `cd` line).
    command: String,
    exec_dir: Option<ExecDir>,
    is_async: bool,
    /// How long the caller waits for the result (`timeout`); `None` is until the command ends.
    timeout: Option<Duration>,
    hard_timeout: Option<Duration>,
    /// The caller's `no_change_timeout`; `None` falls back to the terminal's default.
    no_change_timeout: Option<Duration>,
    /// What of the command's output and console the answer carries.
    shape: AnswerShape,
    /// Answer as soon as the command waits for input.
    is_input_returned: bool,
    /// What the command waits for while someone else holds the keyboard.
    on_lease: OnLease,
    /// Who runs it (its typed bytes are attributed to them); `None`: ptyhub.
    source: Option<InputSource>,
}

impl ExecOptions {
    /// Checks the command (not blank, at most [`COMMAND_MAX_BYTES`]), then `timeout`,
    /// `hard_timeout` and `no_change_timeout` ([`parse_seconds`]), then `exec_dir`
    /// ([`ExecDir::parse`]); the first problem is the error.
    pub fn from_params(params: &ExecParams) -> Result<Self, TerminalError> {
        match command_problem(&params.command) {
            Some(CommandProblem::Empty) => {
                return Err(TerminalError::invalid("command must not be empty"));
            }
            Some(CommandProblem::TooLong) => {
                return Err(TerminalError::invalid("command too long"));
            }
            None => {}
        }
        let timeout = parse_seconds("timeout", params.timeout)?;
        let hard_timeout = parse_seconds("hard_timeout", params.hard_timeout)?;
        let no_change_timeout = parse_seconds("no_change_timeout", params.no_change_timeout)?;
        let exec_dir = params.exec_dir.as_deref().map(ExecDir::parse).transpose()?;
        let shape =
            AnswerShape::from_params(params.truncate, params.include_console, &params.window)?;
        Ok(Self {
            command: params.command.clone(),
            exec_dir,
            is_async: params.is_async,
            timeout,
            hard_timeout,
            no_change_timeout,
            shape,
            is_input_returned: params.return_on_input.unwrap_or(true),
            on_lease: params.on_lease.unwrap_or_default(),
            source: None,
        })
    }

    /// Types the command as `source` (the log's `pty.input` event names them, and the input
    /// lease applies to them).
    #[must_use]
    pub fn typed_by(mut self, source: InputSource) -> Self {
        self.source = Some(source);
        self
    }

    /// Truncates a long output to `chars` characters (half from each end) rather than the
    /// agent default [`AGENT_TRUNCATE_CHARS`]: v1 keeps [`crate::plain_text::TRUNCATE_CHARS`].
    #[must_use]
    pub fn truncating_at(mut self, chars: usize) -> Self {
        self.shape.truncate_chars = chars;
        self
    }

    /// Runs the command in `dir` instead of any `exec_dir` of the parameters: for a caller
    /// that already checked (and perhaps resolved) the directory itself, as v1 does.
    #[must_use]
    pub fn in_dir(mut self, dir: Option<ExecDir>) -> Self {
        self.exec_dir = dir;
        self
    }

    /// The text the shell receives: with an `exec_dir`, one command list of three parts on
    /// lines of their own, `cd -- '<dir>' && {`, the command, and `}`.
    ///
    /// The `cd` and the command are one submission on purpose. Sent as two lines (`cd`, then
    /// the command), a shell that reads line by line (no bracketed paste: bash up to 5.0,
    /// `enable-bracketed-paste off`, zsh without `zle_bracketed_paste`, or bytes that reached
    /// the tty while a slow `PROMPT_COMMAND` or `precmd` still ran) ran the `cd` alone and
    /// showed its prompt; that prompt's `D;0` mark ended the exec with the `cd`'s exit code and
    /// empty output while the command ran on unseen. As one list the shell parses all of it
    /// before it runs any, so it marks one start and one end and the exit code is the
    /// command's. The braces stand on lines of their own so that a command ending in `&`, a
    /// comment or a heredoc stays intact, and `&&` means a `cd` that fails (the directory was
    /// removed since it was checked) runs nothing in the wrong place and reports `cd`'s error.
    pub fn shell_text(&self) -> String {
        match &self.exec_dir {
            Some(dir) => format!(
                "{} && {{\n{}\n}}",
                dir.cd_line(),
                self.command.trim_end_matches(['\n', '\r'])
            ),
            None => self.command.clone(),
        }
    }

    /// The `no_change_timeout` the command runs with: none when nobody waits (`async`), else
    /// the caller's, else `terminal_default`, else [`NO_CHANGE_TIMEOUT_DEFAULT`].
    pub fn no_change_timeout(&self, terminal_default: Option<Duration>) -> Option<Duration> {
        if self.is_async {
            return None;
        }
        Some(
            self.no_change_timeout
                .or(terminal_default)
                .unwrap_or(NO_CHANGE_TIMEOUT_DEFAULT),
        )
    }

    /// What the terminal actor is asked to run.
    pub fn request(&self, terminal_default: Option<Duration>) -> ExecRequest {
        let command = self.shell_text();
        ExecRequest {
            text: (command != self.command).then(|| self.command.clone()),
            cwd: self.exec_dir.as_ref().map(|d| d.as_str().to_owned()),
            command,
            hard_timeout: self.hard_timeout,
            no_change_timeout: self.no_change_timeout(terminal_default),
            source: self.source.clone(),
        }
    }

    /// How long the caller waits for the command: zero when `async`, else `timeout` (`None`:
    /// until it ends).
    pub fn wait_limit(&self) -> Option<Duration> {
        if self.is_async {
            Some(Duration::ZERO)
        } else {
            self.timeout
        }
    }

    /// How long the submission waits for a new shell's first prompt: the caller's `timeout`
    /// when it waits with one, else the start's own limit (an `async` exec too: it is typed
    /// once the shell can take it).
    pub fn start_wait_limit(&self) -> Option<Duration> {
        if self.is_async { None } else { self.timeout }
    }

    /// Shapes a result for the caller: the command as sent, and the output and console as
    /// [`AnswerShape::apply`] leaves them.
    pub fn shape(&self, mut result: CommandResult) -> CommandResult {
        result.command = Some(self.command.clone());
        self.shape.apply(result)
    }
}

/// What of a command's output and console an answer carries: exec's and wait's `truncate`,
/// `include_console` and window parameters, validated.
#[derive(Clone, Debug)]
pub struct AnswerShape {
    is_truncated: bool,
    /// How many characters a truncated output keeps (half from each end).
    truncate_chars: usize,
    /// Whether the answer carries the console history.
    is_console_included: bool,
    /// The part of the output the answer carries; `None`: head and tail per `truncate`.
    window: Option<OutputWindow>,
}

impl AnswerShape {
    /// `truncate` (default true, at [`AGENT_TRUNCATE_CHARS`]), `include_console` (default
    /// false) and the window parameters ([`OutputWindow::from_params`]).
    pub fn from_params(
        truncate: Option<bool>,
        include_console: Option<bool>,
        window: &WindowParams,
    ) -> Result<Self, TerminalError> {
        Ok(Self {
            is_truncated: truncate.unwrap_or(true),
            truncate_chars: AGENT_TRUNCATE_CHARS,
            is_console_included: include_console.unwrap_or(false),
            window: OutputWindow::from_params(window)?,
        })
    }

    /// Whether the answer carries the console history (`include_console`).
    pub fn is_console_included(&self) -> bool {
        self.is_console_included
    }

    /// How much of a long output the answer needs: a truncated one without a window only
    /// its ends (the terminal's memory has them; the whole text is read from the log).
    pub fn output_extent(&self) -> OutputExtent {
        match self.window {
            None if self.is_truncated => OutputExtent::for_truncation(self.truncate_chars),
            _ => OutputExtent::Whole,
        }
    }

    /// The output cut to the window asked for (with where it lies), else truncated
    /// ([`truncate_output`]) unless `truncate` was false, and the console history only when
    /// asked (`include_console`).
    pub fn apply(&self, mut result: CommandResult) -> CommandResult {
        if !self.is_console_included {
            result.console = None;
        }
        result.output = match (&self.window, result.output.take()) {
            (Some(window), Some(output)) => {
                let cut = window.apply(&output);
                result.window = Some(cut.info);
                Some(cut.text)
            }
            (None, Some(output)) if self.is_truncated => Some(crate::plain_text::truncate_middle(
                &output,
                self.truncate_chars,
            )),
            (_, output) => output,
        };
        result
    }
}

/// A command the terminal's shell has, and how its answer is to be shaped.
pub struct Submitted {
    handle: TerminalHandle,
    command_id: u64,
    options: ExecOptions,
}

impl Submitted {
    /// The terminal the command runs in.
    pub fn handle(&self) -> &TerminalHandle {
        &self.handle
    }

    /// The command's id in the terminal's timeline.
    pub fn command_id(&self) -> u64 {
        self.command_id
    }

    /// See [`ExecOptions::wait_limit`].
    pub fn wait_limit(&self) -> Option<Duration> {
        self.options.wait_limit()
    }

    /// The command's result as it stands now, shaped.
    pub async fn result_now(&self) -> Result<CommandResult, TerminalError> {
        let result = self
            .handle
            .command_result_for(Some(self.command_id), self.options.shape.output_extent())
            .await?;
        Ok(self.options.shape(result))
    }

    /// Waits as the caller asked (not at all when `async`), then the shaped result; a command
    /// still running after `timeout` is reported as running and goes on.
    pub async fn wait_for_result(self) -> Result<CommandResult, TerminalError> {
        if self.options.is_async {
            return self.result_now().await;
        }
        if !self.options.is_input_returned {
            let result = self
                .handle
                .wait_command_as(
                    Some(self.command_id),
                    self.options.timeout,
                    self.options.shape.output_extent(),
                    self.options.shape.is_console_included(),
                )
                .await?;
            return Ok(self.options.shape(result));
        }
        let waited = crate::terminal::input_wait::wait_command_or_input(
            &self.handle,
            Some(self.command_id),
            self.options.timeout,
            self.options.shape.output_extent(),
            self.options.shape.is_console_included(),
        )
        .await?;
        let mut result = waited.result;
        if let Some(reason) = waited.wait_reason {
            result.wait_reason = Some(reason);
            result.output = waited.output_so_far;
        }
        if result.status.is_running() {
            result.running = Some(running_state(&self.handle).await?);
        }
        Ok(self.options.shape(result))
    }
}

impl Submitted {
    /// The answer of an exec that waits (REST v2, a WebSocket `exec` frame): the result as
    /// [`Self::wait_for_result`] gives it with its `command_id`, and what it gave is marked as
    /// read for `reader` (it is not news to their next `send`).
    pub async fn answer_for(self, reader: &str) -> Result<CommandResult, TerminalError> {
        let command_id = self.command_id;
        let handle = self.handle.clone();
        let mut result = self.wait_for_result().await?;
        result.command_id = Some(command_id);
        handle.mark_read(
            reader,
            CommandBrief {
                id: command_id,
                status: result.status,
                exit_code: result.exit_code,
            },
        );
        Ok(result)
    }
}

/// What holds the terminal while a command runs.
async fn running_state(handle: &TerminalHandle) -> Result<RunningState, TerminalError> {
    let facts = handle.foreground().await?;
    let is_alternate_screen = match &facts {
        Some(facts) if !facts.is_shell => handle.view().await?.is_alternate_screen,
        _ => false,
    };
    Ok(RunningState {
        waits_on: facts.as_ref().and_then(|f| f.waits_on),
        is_alternate_screen,
        input_mode: facts.as_ref().map(crate::terminal::Foreground::input_mode),
        is_echo: facts.as_ref().map(|f| f.is_echo),
        hint: facts
            .as_ref()
            .and_then(crate::terminal::Foreground::leave_hint),
        foreground_program: facts.and_then(|f| f.program),
    })
}

/// Hands `owner`'s terminal `id` the command; answers once the shell has it (the actor parks it
/// until the shell is ready, and refuses it with `BUSY` while another runs).
pub async fn submit(
    registry: &Registry,
    owner: &str,
    id: &str,
    options: &ExecOptions,
) -> Result<Submitted, TerminalError> {
    let handle = registry.get(owner, id).await?;
    let terminal_default = registry.no_change_timeout(owner, id).await;
    let writer = options.source.clone().map(Writer::caller);
    submit_to(handle, terminal_default, writer.as_ref(), options).await
}

/// A live connection's way to run commands (its `exec` frames): the terminal, and the
/// connection as the writer, so the input lease it holds admits them
/// ([`crate::terminal::live::Connection::exec_context`]).
#[derive(Clone)]
pub struct ExecContext {
    pub(crate) handle: TerminalHandle,
    pub(crate) writer: Writer,
}

impl ExecContext {
    /// Submits as [`submit`] does, typed by this connection; `terminal_default` is the
    /// terminal's own `no_change_timeout`.
    pub async fn submit(
        &self,
        options: &ExecOptions,
        terminal_default: Option<Duration>,
    ) -> Result<Submitted, TerminalError> {
        let options = options.clone().typed_by(self.writer.source.clone());
        submit_to(
            self.handle.clone(),
            terminal_default,
            Some(&self.writer),
            &options,
        )
        .await
    }
}

/// Hands `handle`'s shell the command once its line editor can take it and `writer` (if any)
/// may type: nobody else holds the keyboard, or it was let go within the wait asked for.
async fn submit_to(
    handle: TerminalHandle,
    terminal_default: Option<Duration>,
    writer: Option<&Writer>,
    options: &ExecOptions,
) -> Result<Submitted, TerminalError> {
    // The actor types at the prompt; a line editor that never says when it reads is looked
    // at first (typed too early, the terminal's line discipline would take the command).
    handle.wait_for_editor(options.start_wait_limit()).await?;
    if let Some(writer) = writer {
        let limit = options.start_wait_limit().unwrap_or(LEASE_WAIT_DEFAULT);
        handle
            .wait_for_keyboard(writer, options.on_lease, limit)
            .await
            .inspect_err(|error| crate::stats::input_refused(error, options.command.len()))?;
    }
    let command_id = handle.exec(options.request(terminal_default)).await?;
    Ok(Submitted {
        handle,
        command_id,
        options: options.clone(),
    })
}

/// Runs a command as exec does: submits it, waits as asked, and shapes the result.
pub async fn run(
    registry: &Registry,
    owner: &str,
    id: &str,
    options: &ExecOptions,
) -> Result<CommandResult, TerminalError> {
    submit(registry, owner, id, options)
        .await?
        .wait_for_result()
        .await
}

/// A job's start parameters, validated: a job is a command nobody waits for (no
/// `no_change_timeout`), bounded like exec's.
#[derive(Clone, Debug)]
pub struct JobOptions {
    pub command: String,
    pub hard_timeout: Option<Duration>,
}

impl JobOptions {
    /// Checks the command as [`ExecOptions::from_params`] does (with the jobs route's one
    /// message), then `hard_timeout`.
    pub fn from_params(params: JobParams) -> Result<Self, TerminalError> {
        if command_problem(&params.command).is_some() {
            return Err(TerminalError::invalid("command must be 1 byte to 4 MiB"));
        }
        let hard_timeout = parse_seconds("hard_timeout", params.hard_timeout)?;
        Ok(Self {
            command: params.command,
            hard_timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use ptyhub_protocol::api::CommandStatus;
    use ptyhub_protocol::error::ErrorCode;

    use super::*;

    fn params(command: &str) -> ExecParams {
        ExecParams {
            command: command.to_owned(),
            ..ExecParams::default()
        }
    }

    fn message(result: Result<ExecOptions, TerminalError>) -> String {
        match result {
            Ok(options) => panic!("accepted: {options:?}"),
            Err(error) => {
                assert_eq!(error.code(), ErrorCode::InvalidInput);
                error.to_string()
            }
        }
    }

    fn result(output: Option<String>) -> CommandResult {
        CommandResult {
            session_id: "t".to_owned(),
            command: Some("cd -- '/tmp'\necho hi".to_owned()),
            status: CommandStatus::Completed,
            output,
            console: Some(Vec::new()),
            exit_code: Some(0),
            command_id: None,
            window: None,
            wait_reason: None,
            running: None,
        }
    }

    #[test]
    fn seconds_are_finite_and_at_most_a_day() {
        assert_eq!(parse_seconds("timeout", None).unwrap(), None);
        assert_eq!(
            parse_seconds("timeout", Some(0.0)).unwrap(),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_seconds("timeout", Some(1.5)).unwrap(),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            parse_seconds("timeout", Some(86_400.0)).unwrap(),
            Some(Duration::from_secs(86_400))
        );
        for bad in [-1.0, 86_400.5, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let error = parse_seconds("hard_timeout", Some(bad)).unwrap_err();
            assert_eq!(error.code(), ErrorCode::InvalidInput);
            assert_eq!(
                error.to_string(),
                format!("hard_timeout must be between 0 and 86400 seconds, not {bad}")
            );
        }
    }

    #[test]
    fn commands_are_not_blank_and_bounded() {
        assert_eq!(
            message(ExecOptions::from_params(&params(""))),
            "command must not be empty"
        );
        assert_eq!(
            message(ExecOptions::from_params(&params(" \n\t"))),
            "command must not be empty"
        );
        let long = "x".repeat(COMMAND_MAX_BYTES + 1);
        assert_eq!(
            message(ExecOptions::from_params(&params(&long))),
            "command too long"
        );
        let longest = "x".repeat(COMMAND_MAX_BYTES);
        assert!(ExecOptions::from_params(&params(&longest)).is_ok());
    }

    #[test]
    fn the_first_problem_is_reported() {
        let mut bad = params("");
        bad.timeout = Some(-1.0);
        assert_eq!(
            message(ExecOptions::from_params(&bad)),
            "command must not be empty"
        );
        bad.command = "true".to_owned();
        bad.hard_timeout = Some(-2.0);
        bad.exec_dir = Some("relative".to_owned());
        assert_eq!(
            message(ExecOptions::from_params(&bad)),
            "timeout must be between 0 and 86400 seconds, not -1"
        );
        bad.timeout = None;
        assert_eq!(
            message(ExecOptions::from_params(&bad)),
            "hard_timeout must be between 0 and 86400 seconds, not -2"
        );
        bad.hard_timeout = None;
        bad.no_change_timeout = Some(1e9);
        assert_eq!(
            message(ExecOptions::from_params(&bad)),
            "no_change_timeout must be between 0 and 86400 seconds, not 1000000000"
        );
        bad.no_change_timeout = None;
        assert_eq!(
            message(ExecOptions::from_params(&bad)),
            r#"exec_dir "relative" is not an existing absolute directory"#
        );
    }

    #[test]
    fn exec_dir_is_an_existing_absolute_directory() {
        let temp = tempfile::tempdir().unwrap();
        let file = temp.path().join("file");
        std::fs::write(&file, "").unwrap();
        let missing = temp.path().join("missing");
        for bad in [
            "relative/dir".to_owned(),
            String::new(),
            file.to_string_lossy().into_owned(),
            missing.to_string_lossy().into_owned(),
        ] {
            let error = ExecDir::parse(&bad).unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("exec_dir {bad:?} is not an existing absolute directory")
            );
        }
        let dir = temp.path().to_string_lossy().into_owned();
        assert_eq!(ExecDir::parse(&dir).unwrap().as_str(), dir);
    }

    #[test]
    fn real_path_resolves_symlinks() {
        let temp = tempfile::tempdir().unwrap();
        let real = temp.path().join("real");
        let link = temp.path().join("link");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let given = ExecDir::parse(&link.to_string_lossy()).unwrap();
        assert_eq!(given.as_str(), link.to_string_lossy());
        let resolved = given.real_path();
        assert_eq!(
            resolved.into_string(),
            std::fs::canonicalize(&real).unwrap().to_string_lossy()
        );
    }

    #[test]
    fn cd_line_quotes_quotes_spaces_and_newlines() {
        let dir = |name: &str| ExecDir(name.to_owned());
        assert_eq!(dir("/tmp").cd_line(), "cd -- '/tmp'");
        assert_eq!(dir("/a b").cd_line(), "cd -- '/a b'");
        assert_eq!(dir("/it's").cd_line(), r"cd -- '/it'\''s'");
        assert_eq!(dir("/a\nb").cd_line(), "cd -- '/a\nb'");
        assert_eq!(dir("/$(x) `y` \\z").cd_line(), "cd -- '/$(x) `y` \\z'");
    }

    /// The quoting is checked by a real POSIX shell: it enters a directory whose name has every
    /// awkward character, and runs nothing from the name.
    #[test]
    fn cd_line_enters_an_awkward_directory_in_sh() {
        let temp = tempfile::tempdir().unwrap();
        let awkward = temp.path().join("it's a \"dir\"\n$(touch x) `y` \\z");
        std::fs::create_dir(&awkward).unwrap();
        let dir = ExecDir::parse(&awkward.to_string_lossy()).unwrap();
        let mut options = ExecOptions::from_params(&params("pwd")).unwrap();
        options = options.in_dir(Some(dir));
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(options.shell_text())
            .current_dir(temp.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let pwd = String::from_utf8(out.stdout).unwrap();
        assert_eq!(pwd.strip_suffix('\n'), Some(&*awkward.to_string_lossy()));
        assert!(!temp.path().join("x").exists());
    }

    #[test]
    fn exec_dir_precedes_the_command() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().to_string_lossy().into_owned();
        let mut with_dir = params("echo hi\necho there");
        with_dir.exec_dir = Some(dir.clone());
        let options = ExecOptions::from_params(&with_dir).unwrap();
        assert_eq!(
            options.shell_text(),
            format!("cd -- '{dir}' && {{\necho hi\necho there\n}}")
        );
        with_dir.command = "echo hi\n\n".to_owned();
        assert_eq!(
            ExecOptions::from_params(&with_dir).unwrap().shell_text(),
            format!("cd -- '{dir}' && {{\necho hi\n}}")
        );
        assert_eq!(options.request(None).command, options.shell_text());
        let plain = ExecOptions::from_params(&params("echo hi")).unwrap();
        assert_eq!(plain.shell_text(), "echo hi");
        assert_eq!(plain.clone().in_dir(None).shell_text(), "echo hi");
        assert_eq!(options.in_dir(None).shell_text(), "echo hi\necho there");
    }

    /// Runs `command` in `dir` as exec would hand it to `shell` (a script on stdin, as the
    /// shell reads a terminal: line by line); `None` when the shell is not installed.
    fn run_in(shell: &str, dir: &str, command: &str) -> Option<(Option<i32>, String)> {
        use std::io::Write;
        let options = ExecOptions::from_params(&params(command))
            .unwrap()
            .in_dir(Some(ExecDir(dir.to_owned())));
        let mut child = std::process::Command::new(shell)
            .arg("-s")
            .current_dir("/")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let script = format!("{}\necho after-$?\n", options.shell_text());
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        Some((out.status.code(), String::from_utf8(out.stdout).unwrap()))
    }

    /// Regression: the `cd` and the command are one list, so the exit code after it is the
    /// command's, a heredoc, a trailing `&` or comment and an `exit` keep their meaning, and a
    /// directory that is gone runs nothing (elsewhere) at all.
    #[test]
    fn exec_dir_and_command_are_one_list_in_every_shell() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().to_string_lossy().into_owned();
        let gone = temp.path().join("gone").to_string_lossy().into_owned();
        for shell in ["sh", "bash", "zsh"] {
            let Some(plain) = run_in(shell, &dir, "echo out-$((6*7)); (exit 3)") else {
                continue;
            };
            assert_eq!(plain, (Some(0), "out-42\nafter-3\n".to_owned()), "{shell}");
            let script = "pwd\ncat <<'EOF'\n$HOME stays\nEOF\ntrue & # a comment";
            let (_, out) = run_in(shell, &dir, script).unwrap();
            assert_eq!(out, format!("{dir}\n$HOME stays\nafter-0\n"), "{shell}");
            let exit = run_in(shell, &dir, "echo bye\nexit 7").unwrap();
            assert_eq!(exit, (Some(7), "bye\n".to_owned()), "{shell}");
            let (_, out) = run_in(shell, &gone, "echo ran; pwd").unwrap();
            let is_refused = out.starts_with("after-") && out != "after-0\n";
            assert!(
                is_refused,
                "{shell}: the command ran after a failed cd: {out:?}"
            );
        }
    }

    #[test]
    fn no_change_timeout_defaults_and_async() {
        let terminal = Some(Duration::from_secs(7));
        let plain = ExecOptions::from_params(&params("true")).unwrap();
        assert_eq!(
            plain.no_change_timeout(None),
            Some(Duration::from_secs(120))
        );
        assert_eq!(plain.no_change_timeout(terminal), terminal);
        let mut asked = params("true");
        asked.no_change_timeout = Some(3.0);
        asked.hard_timeout = Some(9.0);
        let asked = ExecOptions::from_params(&asked).unwrap();
        assert_eq!(
            asked.no_change_timeout(terminal),
            Some(Duration::from_secs(3))
        );
        let request = asked.request(terminal);
        assert_eq!(request.no_change_timeout, Some(Duration::from_secs(3)));
        assert_eq!(request.hard_timeout, Some(Duration::from_secs(9)));
        let mut background = params("true");
        background.is_async = true;
        background.no_change_timeout = Some(3.0);
        background.hard_timeout = Some(9.0);
        let background = ExecOptions::from_params(&background).unwrap();
        assert_eq!(background.no_change_timeout(terminal), None);
        let request = background.request(terminal);
        assert_eq!(request.no_change_timeout, None);
        assert_eq!(request.hard_timeout, Some(Duration::from_secs(9)));
    }

    #[test]
    fn the_caller_waits_for_timeout_or_not_at_all_when_async() {
        let plain = ExecOptions::from_params(&params("true")).unwrap();
        assert_eq!(plain.wait_limit(), None);
        let mut bounded = params("true");
        bounded.timeout = Some(2.5);
        let bounded = ExecOptions::from_params(&bounded).unwrap();
        assert_eq!(bounded.wait_limit(), Some(Duration::from_millis(2500)));
        let mut background = params("true");
        background.is_async = true;
        background.timeout = Some(2.5);
        let background = ExecOptions::from_params(&background).unwrap();
        assert_eq!(background.wait_limit(), Some(Duration::ZERO));
    }

    #[test]
    fn results_report_the_command_as_sent_and_truncate_unless_asked() {
        let long: String = (0..40_000)
            .map(|i| char::from(b'a' + u8::try_from(i % 26).unwrap()))
            .collect();
        let temp = tempfile::tempdir().unwrap();
        let mut asked = params("echo hi");
        asked.exec_dir = Some(temp.path().to_string_lossy().into_owned());
        // v2 and MCP keep 10,000 characters; v1 asks for its 30,000.
        let agent = ExecOptions::from_params(&asked).unwrap();
        let output = agent.shape(result(Some(long.clone()))).output.unwrap();
        assert!(output.starts_with(&long[..5_000]) && output.ends_with(&long[35_000..]));
        assert_eq!(
            output.chars().count(),
            AGENT_TRUNCATE_CHARS + crate::plain_text::TRUNCATION_MARKER.chars().count()
        );
        let truncating = ExecOptions::from_params(&asked)
            .unwrap()
            .truncating_at(crate::plain_text::TRUNCATE_CHARS);
        let shaped = truncating.shape(result(Some(long.clone())));
        assert_eq!(shaped.command.as_deref(), Some("echo hi"));
        let output = shaped.output.unwrap();
        assert_eq!(output, truncate_output(&long));
        assert!(output.starts_with(&long[..15_000]));
        assert!(output.ends_with(&long[25_000..]));
        assert!(output.contains("[... Observation truncated due to length ...]"));
        assert_eq!(
            output.chars().count(),
            30_000 + crate::plain_text::TRUNCATION_MARKER.chars().count()
        );
        let short = truncating.shape(result(Some("hi\n".to_owned())));
        assert_eq!(short.output.as_deref(), Some("hi\n"));
        assert_eq!(truncating.shape(result(None)).output, None);
        asked.truncate = Some(false);
        let whole = ExecOptions::from_params(&asked).unwrap();
        assert_eq!(whole.shape(result(Some(long.clone()))).output, Some(long));
    }

    #[test]
    fn truncation_keeps_15000_characters_each_side() {
        let exact = "é".repeat(30_000);
        assert_eq!(truncate_output(&exact), exact);
        let over = format!("{}{}", "h".repeat(15_000), "t".repeat(15_001));
        assert_eq!(
            truncate_output(&over),
            format!(
                "{}\n[... Observation truncated due to length ...]\n{}",
                "h".repeat(15_000),
                "t".repeat(15_000)
            )
        );
    }

    #[test]
    fn job_options_follow_exec_bounds() {
        let job = |command: &str, hard_timeout| JobParams {
            command: command.to_owned(),
            hard_timeout,
        };
        for bad in ["", "  ", &"x".repeat(COMMAND_MAX_BYTES + 1)] {
            let error = JobOptions::from_params(job(bad, None)).unwrap_err();
            assert_eq!(error.to_string(), "command must be 1 byte to 4 MiB");
        }
        let error = JobOptions::from_params(job("true", Some(-1.0))).unwrap_err();
        assert_eq!(
            error.to_string(),
            "hard_timeout must be between 0 and 86400 seconds, not -1"
        );
        let ok = JobOptions::from_params(job("sleep 1", Some(5.0))).unwrap();
        assert_eq!(ok.command, "sleep 1");
        assert_eq!(ok.hard_timeout, Some(Duration::from_secs(5)));
    }
}
