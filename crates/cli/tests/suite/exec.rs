//! exec: output without echo or prompt, exit codes, the shapes of commands agents send, the
//! timeouts that press ^C, BUSY, truncation.

use serde_json::{Value, json};

use super::{close, create, exec, exec_raw, get, post, start};
use ptyhub_test_support::{data, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_and_exit_codes_of_plain_multiline_and_heredoc_commands() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;

    let result = exec(&client, &id, "printf shell-doc-ok").await;
    assert_eq!(result["status"], "completed");
    assert_eq!(result["output"], "shell-doc-ok");
    assert_eq!(result["exit_code"], 0);

    let result = exec(&client, &id, "echo out; echo err >&2; false").await;
    assert_eq!(result["output"], "out\nerr");
    assert_eq!(result["exit_code"], 1);

    let script =
        "for i in 1 2 3; do\n  echo line $i\ndone\ncat <<'EOF'\n$HOME stays literal\nEOF\n(exit 7)";
    // v2 carries the console history only when asked.
    let answer = exec_raw(
        &client,
        &id,
        json!({ "command": script, "timeout": 60, "include_console": true }),
    )
    .await;
    let result = data(&answer).clone();
    assert_eq!(
        result["output"],
        "line 1\nline 2\nline 3\n$HOME stays literal"
    );
    assert_eq!(result["exit_code"], 7);

    let console = result["console"].as_array().cloned().unwrap_or_default();
    assert_eq!(console.len(), 3);
    assert_eq!(console[0]["command"], "printf shell-doc-ok");
    assert_eq!(console[0]["output"], "shell-doc-ok");
    assert_eq!(
        console[2]["exit_code"],
        serde_json::Value::Null,
        "console records carry ps1, command, output"
    );
    for record in &console {
        let ps1 = record["ps1"].as_str().unwrap_or_default();
        assert!(ps1.ends_with("# ") || ps1.ends_with("$ "), "{console:?}");
    }
}

/// A bash terminal reads its integration from a file in memory the holder gives it: no file
/// of it is in the runtime dir, the shell keeps no descriptor of it, and the line editor's
/// bracketed paste was announced before the first prompt (fork-free, through that file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bash_terminal_keeps_no_integration_file_or_descriptor() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "shell": "bash", "cwd": "/tmp" })).await;
    let result = exec(&client, &id, "ls /proc/$$/fd").await;
    let fds: Vec<&str> = result["output"]
        .as_str()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert!(fds.contains(&"0") && !fds.contains(&"3"), "{fds:?}");
    let left = files_under(hub.runtime_dir(), "bashrc-");
    assert!(left.is_empty(), "{left:?}");
    let events = get(
        &client,
        &format!("/v2/pty/sessions/{id}/events?after_seq=0"),
    )
    .await;
    let mut output = Vec::new();
    for event in data(&events)["events"].as_array().into_iter().flatten() {
        if let Some(b64) = event["data_b64"].as_str() {
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap_or_default();
            output.extend(bytes);
        }
    }
    let output = String::from_utf8_lossy(&output);
    let before_prompt = output.split("\x1b]133;A").next().unwrap_or_default();
    assert!(
        before_prompt.contains("\x1b[?2004h\x1b[?2004l"),
        "{before_prompt:?}"
    );
}

/// A POSIX sh's integration is also a file in memory it reads through its descriptor: nothing
/// of it is in the runtime dir, the shell keeps no descriptor of it, and `ENV` is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_posix_sh_terminal_keeps_no_integration_file_or_descriptor() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "shell": "sh", "cwd": "/tmp" })).await;
    let result = exec(&client, &id, "ls /proc/$$/fd; echo \"env=${ENV-unset}\"").await;
    assert_eq!(result["exit_code"], 0, "{result}");
    let output = result["output"].as_str().unwrap_or_default();
    let words: Vec<&str> = output.split_whitespace().collect();
    assert!(words.contains(&"0") && !words.contains(&"3"), "{output:?}");
    assert!(words.contains(&"env=unset"), "{output:?}");
    let left = files_under(hub.runtime_dir(), "shrc-");
    assert!(left.is_empty(), "{left:?}");
    // The shell was started reading it from its descriptor, not from a file (whose removal
    // took a process of its own).
    let pid = exec(&client, &id, "echo $$").await;
    let pid = pid["output"].as_str().unwrap_or_default().to_owned();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let env: Vec<&[u8]> = environ.split(|&b| b == 0).collect();
    assert!(
        env.iter().any(|var| *var == b"ENV=/dev/fd/3"),
        "the shell's first environment: {:?}",
        String::from_utf8_lossy(&environ)
    );
}

/// The files under `root`, at any depth, whose name starts with `prefix`.
fn files_under(root: &std::path::Path, prefix: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if entry.file_name().to_string_lossy().starts_with(prefix) {
                found.push(path);
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cd_and_export_persist_and_utf8_round_trips() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    exec(&client, &id, "cd /usr && export PTYHUB_T=héllo").await;
    let result = exec(&client, &id, "pwd; echo $PTYHUB_T 🎉 日本").await;
    assert_eq!(result["output"], "/usr\nhéllo 🎉 日本");
    let info = get(&client, &format!("/v2/pty/sessions/{id}")).await;
    let cwd = wait_until("the cwd projection follows cd", || async {
        let info = get(&client, &format!("/v2/pty/sessions/{id}")).await;
        (data(&info)["working_dir"] == "/usr").then_some(())
    })
    .await;
    let _ = (info, cwd);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_reading_stdin_is_answered_through_input() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let answer = exec_raw(
        &client,
        &id,
        json!({ "command": "read -p 'Name: ' name; echo Hello $name", "async": true }),
    )
    .await;
    assert_eq!(data(&answer)["status"], "running");
    wait_until("the prompt is on the screen", || async {
        let screen = get(&client, &format!("/v2/pty/sessions/{id}/screen")).await;
        (data(&screen)["output"] == "Name: ").then_some(())
    })
    .await;
    let busy = exec_raw(&client, &id, json!({ "command": "echo no" })).await;
    assert_eq!(busy.status, 409, "{}", busy.body);
    assert_eq!(busy.body["error"]["code"], "BUSY");
    assert_eq!(busy.body["error"]["retryable"], true);
    post(
        &client,
        &format!("/v2/pty/sessions/{id}/input"),
        json!({ "input": "Alice", "press_enter": true }),
    )
    .await;
    let waited = post(
        &client,
        &format!("/v2/pty/sessions/{id}/wait"),
        json!({ "seconds": 10 }),
    )
    .await;
    assert_eq!(data(&waited)["status"], "completed");
    assert_eq!(data(&waited)["output"], "Name: Alice\nHello Alice");
    assert_eq!(data(&waited)["exit_code"], 0);
}

/// A program that ignores ^C is answered at its timeout, before the kill that ends it, and the
/// next exec waits for that end instead of being refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_ignores_ctrl_c_is_answered_at_its_timeout_and_the_next_exec_waits() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let stubborn = exec_raw(
        &client,
        &id,
        json!({
            "command": "sh -c \"trap '' INT; echo stubborn; sleep 30; echo never\"",
            "no_change_timeout": 0.5,
        }),
    )
    .await;
    let answer = data(&stubborn);
    assert_eq!(answer["status"], "no_change_timeout", "{}", stubborn.body);
    assert!(answer["exit_code"].is_null(), "{answer}");
    let output = answer["output"].as_str().unwrap_or_default();
    // The answer came before the kill, which follows the ^C by seconds.
    assert!(
        output.contains("stubborn") && !output.contains("Killed"),
        "{answer}"
    );
    let next = exec_raw(&client, &id, json!({ "command": "echo next-$((6*7))" })).await;
    assert_eq!(next.status, 200, "{}", next.body);
    assert_eq!(data(&next)["output"], "next-42", "{}", next.body);
    let timeline = get(&client, &format!("/v2/pty/sessions/{id}/commands")).await;
    let first = &data(&timeline)["commands"][0];
    assert_eq!(first["status"], "no_change_timeout", "{first}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_press_ctrl_c_and_leave_the_terminal_usable() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;

    let waited = exec_raw(
        &client,
        &id,
        json!({ "command": "sleep 3; echo late", "timeout": 0.3 }),
    )
    .await;
    assert_eq!(data(&waited)["status"], "running");
    assert!(data(&waited)["output"].is_null());
    let done = post(
        &client,
        &format!("/v2/pty/sessions/{id}/wait"),
        json!({ "seconds": 20 }),
    )
    .await;
    assert_eq!(data(&done)["output"], "late");

    let hard = exec_raw(
        &client,
        &id,
        json!({ "command": "while true; do sleep 0.1; done", "hard_timeout": 0.5 }),
    )
    .await;
    assert_eq!(data(&hard)["status"], "hard_timeout", "{}", hard.body);
    assert!(data(&hard)["exit_code"].is_null());

    let quiet = exec_raw(
        &client,
        &id,
        json!({ "command": "echo start; sleep 30", "no_change_timeout": 0.5 }),
    )
    .await;
    assert_eq!(
        data(&quiet)["status"],
        "no_change_timeout",
        "{}",
        quiet.body
    );

    let after = exec(&client, &id, "echo still usable").await;
    assert_eq!(after["output"], "still usable");

    let interrupted = exec_raw(
        &client,
        &id,
        json!({ "command": "sh -c 'echo ready; exec sleep 30'", "async": true }),
    )
    .await;
    assert_eq!(data(&interrupted)["status"], "running");
    // A ^C typed before the shell hands the terminal to the command reaches the shell, as it
    // would for a person; wait until the command itself printed.
    wait_until("the command runs in the foreground", || async {
        let screen = get(&client, &format!("/v2/pty/sessions/{id}/screen")).await;
        (data(&screen)["output"] == "ready").then_some(())
    })
    .await;
    post(
        &client,
        &format!("/v2/pty/sessions/{id}/input"),
        json!({ "input": "\u{3}" }),
    )
    .await;
    let done = post(
        &client,
        &format!("/v2/pty/sessions/{id}/wait"),
        json!({ "seconds": 20 }),
    )
    .await;
    let screen = get(&client, &format!("/v2/pty/sessions/{id}/screen")).await;
    let events = get(
        &client,
        &format!("/v2/pty/sessions/{id}/events?after_seq=0"),
    )
    .await;
    let tail: Vec<String> = data(&events)["events"]
        .as_array()
        .map(|list| {
            list.iter()
                .rev()
                .take(8)
                .map(|e| {
                    use base64::Engine as _;
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(e["data_b64"].as_str().unwrap_or_default())
                        .unwrap_or_default();
                    format!("{} {:?}", e["seq"], String::from_utf8_lossy(&bytes))
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        data(&done)["exit_code"],
        130,
        "{}\n{}\n{tail:#?}",
        done.body,
        data(&screen)["screen"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_output_is_truncated_unless_asked_and_large_output_is_exact() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let result = exec(&client, &id, "seq 1 20000").await;
    let output = result["output"].as_str().unwrap_or_default();
    assert!(output.starts_with("1\n2\n3\n"));
    assert!(output.ends_with("19999\n20000"));
    assert!(output.contains("[... Observation truncated due to length ...]"));
    assert!(
        output.chars().count() < 10_100,
        "v2 keeps 10,000 characters"
    );
    let v1 = super::post(
        &client,
        "/v1/shell/exec",
        json!({ "id": id, "command": "seq 1 20000" }),
    )
    .await;
    let v1_output = data(&v1)["output"].as_str().unwrap_or_default();
    assert!(
        v1_output.chars().count() > 29_000 && v1_output.chars().count() < 30_100,
        "v1 keeps 30,000"
    );

    // 10.9 MB of output, returned whole.
    let full = exec_raw(
        &client,
        &id,
        json!({ "command": "seq 1 1500000", "truncate": false, "timeout": 120 }),
    )
    .await;
    let expected: String = (1..=1_500_000)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(
        data(&full)["output"].as_str().map(str::len),
        Some(expected.len())
    );
    assert!(data(&full)["output"] == expected.as_str());
}

/// A wait's answer is shaped as exec's: truncated by default (reading only the ends of an
/// output longer than the terminal keeps in memory), whole with `truncate: false`, a window
/// when asked, the console only when asked; a bad window is refused and waits for nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_answers_as_exec_does_truncated_windowed_or_whole() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let wait = |body: serde_json::Value| {
        let client = client.clone();
        let path = format!("/v2/pty/sessions/{id}/wait");
        async move { post(&client, &path, body).await }
    };
    let refused = wait(json!({ "context": 2 })).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], "INVALID_INPUT");

    // 2.2 MB of output, four times what memory keeps of a command.
    let started = exec_raw(
        &client,
        &id,
        json!({ "command": "seq 1 300000", "async": true }),
    )
    .await;
    assert_eq!(started.status, 200, "{}", started.body);
    let done = wait(json!({ "seconds": 60 })).await;
    assert_eq!(done.status, 200, "{}", done.body);
    let answer = data(&done);
    assert_eq!(answer["status"], "completed", "{answer}");
    assert_eq!(answer["exit_code"], 0);
    assert!(answer["console"].is_null(), "no console unless asked");
    let output = answer["output"].as_str().unwrap_or_default();
    assert!(output.starts_with("1\n2\n3\n"), "{output:.40}");
    assert!(output.ends_with("299999\n300000"), "{output:.40}");
    assert!(output.contains("[... Observation truncated due to length ...]"));
    assert!(output.chars().count() < 10_100, "exec's 10,000 characters");

    let tail = wait(json!({ "tail": 2, "include_console": true })).await;
    assert_eq!(data(&tail)["output"], "299999\n300000", "{}", tail.body);
    assert!(data(&tail)["window"].is_object(), "{}", tail.body);
    assert!(data(&tail)["console"].is_array(), "{}", tail.body);

    let whole = wait(json!({ "truncate": false })).await;
    let expected: String = (1..=300_000)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        data(&whole)["output"] == expected.as_str(),
        "the whole output"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marks_survive_a_user_changing_ps1_and_prompt_command() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    exec(&client, &id, "PS1='custom> '; PROMPT_COMMAND='echo -n'").await;
    let result = exec(&client, &id, "echo after; (exit 4)").await;
    assert_eq!(result["output"], "after");
    assert_eq!(result["exit_code"], 4);
    let forged = exec(
        &client,
        &id,
        "printf '\\033]133;D;0;k=fake\\007forged\\n'; sleep 0.2; echo real",
    )
    .await;
    assert_eq!(forged["output"], "forged\nreal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_ends_the_terminal_with_its_code() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let result = exec(&client, &id, "exit 5").await;
    assert_eq!(result["exit_code"], 5);
    wait_until("the terminal is exited with 5", || async {
        let info = get(&client, &format!("/v2/pty/sessions/{id}")).await;
        (data(&info)["state"] == "exited" && data(&info)["exit_code"] == 5).then_some(())
    })
    .await;
    let refused = exec_raw(&client, &id, json!({ "command": "echo hi" })).await;
    assert_eq!(refused.body["error"]["code"], "SESSION_NOT_RUNNING");
    let metas = hub.metas();
    assert_eq!(metas[0]["state"], "exited");
    assert_eq!(metas[0]["exit_code"], 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posix_sh_gets_exit_codes_too() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "shell": "dash" })).await;
    let result = exec(&client, &id, "echo from dash; (exit 3)").await;
    assert_eq!(result["output"], "from dash");
    assert_eq!(result["exit_code"], 3);
    let again = exec(&client, &id, "cd /tmp; pwd").await;
    assert_eq!(again["output"], "/tmp");
}

/// Regression: `sh` ran only the first line of a multi-line exec before its prompt ended the
/// command (the rest ran untracked, after the answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posix_sh_runs_a_multi_line_exec_as_one_command() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "shell": "dash", "cwd": "/tmp" })).await;
    let script =
        "echo one\nfor i in 2 3; do\n  echo $i\ndone\ncat <<'EOF'\n$HOME stays\nEOF\n(exit 4)";
    let result = exec(&client, &id, script).await;
    assert_eq!(result["status"], "completed");
    assert_eq!(result["output"], "one\n2\n3\n$HOME stays");
    assert_eq!(result["exit_code"], 4);
    let after = exec(&client, &id, "echo after").await;
    assert_eq!(after["output"], "after");
    assert_eq!(after["exit_code"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zsh_gets_exit_codes_and_clean_output() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "shell": "zsh", "cwd": "/tmp" })).await;
    let result = exec(&client, &id, "printf no-newline; cd /usr; export Z=1").await;
    assert_eq!(result["output"], "no-newline");
    let script = "for i in 1 2; do\n  echo $i $Z $PWD\ndone\ncat <<EOF\nheredoc\nEOF\n(exit 6)";
    let answer = exec_raw(
        &client,
        &id,
        json!({ "command": script, "timeout": 60, "include_console": true }),
    )
    .await;
    let result = data(&answer).clone();
    assert_eq!(result["output"], "1 1 /usr\n2 1 /usr\nheredoc");
    assert_eq!(result["exit_code"], 6);
    let ps1 = result["console"][1]["ps1"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(ps1.ends_with("# ") || ps1.ends_with("% "), "{ps1:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_output_is_decoded_without_harm() {
    // Random bytes without the introducers of escape strings (ESC, DCS, SOS, OSC, PM, APC):
    // an unterminated string would swallow what follows on any terminal.
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let command = "printf 'ok \\377\\376 \\303 end\\n'; head -c 20000 /dev/urandom | tr -d '\\033\\220\\230\\235\\236\\237'; echo; echo after";
    let result = exec(&client, &id, command).await;
    assert_eq!(result["exit_code"], 0);
    let output = result["output"].as_str().unwrap_or_default();
    assert!(
        output.starts_with("ok \u{FFFD}\u{FFFD} \u{FFFD} end\n"),
        "{output:.60}"
    );
    assert!(output.ends_with("after"));
    let again = exec(&client, &id, "echo still fine").await;
    assert_eq!(again["output"], "still fine");
}

/// Runs `command` in `dir` through v2 (or v1 when `is_v1`) and returns (output, exit code).
async fn exec_in(
    client: &ptyhub_client::Client,
    id: &str,
    command: &str,
    dir: &str,
    is_v1: bool,
) -> (serde_json::Value, serde_json::Value) {
    let body = json!({ "command": command, "exec_dir": dir, "timeout": 30 });
    let answer = if is_v1 {
        let mut body = body;
        body["id"] = json!(id);
        post(client, "/v1/shell/exec", body).await
    } else {
        exec_raw(client, id, body).await
    };
    assert_eq!(answer.status, 200, "{}", answer.body);
    let result = data(&answer);
    (result["output"].clone(), result["exit_code"].clone())
}

/// Regression: with a slow `PROMPT_COMMAND` the first prompt mark comes well before the line
/// editor, and the first exec on a new shell was typed into the tty there, unpasted: the shell
/// ran `cd -- '<dir>'` alone and its prompt ended the exec with exit code 0 and no output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_dir_is_one_submission_whatever_the_prompt_costs() {
    let hub = start();
    let client = hub.http();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let dir = std::fs::canonicalize(dir.path()).unwrap_or_else(|e| panic!("canonicalize: {e}"));
    let dir = dir.to_string_lossy().into_owned();
    for try_no in 0..4 {
        let body = json!({ "cwd": "/tmp", "env": { "PROMPT_COMMAND": "sleep 0.05" } });
        let id = create(&client, body).await;
        let first = exec_in(&client, &id, "echo out-$((6*7)); (exit 3)", &dir, false).await;
        assert_eq!(first, (json!("out-42"), json!(3)), "v2, try {try_no}");
        let v1 = exec_in(&client, &id, "pwd; (exit 4)", &dir, true).await;
        assert_eq!(v1, (json!(dir.clone()), json!(4)), "v1, try {try_no}");
        let script = "cat <<'EOF'\nout-$((6*7))\nEOF\n(exit 5)";
        let heredoc = exec_in(&client, &id, script, &dir, false).await;
        assert_eq!(heredoc, (json!("out-$((6*7))"), json!(5)), "try {try_no}");
    }
}

/// Regression: a line editor without bracketed paste reads a multi-line exec line by line, and
/// ran the `cd` of `exec_dir` (or a script's first line) alone: its prompt ended the exec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_line_execs_are_one_submission_without_bracketed_paste() {
    let hub = start();
    let client = hub.http();
    let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let inputrc = temp.path().join("inputrc");
    std::fs::write(&inputrc, "set enable-bracketed-paste off\n")
        .unwrap_or_else(|e| panic!("inputrc: {e}"));
    let dir = std::fs::canonicalize(temp.path()).unwrap_or_else(|e| panic!("canonicalize: {e}"));
    let dir = dir.to_string_lossy().into_owned();
    let env = json!({ "INPUTRC": inputrc });
    let bash = create(&client, json!({ "cwd": "/tmp", "env": env })).await;
    std::fs::write(temp.path().join(".zshrc"), "unset zle_bracketed_paste\n")
        .unwrap_or_else(|e| panic!("zshrc: {e}"));
    let zsh_env = json!({ "HOME": dir.clone() });
    let zsh = create(
        &client,
        json!({ "shell": "zsh", "cwd": "/tmp", "env": zsh_env }),
    )
    .await;
    for id in [&bash, &zsh] {
        for try_no in 0..3 {
            let first = exec_in(
                &client,
                id,
                "echo out-$((6*7)); (exit 3)",
                &dir,
                try_no == 1,
            )
            .await;
            assert_eq!(first, (json!("out-42"), json!(3)), "{id}, try {try_no}");
            let script = "echo a\ncat <<'EOF'\nout-$((6*7))\nEOF\n(exit 6)";
            let result = exec(&client, id, script).await;
            assert_eq!(result["output"], "a\nout-$((6*7))", "{id}, try {try_no}");
            assert_eq!(result["exit_code"], 6, "{id}, try {try_no}");
        }
    }
}

/// New terminals get pagers that print (an agent's `git log` or `man` never holds the
/// terminal); the configuration changes or removes a variable, a client's `env` wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_terminals_get_the_agent_environment() {
    let show = "echo \"[${PAGER-unset}] [${GIT_PAGER-unset}] [${MANPAGER-unset}]\"";
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    assert_eq!(
        exec(&client, &id, show).await["output"],
        "[cat] [cat] [cat]"
    );
    let own = create(
        &client,
        json!({ "cwd": "/tmp", "env": { "PAGER": "less" } }),
    )
    .await;
    assert_eq!(
        exec(&client, &own, show).await["output"],
        "[less] [cat] [cat]"
    );
    drop(hub);

    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[agent_env]\nGIT_PAGER = \"less -FRX\"\nMANPAGER = \"\"\n",
    )
    .unwrap_or_else(|e| panic!("config: {e}"));
    let config = config.to_string_lossy().into_owned();
    let hub = ptyhub_test_support::Ptyhub::start_with(
        env!("CARGO_BIN_EXE_ptyhub"),
        &["--config", &config],
    );
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    assert_eq!(
        exec(&client, &id, show).await["output"],
        "[cat] [less -FRX] [unset]"
    );
}

/// A shell whose startup hangs (an rc file waiting on a lock): exec answers within its timeout
/// with an error that says the shell has not started and quotes its screen; send types nothing
/// and says why; neither waits for the client to give up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_whose_start_hangs_is_reported_not_waited_for() {
    let hub = start();
    let client = hub.http();
    let home = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    std::fs::write(
        home.path().join(".bashrc"),
        "echo waiting for the lock on the cache; sleep 300\n",
    )
    .unwrap_or_else(|e| panic!("bashrc: {e}"));
    let home_dir = home.path().to_string_lossy().into_owned();
    let id = create(
        &client,
        json!({ "cwd": "/tmp", "env": { "HOME": home_dir } }),
    )
    .await;
    let answer = exec_raw(&client, &id, json!({ "command": "echo hi", "timeout": 1 })).await;
    assert_eq!(answer.status, 408, "{}", answer.body);
    assert_eq!(answer.body["error"]["code"], "TIMEOUT", "{}", answer.body);
    let message = answer.body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("first prompt") && message.contains("waiting for the lock"),
        "{message}"
    );
    let sent = post(
        &client,
        &format!("/v2/pty/sessions/{id}/send"),
        json!({ "text": "echo typed", "submit": true, "deadline": 1 }),
    )
    .await;
    let sent = data(&sent);
    assert!(sent["input"].is_null(), "nothing typed: {sent}");
    assert!(
        sent["hint"]
            .as_str()
            .is_some_and(|h| h.contains("first prompt")),
        "{sent}"
    );
    assert!(
        sent["output"]
            .as_str()
            .is_some_and(|o| o.contains("waiting for the lock")),
        "{sent}"
    );
}

/// An exec's `command.note` comes before the input that types the command, which comes
/// before the command's output, and it names the directory the command started in, even when
/// the command itself moves at once (it is read before the command is typed). The server
/// types the commands into the PTY itself (it holds the PTY's master once it ran one), and
/// each is logged as one input event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execs_note_precedes_its_input_and_output_and_names_where_it_started() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "shell": "bash", "cwd": "/tmp" })).await;
    for round in 0..20 {
        let command = format!("cd / && echo moved-{round}-$((6*7))");
        let path = |after: &Value| format!("/v2/pty/sessions/{id}/events?after_seq={after}");
        let before = data(&get(&client, &path(&json!(0))).await)["last_seq"].clone();
        let result = exec(&client, &id, &command).await;
        assert_eq!(result["exit_code"], 0, "{result}");
        let events = get(&client, &path(&before)).await;
        let events: Vec<Value> = data(&events)["events"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let note = events
            .iter()
            .position(|e| e["type"] == "command.note" && e["command"] == command.as_str())
            .unwrap_or_else(|| panic!("no note for {command:?}"));
        assert_eq!(
            events[note]["cwd"], "/tmp",
            "where the command started: {}",
            events[note]
        );
        let input = events
            .iter()
            .skip(note + 1)
            .position(|e| e["type"] == "pty.input")
            .map(|at| at + note + 1)
            .unwrap_or_else(|| panic!("no input after the note: {events:?}"));
        let output = events.iter().skip(input + 1).position(|e| {
            e["type"] == "pty.output"
                && e["data_b64"].as_str().is_some_and(|b64| {
                    use base64::Engine as _;
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(b64)
                        .unwrap_or_default();
                    String::from_utf8_lossy(&bytes).contains(&format!("moved-{round}-42"))
                })
        });
        assert!(output.is_some(), "the output follows the input: {events:?}");
        let inputs = events.iter().filter(|e| e["type"] == "pty.input").count();
        assert_eq!(inputs, 1, "one input event for the command: {events:?}");
        // Back where the next round's note must find it.
        exec(&client, &id, "cd /tmp").await;
    }
    let server = hub.server_pid().unwrap_or_else(|| panic!("no server pid"));
    let masters = std::fs::read_dir(format!("/proc/{server}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter(|target| target.to_string_lossy().contains("ptmx"))
        .count();
    assert_eq!(masters, 1, "the server holds the terminal's PTY master");
    close(&client, &id).await;
}
