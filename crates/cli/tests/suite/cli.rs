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

/// Regression: exports carried the shell integration's marks with the terminal's secret nonce
/// (`ESC ]133;A;k=…`) and the bell each exec's line clearing rang. Now no format holds the
/// nonce, the marks or those bells; asciicast has a marker per command; the real `asciinema`
/// plays the v2 file (and asciinema 3 the v3 file, when it is installed: `PTYHUB_ASCIINEMA3`
/// names it, or `asciinema` is 3.x; otherwise the v3 file is checked against the format).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_leave_out_the_integration_and_mark_commands() {
    let hub = start();
    let client = hub.http();
    let id = super::create(&client, serde_json::json!({ "id": "rec", "cwd": "/tmp" })).await;
    super::exec(&client, &id, "echo container_info.json").await;
    let failed = super::exec(&client, &id, "ls /no-such-dir-ptyhub").await;
    assert_eq!(failed["exit_code"], 2, "{failed}");
    // A line a person types (not an exec) is a command of the timeline too.
    super::post(
        &client,
        &format!("/v2/pty/sessions/{id}/input"),
        serde_json::json!({ "input": "echo typed_$((6 * 7))", "press_enter": true }),
    )
    .await;
    ptyhub_test_support::wait_until("the typed command is in the timeline", || async {
        let page = super::get(&client, &format!("/v2/pty/sessions/{id}/commands")).await;
        let commands = page.body["data"]["commands"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        (commands.len() == 3 && commands[2]["exit_code"] == 0).then_some(())
    })
    .await;
    let meta = hub
        .metas()
        .into_iter()
        .find(|meta| meta["id"] == id)
        .unwrap_or_else(|| panic!("no meta.json for {id}"));
    let nonce = meta["integration_nonce"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(nonce.len() >= 8, "{meta}");
    let raw_log = hub.cli(&["terminal", "export", &id, "--format", "jsonl"]);
    assert!(raw_log.status.success(), "{raw_log:?}");

    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let mut exports = std::collections::BTreeMap::new();
    for format in ["asciicast", "asciicast-v3", "raw", "jsonl"] {
        let path = dir.path().join(format);
        let path_arg = path.display().to_string();
        let done = hub.cli(&[
            "terminal", "export", &id, "--format", format, "-o", &path_arg,
        ]);
        assert!(done.status.success(), "{format}: {done:?}");
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{format}: {e}"));
        let text = String::from_utf8_lossy(&bytes).into_owned();
        assert!(!text.contains(&nonce), "{format} holds the nonce:\n{text}");
        assert!(!text.contains("133;"), "{format} holds a mark:\n{text}");
        exports.insert(format, (path_arg, text));
    }
    // Raw: the output, with no bell at all (these commands ring none of their own).
    let raw = &exports["raw"].1;
    assert!(
        raw.contains("container_info.json") && raw.contains("typed_42"),
        "{raw}"
    );
    assert!(!raw.contains('\u{7}'), "a stray bell: {raw:?}");
    // jsonl: the log's events, its output cleaned.
    let decode = |text: &str| -> String {
        use base64::Engine as _;
        text.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|event| event["type"] == "pty.output")
            .filter_map(|event| {
                base64::engine::general_purpose::STANDARD
                    .decode(event["data_b64"].as_str()?)
                    .ok()
            })
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .collect()
    };
    assert_eq!(decode(&exports["jsonl"].1), *raw);
    let notes = exports["jsonl"]
        .1
        .lines()
        .filter(|line| line.contains("\"command.note\""))
        .count();
    assert_eq!(notes, 3, "{}", exports["jsonl"].1);

    // asciicast v2: times from the start, a marker per command labelled with its text.
    let v2: Vec<serde_json::Value> = exports["asciicast"]
        .1
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert_eq!(v2[0]["version"], 2);
    let markers: Vec<&str> = v2[1..]
        .iter()
        .filter(|event| event[1] == "m")
        .filter_map(|event| event[2].as_str())
        .collect();
    assert_eq!(
        markers,
        [
            "echo container_info.json",
            "ls /no-such-dir-ptyhub",
            "echo typed_$((6 * 7))"
        ]
    );
    let mut last = 0.0;
    for event in &v2[1..] {
        let time = event[0].as_f64().unwrap_or(-1.0);
        assert!(time >= last, "times never go back: {event}");
        last = time;
    }
    let played = asciinema(&["play", "-s", "1000", "-i", "0.01", &exports["asciicast"].0]);
    assert!(
        played.contains("container_info.json") && played.contains("typed_42"),
        "{played}"
    );

    // asciicast v3: a header with `term`, intervals, the same markers.
    let v3: Vec<serde_json::Value> = exports["asciicast-v3"]
        .1
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert_eq!(v3[0]["version"], 3);
    assert_eq!(v3[0]["term"]["cols"], 120, "{}", v3[0]);
    assert!(v3[0]["term"]["rows"].is_u64());
    let mut elapsed = 0.0;
    for (v2_event, v3_event) in v2[1..].iter().zip(&v3[1..]) {
        let interval = v3_event[0].as_f64().unwrap_or(-1.0);
        assert!(interval >= 0.0, "intervals are never negative: {v3_event}");
        elapsed += interval;
        assert!(
            (elapsed - v2_event[0].as_f64().unwrap_or(0.0)).abs() < 0.0005,
            "{v3_event}"
        );
        assert_eq!(v2_event[1], v3_event[1]);
        assert_eq!(v2_event[2], v3_event[2]);
        assert!(
            matches!(v3_event[1].as_str(), Some("o" | "m" | "r" | "x")),
            "{v3_event}"
        );
    }
    if let Some(v3_player) = asciinema3() {
        let text = dir.path().join("v3.txt");
        let converted = std::process::Command::new(&v3_player)
            .args(["convert", "-f", "txt", &exports["asciicast-v3"].0])
            .arg(&text)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {v3_player}: {e}"));
        assert!(converted.status.success(), "{converted:?}");
        let text = std::fs::read_to_string(&text).unwrap_or_default();
        assert!(
            text.contains("container_info.json") && text.contains("typed_42"),
            "{text}"
        );
    }
}

/// Plays a recording with the real `asciinema` (2.x or 3.x) and returns what it wrote.
fn asciinema(args: &[&str]) -> String {
    let played = std::process::Command::new("asciinema")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run asciinema ({e}): ./scripts/test.sh installs it (apt-get install asciinema)")
        });
    assert!(played.status.success(), "asciinema {args:?}: {played:?}");
    String::from_utf8_lossy(&played.stdout).into_owned()
}

/// asciinema 3, if the machine has it: `PTYHUB_ASCIINEMA3`, else `asciinema` when it is 3.x.
fn asciinema3() -> Option<String> {
    let program = std::env::var("PTYHUB_ASCIINEMA3").unwrap_or_else(|_| "asciinema".to_owned());
    let version = std::process::Command::new(&program)
        .arg("--version")
        .output()
        .ok()?;
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    let major = version
        .split_whitespace()
        .nth(1)?
        .split('.')
        .next()?
        .to_owned();
    if major == "3" {
        Some(program)
    } else {
        #[allow(
            clippy::print_stderr,
            reason = "a skipped check says so in the test output"
        )]
        {
            eprintln!(
                "no asciinema 3 ({program}: {version:?}): the v3 export was checked against the format only"
            );
        }
        None
    }
}
