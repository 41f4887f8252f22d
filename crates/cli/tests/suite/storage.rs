//! The event log on a disk that fills up: a terminal whose log cannot take its output holds
//! the output back (nothing lost), says why, and continues by itself once there is space;
//! the server and the other terminals go on as if nothing happened.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use ptyhub_test_support::{data, wait_until};
use serde_json::{Value, json};

use super::{create, exec, exec_raw, get, start};

/// A small tmpfs mounted on a directory for the length of a test.
struct Tmpfs {
    at: PathBuf,
}

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Self {
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .status()
            .unwrap_or_else(|e| panic!("mount: {e}"));
        assert!(
            status.success(),
            "this test mounts a small tmpfs as a full disk and needs root (mount failed: {status})"
        );
        Self { at: at.to_owned() }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // The terminals that live on it end first: once it is unmounted their `meta.json`
        // is out of sight of the server's cleanup (this guard drops before the server's).
        for meta in walk_metas(&self.at) {
            if let Some(pid) = meta.get("holder_pid").and_then(Value::as_u64) {
                ptyhub_core::process::kill(pid as u32, rustix::process::Signal::KILL);
            }
            if let Some(mark) = meta.get("process_mark").and_then(Value::as_str) {
                for pid in ptyhub_core::process::marked_processes(mark) {
                    ptyhub_core::process::kill(pid, rustix::process::Signal::KILL);
                }
            }
        }
        // Lazily: a holder just killed may still have its files open.
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}

/// Every `meta.json` under `dir`, parsed.
fn walk_metas(dir: &Path) -> Vec<Value> {
    let mut found = Vec::new();
    if let Ok(text) = std::fs::read_to_string(dir.join("meta.json"))
        && let Ok(meta) = serde_json::from_str(&text)
    {
        found.push(meta);
    }
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.extend(walk_metas(&entry.path()));
        }
    }
    found
}

/// Fills the file system holding `path` up to the last `free` bytes with `path`.
fn fill(path: &Path, free: u64) {
    let mut file = std::fs::File::create(path).unwrap_or_else(|e| panic!("{e}"));
    let chunk = vec![b'x'; 64 * 1024];
    while file.write_all(&chunk).is_ok() {}
    let len = file.metadata().map(|m| m.len()).unwrap_or_default();
    file.set_len(len.saturating_sub(free))
        .unwrap_or_else(|e| panic!("{e}"));
}

async fn info(client: &ptyhub_client::Client, id: &str) -> Value {
    data(&get(client, &format!("/v2/pty/sessions/{id}")).await).clone()
}

/// Every output byte of a terminal's log files, in `seq` order, and its events' types.
fn logged(dir: &Path) -> (Vec<u8>, Vec<String>) {
    use base64::Engine as _;
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("events") && n.ends_with(".jsonl"))
    });
    let mut events: Vec<Value> = files
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap_or_default()
                .lines()
                .map(|l| {
                    serde_json::from_str(l).unwrap_or_else(|e| panic!("a whole line: {e}: {l}"))
                })
                .collect::<Vec<Value>>()
        })
        .collect();
    events.sort_by_key(|e| e["seq"].as_u64());
    let mut bytes = Vec::new();
    let mut types = Vec::new();
    let mut last = 0;
    for event in &events {
        let seq = event["seq"].as_u64().unwrap_or_default();
        assert_eq!(seq, last + 1, "seq is contiguous");
        last = seq;
        types.push(event["type"].as_str().unwrap_or_default().to_owned());
        if let Some(b64) = event["data_b64"].as_str() {
            bytes.extend(
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .unwrap_or_default(),
            );
        }
    }
    (bytes, types)
}

/// What a running native terminal's directory holds (docs/storage.md): the record, its
/// projections with `status` a link to `state`, the event log; no `holder.log` while the holder
/// had nothing to say, and no temporary file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_directory_holds_the_record_its_projections_and_the_log() {
    let hub = start();
    let client = hub.local();
    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    let done = exec(&client, &id, "echo stored").await;
    assert_eq!(done["output"], "stored", "{done}");
    let dir = hub
        .terminal_dir(&id)
        .unwrap_or_else(|| panic!("no directory for {id}"));
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{e}"))
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "cwd",
            "events.jsonl",
            "meta.json",
            "owner",
            "state",
            "status"
        ],
        "{}",
        dir.display()
    );
    let status = dir.join("status");
    let link = std::fs::read_link(&status).unwrap_or_else(|e| panic!("status: {e}"));
    assert_eq!(link, Path::new("state"));
    assert_eq!(
        std::fs::read_to_string(&status).unwrap_or_default(),
        "running\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_holds_output_back_loses_nothing_and_resumes_by_itself() {
    let hub = start();
    let client = hub.local();
    // This agent's terminals live on an 8 MiB file system, room for the whole log once the
    // filler is gone (the log's size depends on how the output was cut into events, which
    // depends on timing: with 4 MiB a slow run could fill it again); the others on the usual
    // disk.
    let agent_dir = hub
        .state_dir()
        .join(format!("home/{}/agent/full", super::own_uid()));
    std::fs::create_dir_all(&agent_dir).unwrap_or_else(|e| panic!("{e}"));
    let _tmpfs = Tmpfs::mount(&agent_dir, "8m");
    let id = create(&client, json!({ "agent": "full", "cwd": "/tmp" })).await;
    let other = create(&client, json!({ "cwd": "/tmp" })).await;
    let dir = hub
        .terminal_dir(&id)
        .unwrap_or_else(|| panic!("no directory for {id}"));
    // A native holder makes its holder.log only when it has something to say.
    assert!(
        !dir.join("holder.log").exists(),
        "an empty holder.log was made"
    );
    let filler = agent_dir.join("filler");
    fill(&filler, 256 * 1024);

    // About 2.9 MB of output (3.9 MB of log): far more than the disk has left.
    let started = exec_raw(
        &client,
        &id,
        json!({ "command": "seq 1 400000; echo done-$((6*7))", "async": true }),
    )
    .await;
    assert_eq!(started.status, 200, "{}", started.body);
    let stalled = wait_until("the terminal says its log refuses appends", || async {
        let now = info(&client, &id).await;
        now["storage_error"].is_string().then_some(now)
    })
    .await;
    assert_eq!(stalled["state"], "running", "{stalled}");

    // The rest of the server goes on.
    let fine = exec(&client, &other, "echo fine-$((6*7))").await;
    assert_eq!(fine["output"], "fine-42", "{fine}");
    let health = get(&client, "/v2/backends").await;
    assert_eq!(health.status, 200, "{}", health.body);

    // Space again: the log takes the held-back output by itself, and the command ends.
    std::fs::remove_file(&filler).unwrap_or_else(|e| panic!("{e}"));
    wait_until(
        "the command ends and the log takes appends again",
        || async {
            let now = info(&client, &id).await;
            (now["storage_error"].is_null() && now["running_command"].is_null()).then_some(())
        },
    )
    .await;
    let (bytes, types) = logged(&dir);
    let text = String::from_utf8_lossy(&bytes);
    let start = text.find("1\r\n2\r\n3\r\n").unwrap_or_default();
    let mut expected = 1u32;
    for line in text[start..].split("\r\n") {
        if line == "done-42" {
            break;
        }
        assert_eq!(line, expected.to_string(), "every line once, in order");
        expected += 1;
    }
    assert_eq!(expected, 400_001, "every line was logged");
    assert!(types.iter().all(|t| t != "log.repaired"), "{types:?}");
    let after = exec(&client, &id, "echo alive").await;
    assert_eq!(after["output"], "alive", "{after}");
    // The holder said so in its own log, made when the disk refused (its first line may not
    // have fit then).
    let said = std::fs::read_to_string(dir.join("holder.log")).unwrap_or_default();
    assert!(said.contains("takes appends again"), "holder.log: {said:?}");
}
