//! The tmux backend against a real tmux: the real binary with `PTYHUB_BACKEND=tmux` (or
//! `backend: "tmux"`), exec, send, a person typing through `tmux send-keys`, resize, signals,
//! close, a server restart, and backend selection errors. Every tmux server a test starts is
//! killed by its socket when the test's `Ptyhub` is dropped.

use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::{close, create, exec, exec_raw, get, post};
use ptyhub_client::Client;
use ptyhub_test_support::{Ptyhub, data, is_alive, wait_until};

fn start_tmux() -> Ptyhub {
    Ptyhub::start_with_env(
        env!("CARGO_BIN_EXE_ptyhub"),
        &[],
        &[("PTYHUB_BACKEND", "tmux")],
    )
}

/// Runs `tmux -S <socket> <args>` and returns its stdout.
fn tmux(socket: &str, args: &[&str]) -> String {
    let output = Command::new("tmux")
        .arg("-S")
        .arg(socket)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run tmux: {e}"));
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

async fn info(client: &Client, id: &str) -> Value {
    data(&get(client, &format!("/v2/pty/sessions/{id}")).await).clone()
}

async fn screen_text(client: &Client, id: &str) -> String {
    let screen = get(client, &format!("/v2/pty/sessions/{id}/screen")).await;
    data(&screen)["screen"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// The pane's program and the tmux server, from `meta.json` and tmux itself.
fn terminal_pids(hub: &Ptyhub, id: &str, socket: &str) -> (u32, u32) {
    let meta = hub
        .metas()
        .into_iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("no meta.json for {id}"));
    let pane = meta["pid"]
        .as_u64()
        .and_then(|p| u32::try_from(p).ok())
        .unwrap_or_else(|| panic!("no pid in {meta}"));
    let server = tmux(socket, &["display-message", "-p", "#{pid}"])
        .parse()
        .unwrap_or_else(|e| panic!("tmux server pid: {e}"));
    (pane, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tmux_terminal_does_what_a_native_one_does_and_a_person_can_type_in_it() {
    let hub = start_tmux();
    let client = hub.http();

    let backends = get(&client, "/v2/backends").await;
    let listed = data(&backends)["backends"].clone();
    assert_eq!(listed[0]["type"], "native", "{listed}");
    assert_eq!(listed[1]["type"], "tmux", "{listed}");
    assert_eq!(listed[1]["status"], "ready", "{listed}");
    assert_eq!(listed[1]["default"], true, "{listed}");
    assert_eq!(data(&backends)["default"], "tmux");

    // A terminal nobody created by name stays native: v1 exec's on a new id.
    let implicit = post(
        &client,
        "/v1/shell/exec",
        json!({ "id": "made-by-exec", "command": "true" }),
    )
    .await;
    assert_eq!(implicit.status, 200, "{}", implicit.body);
    assert_eq!(info(&client, "made-by-exec").await["backend"], "native");

    // An explicit create without a backend gets the default: tmux.
    let id = create(&client, json!({ "id": "tmux.one", "cwd": "/tmp" })).await;
    let created = info(&client, &id).await;
    assert_eq!(created["backend"], "tmux", "{created}");
    assert_eq!(created["tmux"]["session"], "tmux_one", "{created}");
    let socket = created["tmux"]["socket"]
        .as_str()
        .unwrap_or_else(|| panic!("no socket in {created}"))
        .to_owned();
    let mode = std::fs::metadata(std::path::Path::new(&socket).parent().unwrap_or_else(|| {
        panic!("socket without a directory");
    }))
    .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777)
    .unwrap_or_else(|e| panic!("socket dir: {e}"));
    assert_eq!(mode, 0o700, "the socket directory is private");
    assert_eq!(
        tmux(&socket, &["list-sessions", "-F", "#{session_name}"]),
        "tmux_one"
    );

    // exec: output and exit code come through the pane's raw bytes (OSC 133 marks included).
    let ran = exec(&client, &id, "echo hi; (exit 3)").await;
    assert_eq!(ran["exit_code"], 3, "{ran}");
    assert_eq!(ran["output"], "hi", "{ran}");
    // Input reaches the pane byte for byte (UTF-8 included), and a flood of output arrives
    // whole and in order.
    let accented = exec(&client, &id, "echo 'café ünïcode'").await;
    assert_eq!(accented["output"], "café ünïcode", "{accented}");
    let flood = exec_raw(
        &client,
        &id,
        json!({ "command": "seq 1 50000", "truncate": false, "timeout": 60 }),
    )
    .await;
    // A long command goes in as many send-keys commands, in order.
    let long = format!("echo {} | wc -c", "x".repeat(20_000));
    let counted = exec(&client, &id, &long).await;
    assert_eq!(counted["output"], "20001", "{counted}");
    let expected: Vec<String> = (1..=50_000).map(|n| n.to_string()).collect();
    assert_eq!(
        data(&flood)["output"].as_str().unwrap_or_default(),
        expected.join("\n"),
        "every line of the flood, in order"
    );

    // send: the kernel's view of the pane says the shell's `read` waits for input.
    let asked = post(
        &client,
        &format!("/v2/pty/sessions/{id}/send"),
        json!({ "text": "read -p 'name: ' answer", "submit": true }),
    )
    .await;
    assert_eq!(data(&asked)["wait_reason"], "stdin_read", "{}", asked.body);

    // A person answers in tmux; the agent sees it in the log and the shell got it.
    tmux(
        &socket,
        &["send-keys", "-t", "=tmux_one:", "from-a-person", "Enter"],
    );
    tmux(
        &socket,
        &[
            "send-keys",
            "-t",
            "=tmux_one:",
            "echo typed-by-person",
            "Enter",
        ],
    );
    wait_until("the person's command shows on the screen", || async {
        screen_text(&client, &id)
            .await
            .lines()
            .any(|line| line == "typed-by-person")
            .then_some(())
    })
    .await;
    let echoed = exec(&client, &id, "echo \"got $answer\"").await;
    assert_eq!(echoed["output"], "got from-a-person", "{echoed}");

    // Resize reaches tmux's window.
    let resized = post(
        &client,
        &format!("/v2/pty/sessions/{id}/resize"),
        json!({ "cols": 100, "rows": 30 }),
    )
    .await;
    assert_eq!(resized.status, 200, "{}", resized.body);
    wait_until("tmux's window is 100x30", || async {
        (tmux(
            &socket,
            &[
                "display-message",
                "-p",
                "-t",
                "=tmux_one:",
                "#{window_width}x#{window_height}",
            ],
        ) == "100x30")
            .then_some(())
    })
    .await;
    let size = exec(&client, &id, "stty size").await;
    assert_eq!(size["output"], "30 100", "{size}");

    // Signals reach the pane's foreground group.
    let started = post(
        &client,
        &format!("/v2/pty/sessions/{id}/exec"),
        json!({ "command": "sleep 30", "async": true }),
    )
    .await;
    assert_eq!(data(&started)["status"], "running");
    let path = format!("/v2/pty/sessions/{id}/signal");
    wait_until("sleep owns the terminal", || async {
        let answer = post(&client, &path, json!({ "signal": "WINCH" })).await;
        (data(&answer)["program"] == "sleep").then_some(())
    })
    .await;
    let interrupted = post(&client, &path, json!({ "signal": "INT" })).await;
    assert_eq!(
        data(&interrupted)["program"],
        "sleep",
        "{}",
        interrupted.body
    );
    let done = post(
        &client,
        &format!("/v2/pty/sessions/{id}/wait"),
        json!({ "seconds": 10 }),
    )
    .await;
    assert_eq!(data(&done)["exit_code"], 130, "{}", done.body);

    // Close leaves nothing running: not the shell, not a background job, not tmux.
    let job = exec(&client, &id, "sleep 300 & echo $!").await;
    let job: u32 = job["output"]
        .as_str()
        .and_then(|o| o.lines().last())
        .and_then(|pid| pid.trim().parse().ok())
        .unwrap_or_else(|| panic!("no job pid in {job}"));
    let (pane, server) = terminal_pids(&hub, &id, &socket);
    close(&client, &id).await;
    wait_until("every process of the terminal is gone", || async {
        [pane, server, job]
            .iter()
            .all(|&pid| !is_alive(pid))
            .then_some(())
    })
    .await;
    assert!(
        !std::path::Path::new(&socket).exists(),
        "the tmux socket is removed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tmux_terminal_outlives_the_server_and_its_exit_code_is_recorded() {
    // The harness's default stays native; this terminal names its backend.
    let mut hub = ptyhub_test_support::Ptyhub::start(env!("CARGO_BIN_EXE_ptyhub"));
    let client = hub.http();
    let native = create(&client, json!({})).await;
    assert_eq!(info(&client, &native).await["backend"], "native");
    let id = create(&client, json!({ "backend": "tmux" })).await;
    exec(&client, &id, "export KEPT=yes").await;
    // The CLI creates by name too, and says how to attach.
    let made = hub.cli(&["terminal", "create", "bot", "--backend", "tmux"]);
    let printed = String::from_utf8_lossy(&made.stdout);
    assert!(made.status.success(), "{printed}");
    assert!(
        printed.contains("attach with: tmux -S ")
            && printed.contains("attach -t =terminal-bot-default"),
        "{printed}"
    );

    hub.restart();
    let client = hub.http();
    let after = info(&client, &id).await;
    assert_eq!(after["backend"], "tmux", "{after}");
    assert_eq!(after["state"], "running", "{after}");
    let kept = exec(&client, &id, "echo $KEPT").await;
    assert_eq!(kept["output"], "yes", "{kept}");

    // The shell's own exit status becomes the terminal's.
    let input = post(
        &client,
        &format!("/v2/pty/sessions/{id}/input"),
        json!({ "input": "exit 7\n" }),
    )
    .await;
    assert_eq!(input.status, 200, "{}", input.body);
    let exited = wait_until("the terminal has exited", || async {
        let now = info(&client, &id).await;
        (now["state"] == "exited").then_some(now)
    })
    .await;
    let holder_log = hub
        .terminal_dir(&id)
        .and_then(|dir| std::fs::read_to_string(dir.join("holder.log")).ok())
        .unwrap_or_default();
    assert_eq!(exited["exit_code"], 7, "{exited}\nholder.log: {holder_log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_or_unavailable_backend_creates_nothing() {
    let hub = Ptyhub::start_with_env(
        env!("CARGO_BIN_EXE_ptyhub"),
        &[],
        &[("PTYHUB_TMUX", "/nonexistent/tmux")],
    );
    let client = hub.http();
    let backends = get(&client, "/v2/backends").await;
    let tmux_entry = data(&backends)["backends"][1].clone();
    assert_eq!(tmux_entry["type"], "tmux");
    assert_eq!(tmux_entry["status"], "failed", "{tmux_entry}");
    assert!(
        tmux_entry["reason"]
            .as_str()
            .is_some_and(|r| r.contains("/nonexistent/tmux")),
        "{tmux_entry}"
    );

    let unavailable = post(
        &client,
        "/v2/pty/sessions",
        json!({ "id": "wants-tmux", "backend": "tmux" }),
    )
    .await;
    assert_eq!(unavailable.status, 503, "{}", unavailable.body);
    assert_eq!(unavailable.body["error"]["code"], "BACKEND_UNAVAILABLE");
    let unknown = post(
        &client,
        "/v2/pty/sessions",
        json!({ "id": "wants-screen", "backend": "screen" }),
    )
    .await;
    assert_eq!(unknown.status, 400, "{}", unknown.body);
    assert_eq!(unknown.body["error"]["code"], "INVALID_INPUT");
    assert!(hub.metas().is_empty(), "nothing was created");

    // A server whose default is tmux without a tmux refuses explicit creates the same way,
    // while terminals nobody named (exec's, anonymous ones) stay native.
    let strict = Ptyhub::start_with_env(
        env!("CARGO_BIN_EXE_ptyhub"),
        &[],
        &[
            ("PTYHUB_TMUX", "/nonexistent/tmux"),
            ("PTYHUB_BACKEND", "tmux"),
        ],
    );
    let client = strict.http();
    let refused = post(&client, "/v2/pty/sessions", json!({})).await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(strict.metas().is_empty(), "nothing was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_gives_a_tmux_session_whose_holder_died_a_new_holder() {
    let mut hub = start_tmux();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    exec(&client, &id, "export KEPT=still-here").await;
    let socket = info(&client, &id).await["tmux"]["socket"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (pane, _) = terminal_pids(&hub, &id, &socket);

    hub.kill_server();
    let holders = hub.holder_pids();
    assert_eq!(holders.len(), 1, "{holders:?}");
    ptyhub_test_support::kill_9(holders[0]);
    wait_until("the holder is gone", || async {
        (!is_alive(holders[0])).then_some(())
    })
    .await;
    assert!(is_alive(pane), "tmux keeps the shell without its holder");

    hub.restart();
    let client = hub.http();
    let kept = exec(&client, &id, "echo $KEPT").await;
    assert_eq!(kept["output"], "still-here", "{kept}");
    let after = info(&client, &id).await;
    assert_eq!(after["state"], "running", "{after}");
    let new_holders = hub.holder_pids();
    assert!(
        new_holders
            .iter()
            .all(|&pid| pid != holders[0] && is_alive(pid)),
        "{new_holders:?}"
    );
    let (_, server) = terminal_pids(&hub, &id, &socket);
    close(&client, &id).await;
    wait_until("the reattached terminal's processes are gone", || async {
        (!is_alive(pane) && !is_alive(server)).then_some(())
    })
    .await;
}

/// Reads JSON frames from `socket` until the text of its output frames contains `needle`
/// (with an empty `needle`, until the first frame); returns every frame seen.
async fn read_output_until(socket: &mut ptyhub_client::LiveSocket, needle: &str) -> Vec<Value> {
    use futures_util::StreamExt;
    let mut frames = Vec::new();
    let mut text = String::new();
    while frames.is_empty() || !text.contains(needle) {
        let next = tokio::time::timeout(ptyhub_test_support::default_timeout(), socket.next())
            .await
            .unwrap_or_else(|_| panic!("no {needle:?} within the timeout; saw {text:?}"));
        match next {
            Some(Ok(ptyhub_client::LiveMessage::Text(frame))) => {
                let frame: Value = serde_json::from_str(frame.as_str())
                    .unwrap_or_else(|e| panic!("frame is not JSON: {e}"));
                if frame["type"] == "output" {
                    text.push_str(frame["data"].as_str().unwrap_or_default());
                }
                frames.push(frame);
            }
            Some(Ok(_)) => {}
            _ => panic!("the connection ended before {needle:?}; saw {text:?}"),
        }
    }
    frames
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_and_watch_follow_a_tmux_terminal() {
    use futures_util::SinkExt;
    let hub = start_tmux();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    let socket_path = info(&client, &id).await["tmux"]["socket"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let session = format!(
        "={}:",
        info(&client, &id).await["tmux"]["session"]
            .as_str()
            .unwrap_or_default()
    );

    let connect = |query: &'static str| {
        let client = client.clone();
        let path = format!("/v2/pty/sessions/{id}/ws?{query}");
        async move {
            client
                .websocket(&path)
                .await
                .unwrap_or_else(|e| panic!("websocket {path}: {e}"))
        }
    };
    let mut relay = connect("").await;
    let mut watcher = connect("mode=watch").await;
    let ready = read_output_until(&mut relay, "").await;
    let ready = ready
        .iter()
        .find(|frame| frame["type"] == "ready")
        .cloned()
        .unwrap_or_default();
    assert_eq!(ready["backend"], "tmux", "{ready}");

    relay
        .send(ptyhub_client::LiveMessage::Text(
            json!({ "type": "input", "data": "echo ws-$((6 * 7))\n" })
                .to_string()
                .into(),
        ))
        .await
        .unwrap_or_else(|e| panic!("send: {e}"));
    read_output_until(&mut relay, "ws-42").await;
    read_output_until(&mut watcher, "ws-42").await;

    // An anonymous terminal is native even where the default is tmux.
    let mut anonymous = client
        .websocket("/v2/pty/ws")
        .await
        .unwrap_or_else(|e| panic!("anonymous websocket: {e}"));
    let frames = read_output_until(&mut anonymous, "").await;
    let anonymous_ready = frames
        .iter()
        .find(|frame| frame["type"] == "ready")
        .cloned()
        .unwrap_or_default();
    assert_eq!(anonymous_ready["backend"], "native", "{anonymous_ready}");

    // What a person types in tmux reaches the watcher too.
    tmux(
        &socket_path,
        &[
            "send-keys",
            "-t",
            &session,
            "echo person-$((2 * 3))",
            "Enter",
        ],
    );
    read_output_until(&mut watcher, "person-6").await;
}

/// v1's capabilities list the backends `GET /v2/backends` does, each with its status, so an
/// agent-sandbox client sees that tmux is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_capabilities_list_every_backend_with_its_status() {
    let hub = super::start();
    let client = hub.http();
    let v2 = super::get(&client, "/v2/backends").await;
    let v1 = super::get(&client, "/v1/capabilities").await;
    assert_eq!(v1.status, 200, "{}", v1.body);
    let statuses = |list: &serde_json::Value, key: &str| -> Vec<(String, String)> {
        list.as_array()
            .into_iter()
            .flatten()
            .map(|b| {
                (
                    b[key].as_str().unwrap_or_default().to_owned(),
                    b["status"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    let listed = statuses(&ptyhub_test_support::data(&v1)["backends"], "type");
    assert_eq!(
        listed,
        statuses(&ptyhub_test_support::data(&v2)["backends"], "type"),
        "{}",
        v1.body
    );
    assert!(
        listed.contains(&("tmux".to_owned(), "ready".to_owned())),
        "tmux is installed here: {listed:?}"
    );
    assert!(
        ptyhub_test_support::data(&v1)["cgroups"]["status"].is_string(),
        "{}",
        v1.body
    );
}
