//! Listening beyond loopback: plain HTTP there needs `--allow-plain-http` (and the banner
//! warns), TLS (`--tls-cert`, `--tls-key`) serves HTTPS to a real client that trusts the
//! certificate, whose own origin is then `https://…`; `Host: 0.0.0.0` names no host.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::json;

use super::raw_http::raw;
use ptyhub_test_support::default_timeout;

/// A `ptyhub serve` started by hand (the test-support one always listens on loopback).
struct Served {
    child: Child,
    /// The banner's lines up to and including `web:`.
    banner: Vec<String>,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // What a killed server cannot remove itself (its screen thread's cgroup).
        ptyhub_core::cgroup::remove_all(&self._dir.path().join("state"));
    }
}

const TOKEN: &str = "test-token";

fn command(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ptyhub"));
    command
        .args(["serve", "--token", TOKEN, "--state-dir"])
        .arg(dir.join("state"))
        .args(args)
        .env("XDG_RUNTIME_DIR", dir)
        .env("HOME", dir)
        .env("PTYHUB_BACKEND", "native")
        .env_remove("PTYHUB_SOCKET")
        .env_remove("PTYHUB_LISTEN")
        .env_remove("PTYHUB_ALLOW_PLAIN_HTTP")
        .stdin(Stdio::null());
    command
}

fn serve(args: &[&str]) -> Served {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let mut child = command(dir.path(), args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start ptyhub: {e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut lines = BufReader::new(stdout).lines();
    let mut banner = Vec::new();
    loop {
        match lines.next() {
            Some(Ok(line)) => {
                let is_last = line.trim().starts_with("web:");
                banner.push(line);
                if is_last {
                    break;
                }
            }
            _ => panic!("ptyhub {args:?} exited before its banner: {banner:?}"),
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let port = banner
        .iter()
        .find_map(|line| line.trim().strip_prefix("url:"))
        .and_then(|url| url.trim().trim_end_matches('/').rsplit(':').next())
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in {banner:?}"));
    Served {
        child,
        banner,
        port,
        _dir: dir,
    }
}

/// Runs `ptyhub serve` with `args`, expecting it to refuse: its stderr.
fn refused(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let mut child = command(dir.path(), args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start ptyhub: {e}"));
    let deadline = std::time::Instant::now() + default_timeout();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("ptyhub serve {args:?} did not refuse to start");
            }
        }
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
    }
    assert!(!status.success(), "{args:?} exited {status}: {stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_beyond_loopback_needs_the_flag_and_is_warned_about() {
    let stderr = refused(&["--listen", "0.0.0.0:0"]);
    assert!(
        stderr.contains("--allow-plain-http") && stderr.contains("--tls-cert"),
        "the refusal says how to go on: {stderr}"
    );

    let served = serve(&["--listen", "0.0.0.0:0", "--allow-plain-http"]);
    assert!(
        served
            .banner
            .iter()
            .any(|line| line.contains("WARNING") && line.contains("plain HTTP")),
        "{:?}",
        served.banner
    );
    let addr = format!("127.0.0.1:{}", served.port);
    let bearer = format!("Bearer {TOKEN}");
    let version = raw(
        &addr,
        "GET",
        "/v2/version",
        &[("Authorization", &bearer)],
        "",
    )
    .await;
    assert_eq!(version.status, 200, "{}", version.body);
    for host in [
        format!("0.0.0.0:{}", served.port),
        "0.0.0.0".to_owned(),
        format!("[::]:{}", served.port),
    ] {
        let answer = raw(
            &addr,
            "GET",
            "/v2/version",
            &[("Host", &host), ("Authorization", &bearer)],
            "",
        )
        .await;
        assert_eq!(answer.status, 403, "Host {host}: {}", answer.body);
    }

    // On loopback no flag is needed and nothing is warned about.
    let local = serve(&["--listen", "127.0.0.1:0"]);
    assert!(
        !local.banner.iter().any(|line| line.contains("WARNING")),
        "{:?}",
        local.banner
    );
}

/// A self-signed certificate for 127.0.0.1 and localhost, made with the `openssl` CLI.
fn self_signed(dir: &Path) -> (String, String) {
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl (apt-get install openssl): {e}"));
    assert!(made.status.success(), "openssl: {made:?}");
    (cert.display().to_string(), key.display().to_string())
}

/// `curl` as a real HTTPS client that trusts `ca`: the status code and body.
fn curl(ca: &str, url: &str, headers: &[&str], body: Option<&str>) -> (u16, String) {
    let mut command = Command::new("curl");
    command
        .args([
            "--silent",
            "--show-error",
            "--max-time",
            "20",
            "--cacert",
            ca,
        ])
        .args(["--write-out", "\n%{http_code}"]);
    for header in headers {
        command.args(["--header", header]);
    }
    if let Some(body) = body {
        command.args(["--data", body]);
    }
    let output = command
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run curl (apt-get install curl): {e}"));
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_https_whose_origin_is_its_own() {
    let certs = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let (cert, key) = self_signed(certs.path());
    let stderr = refused(&["--listen", "127.0.0.1:0", "--tls-cert", &cert]);
    assert!(
        stderr.contains("--tls-key"),
        "a certificate needs its key: {stderr}"
    );
    let missing = certs.path().join("none.pem").display().to_string();
    let stderr = refused(&[
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        &missing,
        "--tls-key",
        &key,
    ]);
    assert!(
        stderr.contains("none.pem"),
        "the missing file is named: {stderr}"
    );

    let served = serve(&[
        "--listen",
        "0.0.0.0:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ]);
    assert!(
        served
            .banner
            .iter()
            .any(|line| line.trim().starts_with("url:") && line.contains("https://")),
        "{:?}",
        served.banner
    );
    assert!(
        !served.banner.iter().any(|line| line.contains("WARNING")),
        "{:?}",
        served.banner
    );
    let base = format!("https://127.0.0.1:{}", served.port);
    let bearer = format!("Authorization: Bearer {TOKEN}");
    let (status, body) = tokio::task::spawn_blocking({
        let (cert, base, bearer) = (cert.clone(), base.clone(), bearer.clone());
        move || curl(&cert, &format!("{base}/v2/version"), &[&bearer], None)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
            ["data"]["apiVersion"],
        "1.0"
    );

    // Plain HTTP on the TLS port gets no answer.
    let plain = tokio::task::spawn_blocking({
        let port = served.port;
        move || {
            use std::io::{Read, Write};
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))
                .unwrap_or_else(|e| panic!("connect: {e}"));
            stream
                .set_read_timeout(Some(default_timeout()))
                .unwrap_or_else(|e| panic!("{e}"));
            let _ = stream.write_all(b"GET /v2/version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
            let mut answer = Vec::new();
            let _ = stream.read_to_end(&mut answer);
            answer
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !plain.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&plain)
    );

    // The page's own origin is https now; the http one is foreign.
    let sign_in = |origin: String| {
        let (cert, base) = (cert.clone(), base.clone());
        move || {
            curl(
                &cert,
                &format!("{base}/auth/session"),
                &[
                    &format!("Origin: {origin}"),
                    "Content-Type: application/json",
                ],
                Some(&json!({ "token": TOKEN }).to_string()),
            )
        }
    };
    let (status, body) = tokio::task::spawn_blocking(sign_in(base.clone()))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status, 200, "sign-in from the https page: {body}");
    let http_origin = format!("http://127.0.0.1:{}", served.port);
    let (status, body) = tokio::task::spawn_blocking(sign_in(http_origin))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status, 403, "sign-in from the http origin: {body}");
}
