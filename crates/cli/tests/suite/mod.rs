mod adversarial;
mod attach;
mod bad_input;
mod capabilities;
mod cgroups;
mod cli;
mod connections;
mod crash;
mod discovery;
mod exec;
mod grants;
mod health;
mod holder_exe;
mod jobs;
mod lease;
mod lifecycle;
mod limits;
mod logs;
pub mod mcp;
mod metrics;
mod observe;
mod origins;
mod packaging;
mod raw_http;
mod retention;
mod rootfs;
mod rotation;
mod scale_out;
mod send;
mod send_truth;
mod storage;
mod systemd;
mod timeline;
mod tls;
mod tmux;
mod trust;
mod upgrade;
mod users;
mod v1_sdk;
mod web;
mod web_browser;
mod ws;
mod ws_exec;

use ptyhub_client::{Client, Method};
use ptyhub_test_support::{Ptyhub, data};
use serde_json::{Value, json};

pub fn start() -> Ptyhub {
    Ptyhub::start(env!("CARGO_BIN_EXE_ptyhub"))
}

/// Creates a terminal and returns its id.
pub async fn create(client: &Client, body: Value) -> String {
    let answer = client
        .send(Method::POST, "/v2/pty/sessions", Some(&body))
        .await
        .unwrap_or_else(|e| panic!("create: {e}"));
    assert!(
        answer.status == 201 || answer.status == 200,
        "create answered {}: {}",
        answer.status,
        answer.body
    );
    data(&answer)["session_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Runs exec and returns the whole answer body.
pub async fn exec_raw(client: &Client, id: &str, body: Value) -> ptyhub_client::Answer {
    client
        .send(
            Method::POST,
            &format!("/v2/pty/sessions/{id}/exec"),
            Some(&body),
        )
        .await
        .unwrap_or_else(|e| panic!("exec: {e}"))
}

/// Runs a command to completion and returns `data`.
pub async fn exec(client: &Client, id: &str, command: &str) -> Value {
    let answer = exec_raw(client, id, json!({ "command": command, "timeout": 60 })).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    data(&answer).clone()
}

/// The ids of the live terminals `client` sees.
pub async fn live_ids(client: &Client) -> Vec<String> {
    let list = get(client, "/v2/pty/sessions").await;
    data(&list)["sessions"]
        .as_array()
        .map(|sessions| {
            sessions
                .iter()
                .filter_map(|t| t["session_id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

pub async fn get(client: &Client, path: &str) -> ptyhub_client::Answer {
    client
        .send(Method::GET, path, None)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// Closes terminal `id` (`DELETE /v2/pty/sessions/{id}`) and checks it answered 200.
pub async fn close(client: &Client, id: &str) {
    let closed = client
        .send(
            ptyhub_client::Method::DELETE,
            &format!("/v2/pty/sessions/{id}"),
            None,
        )
        .await
        .unwrap_or_else(|e| panic!("close: {e}"));
    assert_eq!(closed.status, 200, "{}", closed.body);
}

pub async fn post(client: &Client, path: &str, body: Value) -> ptyhub_client::Answer {
    client
        .send(Method::POST, path, Some(&body))
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"))
}

/// Runs a Python client script of `tests/` with `env`; fails the test with its output.
pub async fn run_python(script: &str, env: &[(&str, String)], install_hint: &str) {
    run_script("python3", script, env, install_hint).await;
}

/// Runs `interpreter tests/<script>` in the script's directory with `env`; fails the test with
/// its output.
pub async fn run_script(
    interpreter: &str,
    script: &str,
    env: &[(&str, String)],
    install_hint: &str,
) {
    let path = manifest_dir().join("tests").join(script);
    let output = tokio::process::Command::new(interpreter)
        .arg(&path)
        .current_dir(path.parent().unwrap_or(&path))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run {interpreter}: {e}"));
    assert!(
        output.status.success(),
        "{script} failed ({install_hint})\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// This package's directory, asked of cargo when the test runs: a test binary reused from a
/// build in another checkout (one `CARGO_TARGET_DIR` shared by several) would otherwise read
/// that checkout's files.
pub fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
        || std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")),
        std::path::PathBuf::from,
    )
}

/// This process's real uid (the owner of the server's own terminals), from `/proc`.
pub fn own_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|u| u.parse().ok())
        .unwrap_or(0)
}
