//! The web pages and the browser's sign-in: pages and assets load without a token, every data
//! route needs one (or the login cookie, only from this server's own pages), tickets work once.

use serde_json::json;

use super::start;

use super::raw_http::Raw;

/// One request with exactly these headers (see [`super::raw_http::raw`]), a body sent as JSON.
async fn raw(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Raw {
    let mut headers = headers.to_vec();
    if !body.is_empty() {
        headers.push(("Content-Type", "application/json"));
    }
    super::raw_http::raw(addr, method, path, &headers, body).await
}

/// Signs in with `body` and returns the `name=value` of the login cookie.
async fn sign_in(addr: &str, body: serde_json::Value) -> Raw {
    raw(addr, "POST", "/auth/session", &[], &body.to_string()).await
}

fn cookie_of(answer: &Raw) -> String {
    let set = answer
        .header("set-cookie")
        .unwrap_or_else(|| panic!("no Set-Cookie in {:?}", answer.headers));
    set.split(';').next().unwrap_or_default().trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_and_assets_load_without_a_token_and_hold_no_data() {
    let hub = start();
    let id = super::create(&hub.http(), json!({ "id": "secret-name" })).await;
    for page in [
        "/",
        "/terminal?session_id=secret-name&mode=watch",
        "/play?session_id=secret-name",
    ] {
        let answer = raw(&hub.addr, "GET", page, &[], "").await;
        assert_eq!(answer.status, 200, "{page}");
        assert_eq!(
            answer.header("content-type"),
            Some("text/html; charset=utf-8")
        );
        assert!(
            answer
                .header("content-security-policy")
                .is_some_and(|p| p.contains("default-src 'self'")),
            "{:?}",
            answer.headers
        );
        assert!(!answer.body.contains(&hub.token) && !answer.body.contains(&id));
    }
    let xterm = raw(
        &hub.addr,
        "GET",
        "/assets/vendor/xterm@6.0.0/lib/xterm.js",
        &[],
        "",
    )
    .await;
    assert_eq!(xterm.status, 200);
    assert_eq!(
        xterm.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    assert_eq!(
        xterm.header("cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    assert!(xterm.body.len() > 100_000, "the whole UMD build");
    let css = raw(
        &hub.addr,
        "GET",
        "/assets/vendor/xterm@6.0.0/css/xterm.css",
        &[],
        "",
    )
    .await;
    assert_eq!(css.header("content-type"), Some("text/css; charset=utf-8"));
    let license = raw(
        &hub.addr,
        "GET",
        "/assets/vendor/addon-fit@0.11.0/LICENSE",
        &[],
        "",
    )
    .await;
    assert!(license.body.contains("Permission is hereby granted"));
    let script = raw(&hub.addr, "GET", "/assets/terminal.js", &[], "").await;
    assert_eq!(script.header("cache-control"), Some("no-cache"));
    let etag = script
        .header("etag")
        .unwrap_or_else(|| panic!("no ETag"))
        .to_owned();
    let again = raw(
        &hub.addr,
        "GET",
        "/assets/terminal.js",
        &[("If-None-Match", &etag)],
        "",
    )
    .await;
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());
    let missing = raw(&hub.addr, "GET", "/assets/nope.js", &[], "").await;
    assert_eq!(missing.status, 404);
    let rebinding = raw(&hub.addr, "GET", "/", &[("Host", "evil.example:80")], "").await;
    assert_eq!(rebinding.status, 403, "pages keep the Host check too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_data_route_answers_without_a_token_or_login() {
    let hub = start();
    super::create(&hub.http(), json!({ "id": "t" })).await;
    let routes = [
        ("GET", "/v2/pty/sessions", ""),
        ("GET", "/v2/pty/sessions/t", ""),
        ("POST", "/v2/pty/sessions", "{}"),
        ("POST", "/v2/pty/sessions/t/exec", r#"{"command":"true"}"#),
        ("GET", "/v2/pty/sessions/t/snapshot", ""),
        ("GET", "/v1/shell/sessions", ""),
        ("GET", "/v1/shell/terminal-url", ""),
        ("POST", "/v1/shell/exec", r#"{"command":"true"}"#),
        ("GET", "/openapi.json", ""),
        ("POST", "/mcp", "{}"),
    ];
    let bogus = "ptyhub_login_1=nope.nope";
    for (method, path, body) in routes {
        for headers in [vec![], vec![("Cookie", bogus)]] {
            let answer = raw(&hub.addr, method, path, &headers, body).await;
            assert_eq!(
                answer.status, 401,
                "{method} {path} {headers:?}: {}",
                answer.body
            );
            assert_eq!(answer.json()["error"]["code"], "UNAUTHENTICATED");
        }
    }
    let wrong = sign_in(&hub.addr, json!({ "token": "not-the-token" })).await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("set-cookie").is_none());
    let both = sign_in(&hub.addr, json!({ "token": hub.token, "ticket": "x" })).await;
    assert_eq!(both.status, 400, "one credential at a time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_url_ticket_signs_a_browser_in_once() {
    let hub = start();
    let client = hub.http();
    let id = super::create(&client, json!({})).await;
    let answer = super::get(&client, &format!("/v1/shell/terminal-url?session_id={id}")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let url = answer.body["data"].as_str().unwrap_or_default().to_owned();
    let prefix = format!("http://{}/terminal?session_id={id}#ticket=", hub.addr);
    let ticket = url
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{url} does not start with {prefix}"));
    assert!(ticket.len() >= 40, "a random ticket: {ticket}");
    let missing = super::get(&client, "/v1/shell/terminal-url?session_id=nope").await;
    assert_eq!(missing.status, 404);
    let fresh = super::get(&client, "/v1/shell/terminal-url").await;
    let fresh = fresh.body["data"].as_str().unwrap_or_default().to_owned();
    assert!(
        fresh.contains("/terminal?session_id=") && fresh.contains("#ticket=") && fresh != url,
        "{fresh}"
    );

    let signed_in = sign_in(&hub.addr, json!({ "ticket": ticket })).await;
    assert_eq!(signed_in.status, 200, "{}", signed_in.body);
    let set = signed_in
        .header("set-cookie")
        .unwrap_or_default()
        .to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attribute), "{set}");
    }
    let cookie = cookie_of(&signed_in);
    let port = hub.addr.rsplit(':').next().unwrap_or_default();
    assert!(
        cookie.starts_with(&format!("ptyhub_login_{port}=")),
        "{cookie}"
    );
    assert!(!cookie.contains(&hub.token) && !cookie.contains(ticket));
    let status = raw(
        &hub.addr,
        "GET",
        &format!("/v2/pty/sessions/{id}"),
        &[("Cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(
        status.status, 200,
        "the ticket's login reads: {}",
        status.body
    );

    let again = sign_in(&hub.addr, json!({ "ticket": ticket })).await;
    assert_eq!(again.status, 401, "a ticket works once: {}", again.body);
    assert!(again.header("set-cookie").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_cookie_works_only_from_this_servers_own_pages() {
    let hub = start();
    let id = super::create(&hub.http(), json!({ "id": "mine" })).await;
    let own = format!("http://{}", hub.addr);
    let port = hub.addr.rsplit(':').next().unwrap_or_default();
    let foreign = "http://127.0.0.1:1";

    let refused = raw(
        &hub.addr,
        "POST",
        "/auth/session",
        &[("Origin", foreign)],
        &json!({ "token": hub.token }).to_string(),
    )
    .await;
    assert_eq!(refused.status, 403, "a foreign page cannot sign in");
    let signed_in = raw(
        &hub.addr,
        "POST",
        "/auth/session",
        &[("Origin", &own)],
        &json!({ "token": hub.token }).to_string(),
    )
    .await;
    assert_eq!(signed_in.status, 200, "{}", signed_in.body);
    let cookie = cookie_of(&signed_in);
    assert!(!cookie.contains(&hub.token), "the cookie is not the token");

    let list = raw(
        &hub.addr,
        "GET",
        "/v2/pty/sessions",
        &[("Cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(list.status, 200, "{}", list.body);
    assert_eq!(list.json()["data"]["sessions"][0]["session_id"], id);
    let same_origin_get = raw(
        &hub.addr,
        "GET",
        "/v2/pty/sessions",
        &[("Cookie", &cookie), ("Origin", &own)],
        "",
    )
    .await;
    assert_eq!(same_origin_get.status, 200);
    let foreign_get = raw(
        &hub.addr,
        "GET",
        "/v2/pty/sessions",
        &[("Cookie", &cookie), ("Origin", foreign)],
        "",
    )
    .await;
    assert_eq!(foreign_get.status, 403, "{}", foreign_get.body);

    let create = json!({ "id": "from-the-page" }).to_string();
    for origin in [None, Some(foreign), Some("null")] {
        let mut headers = vec![("Cookie", cookie.as_str())];
        headers.extend(origin.map(|o| ("Origin", o)));
        let answer = raw(&hub.addr, "POST", "/v2/pty/sessions", &headers, &create).await;
        assert_eq!(
            answer.status, 403,
            "POST with Origin {origin:?}: {}",
            answer.body
        );
        assert_eq!(answer.json()["error"]["code"], "PERMISSION_DENIED");
    }
    let killed = raw(
        &hub.addr,
        "DELETE",
        "/v2/pty/sessions/mine",
        &[("Cookie", &cookie), ("Origin", foreign)],
        "",
    )
    .await;
    assert_eq!(killed.status, 403);
    let created = raw(
        &hub.addr,
        "POST",
        "/v2/pty/sessions",
        &[("Cookie", &cookie), ("Origin", &own)],
        &create,
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);

    let upgrade = [
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Cookie", cookie.as_str()),
    ];
    let ws = "/v2/pty/sessions/mine/ws?mode=watch";
    for origin in [None, Some(foreign)] {
        let mut headers = upgrade.to_vec();
        headers.extend(origin.map(|o| ("Origin", o)));
        let answer = raw(&hub.addr, "GET", ws, &headers, "").await;
        assert_eq!(
            answer.status, 403,
            "upgrade with Origin {origin:?}: {}",
            answer.body
        );
    }
    let mut headers = upgrade.to_vec();
    headers.push(("Origin", &own));
    let answer = raw(&hub.addr, "GET", ws, &headers, "").await;
    assert_eq!(
        answer.status, 101,
        "the page's own upgrade: {}",
        answer.body
    );

    let bearer = format!("Bearer {}", hub.token);
    let with_token = raw(
        &hub.addr,
        "POST",
        "/v2/pty/sessions",
        &[("Authorization", &bearer), ("Origin", foreign)],
        &json!({ "id": "by-token" }).to_string(),
    )
    .await;
    assert_eq!(
        with_token.status, 201,
        "a bearer token is not asked for an Origin: {}",
        with_token.body
    );

    let other_port = format!("ptyhub_login_{}=x.y", port.parse::<u32>().unwrap_or(0) + 1);
    let foreign_cookie = raw(
        &hub.addr,
        "GET",
        "/v2/pty/sessions",
        &[("Cookie", &format!("{other_port}; {cookie}"))],
        "",
    )
    .await;
    assert_eq!(
        foreign_cookie.status, 200,
        "another server's cookie on this host is ignored"
    );

    let logout = raw(
        &hub.addr,
        "POST",
        "/auth/logout",
        &[("Cookie", &cookie), ("Origin", &own)],
        "",
    )
    .await;
    assert_eq!(logout.status, 200);
    assert!(
        logout
            .header("set-cookie")
            .is_some_and(|c| c.contains("Max-Age=0")),
        "{:?}",
        logout.headers
    );
    let after = raw(
        &hub.addr,
        "GET",
        "/v2/pty/sessions",
        &[("Cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(after.status, 401, "the login ended");
}

/// A GET that would create a terminal is a state change: an `<img>` on any page could make
/// the browser send it with the login cookie and no Origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_with_only_the_login_cookie_creates_nothing() {
    let hub = start();
    super::create(&hub.http(), json!({ "id": "mine" })).await;
    let own = format!("http://{}", hub.addr);
    let signed_in = raw(
        &hub.addr,
        "POST",
        "/auth/session",
        &[("Origin", &own)],
        &json!({ "token": hub.token }).to_string(),
    )
    .await;
    assert_eq!(signed_in.status, 200, "{}", signed_in.body);
    let cookie = cookie_of(&signed_in);
    let listed_before = hub.metas().len();
    let image = raw(
        &hub.addr,
        "GET",
        "/v1/shell/terminal-url",
        &[("Cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(image.status, 403, "{}", image.body);
    assert_eq!(image.json()["error"]["code"], "PERMISSION_DENIED");
    assert_eq!(hub.metas().len(), listed_before, "nothing was created");
    let link = raw(
        &hub.addr,
        "GET",
        "/v1/shell/terminal-url?session_id=mine",
        &[("Cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(
        link.status, 200,
        "an existing terminal's link: {}",
        link.body
    );
    let from_the_page = raw(
        &hub.addr,
        "GET",
        "/v1/shell/terminal-url",
        &[("Cookie", &cookie), ("Origin", &own)],
        "",
    )
    .await;
    assert_eq!(from_the_page.status, 200, "{}", from_the_page.body);
}

/// Regression: every `4XX` answer lacked the `description` OpenAPI requires, so
/// `openapi-spec-validator` (and the client generators and API tools built on it) refused the
/// document.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_json_validates_as_openapi_3_1() {
    let hub = start();
    let env = [
        ("PTYHUB_URL", format!("http://{}", hub.addr)),
        ("PTYHUB_TOKEN", hub.token.clone()),
    ];
    let hint = "install it with: pip install openapi-spec-validator==0.9.0";
    super::run_python("web/openapi_validate.py", &env, hint).await;
}

/// A client generated from `/openapi.json` by openapi-python-client, as API tools make one,
/// creates a terminal, runs a command, lists and closes it against the real server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_generated_from_openapi_makes_real_calls() {
    let hub = start();
    let env = [
        ("PTYHUB_URL", format!("http://{}", hub.addr)),
        ("PTYHUB_TOKEN", hub.token.clone()),
    ];
    let hint = "install it with: pip install openapi-python-client==0.29.1";
    super::run_python("web/openapi_client.py", &env, hint).await;
}
