//! Load: many terminals at full speed with watchers (L1), many watchers on one terminal with
//! late joiners (L3), a watcher that stops reading (L4), churn across every surface (L6) and
//! input a program reads to the end (L7 b).

use std::time::{Duration, Instant};

use futures_util::SinkExt;
use ptyhub_client::{Client, LiveMessage, Method};
use serde_json::json;

use super::{
    Canary, Producer, assert_exact, figure, log_bytes, open_fds, proc_status, read_to_end, scaled,
    sha256, start_keeping, watcher,
};
use crate::suite::{create, exec, exec_raw, start};
use ptyhub_test_support::{data, wait_until};

/// Runs `producer` in terminal `id` to its end (exec waits for it).
async fn produce(client: Client, id: String, producer: &Producer) -> Duration {
    let started = Instant::now();
    let answer = exec_raw(
        &client,
        &id,
        json!({ "command": producer.command(), "timeout": 600, "tail": 1 }),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(data(&answer)["exit_code"], 0, "{}", answer.body);
    started.elapsed()
}

/// L1: N terminals print M bytes each at full speed at once, 10 of them watched; meanwhile an
/// idle terminal answers exec. Every replay and every watcher equals its producer's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn l1_a_firehose_of_terminals_loses_no_byte_and_leaves_exec_answering() {
    let hub = ptyhub_test_support::Ptyhub::start_with(
        env!("CARGO_BIN_EXE_ptyhub"),
        &["--max-terminals", "64"],
    );
    let client = hub.http();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let terminals = 20;
    let bytes = scaled(1, 20) * 1024 * 1024;
    let canary = create(&client, json!({ "id": "canary" })).await;
    exec(&client, &canary, "true").await;
    let mut ids = Vec::new();
    for i in 0..terminals {
        ids.push(create(&client, json!({ "id": format!("fire-{i}") })).await);
    }
    let producers: Vec<Producer> = (0..terminals)
        .map(|i| Producer::new(dir.path(), &format!("l1-{i}"), bytes))
        .collect();
    let mut watchers = Vec::new();
    for (i, id) in ids.iter().enumerate().take(10) {
        watchers.push((i, watcher(&client, id, "").await));
    }
    let rss_before = proc_status(hub.server_pid().unwrap_or(0), "VmRSS");
    // Two canaries, each a process of its own as an agent is: ptyhub's exec on the idle
    // terminal, and a bare PTY beside it under the same flood (what the machine costs).
    let url = format!("http://{}", hub.addr);
    let canaries = [
        Canary::start(dir.path(), &["ptyhub", &url, &hub.token, &canary]).await,
        Canary::start(dir.path(), &["bare"]).await,
    ];
    let started = Instant::now();
    let mut runs = Vec::new();
    for (id, producer) in ids.iter().zip(producers.iter()) {
        let client = client.clone();
        let id = id.clone();
        let command = producer.command();
        runs.push(tokio::spawn(async move {
            let producer_started = Instant::now();
            let answer = exec_raw(
                &client,
                &id,
                json!({ "command": command, "timeout": 600, "tail": 1 }),
            )
            .await;
            assert_eq!(answer.status, 200, "{}", answer.body);
            assert_eq!(data(&answer)["exit_code"], 0, "{}", answer.body);
            producer_started.elapsed()
        }));
    }
    let mut reads = Vec::new();
    for (i, mut socket) in watchers {
        let producer = Producer::new(dir.path(), &format!("l1-{i}"), bytes);
        reads.push(tokio::spawn(async move {
            (i, read_to_end(&mut socket, &producer).await)
        }));
    }
    let mut slowest = Duration::ZERO;
    for run in runs {
        slowest = slowest.max(run.await.unwrap_or_else(|e| panic!("{e}")));
    }
    let elapsed = started.elapsed();
    let [agent, bare] = canaries;
    let (agent, bare) = (agent.finish().await, bare.finish().await);
    let peak = proc_status(hub.server_pid().unwrap_or(0), "VmHWM");
    for read in reads {
        let (i, got) = read.await.unwrap_or_else(|e| panic!("{e}"));
        let truth = sha256(&producers[i].truth());
        assert_exact(&producers[i], &truth, &got, &format!("watcher of fire-{i}"));
    }
    for (id, producer) in ids.iter().zip(producers.iter()) {
        let truth = sha256(&producer.truth());
        assert_exact(producer, &truth, &log_bytes(&client, id).await, id);
    }
    let total = (terminals * bytes * 4 / 3) as f64 / (1024.0 * 1024.0);
    figure(
        "L1",
        "terminals x MiB each (random bytes, printed as base64)",
        format!("{terminals} x {}", bytes / (1024 * 1024)),
    );
    figure(
        "L1",
        "all producers done in s",
        format!(
            "{:.2} (slowest {:.2}), {:.1} MiB/s in all",
            elapsed.as_secs_f64(),
            slowest.as_secs_f64(),
            total / elapsed.as_secs_f64()
        ),
    );
    figure(
        "L1",
        "replays and watchers equal to their producers (sha256)",
        format!("{terminals} replays, 10 watchers"),
    );
    figure(
        "L1",
        "canary exec of `true` on an idle terminal (an agent's own process, one connection): n, p50 / p99 / max ms, slowest at s, [at s, ms] over 100 ms",
        agent.summary(),
    );
    figure(
        "L1",
        "bare PTY canary beside it (true + echo typed into bash): n, p50 / p99 / max ms, slowest at s, [at s, ms] over 100 ms",
        bare.summary(),
    );
    figure(
        "L1",
        "server RSS before / peak MiB",
        format!(
            "{:.1} / {:.1}",
            rss_before as f64 / 1024.0,
            peak as f64 / 1024.0
        ),
    );
    for id in ids.iter().chain([&canary]) {
        close(&client, id).await;
    }
}

/// Follows a terminal's log through the events route, from `after`, until the producer's
/// end marker is in it; returns every output byte.
async fn tail_to_end(client: &Client, id: &str, after: u64, producer: &Producer) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut after = after;
    let deadline = Instant::now() + ptyhub_test_support::default_timeout() * 4;
    loop {
        let page = crate::suite::get(
            client,
            &format!("/v2/pty/sessions/{id}/events?after_seq={after}&limit=1000"),
        )
        .await;
        assert_eq!(page.status, 200, "{}", page.body);
        let page = data(&page).clone();
        let before = bytes.len();
        super::output_of_page(&page, &mut bytes);
        after = page["next_seq"].as_u64().unwrap_or(after);
        if producer.has_ended(&bytes, bytes.len() - before) {
            return bytes;
        }
        assert!(
            Instant::now() < deadline,
            "the tailer saw no end ({} bytes)",
            bytes.len()
        );
        if page["has_more"] != true {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn close(client: &Client, id: &str) {
    let closed = client
        .send(Method::DELETE, &format!("/v2/pty/sessions/{id}"), None)
        .await
        .unwrap_or_else(|e| panic!("close {id}: {e}"));
    assert_eq!(closed.status, 200, "{}", closed.body);
}

/// L3: many watchers on one terminal, some joining mid-stream from `since_seq=0`: each gets
/// exactly the producer's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn l3_every_watcher_and_late_joiner_gets_every_byte() {
    let watchers = scaled(20, 100);
    let late = scaled(5, 20);
    let bytes = scaled(4, 40) * 1024 * 1024;
    // Late joiners read from `since_seq=0`, through the baseline run too.
    let hub = start_keeping(2 * bytes * 4 / 3);
    let client = hub.http();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let id = create(&client, json!({ "id": "fan" })).await;

    // Alone first: the baseline.
    let alone = Producer::new(dir.path(), "l3-alone", bytes);
    let alone_time = produce(client.clone(), id.clone(), &alone).await;

    let producer = Producer::new(dir.path(), "l3", bytes);
    let mut reads = Vec::new();
    for _ in 0..watchers {
        let mut socket = watcher(&client, &id, "").await;
        let tag = Producer::new(dir.path(), "l3", bytes);
        reads.push(tokio::spawn(
            async move { read_to_end(&mut socket, &tag).await },
        ));
    }
    let tailers = scaled(2, 10);
    let start_seq =
        data(&crate::suite::get(&client, &format!("/v2/pty/sessions/{id}")).await)["last_seq"]
            .as_u64()
            .unwrap_or(0);
    let mut tails = Vec::new();
    for _ in 0..tailers {
        let client = client.clone();
        let id = id.clone();
        let tag = Producer::new(dir.path(), "l3", bytes);
        tails.push(tokio::spawn(async move {
            tail_to_end(&client, &id, start_seq, &tag).await
        }));
    }
    let run = tokio::spawn({
        let client = client.clone();
        let id = id.clone();
        let producer = Producer::new(dir.path(), "l3", bytes);
        async move { produce(client, id, &producer).await }
    });
    // Late joiners: from the very start of the log, while the producer runs.
    let half = bytes * 4 / 3 / 2;
    wait_until("the producer is half way", || async {
        (producer.written() > half || run.is_finished()).then_some(())
    })
    .await;
    for _ in 0..late {
        let mut socket = watcher(&client, &id, "&since_seq=0").await;
        let tag = Producer::new(dir.path(), "l3", bytes);
        reads.push(tokio::spawn(
            async move { read_to_end(&mut socket, &tag).await },
        ));
    }
    let fanned_time = run.await.unwrap_or_else(|e| panic!("{e}"));
    let truth = sha256(&producer.truth());
    for (i, read) in reads.into_iter().enumerate() {
        let got = read.await.unwrap_or_else(|e| panic!("{e}"));
        assert_exact(&producer, &truth, &got, &format!("watcher {i}"));
    }
    for (i, tail) in tails.into_iter().enumerate() {
        let got = tail.await.unwrap_or_else(|e| panic!("{e}"));
        assert_exact(&producer, &truth, &got, &format!("REST tailer {i}"));
    }
    figure(
        "L3",
        "watchers (late joiners from since_seq=0), REST tailers",
        format!("{watchers} ({late}), {tailers}"),
    );
    figure("L3", "MiB printed", bytes * 4 / 3 / (1024 * 1024));
    figure(
        "L3",
        "producer s alone / with the watchers",
        format!(
            "{:.2} / {:.2} ({:.2}x)",
            alone_time.as_secs_f64(),
            fanned_time.as_secs_f64(),
            fanned_time.as_secs_f64() / alone_time.as_secs_f64()
        ),
    );
    figure("L3", "watchers byte-exact (sha256)", watchers + late);
    close(&client, &id).await;
}

/// L4: a watcher that reads nothing holds back neither the producer nor the server's memory;
/// when it reads again it gets every byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn l4_a_watcher_that_stops_reading_costs_nothing_and_resumes_exactly() {
    let bytes = scaled(8, 48) * 1024 * 1024;
    // The stalled watcher reads on from the log, which keeps what it missed.
    let hub = start_keeping(2 * bytes * 4 / 3);
    let client = hub.http();
    let pid = hub.server_pid().unwrap_or(0);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let id = create(&client, json!({ "id": "slow" })).await;
    let alone = Producer::new(dir.path(), "l4-alone", bytes);
    let alone_time = produce(client.clone(), id.clone(), &alone).await;

    let producer = Producer::new(dir.path(), "l4", bytes);
    let mut stalled = watcher(&client, &id, "").await;
    let mut fast = watcher(&client, &id, "").await;
    let fast_read = tokio::spawn({
        let tag = Producer::new(dir.path(), "l4", bytes);
        async move { read_to_end(&mut fast, &tag).await }
    });
    let rss_before = proc_status(pid, "VmRSS");
    // The producer ends although one watcher reads nothing at all.
    let stalled_time = produce(client.clone(), id.clone(), &producer).await;
    let rss_after = proc_status(pid, "VmRSS");
    let truth = sha256(&producer.truth());
    let got = fast_read.await.unwrap_or_else(|e| panic!("{e}"));
    assert_exact(&producer, &truth, &got, "the fast watcher");
    let resumed = read_to_end(&mut stalled, &producer).await;
    assert_exact(
        &producer,
        &truth,
        &resumed,
        "the watcher that stopped reading",
    );
    let _ = stalled.close(None).await;
    let grown = rss_after.saturating_sub(rss_before) as f64 / 1024.0;
    figure("L4", "MiB printed", bytes * 4 / 3 / (1024 * 1024));
    figure(
        "L4",
        "producer s alone / with a watcher that reads nothing",
        format!(
            "{:.2} / {:.2} ({:.2}x)",
            alone_time.as_secs_f64(),
            stalled_time.as_secs_f64(),
            stalled_time.as_secs_f64() / alone_time.as_secs_f64()
        ),
    );
    figure(
        "L4",
        "server RSS growth meanwhile MiB",
        format!("{grown:.1}"),
    );
    figure(
        "L4",
        "both watchers byte-exact after the stalled one read on",
        "yes",
    );
    // docs/websocket.md's budget for a connection (~1.5 MiB) plus the 16 MiB live buffer and
    // allocator slack: a connection that held what it was not sent would grow by the flood.
    assert!(
        grown < 48.0,
        "the server grew by {grown:.1} MiB while a watcher read nothing"
    );
    close(&client, &id).await;
}

/// L6: create, run, close, over and over, across REST, WebSocket, MCP and the CLI: the
/// server's fds, threads and processes come back to where they were, memory settles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l6_churn_across_every_surface_returns_to_the_baseline() {
    let hub = start();
    let client = hub.http();
    let pid = hub.server_pid().unwrap_or(0);
    let cycles = scaled(12, 125);
    // One round of each first: whatever is created once (pools, caches) is in the baseline.
    churn_round(&hub, &client, 0).await;
    settle(&hub, &client).await;
    let fds = open_fds(pid);
    let threads = proc_status(pid, "Threads");
    let rss = proc_status(pid, "VmRSS");
    let started = Instant::now();
    for round in 1..=cycles {
        churn_round(&hub, &client, round).await;
    }
    let elapsed = started.elapsed();
    settle(&hub, &client).await;
    let fds_after = wait_until("the server's fds are back to the baseline", || async {
        let now = open_fds(pid);
        (now <= fds).then_some(now)
    })
    .await;
    let threads_after = wait_until("the server's threads are back", || async {
        let now = proc_status(pid, "Threads");
        (now <= threads).then_some(now)
    })
    .await;
    let rss_after = proc_status(pid, "VmRSS");
    figure(
        "L6",
        "create/run/close cycles (REST, WebSocket, MCP, CLI each)",
        cycles,
    );
    figure(
        "L6",
        "cycles per s",
        format!("{:.1}", (cycles * 4) as f64 / elapsed.as_secs_f64()),
    );
    figure(
        "L6",
        "server fds before / after",
        format!("{fds} / {fds_after}"),
    );
    figure(
        "L6",
        "server threads before / after",
        format!("{threads} / {threads_after}"),
    );
    figure(
        "L6",
        "server RSS before / after MiB",
        format!(
            "{:.1} / {:.1}",
            rss as f64 / 1024.0,
            rss_after as f64 / 1024.0
        ),
    );
    let grown = rss_after.saturating_sub(rss) as f64 / 1024.0;
    assert!(
        grown < 24.0,
        "the server kept {grown:.1} MiB after {cycles} rounds of churn"
    );
}

/// Waits until the server has no live terminal and no holder of this hub runs.
async fn settle(hub: &ptyhub_test_support::Ptyhub, client: &Client) {
    wait_until("no terminal is live", || async {
        crate::suite::live_ids(client)
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    wait_until("every holder ended", || async {
        hub.holder_pids()
            .into_iter()
            .all(|p| !ptyhub_test_support::is_alive(p))
            .then_some(())
    })
    .await;
}

/// One terminal created, used and closed through each surface.
async fn churn_round(hub: &ptyhub_test_support::Ptyhub, client: &Client, round: usize) {
    // REST.
    let id = create(client, json!({ "id": format!("rest-{round}") })).await;
    let ran = exec(client, &id, "echo rest-$((1+1))").await;
    assert_eq!(ran["output"], "rest-2", "{ran}");
    close(client, &id).await;

    // WebSocket: an anonymous terminal lives as long as its connection.
    let mut socket = client
        .websocket("/v2/pty/ws")
        .await
        .unwrap_or_else(|e| panic!("websocket: {e}"));
    socket
        .send(LiveMessage::Text(
            json!({ "type": "input", "data": "echo w''s-ok\r" })
                .to_string()
                .into(),
        ))
        .await
        .unwrap_or_else(|e| panic!("send: {e}"));
    let mut seen = String::new();
    while !seen.contains("ws-ok") {
        match tokio::time::timeout(
            ptyhub_test_support::default_timeout(),
            futures_util::StreamExt::next(&mut socket),
        )
        .await
        {
            Ok(Some(Ok(LiveMessage::Text(text)))) => seen.push_str(text.as_str()),
            Ok(Some(Ok(_))) => {}
            other => panic!("the anonymous terminal ended early: {other:?} after {seen}"),
        }
    }
    let _ = socket.close(None).await;
    drop(socket);

    // MCP over HTTP.
    let addr = hub.addr.as_str();
    let opened = crate::suite::mcp::mcp_call(
        addr,
        "POST",
        &hub.token,
        None,
        crate::suite::mcp::INITIALIZE,
    )
    .await;
    assert_eq!(opened.status, 200, "{}", opened.body);
    let session = opened
        .header("mcp-session-id")
        .unwrap_or_else(|| panic!("no MCP session id"))
        .to_owned();
    let initialized = crate::suite::mcp::mcp_call(
        addr,
        "POST",
        &hub.token,
        Some(&session),
        crate::suite::mcp::INITIALIZED,
    )
    .await;
    assert_eq!(initialized.status, 202, "{}", initialized.body);
    let mcp_id = format!("mcp-{round}");
    for (n, (tool, arguments, expect)) in [
        ("terminal_open", json!({ "id": mcp_id }), mcp_id.as_str()),
        (
            "terminal_exec",
            json!({ "id": mcp_id, "command": "echo mcp-$((2+2))" }),
            "mcp-4",
        ),
        ("terminal_close", json!({ "id": mcp_id }), mcp_id.as_str()),
    ]
    .into_iter()
    .enumerate()
    {
        let call = json!({ "jsonrpc": "2.0", "id": 10 + n, "method": "tools/call", "params": { "name": tool, "arguments": arguments } });
        let answer = crate::suite::mcp::mcp_call(
            addr,
            "POST",
            &hub.token,
            Some(&session),
            &call.to_string(),
        )
        .await;
        assert_eq!(answer.status, 200, "{tool}: {}", answer.body);
        assert!(answer.body.contains(expect), "{tool}: {}", answer.body);
        assert!(
            !answer.body.contains("\"isError\":true"),
            "{tool}: {}",
            answer.body
        );
    }
    let ended = crate::suite::mcp::mcp_call(addr, "DELETE", &hub.token, Some(&session), "").await;
    assert!(
        ended.status < 300,
        "DELETE of the MCP session: {}",
        ended.status
    );

    // The CLI over the local socket.
    let cli_id = format!("cli-{round}");
    for args in [
        vec!["terminal", "create", "churn", "--id", cli_id.as_str()],
        vec![
            "terminal",
            "exec",
            cli_id.as_str(),
            "--",
            "echo cli-$((3+3))",
        ],
        vec!["terminal", "kill", cli_id.as_str()],
    ] {
        let output = hub.cli(&args);
        assert!(
            output.status.success(),
            "ptyhub {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// L7 (b): 10 MiB typed into a program that reads it all (`cat` to a file, raw mode) arrive
/// byte for byte, through REST and through a WebSocket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l7_input_read_to_the_end_arrives_whole_on_every_surface() {
    let hub = start();
    let client = hub.http();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let total = scaled(2, 10) * 1024 * 1024;
    let chunk = 256 * 1024;
    let id = create(&client, json!({ "id": "sink" })).await;
    for via in ["rest", "ws"] {
        let sink = dir.path().join(format!("sink-{via}"));
        let started = exec_raw(
            &client,
            &id,
            json!({ "command": format!("stty raw -echo; head -c {total} > {}; stty sane", sink.display()), "async": true }),
        )
        .await;
        assert_eq!(started.status, 200, "{}", started.body);
        // Printable random lines: input is text on every surface.
        let mut sent = Vec::with_capacity(total);
        let mut state = 0x2545_f491_4f6c_dd1d_u64 ^ (via.len() as u64);
        while sent.len() < total {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            sent.push(if sent.len() % 80 == 79 {
                b'\n'
            } else {
                b'a' + (state % 26) as u8
            });
        }
        let begun = Instant::now();
        match via {
            "rest" => {
                for piece in sent.chunks(chunk) {
                    let text = String::from_utf8_lossy(piece).into_owned();
                    loop {
                        let answer = client
                            .send(
                                Method::POST,
                                &format!("/v2/pty/sessions/{id}/input"),
                                Some(&json!({ "input": text })),
                            )
                            .await
                            .unwrap_or_else(|e| panic!("input: {e}"));
                        if answer.status == 200 {
                            break;
                        }
                        // A full input queue is refused, never dropped: try again.
                        assert_eq!(answer.body["error"]["code"], "BUSY", "{}", answer.body);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
            _ => {
                let mut socket = client
                    .websocket(&format!("/v2/pty/sessions/{id}/ws?mode=attach"))
                    .await
                    .unwrap_or_else(|e| panic!("websocket: {e}"));
                for piece in sent.chunks(chunk) {
                    let frame = json!({ "type": "input", "data": String::from_utf8_lossy(piece) });
                    socket
                        .send(LiveMessage::Text(frame.to_string().into()))
                        .await
                        .unwrap_or_else(|e| panic!("send: {e}"));
                }
                // The closing handshake: a close, then everything the server still sends until
                // its close. A client that drops its socket with output unread makes its own
                // kernel reset the connection and discard what it had not sent yet (the tail
                // of the input, on a busy machine), which is no fault of the server's.
                let _ = socket.close(None).await;
                let deadline = ptyhub_test_support::default_timeout();
                while let Ok(Some(Ok(_))) =
                    tokio::time::timeout(deadline, futures_util::StreamExt::next(&mut socket)).await
                {
                }
            }
        }
        let deadline = Instant::now() + ptyhub_test_support::default_timeout();
        loop {
            let len = std::fs::metadata(&sink).map_or(0, |m| m.len()) as usize;
            if len >= total {
                break;
            }
            if Instant::now() > deadline {
                let log = String::from_utf8_lossy(&log_bytes(&client, &id).await).into_owned();
                let tail: String = log
                    .chars()
                    .rev()
                    .take(600)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                panic!("{via}: the reader wrote {len} of {total} bytes; the log ends: {tail:?}");
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let elapsed = begun.elapsed();
        let got = std::fs::read(&sink).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.len(), total, "{via}: the sink has {} bytes", got.len());
        assert_eq!(
            sha256(&got),
            sha256(&sent),
            "{via}: the sink differs from the input"
        );
        figure(
            "L7",
            &format!("{via}: MiB typed, equal in the reader (sha256), s"),
            format!(
                "{}, yes, {:.2}",
                total / (1024 * 1024),
                elapsed.as_secs_f64()
            ),
        );
        wait_until("the reader's command ended", || async {
            let info = crate::suite::get(&client, &format!("/v2/pty/sessions/{id}")).await;
            (data(&info)["running_command"].is_null()).then_some(())
        })
        .await;
    }
    close(&client, &id).await;
}

/// L2: a soak: terminals printing at a steady rate for a while. After a warm-up the server's
/// fds and threads stay flat, its memory settles (the slope is reported), and every log
/// equals its producer's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn l2_a_soak_at_a_steady_rate_stays_flat_and_exact() {
    // Every log is compared whole with its producer: each must keep all of it (the long
    // tier's ten minutes make about 105 MB of log per terminal).
    let hub = ptyhub_test_support::Ptyhub::start_with(
        env!("CARGO_BIN_EXE_ptyhub"),
        &["--event-log-keep", "160M"],
    );
    let client = hub.http();
    let pid = hub.server_pid().unwrap_or(0);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let terminals = scaled(5, 20);
    let seconds = scaled(20, 600);
    // 16 chunks a second: 64 KiB/s (CI) or 128 KiB/s (long) of base64 per terminal.
    let chunk = scaled(3 * 1024, 6 * 1024);
    let chunks = seconds * 16;
    let mut ids = Vec::new();
    let mut producers = Vec::new();
    let mut runs = Vec::new();
    for i in 0..terminals {
        let id = create(&client, json!({ "id": format!("soak-{i}") })).await;
        let producer = Producer::paced(dir.path(), &format!("l2-{i}"), chunk, chunks, 0.0625);
        runs.push(tokio::spawn({
            let client = client.clone();
            let id = id.clone();
            let command = producer.command();
            async move {
                let body = json!({ "command": command, "timeout": 3600, "tail": 1 });
                let answer = exec_raw(&client, &id, body).await;
                assert_eq!(answer.status, 200, "{}", answer.body);
            }
        }));
        ids.push(id);
        producers.push(producer);
    }
    // Sampled while every producer prints: its last seconds, when the producers end and their
    // exec answers are read back from the logs, are no steady state.
    let mut samples = Vec::new();
    let started = Instant::now();
    let steady = Duration::from_secs(seconds as u64).saturating_sub(Duration::from_secs(2));
    while started.elapsed() < steady && runs.iter().all(|run| !run.is_finished()) {
        samples.push((
            started.elapsed().as_secs_f64(),
            proc_status(pid, "VmRSS") as f64 / 1024.0,
            open_fds(pid),
            proc_status(pid, "Threads"),
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    for run in runs {
        run.await.unwrap_or_else(|e| panic!("{e}"));
    }
    for (id, producer) in ids.iter().zip(&producers) {
        let truth = sha256(&producer.truth());
        assert_exact(producer, &truth, &log_bytes(&client, id).await, id);
    }
    // After the first quarter (the warm-up): fds and threads do not grow from the first half
    // of the rest to the second (connections and blocking threads come and go, a leak only
    // grows), and memory's slope.
    let total = started.elapsed().as_secs_f64();
    let warm: Vec<_> = samples.iter().filter(|s| s.0 >= total / 4.0).collect();
    assert!(warm.len() >= 4, "too few samples: {}", samples.len());
    let (early, late) = warm.split_at(warm.len() / 2);
    let most = |part: &[&(f64, f64, usize, u64)]| {
        (
            part.iter().map(|s| s.2).max().unwrap_or(0),
            part.iter().map(|s| s.3).max().unwrap_or(0),
        )
    };
    let ((fds_early, threads_early), (fds_late, threads_late)) = (most(early), most(late));
    let n = warm.len() as f64;
    let mean_t = warm.iter().map(|s| s.0).sum::<f64>() / n;
    let mean_r = warm.iter().map(|s| s.1).sum::<f64>() / n;
    let covariance: f64 = warm.iter().map(|s| (s.0 - mean_t) * (s.1 - mean_r)).sum();
    let variance: f64 = warm.iter().map(|s| (s.0 - mean_t).powi(2)).sum();
    let slope = covariance / variance.max(f64::EPSILON);
    let rate = chunk * 16 * 4 / 3 / 1024;
    figure(
        "L2",
        "terminals x KiB/s for s",
        format!("{terminals} x {rate} for {seconds}"),
    );
    figure("L2", "logs equal to their producers (sha256)", terminals);
    figure(
        "L2",
        "after the warm-up: most fds, threads in its first / second half",
        format!("{fds_early} / {fds_late}, {threads_early} / {threads_late}"),
    );
    figure(
        "L2",
        "after the warm-up: RSS mean MiB, slope MiB per minute",
        format!("{mean_r:.1}, {:.2}", slope * 60.0),
    );
    assert!(
        fds_late <= fds_early + 2,
        "the server's fds grew from {fds_early} to {fds_late}"
    );
    assert!(
        threads_late <= threads_early + 2,
        "the server's threads grew from {threads_early} to {threads_late}"
    );
    for id in &ids {
        close(&client, id).await;
    }
}
