//! The OpenAPI description is generated from the code and covers every v1 and v2 route.

use super::{get, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_covers_every_route() {
    let hub = start();
    let spec = get(&hub.http(), "/openapi.json").await;
    assert_eq!(spec.status, 200);
    let spec = spec.body;
    assert!(
        spec["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.")),
        "{}",
        spec["openapi"]
    );
    assert_eq!(spec["info"]["title"], "ptyhub");
    let expected = [
        ("/v2/pty/sessions", ["post", "get"].as_slice()),
        ("/v2/pty/sessions/{id}", &["get", "delete"]),
        ("/v2/pty/sessions/{id}/exec", &["post"]),
        ("/v2/pty/sessions/{id}/screen", &["get"]),
        ("/v2/pty/sessions/{id}/input", &["post"]),
        ("/v2/pty/sessions/{id}/wait", &["post"]),
        ("/v2/pty/sessions/{id}/resize", &["post"]),
        ("/v2/pty/sessions/{id}/events", &["get"]),
        ("/v2/pty/sessions/{id}/send", &["post"]),
        ("/v2/pty/sessions/{id}/signal", &["post"]),
        ("/v2/pty/sessions/{id}/snapshot", &["get"]),
        ("/v2/pty/sessions/{id}/observe", &["get"]),
        ("/v2/pty/sessions/{id}/scrollback", &["get"]),
        ("/v2/pty/sessions/{id}/jobs", &["post"]),
        ("/v2/pty/sessions/{id}/jobs/{job}", &["get"]),
        ("/v2/pty/sessions/{id}/jobs/{job}/cancel", &["post"]),
        ("/v2/pty/sessions/{id}/jobs/{job}/await", &["post"]),
        ("/v2/pty/sessions/{id}/stop", &["post"]),
        ("/v2/version", &["get"]),
        ("/v2/backends", &["get"]),
        ("/v1/shell/sessions/create", &["post"]),
        ("/v1/shell/exec", &["post"]),
        ("/v1/shell/view", &["post"]),
        ("/v1/shell/wait", &["post"]),
        ("/v1/shell/write", &["post"]),
        ("/v1/shell/kill", &["post"]),
        ("/v1/shell/sessions", &["get", "delete"]),
        ("/v1/shell/sessions/{id}", &["delete"]),
        ("/v1/shell/sessions/update", &["post"]),
        ("/v1/shell/sessions/stats", &["get"]),
        ("/v1/shell/terminal-url", &["get"]),
        ("/v1/capabilities", &["get"]),
    ];
    for (path, methods) in expected {
        for method in methods {
            assert!(
                spec["paths"][path][method].is_object(),
                "{method} {path} is missing from /openapi.json"
            );
        }
    }
    for schema in ["CommandResult", "ErrorBody", "SendResponse", "TerminalInfo"] {
        assert!(
            spec["components"]["schemas"][schema].is_object(),
            "schema {schema} missing"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operation_ids_are_unique() {
    let hub = start();
    let spec = get(&hub.http(), "/openapi.json").await.body;
    let mut ids: Vec<String> = spec["paths"]
        .as_object()
        .into_iter()
        .flat_map(|paths| paths.values())
        .filter_map(|item| item.as_object())
        .flat_map(|methods| methods.values())
        .filter_map(|op| op["operationId"].as_str().map(str::to_owned))
        .collect();
    let count = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), count, "duplicate operationIds in {ids:?}");
    assert!(count >= 35);
}
