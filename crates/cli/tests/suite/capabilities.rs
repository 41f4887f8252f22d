//! The capability matrix from the outside: tokens of the configuration file holding
//! `terminal.create` with and without `terminal.read` and `terminal.write`, tried on every
//! route, connection and tool that creates a terminal, types into one or answers with its
//! output. Exec, send and jobs answer with output, so they need read as well as write; creation
//! options that run code of the client's choosing (`shell`, `env`) need write as well as create.
//! A refusal is `PERMISSION_DENIED` naming the missing capability, and changes nothing: no
//! terminal is created, and the command it carried neither runs (its marker file never appears)
//! nor reaches the terminal's log.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use ptyhub_client::{Client, Method};
use ptyhub_protocol::error::ErrorCode;
use ptyhub_protocol::event::{Event, EventKind, Seq};
use ptyhub_test_support::Ptyhub;
use serde_json::{Value, json};

/// One token of the matrix: its owner is its label.
struct Grant {
    label: &'static str,
    read: bool,
    write: bool,
}

impl Grant {
    fn token(&self) -> String {
        format!("{}-token-0123456789", self.label)
    }

    fn may_run(&self) -> bool {
        self.read && self.write
    }
}

const GRANTS: [Grant; 4] = [
    Grant {
        label: "c",
        read: false,
        write: false,
    },
    Grant {
        label: "cr",
        read: true,
        write: false,
    },
    Grant {
        label: "cw",
        read: false,
        write: true,
    },
    Grant {
        label: "crw",
        read: true,
        write: true,
    },
];

fn config_file(dir: &Path) -> String {
    // Room for every terminal the matrix creates, so none is reclaimed on the way.
    let mut text = String::from("max_terminals = 60\n\n");
    for grant in &GRANTS {
        let mut capabilities = vec!["\"terminal.create\""];
        if grant.read {
            capabilities.push("\"terminal.read\"");
        }
        if grant.write {
            capabilities.push("\"terminal.write\"");
        }
        text.push_str(&format!(
            "[[tokens]]\ntoken = \"{}\"\nowner = \"{}\"\ncapabilities = [{}]\n\n",
            grant.token(),
            grant.label,
            capabilities.join(", ")
        ));
    }
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write config: {e}"));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    path.display().to_string()
}

/// A shell named `sh` (so the server gives it the sh integration) that leaves `mark` before
/// it becomes the real one.
fn marking_shell(dir: &Path, label: &str, mark: &Path) -> String {
    let shell_dir = dir.join(format!("shell-{label}"));
    std::fs::create_dir_all(&shell_dir).unwrap_or_else(|e| panic!("mkdir: {e}"));
    let path = shell_dir.join("sh");
    let script = format!(
        "#!/bin/sh\ntouch '{}'\nexec /bin/sh \"$@\"\n",
        mark.display()
    );
    std::fs::write(&path, script).unwrap_or_else(|e| panic!("write shell: {e}"));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    path.display().to_string()
}

async fn call(
    client: &Client,
    method: Method,
    path: &str,
    body: Option<Value>,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let bytes = body.map(|b| serde_json::to_vec(&b).unwrap_or_default());
    let answer = client
        .send_raw(method, path, bytes, headers)
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    (answer.status, answer.body)
}

/// What went wrong, collected so that one run shows every cell of the matrix that fails.
#[derive(Default)]
struct Failures(Vec<String>);

impl Failures {
    fn check(&mut self, condition: bool, what: impl FnOnce() -> String) {
        if !condition {
            self.0.push(what());
        }
    }

    /// A refusal: 403 `PERMISSION_DENIED` naming a capability the grant lacks.
    fn refused(&mut self, what: &str, status: u16, body: &Value, missing: &[&str]) {
        let message = body["message"].as_str().unwrap_or_default();
        let names_it = missing
            .iter()
            .any(|name| message.contains(&format!("missing capability {name}")));
        self.check(
            status == 403 && body["error"]["code"] == "PERMISSION_DENIED" && names_it,
            || {
                format!(
                    "{what}: expected 403 PERMISSION_DENIED naming {missing:?}, got {status} {body}"
                )
            },
        );
    }
}

/// Whether a terminal `id` was ever created (for any owner).
fn exists(hub: &Ptyhub, id: &str) -> bool {
    hub.metas().iter().any(|meta| meta["id"] == id)
}

/// Everything terminal `id` of `owner` logged, output decoded, as text.
async fn log_text(hub: &Ptyhub, owner: &str, id: &str) -> String {
    let local = hub
        .local()
        .with_header("x-ptyhub-act-as", format!("{owner} terminal.read"));
    let page = local
        .terminal(id)
        .events(Seq(0), None)
        .await
        .unwrap_or_else(|e| panic!("events of {id}: {e}"));
    let mut text = String::new();
    for line in page.events {
        match serde_json::from_value::<Event>(line.clone()).map(|e| e.kind) {
            Ok(EventKind::Output { data }) => text.push_str(&String::from_utf8_lossy(&data)),
            _ => text.push_str(&line.to_string()),
        }
        text.push('\n');
    }
    text
}

/// Whether `path` appears within `tries` × 25 ms (a command that ran leaves it).
async fn appears_within(path: &Path, tries: u32) -> bool {
    for _ in 0..tries {
        if path.exists() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    path.exists()
}

/// Whether `path` appears within the time a command that runs takes on a busy machine.
async fn appears(path: &Path) -> bool {
    appears_within(path, 800).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_send_jobs_and_code_running_creation_need_read_and_write() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let config = config_file(dir.path());
    let marks = dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap_or_else(|e| panic!("mkdir: {e}"));
    let hub = Ptyhub::start_with(env!("CARGO_BIN_EXE_ptyhub"), &["--config", &config]);
    let sse = [("accept", "text/event-stream")];
    let mut failures = Failures::default();

    for grant in &GRANTS {
        let label = grant.label;
        let client = Client::tcp(hub.addr.clone(), grant.token());
        let lacks_run: Vec<&str> = [
            (!grant.write, "terminal.write"),
            (!grant.read, "terminal.read"),
        ]
        .into_iter()
        .filter_map(|(lacks, name)| lacks.then_some(name))
        .collect();
        let mark = |name: &str| marks.join(format!("{name}-{label}"));

        // Creating with the defaults needs terminal.create only, on v2 and v1.
        let terminal = format!("t-{label}");
        let (status, body) = call(
            &client,
            Method::POST,
            "/v2/pty/sessions",
            Some(json!({ "id": terminal, "cwd": "/tmp" })),
            &[],
        )
        .await;
        assert_eq!(status, 201, "{label}: plain create: {body}");
        let (status, body) = call(
            &client,
            Method::POST,
            "/v1/shell/sessions/create",
            Some(json!({ "id": format!("v1-{label}"), "exec_dir": "/tmp" })),
            &[],
        )
        .await;
        assert_eq!(status, 200, "{label}: v1 create: {body}");

        // A shell or environment of the client's choosing runs its code: it needs write.
        let shell_mark = mark("shell");
        let shell = marking_shell(dir.path(), label, &shell_mark);
        let env_mark = mark("env");
        let env = json!({ "PROMPT_COMMAND": format!("touch '{}'", env_mark.display()) });
        for (id, body, marker) in [
            (
                format!("shell-{label}"),
                json!({ "id": format!("shell-{label}"), "cwd": "/tmp", "shell": shell }),
                &shell_mark,
            ),
            (
                format!("env-{label}"),
                json!({ "id": format!("env-{label}"), "cwd": "/tmp", "env": env }),
                &env_mark,
            ),
        ] {
            let (status, answer) =
                call(&client, Method::POST, "/v2/pty/sessions", Some(body), &[]).await;
            if grant.write {
                assert_eq!(status, 201, "{label}: {id}: {answer}");
                assert!(appears(marker).await, "{label}: {id} did not run its code");
            } else {
                failures.refused(
                    &format!("{label}: {id}"),
                    status,
                    &answer,
                    &["terminal.write"],
                );
                failures.check(!exists(&hub, &id), || {
                    format!("{label}: a refused create made {id}")
                });
                failures.check(!marker.exists(), || {
                    format!("{label}: a refused create ran {id}'s code")
                });
            }
        }

        // Exec, plain and streamed, on v2 and v1; send; a job: each types a command and
        // answers with its output.
        let v2 = format!("/v2/pty/sessions/{terminal}");
        let runs = [
            ("exec-v2", format!("{v2}/exec"), "command", &[][..]),
            ("exec-v2-sse", format!("{v2}/exec"), "command", &sse[..]),
            ("send-v2", format!("{v2}/send"), "text", &[][..]),
            ("exec-v1", "/v1/shell/exec".to_owned(), "command", &[][..]),
            (
                "exec-v1-sse",
                "/v1/shell/exec".to_owned(),
                "command",
                &sse[..],
            ),
            // Last: the job may still be running when its marker appears.
            ("job-v2", format!("{v2}/jobs"), "command", &[][..]),
        ];
        for (name, path, field, headers) in runs {
            let marker = mark(name);
            let command = format!("touch '{}'", marker.display());
            let mut body = json!({ field: command });
            if name == "send-v2" {
                body["submit"] = json!(true);
                body["deadline"] = json!(10);
            }
            if name.starts_with("exec-v1") {
                body["id"] = json!(terminal);
            }
            if name.starts_with("exec") {
                body["timeout"] = json!(30);
            }
            let (status, answer) = call(&client, Method::POST, &path, Some(body), headers).await;
            if grant.may_run() {
                assert_eq!(status, 200, "{label}: {name}: {answer}");
                assert!(appears(&marker).await, "{label}: {name} did not run");
            } else {
                failures.refused(&format!("{label}: {name}"), status, &answer, &lacks_run);
                failures.check(!appears_within(&marker, 20).await, || {
                    format!("{label}: a refused {name} ran")
                });
            }
        }

        // v1 exec creates on first use, but a refused one creates nothing.
        let fresh = format!("fresh-{label}");
        let (status, answer) = call(
            &client,
            Method::POST,
            "/v1/shell/exec",
            Some(json!({ "id": fresh, "command": "true" })),
            &[],
        )
        .await;
        if grant.may_run() {
            assert_eq!(status, 200, "{label}: v1 exec on a new id: {answer}");
        } else {
            let what = format!("{label}: v1 exec on a new id");
            failures.refused(&what, status, &answer, &lacks_run);
            failures.check(!exists(&hub, &fresh), || {
                format!("{label}: a refused v1 exec made {fresh}")
            });
        }

        // The WebSocket routes that create: the connection types (unless it watches), so it
        // needs read and write; watching needs read.
        for (path, needs_write) in [
            ("/v1/shell/ws", true),
            ("/v1/shell/ws?mode=watch", false),
            ("/v2/pty/ws", true),
        ] {
            let before = hub.metas().len();
            let allowed = grant.read && (grant.write || !needs_write);
            match client.websocket(path).await {
                Ok(mut socket) => {
                    use futures_util::StreamExt;
                    let first = socket.next().await;
                    failures.check(allowed, || {
                        format!("{label}: {path} opened without the capabilities: {first:?}")
                    });
                    assert!(
                        !format!("{first:?}").contains("\\\"error\\\""),
                        "{label}: {path}: {first:?}"
                    );
                }
                Err(error) => {
                    assert!(!allowed, "{label}: {path} refused: {error}");
                    let error = error.into_api();
                    failures.check(error.code == ErrorCode::PermissionDenied, || {
                        format!("{label}: {path}: {error:?}")
                    });
                    failures.check(hub.metas().len() == before, || {
                        format!("{label}: a refused {path} created a terminal")
                    });
                }
            }
        }

        // Nothing a refused call carried reached the terminal's log.
        if !grant.may_run() {
            let log = log_text(&hub, label, &terminal).await;
            let marks_dir = marks.display().to_string();
            failures.check(!log.contains(&marks_dir), || {
                format!("{label}: a refused call typed into {terminal}")
            });
        }
    }
    assert!(
        failures.0.is_empty(),
        "the capability matrix over REST and WebSocket:\n{}",
        failures.0.join("\n")
    );

    // The same rule through MCP over /mcp, whose tools act with the caller's rights.
    let tokens: Vec<Value> = GRANTS
        .iter()
        .map(|g| json!({ "label": g.label, "token": g.token(), "read": g.read, "write": g.write }))
        .collect();
    let env = [
        ("PTYHUB_URL", format!("http://{}", hub.addr)),
        ("PTYHUB_MARKS", marks.display().to_string()),
        ("PTYHUB_CAP_TOKENS", Value::Array(tokens).to_string()),
    ];
    super::run_python(
        "mcp/mcp_capabilities.py",
        &env,
        "install it with: pip install mcp",
    )
    .await;
}

/// The next JSON frame of `socket`, skipping output and presence; `Null` when it ended.
async fn next_json(socket: &mut ptyhub_client::LiveSocket) -> Value {
    use futures_util::StreamExt;
    loop {
        let next = tokio::time::timeout(ptyhub_test_support::default_timeout(), socket.next())
            .await
            .unwrap_or_else(|_| panic!("no frame within the timeout"));
        match next {
            Some(Ok(ptyhub_client::LiveMessage::Text(text))) => {
                let frame: Value = serde_json::from_str(text.as_str())
                    .unwrap_or_else(|e| panic!("frame is not JSON ({e}): {text}"));
                if frame["type"] != "output" && frame["type"] != "presence" {
                    return frame;
                }
            }
            Some(Ok(ptyhub_client::LiveMessage::Close(_)) | Err(_)) | None => return Value::Null,
            Some(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resize_frame_needs_terminal_resize_as_the_route_does() {
    use futures_util::SinkExt;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let config = config_file(dir.path());
    let hub = Ptyhub::start_with(env!("CARGO_BIN_EXE_ptyhub"), &["--config", &config]);
    let grant = &GRANTS[3];
    let client = Client::tcp(hub.addr.clone(), grant.token());
    let (status, body) = call(
        &client,
        Method::POST,
        "/v2/pty/sessions",
        Some(json!({ "id": "sized", "cols": 100, "rows": 30 })),
        &[],
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = call(
        &client,
        Method::POST,
        "/v2/pty/sessions/sized/resize",
        Some(json!({ "cols": 90, "rows": 20 })),
        &[],
    )
    .await;
    let mut failures = Failures::default();
    failures.refused("the resize route", status, &body, &["terminal.resize"]);

    let mut socket = client
        .websocket("/v2/pty/sessions/sized/ws?mode=attach")
        .await
        .unwrap_or_else(|e| panic!("attach: {e}"));
    let ready = next_json(&mut socket).await;
    assert_eq!(ready["type"], "ready", "{ready}");
    let frame = json!({ "type": "resize", "cols": 90, "rows": 20 });
    socket
        .send(ptyhub_client::LiveMessage::Text(frame.to_string().into()))
        .await
        .unwrap_or_else(|e| panic!("send: {e}"));
    let answer = next_json(&mut socket).await;
    failures.check(
        answer["type"] == "error" && answer["code"] == "PERMISSION_DENIED",
        || format!("a resize frame without terminal.resize: {answer}"),
    );
    // The connection goes on.
    let ping = json!({ "type": "ping", "timestamp": 7 });
    socket
        .send(ptyhub_client::LiveMessage::Text(ping.to_string().into()))
        .await
        .unwrap_or_else(|e| panic!("send: {e}"));
    let pong = next_json(&mut socket).await;
    failures.check(pong["type"] == "pong", || {
        format!("the connection ended after the refusal: {pong}")
    });
    let (_, status) = call(&client, Method::GET, "/v2/pty/sessions/sized", None, &[]).await;
    failures.check(
        status["data"]["cols"] == 100 && status["data"]["rows"] == 30,
        || format!("the size changed: {status}"),
    );
    assert!(failures.0.is_empty(), "{}", failures.0.join("\n"));
}
