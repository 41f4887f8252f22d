//! Tokens of the configuration file: each acts for its own owner with the capabilities it was
//! given, over REST, WebSocket and MCP; another owner's terminals do not exist for it.

use std::os::unix::fs::PermissionsExt;

use ptyhub_client::{Client, Method};
use serde_json::{Value, json};

use super::{create, exec};
use ptyhub_test_support::Ptyhub;

const BOT_TOKEN: &str = "bot-token-0123456789";
const VIEWER_TOKEN: &str = "viewer-token-0123456789";

fn config_file(dir: &std::path::Path) -> String {
    let path = dir.join("config.toml");
    let text = format!(
        r#"max_terminals = 7

[[tokens]]
token = "{BOT_TOKEN}"
owner = "bot"
capabilities = ["terminal.create", "terminal.read", "terminal.write"]

[[tokens]]
token = "{VIEWER_TOKEN}"
owner = "viewer"
capabilities = ["terminal.read"]
"#
    );
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write config: {e}"));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    path.display().to_string()
}

async fn call(client: &Client, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let answer = client
        .send(method, path, body.as_ref())
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    (answer.status, answer.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_token_acts_for_its_owner_with_its_capabilities_only() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let config = config_file(dir.path());
    let hub = Ptyhub::start_with(env!("CARGO_BIN_EXE_ptyhub"), &["--config", &config]);
    let admin = hub.http();
    let mine = create(&admin, json!({ "id": "mine", "cwd": "/tmp" })).await;
    let bot = Client::tcp(hub.addr.clone(), BOT_TOKEN);
    let viewer = Client::tcp(hub.addr.clone(), VIEWER_TOKEN);

    // The file's settings apply (a flag would override them).
    let (_, stats) = call(&admin, Method::GET, "/v1/shell/sessions/stats", None).await;
    assert_eq!(stats["data"]["max_sessions"], 7, "{stats}");

    // Another owner's terminal does not exist for the bot.
    assert!(super::live_ids(&bot).await.is_empty());
    let (status, body) = call(&bot, Method::GET, &format!("/v2/pty/sessions/{mine}"), None).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (404, json!("SESSION_NOT_FOUND"))
    );

    // What it may: create, read, write.
    let (status, body) = call(
        &bot,
        Method::POST,
        "/v2/pty/sessions",
        Some(json!({ "id": "botty", "cwd": "/tmp" })),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["data"]["owner"], "bot");
    let ran = exec(&bot, "botty", "echo bot-$((1 + 1))").await;
    assert_eq!(ran["output"], "bot-2");
    let mut watcher = bot
        .websocket("/v2/pty/sessions/botty/ws?mode=watch")
        .await
        .unwrap_or_else(|e| panic!("ws: {e}"));
    use futures_util::StreamExt;
    let ready = watcher.next().await;
    assert!(format!("{ready:?}").contains("\\\"ready\\\""), "{ready:?}");

    // What it may not: signal, kill, stop — read and write never imply them.
    for (method, path, body) in [
        (
            Method::POST,
            "/v2/pty/sessions/botty/signal",
            Some(json!({ "signal": "INT" })),
        ),
        (Method::DELETE, "/v2/pty/sessions/botty", None),
        (Method::POST, "/v2/pty/sessions/botty/stop", Some(json!({}))),
    ] {
        let (status, answer) = call(&bot, method, path, body).await;
        assert_eq!(
            (status, answer["error"]["code"].clone()),
            (403, json!("PERMISSION_DENIED")),
            "{path}: {answer}"
        );
    }

    // The viewer only reads: no create, no input, no attach.
    let (status, body) = call(&viewer, Method::POST, "/v2/pty/sessions", Some(json!({}))).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (403, json!("PERMISSION_DENIED"))
    );
    let attach = viewer.websocket("/v2/pty/ws").await;
    assert!(attach.is_err(), "a read-only token cannot open a terminal");

    // The server's own owner does not see the bot's terminal; it lives under the bot's home.
    assert_eq!(super::live_ids(&admin).await, vec![mine.clone()]);
    let botty = hub
        .metas()
        .into_iter()
        .find(|m| m["id"] == "botty")
        .unwrap_or_default();
    assert_eq!(botty["owner"], "bot");

    // MCP over HTTP with the bot's token can do exactly what the token may.
    let env = [
        ("PTYHUB_URL", format!("http://{}", hub.addr)),
        ("PTYHUB_LIMITED_TOKEN", BOT_TOKEN.to_owned()),
        ("PTYHUB_FOREIGN_ID", mine.clone()),
    ];
    super::run_python(
        "mcp/mcp_limited.py",
        &env,
        "install it with: pip install mcp",
    )
    .await;

    // On the local socket a client may only ask for less than it has.
    let local = hub.local();
    let narrowed = [("x-ptyhub-act-as", "bot terminal.read")];
    let read = local
        .send_raw(Method::GET, "/v2/pty/sessions", None, &narrowed)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read.status, 200, "{}", read.body);
    assert!(read.body.to_string().contains("botty") && !read.body.to_string().contains("\"mine\""));
    let write = local
        .send_raw(
            Method::POST,
            "/v2/pty/sessions",
            Some(b"{}".to_vec()),
            &narrowed,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        write.body["error"]["code"], "PERMISSION_DENIED",
        "{}",
        write.body
    );
    let malformed = local
        .send_raw(
            Method::GET,
            "/v2/pty/sessions",
            None,
            &[("x-ptyhub-act-as", "../etc terminal.read")],
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(malformed.status, 400, "{}", malformed.body);

    // A wrong token is no one.
    let stranger = Client::tcp(hub.addr.clone(), "not-a-token-at-all");
    let (status, _) = call(&stranger, Method::GET, "/v2/pty/sessions", None).await;
    assert_eq!(status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_config_file_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let path = dir.path().join("config.toml");
    for (text, mode, reason) in [
        ("nonsense = 1\n", 0o600, "not valid"),
        ("workers = 0\n", 0o600, "not a thread count from 1 to 1024"),
        (
            "[[tokens]]\ntoken = \"short\"\nowner = \"bot\"\n",
            0o600,
            "at least 16",
        ),
        (
            "[[tokens]]\ntoken = \"0123456789abcdef\"\nowner = \"bot\"\n",
            0o644,
            "chmod 600",
        ),
    ] {
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("write: {e}"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .unwrap_or_else(|e| panic!("chmod: {e}"));
        let (status, stderr) = ptyhub_test_support::serve_refused(
            env!("CARGO_BIN_EXE_ptyhub"),
            &["--config", &path.display().to_string()],
            &[],
        );
        assert!(!status.success());
        assert!(stderr.contains(reason), "{text}: {stderr}");
    }
}
