//! `ptyhub terminal …`: a thin client over the local socket (the peer's uid is the owner).

#![allow(clippy::print_stdout, reason = "the CLI prints its answers on stdout")]
#![allow(
    clippy::print_stderr,
    reason = "errors and wait reasons go to the user's terminal"
)]

use std::path::Path;

use clap::Subcommand;
use ptyhub_client::{Client, ClientError};
use ptyhub_protocol::api::{
    CreateSessionParams, ExecParams, SendParams, SignalParams, TerminalInfo,
};

#[derive(Subcommand)]
pub enum TerminalCommand {
    /// Create (or find) the terminal of AGENT.
    Create {
        agent: String,
        #[arg(long)]
        session: Option<String>,
        #[arg(long)]
        cwd: Option<String>,
        /// An explicit terminal id (default: terminal-<agent>-<session>).
        #[arg(long)]
        id: Option<String>,
        /// What hosts it: native or tmux (default: the server's, see docs/backends.md).
        #[arg(long)]
        backend: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// List terminals.
    List {
        /// Include closed terminals.
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Show one terminal.
    Status {
        terminal: String,
        #[arg(long)]
        json: bool,
    },
    /// Run a command and print its output; exits with the command's exit code.
    Exec {
        terminal: String,
        /// Seconds to wait (the command goes on after it).
        #[arg(long)]
        timeout: Option<f64>,
        #[arg(long)]
        json: bool,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Type text into the terminal (Enter unless --no-submit), then wait until the program
    /// reads again, goes quiet, exits or the deadline passes; print what it printed. The wait
    /// reason goes to stderr (stdin_read, inferred_idle, timeout, session_exit).
    Send {
        terminal: String,
        /// Do not press Enter after the text.
        #[arg(long)]
        no_submit: bool,
        /// Seconds to wait at most.
        #[arg(long, default_value_t = 30.0)]
        deadline: f64,
        /// Seconds of quiet output (while nothing reads) that count as idle.
        #[arg(long, default_value_t = 2.0)]
        idle_window: f64,
        /// At the deadline, discard what was typed and is still unread (it can never run
        /// later).
        #[arg(long)]
        flush_on_timeout: bool,
        #[arg(long)]
        json: bool,
        #[arg(last = true, required = true)]
        text: Vec<String>,
    },
    /// Send a signal (INT, TERM, KILL, HUP, QUIT, TSTP, CONT, WINCH, USR1, USR2) to the
    /// terminal's foreground program.
    Signal {
        terminal: String,
        signal: String,
        #[arg(long)]
        json: bool,
    },
    /// Write the terminal's whole recorded history: `asciicast` (asciinema v2, plays back with
    /// timing, a marker at each command), `asciicast-v3` (asciinema 3's format), `raw` (the
    /// output bytes) or `jsonl` (the event log's lines). The shell integration's private marks
    /// (and the terminal's nonce they carry) are left out of every format.
    Export {
        terminal: String,
        #[arg(long, default_value = "asciicast", value_parser = crate::export::FORMATS)]
        format: String,
        /// Write here instead of stdout.
        #[arg(long, short)]
        output: Option<std::path::PathBuf>,
    },
    /// Print the visible screen.
    Screen {
        terminal: String,
        #[arg(long)]
        json: bool,
    },
    /// Follow the terminal's output live, read only (keys are never sent; ^C or the detach
    /// key ends it). Replays the recent history first.
    Watch {
        terminal: String,
        /// Replay exactly the output after this event seq instead of the recent history.
        #[arg(long)]
        since_seq: Option<u64>,
        /// The key that ends watching.
        #[arg(long, default_value = crate::live::DETACH_KEY_DEFAULT, value_parser = crate::live::parse_detach_key)]
        detach_key: u8,
    },
    /// Use the terminal from this one (raw mode; the terminal follows this window's size).
    /// The detach key leaves it running.
    Attach {
        terminal: String,
        /// The key that detaches (default Ctrl-]).
        #[arg(long, default_value = crate::live::DETACH_KEY_DEFAULT, value_parser = crate::live::parse_detach_key)]
        detach_key: u8,
        /// How much recent output to replay so the screen repaints (262144 … 10485760).
        #[arg(long, default_value_t = 262_144)]
        replay_bytes: usize,
        /// Replay exactly the output after this event seq instead of the recent history.
        #[arg(long)]
        since_seq: Option<u64>,
    },
    /// End the terminal's processes (its history stays).
    Kill {
        terminal: String,
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(command: TerminalCommand, socket: &Path) -> anyhow::Result<i32> {
    crate::paths::check_socket(socket)?;
    let client = Client::unix(socket).with_header(ptyhub_server::auth::VIA_HEADER, "cli");
    let outcome = dispatch(&client, command).await;
    match outcome {
        Ok(code) => Ok(code),
        Err(ClientError::Api(error)) => {
            eprintln!("ptyhub: {}: {}", error.code, error.message);
            Ok(2)
        }
        Err(error) => Err(error.into()),
    }
}

fn print_json(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// Removes control characters a terminal program may have written, before printing them in
/// human output.
fn clean(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control() || *c == '\t')
        .collect()
}

fn print_info(info: &TerminalInfo) {
    println!(
        "{}\t{}\tagent={} session={}\tcwd={}\t{}x{}",
        info.session_id,
        info.state.as_str(),
        info.agent,
        info.session,
        clean(&info.working_dir),
        info.cols,
        info.rows
    );
    if let Some(tmux) = &info.tmux {
        println!(
            "  attach with: tmux -S {} attach -t ={}",
            clean(&tmux.socket),
            clean(&tmux.session)
        );
    }
}

async fn dispatch(client: &Client, command: TerminalCommand) -> Result<i32, ClientError> {
    match command {
        TerminalCommand::Create {
            agent,
            session,
            cwd,
            id,
            backend,
            json,
        } => {
            let params = CreateSessionParams {
                agent: Some(agent),
                session,
                cwd,
                id,
                backend,
                ..CreateSessionParams::default()
            };
            let info = client.create(&params).await?;
            if json {
                print_json(&info);
            } else {
                print_info(&info);
            }
            Ok(0)
        }
        TerminalCommand::List { all, json } => {
            let infos = client.list(all).await?.sessions;
            if json {
                print_json(&infos);
            } else {
                infos.iter().for_each(print_info);
            }
            Ok(0)
        }
        TerminalCommand::Status { terminal, json } => {
            let info = client.terminal(&terminal).status().await?;
            if json {
                print_json(&info);
            } else {
                print_info(&info);
                if let Some(running) = &info.running_command {
                    println!("running: {}", clean(running));
                }
                if let Some(code) = info.exit_code {
                    println!("exit code: {code}");
                }
            }
            Ok(0)
        }
        TerminalCommand::Exec {
            terminal,
            timeout,
            json,
            command,
        } => {
            let params = ExecParams {
                command: command.join(" "),
                timeout,
                truncate: Some(false),
                ..ExecParams::default()
            };
            let result = client.terminal(&terminal).exec(&params).await?;
            if json {
                print_json(&result);
            } else if let Some(output) = &result.output {
                if output.is_empty() {
                    // Nothing printed.
                } else if output.ends_with('\n') {
                    print!("{output}");
                } else {
                    println!("{output}");
                }
            } else {
                eprintln!(
                    "ptyhub: command still {:?} after the timeout",
                    result.status
                );
            }
            Ok(result
                .exit_code
                .unwrap_or(if result.status.is_running() { 124 } else { 1 }))
        }
        TerminalCommand::Screen { terminal, json } => {
            let screen = client.terminal(&terminal).screen().await?;
            if json {
                print_json(&screen);
            } else {
                let mut lines = screen.screen.clone();
                while lines.last().is_some_and(String::is_empty) {
                    lines.pop();
                }
                for line in lines {
                    println!("{}", clean(&line));
                }
            }
            Ok(0)
        }
        TerminalCommand::Send {
            terminal,
            no_submit,
            deadline,
            idle_window,
            flush_on_timeout,
            json,
            text,
        } => {
            let params = SendParams {
                text: text.join(" "),
                submit: !no_submit,
                deadline: Some(deadline),
                idle_window: Some(idle_window),
                on_timeout: flush_on_timeout.then_some(ptyhub_protocol::api::OnTimeout::Flush),
                ..SendParams::default()
            };
            let sent = client.terminal(&terminal).send(&params).await?;
            if json {
                print_json(&sent);
            } else {
                print!("{}", sent.output);
                if !sent.output.is_empty() && !sent.output.ends_with('\n') {
                    println!();
                }
                let reason = serde_json::to_value(sent.wait_reason).unwrap_or_default();
                eprintln!(
                    "[{}{}{}]",
                    reason.as_str().unwrap_or("?"),
                    sent.foreground_program
                        .as_deref()
                        .map(|p| format!(", program: {}", clean(p)))
                        .unwrap_or_default(),
                    if sent.is_password_prompt {
                        ", password prompt"
                    } else {
                        ""
                    }
                );
            }
            Ok(sent.exit_code.unwrap_or(0))
        }
        TerminalCommand::Signal {
            terminal,
            signal,
            json,
        } => {
            let sent = client
                .terminal(&terminal)
                .signal(&SignalParams { signal })
                .await?;
            if json {
                print_json(&sent);
            } else {
                println!(
                    "sent SIG{} to {}{}",
                    sent.signal,
                    sent.program
                        .as_deref()
                        .map(clean)
                        .unwrap_or_else(|| "?".to_owned()),
                    if sent.is_shell { " (the shell)" } else { "" }
                );
            }
            Ok(0)
        }
        TerminalCommand::Export {
            terminal,
            format,
            output,
        } => {
            let mut out: Box<dyn std::io::Write> = match &output {
                Some(path) => Box::new(std::io::BufWriter::new(
                    std::fs::File::create(path).map_err(|e| {
                        ClientError::Http(format!("cannot create {}: {e}", path.display()))
                    })?,
                )),
                None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
            };
            crate::export::export(client, &terminal, &format, &mut out).await?;
            out.flush()
                .map_err(|e| ClientError::Http(format!("cannot write: {e}")))?;
            Ok(0)
        }
        TerminalCommand::Watch {
            terminal,
            since_seq,
            detach_key,
        } => {
            let args = crate::live::LiveArgs {
                terminal,
                is_watch: true,
                detach_key,
                replay_bytes: 262_144,
                since_seq,
            };
            crate::live::run(client, args).await
        }
        TerminalCommand::Attach {
            terminal,
            detach_key,
            replay_bytes,
            since_seq,
        } => {
            let args = crate::live::LiveArgs {
                terminal,
                is_watch: false,
                detach_key,
                replay_bytes,
                since_seq,
            };
            crate::live::run(client, args).await
        }
        TerminalCommand::Kill { terminal, json } => {
            let closed = client.terminal(&terminal).close().await?;
            if json {
                print_json(&closed);
            } else {
                println!("closed {}", closed.session_id);
            }
            Ok(0)
        }
    }
}
