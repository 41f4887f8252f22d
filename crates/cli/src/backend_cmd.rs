//! `ptyhub backend …`: backends of the local server. `backend install rootfs` starts (or
//! joins) the install of the rootfs backend's Debian root over the local socket and waits for
//! its end: a progress bar on a terminal, one plain line per change of step or tenth of the
//! way otherwise; exit code 0 once installed, 1 when the install failed.

#![allow(clippy::print_stdout, reason = "the CLI prints its progress on stdout")]
#![allow(clippy::print_stderr, reason = "errors go to the user's terminal")]

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use clap::Subcommand;
use ptyhub_client::{Client, ClientError};
use ptyhub_protocol::api::BackendKind;
use ptyhub_protocol::rootfs::{InstallProgress, InstallState};

/// How often the progress is asked for.
const POLL_EVERY: Duration = Duration::from_millis(500);
/// Width of the progress bar, in cells.
const BAR_CELLS: usize = 30;

#[derive(Subcommand)]
pub enum BackendCommand {
    /// Install what a backend needs before it can host terminals (rootfs: its Debian root),
    /// and wait until it is done.
    Install {
        /// The backend (rootfs).
        kind: String,
    },
}

pub async fn run(command: BackendCommand, socket: &Path) -> anyhow::Result<i32> {
    crate::paths::check_socket(socket)?;
    let client = Client::unix(socket);
    let BackendCommand::Install { kind } = command;
    match install(&client, &kind).await {
        Ok(code) => Ok(code),
        Err(ClientError::Api(error)) => {
            eprintln!("ptyhub: {}: {}", error.code, error.message);
            Ok(1)
        }
        Err(error) => Err(error.into()),
    }
}

async fn install(client: &Client, kind: &str) -> Result<i32, ClientError> {
    let is_tty = std::io::stdout().is_terminal();
    let mut progress = client.install_backend(kind).await?;
    let mut shown = Shown::default();
    loop {
        shown.show(&progress, is_tty);
        if progress.state != InstallState::Running {
            break;
        }
        tokio::time::sleep(POLL_EVERY).await;
        // The install's progress is in the backend list; asking to install again would start
        // a new install once this one ended.
        let backends = client.backends().await?;
        let latest = backends
            .backends
            .into_iter()
            .find(|b| BackendKind::parse(kind).is_some_and(|k| k == b.kind))
            .and_then(|b| b.install);
        if let Some(latest) = latest {
            progress = latest;
        }
    }
    if is_tty {
        println!();
    }
    match (progress.state, &progress.error) {
        (InstallState::Done, _) => {
            println!(
                "{kind}: installed ({} from {})",
                progress.suite, progress.mirror
            );
            Ok(0)
        }
        (_, error) => {
            eprintln!(
                "ptyhub: the install failed: {}",
                error.as_deref().unwrap_or("no reason given")
            );
            Ok(1)
        }
    }
}

/// What was printed last, so plain output says each change once.
#[derive(Default)]
struct Shown {
    phase: String,
    tenth: u8,
}

impl Shown {
    fn show(&mut self, progress: &InstallProgress, is_tty: bool) {
        let line = format!(
            "{:>3}% {} ({}/{} packages) {}",
            progress.percent,
            progress.phase,
            progress.packages_done,
            progress.packages_total,
            clean(&progress.message)
        );
        if is_tty {
            let filled = BAR_CELLS * usize::from(progress.percent.min(100)) / 100;
            let bar = format!("{}{}", "#".repeat(filled), " ".repeat(BAR_CELLS - filled));
            let mut text: String = format!("[{bar}] {line}").chars().take(110).collect();
            text.push_str("\x1b[K");
            print!("\r{text}");
            let _ = std::io::stdout().flush();
        } else if progress.phase != self.phase || progress.percent / 10 != self.tenth {
            println!("{line}");
        }
        self.phase.clone_from(&progress.phase);
        self.tenth = progress.percent / 10;
    }
}

/// Removes control characters debootstrap's output may hold.
fn clean(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).collect()
}
