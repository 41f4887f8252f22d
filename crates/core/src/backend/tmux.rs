//! The tmux backend: each terminal is a tmux session on a private tmux server (one socket per
//! terminal instance, in a 0700 directory of the runtime dir), followed by a holder in tmux's
//! control mode (`crate::holder`'s `control` loop). The holder speaks the same protocol over
//! the same kind of socket as a native one, keeps the same `events.jsonl`, and ends the same
//! way, so the actor, the log and every guarantee are the native backend's; what tmux adds is
//! that a person can `tmux -S <socket> attach -t <session>` and type beside the agent (the
//! socket and session are in `meta.json` and the terminal's info).
//!
//! This module finds a usable tmux (on `PATH`, version 3.0 or newer) once, when the server
//! starts, and says why not when there is none ([`Availability`]); it does not talk to tmux
//! once a terminal runs (its holder does). When a server connects to a terminal whose holder
//! died but whose tmux session still runs, it starts a new holder that attaches to the
//! session (output the pane wrote while no holder followed it is not in the log).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ptyhub_protocol::api::BackendKind;
use ptyhub_protocol::event::Seq;

use super::native::{end_terminal, live_holder};
use super::native_link::HolderLink;
use super::{Availability, Backend, BackendLink, BoxFuture, LaunchError, TerminalLog};
use crate::holder::launch::HolderLauncher;
use crate::holder::{HolderSpec, TmuxSpec};
use crate::state_dir::{self, StateDir, TerminalMeta};

/// The oldest tmux whose control mode has everything the holder uses (`send-keys -H`, a
/// manual window size, `remain-on-exit` with `pane_dead_status`).
const TMUX_MIN_VERSION: (u32, u32) = (3, 0);
/// The directory of the runtime dir that holds the tmux sockets.
const SOCKET_DIR: &str = "tmux";

/// Terminals hosted in tmux sessions, followed by holders started from `launcher`.
#[derive(Clone, Debug)]
pub struct TmuxBackend {
    launcher: HolderLauncher,
    /// The tmux executable, when a usable one was found.
    program: Option<PathBuf>,
    availability: Availability,
    /// Where terminals live and how much log they keep: what a new holder for a session
    /// whose holder died needs.
    recovery: Option<Recovery>,
}

/// What [`TmuxBackend`] needs to start a holder for a session that outlived its holder.
#[derive(Clone, Debug)]
pub struct Recovery {
    pub state_dir: StateDir,
    pub event_log_keep: u64,
}

impl TmuxBackend {
    /// Looks for a usable tmux: `program` when given, else `tmux` on `PATH`. With `recovery`,
    /// a terminal whose holder died while its tmux session lives gets a new holder when a
    /// server connects to it.
    pub fn new(
        launcher: HolderLauncher,
        program: Option<PathBuf>,
        recovery: Option<Recovery>,
    ) -> Arc<Self> {
        let (program, availability) = match program.or_else(|| find_on_path("tmux")) {
            None => (
                None,
                Availability {
                    failure: Some("no tmux binary on PATH".to_owned()),
                    version: None,
                },
            ),
            Some(program) => {
                let availability = probe(&program);
                (Some(program), availability)
            }
        };
        Arc::new(Self {
            launcher,
            program,
            availability,
            recovery,
        })
    }

    /// Starts a holder that attaches to the terminal's tmux session, when the session still
    /// runs and its holder is gone. Returns whether one was started.
    async fn reattach(&self, meta: &TerminalMeta) -> bool {
        let (Some(program), Some(recovery), Some(target)) =
            (&self.program, &self.recovery, &meta.tmux)
        else {
            return false;
        };
        if live_holder(&self.launcher, meta).is_some() {
            return false;
        }
        let is_alive = tokio::process::Command::new(program)
            .arg("-S")
            .arg(&target.socket)
            .args(["has-session", "-t", &format!("={}", target.session)])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .await
            .is_ok_and(|status| status.success());
        if !is_alive {
            return false;
        }
        let dir =
            recovery
                .state_dir
                .terminal_dir(&meta.owner, &meta.agent, &meta.session, &meta.id);
        let cwd = if Path::new(&meta.cwd).is_dir() {
            PathBuf::from(&meta.cwd)
        } else {
            PathBuf::from("/")
        };
        let spec = HolderSpec {
            dir,
            socket: PathBuf::from(&meta.socket),
            program: meta.command.first().cloned().unwrap_or_default(),
            args: meta.command.iter().skip(1).cloned().collect(),
            env: Vec::new(),
            cwd,
            cols: meta.cols,
            rows: meta.rows,
            event_log_keep: recovery.event_log_keep,
            tmux: Some(TmuxSpec {
                program: program.clone(),
                socket: PathBuf::from(&target.socket),
                session: target.session.clone(),
                is_reattach: true,
            }),
            user: None,
            sandbox: None,
            protocol_claim: None,
            rc_text: None,
            // The terminal has its record: the holder reads it.
            meta: None,
        };
        match self.launcher.launch(&spec).await {
            Ok(_) => {
                tracing::info!(id = %meta.id, "a new holder follows the tmux session");
                true
            }
            Err(error) => {
                tracing::warn!(id = %meta.id, %error, "cannot reattach to the tmux session");
                false
            }
        }
    }
}

/// The session name tmux accepts for a terminal id (tmux turns `.` and `:` into `_`).
pub fn session_name(id: &str) -> String {
    id.replace(['.', ':'], "_")
}

impl Backend for TmuxBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Tmux
    }

    fn availability(&self) -> Availability {
        self.availability.clone()
    }

    fn launch<'a>(&'a self, spec: &'a HolderSpec) -> BoxFuture<'a, Result<(), LaunchError>> {
        Box::pin(async move {
            let (Some(program), None) = (&self.program, &self.availability.failure) else {
                return Err(LaunchError::new(
                    self.availability
                        .failure
                        .clone()
                        .unwrap_or_else(|| "no tmux".to_owned()),
                ));
            };
            let meta = spec
                .record()
                .map_err(|e| LaunchError::new(format!("cannot read meta.json: {e}")))?;
            let runtime_dir = spec.socket.parent().unwrap_or_else(|| Path::new("/tmp"));
            let socket_dir = runtime_dir.join(SOCKET_DIR);
            state_dir::create_socket_dir(&socket_dir).map_err(|e| {
                LaunchError::new(format!("cannot create {}: {e}", socket_dir.display()))
            })?;
            // Named like the holder's socket: unique to the instance, and short.
            let stem = spec
                .socket
                .file_stem()
                .map(|stem| stem.to_string_lossy().into_owned())
                .unwrap_or_else(|| meta.id.to_string());
            let mut spec = spec.clone();
            spec.tmux = Some(TmuxSpec {
                program: program.clone(),
                socket: socket_dir.join(format!("{stem}.sock")),
                session: session_name(meta.id.as_str()),
                is_reattach: false,
            });
            self.launcher.launch(&spec).await.map(|_| ())
        })
    }

    fn connect<'a>(
        &'a self,
        meta: &'a TerminalMeta,
        after: Seq,
    ) -> BoxFuture<'a, std::io::Result<BackendLink>> {
        Box::pin(async move {
            let socket = Path::new(&meta.socket);
            let (link, lines) = match HolderLink::connect(socket, after).await {
                Ok(connected) => connected,
                // The holder died, but tmux (and the terminal) may live on.
                Err(error) if self.reattach(meta).await => {
                    tracing::debug!(id = %meta.id, %error, "holder gone; reattached");
                    HolderLink::connect(socket, after).await?
                }
                Err(error) => return Err(error),
            };
            Ok(BackendLink {
                requests: Box::new(link),
                lines: Box::new(lines),
            })
        })
    }

    fn log(&self, dir: &Path) -> TerminalLog {
        TerminalLog::in_dir(dir)
    }

    fn kill(&self, meta: &TerminalMeta) {
        // The tmux server carries the instance's mark like every pane process, so the
        // native search finds it too.
        end_terminal(&self.launcher, meta);
        if let Some(target) = &meta.tmux {
            let _ = std::fs::remove_file(&target.socket);
        }
    }

    fn end_orphans(&self, meta: &TerminalMeta) {
        if live_holder(&self.launcher, meta).is_none() {
            self.kill(meta);
        }
    }
}

/// The first executable `name` on `PATH`.
pub(super) fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Runs `tmux -V` and checks the version.
fn probe(program: &Path) -> Availability {
    let output = std::process::Command::new(program)
        .arg("-V")
        .stdin(std::process::Stdio::null())
        .output();
    let text = match output {
        Ok(output) if output.status.success() => {
            String::from_utf8_lossy(&output.stdout).trim().to_owned()
        }
        Ok(output) => {
            return Availability {
                failure: Some(format!(
                    "{} -V failed: {}",
                    program.display(),
                    String::from_utf8_lossy(&output.stderr).trim()
                )),
                version: None,
            };
        }
        Err(error) => {
            return Availability {
                failure: Some(format!("cannot run {}: {error}", program.display())),
                version: None,
            };
        }
    };
    let failure = parse_version(&text)
        .filter(|&version| version < TMUX_MIN_VERSION)
        .map(|_| {
            format!(
                "{text} is too old (ptyhub needs tmux {}.{} or newer)",
                TMUX_MIN_VERSION.0, TMUX_MIN_VERSION.1
            )
        });
    Availability {
        failure,
        version: Some(text),
    }
}

/// `(major, minor)` from `tmux -V`'s answer (`tmux 3.3a`, `tmux next-3.4`); `None` for a
/// build without a number (`tmux master`), which is taken as new enough.
fn parse_version(text: &str) -> Option<(u32, u32)> {
    let start = text.find(|c: char| c.is_ascii_digit())?;
    let mut parts = text[start..].split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::{parse_version, session_name};

    #[test]
    fn versions_are_read_from_tmux_v() {
        assert_eq!(parse_version("tmux 3.3a"), Some((3, 3)));
        assert_eq!(parse_version("tmux next-3.4"), Some((3, 4)));
        assert_eq!(parse_version("tmux 2.9"), Some((2, 9)));
        assert_eq!(parse_version("tmux master"), None);
    }

    #[test]
    fn session_names_avoid_what_tmux_rewrites() {
        assert_eq!(session_name("t-abc.1"), "t-abc_1");
    }
}
