//! `exec` frames on a live connection (docs/websocket.md#commands): a command run as REST v2's
//! exec runs it, answered by an `exec_result` frame with the frame's `request_id`, over real
//! WebSocket connections against a real shell.

use serde_json::{Value, json};

use super::lease::{connect, frame_where, input_events, next_json, send_json};
use super::{create, exec, start};
use ptyhub_client::LiveSocket;

/// Sends an `exec` frame and reads until its `exec_result`.
async fn exec_frame(socket: &mut LiveSocket, request_id: &str, params: Value) -> Value {
    send_json(
        socket,
        json!({ "type": "exec", "request_id": request_id, "params": params }),
    )
    .await;
    answer_to(socket, request_id).await
}

async fn answer_to(socket: &mut LiveSocket, request_id: &str) -> Value {
    frame_where(socket, &format!("the answer to {request_id}"), |f| {
        f["type"] == "exec_result" && f["request_id"] == request_id
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_frame_runs_a_command_and_answers_with_its_code_and_output() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let mut socket = connect(&client, &id, "attach").await;

    let answer = exec_frame(
        &mut socket,
        "first",
        json!({ "command": "echo out-$((6*7)); (exit 3)" }),
    )
    .await;
    let result = &answer["result"];
    assert_eq!(result["status"], "completed", "{answer}");
    assert_eq!(result["exit_code"], 3, "{answer}");
    assert_eq!(result["output"], "out-42", "{answer}");
    assert_eq!(result["command"], "echo out-$((6*7)); (exit 3)");
    assert!(result["command_id"].as_u64().is_some(), "{answer}");
    assert!(answer.get("error").is_none(), "{answer}");

    // exec_dir is one submission, as on REST.
    let answer = exec_frame(
        &mut socket,
        "second",
        json!({ "command": "pwd", "exec_dir": "/tmp" }),
    )
    .await;
    assert_eq!(answer["result"]["output"], "/tmp", "{answer}");

    // A command still running when its timeout passes is answered as running and goes on;
    // meanwhile the connection serves its other frames (a ping is answered first).
    send_json(
        &mut socket,
        json!({ "type": "exec", "request_id": "slow",
                "params": { "command": "sleep 0.6; echo late", "timeout": 5 } }),
    )
    .await;
    send_json(&mut socket, json!({ "type": "ping", "timestamp": 7 })).await;
    let first = frame_where(&mut socket, "the pong or the answer", |f| {
        f["type"] == "pong" || f["type"] == "exec_result"
    })
    .await;
    assert_eq!(
        first["type"], "pong",
        "the ping waited for the command: {first}"
    );
    let late = answer_to(&mut socket, "slow").await;
    assert_eq!(late["result"]["output"], "late", "{late}");

    // The REST timeline has them, typed by this connection (via ws).
    let typed: Vec<Value> = input_events(&hub, &id)
        .into_iter()
        .filter(|e| e["via"] == "ws")
        .collect();
    assert_eq!(
        typed.len(),
        3,
        "each command typed once, by the connection: {typed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_exec_frame_says_why_with_its_request_id_and_runs_nothing() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    exec(&client, &id, "true").await;
    let typed_before = input_events(&hub, &id).len();

    // A watcher may not run commands.
    let mut watcher = connect(&client, &id, "watch").await;
    let refused = exec_frame(&mut watcher, "w", json!({ "command": "touch /tmp/no" })).await;
    assert_eq!(refused["error"]["code"], "PERMISSION_DENIED", "{refused}");
    assert!(refused.get("result").is_none(), "{refused}");

    let mut socket = connect(&client, &id, "attach").await;
    // Parameters exec refuses.
    let empty = exec_frame(&mut socket, "empty", json!({ "command": "  " })).await;
    assert_eq!(empty["error"]["code"], "INVALID_INPUT", "{empty}");
    let negative = exec_frame(
        &mut socket,
        "negative",
        json!({ "command": "true", "timeout": -1 }),
    )
    .await;
    assert_eq!(negative["error"]["code"], "INVALID_INPUT", "{negative}");
    let nowhere = exec_frame(
        &mut socket,
        "nowhere",
        json!({ "command": "true", "exec_dir": "/no/such/dir" }),
    )
    .await;
    assert_eq!(nowhere["error"]["code"], "INVALID_INPUT", "{nowhere}");

    // A frame that is no exec at all is an `error` frame, and the connection goes on.
    send_json(&mut socket, json!({ "type": "exec", "request_id": "x" })).await;
    let malformed = frame_where(&mut socket, "the malformed frame's error", |f| {
        f["type"] == "error"
    })
    .await;
    assert_eq!(malformed["code"], "INVALID_INPUT", "{malformed}");
    assert!(
        malformed["data"]
            .as_str()
            .unwrap_or_default()
            .contains("params"),
        "{malformed}"
    );
    let long_id = "i".repeat(129);
    send_json(
        &mut socket,
        json!({ "type": "exec", "request_id": long_id, "params": { "command": "true" } }),
    )
    .await;
    let too_long = frame_where(&mut socket, "the long id's answer", |f| {
        f["type"] == "exec_result"
    })
    .await;
    assert_eq!(too_long["error"]["code"], "INVALID_INPUT", "{too_long}");
    assert_eq!(too_long["request_id"], Value::Null, "{too_long}");
    assert_eq!(
        input_events(&hub, &id).len(),
        typed_before,
        "a refused exec types nothing"
    );

    // A second command while one runs is BUSY at once; the first answers after it. Frames
    // are submitted in their order.
    send_json(
        &mut socket,
        json!({ "type": "exec", "request_id": "long",
                "params": { "command": "sleep 0.5; echo done" } }),
    )
    .await;
    let busy = exec_frame(&mut socket, "again", json!({ "command": "echo no" })).await;
    assert_eq!(busy["error"]["code"], "BUSY", "{busy}");
    assert!(busy.get("result").is_none(), "{busy}");
    let long = answer_to(&mut socket, "long").await;
    assert_eq!(long["result"]["output"], "done", "{long}");

    // Another connection's lease refuses this connection's commands; its own admits them.
    let mut holder = connect(&client, &id, "attach").await;
    send_json(&mut holder, json!({ "type": "lease_take" })).await;
    frame_where(&mut holder, "its lease", |f| {
        f["type"] == "presence" && !f["lease"].is_null()
    })
    .await;
    let leased = exec_frame(&mut socket, "leased", json!({ "command": "echo taken" })).await;
    assert_eq!(leased["error"]["code"], "INPUT_LEASED", "{leased}");
    assert!(leased["error"]["message"].as_str().is_some(), "{leased}");
    let own = exec_frame(&mut holder, "own", json!({ "command": "echo mine" })).await;
    assert_eq!(own["result"]["output"], "mine", "{own}");
}

/// A command's output frames come before its `exec_result`: a client that stops reading at
/// the answer has every byte the command printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commands_output_frames_come_before_its_answer() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let mut socket = connect(&client, &id, "attach").await;

    for round in 0..20 {
        let request_id = format!("r{round}");
        send_json(
            &mut socket,
            json!({ "type": "exec", "request_id": request_id,
                    "params": { "command": format!("echo mark-$((6*7))-{round}") } }),
        )
        .await;
        let mut output = String::new();
        let answer = loop {
            let frame = next_json(&mut socket).await;
            assert!(
                !frame.is_null(),
                "the connection ended before {request_id}'s answer"
            );
            match frame["type"].as_str() {
                Some("output") => output.push_str(frame["data"].as_str().unwrap_or_default()),
                Some("exec_result") if frame["request_id"] == request_id => break frame,
                _ => {}
            }
        };
        let printed = format!("mark-42-{round}");
        assert_eq!(answer["result"]["output"], printed, "{answer}");
        assert!(
            output.contains(&format!("{printed}\r\n")),
            "round {round}: the answer came before the output it answers: {output:?}"
        );
    }
}

/// Output that shows no prompt may wait a moment for more, never for the next prompt: a
/// command typed on the connection that prints and then sleeps has its output there while it
/// sleeps (nothing asks the terminal anything meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_without_a_prompt_is_sent_while_the_command_runs() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let mut socket = connect(&client, &id, "attach").await;
    send_json(
        &mut socket,
        json!({ "type": "input", "data": "printf early-$((6*7)); sleep 300\r" }),
    )
    .await;
    let mut output = String::new();
    while !output.contains("early-42") {
        let frame = next_json(&mut socket).await;
        assert!(!frame.is_null(), "the connection ended: {output:?}");
        if frame["type"] == "output" {
            output.push_str(frame["data"].as_str().unwrap_or_default());
        }
    }
    send_json(&mut socket, json!({ "type": "input", "data": "\u{3}" })).await;
}
