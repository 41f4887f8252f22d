//! `ptyhub mcp` driven by the official Python MCP client SDK over stdio.

use super::start;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_client_sdk_opens_runs_and_answers_a_prompt() {
    let hub = start();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/mcp_stdio.py");
    let output = tokio::process::Command::new("python3")
        .arg(script)
        .env("PTYHUB_BIN", env!("CARGO_BIN_EXE_ptyhub"))
        .env("PTYHUB_SOCKET", &hub.socket)
        .env("PTYHUB_URL", format!("http://{}", hub.addr))
        .env("PTYHUB_TOKEN", &hub.token)
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run python3: {e}"));
    assert!(
        output.status.success(),
        "the MCP client script failed (install it with: pip install mcp)\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
