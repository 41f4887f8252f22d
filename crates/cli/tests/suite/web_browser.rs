//! The web pages in headless Chromium (`playwright-core`) against the real binary. The web
//! terminal: signing in from the banner's address, typing, watching, a dropped socket's exact
//! replay, and a rotated event log, a terminal-url ticket (`tests/web/terminal.test.mjs`). The
//! pages for people who watch agents: glyphs drawn right, playback with chapters, the live
//! dashboard (`tests/web/pages.test.mjs`). The input lease between the page and an API client
//! (`tests/web/lease.test.mjs`).

use std::path::Path;

use ptyhub_test_support::Ptyhub;

/// The Chromium to drive, or `None` (the test is skipped and says so).
fn chromium() -> Option<String> {
    let chromium =
        std::env::var("PTYHUB_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    if !Path::new(&chromium).exists() {
        #[allow(
            clippy::print_stderr,
            reason = "a skipped test says so in the test output"
        )]
        {
            eprintln!(
                "SKIPPED: no Chromium at {chromium}; ./scripts/test.sh installs it \
                 (apt-get install chromium), or set PTYHUB_CHROMIUM"
            );
        }
        return None;
    }
    Some(chromium)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_terminal_types_watches_and_resumes_in_chromium() {
    let Some(chromium) = chromium() else {
        return;
    };
    let web = super::manifest_dir()
        .join("tests/web")
        .display()
        .to_string();
    assert!(
        Path::new(&web)
            .join("node_modules/playwright-core")
            .is_dir(),
        "playwright-core is not installed: run `npm ci` in {web} (./scripts/test.sh does)"
    );
    // A small event log, so the test can make it rotate past a page that is away.
    let hub = Ptyhub::start_with(env!("CARGO_BIN_EXE_ptyhub"), &["--event-log-keep", "64K"]);
    let timeout = ptyhub_test_support::default_timeout();
    let env = [
        ("PTYHUB_URL", format!("http://{}", hub.addr)),
        ("PTYHUB_WEB_URL", hub.web_url.clone()),
        ("PTYHUB_TOKEN", hub.token.clone()),
        ("PTYHUB_CHROMIUM", chromium),
        ("PTYHUB_TIMEOUT_MS", timeout.as_millis().to_string()),
    ];
    super::run_script("node", "web/terminal.test.mjs", &env, "npm ci in tests/web").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_for_watchers_work_in_chromium() {
    let Some(chromium) = chromium() else {
        return;
    };
    let hub = Ptyhub::start(env!("CARGO_BIN_EXE_ptyhub"));
    let timeout = ptyhub_test_support::default_timeout();
    let env = [
        ("PTYHUB_URL", format!("http://{}", hub.addr)),
        ("PTYHUB_WEB_URL", hub.web_url.clone()),
        ("PTYHUB_TOKEN", hub.token.clone()),
        ("PTYHUB_CHROMIUM", chromium),
        ("PTYHUB_TIMEOUT_MS", timeout.as_millis().to_string()),
    ];
    super::run_script("node", "web/pages.test.mjs", &env, "npm ci in tests/web").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_an_api_client_share_the_keyboard_in_chromium() {
    let Some(chromium) = chromium() else {
        return;
    };
    let hub = Ptyhub::start(env!("CARGO_BIN_EXE_ptyhub"));
    let timeout = ptyhub_test_support::default_timeout();
    let env = [
        ("PTYHUB_URL", format!("http://{}", hub.addr)),
        ("PTYHUB_WEB_URL", hub.web_url.clone()),
        ("PTYHUB_TOKEN", hub.token.clone()),
        ("PTYHUB_CHROMIUM", chromium),
        ("PTYHUB_TIMEOUT_MS", timeout.as_millis().to_string()),
    ];
    super::run_script("node", "web/lease.test.mjs", &env, "npm ci in tests/web").await;
}
