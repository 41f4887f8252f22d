//! `ptyhub mcp` driven by the official Python MCP client SDK over stdio: the terminal tools,
//! the Codex pair (exec_command, write_stdin) and the capped waits with their progress.

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
