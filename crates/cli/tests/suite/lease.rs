//! The input lease, presence and attributed input (docs/rest-v2.md#the-input-lease,
//! docs/websocket.md#presence, docs/storage.md "pty.input") over real WebSocket connections
//! and REST calls, against real shells.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use ptyhub_client::{Client, LiveMessage, LiveSocket, Method};
use ptyhub_protocol::event::decode_b64;
use serde_json::{Value, json};

use super::{create, exec, get, post, start};
use ptyhub_test_support::{Ptyhub, data, default_timeout, wait_until};

pub(super) async fn connect(client: &Client, id: &str, mode: &str) -> LiveSocket {
    let path = format!("/v2/pty/sessions/{id}/ws?mode={mode}");
    client
        .websocket(&path)
        .await
        .unwrap_or_else(|e| panic!("websocket {path}: {e}"))
}

/// The next JSON frame; `Null` once the connection ended.
pub(super) async fn next_json(socket: &mut LiveSocket) -> Value {
    loop {
        match tokio::time::timeout(default_timeout(), socket.next()).await {
            Ok(Some(Ok(LiveMessage::Text(text)))) => {
                return serde_json::from_str(text.as_str())
                    .unwrap_or_else(|e| panic!("frame is not JSON ({e}): {text}"));
            }
            Ok(Some(Ok(LiveMessage::Close(_))) | Some(Err(_)) | None) => return Value::Null,
            Ok(Some(Ok(_))) => {}
            Err(_) => panic!("no frame within the timeout"),
        }
    }
}

/// Reads frames until one satisfies `wanted`; returns it.
pub(super) async fn frame_where(
    socket: &mut LiveSocket,
    what: &str,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    loop {
        let frame = next_json(socket).await;
        assert!(!frame.is_null(), "the connection ended before {what}");
        if wanted(&frame) {
            return frame;
        }
    }
}

async fn presence_where(
    socket: &mut LiveSocket,
    what: &str,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    frame_where(socket, what, |f| f["type"] == "presence" && wanted(f)).await
}

pub(super) async fn send_json(socket: &mut LiveSocket, frame: Value) {
    socket
        .send(LiveMessage::Text(frame.to_string().into()))
        .await
        .unwrap_or_else(|e| panic!("send: {e}"));
}

/// The terminal's `pty.input` events, from its `events.jsonl`.
pub(super) fn input_events(hub: &Ptyhub, id: &str) -> Vec<Value> {
    let dir = hub
        .terminal_dir(id)
        .unwrap_or_else(|| panic!("no directory for {id}"));
    std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["type"] == "pty.input")
        .collect()
}

fn typed_text(event: &Value) -> String {
    let bytes = decode_b64(event["data_b64"].as_str().unwrap_or_default()).unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The caller's name over TCP with the server's own token.
fn server_name() -> String {
    format!("{}/server", rustix::process::getuid().as_raw())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_takes_the_keyboard_rest_input_is_refused_or_waits_for_it() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    exec(&client, &id, "true").await;
    let mut page = connect(&client, &id, "attach").await;
    let first = presence_where(&mut page, "the first presence", |_| true).await;
    let you = first["you"].clone();
    assert_eq!(first["lease"], Value::Null, "{first}");
    assert_eq!(first["connections"][0]["mode"], "attach", "{first}");
    assert_eq!(first["connections"][0]["by"], server_name().as_str());

    send_json(&mut page, json!({"type": "lease_take"})).await;
    let held = presence_where(&mut page, "the lease", |f| !f["lease"].is_null()).await;
    assert_eq!(held["lease"]["connection"], you, "{held}");
    assert_eq!(held["lease"]["via"], "ws");
    assert_eq!(held["lease"]["by"], server_name().as_str());
    let info = get(&client, &format!("/v2/pty/sessions/{id}")).await;
    assert_eq!(data(&info)["lease"]["via"], "ws", "{}", info.body);
    let lease = get(&client, &format!("/v2/pty/sessions/{id}/lease")).await;
    assert_eq!(data(&lease)["lease"]["connection"], you, "{}", lease.body);

    // Every other writer is refused, and nothing is typed.
    let refused = post(
        &client,
        &format!("/v2/pty/sessions/{id}/send"),
        json!({"text": "echo refused-1", "submit": true}),
    )
    .await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], "INPUT_LEASED");
    assert_eq!(refused.body["error"]["retryable"], true);
    let message = refused.body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&server_name()),
        "names the holder: {message}"
    );
    for (route, body) in [
        (
            "input",
            json!({"input": "echo refused-2", "press_enter": true}),
        ),
        ("exec", json!({"command": "echo refused-3", "timeout": 5})),
    ] {
        let answer = post(&client, &format!("/v2/pty/sessions/{id}/{route}"), body).await;
        assert_eq!(answer.status, 409, "{route}: {}", answer.body);
        assert_eq!(answer.body["error"]["code"], "INPUT_LEASED", "{route}");
    }
    let v1 = client
        .send(
            Method::POST,
            "/v1/shell/write",
            Some(&json!({"id": id, "input": "echo refused-4", "press_enter": true})),
        )
        .await
        .unwrap_or_else(|e| panic!("v1 write: {e}"));
    assert_ne!(v1.status, 200, "v1 write is refused too: {}", v1.body);
    // The holder itself types.
    send_json(
        &mut page,
        json!({"type": "input", "data": "echo held-$((6*7))\r"}),
    )
    .await;
    frame_where(&mut page, "the holder's output", |f| {
        f["type"] == "output" && f["data"].as_str().is_some_and(|d| d.contains("held-42"))
    })
    .await;

    // A send that waits for the keyboard types once it is handed back.
    let waiting = {
        let client = client.clone();
        let id = id.clone();
        tokio::spawn(async move {
            post(
                &client,
                &format!("/v2/pty/sessions/{id}/send"),
                json!({"text": "echo queued-$((2*21))", "submit": true, "on_lease": "wait", "deadline": 30}),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "the send waits while the lease is held"
    );
    send_json(&mut page, json!({"type": "lease_release"})).await;
    let answer = tokio::time::timeout(default_timeout(), waiting)
        .await
        .unwrap_or_else(|_| panic!("the queued send never answered"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        data(&answer)["output"]
            .as_str()
            .is_some_and(|o| o.contains("queued-42")),
        "{}",
        answer.body
    );
    let lease = get(&client, &format!("/v2/pty/sessions/{id}/lease")).await;
    assert_eq!(data(&lease)["lease"], Value::Null, "{}", lease.body);
    let events = get(
        &client,
        &format!("/v2/pty/sessions/{id}/events?limit=10000"),
    )
    .await;
    let typed: Vec<String> = input_events(&hub, &id).iter().map(typed_text).collect();
    assert!(
        !typed.iter().any(|t| t.contains("refused-")),
        "refused input was typed: {typed:?}"
    );
    assert!(!events.body.to_string().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_is_taken_over_with_force_and_ends_with_its_connection() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    exec(&client, &id, "true").await;
    let mut first = connect(&client, &id, "attach").await;
    let first_id = presence_where(&mut first, "presence", |_| true).await["you"].clone();
    send_json(&mut first, json!({"type": "lease_take"})).await;
    presence_where(&mut first, "the lease", |f| {
        f["lease"]["connection"] == first_id
    })
    .await;

    let mut second = connect(&client, &id, "attach").await;
    let seen = presence_where(&mut second, "two connections", |f| {
        f["connections"].as_array().is_some_and(|c| c.len() == 2)
    })
    .await;
    let second_id = seen["you"].clone();
    assert_eq!(seen["lease"]["connection"], first_id, "{seen}");
    send_json(&mut second, json!({"type": "input", "data": "echo nope\r"})).await;
    let error = frame_where(&mut second, "an error", |f| f["type"] == "error").await;
    assert_eq!(error["code"], "INPUT_LEASED", "{error}");
    send_json(&mut second, json!({"type": "lease_take"})).await;
    let error = frame_where(&mut second, "an error", |f| f["type"] == "error").await;
    assert_eq!(error["code"], "INPUT_LEASED", "not without force: {error}");

    // A watcher sees everyone and cannot take the keyboard.
    let mut watcher = connect(&client, &id, "watch").await;
    let watched = presence_where(&mut watcher, "three connections", |f| {
        f["connections"].as_array().is_some_and(|c| c.len() == 3)
    })
    .await;
    let modes: Vec<&str> = watched["connections"]
        .as_array()
        .map(|c| c.iter().filter_map(|p| p["mode"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(modes, ["attach", "attach", "watch"], "{watched}");
    send_json(&mut watcher, json!({"type": "lease_take", "force": true})).await;
    let error = frame_where(&mut watcher, "an error", |f| f["type"] == "error").await;
    assert_eq!(error["code"], "PERMISSION_DENIED", "{error}");

    // Force: the previous holder is told, and may no longer type.
    send_json(&mut second, json!({"type": "lease_take", "force": true})).await;
    presence_where(&mut first, "the takeover", |f| {
        f["lease"]["connection"] == second_id
    })
    .await;
    send_json(&mut first, json!({"type": "input", "data": "echo lost\r"})).await;
    let error = frame_where(&mut first, "an error", |f| f["type"] == "error").await;
    assert_eq!(error["code"], "INPUT_LEASED", "{error}");

    // Typing shows in presence, and stops showing two seconds later.
    send_json(
        &mut second,
        json!({"type": "input", "data": "echo typed-by-second\r"}),
    )
    .await;
    let typing = presence_where(&mut watcher, "typing", |f| {
        f["last_input"]["is_typing"] == true && f["last_input"]["via"] == "ws"
    })
    .await;
    assert_eq!(typing["last_input"]["via"], "ws", "{typing}");
    assert_eq!(typing["last_input"]["by"], server_name().as_str());
    presence_where(&mut watcher, "typing stopped", |f| {
        f["last_input"]["is_typing"] == false
    })
    .await;

    // The lease ends when its connection does.
    drop(second);
    presence_where(&mut first, "the lease ends", |f| f["lease"].is_null()).await;
    let lease = get(&client, &format!("/v2/pty/sessions/{id}/lease")).await;
    assert_eq!(data(&lease)["lease"], Value::Null, "{}", lease.body);
    let sent = post(
        &client,
        &format!("/v2/pty/sessions/{id}/send"),
        json!({"text": "echo free", "submit": true}),
    )
    .await;
    assert_eq!(sent.status, 200, "{}", sent.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_over_rest_admits_its_caller_and_is_released() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    exec(&client, &id, "true").await;
    let taken = post(
        &client,
        &format!("/v2/pty/sessions/{id}/lease"),
        json!({"ttl_secs": 60}),
    )
    .await;
    assert_eq!(taken.status, 200, "{}", taken.body);
    assert_eq!(data(&taken)["lease"]["connection"], Value::Null);
    assert!(
        data(&taken)["lease"]["expires_at"].is_number(),
        "{}",
        taken.body
    );
    // The holder's own calls type; a connection of another writer does not.
    let own = exec(&client, &id, "echo own-call").await;
    assert_eq!(own["exit_code"], 0, "{own}");
    let local = hub.local();
    let other = post(
        &local,
        &format!("/v2/pty/sessions/{id}/input"),
        json!({"input": "echo other", "press_enter": true}),
    )
    .await;
    assert_eq!(other.status, 409, "another name: {}", other.body);
    let release_by_other = local
        .send(
            Method::DELETE,
            &format!("/v2/pty/sessions/{id}/lease"),
            None,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(release_by_other.status, 409, "{}", release_by_other.body);
    let released = client
        .send(
            Method::DELETE,
            &format!("/v2/pty/sessions/{id}/lease"),
            None,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(released.status, 200, "{}", released.body);
    assert_eq!(data(&released)["lease"], Value::Null);
    let now_free = post(
        &local,
        &format!("/v2/pty/sessions/{id}/input"),
        json!({"input": "true", "press_enter": true}),
    )
    .await;
    assert_eq!(now_free.status, 200, "{}", now_free.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_is_logged_with_who_typed_it_and_a_hidden_password_only_as_its_length() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    exec(&client, &id, "echo visible-$((1+1))").await;
    let prompt = post(
        &client,
        &format!("/v2/pty/sessions/{id}/send"),
        json!({"text": "read -rs -p 'Password: ' pw; echo; echo \"got ${#pw}\"", "submit": true}),
    )
    .await;
    assert_eq!(prompt.status, 200, "{}", prompt.body);
    assert_eq!(
        data(&prompt)["wait_reason"],
        "stdin_read",
        "{}",
        prompt.body
    );
    let secret = "hunter2-sekrit";
    let answered = post(
        &client,
        &format!("/v2/pty/sessions/{id}/send"),
        json!({"text": secret, "submit": true}),
    )
    .await;
    assert_eq!(answered.status, 200, "{}", answered.body);
    let mut socket = connect(&client, &id, "attach").await;
    send_json(
        &mut socket,
        json!({"type": "input", "data": "echo from-ws\r"}),
    )
    .await;
    frame_where(&mut socket, "the echo", |f| {
        f["type"] == "output" && f["data"].as_str().is_some_and(|d| d.contains("from-ws"))
    })
    .await;
    let events = wait_until("the connection's input in the log", || {
        let events = input_events(&hub, &id);
        async move {
            events
                .iter()
                .any(|e| typed_text(e).contains("echo from-ws"))
                .then_some(events)
        }
    })
    .await;
    let by_rest = events
        .iter()
        .find(|e| typed_text(e).contains("echo visible-$((1+1))"))
        .unwrap_or_else(|| panic!("exec's command in the log: {events:?}"));
    assert_eq!(by_rest["by"], server_name().as_str(), "{by_rest}");
    assert_eq!(by_rest["via"], "rest", "{by_rest}");
    let by_ws = events
        .iter()
        .find(|e| typed_text(e).contains("echo from-ws"))
        .unwrap_or_else(|| panic!("the connection's input in the log: {events:?}"));
    assert_eq!(by_ws["via"], "ws", "{by_ws}");
    let hidden: Vec<&Value> = events.iter().filter(|e| e["redacted"] == true).collect();
    assert_eq!(hidden.len(), 1, "only the password is redacted: {events:?}");
    assert_eq!(hidden[0]["bytes"], secret.len() + 1, "{}", hidden[0]);
    assert!(hidden[0].get("data_b64").is_none(), "{}", hidden[0]);
    let dir = hub.terminal_dir(&id).unwrap_or_default();
    let log = std::fs::read_to_string(dir.join("events.jsonl")).unwrap_or_default();
    assert!(!log.contains(secret), "the secret is not in the log");
    assert!(
        !log.contains(&ptyhub_protocol::event::encode_b64(secret.as_bytes())[..12]),
        "nor its base64"
    );
    let screen = get(&client, &format!("/v2/pty/sessions/{id}/screen")).await;
    let text = data(&screen)["screen"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    assert!(text.contains(&format!("got {}", secret.len())), "{text}");

    // Readers of output are unchanged: what was typed shows once, as the terminal echoed it.
    let output: String = std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e["type"] == "pty.output")
        .map(|e| typed_text(&e))
        .collect();
    let echoed = output.matches("from-ws").count();
    let exported = hub.cli(&["terminal", "export", &id, "--format", "raw"]);
    assert!(exported.status.success(), "{exported:?}");
    let raw = String::from_utf8_lossy(&exported.stdout);
    assert_eq!(raw.matches("from-ws").count(), echoed, "raw export");
    assert!(!raw.contains(secret));
    let jsonl = hub.cli(&["terminal", "export", &id, "--format", "jsonl"]);
    let jsonl = String::from_utf8_lossy(&jsonl.stdout);
    assert!(
        !jsonl.contains(secret),
        "the jsonl export keeps the redaction"
    );
    assert_eq!(
        text.matches("echo from-ws").count(),
        1,
        "the screen shows the line once: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tmux_backends_holder_logs_input_and_redacts_a_hidden_password() {
    let hub = Ptyhub::start_with_env(
        env!("CARGO_BIN_EXE_ptyhub"),
        &[],
        &[("PTYHUB_BACKEND", "tmux")],
    );
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    let info = get(&client, &format!("/v2/pty/sessions/{id}")).await;
    assert_eq!(data(&info)["backend"], "tmux", "{}", info.body);
    exec(&client, &id, "echo tmux-$((3+4))").await;
    let prompt = post(
        &client,
        &format!("/v2/pty/sessions/{id}/send"),
        json!({"text": "read -rs -p 'Password: ' pw; echo; echo \"got ${#pw}\"", "submit": true}),
    )
    .await;
    assert_eq!(
        data(&prompt)["wait_reason"],
        "stdin_read",
        "{}",
        prompt.body
    );
    let secret = "tmux-sekrit";
    let answered = post(
        &client,
        &format!("/v2/pty/sessions/{id}/send"),
        json!({"text": secret, "submit": true}),
    )
    .await;
    assert_eq!(answered.status, 200, "{}", answered.body);
    let events = input_events(&hub, &id);
    let typed = events
        .iter()
        .find(|e| typed_text(e).contains("echo tmux-$((3+4))"))
        .unwrap_or_else(|| panic!("exec's command in the log: {events:?}"));
    assert_eq!(typed["by"], server_name().as_str(), "{typed}");
    assert_eq!(typed["via"], "rest", "{typed}");
    let hidden: Vec<&Value> = events.iter().filter(|e| e["redacted"] == true).collect();
    assert_eq!(hidden.len(), 1, "the password is redacted: {events:?}");
    assert_eq!(hidden[0]["bytes"], secret.len() + 1, "{}", hidden[0]);
    let dir = hub.terminal_dir(&id).unwrap_or_default();
    let log = std::fs::read_to_string(dir.join("events.jsonl")).unwrap_or_default();
    assert!(!log.contains(secret), "the secret is not in the log");
    let _ = client
        .send(Method::DELETE, &format!("/v2/pty/sessions/{id}"), None)
        .await;
}
