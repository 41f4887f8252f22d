//! `GET /metrics` (docs/operations.md#metrics) on the real binary: what a test does to
//! terminals (exec, output, a watch connection, input refused by a lease and by a read-only
//! connection, an expired cursor, a close) moves the counters by exactly that much, read with
//! the Prometheus project's own text parser (`tests/metrics/parse.py`); the route wants the
//! token, and `--metrics-listen` serves it alone without one.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::{SinkExt, StreamExt};
use ptyhub_client::{Client, LiveMessage, LiveSocket, Method};
use serde_json::{Value, json};

use super::{create, exec, get, manifest_dir, post};
use ptyhub_test_support::{Ptyhub, default_timeout, wait_until};

/// One sample of a scrape.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: serde_json::Map<String, Value>,
    value: f64,
}

/// A scrape, parsed.
struct Scrape(Vec<Sample>);

impl Scrape {
    /// The value of the sample `name` whose labels include `labels` (0 when there is none).
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|s| s.name == name)
            .find(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k) == Some(&json!(v)))
            })
            .map_or(0.0, |s| s.value)
    }

    fn has(&self, name: &str) -> bool {
        self.0.iter().any(|s| s.name == name)
    }
}

/// Parses a scrape's text with `prometheus_client`'s parser.
async fn parse(text: &str) -> Scrape {
    use tokio::io::AsyncWriteExt as _;
    let script = manifest_dir().join("tests/metrics/parse.py");
    let mut child = tokio::process::Command::new("python3")
        .arg(&script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("python3: {e}"));
    let mut stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
    stdin
        .write_all(text.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("write: {e}"));
    drop(stdin);
    let output = child
        .wait_with_output()
        .await
        .unwrap_or_else(|e| panic!("python3: {e}"));
    assert!(
        output.status.success(),
        "the Prometheus parser refused the scrape (pip install prometheus-client): {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    Scrape(
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| {
                let sample: Value =
                    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
                Sample {
                    name: sample["name"].as_str().unwrap_or_default().to_owned(),
                    labels: sample["labels"].as_object().cloned().unwrap_or_default(),
                    value: sample["value"].as_f64().unwrap_or(f64::NAN),
                }
            })
            .collect(),
    )
}

/// The text of `GET /metrics` through `client`, which must answer 200.
async fn scrape_text(client: &Client) -> String {
    let answer = get(client, "/metrics").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.body.as_str().unwrap_or_default().to_owned()
}

async fn scrape(client: &Client) -> Scrape {
    parse(&scrape_text(client).await).await
}

/// Waits until a scrape satisfies `check`; returns it.
async fn scrape_until(client: &Client, what: &str, check: impl Fn(&Scrape) -> bool) -> Scrape {
    wait_until(what, || async {
        let scraped = scrape(client).await;
        check(&scraped).then_some(scraped)
    })
    .await
}

/// A free loopback port (bound and released: the server binds it next).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("bind: {e}"))
}

async fn connect(client: &Client, path: &str) -> LiveSocket {
    client
        .websocket(path)
        .await
        .unwrap_or_else(|e| panic!("websocket {path}: {e}"))
}

/// The next text frame as JSON; `Null` once the connection ended.
async fn next_json(socket: &mut LiveSocket) -> Value {
    loop {
        match tokio::time::timeout(default_timeout(), socket.next()).await {
            Ok(Some(Ok(LiveMessage::Text(text)))) => {
                return serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
            }
            Ok(Some(Ok(LiveMessage::Close(_))) | Some(Err(_)) | None) => return Value::Null,
            Ok(Some(Ok(_))) => {}
            Err(_) => panic!("no frame within the timeout"),
        }
    }
}

/// The rotated segments of a terminal's log, by name.
fn rotated_segments(hub: &Ptyhub, id: &str) -> BTreeSet<String> {
    let dir = hub
        .terminal_dir(id)
        .unwrap_or_else(|| panic!("no directory for {id}"));
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|name| name.starts_with("events.") && name != "events.jsonl")
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_was_done_to_terminals() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let hub = Ptyhub::start_with(
        env!("CARGO_BIN_EXE_ptyhub"),
        &["--event-log-keep", "64K", "--metrics-listen", &listen],
    );
    let client = hub.http();

    // Behind the token on the main listener; alone and without one on its own.
    let anonymous = Client::tcp(hub.addr.clone(), String::new());
    assert_eq!(get(&anonymous, "/metrics").await.status, 401);
    let wrong = Client::tcp(hub.addr.clone(), "not-the-token".to_owned());
    assert_eq!(get(&wrong, "/metrics").await.status, 401);
    let metrics_only = Client::tcp(listen.clone(), String::new());
    let before = parse(&scrape_text(&metrics_only).await).await;
    assert_eq!(
        get(&metrics_only, "/v2/pty/sessions").await.status,
        404,
        "the metrics listener serves /metrics alone"
    );
    assert_eq!(before.value("ptyhub_commands_total", &[]), 0.0);
    for family in [
        "ptyhub_terminals",
        "ptyhub_commands_total",
        "ptyhub_command_duration_seconds_count",
        "ptyhub_output_bytes_total",
        "ptyhub_log_rotations_total",
        "ptyhub_lagged_total",
        "ptyhub_cursors_expired_total",
        "ptyhub_input_refused_total",
        "ptyhub_input_refused_bytes_total",
        "ptyhub_holders_total",
        "ptyhub_live_connections",
        "ptyhub_http_request_duration_seconds_count",
    ] {
        assert!(before.has(family), "{family} is missing");
    }

    let id = create(&client, json!({ "cwd": "/tmp" })).await;
    // A watch connection from the first event: it sees every byte the terminal writes once.
    let watch = connect(
        &client,
        &format!("/v2/pty/sessions/{id}/ws?mode=watch&protocol=binary&since_seq=0&presence=false"),
    )
    .await;
    // Its reader counts the output bytes and hands the JSON frames on.
    let (mut watch_sink, mut watch_stream) = watch.split();
    let seen = Arc::new(AtomicU64::new(0));
    let (frames, mut watch_frames) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let reader = tokio::spawn({
        let seen = Arc::clone(&seen);
        async move {
            while let Some(Ok(message)) = watch_stream.next().await {
                match message {
                    LiveMessage::Binary(bytes) => {
                        seen.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    }
                    LiveMessage::Text(text) => {
                        let _ =
                            frames.send(serde_json::from_str(text.as_str()).unwrap_or(Value::Null));
                    }
                    _ => {}
                }
            }
        }
    });
    let mut watch_frame = async |wanted: &str| loop {
        let frame = tokio::time::timeout(default_timeout(), watch_frames.recv())
            .await
            .unwrap_or_else(|_| panic!("no {wanted} frame within the timeout"))
            .unwrap_or_else(|| panic!("the watch connection ended before {wanted}"));
        if frame["type"] == wanted {
            return frame;
        }
    };
    watch_frame("ready").await;
    // Input on a read-only connection is refused.
    watch_sink
        .send(LiveMessage::Binary(b"typed-by-a-watcher".to_vec().into()))
        .await
        .unwrap_or_else(|e| panic!("send: {e}"));
    let refused_frame = watch_frame("error").await;
    assert_eq!(
        refused_frame["code"], "PERMISSION_DENIED",
        "{refused_frame}"
    );

    for command in ["true", "true", "false"] {
        exec(&client, &id, command).await;
    }
    // Output in steps smaller than a segment (16 KiB of log at this keep), the screen brought
    // up to date after each: every rotation happens under the screen's reader, and the union
    // of the segments seen is every rotation, deleted ones included.
    let mut segments = BTreeSet::new();
    for _ in 0..8 {
        exec(&client, &id, "head -c 6000 /dev/zero | tr '\\0' x; echo").await;
        let screen = get(&client, &format!("/v2/pty/sessions/{id}/screen")).await;
        assert_eq!(screen.status, 200, "{}", screen.body);
        segments.extend(rotated_segments(&hub, &id));
    }
    assert!(segments.len() >= 2, "the log rotated: {segments:?}");

    // Input refused by a lease another connection holds.
    let mut attach = connect(&client, &format!("/v2/pty/sessions/{id}/ws?mode=attach")).await;
    attach
        .send(LiveMessage::Text(
            json!({"type": "lease_take"}).to_string().into(),
        ))
        .await
        .unwrap_or_else(|e| panic!("send: {e}"));
    wait_until("the lease is held", || async {
        let lease = get(&client, &format!("/v2/pty/sessions/{id}/lease")).await;
        (!ptyhub_test_support::data(&lease)["lease"].is_null()).then_some(())
    })
    .await;
    let leased = post(
        &client,
        &format!("/v2/pty/sessions/{id}/input"),
        json!({"input": "typed-while-leased", "on_lease": "refuse"}),
    )
    .await;
    assert_eq!(leased.status, 409, "{}", leased.body);
    let scraped = scrape_until(&client, "an attach and a watch connection count", |s| {
        s.value("ptyhub_live_connections", &[("mode", "attach")]) == 1.0
    })
    .await;
    assert_eq!(
        scraped.value("ptyhub_live_connections", &[("mode", "watch")]),
        1.0
    );
    drop(attach);

    // An exec streamed as server-sent events counts as a live connection while it streams;
    // its command runs until the test has seen that (a file it waits for).
    let go = std::env::temp_dir().join(format!("ptyhub-metrics-go-{}", std::process::id()));
    let _ = std::fs::remove_file(&go);
    let streamed = tokio::spawn({
        let client = client.clone();
        let path = format!("/v2/pty/sessions/{id}/exec");
        let command = format!("sleep 2; until [ -e {} ]; do sleep 0.1; done", go.display());
        async move {
            let body = json!({ "command": command, "timeout": 120 }).to_string();
            client
                .send_raw(
                    Method::POST,
                    &path,
                    Some(body.into_bytes()),
                    &[("accept", "text/event-stream")],
                )
                .await
                .unwrap_or_else(|e| panic!("exec as events: {e}"))
        }
    });
    scrape_until(&client, "the event stream counts", |s| {
        s.value("ptyhub_live_connections", &[("mode", "sse")]) == 1.0
    })
    .await;
    std::fs::write(&go, b"").unwrap_or_else(|e| panic!("{}: {e}", go.display()));
    let events = streamed.await.unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_file(&go);
    assert!(
        events.body.to_string().contains("event: result"),
        "{}",
        events.body
    );

    // A cursor older than what the log keeps.
    let mut expired = connect(
        &client,
        &format!("/v2/pty/sessions/{id}/ws?mode=watch&since_seq=1"),
    )
    .await;
    let frame = next_json(&mut expired).await;
    assert_eq!(frame["code"], "CURSOR_EXPIRED", "{frame}");

    let after = scrape_until(
        &client,
        "the attach connection and the stream are gone",
        |s| {
            s.value("ptyhub_live_connections", &[("mode", "attach")]) == 0.0
                && s.value("ptyhub_live_connections", &[("mode", "sse")]) == 0.0
        },
    )
    .await;
    let moved = |name: &str, labels: &[(&str, &str)]| {
        after.value(name, labels) - before.value(name, labels)
    };
    let exec_ok = [("origin", "exec"), ("outcome", "ok")];
    assert_eq!(
        moved("ptyhub_commands_total", &exec_ok),
        11.0,
        "2 true, 8 outputs, 1 sleep"
    );
    assert_eq!(
        moved(
            "ptyhub_commands_total",
            &[("origin", "exec"), ("outcome", "failed")]
        ),
        1.0
    );
    assert_eq!(
        moved("ptyhub_command_duration_seconds_count", &exec_ok),
        11.0
    );
    assert!(
        moved("ptyhub_command_duration_seconds_sum", &exec_ok) >= 2.0,
        "the sleep ran 2 s"
    );
    assert_eq!(
        moved("ptyhub_input_refused_total", &[("reason", "read_only")]),
        1.0
    );
    assert_eq!(
        moved(
            "ptyhub_input_refused_bytes_total",
            &[("reason", "read_only")]
        ),
        "typed-by-a-watcher".len() as f64
    );
    assert_eq!(
        moved("ptyhub_input_refused_total", &[("reason", "leased")]),
        1.0
    );
    assert_eq!(
        moved("ptyhub_input_refused_bytes_total", &[("reason", "leased")]),
        "typed-while-leased".len() as f64
    );
    assert_eq!(moved("ptyhub_cursors_expired_total", &[]), 1.0);
    assert_eq!(
        moved("ptyhub_log_rotations_total", &[]),
        segments.len() as f64,
        "one rotation per rotated segment: {segments:?}"
    );
    assert_eq!(
        moved(
            "ptyhub_holders_total",
            &[("backend", "native"), ("event", "started")]
        ),
        1.0
    );
    assert_eq!(
        after.value(
            "ptyhub_terminals",
            &[("backend", "native"), ("state", "running")]
        ),
        1.0
    );
    let exec_route = [
        ("method", "POST"),
        ("route", "/v2/pty/sessions/{id}/exec"),
        ("status", "2xx"),
    ];
    assert_eq!(
        moved("ptyhub_http_request_duration_seconds_count", &exec_route),
        12.0
    );
    assert!(
        after.0.iter().all(|s| s
            .labels
            .values()
            .all(|v| !v.as_str().unwrap_or_default().contains(&id))),
        "no series is named after a terminal"
    );
    // Every byte the terminal wrote, as its watcher received it.
    let logged = scrape_until(&client, "the output counted is what the watcher got", |s| {
        let seen = seen.load(Ordering::Relaxed) as f64;
        seen > 48_000.0
            && s.value("ptyhub_output_bytes_total", &[])
                - before.value("ptyhub_output_bytes_total", &[])
                == seen
    })
    .await;
    assert!(logged.has("ptyhub_output_bytes_total"));

    // Closed: the holder stopped and the terminal counts as closed.
    let closed = client
        .send(Method::DELETE, &format!("/v2/pty/sessions/{id}"), None)
        .await
        .unwrap_or_else(|e| panic!("close: {e}"));
    assert_eq!(closed.status, 200, "{}", closed.body);
    let ended = scrape_until(&client, "the terminal counts as closed", |s| {
        s.value(
            "ptyhub_terminals",
            &[("backend", "native"), ("state", "closed")],
        ) == 1.0
    })
    .await;
    assert_eq!(
        ended.value(
            "ptyhub_terminals",
            &[("backend", "native"), ("state", "running")]
        ),
        0.0
    );
    let _ = tokio::time::timeout(default_timeout(), reader).await;
    scrape_until(&client, "the holder counts as stopped", |s| {
        s.value(
            "ptyhub_holders_total",
            &[("backend", "native"), ("event", "stopped")],
        ) == 1.0
            && s.value("ptyhub_live_connections", &[("mode", "watch")]) == 0.0
    })
    .await;
}

/// The local socket's peer is the server's own user: it reads the metrics without a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_socket_reads_the_metrics() {
    let hub = super::start();
    let answer = get(&hub.local(), "/metrics").await;
    assert_eq!(
        answer.status, 200,
        "the local socket's peer is the server's user"
    );
    let text = answer.body.as_str().unwrap_or_default();
    assert!(text.contains("# HELP ptyhub_terminals "), "{text}");
}

/// An idle terminal's screen goes to sleep (`ptyhub_screens_asleep` counts it), and a read wakes
/// it showing what it showed (docs/memory.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_terminals_screen_sleeps_and_a_read_wakes_it_as_it_was() {
    let hub = super::start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    exec(
        &client,
        &id,
        "printf '\\033[1;31mred-%s\\033[0m\\n' $((6*7))",
    )
    .await;
    let screen_of = |answer: &ptyhub_client::Answer| {
        let screen = ptyhub_test_support::data(answer);
        (
            screen["screen"].clone(),
            screen["cursor_row"].clone(),
            screen["cursor_col"].clone(),
        )
    };
    let path = format!("/v2/pty/sessions/{id}/screen");
    // The exec answers at the command's end: the next prompt may be drawn a moment later.
    let before = wait_until("the prompt after the output is drawn", || async {
        let screen = screen_of(&get(&client, &path).await);
        let rows = screen.0.as_array().cloned().unwrap_or_default();
        let output = rows.iter().position(|row| row == "red-42")?;
        rows.get(output + 1)
            .is_some_and(|row| row.as_str().is_some_and(|r| !r.trim().is_empty()))
            .then_some(screen)
    })
    .await;
    scrape_until(&client, "the screen is asleep", |s| {
        s.value("ptyhub_screens_asleep", &[]) == 1.0
    })
    .await;
    assert_eq!(
        screen_of(&get(&client, &path).await),
        before,
        "woken as it was"
    );
}
