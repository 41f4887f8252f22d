//! Connections cannot hold the server: a client that trickles its headers or sits idle is cut
//! off after the header timeout, and a flood of idle connections waits for a slot instead of
//! exhausting descriptors, while the local socket keeps answering; and a server at its
//! open-file limit sheds new work with a clear error, keeps answering health, its open
//! connections and the local socket, logs it once and recovers by itself.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use ptyhub_test_support::{Ptyhub, data};

fn connect(addr: &str) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap_or_else(|e| panic!("timeout: {e}"));
    stream
}

/// Reads until the server closes the connection; how long that took.
fn closed_after(stream: &mut TcpStream) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return started.elapsed(),
            Ok(_) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_headers_and_idle_connections_are_cut_off() {
    let hub = Ptyhub::start_with(
        env!("CARGO_BIN_EXE_ptyhub"),
        &["--header-timeout-secs", "1"],
    );
    let (addr, token) = (hub.addr.clone(), hub.token.clone());
    tokio::task::spawn_blocking(move || {
        let mut slow = connect(&addr);
        slow.write_all(b"GET /v2/version HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .unwrap_or_else(|e| panic!("write: {e}"));
        let waited = closed_after(&mut slow);
        assert!(waited < Duration::from_secs(20), "closed after {waited:?}");

        let mut idle = connect(&addr);
        let request = format!(
            "GET /v2/version HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
        );
        idle.write_all(request.as_bytes())
            .unwrap_or_else(|e| panic!("write: {e}"));
        let mut answer = [0u8; 12];
        idle.read_exact(&mut answer)
            .unwrap_or_else(|e| panic!("read: {e}"));
        assert_eq!(&answer, b"HTTP/1.1 200");
        let waited = closed_after(&mut idle);
        assert!(waited < Duration::from_secs(20), "idle for {waited:?}");
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_idle_connections_waits_for_a_slot_and_the_local_socket_answers() {
    let hub = Ptyhub::start_with(
        env!("CARGO_BIN_EXE_ptyhub"),
        &["--max-connections", "8", "--header-timeout-secs", "2"],
    );
    let idle: Vec<TcpStream> = (0..8).map(|_| connect(&hub.addr)).collect();
    // Every TCP slot is held: the local socket has its own.
    let listed = hub.cli(&["terminal", "list"]);
    assert!(listed.status.success(), "{listed:?}");
    let local = hub.local();
    let version = super::get(&local, "/v2/version").await;
    assert_eq!(data(&version)["apiVersion"], "1.0");

    // A ninth TCP client is served once the idle ones are cut off, not before.
    let started = Instant::now();
    let answered = tokio::time::timeout(
        ptyhub_test_support::default_timeout(),
        super::get(&hub.http(), "/v2/version"),
    )
    .await
    .unwrap_or_else(|_| panic!("the ninth client was never served"));
    let waited = started.elapsed();
    assert_eq!(answered.status, 200, "{}", answered.body);
    assert!(
        waited >= Duration::from_millis(500),
        "answered after {waited:?} while every slot was held"
    );
    drop(idle);
}

/// The descriptors `pid` has open.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// Sends `GET path` on a kept-alive connection and reads one whole answer: its status line
/// and body.
fn get_on(stream: &mut TcpStream, addr: &str, path: &str, token: &str) -> (String, String) {
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .unwrap_or_else(|e| panic!("write: {e}"));
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let read = stream
            .read(&mut buf)
            .unwrap_or_else(|e| panic!("read: {e}"));
        assert!(read > 0, "closed: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buf[..read]);
        let text = String::from_utf8_lossy(&answer);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_owned())
                })
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= length {
                let status = head.lines().next().unwrap_or_default().to_owned();
                return (status, body.to_owned());
            }
        }
    }
}

/// One request on a new connection: its status line and body.
fn get_new(addr: &str, path: &str, token: &str) -> (String, String) {
    let mut stream = connect(addr);
    get_on(&mut stream, addr, path, token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_file_descriptors_the_server_sheds_new_work_and_recovers() {
    // The server's stderr goes to a file the test reads: a wrapper runs the real binary.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let log = dir.path().join("server.log");
    let wrapper = dir.path().join("ptyhub");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ \"$1\" = serve ]; then exec '{}' \"$@\" 2>>'{}'; fi\nexec '{}' \"$@\"\n",
            env!("CARGO_BIN_EXE_ptyhub"),
            log.display(),
            env!("CARGO_BIN_EXE_ptyhub"),
        ),
    )
    .unwrap_or_else(|e| panic!("write: {e}"));
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap_or_else(|e| panic!("chmod: {e}"));
    let hub = Ptyhub::start_with_env(
        &wrapper.display().to_string(),
        &["--max-connections", "100000"],
        &[("PTYHUB_LOG", "warn")],
    );
    let (addr, token) = (hub.addr.clone(), hub.token.clone());
    let pid = hub.server_pid().unwrap_or_else(|| panic!("no server"));
    let id = super::create(&hub.http(), serde_json::json!({ "id": "before" })).await;

    let hub_cli = {
        let socket = hub.socket.clone();
        move |args: &[&str]| {
            std::process::Command::new(env!("CARGO_BIN_EXE_ptyhub"))
                .arg("--socket")
                .arg(&socket)
                .args(args)
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap_or_else(|e| panic!("cli: {e}"))
        }
    };
    let log_text = {
        let log = log.clone();
        move || std::fs::read_to_string(&log).unwrap_or_default()
    };
    tokio::task::spawn_blocking(move || {
        let mut kept = connect(&addr);
        let (status, _) = get_on(&mut kept, &addr, "/healthz", &token);
        assert!(status.contains(" 200 "), "{status}");

        // A limit a little above what the server holds now, then a flood that takes it all.
        let limit = open_fds(pid) + 24;
        let limit_u64 = u64::try_from(limit).unwrap_or(u64::MAX);
        rustix::process::prlimit(
            rustix::process::Pid::from_raw(i32::try_from(pid).unwrap_or(0)),
            rustix::process::Resource::Nofile,
            rustix::process::Rlimit {
                current: Some(limit_u64),
                maximum: Some(limit_u64),
            },
        )
        .unwrap_or_else(|e| panic!("prlimit: {e}"));
        let flood: Vec<TcpStream> = (0..limit).map(|_| connect(&addr)).collect();
        let deadline = Instant::now() + ptyhub_test_support::default_timeout();
        while open_fds(pid) < limit {
            assert!(
                Instant::now() < deadline,
                "the server never reached its limit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }

        // New work is shed with a clear error; health, the open connection and the local
        // socket answer.
        let (status, body) = get_new(&addr, "/v2/pty/sessions", &token);
        assert!(status.contains(" 503 "), "{status}: {body}");
        assert!(
            body.contains("BACKEND_UNAVAILABLE") && body.contains("file descriptors"),
            "{body}"
        );
        let (status, body) = get_new(&addr, "/healthz", &token);
        assert!(status.contains(" 200 "), "{status}: {body}");
        let (status, body) = get_on(&mut kept, &addr, "/v2/version", &token);
        assert!(
            status.contains(" 200 "),
            "the open connection: {status}: {body}"
        );
        let listed = hub_cli(&["terminal", "list"]);
        assert!(
            listed.status.success() && String::from_utf8_lossy(&listed.stdout).contains(&id),
            "the local socket: {listed:?}"
        );
        let text = log_text();
        assert_eq!(
            text.matches("out of file descriptors").count(),
            1,
            "logged once, not per failed accept: {text}"
        );

        // Released, the server takes new work again by itself.
        drop(flood);
        let deadline = Instant::now() + ptyhub_test_support::default_timeout();
        loop {
            let (status, body) = get_new(&addr, "/v2/pty/sessions", &token);
            if status.contains(" 200 ") && body.contains(&id) && log_text().contains("free again") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "never recovered: {status}: {body}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let text = log_text();
        assert_eq!(text.matches("out of file descriptors").count(), 1, "{text}");
        assert_eq!(text.matches("free again").count(), 1, "{text}");
        let created = hub_cli(&["terminal", "list"]);
        assert!(created.status.success(), "{created:?}");
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}
