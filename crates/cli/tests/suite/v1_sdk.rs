//! The v1 shell API driven by the published `agent-sandbox` SDK (Python), unmodified.

use super::start;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_sandbox_sdk_drives_v1() {
    let hub = start();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/v1_shell.py");
    let output = tokio::process::Command::new("python3")
        .arg(script)
        .env("PTYHUB_URL", format!("http://{}", hub.addr))
        .env("PTYHUB_TOKEN", &hub.token)
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run python3: {e}"));
    assert!(
        output.status.success(),
        "the SDK script failed (install it with: pip install --no-deps agent-sandbox==0.0.30 httpx pydantic)\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
