//! Starting a holder from the server: the server's half of the holder's birth.
//!
//! The holder is this same binary run with the hidden `holder` subcommand, in its own session
//! (so the server's terminal and process group never reach it), with the [`HolderSpec`] on
//! stdin and its stderr appended to the terminal's `holder.log`. It answers with one
//! [`ReadyLine`] on stdout once its socket serves. The server reaps the holder process if it
//! is still the parent when the holder ends; after a server restart nobody needs to.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use super::{HolderSpec, ReadyLine};
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

/// The executable and subcommand that run a holder.
#[derive(Clone, Debug)]
pub struct HolderLauncher {
    pub exe: PathBuf,
    pub subcommand: String,
}

impl HolderLauncher {
    /// Runs holders from the current executable's `holder` subcommand.
    pub fn current_exe() -> std::io::Result<Self> {
        Ok(Self {
            exe: std::env::current_exe()?,
            subcommand: "holder".to_owned(),
        })
    }

    /// Starts a holder and waits for its ready line.
    pub async fn launch(&self, spec: &HolderSpec) -> Result<ReadyLine, LaunchError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(spec.dir.join("holder.log"))
            .map_err(|e| LaunchError::new(format!("cannot open holder.log: {e}")))?;
        let mut cmd = Command::new(&self.exe);
        // A holder outlives the server and reads its whole configuration from the spec: none
        // of the server's own variables (its token among them) stays in a holder's
        // environment for anyone who can read `/proc/<holder>/environ`.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("PTYHUB_") {
                cmd.env_remove(name);
            }
        }
        cmd.arg(&self.subcommand)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
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
                    "holder gave no ready line (see {})",
                    spec.dir.join("holder.log").display()
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
