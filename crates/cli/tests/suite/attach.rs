//! `ptyhub terminal attach` and `watch` driven the way a person uses them: inside tmux, with
//! keys sent to the pane and the pane read back.

use serde_json::json;

use super::{create, exec, get, start};
use ptyhub_test_support::{Ptyhub, Tmux, data, wait_until};

/// A tmux pane running a plain bash, with the CLI pointed at this server.
fn pane(hub: &Ptyhub, home: &std::path::Path) -> Tmux {
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

fn tempfile_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"))
}
