//! Live connections over WebSocket (docs/websocket.md) with a real client, against real shells.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use ptyhub_client::{Client, ClientError, LiveMessage, LiveSocket};
use ptyhub_protocol::error::ErrorCode;
use ptyhub_protocol::live::ServerFrame;
use serde_json::{Value, json};

use super::{create, exec, get, start};
use ptyhub_test_support::{Ptyhub, data, default_timeout, wait_until};

pub(super) async fn connect(client: &Client, path: &str) -> LiveSocket {
    client
        .websocket(path)
        .await
        .unwrap_or_else(|e| panic!("websocket {path}: {e}"))
}

/// The next message, or a panic after the test timeout.
pub(super) async fn next_message(socket: &mut LiveSocket) -> Option<LiveMessage> {
    match tokio::time::timeout(default_timeout(), socket.next()).await {
        Ok(Some(Ok(message))) => Some(message),
        Ok(Some(Err(_)) | None) => None,
        Err(_) => panic!("no frame within the timeout"),
    }
}

/// The next JSON frame (binary and `presence` frames are skipped: `suite::lease` checks
/// those); `Null` when the connection ended. Every frame must be a `ServerFrame` that
/// serializes back to exactly what was received.
async fn next_json(socket: &mut LiveSocket) -> Value {
    loop {
        match next_message(socket).await {
            Some(LiveMessage::Text(text)) => {
                let value: Value = serde_json::from_str(text.as_str())
                    .unwrap_or_else(|e| panic!("frame is not JSON ({e}): {text}"));
                let frame: ServerFrame = serde_json::from_value(value.clone())
                    .unwrap_or_else(|e| panic!("frame is no ServerFrame ({e}): {text}"));
                assert_eq!(
                    serde_json::to_value(&frame).ok().as_ref(),
                    Some(&value),
                    "the frame's shape differs from ServerFrame's: {text}"
                );
                if value["type"] == "presence" {
                    continue;
                }
                return value;
            }
            Some(LiveMessage::Close(_)) | None => return Value::Null,
            Some(_) => {}
        }
    }
}

/// Connects where the server must refuse: its one frame is an error, then it closes. Returns
/// the error's code.
async fn refusal(client: &Client, path: &str) -> String {
    let mut socket = connect(client, path).await;
    let frame = next_json(&mut socket).await;
    assert_eq!(frame["type"], "error", "{path}: {frame}");
    assert!(
        next_json(&mut socket).await.is_null(),
        "{path}: closed after the error"
    );
    frame["code"].as_str().unwrap_or_default().to_owned()
}

async fn send_json(socket: &mut LiveSocket, frame: Value) {
    socket
        .send(LiveMessage::Text(frame.to_string().into()))
        .await
        .unwrap_or_else(|e| panic!("send: {e}"));
}

/// What a client saw: the text of output frames and every frame.
#[derive(Default)]
struct Seen {
    text: String,
    restored: String,
    frames: Vec<Value>,
    last_seq: u64,
}

impl Seen {
    /// Whether a frame of type `kind` was seen.
    fn has(&self, kind: &str) -> bool {
        self.frames.iter().any(|f| f["type"] == kind)
    }
}

/// Reads frames until `done` holds for what was seen (or the connection ends).
async fn read_until(socket: &mut LiveSocket, seen: &mut Seen, done: impl Fn(&Seen) -> bool) {
    while !done(seen) {
        let frame = next_json(socket).await;
        if frame.is_null() {
            return;
        }
        match frame["type"].as_str() {
            Some("output") => {
                seen.text
                    .push_str(frame["data"].as_str().unwrap_or_default());
            }
            Some("restore_output") => {
                seen.restored
                    .push_str(frame["data"].as_str().unwrap_or_default());
            }
            _ => {}
        }
        if let Some(seq) = frame["seq"].as_u64()
            && matches!(frame["type"].as_str(), Some("output" | "restore_output"))
        {
            assert!(seq > seen.last_seq, "seq went back: {frame}");
            seen.last_seq = seq;
        }
        seen.frames.push(frame);
    }
}

fn count(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

fn ws_path(id: &str, query: &str) -> String {
    format!("/v2/pty/sessions/{id}/ws?{query}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_frame_of_the_json_protocol() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    let mut socket = connect(&client, &ws_path(&id, "")).await;

    let ready = next_json(&mut socket).await;
    assert_eq!(ready["type"], "ready", "{ready}");
    assert_eq!(ready["session_id"], id.as_str());
    assert_eq!(ready["transport"], "json");
    assert_eq!(ready["backend"], "native");
    assert_eq!(ready["resumed"], false);
    assert_eq!(ready["mode"], "relay");
    assert!(ready["seq"].is_u64(), "{ready}");

    send_json(&mut socket, json!({"type": "ping", "timestamp": 1234.5})).await;
    let mut seen = Seen::default();
    read_until(&mut socket, &mut seen, |s| s.has("pong")).await;
    let pong = seen.frames.iter().find(|f| f["type"] == "pong");
    assert_eq!(pong.map(|p| p["timestamp"].clone()), Some(json!(1234.5)));

    send_json(
        &mut socket,
        json!({"type": "input", "data": "echo ws-$((6 * 7))\n"}),
    )
    .await;
    read_until(&mut socket, &mut seen, |s| s.text.contains("ws-42")).await;
    assert!(seen.text.contains("ws-42"), "{}", seen.text);
    // Its output can come before its end: an exec meanwhile would be BUSY.
    wait_until("the typed command ended", || async {
        let info = get(&client, &format!("/v2/pty/sessions/{id}")).await;
        data(&info)["running_command"].is_null().then_some(())
    })
    .await;

    // Resize at the top level and under data; every attachment is told.
    send_json(
        &mut socket,
        json!({"type": "resize", "data": {"cols": 101, "rows": 31}}),
    )
    .await;
    read_until(&mut socket, &mut seen, |s| {
        s.frames
            .iter()
            .any(|f| f["type"] == "resize" && f["cols"] == 101)
    })
    .await;
    let screen = get(&client, &format!("/v2/pty/sessions/{id}/screen")).await;
    assert_eq!(data(&screen)["cols"], 101, "{}", screen.body);
    assert_eq!(data(&screen)["rows"], 31);

    // Unknown frames are refused and never reach the shell.
    for bad in [
        json!({"type": "bogus", "data": "echo leaked-1\n"}).to_string(),
        json!({"type": "input", "data": "echo leaked-2\n", "extra": 1}).to_string(),
        "echo leaked-3".to_owned(),
        json!({"type": "resize", "cols": 0, "rows": 10}).to_string(),
    ] {
        socket
            .send(LiveMessage::Text(bad.clone().into()))
            .await
            .unwrap_or_else(|e| panic!("send: {e}"));
        let mut errors = Seen::default();
        read_until(&mut socket, &mut errors, |s| s.has("error")).await;
        let error = errors.frames.iter().find(|f| f["type"] == "error");
        assert_eq!(
            error.map(|e| e["code"].clone()),
            Some(json!("INVALID_INPUT")),
            "{bad}: {:?}",
            errors.frames
        );
    }
    socket
        .send(LiveMessage::Binary(b"echo leaked-4\n".to_vec().into()))
        .await
        .unwrap_or_else(|e| panic!("send: {e}"));
    let mut errors = Seen::default();
    read_until(&mut socket, &mut errors, |s| s.has("error")).await;
    let done = exec(&client, &id, "echo marker-done").await;
    assert_eq!(done["exit_code"], 0);
    let events = get(
        &client,
        &format!("/v2/pty/sessions/{id}/events?limit=10000"),
    )
    .await;
    assert!(
        !events.body.to_string().contains("leaked"),
        "a refused frame reached the shell"
    );

    // Exit: the program ends, the connection is told and closed.
    send_json(&mut socket, json!({"type": "input", "data": "exit 3\n"})).await;
    let mut rest = Seen::default();
    read_until(&mut socket, &mut rest, |s| s.has("exit")).await;
    let exit = rest.frames.iter().find(|f| f["type"] == "exit");
    assert_eq!(
        exit.map(|e| e["exit_code"].clone()),
        Some(json!(3)),
        "{:?}",
        rest.frames
    );
    assert!(
        next_json(&mut socket).await.is_null(),
        "the connection closes after exit"
    );

    // A watcher of the ended terminal gets its history, then how it ended, then a close.
    let mut late = connect(&client, &ws_path(&id, "mode=watch&restore=true")).await;
    let mut history = Seen::default();
    read_until(&mut late, &mut history, |s| s.has("exit")).await;
    let kinds: Vec<&str> = history
        .frames
        .iter()
        .filter_map(|f| f["type"].as_str())
        .collect();
    assert_eq!(kinds.first(), Some(&"ready"), "{kinds:?}");
    assert!(history.restored.contains("ws-42"), "{}", history.restored);
    assert_eq!(
        &kinds[kinds.len() - 2..],
        ["terminal_restored", "exit"],
        "{kinds:?}"
    );
    assert!(next_json(&mut late).await.is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_relay_at_a_time_durable_takes_over_and_peers_are_never_refused() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    let mut first = connect(&client, &ws_path(&id, "")).await;
    assert_eq!(next_json(&mut first).await["type"], "ready");

    let mut second = connect(&client, &ws_path(&id, "")).await;
    let refused = next_json(&mut second).await;
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(
        refused["data"],
        "Session already has an active WebSocket connection"
    );
    assert!(
        next_json(&mut second).await.is_null(),
        "the refused one is closed"
    );

    // Peers join beside the relay.
    let mut watcher = connect(&client, &ws_path(&id, "mode=watch")).await;
    let ready = next_json(&mut watcher).await;
    assert_eq!(ready["mode"], "watch", "{ready}");
    let mut attached = connect(&client, &ws_path(&id, "mode=attach")).await;
    assert_eq!(next_json(&mut attached).await["mode"], "attach");

    // A watcher cannot write or resize.
    send_json(
        &mut watcher,
        json!({"type": "input", "data": "echo nope\n"}),
    )
    .await;
    send_json(
        &mut watcher,
        json!({"type": "resize", "cols": 90, "rows": 20}),
    )
    .await;
    let mut watched = Seen::default();
    read_until(&mut watcher, &mut watched, |s| {
        s.frames.iter().filter(|f| f["type"] == "error").count() >= 2
    })
    .await;
    for error in watched.frames.iter().filter(|f| f["type"] == "error") {
        assert_eq!(error["code"], "PERMISSION_DENIED", "{error}");
    }

    // The attached peer writes; the relay and the watcher see it.
    send_json(
        &mut attached,
        json!({"type": "input", "data": "echo peer-$((20 + 1))\n"}),
    )
    .await;
    let mut relay_seen = Seen::default();
    read_until(&mut first, &mut relay_seen, |s| s.text.contains("peer-21")).await;
    read_until(&mut watcher, &mut watched, |s| s.text.contains("peer-21")).await;
    assert!(relay_seen.text.contains("peer-21") && watched.text.contains("peer-21"));

    // A durable relay takes over; the old one is told and closed.
    let mut third = connect(&client, &ws_path(&id, "durable=true")).await;
    let ready = next_json(&mut third).await;
    assert_eq!(ready["type"], "ready", "{ready}");
    assert_eq!(ready["resumed"], false, "no durable relay was here before");
    let mut old = Seen::default();
    read_until(&mut first, &mut old, |s| s.has("relay_replaced")).await;
    assert!(old.has("relay_replaced"));
    assert!(next_json(&mut first).await.is_null());

    let mut fourth = connect(&client, &ws_path(&id, "durable=true")).await;
    assert_eq!(next_json(&mut fourth).await["resumed"], true);
    let mut replaced = Seen::default();
    read_until(&mut third, &mut replaced, |s| s.has("relay_replaced")).await;
    assert!(
        replaced
            .frames
            .iter()
            .any(|f| f["type"] == "relay_replaced")
    );

    // A malformed request is answered before the upgrade.
    for query in [
        "mode=spy",
        "protocol=xml",
        "replay_bytes=10",
        "durable=true&mode=watch",
        "nonsense=1",
    ] {
        let refused = client.websocket(&ws_path(&id, query)).await;
        assert!(
            matches!(&refused, Err(ClientError::Api(e)) if e.code == ErrorCode::InvalidInput),
            "{query}: {:?}",
            refused.err()
        );
    }
    // What the terminal refuses arrives as an error frame a browser can read.
    assert_eq!(
        refusal(&client, &ws_path(&id, "since_seq=999999999")).await,
        "INVALID_CURSOR"
    );
    assert_eq!(
        refusal(&client, "/v2/pty/sessions/t-nope/ws").await,
        "SESSION_NOT_FOUND"
    );
    // Another site's page cannot open a connection, whatever the credential.
    let foreign = client
        .websocket_with(
            &ws_path(&id, "mode=watch"),
            &[("origin", "http://evil.example")],
        )
        .await;
    assert!(
        matches!(&foreign, Err(ClientError::Api(e)) if e.code == ErrorCode::PermissionDenied),
        "{:?}",
        foreign.err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_reconnect_gets_what_it_missed_exactly_once() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    let query = "durable=true&restore=true";

    let mut first = connect(&client, &ws_path(&id, query)).await;
    let ready = next_json(&mut first).await;
    assert_eq!(ready["resumed"], false);
    // Nothing to restore on the first connection, but `terminal_restored` still comes first.
    let restored = next_json(&mut first).await;
    assert_eq!(restored["type"], "terminal_restored", "{restored}");
    send_json(
        &mut first,
        json!({"type": "input", "data": "for i in $(seq 1 40); do echo step-$i.; sleep 0.05; done; echo loop-end\n"}),
    )
    .await;
    let mut a = Seen::default();
    read_until(&mut first, &mut a, |s| s.text.contains("step-5.")).await;
    drop(first);
    // The command keeps running while nobody is connected.
    tokio::time::sleep(Duration::from_millis(600)).await;

    let mut second = connect(&client, &ws_path(&id, query)).await;
    let ready = next_json(&mut second).await;
    assert_eq!(ready["resumed"], true, "{ready}");
    let mut b = Seen::default();
    read_until(&mut second, &mut b, |s| s.has("terminal_restored")).await;
    assert_eq!(
        b.frames.first().map(|f| f["type"].clone()),
        Some(json!("restore_output")),
        "{:?}",
        b.frames
    );
    // The first reconnect repaints: everything retained, the command line included.
    assert!(b.restored.contains("seq 1 40"), "{}", b.restored);
    read_until(&mut second, &mut b, |s| s.text.contains("loop-end\r\n")).await;
    let all = format!("{}{}", b.restored, b.text);
    for i in 1..=40 {
        assert_eq!(count(&all, &format!("step-{i}.")), 1, "step-{i}: {all}");
    }
    drop(second);

    // A later reconnect gets only what is new since the previous connection.
    wait_until("the typed loop's prompt is back", || async {
        let answer = super::exec_raw(
            &client,
            &id,
            json!({"command": "for i in 1 2 3; do echo again-$i; done", "timeout": 60}),
        )
        .await;
        (answer.status == 200).then_some(())
    })
    .await;
    let mut third = connect(&client, &ws_path(&id, query)).await;
    let mut c = Seen::default();
    read_until(&mut third, &mut c, |s| s.has("terminal_restored")).await;
    assert!(c.restored.contains("again-3"), "{}", c.restored);
    assert!(!c.restored.contains("step-"), "{}", c.restored);

    // since_seq: exactly the bytes after the last frame a client rendered, once.
    let mut watcher = connect(&client, &ws_path(&id, "mode=watch")).await;
    next_json(&mut watcher).await;
    send_json(
        &mut third,
        json!({"type": "input", "data": "for i in $(seq 1 30); do echo tick-$i.; sleep 0.03; done; echo ticks-end\n"}),
    )
    .await;
    let mut w = Seen::default();
    read_until(&mut watcher, &mut w, |s| s.text.contains("tick-7.")).await;
    let resume_at = w.last_seq;
    let rendered = w.text.clone();
    drop(watcher);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut again = connect(
        &client,
        &ws_path(&id, &format!("mode=watch&since_seq={resume_at}")),
    )
    .await;
    let mut d = Seen::default();
    read_until(&mut again, &mut d, |s| s.text.contains("ticks-end\r\n")).await;
    let all = format!("{rendered}{}{}", d.restored, d.text);
    for i in 1..=30 {
        assert_eq!(count(&all, &format!("tick-{i}.")), 1, "tick-{i}: {all}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn since_seq_works_across_a_server_restart() {
    let mut hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    exec(&client, &id, "echo before-restart").await;
    let mut watcher = connect(&client, &ws_path(&id, "mode=watch")).await;
    let ready = next_json(&mut watcher).await;
    let at = ready["seq"].as_u64().unwrap_or_default();
    drop(watcher);
    exec(&client, &id, "echo while-away-1; echo while-away-2").await;
    hub.kill_server();
    hub.restart();
    let client = hub.http();
    let mut back = connect(
        &client,
        &ws_path(&id, &format!("mode=watch&since_seq={at}")),
    )
    .await;
    next_json(&mut back).await;
    let mut seen = Seen::default();
    read_until(&mut back, &mut seen, |s| s.has("terminal_restored")).await;
    assert_eq!(
        count(&seen.restored, "while-away-1\r\nwhile-away-2\r\n"),
        1,
        "{}",
        seen.restored
    );
    assert!(
        !seen.restored.contains("before-restart\r\n"),
        "{}",
        seen.restored
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_transport_anonymous_and_v1_routes() {
    let hub = start();
    let client = hub.http();

    // Binary: raw PTY bytes in binary frames, input in binary frames; ready stays JSON.
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    let mut binary = connect(&client, &ws_path(&id, "protocol=binary")).await;
    let ready = next_json(&mut binary).await;
    assert_eq!(ready["transport"], "binary", "{ready}");
    binary
        .send(LiveMessage::Binary(
            b"echo bin-$((3 * 3))\n".to_vec().into(),
        ))
        .await
        .unwrap_or_else(|e| panic!("send: {e}"));
    let mut bytes = Vec::new();
    while !String::from_utf8_lossy(&bytes).contains("bin-9") {
        match next_message(&mut binary).await {
            Some(LiveMessage::Binary(chunk)) => bytes.extend_from_slice(&chunk),
            // Presence stays JSON, as every frame but output does.
            Some(LiveMessage::Text(text)) if text.as_str().starts_with(r#"{"type":"presence""#) => {
            }
            Some(LiveMessage::Text(text)) => panic!("no JSON output in binary mode: {text}"),
            Some(_) => {}
            None => panic!("closed"),
        }
    }
    drop(binary);

    // /v2/pty/ws: a terminal that lives and dies with its connection.
    let before = super::live_ids(&client).await;
    let mut anonymous_socket = connect(&client, "/v2/pty/ws").await;
    let ready = next_json(&mut anonymous_socket).await;
    assert_eq!(ready["type"], "ready");
    assert!(ready["session_id"].is_null(), "never announced: {ready}");
    send_json(
        &mut anonymous_socket,
        json!({"type": "input", "data": "echo anon-$((1 + 1))\n"}),
    )
    .await;
    let mut seen = Seen::default();
    read_until(&mut anonymous_socket, &mut seen, |s| {
        s.text.contains("anon-2")
    })
    .await;
    assert_eq!(
        super::live_ids(&client).await,
        before,
        "an anonymous terminal is never listed"
    );
    let anonymous = |hub: &Ptyhub| -> Vec<Value> {
        hub.metas()
            .into_iter()
            .filter(|m| m["anonymous"] == true)
            .collect()
    };
    assert_eq!(anonymous(&hub).len(), 1);
    assert_eq!(anonymous(&hub)[0]["closed"], false);
    drop(anonymous_socket);
    wait_until(
        "the anonymous terminal is closed with its connection",
        || async { (anonymous(&hub)[0]["closed"] == true).then_some(()) },
    )
    .await;
    for query in ["durable=true", "restore=true"] {
        let refused = client.websocket(&format!("/v2/pty/ws?{query}")).await;
        assert!(
            matches!(&refused, Err(ClientError::Api(e)) if e.code == ErrorCode::InvalidInput),
            "{query}: {:?}",
            refused.err()
        );
    }

    // /v1/shell/ws: an existing id, or a new terminal announced before ready.
    let mut v1 = connect(&client, "/v1/shell/ws").await;
    let announced = next_json(&mut v1).await;
    assert_eq!(announced["type"], "session_id", "{announced}");
    let new_id = announced["session_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let ready = next_json(&mut v1).await;
    assert_eq!(ready["session_id"], new_id.as_str());
    assert!(super::live_ids(&client).await.contains(&new_id));
    drop(v1);
    let mut existing = connect(&client, &format!("/v1/shell/ws?session_id={id}&mode=watch")).await;
    assert_eq!(next_json(&mut existing).await["session_id"], id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_watcher_lags_and_catches_up_without_losing_a_byte() {
    let hub = start();
    let client = hub.local();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    let mut slow = connect(&client, &ws_path(&id, "mode=watch&protocol=binary")).await;
    next_json(&mut slow).await;
    // Once the watcher has had some output and asks for more, it follows the live stream
    // (before that it may still be reading the log, which a flood would keep it doing).
    exec(&client, &id, "echo warm-$((1 + 1))").await;
    let mut warm = Vec::new();
    while !contains(&warm, b"warm-2\r\n") {
        if let Some(LiveMessage::Binary(chunk)) = next_message(&mut slow).await {
            warm.extend_from_slice(&chunk);
        }
    }
    // The watcher reads nothing while a flood goes by (26 MB: more than the 16 MiB buffered
    // for live connections); the program is not held up.
    let flood = exec(&client, &id, "seq 1 3000000; echo flood-$((1 + 1))").await;
    assert_eq!(flood["exit_code"], 0);
    let mut bytes = Vec::new();
    let mut lagged = Vec::new();
    let mut checked = 0;
    while !contains(&bytes[checked..], b"flood-2\r\n") {
        checked = bytes.len().saturating_sub(16);
        match next_message(&mut slow).await {
            Some(LiveMessage::Binary(chunk)) => bytes.extend_from_slice(&chunk),
            Some(LiveMessage::Text(text)) => lagged.push(text.as_str().to_owned()),
            Some(_) => {}
            None => panic!("closed"),
        }
    }
    assert!(
        lagged.iter().any(|f| f.contains(r#""type":"lagged""#)),
        "the watcher was told it lagged: {lagged:?}"
    );
    let text = String::from_utf8_lossy(&bytes);
    let start = text.find("1\r\n2\r\n3\r\n").unwrap_or_default();
    let mut expected = 1u64;
    for line in text[start..].split("\r\n") {
        if line.is_empty() || !line.bytes().all(|b| b.is_ascii_digit()) {
            break;
        }
        assert_eq!(line, expected.to_string(), "every line once, in order");
        expected += 1;
    }
    assert_eq!(expected, 3_000_001, "every line arrived");
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connected_terminal_is_never_idle() {
    let hub = Ptyhub::start_with(env!("CARGO_BIN_EXE_ptyhub"), &["--idle-close-secs", "1"]);
    let client = hub.http();
    let watched = create(&client, json!({ "cwd": "/tmp" })).await;
    let lonely = create(&client, json!({ "cwd": "/tmp" })).await;
    let mut watcher = connect(&client, &ws_path(&watched, "mode=watch")).await;
    next_json(&mut watcher).await;
    wait_until("the unwatched terminal is closed as idle", || async {
        (!super::live_ids(&client).await.contains(&lonely)).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(super::live_ids(&client).await.contains(&watched));
    drop(watcher);
    wait_until("the terminal is idle once nobody watches", || async {
        (!super::live_ids(&client).await.contains(&watched)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_query_gets_exactly_one_answer() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    // Echo goes off before the query, as a program that asks does: `read -s` turns it off
    // only once it runs, and an answer that comes before (ptyhub answers from its screen at
    // once) would be echoed.
    let ask = "stty -echo; printf '\\033[6n'; IFS= read -r -d R answer; stty echo; \
               echo \"got:${answer#*[}.\"";

    // No writer connected: ptyhub answers from its screen.
    let answered = exec(&client, &id, ask).await;
    let output = answered["output"].as_str().unwrap_or_default();
    assert!(
        output.starts_with("got:") && output.contains(';'),
        "{answered}"
    );

    // With writers connected, only the relay's answer reaches the program.
    let mut relay = connect(&client, &ws_path(&id, "")).await;
    next_json(&mut relay).await;
    let mut peer = connect(&client, &ws_path(&id, "mode=attach")).await;
    next_json(&mut peer).await;
    let mut watcher = connect(&client, &ws_path(&id, "mode=watch")).await;
    next_json(&mut watcher).await;
    send_json(
        &mut relay,
        json!({"type": "input", "data": format!("{ask}; echo after-$((2 + 3))\n")}),
    )
    .await;
    let mut peer_seen = Seen::default();
    read_until(&mut peer, &mut peer_seen, |s| s.text.contains("\x1b[6n")).await;
    // The peer answers first (it must be dropped), then the relay.
    send_json(&mut peer, json!({"type": "input", "data": "\u{1b}[9;9R"})).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    send_json(&mut relay, json!({"type": "input", "data": "\u{1b}[5;7R"})).await;
    let mut relay_seen = Seen::default();
    read_until(&mut relay, &mut relay_seen, |s| s.text.contains("after-5")).await;
    assert!(relay_seen.text.contains("got:5;7."), "{}", relay_seen.text);
    assert!(!relay_seen.text.contains("9;9"), "{}", relay_seen.text);
}

/// A query right after a flood, with no writer connected: the screen is then behind (it may be
/// far behind, and is caught up off the server's runtime thread), and the answer is still the
/// cursor where the program left it, the bottom row's first column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_right_after_a_flood_is_answered_from_the_screen_caught_up() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp", "cols": 80, "rows": 24 })).await;
    let ask = "stty -echo; seq 1 3000000; printf '\\033[6n'; IFS= read -r -d R answer; \
               stty echo; echo \"got:${answer#*[}.\"";
    let answered = super::exec_raw(
        &client,
        &id,
        json!({ "command": ask, "timeout": 120, "tail": 1 }),
    )
    .await;
    assert_eq!(answered.status, 200, "{}", answered.body);
    assert_eq!(data(&answered)["output"], "got:24;1.", "{}", answered.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_replays_the_newest_output_within_replay_bytes_from_a_line_start() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    exec(&client, &id, "seq 1 200000").await;
    let mut watcher = connect(
        &client,
        &ws_path(&id, "mode=watch&restore=true&replay_bytes=262144"),
    )
    .await;
    next_json(&mut watcher).await;
    let mut seen = Seen::default();
    read_until(&mut watcher, &mut seen, |s| s.has("terminal_restored")).await;
    let replayed = seen.restored.len();
    assert!(
        (100_000..=262_144).contains(&replayed),
        "replayed {replayed} bytes"
    );
    let first = seen.restored.split("\r\n").next().unwrap_or_default();
    assert!(
        first.parse::<u64>().is_ok(),
        "the replay starts at a line: {first:?}"
    );
    assert!(
        seen.restored.contains("\r\n200000\r\n"),
        "the newest output is there"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_terminal_ends_with_the_server_that_held_its_connection() {
    let mut hub = start();
    let client = hub.http();
    let mut socket = connect(&client, "/v2/pty/ws").await;
    next_json(&mut socket).await;
    let is_open = |hub: &Ptyhub| {
        hub.metas()
            .iter()
            .any(|m| m["anonymous"] == true && m["closed"] == false)
    };
    assert!(is_open(&hub));
    hub.kill_server();
    drop(socket);
    hub.restart();
    wait_until("the orphaned anonymous terminal is closed", || async {
        (!is_open(&hub)).then_some(())
    })
    .await;
    let pids = hub.holder_pids();
    wait_until("its holder is gone", || async {
        (!pids.iter().any(|&p| ptyhub_test_support::is_alive(p))).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_connections_older_than_the_kept_log_are_told_so() {
    let hub = Ptyhub::start_with(
        env!("CARGO_BIN_EXE_ptyhub"),
        &["--event-log-keep", "262144"],
    );
    let client = hub.local();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    exec(&client, &id, "echo early").await;
    // A stalled watcher that will fall behind what the log keeps.
    let mut stalled = connect(&client, &ws_path(&id, "mode=watch&protocol=binary")).await;
    let ready = next_json(&mut stalled).await;
    let early = ready["seq"].as_u64().unwrap_or_default();
    // More events than are buffered for live connections, whatever their size.
    exec(&client, &id, "seq 1 3000000 > /dev/tty; echo rotated").await;

    // Resuming from a seq the log no longer keeps is refused with the reason.
    assert_eq!(
        refusal(
            &client,
            &ws_path(&id, &format!("mode=watch&since_seq={early}"))
        )
        .await,
        "CURSOR_EXPIRED"
    );

    // The stalled watcher is closed with the reason instead of skipping output.
    let mut frames = Vec::new();
    loop {
        match next_message(&mut stalled).await {
            Some(LiveMessage::Text(text)) => frames.push(text.as_str().to_owned()),
            Some(LiveMessage::Binary(_)) => {}
            Some(_) => {}
            None => break,
        }
    }
    assert!(
        frames.iter().any(|f| f.contains("CURSOR_EXPIRED")),
        "{frames:?}"
    );
}

/// A WebSocket spoken by hand, to send what a well-behaved client library never would.
struct RawSocket {
    stream: tokio::net::TcpStream,
    buffered: Vec<u8>,
}

/// One frame from the server: its opcode and payload.
struct RawFrame {
    opcode: u8,
    payload: Vec<u8>,
}

impl RawSocket {
    async fn connect(hub: &Ptyhub, path: &str) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(&hub.addr)
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nConnection: Upgrade\r\n\
             Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
            hub.addr, hub.token
        );
        stream
            .write_all(request.as_bytes())
            .await
            .unwrap_or_else(|e| panic!("write: {e}"));
        let mut head = Vec::new();
        let mut chunk = [0u8; 4096];
        let end = loop {
            if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            let read = tokio::time::timeout(default_timeout(), stream.read(&mut chunk))
                .await
                .unwrap_or_else(|_| panic!("no upgrade answer"))
                .unwrap_or_else(|e| panic!("read: {e}"));
            assert!(read > 0, "closed before the upgrade");
            head.extend_from_slice(&chunk[..read]);
        };
        assert!(
            head.starts_with(b"HTTP/1.1 101"),
            "{}",
            String::from_utf8_lossy(&head)
        );
        Self {
            stream,
            buffered: head.split_off(end),
        }
    }

    /// Sends one frame: `first` is the first header byte (FIN, RSV bits and opcode); the
    /// payload is masked (with a zero key) as a client's must be.
    async fn send(&mut self, first: u8, payload: &[u8]) {
        use tokio::io::AsyncWriteExt;
        let mut frame = vec![first];
        match payload.len() {
            len @ 0..=125 => frame.push(0x80 | u8::try_from(len).unwrap_or(0)),
            len => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        frame.extend_from_slice(&[0, 0, 0, 0]);
        frame.extend_from_slice(payload);
        self.stream
            .write_all(&frame)
            .await
            .unwrap_or_else(|e| panic!("write: {e}"));
    }

    /// Sends only the header of a text frame that claims `len` bytes.
    async fn send_header_claiming(&mut self, len: u64) {
        use tokio::io::AsyncWriteExt;
        let mut frame = vec![0x81, 0x80 | 127];
        frame.extend_from_slice(&len.to_be_bytes());
        frame.extend_from_slice(&[0, 0, 0, 0]);
        self.stream
            .write_all(&frame)
            .await
            .unwrap_or_else(|e| panic!("write: {e}"));
    }

    async fn fill(&mut self, wanted: usize) -> bool {
        use tokio::io::AsyncReadExt;
        let mut chunk = [0u8; 16 * 1024];
        while self.buffered.len() < wanted {
            let read = tokio::time::timeout(default_timeout(), self.stream.read(&mut chunk))
                .await
                .unwrap_or_else(|_| panic!("no frame from the server"));
            match read {
                Ok(0) | Err(_) => return false,
                Ok(read) => self.buffered.extend_from_slice(&chunk[..read]),
            }
        }
        true
    }

    /// The next frame, or `None` when the server closed the connection without one.
    async fn next(&mut self) -> Option<RawFrame> {
        if !self.fill(2).await {
            return None;
        }
        let opcode = self.buffered[0] & 0x0f;
        let (len, header) = match self.buffered[1] & 0x7f {
            126 => {
                if !self.fill(4).await {
                    return None;
                }
                (
                    usize::from(u16::from_be_bytes([self.buffered[2], self.buffered[3]])),
                    4,
                )
            }
            127 => {
                if !self.fill(10).await {
                    return None;
                }
                let mut len = [0u8; 8];
                len.copy_from_slice(&self.buffered[2..10]);
                (
                    usize::try_from(u64::from_be_bytes(len)).unwrap_or(usize::MAX),
                    10,
                )
            }
            len => (usize::from(len), 2),
        };
        if !self.fill(header + len).await {
            return None;
        }
        let frame: Vec<u8> = self.buffered.drain(..header + len).collect();
        Some(RawFrame {
            opcode,
            payload: frame[header..].to_vec(),
        })
    }

    /// Reads until the server's close frame: its code, and the text frames before it.
    async fn close_code(&mut self) -> (Option<u16>, Vec<String>) {
        let mut texts = Vec::new();
        while let Some(frame) = self.next().await {
            match frame.opcode {
                0x8 => {
                    let code = (frame.payload.len() >= 2)
                        .then(|| u16::from_be_bytes([frame.payload[0], frame.payload[1]]));
                    return (code, texts);
                }
                0x1 => texts.push(String::from_utf8_lossy(&frame.payload).into_owned()),
                _ => {}
            }
        }
        (None, texts)
    }

    /// Reads text frames until one contains `needle`; every text frame read.
    async fn texts_until(&mut self, needle: &str) -> Vec<String> {
        let mut texts = Vec::new();
        loop {
            let frame = self
                .next()
                .await
                .unwrap_or_else(|| panic!("closed before {needle:?}: {texts:?}"));
            if frame.opcode == 0x1 {
                let text = String::from_utf8_lossy(&frame.payload).into_owned();
                let found = text.contains(needle);
                texts.push(text);
                if found {
                    return texts;
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_errors_close_with_their_codes_and_only_objects_are_frames() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "id": "raw" })).await;
    let path = ws_path(&id, "mode=attach");

    // Invalid UTF-8 in a text frame: 1007.
    let mut socket = RawSocket::connect(&hub, &path).await;
    socket.texts_until("\"ready\"").await;
    socket.send(0x81, &[b'{', 0xff, 0xfe, b'}']).await;
    assert_eq!(socket.close_code().await.0, Some(1007));

    // A reserved bit no extension gave a meaning: a protocol error, 1002.
    let mut socket = RawSocket::connect(&hub, &path).await;
    socket.texts_until("\"ready\"").await;
    socket.send(0xc1, br#"{"type":"ping"}"#).await;
    assert_eq!(socket.close_code().await.0, Some(1002));

    // A frame over the 1 MiB bound: 1009.
    let mut socket = RawSocket::connect(&hub, &path).await;
    socket.texts_until("\"ready\"").await;
    socket.send_header_claiming(2 * 1024 * 1024).await;
    assert_eq!(socket.close_code().await.0, Some(1009));

    // A frame just within the bound arrives whole, in many reads: a ping padded to 1,000,000
    // bytes is answered.
    let mut socket = RawSocket::connect(&hub, &path).await;
    socket.texts_until("\"ready\"").await;
    let mut padded = br#"{"type":"ping","timestamp":"whole-frame""#.to_vec();
    padded.resize(1_000_000 - 1, b' ');
    padded.push(b'}');
    socket.send(0x81, &padded).await;
    let texts = socket.texts_until("\"pong\"").await;
    assert!(
        texts.last().is_some_and(|t| t.contains("whole-frame")),
        "{texts:?}"
    );

    // A JSON array (or any value but an object) is refused with an error frame and typed
    // nowhere; the connection goes on.
    let mut socket = RawSocket::connect(&hub, &path).await;
    socket.texts_until("\"ready\"").await;
    for frame in [
        r#"["input","echo array-typed-$((6*7))\r"]"#,
        r#""echo string-typed""#,
        "42",
    ] {
        socket.send(0x81, frame.as_bytes()).await;
        let texts = socket.texts_until("\"error\"").await;
        let error: Value = serde_json::from_str(texts.last().map_or("", String::as_str))
            .unwrap_or_else(|e| panic!("{e}: {texts:?}"));
        assert_eq!(error["code"], "INVALID_INPUT", "{frame}: {error}");
    }
    socket
        .send(
            0x81,
            br#"{"type":"input","data":"echo object-typed-$((6*7))\r"}"#,
        )
        .await;
    let texts = socket.texts_until("object-typed-42").await;
    let log = get(&client, &format!("/v2/pty/sessions/{id}/screen")).await;
    for seen in texts
        .iter()
        .map(String::as_str)
        .chain([log.body.to_string().as_str()])
    {
        assert!(
            !seen.contains("array-typed") && !seen.contains("string-typed"),
            "a non-object frame was typed: {seen}"
        );
    }
}
