//! Keeps VT emulation off the output path: the screen is one more reader of the event log.
//!
//! Emulating a screen costs several times what reading the PTY does (the `cat` of a mixed file in
//! bench/ shows it), so a terminal's actor never feeds its emulator inline. It only raises the
//! `seq` the screen must reach; the screen reads the terminal's event log with its own
//! [`LogReader`] (which follows the holder's rotations from segment to segment) and applies output
//! and resize events up to that `seq`. One background thread (at the terminals' programs' priority,
//! below the server's own threads, resting while the CPUs are contended) advances the
//! screens of all terminals; whoever reads a screen first applies what is still missing, under the
//! same lock, so every read sees at least the events the actor had applied before it (a read far
//! behind does so on a blocking thread: [`SharedScreen::read_then`]). Nothing is
//! queued in memory, so a flood costs no memory, only a screen that catches up later (from the
//! oldest kept event, if it fell further behind than the log keeps).
//!
//! The thread lets a screen's new output settle for 10 ms (`SETTLE`) before it applies it: an
//! interactive step (an exec's echo, its output, its end mark and the next prompt, each its
//! own event within a millisecond) costs it one wake-up and one pass instead of one each, and
//! its work never runs beside the step it follows. A flood, once started, is applied slice after
//! slice without waiting.
//!
//! A screen nobody fed or read for [`SLEEP_AFTER`] is put to sleep by the same thread
//! ([`Screen::sleep`]): an idle terminal keeps the few hundred bytes that repaint its screen
//! instead of the emulator's cells, and the next output or read wakes it (docs/memory.md).

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak, mpsc};
use std::time::{Duration, Instant};

use ptyhub_protocol::event::{Event, EventKind, Seq};

use crate::cgroup::ScreenCpuGroup;
use crate::event_log::{LogReader, TerminalLog};
use crate::screen::{Screen, ScreenView, SleepingScreen};

/// The background thread applies at most this much log of one terminal before moving on, and
/// holds that screen's lock that long (a few milliseconds of emulation where every line
/// pushes one out of the scrollback).
const SLICE_BYTES: usize = 64 * 1024;
/// Nice value of the background thread: the terminals' programs', below the server's own
/// threads, and never idle-only. A reader of a screen waits for its lock while the thread
/// applies a slice; with `SCHED_IDLE` (or an idle cgroup) a busy machine left the thread no CPU
/// in the middle of a slice, and the actor that asked for the screen, with the runtime thread
/// under it, waited as long as the machine stayed busy (a tmux test beside two busy loops:
/// 13 s; at nice 10 and a tenth of a group's weight `gdb` still found the runtime thread
/// waiting on the lock). Under contention it rests instead ([`CpuPressure`]).
const WORKER_NICE: i32 = 0;
/// How long new output of a screen waits before the background thread applies it: longer
/// than an interactive step takes (an exec's whole round trip is under a millisecond), short
/// enough that a reader rarely has more than a few events to apply itself.
const SETTLE: Duration = Duration::from_millis(10);
/// A screen neither fed nor read for this long goes to sleep. Waking costs one emulator fed
/// its dump (tens of microseconds for a prompt, a millisecond or so for a full 200×50
/// screen), so a terminal that prints now and then pays little for it.
pub const SLEEP_AFTER: Duration = Duration::from_secs(5);
/// Under contention the background thread rests this many times as long as each slice of
/// emulation took: a thirteenth of one CPU at most while other work waits for one. A flood's
/// screen then falls further behind while it lasts and is caught up once the CPUs are free
/// (or by its next reader, off the runtime thread when far behind); at three times (a quarter
/// of a CPU) the thread took half the server's CPU during `seq 1 3000000` on two cores, and
/// `seq` took 1.18x the bare PTY's time against 1.04x at twelve (bench/README.md).
const REST_PER_SLICE: u32 = 12;
/// The longest rest after one slice.
const REST_MAX: Duration = Duration::from_millis(100);
/// The machine is contended when tasks waited for a CPU at least this share of the time.
const CONTENDED_SHARE: f64 = 0.25;
/// The contention is measured over at least this long (and the kernel's file read at most
/// this often).
const PRESSURE_WINDOW: Duration = Duration::from_millis(20);
/// A read applies what its screen still lacks on the caller's thread when that is at most
/// this many events (a few milliseconds of emulation at worst: an event holds at most the
/// holder's 64 KiB read); further behind, it applies them on a blocking thread
/// ([`SharedScreen::read_then`]).
const INLINE_CATCH_UP_EVENTS: u64 = 8;
/// The heap is trimmed after screens went to sleep, at most this often (a trim walks the
/// allocator's free lists under its lock).
const TRIM_EVERY: Duration = Duration::from_millis(500);

/// A screen and its reader of the log. The screen is awake or asleep, never both.
struct Inner {
    awake: Option<Screen>,
    asleep: Option<SleepingScreen>,
    /// Its position is the last event applied.
    log: LogReader,
}

/// What the actor and the readers share. The actor only touches the atomics, never the lock,
/// so a background thread busy with the emulator can never stall the output path.
struct Shared {
    /// The `seq` the screen must reach.
    target: AtomicU64,
    /// Whether the screen is in the background thread's inbox.
    is_queued: AtomicBool,
    /// When the screen was last fed or read ([`now_ms`]); written under the lock.
    used_at_ms: AtomicU64,
    /// Whether the background thread will look at this screen to put it to sleep.
    is_sleep_due: AtomicBool,
    inner: Mutex<Inner>,
}

/// Milliseconds since this process first asked.
fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    u64::try_from(EPOCH.get_or_init(Instant::now).elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Inner {
    fn applied(&self) -> Seq {
        self.log.last_seq()
    }

    /// The screen, woken if it was asleep.
    fn screen(&mut self) -> &mut Screen {
        awake(&mut self.awake, &mut self.asleep)
    }

    fn sleep(&mut self) {
        if let Some(screen) = self.awake.take() {
            self.asleep = Some(screen.sleep());
            crate::stats::global().screen_slept(true);
        }
    }

    /// Applies log events up to `target`, reading at most about `budget` bytes.
    fn apply(&mut self, target: Seq, budget: usize) {
        let rotations = self.log.rotations_followed();
        self.apply_log(target, budget);
        // One screen per terminal follows its whole log: its reader sees each rotation once
        // (unless the screen fell behind what the log keeps).
        let followed = self.log.rotations_followed() - rotations;
        if followed > 0 {
            crate::stats::global().log_rotated(followed);
        }
    }

    fn apply_log(&mut self, target: Seq, budget: usize) {
        if self.log.last_seq() >= target {
            return;
        }
        let mut read = 0;
        let screen = awake(&mut self.awake, &mut self.asleep);
        let log = &mut self.log;
        while log.last_seq() < target && read < budget {
            let step = SLICE_BYTES.min(budget - read).max(64 * 1024);
            let passed = log.read_lines(step, Some(target), &mut |_, line| {
                read += line.len() + 1;
                if let Ok(event) = Event::from_json_line(line) {
                    apply_event(screen, event);
                }
            });
            if !matches!(passed, Ok(n) if n > 0) {
                // Nothing more now (or the log cannot be read): a later advance retries.
                return;
            }
        }
    }
}

/// The screen of `awake`, woken from `asleep` first if that is where it is.
fn awake<'a>(awake: &'a mut Option<Screen>, asleep: &mut Option<SleepingScreen>) -> &'a mut Screen {
    awake.get_or_insert_with(|| match asleep.take() {
        Some(sleeping) => {
            crate::stats::global().screen_slept(false);
            sleeping.wake()
        }
        None => Screen::new(1, 1),
    })
}

fn apply_event(screen: &mut Screen, event: Event) {
    match event.kind {
        EventKind::Output { data } => screen.feed(&data),
        EventKind::Resize { cols, rows } | EventKind::Start { cols, rows, .. } => {
            screen.resize(cols, rows)
        }
        _ => {}
    }
}

/// A terminal's screen, fed from its event log.
#[derive(Clone)]
pub struct SharedScreen {
    shared: Arc<Shared>,
}

impl SharedScreen {
    /// A screen of `cols`×`rows` that follows the terminal's `log`.
    pub fn new(log: &TerminalLog, cols: u16, rows: u16) -> Self {
        let shared = Arc::new(Shared {
            target: AtomicU64::new(0),
            is_queued: AtomicBool::new(false),
            used_at_ms: AtomicU64::new(now_ms()),
            is_sleep_due: AtomicBool::new(false),
            inner: Mutex::new(Inner {
                awake: Some(Screen::new(cols, rows)),
                asleep: None,
                log: log.reader(Seq::ZERO),
            }),
        });
        shared.used(&Arc::downgrade(&shared));
        Self { shared }
    }

    /// The screen must now show every event up to `seq` (already in the log). Never blocks.
    pub fn advance_to(&self, seq: Seq) {
        self.shared.target.fetch_max(seq.0, Ordering::AcqRel);
        if !self.shared.is_queued.swap(true, Ordering::AcqRel) {
            let _ = worker().send(Job::Advance(Arc::downgrade(&self.shared)));
        }
    }

    /// Runs `read` on the screen with every event up to the target applied (woken first if
    /// it was asleep).
    pub fn read<T>(&self, read: impl FnOnce(&Screen) -> T) -> T {
        self.read_at(read).0
    }

    /// [`Self::read`], with the `seq` of the newest event the screen then reflects.
    fn read_at<T>(&self, read: impl FnOnce(&Screen) -> T) -> (T, Seq) {
        let mut inner = self.shared.lock();
        let target = Seq(self.shared.target.load(Ordering::Acquire));
        inner.apply(target, usize::MAX);
        self.shared.used(&Arc::downgrade(&self.shared));
        let applied = inner.applied();
        (read(inner.screen()), applied)
    }

    pub fn view(&self) -> ScreenView {
        self.read(Screen::view)
    }

    /// [`Self::read`], then `reply` with what it read and the `seq` of the newest event the
    /// screen then reflected: on this thread when the screen lacks
    /// little (`INLINE_CATCH_UP_EVENTS`), else on a blocking thread of the runtime. After a
    /// flood the background thread may be far behind (it rests while the CPUs are busy, and
    /// 100 MB of mixed output is over a second of emulation): caught up on the terminal's
    /// actor, that second would hold the server's runtime thread, and every other request and
    /// terminal with it.
    pub fn read_then<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Screen) -> T + Send + 'static,
        reply: impl FnOnce(T, Seq) + Send + 'static,
    ) {
        if self.is_far_behind() {
            self.read_off_thread(read, reply);
        } else {
            let (value, seq) = self.read_at(read);
            reply(value, seq);
        }
    }

    /// Whether the screen lacks more than `INLINE_CATCH_UP_EVENTS` of its target.
    pub fn is_far_behind(&self) -> bool {
        let applied = self.shared.lock().applied().0;
        self.shared
            .target
            .load(Ordering::Acquire)
            .saturating_sub(applied)
            > INLINE_CATCH_UP_EVENTS
    }

    /// [`Self::read_then`] on a blocking thread of the runtime, however far behind the screen
    /// is (`reply` may block).
    pub fn read_off_thread<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Screen) -> T + Send + 'static,
        reply: impl FnOnce(T, Seq) + Send + 'static,
    ) {
        let screen = self.clone();
        drop(tokio::task::spawn_blocking(move || {
            let (value, seq) = screen.read_at(read);
            reply(value, seq);
        }));
    }

    /// Puts the screen to sleep if nobody fed or read it for `idle` and it is not behind its
    /// target; else how much longer to wait before asking again. The background thread asks
    /// with [`SLEEP_AFTER`].
    #[cfg(test)]
    fn sleep_if_idle(&self, idle: Duration) -> Option<Duration> {
        self.shared.sleep_if_idle(idle)
    }

    /// [`Self::advance_to`] without telling the background thread: only a read applies it.
    #[cfg(test)]
    fn raise_target_unseen(&self, seq: Seq) {
        self.shared.target.fetch_max(seq.0, Ordering::AcqRel);
    }

    /// Whether the screen is asleep now.
    #[cfg(test)]
    fn is_asleep(&self) -> bool {
        self.shared.lock().asleep.is_some()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a use (called under the lock) and makes sure the background thread will look at
    /// the screen once it is idle.
    fn used(&self, weak: &Weak<Shared>) {
        self.used_at_ms.store(now_ms(), Ordering::Release);
        if !self.is_sleep_due.swap(true, Ordering::AcqRel) {
            let _ = worker().send(Job::Sleep(weak.clone()));
        }
    }

    fn sleep_if_idle(&self, idle: Duration) -> Option<Duration> {
        let mut inner = self.lock();
        let idle_ms = now_ms().saturating_sub(self.used_at_ms.load(Ordering::Acquire));
        let is_behind = inner.applied().0 < self.target.load(Ordering::Acquire);
        if u128::from(idle_ms) >= idle.as_millis() && !is_behind {
            inner.sleep();
            self.is_sleep_due.store(false, Ordering::Release);
            return None;
        }
        let waited = Duration::from_millis(idle_ms);
        Some(idle.saturating_sub(waited).max(Duration::from_millis(100)))
    }

    /// Applies up to one slice of the log towards the target; whether the screen needs more.
    fn advance(self: &Arc<Self>, weak: &Weak<Shared>) -> bool {
        let target = Seq(self.target.load(Ordering::Acquire));
        let (applied, is_stuck) = {
            let mut inner = self.lock();
            let before = inner.applied();
            inner.apply(target, SLICE_BYTES);
            if inner.applied() > before {
                self.used(weak);
            }
            (inner.applied(), inner.applied() == before)
        };
        if applied < target && !is_stuck {
            return true;
        }
        // Done, or the log cannot be read now (a later advance or read retries).
        self.is_queued.store(false, Ordering::Release);
        // An advance between the load and the store must not be lost.
        let newer = self.target.load(Ordering::Acquire) > applied.0;
        newer && !is_stuck && !self.is_queued.swap(true, Ordering::AcqRel)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.asleep.is_some() {
            crate::stats::global().screen_slept(false);
        }
    }
}

/// What the background thread is asked to do with a screen.
enum Job {
    /// Apply what the log has up to the screen's target.
    Advance(Weak<Shared>),
    /// Put it to sleep once it is idle ([`SLEEP_AFTER`]).
    Sleep(Weak<Shared>),
}

/// The screen cpu cgroup the background thread is to run in, and the thread's id once it runs:
/// whichever of the server and the thread comes second moves the thread.
struct ScreenPlacement {
    group: Option<ScreenCpuGroup>,
    worker_tid: Option<i32>,
}

static SCREEN_PLACEMENT: Mutex<ScreenPlacement> = Mutex::new(ScreenPlacement {
    group: None,
    worker_tid: None,
});

fn screen_placement() -> MutexGuard<'static, ScreenPlacement> {
    SCREEN_PLACEMENT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs the background thread in a screen cpu cgroup of the server of `state_dir`
/// ([`crate::cgroup::screen_cpu_group`]: a cgroup of its own takes it out of the server's
/// scheduler group) for as long as the returned membership is held; dropping it moves the
/// thread back and removes the group, on every way out of the server. `None`, said at debug
/// level, where the host allows no such group. Best called before any terminal has a screen.
pub fn run_in_screen_cpu_group(state_dir: &Path) -> Option<ScreenGroupMembership> {
    let joined = crate::cgroup::screen_cpu_group(state_dir).and_then(|group| {
        let mut placement = screen_placement();
        // Without the thread yet, it joins the group as it starts.
        if let Some(tid) = placement.worker_tid
            && let Err(error) = group.join_thread(tid)
        {
            group.remove(None);
            return Err(error.to_string());
        }
        let dir = group.dir.clone();
        placement.group = Some(group);
        Ok(dir)
    });
    match joined {
        Ok(dir) => {
            tracing::debug!(dir = %dir.display(), "the screen thread runs in a cpu cgroup of its own");
            Some(ScreenGroupMembership { _private: () })
        }
        Err(refused) => {
            tracing::debug!(%refused, "the screen thread runs in the server's scheduler group");
            None
        }
    }
}

/// The background thread's place in the screen cpu cgroup ([`run_in_screen_cpu_group`]).
#[must_use = "dropping it takes the screen thread out of the screen group at once"]
pub struct ScreenGroupMembership {
    _private: (),
}

impl Drop for ScreenGroupMembership {
    fn drop(&mut self) {
        let mut placement = screen_placement();
        if let Some(group) = placement.group.take() {
            group.remove(placement.worker_tid);
        }
    }
}

/// Notes the background thread's id and moves it into the screen group if the server gave one.
fn note_worker_thread(tid: i32) {
    let mut placement = screen_placement();
    placement.worker_tid = Some(tid);
    if let Some(group) = &placement.group
        && let Err(error) = group.join_thread(tid)
    {
        tracing::warn!(%error, dir = %group.dir.display(),
            "the screen thread stays in the server's scheduler group");
    }
}

/// The background thread's inbox.
fn worker() -> &'static mpsc::Sender<Job> {
    static WORKER: OnceLock<mpsc::Sender<Job>> = OnceLock::new();
    WORKER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name("ptyhub-screen".to_owned())
            .spawn(move || {
                #[allow(unsafe_code, reason = "thread scheduling calls have no safe wrapper")]
                // SAFETY: a scheduling call on this thread's own id (Linux applies nice per
                // thread); raising the nice value is always allowed.
                let tid = unsafe {
                    let tid = libc::syscall(libc::SYS_gettid) as libc::pid_t;
                    libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, WORKER_NICE);
                    tid
                };
                note_worker_thread(tid);
                run_worker(&rx);
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "no background screen thread; screens are updated on read");
        }
        tx
    })
}

fn run_worker(rx: &mpsc::Receiver<Job>) {
    // Screens with new output, each advanced once it has settled (in the order they come).
    let mut settling: VecDeque<(Instant, Weak<Shared>)> = VecDeque::new();
    // Screens to advance now, a slice each in turn.
    let mut ready: VecDeque<Weak<Shared>> = VecDeque::new();
    // Screens to look at once idle, in the order their time comes (every wait is about
    // SLEEP_AFTER, so the front's comes first or close to it).
    let mut sleepers: VecDeque<(Instant, Weak<Shared>)> = VecDeque::new();
    // Screens put to sleep since the last trim of the heap, and when that was.
    let mut untrimmed = 0;
    let mut trimmed_at = Instant::now();
    let mut pressure = CpuPressure::new();
    loop {
        let trim_at = (untrimmed > 0).then(|| trimmed_at + TRIM_EVERY);
        let wake_at = [
            (!ready.is_empty()).then(Instant::now),
            settling.front().map(|(at, _)| *at),
            sleepers.front().map(|(at, _)| *at),
            trim_at,
        ]
        .into_iter()
        .flatten()
        .min();
        let job = match wake_at {
            Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(job) => Some(job),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            },
            None => match rx.recv() {
                Ok(job) => Some(job),
                Err(_) => return,
            },
        };
        match job {
            Some(Job::Advance(weak)) => settling.push_back((Instant::now() + SETTLE, weak)),
            Some(Job::Sleep(weak)) => sleepers.push_back((Instant::now() + SLEEP_AFTER, weak)),
            None => {}
        }
        let started = Instant::now();
        while settling.front().is_some_and(|(at, _)| *at <= started) {
            ready.extend(settling.pop_front().map(|(_, weak)| weak));
        }
        if let Some(weak) = ready.pop_front() {
            if let Some(shared) = weak.upgrade()
                && shared.advance(&weak)
            {
                // More than a slice behind: its next slice after the other screens' turns.
                ready.push_back(weak);
            }
            if let Some(rest) = pressure.rest_after(started.elapsed()) {
                std::thread::sleep(rest);
            }
        }
        let now = Instant::now();
        while sleepers.front().is_some_and(|(at, _)| *at <= now) {
            let Some((_, weak)) = sleepers.pop_front() else {
                break;
            };
            if let Some(shared) = weak.upgrade() {
                match shared.sleep_if_idle(SLEEP_AFTER) {
                    Some(wait) => sleepers.push_back((now + wait, weak)),
                    None => untrimmed += 1,
                }
            }
        }
        if untrimmed > 0 && now >= trimmed_at + TRIM_EVERY {
            // The cells freed lie between allocations that live on: only a trim gives their
            // pages back.
            crate::memory::trim_heap();
            untrimmed = 0;
            trimmed_at = Instant::now();
        }
    }
}

/// Whether the machine's CPUs are contended, as the kernel's pressure stall information says
/// (`/proc/pressure/cpu`: the time some task waited for a CPU), or where that is missing, its
/// count of runnable tasks against the CPUs (`/proc/loadavg`).
///
/// The thread's nice value counts within the server's scheduler group only: across sessions
/// (autogroup) the kernel weighs a group by its runnable threads, so when the screen thread is
/// the server's only one it runs with the group's weight, raised to nice -20
/// ([`crate::process::raise_server_priority`]). Twenty terminals printing at full speed on two
/// CPUs left it 1.1 of them (adversarial L1, `perf`), ahead of the programs, the holders and
/// an idle terminal's exec. So it measures the contention itself and rests while there is
/// some, between slices: never with a screen's lock held, which a reader waits on.
struct CpuPressure {
    /// The stall total (µs) and when it was read; `None` where the kernel has no such file.
    last: Option<(u64, Instant)>,
    /// The share measured over the last whole window, and when it was.
    share: Option<(f64, Instant)>,
    cpus: usize,
}

impl CpuPressure {
    fn new() -> Self {
        Self {
            last: read_stall_total().map(|total| (total, Instant::now())),
            share: None,
            cpus: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        }
    }

    /// How long to rest after a slice of work that took `spent`, if the machine is contended.
    fn rest_after(&mut self, spent: Duration) -> Option<Duration> {
        let now = Instant::now();
        let share = match self.share {
            Some((share, at)) if now.duration_since(at) < PRESSURE_WINDOW => share,
            _ => {
                let share = self.waiting_share(now)?;
                self.share = Some((share, now));
                share
            }
        };
        rest_for(share, spent)
    }

    /// The share of the time since the last call some task waited for a CPU (1 or 0 from the
    /// runnable count where pressure is not kept).
    fn waiting_share(&mut self, now: Instant) -> Option<f64> {
        let Some((before, at)) = self.last else {
            let running = std::fs::read_to_string("/proc/loadavg")
                .ok()
                .and_then(|text| runnable_tasks(&text))?;
            // The count includes this thread.
            return Some(if running > self.cpus { 1.0 } else { 0.0 });
        };
        let total = read_stall_total()?;
        self.last = Some((total, now));
        let wall = now.duration_since(at).as_micros();
        (wall > 0).then(|| total.saturating_sub(before) as f64 / wall as f64)
    }
}

/// The rest a slice that took `spent` earns when tasks waited for a CPU `share` of the time.
fn rest_for(share: f64, spent: Duration) -> Option<Duration> {
    (share >= CONTENDED_SHARE).then(|| (spent * REST_PER_SLICE).min(REST_MAX))
}

/// The `total` of the `some` line of `/proc/pressure/cpu` (µs some task waited for a CPU).
fn read_stall_total() -> Option<u64> {
    stall_total(&std::fs::read_to_string("/proc/pressure/cpu").ok()?)
}

fn stall_total(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("some "))?
        .split_whitespace()
        .find_map(|field| field.strip_prefix("total="))?
        .parse()
        .ok()
}

/// The runnable tasks of `/proc/loadavg` (its fourth field, `running/all`).
fn runnable_tasks(text: &str) -> Option<usize> {
    text.split_whitespace()
        .nth(3)?
        .split('/')
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event_log::{
        EVENT_LOG_KEEP_BYTES, EVENT_LOG_KEEP_MIN_BYTES, EventLog, list_segments,
    };

    /// An empty log in a directory of its own (kept while the first value lives), and a
    /// `cols`×`rows` screen that follows it.
    fn log_and_screen(
        keep: u64,
        cols: u16,
        rows: u16,
    ) -> std::io::Result<(tempfile::TempDir, EventLog, SharedScreen)> {
        let dir = tempfile::tempdir()?;
        let log = EventLog::open(dir.path(), keep)?;
        let screen = SharedScreen::new(&TerminalLog::in_dir(dir.path()), cols, rows);
        Ok((dir, log, screen))
    }

    #[test]
    fn the_background_thread_rests_only_while_the_cpus_are_contended() {
        let psi = "some avg10=1.50 avg60=11.60 avg300=7.00 total=692853747\n\
                   full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(stall_total(psi), Some(692_853_747));
        assert_eq!(stall_total("full avg10=0.00 total=5\n"), None);
        assert_eq!(runnable_tasks("3.40 2.17 1.17 5/98 8298\n"), Some(5));
        assert_eq!(runnable_tasks("3.40 2.17"), None);
        let slice = Duration::from_millis(2);
        assert_eq!(rest_for(0.0, slice), None);
        assert_eq!(rest_for(0.1, slice), None);
        assert_eq!(rest_for(0.5, slice), Some(Duration::from_millis(24)));
        assert_eq!(rest_for(1.0, Duration::from_secs(1)), Some(REST_MAX));
    }

    #[test]
    fn reads_see_every_event_up_to_the_target() -> std::io::Result<()> {
        let (_dir, mut log, screen) = log_and_screen(EVENT_LOG_KEEP_BYTES, 20, 4)?;
        let mut last = Seq::ZERO;
        for i in 0..100 {
            last = log.append(EventKind::Output {
                data: format!("line {i}\r\n").into_bytes(),
            })?;
        }
        log.append(EventKind::Resize { cols: 30, rows: 4 })?;
        let target = log.append(EventKind::Output {
            data: b"last".to_vec(),
        })?;
        log.append(EventKind::Output {
            data: b"\r\nnot yet".to_vec(),
        })?;

        screen.advance_to(last);
        assert_eq!(screen.view().lines[2], "line 99");
        screen.advance_to(target);
        let view = screen.view();
        assert_eq!(view.cols, 30);
        assert_eq!(view.lines[view.lines.len() - 2], "line 99");
        assert_eq!(view.lines[view.lines.len() - 1], "last");
        Ok(())
    }

    /// A read that finds its screen a few events behind catches up where it is asked; one far
    /// behind (a flood the background thread has not applied yet) catches up on a blocking
    /// thread, so the caller (the terminal's actor, the server's runtime thread under it) goes
    /// on at once. Both see every event up to the target and say which `seq` that is.
    #[tokio::test(flavor = "current_thread")]
    async fn a_read_far_behind_catches_up_on_a_blocking_thread() -> std::io::Result<()> {
        let (_dir, mut log, screen) = log_and_screen(EVENT_LOG_KEEP_BYTES, 20, 4)?;
        let near = log.append(EventKind::Output {
            data: b"near\r\n".to_vec(),
        })?;
        screen.advance_to(near);
        let here = std::thread::current().id();
        let (tx, rx) = std::sync::mpsc::channel();
        let reply = |tx: std::sync::mpsc::Sender<_>| {
            move |view: ScreenView, seq| {
                let _ = tx.send((std::thread::current().id(), view, seq));
            }
        };
        screen.read_then(Screen::view, reply(tx.clone()));
        let (thread, view, seq) = rx.try_recv().map_err(std::io::Error::other)?;
        assert_eq!((thread, seq), (here, near), "{view:?}");
        assert_eq!(view.lines[0], "near");

        let mut far = near;
        for i in 0..=INLINE_CATCH_UP_EVENTS * 4 {
            far = log.append(EventKind::Output {
                data: format!("far {i}\r\n").into_bytes(),
            })?;
        }
        // The background thread is not told, so it cannot have caught up before the read.
        screen.raise_target_unseen(far);
        screen.read_then(Screen::view, reply(tx));
        let (thread, view, seq) = tokio::task::spawn_blocking(move || rx.recv())
            .await
            .map_err(std::io::Error::other)?
            .map_err(std::io::Error::other)?;
        assert_ne!(thread, here, "caught up on the caller's thread");
        assert_eq!(seq, far);
        assert_eq!(
            view.lines[2],
            format!("far {}", INLINE_CATCH_UP_EVENTS * 4),
            "{view:?}"
        );
        Ok(())
    }

    /// The background thread is never idle-only: it holds a screen's lock while it applies a
    /// slice, and an idle-only thread on a busy machine held it, with readers (the actor, the
    /// runtime thread under it) waiting, as long as the machine stayed busy.
    #[test]
    fn the_background_thread_runs_at_a_normal_policy_and_nice() -> std::io::Result<()> {
        let (_dir, mut log, screen) = log_and_screen(EVENT_LOG_KEEP_BYTES, 20, 4)?;
        let last = log.append(EventKind::Output {
            data: b"hi\r\n".to_vec(),
        })?;
        screen.advance_to(last);
        let since = Instant::now();
        let stat = loop {
            let found = std::fs::read_dir("/proc/self/task")?
                .flatten()
                .filter(|task| {
                    std::fs::read_to_string(task.path().join("comm"))
                        .is_ok_and(|comm| comm.trim() == "ptyhub-screen")
                })
                .find_map(|task| std::fs::read_to_string(task.path().join("stat")).ok());
            match found {
                Some(stat) => break stat,
                None if since.elapsed() < Duration::from_secs(30) => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                None => panic!("no ptyhub-screen thread"),
            }
        };
        // Fields after the command's closing parenthesis: state is field 3, nice 19, policy 41.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        assert_eq!(fields.get(41 - 3), Some(&"0"), "policy SCHED_OTHER: {stat}");
        assert_eq!(
            fields.get(19 - 3),
            Some(&WORKER_NICE.to_string().as_str()),
            "{stat}"
        );
        Ok(())
    }

    /// The background thread applies new output by itself once it has settled, a flood of it
    /// slice after slice, with nobody reading the screen.
    #[test]
    fn the_background_thread_applies_output_nobody_reads() -> std::io::Result<()> {
        let (_dir, mut log, screen) = log_and_screen(EVENT_LOG_KEEP_BYTES, 20, 4)?;
        let mut last = Seq::ZERO;
        // One slice and a half, so the thread needs more than one turn, in a few large events
        // of bytes the emulator passes over (NUL), cheap to apply: the thread rests while the
        // CPUs are contended, which a busy test machine often is.
        let mut chunk = vec![0u8; 32 * 1024];
        chunk.extend_from_slice(b"x\r\n");
        for _ in 0..(3 * SLICE_BYTES / 2 / chunk.len() + 1) {
            last = log.append(EventKind::Output {
                data: chunk.clone(),
            })?;
        }
        screen.advance_to(last);
        let applied = || screen.shared.lock().applied();
        let since = Instant::now();
        while applied() < last && since.elapsed() < Duration::from_secs(120) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(applied(), last);
        Ok(())
    }

    #[test]
    fn an_idle_screen_sleeps_and_wakes_for_a_read_or_new_output() -> std::io::Result<()> {
        let (_dir, mut log, screen) = log_and_screen(EVENT_LOG_KEEP_BYTES, 20, 4)?;
        let mut last = Seq::ZERO;
        for i in 0..10 {
            last = log.append(EventKind::Output {
                data: format!("\x1b[3{}mline {i}\x1b[0m\r\n", i % 8).into_bytes(),
            })?;
        }
        screen.advance_to(last);
        let before = screen.read(|s| (s.view().lines, s.all_lines(), s.dump()));
        // Just used: not yet.
        assert!(screen.sleep_if_idle(Duration::from_secs(3600)).is_some());
        assert!(!screen.is_asleep());
        assert!(screen.sleep_if_idle(Duration::ZERO).is_none());
        assert!(screen.is_asleep());
        // A read wakes it, as it was.
        assert_eq!(
            screen.read(|s| (s.view().lines, s.all_lines(), s.dump())),
            before
        );
        assert!(!screen.is_asleep());
        // Asleep again, new output wakes it and lands on the screen it had.
        assert!(screen.sleep_if_idle(Duration::ZERO).is_none());
        let more = log.append(EventKind::Output {
            data: b"after sleep".to_vec(),
        })?;
        screen.advance_to(more);
        let view = screen.view();
        assert_eq!(view.lines[2], "line 9");
        assert_eq!(view.lines[3], "after sleep");
        assert_eq!(
            screen.read(Screen::all_lines)[..3],
            ["line 0", "line 1", "line 2"]
        );
        Ok(())
    }

    #[test]
    fn a_screen_follows_the_log_across_rotations() -> std::io::Result<()> {
        let (dir, mut log, screen) = log_and_screen(EVENT_LOG_KEEP_MIN_BYTES, 40, 3)?;
        let padding = "p".repeat(300);
        let print = |log: &mut EventLog, i: u32| {
            log.append(EventKind::Output {
                // The padding is a window title: it makes the log large, not the screen.
                data: format!("\x1b]0;{padding}\x07\r\nline {i}").into_bytes(),
            })
        };
        let mut last = Seq::ZERO;
        for i in 0..100 {
            last = print(&mut log, i)?;
        }
        screen.advance_to(last);
        assert_eq!(screen.view().lines[2], "line 99");
        // Far more than the log keeps, while the screen is not read: the part it had not
        // applied yet is deleted under it.
        for i in 100..2000 {
            last = print(&mut log, i)?;
            screen.advance_to(last);
        }
        assert!(list_segments(dir.path())?.len() >= 2);
        let view = screen.view();
        assert_eq!(view.lines[1], "line 1998");
        assert_eq!(view.lines[2], "line 1999");
        Ok(())
    }
}
