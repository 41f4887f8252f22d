//! Restarts and upgrades that keep every process (docs/operations.md#restarts-and-upgrades):
//! a stopped server tells its WebSocket and event-stream clients why, `ptyhub terminal
//! attach` resumes byte-exact across the restart, a holder of a protocol version the server
//! does not speak is reported and left running, and holders started by an older build of
//! ptyhub (a real other binary, built once per machine by `scripts/old-build.sh`) are adopted
//! by this one.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use ptyhub_client::{Client, LiveMessage, LiveSocket};
use ptyhub_protocol::live::ServerFrame;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::attach::pane;
use super::ws::{connect, next_message};
use super::{close, create, exec, exec_raw, get, manifest_dir, post, start};
use ptyhub_test_support::{Ptyhub, data, default_timeout, is_alive, wait_until};

/// The commit whose build plays the older ptyhub: the last one before the holder protocol was
/// negotiated, so its holders speak version 1 alone and refuse any other `hello`.
const OLD_COMMIT: &str = "e09e9ec909bb65ffb5b4809bee62e18f82a9aa51";

/// What `ptyhub terminal attach` writes after the last output, when it ends.
const LOCAL_RESET: &[u8] =
    b"\x1b[0m\x1b[?1049l\x1b[?25h\x1b[?2004l\x1b[?1000l\x1b[?1002l\x1b[?1006l\x1b[?1l\x1b>";

fn ptyhub_exe() -> &'static str {
    env!("CARGO_BIN_EXE_ptyhub")
}

/// Reads JSON frames until one of type `kind`, which it returns.
async fn frame_of(socket: &mut LiveSocket, kind: &str) -> Value {
    loop {
        match next_message(socket).await {
            Some(LiveMessage::Text(text)) => {
                let frame: Value = serde_json::from_str(text.as_str())
                    .unwrap_or_else(|e| panic!("frame is not JSON ({e}): {text}"));
                if frame["type"] == kind {
                    return frame;
                }
            }
            Some(_) => {}
            None => panic!("the connection ended before a {kind} frame"),
        }
    }
}

/// Every output byte the terminal's log holds, in order.
fn logged_output(hub: &Ptyhub, id: &str) -> Vec<u8> {
    let dir = hub
        .terminal_dir(id)
        .unwrap_or_else(|| panic!("no directory for {id}"));
    let log = std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap_or_else(|e| panic!("events.jsonl: {e}"));
    let mut bytes = Vec::new();
    for line in log.lines() {
        let event: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if event["type"] == "pty.output" {
            bytes.extend(
                base64::engine::general_purpose::STANDARD
                    .decode(event["data_b64"].as_str().unwrap_or_default())
                    .unwrap_or_else(|e| panic!("{e}")),
            );
        }
    }
    bytes
}

/// The output a binary connection with `since_seq=0` replays: the whole history as it is sent.
async fn replayed_output(client: &Client, id: &str) -> Vec<u8> {
    let mut socket = connect(
        client,
        &format!("/v2/pty/sessions/{id}/ws?mode=watch&protocol=binary&since_seq=0"),
    )
    .await;
    let mut bytes = Vec::new();
    loop {
        match next_message(&mut socket).await {
            Some(LiveMessage::Binary(chunk)) => bytes.extend_from_slice(&chunk),
            Some(LiveMessage::Text(text)) if text.as_str().contains("\"terminal_restored\"") => {
                return bytes;
            }
            Some(_) => {}
            None => panic!("the replay ended before terminal_restored"),
        }
    }
}

/// Opens `GET /v2/pty/events` (the dashboard's event stream) over plain HTTP/1.1.
async fn open_event_stream(hub: &Ptyhub) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(&hub.addr)
        .await
        .unwrap_or_else(|e| panic!("connect {}: {e}", hub.addr));
    let request = format!(
        "GET /v2/pty/events HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nAccept: text/event-stream\r\n\r\n",
        hub.addr, hub.token
    );
    stream
        .write_all(request.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("write: {e}"));
    stream
}

/// Reads the stream until it holds `text` (what was read so far is in `seen`); false when the
/// stream ended first.
async fn read_until(stream: &mut tokio::net::TcpStream, seen: &mut String, text: &str) -> bool {
    let mut buf = [0u8; 16 * 1024];
    while !seen.contains(text) {
        let read = tokio::time::timeout(default_timeout(), stream.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("nothing read within the timeout; so far: {seen}"));
        match read {
            Ok(0) | Err(_) => return false,
            Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_tells_websockets_and_event_streams_why_and_the_next_server_resumes_them() {
    let mut hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    exec(&client, &id, "echo before-$((1 + 1))").await;
    let mut socket = connect(
        &client,
        &format!("/v2/pty/sessions/{id}/ws?mode=attach&restore=true"),
    )
    .await;
    frame_of(&mut socket, "terminal_restored").await;
    let mut events = open_event_stream(&hub).await;
    let mut seen = String::new();
    assert!(
        read_until(&mut events, &mut seen, "event: page").await,
        "{seen}"
    );

    let pid = hub.server_pid().unwrap_or_else(|| panic!("no server"));
    ptyhub_core::process::kill(pid, rustix::process::Signal::TERM);

    // The WebSocket: a `server_stopping` frame with the seq to resume from, then the close.
    let stopping = frame_of(&mut socket, "server_stopping").await;
    assert_eq!(stopping["reason"], "server restarting", "{stopping}");
    let parsed: ServerFrame = serde_json::from_value(stopping.clone())
        .unwrap_or_else(|e| panic!("no ServerFrame ({e}): {stopping}"));
    assert!(matches!(parsed, ServerFrame::ServerStopping { .. }));
    let seq = stopping["seq"]
        .as_u64()
        .unwrap_or_else(|| panic!("no seq: {stopping}"));
    let close = loop {
        match next_message(&mut socket).await {
            Some(LiveMessage::Close(frame)) => break frame,
            Some(_) => {}
            None => panic!("the connection ended without a close frame"),
        }
    };
    let close = close.unwrap_or_else(|| panic!("a close frame without a code"));
    assert_eq!(u16::from(close.code), 1012);
    assert_eq!(close.reason.as_str(), "server restarting");

    // The event stream: a last event that says so, then its end.
    assert!(
        read_until(&mut events, &mut seen, "event: server_stopping").await,
        "{seen}"
    );
    assert!(seen.contains(r#"{"reason":"server restarting"}"#), "{seen}");
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(default_timeout(), events.read_to_end(&mut rest)).await;
    assert!(ended.is_ok(), "the event stream ended");

    let status = hub.stop_server();
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    let holder = hub.holder_pids()[0];
    assert!(is_alive(holder), "the holder outlives the server");

    // The next server: resuming from that seq gives what came after, and nothing before.
    hub.start_again(None);
    let client = hub.http();
    let mut socket = connect(
        &client,
        &format!("/v2/pty/sessions/{id}/ws?mode=attach&since_seq={seq}"),
    )
    .await;
    frame_of(&mut socket, "terminal_restored").await;
    exec(&client, &id, "echo after-$((2 + 2))").await;
    let mut text = String::new();
    while !text.contains("after-4") {
        let frame = frame_of(&mut socket, "output").await;
        text.push_str(frame["data"].as_str().unwrap_or_default());
    }
    assert!(
        !text.contains("before-2"),
        "nothing before the seq again: {text}"
    );
    assert_eq!(hub.holder_pids(), vec![holder], "the same holder");
}

fn read_file(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_says_why_and_resumes_byte_exact_across_a_restart() {
    let mut hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    exec(&client, &id, "echo ready").await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let out = dir.path().join("attach.out");
    let tmux = pane(&hub, dir.path());
    tmux.wait_for("pane$").await;
    // Its output goes to a file, byte for byte; its status lines go to the pane (stderr).
    tmux.type_line(&format!(
        "{} terminal attach {id} --since-seq 0 > {}",
        ptyhub_exe(),
        out.display()
    ));
    tmux.wait_for("Ctrl-] to detach").await;

    // Output that goes on while the server stops and another one starts.
    let started = exec_raw(
        &client,
        &id,
        json!({ "command": "for i in $(seq 1 150); do echo tick-$i; sleep 0.02; done", "async": true }),
    )
    .await;
    assert_eq!(started.status, 200, "{}", started.body);
    wait_until("the attach shows some ticks", || async {
        String::from_utf8_lossy(&read_file(&out))
            .contains("tick-10\r\n")
            .then_some(())
    })
    .await;
    let status = hub.stop_server();
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    tmux.wait_for("[ptyhub: server restarting; reconnecting]")
        .await;
    hub.start_again(None);
    tmux.wait_for(&format!("attach {id} again")).await;
    wait_until("the attach shows the last tick", || async {
        String::from_utf8_lossy(&read_file(&out))
            .contains("tick-150\r\n")
            .then_some(())
    })
    .await;

    // Keys typed after the restart reach the terminal through the same attach.
    tmux.type_line("echo typed-$((3 + 4))");
    wait_until("the typed command ran", || async {
        String::from_utf8_lossy(&logged_output(&hub, &id))
            .contains("typed-7\r\n")
            .then_some(())
    })
    .await;
    // Byte-exact: once the prompt after it is back, the attach wrote exactly the log's output.
    wait_until("the attach wrote every byte of the log, once", || async {
        let (got, logged) = (read_file(&out), logged_output(&hub, &id));
        let text = String::from_utf8_lossy(&got);
        let is_prompt_back = text
            .rsplit("typed-7\r\n")
            .next()
            .is_some_and(|after| after.contains("\x1b]133;A"));
        (got == logged && is_prompt_back).then_some(())
    })
    .await;
    tmux.send_keys(&["C-]"]);
    tmux.wait_for("[ptyhub: detached").await;
    let mut expected = logged_output(&hub, &id);
    expected.extend_from_slice(LOCAL_RESET);
    assert!(
        read_file(&out) == expected,
        "the attach's output differs from the log's"
    );
}

/// A holder that answers `hello` with a protocol version no server speaks (99). It is made
/// through a real mechanism, not a fake: the server is started with the hidden
/// `PTYHUB_TEST_HOLDER_PROTOCOL=99`, which it passes to every holder it starts in its spec,
/// and such a holder answers each `hello` with that version; nothing else of it differs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_of_a_protocol_the_server_does_not_speak_is_reported_and_left_running() {
    // One live terminal at most: room for another is never made by closing this one.
    let mut hub = Ptyhub::start_with_env(
        ptyhub_exe(),
        &["--max-terminals", "1"],
        &[("PTYHUB_TEST_HOLDER_PROTOCOL", "99")],
    );
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let reason = "holder protocol v99 not supported, server speaks 1..2";
    let reported = |client: Client, id: String| async move {
        let info = get(&client, &format!("/v2/pty/sessions/{id}")).await;
        let info = data(&info).clone();
        (info["state"] == "error" && info["host_error"] == reason).then_some(info)
    };
    let info = wait_until("the terminal is reported", || {
        reported(client.clone(), id.clone())
    })
    .await;
    assert!(info.get("holder_protocol").is_none(), "{info}");
    let holder = hub.holder_pids()[0];
    let mark = hub.metas()[0]["process_mark"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(is_alive(holder), "the holder is never ended");
    assert!(
        !ptyhub_core::process::marked_processes(&mark).is_empty(),
        "the shell runs on"
    );
    assert_eq!(
        hub.metas()[0]["state"],
        "running",
        "meta.json stays the holder's"
    );
    let no_room = post(&client, "/v2/pty/sessions", json!({ "id": "another" })).await;
    assert!(
        no_room.body.to_string().contains("LIMIT_EXCEEDED"),
        "{}: {}",
        no_room.status,
        no_room.body
    );
    assert!(is_alive(holder), "not closed to make room");

    // A restarted server says the same and ends nothing either.
    hub.start_again(None);
    let client = hub.http();
    wait_until("the restarted server reports it", || {
        reported(client.clone(), id.clone())
    })
    .await;
    assert!(is_alive(holder));
    let refused = exec_raw(&client, &id, json!({ "command": "true" })).await;
    assert_ne!(refused.status, 200, "{}", refused.body);

    // Closing it is asked for: then everything of it ends.
    close(&client, &id).await;
    wait_until("every process of it ended", || async {
        (!is_alive(holder) && ptyhub_core::process::marked_processes(&mark).is_empty())
            .then_some(())
    })
    .await;
}

/// The binary of [`OLD_COMMIT`], built once per machine; `None` (and why, printed) when this
/// clone does not have the commit.
#[allow(
    clippy::print_stderr,
    reason = "a skipped test and the build's cost are said on the test's stderr"
)]
fn old_build() -> Option<PathBuf> {
    let root = manifest_dir().join("../..");
    let started = std::time::Instant::now();
    let output = std::process::Command::new(root.join("scripts/old-build.sh"))
        .arg(OLD_COMMIT)
        .current_dir(&root)
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run scripts/old-build.sh: {e}"));
    if output.status.code() == Some(3) {
        eprintln!("skipped: this clone has no commit {OLD_COMMIT} to build the older ptyhub from");
        return None;
    }
    assert!(output.status.success(), "scripts/old-build.sh failed");
    eprintln!(
        "the older ptyhub was ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let path = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    Some(PathBuf::from(path))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_of_an_older_build_are_adopted_by_this_one() {
    let Some(old) = old_build() else {
        return;
    };
    assert_ne!(
        std::fs::read(&old).ok(),
        std::fs::read(ptyhub_exe()).ok(),
        "two different binaries"
    );
    let mut hub = Ptyhub::start(&old.display().to_string());
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let first = exec(
        &client,
        &id,
        "echo from-old-$((6 * 7)); seq 1 2000 | tail -n 3",
    )
    .await;
    assert_eq!(first["output"], "from-old-42\n1998\n1999\n2000");
    // The history as the older server replays it, once the prompt after the command is back
    // (the answer to exec may come before the prompt's bytes).
    let old_replay = wait_until("the older server replays the whole log", || async {
        let replay = replayed_output(&client, &id).await;
        let text = String::from_utf8_lossy(&replay);
        let is_prompt_back = text
            .rsplit("2000\r\n")
            .next()
            .is_some_and(|after| after.contains("\x1b]133;A"));
        (is_prompt_back && replay == logged_output(&hub, &id)).then_some(replay)
    })
    .await;
    let holder = hub.holder_pids()[0];
    let mark = hub.metas()[0]["process_mark"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        ptyhub_core::process::exe(holder).as_deref(),
        Some(old.as_path()),
        "the holder runs the older build"
    );

    let status = hub.stop_server();
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert!(is_alive(holder), "the holder outlives the older server");
    hub.start_again(Some(Path::new(ptyhub_exe())));
    let client = hub.http();

    // Adopted: version 1 spoken, the history whole, exec and input work.
    let info = get(&client, &format!("/v2/pty/sessions/{id}")).await;
    let info = data(&info);
    assert_eq!(info["state"], "running", "{info}");
    assert_eq!(info["holder_protocol"], 1, "{info}");
    assert!(info.get("host_error").is_none(), "{info}");
    // The older replay may end inside the prompt (its last bytes come a moment after the
    // mark): the newer one holds it whole, and then exactly what the log holds.
    let new_replay = wait_until("this build replays the whole log", || async {
        let replay = replayed_output(&client, &id).await;
        (replay == logged_output(&hub, &id)).then_some(replay)
    })
    .await;
    assert!(
        new_replay.starts_with(&old_replay),
        "the history differs after the upgrade"
    );
    let after = exec(&client, &id, "echo from-new-$((7 * 6))").await;
    assert_eq!(after["output"], "from-new-42");
    let typed = post(
        &client,
        &format!("/v2/pty/sessions/{id}/input"),
        json!({ "input": "echo typed-$((2 * 4))", "press_enter": true }),
    )
    .await;
    assert_eq!(typed.status, 200, "{}", typed.body);
    wait_until("the typed line ran", || async {
        String::from_utf8_lossy(&logged_output(&hub, &id))
            .contains("typed-8\r\n")
            .then_some(())
    })
    .await;
    assert_eq!(hub.holder_pids(), vec![holder], "the same holder");

    // Close leaves nothing.
    close(&client, &id).await;
    wait_until("every process of it ended", || async {
        (!is_alive(holder) && ptyhub_core::process::marked_processes(&mark).is_empty())
            .then_some(())
    })
    .await;
}

/// The Chromium the browser tests drive, or `None` (the test is skipped and says so).
#[allow(
    clippy::print_stderr,
    reason = "a skipped test says so in the test output"
)]
fn chromium() -> Option<String> {
    let chromium =
        std::env::var("PTYHUB_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    if !Path::new(&chromium).exists() {
        eprintln!("SKIPPED: no Chromium at {chromium}; ./scripts/test.sh installs it");
        return None;
    }
    Some(chromium)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_page_shows_why_and_resumes_across_a_restart_in_chromium() {
    use tokio::io::AsyncBufReadExt;
    let Some(chromium) = chromium() else {
        return;
    };
    let web = manifest_dir().join("tests/web");
    assert!(
        web.join("node_modules/playwright-core").is_dir(),
        "playwright-core is not installed: run `npm ci` in {} (./scripts/test.sh does)",
        web.display()
    );
    let mut hub = start();
    // The page reconnects to the address it was loaded from.
    hub.keep_port();
    let mut script = tokio::process::Command::new("node")
        .arg(web.join("restart.test.mjs"))
        .current_dir(&web)
        .env("PTYHUB_URL", format!("http://{}", hub.addr))
        .env("PTYHUB_WEB_URL", &hub.web_url)
        .env("PTYHUB_TOKEN", &hub.token)
        .env("PTYHUB_CHROMIUM", chromium)
        .env(
            "PTYHUB_TIMEOUT_MS",
            default_timeout().as_millis().to_string(),
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run node: {e}"));
    let stdout = script.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let mut said = String::new();
    loop {
        let line = tokio::time::timeout(default_timeout() * 2, lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("the script never asked for the restart: {said}"))
            .unwrap_or_else(|e| panic!("read: {e}"));
        let Some(line) = line else { break };
        said.push_str(&line);
        said.push('\n');
        if line == "RESTART" {
            let status = hub.stop_server();
            assert!(status.is_some_and(|s| s.success()), "{status:?}");
            hub.start_again(None);
            let mut stdin = script.stdin.take().unwrap_or_else(|| panic!("no stdin"));
            stdin
                .write_all(b"RESTARTED\n")
                .await
                .unwrap_or_else(|e| panic!("write: {e}"));
        }
    }
    let output = tokio::time::timeout(default_timeout() * 2, script.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the script did not end"))
        .unwrap_or_else(|e| panic!("node: {e}"));
    assert!(
        output.status.success() && said.contains("OK"),
        "restart.test.mjs failed\nstdout: {said}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_of_this_build_are_adopted_by_an_older_one() {
    let Some(old) = old_build() else {
        return;
    };
    // This build's holders speak versions 1 and 2; an older server offers 1 alone, and gets it.
    let mut hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    exec(&client, &id, "export KEPT=$((20 + 1))").await;
    let before = replayed_output(&client, &id).await;
    let holder = hub.holder_pids()[0];
    let status = hub.stop_server();
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    hub.start_again(Some(&old));
    let client = hub.http();
    let after = exec(&client, &id, "echo kept-$KEPT").await;
    assert_eq!(after["output"], "kept-21");
    let replay = replayed_output(&client, &id).await;
    assert!(
        replay.starts_with(&before),
        "the history is whole under the older server"
    );
    assert_eq!(hub.holder_pids(), vec![holder], "the same holder");
    close(&client, &id).await;
    wait_until("the holder ended", || async {
        (!is_alive(holder)).then_some(())
    })
    .await;
}
