//! Keeps VT emulation off the output path: the screen is one more reader of the event log.
//!
//! Emulating a screen costs several times what reading the PTY does (rust-stack.md §2.2,
//! bench/), so a terminal's actor never feeds its emulator inline. It only raises the `seq` the
//! screen must reach; the screen reads the terminal's `events.jsonl` from its own offset and
//! applies output and resize events up to that `seq`. One background thread at a lower CPU
//! priority advances the screens of all terminals; whoever reads a screen first applies what is
//! still missing, under the same lock, so every read sees exactly the events the actor had
//! applied before it. Nothing is queued in memory, so a flood costs no memory, only a screen
//! that catches up later.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak, mpsc};

use ptyhub_protocol::event::{Event, EventKind, Seq};

use crate::holder::log::parse_seq_prefix;
use crate::screen::{Screen, ScreenView};

/// The background thread applies at most this much log of one terminal before moving on.
const SLICE_BYTES: usize = 256 * 1024;
/// Nice value of the background thread (lower priority than the output path).
const WORKER_NICE: i32 = 10;

struct Inner {
    screen: Screen,
    path: std::path::PathBuf,
    log: Option<File>,
    /// Log offset of the first event not applied yet.
    offset: u64,
    applied: Seq,
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
    /// Applies log events up to `target`, reading at most about `budget` bytes.
    fn apply(&mut self, target: Seq, budget: usize) {
        let mut read = 0;
        let mut buf = Vec::new();
        if self.log.is_none() {
            self.log = File::open(&self.path).ok();
        }
        let Some(log) = self.log.as_ref() else {
            return;
        };
        while self.applied < target && read < budget {
            buf.resize(SLICE_BYTES.min(budget - read).max(64 * 1024), 0);
            let n = match log.read_at(&mut buf, self.offset) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let mut consumed = 0;
            let mut progressed = false;
            for line in buf[..n].split_inclusive(|&b| b == b'\n') {
                if line.last() != Some(&b'\n') {
                    break;
                }
                let seq = parse_seq_prefix(line);
                if seq.is_some_and(|seq| seq > target) {
                    break;
                }
                consumed += line.len();
                progressed = true;
                if let Some(seq) = seq
                    && seq > self.applied
                {
                    self.applied = seq;
                    if let Ok(event) = Event::from_json_line(line) {
                        apply_event(&mut self.screen, event);
                    }
                }
                if self.applied >= target {
                    break;
                }
            }
            if !progressed {
                if n == buf.len() {
                    // One line longer than the buffer: read it whole next time.
                    let mut line = Vec::new();
                    let mut file = log;
                    let _ = std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(self.offset));
                    let _ = std::io::BufRead::read_until(
                        &mut std::io::BufReader::new(file),
                        b'\n',
                        &mut line,
                    );
                    if line.last() == Some(&b'\n') {
                        self.offset += line.len() as u64;
                        if let Ok(event) = Event::from_json_line(&line) {
                            self.applied = event.seq;
                            apply_event(&mut self.screen, event);
                        }
                        continue;
                    }
                }
                return;
            }
            self.offset += consumed as u64;
            read += consumed;
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
    /// A screen of `cols`×`rows` that follows the log at `events`.
    pub fn new(events: &Path, cols: u16, rows: u16) -> Self {
        Self {
            shared: Arc::new(Shared {
                target: AtomicU64::new(0),
                is_queued: AtomicBool::new(false),
                inner: Mutex::new(Inner {
                    screen: Screen::new(cols, rows),
                    path: events.to_path_buf(),
                    log: None,
                    offset: 0,
                    applied: Seq::ZERO,
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
                        let before = inner.applied;
                        inner.apply(target, SLICE_BYTES);
                        (inner.applied, inner.applied == before)
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
    use crate::holder::log::EventLog;

    #[test]
    fn reads_see_every_event_up_to_the_target() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("events.jsonl");
        let mut log = EventLog::open(&path)?;
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

        let screen = SharedScreen::new(&path, 20, 4);
        screen.advance_to(last);
        assert_eq!(screen.view().lines[2], "line 99");
        screen.advance_to(target);
        let view = screen.view();
        assert_eq!(view.cols, 30);
        assert_eq!(view.lines[view.lines.len() - 2], "line 99");
        assert_eq!(view.lines[view.lines.len() - 1], "last");
        Ok(())
    }
}
