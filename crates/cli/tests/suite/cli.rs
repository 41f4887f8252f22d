//! The CLI over the local socket: create, list, status, exec, send, signal, screen, export,
//! kill, with --json.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_signal_and_export_work_over_the_socket() {
    let hub = start();
    let created = hub.cli(&["terminal", "create", "tools", "--cwd", "/tmp", "--json"]);
    assert!(created.status.success(), "{created:?}");
    let id = "terminal-tools-default";

    // send: answer a prompt, with the wait reason on stderr.
    let asked = hub.cli(&[
        "terminal",
        "send",
        id,
        "--",
        "read -p 'Continue? [Y/n] ' yn; echo answer-$yn",
    ]);
    assert!(asked.status.success(), "{asked:?}");
    assert!(
        stdout(&asked).contains("Continue? [Y/n]"),
        "{}",
        stdout(&asked)
    );
    assert!(
        String::from_utf8_lossy(&asked.stderr).contains("[stdin_read, program: bash"),
        "{}",
        String::from_utf8_lossy(&asked.stderr)
    );
    let answered = hub.cli(&["terminal", "send", id, "--json", "--", "Y"]);
    let answered: serde_json::Value = serde_json::from_slice(&answered.stdout).unwrap_or_default();
    assert!(
        answered["output"]
            .as_str()
            .is_some_and(|o| o.contains("answer-Y")),
        "{answered}"
    );

    // signal: ^C reaches the foreground program.
    let slept = hub.cli(&[
        "terminal",
        "send",
        id,
        "--deadline",
        "0.5",
        "--",
        "sleep 30",
    ]);
    assert!(String::from_utf8_lossy(&slept.stderr).contains("[timeout, program: sleep"));
    let signalled = hub.cli(&["terminal", "signal", id, "INT"]);
    assert_eq!(
        stdout(&signalled).trim(),
        "sent SIGINT to sleep",
        "{signalled:?}"
    );
    let bad = hub.cli(&["terminal", "signal", id, "BOGUS"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("INVALID_INPUT"));

    // The shell reports the interrupted command's end (its `D` mark) on its own time: until
    // then the terminal is busy, and an exec would be refused with BUSY. Wait as a user would.
    ptyhub_test_support::wait_until("the interrupted command ended", || async {
        let status = hub.cli(&["terminal", "status", id, "--json"]);
        let info: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap_or_default();
        info["running_command"].is_null().then_some(())
    })
    .await;

    // export: the whole history in three formats.
    let ran = hub.cli(&[
        "terminal",
        "exec",
        id,
        "--",
        "printf 'caf\\303\\251 export-%s\\n' $((40 + 2))",
    ]);
    assert_eq!(stdout(&ran), "café export-42\n");
    let raw = hub.cli(&["terminal", "export", id, "--format", "raw"]);
    assert!(raw.status.success());
    let raw_text = String::from_utf8_lossy(&raw.stdout);
    assert!(
        raw_text.contains("answer-Y") && raw_text.contains("café export-42"),
        "{raw_text}"
    );
    let jsonl = hub.cli(&["terminal", "export", id, "--format", "jsonl"]);
    let first: serde_json::Value = serde_json::from_slice(
        jsonl
            .stdout
            .split(|&b| b == b'\n')
            .next()
            .unwrap_or_default(),
    )
    .unwrap_or_default();
    assert_eq!(first["seq"], 1, "{first}");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let cast_path = dir.path().join("t.cast");
    let cast_arg = cast_path.display().to_string();
    let cast = hub.cli(&["terminal", "export", id, "-o", &cast_arg]);
    assert!(cast.status.success(), "{cast:?}");
    let cast = std::fs::read_to_string(&cast_path).unwrap_or_default();
    let mut lines = cast.lines();
    let header: serde_json::Value =
        serde_json::from_str(lines.next().unwrap_or_default()).unwrap_or_default();
    assert_eq!(header["version"], 2);
    assert_eq!(header["width"], 120);
    let mut played = String::new();
    let mut last_time = 0.0;
    for line in lines {
        let event: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
        let time = event[0].as_f64().unwrap_or(-1.0);
        assert!(time >= last_time, "times never go back: {line}");
        last_time = time;
        if event[1] == "o" {
            played.push_str(event[2].as_str().unwrap_or_default());
        }
    }
    assert!(played.contains("café export-42"), "{played}");
}
