//! The holder's single-threaded `poll` loop. See the module docs of [`super`].

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};

use ptyhub_protocol::event::{CommandNote, EventKind};
use ptyhub_protocol::holder::{HolderMessage, HolderRequest, HolderStatus};

use rustix::process::Signal;

use super::HolderSpec;
use super::clients::{self, Client};
use super::log_writer::{self, LogWriter};
use super::pty;
use crate::cgroup::{
    self,
    tree::{Joiner, OomWatch},
};
use crate::event_log::EventLog;
use crate::process;
use crate::state_dir::{self, TerminalMeta, TerminalState};
use crate::typing_counter::TypingCounter;

/// Most bytes read from the master before the loop serves clients again (one log event).
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// The buffer a read of the master starts with: the line discipline hands a reader at most
/// this much at a time.
const FIRST_READ_BYTES: usize = 4096;
/// Most chunks of output a `status` answer drains from the master first (a flood goes on in
/// the loop; its facts mean nothing anyway).
const STATUS_DRAIN_CHUNKS: usize = 4;
/// Input queued for the PTY beyond this is refused (the program is not reading).
const INPUT_QUEUE_MAX_BYTES: usize = 16 * 1024 * 1024;
/// After `SIGHUP`, processes of an ending terminal get this long before `SIGKILL`.
const END_GRACE: Duration = Duration::from_millis(1500);
/// After the exit is recorded, subscribers get this long to read the last events.
const LINGER: Duration = Duration::from_secs(2);
/// The working directory is re-read at most this often while output flows.
const CWD_CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long what typed input without a receipt brought (its events, the answer nobody waits
/// for) may wait for the output it causes, so that the server wakes once for both.
const QUIET_INPUT_HOLD: Duration = Duration::from_millis(2);
/// How long output that shows no prompt (no command end, no prompt mark, no line editor
/// taking input) may wait for more after it was read, before it is served: an exec's echo,
/// its start mark and its output reach the server in one wake-up with the end mark that
/// follows them within a fraction of this, and a flood is served in batches.
const OUTPUT_HOLD: Duration = Duration::from_millis(1);
/// Output held beyond this is served at once (a flood's batch is big enough already, and what
/// was logged since the last serve is still in memory).
const SERVE_AT_ONCE_BYTES: usize = 16 * 1024;
/// How long a sandbox (bwrap) may take to start the shell inside it.
const GUEST_SHELL_WAIT: Duration = Duration::from_secs(5);
/// The shell's depth under bwrap: bwrap, its pid-namespace init, then the shell.
const GUEST_SHELL_DEPTH: usize = 2;

enum Phase {
    Running,
    /// Ending every process of the terminal; `killed` once SIGKILL was sent.
    Ending {
        since: Instant,
        killed: bool,
    },
    /// The exit is recorded; serving the last events until `until`.
    Done {
        until: Instant,
    },
}

pub(super) struct Holder {
    spec: HolderSpec,
    meta: TerminalMeta,
    log: LogWriter,
    master: Option<OwnedFd>,
    listener: UnixListener,
    signals: OwnedFd,
    child: u32,
    /// The terminal's shell: the child, or for a sandbox the shell bwrap runs inside it.
    shell: u32,
    child_status: Option<(Option<i32>, Option<i32>)>,
    clients: Vec<Client>,
    input: VecDeque<u8>,
    phase: Phase,
    last_cwd_check: Instant,
    /// Until when subscribers are not served: typed input without a receipt waits for the
    /// output it causes, a little output that shows no prompt for more ([`OUTPUT_HOLD`]).
    hold_until: Option<Instant>,
    /// A request the server waits for an answer to was handled: subscribers are served now.
    is_serve_due: bool,
    /// Output bytes logged since the subscribers were last served.
    held_output: usize,
    /// Output logged since the subscribers were last served is served at once: it shows a
    /// prompt ([`shows_prompt`]) or the end of the PTY, or there is a lot of it.
    is_output_due: bool,
    /// A command's note (its working directory read already) waiting for the input that
    /// types the command: logged right after that input reached the program, ahead of it, so
    /// the program gets the command without waiting for the note's write to the log.
    note: Option<CommandNote>,
    /// The counter a server typing into the PTY itself bumps for each `typed` record it sent
    /// (on the connection it asked `master` on), once the master was handed out.
    typing: Option<TypingCounter>,
    /// The counter's value when the typing connections were last read.
    typed_seen: u64,
    /// Whether buffers were allocated since the heap was last trimmed.
    has_heap_activity: bool,
    /// When the cgroup's out-of-memory count was last read.
    oom: OomWatch,
}

impl Holder {
    /// Opens everything and starts the program. Any error here is reported on the ready line.
    pub(super) fn start(mut spec: HolderSpec) -> io::Result<Self> {
        let mut meta = spec.take_meta()?;
        let log = LogWriter::new(EventLog::open(&spec.dir, spec.event_log_keep)?);
        let signals = block_signals()?;
        rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
        let _ = std::fs::remove_file(&spec.socket);
        let listener = UnixListener::bind(&spec.socket)?;
        std::fs::set_permissions(&spec.socket, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        let (master, slave) = pty::open_pair(spec.cols, spec.rows)?;
        let joiner = meta.cgroup.as_ref().map(Joiner::open).transpose()?;
        let child = pty::spawn(&spec, slave, joiner.as_ref())?;
        drop(joiner);
        // The program has it: not kept for the holder's life.
        spec.rc_text = None;
        let shell = if spec.sandbox.is_some() {
            guest_shell(child)
        } else {
            child
        };

        meta.state = TerminalState::Running;
        meta.holder_pid = Some(std::process::id());
        meta.pid = Some(shell);
        meta.exit_code = None;
        meta.signal = None;
        meta.ended_at = None;
        meta.closed = false;
        meta.cols = spec.cols;
        meta.rows = spec.rows;
        // Flushed once the server has been told the holder is ready (`HolderLoop::run`).
        state_dir::write_meta_unflushed(&spec.dir, &meta)?;
        let mut holder = Self {
            spec,
            meta,
            log,
            master: Some(master),
            listener,
            signals,
            child,
            shell,
            child_status: None,
            clients: Vec::new(),
            input: VecDeque::new(),
            phase: Phase::Running,
            last_cwd_check: Instant::now(),
            hold_until: None,
            note: None,
            typing: None,
            typed_seen: 0,
            is_serve_due: false,
            held_output: 0,
            is_output_due: false,
            has_heap_activity: true,
            oom: OomWatch::default(),
        };
        let start = EventKind::Start {
            instance: holder.meta.instance,
            pid: shell,
            command: holder.meta.command.clone(),
            cols: holder.spec.cols,
            rows: holder.spec.rows,
        };
        holder.log.append_now(start)?;
        Ok(holder)
    }

    pub(super) fn child_pid(&self) -> u32 {
        self.shell
    }

    pub(super) fn dir(&self) -> &std::path::Path {
        &self.spec.dir
    }

    /// Serves until the terminal has ended and its last events were delivered.
    pub(super) fn run(&mut self) {
        loop {
            if let Phase::Done { until } = self.phase
                && !self.log.is_stalled()
                && (Instant::now() >= until || self.clients.iter().all(|c| self.is_caught_up(c)))
            {
                break;
            }
            self.poll_once();
            self.advance_ending();
        }
        let _ = std::fs::remove_file(&self.spec.socket);
    }

    fn is_caught_up(&self, client: &Client) -> bool {
        client.is_caught_up(self.log.len())
    }

    fn poll_once(&mut self) {
        use rustix::event::{PollFd, PollFlags};
        let readable = PollFlags::IN;
        let mut fds = vec![
            PollFd::new(&self.signals, readable),
            PollFd::new(&self.listener, readable),
        ];
        let is_stalled = self.log.is_stalled();
        let master_slot = self.master.as_ref().filter(|_| !is_stalled).map(|master| {
            let mut events = readable;
            if !self.input.is_empty() {
                events |= PollFlags::OUT;
            }
            fds.push(PollFd::new(master, events));
            fds.len() - 1
        });
        let first_client = fds.len();
        // While held, what waits for the subscribers waits (their sockets take it at once,
        // which would end the wait at once).
        let is_hold_wait = self.hold_until.is_some();
        for client in &self.clients {
            // A typing connection's requests do not wake the holder: they are read when the
            // typing counter moved, before output is logged and at every wake-up.
            let mut events = if client.is_typist {
                PollFlags::empty()
            } else {
                readable
            };
            if client.pending() > 0 && !is_hold_wait {
                events |= PollFlags::OUT;
            }
            fds.push(PollFd::new(&client.stream, events));
        }
        let held_for = self.hold_until.map_or(Duration::ZERO, |until| {
            until.saturating_duration_since(Instant::now())
        });
        let timeout = match self.phase {
            _ if is_hold_wait => rustix::event::Timespec {
                tv_sec: i64::try_from(held_for.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(held_for.subsec_nanos()),
            },
            Phase::Running if is_stalled => rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: i64::from(log_writer::RETRY_EVERY.subsec_nanos()),
            },
            Phase::Running => rustix::event::Timespec {
                tv_sec: 1,
                tv_nsec: 0,
            },
            Phase::Ending { .. } | Phase::Done { .. } => rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 50_000_000,
            },
        };
        let Ok(n) = rustix::event::poll(&mut fds, Some(&timeout)) else {
            return; // EINTR: go round again.
        };
        let revents: Vec<PollFlags> = fds.iter().map(PollFd::revents).collect();
        drop(fds);
        let is_ready =
            |flags: PollFlags| flags.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR);
        if n == 0 && !is_hold_wait && self.has_heap_activity {
            clients::release_idle_buffers(&mut self.clients);
            self.log.forget_recent();
            if self.input.is_empty() {
                self.input = VecDeque::new();
            }
            // Idle: hand the buffers of the last burst back to the system, so an idle holder
            // stays small (one per terminal).
            crate::memory::hand_back_idle_memory();
            self.has_heap_activity = false;
        }
        if !revents[0].is_empty() {
            self.handle_signals();
        }
        if !revents[1].is_empty() {
            self.accept_clients();
        }
        // Typed bytes that caused no output (yet) are logged at the next wake-up, the idle
        // second's at the latest.
        if self.has_typed_since_seen() {
            self.read_typists();
        }
        let mut has_output = false;
        if let Some(slot) = master_slot {
            if revents[slot].contains(PollFlags::OUT) {
                self.write_input();
            }
            if is_ready(revents[slot]) {
                has_output = self.read_master();
            }
        }
        for (i, &flags) in revents[first_client..].iter().enumerate() {
            if is_ready(flags) {
                self.read_client(i);
            }
        }
        // What typed input without a receipt brought waits for its output (QUIET_INPUT_HOLD
        // at most), so the server wakes once for both, and a little output that shows no
        // prompt waits for more (OUTPUT_HOLD at most); output that shows one, a lot of it, and
        // anything a client waits for, is served now.
        if has_output && !self.is_output_due {
            let soon = Instant::now() + OUTPUT_HOLD;
            self.hold_until = Some(self.hold_until.map_or(soon, |until| until.min(soon)));
        }
        let is_held = !self.is_output_due
            && !self.is_serve_due
            && self.hold_until.is_some_and(|until| Instant::now() < until);
        if !is_held {
            self.hold_until = None;
            self.is_serve_due = false;
            self.serve_clients();
        }
        if matches!(self.phase, Phase::Running) && self.last_cwd_check.elapsed() >= CWD_CHECK_EVERY
        {
            self.refresh_cwd();
        }
        self.check_oom(false);
    }

    /// Logs a `cgroup.oom` event when the cgroup's out-of-memory count rose (`is_due` reads it
    /// now, else at most every `OOM_CHECK_EVERY`).
    fn check_oom(&mut self, is_due: bool) {
        let Some(record) = self.meta.cgroup.as_mut() else {
            return;
        };
        if let Some(event) = self.oom.check(record, is_due) {
            self.log.append(event);
            if let Err(error) = state_dir::write_meta(&self.spec.dir, &self.meta) {
                log_line!("holder: cannot write meta.json: {error}");
            }
        }
    }

    /// Notes how many processes the end of the terminal must end (for its info).
    fn note_ending(&mut self) {
        if let Some(record) = self.meta.cgroup.as_mut() {
            cgroup::tree::note_ending(record);
        }
    }

    fn handle_signals(&mut self) {
        let mut info = [0u8; std::mem::size_of::<libc::signalfd_siginfo>()];
        let mut wants_end = false;
        loop {
            // Whole siginfo records only: the buffer is exactly one.
            match rustix::io::read(&self.signals, &mut info) {
                Ok(n) if n == info.len() => {}
                _ => break,
            }
            let signo = u32::from_ne_bytes([info[0], info[1], info[2], info[3]]) as i32;
            if signo == libc::SIGTERM || signo == libc::SIGINT {
                wants_end = true;
            }
        }
        self.reap_children();
        if wants_end {
            self.begin_ending();
        }
    }

    fn reap_children(&mut self) {
        use rustix::process::{WaitOptions, wait};
        // `wait` is `waitpid(-1)`: any child, whatever its process group.
        while let Ok(Some((pid, status))) = wait(WaitOptions::NOHANG) {
            if pid.as_raw_nonzero().get().unsigned_abs() != self.child {
                continue;
            }
            let decoded = if status.exited() {
                (status.exit_status(), None)
            } else if status.signaled() {
                (None, status.terminating_signal())
            } else {
                continue;
            };
            self.child_status = Some(decoded);
            if matches!(self.phase, Phase::Running) {
                self.note_ending();
                self.phase = Phase::Ending {
                    since: Instant::now(),
                    killed: false,
                };
                self.signal_remaining(Signal::HUP);
            }
        }
    }

    /// Starts ending the terminal: hang up every process, kill what is left after a grace.
    fn begin_ending(&mut self) {
        if matches!(self.phase, Phase::Running) {
            self.note_ending();
            self.phase = Phase::Ending {
                since: Instant::now(),
                killed: false,
            };
            self.signal_remaining(Signal::HUP);
        }
    }

    fn signal_remaining(&self, signal: Signal) {
        for pid in process::descendants(std::process::id()) {
            process::kill(pid, signal);
            if signal == Signal::HUP {
                // A stopped process must run to see its hangup.
                process::kill(pid, Signal::CONT);
            }
        }
    }

    fn advance_ending(&mut self) {
        let Phase::Ending { since, killed } = self.phase else {
            return;
        };
        self.reap_children();
        let remaining: Vec<u32> = process::descendants(std::process::id())
            .into_iter()
            .filter(|&pid| process::is_alive(pid))
            .collect();
        if self.child_status.is_some() && remaining.is_empty() {
            self.finish();
        } else if !killed && since.elapsed() >= END_GRACE {
            self.signal_remaining(Signal::KILL);
            if let Some(record) = &self.meta.cgroup {
                cgroup::tree::kill_all(record);
            }
            self.phase = Phase::Ending {
                since,
                killed: true,
            };
        }
    }

    /// Records the exit once every process is gone and the PTY is drained.
    fn finish(&mut self) {
        while self.master.is_some() && self.read_master() {}
        self.master = None;
        self.input.clear();
        if self.log.is_stalled() {
            // Output still waits for the log: the exit follows it once it is written.
            return;
        }
        // Every process of the terminal is gone: its cgroup goes too, after a last look at
        // its out-of-memory count.
        self.check_oom(true);
        if let Some(record) = self.meta.cgroup.as_mut() {
            cgroup::tree::teardown(record);
        }
        // So does a sandbox's writable layer: no process is left to see it.
        if let Some(guest) = &self.spec.sandbox {
            super::root_layer::remove(guest);
        }
        let (exit_code, signal) = self.child_status.unwrap_or((None, None));
        self.log.append(EventKind::Exit { exit_code, signal });
        self.meta.state = TerminalState::Exited;
        self.meta.exit_code = exit_code;
        self.meta.signal = signal;
        self.meta.ended_at = Some(state_dir::unix_now());
        if let Err(error) = state_dir::write_meta(&self.spec.dir, &self.meta) {
            log_line!("holder: cannot write meta.json: {error}");
        }
        self.phase = Phase::Done {
            until: Instant::now() + LINGER,
        };
    }

    /// Reads what the master has (up to one chunk) into one log event, counting it as held
    /// until the next serve. Returns whether bytes were read; drops the master on EOF (`EIO`
    /// once no process holds the slave).
    fn read_master(&mut self) -> bool {
        let Some(master) = self.master.as_ref() else {
            return false;
        };
        if self.log.is_stalled() {
            // The log refuses appends: the output stays in the PTY, holding the program back.
            return false;
        }
        // Read into the spare capacity of a buffer the size of the line discipline's (what one
        // read gives at most), grown only while a flood fills it: an interactive step's few
        // bytes, or a look that finds nothing, cost no 64 KiB from the heap.
        let mut buf = Vec::with_capacity(FIRST_READ_BYTES);
        let mut is_closed = false;
        while buf.len() < READ_CHUNK_BYTES {
            if buf.len() == buf.capacity() {
                buf.reserve_exact(buf.capacity().min(READ_CHUNK_BYTES - buf.len()));
            }
            match rustix::io::read(master, rustix::buffer::spare_capacity(&mut buf)) {
                Ok(0) => {
                    is_closed = true;
                    break;
                }
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => break,
                Err(_) => {
                    is_closed = true;
                    break;
                }
            }
        }
        if is_closed {
            self.master = None;
        }
        if buf.is_empty() {
            return false;
        }
        self.has_heap_activity = true;
        buf.shrink_to_fit();
        // A server typing into the PTY itself sends `typed` and bumps the counter before it
        // writes: what came on its connection is logged before what was read, which may be
        // the bytes' echo.
        if self.has_typed_since_seen() {
            self.read_typists();
        }
        self.held_output += buf.len();
        self.is_output_due |=
            is_closed || self.held_output >= SERVE_AT_ONCE_BYTES || shows_prompt(&buf);
        self.log.append(EventKind::Output { data: buf });
        true
    }

    /// Whether a server typed since the typing connections were last read (the counter moved);
    /// no system call.
    fn has_typed_since_seen(&mut self) -> bool {
        let Some(counter) = self.typing.as_ref() else {
            return false;
        };
        let now = counter.get();
        let has_moved = now != self.typed_seen;
        self.typed_seen = now;
        has_moved
    }

    /// Handles what the typing connections sent (notes and `typed` requests only:
    /// `handle_request` refuses anything else there, so nothing read there reads the PTY).
    fn read_typists(&mut self) {
        for i in 0..self.clients.len() {
            if self.clients[i].is_typist {
                self.read_client(i);
            }
        }
    }

    /// Logs bytes the server wrote to the PTY itself (after the note before them); their
    /// events go out with the output they cause, as a typed exec's do.
    fn log_typed(&mut self, data: &[u8], source: Option<&ptyhub_protocol::event::InputSource>) {
        let is_hidden = self.master.as_ref().is_some_and(pty::hides_input);
        self.log_note();
        clients::log_input(&mut self.log, data, source, is_hidden);
        self.hold_until
            .get_or_insert_with(|| Instant::now() + QUIET_INPUT_HOLD);
    }

    fn write_input(&mut self) {
        let Some(master) = self.master.as_ref() else {
            self.input.clear();
            return;
        };
        while !self.input.is_empty() {
            let (head, _) = self.input.as_slices();
            match rustix::io::write(master, head) {
                Ok(n) => {
                    self.input.drain(..n);
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => break,
            }
        }
    }

    /// Discards typed input no program has read: the holder's queue and the terminal's input
    /// queue. Returns how many bytes were discarded.
    fn discard_unread(&mut self) -> u64 {
        let queued = self.input.len() as u64;
        self.input.clear();
        let unread = self.master.as_ref().and_then(pty::discard_unread_input);
        queued + unread.unwrap_or(0)
    }

    fn accept_clients(&mut self) {
        clients::accept(&self.listener, &mut self.clients);
    }

    fn read_client(&mut self, i: usize) {
        self.has_heap_activity = true;
        for line in clients::read_lines(&mut self.clients[i]) {
            match serde_json::from_slice::<HolderRequest>(&line) {
                Ok(request) => self.handle_request(i, request),
                Err(error) => self.clients[i].send_message(&HolderMessage::Error {
                    message: format!("bad request: {error}"),
                }),
            }
        }
        // A note no input followed (the server sends both in one write) is logged now.
        self.log_note();
    }

    /// Keeps a command's note for the input that types the command, its working directory
    /// read now, before the command is typed (after, the command's own `cd` could have run).
    /// A note on the typing connection comes with its directory: the server read it before it
    /// typed.
    fn hold_note(&mut self, mut note: CommandNote) {
        self.log_note();
        if note.cwd.is_none() {
            self.refresh_cwd();
            note.cwd = Some(self.meta.cwd.clone());
        }
        self.note = Some(note);
    }

    fn log_note(&mut self) {
        if let Some(note) = self.note.take() {
            self.log.append(EventKind::CommandNote(note));
        }
    }

    fn handle_request(&mut self, i: usize, request: HolderRequest) {
        if self.clients[i].is_typist
            && !matches!(
                request,
                HolderRequest::Note(_) | HolderRequest::Typed { .. }
            )
        {
            // Read from inside `read_master`: nothing here may read the PTY.
            self.clients[i].send_message(&HolderMessage::Error {
                message: "a typing connection takes notes and typed input only".to_owned(),
            });
            return;
        }
        if request.is_awaited() {
            self.is_serve_due = true;
        }
        let Some(request) =
            self.clients[i].answer_common(request, self.spec.protocol_claim, &self.log)
        else {
            return;
        };
        if !matches!(request, HolderRequest::Input { .. }) {
            // Whatever else comes, the note keeps its place before it.
            self.log_note();
        }
        match request {
            // Answered by `answer_common` above.
            HolderRequest::Hello { .. } | HolderRequest::Subscribe { .. } => {}
            HolderRequest::Master => {
                if self.typing.is_none() && self.master.is_some() {
                    match TypingCounter::create() {
                        Ok(counter) => self.typing = Some(counter),
                        Err(error) => log_line!("holder: no typing counter: {error}"),
                    }
                }
                let is_sent = match (
                    self.master.as_ref(),
                    self.typing.as_ref().and_then(TypingCounter::fd),
                ) {
                    (Some(master), Some(counter)) => self.clients[i]
                        .send_with_fds(&HolderMessage::Master, &[master.as_fd(), counter]),
                    _ => false,
                };
                if is_sent {
                    // This connection carries the server's typing from now on.
                    self.clients[i].is_typist = true;
                } else {
                    self.clients[i].send_message(&HolderMessage::Error {
                        message: "no PTY master to give: the program has exited".to_owned(),
                    });
                }
            }
            HolderRequest::Typed { data, source } => self.log_typed(&data, source.as_ref()),
            HolderRequest::Input {
                data,
                discard_unread,
                source,
                no_receipt,
                is_logged,
            } => {
                let is_running = self.master.is_some() && matches!(self.phase, Phase::Running);
                let discarded = (discard_unread && is_running).then(|| self.discard_unread());
                let refusal = if !is_running {
                    Some("the terminal's program has exited")
                } else if self.input.len() + data.len() > INPUT_QUEUE_MAX_BYTES {
                    Some("input queue full: the program is not reading its input")
                } else {
                    None
                };
                let mut written = 0;
                if refusal.is_none() {
                    // What the program printed before the input is logged before it, so the
                    // log keeps the order in which the terminal saw them.
                    for _ in 0..STATUS_DRAIN_CHUNKS {
                        if !self.read_master() {
                            break;
                        }
                    }
                    let is_hidden = self.master.as_ref().is_some_and(pty::hides_input);
                    let before = self.input.len();
                    self.input.extend(&data);
                    // The program gets the bytes first, then they are logged: the master is
                    // not read in between, so the log still has them before what they cause.
                    self.write_input();
                    self.log_note();
                    if !is_logged {
                        clients::log_input(&mut self.log, &data, source.as_ref(), is_hidden);
                    }
                    // What the PTY took of this request: all of it unless it still waits.
                    let left = self.input.len();
                    written = data.len().saturating_sub(left.saturating_sub(before));
                }
                let unread = if no_receipt {
                    if written > 0 {
                        // Its events and answer go with the output the bytes cause (unless
                        // an answer someone waits for is due: `poll_once` decides).
                        self.hold_until
                            .get_or_insert_with(|| Instant::now() + QUIET_INPUT_HOLD);
                    }
                    None
                } else {
                    self.master.as_ref().and_then(pty::unread_input)
                };
                self.clients[i].send_message(&HolderMessage::InputResult {
                    accepted: refusal.is_none(),
                    error: refusal.map(str::to_owned),
                    written: Some(written as u64),
                    pending: Some(self.input.len() as u64),
                    unread,
                    discarded,
                });
            }
            HolderRequest::Resize { cols, rows } => {
                if let Some(master) = self.master.as_ref()
                    && cols > 0
                    && rows > 0
                    && pty::set_size(master, cols, rows).is_ok()
                {
                    self.meta.cols = cols;
                    self.meta.rows = rows;
                    self.log.append(EventKind::Resize { cols, rows });
                }
            }
            HolderRequest::Signal { signal, spare_pgid } => {
                let message = self.signal_foreground(signal, spare_pgid);
                self.clients[i].send_message(&message);
            }
            HolderRequest::SignalStartedSince { signal, since } => {
                let mut pids = process::descendants(std::process::id());
                pids.retain(|&pid| pid != self.child && pid != self.shell);
                signal_started_since(&pids, signal, since);
            }
            HolderRequest::Note(note) => self.hold_note(note),
            HolderRequest::Status => {
                self.refresh_cwd();
                let mut status = self.status();
                // What the program wrote before the facts were read is logged before they are
                // answered, so `last_seq` covers it: a shell found reading at its prompt has
                // its command's end mark in the log (a reader compares the two).
                for _ in 0..STATUS_DRAIN_CHUNKS {
                    if !self.read_master() {
                        break;
                    }
                }
                status.last_seq = self.log.last_seq();
                self.clients[i].send_message(&HolderMessage::Status(status));
            }
            HolderRequest::Terminate => self.begin_ending(),
        }
    }

    fn foreground_pgid(&self) -> Option<u32> {
        let master = self.master.as_ref()?;
        let pgid = rustix::termios::tcgetpgrp(master).ok()?;
        u32::try_from(pgid.as_raw_nonzero().get()).ok()
    }

    fn signal_foreground(&self, signal: i32, spare_pgid: Option<u32>) -> HolderMessage {
        let Some(pgid) = self
            .foreground_pgid()
            .filter(|&pgid| Some(pgid) != spare_pgid)
        else {
            return HolderMessage::Signaled {
                pgid: None,
                program: None,
                error: Some("the terminal has no foreground process group".to_owned()),
            };
        };
        let Some(number) = rustix::process::Signal::from_named_raw(signal) else {
            return HolderMessage::Signaled {
                pgid: Some(pgid),
                program: None,
                error: Some(format!("invalid signal {signal}")),
            };
        };
        // Named before the signal: the program may be gone right after it.
        let program = process::comm(pgid);
        let sent = process::kill_group(pgid, number);
        HolderMessage::Signaled {
            pgid: Some(pgid),
            program,
            error: sent.err().map(|e| e.to_string()),
        }
    }

    fn status(&self) -> HolderStatus {
        let is_running = self.child_status.is_none() && self.master.is_some();
        let (foreground, process_count) = if is_running {
            process::terminal_facts(std::process::id(), self.shell)
        } else {
            (None, process::descendants(std::process::id()).len())
        };
        let foreground_pgid = foreground
            .as_ref()
            .map(|f| f.pgid)
            .or_else(|| self.foreground_pgid());
        HolderStatus {
            holder_pid: std::process::id(),
            child_pid: Some(self.shell),
            foreground_pgid,
            foreground_program: match &foreground {
                Some(f) => f.program.clone(),
                None => foreground_pgid.and_then(process::comm),
            },
            cwd: Some(self.meta.cwd.clone()),
            last_seq: self.log.last_seq(),
            exited: self.child_status.is_some(),
            is_reading: foreground.as_ref().is_some_and(|f| f.is_reading),
            is_canonical: foreground.as_ref().is_some_and(|f| f.is_canonical),
            is_echo: foreground.as_ref().is_some_and(|f| f.is_echo),
            process_count: u32::try_from(process_count).ok(),
            reader_program: foreground.as_ref().and_then(|f| f.reader.clone()),
            waits_on: foreground.as_ref().and_then(|f| f.waits_on),
            input_queued: foreground.as_ref().and_then(|f| f.input_queued),
        }
    }

    fn refresh_cwd(&mut self) {
        self.last_cwd_check = Instant::now();
        if let Some(cwd) = process::cwd(self.shell)
            && cwd != self.meta.cwd
        {
            self.meta.cwd = cwd;
            if let Err(error) = state_dir::write_meta(&self.spec.dir, &self.meta) {
                log_line!("holder: cannot write meta.json: {error}");
            }
        }
    }

    /// Tops up every subscriber from the log and writes what its socket takes.
    fn serve_clients(&mut self) {
        if self.log.is_stalled() {
            self.log.retry();
        }
        clients::announce_storage(&mut self.clients, &mut self.log);
        clients::serve(&mut self.clients, &self.log);
        self.log.forget_recent();
        self.held_output = 0;
        self.is_output_due = false;
    }
}

/// The shell a sandbox runs [`GUEST_SHELL_DEPTH`] levels under `bwrap` (its first process at
/// that depth), once it runs; `bwrap` itself when none appears in time (bwrap refused to start,
/// and its exit ends the terminal with its message in the log).
fn guest_shell(bwrap: u32) -> u32 {
    let since = Instant::now();
    while since.elapsed() < GUEST_SHELL_WAIT && process::is_alive(bwrap) {
        let mut level = vec![bwrap];
        for _ in 0..GUEST_SHELL_DEPTH {
            level = level
                .iter()
                .flat_map(|&pid| process::children(pid))
                .collect();
        }
        if let Some(&shell) = level.first() {
            return shell;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    bwrap
}

/// Sends `signal` to the processes of `pids` that started at `since` or later (the
/// `signal_started_since` request of both holder loops).
pub(super) fn signal_started_since(pids: &[u32], signal: i32, since: f64) {
    let Some(signal) = Signal::from_named_raw(signal) else {
        return;
    };
    for pid in process::started_since(pids, since) {
        process::kill(pid, signal);
    }
}

/// Blocks the signals the loop handles and returns a `signalfd` for them; ignores SIGHUP and
/// SIGPIPE (a holder outlives every terminal and socket it was started from).
pub(super) fn block_signals() -> io::Result<OwnedFd> {
    #[allow(unsafe_code, reason = "signal masks and signalfd have no safe wrapper")]
    // SAFETY: signal-mask and disposition calls on this single-threaded process with a
    // zero-initialized sigset_t filled by sigaddset.
    unsafe {
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        let mut mask: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut mask);
        for sig in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT] {
            libc::sigaddset(&mut mask, sig);
        }
        if libc::sigprocmask(libc::SIG_BLOCK, &mask, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = libc::signalfd(-1, &mask, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Whether output shows the shell at its prompt: a command's end or the prompt's mark (OSC
/// 133 `D` or `A`, whatever its nonce) or the line editor turning bracketed paste on, which
/// waiters act on at once. Other output may wait [`OUTPUT_HOLD`] for more.
fn shows_prompt(bytes: &[u8]) -> bool {
    memchr::memmem::find_iter(bytes, b"\x1b]133;")
        .any(|at| matches!(bytes.get(at + 6), Some(b'A' | b'D')))
        || memchr::memmem::find(bytes, b"\x1b[?2004h").is_some()
}

#[cfg(test)]
mod tests {
    use super::shows_prompt;

    /// A command's end, the prompt's mark and the line editor's bracketed paste are served at
    /// once; a command's echo, its start mark and its output may wait for more.
    #[test]
    fn only_what_shows_a_prompt_is_served_at_once() {
        for shown in [
            &b"hi\r\n\x1b]133;D;0;k=n0nce\x07\x1b]133;A;k=n0nce\x07"[..],
            b"\x1b]133;A;k=x\x07$ ",
            b"$ \x1b[?2004h",
            b"\x1b]133;D\x07",
        ] {
            assert!(shows_prompt(shown), "{shown:?}");
        }
        for held in [
            &b"echo hi"[..],
            b"\r\n\x1b[?2004l\r",
            b"\x1b]133;C;k=n0nce\x07hi\r\n",
            b"\x1b]133;",
            b"\x1b]133;B",
            b"\x1b[?2004",
            b"",
        ] {
            assert!(!shows_prompt(held), "{held:?}");
        }
    }
}
