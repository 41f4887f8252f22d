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

pub mod jobs;
pub mod live;
pub mod observe;
pub mod send;
pub mod signal;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ptyhub_protocol::api::{
    CommandResult, CommandStatus, ScreenResponse, TerminalInfo, TerminalState,
};
use ptyhub_protocol::error::{ApiError, ErrorCode};
use ptyhub_protocol::event::{EventKind, Seq};
use ptyhub_protocol::holder::{HolderLine, HolderMessage, HolderRequest, HolderStatus};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::backend::{Backend, LineStream, RequestSink, TerminalLog};
use crate::queries::{Query, QueryScanner};
use crate::screen_worker::SharedScreen;
use crate::shell::ShellKind;
use crate::state_dir::{self, TerminalMeta};
use crate::tracker::{CommandTracker, ShellPhase, TrackerEvent};
use live::LiveEvent;

/// Requests queued per terminal; senders wait when it is full.
const REQUESTS_QUEUED: usize = 64;
/// Bytes of event log a replay reads at a time.
const REPLAY_STEP_BYTES: usize = 1024 * 1024;
/// How long an exec on a new shell waits for its first prompt.
const FIRST_PROMPT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a first exec waits for the line editor's bracketed paste once the prompt is there.
const PASTE_WAIT: Duration = Duration::from_secs(2);
/// After ^C, a command gets this long before its process group is killed.
const INTERRUPT_GRACE: Duration = Duration::from_secs(3);
/// How long a close waits for the holder to record the exit.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// The signal that ends a command that ignored ^C (the shell itself is spared).
const ESCALATION_SIGNAL: rustix::process::Signal = rustix::process::Signal::KILL;

/// What exec asks of the actor.
#[derive(Clone, Debug, Default)]
pub struct ExecRequest {
    pub command: String,
    pub hard_timeout: Option<Duration>,
    pub no_change_timeout: Option<Duration>,
}

enum Request {
    Info(oneshot::Sender<TerminalInfo>),
    Exec(ExecRequest, oneshot::Sender<Result<u64, ApiError>>),
    /// Resolves once command `id` (or the running one) is no longer running.
    Wait(Option<u64>, oneshot::Sender<CommandResult>),
    Result(Option<u64>, oneshot::Sender<CommandResult>),
    Screen(oneshot::Sender<ScreenResponse>),
    Input(Vec<u8>, oneshot::Sender<Result<(), ApiError>>),
    Resize(u16, u16, oneshot::Sender<Result<(), ApiError>>),
    Close(oneshot::Sender<Result<TerminalMeta, ApiError>>),
    Probe(oneshot::Sender<Probe>),
    Lines(oneshot::Sender<Vec<String>>),
    /// A command by id: running now, or among the last finished ones.
    Job(u64, oneshot::Sender<Option<JobView>>),
    /// Interrupt the running command (`id` or whichever runs) as a cancel.
    Cancel(Option<u64>, oneshot::Sender<Result<u64, ApiError>>),
    /// The process facts, from the backend.
    Foreground(oneshot::Sender<Option<Foreground>>),
    /// A signal (its number) for the foreground process group.
    Signal(i32, oneshot::Sender<Result<Signaled, ApiError>>),
}

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
    /// The group is the shell's own (no program runs in the foreground).
    pub is_shell: bool,
    /// Processes of the terminal (the program and everything it started), when known.
    pub process_count: Option<u32>,
}

impl Foreground {
    /// The facts of a running terminal's status (`None` once its program exited).
    fn from_status(status: HolderStatus) -> Option<Self> {
        let pgid = status.foreground_pgid.filter(|_| !status.exited)?;
        Some(Self {
            pgid,
            program: status.foreground_program,
            is_reading: status.is_reading,
            is_password: status.is_canonical && !status.is_echo,
            is_shell: status.child_pid == Some(pgid),
            process_count: status.process_count,
        })
    }
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
}

impl TerminalHandle {
    /// Starts the actor for a terminal directory. A running terminal is followed live through
    /// its backend; one that is not (or whose host is gone) is replayed from its log.
    pub fn spawn(dir: PathBuf, meta: TerminalMeta, backend: Arc<dyn Backend>) -> Self {
        let (tx, rx) = mpsc::channel(REQUESTS_QUEUED);
        let (seq_tx, seq) = watch::channel(Seq::ZERO);
        let live = std::sync::Arc::new(live::Hub::default());
        let actor = Actor::new(dir, meta, backend, seq_tx, std::sync::Arc::clone(&live));
        tokio::spawn(actor.run(rx));
        Self {
            tx,
            seq,
            send_lock: std::sync::Arc::default(),
            live,
        }
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Request,
    ) -> Result<T, ApiError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(make(reply))
            .await
            .map_err(|_| ApiError::internal("terminal actor is gone"))?;
        answer
            .await
            .map_err(|_| ApiError::internal("terminal actor dropped the request"))
    }

    pub async fn info(&self) -> Result<TerminalInfo, ApiError> {
        self.ask(Request::Info).await
    }

    /// Submits a command; answers with its id once the shell has it.
    pub async fn exec(&self, request: ExecRequest) -> Result<u64, ApiError> {
        self.ask(|reply| Request::Exec(request, reply)).await?
    }

    /// Waits until the command is no longer running, or `limit` passes; then reports it.
    pub async fn wait_command(
        &self,
        id: Option<u64>,
        limit: Option<Duration>,
    ) -> Result<CommandResult, ApiError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Request::Wait(id, reply))
            .await
            .map_err(|_| ApiError::internal("terminal actor is gone"))?;
        let finished = match limit {
            Some(limit) => tokio::time::timeout(limit, answer).await.ok(),
            None => Some(answer.await),
        };
        match finished {
            Some(Ok(result)) => Ok(result),
            _ => self.command_result(id).await,
        }
    }

    /// The command as it stands now.
    pub async fn command_result(&self, id: Option<u64>) -> Result<CommandResult, ApiError> {
        self.ask(|reply| Request::Result(id, reply)).await
    }

    pub async fn screen(&self) -> Result<ScreenResponse, ApiError> {
        self.ask(Request::Screen).await
    }

    pub async fn input(&self, data: Vec<u8>) -> Result<(), ApiError> {
        self.ask(|reply| Request::Input(data, reply)).await?
    }

    pub async fn resize(&self, cols: u16, rows: u16) -> Result<(), ApiError> {
        self.ask(|reply| Request::Resize(cols, rows, reply)).await?
    }

    /// Ends the whole process tree and marks the terminal closed; its history stays.
    pub async fn close(&self) -> Result<TerminalMeta, ApiError> {
        self.ask(Request::Close).await?
    }

    pub async fn probe(&self) -> Result<Probe, ApiError> {
        self.ask(Request::Probe).await
    }

    /// What the foreground process group is doing now, from the backend (`None` once the
    /// program exited or its host is gone).
    pub async fn foreground(&self) -> Result<Option<Foreground>, ApiError> {
        self.ask(Request::Foreground).await
    }

    /// Sends signal `number` to the foreground process group.
    pub async fn signal_foreground(&self, number: i32) -> Result<Signaled, ApiError> {
        self.ask(|reply| Request::Signal(number, reply)).await?
    }

    /// The exclusive right to `send`, or `BUSY`.
    pub fn try_send_lock(&self) -> Result<tokio::sync::OwnedMutexGuard<()>, ApiError> {
        self.send_lock.clone().try_lock_owned().map_err(|_| {
            ApiError::new(
                ErrorCode::Busy,
                "another send is in progress on this terminal",
            )
        })
    }

    /// All rendered lines (scrollback, then the screen), oldest first.
    pub async fn all_lines(&self) -> Result<Vec<String>, ApiError> {
        self.ask(Request::Lines).await
    }

    pub async fn job(&self, id: u64) -> Result<Option<JobView>, ApiError> {
        self.ask(|reply| Request::Job(id, reply)).await
    }

    /// Interrupts the running command (^C, then a kill if it ignores it); returns its id.
    pub async fn cancel(&self, id: Option<u64>) -> Result<u64, ApiError> {
        self.ask(|reply| Request::Cancel(id, reply)).await?
    }

    /// The last applied `seq`; changes wake watchers.
    pub fn seq(&self) -> watch::Receiver<Seq> {
        self.seq.clone()
    }
}

struct PendingExec {
    request: ExecRequest,
    reply: oneshot::Sender<Result<u64, ApiError>>,
    since: Instant,
}

/// Timers of the running command.
#[derive(Default)]
struct CommandTimers {
    hard_deadline: Option<Instant>,
    no_change: Option<Duration>,
    interrupted_at: Option<Instant>,
    killed_at: Option<Instant>,
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
    link: Option<Box<dyn RequestSink>>,
    lines: Option<Box<dyn LineStream>>,
    is_exited: bool,
    pending_exec: Option<PendingExec>,
    waiters: Vec<(u64, oneshot::Sender<CommandResult>)>,
    closers: Vec<oneshot::Sender<Result<TerminalMeta, ApiError>>>,
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
    /// Input requests sent to the holder and not yet answered, in order; `Some` when a client
    /// waits for the answer.
    input_acks: VecDeque<Option<oneshot::Sender<Result<(), ApiError>>>>,
    /// Status requests sent to the backend and not yet answered, in order.
    status_acks: VecDeque<oneshot::Sender<Option<Foreground>>>,
    /// Signal requests sent and not yet answered, in order; `Some` when a client waits.
    signal_acks: VecDeque<Option<oneshot::Sender<Result<Signaled, ApiError>>>>,
    /// The last finished commands' results, by id (oldest first).
    finished: VecDeque<(u64, CommandResult)>,
    /// Commands a client asked to cancel.
    cancelled: std::collections::HashSet<u64>,
    live: std::sync::Arc<live::Hub>,
    queries: QueryScanner,
    /// Answers to terminal queries ptyhub gives itself (no writer is connected), to be sent.
    query_answers: Vec<u8>,
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
            input_acks: VecDeque::new(),
            status_acks: VecDeque::new(),
            signal_acks: VecDeque::new(),
            finished: VecDeque::new(),
            cancelled: std::collections::HashSet::new(),
            live,
            queries: QueryScanner::default(),
            query_answers: Vec::new(),
        }
    }

    async fn run(mut self, mut requests: mpsc::Receiver<Request>) {
        self.attach().await;
        loop {
            let deadline = self.next_deadline();
            tokio::select! {
                line = recv_line(&mut self.lines) => match line {
                    Some(line) => self.apply_line(line).await,
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

    /// Connects to the live holder, or replays the log of a terminal without one.
    async fn attach(&mut self) {
        if self.meta.state == TerminalState::Running && !self.meta.closed {
            match self.backend.connect(&self.meta, Seq::ZERO).await {
                Ok(link) => {
                    self.link = Some(link.requests);
                    self.lines = Some(link.lines);
                    return;
                }
                Err(error) => {
                    tracing::warn!(id = %self.meta.id, %error, "holder unreachable; replaying its log");
                }
            }
        }
        self.replay_file();
        self.mark_gone_if_running();
    }

    /// Applies what the log holds after the last event applied, a step at a time.
    fn replay_file(&mut self) {
        let mut reader = self.log.reader(self.last_seq);
        let mut events = Vec::new();
        loop {
            match reader.read(REPLAY_STEP_BYTES, &mut events) {
                Ok(0) => break,
                Ok(_) => {
                    for event in events.drain(..) {
                        self.apply_event(event.seq, event.ts, event.kind);
                    }
                }
                Err(error) => {
                    tracing::warn!(dir = %self.dir.display(), %error, "cannot read event log");
                    break;
                }
            }
        }
    }

    /// A `running` terminal whose holder cannot be reached is in error (its files stay).
    fn mark_gone_if_running(&mut self) {
        if !self.is_exited && self.meta.state == TerminalState::Running {
            self.meta.state = TerminalState::Error;
            self.meta.ended_at = Some(state_dir::unix_now());
            if let Err(error) = state_dir::write_meta(&self.dir, &self.meta) {
                tracing::warn!(%error, "cannot write meta.json");
            }
        }
        self.is_exited = true;
        self.fail_pending_exec();
        let events = self.tracker.exited(None, None);
        self.notify(&events);
    }

    async fn holder_gone(&mut self) {
        self.link = None;
        self.lines = None;
        for ack in self.input_acks.drain(..).flatten() {
            let _ = ack.send(Err(not_running(&self.meta)));
        }
        for ack in self.status_acks.drain(..) {
            let _ = ack.send(None);
        }
        for ack in self.signal_acks.drain(..).flatten() {
            let _ = ack.send(Err(not_running(&self.meta)));
        }
        if let Ok(meta) = state_dir::read_meta(&self.dir) {
            self.meta.state = meta.state;
            self.meta.cwd = meta.cwd;
            self.meta.exit_code = meta.exit_code;
            self.meta.signal = meta.signal;
            self.meta.ended_at = meta.ended_at;
        }
        // Pick up anything the holder wrote after the stream ended.
        self.replay_file();
        self.mark_gone_if_running();
        self.finish_closing();
    }

    async fn apply_line(&mut self, line: HolderLine) {
        match line {
            HolderLine::Event(event) => self.apply_event(event.seq, event.ts, event.kind),
            HolderLine::Message(HolderMessage::Hello { last_seq, .. }) => {
                self.replay_until = Some(last_seq);
            }
            HolderLine::Message(HolderMessage::InputResult { accepted, error }) => {
                if let Some(Some(ack)) = self.input_acks.pop_front() {
                    let outcome = if accepted {
                        Ok(())
                    } else {
                        Err(ApiError::new(
                            ErrorCode::Busy,
                            error.unwrap_or_else(|| "input refused".to_owned()),
                        ))
                    };
                    let _ = ack.send(outcome);
                }
            }
            HolderLine::Message(HolderMessage::Status(status)) => {
                if let Some(ack) = self.status_acks.pop_front() {
                    let _ = ack.send(Foreground::from_status(status));
                }
            }
            HolderLine::Message(HolderMessage::Signaled {
                pgid,
                program,
                error,
            }) => {
                if let Some(Some(ack)) = self.signal_acks.pop_front() {
                    let outcome = match (pgid, error) {
                        (Some(pgid), None) => Ok(Signaled {
                            pgid,
                            program,
                            is_shell: self.meta.pid == Some(pgid),
                        }),
                        (None, _) => Err(not_running(&self.meta)),
                        (Some(_), Some(error)) => Err(ApiError::internal(format!(
                            "cannot signal the foreground group: {error}"
                        ))),
                    };
                    let _ = ack.send(outcome);
                }
            }
            HolderLine::Message(HolderMessage::Error { message }) => {
                tracing::warn!(id = %self.meta.id, %message, "holder error");
            }
        }
        if !self.query_answers.is_empty() {
            let answers = std::mem::take(&mut self.query_answers);
            let _ = self.write_input(&answers, None).await;
        }
        self.submit_pending_when_ready(false).await;
    }

    /// Submits an exec that waited for a new shell's first prompt, once the line editor is
    /// ready for it (bracketed paste on), or at `force` (a shell without it).
    async fn submit_pending_when_ready(&mut self, force: bool) {
        let is_ready = self.is_caught_up()
            && self.tracker.phase() == ShellPhase::Idle
            && (force || self.kind == ShellKind::Sh || self.tracker.is_bracketed_paste());
        if is_ready && let Some(pending) = self.pending_exec.take() {
            let outcome = self.submit(pending.request).await;
            let _ = pending.reply.send(outcome);
        }
    }

    fn apply_event(&mut self, seq: Seq, ts: f64, kind: EventKind) {
        if seq <= self.last_seq {
            return;
        }
        self.last_seq = seq;
        let mut queries = Vec::new();
        let published = match kind {
            EventKind::Output { data } => {
                let events = self.tracker.feed(&data);
                self.last_output_at = Instant::now();
                self.last_activity = ts as u64;
                self.notify(&events);
                self.queries.feed(&data, |query| queries.push(query));
                LiveEvent::Output {
                    seq,
                    data: bytes::Bytes::from(data),
                }
            }
            EventKind::Resize { cols, rows } => {
                self.meta.cols = cols;
                self.meta.rows = rows;
                LiveEvent::Resize { seq, cols, rows }
            }
            EventKind::Start {
                instance,
                pid,
                cols,
                rows,
                ..
            } => {
                self.is_exited = false;
                self.meta.instance = instance;
                self.meta.pid = Some(pid);
                self.meta.cols = cols;
                self.meta.rows = rows;
                self.tracker.restarted();
                LiveEvent::Other { seq }
            }
            EventKind::Exit { exit_code, signal } => {
                self.is_exited = true;
                self.meta.exit_code = exit_code;
                self.meta.signal = signal;
                self.meta.state = TerminalState::Exited;
                let events = self.tracker.exited(exit_code, signal);
                self.notify(&events);
                self.fail_pending_exec();
                LiveEvent::Exit {
                    seq,
                    exit_code,
                    signal,
                }
            }
            _ => LiveEvent::Other { seq },
        };
        if !queries.is_empty() && self.is_caught_up() {
            // Before any connection can see the query (and answer it).
            self.live.note_query();
        }
        self.live.publish(published);
        self.screen.advance_to(seq);
        if !queries.is_empty() {
            self.answer_queries(&queries);
        }
        let _ = self.seq_tx.send(seq);
    }

    /// A program asked the terminal something: with no writer connected to answer, ptyhub
    /// answers from its screen (never for history being replayed).
    fn answer_queries(&mut self, queries: &[Query]) {
        if !self.is_caught_up() || self.live.writers() > 0 {
            return;
        }
        let (row, col) = self.screen.read(crate::screen::Screen::cursor);
        for query in queries {
            self.query_answers
                .extend_from_slice(&query.answer(row, col));
        }
    }

    fn notify(&mut self, events: &[TrackerEvent]) {
        for event in events {
            if let TrackerEvent::Finished(id) = *event {
                self.timers = CommandTimers::default();
                let mut result = self.command_result(Some(id));
                result.output = result.output.map(|o| {
                    crate::plain_text::truncate_middle(&o, crate::plain_text::TRUNCATE_CHARS)
                });
                result.console.clear();
                self.finished.push_back((id, result));
                while self.finished.len() > FINISHED_KEPT {
                    if let Some((old, _)) = self.finished.pop_front() {
                        self.cancelled.remove(&old);
                    }
                }
                let waiters = std::mem::take(&mut self.waiters);
                for (wanted, reply) in waiters {
                    if wanted == id {
                        let _ = reply.send(self.command_result(Some(id)));
                    } else {
                        self.waiters.push((wanted, reply));
                    }
                }
            }
        }
    }

    fn fail_pending_exec(&mut self) {
        if let Some(pending) = self.pending_exec.take() {
            let _ = pending.reply.send(Err(not_running(&self.meta)));
        }
    }

    async fn handle(&mut self, request: Request) {
        match request {
            Request::Info(reply) => {
                let _ = reply.send(self.info());
            }
            Request::Exec(request, reply) => self.exec(request, reply).await,
            Request::Wait(id, reply) => {
                let running = self.tracker.running().map(|c| c.id);
                match running.filter(|&r| id.is_none_or(|id| id == r)) {
                    Some(running) => self.waiters.push((running, reply)),
                    None => {
                        let _ = reply.send(self.command_result(id));
                    }
                }
            }
            Request::Result(id, reply) => {
                let _ = reply.send(self.command_result(id));
            }
            Request::Screen(reply) => {
                let _ = reply.send(self.screen_response());
            }
            Request::Input(data, reply) => {
                self.has_typed_input = true;
                if let Err(error) = self.write_input(&data, Some(reply)).await {
                    tracing::debug!(%error, "input not sent");
                }
            }
            Request::Resize(cols, rows, reply) => {
                let outcome = match self.link.as_mut() {
                    Some(link) => link
                        .send(&HolderRequest::Resize { cols, rows })
                        .await
                        .map_err(|e| ApiError::internal(format!("holder link: {e}"))),
                    None => Err(not_running(&self.meta)),
                };
                let _ = reply.send(outcome);
            }
            Request::Foreground(reply) => {
                let sent = match self.link.as_mut() {
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
            Request::Close(reply) => self.close(reply).await,
            Request::Job(id, reply) => {
                let _ = reply.send(self.job_view(id));
            }
            Request::Cancel(id, reply) => {
                let running = self.tracker.running().map(|c| c.id);
                let outcome = match running.filter(|&r| id.is_none_or(|id| id == r)) {
                    Some(running) => {
                        self.cancelled.insert(running);
                        self.interrupt(CommandStatus::Terminated).await;
                        Ok(running)
                    }
                    None => Err(ApiError::new(
                        ErrorCode::JobNotFound,
                        "no such running job (it may have ended)",
                    )),
                };
                let _ = reply.send(outcome);
            }
            Request::Lines(reply) => {
                let _ = reply.send(self.screen.read(crate::screen::Screen::all_lines));
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

    async fn exec(&mut self, request: ExecRequest, reply: oneshot::Sender<Result<u64, ApiError>>) {
        if self.is_exited || self.link.is_none() {
            let _ = reply.send(Err(not_running(&self.meta)));
            return;
        }
        let is_busy = self.pending_exec.is_some()
            || matches!(
                self.tracker.phase(),
                ShellPhase::Running | ShellPhase::Submitted
            );
        if is_busy {
            let _ = reply.send(Err(ApiError::new(
                ErrorCode::Busy,
                "Session already has a running command",
            )));
            return;
        }
        // Wait for the line editor: typed ahead while the shell is between the prompt mark
        // and its editor, the tty's line discipline would cook the command first.
        let is_editor_ready = self.kind == ShellKind::Sh
            || !self.tracker.has_bracketed_paste()
            || self.tracker.is_bracketed_paste();
        if !self.is_caught_up() || self.tracker.phase() == ShellPhase::Starting || !is_editor_ready
        {
            self.pending_exec = Some(PendingExec {
                request,
                reply,
                since: Instant::now(),
            });
            return;
        }
        let outcome = self.submit(request).await;
        let _ = reply.send(outcome);
    }

    /// Whether the history that existed when the actor connected has been applied.
    fn is_caught_up(&self) -> bool {
        self.replay_until
            .is_some_and(|until| self.last_seq >= until)
    }

    async fn submit(&mut self, request: ExecRequest) -> Result<u64, ApiError> {
        let bytes = self.kind.submission(
            &request.command,
            self.tracker.has_bracketed_paste(),
            self.has_typed_input,
        );
        self.has_typed_input = false;
        let id = self
            .tracker
            .submit(&request.command, &self.kind.echoed(&request.command));
        self.timers = CommandTimers {
            hard_deadline: request.hard_timeout.map(|t| Instant::now() + t),
            no_change: request.no_change_timeout,
            ..CommandTimers::default()
        };
        self.last_output_at = Instant::now();
        self.last_activity = state_dir::unix_now();
        self.write_input(&bytes, None).await?;
        Ok(id)
    }

    /// Sends bytes to the PTY. `ack` (a client's input request) is answered once the holder
    /// has accepted or refused them; an error here is also sent to `ack`.
    async fn write_input(
        &mut self,
        data: &[u8],
        ack: Option<oneshot::Sender<Result<(), ApiError>>>,
    ) -> Result<(), ApiError> {
        let sent = match self.link.as_mut() {
            Some(link) if !self.is_exited => link
                .send(&HolderRequest::Input {
                    data: data.to_vec(),
                })
                .await
                .map_err(|e| {
                    ApiError::new(ErrorCode::SessionNotRunning, format!("holder link: {e}"))
                }),
            _ => Err(not_running(&self.meta)),
        };
        match &sent {
            Ok(()) => {
                self.last_activity = state_dir::unix_now();
                self.input_acks.push_back(ack);
            }
            Err(error) => {
                if let Some(ack) = ack {
                    let _ = ack.send(Err(error.clone()));
                }
            }
        }
        sent
    }

    async fn close(&mut self, reply: oneshot::Sender<Result<TerminalMeta, ApiError>>) {
        self.closers.push(reply);
        self.close_started.get_or_insert_with(Instant::now);
        match self.link.as_mut() {
            Some(link) if !self.is_exited || self.lines.is_some() => {
                if link.send(&HolderRequest::Terminate).await.is_err() {
                    self.holder_gone().await;
                }
            }
            _ => self.finish_closing(),
        }
    }

    /// Marks the terminal closed once its holder is gone, and answers the closers.
    fn finish_closing(&mut self) {
        if self.closers.is_empty() || self.lines.is_some() {
            return;
        }
        self.meta.closed = true;
        if let Err(error) = state_dir::write_meta(&self.dir, &self.meta) {
            tracing::warn!(%error, "cannot write meta.json");
        }
        self.close_started = None;
        // A closed terminal keeps its history on disk only: drop what memory held of it.
        self.tracker.forget_output();
        self.screen = SharedScreen::new(&self.log, 1, 1);
        crate::memory::trim_heap();
        for reply in self.closers.drain(..) {
            let _ = reply.send(Ok(self.meta.clone()));
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let mut deadlines = Vec::new();
        if let Some(pending) = &self.pending_exec {
            let fallback = pending.since + PASTE_WAIT;
            deadlines.push(if fallback > Instant::now() {
                fallback
            } else {
                pending.since + FIRST_PROMPT_TIMEOUT
            });
        }
        if self.tracker.running().is_some() {
            let t = &self.timers;
            if let Some(at) = t.killed_at {
                deadlines.push(at + INTERRUPT_GRACE);
            } else if let Some(at) = t.interrupted_at {
                deadlines.push(at + INTERRUPT_GRACE);
            } else {
                deadlines.extend(t.hard_deadline);
                deadlines.extend(t.no_change.map(|d| self.last_output_at + d));
            }
        }
        if let Some(at) = self.close_started {
            deadlines.push(at + CLOSE_TIMEOUT);
        }
        deadlines.into_iter().min()
    }

    async fn on_timer(&mut self) {
        let now = Instant::now();
        if self
            .close_started
            .is_some_and(|at| now >= at + CLOSE_TIMEOUT)
        {
            // The host did not end in time: end it and everything under it.
            self.close_started = None;
            self.backend.kill(&self.meta);
            self.holder_gone().await;
        }
        if let Some(pending) = self
            .pending_exec
            .take_if(|p| now >= p.since + FIRST_PROMPT_TIMEOUT)
        {
            let _ = pending.reply.send(Err(ApiError::new(
                ErrorCode::Timeout,
                "the shell did not show a prompt in time",
            )));
        }
        if self.tracker.running().is_none() {
            return;
        }
        let t = &self.timers;
        if let Some(killed_at) = t.killed_at {
            if now >= killed_at + INTERRUPT_GRACE {
                // Nothing ended it: stop tracking it so the terminal is usable again.
                let events: Vec<_> = self.tracker.abandon().into_iter().collect();
                self.notify(&events);
            }
        } else if let Some(interrupted_at) = t.interrupted_at {
            if now >= interrupted_at + INTERRUPT_GRACE {
                self.timers.killed_at = Some(now);
                let spare = self.meta.pid;
                if let Some(link) = self.link.as_mut() {
                    let request = HolderRequest::Signal {
                        signal: ESCALATION_SIGNAL.as_raw(),
                        spare_pgid: spare,
                    };
                    if link.send(&request).await.is_ok() {
                        self.signal_acks.push_back(None);
                    }
                }
            }
        } else if t.hard_deadline.is_some_and(|d| now >= d) {
            self.interrupt(CommandStatus::HardTimeout).await;
        } else if t.no_change.is_some_and(|d| now >= self.last_output_at + d) {
            self.interrupt(CommandStatus::NoChangeTimeout).await;
        }
    }

    /// Presses ^C for a timeout; the command's final status is `status`.
    async fn interrupt(&mut self, status: CommandStatus) {
        if let Some(record) = self.tracker.current_mut() {
            record.interrupted_as = Some(status);
        }
        self.timers.interrupted_at = Some(Instant::now());
        let _ = self.write_input(b"\x03", None).await;
    }

    fn job_view(&self, id: u64) -> Option<JobView> {
        let is_cancel_requested = self.cancelled.contains(&id);
        if let Some(current) = self.tracker.current().filter(|c| c.id == id) {
            let result = self.command_result(Some(id));
            return Some(JobView {
                output_so_far: current.output(),
                result,
                is_cancel_requested,
            });
        }
        let (_, result) = self.finished.iter().find(|(finished, _)| *finished == id)?;
        Some(JobView {
            output_so_far: result.output.clone().unwrap_or_default(),
            result: result.clone(),
            is_cancel_requested,
        })
    }

    fn command_result(&self, id: Option<u64>) -> CommandResult {
        let record = self
            .tracker
            .current()
            .filter(|c| id.is_none_or(|id| id == c.id));
        let status = record.map_or(CommandStatus::Completed, |c| c.status);
        CommandResult {
            session_id: self.meta.id.to_string(),
            command: record.map(|c| c.command.clone()),
            status,
            output: record
                .filter(|c| !c.status.is_running())
                .map(|c| c.output()),
            console: self.tracker.console().cloned().collect(),
            exit_code: record.and_then(|c| c.exit_code),
        }
    }

    fn screen_response(&self) -> ScreenResponse {
        let view = self.screen.view();
        let record = self.tracker.current();
        ScreenResponse {
            session_id: self.meta.id.to_string(),
            command: self.tracker.running().map(|c| c.command.clone()),
            status: record.map_or(CommandStatus::Completed, |c| c.status),
            output: record.map(|c| c.output()).unwrap_or_default(),
            exit_code: record.and_then(|c| c.exit_code),
            screen: view.lines,
            cols: view.cols,
            rows: view.rows,
            cursor_row: view.cursor_row,
            cursor_col: view.cursor_col,
            is_alternate_screen: view.is_alternate_screen,
            state: self.meta.state,
            title: self.tracker.title().map(str::to_owned),
            seq: self.last_seq,
        }
    }

    fn info(&self) -> TerminalInfo {
        let mut meta = self.meta.clone();
        // The holder follows the shell's working directory in meta.json.
        if let Ok(on_disk) = state_dir::read_meta(&self.dir) {
            meta.cwd = on_disk.cwd;
        }
        meta.info(
            self.last_activity,
            self.tracker.running().map(|c| c.command.clone()),
            self.last_seq,
        )
    }
}

fn not_running(meta: &TerminalMeta) -> ApiError {
    ApiError::new(
        ErrorCode::SessionNotRunning,
        format!("session {} is not running (its program exited)", meta.id),
    )
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
