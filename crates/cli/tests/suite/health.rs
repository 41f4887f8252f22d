//! `/healthz` and `/readyz` (docs/operations.md#health): both answer without a token and with
//! no data; `/readyz` is 200 while the state directory takes a new file and 503 with the
//! reason when it does not. Root ignores mode bits, so the directory is made immutable
//! (`chattr +i`: nobody, root included, may create a file in it), and mutable again after.

use ptyhub_client::Client;

use super::{get, start};

/// Makes a directory immutable while it lives (`chattr +i`), mutable again when dropped.
struct Immutable(std::path::PathBuf);

impl Immutable {
    fn new(dir: &std::path::Path) -> Option<Self> {
        let made = std::process::Command::new("chattr")
            .arg("+i")
            .arg(dir)
            .status()
            .is_ok_and(|status| status.success());
        made.then(|| Self(dir.to_path_buf()))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_says_whether_the_state_dir_takes_files_without_a_token() {
    let hub = start();
    let anonymous = Client::tcp(hub.addr.clone(), String::new());
    let health = get(&anonymous, "/healthz").await;
    assert_eq!(health.status, 200, "{}", health.body);
    let ready = get(&anonymous, "/readyz").await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    assert_eq!(ready.body["data"]["status"], "ready", "{}", ready.body);

    let Some(frozen) = Immutable::new(hub.state_dir()) else {
        panic!("chattr +i failed: the test needs an ext2/3/4, xfs or btrfs state dir and root");
    };
    let refused = get(&anonymous, "/readyz").await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(
        refused.body["error"]["code"], "BACKEND_UNAVAILABLE",
        "{}",
        refused.body
    );
    let reason = refused.body["message"].as_str().unwrap_or_default();
    assert!(reason.contains("state directory"), "{reason}");
    assert!(
        !reason.contains(&hub.state_dir().display().to_string()),
        "the reason names no path: {reason}"
    );
    // The process still answers.
    assert_eq!(get(&anonymous, "/healthz").await.status, 200);
    drop(frozen);
    let ready = get(&anonymous, "/readyz").await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    // The probe leaves nothing behind.
    let leftovers: Vec<_> = std::fs::read_dir(hub.state_dir())
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(".ready-probe"))
                .collect()
        })
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
