//! `kill -9` of the server: terminals keep running, a new server finds them, the log has no
//! missing or duplicated byte. `kill -9` of a holder: the processes it leaves behind still end
//! when the terminal is closed or a new server finds it gone.

use ptyhub_client::Client;
use serde_json::json;

use super::{close, create, exec, exec_raw, get, start};
use ptyhub_test_support::{KillOnDrop, data, kill_9, processes_with_arg, wait_until};

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

/// Arguments no other process has, for a test's background job and its `setsid` escapee
/// (`sleep` adds its arguments up, so each is a slightly different 300 seconds).
fn orphan_args(test: &str) -> (String, String) {
    let me = std::process::id();
    (format!("300.{me}{test}1"), format!("300.{me}{test}2"))
}

/// Starts, in terminal `id`, a background job that ignores SIGHUP and an escapee in its own
/// session, and waits until both run.
async fn start_orphans(client: &Client, id: &str, job: &str, escapee: &str) {
    let command = format!(
        "nohup sleep {job} >/dev/null 2>&1 & setsid sleep {escapee} >/dev/null 2>&1 </dev/null &"
    );
    let started = exec(client, id, &command).await;
    assert_eq!(started["status"], "completed", "{started}");
    // The escapee counts once it leads its session: `setsid` run as a job forks first, and
    // its child, still in the terminal's session for a moment, would go with it.
    let leads_its_session = |pid: u32| {
        rustix::process::Pid::from_raw(pid as i32).is_some_and(|pid| {
            rustix::process::getsid(Some(pid)).is_ok_and(|session| session == pid)
        })
    };
    wait_until("the job and the escapee run", || async {
        (!processes_with_arg(job).is_empty()
            && processes_with_arg(escapee)
                .into_iter()
                .any(leads_its_session))
        .then_some(())
    })
    .await;
}

/// Waits until no process of the job and the escapee is left, and says which are.
async fn wait_until_gone(job: &str, escapee: &str) {
    wait_until("every process of the terminal is gone", || async {
        (processes_with_arg(job).is_empty() && processes_with_arg(escapee).is_empty()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_with_sigkill_leaves_no_process_once_its_terminal_is_closed() {
    let (job, escapee) = orphan_args("1");
    let _sweep = KillOnDrop {
        args: vec![job.clone(), escapee.clone()],
    };
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    start_orphans(&client, &id, &job, &escapee).await;

    kill_9(hub.holder_pids()[0]);
    wait_until("the server sees the holder gone", || async {
        let info = get(&client, &format!("/v2/pty/sessions/{id}")).await;
        (data(&info)["state"] != "running").then_some(())
    })
    .await;
    close(&client, &id).await;
    wait_until_gone(&job, &escapee).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_ends_the_processes_of_a_holder_killed_with_sigkill() {
    let (job, escapee) = orphan_args("2");
    let _sweep = KillOnDrop {
        args: vec![job.clone(), escapee.clone()],
    };
    let mut hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    start_orphans(&client, &id, &job, &escapee).await;

    let holder = hub.holder_pids()[0];
    hub.kill_server();
    kill_9(holder);
    wait_until("the holder is gone", || async {
        (!ptyhub_test_support::is_alive(holder)).then_some(())
    })
    .await;
    // Nothing ended them: they were reparented, out of any holder's tree.
    assert!(!processes_with_arg(&job).is_empty());
    assert!(!processes_with_arg(&escapee).is_empty());

    hub.restart();
    let client = hub.http();
    // Discovery finds the terminal running without a holder: it is in error, history kept,
    // and what the holder left behind is ended.
    wait_until_gone(&job, &escapee).await;
    let info = get(&client, &format!("/v2/pty/sessions/{id}")).await;
    assert_eq!(info.status, 200, "{}", info.body);
    assert_eq!(data(&info)["state"], "error");
    close(&client, &id).await;
    wait_until_gone(&job, &escapee).await;
}

/// A hangup or a Ctrl-C meant for the server (its whole process group, as a closing terminal or
/// a foreground Ctrl-C sends them) never reaches a holder: each leads a session of its own,
/// from its first instruction on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_to_the_servers_process_group_spare_its_holders() {
    use rustix::process::{Pid, Signal, getpgid, getsid, kill_process_group};
    let mut hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    exec(&client, &id, "export KEEP=2").await;
    let holder = hub.holder_pids()[0];
    let server = hub.server_pid().unwrap_or_else(|| panic!("no server"));
    let pid = |n: u32| Pid::from_raw(n as i32).unwrap_or_else(|| panic!("pid {n}"));
    let session = |n: u32| getsid(Some(pid(n))).unwrap_or_else(|e| panic!("getsid {n}: {e}"));
    assert_eq!(session(holder), pid(holder), "the holder leads its session");
    assert_ne!(session(holder), session(server));
    // The harness starts the server in a group of its own, so the signal reaches nobody else.
    let group = getpgid(Some(pid(server))).unwrap_or_else(|e| panic!("getpgid: {e}"));
    assert_eq!(group, pid(server));
    for signal in [Signal::INT, Signal::HUP] {
        kill_process_group(group, signal).unwrap_or_else(|e| panic!("kill: {e}"));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(ptyhub_test_support::is_alive(holder), "the holder lives");
    hub.restart();
    let result = exec(&hub.http(), &id, "echo $KEEP").await;
    assert_eq!(result["output"], "2");
}
