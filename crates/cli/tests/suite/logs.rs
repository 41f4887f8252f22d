//! Logs through `tracing` (docs/operations.md#logs): with `--log-format json` every line the
//! server writes to stderr is one JSON object, a request's lines carry its span (method and
//! matched route, never the path), a terminal's lines carry its id, and neither the token nor
//! anything typed into a terminal appears in any line, even with debug logging on.

use futures_util::{SinkExt, StreamExt};
use ptyhub_client::LiveMessage;
use serde_json::{Value, json};

use crate::suite::{create, exec, get, post};
use ptyhub_test_support::{Ptyhub, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_name_routes_and_terminals_and_never_a_token_or_typed_input() {
    let token = format!("tok_LOGCANARY_{}", std::process::id());
    let hub = Ptyhub::start_logged_with_token_and(
        env!("CARGO_BIN_EXE_ptyhub"),
        &token,
        &["--log-format", "json"],
    );
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    // What is typed, by every road: the input route, send, exec and a WebSocket.
    let typed = [
        "TYPED_INPUT_1",
        "TYPED_SEND_2",
        "TYPED_EXEC_3",
        "TYPED_WS_4",
    ];
    let input = post(
        &client,
        &format!("/v2/pty/sessions/{id}/input"),
        json!({ "input": format!("echo {}", typed[0]), "press_enter": true }),
    )
    .await;
    assert_eq!(input.status, 200, "{}", input.body);
    let sent = post(
        &client,
        &format!("/v2/pty/sessions/{id}/send"),
        json!({ "text": format!("echo {}", typed[1]), "submit": true }),
    )
    .await;
    assert_eq!(sent.status, 200, "{}", sent.body);
    exec(&client, &id, &format!("echo {}", typed[2])).await;
    let mut socket = client
        .websocket(&format!("/v2/pty/sessions/{id}/ws?mode=attach"))
        .await
        .unwrap_or_else(|e| panic!("websocket: {e}"));
    socket
        .send(LiveMessage::Text(
            json!({ "type": "input", "data": format!("echo {}\r", typed[3]) })
                .to_string()
                .into(),
        ))
        .await
        .unwrap_or_else(|e| panic!("send: {e}"));
    wait_until("the WebSocket's line ran", || async {
        let screen = get(&client, &format!("/v2/pty/sessions/{id}/screen")).await;
        screen.body.to_string().contains(typed[3]).then_some(())
    })
    .await;
    let _ = socket.close(None).await;
    while let Some(Ok(_)) = socket.next().await {}
    // A failing request too: errors are logged with their own fields.
    let missing = get(&client, "/v2/pty/sessions/no-such-terminal").await;
    assert_eq!(missing.status, 404);

    let log = wait_until("the server logged the input request", || async {
        let log = hub.server_log();
        log.contains("/v2/pty/sessions/{id}/input").then_some(log)
    })
    .await;
    let lines: Vec<Value> = log
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"))
        })
        .collect();
    assert!(!lines.is_empty());
    let in_span = |line: &Value, name: &str| -> Option<Value> {
        line["spans"]
            .as_array()
            .and_then(|spans| spans.iter().find(|s| s["name"] == name).cloned())
    };
    let request = lines
        .iter()
        .filter_map(|line| in_span(line, "request"))
        .find(|span| span["route"] == "/v2/pty/sessions/{id}/input")
        .unwrap_or_else(|| panic!("no line in the input request's span:\n{log}"));
    assert_eq!(request["method"], "POST", "{request}");
    let answered = lines
        .iter()
        .find(|line| {
            line["fields"]["message"] == "answered"
                && line["span"]["route"] == "/v2/pty/sessions/{id}/exec"
        })
        .unwrap_or_else(|| panic!("no answered line for exec:\n{log}"));
    assert_eq!(answered["span"]["status"], 200, "{answered}");
    assert!(answered["span"]["latency_ms"].is_number(), "{answered}");
    let terminal = lines
        .iter()
        .filter_map(|line| in_span(line, "terminal"))
        .find(|span| span["id"] == id.as_str())
        .unwrap_or_else(|| panic!("no line in the terminal's span:\n{log}"));
    assert!(terminal["owner"].is_string(), "{terminal}");
    assert!(!log.contains(&token), "the token is in the log");
    for text in typed {
        assert!(!log.contains(text), "typed input {text} is in the log");
    }
    assert!(
        !log.contains("no-such-terminal"),
        "a raw path is in the log (ids belong to the route's placeholder)"
    );
}
