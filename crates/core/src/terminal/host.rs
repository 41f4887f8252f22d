//! The actor's side of its backend link: connecting (or replaying the log of a terminal whose
//! host is gone), applying each line the host sends in `seq` order — events to the tracker,
//! the screen, the live connections and the query scanner; answers to input, status and
//! signal requests to whoever waits — and writing input.

use crate::error::TerminalError;
use ptyhub_protocol::api::TerminalState;
use ptyhub_protocol::event::{EventKind, InputSource, Seq};
use ptyhub_protocol::holder::{
    HOLDER_PROTOCOL_MIN, HOLDER_PROTOCOL_VERSION, HolderLine, HolderMessage, HolderRequest,
};
use tokio::time::Instant;

use super::live::LiveEvent;
use super::{Actor, Foreground, InputAck, InputReceipt, REPLAY_STEP_BYTES, Signaled, not_running};
use crate::queries::{Query, answers};
use crate::state_dir;
use crate::tracker::TrackerEvent;
use ptyhub_protocol::api::CommandOrigin;
use ptyhub_protocol::event::CommandNote;

/// The output of `future` if it is ready without waiting.
fn poll_once<F: std::future::Future>(future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}

impl Actor {
    /// Connects to the live holder, or replays the log of a terminal without one.
    pub(super) async fn attach(&mut self) {
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
        self.replay_file().await;
        self.mark_gone_if_running();
    }

    /// Applies what the log holds after the last event applied, a step at a time, letting the
    /// runtime's other tasks run between steps (a server that starts beside terminals whose
    /// holders are gone replays their whole logs: a second for each 100 MB of output).
    pub(super) async fn replay_file(&mut self) {
        let mut reader = self.log.reader(self.last_seq);
        let mut events = Vec::new();
        loop {
            match reader.read(REPLAY_STEP_BYTES, &mut events) {
                Ok(0) => break,
                Ok(_) => {
                    for event in events.drain(..) {
                        self.apply_event(event.seq, event.ts, event.kind);
                    }
                    tokio::task::yield_now().await;
                }
                Err(error) => {
                    tracing::warn!(dir = %self.dir.display(), %error, "cannot read event log");
                    break;
                }
            }
        }
    }

    /// A `running` terminal whose holder cannot be reached is in error (its files stay), and
    /// the processes a vanished holder left behind are ended.
    pub(super) fn mark_gone_if_running(&mut self) {
        if !self.is_exited && self.meta.state == TerminalState::Running {
            crate::stats::global().holder(self.meta.backend, crate::stats::HolderEvent::Failed);
            self.backend.end_orphans(&self.meta);
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

    /// A host that runs but speaks no protocol version this server does: the connection is
    /// dropped and the terminal shows `error` with `reason`, in this server's memory only. Its
    /// processes are never ended and its `meta.json` stays the holder's, so a server that
    /// speaks its version adopts it later; its history stays readable from the log.
    async fn host_unsupported(&mut self, reason: String) {
        tracing::error!(id = %self.meta.id, %reason, "not following the terminal's holder; it keeps running");
        self.drop_link();
        self.meta.state = TerminalState::Error;
        self.host_error = Some(reason);
        self.replay_file().await;
        self.is_exited = true;
        self.fail_pending_exec();
        let events = self.tracker.exited(None, None);
        self.notify(&events);
    }

    /// Forgets the link to the host and answers whoever waits on it.
    fn drop_link(&mut self) {
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
    }

    pub(super) async fn holder_gone(&mut self) {
        self.drop_link();
        if let Ok(meta) = state_dir::read_meta(&self.dir) {
            self.meta.state = meta.state;
            self.meta.cwd = meta.cwd;
            self.meta.exit_code = meta.exit_code;
            self.meta.signal = meta.signal;
            self.meta.ended_at = meta.ended_at;
            // The holder accounts for and removes the cgroup as the terminal ends.
            self.meta.cgroup = meta.cgroup;
        }
        // Pick up anything the holder wrote after the stream ended.
        self.replay_file().await;
        if self.is_exited || self.meta.state != TerminalState::Running {
            crate::stats::global().holder(self.meta.backend, crate::stats::HolderEvent::Stopped);
        }
        self.mark_gone_if_running();
        self.finish_closing();
    }

    /// Applies the lines the host has already sent, without waiting for more.
    pub(super) async fn apply_ready_lines(&mut self) {
        /// Enough to catch up after a stall, few enough not to delay the timer much.
        const READY_LINES_MAX: usize = 256;
        for _ in 0..READY_LINES_MAX {
            let Some(lines) = self.lines.as_mut() else {
                return;
            };
            // `next` is cancel-safe: a line not complete yet stays where it is.
            match poll_once(lines.next()) {
                Some(Some(line)) => self.apply_line(line).await,
                Some(None) => return self.holder_gone().await,
                None => return,
            }
        }
    }

    pub(super) async fn apply_line(&mut self, line: HolderLine) {
        match line {
            HolderLine::Event(event) => self.apply_event(event.seq, event.ts, event.kind),
            HolderLine::Message(HolderMessage::Hello {
                version, last_seq, ..
            }) => {
                if (HOLDER_PROTOCOL_MIN..=HOLDER_PROTOCOL_VERSION).contains(&version) {
                    self.holder_protocol = Some(version);
                    self.replay_until = Some(last_seq);
                } else {
                    self.host_unsupported(format!(
                        "holder protocol v{version} not supported, server speaks \
                         {HOLDER_PROTOCOL_MIN}..{HOLDER_PROTOCOL_VERSION}"
                    ))
                    .await;
                }
            }
            // The first answer is the one to `hello`: an error there is a holder that will
            // not speak any version this server offers (a holder of version 1 refuses every
            // `version` but 1).
            HolderLine::Message(HolderMessage::Error { message })
                if self.holder_protocol.is_none() =>
            {
                self.host_unsupported(format!(
                    "holder refused the protocol ({message}), server speaks \
                     {HOLDER_PROTOCOL_MIN}..{HOLDER_PROTOCOL_VERSION}"
                ))
                .await;
            }
            HolderLine::Message(HolderMessage::InputResult {
                accepted,
                error,
                written,
                pending,
                unread,
                discarded,
            }) => {
                self.holder_input_pending = pending.unwrap_or(0);
                if let Some(Some(ack)) = self.input_acks.pop_front() {
                    let outcome = if accepted {
                        Ok(InputReceipt {
                            written,
                            pending,
                            unread,
                            discarded,
                        })
                    } else {
                        Err(TerminalError::InputRefused {
                            reason: error.unwrap_or_else(|| "input refused".to_owned()),
                        })
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
                        (Some(_), Some(error)) => Err(TerminalError::internal(format!(
                            "cannot signal the foreground group: {error}"
                        ))),
                    };
                    let _ = ack.send(outcome);
                }
            }
            HolderLine::Message(HolderMessage::Error { message }) => {
                tracing::warn!(id = %self.meta.id, %message, "holder error");
            }
            HolderLine::Message(HolderMessage::Storage { error }) => {
                match &error {
                    Some(error) => {
                        tracing::warn!(id = %self.meta.id, %error, "the terminal's log refuses appends; its output is held back");
                    }
                    None => {
                        tracing::info!(id = %self.meta.id, "the terminal's log takes appends again")
                    }
                }
                self.storage_error = error;
            }
            // Only ever the answer on a connection of its own (`backend::native_link`).
            HolderLine::Message(HolderMessage::Master | HolderMessage::Unknown) => {}
        }
        if !self.query_answers.is_empty() {
            let answers = std::mem::take(&mut self.query_answers);
            let _ = self.write_input(&answers, None).await;
        }
        for note in std::mem::take(&mut self.notes) {
            if let Some(link) = self.link.as_mut() {
                let _ = link.send(&HolderRequest::Note(note)).await;
            }
        }
        self.interrupt_if_started().await;
        self.submit_pending_when_ready(false).await;
    }

    pub(super) fn apply_event(&mut self, seq: Seq, ts: f64, kind: EventKind) {
        if seq <= self.last_seq {
            return;
        }
        self.last_seq = seq;
        self.tracker.at(seq, ts);
        let mut queries = Vec::new();
        let published = match kind {
            EventKind::Output { data } => {
                // Output replayed at start was counted by the server that saw it happen, unless
                // the terminal is this server's own.
                if self.counts_all_output || self.replay_until.is_some_and(|until| seq > until) {
                    crate::stats::global().bytes_logged(data.len());
                }
                let events = self.tracker.feed(&data);
                self.last_output_at = Instant::now();
                self.last_activity = ts as u64;
                self.note_typed(&events);
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
            EventKind::CommandNote(note) => {
                let kind = self.kind;
                self.tracker.note(&note, |command| kind.echoed(command));
                LiveEvent::Other { seq }
            }
            EventKind::Input(input) => {
                // Who typed is presence; the bytes are in the output already when echoed.
                self.live.note_input(input.by, input.via, ts);
                LiveEvent::Other { seq }
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

    /// A line someone typed started: its text goes to the log as a `command.note` (live only:
    /// a replayed command's note is in the log already, if its server wrote one).
    fn note_typed(&mut self, events: &[TrackerEvent]) {
        if !self.is_caught_up() || self.link.is_none() {
            return;
        }
        for event in events {
            if let TrackerEvent::Started(id) = *event
                && let Some(record) = self
                    .tracker
                    .current()
                    .filter(|r| r.id == id && r.origin == CommandOrigin::Typed)
            {
                self.notes.push(CommandNote {
                    id,
                    origin: CommandOrigin::Typed,
                    command: CommandNote::bounded(&record.text),
                    shell_text: None,
                    cwd: None,
                });
            }
        }
    }

    /// A program asked the terminal something: with no writer connected to answer, ptyhub
    /// answers from its screen (never for history being replayed). A screen far behind (a
    /// flood just before the query) is caught up and read on a blocking thread, which hands
    /// the answers back to this actor; a program that asks waits for the answer, so the
    /// cursor is where it left it.
    pub(super) fn answer_queries(&mut self, queries: &[Query]) {
        if !self.is_caught_up() || self.live.writers() > 0 {
            return;
        }
        if !self.screen.is_far_behind() {
            let cursor = self.screen.read(crate::screen::Screen::cursor);
            self.query_answers.extend(answers(queries, cursor));
            return;
        }
        let Some(own) = self.own_requests.clone() else {
            return;
        };
        let queries = queries.to_vec();
        self.query_answers_owed += 1;
        let back = AnswersBack {
            requests: own,
            answers: Vec::new(),
        };
        self.screen
            .read_off_thread(crate::screen::Screen::cursor, move |cursor, _| {
                back.hand_back(answers(&queries, cursor));
            });
    }

    /// Sends bytes ptyhub types itself to the PTY (answers to queries, a timeout's ^C).
    pub(super) async fn write_input(
        &mut self,
        data: &[u8],
        ack: Option<InputAck>,
    ) -> Result<(), TerminalError> {
        self.write_input_with(data, false, Some(InputSource::ptyhub()), ack)
            .await
    }

    /// Sends bytes to the PTY, first discarding what was typed and is still unread when
    /// `discard_unread`. `ack` (a client's input request) is answered once the holder has
    /// accepted or refused them; an error here is also sent to `ack`.
    pub(super) async fn write_input_with(
        &mut self,
        data: &[u8],
        discard_unread: bool,
        source: Option<InputSource>,
        ack: Option<InputAck>,
    ) -> Result<(), TerminalError> {
        let input = HolderRequest::Input {
            data: data.to_vec(),
            discard_unread,
            source,
            // Only a client's receipt is waited for.
            no_receipt: ack.is_none(),
            is_logged: false,
        };
        let sent = match self.link.as_mut() {
            Some(link) if !self.is_exited => link.send(&input).await.map(|()| true),
            _ => return self.input_sent(Err(not_running(&self.meta)), ack),
        };
        self.input_sent(sent.map_err(host_gone), ack)
    }

    /// Types an exec's command: its `note` just before its bytes, nobody waiting for a
    /// receipt; the link types it into the PTY itself where it can.
    pub(super) async fn type_command(
        &mut self,
        data: &[u8],
        source: InputSource,
        note: CommandNote,
    ) -> Result<(), TerminalError> {
        // Every input sent before was typed: none waits for its answer, the last answer left
        // nothing queued.
        let is_queue_clear = self.input_acks.is_empty() && self.holder_input_pending == 0;
        let sent = match self.link.as_mut() {
            Some(link) if !self.is_exited => {
                link.type_command(note, data, Some(source), is_queue_clear)
                    .await
            }
            _ => return self.input_sent(Err(not_running(&self.meta)), None),
        };
        self.input_sent(sent.map_err(host_gone), None)
    }

    /// Records input handed to the host: `Ok(true)` when the host answers it with an
    /// `input_result` (`ack` waits for that answer), `Ok(false)` when the link typed it itself
    /// (no answer comes); an error goes to `ack` too.
    fn input_sent(
        &mut self,
        sent: Result<bool, TerminalError>,
        ack: Option<InputAck>,
    ) -> Result<(), TerminalError> {
        match sent {
            Ok(expects_result) => {
                self.last_activity = state_dir::unix_now();
                if expects_result {
                    self.input_acks.push_back(ack);
                }
                Ok(())
            }
            Err(error) => {
                if let Some(ack) = ack {
                    let _ = ack.send(Err(error.clone()));
                }
                Err(error)
            }
        }
    }
}

/// A link that failed to take a request: the host is gone.
fn host_gone(error: std::io::Error) -> TerminalError {
    TerminalError::HostGone {
        detail: error.to_string(),
    }
}

/// Query answers read on a blocking thread, handed back to the terminal's actor when dropped:
/// once read, or empty if the read never finished, so the actor never owes a batch forever.
struct AnswersBack {
    requests: tokio::sync::mpsc::WeakSender<super::Request>,
    answers: Vec<u8>,
}

impl AnswersBack {
    fn hand_back(mut self, answers: Vec<u8>) {
        self.answers = answers;
    }
}

impl Drop for AnswersBack {
    fn drop(&mut self) {
        let answers = std::mem::take(&mut self.answers);
        if let (Some(requests), Ok(runtime)) = (
            self.requests.upgrade(),
            tokio::runtime::Handle::try_current(),
        ) {
            runtime.spawn(async move {
                let _ = requests.send(super::Request::QueryAnswers(answers)).await;
            });
        }
    }
}
