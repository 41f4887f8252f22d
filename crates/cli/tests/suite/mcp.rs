//! `ptyhub mcp` driven by the official Python MCP client SDK over stdio: the terminal tools,
//! the Codex pair (exec_command, write_stdin) and the capped waits with their progress; and
//! `/mcp` sessions, which belong to the principal that opened them.

use ptyhub_test_support::Ptyhub;

use super::start;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_client_sdk_opens_runs_and_answers_a_prompt() {
    let hub = start();
    let env = [
        ("PTYHUB_BIN", env!("CARGO_BIN_EXE_ptyhub").to_owned()),
        ("PTYHUB_SOCKET", hub.socket.display().to_string()),
        ("PTYHUB_URL", format!("http://{}", hub.addr)),
        ("PTYHUB_TOKEN", hub.token.clone()),
    ];
    super::run_python("mcp/mcp_stdio.py", &env, "install it with: pip install mcp").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_codex_pair_and_capped_waits_answer_the_mcp_client_sdk() {
    // A short cap for `/mcp` too, so its capped wait is quick.
    let hub = Ptyhub::start_with(env!("CARGO_BIN_EXE_ptyhub"), &["--mcp-wait-cap-secs", "2"]);
    let env = [
        ("PTYHUB_BIN", env!("CARGO_BIN_EXE_ptyhub").to_owned()),
        ("PTYHUB_SOCKET", hub.socket.display().to_string()),
        ("PTYHUB_URL", format!("http://{}", hub.addr)),
        ("PTYHUB_TOKEN", hub.token.clone()),
    ];
    super::run_python("mcp/mcp_codex.py", &env, "install it with: pip install mcp").await;
}

const OTHER_OWNER_TOKEN: &str = "other-owner-token-0123456789";
const NARROW_TOKEN: &str = "narrow-token-0123456789";

/// A configuration with another owner's token, and a token of the server's own user (the
/// owner the generated token acts for) with fewer capabilities.
fn grants_config(dir: &std::path::Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    let own_owner = rustix::process::getuid().as_raw();
    let path = dir.join("config.toml");
    let text = format!(
        r#"[[tokens]]
token = "{OTHER_OWNER_TOKEN}"
owner = "other"
capabilities = ["terminal.create", "terminal.read", "terminal.write", "terminal.kill"]

[[tokens]]
token = "{NARROW_TOKEN}"
owner = "{own_owner}"
capabilities = ["terminal.read"]
"#
    );
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write config: {e}"));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    path.display().to_string()
}

/// One JSON-RPC message to `/mcp` as `token`, in `session` if given.
pub async fn mcp_call(
    addr: &str,
    method: &str,
    token: &str,
    session: Option<&str>,
    body: &str,
) -> super::raw_http::Raw {
    let bearer = format!("Bearer {token}");
    let mut headers = vec![
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    if let Some(session) = session {
        headers.push(("mcp-session-id", session));
        headers.push(("mcp-protocol-version", "2025-06-18"));
    }
    super::raw_http::raw(addr, method, "/mcp", &headers, body).await
}

pub const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"session-test","version":"1"}}}"#;
pub const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
const LIST_TOOLS: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_session_belongs_to_the_principal_that_opened_it() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let config = grants_config(dir.path());
    let hub = Ptyhub::start_with(env!("CARGO_BIN_EXE_ptyhub"), &["--config", &config]);
    let addr = hub.addr.as_str();
    let opened = mcp_call(addr, "POST", &hub.token, None, INITIALIZE).await;
    assert_eq!(opened.status, 200, "{}", opened.body);
    let session = opened
        .header("mcp-session-id")
        .unwrap_or_else(|| panic!("no session id: {:?}", opened.headers))
        .to_owned();
    let initialized = mcp_call(addr, "POST", &hub.token, Some(&session), INITIALIZED).await;
    assert_eq!(initialized.status, 202, "{}", initialized.body);
    let tools = mcp_call(addr, "POST", &hub.token, Some(&session), LIST_TOOLS).await;
    assert_eq!(tools.status, 200, "{}", tools.body);
    assert!(tools.body.contains("terminal_exec"), "{}", tools.body);

    // What a session that does not exist answers, for each method.
    let unknown = "00000000-0000-0000-0000-000000000000";
    for method in ["POST", "GET", "DELETE"] {
        let absent = mcp_call(addr, method, &hub.token, Some(unknown), LIST_TOOLS).await;
        assert_eq!(
            absent.status, 404,
            "{method} of an unknown session: {}",
            absent.body
        );
        for token in [OTHER_OWNER_TOKEN, NARROW_TOKEN] {
            let foreign = mcp_call(addr, method, token, Some(&session), LIST_TOOLS).await;
            assert_eq!(
                (foreign.status, foreign.body.as_str()),
                (absent.status, absent.body.as_str()),
                "{method} of another principal's session answers as an unknown one"
            );
        }
    }

    // The owner's session goes on; only its owner ends it.
    let again = mcp_call(addr, "POST", &hub.token, Some(&session), LIST_TOOLS).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert!(again.body.contains("terminal_exec"), "{}", again.body);
    let ended = mcp_call(addr, "DELETE", &hub.token, Some(&session), "").await;
    assert_eq!(ended.status, 202, "{}", ended.body);
    let after = mcp_call(addr, "POST", &hub.token, Some(&session), LIST_TOOLS).await;
    assert_eq!(after.status, 404, "{}", after.body);

    // Another principal opens its own session and uses it.
    let theirs = mcp_call(addr, "POST", OTHER_OWNER_TOKEN, None, INITIALIZE).await;
    assert_eq!(theirs.status, 200, "{}", theirs.body);
    let their_session = theirs
        .header("mcp-session-id")
        .unwrap_or_default()
        .to_owned();
    let their_tools = mcp_call(
        addr,
        "POST",
        OTHER_OWNER_TOKEN,
        Some(&their_session),
        LIST_TOOLS,
    )
    .await;
    assert_eq!(their_tools.status, 200, "{}", their_tools.body);
}
