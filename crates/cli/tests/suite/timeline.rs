//! The command timeline: every command a terminal ran (by exec or typed at the prompt) is a
//! record with an id, listed and read back from the log in windows the caller chooses, and
//! the same after a server restart; exec takes the same window parameters.

use serde_json::{Value, json};

use super::{create, exec, exec_raw, get, post, start};
use ptyhub_test_support::{data, wait_until};

/// The timeline's commands, oldest first.
async fn commands(client: &ptyhub_client::Client, id: &str, query: &str) -> Value {
    let answer = get(client, &format!("/v2/pty/sessions/{id}/commands{query}")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    data(&answer).clone()
}

/// Command `n` with the window `query` (a query string, `?` included, or empty).
async fn command(client: &ptyhub_client::Client, id: &str, n: u64, query: &str) -> Value {
    let answer = get(
        client,
        &format!("/v2/pty/sessions/{id}/commands/{n}{query}"),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    data(&answer).clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_by_exec_and_typed_are_listed_read_in_windows_and_survive_a_restart() {
    let mut hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;

    let first = exec(&client, &id, "seq 1 50").await;
    assert_eq!(first["command_id"], 1, "{first}");
    assert!(
        first.get("console").is_none(),
        "no console unless asked: {first}"
    );
    let second = exec(&client, &id, "echo failing; (exit 3)").await;
    assert_eq!(second["exit_code"], 3);
    let usr = std::fs::canonicalize("/usr")
        .map_or_else(|_| "/usr".to_owned(), |p| p.to_string_lossy().into_owned());
    let in_dir = exec_raw(
        &client,
        &id,
        json!({ "command": "pwd", "exec_dir": usr, "timeout": 60 }),
    )
    .await;
    assert_eq!(data(&in_dir)["output"], usr.as_str());

    // A line typed at the prompt, marked by the shell integration.
    let typed = post(
        &client,
        &format!("/v2/pty/sessions/{id}/input"),
        json!({ "input": "echo typed-$((40+2))", "press_enter": true }),
    )
    .await;
    assert_eq!(typed.status, 200, "{}", typed.body);
    let listed = wait_until("the typed command is in the timeline", || async {
        let listed = commands(&client, &id, "").await;
        let records = listed["commands"].as_array().cloned().unwrap_or_default();
        // The typed line's directory comes with its note, logged once the shell accepted it.
        let is_done = records.len() == 4
            && records[3]["status"] == "completed"
            && records[3]["cwd"].is_string();
        is_done.then_some(listed)
    })
    .await;
    let records = listed["commands"].as_array().cloned().unwrap_or_default();
    let ids: Vec<u64> = records.iter().filter_map(|r| r["id"].as_u64()).collect();
    assert_eq!(ids, vec![1, 2, 3, 4]);
    assert_eq!(records[0]["command"], "seq 1 50");
    assert_eq!(records[0]["origin"], "exec");
    assert_eq!(records[0]["exit_code"], 0);
    assert_eq!(records[0]["cwd"], "/tmp");
    assert_eq!(records[1]["exit_code"], 3);
    assert_eq!(records[2]["command"], "pwd");
    assert_eq!(records[2]["cwd"], usr.as_str());
    assert_eq!(records[3]["origin"], "typed");
    assert_eq!(records[3]["command"], "echo typed-$((40+2))");
    assert_eq!(records[3]["exit_code"], 0);
    for record in &records {
        assert!(record["start_seq"].as_u64() <= record["end_seq"].as_u64());
        assert!(
            record["duration"].as_f64().is_some_and(|d| d >= 0.0),
            "{record}"
        );
        assert!(record["started_at"].as_f64().is_some_and(|t| t > 1.0e9));
    }
    assert!(
        records[0]["output_bytes"]
            .as_u64()
            .is_some_and(|b| b >= 140)
    );
    assert_eq!(listed["has_more"], false);

    // Paging: after=2 gives the rest; a limit leaves more.
    let page = commands(&client, &id, "?after=2").await;
    assert_eq!(page["commands"][0]["id"], 3);
    let short = commands(&client, &id, "?limit=1").await;
    assert_eq!(short["commands"].as_array().map(Vec::len), Some(1));
    assert_eq!(short["has_more"], true);
    assert_eq!(short["next_after"], 1);

    // Windows of the first command's output, read from the log.
    let whole = command(&client, &id, 1, "").await;
    let expected: Vec<String> = (1..=50).map(|i| i.to_string()).collect();
    assert_eq!(whole["output"], expected.join("\n"));
    assert_eq!(whole["window"]["total_lines"], 50);
    assert_eq!(whole["id"], 1);
    let head = command(&client, &id, 1, "?head=3").await;
    assert_eq!(head["output"], "1\n2\n3");
    assert_eq!(head["window"]["omitted"]["after"]["lines"], 47);
    assert_eq!(head["window"]["next_offset"], 3);
    let next = command(&client, &id, 1, "?head=3&offset=3").await;
    assert_eq!(next["output"], "4\n5\n6");
    let tail = command(&client, &id, 1, "?tail=2").await;
    assert_eq!(tail["output"], "49\n50");
    assert_eq!(tail["window"]["omitted"]["before"]["lines"], 48);
    let grep = command(&client, &id, 1, "?grep=%5E2%5B05%5D%24&context=1").await;
    assert_eq!(grep["output"], "19\n20\n21\n--\n24\n25\n26");
    assert_eq!(grep["window"]["matches"], 2);
    let chars = command(&client, &id, 1, "?max_chars=5").await;
    assert_eq!(chars["output"], "1\n2\n3");
    assert_eq!(chars["window"]["next_offset"], 3);
    let typed = command(&client, &id, 4, "").await;
    assert_eq!(typed["output"], "typed-42");

    // exec takes the same windows for its own answer.
    let windowed = exec_raw(
        &client,
        &id,
        json!({ "command": "seq 1 100", "tail": 2, "timeout": 60 }),
    )
    .await;
    let windowed = data(&windowed).clone();
    assert_eq!(windowed["output"], "99\n100");
    assert_eq!(windowed["window"]["omitted"]["before"]["lines"], 98);
    assert_eq!(windowed["command_id"], 5);
    let grepped = exec_raw(
        &client,
        &id,
        json!({ "command": "seq 1 100", "grep": "^5$", "context": 1, "include_console": true, "timeout": 60 }),
    )
    .await;
    let grepped = data(&grepped).clone();
    assert_eq!(grepped["output"], "4\n5\n6");
    assert!(
        grepped["console"].as_array().is_some_and(|c| c.len() == 6),
        "{grepped}"
    );

    // A restarted server rebuilds the same timeline from the log.
    hub.kill_server();
    hub.restart();
    let client = hub.http();
    let again = wait_until("the restarted server lists the commands", || async {
        let answer = get(&client, &format!("/v2/pty/sessions/{id}/commands")).await;
        (answer.status == 200).then(|| data(&answer).clone())
    })
    .await;
    let rebuilt = again["commands"].as_array().cloned().unwrap_or_default();
    let summary = |records: &[Value]| -> Vec<Value> {
        let fields = ["id", "command", "exit_code", "cwd", "start_seq", "end_seq"];
        records
            .iter()
            .map(|r| Value::Array(fields.iter().map(|f| r[*f].clone()).collect()))
            .collect()
    };
    assert_eq!(rebuilt.len(), 6, "{again}");
    assert_eq!(summary(&rebuilt[..4]), summary(&records));
    assert_eq!(rebuilt[4]["command"], "seq 1 100");
    let after = command(&client, &id, 2, "").await;
    assert_eq!(after["output"], "failing");
    assert_eq!(after["exit_code"], 3);
    // The next command continues the numbering.
    let next = exec(&client, &id, "true").await;
    assert_eq!(next["command_id"], 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_windows_and_unknown_commands_are_refused_and_change_nothing() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    exec(&client, &id, "echo one").await;
    let refused = |query: &'static str| {
        let client = client.clone();
        let id = id.clone();
        async move {
            let answer = get(&client, &format!("/v2/pty/sessions/{id}/commands/1{query}")).await;
            assert_eq!(answer.status, 400, "{query}: {}", answer.body);
            assert_eq!(answer.body["error"]["code"], "INVALID_INPUT", "{query}");
            answer.body["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        }
    };
    assert_eq!(
        refused("?head=-1").await,
        "head must be a positive number, not -1"
    );
    assert_eq!(
        refused("?tail=0").await,
        "tail must be a positive number, not 0"
    );
    assert_eq!(
        refused("?head=1&tail=1").await,
        "head and tail cannot be combined: ask for one, or use offset with head"
    );
    assert!(
        refused("?grep=(oops")
            .await
            .starts_with("grep is not a valid regular expression")
    );
    assert_eq!(
        refused("?max_chars=0").await,
        "max_chars must be a positive number, not 0"
    );
    let unknown = get(&client, &format!("/v2/pty/sessions/{id}/commands/99")).await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(unknown.body["error"]["code"], "COMMAND_NOT_FOUND");
    let not_a_number = get(&client, &format!("/v2/pty/sessions/{id}/commands/x")).await;
    assert_eq!(not_a_number.body["error"]["code"], "INVALID_INPUT");
    let bad_limit = get(&client, &format!("/v2/pty/sessions/{id}/commands?limit=0")).await;
    assert_eq!(bad_limit.body["error"]["code"], "INVALID_INPUT");
    // A bad window on exec runs nothing.
    let bad_exec = exec_raw(
        &client,
        &id,
        json!({ "command": "echo should-not-run", "head": 2, "tail": 2 }),
    )
    .await;
    assert_eq!(bad_exec.status, 400, "{}", bad_exec.body);
    assert_eq!(bad_exec.body["error"]["code"], "INVALID_INPUT");
    let listed = commands(&client, &id, "").await;
    assert_eq!(
        listed["commands"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_command_is_listed_and_its_output_so_far_is_read_from_the_log() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let started = exec_raw(
        &client,
        &id,
        json!({ "command": "echo early; read -r x; echo got-$x", "async": true }),
    )
    .await;
    assert_eq!(data(&started)["status"], "running");
    let n = data(&started)["command_id"].as_u64().unwrap_or_default();
    assert_eq!(n, 1);
    let so_far = wait_until("the running command's output is in the log", || async {
        let read = command(&client, &id, n, "").await;
        (read["output"] == "early").then_some(read)
    })
    .await;
    assert_eq!(so_far["status"], "running");
    assert_eq!(so_far["end_seq"], Value::Null);
    assert_eq!(so_far["duration"], Value::Null);
    let listed = commands(&client, &id, "").await;
    assert_eq!(listed["commands"][0]["status"], "running", "{listed}");
    let typed = post(
        &client,
        &format!("/v2/pty/sessions/{id}/input"),
        json!({ "input": "yes", "press_enter": true }),
    )
    .await;
    assert_eq!(typed.status, 200, "{}", typed.body);
    let done = wait_until("the command finishes", || async {
        let read = command(&client, &id, n, "").await;
        (read["status"] == "completed").then_some(read)
    })
    .await;
    // The terminal echoed the answer: it is output like any other.
    assert_eq!(done["output"], "early\nyes\ngot-yes");
    assert_eq!(done["exit_code"], 0);
    // The answer to the program's read is not a command of its own.
    let listed = commands(&client, &id, "").await;
    assert_eq!(
        listed["commands"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
}
