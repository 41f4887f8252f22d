//! What a server trusts on its machine: a socket directory only this user can write to, the
//! state directory for one server at a time, and never another live server's socket.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use super::{create, start};
use ptyhub_test_support::default_timeout;

/// Runs `ptyhub serve` with `args` on port 0, expecting it to refuse: its exit status and
/// stderr. Fails the test (after killing it) if it serves instead.
fn refused(args: &[&str], runtime: &Path) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ptyhub"))
        .args(["serve", "--listen", "127.0.0.1:0", "--token", "test-token"])
        .args(args)
        .env("XDG_RUNTIME_DIR", runtime)
        .env("HOME", runtime)
        .env_remove("PTYHUB_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start ptyhub: {e}"));
    let deadline = Instant::now() + default_timeout();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(25)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("ptyhub serve {args:?} did not refuse to start");
            }
        }
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
    }
    (status, stderr)
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_takes_neither_the_state_dir_nor_the_socket() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    let other = tempdir();
    let state = hub.state_dir().to_string_lossy().into_owned();
    let (status, stderr) = refused(&["--state-dir", &state], other.path());
    assert!(!status.success());
    assert!(
        stderr.contains("another ptyhub server uses the state dir"),
        "{stderr}"
    );

    let socket = hub.socket.to_string_lossy().into_owned();
    let own_state = other.path().join("state").to_string_lossy().into_owned();
    let (status, stderr) = refused(
        &["--state-dir", &own_state, "--socket", &socket],
        other.path(),
    );
    assert!(!status.success());
    assert!(
        stderr.contains("another ptyhub server answers on"),
        "{stderr}"
    );
    // It refused after making its screen thread's cgroup, and took that with it.
    if let Some(group) = ptyhub_core::cgroup::screen_cpu_group_dir(Path::new(&own_state)) {
        assert!(!group.exists(), "{} outlived its server", group.display());
    }

    // The first server still has both.
    let listed = hub.cli(&["terminal", "list"]);
    assert!(listed.status.success(), "{listed:?}");
    assert!(String::from_utf8_lossy(&listed.stdout).contains(&id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_dir_others_could_write_to_is_refused() {
    let base = tempdir();
    let state = base.path().join("state").to_string_lossy().into_owned();

    let open = base.path().join("open");
    std::fs::create_dir(&open).unwrap_or_else(|e| panic!("mkdir: {e}"));
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777))
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    let open_arg = open.to_string_lossy().into_owned();
    let (status, stderr) = refused(
        &["--state-dir", &state, "--runtime-dir", &open_arg],
        base.path(),
    );
    assert!(!status.success());
    assert!(stderr.contains("its mode is 0777"), "{stderr}");
    // A state dir others may write to is refused too (they could swap a terminal's files).
    let runtime = base.path().join("runtime").to_string_lossy().into_owned();
    let (status, stderr) = refused(
        &["--state-dir", &open_arg, "--runtime-dir", &runtime],
        base.path(),
    );
    assert!(!status.success());
    assert!(stderr.contains("others may write to it"), "{stderr}");

    let real = base.path().join("real");
    std::fs::create_dir(&real).unwrap_or_else(|e| panic!("mkdir: {e}"));
    let link = base.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap_or_else(|e| panic!("symlink: {e}"));
    let link_arg = link.to_string_lossy().into_owned();
    let (status, stderr) = refused(
        &["--state-dir", &state, "--runtime-dir", &link_arg],
        base.path(),
    );
    assert!(!status.success());
    assert!(stderr.contains("symbolic link"), "{stderr}");

    if rustix::process::geteuid().is_root() {
        let foreign = base.path().join("foreign");
        std::fs::create_dir(&foreign).unwrap_or_else(|e| panic!("mkdir: {e}"));
        std::fs::set_permissions(&foreign, std::fs::Permissions::from_mode(0o700))
            .unwrap_or_else(|e| panic!("chmod: {e}"));
        std::os::unix::fs::chown(&foreign, Some(65534), Some(65534))
            .unwrap_or_else(|e| panic!("chown: {e}"));
        let foreign_arg = foreign.to_string_lossy().into_owned();
        let (status, stderr) = refused(
            &["--state-dir", &state, "--runtime-dir", &foreign_arg],
            base.path(),
        );
        assert!(!status.success());
        assert!(stderr.contains("belongs to uid 65534"), "{stderr}");
    } else {
        #[allow(
            clippy::print_stderr,
            reason = "a skipped check says so in the test output"
        )]
        {
            eprintln!("SKIPPED part: a directory of another uid needs root to make (chown)");
        }
    }
}

/// The CLI talks to no socket another user could have put in its place.
#[test]
fn the_cli_refuses_a_socket_in_a_directory_others_can_write_to() {
    let base = tempdir();
    let open = base.path().join("open");
    std::fs::create_dir(&open).unwrap_or_else(|e| panic!("mkdir: {e}"));
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777))
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    let socket = open.join("server.sock").to_string_lossy().into_owned();
    let output = Command::new(env!("CARGO_BIN_EXE_ptyhub"))
        .args(["--socket", &socket, "terminal", "list"])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("ptyhub: {e}"));
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("refusing to use the socket") && stderr.contains("mode 0777"),
        "{stderr}"
    );
}

/// A server whose session's leader lives outside its pid namespace (a container, a CI runner
/// started it there) starts and serves: the kernel answers 0 for its session there, which once
/// made it panic at start.
#[test]
fn a_server_in_a_pid_namespace_its_session_leader_is_outside_of_serves() {
    if !rustix::process::geteuid().is_root() {
        #[allow(
            clippy::print_stderr,
            reason = "a skipped test says so in the test output"
        )]
        {
            eprintln!("SKIPPED the pid namespace test: a pid namespace needs root here");
        }
        return;
    }
    let home = tempdir();
    let state = home.path().join("state");
    let mut child = Command::new("unshare")
        .args(["--pid", "--kill-child", "--"])
        .arg(env!("CARGO_BIN_EXE_ptyhub"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--token",
            "test-token",
            "--state-dir",
        ])
        .arg(&state)
        .env("XDG_RUNTIME_DIR", home.path())
        .env("HOME", home.path())
        .env_remove("PTYHUB_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start unshare: {e}"));
    let mut banner = Vec::new();
    if let Some(out) = child.stdout.take() {
        for line in std::io::BufRead::lines(std::io::BufReader::new(out)).map_while(Result::ok) {
            let is_url = line.trim_start().starts_with("url:");
            banner.push(line);
            if is_url {
                break;
            }
        }
    }
    let is_serving = banner
        .iter()
        .any(|line| line.trim_start().starts_with("url:"));
    // unshare takes the server (its namespace's first process) with it.
    let _ = child.kill();
    let _ = child.wait();
    // What the killed server cannot remove itself (its screen thread's cgroup), once the
    // namespace's teardown has ended it.
    let deadline = Instant::now() + default_timeout();
    while let Some(group) = ptyhub_core::cgroup::screen_cpu_group_dir(&state)
        && group.exists()
    {
        ptyhub_core::cgroup::remove_all(&state);
        assert!(Instant::now() < deadline, "{} stays", group.display());
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
    }
    assert!(
        is_serving,
        "the server ended before it served: {banner:?} {stderr}"
    );
}
