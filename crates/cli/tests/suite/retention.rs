//! `retention`: an `expiring` terminal is reclaimed before any persistent one under the
//! live-terminal limit and its files are removed when it closes; a persistent one keeps its
//! history; under `PTYHUB_BACKEND=auto` an expiring terminal is native.

use serde_json::json;

use super::{create, get, post};
use ptyhub_client::Method;
use ptyhub_test_support::{Ptyhub, data};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiring_terminal_is_reclaimed_first_and_its_files_go_a_persistent_one_keeps_them() {
    let hub = Ptyhub::start_with(env!("CARGO_BIN_EXE_ptyhub"), &["--max-terminals", "2"]);
    let client = hub.http();
    // The persistent terminal is the least recently used one: LRU alone would pick it.
    create(&client, json!({ "id": "kept", "cwd": "/" })).await;
    create(
        &client,
        json!({ "id": "brief", "cwd": "/", "retention": "expiring" }),
    )
    .await;
    let brief = get(&client, "/v2/pty/sessions/brief").await;
    assert_eq!(data(&brief)["retention"], "expiring", "{}", brief.body);
    let kept = get(&client, "/v2/pty/sessions/kept").await;
    assert_eq!(data(&kept)["retention"], "persistent", "{}", kept.body);
    let meta = hub
        .metas()
        .into_iter()
        .find(|m| m["id"] == "brief")
        .unwrap_or_else(|| panic!("no meta.json"));
    assert_eq!(meta["retention"], "expiring", "{meta}");
    assert!(hub.terminal_dir("brief").is_some());

    create(&client, json!({ "id": "third", "cwd": "/" })).await;
    let mut live = super::live_ids(&client).await;
    live.sort();
    assert_eq!(live, ["kept", "third"], "the expiring terminal made room");
    assert!(
        hub.terminal_dir("brief").is_none(),
        "the expiring terminal's files are still there"
    );
    let gone = get(&client, "/v2/pty/sessions/brief").await;
    assert_eq!(gone.status, 404, "{}", gone.body);

    let closed = client
        .send(Method::DELETE, "/v2/pty/sessions/kept", None)
        .await
        .unwrap_or_else(|e| panic!("close: {e}"));
    assert_eq!(closed.status, 200, "{}", closed.body);
    let dir = hub
        .terminal_dir("kept")
        .unwrap_or_else(|| panic!("the persistent terminal's files are gone"));
    assert!(dir.join("events.jsonl").exists());
    let events = get(&client, "/v2/pty/sessions/kept/events").await;
    assert_eq!(events.status, 200, "{}", events.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_must_be_persistent_or_expiring_and_expiring_is_native_under_auto() {
    let hub = Ptyhub::start_with_env(
        env!("CARGO_BIN_EXE_ptyhub"),
        &[],
        &[("PTYHUB_BACKEND", "auto")],
    );
    let client = hub.http();
    let refused = post(
        &client,
        "/v2/pty/sessions",
        json!({ "id": "odd", "retention": "forever" }),
    )
    .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], "INVALID_INPUT");
    assert!(hub.terminal_dir("odd").is_none());

    create(
        &client,
        json!({ "id": "short", "cwd": "/", "retention": "expiring" }),
    )
    .await;
    let info = get(&client, "/v2/pty/sessions/short").await;
    assert_eq!(data(&info)["backend"], "native", "{}", info.body);
}
