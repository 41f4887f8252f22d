//! `ptyhub terminal attach` and `watch` driven the way a person uses them: inside tmux, with
//! keys sent to the pane and the pane read back; and an attach connection that stops reading,
//! whose keys must still reach the terminal.

use futures_util::{SinkExt, StreamExt};
use ptyhub_client::LiveMessage;
use serde_json::json;

use super::{create, exec, get, start};
use ptyhub_test_support::{Ptyhub, Tmux, data, default_timeout, processes_with_arg, wait_until};

/// A tmux pane running a plain bash, with the CLI pointed at this server.
pub(super) fn pane(hub: &Ptyhub, home: &std::path::Path) -> Tmux {
    let socket = hub.socket.display().to_string();
    let home = home.display().to_string();
    Tmux::start(
        "PS1='pane$ ' exec bash --norc --noprofile",
        100,
        30,
        &[
            ("PTYHUB_SOCKET", &socket),
            ("HOME", &home),
            ("TERM", "xterm-256color"),
        ],
    )
}

fn ptyhub_exe() -> &'static str {
    env!("CARGO_BIN_EXE_ptyhub")
}

async fn screen_text(client: &ptyhub_client::Client, id: &str) -> String {
    let screen = get(client, &format!("/v2/pty/sessions/{id}/screen")).await;
    data(&screen)["screen"].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_types_follows_the_window_and_detaches_with_the_tty_restored() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    let dir = tempfile_dir();
    let tmux = pane(&hub, dir.path());
    tmux.wait_for("pane$").await;
    let before = dir.path().join("before");
    let after = dir.path().join("after");
    tmux.type_line(&format!(
        "stty -g > {}; {} terminal attach {id}",
        before.display(),
        ptyhub_exe()
    ));
    tmux.wait_for("Ctrl-] to detach").await;

    // Typing reaches the terminal, and its output reaches the pane.
    tmux.type_line("echo attached-$((2 + 2))");
    tmux.wait_for("attached-4").await;
    wait_until("the terminal has the typed command's output", || async {
        screen_text(&client, &id)
            .await
            .contains("attached-4")
            .then_some(())
    })
    .await;

    // The terminal follows the window's size.
    tmux.run(&["resize-window", "-t", "main", "-x", "90", "-y", "25"]);
    wait_until("the terminal is 90x25", || async {
        let info = get(&client, &format!("/v2/pty/sessions/{id}")).await;
        let info = data(&info);
        (info["cols"] == 90 && info["rows"] == 25).then_some(())
    })
    .await;

    // Detach: the terminal keeps running, the local tty is as it was.
    tmux.send_keys(&["C-]"]);
    tmux.wait_for("[ptyhub: detached").await;
    tmux.type_line(&format!(
        "stty -g > {}; cmp -s {} {} && echo tty-restored-$((1 + 1))",
        after.display(),
        before.display(),
        after.display()
    ));
    tmux.wait_for("tty-restored-2").await;
    let info = get(&client, &format!("/v2/pty/sessions/{id}")).await;
    assert_eq!(data(&info)["state"], "running");
    let still = exec(&client, &id, "echo still-$((5 + 5))").await;
    assert_eq!(still["output"], "still-10");

    // Attach again; the terminal ends under it: told, and the tty is restored again.
    tmux.type_line("clear");
    wait_until("the pane is clear", || async {
        (!tmux.capture().contains("Ctrl-]")).then_some(())
    })
    .await;
    tmux.type_line(&format!("{} terminal attach {id}", ptyhub_exe()));
    tmux.wait_for("Ctrl-] to detach").await;
    tmux.type_line("exit 4");
    tmux.wait_for("exited with code 4").await;
    tmux.type_line(&format!(
        "stty -g > {}; cmp -s {} {} && echo tty-restored-$((2 + 1))",
        after.display(),
        before.display(),
        after.display()
    ));
    tmux.wait_for("tty-restored-3").await;

    // An unknown terminal: a clear error, nothing changed.
    tmux.type_line(&format!(
        "{} terminal attach t-missing; echo status-$?",
        ptyhub_exe()
    ));
    let pane = tmux.wait_for("status-2").await;
    assert!(pane.contains("SESSION_NOT_FOUND"), "{pane}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_shows_output_and_never_writes() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    exec(&client, &id, "echo history-$((1 + 2))").await;
    let dir = tempfile_dir();
    let tmux = pane(&hub, dir.path());
    tmux.wait_for("pane$").await;
    let before = dir.path().join("before");
    tmux.type_line(&format!(
        "stty -g > {}; {} terminal watch {id}",
        before.display(),
        ptyhub_exe()
    ));
    tmux.wait_for("Ctrl-] to detach").await;
    // The recent history is replayed, then live output follows.
    tmux.wait_for("history-3").await;
    exec(&client, &id, "echo watched-$((3 + 4))").await;
    tmux.wait_for("watched-7").await;

    // Keys typed into a watcher never reach the terminal.
    tmux.type_line("echo injected-by-watcher");
    let marker = exec(&client, &id, "echo marker-$((4 + 4))").await;
    assert_eq!(marker["output"], "marker-8");
    tmux.wait_for("marker-8").await;
    let events = get(
        &client,
        &format!("/v2/pty/sessions/{id}/events?limit=10000"),
    )
    .await;
    assert!(
        !events.body.to_string().contains("injected-by-watcher"),
        "a watcher's keys reached the terminal"
    );

    // ^C ends watching; the terminal lives on and the tty is restored.
    tmux.send_keys(&["C-c"]);
    tmux.wait_for("[ptyhub: detached").await;
    tmux.type_line(&format!(
        "stty -g | cmp -s {} - && echo tty-restored-$((3 + 3))",
        before.display()
    ));
    tmux.wait_for("tty-restored-6").await;
    let info = get(&client, &format!("/v2/pty/sessions/{id}")).await;
    assert_eq!(data(&info)["state"], "running");
}

/// Issue 16, item 6: ^C typed into an attach connection that reads nothing while the program
/// floods reaches the program at once (its output never holds input back), and the
/// connection, once it reads again, gets every byte in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_reaches_the_program_while_the_attach_connection_reads_nothing() {
    let hub = start();
    let client = hub.local();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    let path = format!("/v2/pty/sessions/{id}/ws?mode=attach&protocol=binary");
    let mut socket = client
        .websocket(&path)
        .await
        .unwrap_or_else(|e| panic!("websocket {path}: {e}"));
    assert!(
        matches!(next(&mut socket).await, LiveMessage::Text(t) if t.as_str().contains(r#""type":"ready""#)),
        "ready comes first"
    );
    // A flood that would not end by itself; the connection reads nothing from here on.
    let _guard = ptyhub_test_support::KillOnDrop {
        args: vec!["987654321".to_owned()],
    };
    send(&mut socket, "seq 1 987654321\r").await;
    wait_until("the flood runs", || async {
        (!processes_with_arg("987654321").is_empty()).then_some(())
    })
    .await;
    // Far more output than the socket and the server's queues hold is waiting for the client.
    wait_for_logged(
        &hub,
        &id,
        8 * 1024 * 1024,
        "the log holds 8 MiB more than the client read",
    )
    .await;
    send(&mut socket, "\u{3}").await;
    wait_until("^C ended the flood", || async {
        processes_with_arg("987654321").is_empty().then_some(())
    })
    .await;
    send(&mut socket, "echo caught-up-$((2 + 3))\r").await;

    // Reading again, the connection gets everything, gap-free, up to the marker.
    let mut bytes = Vec::new();
    let mut checked = 0;
    while !bytes[checked..]
        .windows(b"caught-up-5\r\n".len())
        .any(|w| w == b"caught-up-5\r\n")
    {
        checked = bytes.len().saturating_sub(16);
        match next(&mut socket).await {
            LiveMessage::Binary(chunk) => bytes.extend_from_slice(&chunk),
            LiveMessage::Text(text) => assert!(
                !text.as_str().contains(r#""type":"error""#),
                "the connection failed: {text}"
            ),
            LiveMessage::Close(close) => panic!("closed: {close:?}"),
            _ => {}
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    let start = text
        .find("1\r\n2\r\n3\r\n")
        .unwrap_or_else(|| panic!("the flood's start: {}", &text[..text.len().min(500)]));
    let mut expected = 1u64;
    for line in text[start..].split("\r\n") {
        if line.is_empty() || !line.bytes().all(|b| b.is_ascii_digit()) {
            break;
        }
        assert_eq!(line, expected.to_string(), "every line once, in order");
        expected += 1;
    }
    assert!(
        expected > 100_000,
        "the flood went on for a while: {expected} lines"
    );
}

/// The next message, or a panic after the test timeout.
async fn next(socket: &mut ptyhub_client::LiveSocket) -> LiveMessage {
    match tokio::time::timeout(default_timeout(), socket.next()).await {
        Ok(Some(Ok(message))) => message,
        other => panic!("no message from the attach connection: {other:?}"),
    }
}

/// Types `data` through an `input` frame.
async fn send(socket: &mut ptyhub_client::LiveSocket, data: &str) {
    let frame = json!({ "type": "input", "data": data }).to_string();
    socket
        .send(LiveMessage::Text(frame.into()))
        .await
        .unwrap_or_else(|e| panic!("send: {e}"));
}

/// Waits until terminal `id`'s log files hold more than `bytes`.
async fn wait_for_logged(hub: &Ptyhub, id: &str, bytes: u64, what: &str) {
    let dir = hub
        .terminal_dir(id)
        .unwrap_or_else(|| panic!("no directory for {id}"));
    wait_until(what, || async {
        let logged: u64 = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("events"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum();
        (logged > bytes).then_some(())
    })
    .await;
}

fn tempfile_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"))
}

/// The CLI's own side of the same promise: `terminal attach` whose local output takes
/// nothing (stdout a pipe nobody reads) still reads the keyboard, so ^C reaches the flood
/// and the detach key detaches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_keys_get_through_while_its_local_output_is_stuck() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    let dir = tempfile_dir();
    let tmux = pane(&hub, dir.path());
    tmux.wait_for("pane$").await;
    let _guard = ptyhub_test_support::KillOnDrop {
        args: vec!["987654322".to_owned()],
    };
    // `sleep` reads nothing: once the pipe's buffer is full, every write to it blocks.
    tmux.type_line(&format!(
        "{} terminal attach {id} | sleep 600; echo attach-ended-$?",
        ptyhub_exe()
    ));
    tmux.wait_for("Ctrl-] to detach").await;
    tmux.type_line("seq 1 987654322");
    wait_until("the flood runs", || async {
        (!processes_with_arg("987654322").is_empty()).then_some(())
    })
    .await;
    // Far more than a pipe and the client's queue hold has been printed.
    wait_for_logged(&hub, &id, 4 * 1024 * 1024, "the log holds 4 MiB").await;
    tmux.send_keys(&["C-c"]);
    wait_until("^C ended the flood", || async {
        processes_with_arg("987654322").is_empty().then_some(())
    })
    .await;
    // The detach key ends the client; `sleep` is still there, so the pipeline waits on it.
    tmux.send_keys(&["C-]"]);
    wait_until("the client detached", || async {
        processes_with_arg(&id)
            .into_iter()
            .all(|pid| {
                !std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                    .unwrap_or_default()
                    .contains("attach")
            })
            .then_some(())
    })
    .await;
    // The flood's output is long: its end is seen once the terminal has read it all.
    wait_until("the interrupted command ended", || async {
        let info = get(&client, &format!("/v2/pty/sessions/{id}")).await;
        data(&info)["running_command"].is_null().then_some(())
    })
    .await;
    let after = exec(&client, &id, "echo usable-$((3 + 4))").await;
    assert_eq!(after["output"], "usable-7", "{after}");
}
