//! The holder's loop for a terminal hosted in tmux: instead of owning a PTY it runs one tmux
//! control-mode client (`tmux -S <socket> -C …`) over pipes and speaks the same holder
//! protocol, so the actor cannot tell it from the PTY loop. It owns the tmux session's
//! lifetime and the terminal's log; it does not draw anything (tmux does, for a person who
//! attaches).
//!
//! Flow at a glance:
//! 1. [`ControlHolder::start`] opens the log and the socket, starts the control client with
//!    one command list that starts a private tmux server, sets its options (the terminal's
//!    `TERM`, `remain-on-exit` so the exit status can be read, a manual window size so a person
//!    attaching does not resize the agent's terminal) and creates the session, then learns the
//!    pane's id and pid;
//! 2. the loop decodes `%output` lines of that pane into `pty.output` events (the pane's raw
//!    bytes, shell-integration marks included), writes input with `send-keys -H`, resizes with
//!    `resize-window`, answers `status` with process facts of the pane's process tree, and
//!    signals the pane's foreground process group;
//! 3. when the pane's program exits (a `pidfd` tells), its status is read from
//!    `pane_dead_status`; then, as on `terminate`, the tmux server is killed, every remaining
//!    process of the terminal is ended (hangup, then kill after a grace), and the exit is
//!    recorded as the PTY loop records it.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};

use ptyhub_protocol::api::TmuxTarget;
use ptyhub_protocol::event::EventKind;
use ptyhub_protocol::holder::{HolderMessage, HolderRequest, HolderStatus};
use rustix::process::Signal;

use super::clients::{self, Client};
use super::control_client::{Control, decode_output, spawn_control};
use super::log_writer::{self, LogWriter};
use super::{HolderSpec, TmuxSpec};
use crate::cgroup::{
    self,
    tree::{Joiner, OomWatch},
};
use crate::event_log::EventLog;
use crate::process;
use crate::state_dir::{self, TerminalMeta, TerminalState};

/// Most output bytes in one log event.
const OUTPUT_EVENT_MAX_BYTES: usize = 64 * 1024;
/// Most bytes read from the control client before the loop serves clients again.
const READ_BATCH_BYTES: usize = 256 * 1024;
/// Input bytes per `send-keys` command (each byte is three characters of the command line).
const SEND_KEYS_CHUNK_BYTES: usize = 512;
/// How long tmux may take to start the session and report its pane.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// After `SIGHUP`, processes of an ending terminal get this long before `SIGKILL`.
const END_GRACE: Duration = Duration::from_millis(1500);
/// After the exit is recorded, subscribers get this long to read the last events.
const LINGER: Duration = Duration::from_secs(2);
/// The working directory is re-read at most this often while output flows.
const CWD_CHECK_EVERY: Duration = Duration::from_secs(1);
/// How often a dead pane's status is asked for again while tmux has not noticed the death.
const DEAD_QUERY_EVERY: Duration = Duration::from_millis(50);
/// How long after the pane's program exited tmux may take to tell its status.
const DEAD_STATUS_PATIENCE: Duration = Duration::from_secs(15);

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

/// What the answer to one of our control commands is for, in the order they were sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reply {
    Ignore,
    PaneInfo,
    DeadStatus,
}

/// A `%begin` … `%end` block being read.
struct Block {
    number: String,
    /// Whether the command was ours (flag 1); tmux's own (the start-up list) are skipped.
    is_ours: bool,
    lines: Vec<String>,
}

#[derive(Clone, Debug)]
struct Pane {
    /// tmux's id, like `%0`.
    id: String,
    pid: u32,
}

pub(super) struct ControlHolder {
    spec: HolderSpec,
    tmux: TmuxSpec,
    meta: TerminalMeta,
    log: LogWriter,
    listener: UnixListener,
    signals: OwnedFd,
    clients: Vec<Client>,
    control: Option<Control>,
    pane: Option<Pane>,
    /// Readable once the pane's program exited.
    pane_exit: Option<OwnedFd>,
    is_pane_exited: bool,
    /// When the pane's program was seen to exit.
    exited_at: Option<Instant>,
    /// When the dead pane's status was last asked for (one question at a time).
    dead_query: Option<Instant>,
    replies: VecDeque<Reply>,
    block: Option<Block>,
    /// Decoded output not yet appended (one event per read batch).
    output: Vec<u8>,
    /// Whether output may be appended (after the start event).
    is_started: bool,
    phase: Phase,
    child_status: Option<(Option<i32>, Option<i32>)>,
    last_cwd_check: Instant,
    has_heap_activity: bool,
    /// When the cgroup's out-of-memory count was last read.
    oom: OomWatch,
}

impl ControlHolder {
    /// Opens everything and starts (or attaches to) the tmux session. Any error here is
    /// reported on the ready line.
    pub(super) fn start(mut spec: HolderSpec) -> io::Result<Self> {
        let tmux = spec
            .tmux
            .clone()
            .ok_or_else(|| io::Error::other("the spec names no tmux session"))?;
        let meta = spec.take_meta()?;
        let log = LogWriter::new(EventLog::open(&spec.dir, spec.event_log_keep)?);
        let signals = super::event_loop::block_signals()?;
        rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
        let _ = std::fs::remove_file(&spec.socket);
        let listener = UnixListener::bind(&spec.socket)?;
        std::fs::set_permissions(&spec.socket, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        // A new session's tmux server is started by the control client: both join the
        // terminal's cgroup (a reattached server is in it already).
        let joiner = match &meta.cgroup {
            Some(record) if !tmux.is_reattach => Some(Joiner::open(record)?),
            _ => None,
        };
        let control = spawn_control(&spec, &tmux, joiner.as_ref())?;
        drop(joiner);
        let mut holder = Self {
            spec,
            tmux,
            meta,
            log,
            listener,
            signals,
            clients: Vec::new(),
            control: Some(control),
            pane: None,
            pane_exit: None,
            is_pane_exited: false,
            exited_at: None,
            dead_query: None,
            replies: VecDeque::new(),
            block: None,
            output: Vec::new(),
            is_started: false,
            phase: Phase::Running,
            child_status: None,
            last_cwd_check: Instant::now(),
            has_heap_activity: true,
            oom: OomWatch::default(),
        };
        match holder.begin() {
            Ok(()) => Ok(holder),
            Err(error) => {
                // A session that never became a terminal is not left behind (one that a
                // reattach could not follow is left to the next try).
                if !holder.tmux.is_reattach {
                    holder.signal_remaining(Signal::KILL);
                }
                Err(error)
            }
        }
    }

    /// Learns the pane, records the running terminal and appends its start.
    fn begin(&mut self) -> io::Result<()> {
        let target = format!("={}:", self.tmux.session);
        self.command(
            &format!("display-message -p -t {target} '#{{pane_id}} #{{pane_pid}}'"),
            Reply::PaneInfo,
        );
        let deadline = Instant::now() + START_TIMEOUT;
        while self.pane.is_none() {
            if self.control.is_none() {
                return Err(io::Error::other(
                    "tmux ended before the session started (see holder.log)",
                ));
            }
            if Instant::now() >= deadline {
                return Err(io::Error::other("tmux did not start the session in time"));
            }
            self.wait_for_control(Duration::from_millis(100));
        }
        let pane = self
            .pane
            .clone()
            .ok_or_else(|| io::Error::other("no pane"))?;
        self.pane_exit = Some(rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(i32::try_from(pane.pid).unwrap_or(-1))
                .ok_or_else(|| io::Error::other("the pane has no pid"))?,
            rustix::process::PidfdFlags::empty(),
        )?);
        self.meta.state = TerminalState::Running;
        self.meta.holder_pid = Some(std::process::id());
        self.meta.pid = Some(pane.pid);
        self.meta.exit_code = None;
        self.meta.signal = None;
        self.meta.ended_at = None;
        self.meta.closed = false;
        self.meta.cols = self.spec.cols;
        self.meta.rows = self.spec.rows;
        self.meta.tmux = Some(TmuxTarget {
            socket: self.tmux.socket.to_string_lossy().into_owned(),
            session: self.tmux.session.clone(),
        });
        // Flushed once the server has been told the holder is ready (`HolderLoop::run`).
        state_dir::write_meta_unflushed(&self.spec.dir, &self.meta)?;
        if !self.tmux.is_reattach {
            let start = EventKind::Start {
                instance: self.meta.instance,
                pid: pane.pid,
                command: self.meta.command.clone(),
                cols: self.spec.cols,
                rows: self.spec.rows,
            };
            self.log.append_now(start)?;
        }
        self.is_started = true;
        self.flush_output();
        Ok(())
    }

    /// The pane's program (the terminal's shell).
    pub(super) fn dir(&self) -> &std::path::Path {
        &self.spec.dir
    }

    pub(super) fn child_pid(&self) -> u32 {
        self.pane.as_ref().map_or(0, |pane| pane.pid)
    }

    /// Serves until the terminal has ended and its last events were delivered.
    pub(super) fn run(&mut self) {
        loop {
            if let Phase::Done { until } = self.phase
                && !self.log.is_stalled()
            {
                let log_len = self.log.len();
                if Instant::now() >= until || self.clients.iter().all(|c| c.is_caught_up(log_len)) {
                    break;
                }
            }
            self.poll_once();
            self.advance_ending();
        }
        let _ = std::fs::remove_file(&self.spec.socket);
    }

    /// Waits up to `timeout` for the control client and handles what it said (start-up).
    fn wait_for_control(&mut self, timeout: Duration) {
        use rustix::event::{PollFd, PollFlags};
        let Some(control) = self.control.as_ref() else {
            return;
        };
        let mut fds = [PollFd::new(&control.stdout, PollFlags::IN)];
        let timeout = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        if rustix::event::poll(&mut fds, Some(&timeout)).is_ok_and(|n| n > 0) {
            self.read_control();
        }
    }

    fn poll_once(&mut self) {
        use rustix::event::{PollFd, PollFlags};
        let readable = PollFlags::IN;
        let mut fds = vec![
            PollFd::new(&self.signals, readable),
            PollFd::new(&self.listener, readable),
        ];
        // While the log refuses appends, tmux's output waits in tmux (it stops reading a pane
        // whose control client falls behind), holding the program back.
        let is_stalled = self.log.is_stalled();
        let control_slot = self
            .control
            .as_ref()
            .filter(|_| !is_stalled)
            .map(|control| {
                fds.push(PollFd::new(&control.stdout, readable));
                fds.len() - 1
            });
        let exit_slot = self.pane_exit.as_ref().map(|pidfd| {
            fds.push(PollFd::new(pidfd, readable));
            fds.len() - 1
        });
        let first_client = fds.len();
        for client in &self.clients {
            let mut events = readable;
            if client.pending() > 0 {
                events |= PollFlags::OUT;
            }
            fds.push(PollFd::new(&client.stream, events));
        }
        let is_waiting_for_death = self.is_pane_exited && self.child_status.is_none();
        let timeout = match self.phase {
            Phase::Running if is_stalled => rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: i64::from(log_writer::RETRY_EVERY.subsec_nanos()),
            },
            Phase::Running if !is_waiting_for_death => rustix::event::Timespec {
                tv_sec: 1,
                tv_nsec: 0,
            },
            _ => rustix::event::Timespec {
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
        if n == 0 && self.has_heap_activity {
            clients::release_idle_buffers(&mut self.clients);
            self.log.forget_recent();
            crate::memory::hand_back_idle_memory();
            self.has_heap_activity = false;
        }
        if !revents[0].is_empty() {
            self.handle_signals();
        }
        if !revents[1].is_empty() {
            clients::accept(&self.listener, &mut self.clients);
        }
        if let Some(slot) = control_slot
            && is_ready(revents[slot])
        {
            self.read_control();
        }
        if let Some(slot) = exit_slot
            && is_ready(revents[slot])
        {
            self.pane_exit = None;
            self.is_pane_exited = true;
            self.exited_at = Some(Instant::now());
        }
        self.ask_dead_status();
        for (i, &flags) in revents[first_client..].iter().enumerate() {
            if is_ready(flags) {
                self.has_heap_activity = true;
                for line in clients::read_lines(&mut self.clients[i]) {
                    match serde_json::from_slice::<HolderRequest>(&line) {
                        Ok(request) => self.handle_request(i, request),
                        Err(error) => self.clients[i].send_message(&HolderMessage::Error {
                            message: format!("bad request: {error}"),
                        }),
                    }
                }
            }
        }
        if is_stalled {
            self.log.retry();
        }
        clients::announce_storage(&mut self.clients, &mut self.log);
        clients::serve(&mut self.clients, &self.log);
        self.log.forget_recent();
        if matches!(self.phase, Phase::Running) && self.last_cwd_check.elapsed() >= CWD_CHECK_EVERY
        {
            self.refresh_cwd();
        }
        self.check_oom(false);
    }

    /// Logs a `cgroup.oom` event when the cgroup's out-of-memory count rose.
    fn check_oom(&mut self, is_due: bool) {
        let Some(record) = self.meta.cgroup.as_mut() else {
            return;
        };
        if let Some(event) = self.oom.check(record, is_due) {
            self.log.append(event);
            let _ = state_dir::write_meta(&self.spec.dir, &self.meta);
        }
    }

    /// Asks tmux for the dead pane's status, one question at a time.
    fn ask_dead_status(&mut self) {
        let is_due = self
            .dead_query
            .is_none_or(|at| at.elapsed() >= DEAD_QUERY_EVERY);
        if !self.is_pane_exited
            || self.child_status.is_some()
            || self.replies.contains(&Reply::DeadStatus)
            || !is_due
        {
            return;
        }
        let Some(pane) = self.pane.clone() else {
            return;
        };
        self.dead_query = Some(Instant::now());
        self.command(
            &format!(
                "display-message -p -t {} '#{{pane_dead}} #{{pane_dead_status}} #{{pane_dead_signal}}'",
                pane.id
            ),
            Reply::DeadStatus,
        );
    }

    fn handle_signals(&mut self) {
        let mut info = [0u8; std::mem::size_of::<libc::signalfd_siginfo>()];
        let mut wants_end = false;
        loop {
            match rustix::io::read(&self.signals, &mut info) {
                Ok(n) if n == info.len() => {}
                _ => break,
            }
            let signo = u32::from_ne_bytes([info[0], info[1], info[2], info[3]]) as i32;
            if signo == libc::SIGTERM || signo == libc::SIGINT {
                wants_end = true;
            }
        }
        reap_children();
        if wants_end {
            self.begin_ending();
        }
    }

    /// Sends one control command whose answer is for `reply`.
    fn command(&mut self, line: &str, reply: Reply) {
        let Some(control) = self.control.as_mut() else {
            return;
        };
        let mut bytes = line.as_bytes().to_vec();
        bytes.push(b'\n');
        if control.stdin.write_all(&bytes).is_ok() {
            self.replies.push_back(reply);
        } else {
            self.control_gone();
        }
    }

    /// Reads what the control client wrote (up to one batch) and handles every whole line.
    fn read_control(&mut self) {
        let Some(control) = self.control.as_mut() else {
            return;
        };
        self.has_heap_activity = true;
        let mut buf = vec![0u8; 64 * 1024];
        let mut read = 0;
        let mut is_closed = false;
        while read < READ_BATCH_BYTES {
            match control.stdout.read(&mut buf) {
                Ok(0) => {
                    is_closed = true;
                    break;
                }
                Ok(n) => {
                    control.partial.extend_from_slice(&buf[..n]);
                    read += n;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    is_closed = true;
                    break;
                }
            }
        }
        let text = std::mem::take(&mut control.partial);
        let mut consumed = 0;
        for line in text.split_inclusive(|&b| b == b'\n') {
            if line.last() != Some(&b'\n') {
                break;
            }
            consumed += line.len();
            self.handle_line(&line[..line.len() - 1]);
        }
        if let Some(control) = self.control.as_mut() {
            control.partial = text[consumed..].to_vec();
        }
        self.flush_output();
        if is_closed {
            self.control_gone();
        }
    }

    fn handle_line(&mut self, line: &[u8]) {
        if let Some(block) = self.block.as_mut() {
            let text = String::from_utf8_lossy(line);
            let mut fields = text.split(' ');
            let guard = fields.next();
            let number = fields.nth(1);
            if matches!(guard, Some("%end" | "%error")) && number == Some(block.number.as_str()) {
                let is_ok = guard == Some("%end");
                if let Some(block) = self.block.take()
                    && block.is_ours
                {
                    let reply = self.replies.pop_front().unwrap_or(Reply::Ignore);
                    self.on_reply(reply, is_ok, &block.lines);
                }
            } else {
                block.lines.push(text.into_owned());
            }
            return;
        }
        if let Some(rest) = line.strip_prefix(b"%output ") {
            let Some(space) = rest.iter().position(|&b| b == b' ') else {
                return;
            };
            let (pane, data) = (&rest[..space], &rest[space + 1..]);
            if self.is_our_pane(pane) {
                decode_output(data, &mut self.output);
                if self.output.len() >= OUTPUT_EVENT_MAX_BYTES {
                    self.flush_output();
                }
            }
        } else if line.starts_with(b"%begin ") {
            let text = String::from_utf8_lossy(line);
            let fields: Vec<&str> = text.split(' ').collect();
            let flags: u32 = fields.get(3).and_then(|f| f.parse().ok()).unwrap_or(0);
            self.block = Some(Block {
                number: fields.get(2).copied().unwrap_or_default().to_owned(),
                is_ours: flags & 1 == 1,
                lines: Vec::new(),
            });
        } else if line.starts_with(b"%exit") {
            self.control_gone();
        }
    }

    /// Whether `%output` from `pane` is the terminal's (a person may split the window; only
    /// the first pane is the terminal).
    fn is_our_pane(&self, pane: &[u8]) -> bool {
        match &self.pane {
            Some(ours) => ours.id.as_bytes() == pane,
            // The server's first pane (one server per terminal), while its id is asked for.
            None => pane == b"%0",
        }
    }

    fn on_reply(&mut self, reply: Reply, is_ok: bool, lines: &[String]) {
        match reply {
            Reply::Ignore => {
                if !is_ok {
                    log_line!("holder: tmux refused a command: {}", lines.join(" | "));
                }
            }
            Reply::PaneInfo => {
                let mut fields = lines.first().map(|l| l.split(' ')).into_iter().flatten();
                if let (true, Some(id), Some(Ok(pid))) =
                    (is_ok, fields.next(), fields.next().map(str::parse::<u32>))
                {
                    self.pane = Some(Pane {
                        id: id.to_owned(),
                        pid,
                    });
                } else {
                    log_line!("holder: tmux has no such pane: {}", lines.join(" | "));
                    self.control_gone();
                }
            }
            Reply::DeadStatus => {
                let line = lines.first().map(String::as_str).unwrap_or_default();
                let mut fields = line.split(' ');
                let is_dead = fields.next() == Some("1");
                let code = fields.next().and_then(|f| f.parse().ok());
                let signal = fields.next().and_then(|f| f.parse().ok());
                // tmux marks a pane dead when its terminal closes, and knows the status only
                // once it reaped the program: until then it is asked again, for a while.
                let is_known = code.is_some() || signal.is_some();
                let is_given_up = self
                    .exited_at
                    .is_some_and(|at| at.elapsed() >= DEAD_STATUS_PATIENCE);
                if !is_ok {
                    log_line!(
                        "holder: tmux cannot tell the pane's status: {}",
                        lines.join(" | ")
                    );
                    self.child_status = Some((None, None));
                    self.begin_ending();
                } else if is_dead && !is_known && !is_given_up {
                    self.nudge_reaper();
                } else if is_dead {
                    let (mut code, mut signal) = (code, signal);
                    if !is_known {
                        // Say what was seen, so a lost status can be traced: tmux's answer and
                        // the pane process as /proc shows it (a zombie nobody reaps, or gone).
                        let pid = self.pane.as_ref().map_or(0, |pane| pane.pid);
                        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                            .unwrap_or_else(|_| "gone".to_owned());
                        // The parent should have reaped it: how it treats signals.
                        let parent = process::stat_field(&stat, 4).unwrap_or("?").to_owned();
                        let signals: Vec<String> =
                            std::fs::read_to_string(format!("/proc/{parent}/status"))
                                .unwrap_or_default()
                                .lines()
                                .filter(|l| l.starts_with("Sig") || l.starts_with("State"))
                                .map(str::to_owned)
                                .collect();
                        log_line!(
                            "holder: tmux did not tell the pane's exit status within {} s \
                             (answer {line:?}; pane process {pid}: {}; its parent {parent}: {})",
                            DEAD_STATUS_PATIENCE.as_secs(),
                            stat.trim_end(),
                            signals.join(", ")
                        );
                        // A zombie still carries its wait status: the kernel's word for it.
                        (code, signal) = zombie_status(&stat).unwrap_or((None, None));
                    }
                    self.child_status = Some((if signal.is_some() { None } else { code }, signal));
                    self.begin_ending();
                }
            }
        }
    }

    /// tmux linked with libutempter can miss the `SIGCHLD` of a pane whose program exits while
    /// tmux removes the pane's utmp record (the helper's own handler takes the signal): the
    /// program stays a zombie tmux never reaps, and tmux never learns its status. Another
    /// `SIGCHLD` to its parent, the tmux server, makes tmux look again.
    fn nudge_reaper(&self) {
        const NUDGE_AFTER: Duration = Duration::from_millis(200);
        if self.exited_at.is_none_or(|at| at.elapsed() < NUDGE_AFTER) {
            return;
        }
        let pid = self.pane.as_ref().map_or(0, |pane| pane.pid);
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return;
        };
        if process::stat_field(&stat, 3) == Some("Z")
            && let Some(parent) = process::stat_field(&stat, 4).and_then(|p| p.parse().ok())
        {
            process::kill(parent, rustix::process::Signal::CHILD);
        }
    }

    /// The control client ended (tmux exited, or was killed): the terminal ends with it.
    fn control_gone(&mut self) {
        if self.control.take().is_none() {
            return;
        }
        self.replies.clear();
        self.block = None;
        self.flush_output();
        if self.child_status.is_none() && matches!(self.phase, Phase::Running) {
            log_line!("holder: the tmux control client ended");
        }
        self.begin_ending();
    }

    /// Appends the decoded output as one event.
    fn flush_output(&mut self) {
        if !self.is_started || self.output.is_empty() {
            return;
        }
        let data = std::mem::take(&mut self.output);
        self.log.append(EventKind::Output { data });
    }

    /// Every process of the terminal: the holder's descendants (the tmux server and whatever
    /// escaped to the subreaper), the pane's tree, and every process carrying the instance's
    /// mark (after a reattach the server is not under this holder).
    fn terminal_processes(&self) -> Vec<u32> {
        let mut pids = process::descendants(std::process::id());
        pids.extend(process::marked_processes(&self.meta.process_mark));
        if let Some(pane) = &self.pane {
            pids.push(pane.pid);
            pids.extend(process::descendants(pane.pid));
        }
        pids.retain(|&pid| pid != std::process::id() && process::is_alive(pid));
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    fn signal_remaining(&self, signal: Signal) {
        for pid in self.terminal_processes() {
            process::kill(pid, signal);
            if signal == Signal::HUP {
                // A stopped process must run to see its hangup.
                process::kill(pid, Signal::CONT);
            }
        }
    }

    /// Starts ending the terminal: kill the tmux server, hang up every process, kill what is
    /// left after a grace.
    fn begin_ending(&mut self) {
        if matches!(self.phase, Phase::Running) {
            if let Some(record) = self.meta.cgroup.as_mut() {
                cgroup::tree::note_ending(record);
            }
            self.command("kill-server", Reply::Ignore);
            self.phase = Phase::Ending {
                since: Instant::now(),
                killed: false,
            };
            self.signal_remaining(Signal::HUP);
        }
    }

    fn advance_ending(&mut self) {
        let Phase::Ending { since, killed } = self.phase else {
            return;
        };
        reap_children();
        let remaining = self.terminal_processes();
        // With tmux gone nobody can tell the status any more.
        let is_status_lost = self.control.is_none() && self.child_status.is_none();
        if remaining.is_empty() && (self.child_status.is_some() || is_status_lost) {
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
        } else if killed && since.elapsed() >= END_GRACE * 2 && remaining.is_empty() {
            self.finish();
        }
    }

    /// Records the exit once every process is gone.
    fn finish(&mut self) {
        self.flush_output();
        if self.log.is_stalled() {
            // Output still waits for the log: the exit follows it once it is written.
            return;
        }
        self.control = None;
        self.check_oom(true);
        if let Some(record) = self.meta.cgroup.as_mut() {
            cgroup::tree::teardown(record);
        }
        let (exit_code, signal) = self.child_status.unwrap_or((None, None));
        self.log.append(EventKind::Exit { exit_code, signal });
        let _ = std::fs::remove_file(&self.tmux.socket);
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

    fn is_running(&self) -> bool {
        matches!(self.phase, Phase::Running)
            && self.control.is_some()
            && !self.is_pane_exited
            && self.child_status.is_none()
    }

    fn handle_request(&mut self, i: usize, request: HolderRequest) {
        let Some(request) =
            self.clients[i].answer_common(request, self.spec.protocol_claim, &self.log)
        else {
            return;
        };
        match request {
            // Answered by `answer_common` above.
            HolderRequest::Hello { .. } | HolderRequest::Subscribe { .. } => {}
            // tmux holds the pane's PTY: there is no master to give, so nothing is ever typed
            // past this holder.
            HolderRequest::Master | HolderRequest::Typed { .. } => {
                self.clients[i].send_message(&HolderMessage::Error {
                    message: "tmux holds this terminal's PTY: no master to give".to_owned(),
                });
            }
            HolderRequest::Input {
                data,
                discard_unread,
                source,
                ..
            } => {
                let accepted = self.is_running();
                let tty = self
                    .pane
                    .as_ref()
                    .and_then(|pane| process::terminal_of(pane.pid));
                let discarded = match &tty {
                    Some(tty) if accepted && discard_unread => process::discard_unread_input(tty),
                    _ => None,
                };
                if accepted {
                    // After the output tmux already sent, as the native holder logs it.
                    self.flush_output();
                    let is_hidden = tty.as_deref().is_some_and(process::hides_input);
                    clients::log_input(&mut self.log, &data, source.as_ref(), is_hidden);
                    self.send_keys(&data);
                }
                self.clients[i].send_message(&HolderMessage::InputResult {
                    accepted,
                    error: (!accepted).then(|| "the terminal's program has exited".to_owned()),
                    // tmux takes the keys; when they reach the pane is tmux's to tell.
                    written: accepted.then_some(data.len() as u64),
                    pending: None,
                    unread: None,
                    discarded,
                });
            }
            HolderRequest::Resize { cols, rows } => {
                if self.is_running() && cols > 0 && rows > 0 {
                    self.command(
                        &format!(
                            "resize-window -t ={}: -x {cols} -y {rows}",
                            self.tmux.session
                        ),
                        Reply::Ignore,
                    );
                    self.flush_output();
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
                let shell = self.child_pid();
                let mut pids = self.terminal_processes();
                pids.retain(|&pid| pid != shell);
                super::event_loop::signal_started_since(&pids, signal, since);
            }
            HolderRequest::Status => {
                self.refresh_cwd();
                let status = HolderMessage::Status(self.status());
                self.clients[i].send_message(&status);
            }
            HolderRequest::Note(note) => {
                // After the output tmux already sent, as the native holder logs it in order.
                self.flush_output();
                if note.cwd.is_none() {
                    self.refresh_cwd();
                }
                clients::log_note(&mut self.log, note, || self.meta.cwd.clone());
            }
            HolderRequest::Terminate => self.begin_ending(),
        }
    }

    /// Writes `data` to the pane as it is, byte for byte (`send-keys -H` sends each byte as a
    /// literal key).
    fn send_keys(&mut self, data: &[u8]) {
        let Some(pane) = self.pane.clone() else {
            return;
        };
        for chunk in data.chunks(SEND_KEYS_CHUNK_BYTES) {
            let mut line = format!("send-keys -t {} -H", pane.id);
            for byte in chunk {
                let _ = write!(line, " {byte:02x}");
            }
            self.command(&line, Reply::Ignore);
        }
    }

    /// The pane's foreground process group (`tpgid` of the pane's program).
    fn foreground_pgid(&self) -> Option<u32> {
        let pane = self.pane.as_ref()?;
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", pane.pid)).ok()?;
        let tpgid: i64 = process::stat_field(&stat, 8)?.parse().ok()?;
        u32::try_from(tpgid).ok().filter(|&pgid| pgid > 0)
    }

    fn signal_foreground(&self, signal: i32, spare_pgid: Option<u32>) -> HolderMessage {
        let pgid = self
            .foreground_pgid()
            .filter(|_| self.is_running())
            .filter(|&pgid| Some(pgid) != spare_pgid);
        let Some(pgid) = pgid else {
            return HolderMessage::Signaled {
                pgid: None,
                program: None,
                error: Some("the terminal has no foreground process group".to_owned()),
            };
        };
        let Some(number) = Signal::from_named_raw(signal) else {
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

    fn status(&mut self) -> HolderStatus {
        self.flush_output();
        let pane_pid = self.pane.as_ref().map(|pane| pane.pid);
        let (foreground, process_count) = match pane_pid {
            Some(pid) if self.is_running() => {
                let (foreground, descendants) = process::terminal_facts(pid, pid);
                (foreground, descendants + 1)
            }
            _ => (None, self.terminal_processes().len()),
        };
        let foreground_pgid = foreground
            .as_ref()
            .map(|f| f.pgid)
            .or_else(|| self.foreground_pgid());
        HolderStatus {
            holder_pid: std::process::id(),
            child_pid: pane_pid,
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
        let Some(pane) = self.pane.as_ref() else {
            return;
        };
        if let Some(cwd) = process::cwd(pane.pid)
            && cwd != self.meta.cwd
        {
            self.meta.cwd = cwd;
            if let Err(error) = state_dir::write_meta(&self.spec.dir, &self.meta) {
                log_line!("holder: cannot write meta.json: {error}");
            }
        }
    }
}

/// The exit code or signal of a zombie, from its `/proc/<pid>/stat` line (field 52 holds the
/// wait status its parent would get).
fn zombie_status(stat: &str) -> Option<(Option<i32>, Option<i32>)> {
    if process::stat_field(stat, 3) != Some("Z") {
        return None;
    }
    let status: i32 = process::stat_field(stat, 52)?.parse().ok()?;
    let signal = status & 0x7f;
    Some(if signal == 0 {
        (Some((status >> 8) & 0xff), None)
    } else {
        (None, Some(signal))
    })
}

/// Reaps every child that ended (the control client, and processes that escaped to this
/// subreaper); their statuses are not the terminal's.
fn reap_children() {
    use rustix::process::{WaitOptions, wait};
    while let Ok(Some(_)) = wait(WaitOptions::NOHANG) {}
}

#[cfg(test)]
mod tests {
    use super::zombie_status;

    #[test]
    fn a_zombies_status_is_read_from_its_stat_line() {
        // A bash that ran `exit 7`, as /proc showed it while tmux had not reaped it.
        let exited = "1491 (bash) Z 1485 1491 1491 0 -1 4227084 453 173 0 0 0 0 0 0 20 0 1 0 \
            1996905 0 0 18446744073709551615 0 0 0 0 0 0 0 3686404 1266761467 1 0 0 17 1 0 0 0 \
            0 0 0 0 0 0 0 0 0 1792";
        assert_eq!(zombie_status(exited), Some((Some(7), None)));
        let killed = exited.replace(" 1792", " 9");
        assert_eq!(zombie_status(&killed), Some((None, Some(9))));
        let running = exited.replace(") Z ", ") S ");
        assert_eq!(zombie_status(&running), None);
    }
}
