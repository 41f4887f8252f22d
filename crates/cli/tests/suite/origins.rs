//! An origin is a scheme, a host and a port: `https://127.0.0.1:PORT` is not the plain-HTTP
//! server's own page, on cookie REST, WebSocket upgrades and `/mcp` alike; `/mcp` refuses a
//! foreign `Origin` with a bearer token as WebSocket upgrades do; a request with two `Host`
//! headers is malformed.

use serde_json::json;

use super::raw_http::{Raw, raw};
use super::start;

/// The login cookie of a sign-in from the server's own page.
async fn sign_in(addr: &str, own: &str, token: &str) -> String {
    let answer = raw(
        addr,
        "POST",
        "/auth/session",
        &[("Origin", own), ("Content-Type", "application/json")],
        &json!({ "token": token }).to_string(),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let cookie = answer
        .header("set-cookie")
        .unwrap_or_else(|| panic!("no cookie: {:?}", answer.headers));
    cookie.split(';').next().unwrap_or_default().to_owned()
}

const MCP_INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"origin-test","version":"1"}}}"#;

async fn mcp_initialize(addr: &str, headers: &[(&str, &str)]) -> Raw {
    let mut all = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    all.extend_from_slice(headers);
    raw(addr, "POST", "/mcp", &all, MCP_INITIALIZE).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_scheme_or_port_is_a_foreign_origin_on_every_surface() {
    let hub = start();
    super::create(&hub.http(), json!({ "id": "mine" })).await;
    let addr = hub.addr.as_str();
    let port: u16 = addr
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_default();
    let own = format!("http://{addr}");
    let other_scheme = format!("https://{addr}");
    let other_port = format!("http://127.0.0.1:{}", port.wrapping_add(1));
    let bearer = format!("Bearer {}", hub.token);

    // Signing in: only from the page's own origin.
    for foreign in [&other_scheme, &other_port] {
        let refused = raw(
            addr,
            "POST",
            "/auth/session",
            &[("Origin", foreign), ("Content-Type", "application/json")],
            &json!({ "token": hub.token }).to_string(),
        )
        .await;
        assert_eq!(
            refused.status, 403,
            "sign-in from {foreign}: {}",
            refused.body
        );
    }
    let cookie = sign_in(addr, &own, &hub.token).await;

    // Cookie REST.
    let create = json!({ "id": "from-the-page" }).to_string();
    for foreign in [&other_scheme, &other_port] {
        let answer = raw(
            addr,
            "POST",
            "/v2/pty/sessions",
            &[
                ("Cookie", &cookie),
                ("Origin", foreign),
                ("Content-Type", "application/json"),
            ],
            &create,
        )
        .await;
        assert_eq!(answer.status, 403, "POST from {foreign}: {}", answer.body);
        assert_eq!(answer.json()["error"]["code"], "PERMISSION_DENIED");
    }

    // WebSocket upgrades, with the cookie or the token.
    let upgrade = [
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];
    let ws = "/v2/pty/sessions/mine/ws?mode=watch";
    for credential in [
        ("Cookie", cookie.as_str()),
        ("Authorization", bearer.as_str()),
    ] {
        for foreign in [&other_scheme, &other_port] {
            let mut headers = upgrade.to_vec();
            headers.push(credential);
            headers.push(("Origin", foreign));
            let answer = raw(addr, "GET", ws, &headers, "").await;
            assert_eq!(
                answer.status, 403,
                "upgrade with {} from {foreign}: {}",
                credential.0, answer.body
            );
        }
        let mut headers = upgrade.to_vec();
        headers.push(credential);
        headers.push(("Origin", &own));
        let answer = raw(addr, "GET", ws, &headers, "").await;
        assert_eq!(
            answer.status, 101,
            "the own origin upgrades: {}",
            answer.body
        );
    }

    // MCP: a foreign Origin is refused whatever the credential, as upgrades are.
    for credential in [
        ("Cookie", cookie.as_str()),
        ("Authorization", bearer.as_str()),
    ] {
        for foreign in [
            other_scheme.as_str(),
            other_port.as_str(),
            "http://evil.example",
        ] {
            let answer = mcp_initialize(addr, &[credential, ("Origin", foreign)]).await;
            assert_eq!(
                answer.status, 403,
                "/mcp with {} from {foreign}: {}",
                credential.0, answer.body
            );
        }
    }
    let own_mcp = mcp_initialize(addr, &[("Authorization", &bearer), ("Origin", &own)]).await;
    assert_eq!(own_mcp.status, 200, "{}", own_mcp.body);
    let program = mcp_initialize(addr, &[("Authorization", &bearer)]).await;
    assert_eq!(
        program.status, 200,
        "a program sends no Origin: {}",
        program.body
    );
    assert!(program.header("mcp-session-id").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_host_headers_are_refused() {
    let hub = start();
    let bearer = format!("Bearer {}", hub.token);
    let addr = hub.addr.as_str();
    for hosts in [[addr, addr], [addr, "evil.example"], ["evil.example", addr]] {
        let answer = raw(
            addr,
            "GET",
            "/v2/pty/sessions",
            &[
                ("Host", hosts[0]),
                ("Host", hosts[1]),
                ("Authorization", &bearer),
            ],
            "",
        )
        .await;
        assert_eq!(answer.status, 400, "Host {hosts:?}: {}", answer.body);
        assert_eq!(answer.json()["error"]["code"], "INVALID_INPUT");
    }
    let one = raw(
        addr,
        "GET",
        "/v2/pty/sessions",
        &[("Authorization", &bearer)],
        "",
    )
    .await;
    assert_eq!(one.status, 200, "{}", one.body);
}
