//! The running command's life inside the actor: submission once the shell is ready (a new
//! shell's first prompt, the line editor's bracketed paste), `BUSY` while one runs, the
//! timeout ladder (`hard_timeout` / `no_change_timeout` press ^C, the group is killed after a
//! grace, tracking gives up after another), results by id and the jobs' view of them.

use crate::error::TerminalError;
use crate::stats;
use ptyhub_protocol::api::{CommandEntry, CommandOrigin, CommandResult, CommandStatus};
use ptyhub_protocol::event::{CommandNote, InputSource};
use ptyhub_protocol::holder::HolderRequest;
use tokio::sync::oneshot;
use tokio::time::{Duration, Instant};

use super::{
    Actor, ESCALATION_SIGNAL, ExecRequest, FINISHED_KEPT, FIRST_PROMPT_TIMEOUT, INTERRUPT_GRACE,
    JobView, PASTE_WAIT, not_running,
};
use crate::shell::ShellKind;
use crate::state_dir;
use crate::tracker::{ShellPhase, TrackerEvent};

/// An exec that waits for the shell to be ready.
pub(super) struct PendingExec {
    pub(super) request: ExecRequest,
    pub(super) reply: oneshot::Sender<Result<u64, TerminalError>>,
    pub(super) since: Instant,
}

/// Timers of the running command.
#[derive(Default)]
pub(super) struct CommandTimers {
    hard_deadline: Option<Instant>,
    no_change: Option<Duration>,
    interrupted_at: Option<Instant>,
    /// An interruption asked for before the shell started the command (it was still
    /// reading it): its ^C waits for the start, or for [`INTERRUPT_GRACE`] at most.
    deferred_since: Option<Instant>,
    killed_at: Option<Instant>,
    /// Unix seconds when the command was typed: every process it starts starts after it.
    submitted_at: Option<f64>,
    /// The callers waiting for the interrupted command were answered (it had not ended
    /// [`ANSWER_GRACE`] after its ^C); its end is still awaited behind them.
    is_answered: bool,
}

/// After a timeout's ^C, how long the command gets to end before the callers
/// waiting for it are answered anyway (the timeout's status, the output so far): a call with a
/// 5 s timeout answers within about 5.5 s, while a program that ignores ^C is still killed
/// [`INTERRUPT_GRACE`] after it, behind the answer. An exec that comes meanwhile waits for
/// that end instead of being refused.
const ANSWER_GRACE: Duration = Duration::from_millis(500);

/// Rows of the screen an error about a shell that has not started quotes.
pub(super) const SCREEN_TAIL_ROWS: usize = 3;

impl Actor {
    /// Submits an exec that waited for a new shell's first prompt, once the line editor is
    /// ready for it (bracketed paste on), or at `force` (a shell without it).
    pub(super) async fn submit_pending_when_ready(&mut self, force: bool) {
        let is_ready = self.is_caught_up()
            && self.tracker.phase() == ShellPhase::Idle
            && (force || self.kind == ShellKind::Sh || self.tracker.is_bracketed_paste());
        if is_ready && let Some(pending) = self.pending_exec.take() {
            let outcome = self.submit(pending.request).await;
            let _ = pending.reply.send(outcome);
        }
    }

    pub(super) fn notify(&mut self, events: &[TrackerEvent]) {
        for event in events {
            if let TrackerEvent::Finished(id) = *event {
                self.count_finished(id);
                self.timers = CommandTimers::default();
                // The command's text is made once: the waiters get it whole, with the console
                // history; the kept result gets it truncated, without.
                let result = self.result_without_console(Some(id));
                let waiters = std::mem::take(&mut self.waiters);
                let (answered, waiting): (Vec<_>, Vec<_>) =
                    waiters.into_iter().partition(|waiter| waiter.id == id);
                self.waiters = waiting;
                let whole = answered
                    .iter()
                    .any(|w| w.with_console)
                    .then(|| CommandResult {
                        console: Some(self.tracker.console().cloned().collect()),
                        ..result.clone()
                    });
                for waiter in answered {
                    let answer = match &whole {
                        Some(whole) if waiter.with_console => whole.clone(),
                        _ => result.clone(),
                    };
                    let _ = waiter.reply.send(answer);
                }
                let kept = CommandResult {
                    output: result.output.map(|o| {
                        crate::plain_text::truncate_middle(&o, crate::plain_text::TRUNCATE_CHARS)
                    }),
                    ..result
                };
                self.finished.push_back((id, kept));
                while self.finished.len() > FINISHED_KEPT {
                    if let Some((old, _)) = self.finished.pop_front() {
                        self.cancelled.remove(&old);
                    }
                }
            }
        }
    }

    /// Counts a command that finished as it happened (not one replayed at start).
    fn count_finished(&self, id: u64) {
        if self.replay_until.is_none_or(|until| self.last_seq <= until) {
            return;
        }
        let Some(record) = self.tracker.current().filter(|c| c.id == id) else {
            return;
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let origin = if record.is_exec {
            stats::CommandOrigin::Exec
        } else {
            stats::CommandOrigin::Typed
        };
        stats::global().command_finished(
            origin,
            stats::CommandOutcome::of(record.status, record.exit_code),
            std::time::Duration::try_from_secs_f64(now - record.started_at).unwrap_or_default(),
        );
    }

    pub(super) fn fail_pending_exec(&mut self) {
        if let Some(pending) = self.pending_exec.take() {
            let _ = pending.reply.send(Err(not_running(&self.meta)));
        }
    }

    pub(super) async fn exec(
        &mut self,
        request: ExecRequest,
        reply: oneshot::Sender<Result<u64, TerminalError>>,
    ) {
        if self.is_exited || self.link.is_none() {
            let _ = reply.send(Err(not_running(&self.meta)));
            return;
        }
        let is_busy = self.pending_exec.is_some()
            || matches!(
                self.tracker.phase(),
                ShellPhase::Running | ShellPhase::Submitted
            );
        if is_busy && self.pending_exec.is_none() && self.timers.is_answered {
            // The command before was answered as interrupted and is being ended: this one
            // runs once the shell is back at its prompt.
            self.pending_exec = Some(PendingExec {
                request,
                reply,
                since: Instant::now(),
            });
            return;
        }
        if is_busy {
            let _ = reply.send(Err(TerminalError::CommandRunning));
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
    pub(super) fn is_caught_up(&self) -> bool {
        self.replay_until
            .is_some_and(|until| self.last_seq >= until)
    }

    pub(super) async fn submit(&mut self, request: ExecRequest) -> Result<u64, TerminalError> {
        let bytes = self.kind.submission(
            &request.command,
            self.tracker.has_bracketed_paste(),
            self.has_typed_input,
        );
        self.has_typed_input = false;
        let id = self
            .tracker
            .submit(&request.command, &self.kind.echoed(&request.command));
        let text = request.text.as_deref().unwrap_or(&request.command);
        self.tracker.describe(id, text, request.cwd.clone());
        // The log learns the command before its bytes (the note goes just before them), so a
        // replay submits it at the same place with the same id (an older holder refuses the
        // note; the log then lacks it).
        let note = CommandNote {
            id,
            origin: CommandOrigin::Exec,
            command: CommandNote::bounded(text),
            shell_text: request
                .text
                .is_some()
                .then(|| CommandNote::bounded(&request.command)),
            cwd: request.cwd.clone(),
        };
        self.timers = CommandTimers {
            hard_deadline: request.hard_timeout.map(|t| Instant::now() + t),
            no_change: request.no_change_timeout,
            submitted_at: Some(ptyhub_protocol::event::now_ts()),
            ..CommandTimers::default()
        };
        self.last_output_at = Instant::now();
        self.last_activity = state_dir::unix_now();
        let source = request.source.unwrap_or_else(InputSource::ptyhub);
        self.type_command(&bytes, source, note).await?;
        Ok(id)
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
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
            // A deferred ^C falls due, like a kill's end of tracking, a grace later.
            if let Some(at) = t.deferred_since.or(t.killed_at) {
                deadlines.push(at + INTERRUPT_GRACE);
            } else if let Some(at) = t.interrupted_at {
                deadlines.push(if t.is_answered || !self.is_timed_out() {
                    at + INTERRUPT_GRACE
                } else {
                    at + ANSWER_GRACE
                });
            } else {
                deadlines.extend(t.hard_deadline);
                deadlines.extend(t.no_change.map(|d| self.last_output_at + d));
            }
        }
        deadlines.extend(self.close_deadline());
        deadlines.into_iter().min()
    }

    pub(super) async fn on_timer(&mut self) {
        // What the host sent before the deadline counts, even if this task had no turn to read
        // it yet (a busy machine): no command is interrupted for output that already came.
        self.apply_ready_lines().await;
        let now = Instant::now();
        self.on_close_timer(now).await;
        if let Some(pending) = self
            .pending_exec
            .take_if(|p| now >= p.since + FIRST_PROMPT_TIMEOUT)
        {
            self.screen.read_then(
                |screen| screen.view().tail(SCREEN_TAIL_ROWS),
                move |screen, _| {
                    let _ = pending
                        .reply
                        .send(Err(TerminalError::FirstPromptTimeout { screen }));
                },
            );
        }
        // A prompt whose bracketed paste never came gets the exec typed once the paste wait
        // is over: a shell that turned the paste off, or a prompt the tty discarded (a ^C the
        // kernel takes after its command has ended flushes what the shell wrote since: its
        // end mark, its prompt and the paste's switch on).
        if self
            .pending_exec
            .as_ref()
            .is_some_and(|p| now >= p.since + PASTE_WAIT)
        {
            self.submit_pending_when_ready(true).await;
        }
        if self.tracker.running().is_none() {
            return;
        }
        let t = &self.timers;
        if let Some(since) = t.deferred_since {
            // The shell never started it: interrupt whatever it is doing.
            if now >= since + INTERRUPT_GRACE {
                self.press_interrupt().await;
            }
            return;
        }
        if let Some(killed_at) = t.killed_at {
            if now >= killed_at + INTERRUPT_GRACE {
                // Nothing ended it: stop tracking it so the terminal is usable again.
                let events: Vec<_> = self.tracker.abandon().into_iter().collect();
                self.notify(&events);
            }
        } else if let Some(interrupted_at) = t.interrupted_at {
            if !t.is_answered && now >= interrupted_at + ANSWER_GRACE && self.is_timed_out() {
                self.answer_interrupted();
            }
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
                if self.is_cancelled() {
                    self.signal_what_it_started(ESCALATION_SIGNAL).await;
                }
            }
        } else if t.hard_deadline.is_some_and(|d| now >= d) {
            self.interrupt(CommandStatus::HardTimeout).await;
        } else if t.no_change.is_some_and(|d| now >= self.last_output_at + d) {
            self.interrupt(CommandStatus::NoChangeTimeout).await;
        }
    }

    /// Answers the callers waiting for an interrupted command that has not ended yet: with
    /// its interruption's status and the output so far.
    fn answer_interrupted(&mut self) {
        self.timers.is_answered = true;
        let Some((id, result)) = self.interrupted_result() else {
            return;
        };
        for waiter in std::mem::take(&mut self.waiters) {
            if waiter.id == id {
                let mut answer = result.clone();
                if !waiter.with_console {
                    answer.console = None;
                }
                let _ = waiter.reply.send(answer);
            } else {
                self.waiters.push(waiter);
            }
        }
    }

    /// Whether the running command was interrupted by one of its timeouts (not a cancel,
    /// whose callers wait for the end).
    fn is_timed_out(&self) -> bool {
        self.tracker.running().is_some_and(|record| {
            matches!(
                record.interrupted_as,
                Some(CommandStatus::HardTimeout | CommandStatus::NoChangeTimeout)
            )
        })
    }

    /// The running command's answer once it was answered as interrupted (see
    /// [`ANSWER_GRACE`]): its id, and its result as the timeout left it.
    fn interrupted_result(&self) -> Option<(u64, CommandResult)> {
        if !self.timers.is_answered {
            return None;
        }
        let record = self.tracker.running()?;
        let status = record.interrupted_as?;
        let mut result = self.command_result(Some(record.id));
        result.status = status;
        result.output = Some(record.output());
        result.exit_code = None;
        Some((record.id, result))
    }

    /// Whether the running command is being cancelled (a job's cancel).
    fn is_cancelled(&self) -> bool {
        self.tracker
            .running()
            .is_some_and(|record| record.interrupted_as == Some(CommandStatus::Terminated))
    }

    /// Cancels the running command: ^C to it, and SIGTERM to every process it started, its
    /// background jobs included (the shell is spared); what is left gets SIGKILL with the
    /// foreground group [`INTERRUPT_GRACE`] later.
    pub(super) async fn cancel_running(&mut self) {
        self.interrupt(CommandStatus::Terminated).await;
    }

    /// Signals every process of the terminal other than the shell that started since the
    /// running command did.
    async fn signal_what_it_started(&mut self, signal: rustix::process::Signal) {
        let Some((entry, _)) = self.tracker.current_entry() else {
            return;
        };
        // A command someone typed has no submission time: its start mark's.
        let since = self.timers.submitted_at.unwrap_or(entry.started_at);
        let request = HolderRequest::SignalStartedSince {
            signal: signal.as_raw(),
            since,
        };
        if let Some(link) = self.link.as_mut() {
            let _ = link.send(&request).await;
        }
    }

    /// Interrupts the running command for a timeout or a cancel; its final status is
    /// `status`. A command the shell has not started yet is interrupted once it starts: a ^C
    /// while the line editor still reads it would flush the rest of its bytes from the tty,
    /// and a line editor in the middle of a bracketed paste keeps what it read and waits for
    /// the paste's end, which the next command's bytes then bring (it ran joined to them).
    pub(super) async fn interrupt(&mut self, status: CommandStatus) {
        if let Some(record) = self.tracker.current_mut() {
            record.interrupted_as = Some(status);
        }
        if self.tracker.phase() == ShellPhase::Submitted {
            self.timers.deferred_since.get_or_insert_with(Instant::now);
            return;
        }
        self.press_interrupt().await;
    }

    /// A deferred interruption whose command has started now is carried out.
    pub(super) async fn interrupt_if_started(&mut self) {
        if self.timers.deferred_since.is_some()
            && self.tracker.phase() != ShellPhase::Submitted
            && self.tracker.running().is_some()
        {
            self.press_interrupt().await;
        }
    }

    /// Presses ^C; a cancel also sends SIGTERM to what the command started.
    async fn press_interrupt(&mut self) {
        self.timers.deferred_since = None;
        self.timers.interrupted_at = Some(Instant::now());
        let _ = self.write_input(b"\x03", None).await;
        if self.is_cancelled() {
            self.signal_what_it_started(rustix::process::Signal::TERM)
                .await;
        }
    }

    pub(super) fn job_view(&self, id: u64) -> Option<JobView> {
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

    /// Commands of the timeline with an id above `after`, at most `limit`, and whether more
    /// follow: the finished ones, then the running one.
    pub(super) fn timeline_page(&self, after: u64, limit: usize) -> (Vec<CommandEntry>, bool) {
        let running = self
            .tracker
            .current_entry()
            .filter(|(entry, _)| entry.status.is_running())
            .map(|(entry, _)| entry);
        let mut matching = self
            .tracker
            .timeline()
            .map(|t| &t.entry)
            .chain(running.as_ref())
            .filter(|entry| entry.id > after);
        let page: Vec<CommandEntry> = matching.by_ref().take(limit).cloned().collect();
        (page, matching.next().is_some())
    }

    /// Command `id` of the timeline and where its output is in the log.
    pub(super) fn command_source(&self, id: u64) -> Option<super::timeline::CommandSource> {
        let source =
            |entry: CommandEntry, output_start, unstarted_output| super::timeline::CommandSource {
                entry,
                output_start,
                unstarted_output,
                log: self.log.clone(),
                nonce: self.meta.integration_nonce.clone(),
            };
        if let Some((entry, start)) = self
            .tracker
            .current_entry()
            .filter(|(entry, _)| entry.id == id && entry.status.is_running())
        {
            return Some(source(entry, start, None));
        }
        let done = self.tracker.finished(id)?;
        Some(source(
            done.entry.clone(),
            done.output_start,
            done.unstarted_output.clone(),
        ))
    }

    pub(super) fn command_result(&self, id: Option<u64>) -> CommandResult {
        CommandResult {
            console: Some(self.tracker.console().cloned().collect()),
            ..self.result_without_console(id)
        }
    }

    /// [`Self::command_result`] without the console history (`console` is `None`).
    pub(super) fn result_without_console(&self, id: Option<u64>) -> CommandResult {
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
            console: None,
            exit_code: record.and_then(|c| c.exit_code),
            command_id: None,
            window: None,
            wait_reason: None,
            running: None,
        }
    }
}
