//! Counters of what the terminals of this process do, for the server's `/metrics`: plain
//! atomics that the actor, live connections, creation and the screen's log reader bump on their
//! own paths, and that a reader copies out with [`Stats::snapshot`]. This module owns the
//! counting only; it knows no metric format and no HTTP (`ptyhub-server`'s `metrics` module
//! turns a snapshot into Prometheus families, docs/operations.md#metrics lists them).
//!
//! Entry point: [`global`], one set per process. Terminals, their holders and their
//! connections are the process's, so their counts are too (as the `prometheus` and `metrics`
//! crates keep a default registry); threading a handle to every place that counts would touch
//! every constructor of the actor and of a connection for no gain. A count costs one relaxed
//! atomic add, nothing measurable beside the line it counts.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use ptyhub_protocol::api::{BackendKind, CommandStatus};

use crate::error::TerminalError;

/// The process's counters.
pub fn global() -> &'static Stats {
    static STATS: Stats = Stats::new();
    &STATS
}

/// Counts input of `bytes` bytes that `error` refused (a lease check before typing).
pub fn input_refused(error: &TerminalError, bytes: usize) {
    global().input_refused(InputRefusal::of(error), bytes);
}

/// Upper bounds, in seconds, of the buckets of command durations (a `+Inf` bucket follows).
pub const COMMAND_SECONDS_BUCKETS: [f64; 12] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0, 600.0,
];

/// How a command ended, as the metrics label it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandOutcome {
    /// Exit code 0.
    Ok,
    /// Another exit code.
    Failed,
    /// ptyhub interrupted it (`no_change_timeout`, `hard_timeout`).
    Timeout,
    /// It was cancelled or ended with its shell, or its exit code is unknown.
    Terminated,
}

impl CommandOutcome {
    pub const ALL: [Self; 4] = [Self::Ok, Self::Failed, Self::Timeout, Self::Terminated];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Failed => "failed",
            Self::Timeout => "timeout",
            Self::Terminated => "terminated",
        }
    }

    /// The outcome of a finished command with this status and exit code.
    pub fn of(status: CommandStatus, exit_code: Option<i32>) -> Self {
        match (status, exit_code) {
            (CommandStatus::Completed, Some(0)) => Self::Ok,
            (CommandStatus::Completed, Some(_)) => Self::Failed,
            (CommandStatus::NoChangeTimeout | CommandStatus::HardTimeout, _) => Self::Timeout,
            _ => Self::Terminated,
        }
    }
}

/// Where a command came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandOrigin {
    /// Submitted by exec (any transport).
    Exec,
    /// A line someone typed.
    Typed,
}

impl CommandOrigin {
    pub const ALL: [Self; 2] = [Self::Exec, Self::Typed];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exec => "exec",
            Self::Typed => "typed",
        }
    }
}

/// Why input did not reach a terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputRefusal {
    /// Someone else holds the input lease (`INPUT_LEASED`).
    Leased,
    /// A read-only (watch) connection or principal.
    ReadOnly,
    /// The terminal's input queue is full (`BUSY`).
    Busy,
    /// The terminal's program has ended, or the terminal is closed.
    NotRunning,
    /// Anything else.
    Other,
}

impl InputRefusal {
    pub const ALL: [Self; 5] = [
        Self::Leased,
        Self::ReadOnly,
        Self::Busy,
        Self::NotRunning,
        Self::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Leased => "leased",
            Self::ReadOnly => "read_only",
            Self::Busy => "busy",
            Self::NotRunning => "not_running",
            Self::Other => "other",
        }
    }

    /// The refusal an input error stands for.
    pub fn of(error: &TerminalError) -> Self {
        match error {
            TerminalError::InputLeased { .. } => Self::Leased,
            TerminalError::WatcherCannot { .. } => Self::ReadOnly,
            TerminalError::InputRefused { .. }
            | TerminalError::CommandRunning
            | TerminalError::SendInProgress => Self::Busy,
            TerminalError::NotRunning { .. }
            | TerminalError::HostGone { .. }
            | TerminalError::NotFound { .. } => Self::NotRunning,
            _ => Self::Other,
        }
    }
}

/// What happened to a holder (the process that hosts a terminal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HolderEvent {
    /// It started and answered.
    Started,
    /// It ended after its program did (or was closed).
    Stopped,
    /// It could not be started, or it vanished while its program ran.
    Failed,
}

impl HolderEvent {
    pub const ALL: [Self; 3] = [Self::Started, Self::Stopped, Self::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
        }
    }
}

/// A kind of live connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiveKind {
    /// The one relay connection of a terminal (interactive).
    Relay,
    /// A peer that reads and writes (interactive).
    Attach,
    /// A peer that only reads.
    Watch,
    /// A stream of a command's output (exec or view as server-sent events).
    CommandStream,
}

impl LiveKind {
    pub const ALL: [Self; 4] = [Self::Relay, Self::Attach, Self::Watch, Self::CommandStream];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Relay => "relay",
            Self::Attach => "attach",
            Self::Watch => "watch",
            Self::CommandStream => "command_stream",
        }
    }
}

/// Counts of durations in fixed buckets ([`COMMAND_SECONDS_BUCKETS`]), with their sum.
pub struct DurationCounts {
    /// Per bucket (not cumulative); the last is `+Inf`.
    buckets: [AtomicU64; COMMAND_SECONDS_BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

impl DurationCounts {
    const fn new() -> Self {
        Self {
            buckets: [const { AtomicU64::new(0) }; COMMAND_SECONDS_BUCKETS.len() + 1],
            sum_micros: AtomicU64::new(0),
        }
    }

    fn observe(&self, duration: Duration) {
        let seconds = duration.as_secs_f64();
        let bucket = COMMAND_SECONDS_BUCKETS
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(COMMAND_SECONDS_BUCKETS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    fn snapshot(&self) -> DurationSnapshot {
        DurationSnapshot {
            buckets: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            sum_seconds: Duration::from_micros(self.sum_micros.load(Ordering::Relaxed))
                .as_secs_f64(),
        }
    }
}

/// A copy of one [`DurationCounts`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DurationSnapshot {
    /// Per bucket of [`COMMAND_SECONDS_BUCKETS`] (not cumulative), then `+Inf`.
    pub buckets: [u64; COMMAND_SECONDS_BUCKETS.len() + 1],
    pub sum_seconds: f64,
}

impl DurationSnapshot {
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

const BACKENDS: usize = BackendKind::ALL.len();

/// The counters ([`global`]).
pub struct Stats {
    bytes_logged: AtomicU64,
    log_rotations: AtomicU64,
    lagged: AtomicU64,
    cursors_expired: AtomicU64,
    commands: [[DurationCounts; CommandOutcome::ALL.len()]; CommandOrigin::ALL.len()],
    input_refused_bytes: [AtomicU64; InputRefusal::ALL.len()],
    input_refused: [AtomicU64; InputRefusal::ALL.len()],
    holders: [[AtomicU64; HolderEvent::ALL.len()]; BACKENDS],
    live: [AtomicI64; LiveKind::ALL.len()],
    screens_asleep: AtomicI64,
}

impl Stats {
    const fn new() -> Self {
        Self {
            bytes_logged: AtomicU64::new(0),
            log_rotations: AtomicU64::new(0),
            lagged: AtomicU64::new(0),
            cursors_expired: AtomicU64::new(0),
            commands: [const { [const { DurationCounts::new() }; CommandOutcome::ALL.len()] };
                CommandOrigin::ALL.len()],
            input_refused_bytes: [const { AtomicU64::new(0) }; InputRefusal::ALL.len()],
            input_refused: [const { AtomicU64::new(0) }; InputRefusal::ALL.len()],
            holders: [const { [const { AtomicU64::new(0) }; HolderEvent::ALL.len()] }; BACKENDS],
            live: [const { AtomicI64::new(0) }; LiveKind::ALL.len()],
            screens_asleep: AtomicI64::new(0),
        }
    }

    /// A terminal's program wrote `bytes` (a `pty.output` event applied as it happened).
    pub fn bytes_logged(&self, bytes: usize) {
        self.bytes_logged.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The holder rotated a terminal's active log segment (as its screen's reader saw it).
    pub fn log_rotated(&self, rotations: u64) {
        self.log_rotations.fetch_add(rotations, Ordering::Relaxed);
    }

    /// A live connection was told it lagged.
    pub fn lagged(&self) {
        self.lagged.fetch_add(1, Ordering::Relaxed);
    }

    /// A cursor (`since_seq`, an observe cursor, a timeline position) was answered with
    /// `CURSOR_EXPIRED`.
    pub fn cursor_expired(&self) {
        self.cursors_expired.fetch_add(1, Ordering::Relaxed);
    }

    /// A command finished after running for `duration`.
    pub fn command_finished(
        &self,
        origin: CommandOrigin,
        outcome: CommandOutcome,
        duration: Duration,
    ) {
        self.commands[origin as usize][outcome as usize].observe(duration);
    }

    /// Input of `bytes` bytes was refused.
    pub fn input_refused(&self, refusal: InputRefusal, bytes: usize) {
        self.input_refused[refusal as usize].fetch_add(1, Ordering::Relaxed);
        self.input_refused_bytes[refusal as usize].fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Something happened to a holder of `backend`.
    pub fn holder(&self, backend: BackendKind, event: HolderEvent) {
        self.holders[backend_index(backend)][event as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// A live connection of `kind` opened; it counts until the guard is dropped.
    pub fn live_opened(&'static self, kind: LiveKind) -> LiveGuard {
        self.live[kind as usize].fetch_add(1, Ordering::Relaxed);
        LiveGuard { stats: self, kind }
    }

    /// A terminal's screen was put to sleep (`asleep`) or woken (docs/memory.md).
    pub fn screen_slept(&self, asleep: bool) {
        self.screens_asleep
            .fetch_add(if asleep { 1 } else { -1 }, Ordering::Relaxed);
    }

    /// A copy of every counter.
    pub fn snapshot(&self) -> Snapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Snapshot {
            bytes_logged: load(&self.bytes_logged),
            log_rotations: load(&self.log_rotations),
            lagged: load(&self.lagged),
            cursors_expired: load(&self.cursors_expired),
            commands: CommandOrigin::ALL
                .iter()
                .flat_map(|&origin| {
                    CommandOutcome::ALL.iter().map(move |&outcome| {
                        (
                            origin,
                            outcome,
                            self.commands[origin as usize][outcome as usize].snapshot(),
                        )
                    })
                })
                .collect(),
            input_refused: InputRefusal::ALL
                .iter()
                .map(|&r| {
                    (
                        r,
                        load(&self.input_refused[r as usize]),
                        load(&self.input_refused_bytes[r as usize]),
                    )
                })
                .collect(),
            holders: BackendKind::ALL
                .iter()
                .flat_map(|&backend| {
                    HolderEvent::ALL.iter().map(move |&event| {
                        (
                            backend,
                            event,
                            load(&self.holders[backend_index(backend)][event as usize]),
                        )
                    })
                })
                .collect(),
            live: LiveKind::ALL
                .iter()
                .map(|&kind| {
                    let open = self.live[kind as usize].load(Ordering::Relaxed);
                    (kind, u64::try_from(open).unwrap_or(0))
                })
                .collect(),
            screens_asleep: u64::try_from(self.screens_asleep.load(Ordering::Relaxed)).unwrap_or(0),
        }
    }
}

fn backend_index(backend: BackendKind) -> usize {
    BackendKind::ALL
        .iter()
        .position(|&kind| kind == backend)
        .unwrap_or(0)
}

/// Keeps one live connection counted ([`Stats::live_opened`]).
pub struct LiveGuard {
    stats: &'static Stats,
    kind: LiveKind,
}

impl std::fmt::Debug for LiveGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LiveGuard").field(&self.kind).finish()
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.stats.live[self.kind as usize].fetch_sub(1, Ordering::Relaxed);
    }
}

/// A copy of the counters at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub bytes_logged: u64,
    pub log_rotations: u64,
    pub lagged: u64,
    pub cursors_expired: u64,
    pub commands: Vec<(CommandOrigin, CommandOutcome, DurationSnapshot)>,
    /// Refusals and their bytes, by reason.
    pub input_refused: Vec<(InputRefusal, u64, u64)>,
    pub holders: Vec<(BackendKind, HolderEvent, u64)>,
    /// Open connections by kind.
    pub live: Vec<(LiveKind, u64)>,
    /// Screens asleep: an idle terminal's VT screen kept as the sequences that repaint it.
    pub screens_asleep: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_fall_in_their_bucket_and_add_up() {
        let counts = DurationCounts::new();
        counts.observe(Duration::from_millis(5));
        counts.observe(Duration::from_millis(100));
        counts.observe(Duration::from_secs(3600));
        let snapshot = counts.snapshot();
        assert_eq!(snapshot.buckets[0], 1, "5 ms is within 10 ms");
        assert_eq!(snapshot.buckets[2], 1, "100 ms is within its own bound");
        assert_eq!(
            snapshot.buckets[COMMAND_SECONDS_BUCKETS.len()],
            1,
            "an hour is +Inf"
        );
        assert_eq!(snapshot.count(), 3);
        assert!((snapshot.sum_seconds - 3600.105).abs() < 1e-6);
    }

    #[test]
    fn outcomes_follow_status_and_exit_code() {
        assert_eq!(
            CommandOutcome::of(CommandStatus::Completed, Some(0)),
            CommandOutcome::Ok
        );
        assert_eq!(
            CommandOutcome::of(CommandStatus::Completed, Some(2)),
            CommandOutcome::Failed
        );
        assert_eq!(
            CommandOutcome::of(CommandStatus::HardTimeout, None),
            CommandOutcome::Timeout
        );
        assert_eq!(
            CommandOutcome::of(CommandStatus::Terminated, None),
            CommandOutcome::Terminated
        );
    }

    #[test]
    fn a_live_guard_counts_until_dropped() {
        static STATS: Stats = Stats::new();
        let guard = STATS.live_opened(LiveKind::Watch);
        let open = |s: &Snapshot| {
            s.live
                .iter()
                .find(|(kind, _)| *kind == LiveKind::Watch)
                .map_or(0, |(_, n)| *n)
        };
        assert_eq!(open(&STATS.snapshot()), 1);
        drop(guard);
        assert_eq!(open(&STATS.snapshot()), 0);
    }
}
