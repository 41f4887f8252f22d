//! Starting a holder from the server: the server's half of the holder's birth.
//!
//! The holder is the small `ptyhub-holder` executable installed beside `ptyhub` (or, without
//! one of this build there, the `ptyhub` binary itself run with its hidden `holder`
//! subcommand), in its own session (so the server's terminal and process group never reach
//! it), with the [`HolderSpec`] on stdin and its stderr appended to the terminal's
//! `holder.log`. It answers with one [`ReadyLine`] on stdout once its socket serves. The
//! server reaps the holder process if it is still the parent when the holder ends; after a
//! server restart nobody needs to.
//!
//! Why a second executable: every page a process writes at its start (the relocated tables of
//! its binary, the writable data of each shared library it loads) is its own, and there is
//! one holder per terminal. `ptyhub-holder` holds the holder's code alone and, linked
//! statically where the toolchain can (crates/cli/build.rs), loads no shared library, so those
//! pages are a fraction of the whole server's (docs/memory.md).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use super::{HOLDER_LOG_FILE, HolderSpec, ReadyLine};
use crate::backend::LaunchError;

/// How long a holder may take to open its PTY and start the program.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// The hidden `PTYHUB_TEST_HOLDER_PROTOCOL` variable of the server: a protocol version every
/// holder it starts claims in its `hello` (a test's holder of a version no server speaks).
fn protocol_claim() -> Option<u32> {
    std::env::var("PTYHUB_TEST_HOLDER_PROTOCOL")
        .ok()
        .and_then(|value| value.parse().ok())
}

/// The file name of the holder executable, installed beside `ptyhub` (crates/cli).
pub const HOLDER_EXE: &str = "ptyhub-holder";

/// The argument that starts a holder, of `ptyhub-holder` and of `ptyhub` alike (the second
/// word of every holder's command line, which is how a holder is told from other processes).
pub const HOLDER_ARG: &str = "holder";

/// The argument on which `ptyhub-holder` prints [`BUILD_ID`] and exits.
pub const BUILD_ID_ARG: &str = "--build-id";

/// The name of this build of the shared sources (build.rs): a `ptyhub-holder` that answers
/// [`BUILD_ID_ARG`] with another one is of another build and hosts no terminal of this server.
pub const BUILD_ID: &str = env!("PTYHUB_BUILD_ID");

/// How long the `ptyhub-holder` beside the server may take to name its build.
const BUILD_ID_TIMEOUT: Duration = Duration::from_secs(5);

/// The executable that runs a holder (with [`HOLDER_ARG`]), and how a running holder is
/// recognised.
#[derive(Clone, Debug)]
pub struct HolderLauncher {
    /// What holders are started from.
    exe: PathBuf,
    /// The server's own executable, whose `holder` subcommand runs holders too (those of a
    /// server that had no `ptyhub-holder` beside it).
    server_exe: PathBuf,
}

impl HolderLauncher {
    /// Runs holders from the `ptyhub-holder` beside the current executable when it is of this
    /// build, else from the current executable's `holder` subcommand. The second value says
    /// why a `ptyhub-holder` that is there is not used (for the server's log).
    pub fn find() -> std::io::Result<(Self, Option<String>)> {
        let server_exe = std::env::current_exe()?;
        let sibling = server_exe.with_file_name(HOLDER_EXE);
        let own = |server_exe: PathBuf| Self {
            exe: server_exe.clone(),
            server_exe,
        };
        if !sibling.exists() {
            return Ok((own(server_exe), None));
        }
        let why = match build_id_of(&sibling) {
            Ok(id) if id == BUILD_ID => {
                return Ok((
                    Self {
                        exe: sibling,
                        server_exe,
                    },
                    None,
                ));
            }
            Ok(id) => format!("is of another build ({id}, this one is {BUILD_ID})"),
            Err(error) => format!("does not name its build ({error})"),
        };
        let note = format!(
            "{} {why}: holders run `{} {HOLDER_ARG}`",
            sibling.display(),
            server_exe.display()
        );
        Ok((own(server_exe), Some(note)))
    }

    /// Whether `pid` is a holder: a process running the file holders are started from, or any
    /// copy of `ptyhub-holder` or of the server's executable (another build: an upgrade
    /// installed elsewhere, an older server) started as a holder. A pid the system gave to
    /// another program since is not one.
    pub fn is_holder(&self, pid: u32) -> bool {
        let Some(exe) = crate::process::exe(pid) else {
            return false;
        };
        if exe == self.exe {
            return true;
        }
        let is_holder_name = exe
            .file_name()
            .is_some_and(|name| name == HOLDER_EXE || Some(name) == self.server_exe.file_name());
        is_holder_name
            && crate::process::cmdline(pid)
                .is_some_and(|args| args.get(1).is_some_and(|arg| arg == HOLDER_ARG))
    }

    /// Starts a holder and waits for its ready line.
    pub async fn launch(&self, spec: &HolderSpec) -> Result<ReadyLine, LaunchError> {
        let log = if spec.is_log_deferred() {
            Stdio::null()
        } else {
            Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(spec.dir.join(HOLDER_LOG_FILE))
                    .map_err(|e| LaunchError::new(format!("cannot open holder.log: {e}")))?,
            )
        };
        let mut cmd = Command::new(&self.exe);
        // A holder outlives the server and reads its whole configuration from the spec: none
        // of the server's own variables (its token among them) stays in a holder's
        // environment for anyone who can read `/proc/<holder>/environ`.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("PTYHUB_") {
                cmd.env_remove(name);
            }
        }
        cmd.env("GLIBC_TUNABLES", holder_tunables());
        cmd.arg(HOLDER_ARG)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(false);
        // No `pre_exec`: without one, std starts the holder with posix_spawn (a vfork) rather
        // than a fork, whose copy of the server's page tables grows with every terminal the
        // server holds. The holder leaves the server's session itself, first thing
        // (`holder::run`).
        let mut child = cmd
            .spawn()
            .map_err(|e| LaunchError::new(format!("cannot start a holder: {e}")))?;
        let claim = protocol_claim();
        let mut spec_line = if claim.is_some() {
            let mut claimed = spec.clone();
            claimed.protocol_claim = claim;
            serde_json::to_vec(&claimed)
        } else {
            serde_json::to_vec(spec)
        }
        .map_err(|e| LaunchError::new(e.to_string()))?;
        spec_line.push(b'\n');
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(LaunchError::new("holder pipes missing"));
        };
        let handshake = async {
            stdin
                .write_all(&spec_line)
                .await
                .map_err(|e| e.to_string())?;
            drop(stdin);
            let mut line = String::new();
            BufReader::new(stdout)
                .read_line(&mut line)
                .await
                .map_err(|e| e.to_string())?;
            serde_json::from_str::<ReadyLine>(&line).map_err(|_| {
                format!(
                    "holder gave no ready line (its diagnostics, if any, are in {})",
                    spec.dir.join(HOLDER_LOG_FILE).display()
                )
            })
        };
        let outcome = tokio::time::timeout(READY_TIMEOUT, handshake).await;
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        match outcome {
            Ok(Ok(ready)) if ready.ready => Ok(ready),
            Ok(Ok(ready)) => Err(LaunchError::new(
                ready.error.unwrap_or_else(|| "holder failed".to_owned()),
            )),
            Ok(Err(error)) => Err(LaunchError::new(error)),
            Err(_) => Err(LaunchError::new("holder did not become ready in time")),
        }
    }
}

/// glibc's malloc setting every holder runs with: no per-thread cache of freed chunks (up to
/// seven of each small size, which `malloc_trim` cannot hand back: half an idle holder's heap,
/// 48 → 23 KiB measured). A holder has one thread and allocates little. Its program does not
/// inherit it: the program's environment is the spec's alone (`pty::spawn`).
const HOLDER_MALLOC_TUNABLES: &str = "glibc.malloc.tcache_count=0";

/// `GLIBC_TUNABLES` for a holder: the server's own, if any, then the holder's setting (the
/// last of a name wins).
fn holder_tunables() -> std::ffi::OsString {
    let mut tunables = std::env::var_os("GLIBC_TUNABLES").unwrap_or_default();
    if !tunables.is_empty() {
        tunables.push(":");
    }
    tunables.push(HOLDER_MALLOC_TUNABLES);
    tunables
}

/// What `exe --build-id` prints, waited for at most [`BUILD_ID_TIMEOUT`].
fn build_id_of(exe: &Path) -> Result<String, String> {
    let mut child = std::process::Command::new(exe)
        .arg(BUILD_ID_ARG)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + BUILD_ID_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("no answer in time".to_owned());
            }
            Err(error) => return Err(error.to_string()),
        }
    };
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        stdout.read_to_string(&mut out).map_err(|e| e.to_string())?;
    }
    if !status.success() {
        return Err(format!("it exited with {status}"));
    }
    Ok(out.trim().to_owned())
}
