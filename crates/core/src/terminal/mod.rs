//! The server-side life of one terminal: an actor task that owns its screen and command
//! tracker, and the cheap [`TerminalHandle`] everyone else uses.
//!
//! The actor applies the terminal's events in `seq` order, from its holder (live) or from the
//! log file (a terminal whose holder is gone). Because a freshly started actor always
//! subscribes from `seq` 0, rebuilding the screen after a server restart is the same code path
//! as following a new terminal.
//!
//! Flow at a glance (exec):
//! 1. [`TerminalHandle::exec`] asks the actor; it refuses with `BUSY` while a command runs,
//!    waits for the first prompt of a new shell, then writes the command as the shell's
//!    integration wants it and answers with the command id;
//! 2. output is fed to the screen and the tracker; the tracker's `D` mark finishes the command;
//! 3. [`TerminalHandle::wait_command`] resolves when the command ends; timeouts that press ^C
//!    (`hard_timeout`, `no_change_timeout`) are the actor's own timers.
//!
//! The actor is split by concern: `host` (the backend link: connect or replay, apply each
//! line, answers to requests, input), `commands` (submission, `BUSY`, the timeout ladder,
//! results), `closing` (ending the tree, marking it closed); [`live`] is where live
//! connections meet the actor's events, and [`send`], [`signal`], [`observe`], [`jobs`] and
//! [`timeline`] are the use cases built on the handle. Everything the actor needs from the
//! processes goes through its [`Backend`]; the actor is unit-tested against a fake one
//! (`tests`).

mod closing;
mod commands;
mod host;
pub mod input_wait;
pub mod jobs;
pub mod live;
pub mod observe;
pub mod send;
pub mod signal;
#[cfg(test)]
mod tests;
pub mod timeline;
mod whole_output;

pub use whole_output::OutputExtent;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::error::TerminalError;
use ptyhub_protocol::api::{
    CommandEntry, CommandResult, CommandStatus, InputMode, InputReceipt, ScreenResponse,
    TerminalInfo, TerminalState, WaitsOn,
};
use ptyhub_protocol::event::{Event, EventKind, InputSource, Seq};
use ptyhub_protocol::holder::{HolderLine, HolderRequest, HolderStatus};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::backend::{Backend, LineStream, RequestSink, TerminalLog};
use crate::queries::QueryScanner;
use crate::screen::{Screen, ScreenView};
use crate::screen_worker::SharedScreen;
use crate::shell::ShellKind;
use crate::state_dir::{self, TerminalMeta};
use crate::tracker::{CommandTracker, ShellPhase};
use commands::{CommandTimers, PendingExec};

/// Requests queued per terminal; senders wait when it is full.
const REQUESTS_QUEUED: usize = 64;
/// Bytes of event log a replay reads at a time.
const REPLAY_STEP_BYTES: usize = 1024 * 1024;
/// How long an exec on a new shell waits for its first prompt.
const FIRST_PROMPT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a first exec waits for the line editor's bracketed paste once the prompt is there.
const PASTE_WAIT: Duration = Duration::from_secs(2);
/// Longest wait for a line editor that never says when it reads to be seen reading.
const SILENT_EDITOR_WAIT: Duration = Duration::from_secs(2);
/// After ^C, a command gets this long before its process group is killed.
const INTERRUPT_GRACE: Duration = Duration::from_secs(3);
/// How long a close waits for the holder to record the exit.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// The signal that ends a command that ignored ^C (the shell itself is spared).
const ESCALATION_SIGNAL: rustix::process::Signal = rustix::process::Signal::KILL;

/// What exec asks of the actor.
#[derive(Clone, Debug, Default)]
pub struct ExecRequest {
    /// What the shell is given.
    pub command: String,
    /// The command as the caller sent it, when it differs from `command` (the timeline's
    /// text).
    pub text: Option<String>,
    /// The directory it runs in, when the caller chose one.
    pub cwd: Option<String>,
    pub hard_timeout: Option<Duration>,
    pub no_change_timeout: Option<Duration>,
    /// Who submits it: its typed bytes are attributed to them in the log (`None`: ptyhub).
    pub source: Option<InputSource>,
}

enum Request {
    Info(oneshot::Sender<TerminalInfo>),
    Exec(ExecRequest, oneshot::Sender<Result<u64, TerminalError>>),
    /// Resolves once command `id` (or the running one) is no longer running; the result
    /// carries the console history only `with_console`.
    Wait {
        id: Option<u64>,
        with_console: bool,
        reply: oneshot::Sender<CommandResult>,
    },
    Result(Option<u64>, oneshot::Sender<CommandResult>),
    Screen(oneshot::Sender<ScreenResponse>),
    /// The current command's status and output so far (no screen).
    Progress(oneshot::Sender<CommandProgress>),
    /// Bytes to type by `source`; with `discard_unread`, unread input is discarded first.
    Input {
        data: Vec<u8>,
        discard_unread: bool,
        source: Option<InputSource>,
        reply: InputAck,
    },
    Resize(u16, u16, oneshot::Sender<Result<(), TerminalError>>),
    /// Answers to a program's queries, read from a screen that had to catch up first
    /// (`host::answer_queries`): the actor types them.
    QueryAnswers(Vec<u8>),
    Close(oneshot::Sender<Result<TerminalMeta, TerminalError>>),
    Probe(oneshot::Sender<Probe>),
    /// A page of the rendered lines: offset from the newest, count; with the total.
    LinesPage(usize, usize, oneshot::Sender<(Vec<String>, usize)>),
    /// A command by id: running now, or among the last finished ones.
    Job(u64, oneshot::Sender<Option<JobView>>),
    /// Interrupt the running command (`id` or whichever runs) as a cancel.
    Cancel(Option<u64>, oneshot::Sender<Result<u64, TerminalError>>),
    /// The process facts, from the backend.
    Foreground(oneshot::Sender<Option<Foreground>>),
    /// A signal (its number) for the foreground process group.
    Signal(i32, oneshot::Sender<Result<Signaled, TerminalError>>),
    /// A page of the timeline: commands after an id, at most a number of them.
    Commands(u64, usize, oneshot::Sender<TimelinePage>),
    /// One command of the timeline and where its output is.
    CommandSource(
        u64,
        oneshot::Sender<(String, Option<timeline::CommandSource>)>,
    ),
    /// Whether input can be typed now, and the last command.
    Shell(oneshot::Sender<ShellState>),
    /// The rendered screen alone.
    View(oneshot::Sender<crate::screen::ScreenView>),
}

/// Who waits for the holder's answer to an input request.
type InputAck = oneshot::Sender<Result<InputReceipt, TerminalError>>;

/// Where the shell is, as its integration marks tell: what `send` needs to know before it
/// types and after the program settled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShellState {
    /// Input typed now reaches its reader as typed: the shell is at its line editor (a new
    /// shell's first prompt has appeared and, for a shell whose editor uses bracketed paste,
    /// the editor has turned it on), or a program runs in the foreground, or the terminal
    /// has exited (nothing will become ready).
    pub is_ready: bool,
    /// The shell is at its prompt (no command runs).
    pub is_at_prompt: bool,
    /// A command runs: the shell has started it (its start mark came), so what reads the
    /// terminal now is the command (a program, or the shell's own `read`), not the line editor.
    pub is_command_running: bool,
    /// The running or last command, by id.
    pub last_command: Option<CommandBrief>,
    /// The shell is at its prompt and its line editor never says when it reads (bash or zsh
    /// without bracketed paste): only the host's facts tell, through
    /// [`TerminalHandle::silent_editor_reads`]. Typed before the editor reads, input is taken
    /// by the terminal's line discipline (echoed, and cut into lines) instead.
    pub is_editor_silent: bool,
    /// A new shell has not shown its first prompt yet.
    pub is_starting: bool,
}

impl ShellState {
    /// A shell that has not shown its first prompt yet (what a new handle sees until its actor
    /// says otherwise).
    const STARTING: Self = Self {
        is_ready: false,
        is_at_prompt: false,
        is_command_running: false,
        last_command: None,
        is_editor_silent: false,
        is_starting: true,
    };
}

/// A command's id and how it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandBrief {
    pub id: u64,
    pub status: CommandStatus,
    pub exit_code: Option<i32>,
}

/// The terminal's id, a page of its timeline, and whether later commands exist.
pub type TimelinePage = (String, Vec<CommandEntry>, bool);

/// What the terminal's foreground process group is doing, as its backend reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Foreground {
    pub pgid: u32,
    /// The group leader's program name.
    pub program: Option<String>,
    /// A process of the group is blocked reading the terminal.
    pub is_reading: bool,
    /// The terminal is in line mode without echo: a password prompt.
    pub is_password: bool,
    /// The terminal is in line (canonical) mode.
    pub is_canonical: bool,
    /// The terminal echoes what is typed.
    pub is_echo: bool,
    /// The group is the shell's own (no program runs in the foreground).
    pub is_shell: bool,
    /// Processes of the terminal (the program and everything it started), when known.
    pub process_count: Option<u32>,
    /// The log's newest `seq` when the facts were read: they describe the terminal as of
    /// then, and the actor's view (the command's marks) is comparable only once it has
    /// applied that far.
    pub log_seq: Seq,
    /// What the group waits on when it is blocked (the terminal when it reads it).
    pub waits_on: Option<WaitsOn>,
    /// Typed bytes no program has read yet, when known.
    pub input_queued: Option<u32>,
}

impl Foreground {
    /// The terminal's input mode.
    pub fn input_mode(&self) -> InputMode {
        if self.is_canonical {
            InputMode::Canonical
        } else {
            InputMode::Raw
        }
    }

    /// How to leave the foreground program, when it is not the shell and is known.
    pub fn leave_hint(&self) -> Option<String> {
        let program = self.program.as_deref().filter(|_| !self.is_shell)?;
        crate::hints::leave_hint(program).map(str::to_owned)
    }

    /// The facts of a running terminal's status (`None` once its program exited).
    fn from_status(status: HolderStatus) -> Option<Self> {
        let pgid = status.foreground_pgid.filter(|_| !status.exited)?;
        Some(Self {
            pgid,
            program: status.foreground_program,
            is_reading: status.is_reading,
            is_password: status.is_canonical && !status.is_echo,
            is_canonical: status.is_canonical,
            is_echo: status.is_echo,
            is_shell: status.child_pid == Some(pgid),
            process_count: status.process_count,
            waits_on: status.waits_on,
            input_queued: status.input_queued,
            log_seq: status.last_seq,
        })
    }

    /// Whether the actor, having applied the log up to `applied`, sees the terminal as these
    /// facts do (a busy actor may still be behind the host, with a command's end unapplied).
    pub fn is_current(&self, applied: Seq) -> bool {
        self.log_seq <= applied
    }
}

/// The current (or last) command as a stream of its output sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandProgress {
    pub session_id: String,
    pub status: CommandStatus,
    /// Its clean output so far.
    pub output: String,
}

/// Which group a signal reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signaled {
    pub pgid: u32,
    pub program: Option<String>,
    /// The group was the shell's own.
    pub is_shell: bool,
}

/// A command as jobs see it.
#[derive(Clone, Debug)]
pub struct JobView {
    pub result: CommandResult,
    /// The output so far while it runs.
    pub output_so_far: String,
    pub is_cancel_requested: bool,
}

/// Finished commands whose results stay available by id.
const FINISHED_KEPT: usize = 100;

/// What code outside the actor needs to know of a terminal's lifecycle (`send`, `observe`,
/// live connections), and where its history is read.
#[derive(Clone, Debug)]
pub struct Probe {
    pub is_exited: bool,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub state: TerminalState,
    pub log: TerminalLog,
    pub id: String,
}

/// A cheap, cloneable reference to a terminal's actor.
#[derive(Clone)]
pub struct TerminalHandle {
    tx: mpsc::Sender<Request>,
    seq: watch::Receiver<Seq>,
    /// Held by the one `send` a terminal allows at a time.
    send_lock: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// Where live connections meet the actor's events.
    live: std::sync::Arc<live::Hub>,
    /// How far each caller has read the output through `send` and `observe`.
    read_marks: std::sync::Arc<std::sync::Mutex<ReadMarks>>,
    /// Changes when the shell's state does (what the actor last published): a caller waiting
    /// for the shell wakes on it instead of asking again on a timer.
    shell: watch::Receiver<ShellState>,
}

/// Callers whose read mark is kept, per terminal (the least recently seen is forgotten).
const READ_MARKS_MAX: usize = 64;

/// How far each caller has been given the terminal's output and its commands, so that
/// nothing printed or ended between two of its answers is invisible to it.
#[derive(Debug, Default)]
struct ReadMarks {
    /// By caller, the most recently seen last.
    marks: Vec<(String, ReadMark)>,
}

/// What one caller has been given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadMark {
    /// The output up to this `seq`.
    pub seq: Seq,
    /// The running or last command as its last `send` answer saw it.
    pub command: Option<CommandBrief>,
}

impl ReadMarks {
    fn get(&self, caller: &str) -> Option<ReadMark> {
        self.marks
            .iter()
            .find(|(c, _)| c == caller)
            .map(|(_, mark)| *mark)
    }

    fn update(&mut self, caller: &str, change: impl FnOnce(&mut ReadMark)) {
        let index = self.marks.iter().position(|(c, _)| c == caller);
        let mut mark = index.map(|i| self.marks.remove(i).1).unwrap_or_default();
        change(&mut mark);
        if self.marks.len() >= READ_MARKS_MAX {
            self.marks.remove(0);
        }
        self.marks.push((caller.to_owned(), mark));
    }
}

impl TerminalHandle {
    /// Starts the actor for a terminal directory. A running terminal is followed live through
    /// its backend; one that is not (or whose host is gone) is replayed from its log.
    pub fn spawn(dir: PathBuf, meta: TerminalMeta, backend: Arc<dyn Backend>) -> Self {
        Self::spawn_as(dir, meta, backend, false)
    }

    /// [`Self::spawn`] for a terminal this server has just created: all its output is new to
    /// the server's metrics, even what it printed before the actor had connected.
    pub fn spawn_created(dir: PathBuf, meta: TerminalMeta, backend: Arc<dyn Backend>) -> Self {
        Self::spawn_as(dir, meta, backend, true)
    }

    fn spawn_as(
        dir: PathBuf,
        meta: TerminalMeta,
        backend: Arc<dyn Backend>,
        is_created: bool,
    ) -> Self {
        let (tx, rx) = mpsc::channel(REQUESTS_QUEUED);
        let (seq_tx, seq) = watch::channel(Seq::ZERO);
        let live = std::sync::Arc::new(live::Hub::default());
        // Every line the actor logs names its terminal.
        let span = tracing::info_span!("terminal", id = %meta.id, owner = %meta.owner);
        let mut actor = Actor::new(dir, meta, backend, seq_tx, std::sync::Arc::clone(&live));
        actor.counts_all_output = is_created;
        actor.own_requests = Some(tx.downgrade());
        let shell = actor.shell_tx.subscribe();
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                actor.run(rx).await;
                // The actor and everything it held are dropped now: give the freed pages back.
                crate::memory::trim_heap();
            },
            span,
        ));
        Self {
            tx,
            seq,
            send_lock: std::sync::Arc::default(),
            live,
            read_marks: std::sync::Arc::default(),
            shell,
        }
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Request,
    ) -> Result<T, TerminalError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(make(reply))
            .await
            .map_err(|_| TerminalError::internal("terminal actor is gone"))?;
        answer
            .await
            .map_err(|_| TerminalError::internal("terminal actor dropped the request"))
    }

    pub async fn info(&self) -> Result<TerminalInfo, TerminalError> {
        self.ask(Request::Info).await
    }

    /// Submits a command; answers with its id once the shell has it.
    pub async fn exec(&self, request: ExecRequest) -> Result<u64, TerminalError> {
        self.ask(|reply| Request::Exec(request, reply)).await?
    }

    /// Waits until the command is no longer running, or `limit` passes; then reports it.
    pub async fn wait_command(
        &self,
        id: Option<u64>,
        limit: Option<Duration>,
    ) -> Result<CommandResult, TerminalError> {
        self.wait_command_for(id, limit, OutputExtent::Whole).await
    }

    /// [`Self::wait_command`] for an answer that needs `extent` of a long output.
    pub async fn wait_command_for(
        &self,
        id: Option<u64>,
        limit: Option<Duration>,
        extent: OutputExtent,
    ) -> Result<CommandResult, TerminalError> {
        self.wait_command_as(id, limit, extent, true).await
    }

    /// [`Self::wait_command_for`] for an answer that carries the console history only
    /// `with_console` (its up to 100 records are not copied for one that drops them).
    pub async fn wait_command_as(
        &self,
        id: Option<u64>,
        limit: Option<Duration>,
        extent: OutputExtent,
        with_console: bool,
    ) -> Result<CommandResult, TerminalError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Request::Wait {
                id,
                with_console,
                reply,
            })
            .await
            .map_err(|_| TerminalError::internal("terminal actor is gone"))?;
        let finished = match limit {
            Some(limit) => tokio::time::timeout(limit, answer).await.ok(),
            None => Some(answer.await),
        };
        match finished {
            Some(Ok(result)) => Ok(self.with_output(id, result, extent).await),
            _ => self.command_result_for(id, extent).await,
        }
    }

    /// The command as it stands now.
    pub async fn command_result(&self, id: Option<u64>) -> Result<CommandResult, TerminalError> {
        self.command_result_for(id, OutputExtent::Whole).await
    }

    /// [`Self::command_result`] for an answer that needs `extent` of a long output.
    pub async fn command_result_for(
        &self,
        id: Option<u64>,
        extent: OutputExtent,
    ) -> Result<CommandResult, TerminalError> {
        let result = self.ask(|reply| Request::Result(id, reply)).await?;
        Ok(self.with_output(id, result, extent).await)
    }

    /// `result` with the command's whole output when the actor kept only part of it and the
    /// answer needs it.
    async fn with_output(
        &self,
        id: Option<u64>,
        mut result: CommandResult,
        extent: OutputExtent,
    ) -> CommandResult {
        if extent == OutputExtent::Whole
            && let Some(output) = &result.output
            && let Some(whole) = whole_output::restore(self, id, result.status, output).await
        {
            result.output = Some(whole);
        }
        result
    }

    pub async fn screen(&self) -> Result<ScreenResponse, TerminalError> {
        let mut screen = self.ask(Request::Screen).await?;
        if let Some(whole) = whole_output::restore(self, None, screen.status, &screen.output).await
        {
            screen.output = whole;
        }
        Ok(screen)
    }

    /// The current command's status and output so far: what a stream of its output needs,
    /// without the screen (whose emulation may lag behind the output on a busy machine).
    pub async fn command_progress(&self) -> Result<CommandProgress, TerminalError> {
        self.ask(Request::Progress).await
    }

    /// Types `data` as `source` (the log's `pty.input` event names them); the receipt says
    /// what the terminal did with it. The input lease is the caller's to check first
    /// ([`Self::wait_for_keyboard`]).
    pub async fn input(
        &self,
        data: Vec<u8>,
        source: InputSource,
    ) -> Result<InputReceipt, TerminalError> {
        let bytes = data.len();
        let outcome = self
            .ask(|reply| Request::Input {
                data,
                discard_unread: false,
                source: Some(source),
                reply,
            })
            .await
            .and_then(|answer| answer);
        if let Err(error) = &outcome {
            crate::stats::global().input_refused(crate::stats::InputRefusal::of(error), bytes);
        }
        outcome
    }

    /// Discards every byte typed earlier that no program has read yet, so it can never run
    /// later; the receipt says how many were discarded.
    pub async fn discard_unread_input(&self) -> Result<InputReceipt, TerminalError> {
        self.ask(|reply| Request::Input {
            data: Vec::new(),
            discard_unread: true,
            source: None,
            reply,
        })
        .await?
    }

    pub async fn resize(&self, cols: u16, rows: u16) -> Result<(), TerminalError> {
        self.ask(|reply| Request::Resize(cols, rows, reply)).await?
    }

    /// Ends the whole process tree and marks the terminal closed; its history stays.
    pub async fn close(&self) -> Result<TerminalMeta, TerminalError> {
        self.ask(Request::Close).await?
    }

    pub async fn probe(&self) -> Result<Probe, TerminalError> {
        self.ask(Request::Probe).await
    }

    /// What the foreground process group is doing now, from the backend (`None` once the
    /// program exited or its host is gone).
    pub async fn foreground(&self) -> Result<Option<Foreground>, TerminalError> {
        self.ask(Request::Foreground).await
    }

    /// Sends signal `number` to the foreground process group.
    pub async fn signal_foreground(&self, number: i32) -> Result<Signaled, TerminalError> {
        self.ask(|reply| Request::Signal(number, reply)).await?
    }

    /// The exclusive right to `send`, or `BUSY`.
    pub fn try_send_lock(&self) -> Result<tokio::sync::OwnedMutexGuard<()>, TerminalError> {
        self.send_lock
            .clone()
            .try_lock_owned()
            .map_err(|_| TerminalError::SendInProgress)
    }

    /// The `count` rendered lines (scrollback, then the screen; oldest first) that end
    /// `offset` lines before the newest, and how many there are in all.
    pub async fn lines_page(
        &self,
        offset: usize,
        count: usize,
    ) -> Result<(Vec<String>, usize), TerminalError> {
        self.ask(|reply| Request::LinesPage(offset, count, reply))
            .await
    }

    pub async fn job(&self, id: u64) -> Result<Option<JobView>, TerminalError> {
        self.ask(|reply| Request::Job(id, reply)).await
    }

    /// Interrupts the running command (^C, then a kill if it ignores it); returns its id.
    pub async fn cancel(&self, id: Option<u64>) -> Result<u64, TerminalError> {
        self.ask(|reply| Request::Cancel(id, reply)).await?
    }

    /// The terminal's id, the commands of its timeline with an id above `after` (at most
    /// `limit`, oldest first), and whether later ones exist.
    pub async fn commands(&self, after: u64, limit: usize) -> Result<TimelinePage, TerminalError> {
        self.ask(|reply| Request::Commands(after, limit, reply))
            .await
    }

    /// The terminal's id and command `id` of its timeline with where its output is.
    pub async fn command_source(
        &self,
        id: u64,
    ) -> Result<(String, Option<timeline::CommandSource>), TerminalError> {
        self.ask(|reply| Request::CommandSource(id, reply)).await
    }

    /// Whether input can be typed now, and the running or last command.
    pub async fn shell_state(&self) -> Result<ShellState, TerminalError> {
        self.ask(Request::Shell).await
    }

    /// Whether the shell itself is blocked reading the terminal, as its host sees it: its line
    /// editor reads (see [`ShellState::is_editor_silent`]).
    pub async fn silent_editor_reads(&self) -> Result<bool, TerminalError> {
        Ok(self
            .foreground()
            .await?
            .is_some_and(|facts| facts.is_shell && facts.is_reading))
    }

    /// Waits until input can be typed at the prompt: through a new shell's start (at most
    /// `limit`), then, for a shell whose line editor never says when it reads,
    /// until it is seen reading (at most 2 s; see
    /// [`ShellState::is_editor_silent`]). At once when a command runs or the terminal ended:
    /// what then is for the caller to find out.
    ///
    /// A shell still starting after `limit` (or 20 s) is
    /// [`TerminalError::FirstPromptTimeout`], with what its screen shows.
    pub async fn wait_for_editor(&self, limit: Option<Duration>) -> Result<(), TerminalError> {
        let started = Instant::now();
        let limit = limit.map_or(FIRST_PROMPT_TIMEOUT, |l| l.min(FIRST_PROMPT_TIMEOUT));
        let mut silent_since = None;
        let mut changes = self.shell.clone();
        loop {
            let state = self.shell_state().await?;
            let now = Instant::now();
            if state.is_starting {
                if now >= started + limit {
                    let screen = self.view().await?.tail(commands::SCREEN_TAIL_ROWS);
                    return Err(TerminalError::FirstPromptTimeout { screen });
                }
                // Asked again as soon as the shell's state changes (its first prompt), and
                // every 10 ms at least.
                let _ = tokio::time::timeout(Duration::from_millis(10), changes.changed()).await;
                continue;
            }
            if !state.is_editor_silent {
                return Ok(());
            }
            let since = *silent_since.get_or_insert(now);
            if now >= since + SILENT_EDITOR_WAIT || self.silent_editor_reads().await? {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The rendered screen (without the command's output a [`Self::screen`] answer carries).
    pub async fn view(&self) -> Result<crate::screen::ScreenView, TerminalError> {
        self.ask(Request::View).await
    }

    /// Records that `caller` has been given everything up to now: the output so far and
    /// `command` as it stands (an exec's answer gives its command's result).
    pub fn mark_read(&self, caller: &str, command: CommandBrief) {
        let seq = *self.seq.borrow();
        self.set_read_mark(caller, seq, Some(Some(command)));
    }

    /// How far `caller` has been given this terminal's output and commands.
    pub fn read_mark(&self, caller: &str) -> Option<ReadMark> {
        self.read_marks
            .lock()
            .map_or(None, |marks| marks.get(caller))
    }

    /// Records that `caller` has been given the output up to `seq` (and, with `Some`, the
    /// command as it was then).
    pub fn set_read_mark(&self, caller: &str, seq: Seq, command: Option<Option<CommandBrief>>) {
        if let Ok(mut marks) = self.read_marks.lock() {
            marks.update(caller, |mark| {
                mark.seq = seq;
                if let Some(command) = command {
                    mark.command = command;
                }
            });
        }
    }

    /// The last applied `seq`; changes wake watchers.
    pub fn seq(&self) -> watch::Receiver<Seq> {
        self.seq.clone()
    }

    /// The last applied `seq`, once it reached `seq` if the log already holds that event: a
    /// reader of the log (a replay) can be ahead of the actor for as long as the holder takes
    /// to serve what it logged, so a cursor it handed out is not "ahead of the terminal".
    /// Waits [`LOG_CATCH_UP_WAIT`] at most; answers at once for a `seq` the log lacks.
    pub(crate) async fn seq_reaching(&self, seq: Seq, log: &TerminalLog) -> Seq {
        let mut applied = self.seq();
        let now = *applied.borrow_and_update();
        if seq <= now || !log.newest_seq().is_ok_and(|newest| newest >= Some(seq)) {
            return now;
        }
        let _ = tokio::time::timeout(LOG_CATCH_UP_WAIT, applied.wait_for(|&s| s >= seq)).await;
        *applied.borrow()
    }
}

/// How long a cursor the log holds waits for the actor to apply it (it is behind the log
/// by the holder's serve, a millisecond or so, or by a flood it is still applying).
const LOG_CATCH_UP_WAIT: Duration = Duration::from_secs(5);

/// A caller waiting for command `id` to end.
struct Waiter {
    id: u64,
    /// The answer carries the console history.
    with_console: bool,
    reply: oneshot::Sender<CommandResult>,
}

struct Actor {
    dir: PathBuf,
    meta: TerminalMeta,
    backend: Arc<dyn Backend>,
    log: TerminalLog,
    kind: ShellKind,
    screen: SharedScreen,
    tracker: CommandTracker,
    last_seq: Seq,
    seq_tx: watch::Sender<Seq>,
    /// The shell's state as last published to the handles (`TerminalHandle::shell`).
    shell_tx: watch::Sender<ShellState>,
    link: Option<Box<dyn RequestSink>>,
    lines: Option<Box<dyn LineStream>>,
    is_exited: bool,
    pending_exec: Option<PendingExec>,
    waiters: Vec<Waiter>,
    closers: Vec<oneshot::Sender<Result<TerminalMeta, TerminalError>>>,
    close_started: Option<Instant>,
    timers: CommandTimers,
    last_output_at: Instant,
    last_activity: u64,
    /// Whether a client typed into the terminal since the last command was submitted (the
    /// prompt's line may then hold text that must be cleared first).
    has_typed_input: bool,
    /// The holder's last `seq` when this actor connected: until the actor has applied it, the
    /// tracker is replaying history and no command may be submitted.
    replay_until: Option<Seq>,
    /// The terminal is this server's own creation: its whole output counts in the metrics
    /// (else only what comes after the history it connected to).
    counts_all_output: bool,
    /// Input requests sent to the holder and not yet answered, in order; `Some` when a client
    /// waits for the answer.
    input_acks: VecDeque<Option<InputAck>>,
    /// Bytes the holder still had queued for the PTY at its last `input_result`.
    holder_input_pending: u64,
    /// Why the host's log refuses appends, while it does (its output is held back).
    storage_error: Option<String>,
    /// The holder protocol version the host picked in its `hello` answer, once connected.
    holder_protocol: Option<u32>,
    /// Why this server does not follow a host that runs (it speaks no shared protocol).
    host_error: Option<String>,
    /// Status requests sent to the backend and not yet answered, in order.
    status_acks: VecDeque<oneshot::Sender<Option<Foreground>>>,
    /// Signal requests sent and not yet answered, in order; `Some` when a client waits.
    signal_acks: VecDeque<Option<oneshot::Sender<Result<Signaled, TerminalError>>>>,
    /// The last finished commands' results, by id (oldest first).
    finished: VecDeque<(u64, CommandResult)>,
    /// Commands a client asked to cancel.
    cancelled: std::collections::HashSet<u64>,
    live: std::sync::Arc<live::Hub>,
    queries: QueryScanner,
    /// Answers to terminal queries ptyhub gives itself (no writer is connected), to be sent.
    query_answers: Vec<u8>,
    /// `command.note`s of typed commands, to be sent to the host for its log.
    notes: Vec<ptyhub_protocol::event::CommandNote>,
    /// This actor's own request queue, for what a blocking thread hands back to it.
    own_requests: Option<mpsc::WeakSender<Request>>,
    /// Batches of query answers a blocking thread is reading from a screen that had to
    /// catch up, not yet handed back (`Request::QueryAnswers`).
    query_answers_owed: usize,
}

impl Actor {
    fn new(
        dir: PathBuf,
        meta: TerminalMeta,
        backend: Arc<dyn Backend>,
        seq_tx: watch::Sender<Seq>,
        live: std::sync::Arc<live::Hub>,
    ) -> Self {
        let log = backend.log(&dir);
        Self {
            kind: ShellKind::parse(&meta.shell),
            screen: SharedScreen::new(&log, meta.cols, meta.rows),
            backend,
            log,
            tracker: CommandTracker::new(&meta.integration_nonce),
            dir,
            last_activity: meta.created_at,
            meta,
            last_seq: Seq::ZERO,
            seq_tx,
            shell_tx: watch::channel(ShellState::STARTING).0,
            link: None,
            lines: None,
            is_exited: false,
            pending_exec: None,
            waiters: Vec::new(),
            closers: Vec::new(),
            close_started: None,
            timers: CommandTimers::default(),
            last_output_at: Instant::now(),
            has_typed_input: true,
            replay_until: None,
            counts_all_output: false,
            input_acks: VecDeque::new(),
            holder_input_pending: 0,
            storage_error: None,
            holder_protocol: None,
            host_error: None,
            status_acks: VecDeque::new(),
            signal_acks: VecDeque::new(),
            finished: VecDeque::new(),
            cancelled: std::collections::HashSet::new(),
            live,
            queries: QueryScanner::default(),
            query_answers: Vec::new(),
            own_requests: None,
            query_answers_owed: 0,
            notes: Vec::new(),
        }
    }

    async fn run(mut self, mut requests: mpsc::Receiver<Request>) {
        tracing::debug!(
            backend = self.meta.backend.as_str(),
            "following the terminal"
        );
        self.attach().await;
        // Output applied since this task last let the others run.
        let mut slice = 0;
        loop {
            // Once the history it connected to is applied: a past view is nobody's business.
            if self.lines.is_none() || self.is_caught_up() {
                let state = self.shell_state();
                self.shell_tx.send_if_modified(|published| {
                    let is_new = *published != state;
                    if is_new {
                        *published = state;
                    }
                    is_new
                });
            }
            let deadline = self.next_deadline();
            tokio::select! {
                line = recv_line(&mut self.lines) => match line {
                    Some(line) => {
                        slice += output_len(&line);
                        self.apply_line(line).await;
                        // Lines that are already buffered never make this task wait, so a
                        // flood would keep a worker thread to itself for as long as it lasts
                        // and every other terminal's requests would wait behind it.
                        if slice >= SLICE_BYTES {
                            slice = 0;
                            tokio::task::yield_now().await;
                        }
                    }
                    None => self.holder_gone().await,
                },
                // Until the history it connected to is applied, the actor's view is a past one:
                // requests wait rather than see it.
                request = requests.recv(), if self.lines.is_none() || self.is_caught_up() => match request {
                    Some(request) => self.handle(request).await,
                    None => break,
                },
                () = sleep_until(deadline) => self.on_timer().await,
            }
        }
    }

    async fn handle(&mut self, request: Request) {
        match request {
            Request::Info(reply) => {
                let _ = reply.send(self.info());
            }
            Request::Exec(request, reply) => self.exec(request, reply).await,
            Request::Wait {
                id,
                with_console,
                reply,
            } => {
                let running = self.tracker.running().map(|c| c.id);
                match running.filter(|&r| id.is_none_or(|id| id == r)) {
                    Some(running) => self.waiters.push(Waiter {
                        id: running,
                        with_console,
                        reply,
                    }),
                    None => {
                        let result = if with_console {
                            self.command_result(id)
                        } else {
                            self.result_without_console(id)
                        };
                        let _ = reply.send(result);
                    }
                }
            }
            Request::Result(id, reply) => {
                let _ = reply.send(self.command_result(id));
            }
            Request::Screen(reply) => {
                let response = self.screen_response();
                self.screen.read_then(Screen::view, move |view, seq| {
                    let _ = reply.send(with_view(response, view, seq));
                });
            }
            Request::Progress(reply) => {
                let record = self.tracker.current();
                let _ = reply.send(CommandProgress {
                    session_id: self.meta.id.to_string(),
                    status: record.map_or(CommandStatus::Completed, |c| c.status),
                    output: record.map(|c| c.output()).unwrap_or_default(),
                });
            }
            Request::Input {
                data,
                discard_unread,
                source,
                reply,
            } => {
                self.has_typed_input = true;
                self.tracker.typing(&data);
                if let Err(error) = self
                    .write_input_with(&data, discard_unread, source, Some(reply))
                    .await
                {
                    tracing::debug!(%error, "input not sent");
                }
            }
            Request::Resize(cols, rows, reply) => {
                let outcome = match self.link.as_mut() {
                    Some(link) => link
                        .send(&HolderRequest::Resize { cols, rows })
                        .await
                        .map_err(|e| TerminalError::internal(format!("holder link: {e}"))),
                    None => Err(not_running(&self.meta)),
                };
                let _ = reply.send(outcome);
            }
            Request::Foreground(reply) => {
                // While ptyhub owes the program answers to its queries, its read waits for
                // them, not for a client: no facts, so nobody reports it waiting for input.
                let sent = match self.link.as_mut() {
                    Some(_) if self.query_answers_owed > 0 => None,
                    Some(link) if !self.is_exited => link.send(&HolderRequest::Status).await.ok(),
                    _ => None,
                };
                match sent {
                    Some(()) => self.status_acks.push_back(reply),
                    None => {
                        let _ = reply.send(None);
                    }
                }
            }
            Request::Signal(signal, reply) => {
                let request = HolderRequest::Signal {
                    signal,
                    spare_pgid: None,
                };
                let sent = match self.link.as_mut() {
                    Some(link) if !self.is_exited => link.send(&request).await.ok(),
                    _ => None,
                };
                match sent {
                    Some(()) => self.signal_acks.push_back(Some(reply)),
                    None => {
                        let _ = reply.send(Err(not_running(&self.meta)));
                    }
                }
            }
            Request::QueryAnswers(answers) => {
                self.query_answers_owed = self.query_answers_owed.saturating_sub(1);
                if !answers.is_empty() {
                    let _ = self.write_input(&answers, None).await;
                }
            }
            Request::Close(reply) => self.close(reply).await,
            Request::Shell(reply) => {
                let _ = reply.send(self.shell_state());
            }
            Request::View(reply) => {
                self.screen.read_then(Screen::view, move |view, _| {
                    let _ = reply.send(view);
                });
            }
            Request::Job(id, reply) => {
                let _ = reply.send(self.job_view(id));
            }
            Request::Cancel(id, reply) => {
                let running = self.tracker.running().map(|c| c.id);
                let outcome = match running.filter(|&r| id.is_none_or(|id| id == r)) {
                    Some(running) => {
                        self.cancelled.insert(running);
                        self.cancel_running().await;
                        Ok(running)
                    }
                    None => Err(TerminalError::NoRunningJob),
                };
                let _ = reply.send(outcome);
            }
            Request::Commands(after, limit, reply) => {
                let (commands, has_more) = self.timeline_page(after, limit);
                let _ = reply.send((self.meta.id.to_string(), commands, has_more));
            }
            Request::CommandSource(id, reply) => {
                let _ = reply.send((self.meta.id.to_string(), self.command_source(id)));
            }
            Request::LinesPage(offset, count, reply) => {
                self.screen.read_then(
                    move |screen| screen.lines_page(offset, count),
                    move |page, _| {
                        let _ = reply.send(page);
                    },
                );
            }
            Request::Probe(reply) => {
                let _ = reply.send(Probe {
                    is_exited: self.is_exited,
                    exit_code: self.meta.exit_code,
                    signal: self.meta.signal,
                    state: self.meta.state,
                    log: self.log.clone(),
                    id: self.meta.id.to_string(),
                });
            }
        }
    }

    /// The screen answer but for the screen itself and the `seq` it reflects, which
    /// [`with_view`] fills in.
    fn screen_response(&self) -> ScreenResponse {
        let record = self.tracker.current();
        ScreenResponse {
            session_id: self.meta.id.to_string(),
            command: self.tracker.running().map(|c| c.command.clone()),
            status: record.map_or(CommandStatus::Completed, |c| c.status),
            output: record.map(|c| c.output()).unwrap_or_default(),
            exit_code: record.and_then(|c| c.exit_code),
            screen: Vec::new(),
            cols: 0,
            rows: 0,
            cursor_row: 0,
            cursor_col: 0,
            is_alternate_screen: false,
            state: self.meta.state,
            title: self.tracker.title().map(str::to_owned),
            seq: self.last_seq,
        }
    }

    fn shell_state(&self) -> ShellState {
        let phase = self.tracker.phase();
        let is_editor_ready = match self.kind {
            ShellKind::Sh => true,
            // These announce bracketed paste at startup and turn it on at every prompt.
            ShellKind::Bash | ShellKind::Zsh => self.tracker.is_bracketed_paste(),
        };
        let is_shell_ready = match phase {
            ShellPhase::Starting => false,
            ShellPhase::Idle => is_editor_ready,
            ShellPhase::Submitted | ShellPhase::Running | ShellPhase::Exited => true,
        };
        ShellState {
            is_ready: self.is_exited
                || self.link.is_none()
                || (is_shell_ready && self.is_caught_up()),
            is_at_prompt: phase == ShellPhase::Idle,
            is_command_running: phase == ShellPhase::Running,
            last_command: self.tracker.current().map(|c| CommandBrief {
                id: c.id,
                status: c.status,
                exit_code: c.exit_code,
            }),
            is_starting: phase == ShellPhase::Starting && !self.is_exited && self.link.is_some(),
            is_editor_silent: phase == ShellPhase::Idle
                && self.kind != ShellKind::Sh
                && !self.tracker.has_bracketed_paste()
                && !self.is_exited
                && self.is_caught_up(),
        }
    }

    fn info(&self) -> TerminalInfo {
        let mut meta = self.meta.clone();
        // The holder follows the shell's working directory in meta.json.
        // And the cgroup's out-of-memory count.
        if let Ok(on_disk) = state_dir::read_meta(&self.dir) {
            meta.cwd = on_disk.cwd;
            meta.cgroup = on_disk.cgroup;
        }
        let mut info = meta.info(
            self.last_activity,
            self.tracker.running().map(|c| c.command.clone()),
            self.last_seq,
        );
        info.storage_error.clone_from(&self.storage_error);
        info.holder_protocol = self.holder_protocol.filter(|_| self.link.is_some());
        info.host_error.clone_from(&self.host_error);
        info.lease = self.live.lease();
        info
    }
}

fn not_running(meta: &TerminalMeta) -> TerminalError {
    TerminalError::NotRunning {
        id: meta.id.to_string(),
    }
}

/// Output an actor applies before it lets the other tasks run: a few milliseconds of work
/// in a debug build, well under one in a release build.
const SLICE_BYTES: usize = 64 * 1024;

/// The output bytes a line carries (what applying it costs, roughly).
fn output_len(line: &HolderLine) -> usize {
    match line {
        HolderLine::Event(Event {
            kind: EventKind::Output { data },
            ..
        }) => data.len(),
        _ => 0,
    }
}

async fn recv_line(lines: &mut Option<Box<dyn LineStream>>) -> Option<HolderLine> {
    match lines {
        Some(lines) => lines.next().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// `response` with the screen `view` in it, which reflects the events up to `seq`.
fn with_view(response: ScreenResponse, view: ScreenView, seq: Seq) -> ScreenResponse {
    ScreenResponse {
        seq,
        screen: view.lines,
        cols: view.cols,
        rows: view.rows,
        cursor_row: view.cursor_row,
        cursor_col: view.cursor_col,
        is_alternate_screen: view.is_alternate_screen,
        ..response
    }
}
