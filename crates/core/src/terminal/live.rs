//! Live connections to a terminal: the relay (one per terminal, taken over with `durable`) and
//! the peers (`attach`, `watch`; any number), as docs/compatibility.md#websocket states them.
//!
//! Output reaches connections two ways, and a connection switches between them without a gap:
//! - **from memory**: the actor publishes every event it applies to a buffer that holds what
//!   some connection has not taken yet (16 MiB at most; each connection says how far it got
//!   when it asks, and what all of them have leaves at once);
//! - **from the event log**: a connection replaying history, or one that fell behind the
//!   buffer (it lagged), reads the log at its own pace with a [`LogReader`].
//!
//! Switching is gap-free because the holder writes an event to the log before the actor can
//! publish it: a connection registers first (every event published from then on enters the
//! buffer), reads the log to its end, then takes from the buffer only what is newer than the
//! last event it returned; if the buffer no longer has the next one, it lagged.
//!
//! The transport (WebSocket) is thin: [`TerminalHandle::connect`] gives a [`Connection`] whose
//! [`Connection::next`] yields [`LiveFrame`]s, and input and resize go through the connection,
//! which applies the mode's rights and the input lease (the `lease` module, with presence).

use std::collections::VecDeque;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::TerminalError;
use bytes::Bytes;
use ptyhub_protocol::event::{Event, EventKind, Seq};
use tokio::sync::{Notify, watch};

use super::TerminalHandle;
use crate::event_log::{LogReader, TerminalLog};

mod lease;

pub use lease::{
    LEASE_WAIT_DEFAULT, PRESENCE_EVERY, REST_LEASE_TTL_DEFAULT, REST_LEASE_TTL_MAX, TYPING_SECS,
    Writer,
};
use ptyhub_protocol::live::Presence;

/// Most output kept in memory for live connections: what the slowest of them has not taken yet.
/// A connection further behind than this counts as lagging and reads the log instead; the
/// memory is bounded in bytes whatever the size of events. Enough for a 10 MB burst to reach
/// a hundred watchers from memory (bench/, fan-out), which each read from the log otherwise.
pub(crate) const LIVE_BYTES_BUFFERED: usize = 16 * 1024 * 1024;
/// Slots of the live buffer kept when it empties (a flood's are let go).
const RECENT_SLOTS_KEPT: usize = 64;
/// What an event costs in that budget besides its output bytes.
const LIVE_EVENT_OVERHEAD: usize = 64;
/// A frame carries at most about this much output (consecutive events are merged up to it).
pub const FRAME_MAX_BYTES: usize = 256 * 1024;
/// Output between two replay checkpoints: a replay is at most this much shorter than asked.
const CHECKPOINT_STRIDE_BYTES: u64 = 16 * 1024;
/// Checkpoints kept: enough to cover the longest replay (16 KiB of memory at most).
const CHECKPOINTS_KEPT: usize = (REPLAY_BYTES_MAX as u64 / CHECKPOINT_STRIDE_BYTES) as usize + 2;
/// Peers (attach and watch) on one terminal at most.
pub const PEERS_MAX: usize = 256;
/// The bounds of a relay's `replay_bytes` (docs/compatibility.md#websocket).
pub const REPLAY_BYTES_MIN: usize = 256 * 1024;
pub const REPLAY_BYTES_MAX: usize = 10 * 1024 * 1024;
/// Answers to terminal queries are only filtered this long after a query was seen.
const QUERY_WINDOW: Duration = Duration::from_secs(2);

/// The message a second relay connection without `durable` is refused with
/// (docs/compatibility.md#websocket).
pub const RELAY_BUSY_MESSAGE: &str = "Session already has an active WebSocket connection";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiveMode {
    /// The one relay connection a terminal may have; `durable` takes over from the current one.
    Relay { durable: bool },
    /// A peer that reads and writes.
    Attach,
    /// A peer that only reads.
    Watch,
}

impl LiveMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Relay { .. } => "relay",
            Self::Attach => "attach",
            Self::Watch => "watch",
        }
    }

    fn is_writer(self) -> bool {
        !matches!(self, Self::Watch)
    }
}

#[derive(Clone, Debug)]
pub struct ConnectOptions {
    pub mode: LiveMode,
    /// Replay output before live output (see docs/websocket.md).
    pub restore: bool,
    pub replay_bytes: usize,
    /// Replay exactly the output after this event; overrides `restore`.
    pub since_seq: Option<Seq>,
    /// Who connects (`<owner>/<token name>`): shown in presence, and what its input is
    /// attributed to.
    pub by: String,
    /// Send `presence` frames.
    pub wants_presence: bool,
}

/// What a connection learns when it is accepted.
#[derive(Clone, Debug)]
pub struct Ready {
    pub session_id: String,
    pub resumed: bool,
    /// The last event the replay covers (or the last one in the log when there is no replay).
    pub seq: Seq,
    pub cols: u16,
    pub rows: u16,
    /// What hosts the terminal.
    pub backend: ptyhub_protocol::api::BackendKind,
}

/// One thing to tell a connected client.
#[derive(Clone, Debug, PartialEq)]
pub enum LiveFrame {
    /// Output bytes; `seq` is the last event they complete. `is_replay` marks restored history.
    Output {
        data: Bytes,
        seq: Seq,
        is_replay: bool,
    },
    /// The replay is complete; live output follows.
    Restored {
        seq: Seq,
    },
    Resize {
        cols: u16,
        rows: u16,
        seq: Seq,
    },
    /// The connection fell behind the live stream; what follows comes from the log.
    Lagged {
        seq: Seq,
    },
    /// The program ended; nothing follows.
    Exit {
        exit_code: Option<i32>,
        signal: Option<i32>,
        seq: Seq,
    },
    /// A newer durable relay took over; nothing follows.
    Replaced,
    /// The connection cannot continue (it fell behind what the log keeps); nothing follows.
    Failed(TerminalError),
    /// Who is connected, who holds the keyboard, who typed last.
    Presence(Presence),
}

/// An event as the actor publishes it to live connections.
#[derive(Clone, Debug)]
pub(crate) enum LiveEvent {
    Output {
        seq: Seq,
        data: Bytes,
    },
    Resize {
        seq: Seq,
        cols: u16,
        rows: u16,
    },
    Exit {
        seq: Seq,
        exit_code: Option<i32>,
        signal: Option<i32>,
    },
    /// Any other event (it only moves `seq`).
    Other {
        seq: Seq,
    },
}

impl LiveEvent {
    fn seq(&self) -> Seq {
        match self {
            Self::Output { seq, .. }
            | Self::Resize { seq, .. }
            | Self::Exit { seq, .. }
            | Self::Other { seq } => *seq,
        }
    }

    fn from_event(event: Event) -> Self {
        let seq = event.seq;
        match event.kind {
            EventKind::Output { data } => Self::Output {
                seq,
                data: Bytes::from(data),
            },
            EventKind::Resize { cols, rows } => Self::Resize { seq, cols, rows },
            EventKind::Exit { exit_code, signal } => Self::Exit {
                seq,
                exit_code,
                signal,
            },
            _ => Self::Other { seq },
        }
    }
}

struct Peer {
    id: u64,
    mode: LiveMode,
    /// The last event the connection is known to have (it reads on after it); what every
    /// connection has leaves the buffer. Zero until it first says (a replay reads the log).
    has_up_to: Seq,
    /// Who connected.
    by: String,
    /// Set when a newer durable relay replaces this one.
    replaced: Option<watch::Sender<bool>>,
}

#[derive(Default)]
struct HubState {
    /// The events some live connection has not taken yet, oldest first, within
    /// [`LIVE_BYTES_BUFFERED`].
    recent: VecDeque<LiveEvent>,
    recent_bytes: usize,
    connections: Vec<Peer>,
    next_id: u64,
    /// The current relay connection's id.
    relay: Option<u64>,
    has_had_durable_relay: bool,
    relay_restores: u32,
    /// The last event a durable relay connection delivered.
    relay_delivered: Seq,
    /// `(seq, output bytes up to and including it)`, one per [`CHECKPOINT_STRIDE_BYTES`].
    checkpoints: VecDeque<(Seq, u64)>,
    output_total: u64,
    last_query_at: Option<Instant>,
    /// Who holds the keyboard.
    lease: Option<lease::Lease>,
    /// The last input seen in the log.
    typed: Option<lease::Typed>,
}

/// The per-terminal meeting point of the actor (which publishes) and its live connections.
#[derive(Default)]
pub(crate) struct Hub {
    state: Mutex<HubState>,
    /// Wakes connections waiting for events.
    published: Notify,
    /// Bumped on every change of presence (connections, lease, typing).
    presence: watch::Sender<u64>,
}

/// What a live connection finds in memory.
enum Recent {
    /// Events after the ones it has (possibly none yet).
    Events(Vec<LiveEvent>),
    /// The events right after the ones it has are no longer in memory.
    Lagged,
}

impl LiveEvent {
    fn cost(&self) -> usize {
        LIVE_EVENT_OVERHEAD
            + match self {
                Self::Output { data, .. } => data.len(),
                _ => 0,
            }
    }
}

impl Hub {
    fn lock(&self) -> MutexGuard<'_, HubState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Called by the actor for every event it applies, in `seq` order.
    pub(crate) fn publish(&self, event: LiveEvent) {
        let mut state = self.lock();
        if let LiveEvent::Output { seq, data } = &event {
            state.output_total += data.len() as u64;
            let last = state.checkpoints.back().map_or(0, |&(_, total)| total);
            if state.output_total - last >= CHECKPOINT_STRIDE_BYTES {
                let total = state.output_total;
                state.checkpoints.push_back((*seq, total));
                if state.checkpoints.len() > CHECKPOINTS_KEPT {
                    state.checkpoints.pop_front();
                }
            }
        }
        if state.connections.is_empty() {
            return;
        }
        state.recent_bytes += event.cost();
        state.recent.push_back(event);
        while state.recent_bytes > LIVE_BYTES_BUFFERED && state.recent.len() > 1 {
            if let Some(old) = state.recent.pop_front() {
                state.recent_bytes -= old.cost();
            }
        }
        Self::drop_taken(&mut state);
        drop(state);
        self.published.notify_waiters();
    }

    /// Drops the events every connection has: after a burst that all of them followed the
    /// buffer is empty again, and only a connection that is behind holds memory.
    fn drop_taken(state: &mut HubState) {
        let Some(floor) = state.connections.iter().map(|peer| peer.has_up_to).min() else {
            return;
        };
        while state
            .recent
            .front()
            .is_some_and(|oldest| oldest.seq() <= floor)
        {
            if let Some(old) = state.recent.pop_front() {
                state.recent_bytes -= old.cost();
            }
        }
        // What a flood grew goes back; the few slots of an interactive step stay.
        if state.recent.is_empty() && state.recent.capacity() > RECENT_SLOTS_KEPT {
            state.recent = VecDeque::new();
        }
    }

    /// Connection `id` has every event up to `seq`.
    fn note_has(state: &mut HubState, id: u64, seq: Seq) {
        if let Some(peer) = state.connections.iter_mut().find(|peer| peer.id == id) {
            peer.has_up_to = peer.has_up_to.max(seq);
        }
        Self::drop_taken(state);
    }

    /// Whether the event right after `after` was published and is no longer in memory, for
    /// connection `id`, which has every event up to `after` (noted, as [`Self::recent_after`]
    /// notes it).
    fn has_dropped_after(&self, id: u64, after: Seq) -> bool {
        let mut state = self.lock();
        Self::note_has(&mut state, id, after);
        state
            .recent
            .front()
            .is_some_and(|oldest| oldest.seq() > after.next())
    }

    /// The events after `after` in memory, about `max_bytes` of output at most (one event at
    /// least), for connection `id`, which has every event up to `after`.
    fn recent_after(&self, id: u64, after: Seq, max_bytes: usize) -> Recent {
        let mut state = self.lock();
        Self::note_has(&mut state, id, after);
        let Some(newest) = state.recent.back().map(LiveEvent::seq) else {
            return Recent::Events(Vec::new());
        };
        if newest <= after {
            return Recent::Events(Vec::new());
        }
        let start = state.recent.partition_point(|e| e.seq() <= after);
        if state.recent.get(start).map(LiveEvent::seq) != Some(after.next()) {
            return Recent::Lagged;
        }
        let mut events = Vec::new();
        let mut bytes = 0;
        for event in state.recent.range(start..) {
            if bytes >= max_bytes && !events.is_empty() {
                break;
            }
            bytes += event.cost();
            events.push(event.clone());
        }
        Recent::Events(events)
    }

    /// How many connections are live.
    pub(crate) fn count(&self) -> usize {
        self.lock().connections.len()
    }

    /// How many live connections may write.
    pub(crate) fn writers(&self) -> usize {
        self.lock()
            .connections
            .iter()
            .filter(|c| c.mode.is_writer())
            .count()
    }

    /// The actor saw a terminal query in the output.
    pub(crate) fn note_query(&self) {
        self.lock().last_query_at = Some(Instant::now());
    }

    /// The event after which the newest `max_bytes` of output start.
    fn retained_start(state: &HubState, max_bytes: usize) -> Seq {
        let max = max_bytes as u64;
        if state.output_total <= max {
            return Seq::ZERO;
        }
        state
            .checkpoints
            .iter()
            .find(|&&(_, total)| state.output_total - total <= max)
            .map_or(Seq::ZERO, |&(seq, _)| seq)
    }

    fn leave(&self, id: u64) {
        {
            let mut state = self.lock();
            state.connections.retain(|c| c.id != id);
            if state.relay == Some(id) {
                state.relay = None;
            }
            Self::end_lease_of(&mut state, id);
            if state.connections.is_empty() {
                state.recent = VecDeque::new();
                state.recent_bytes = 0;
            }
        }
        self.presence_changed();
    }
}

/// Where a connection reads from next.
enum Phase {
    /// Replaying history up to and including `until` from the log.
    Replay {
        reader: LogReader,
        until: Seq,
    },
    /// Reading the log to its end, then live.
    CatchUp {
        reader: LogReader,
    },
    Live,
    Done,
}

/// One live connection. Dropping it leaves the terminal.
pub struct Connection {
    /// Counts this connection among the open ones while it lives.
    _counted: crate::stats::LiveGuard,
    hub: Arc<Hub>,
    handle: TerminalHandle,
    log: TerminalLog,
    id: u64,
    mode: LiveMode,
    replaced: Option<watch::Receiver<bool>>,
    phase: Phase,
    /// The last event returned.
    last: Seq,
    /// Drop output up to the first line break (a replay that starts mid-history).
    is_cutting_first_line: bool,
    /// A `lagged` frame was sent since the connection last followed the live stream.
    is_told_lagged: bool,
    /// The terminal had exited when the connection started: end after the replay.
    exit_at_start: Option<(Option<i32>, Option<i32>)>,
    pending: VecDeque<LiveFrame>,
    events: Vec<Event>,
    /// Who connected.
    by: String,
    /// Presence changes, and when the next `presence` frame is due (one is due at once).
    presence: watch::Receiver<u64>,
    wants_presence: bool,
    presence_due: Option<tokio::time::Instant>,
    /// The last `presence` frame sent, and when.
    presence_sent: Option<(Presence, tokio::time::Instant)>,
}

impl TerminalHandle {
    /// Connects a live client (see the module docs and docs/websocket.md).
    pub async fn connect(
        &self,
        options: ConnectOptions,
    ) -> Result<(Connection, Ready), TerminalError> {
        let probe = self.probe().await?;
        let info = self.info().await?;
        let now = match options.since_seq {
            Some(since) => self.seq_reaching(since, &probe.log).await,
            None => *self.seq().borrow(),
        };
        if let Some(since) = options.since_seq
            && since > now
        {
            return Err(TerminalError::InvalidCursor {
                detail: format!("since_seq {since} is ahead of this terminal (last seq {now})"),
            });
        }
        let hub = Arc::clone(&self.live);
        let (id, replaced, resumed, replay_from) = {
            let mut state = hub.lock();
            let mut resumed = false;
            let mut replaced = None;
            let mut replay_from = None;
            match options.mode {
                LiveMode::Relay { durable } => {
                    if let Some(current) = state.relay {
                        if !durable {
                            return Err(TerminalError::RelayBusy);
                        }
                        if let Some(old) = state.connections.iter().find(|c| c.id == current)
                            && let Some(tell) = &old.replaced
                        {
                            let _ = tell.send(true);
                        }
                    }
                    if durable {
                        resumed = state.has_had_durable_relay;
                        state.has_had_durable_relay = true;
                        if options.restore && resumed {
                            replay_from = Some(if state.relay_restores == 0 {
                                Hub::retained_start(&state, options.replay_bytes)
                            } else {
                                state.relay_delivered
                            });
                            state.relay_restores += 1;
                        } else if options.restore {
                            // Nothing to restore yet, but the client asked: it still gets its
                            // `terminal_restored` before live output.
                            replay_from = Some(now);
                        }
                    }
                    let (tell, told) = watch::channel(false);
                    replaced = Some((tell, told));
                }
                LiveMode::Attach | LiveMode::Watch => {
                    let peers = state
                        .connections
                        .iter()
                        .filter(|c| !matches!(c.mode, LiveMode::Relay { .. }))
                        .count();
                    if peers >= PEERS_MAX {
                        return Err(TerminalError::TooManyAttachments { max: PEERS_MAX });
                    }
                    if options.restore {
                        replay_from = Some(Hub::retained_start(&state, options.replay_bytes));
                    }
                }
            }
            let id = state.next_id;
            state.next_id += 1;
            let (tell, told) = match replaced {
                Some((tell, told)) => (Some(tell), Some(told)),
                None => (None, None),
            };
            state.connections.push(Peer {
                id,
                mode: options.mode,
                has_up_to: Seq::ZERO,
                by: options.by.clone(),
                replaced: tell,
            });
            if matches!(options.mode, LiveMode::Relay { .. }) {
                state.relay = Some(id);
            }
            (id, told, resumed, replay_from)
        };
        hub.presence_changed();
        let presence = hub.presence.subscribe();
        let replay_from = options.since_seq.or(replay_from);
        let mut connection = Connection {
            _counted: crate::stats::global().live_opened(match options.mode {
                LiveMode::Relay { .. } => crate::stats::LiveKind::Relay,
                LiveMode::Attach => crate::stats::LiveKind::Attach,
                LiveMode::Watch => crate::stats::LiveKind::Watch,
            }),
            hub,
            handle: self.clone(),
            log: probe.log.clone(),
            id,
            mode: options.mode,
            replaced,
            phase: Phase::Live,
            last: now,
            is_cutting_first_line: false,
            is_told_lagged: false,
            exit_at_start: probe.is_exited.then_some((probe.exit_code, probe.signal)),
            pending: VecDeque::new(),
            events: Vec::new(),
            by: options.by.clone(),
            presence,
            wants_presence: options.wants_presence,
            presence_due: options.wants_presence.then(tokio::time::Instant::now),
            presence_sent: None,
        };
        match replay_from {
            Some(from) => {
                connection.last = from;
                connection.is_cutting_first_line =
                    options.since_seq.is_none() && from > Seq::ZERO && from < now;
                let mut reader = probe.log.reader(from);
                if options.since_seq.is_some() {
                    check_not_expired(&mut reader, from, &mut connection.events)?;
                }
                connection.phase = Phase::Replay { reader, until: now };
            }
            None => {
                connection.phase = Phase::CatchUp {
                    reader: probe.log.reader(now),
                }
            }
        }
        let ready = Ready {
            session_id: probe.id,
            resumed,
            seq: now,
            cols: info.cols,
            rows: info.rows,
            backend: info.backend,
        };
        Ok((connection, ready))
    }

    /// How many live connections the terminal has (one keeps it from being idle).
    pub fn live_connections(&self) -> usize {
        self.live.count()
    }
}

/// Fails with `CURSOR_EXPIRED` when the log no longer holds the event after `after`. The
/// events read to find out are kept in `events` for the replay.
fn check_not_expired(
    reader: &mut LogReader,
    after: Seq,
    events: &mut Vec<Event>,
) -> Result<(), TerminalError> {
    let read = reader
        .read(64 * 1024, events)
        .map_err(|e| TerminalError::internal(format!("cannot read the event log: {e}")))?;
    match events.first() {
        Some(first) if read > 0 && first.seq > after.next() => {
            Err(TerminalError::cursor_expired(format!(
                "the log no longer keeps the events after seq {after} (the oldest kept is {})",
                first.seq
            )))
        }
        _ => Ok(()),
    }
}

impl Connection {
    pub fn mode(&self) -> LiveMode {
        self.mode
    }

    fn pop_pending(&mut self) -> Option<LiveFrame> {
        let frame = self.pending.pop_front()?;
        if matches!(
            frame,
            LiveFrame::Exit { .. } | LiveFrame::Replaced | LiveFrame::Failed(_)
        ) {
            self.phase = Phase::Done;
            self.pending.clear();
        }
        Some(frame)
    }

    /// A frame that is ready now without waiting, if any: lets a transport write several
    /// frames with one flush.
    pub fn next_ready(&mut self) -> Option<LiveFrame> {
        if self.pending.is_empty()
            && matches!(self.phase, Phase::Live)
            && !self.is_replaced()
            && let Recent::Events(events) =
                self.hub.recent_after(self.id, self.last, FRAME_MAX_BYTES)
        {
            self.take_live(events);
        }
        self.pop_pending()
    }

    /// The next frame for the client; `None` once the connection is over.
    pub async fn next(&mut self) -> Option<LiveFrame> {
        loop {
            if let Some(frame) = self.pop_pending() {
                return Some(frame);
            }
            if self.is_replaced() {
                self.pending.push_back(LiveFrame::Replaced);
                continue;
            }
            match &mut self.phase {
                Phase::Done => return None,
                Phase::Replay { reader, until } => {
                    let until = *until;
                    let mut events = std::mem::take(&mut self.events);
                    let read = if events.is_empty() {
                        reader.read(FRAME_MAX_BYTES, &mut events)
                    } else {
                        Ok(events.len())
                    };
                    match read {
                        Ok(_) => {
                            let is_done = self.take_replayed(&mut events, until);
                            events.clear();
                            self.events = events;
                            if is_done {
                                // `last` is what was replayed: if the log ended early for the
                                // reader, the catch-up below brings the rest; nothing is
                                // skipped on the strength of `until`.
                                self.pending
                                    .push_back(LiveFrame::Restored { seq: self.last });
                                // The catch-up also ends a connection to an exited terminal
                                // (with its `exit`) once the log is read.
                                self.phase = Phase::CatchUp {
                                    reader: self.log.reader(self.last),
                                };
                            }
                        }
                        Err(error) => self.fail_reading(&error),
                    }
                }
                Phase::CatchUp { reader } => {
                    let mut events = std::mem::take(&mut self.events);
                    match reader.read(FRAME_MAX_BYTES, &mut events) {
                        Ok(0) => {
                            if let Some((exit_code, signal)) = self.exit_at_start.take() {
                                self.pending.push_back(LiveFrame::Exit {
                                    exit_code,
                                    signal,
                                    seq: self.last,
                                });
                            }
                            self.phase = Phase::Live;
                            self.is_told_lagged = false;
                        }
                        Ok(_) if events.first().is_some_and(|e| e.seq > self.last.next()) => {
                            // The log no longer keeps where this connection was: say so rather
                            // than skip output silently.
                            self.pending.push_back(LiveFrame::Failed(
                                TerminalError::cursor_expired(format!(
                                    "this connection fell behind what the log keeps (it had seq {}); reconnect",
                                    self.last
                                )),
                            ));
                        }
                        Ok(_) => {
                            // A reader of the log that the live stream has left behind (its
                            // next event is no longer in memory) lags like a live one.
                            if !self.is_told_lagged
                                && self.hub.has_dropped_after(self.id, self.last)
                            {
                                self.is_told_lagged = true;
                                crate::stats::global().lagged();
                                self.pending.push_back(LiveFrame::Lagged { seq: self.last });
                            }
                            let frames: Vec<LiveEvent> =
                                events.drain(..).map(LiveEvent::from_event).collect();
                            self.take_live(frames);
                        }
                        Err(error) => self.fail_reading(&error),
                    }
                    events.clear();
                    self.events = events;
                }
                Phase::Live => {
                    // Registered before looking, so a publish in between is not missed.
                    let hub = Arc::clone(&self.hub);
                    let published = hub.published.notified();
                    tokio::pin!(published);
                    published.as_mut().enable();
                    match hub.recent_after(self.id, self.last, FRAME_MAX_BYTES) {
                        Recent::Events(events) if !events.is_empty() => {
                            self.take_live(events);
                            // Output that never pauses does not hold presence back.
                            self.push_presence_if_due();
                        }
                        Recent::Events(_) => {
                            if self.push_presence_if_due() {
                                continue;
                            }
                            let wake = self.presence_wake_at();
                            let mut has_presence_changed = false;
                            tokio::select! {
                                () = &mut published => {}
                                () = replaced_changed(&mut self.replaced) => {}
                                _ = self.presence.changed() => has_presence_changed = true,
                                () = sleep_until(wake) => {}
                            }
                            if has_presence_changed {
                                self.schedule_presence();
                            }
                        }
                        Recent::Lagged => {
                            self.is_told_lagged = true;
                            crate::stats::global().lagged();
                            self.pending.push_back(LiveFrame::Lagged { seq: self.last });
                            self.phase = Phase::CatchUp {
                                reader: self.log.reader(self.last),
                            };
                        }
                    }
                }
            }
        }
    }

    /// Turns replayed events (up to `until`) into frames; true once the replay is complete.
    fn take_replayed(&mut self, events: &mut Vec<Event>, until: Seq) -> bool {
        if events.is_empty() {
            return true;
        }
        let mut data = Vec::new();
        let mut seq = self.last;
        let mut is_done = false;
        for event in events.drain(..) {
            if event.seq > until {
                is_done = true;
                break;
            }
            seq = event.seq;
            if let EventKind::Output { data: bytes } = event.kind {
                let bytes = if self.is_cutting_first_line {
                    match bytes.iter().position(|&b| b == b'\n') {
                        Some(at) => {
                            self.is_cutting_first_line = false;
                            &bytes[at + 1..]
                        }
                        None => &[][..],
                    }
                } else {
                    &bytes[..]
                };
                data.extend_from_slice(bytes);
            }
        }
        self.last = seq;
        if !data.is_empty() {
            self.pending.push_back(LiveFrame::Output {
                data: Bytes::from(data),
                seq,
                is_replay: true,
            });
        }
        is_done || seq >= until
    }

    /// Turns live events into frames, one per output event: its bytes are passed on without a
    /// copy (with many watchers, copies are what fan-out costs); skips what was returned.
    fn take_live(&mut self, events: Vec<LiveEvent>) {
        for event in events {
            let seq = event.seq();
            if seq <= self.last {
                continue;
            }
            self.last = seq;
            self.pending.push_back(match event {
                LiveEvent::Output { data, .. } => LiveFrame::Output {
                    data,
                    seq,
                    is_replay: false,
                },
                LiveEvent::Resize { cols, rows, .. } => LiveFrame::Resize { cols, rows, seq },
                LiveEvent::Exit {
                    exit_code, signal, ..
                } => LiveFrame::Exit {
                    exit_code,
                    signal,
                    seq,
                },
                LiveEvent::Other { .. } => continue,
            });
        }
    }

    fn fail_reading(&mut self, error: &std::io::Error) {
        self.pending
            .push_back(LiveFrame::Failed(TerminalError::internal(format!(
                "cannot read the event log: {error}"
            ))));
    }

    fn is_replaced(&self) -> bool {
        !matches!(self.phase, Phase::Done) && self.replaced.as_ref().is_some_and(|r| *r.borrow())
    }

    /// Records that the client has everything up to `seq` (a durable relay's next replay
    /// starts after it).
    pub fn delivered(&self, seq: Seq) {
        self.delivery().delivered(seq);
    }

    /// What records this connection's deliveries from another task (the one that writes to
    /// the client).
    pub fn delivery(&self) -> Delivery {
        Delivery {
            hub: Arc::clone(&self.hub),
            id: self.id,
            mode: self.mode,
        }
    }

    /// Writes a client's input to the terminal, if this connection may write and nobody else
    /// holds the keyboard.
    pub async fn input(&self, data: &[u8]) -> Result<(), TerminalError> {
        let writer = self.writer();
        if let Err(error) = self
            .require_writer("write to")
            .and_then(|()| self.hub.admits(&writer))
        {
            crate::stats::global()
                .input_refused(crate::stats::InputRefusal::of(&error), data.len());
            return Err(error);
        }
        let data = if self.is_query_answerer() {
            std::borrow::Cow::Borrowed(data)
        } else {
            crate::queries::strip_answers(data)
        };
        if data.is_empty() {
            return Ok(());
        }
        self.handle
            .input(data.into_owned(), writer.source)
            .await
            .map(|_| ())
    }

    /// What this connection's `exec` frames run as, if it may write: the terminal, typed by
    /// this connection (a lease it holds admits them; another's refuses them).
    pub fn exec_context(&self) -> Result<crate::exec::ExecContext, TerminalError> {
        self.require_writer("run commands in")?;
        Ok(crate::exec::ExecContext {
            handle: self.handle.clone(),
            writer: self.writer(),
        })
    }

    /// Resizes the terminal (the PTY, the screen and every connection), if this connection may.
    pub async fn resize(&self, cols: u16, rows: u16) -> Result<(), TerminalError> {
        self.require_writer("resize")?;
        self.handle.resize(cols, rows).await
    }

    fn require_writer(&self, what: &'static str) -> Result<(), TerminalError> {
        if self.mode.is_writer() {
            Ok(())
        } else {
            Err(TerminalError::WatcherCannot { what })
        }
    }

    /// Whether this connection's answers to terminal queries reach the program: it is the
    /// relay, or the oldest writer when there is no relay, or no query is outstanding.
    fn is_query_answerer(&self) -> bool {
        let state = self.hub.lock();
        if state
            .last_query_at
            .is_none_or(|at| at.elapsed() > QUERY_WINDOW)
        {
            return true;
        }
        let answerer = state.relay.or_else(|| {
            state
                .connections
                .iter()
                .find(|c| c.mode.is_writer())
                .map(|c| c.id)
        });
        answerer == Some(self.id)
    }
}

/// Records what a connection's client has received, from whichever task writes to it; once
/// the connection is gone (or another relay took over) it records nothing.
#[derive(Clone)]
pub struct Delivery {
    hub: Arc<Hub>,
    id: u64,
    mode: LiveMode,
}

impl Delivery {
    /// The client has everything up to `seq` (a durable relay's next replay starts after it).
    pub fn delivered(&self, seq: Seq) {
        if let LiveMode::Relay { durable: true } = self.mode {
            let mut state = self.hub.lock();
            if state.relay == Some(self.id) {
                state.relay_delivered = state.relay_delivered.max(seq);
            }
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.hub.leave(self.id);
    }
}

/// Resolves when a durable relay's connection is replaced; never without one.
async fn replaced_changed(replaced: &mut Option<watch::Receiver<bool>>) {
    match replaced {
        Some(replaced) => {
            let _ = replaced.changed().await;
        }
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(seq: u64, len: usize) -> LiveEvent {
        LiveEvent::Output {
            seq: Seq(seq),
            data: Bytes::from(vec![b'x'; len]),
        }
    }

    fn watcher(id: u64) -> Peer {
        Peer {
            id,
            mode: LiveMode::Watch,
            has_up_to: Seq::ZERO,
            by: "1000/server".to_owned(),
            replaced: None,
        }
    }

    #[test]
    fn what_every_connection_has_leaves_the_buffer() {
        let hub = Hub::default();
        hub.lock().connections.extend([watcher(1), watcher(2)]);
        for seq in 1..=10 {
            hub.publish(output(seq, 1000));
        }
        let Recent::Events(first) = hub.recent_after(1, Seq::ZERO, 1 << 20) else {
            panic!("all of it is in memory");
        };
        assert_eq!(first.len(), 10);
        // Connection 1 has everything; connection 2 is still at seq 4.
        assert!(matches!(hub.recent_after(1, Seq(10), 1 << 20), Recent::Events(e) if e.is_empty()));
        let Recent::Events(rest) = hub.recent_after(2, Seq(4), 1 << 20) else {
            panic!("what connection 2 lacks stays in memory");
        };
        assert_eq!(rest.first().map(LiveEvent::seq), Some(Seq(5)));
        assert_eq!(hub.lock().recent.len(), 6, "events 1 to 4 went");
        assert_eq!(hub.lock().recent_bytes, 6 * (1000 + LIVE_EVENT_OVERHEAD));
        assert!(matches!(hub.recent_after(2, Seq(10), 1 << 20), Recent::Events(e) if e.is_empty()));
        assert!(hub.lock().recent.is_empty(), "both have all of it");
        assert_eq!(hub.lock().recent_bytes, 0);
        // A connection that has said nothing yet (replaying the log) holds everything.
        hub.lock().connections.push(watcher(3));
        hub.publish(output(11, 1000));
        assert!(matches!(hub.recent_after(1, Seq(11), 1 << 20), Recent::Events(e) if e.is_empty()));
        assert!(matches!(hub.recent_after(2, Seq(11), 1 << 20), Recent::Events(e) if e.is_empty()));
        assert_eq!(hub.lock().recent.len(), 1);
        assert!(!hub.has_dropped_after(3, Seq(10)));
        assert!(matches!(hub.recent_after(3, Seq(11), 1 << 20), Recent::Events(e) if e.is_empty()));
        assert!(hub.lock().recent.is_empty());
    }

    #[test]
    fn the_live_buffer_is_bounded_in_bytes_and_tells_a_lagging_reader() {
        // Asks as no connection, so what it is given leaves nothing behind: only the bound
        // drops events here.
        const PROBE: u64 = 99;
        let hub = Hub::default();
        hub.publish(output(1, 10));
        assert!(
            matches!(hub.recent_after(PROBE, Seq::ZERO, 1 << 20), Recent::Events(e) if e.is_empty()),
            "nothing is kept while nobody is connected"
        );
        hub.lock().connections.push(watcher(0));
        for seq in 2..=200 {
            hub.publish(output(seq, 100 * 1024));
        }
        assert!(hub.lock().recent_bytes <= LIVE_BYTES_BUFFERED);
        let Recent::Events(newest) = hub.recent_after(PROBE, Seq(199), 1 << 20) else {
            panic!("the newest event is in memory");
        };
        assert_eq!(
            newest.iter().map(LiveEvent::seq).collect::<Vec<_>>(),
            vec![Seq(200)]
        );
        assert!(matches!(
            hub.recent_after(PROBE, Seq(5), 1 << 20),
            Recent::Lagged
        ));
        assert!(
            matches!(hub.recent_after(PROBE, Seq(200), 1 << 20), Recent::Events(e) if e.is_empty())
        );
        let Recent::Events(batch) = hub.recent_after(PROBE, Seq(180), 300 * 1024) else {
            panic!("recent events are in memory");
        };
        assert_eq!(batch.len(), 3, "a batch stops near its byte budget");
        hub.leave(0);
        assert!(
            hub.lock().recent.is_empty(),
            "freed when the last connection leaves"
        );
    }

    #[test]
    fn retained_start_keeps_at_most_the_asked_bytes() {
        let hub = Hub::default();
        for i in 1..=100u64 {
            hub.publish(LiveEvent::Output {
                seq: Seq(i),
                data: Bytes::from(vec![b'x'; 100 * 1024]),
            });
        }
        let state = hub.lock();
        assert_eq!(Hub::retained_start(&state, 20 * 1024 * 1024), Seq::ZERO);
        let start = Hub::retained_start(&state, 1024 * 1024);
        let kept = (100 - start.0) * 100 * 1024;
        assert!(kept <= 1024 * 1024, "kept {kept}");
        assert!(
            kept + CHECKPOINT_STRIDE_BYTES + 100 * 1024 > 1024 * 1024,
            "kept {kept}"
        );
    }
}
