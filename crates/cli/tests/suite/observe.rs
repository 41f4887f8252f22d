//! Reading without changing: snapshots (alternate screen, title), cursors and deltas,
//! scrollback pages.

use serde_json::{Value, json};

use super::{create, exec, get, post, start};
use ptyhub_test_support::{data, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursors_give_exactly_what_changed() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({})).await;
    let first = get(&client, &format!("/v2/pty/sessions/{id}/observe")).await;
    assert_eq!(data(&first)["kind"], "snapshot", "{}", first.body);
    let cursor = data(&first)["cursor"]
        .as_str()
        .unwrap_or_default()
        .to_owned();

    exec(&client, &id, "echo one; printf '\\033]0;my title\\007'").await;
    let delta = get(
        &client,
        &format!("/v2/pty/sessions/{id}/observe?cursor={cursor}"),
    )
    .await;
    assert_eq!(data(&delta)["kind"], "delta");
    let output = data(&delta)["output"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(output.contains("one"), "{output:?}");
    let mut next = data(&delta)["cursor"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // The next prompt may still be on its way: follow the cursor until a delta is empty.
    let mut quiet = Value::Null;
    for _ in 0..100 {
        let answer = get(
            &client,
            &format!("/v2/pty/sessions/{id}/observe?cursor={next}"),
        )
        .await;
        quiet = data(&answer).clone();
        if quiet["output"] == "" {
            break;
        }
        next = quiet["cursor"].as_str().unwrap_or_default().to_owned();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(quiet["output"], "", "the terminal went quiet");
    assert_eq!(
        quiet["cursor"],
        next.as_str(),
        "nothing new: the cursor stays"
    );

    let other = create(&client, json!({})).await;
    let foreign = get(
        &client,
        &format!("/v2/pty/sessions/{other}/observe?cursor={next}"),
    )
    .await;
    assert_eq!(foreign.status, 400);
    assert_eq!(foreign.body["error"]["code"], "INVALID_CURSOR");
    let garbage = get(
        &client,
        &format!("/v2/pty/sessions/{id}/observe?cursor=nonsense"),
    )
    .await;
    assert_eq!(garbage.body["error"]["code"], "INVALID_CURSOR");

    let snapshot = get(&client, &format!("/v2/pty/sessions/{id}/snapshot")).await;
    assert_eq!(data(&snapshot)["title"], "my title");
    assert_eq!(data(&snapshot)["foreground_program"], "bash");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pager_shows_in_the_alternate_screen() {
    let hub = start();
    let client = hub.http();
    let id = create(&client, json!({ "cols": 80, "rows": 24 })).await;
    post(
        &client,
        &format!("/v2/pty/sessions/{id}/exec"),
        json!({ "command": "seq 1 1000 | less", "async": true }),
    )
    .await;
    let snapshot = wait_until("less shows its first page", || async {
        let snapshot = get(&client, &format!("/v2/pty/sessions/{id}/snapshot")).await;
        let view = data(&snapshot).clone();
        (view["is_alternate_screen"] == true && view["screen"][0] == "1").then_some(view)
    })
    .await;
    assert_eq!(snapshot["foreground_program"], "less");
    post(
        &client,
        &format!("/v2/pty/sessions/{id}/input"),
        json!({ "input": "q" }),
    )
    .await;
    wait_until("less quits", || async {
        let snapshot = get(&client, &format!("/v2/pty/sessions/{id}/snapshot")).await;
        (data(&snapshot)["is_alternate_screen"] == false).then_some(())
    })
    .await;

    exec(&client, &id, "seq 1 300").await;
    let page = get(
        &client,
        &format!("/v2/pty/sessions/{id}/scrollback?offset=0&lines=50"),
    )
    .await;
    let lines = data(&page)["lines"].as_array().cloned().unwrap_or_default();
    assert_eq!(lines.len(), 50);
    assert!(lines.iter().any(|l| l == "300"), "{lines:?}");
    assert_eq!(data(&page)["has_more"], true);
    let older = get(
        &client,
        &format!("/v2/pty/sessions/{id}/scrollback?offset=100&lines=10"),
    )
    .await;
    let older_lines = data(&older)["lines"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(older_lines.len(), 10);
    assert!(older_lines.iter().all(|l| {
        l.as_str()
            .is_some_and(|t| t.parse::<u32>().is_ok_and(|n| n < 300))
    }));
}
