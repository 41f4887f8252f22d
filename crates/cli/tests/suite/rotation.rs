//! The bounded event log: rotated segments within `--event-log-keep`, `CURSOR_EXPIRED` for a
//! cursor older than what is kept, event pages from the oldest kept event, exec across
//! rotations, and a server restart that rebuilds from the kept segments.

use std::path::Path;

use serde_json::{Value, json};

use super::{create, exec, exec_raw, get};
use ptyhub_client::Client;
use ptyhub_test_support::{Ptyhub, data, serve_refused};

const EXE: &str = env!("CARGO_BIN_EXE_ptyhub");
/// The limit the tests run with: 256 KiB, so a few MB of output rotate many times.
const KEEP: u64 = 256 * 1024;
/// One event holds at most 64 KiB of output, about 88 KiB as a log line; the files may pass
/// the limit by at most one event larger than a segment.
const ONE_EVENT_MAX: u64 = 96 * 1024;

/// The log files of a terminal directory: `(name, size)`, sorted by name.
fn log_files(dir: &Path) -> Vec<(String, u64)> {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_log = name.starts_with("events.") && name.ends_with(".jsonl");
            is_log.then(|| (name, entry.metadata().map(|m| m.len()).unwrap_or_default()))
        })
        .collect();
    files.sort();
    files
}

/// The `seq` of the oldest event on disk: the first line of the oldest segment.
fn oldest_on_disk(dir: &Path) -> u64 {
    let files = log_files(dir);
    let oldest = files
        .iter()
        .find(|(name, _)| name != "events.jsonl")
        .or_else(|| files.first())
        .unwrap_or_else(|| panic!("no log file in {}", dir.display()));
    let text = std::fs::read(dir.join(&oldest.0)).unwrap_or_default();
    let first = text.split(|&b| b == b'\n').next().unwrap_or_default();
    let first: Value = serde_json::from_slice(first).unwrap_or_default();
    first["seq"].as_u64().unwrap_or_default()
}

/// Checks the files on disk stay within the limit and that rotation happened.
fn assert_bounded(dir: &Path, keep: u64) {
    let files = log_files(dir);
    let total: u64 = files.iter().map(|(_, size)| size).sum();
    assert!(
        total <= keep + ONE_EVENT_MAX,
        "{total} bytes of log kept with a limit of {keep}: {files:?}"
    );
    let rotated: Vec<&String> = files
        .iter()
        .map(|(name, _)| name)
        .filter(|name| *name != "events.jsonl")
        .collect();
    assert!(!rotated.is_empty(), "no rotated segment: {files:?}");
    for name in rotated {
        let digits = name
            .strip_prefix("events.")
            .and_then(|n| n.strip_suffix(".jsonl"))
            .unwrap_or_default();
        assert!(
            digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()),
            "{name}"
        );
    }
}

async fn observe(client: &Client, id: &str, cursor: Option<&str>) -> ptyhub_client::Answer {
    let query = cursor.map(|c| format!("?cursor={c}")).unwrap_or_default();
    get(client, &format!("/v2/pty/sessions/{id}/observe{query}")).await
}

fn cursor_of(answer: &ptyhub_client::Answer) -> String {
    data(answer)["cursor"]
        .as_str()
        .unwrap_or_else(|| panic!("no cursor in {}", answer.body))
        .to_owned()
}

fn assert_expired(answer: &ptyhub_client::Answer) {
    assert_eq!(answer.status, 410, "{}", answer.body);
    assert_eq!(answer.body["error"]["code"], "CURSOR_EXPIRED");
    assert_eq!(answer.body["error"]["retryable"], true);
}

/// Checks `GET …/events?after_seq=0` starts at the oldest kept event and runs without a gap.
async fn assert_events_from_oldest(client: &Client, id: &str, dir: &Path) {
    let page = get(client, &format!("/v2/pty/sessions/{id}/events?after_seq=0")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let seqs: Vec<u64> = data(&page)["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    let oldest = oldest_on_disk(dir);
    assert!(oldest > 1, "old events were deleted");
    assert_eq!(
        seqs.first(),
        Some(&oldest),
        "the page starts at the oldest kept event"
    );
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "the page has no gap"
    );
    let last = data(&page)["last_seq"].as_u64().unwrap_or_default();
    assert!(last >= seqs.last().copied().unwrap_or_default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_log_limit_rotates_expires_old_cursors_and_survives_a_restart() {
    let mut hub = Ptyhub::start_with(EXE, &["--event-log-keep", "256K"]);
    let client = hub.http();
    let id = create(&client, json!({ "id": "flood" })).await;
    let dir = hub
        .terminal_dir(&id)
        .unwrap_or_else(|| panic!("no directory for {id}"));
    assert_eq!(exec(&client, &id, "echo before").await["output"], "before");
    let old_cursor = cursor_of(&observe(&client, &id, None).await);

    // About 2.6 MB through the shell: ten times the limit.
    let flood = exec_raw(
        &client,
        &id,
        json!({ "command": "seq 1 400000", "timeout": 120 }),
    )
    .await;
    assert_eq!(flood.status, 200, "{}", flood.body);
    assert_eq!(data(&flood)["exit_code"], 0);
    let output = data(&flood)["output"].as_str().unwrap_or_default();
    assert!(
        output.ends_with("399999\n400000"),
        "{:?}",
        &output[output.len().saturating_sub(40)..]
    );
    assert_bounded(&dir, KEEP);

    assert_expired(&observe(&client, &id, Some(&old_cursor)).await);
    let fresh = observe(&client, &id, None).await;
    assert_eq!(data(&fresh)["kind"], "snapshot", "{}", fresh.body);
    let cursor = cursor_of(&fresh);
    assert_eq!(
        exec(&client, &id, "echo after-$((6*7))").await["output"],
        "after-42"
    );
    let delta = observe(&client, &id, Some(&cursor)).await;
    assert_eq!(data(&delta)["kind"], "delta", "{}", delta.body);
    assert!(
        data(&delta)["output"]
            .as_str()
            .is_some_and(|o| o.contains("after-42")),
        "{}",
        delta.body
    );
    assert_events_from_oldest(&client, &id, &dir).await;

    // kill -9 and a new server on the same state dir: it rebuilds from the kept segments.
    hub.restart();
    let client = hub.http();
    let snapshot = get(&client, &format!("/v2/pty/sessions/{id}/snapshot")).await;
    assert_eq!(snapshot.status, 200, "{}", snapshot.body);
    let screen = data(&snapshot)["screen"].to_string();
    assert!(screen.contains("after-42"), "{screen}");
    assert_expired(&observe(&client, &id, Some(&old_cursor)).await);
    let delta = observe(&client, &id, Some(&cursor)).await;
    assert_eq!(
        data(&delta)["kind"],
        "delta",
        "a kept cursor still works: {}",
        delta.body
    );
    assert_events_from_oldest(&client, &id, &dir).await;
    let again = exec(&client, &id, "seq 1 100000 | tail -n 1; echo restarted").await;
    assert_eq!(again["output"], "100000\nrestarted");
    assert_eq!(again["exit_code"], 0);
    assert_bounded(&dir, KEEP);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_can_come_from_the_environment() {
    let hub = Ptyhub::start_with_env(EXE, &[], &[("PTYHUB_EVENT_LOG_KEEP", "131072")]);
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let dir = hub
        .terminal_dir(&id)
        .unwrap_or_else(|| panic!("no directory for {id}"));
    let flood = exec(&client, &id, "seq 1 200000; echo done").await;
    assert!(
        flood["output"]
            .as_str()
            .is_some_and(|o| o.ends_with("done"))
    );
    assert_bounded(&dir, 128 * 1024);
}

#[test]
fn a_limit_below_64_kib_is_refused() {
    for (args, env) in [
        (&["--event-log-keep", "1000"][..], &[][..]),
        (&[][..], &[("PTYHUB_EVENT_LOG_KEEP", "65535")][..]),
    ] {
        let (status, stderr) = serve_refused(EXE, args, env);
        assert!(!status.success(), "{args:?} {env:?}");
        assert!(
            stderr.contains("--event-log-keep") && stderr.contains("at least 65536"),
            "{stderr}"
        );
    }
}
