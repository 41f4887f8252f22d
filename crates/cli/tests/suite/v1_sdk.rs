//! The v1 shell API driven by the published `agent-sandbox` SDK (Python), unmodified.

use super::start;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_sandbox_sdk_drives_v1() {
    let hub = start();
    let env = [
        ("PTYHUB_URL", format!("http://{}", hub.addr)),
        ("PTYHUB_TOKEN", hub.token.clone()),
    ];
    let hint = "install it with: pip install --no-deps agent-sandbox==0.0.30 httpx pydantic";
    super::run_python("sdk/v1_shell.py", &env, hint).await;
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
