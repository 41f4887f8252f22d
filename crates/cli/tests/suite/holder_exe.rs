//! Which executable a terminal's holder runs (docs/operations.md#the-holder-executable): the
//! `ptyhub-holder` beside `ptyhub` when it names the server's own build, else `ptyhub holder`;
//! and a server of either kind adopts, and ends, the holders of the other.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::json;

use super::{close, create, exec};
use ptyhub_core::process;
use ptyhub_test_support::{Ptyhub, is_alive, wait_until};

fn ptyhub_exe() -> &'static str {
    env!("CARGO_BIN_EXE_ptyhub")
}

fn holder_exe() -> &'static str {
    env!("CARGO_BIN_EXE_ptyhub-holder")
}

/// The file the process `pid` runs.
fn exe_of(pid: u32) -> PathBuf {
    process::exe(pid).unwrap_or_else(|| panic!("no exe for {pid}"))
}

/// The arguments of the process `pid`.
fn args_of(pid: u32) -> Vec<String> {
    process::cmdline(pid).unwrap_or_else(|| panic!("no cmdline for {pid}"))
}

/// `ptyhub` alone in a directory of its own (a hard link, or a copy on another file system).
fn lone_ptyhub(dir: &Path) -> PathBuf {
    let lone = dir.join("ptyhub");
    if std::fs::hard_link(ptyhub_exe(), &lone).is_err() {
        std::fs::copy(ptyhub_exe(), &lone).unwrap_or_else(|e| panic!("copy ptyhub: {e}"));
    }
    lone
}

/// Starts a terminal, checks it works, and returns its id and holder pid.
async fn terminal(hub: &Ptyhub) -> (String, u32) {
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let answer = exec(&client, &id, "echo held-$((6 * 7))").await;
    assert_eq!(answer["output"], "held-42");
    let holders = hub.holder_pids();
    assert_eq!(holders.len(), 1, "one terminal, one holder: {holders:?}");
    (id, holders[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_run_the_holder_executable_beside_the_server() {
    let hub = Ptyhub::start(ptyhub_exe());
    let (id, holder) = terminal(&hub).await;
    assert_eq!(
        exe_of(holder),
        Path::new(holder_exe()).canonicalize().unwrap_or_default()
    );
    assert_eq!(args_of(holder).get(1).map(String::as_str), Some("holder"));

    // It runs without malloc's per-thread cache, which its shell does not inherit.
    let environ = std::fs::read(format!("/proc/{holder}/environ"))
        .unwrap_or_else(|e| panic!("environ of {holder}: {e}"));
    let tunables = environ
        .split(|&b| b == 0)
        .find_map(|var| var.strip_prefix(b"GLIBC_TUNABLES="))
        .map(|value| String::from_utf8_lossy(value).into_owned());
    assert!(
        tunables
            .as_deref()
            .is_some_and(|t| t.ends_with("glibc.malloc.tcache_count=0")),
        "{tunables:?}"
    );
    let client = hub.http();
    let shell_env = exec(&client, &id, "env | grep -c '^GLIBC_TUNABLES=' || true").await;
    assert_eq!(shell_env["output"], "0", "{shell_env}");

    // Built where the C toolchain has glibc's static archives (as here), it loads no shared
    // library: every page it writes at its start is one of its own few.
    if has_static_glibc() {
        let maps = std::fs::read_to_string(format!("/proc/{holder}/maps"))
            .unwrap_or_else(|e| panic!("maps of {holder}: {e}"));
        let libraries: Vec<&str> = maps.lines().filter(|line| line.contains(".so")).collect();
        assert!(libraries.is_empty(), "{libraries:#?}");
    }
    close(&client, &id).await;
    wait_until("the holder ended", || async {
        (!is_alive(holder)).then_some(())
    })
    .await;
}

/// Whether the C toolchain has glibc's static archive, as `crates/cli/build.rs` asks it, and
/// the build did not opt out.
fn has_static_glibc() -> bool {
    option_env!("PTYHUB_DYNAMIC_HOLDER").is_none()
        && Command::new("cc")
            .arg("-print-file-name=libc.a")
            .stdin(Stdio::null())
            .output()
            .ok()
            .and_then(|output| String::from_utf8(output.stdout).ok())
            .is_some_and(|path| Path::new(path.trim()).is_absolute())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_holder_executable_the_server_runs_its_own_holder_entry_and_adoption_crosses() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let lone = lone_ptyhub(dir.path());
    let lone_text = lone.display().to_string();
    let mut hub = Ptyhub::start(&lone_text);
    let (id, holder) = terminal(&hub).await;
    assert_eq!(
        exe_of(holder),
        lone,
        "no ptyhub-holder beside it: ptyhub holder"
    );
    assert_eq!(args_of(holder).get(1).map(String::as_str), Some("holder"));

    // A server with a holder executable beside it adopts that holder, its shell as it was.
    let status = hub.stop_server();
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    hub.start_again(Some(Path::new(ptyhub_exe())));
    let client = hub.http();
    exec(&client, &id, "export KEPT=$((20 + 1))").await;
    let (second, second_holder) = {
        let id = create(&client, json!({})).await;
        let holders = hub.holder_pids();
        let new = holders.into_iter().find(|&pid| pid != holder);
        (
            id,
            new.unwrap_or_else(|| panic!("no holder for the second terminal")),
        )
    };
    assert_eq!(
        exe_of(second_holder),
        Path::new(holder_exe()).canonicalize().unwrap_or_default()
    );

    // And back: the lone server adopts both kinds, and its close ends each holder.
    let status = hub.stop_server();
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    hub.start_again(Some(&lone));
    let client = hub.http();
    let kept = exec(&client, &id, "echo kept-$KEPT").await;
    assert_eq!(kept["output"], "kept-21");
    let other = exec(&client, &second, "echo second-$((1 + 1))").await;
    assert_eq!(other["output"], "second-2");
    for (id, pid) in [(&id, holder), (&second, second_holder)] {
        close(&client, id).await;
        wait_until("the holder ended", || async {
            (!is_alive(pid)).then_some(())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_executable_of_another_build_is_not_used() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let lone = lone_ptyhub(dir.path());
    // A stale `ptyhub-holder`: it names another build (as one left by an older `cargo build`).
    let stale = dir.path().join("ptyhub-holder");
    std::fs::write(&stale, "#!/bin/sh\necho 0123456789abcdef\n")
        .unwrap_or_else(|e| panic!("write: {e}"));
    let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&stale, executable).unwrap_or_else(|e| panic!("chmod: {e}"));
    let hub = Ptyhub::start_logged_with_token(&lone.display().to_string(), "test-token");
    let (id, holder) = terminal(&hub).await;
    assert_eq!(exe_of(holder), lone, "the stale ptyhub-holder is not used");
    let log = hub.server_log();
    assert!(
        log.contains("is of another build"),
        "the server says why it does not use it:\n{log}"
    );
    close(&hub.http(), &id).await;
    wait_until("the holder ended", || async {
        (!is_alive(holder)).then_some(())
    })
    .await;
}

#[test]
fn the_holder_executable_names_its_build_and_is_not_run_by_hand() {
    let output = Command::new(holder_exe())
        .arg("--build-id")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("ptyhub-holder --build-id: {e}"));
    assert!(output.status.success(), "{output:?}");
    let id = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    assert_eq!(id.len(), 16, "a 64-bit hash in hex: {id:?}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id:?}");

    let output = Command::new(holder_exe())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("ptyhub-holder: {e}"));
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("not run by hand"),
        "{output:?}"
    );
}
