//! `kill -9` of the server: terminals keep running, a new server finds them, the log has no
//! missing or duplicated byte.

use serde_json::json;

use super::{create, exec, exec_raw, get, start};
use ptyhub_test_support::{data, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_printing_loop_survives_kill_9_and_the_log_is_contiguous() {
    let mut hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "id": "loop" })).await;
    let started = exec_raw(
        &client,
        &id,
        json!({ "command": "for i in $(seq 1 400); do echo n=$i; sleep 0.01; done; echo finished", "async": true }),
    )
    .await;
    assert_eq!(data(&started)["status"], "running");
    wait_until("the loop prints", || async {
        let screen = get(&client, &format!("/v2/pty/sessions/{id}/screen")).await;
        data(&screen)["output"]
            .as_str()
            .is_some_and(|o| o.contains("n=20"))
            .then_some(())
    })
    .await;
    let holder = hub.holder_pids()[0];
    hub.kill_server();
    assert!(
        ptyhub_test_support::is_alive(holder),
        "the holder died with the server"
    );
    hub.restart();
    let client = hub.http();
    let info = get(&client, &format!("/v2/pty/sessions/{id}")).await;
    assert_eq!(info.status, 200, "{}", info.body);
    let done = wait_until("the loop finishes after the restart", || async {
        let screen = get(&client, &format!("/v2/pty/sessions/{id}/screen")).await;
        let screen = data(&screen).clone();
        (screen["status"] == "completed").then_some(screen)
    })
    .await;
    let output = done["output"].as_str().unwrap_or_default().to_owned();
    let numbers: Vec<u32> = output
        .lines()
        .filter_map(|l| l.strip_prefix("n="))
        .filter_map(|n| n.parse().ok())
        .collect();
    assert_eq!(
        numbers,
        (1..=400).collect::<Vec<_>>(),
        "the rebuilt command output is whole: {:?}",
        &output[..output.len().min(300)]
    );
    assert!(output.ends_with("finished"));

    // The raw log, decoded: every number exactly once, in order.
    let events = get(
        &client,
        &format!("/v2/pty/sessions/{id}/events?after_seq=0"),
    )
    .await;
    let mut text = Vec::new();
    let mut last_seq = 0;
    for event in data(&events)["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        let seq = event["seq"].as_u64().unwrap_or_default();
        assert_eq!(seq, last_seq + 1, "seq is contiguous");
        last_seq = seq;
        if let Some(b64) = event["data_b64"].as_str() {
            use base64::Engine as _;
            text.extend(
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .unwrap_or_default(),
            );
        }
    }
    let text = String::from_utf8_lossy(&text);
    let logged: Vec<u32> = text
        .split("\r\n")
        .filter_map(|l| l.rsplit_once("n=").map(|(_, n)| n))
        .filter_map(|n| n.parse().ok())
        .collect();
    assert_eq!(logged, (1..=400).collect::<Vec<_>>());

    let after = exec(&client, &id, "echo alive").await;
    assert_eq!(after["output"], "alive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_server_and_leaves_terminals_running() {
    let mut hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    exec(&client, &id, "export KEEP=1").await;
    let status = hub.stop_server();
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert!(ptyhub_test_support::is_alive(hub.holder_pids()[0]));
    hub.restart();
    let result = exec(&hub.http(), &id, "echo $KEEP").await;
    assert_eq!(result["output"], "1");
}
