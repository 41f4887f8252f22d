//! Connections cannot hold the server: a client that trickles its headers or sits idle is cut
//! off after the header timeout, and a flood of idle connections waits for a slot instead of
//! exhausting descriptors, while the local socket keeps answering.

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
