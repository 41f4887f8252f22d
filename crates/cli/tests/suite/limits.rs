//! Live-terminal limits: the least recently used idle terminal makes room, LIMIT_EXCEEDED when
//! every terminal is busy, idle terminals close; history stays on disk. And the server's own
//! size: the worker threads it is given.

use serde_json::json;

use super::{create, exec_raw, get, post};
use ptyhub_client::Method;
use ptyhub_test_support::{Ptyhub, data, wait_until};

fn start_with(args: &[&str]) -> Ptyhub {
    Ptyhub::start_with(env!("CARGO_BIN_EXE_ptyhub"), args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_least_recently_used_idle_terminal_makes_room() {
    let hub = start_with(&["--max-terminals", "2"]);
    let client = hub.http();
    create(&client, json!({ "id": "busy" })).await;
    create(&client, json!({ "id": "idle" })).await;
    let running = exec_raw(
        &client,
        "busy",
        json!({ "command": "sleep 60", "async": true }),
    )
    .await;
    assert_eq!(data(&running)["status"], "running");
    get(&client, "/v2/pty/sessions/busy").await; // "busy" is now the most recently used

    create(&client, json!({ "id": "third" })).await;
    let mut ids = super::live_ids(&client).await;
    ids.sort();
    assert_eq!(
        ids,
        ["busy", "third"],
        "the idle terminal was closed to make room"
    );

    let running = exec_raw(
        &client,
        "third",
        json!({ "command": "sleep 60", "async": true }),
    )
    .await;
    assert_eq!(data(&running)["status"], "running");
    let refused = client
        .send(
            Method::POST,
            "/v2/pty/sessions",
            Some(&json!({ "id": "fourth" })),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], "LIMIT_EXCEEDED");
    assert_eq!(refused.body["error"]["retryable"], true);

    let stats = get(&client, "/v1/shell/sessions/stats").await;
    assert_eq!(data(&stats)["total_sessions"], 2);
    assert_eq!(data(&stats)["max_sessions"], 2);
    assert_eq!(data(&stats)["usage_ratio"], 1.0);

    let all = get(&client, "/v2/pty/sessions?include_closed=true").await;
    let closed: Vec<_> = data(&all)["sessions"]
        .as_array()
        .map(|l| l.iter().filter(|s| s["closed"] == true).cloned().collect())
        .unwrap_or_default();
    assert_eq!(closed.len(), 1, "the reclaimed terminal's history stays");
    assert_eq!(closed[0]["session_id"], "idle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unused_terminals_close_after_the_idle_limit() {
    let hub = start_with(&["--idle-close-secs", "2"]);
    let client = hub.http();
    create(&client, json!({ "id": "forgotten" })).await;
    wait_until("the unused terminal is closed", || async {
        super::live_ids(&client).await.is_empty().then_some(())
    })
    .await;
    let events = get(&client, "/v2/pty/sessions/forgotten/events?after_seq=0").await;
    assert!(
        data(&events)["events"]
            .as_array()
            .is_some_and(|e| !e.is_empty())
    );
    let reopened = post(
        &client,
        "/v1/shell/sessions/create",
        json!({ "id": "forgotten" }),
    )
    .await;
    assert_eq!(
        data(&reopened)["session_id"],
        "forgotten",
        "the id starts a new instance"
    );
    let info = get(&client, "/v2/pty/sessions/forgotten").await;
    assert_eq!(data(&info)["instance"], 2);
}

/// The threads of the server's runtime, by their name.
fn worker_threads(hub: &Ptyhub) -> usize {
    let pid = hub.server_pid().unwrap_or_else(|| panic!("no server pid"));
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/task: {e}"));
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .filter(|name| name.trim() == "tokio-rt-worker")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_runs_the_worker_threads_it_is_given() {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let hub = start_with(&[]);
    assert_eq!(worker_threads(&hub), (cores / 2).max(1), "half the cores");
    let hub = start_with(&["--workers", "3"]);
    assert_eq!(worker_threads(&hub), 3);
    // And they serve: an exec answers.
    let client = hub.http();
    create(&client, json!({ "id": "w" })).await;
    let answer = exec_raw(&client, "w", json!({ "command": "echo on-three" })).await;
    assert_eq!(data(&answer)["output"], "on-three");
}
