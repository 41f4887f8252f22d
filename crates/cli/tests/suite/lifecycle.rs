//! Create/list/get/delete, the files on disk, resize, events.

use serde_json::json;

use super::{create, exec, get, post, start};
use ptyhub_client::Method;
use ptyhub_test_support::{data, is_alive, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_is_idempotent_and_delete_ends_the_tree_but_keeps_history() {
    let hub = start();
    let client = hub.http();
    let id = create(
        &client,
        json!({ "id": "work-1", "cwd": "/tmp", "cols": 100, "rows": 30 }),
    )
    .await;
    assert_eq!(id, "work-1");
    let again = client
        .send(
            Method::POST,
            "/v2/pty/sessions",
            Some(&json!({ "id": "work-1" })),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.status, 200);
    assert_eq!(data(&again)["cols"], 100);

    exec(
        &client,
        &id,
        "setsid sleep 1000 & sleep 1000 & echo started",
    )
    .await;
    let holder = hub.holder_pids()[0];
    // bash, the background sleep, and the setsid escapee (reparented to the holder).
    let tree = wait_until("the background jobs run under the holder", || async {
        let tree = ptyhub_test_support::descendants(holder);
        (tree.len() >= 3).then_some(tree)
    })
    .await;

    let list = get(&client, "/v2/pty/sessions").await;
    assert_eq!(data(&list)["sessions"].as_array().map(Vec::len), Some(1));

    let closed = client
        .send(Method::DELETE, "/v2/pty/sessions/work-1", None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(closed.status, 200, "{}", closed.body);
    assert_eq!(closed.body["success"], true);
    for pid in tree.into_iter().chain([holder]) {
        wait_until("every process of the terminal is gone", || async {
            (!is_alive(pid)).then_some(())
        })
        .await;
    }
    let gone = get(&client, "/v2/pty/sessions/work-1").await;
    assert_eq!(gone.status, 404);
    assert_eq!(gone.body["error"]["code"], "SESSION_NOT_FOUND");
    let twice = client
        .send(Method::DELETE, "/v2/pty/sessions/work-1", None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(twice.status, 200);
    assert_eq!(twice.body["success"], false);
    assert_eq!(twice.body["error"]["code"], "SESSION_NOT_FOUND");

    let live = get(&client, "/v2/pty/sessions").await;
    assert_eq!(data(&live)["sessions"].as_array().map(Vec::len), Some(0));
    let all = get(&client, "/v2/pty/sessions?include_closed=true").await;
    let closed_info = data(&all)["sessions"][0].clone();
    assert_eq!(closed_info["closed"], true);
    assert!(closed_info["last_seq"].as_u64() > Some(0), "{closed_info}");
    // Closed terminals are history only; a restarted server lists them from their files alone.
    let mut hub = hub;
    hub.kill_server();
    hub.restart();
    let client = hub.http();
    let again = get(&client, "/v2/pty/sessions?include_closed=true").await;
    let again = data(&again)["sessions"][0].clone();
    for field in [
        "session_id",
        "closed",
        "state",
        "last_seq",
        "cols",
        "rows",
        "working_dir",
    ] {
        assert_eq!(
            again[field], closed_info[field],
            "{field}: {again} vs {closed_info}"
        );
    }

    let events = get(&client, "/v2/pty/sessions/work-1/events?after_seq=0").await;
    let list = data(&events)["events"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(list.iter().any(|e| e["type"] == "process.exit"));
    assert!(list.iter().any(|e| e["type"] == "pty.output"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resource_on_disk_matches_the_documented_layout() {
    let hub = start();
    let client = hub.local();
    let id = create(&client, json!({ "agent": "coder", "cwd": "/tmp" })).await;
    assert_eq!(id, "terminal-coder-default");
    exec(&client, &id, "echo on disk").await;
    let uid = super::own_uid();
    let dir = hub.state_dir().join(format!(
        "home/{uid}/agent/coder/session/default/terminal/terminal-coder-default"
    ));
    for file in [
        "meta.json",
        "state",
        "status",
        "owner",
        "cwd",
        "events.jsonl",
    ] {
        assert!(dir.join(file).is_file(), "{file} missing");
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("state")).unwrap_or_default(),
        "running\n"
    );
    let log = std::fs::read_to_string(dir.join("events.jsonl")).unwrap_or_default();
    for (expected, line) in (1u64..).zip(log.lines()) {
        let event: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
        assert_eq!(event["seq"], expected);
        assert!(event["ts"].is_number());
    }
    let over_http = get(&hub.http(), "/v2/pty/sessions").await;
    assert_eq!(
        data(&over_http)["sessions"][0]["session_id"],
        id,
        "REST and the socket see the same owner"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resize_changes_the_pty_and_the_screen() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let resized = post(
        &client,
        &format!("/v2/pty/sessions/{id}/resize"),
        json!({ "cols": 90, "rows": 20 }),
    )
    .await;
    assert_eq!(resized.status, 200, "{}", resized.body);
    let result = exec(&client, &id, "stty size").await;
    assert_eq!(result["output"], "20 90");
    let screen = get(&client, &format!("/v2/pty/sessions/{id}/screen")).await;
    assert_eq!(data(&screen)["cols"], 90);
    assert_eq!(data(&screen)["screen"].as_array().map(Vec::len), Some(20));
}

/// A resize answered is in effect for the next command, even one the server types into the
/// PTY itself: here the holder is stopped when the resize reaches it, so only the order of
/// the two can make the command see the new size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_after_a_resize_sees_the_new_size_while_the_holder_lags() {
    use rustix::process::{Pid, Signal, kill_process};
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cols": 80, "rows": 24 })).await;
    // The first exec gets the server its way of typing into the PTY.
    assert_eq!(exec(&client, &id, "stty size").await["output"], "24 80");
    let pids = hub.holder_pids();
    let holder = pids
        .first()
        .and_then(|&pid| Pid::from_raw(pid as i32))
        .unwrap_or_else(|| panic!("no holder: {pids:?}"));
    let signal = |signal| kill_process(holder, signal).unwrap_or_else(|e| panic!("kill: {e}"));
    signal(Signal::STOP);
    let resized = post(
        &client,
        &format!("/v2/pty/sessions/{id}/resize"),
        json!({ "cols": 100, "rows": 30 }),
    )
    .await;
    let run = tokio::spawn({
        let client = client.clone();
        let id = id.clone();
        async move { exec(&client, &id, "stty size").await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    signal(Signal::CONT);
    assert_eq!(resized.status, 200, "{}", resized.body);
    let result = run.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(result["output"], "30 100", "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_of_one_id_make_one_terminal() {
    let hub = start();
    let client = hub.http();
    let creates = (0..5).map(|_| {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .send(
                    Method::POST,
                    "/v2/pty/sessions",
                    Some(&json!({ "id": "same" })),
                )
                .await
                .map(|answer| answer.status)
        })
    });
    let mut statuses = Vec::new();
    for create in creates {
        statuses.push(create.await.ok().and_then(Result::ok));
    }
    statuses.sort();
    assert_eq!(
        statuses,
        vec![Some(200), Some(200), Some(200), Some(200), Some(201)]
    );
    let list = get(&client, "/v2/pty/sessions").await;
    assert_eq!(data(&list)["sessions"].as_array().map(Vec::len), Some(1));
    assert_eq!(hub.holder_pids().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shell_starts_clean_sized_and_in_its_own_session() {
    let hub = start();
    let client = hub.http();
    let id = create(
        &client,
        json!({ "cols": 132, "rows": 43, "env": { "MY_VAR": "set" } }),
    )
    .await;
    let size = exec(&client, &id, "stty size").await;
    assert_eq!(
        size["output"], "43 132",
        "the first command sees the requested size"
    );
    let env = exec(
        &client,
        &id,
        "env | grep -c '^PTYHUB_TOKEN\\|test-token' ; echo $MY_VAR $TERM",
    )
    .await;
    assert_eq!(
        env["output"], "0\nset xterm-256color",
        "no server secret reaches the shell"
    );
    let fds = exec(&client, &id, "ls /proc/$$/fd | sort -n | tr '\\n' ' '").await;
    assert_eq!(
        fds["output"], "0 1 2 255 ",
        "the shell inherits only its terminal"
    );
    let session = exec(&client, &id, "ps -o sid= -p $$; echo $$; tty").await;
    let lines: Vec<String> = session["output"]
        .as_str()
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().to_owned())
        .collect();
    assert_eq!(
        lines[0], lines[1],
        "the shell leads its own session: {lines:?}"
    );
    assert!(lines[2].starts_with("/dev/pts/"), "{lines:?}");
}

/// The nice value of `pid` (the 19th field of `/proc/<pid>/stat`, counted after the command's
/// closing parenthesis).
fn nice_of(pid: u32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(16)?.parse().ok()
}

/// docs/backends.md#priority: where it may, the server's threads run at nice -10 and its
/// session group at -20 (which is what counts against the terminals' sessions); a terminal's
/// programs run at the normal priority in a group of their own.
#[tokio::test]
async fn the_server_comes_first_under_contention_and_the_programs_run_at_the_normal_priority() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let shell = exec(
        &client,
        &id,
        "ps -o ni= -p $$; cat /proc/$$/autogroup 2>/dev/null || echo none",
    )
    .await;
    let lines: Vec<&str> = shell["output"]
        .as_str()
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .collect();
    assert_eq!(lines.first(), Some(&"0"), "the shell's nice: {lines:?}");
    let has_groups = lines.get(1).is_some_and(|l| *l != "none");
    if has_groups {
        assert!(
            lines[1].ends_with("nice 0"),
            "the shell's group is an ordinary one: {lines:?}"
        );
    }
    let is_root = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    if !is_root {
        #[allow(clippy::print_stderr, reason = "a partly skipped test says why")]
        {
            eprintln!(
                "not root: the server may not raise its priority, only the shell was checked"
            );
        }
        return;
    }
    let server = hub.server_pid().unwrap_or(0);
    assert_eq!(nice_of(server), Some(-10), "the server's threads");
    if has_groups {
        let group =
            std::fs::read_to_string(format!("/proc/{server}/autogroup")).unwrap_or_default();
        assert!(
            group.trim_end().ends_with("nice -20"),
            "the server's session group: {group}"
        );
    }
}
