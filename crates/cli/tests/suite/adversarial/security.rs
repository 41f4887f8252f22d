//! Security: the token appears nowhere it should not (S6).

use ptyhub_client::{Client, Method};
use serde_json::json;

use super::figure;
use crate::suite::{create, exec, exec_raw, get};
use ptyhub_test_support::Ptyhub;

/// S6: with a canary token given through the environment, after a session of ordinary and
/// failing requests with debug logging on, the canary is in none of: the server's log, its
/// command line, any terminal's files, error bodies, the pages and their scripts, the
/// environment or command line of holders and shells.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_the_token_is_nowhere_it_should_not_be() {
    let canary = format!("tok_CANARY_{}", std::process::id());
    let hub = Ptyhub::start_logged_with_token(env!("CARGO_BIN_EXE_ptyhub"), &canary);
    let client = hub.http();
    let id = create(&client, json!({ "id": "canary" })).await;
    let shell_pid = exec(&client, &id, "echo $$").await["output"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // Failures of every kind, each answered with an error body.
    let mut bodies = Vec::new();
    for (method, path, body) in [
        (
            Method::POST,
            format!("/v2/pty/sessions/{id}/exec"),
            Some(json!({ "command": "" })),
        ),
        (
            Method::POST,
            "/v2/pty/sessions".to_owned(),
            Some(json!({ "id": "../x" })),
        ),
        (Method::GET, "/v2/pty/sessions/nope".to_owned(), None),
        (
            Method::POST,
            format!("/v2/pty/sessions/{id}/resize"),
            Some(json!({ "cols": 0, "rows": 0 })),
        ),
        (
            Method::GET,
            format!("/v2/pty/sessions/{id}/observe?cursor=garbage"),
            None,
        ),
    ] {
        let answer = client
            .send(method, &path, body.as_ref())
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(answer.status >= 400, "{path} succeeded: {}", answer.body);
        bodies.push(answer.body.to_string());
    }
    let wrong = Client::tcp(hub.addr.clone(), format!("{canary}x"));
    let refused = wrong
        .send(Method::GET, "/v2/pty/sessions", None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(refused.status, 401);
    bodies.push(refused.body.to_string());
    let timeout = exec_raw(
        &client,
        &id,
        json!({ "command": "sleep 5", "timeout": 0.2 }),
    )
    .await;
    bodies.push(timeout.body.to_string());
    let sessions = get(&client, "/v2/pty/sessions").await;
    bodies.push(sessions.body.to_string());
    for page in ["/", "/terminal", "/play", "/openapi.json"] {
        let answer = get(&client, page).await;
        bodies.push(answer.body.to_string());
    }
    for asset in [
        "terminal.js",
        "index.js",
        "login.js",
        "play.js",
        "recording.js",
    ] {
        let answer = get(&client, &format!("/assets/{asset}")).await;
        bodies.push(answer.body.to_string());
    }
    let mut processes = Vec::new();
    for holder in hub.holder_pids() {
        for part in ["environ", "cmdline"] {
            if let Ok(bytes) = std::fs::read(format!("/proc/{holder}/{part}")) {
                processes.push((format!("a holder's {part}"), bytes));
            }
        }
    }
    if let Ok(bytes) = std::fs::read(format!("/proc/{shell_pid}/environ")) {
        processes.push(("the shell's environ".to_owned(), bytes));
    }
    assert!(
        processes.len() >= 3,
        "the holder's and the shell's /proc files were read"
    );
    let closed = client
        .send(Method::DELETE, &format!("/v2/pty/sessions/{id}"), None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(closed.status, 200);

    let mut places = 0;
    let mut found = Vec::new();
    let mut look = |place: String, text: &str| {
        places += 1;
        if text.contains(&canary) {
            found.push(place);
        }
    };
    for (i, body) in bodies.iter().enumerate() {
        look(format!("answer body {i}"), body);
    }
    let cmdline = hub
        .server_pid()
        .and_then(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).ok())
        .unwrap_or_default();
    assert!(!cmdline.is_empty(), "the server's command line was read");
    look(
        "the server's command line".to_owned(),
        &String::from_utf8_lossy(&cmdline),
    );
    // Stopped, so that its log is complete.
    let mut hub = hub;
    hub.stop_server();
    let log = hub.server_log();
    assert!(log.contains("INFO"), "the server's log was read: {log}");
    look("the server's log".to_owned(), &log);
    for (place, bytes) in &processes {
        look(place.clone(), &String::from_utf8_lossy(bytes));
    }
    let mut files = Vec::new();
    collect_files(hub.state_dir(), &mut files);
    for file in &files {
        let text = String::from_utf8_lossy(&std::fs::read(file).unwrap_or_default()).into_owned();
        look(format!("{}", file.display()), &text);
    }
    assert!(found.is_empty(), "the token is in: {found:?}");
    figure(
        "S6",
        "places searched for the canary token (bodies, pages, log, /proc, state files)",
        places,
    );
    figure("S6", "places that held it", 0);
}

fn collect_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => collect_files(&path, out),
            Ok(kind) if kind.is_file() => out.push(path),
            _ => {}
        }
    }
}
