//! A backend that starts no process, for the actor's and the registry's unit tests: each
//! terminal's host ([`FakeHost`]) plays the holder's part on a real event log in a temporary
//! directory. A test writes events ([`FakeHost::output`], [`FakeHost::exit`]); they are
//! appended to the log and sent to the connected actor, as a holder would. Every request the
//! actor makes is recorded, and input, status and signal requests are answered as a holder
//! answers them. Hosts are found by the terminal's socket path, as the native backend finds
//! its holders; [`Backend::launch`] makes a new host that is running at once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use ptyhub_protocol::api::BackendKind;
use ptyhub_protocol::event::{Event, EventKind, Seq};
use ptyhub_protocol::holder::{
    HOLDER_PROTOCOL_VERSION, HolderLine, HolderMessage, HolderRequest, HolderStatus,
};
use tokio::sync::mpsc;

use super::{Backend, BackendLink, BoxFuture, LaunchError, LineStream, RequestSink, TerminalLog};
use crate::event_log::EventLog;
use crate::holder::HolderSpec;
use crate::state_dir::TerminalMeta;

/// The pid the fake's shell has (the fake's facts are made up, never looked up).
pub const FAKE_SHELL_PID: u32 = 4242;

/// Fake hosts by socket path.
#[derive(Clone, Default)]
pub struct FakeBackend {
    hosts: Arc<Mutex<HashMap<String, FakeHost>>>,
    /// Launches fail, as when no holder can start.
    is_launch_refused: Arc<std::sync::atomic::AtomicBool>,
}

/// The fake host of the terminal kept in one directory.
#[derive(Clone)]
pub struct FakeHost {
    host: Arc<Mutex<Host>>,
}

struct Host {
    dir: PathBuf,
    log: EventLog,
    /// The connected actor's line stream, while one is connected.
    lines: Option<mpsc::UnboundedSender<HolderLine>>,
    requests: Vec<HolderRequest>,
    /// What a status request is answered with.
    status: HolderStatus,
    /// Whether `terminate` ends the terminal (otherwise it is ignored, as by a hung host).
    is_terminate_obeyed: bool,
    kills: usize,
    connects: usize,
}

impl FakeBackend {
    /// The host of the terminal kept in `dir`, made (with its log) the first time; its socket
    /// path is the directory's.
    pub fn host(&self, dir: &Path) -> std::io::Result<FakeHost> {
        let mut hosts = self.hosts.lock().expect("the fake's lock");
        let key = dir.to_string_lossy().into_owned();
        if let Some(host) = hosts.get(&key) {
            return Ok(host.clone());
        }
        let host = FakeHost::new(dir)?;
        hosts.insert(key, host.clone());
        Ok(host)
    }

    /// Makes later launches fail.
    pub fn refuse_launches(&self) {
        self.is_launch_refused
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn find(&self, socket: &str) -> Option<FakeHost> {
        self.hosts
            .lock()
            .expect("the fake's lock")
            .get(socket)
            .cloned()
    }
}

impl FakeHost {
    /// A fake host for the terminal directory `dir` (its log is created there).
    fn new(dir: &Path) -> std::io::Result<Self> {
        let log = EventLog::open(dir, crate::event_log::EVENT_LOG_KEEP_BYTES)?;
        Ok(Self {
            host: Arc::new(Mutex::new(Host {
                dir: dir.to_path_buf(),
                log,
                lines: None,
                requests: Vec::new(),
                status: HolderStatus {
                    child_pid: Some(FAKE_SHELL_PID),
                    foreground_pgid: Some(FAKE_SHELL_PID),
                    foreground_program: Some("bash".to_owned()),
                    ..HolderStatus::default()
                },
                is_terminate_obeyed: true,
                kills: 0,
                connects: 0,
            })),
        })
    }

    fn host(&self) -> MutexGuard<'_, Host> {
        self.host.lock().expect("the fake host's lock")
    }

    /// Appends an event to the log and sends it to the connected actor.
    pub fn emit(&self, kind: EventKind) -> Seq {
        let mut host = self.host();
        let seq = host.log.append(kind.clone()).unwrap_or(Seq::ZERO);
        let line = HolderLine::Event(Event {
            seq,
            ts: ptyhub_protocol::event::now_ts(),
            kind,
        });
        host.send(line);
        seq
    }

    /// Appends an event to the log without sending it: what a holder logged and has not
    /// served yet. [`FakeHost::serve`] sends it.
    pub fn log_only(&self, kind: EventKind) -> Event {
        let seq = self.host().log.append(kind.clone()).unwrap_or(Seq::ZERO);
        Event {
            seq,
            ts: ptyhub_protocol::event::now_ts(),
            kind,
        }
    }

    /// Sends an event logged by [`FakeHost::log_only`].
    pub fn serve(&self, event: Event) {
        self.host().send(HolderLine::Event(event));
    }

    /// The program printed `data`.
    pub fn output(&self, data: &[u8]) -> Seq {
        self.emit(EventKind::Output {
            data: data.to_vec(),
        })
    }

    /// The program exited: the exit is logged and the host goes away.
    pub fn exit(&self, exit_code: Option<i32>) {
        self.emit(EventKind::Exit {
            exit_code,
            signal: None,
        });
        self.host().lines = None;
    }

    /// Every request the actor made, in order.
    pub fn requests(&self) -> Vec<HolderRequest> {
        self.host().requests.clone()
    }

    /// The bytes of every input request, in order.
    pub fn typed(&self) -> Vec<Vec<u8>> {
        self.requests()
            .into_iter()
            .filter_map(|r| match r {
                HolderRequest::Input { data, .. } => Some(data),
                _ => None,
            })
            .collect()
    }

    /// Answers later status requests with `status`.
    pub fn set_status(&self, status: HolderStatus) {
        self.host().status = status;
    }

    /// Makes the host ignore `terminate`, as a hung holder would.
    pub fn ignore_terminate(&self) {
        self.host().is_terminate_obeyed = false;
    }

    /// How often [`Backend::kill`] was called.
    pub fn kills(&self) -> usize {
        self.host().kills
    }

    /// How often an actor connected.
    pub fn connects(&self) -> usize {
        self.host().connects
    }

    /// A `meta.json` record of a running bash terminal hosted here.
    pub fn meta(&self, nonce: &str) -> TerminalMeta {
        let socket = self.host().dir.to_string_lossy().into_owned();
        let id = ptyhub_protocol::ids::TerminalId::parse("fake-1").expect("a valid id");
        TerminalMeta {
            id,
            agent: ptyhub_protocol::ids::Name::default_name(),
            session: ptyhub_protocol::ids::Name::default_name(),
            owner: "tester".to_owned(),
            cwd: "/".to_owned(),
            command: vec!["bash".to_owned()],
            state: crate::state_dir::TerminalState::Running,
            socket,
            created_at: 0,
            instance: 1,
            cols: 80,
            rows: 24,
            shell: "bash".to_owned(),
            holder_pid: Some(1),
            pid: Some(FAKE_SHELL_PID),
            exit_code: None,
            signal: None,
            ended_at: None,
            closed: false,
            integration_nonce: nonce.to_owned(),
            process_mark: String::new(),
            anonymous: false,
            backend: BackendKind::Native,
            tmux: None,
            user: None,
            rootfs: None,
            schema: crate::state_dir::META_SCHEMA,
            retention: ptyhub_protocol::api::Retention::Persistent,
            cgroup: None,
        }
    }
}

impl Host {
    fn send(&mut self, line: HolderLine) {
        if let Some(lines) = &self.lines
            && lines.send(line).is_err()
        {
            self.lines = None;
        }
    }

    fn message(&mut self, message: HolderMessage) {
        self.send(HolderLine::Message(message));
    }

    /// What a holder does with a request.
    fn handle(&mut self, request: &HolderRequest) {
        self.requests.push(request.clone());
        match request {
            HolderRequest::Input { data, .. } => self.message(HolderMessage::InputResult {
                accepted: true,
                error: None,
                written: Some(data.len() as u64),
                pending: Some(0),
                unread: Some(0),
                discarded: None,
            }),
            HolderRequest::Status => {
                let mut status = self.status.clone();
                status.last_seq = self.log.last_seq();
                self.message(HolderMessage::Status(status));
            }
            HolderRequest::Signal { spare_pgid, .. } => {
                let pgid = self
                    .status
                    .foreground_pgid
                    .filter(|&p| Some(p) != *spare_pgid);
                let program = pgid.and(self.status.foreground_program.clone());
                self.message(HolderMessage::Signaled {
                    pgid,
                    program,
                    error: None,
                });
            }
            HolderRequest::Terminate if self.is_terminate_obeyed => {
                let kind = EventKind::Exit {
                    exit_code: None,
                    signal: Some(1),
                };
                let seq = self.log.append(kind.clone()).unwrap_or(Seq::ZERO);
                let ts = ptyhub_protocol::event::now_ts();
                self.send(HolderLine::Event(Event { seq, ts, kind }));
                if let Ok(mut meta) = crate::state_dir::read_meta(&self.dir) {
                    meta.state = crate::state_dir::TerminalState::Exited;
                    meta.signal = Some(1);
                    let _ = crate::state_dir::write_meta(&self.dir, &meta);
                }
                self.lines = None;
            }
            _ => {}
        }
    }
}

struct FakeRequests {
    host: Arc<Mutex<Host>>,
}

impl RequestSink for FakeRequests {
    fn send<'a>(&'a mut self, request: &'a HolderRequest) -> BoxFuture<'a, std::io::Result<()>> {
        let mut host = self.host.lock().expect("the fake host's lock");
        let outcome = if host.lines.is_some() {
            host.handle(request);
            Ok(())
        } else {
            Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        };
        Box::pin(std::future::ready(outcome))
    }
}

struct FakeLines {
    lines: mpsc::UnboundedReceiver<HolderLine>,
}

impl LineStream for FakeLines {
    fn next(&mut self) -> BoxFuture<'_, Option<HolderLine>> {
        Box::pin(self.lines.recv())
    }
}

impl Backend for FakeBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Native
    }

    fn launch<'a>(&'a self, spec: &'a HolderSpec) -> BoxFuture<'a, Result<(), LaunchError>> {
        if self
            .is_launch_refused
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Box::pin(std::future::ready(Err(LaunchError::new(
                "no host can start",
            ))));
        }
        let launched = self
            .host(&spec.dir)
            .map_err(|e| LaunchError::new(e.to_string()))
            .and_then(|host| {
                let mut meta = spec.record().map_err(|e| LaunchError::new(e.to_string()))?;
                meta.state = crate::state_dir::TerminalState::Running;
                meta.holder_pid = Some(1);
                meta.pid = Some(FAKE_SHELL_PID);
                // The host is found by its socket path, which is the directory's.
                meta.socket = spec.dir.to_string_lossy().into_owned();
                crate::state_dir::write_meta(&spec.dir, &meta)
                    .map_err(|e| LaunchError::new(e.to_string()))?;
                host.emit(EventKind::Start {
                    instance: meta.instance,
                    pid: FAKE_SHELL_PID,
                    command: meta.command.clone(),
                    cols: spec.cols,
                    rows: spec.rows,
                });
                Ok(())
            });
        Box::pin(std::future::ready(launched))
    }

    fn connect<'a>(
        &'a self,
        meta: &'a TerminalMeta,
        after: Seq,
    ) -> BoxFuture<'a, std::io::Result<BackendLink>> {
        let link = match self.find(&meta.socket) {
            Some(host) => Ok(host.connect(after)),
            None => Err(std::io::Error::from(std::io::ErrorKind::NotFound)),
        };
        Box::pin(std::future::ready(link))
    }

    fn log(&self, dir: &Path) -> TerminalLog {
        TerminalLog::in_dir(dir)
    }

    fn kill(&self, meta: &TerminalMeta) {
        if let Some(host) = self.find(&meta.socket) {
            let mut host = host.host();
            host.kills += 1;
            host.lines = None;
        }
    }
}

impl FakeHost {
    /// Connects an actor: the kept history after `after`, then live events.
    fn connect(&self, after: Seq) -> BackendLink {
        let mut host = self.host();
        let (tx, rx) = mpsc::unbounded_channel();
        host.connects += 1;
        let _ = tx.send(HolderLine::Message(HolderMessage::Hello {
            version: HOLDER_PROTOCOL_VERSION,
            holder_pid: 1,
            last_seq: host.log.last_seq(),
        }));
        let _ = TerminalLog::in_dir(&host.dir).read_events(after, |event| {
            let _ = tx.send(HolderLine::Event(event));
        });
        host.lines = Some(tx);
        drop(host);
        BackendLink {
            requests: Box::new(FakeRequests {
                host: Arc::clone(&self.host),
            }),
            lines: Box::new(FakeLines { lines: rx }),
        }
    }
}
