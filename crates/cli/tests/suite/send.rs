//! `send` with real programs: the wait reason comes from the kernel's view of the terminal.

use serde_json::{Value, json};

use super::{create, get, post, start};
use ptyhub_test_support::data;

async fn send(client: &ptyhub_client::Client, id: &str, body: Value) -> Value {
    let answer = post(client, &format!("/v2/pty/sessions/{id}/send"), body).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    data(&answer).clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_reasons_come_from_what_the_terminal_does() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;

    // The shell back at its prompt reads the terminal.
    let back = send(&client, &id, json!({ "text": "echo hi", "submit": true })).await;
    assert_eq!(back["wait_reason"], "stdin_read", "{back}");
    assert!(
        back["output"].as_str().is_some_and(|o| o.contains("hi")),
        "{back}"
    );
    assert_eq!(back["foreground_program"], "bash");

    // A REPL at its prompt.
    let repl = send(
        &client,
        &id,
        json!({ "text": "python3 -q", "submit": true }),
    )
    .await;
    assert_eq!(repl["wait_reason"], "stdin_read", "{repl}");
    assert_eq!(repl["foreground_program"], "python3");
    let answer = send(
        &client,
        &id,
        json!({ "text": "print(6 * 7)", "submit": true }),
    )
    .await;
    assert!(
        answer["output"].as_str().is_some_and(|o| o.contains("42")),
        "{answer}"
    );
    send(&client, &id, json!({ "text": "exit()", "submit": true })).await;

    // A password prompt: line mode with echo off.
    let secret = send(
        &client,
        &id,
        json!({ "text": "read -s -p 'Password: ' pw; echo got-$pw", "submit": true }),
    )
    .await;
    assert_eq!(secret["wait_reason"], "stdin_read", "{secret}");
    assert_eq!(secret["is_password_prompt"], true, "{secret}");
    let done = send(&client, &id, json!({ "text": "hunter2", "submit": true })).await;
    assert!(
        done["output"]
            .as_str()
            .is_some_and(|o| o.contains("got-hunter2")),
        "{done}"
    );
    assert_eq!(done["is_password_prompt"], false);

    // An installer's question, answered by a second send.
    let question = send(
        &client,
        &id,
        json!({ "text": "read -p 'Continue? [Y/n] ' a; echo answer=$a", "submit": true }),
    )
    .await;
    assert_eq!(question["wait_reason"], "stdin_read");
    assert!(
        question["output"]
            .as_str()
            .is_some_and(|o| o.contains("[Y/n]"))
    );
    let answered = send(&client, &id, json!({ "text": "y", "submit": true })).await;
    assert!(
        answered["output"]
            .as_str()
            .is_some_and(|o| o.contains("answer=y")),
        "{answered}"
    );

    // A program that neither prints nor reads: the deadline, or the idle window.
    let slow = send(
        &client,
        &id,
        json!({ "text": "sleep 5", "submit": true, "deadline": 0.5 }),
    )
    .await;
    assert_eq!(slow["wait_reason"], "timeout", "{slow}");
    assert_eq!(slow["foreground_program"], "sleep");
    // One send at a time: a second one while the first waits is BUSY.
    let first = {
        let client = client.clone();
        let path = format!("/v2/pty/sessions/{id}/send");
        tokio::spawn(async move {
            post(&client, &path, json!({ "deadline": 2, "idle_window": 30 })).await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let second = post(
        &client,
        &format!("/v2/pty/sessions/{id}/send"),
        json!({ "text": "" }),
    )
    .await;
    assert_eq!(second.status, 409, "{}", second.body);
    assert_eq!(second.body["error"]["code"], "BUSY");
    let first = first.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(data(&first)["wait_reason"], "timeout", "{}", first.body);
    let idle = send(
        &client,
        &id,
        json!({ "text": "", "idle_window": 0.5, "deadline": 10 }),
    )
    .await;
    assert_eq!(idle["wait_reason"], "inferred_idle", "{idle}");

    // The program exits.
    send(&client, &id, json!({ "text": "\u{3}" })).await;
    let exit = send(&client, &id, json!({ "text": "exit 7", "submit": true })).await;
    assert_eq!(exit["wait_reason"], "session_exit", "{exit}");
    assert_eq!(exit["exit_code"], 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_returns_the_newest_output_marked_truncated() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let flood = send(
        &client,
        &id,
        json!({ "text": "seq 1 200000", "submit": true, "deadline": 60 }),
    )
    .await;
    assert_eq!(flood["wait_reason"], "stdin_read");
    assert_eq!(flood["truncated"], true);
    let output = flood["output"].as_str().unwrap_or_default();
    assert!(
        output.contains("199999\n200000"),
        "the newest output is kept"
    );
    assert!(output.chars().count() <= 16_000);
    let version = get(&client, "/v2/version").await;
    assert_eq!(data(&version)["apiVersion"], "1.0");
    let backends = get(&client, "/v2/backends").await;
    assert_eq!(data(&backends)["backends"][0]["status"], "ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_reach_the_foreground_group() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let path = format!("/v2/pty/sessions/{id}/signal");
    let started = post(
        &client,
        &format!("/v2/pty/sessions/{id}/exec"),
        json!({ "command": "sleep 30 | cat", "async": true }),
    )
    .await;
    assert_eq!(data(&started)["status"], "running");
    let signaled = ptyhub_test_support::wait_until("the pipeline owns the terminal", || async {
        let answer = post(&client, &path, json!({ "signal": "WINCH" })).await;
        // Until the forked children have exec'd, the group's program is still "bash".
        let program = data(&answer)["program"].clone();
        (data(&answer)["is_shell"] == false && (program == "sleep" || program == "cat"))
            .then_some(answer)
    })
    .await;
    assert_eq!(data(&signaled)["signal"], "WINCH");
    let interrupted = post(&client, &path, json!({ "signal": "SIGINT" })).await;
    assert_eq!(interrupted.status, 200, "{}", interrupted.body);
    assert!(
        data(&interrupted)["program"] == "sleep" || data(&interrupted)["program"] == "cat",
        "{}",
        interrupted.body
    );
    let done = post(
        &client,
        &format!("/v2/pty/sessions/{id}/wait"),
        json!({ "seconds": 10 }),
    )
    .await;
    assert_eq!(data(&done)["status"], "completed");
    assert_eq!(data(&done)["exit_code"], 130, "{}", done.body);

    let refused = post(&client, &path, json!({ "signal": "SEGV" })).await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.body["error"]["code"], "INVALID_INPUT");
    let at_prompt = post(&client, &path, json!({ "signal": "INT" })).await;
    assert_eq!(data(&at_prompt)["is_shell"], true, "{}", at_prompt.body);
}
