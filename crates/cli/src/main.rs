//! The one `ptyhub` binary: `serve`, the `terminal` client commands over the local socket, and
//! the hidden `holder` entry that every terminal's holder process runs.

#![allow(
    rustdoc::invalid_html_tags,
    reason = "clap shows doc comments as --help text, where <placeholder> is the convention"
)]

mod backend_cmd;
mod config;
mod export;
mod live;
mod mcp;
mod paths;
mod reference;
mod terminal_cmd;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use ptyhub_core::backend::native::NativeBackend;
use ptyhub_core::backend::rootfs::{RootfsBackend, RootfsConfig};
use ptyhub_core::backend::tmux::{Recovery, TmuxBackend};
use ptyhub_core::backend::{Backends, DefaultBackend};
use ptyhub_core::event_log::{EVENT_LOG_KEEP_BYTES, EVENT_LOG_KEEP_MIN_BYTES};
use ptyhub_core::holder::launch::{HOLDER_ARG, HolderLauncher};
use ptyhub_core::registry::{Limits, Registry, RegistryConfig};
use ptyhub_core::state_dir::StateDir;
use ptyhub_server::listener::ServeLimits;
use ptyhub_server::{Server, ServerConfig};
use tokio_util::sync::CancellationToken;

/// Default HTTP listen address (docs/compatibility.md#defaults).
const LISTEN_DEFAULT: &str = "127.0.0.1:18091";
/// After a stop signal, open requests get this long to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

#[derive(Parser)]
#[command(
    name = "ptyhub",
    // The package version and the commit it was built from (build.rs).
    version = env!("PTYHUB_VERSION"),
    about = "Persistent terminals for AI agents and the people who watch them"
)]
struct Cli {
    /// The server's local socket (default: <runtime dir>/server.sock).
    #[arg(long, global = true, env = "PTYHUB_SOCKET")]
    socket: Option<PathBuf>,
    /// How log lines on stderr look: `human` or `json` (one object a line, with the spans
    /// of the request or terminal they belong to). Which lines: `PTYHUB_LOG`, else
    /// `RUST_LOG` (an env-filter directive such as `info,ptyhub_server=debug`). [default:
    /// human; `serve` also reads `log_format` from its config file]
    #[arg(long, global = true, env = "PTYHUB_LOG_FORMAT", value_parser = parse_log_format)]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
#[allow(
    clippy::large_enum_variant,
    reason = "parsed once at start-up; the server's flags are the large one"
)]
enum Command {
    /// Run the server (HTTP on 127.0.0.1:18091 and the local socket).
    Serve(Box<ServeArgs>),
    /// Work with terminals through the local server.
    #[command(subcommand)]
    Terminal(terminal_cmd::TerminalCommand),
    /// Work with the local server's backends (`backend install rootfs`).
    #[command(subcommand)]
    Backend(backend_cmd::BackendCommand),
    /// Serve MCP on stdio, bridged to the local server (started if none runs).
    Mcp(McpArgs),
    /// Print a shell completion script (bash, zsh or fish) on stdout.
    Completions(reference::CompletionsArgs),
    /// Print the man page (roff) on stdout, e.g. `ptyhub man | man -l -`.
    Man,
    /// Internal: the per-terminal holder process.
    #[command(hide = true)]
    Holder,
}

#[derive(clap::Args)]
struct McpArgs {
    /// Seconds one tool call waits at most (exec, send, wait and the Codex pair), under the
    /// MCP client's request timeout; a longer wait answers how to continue it. [default: 50]
    #[arg(long, env = "PTYHUB_MCP_WAIT_CAP_SECS")]
    wait_cap_secs: Option<u64>,
}

/// The MCP wait cap of a `--wait-cap-secs`-style setting (at least 1 s).
fn mcp_wait_cap(secs: Option<u64>) -> Duration {
    secs.map_or(ptyhub_server::mcp::WAIT_CAP_DEFAULT, |secs| {
        Duration::from_secs(secs.max(1))
    })
}

#[derive(clap::Args)]
struct ServeArgs {
    /// State directory (default: $XDG_STATE_HOME/ptyhub or ~/.local/state/ptyhub).
    #[arg(long, env = "PTYHUB_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Runtime directory for sockets (default: $XDG_RUNTIME_DIR/ptyhub or /tmp/ptyhub-<uid>).
    #[arg(long, env = "PTYHUB_RUNTIME_DIR")]
    runtime_dir: Option<PathBuf>,
    /// HTTP address; port 0 picks a free port (the bound address is printed). [default:
    /// 127.0.0.1:18091]
    #[arg(long, env = "PTYHUB_LISTEN")]
    listen: Option<SocketAddr>,
    /// Live terminals at most; one more closes the least recently used idle one. [default: 20]
    #[arg(long, env = "PTYHUB_MAX_TERMINALS")]
    max_terminals: Option<usize>,
    /// Seconds without use after which a terminal is closed. [default: 3600]
    #[arg(long, env = "PTYHUB_IDLE_CLOSE_SECS")]
    idle_close_secs: Option<u64>,
    /// Bytes of event log each terminal keeps (older rotated segments are deleted); a suffix
    /// K, M or G counts in KiB, MiB or GiB. At least 64K. [default: 64M]
    #[arg(
        long,
        env = "PTYHUB_EVENT_LOG_KEEP",
        value_name = "BYTES",
        value_parser = parse_event_log_keep
    )]
    event_log_keep: Option<u64>,
    /// Bearer token (default: generated on first start and kept in <state dir>/token).
    #[arg(long, env = "PTYHUB_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Configuration file (TOML): defaults for these settings and tokens for other owners
    /// with chosen capabilities. [default: <state dir>/config.toml if it exists]
    #[arg(long, env = "PTYHUB_CONFIG")]
    config: Option<PathBuf>,
    /// What hosts a terminal created by name without a `backend`: `auto` (tmux when a usable
    /// tmux is found, else native), `native` or `tmux` (docs/backends.md). Terminals made by
    /// exec or an anonymous WebSocket are always native. [default: auto]
    #[arg(long, env = "PTYHUB_BACKEND", value_parser = parse_backend)]
    backend: Option<DefaultBackend>,
    /// The tmux executable of the tmux backend. [default: tmux on PATH]
    #[arg(long, env = "PTYHUB_TMUX")]
    tmux: Option<PathBuf>,
    /// The default `pids.max` of each terminal's cgroup (docs/backends.md#cgroups).
    /// [default: none]
    #[arg(long, env = "PTYHUB_PIDS_MAX", value_parser = parse_pids_max)]
    pids_max: Option<u64>,
    /// The default memory limit of each terminal's cgroup, in bytes or with a K/M/G suffix.
    /// [default: none]
    #[arg(long, env = "PTYHUB_MEMORY_MAX", value_name = "BYTES", value_parser = parse_memory_max)]
    memory_max: Option<u64>,
    /// Where the rootfs backend keeps its Debian root (one may be shared between servers).
    /// [default: <state dir>/rootfs]
    #[arg(long, env = "PTYHUB_ROOTFS_DIR")]
    rootfs_dir: Option<PathBuf>,
    /// The bubblewrap executable of the rootfs backend. [default: bwrap on PATH]
    #[arg(long, env = "PTYHUB_BWRAP")]
    bwrap: Option<PathBuf>,
    /// The debootstrap executable the rootfs backend installs its root with. [default:
    /// debootstrap on PATH or in /usr/sbin]
    #[arg(long, env = "PTYHUB_DEBOOTSTRAP")]
    debootstrap: Option<PathBuf>,
    /// Connections the TCP listener serves at once; more wait in the kernel's queue. The
    /// local socket has its own budget. [default: a quarter of the open-file limit, at most
    /// 16384]
    #[arg(long, env = "PTYHUB_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    /// Seconds a client may take to send a request's headers (also how long a keep-alive
    /// connection may sit idle). [default: 30]
    #[arg(long, env = "PTYHUB_HEADER_TIMEOUT_SECS")]
    header_timeout_secs: Option<u64>,
    /// Seconds one MCP tool call over `/mcp` waits at most (see `ptyhub mcp --wait-cap-secs`).
    /// [default: 50]
    #[arg(long, env = "PTYHUB_MCP_WAIT_CAP_SECS")]
    mcp_wait_cap_secs: Option<u64>,
    /// Serve HTTPS with this certificate chain (PEM, leaf first); needs --tls-key.
    #[arg(long, env = "PTYHUB_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "PTYHUB_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve plain HTTP on an address beyond loopback (refused without it: the token would
    /// cross the network in clear); for a trusted network or a TLS proxy in front.
    #[arg(long, env = "PTYHUB_ALLOW_PLAIN_HTTP")]
    allow_plain_http: bool,
    /// Seconds between the server's pings on every WebSocket, at least 1: under the idle
    /// timeout of any proxy in front (docs/scale-out.md). [default: 20]
    #[arg(long, env = "PTYHUB_WS_PING_SECS")]
    ws_ping_secs: Option<u64>,
    /// Also serve `GET /metrics` (Prometheus text format) on this address, alone and without
    /// a token (the main listener serves it too, behind the token); who may reach the address
    /// is the operator's choice, so loopback or a private network. [default: none]
    #[arg(long, env = "PTYHUB_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Threads that serve requests and follow terminals, 1 to 1024: the rest of the machine
    /// runs the holders and shells they wait for (docs/operations.md#threads). [default: half
    /// the cores, at least 1]
    #[arg(long, env = "PTYHUB_WORKERS", value_parser = parse_workers)]
    workers: Option<usize>,
}

/// The most worker threads `--workers` takes.
const WORKERS_MAX: usize = 1024;

/// `--workers` / `PTYHUB_WORKERS`.
fn parse_workers(text: &str) -> Result<usize, String> {
    text.trim()
        .parse::<usize>()
        .map_err(|_| format!("{text:?} is not a thread count from 1 to {WORKERS_MAX}"))
        .and_then(check_workers)
}

/// A thread count of the server's runtime, from 1 to [`WORKERS_MAX`].
fn check_workers(workers: usize) -> Result<usize, String> {
    if (1..=WORKERS_MAX).contains(&workers) {
        Ok(workers)
    } else {
        Err(format!(
            "{workers} is not a thread count from 1 to {WORKERS_MAX}"
        ))
    }
}

/// Worker threads when none are asked for: half the cores. An exec passes through the server
/// twice with a holder and a shell between, on the same cores; every hand-off between two
/// workers costs a wake-up of both, and a single worker on two cores leaves the other core to
/// them: less CPU per exec, sooner WebSocket answers, faster creates and fan-out, REST about
/// the same (bench/README.md, "One worker thread on two cores").
fn workers_default() -> usize {
    std::thread::available_parallelism().map_or(1, |cores| (cores.get() / 2).max(1))
}

/// What `serve` reads before its runtime starts (the runtime's size is in the config file).
struct ServeStart {
    state_path: PathBuf,
    file: config::FileConfig,
    workers: usize,
}

impl ServeStart {
    fn load(args: &ServeArgs) -> anyhow::Result<Self> {
        let state_path = args.state_dir.clone().unwrap_or_else(paths::state_dir);
        let file = config::load(args.config.as_deref(), &state_path)?;
        let workers = match (args.workers, file.workers) {
            (Some(workers), _) => workers,
            (None, Some(workers)) => {
                check_workers(workers).map_err(|e| anyhow::anyhow!("config file: workers: {e}"))?
            }
            (None, None) => workers_default(),
        };
        Ok(Self {
            state_path,
            file,
            workers,
        })
    }
}

/// How log lines look (`--log-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Text for people, one line per event.
    #[default]
    Human,
    /// One JSON object per line (journald, a log shipper).
    Json,
}

/// `--log-format` / `PTYHUB_LOG_FORMAT` / `log_format`.
fn parse_log_format(text: &str) -> Result<LogFormat, String> {
    match text {
        "human" => Ok(LogFormat::Human),
        "json" => Ok(LogFormat::Json),
        _ => Err(format!("{text:?} is not a log format (human or json)")),
    }
}

/// The log filter when neither `PTYHUB_LOG` nor `RUST_LOG` is set.
const LOG_FILTER_DEFAULT: &str = "warn,ptyhub=info";

/// Sends log lines to stderr (stdout belongs to the protocol of `ptyhub mcp`), filtered by
/// `PTYHUB_LOG`, else `RUST_LOG`, else [`LOG_FILTER_DEFAULT`], in `format`.
fn init_logs(format: LogFormat) {
    let filter = ["PTYHUB_LOG", "RUST_LOG"]
        .into_iter()
        .find_map(|name| {
            std::env::var(name)
                .ok()
                .filter(|value| !value.trim().is_empty())
                .and_then(|value| tracing_subscriber::EnvFilter::try_new(value).ok())
        })
        .unwrap_or_else(|| LOG_FILTER_DEFAULT.into());
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match format {
        LogFormat::Human => logs.init(),
        LogFormat::Json => logs
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
}

/// Connections the local socket serves at once.
const UNIX_CONNECTIONS_MAX: usize = 1024;

/// The TCP listener's default connection budget: a quarter of the open-file limit (the rest
/// is for terminals, their logs and the local socket), between 64 and 16384.
fn default_max_connections() -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(4096);
    usize::try_from(soft / 4).unwrap_or(16384).clamp(64, 16384)
}

/// Whether this process was started as `ptyhub holder`, as the launcher starts it (with global
/// options too it goes through the parser first).
fn is_holder_invocation() -> bool {
    let mut args = std::env::args_os().skip(1);
    args.next().is_some_and(|first| first == HOLDER_ARG) && args.next().is_none()
}

/// `--backend` / `PTYHUB_BACKEND`.
fn parse_backend(text: &str) -> Result<DefaultBackend, String> {
    DefaultBackend::parse(text)
        .ok_or_else(|| format!("{text:?} is not a backend (auto, native, tmux or rootfs)"))
}

fn main() -> std::process::ExitCode {
    // A holder lives as long as its terminal, one per terminal: it starts before the parser,
    // whose command tree costs tens of KiB of stack and heap that would stay resident in
    // every holder (docs/memory.md).
    if is_holder_invocation() {
        return exit_code(ptyhub_core::holder::run());
    }
    let cli = Cli::parse();
    if matches!(cli.command, Command::Holder) {
        return exit_code(ptyhub_core::holder::run());
    }
    // `serve` starts its logs once it has read its config file, which may name the format.
    if !matches!(cli.command, Command::Serve(_)) {
        init_logs(cli.log_format.unwrap_or_default());
    }
    // The server runs on every core; a client (one request, or one live connection that
    // only moves bytes) is cheaper on one thread — a hundred `terminal watch` processes add
    // up.
    // Before the runtime's threads exist, so they inherit it; said once the logs run.
    let priority_refused = if matches!(cli.command, Command::Serve(_)) {
        ptyhub_core::process::raise_server_priority()
    } else {
        Vec::new()
    };
    let start = match &cli.command {
        Command::Serve(args) => match ServeStart::load(args) {
            Ok(start) => Some(start),
            Err(error) => return failed(&error),
        },
        _ => None,
    };
    let mut builder = match &start {
        Some(start) => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(start.workers);
            builder
        }
        None => tokio::runtime::Builder::new_current_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => return failed(&anyhow::anyhow!("cannot start the runtime: {error}")),
    };
    let outcome = runtime.block_on(async move {
        match cli.command {
            Command::Serve(args) => match start {
                Some(start) => serve(*args, start, cli.socket, cli.log_format, priority_refused)
                    .await
                    .map(|()| 0),
                None => Err(anyhow::anyhow!(
                    "the server's start-up settings were not read"
                )),
            },
            Command::Terminal(command) => {
                let socket = cli
                    .socket
                    .unwrap_or_else(|| paths::runtime_dir().join("server.sock"));
                terminal_cmd::run(command, &socket).await
            }
            Command::Backend(command) => {
                let socket = cli
                    .socket
                    .unwrap_or_else(|| paths::runtime_dir().join("server.sock"));
                backend_cmd::run(command, &socket).await
            }
            Command::Mcp(args) => {
                let socket = cli
                    .socket
                    .unwrap_or_else(|| paths::runtime_dir().join("server.sock"));
                mcp::run(&socket, mcp_wait_cap(args.wait_cap_secs))
                    .await
                    .map(|()| 0)
            }
            Command::Completions(args) => reference::completions::<Cli>(&args),
            Command::Man => reference::man::<Cli>(),
            Command::Holder => Ok(0),
        }
    });
    runtime.shutdown_timeout(Duration::from_millis(100));
    match outcome {
        Ok(code) => exit_code(code),
        Err(error) => failed(&error),
    }
}

/// Says why the binary stops, as its last word before exit code 1.
fn failed(error: &anyhow::Error) -> std::process::ExitCode {
    #[allow(
        clippy::print_stderr,
        reason = "the binary's last word before its exit code"
    )]
    {
        eprintln!("ptyhub: {error:#}");
    }
    exit_code(1)
}

/// A byte count with an optional binary suffix (`262144`, `256K`, `64MiB`), at least
/// [`EVENT_LOG_KEEP_MIN_BYTES`].
fn parse_event_log_keep(text: &str) -> Result<u64, String> {
    let bytes = parse_byte_count(text)?;
    if bytes < EVENT_LOG_KEEP_MIN_BYTES {
        return Err(format!(
            "{bytes} bytes is too little: a terminal keeps at least {EVENT_LOG_KEEP_MIN_BYTES} bytes (64K) of event log"
        ));
    }
    Ok(bytes)
}

/// A terminal's default memory limit: a byte count as [`parse_byte_count`] reads it, within
/// the bounds a create's `limits.memory_max_bytes` has.
fn parse_memory_max(text: &str) -> Result<u64, String> {
    let bytes = parse_byte_count(text)?;
    ptyhub_core::cgroup::check_limits(&ptyhub_protocol::api::CgroupLimits {
        pids_max: None,
        memory_max_bytes: Some(bytes),
    })
    .map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// A terminal's default process limit, within the bounds a create's `limits.pids_max` has.
fn parse_pids_max(text: &str) -> Result<u64, String> {
    let max = text
        .trim()
        .parse::<u64>()
        .map_err(|_| format!("{text:?} is not a number of processes"))?;
    ptyhub_core::cgroup::check_limits(&ptyhub_protocol::api::CgroupLimits {
        pids_max: Some(max),
        memory_max_bytes: None,
    })
    .map_err(|e| e.to_string())?;
    Ok(max)
}

/// A byte count with an optional binary suffix (`262144`, `256K`, `64MiB`, `1G`).
fn parse_byte_count(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, suffix) = text.split_at(digits);
    let unit: u64 = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => {
            return Err(format!(
                "{text:?} is not a byte count (like 67108864 or 64M)"
            ));
        }
    };
    let bytes = number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("{text:?} is not a byte count (like 67108864 or 64M)"))?;
    Ok(bytes)
}

fn exit_code(code: i32) -> std::process::ExitCode {
    std::process::ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(1))
}

async fn serve(
    args: ServeArgs,
    start: ServeStart,
    socket: Option<PathBuf>,
    log_format: Option<LogFormat>,
    priority_refused: Vec<String>,
) -> anyhow::Result<()> {
    let ServeStart {
        state_path,
        file,
        workers,
    } = start;
    init_logs(match log_format {
        Some(format) => format,
        None => file.log_format()?.unwrap_or_default(),
    });
    for refused in priority_refused {
        tracing::debug!(%refused, "the server runs at the priority it was given");
    }
    let runtime_dir = args
        .runtime_dir
        .or_else(|| file.runtime_dir.clone())
        .unwrap_or_else(paths::runtime_dir);
    let listen = match args.listen.or(file.listen) {
        Some(listen) => listen,
        None => LISTEN_DEFAULT
            .parse()
            .context("the default listen address")?,
    };
    let max_terminals = args.max_terminals.or(file.max_terminals).unwrap_or(20);
    let idle_close_secs = args
        .idle_close_secs
        .or(file.idle_close_secs)
        .unwrap_or(3600);
    let event_log_keep = match args.event_log_keep {
        Some(bytes) => bytes,
        None => file.event_log_keep()?.unwrap_or(EVENT_LOG_KEEP_BYTES),
    };
    let state_dir = StateDir::open(&state_path)
        .with_context(|| format!("cannot open state dir {}", state_path.display()))?;
    // Held until this function returns: one server per state dir.
    let _state_lock = state_dir.lock()?;
    let token = match args.token.or_else(|| file.token.clone()) {
        Some(token) if !token.trim().is_empty() => token,
        Some(_) => anyhow::bail!("the token must not be empty"),
        None => paths::load_or_create_token(&state_path)?,
    };
    let grants = file.grants(&token)?;
    let os_users = file.os_users()?;
    let default_backend = match args.backend {
        Some(backend) => backend,
        None => file.backend()?.unwrap_or_default(),
    };
    let cgroups = ptyhub_core::cgroup::Cgroups::detect(
        &state_path,
        ptyhub_protocol::api::CgroupLimits {
            pids_max: args.pids_max.or(file.pids_max()?),
            memory_max_bytes: args.memory_max.or(file.memory_max()?),
        },
    );
    // Before any terminal has a screen; held until this function returns, however it does
    // (docs/backends.md#priority).
    let _screen_group = ptyhub_core::screen_worker::run_in_screen_cpu_group(&state_path);
    let (launcher, note) = HolderLauncher::find().context("cannot find the ptyhub executable")?;
    if let Some(note) = note {
        tracing::warn!("{note}");
    }
    let tmux = TmuxBackend::new(
        launcher.clone(),
        args.tmux.or_else(|| file.tmux.clone()),
        Some(Recovery {
            state_dir: state_dir.clone(),
            event_log_keep,
        }),
    );
    let rootfs = RootfsBackend::new(
        launcher.clone(),
        RootfsConfig {
            dir: args
                .rootfs_dir
                .or_else(|| file.rootfs_dir.clone())
                .unwrap_or_else(|| state_dir.root().join("rootfs")),
            bwrap: args.bwrap,
            debootstrap: args.debootstrap,
            etc: PathBuf::from("/etc"),
        },
    );
    let registry = Registry::new(RegistryConfig {
        state_dir,
        runtime_dir: runtime_dir.clone(),
        backends: Backends::new(
            NativeBackend::new(launcher),
            vec![tmux, rootfs],
            default_backend,
        )
        .with_cgroups(cgroups),
        limits: Limits {
            max_live: max_terminals.max(1),
            idle_close: Duration::from_secs(idle_close_secs.max(1)),
            event_log_keep,
        },
        agent_env: ptyhub_core::creation::agent_env_with(&file.agent_env),
        os_users,
        confined_owners: grants.iter().map(|grant| grant.owner.clone()).collect(),
    })
    .with_context(|| format!("cannot create runtime dir {}", runtime_dir.display()))?;
    let rediscovered = registry.discover().await;
    registry.spawn_idle_reaper();
    let socket_path = socket.unwrap_or_else(|| runtime_dir.join("server.sock"));
    let header_read_timeout = Duration::from_secs(args.header_timeout_secs.unwrap_or(30).max(1));
    let tls = match (args.tls_cert, args.tls_key) {
        (Some(cert), Some(key)) => Some(ptyhub_server::tls::TlsFiles { cert, key }),
        _ => None,
    };
    let server = Server::bind(ServerConfig {
        listen,
        token: token.clone(),
        socket_path: socket_path.clone(),
        registry,
        grants,
        tcp_limits: ServeLimits {
            max_connections: args.max_connections.unwrap_or_else(default_max_connections),
            header_read_timeout,
        },
        unix_limits: ServeLimits {
            max_connections: UNIX_CONNECTIONS_MAX,
            header_read_timeout,
        },
        mcp_wait_cap: mcp_wait_cap(args.mcp_wait_cap_secs),
        tls: tls.clone(),
        allow_plain_http: args.allow_plain_http,
        ws_ping_every: args
            .ws_ping_secs
            .map_or(ptyhub_server::ws::PING_EVERY_DEFAULT, |secs| {
                Duration::from_secs(secs.max(1))
            }),
        metrics_listen: args.metrics_listen.or(file.metrics_listen),
    })
    .await
    .with_context(|| format!("cannot listen on {} and {}", listen, socket_path.display()))?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}/", server.local_addr);
    // The fragment is never sent to the server; the page trades it for a login cookie and
    // removes it from the address bar.
    let web = format!("{url}#token={}", fragment_encode(&token));
    // Plain HTTP beyond loopback was asked for (`Server::bind` refuses it otherwise): said
    // first, where nobody misses it.
    let warning = if tls.is_none() && !ptyhub_server::tls::is_loopback(server.local_addr) {
        let warning = format!(
            "plain HTTP on {}, reachable beyond this machine (--allow-plain-http): the token \
             and every terminal's bytes cross the network in clear",
            server.local_addr
        );
        tracing::warn!("{warning}");
        format!("  WARNING: {warning}\n")
    } else {
        String::new()
    };
    let metrics = server
        .metrics_addr
        .map(|addr| format!("  metrics: http://{addr}/metrics\n"))
        .unwrap_or_default();
    let banner = format!(
        "ptyhub {} serving\n{warning}  url:    {url}\n  web:    {web}\n  token:  {token}\n  state:  {}\n  socket: {}\n{metrics}  workers: {workers}\n  terminals found: {rediscovered}\n",
        env!("CARGO_PKG_VERSION"),
        state_path.display(),
        socket_path.display()
    );
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(banner.as_bytes());
        let _ = out.flush();
    }
    let shutdown = CancellationToken::new();
    let stopper = shutdown.clone();
    tokio::spawn(async move {
        wait_for_stop_signal().await;
        stopper.cancel();
    });
    let serving = tokio::spawn(server.run(shutdown.clone()));
    shutdown.cancelled().await;
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, serving).await;
    tracing::info!("stopped; terminals keep running");
    Ok(())
}

/// Percent-encodes everything but unreserved characters (RFC 3986), for a URL fragment value.
fn fragment_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

async fn wait_for_stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_log_keep_takes_bytes_or_a_binary_suffix_and_refuses_too_little() {
        assert_eq!(parse_event_log_keep("67108864"), Ok(EVENT_LOG_KEEP_BYTES));
        assert_eq!(parse_event_log_keep("64M"), Ok(EVENT_LOG_KEEP_BYTES));
        assert_eq!(parse_event_log_keep("256KiB"), Ok(256 * 1024));
        assert_eq!(parse_event_log_keep("65536"), Ok(65536));
        assert_eq!(parse_event_log_keep("1g"), Ok(1 << 30));
        for refused in [
            "65535",
            "63K",
            "0",
            "",
            "M",
            "12 parsecs",
            "-1",
            "99999999999999999999G",
        ] {
            assert!(parse_event_log_keep(refused).is_err(), "{refused:?}");
        }
        assert!(parse_event_log_keep("1000").is_err_and(|e| e.contains("at least 65536")));
    }

    #[test]
    fn a_token_survives_the_fragment() {
        assert_eq!(fragment_encode("abc123-._~"), "abc123-._~");
        assert_eq!(fragment_encode("a b&c=d#e+f%"), "a%20b%26c%3Dd%23e%2Bf%25");
        assert_eq!(fragment_encode("é"), "%C3%A9");
    }
}
