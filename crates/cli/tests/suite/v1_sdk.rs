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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_and_v2_are_two_views_of_the_same_terminals() {
    use serde_json::json;

    let hub = start();
    let client = hub.http();
    let created = super::post(
        &client,
        "/v1/shell/sessions/create",
        json!({ "id": "shared", "exec_dir": "/tmp" }),
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.body);
    let v1 = super::post(
        &client,
        "/v1/shell/exec",
        json!({ "id": "shared", "command": "export FROM=v1" }),
    )
    .await;
    assert_eq!(v1.body["data"]["status"], "completed", "{}", v1.body);
    let v2 = super::exec(&client, "shared", "echo $FROM").await;
    assert_eq!(v2["output"], "v1");
    let cli = hub.cli(&["terminal", "exec", "shared", "--", "pwd"]);
    assert_eq!(String::from_utf8_lossy(&cli.stdout), "/tmp\n");
    assert!(
        hub.metas().iter().any(|m| m["id"] == "shared"),
        "it is in the state dir"
    );
    let busy = super::post(
        &client,
        "/v1/shell/exec",
        json!({ "id": "shared", "command": "sleep 5", "async_mode": true }),
    )
    .await;
    assert_eq!(busy.status, 200);
    let second = super::post(
        &client,
        "/v1/shell/exec",
        json!({ "id": "shared", "command": "echo no" }),
    )
    .await;
    assert_eq!(
        second.status, 400,
        "v1 answers busy with 400 (the SDK retries 409)"
    );
    assert_eq!(
        second.body["message"],
        "Session already has a running command"
    );
}
