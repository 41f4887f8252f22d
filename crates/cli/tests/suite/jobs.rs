//! Jobs: start without waiting, look, await (bounded, never cancelling), cancel, stop.

use serde_json::json;

use super::{create, exec, get, post, start};
use ptyhub_client::Client;
use ptyhub_test_support::{data, processes_with_arg, wait_until};

/// Starts a job of `command` at `base` and returns its id once its program runs: a process
/// whose arguments hold `unique` (a fixed pause was not always enough on a busy machine).
async fn start_job(client: &Client, base: &str, command: &str, unique: &str) -> String {
    let started = post(client, base, json!({ "command": command })).await;
    let id = data(&started)["job_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    wait_until("the job's program runs", || async {
        (!processes_with_arg(unique).is_empty()).then_some(())
    })
    .await;
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_await_and_cancel() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let base = format!("/v2/pty/sessions/{id}/jobs");

    let job = post(
        &client,
        &base,
        json!({ "command": "sleep 0.5; echo done; (exit 3)" }),
    )
    .await;
    assert_eq!(data(&job)["state"], "RUNNING", "{}", job.body);
    let job_id = data(&job)["job_id"].as_str().unwrap_or_default().to_owned();
    let short = post(
        &client,
        &format!("{base}/{job_id}/await"),
        json!({ "seconds": 0.05 }),
    )
    .await;
    assert_eq!(
        data(&short)["state"],
        "RUNNING",
        "an await that gives up leaves the job running"
    );
    let done = post(
        &client,
        &format!("{base}/{job_id}/await"),
        json!({ "seconds": 10 }),
    )
    .await;
    assert_eq!(data(&done)["state"], "FAILED", "{}", done.body);
    assert_eq!(data(&done)["exit_code"], 3);
    assert_eq!(data(&done)["output"], "done");
    let again = get(&client, &format!("{base}/{job_id}")).await;
    assert_eq!(
        data(&again)["state"],
        "FAILED",
        "a finished job stays readable"
    );

    // A job that ignores ^C is killed; it ends CANCELLED and the terminal lives on. The
    // cancel comes once its program runs (a `sleep` no other process has).
    let stubborn_sleep = format!("60.{}1", std::process::id());
    let stubborn_id = start_job(
        &client,
        &base,
        &format!("trap '' INT; sleep {stubborn_sleep}"),
        &stubborn_sleep,
    )
    .await;
    let cancelling = post(&client, &format!("{base}/{stubborn_id}/cancel"), json!({})).await;
    assert_eq!(
        data(&cancelling)["state"],
        "CANCELLING",
        "{}",
        cancelling.body
    );
    let cancelled = post(
        &client,
        &format!("{base}/{stubborn_id}/await"),
        json!({ "seconds": 20 }),
    )
    .await;
    assert_eq!(data(&cancelled)["state"], "CANCELLED", "{}", cancelled.body);
    assert_eq!(exec(&client, &id, "echo alive").await["output"], "alive");

    // stop: the running job ends, the terminal stays.
    let running_sleep = format!("60.{}2", std::process::id());
    let running_id = start_job(
        &client,
        &base,
        &format!("sleep {running_sleep}"),
        &running_sleep,
    )
    .await;
    let stopped = post(&client, &format!("/v2/pty/sessions/{id}/stop"), json!({})).await;
    assert_eq!(data(&stopped)["job_id"], running_id.as_str());
    let ended = post(
        &client,
        &format!("{base}/{running_id}/await"),
        json!({ "seconds": 10 }),
    )
    .await;
    assert_eq!(data(&ended)["state"], "CANCELLED");

    let missing = get(&client, &format!("{base}/job-999")).await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.body["error"]["code"], "JOB_NOT_FOUND");
    let nothing = post(&client, &format!("/v2/pty/sessions/{id}/stop"), json!({})).await;
    assert_eq!(nothing.body["error"]["code"], "JOB_NOT_FOUND");
}

/// Cancelling a job ends what it started in the background too, and nothing that ran before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_ends_the_jobs_background_children_too() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let base = format!("/v2/pty/sessions/{id}/jobs");
    let marker = |name: &str| format!("ptyhub-{name}-{}", std::process::id());
    let (before, child) = (marker("before"), marker("child"));
    // A background process of an earlier command, which the cancel must spare.
    exec(
        &client,
        &id,
        &format!("(exec -a {before} sleep 300) > /dev/null 2>&1 &"),
    )
    .await;
    wait_until("the earlier background process runs", || async {
        (!processes_with_arg(&before).is_empty()).then_some(())
    })
    .await;
    // Start times are known to the kernel's clock tick (10 ms): the job comes later than that.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let job = post(
        &client,
        &base,
        json!({ "command": format!("(exec -a {child} sleep 300) & sleep 60") }),
    )
    .await;
    let job_id = data(&job)["job_id"].as_str().unwrap_or_default().to_owned();
    wait_until("the job's background child runs", || async {
        (!processes_with_arg(&child).is_empty()).then_some(())
    })
    .await;
    post(&client, &format!("{base}/{job_id}/cancel"), json!({})).await;
    let cancelled = post(
        &client,
        &format!("{base}/{job_id}/await"),
        json!({ "seconds": 20 }),
    )
    .await;
    assert_eq!(data(&cancelled)["state"], "CANCELLED", "{}", cancelled.body);
    wait_until("the job's background child is gone", || async {
        processes_with_arg(&child).is_empty().then_some(())
    })
    .await;
    assert!(
        !processes_with_arg(&before).is_empty(),
        "what ran before the job is spared"
    );
    assert_eq!(exec(&client, &id, "echo alive").await["output"], "alive");
}

/// A cancel that comes at once, before the shell has even started the job's command: the
/// command still ends CANCELLED, nothing of it is left running, and the next command runs
/// alone (a ^C pressed while the line editor still read it left the rest of its text in the
/// editor, where the next command joined it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cancelled_before_its_command_starts_leaves_nothing_behind() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    exec(&client, &id, "true").await;
    let base = format!("/v2/pty/sessions/{id}/jobs");
    for round in 0..5 {
        let unique = format!("60.{}{round}3", std::process::id());
        let started = post(
            &client,
            &base,
            json!({ "command": format!("trap '' INT; sleep {unique}") }),
        )
        .await;
        let job = data(&started)["job_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        post(&client, &format!("{base}/{job}/cancel"), json!({})).await;
        let ended = post(
            &client,
            &format!("{base}/{job}/await"),
            json!({ "seconds": 20 }),
        )
        .await;
        assert_eq!(
            data(&ended)["state"],
            "CANCELLED",
            "round {round}: {}",
            ended.body
        );
        let next = exec(&client, &id, "echo alive").await;
        assert_eq!(next["output"], "alive", "round {round}: {next}");
        assert!(
            processes_with_arg(&unique).is_empty(),
            "round {round}: the job's sleep still runs"
        );
    }
}
