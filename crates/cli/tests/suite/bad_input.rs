//! Bad input gets a clear 4xx with a code, changes nothing, and the server keeps serving.

use serde_json::json;

use super::{create, exec, get, post, start};
use ptyhub_client::{Client, Method};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_codes_and_change_nothing() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;

    let cases: Vec<(Method, String, Vec<u8>, u16, &str)> = vec![
        (
            Method::GET,
            "/v2/pty/sessions/nope".into(),
            vec![],
            404,
            "SESSION_NOT_FOUND",
        ),
        (
            Method::POST,
            "/v2/pty/sessions/nope/exec".into(),
            br#"{"command":"ls"}"#.to_vec(),
            404,
            "SESSION_NOT_FOUND",
        ),
        (
            Method::POST,
            "/v2/pty/sessions".into(),
            b"{not json".to_vec(),
            400,
            "INVALID_INPUT",
        ),
        (
            Method::POST,
            "/v2/pty/sessions".into(),
            br#"{"cols":0}"#.to_vec(),
            400,
            "INVALID_INPUT",
        ),
        (
            Method::POST,
            "/v2/pty/sessions".into(),
            br#"{"cwd":"relative/dir"}"#.to_vec(),
            400,
            "INVALID_INPUT",
        ),
        (
            Method::POST,
            "/v2/pty/sessions".into(),
            br#"{"cwd":"/no/such/dir"}"#.to_vec(),
            400,
            "INVALID_INPUT",
        ),
        (
            Method::POST,
            "/v2/pty/sessions".into(),
            br#"{"id":"../etc"}"#.to_vec(),
            400,
            "INVALID_INPUT",
        ),
        (
            Method::POST,
            "/v2/pty/sessions".into(),
            br#"{"id":"a/b"}"#.to_vec(),
            400,
            "INVALID_INPUT",
        ),
        (
            Method::POST,
            "/v2/pty/sessions".into(),
            br#"{"shell":"no-such-shell"}"#.to_vec(),
            400,
            "INVALID_INPUT",
        ),
        (
            Method::POST,
            "/v2/pty/sessions".into(),
            br#"{"bogus":1}"#.to_vec(),
            400,
            "INVALID_INPUT",
        ),
        (
            Method::POST,
            format!("/v2/pty/sessions/{id}/exec"),
            br#"{"command":""}"#.to_vec(),
            400,
            "INVALID_INPUT",
        ),
        (
            Method::POST,
            format!("/v2/pty/sessions/{id}/exec"),
            br#"{"command":"ls","timeout":-1}"#.to_vec(),
            400,
            "INVALID_INPUT",
        ),
        (
            Method::POST,
            format!("/v2/pty/sessions/{id}/resize"),
            br#"{"cols":0,"rows":10}"#.to_vec(),
            400,
            "INVALID_INPUT",
        ),
        (
            Method::GET,
            format!("/v2/pty/sessions/{id}/events?after_seq=x"),
            vec![],
            400,
            "INVALID_INPUT",
        ),
        (
            Method::POST,
            "/v2/pty/sessions".into(),
            vec![b' '; 100 * 1024 * 1024],
            413,
            "INVALID_INPUT",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let is_oversized = body.len() > 16 * 1024 * 1024;
        let answer = match client
            .send_raw(method.clone(), &path, Some(body), &[])
            .await
        {
            Ok(answer) => answer,
            // The server may answer 413 and close before the client has written the whole
            // body; the client then sees the closed connection instead of the answer.
            Err(ptyhub_client::ClientError::Http(error))
                if is_oversized && error.contains("body") =>
            {
                continue;
            }
            Err(error) => panic!("{method} {path}: {error}"),
        };
        assert_eq!(answer.status, status, "{method} {path}: {}", answer.body);
        assert_eq!(answer.body["success"], false, "{method} {path}");
        assert_eq!(
            answer.body["error"]["code"], code,
            "{method} {path}: {}",
            answer.body
        );
        assert!(
            answer.body["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }

    let list = get(&client, "/v2/pty/sessions").await;
    assert_eq!(
        list.body["data"]["sessions"].as_array().map(Vec::len),
        Some(1),
        "nothing was created"
    );

    let no_token = Client::tcp(hub.addr.clone(), "wrong");
    let denied = no_token
        .send(Method::GET, "/v2/pty/sessions", None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(denied.status, 401);
    assert_eq!(denied.body["error"]["code"], "UNAUTHENTICATED");
    let rebinding = client
        .send_raw(
            Method::GET,
            "/v2/pty/sessions",
            None,
            &[("host", "evil.example")],
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rebinding.status, 403);

    let _ = post(
        &client,
        &format!("/v2/pty/sessions/{id}/input"),
        json!({ "input": "" }),
    )
    .await;
    let still = exec(&client, &id, "echo serving").await;
    assert_eq!(still["output"], "serving");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_to_a_program_that_never_reads_is_refused_not_dropped() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let started = post(
        &client,
        &format!("/v2/pty/sessions/{id}/exec"),
        // Raw mode: the line discipline holds unread input back instead of discarding it.
        json!({ "command": "stty raw -echo; sleep 600", "async": true }),
    )
    .await;
    assert_eq!(started.status, 200, "{}", started.body);
    let chunk = "x".repeat(4 * 1024 * 1024 - 16);
    let mut refused = None;
    for attempt in 0..8 {
        let answer = post(
            &client,
            &format!("/v2/pty/sessions/{id}/input"),
            json!({ "input": chunk }),
        )
        .await;
        if answer.status != 200 {
            refused = Some((attempt, answer));
            break;
        }
    }
    let (attempt, answer) =
        refused.unwrap_or_else(|| panic!("32 MiB of unread input were all accepted"));
    assert!(attempt >= 3, "refused too early, after {attempt} inputs");
    assert_eq!(answer.status, 409, "{}", answer.body);
    assert_eq!(answer.body["error"]["code"], "BUSY");
    assert!(
        answer.body["message"]
            .as_str()
            .is_some_and(|m| m.contains("not reading"))
    );
    let closed = client
        .send(Method::DELETE, &format!("/v2/pty/sessions/{id}"), None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(closed.body["success"], true);
}

/// Regression: a program that printed an unterminated `ESC ]` (here `printf '\033]0;'`) left
/// every later exec BUSY, even across a server restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stray_escape_sequence_does_not_wedge_exec() {
    let mut hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    let stray = exec(&client, &id, r"printf '\033]0;'").await;
    assert_eq!(stray["status"], "completed", "{stray}");
    let after = exec(&client, &id, "echo still-usable").await;
    assert_eq!(after["output"], "still-usable", "{after}");
    assert_eq!(after["exit_code"], 0);

    // A restarted server rebuilds from the same log, stray bytes included.
    hub.restart();
    let client = hub.http();
    let again = exec(&client, &id, "echo after-restart").await;
    assert_eq!(again["output"], "after-restart", "{again}");
}
