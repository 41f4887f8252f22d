//! Test support: start the real `ptyhub` binary on a throwaway state dir and port 0, talk to
//! it over HTTP and the local socket, wait on conditions (never on time), and clean up every
//! holder and process the test started (holders outlive the server by design).

#![allow(
    clippy::panic,
    reason = "test support fails the test that uses it by panicking"
)]

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ptyhub_client::Client;
use serde_json::Value;

/// How long `wait_until` waits by default; `PTYHUB_TEST_TIMEOUT_SECS` raises it.
pub fn default_timeout() -> Duration {
    let secs = std::env::var("PTYHUB_TEST_TIMEOUT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    Duration::from_secs(secs)
}

/// Polls `check` until it returns `Some`, or panics with `what` after the default timeout.
pub async fn wait_until<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + default_timeout();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A running `ptyhub serve` with its own state and runtime directories.
pub struct Ptyhub {
    exe: PathBuf,
    server: Option<Child>,
    serve_args: Vec<String>,
    serve_env: Vec<(String, String)>,
    pub addr: String,
    /// The banner's web address (`http://…/#token=…`).
    pub web_url: String,
    pub token: String,
    pub socket: PathBuf,
    state: tempfile::TempDir,
    runtime: tempfile::TempDir,
    home: tempfile::TempDir,
    /// The token reaches the server through its environment only, not its command line.
    is_token_in_env_only: bool,
    /// Where the server's stderr goes (appended), instead of the test's.
    log: Option<PathBuf>,
    /// What `--listen` says: port 0 unless [`Ptyhub::keep_port`] was called.
    listen: String,
}

impl Ptyhub {
    /// Starts the binary at `exe` (use `env!("CARGO_BIN_EXE_ptyhub")`).
    pub fn start(exe: &str) -> Self {
        Self::start_with(exe, &[])
    }

    /// Starts the binary with extra `serve` flags.
    pub fn start_with(exe: &str, serve_args: &[&str]) -> Self {
        Self::start_with_env(exe, serve_args, &[])
    }

    /// Starts the binary with extra `serve` flags and environment variables (kept for
    /// restarts, like the flags).
    pub fn start_with_env(exe: &str, serve_args: &[&str], env: &[(&str, &str)]) -> Self {
        let state = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let runtime = tempfile::Builder::new()
            .prefix("ph")
            .tempdir_in("/tmp")
            .unwrap_or_else(|e| panic!("tempdir: {e}"));
        let home = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let mut hub = Self {
            exe: PathBuf::from(exe),
            server: None,
            serve_args: serve_args.iter().map(|a| (*a).to_owned()).collect(),
            serve_env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            addr: String::new(),
            web_url: String::new(),
            token: "test-token".to_owned(),
            socket: runtime.path().join("ptyhub").join("server.sock"),
            state,
            runtime,
            home,
            is_token_in_env_only: false,
            log: None,
            listen: "127.0.0.1:0".to_owned(),
        };
        hub.launch();
        hub
    }

    /// Starts the binary with `token` given through `PTYHUB_TOKEN` only, its stderr (with
    /// `PTYHUB_LOG=debug`) kept in a file [`Ptyhub::server_log`] reads: for checks that a
    /// secret appears nowhere it should not.
    pub fn start_logged_with_token(exe: &str, token: &str) -> Self {
        Self::start_logged_with_token_and(exe, token, &[])
    }

    /// [`Ptyhub::start_logged_with_token`] with extra `serve` flags (`--log-format json`).
    pub fn start_logged_with_token_and(exe: &str, token: &str, serve_args: &[&str]) -> Self {
        let state = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let runtime = tempfile::Builder::new()
            .prefix("ph")
            .tempdir_in("/tmp")
            .unwrap_or_else(|e| panic!("tempdir: {e}"));
        let home = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let log = home.path().join("server.log");
        let mut hub = Self {
            exe: PathBuf::from(exe),
            server: None,
            serve_args: serve_args.iter().map(|arg| (*arg).to_owned()).collect(),
            serve_env: vec![("PTYHUB_LOG".to_owned(), "debug".to_owned())],
            addr: String::new(),
            web_url: String::new(),
            token: token.to_owned(),
            socket: runtime.path().join("ptyhub").join("server.sock"),
            state,
            runtime,
            home,
            is_token_in_env_only: true,
            log: Some(log),
            listen: "127.0.0.1:0".to_owned(),
        };
        hub.launch();
        hub
    }

    /// What the server wrote to stderr, when started with [`Ptyhub::start_logged_with_token`].
    pub fn server_log(&self) -> String {
        self.log
            .as_ref()
            .and_then(|log| std::fs::read_to_string(log).ok())
            .unwrap_or_default()
    }

    fn launch(&mut self) {
        let mut command = Command::new(&self.exe);
        command.arg("serve");
        // In a session of its own, as a service runs (and as the server then takes its
        // scheduler group's priority: docs/backends.md#priority).
        #[allow(
            unsafe_code,
            reason = "setsid between fork and exec has no safe spelling"
        )]
        // SAFETY: one async-signal-safe system call between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                rustix::process::setsid()
                    .map(|_| ())
                    .map_err(std::io::Error::from)
            });
        }
        // Port 0 (or the one kept by `keep_port`) unless the test names its own address.
        if !self
            .serve_args
            .iter()
            .any(|arg| arg == "--listen" || arg.starts_with("--listen="))
        {
            command.args(["--listen", &self.listen]);
        }
        if !self.is_token_in_env_only {
            command.args(["--token", &self.token]);
        }
        let stderr = match &self.log {
            Some(log) => std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .map(Stdio::from)
                .unwrap_or_else(|e| panic!("{}: {e}", log.display())),
            None => Stdio::inherit(),
        };
        let mut child = command
            .arg("--state-dir")
            .arg(self.state.path())
            .args(&self.serve_args)
            .env("XDG_RUNTIME_DIR", self.runtime.path())
            // Shells start in an empty home: the machine's own rc files (version managers,
            // prompts) are not what the tests are about, and can be slow or stateful.
            .env("HOME", self.home.path())
            // Also in the environment, so tests can check it never reaches a shell.
            .env("PTYHUB_TOKEN", &self.token)
            .env_remove("PTYHUB_SOCKET")
            // Every test keeps the native backend unless it asks for another one.
            .env("PTYHUB_BACKEND", "native")
            .envs(self.serve_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start ptyhub: {e}"));
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let mut lines = BufReader::new(stdout).lines();
        let mut addr = None;
        let web_url = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(url) = line.trim().strip_prefix("url:") {
                        addr = Some(
                            url.trim()
                                .trim_start_matches("http://")
                                .trim_end_matches('/')
                                .to_owned(),
                        );
                    } else if let Some(web) = line.trim().strip_prefix("web:") {
                        break web.trim().to_owned();
                    }
                }
                _ => panic!("ptyhub exited before printing its url and web url"),
            }
        };
        std::thread::spawn(move || for _ in lines {});
        self.addr = addr.unwrap_or_else(|| panic!("no url: line before web:"));
        self.web_url = web_url;
        self.server = Some(child);
    }

    /// A client over HTTP with the token.
    pub fn http(&self) -> Client {
        Client::tcp(self.addr.clone(), self.token.clone())
    }

    /// A client over the local socket.
    pub fn local(&self) -> Client {
        Client::unix(self.socket.clone())
    }

    pub fn state_dir(&self) -> &Path {
        self.state.path()
    }

    /// The server's `XDG_RUNTIME_DIR` (its sockets, and the shells' integration files).
    pub fn runtime_dir(&self) -> &Path {
        self.runtime.path()
    }

    /// The server's pid.
    pub fn server_pid(&self) -> Option<u32> {
        self.server.as_ref().map(Child::id)
    }

    /// `kill -9` the server (holders keep running).
    pub fn kill_server(&mut self) {
        if let Some(mut child) = self.server.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM the server and wait for it.
    pub fn stop_server(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.server.take()?;
        ptyhub_core::process::kill(child.id(), rustix::process::Signal::TERM);
        child.wait().ok()
    }

    /// Starts the server again on the same state dir (a new port, unless the test named one
    /// with `--listen`).
    pub fn restart(&mut self) {
        self.kill_server();
        self.launch();
    }

    /// Makes every later start listen on the port the server has now, as a server restarted
    /// by an operator does: a page that was open reconnects to the same address.
    pub fn keep_port(&mut self) {
        self.listen.clone_from(&self.addr);
    }

    /// Starts the server again on the same state dir (a new port unless kept) after
    /// [`Ptyhub::stop_server`], from the binary at `exe` when given (another build of ptyhub:
    /// the CLI and the cleanup use it from then on).
    pub fn start_again(&mut self, exe: Option<&Path>) {
        self.kill_server();
        if let Some(exe) = exe {
            self.exe = exe.to_path_buf();
        }
        self.launch();
    }

    /// Runs `ptyhub <args>` as a CLI client over the local socket.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(&self.exe)
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run ptyhub cli: {e}"))
    }

    /// The directory of terminal `id` under the state dir, if it has one.
    pub fn terminal_dir(&self, id: &str) -> Option<PathBuf> {
        let mut dirs = Vec::new();
        collect_terminal_dirs(self.state.path(), &mut dirs);
        dirs.into_iter()
            .find(|dir| dir.file_name().is_some_and(|name| name == id))
    }

    /// Every `meta.json` under the state dir.
    pub fn metas(&self) -> Vec<Value> {
        let mut found = Vec::new();
        collect_metas(self.state.path(), &mut found);
        found
    }

    /// Holder pids recorded in the state dir.
    pub fn holder_pids(&self) -> Vec<u32> {
        self.metas()
            .iter()
            .filter_map(|m| m.get("holder_pid").and_then(Value::as_u64))
            .filter_map(|p| u32::try_from(p).ok())
            .collect()
    }
}

fn collect_terminal_dirs(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.join("meta.json").is_file() {
                found.push(path.clone());
            }
            collect_terminal_dirs(&path, found);
        }
    }
}

/// Runs `ptyhub serve` with extra flags and environment variables on throwaway directories and
/// port 0, for a configuration it must refuse, and returns how it exited and what it wrote to
/// stderr. Fails the test (after killing it) if it serves instead.
pub fn serve_refused(
    exe: &str,
    serve_args: &[&str],
    env: &[(&str, &str)],
) -> (std::process::ExitStatus, String) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let mut child = Command::new(exe)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--token",
            "test-token",
            "--state-dir",
        ])
        .arg(dir.path().join("state"))
        .args(serve_args)
        .env("XDG_RUNTIME_DIR", dir.path())
        .env("HOME", dir.path())
        .env_remove("PTYHUB_SOCKET")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start ptyhub: {e}"));
    let deadline = std::time::Instant::now() + default_timeout();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(25));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("ptyhub serve {serve_args:?} with {env:?} did not refuse to start");
            }
        }
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
    }
    // A server that refused to start leaves no cgroup of its own behind.
    if let Some(group) = ptyhub_core::cgroup::screen_cpu_group_dir(&dir.path().join("state")) {
        assert!(
            !group.exists(),
            "ptyhub serve {serve_args:?} refused to start and left {}",
            group.display()
        );
    }
    (status, stderr)
}

fn collect_metas(dir: &Path, found: &mut Vec<Value>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_metas(&path, found);
        } else if path.file_name().is_some_and(|n| n == "meta.json")
            && let Ok(text) = std::fs::read(&path)
            && let Ok(value) = serde_json::from_slice(&text)
        {
            found.push(value);
        }
    }
}

pub use ptyhub_core::process::{descendants, is_alive};

/// `kill -9` of one process.
pub fn kill_9(pid: u32) {
    ptyhub_core::process::kill(pid, rustix::process::Signal::KILL);
}

/// Live processes (of any parent) one of whose arguments is exactly `arg`: a test gives the
/// processes it starts an argument no other process has, and finds them by it even after they
/// were reparented.
pub fn processes_with_arg(arg: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| cmdline.split(|&b| b == 0).any(|a| a == arg.as_bytes()))
        })
        .filter(|&pid| is_alive(pid))
        .collect()
}

/// Kills, when dropped, every process that carries one of its arguments
/// ([`processes_with_arg`]): what a test started cannot outlive it, however it ends.
pub struct KillOnDrop {
    pub args: Vec<String>,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for arg in &self.args {
            for pid in processes_with_arg(arg) {
                kill_9(pid);
            }
        }
    }
}

impl Drop for Ptyhub {
    fn drop(&mut self) {
        self.kill_server();
        for holder in self.holder_pids() {
            for pid in descendants(holder).into_iter().chain([holder]) {
                // Processes this test started (found under its holders).
                ptyhub_core::process::kill(pid, rustix::process::Signal::KILL);
            }
        }
        for meta in self.metas() {
            // A tmux terminal's server, by its socket, and whatever carries its mark.
            if let Some(socket) = meta.pointer("/tmux/socket").and_then(Value::as_str) {
                let _ = Command::new("tmux")
                    .args(["-S", socket, "kill-server"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
            if let Some(mark) = meta.get("process_mark").and_then(Value::as_str) {
                for pid in ptyhub_core::process::marked_processes(mark) {
                    ptyhub_core::process::kill(pid, rustix::process::Signal::KILL);
                }
            }
        }
        // Every terminal's cgroup, whatever is left in it, and the state dir's own.
        ptyhub_core::cgroup::remove_all(self.state.path());
    }
}

/// `data` of an envelope, or a panic with the whole body.
pub fn data(answer: &ptyhub_client::Answer) -> &Value {
    answer
        .body
        .get("data")
        .unwrap_or_else(|| panic!("no data in {}", answer.body))
}

/// A private tmux server (its own socket name) with one session, for driving interactive
/// commands the way a person does: keys in, the visible pane out. Killed when dropped.
pub struct Tmux {
    name: String,
}

impl Tmux {
    /// Starts a `cols`×`rows` session running `command` under `sh -c`, with `env` added.
    pub fn start(command: &str, cols: u16, rows: u16, env: &[(&str, &str)]) -> Self {
        let name = format!("ptyhub-test-{}-{}", std::process::id(), rand_suffix());
        let tmux = Self { name };
        let mut args: Vec<String> = vec![
            "new-session".into(),
            "-d".into(),
            "-s".into(),
            "main".into(),
            "-x".into(),
            cols.to_string(),
            "-y".into(),
            rows.to_string(),
        ];
        for (key, value) in env {
            args.push("-e".into());
            args.push(format!("{key}={value}"));
        }
        args.push(command.to_owned());
        tmux.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        tmux.run(&["set-option", "-g", "remain-on-exit", "on"]);
        tmux
    }

    /// Runs a tmux command on this server; panics if it fails.
    pub fn run(&self, args: &[&str]) -> String {
        let output = Command::new("tmux")
            .args(["-L", &self.name, "-f", "/dev/null"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run tmux (is it installed?): {e}"));
        assert!(
            output.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Types keys (tmux key names, e.g. `Enter`, `C-c`) into the pane.
    pub fn send_keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "main"];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    /// Types text literally, then Enter.
    pub fn type_line(&self, text: &str) {
        self.run(&["send-keys", "-t", "main", "-l", text]);
        self.send_keys(&["Enter"]);
    }

    /// The visible pane.
    pub fn capture(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "main"])
    }

    /// Waits until the pane shows `text`.
    pub async fn wait_for(&self, text: &str) -> String {
        let deadline = tokio::time::Instant::now() + default_timeout();
        loop {
            let pane = self.capture();
            if pane.contains(text) {
                return pane;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting until the pane shows {text:?}; it shows:\n{pane}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()))
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.name, "kill-server"])
            .stdin(Stdio::null())
            .output();
    }
}
