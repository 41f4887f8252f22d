//! Keeps VT emulation off the output path: the screen is one more reader of the event log.
//!
//! Emulating a screen costs several times what reading the PTY does (the `cat` of a mixed file in
//! bench/ shows it), so a terminal's actor never feeds its emulator inline. It only raises the
//! `seq` the screen must reach; the screen reads the terminal's event log with its own
//! [`LogReader`] (which follows the holder's rotations from segment to segment) and applies output
//! and resize events up to that `seq`. One background thread at a lower CPU priority advances the
//! screens of all terminals; whoever reads a screen first applies what is still missing, under the
//! same lock, so every read sees exactly the events the actor had applied before it. Nothing is
//! queued in memory, so a flood costs no memory, only a screen that catches up later (from the
//! oldest kept event, if it fell further behind than the log keeps).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak, mpsc};

use ptyhub_protocol::event::{Event, EventKind, Seq};

use crate::event_log::{LogReader, TerminalLog};
use crate::screen::{Screen, ScreenView};

/// The background thread applies at most this much log of one terminal before moving on.
const SLICE_BYTES: usize = 256 * 1024;
/// Nice value of the background thread (lower priority than the output path).
const WORKER_NICE: i32 = 10;

struct Inner {
    screen: Screen,
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
    inner: Mutex<Inner>,
}

impl Inner {
    fn applied(&self) -> Seq {
        self.log.last_seq()
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
        let mut read = 0;
        let screen = &mut self.screen;
        while self.log.last_seq() < target && read < budget {
            let step = SLICE_BYTES.min(budget - read).max(64 * 1024);
            let passed = self.log.read_lines(step, Some(target), &mut |_, line| {
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
        Self {
            shared: Arc::new(Shared {
                target: AtomicU64::new(0),
                is_queued: AtomicBool::new(false),
                inner: Mutex::new(Inner {
                    screen: Screen::new(cols, rows),
                    log: log.reader(Seq::ZERO),
                }),
            }),
        }
    }

    /// The screen must now show every event up to `seq` (already in the log). Never blocks.
    pub fn advance_to(&self, seq: Seq) {
        self.shared.target.fetch_max(seq.0, Ordering::AcqRel);
        if !self.shared.is_queued.swap(true, Ordering::AcqRel) {
            let _ = worker().send(Arc::downgrade(&self.shared));
        }
    }

    /// Runs `read` on the screen with every event up to the target applied.
    pub fn read<T>(&self, read: impl FnOnce(&Screen) -> T) -> T {
        let mut inner = self.shared.lock();
        let target = Seq(self.shared.target.load(Ordering::Acquire));
        inner.apply(target, usize::MAX);
        read(&inner.screen)
    }

    pub fn view(&self) -> ScreenView {
        self.read(Screen::view)
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The background thread's inbox: screens behind their target.
fn worker() -> &'static mpsc::Sender<Weak<Shared>> {
    static WORKER: OnceLock<mpsc::Sender<Weak<Shared>>> = OnceLock::new();
    WORKER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Weak<Shared>>();
        let requeue = tx.clone();
        let spawned = std::thread::Builder::new()
            .name("ptyhub-screen".to_owned())
            .spawn(move || {
                #[allow(unsafe_code, reason = "thread scheduling calls have no safe wrapper")]
                // SAFETY: scheduling calls on this thread's own id (Linux applies both per
                // thread): SCHED_IDLE runs it only on otherwise idle CPU time; the nice value
                // is the fallback where SCHED_IDLE is refused.
                unsafe {
                    let tid = libc::syscall(libc::SYS_gettid) as libc::pid_t;
                    let param = libc::sched_param { sched_priority: 0 };
                    if libc::sched_setscheduler(tid, libc::SCHED_IDLE, &param) != 0 {
                        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, WORKER_NICE);
                    }
                }
                while let Ok(weak) = rx.recv() {
                    let Some(shared) = weak.upgrade() else {
                        continue;
                    };
                    let target = Seq(shared.target.load(Ordering::Acquire));
                    let (applied, is_stuck) = {
                        let mut inner = shared.lock();
                        let before = inner.applied();
                        inner.apply(target, SLICE_BYTES);
                        (inner.applied(), inner.applied() == before)
                    };
                    if applied >= target || is_stuck {
                        // Done, or the log cannot be read now (a later advance or read retries).
                        shared.is_queued.store(false, Ordering::Release);
                        // An advance between the load and the store must not be lost.
                        let newer = shared.target.load(Ordering::Acquire) > applied.0;
                        if newer && !is_stuck && !shared.is_queued.swap(true, Ordering::AcqRel) {
                            let _ = requeue.send(weak);
                        }
                    } else {
                        let _ = requeue.send(weak);
                    }
                }
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "no background screen thread; screens are updated on read");
        }
        tx
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event_log::{
        EVENT_LOG_KEEP_BYTES, EVENT_LOG_KEEP_MIN_BYTES, EventLog, list_segments,
    };

    #[test]
    fn reads_see_every_event_up_to_the_target() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut log = EventLog::open(dir.path(), EVENT_LOG_KEEP_BYTES)?;
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

        let screen = SharedScreen::new(&TerminalLog::in_dir(dir.path()), 20, 4);
        screen.advance_to(last);
        assert_eq!(screen.view().lines[2], "line 99");
        screen.advance_to(target);
        let view = screen.view();
        assert_eq!(view.cols, 30);
        assert_eq!(view.lines[view.lines.len() - 2], "line 99");
        assert_eq!(view.lines[view.lines.len() - 1], "last");
        Ok(())
    }

    #[test]
    fn a_screen_follows_the_log_across_rotations() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut log = EventLog::open(dir.path(), EVENT_LOG_KEEP_MIN_BYTES)?;
        let screen = SharedScreen::new(&TerminalLog::in_dir(dir.path()), 40, 3);
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
