//! Faults: clients that vanish mid-frame and reconnect in storms (F5), a program that exits
//! while input waits for it (F6), resizes that race the program and each other (F10).

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use ptyhub_client::{LiveMessage, Method};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use super::{Producer, assert_exact, figure, log_bytes, open_fds, scaled, sha256};
use crate::suite::{create, exec, exec_raw, get, post, start};
use ptyhub_test_support::{data, default_timeout, wait_until};

/// F5: (a) a client that announces a large frame, sends part of it and resets the
/// connection costs the server nothing once it is gone; (c) a watcher that drops its
/// connection again and again while output flows, resuming each time with `since_seq`, gets
/// every byte exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn f5_dropped_clients_cost_nothing_and_a_reconnect_storm_is_exact() {
    let hub = start();
    let client = hub.http();
    let pid = hub.server_pid().unwrap_or(0);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let id = create(&client, json!({ "id": "storm" })).await;
    exec(&client, &id, "true").await;
    // The screen reads the log through a descriptor of its own, opened once it first applies
    // output (its thread lets output settle first): a read of the screen opens it now, so the
    // count below is the server's at rest.
    get(&client, &format!("/v2/pty/sessions/{id}/screen")).await;
    let fds = open_fds(pid);

    // (a) Half a frame, then a reset.
    let torn = 10;
    for _ in 0..torn {
        let mut stream = tokio::net::TcpStream::connect(hub.addr.as_str())
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        let request = format!(
            "GET /v2/pty/sessions/{id}/ws?mode=watch HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
            addr = hub.addr,
            token = hub.token,
        );
        stream
            .write_all(request.as_bytes())
            .await
            .unwrap_or_else(|e| panic!("write: {e}"));
        // A masked binary frame announcing 1 MiB (64-bit length), then 100 KB of it.
        let mut frame = vec![0x82, 0xff];
        frame.extend_from_slice(&(1024u64 * 1024).to_be_bytes());
        frame.extend_from_slice(&[1, 2, 3, 4]);
        frame.extend(std::iter::repeat_n(0u8, 100 * 1000));
        let _ = stream.write_all(&frame).await;
        // SO_LINGER 0: the close is a reset.
        #[allow(
            deprecated,
            reason = "a zero linger resets at once; it never blocks the drop"
        )]
        let _ = stream.set_linger(Some(Duration::ZERO));
        drop(stream);
    }
    let fds_after = wait_until("the torn connections are freed", || async {
        let now = open_fds(pid);
        (now <= fds).then_some(now)
    })
    .await;
    let after = exec(&client, &id, "echo still-$((1+1))").await;
    assert_eq!(after["output"], "still-2", "{after}");
    figure(
        "F5",
        "connections reset mid-frame; server fds before / after",
        format!("{torn}; {fds} / {fds_after}"),
    );

    // (c) The storm.
    let cycles = scaled(20, 50);
    let bytes = scaled(2, 16) * 1024 * 1024;
    let producer = Producer::new(dir.path(), "f5", bytes);
    let slow = format!(
        "stty -opost; printf '<<B''EGIN-f5>>'; head -c {bytes} /dev/urandom | base64 | tee {copy} | while IFS= read -r line; do printf '%s\\n' \"$line\"; done; printf '<<E''ND-f5>>'; stty opost",
        copy = dir.path().join("truth-f5").display(),
    );
    let start_seq = data(&get(&client, &format!("/v2/pty/sessions/{id}")).await)["last_seq"]
        .as_u64()
        .unwrap_or(0);
    let run = tokio::spawn({
        let client = client.clone();
        let id = id.clone();
        async move {
            exec_raw(
                &client,
                &id,
                json!({ "command": slow, "timeout": 600, "tail": 1 }),
            )
            .await
        }
    });
    let mut got = Vec::new();
    let mut last = start_seq;
    let mut reconnects = 0;
    let begun = Instant::now();
    loop {
        let path = format!("/v2/pty/sessions/{id}/ws?mode=watch&since_seq={last}");
        let mut socket = client
            .websocket(&path)
            .await
            .unwrap_or_else(|e| panic!("websocket {path}: {e}"));
        reconnects += 1;
        // Read a few output frames (more in the last cycles), then drop the connection
        // without a close.
        let frames_this_time = if reconnects < cycles { 3 } else { usize::MAX };
        let mut frames = 0;
        let mut ended = false;
        while frames < frames_this_time {
            let message = tokio::time::timeout(default_timeout(), socket.next())
                .await
                .unwrap_or_else(|_| panic!("no frame within the timeout"));
            let text = match message {
                Some(Ok(LiveMessage::Text(text))) => text,
                // Ended by the server (an error frame, then a close): never resumed from.
                Some(Ok(LiveMessage::Close(close))) => {
                    panic!("the server closed the watcher after seq {last}: {close:?}")
                }
                None | Some(Err(_)) => panic!("the watcher's connection ended after seq {last}"),
                Some(Ok(_)) => continue,
            };
            let frame: Value = serde_json::from_str(text.as_str()).unwrap_or_default();
            if !matches!(frame["type"].as_str(), Some("output" | "restore_output")) {
                continue;
            }
            let seq = frame["seq"].as_u64().unwrap_or(0);
            assert!(seq > last, "seq went back or repeated: {seq} after {last}");
            last = seq;
            got.extend_from_slice(frame["data"].as_str().unwrap_or_default().as_bytes());
            frames += 1;
            if producer.has_ended(&got, 64 * 1024) {
                ended = true;
                break;
            }
        }
        drop(socket);
        if ended {
            break;
        }
    }
    let answer = run.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(answer.status, 200, "{}", answer.body);
    let truth = sha256(&producer.truth());
    assert_exact(&producer, &truth, &got, "the storm's watcher");
    assert_exact(&producer, &truth, &log_bytes(&client, &id).await, "the log");
    figure(
        "F5",
        "reconnects with since_seq during output, MiB printed",
        format!("{reconnects}, {}", bytes * 4 / 3 / (1024 * 1024)),
    );
    figure(
        "F5",
        "stream byte-exact (sha256), seq strictly increasing",
        format!("yes, in {:.1} s", begun.elapsed().as_secs_f64()),
    );
    close(&client, &id).await;
}

async fn close(client: &ptyhub_client::Client, id: &str) {
    let closed = client
        .send(Method::DELETE, &format!("/v2/pty/sessions/{id}"), None)
        .await
        .unwrap_or_else(|e| panic!("close {id}: {e}"));
    assert_eq!(closed.status, 200, "{}", closed.body);
}

/// F6: the program exits while input waits on a full queue: the next input is refused at
/// once with a code, the exit is recorded exactly once with its code, and the output before
/// it is all in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f6_a_program_that_exits_with_input_pending_is_reported_once() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "id": "leaving" })).await;
    let started = post(
        &client,
        &format!("/v2/pty/sessions/{id}/exec"),
        json!({ "command": "stty raw -echo; echo before-exit; sleep 1; exit 7", "async": true }),
    )
    .await;
    assert_eq!(started.status, 200, "{}", started.body);
    let begun = Instant::now();
    let chunk = "y".repeat(1024 * 1024);
    let mut accepted = 0;
    let mut busy = 0;
    let refusal = loop {
        let answer = post(
            &client,
            &format!("/v2/pty/sessions/{id}/input"),
            json!({ "input": chunk }),
        )
        .await;
        match answer.status {
            200 => accepted += 1,
            409 if answer.body["error"]["code"] == "BUSY" => {
                busy += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            _ => break answer,
        }
        assert!(
            begun.elapsed() < default_timeout(),
            "input was still taken {:?} after the program's exit",
            begun.elapsed()
        );
    };
    let refused_after = begun.elapsed();
    assert_eq!(refusal.status, 409, "{}", refusal.body);
    assert_eq!(
        refusal.body["error"]["code"], "SESSION_NOT_RUNNING",
        "{}",
        refusal.body
    );
    let info = wait_until("the exit is recorded", || async {
        let info = get(&client, &format!("/v2/pty/sessions/{id}")).await;
        let info = data(&info).clone();
        (info["state"] == "exited").then_some(info)
    })
    .await;
    assert_eq!(info["exit_code"], 7, "{info}");
    let mut exits = Vec::new();
    let mut after = 0;
    loop {
        let page = get(
            &client,
            &format!("/v2/pty/sessions/{id}/events?after_seq={after}&limit=1000"),
        )
        .await;
        let page = data(&page).clone();
        exits.extend(
            page["events"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["type"] == "process.exit")
                .cloned(),
        );
        after = page["next_seq"].as_u64().unwrap_or(after);
        if page["has_more"] != true {
            break;
        }
    }
    assert_eq!(exits.len(), 1, "one exit event: {exits:?}");
    assert_eq!(exits[0]["exit_code"], 7, "{exits:?}");
    let text = String::from_utf8_lossy(&log_bytes(&client, &id).await).into_owned();
    assert!(
        text.contains("before-exit"),
        "the output before the exit is in the log"
    );
    figure(
        "F6",
        "inputs accepted / refused BUSY before the exit",
        format!("{accepted} / {busy}"),
    );
    figure(
        "F6",
        "s from the exec to the refusal (the program exits after 1 s)",
        format!("{:.2}", refused_after.as_secs_f64()),
    );
    figure("F6", "exit events in the log", exits.len());
}

/// F10: (a) a terminal created at a size reports it to its first command; (c) many resizes
/// while output flows end at the last size asked, with every byte logged; (d) a program
/// that counts SIGWINCH sees one for each change.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn f10_resize_races_end_at_the_last_size_with_sigwinch_delivered() {
    let hub = start();
    let client = hub.http();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let id = create(&client, json!({ "id": "sized", "cols": 132, "rows": 43 })).await;
    let first = exec(&client, &id, "stty size").await;
    assert_eq!(first["output"], "43 132", "{first}");

    // (c) Resizes while the producer floods.
    let bytes = scaled(2, 16) * 1024 * 1024;
    let producer = Producer::new(dir.path(), "f10", bytes);
    let run = tokio::spawn({
        let client = client.clone();
        let id = id.clone();
        let command = producer.command();
        async move {
            exec_raw(
                &client,
                &id,
                json!({ "command": command, "timeout": 600, "tail": 1 }),
            )
            .await
        }
    });
    let resizes = scaled(300, 3000);
    let mut last = (0, 0);
    for i in 0..resizes {
        last = (40 + (i * 7) % 160, 10 + (i * 3) % 50);
        let answer = post(
            &client,
            &format!("/v2/pty/sessions/{id}/resize"),
            json!({ "cols": last.0, "rows": last.1 }),
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        if run.is_finished() {
            break;
        }
    }
    let answer = run.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(answer.status, 200, "{}", answer.body);
    let size = exec(&client, &id, "stty size").await;
    assert_eq!(size["output"], format!("{} {}", last.1, last.0), "{size}");
    let screen = data(&get(&client, &format!("/v2/pty/sessions/{id}/snapshot")).await).clone();
    assert_eq!(
        screen["cols"], last.0,
        "the screen's size: {}",
        screen["cols"]
    );
    let truth = sha256(&producer.truth());
    assert_exact(&producer, &truth, &log_bytes(&client, &id).await, "the log");
    figure(
        "F10",
        "resizes during the flood; final size right; log byte-exact",
        format!("{resizes}; yes; yes"),
    );

    // (d) A program that counts SIGWINCH, told of each change before the next.
    let counter = dir.path().join("winch");
    let started = exec_raw(
        &client,
        &id,
        // A program of its own (the foreground group gets SIGWINCH), waiting in a way a trap
        // interrupts.
        json!({ "command": format!("bash -c 'n=0; trap \"n=\\$((n+1)); echo \\$n > {c}\" WINCH; echo 0 > {c}; while :; do sleep 0.05 & wait $!; done'", c = counter.display()), "async": true }),
    )
    .await;
    assert_eq!(started.status, 200, "{}", started.body);
    wait_until("the program counts", || async {
        counter.exists().then_some(())
    })
    .await;
    let changes = 5;
    for i in 1..=changes {
        let answer = post(
            &client,
            &format!("/v2/pty/sessions/{id}/resize"),
            json!({ "cols": 80 + i, "rows": 24 + i }),
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let deadline = Instant::now() + default_timeout();
        loop {
            let n: usize = std::fs::read_to_string(&counter)
                .unwrap_or_default()
                .trim()
                .parse()
                .unwrap_or(0);
            if n >= i {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the program counted {n} of {i} size changes; its processes (tpgid is the \
                 terminal's foreground group):\n{}",
                signal_facts(&counter.display().to_string())
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
    figure(
        "F10",
        "distinct size changes / SIGWINCH counted",
        format!("{changes} / {changes}"),
    );
    close(&client, &id).await;
}

/// Each process whose arguments name `needle`: its groups, the terminal's foreground group,
/// state, wait channel and signal masks (what a lost signal leaves to read).
fn signal_facts(needle: &str) -> String {
    let table = std::process::Command::new("ps")
        .args(["-eo", "pid,ppid,pgid,sid,tpgid,stat,wchan:24,args"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|e| format!("ps: {e}"));
    let mut facts = String::new();
    for line in table.lines().filter(|l| l.contains(needle)) {
        facts.push_str(line);
        facts.push('\n');
        let pid = line.split_whitespace().next().unwrap_or("0");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        for field in status.lines().filter(|l| {
            ["SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"]
                .iter()
                .any(|k| l.starts_with(k))
        }) {
            facts.push_str("    ");
            facts.push_str(field);
            facts.push('\n');
        }
    }
    facts
}

/// F1: the server is killed with `kill -9` again and again while a terminal prints at full
/// speed; after each restart the terminal is found, and in the end its log holds exactly the
/// producer's bytes, every line parsing, `seq` contiguous.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn f1_repeated_kill_9_of_the_server_mid_stream_loses_nothing() {
    let mut hub = start();
    let client = hub.http();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let kills = scaled(3, 20);
    let bytes = scaled(3, 24) * 1024 * 1024;
    let id = create(&client, json!({ "id": "crashing" })).await;
    // Paced (about 1 MiB/s), so that every kill lands while it writes.
    let producer = Producer::paced(dir.path(), "f1", 64 * 1024, bytes / (64 * 1024), 0.0625);
    let started = exec_raw(
        &client,
        &id,
        json!({ "command": producer.command(), "async": true }),
    )
    .await;
    assert_eq!(started.status, 200, "{}", started.body);
    let mut killed_at = Vec::new();
    for kill in 1..=kills {
        // Each kill lands while the producer writes (a share of the bytes further on).
        let share = bytes * 4 / 3 * kill / (kills + 1);
        wait_until("the producer is further on", || async {
            (producer.written() >= share).then_some(())
        })
        .await;
        killed_at.push(producer.written());
        hub.kill_server();
        hub.restart();
        let info = get(&hub.http(), &format!("/v2/pty/sessions/{id}")).await;
        assert_eq!(info.status, 200, "after kill {kill}: {}", info.body);
    }
    let client = hub.http();
    let truth = wait_until("the producer ends", || async {
        // The end marker is printed once `tee` has exited, so a log that has it means the
        // copy is whole: read the copy only then (read before, it may still have grown).
        producer.between(&log_bytes(&client, &id).await)?;
        Some(sha256(&producer.truth()))
    })
    .await;
    assert_exact(
        &producer,
        &truth,
        &log_bytes(&client, &id).await,
        "the log after the kills",
    );
    // Every line of every segment parses and `seq` goes up by one.
    let dir_of = hub
        .terminal_dir(&id)
        .unwrap_or_else(|| panic!("no terminal dir"));
    let mut files: Vec<_> = std::fs::read_dir(&dir_of)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("events"))
        })
        .collect();
    files.sort();
    let mut seqs = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{e}"));
        for line in text.lines() {
            let event: Value = serde_json::from_str(line).unwrap_or_else(|e| {
                panic!(
                    "{}: a line does not parse ({e}): {line:.80}",
                    file.display()
                )
            });
            seqs.push(event["seq"].as_u64().unwrap_or(0));
        }
    }
    seqs.sort_unstable();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "seq is contiguous"
    );
    // The end marker is in the log a moment before the command's end (its `stty opost`, the
    // prompt): an agent waits for the command it started, through a server that is not the
    // one it started it with.
    let waited = post(
        &client,
        &format!("/v2/pty/sessions/{id}/wait"),
        json!({ "seconds": 60 }),
    )
    .await;
    assert_eq!(waited.status, 200, "{}", waited.body);
    assert_eq!(data(&waited)["status"], "completed", "{}", waited.body);
    assert_eq!(data(&waited)["exit_code"], 0, "{}", waited.body);
    let after = exec(&client, &id, "echo alive").await;
    assert_eq!(after["output"], "alive", "{after}");
    figure(
        "F1",
        "kill -9 of the server mid-stream, MiB printed",
        format!("{kills}, {}", bytes * 4 / 3 / (1024 * 1024)),
    );
    figure(
        "F1",
        "killed when the producer had written (bytes)",
        format!("{killed_at:?}"),
    );
    figure(
        "F1",
        "log byte-exact (sha256), lines parsing, seq contiguous",
        format!("yes, {} lines, yes", seqs.len()),
    );
    close(&client, &id).await;
}

/// F2: a holder killed mid-write leaves a torn line, and the disk a run of NULs after it (what
/// a crash with delayed allocation leaves). The next instance of the terminal cuts them
/// before its first append, records the cut as a `log.repaired` event, and every line parses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f2_a_torn_nul_padded_log_is_repaired_and_the_repair_recorded() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "id": "torn" })).await;
    exec(&client, &id, "echo before-the-tear").await;
    let holder = hub.holder_pids()[0];
    ptyhub_test_support::kill_9(holder);
    wait_until("the terminal notices its holder is gone", || async {
        let info = get(&client, &format!("/v2/pty/sessions/{id}")).await;
        (data(&info)["state"] != "running").then_some(())
    })
    .await;
    let log = hub
        .terminal_dir(&id)
        .unwrap_or_else(|| panic!("no terminal dir"))
        .join("events.jsonl");
    let mut bytes = std::fs::read(&log).unwrap_or_else(|e| panic!("{e}"));
    let whole = bytes.len();
    bytes.extend_from_slice(br#"{"seq":99999,"ts":1,"type":"pty.output","data_b64":"aGVsbG8"#);
    bytes.extend(std::iter::repeat_n(0u8, 512));
    let torn = bytes.len() - whole;
    std::fs::write(&log, &bytes).unwrap_or_else(|e| panic!("{e}"));

    // Closed, then the same id again: a new instance appends to the same log.
    close(&client, &id).await;
    let again = create(&client, json!({ "id": "torn" })).await;
    assert_eq!(again, id);
    let after = exec(&client, &id, "echo after-the-repair").await;
    assert_eq!(after["output"], "after-the-repair", "{after}");
    let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{e}"));
    let events: Vec<Value> = text
        .lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("a line does not parse ({e}): {line:.100}"))
        })
        .collect();
    let repairs: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "log.repaired")
        .collect();
    assert_eq!(repairs.len(), 1, "one repair recorded: {repairs:?}");
    assert_eq!(repairs[0]["cut_bytes"], torn as u64, "{repairs:?}");
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| e["seq"].as_u64().unwrap_or(0))
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "seq is contiguous: {seqs:?}"
    );
    let replay = String::from_utf8_lossy(&log_bytes(&client, &id).await).into_owned();
    assert!(replay.contains("before-the-tear") && replay.contains("after-the-repair"));
    figure(
        "F2",
        "torn bytes (a partial line and 512 NULs) cut and recorded",
        torn,
    );
    figure("F2", "lines parsing after the repair", events.len());
    close(&client, &id).await;
}
