//! The scale-out shape on one machine (docs/scale-out.md): three ptyhub servers, each with its
//! own state dir and port, behind a real nginx that routes by `X-Sandbox-ID` with the very
//! files deploy/router.yaml ships. A client works on each through the proxy; one server is
//! killed with `kill -9` while a WebSocket through the proxy follows a producer on it, then
//! restarted on the same state dir and port; the client reconnects through the proxy with
//! `since_seq` and has every byte once. Also: deploy/ validates offline.

#![allow(
    clippy::print_stderr,
    reason = "the test reports the figures it measured on stderr"
)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use ptyhub_client::{Client, LiveMessage, LiveSocket, Method};
use ptyhub_test_support::{Ptyhub, data, default_timeout, descendants, kill_9, wait_until};
use serde_json::{Value, json};

use super::{create, exec, manifest_dir, own_uid};

/// The sandbox ids, one per server.
const SANDBOXES: [&str; 3] = ["sandbox-a", "sandbox-b", "sandbox-c"];
/// Lines the producer writes while its server is killed and restarted.
const PRODUCER_LINES: u32 = 300;
/// Execs timed for the latency figures, through the proxy and directly.
const LATENCY_SAMPLES: usize = 20;

fn deploy_dir() -> PathBuf {
    manifest_dir().join("../../deploy")
}

/// The nginx executable: on `PATH`, or where Debian puts it.
fn nginx_bin() -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("nginx"))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("no nginx (scripts/test.sh installs it: apt-get install nginx)"))
}

/// A free loopback port (bound, then let go for the server that will own it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// nginx in the foreground on a generated configuration in a temp dir (its pid, logs and
/// temp files there too); stopped, workers included, when dropped.
struct Nginx {
    child: Option<Child>,
    dir: tempfile::TempDir,
    addr: String,
}

impl Nginx {
    /// Routes `X-Sandbox-ID` to `routes` (sandbox id, loopback port) with deploy/'s files.
    fn start(routes: &[(&str, u16)]) -> Self {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let files = dir.path().join("ptyhub");
        let output = Command::new("python3")
            .arg(manifest_dir().join("tests/deploy/router_files.py"))
            .arg(deploy_dir())
            .arg(&files)
            .output()
            .unwrap_or_else(|e| panic!("cannot run python3: {e}"));
        assert!(
            output.status.success(),
            "router_files.py (pip install pyyaml): {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let port = free_port();
        let map: String = routes
            .iter()
            .map(|(id, port)| format!("    {id} 127.0.0.1:{port};\n"))
            .collect();
        let d = dir.path().display();
        // Run as root (the test's user), nginx would hand its workers to `nobody`, who cannot
        // write the temp dir.
        let user = if own_uid() == 0 { "user root;" } else { "" };
        let conf = format!(
            "{user}
daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 256; }}
http {{
  access_log {d}/access.log;
  client_body_temp_path {d}/client_body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  map $http_x_sandbox_id $sandbox_upstream {{
{map}    default \"\";
  }}
  include {d}/ptyhub/ptyhub-http.conf;
  server {{
    listen 127.0.0.1:{port};
    location = /router-healthz {{ return 200 \"ok\\n\"; }}
    include {d}/ptyhub/ptyhub-locations.conf;
  }}
}}
"
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap_or_else(|e| panic!("write: {e}"));
        let child = Command::new(nginx_bin())
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-c")
            .arg(&conf_path)
            // nginx reads a variable of this name as sockets to inherit.
            .env_remove("NGINX")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start nginx: {e}"));
        Self {
            child: Some(child),
            dir,
            addr: format!("127.0.0.1:{port}"),
        }
    }

    /// Waits until nginx answers its own health location.
    async fn wait_ready(&mut self) {
        let addr = self.addr.clone();
        let log = self.dir.path().join("error.log");
        let child = self.child.as_mut().unwrap_or_else(|| panic!("no nginx"));
        wait_until("nginx answers", || {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "nginx exited ({status}): {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            let client = Client::tcp(addr.clone(), String::new());
            async move {
                let answer = client
                    .send_raw(Method::GET, "/router-healthz", None, &[])
                    .await
                    .ok()?;
                (answer.status == 200).then_some(())
            }
        })
        .await;
    }

    /// A client of sandbox `id` through the proxy.
    fn client(&self, id: &str, token: &str) -> Client {
        Client::tcp(self.addr.clone(), token.to_owned()).with_header("X-Sandbox-ID", id)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let workers = descendants(child.id());
        // A fast shutdown (SIGTERM) ends the workers with the master.
        ptyhub_core::process::kill(child.id(), rustix::process::Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && !matches!(child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        for pid in workers {
            kill_9(pid);
        }
    }
}

/// One sandbox: a ptyhub on its own state dir and a fixed port (kept across restarts).
struct Sandbox {
    id: &'static str,
    hub: Ptyhub,
    port: u16,
}

impl Sandbox {
    fn start(id: &'static str) -> Self {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        // Pings every second, to see them cross the proxy within the test.
        let hub = Ptyhub::start_with(
            env!("CARGO_BIN_EXE_ptyhub"),
            &["--listen", &listen, "--ws-ping-secs", "1"],
        );
        assert_eq!(hub.addr, listen, "the server took the port it was given");
        Self { id, hub, port }
    }
}

async fn ws(client: &Client, path: &str) -> LiveSocket {
    client
        .websocket(path)
        .await
        .unwrap_or_else(|e| panic!("websocket {path}: {e}"))
}

/// What one live connection delivered: output text, the last `seq`, and whether the
/// server pinged.
#[derive(Default)]
struct Followed {
    text: String,
    last_seq: u64,
    pings: usize,
    is_restored: bool,
}

impl Followed {
    /// Reads until `done` holds (`true`) or the connection ends (`false`).
    async fn read(&mut self, socket: &mut LiveSocket, done: impl Fn(&Self) -> bool) -> bool {
        while !done(self) {
            let message = match tokio::time::timeout(default_timeout(), socket.next()).await {
                Ok(Some(Ok(message))) => message,
                Ok(Some(Err(_)) | None) => return false,
                Err(_) => panic!("no frame within the timeout; so far: {}", self.text),
            };
            match message {
                LiveMessage::Ping(_) => self.pings += 1,
                LiveMessage::Close(_) => return false,
                LiveMessage::Text(text) => {
                    let frame: Value = serde_json::from_str(text.as_str())
                        .unwrap_or_else(|e| panic!("frame is not JSON ({e}): {text}"));
                    match frame["type"].as_str() {
                        Some("output" | "restore_output") => {
                            self.text
                                .push_str(frame["data"].as_str().unwrap_or_default());
                            self.last_seq = frame["seq"].as_u64().unwrap_or(self.last_seq);
                        }
                        Some("terminal_restored") => self.is_restored = true,
                        Some("error") => panic!("error frame: {frame}"),
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        true
    }
}

fn watch_path(id: &str, since_seq: u64) -> String {
    format!("/v2/pty/sessions/{id}/ws?mode=watch&since_seq={since_seq}")
}

/// The median of `samples`.
fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Median exec latencies of `true` through `proxied` and `direct` (the same terminal),
/// sampled in turn so both see the same machine load.
async fn exec_latencies(proxied: &Client, direct: &Client, id: &str) -> (Duration, Duration) {
    let mut through_proxy = Vec::with_capacity(LATENCY_SAMPLES);
    let mut without = Vec::with_capacity(LATENCY_SAMPLES);
    for _ in 0..LATENCY_SAMPLES {
        for (client, samples) in [(proxied, &mut through_proxy), (direct, &mut without)] {
            let began = Instant::now();
            let result = exec(client, id, "true").await;
            assert_eq!(result["exit_code"], 0, "{result}");
            samples.push(began.elapsed());
        }
    }
    (median(through_proxy), median(without))
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(
    clippy::too_many_lines,
    reason = "one scenario, told in order: the steps share its servers and its proxy"
)]
async fn three_servers_behind_nginx_keep_every_byte_across_a_kill_9() {
    let mut sandboxes: Vec<Sandbox> = SANDBOXES.iter().map(|id| Sandbox::start(id)).collect();
    let routes: Vec<(&str, u16)> = sandboxes.iter().map(|s| (s.id, s.port)).collect();
    let mut nginx = Nginx::start(&routes);
    nginx.wait_ready().await;
    let token = sandboxes[0].hub.token.clone();

    // 1. A terminal on each sandbox, made and used through the proxy; each sandbox sees its
    //    own terminal only, exactly as its server answers directly.
    let mut terminals = Vec::new();
    for sandbox in &sandboxes {
        let proxied = nginx.client(sandbox.id, &token);
        let id = create(&proxied, json!({ "cwd": "/tmp" })).await;
        let ran = exec(&proxied, &id, &format!("echo hello from {}", sandbox.id)).await;
        assert_eq!(
            ran["output"].as_str().map(str::trim),
            Some(format!("hello from {}", sandbox.id).as_str()),
            "{ran}"
        );
        assert_eq!(super::live_ids(&proxied).await, vec![id.clone()]);
        assert_eq!(super::live_ids(&sandbox.hub.http()).await, vec![id.clone()]);
        terminals.push(id);
    }
    // Another sandbox's terminal is not found through this sandbox's route.
    let elsewhere = super::get(
        &nginx.client("sandbox-a", &token),
        &format!("/v2/pty/sessions/{}", terminals[1]),
    )
    .await;
    assert_eq!(elsewhere.status, 404, "{}", elsewhere.body);
    assert_eq!(elsewhere.body["error"]["code"], "SESSION_NOT_FOUND");

    // 2. An unknown, a malformed or a missing sandbox id: nginx's own clear answer, never a
    //    sandbox's.
    for header in [Some("sandbox-z"), Some("../sandbox-a"), Some(""), None] {
        let client = match header {
            Some(id) => nginx.client(id, &token),
            None => Client::tcp(nginx.addr.clone(), token.clone()),
        };
        let answer = super::get(&client, "/v2/pty/sessions").await;
        assert_eq!(answer.status, 404, "{header:?}: {}", answer.body);
        assert_eq!(answer.body["success"], false, "{header:?}: {}", answer.body);
        assert_eq!(
            answer.body["error"]["code"], "SANDBOX_NOT_FOUND",
            "{header:?}"
        );
        assert!(
            answer.body["message"]
                .as_str()
                .is_some_and(|m| m.contains("X-Sandbox-ID")),
            "{}",
            answer.body
        );
        let upgrade = client
            .websocket(&watch_path(&terminals[0], 0))
            .await
            .err()
            .unwrap_or_else(|| panic!("{header:?}: an upgrade to no sandbox succeeded"));
        assert!(upgrade.to_string().contains("404"), "{header:?}: {upgrade}");
    }

    // 3. Exec latency through the proxy and directly.
    let proxied_b = nginx.client("sandbox-b", &token);
    let (through_proxy, direct) =
        exec_latencies(&proxied_b, &sandboxes[1].hub.http(), &terminals[1]).await;

    // 4. A watcher through the proxy follows sandbox-b's terminal from its first event; the
    //    server's pings reach it through the proxy.
    let b = &terminals[1];
    let mut first = ws(&proxied_b, &watch_path(b, 0)).await;
    let mut seen = Followed::default();
    assert!(
        seen.read(&mut first, |s| s.is_restored && s.pings >= 1)
            .await,
        "the watcher's connection ended before the server's first ping"
    );
    let producer = format!(
        "for i in $(seq 1 {PRODUCER_LINES}); do printf 'line-%04d\\n' $i; sleep 0.01; done; echo producer-$((1 + 1))-done"
    );
    let started = super::post(
        &proxied_b,
        &format!("/v2/pty/sessions/{b}/exec"),
        json!({ "command": producer, "async": true }),
    )
    .await;
    assert!(started.status < 300, "{}", started.body);
    assert!(
        seen.read(&mut first, |s| s.text.contains("line-0050"))
            .await
    );

    // 5. kill -9 of sandbox-b's server while the producer writes: the watcher's connection
    //    ends, the proxy answers for the sandbox that is down, the others go on.
    let killed_at = Instant::now();
    sandboxes[1].hub.kill_server();
    assert!(
        !seen.read(&mut first, |_| false).await,
        "the watcher's connection outlived its server"
    );
    let noticed_after = killed_at.elapsed();
    drop(first);
    let down = super::get(&proxied_b, "/v2/pty/sessions").await;
    assert_eq!(down.status, 502, "{}", down.body);
    assert_eq!(down.body["error"]["code"], "SANDBOX_UNAVAILABLE");
    assert_eq!(down.body["error"]["retryable"], true);
    for (sandbox, id) in [(0, &terminals[0]), (2, &terminals[2])] {
        let other = nginx.client(SANDBOXES[sandbox], &token);
        let ran = exec(&other, id, "echo still here").await;
        assert_eq!(ran["output"].as_str().map(str::trim), Some("still here"));
    }

    // 6. The same state dir and port again; the client reconnects through the proxy from the
    //    last seq it had, retrying until the proxy lets it.
    let restarted_at = Instant::now();
    sandboxes[1].hub.restart();
    let serving_after = restarted_at.elapsed();
    let resume_at = seen.last_seq;
    let mut second = wait_until("the watcher reconnects through the proxy", || {
        let client = proxied_b.clone();
        let path = watch_path(b, resume_at);
        async move { client.websocket(&path).await.ok() }
    })
    .await;
    let reconnected_after = restarted_at.elapsed();
    let mut resumed = Followed::default();
    assert!(resumed.read(&mut second, |s| s.is_restored).await);
    let replayed_after = restarted_at.elapsed();
    let replayed_bytes = resumed.text.len();
    assert!(
        resumed
            .read(&mut second, |s| s.text.contains("producer-2-done\r\n"))
            .await,
        "the resumed connection ended early: {}",
        resumed.text
    );
    drop(second);

    // 7. Everything, byte-exact: what the two connections delivered is what the log holds
    //    from the start, and every line of the producer came once, in order.
    let mut whole = ws(&proxied_b, &watch_path(b, 0)).await;
    let mut replay = Followed::default();
    let caught_up = resumed.last_seq;
    assert!(
        replay
            .read(&mut whole, |s| s.is_restored && s.last_seq >= caught_up)
            .await
    );
    let delivered = format!("{}{}", seen.text, resumed.text);
    assert!(
        replay.text.starts_with(&delivered),
        "the two connections delivered something else than the log holds:\n{delivered}\n---\n{}",
        replay.text
    );
    let mut at = 0;
    for i in 1..=PRODUCER_LINES {
        let line = format!("line-{i:04}\r\n");
        assert_eq!(count(&delivered, &line), 1, "{line:?} in:\n{delivered}");
        let found = delivered[at..]
            .find(&line)
            .unwrap_or_else(|| panic!("{line:?} out of order"));
        at += found + line.len();
    }
    // The restarted server still knows the terminal, which kept running under its holder.
    let status = super::get(&proxied_b, &format!("/v2/pty/sessions/{b}")).await;
    assert_eq!(data(&status)["state"], "running", "{}", status.body);

    // 8. A pod restart ends every process, holders included: sandbox-c's server and holders
    //    are killed, and a server on the same state dir answers through the proxy with the
    //    terminal's whole history, the terminal no longer running.
    let c = &terminals[2];
    let holders = sandboxes[2].hub.holder_pids();
    assert!(!holders.is_empty());
    sandboxes[2].hub.kill_server();
    for holder in holders {
        for pid in descendants(holder).into_iter().chain([holder]) {
            kill_9(pid);
        }
    }
    sandboxes[2].hub.restart();
    let proxied_c = nginx.client("sandbox-c", &token);
    let after = wait_until("sandbox-c's terminal is no longer running", || {
        let client = proxied_c.clone();
        let path = format!("/v2/pty/sessions/{c}");
        async move {
            let answer = super::get(&client, &path).await;
            (answer.status == 200 && data(&answer)["state"] != "running").then_some(answer)
        }
    })
    .await;
    let commands = super::get(&proxied_c, &format!("/v2/pty/sessions/{c}/commands")).await;
    let commands = data(&commands)["commands"].clone();
    let ran: Vec<&str> = commands
        .as_array()
        .map(|list| list.iter().filter_map(|c| c["command"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        ran,
        vec!["echo hello from sandbox-c", "echo still here"],
        "{}: {commands}",
        after.body
    );

    eprintln!(
        "scale-out figures: exec `true` (median of {LATENCY_SAMPLES}) {:.1} ms through nginx, \
         {:.1} ms direct; kill -9 of a server: its watcher's connection ended {:.0} ms after; \
         restarted on the same state dir and port it served {:.0} ms after its start, the \
         watcher was through nginx again {:.0} ms after it and had the {replayed_bytes} bytes \
         it missed (from seq {resume_at}) {:.0} ms after it",
        through_proxy.as_secs_f64() * 1e3,
        direct.as_secs_f64() * 1e3,
        noticed_after.as_secs_f64() * 1e3,
        serving_after.as_secs_f64() * 1e3,
        reconnected_after.as_secs_f64() * 1e3,
        replayed_after.as_secs_f64() * 1e3,
    );
    drop(nginx);
    drop(sandboxes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_manifests_validate_offline() {
    super::run_python(
        "deploy/check_manifests.py",
        &[
            ("DEPLOY_DIR", deploy_dir().display().to_string()),
            ("NGINX_BIN", nginx_bin().display().to_string()),
        ],
        "scripts/test.sh installs nginx, kubernetes-validate, jsonschema and pyyaml",
    )
    .await;
}
