//! The CLI over the local socket: create, list, status, exec, screen, kill, with --json.

use super::start;

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_commands_work_over_the_socket() {
    let hub = start();
    let created = hub.cli(&["terminal", "create", "coder", "--cwd", "/tmp", "--json"]);
    assert!(created.status.success(), "{created:?}");
    let info: serde_json::Value = serde_json::from_slice(&created.stdout).unwrap_or_default();
    assert_eq!(info["session_id"], "terminal-coder-default");

    let ran = hub.cli(&[
        "terminal",
        "exec",
        "terminal-coder-default",
        "--",
        "echo",
        "hi;",
        "exit_code_is() { return 3; };",
        "exit_code_is",
    ]);
    assert_eq!(stdout(&ran), "hi\n");
    assert_eq!(ran.status.code(), Some(3));

    let listed = hub.cli(&["terminal", "list"]);
    assert!(
        stdout(&listed).contains("terminal-coder-default\trunning"),
        "{}",
        stdout(&listed)
    );
    let status = hub.cli(&["terminal", "status", "terminal-coder-default", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap_or_default();
    assert_eq!(status["state"], "running");

    let screen = hub.cli(&["terminal", "screen", "terminal-coder-default"]);
    assert!(stdout(&screen).contains("hi"), "{}", stdout(&screen));

    let missing = hub.cli(&["terminal", "status", "nope"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("SESSION_NOT_FOUND"));

    let killed = hub.cli(&["terminal", "kill", "terminal-coder-default"]);
    assert!(killed.status.success(), "{killed:?}");
    let listed = hub.cli(&["terminal", "list", "--json"]);
    assert_eq!(stdout(&listed).trim(), "[]");
}
