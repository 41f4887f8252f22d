//! Owners whose terminals run as OS accounts of their own (`user` on a configured token): each
//! owner's shell is its account, and from it neither the server's secrets nor another owner's
//! log, holder socket or processes can be reached.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use ptyhub_client::Client;
use ptyhub_test_support::{Ptyhub, data};
use serde_json::{Value, json};

use super::{create, exec, get};

const ALICE_TOKEN: &str = "alice-token-0123456789";
const BOB_TOKEN: &str = "bob-token-0123456789";

/// An OS account made for one test and removed with its home when dropped.
struct Account {
    name: String,
    home: PathBuf,
}

impl Account {
    fn add(tag: &str, dir: &Path) -> Self {
        let name = format!("ph{tag}{}", std::process::id() % 100_000);
        let home = dir.join(&name);
        let skeleton = dir.join("skel");
        std::fs::create_dir_all(&skeleton).unwrap_or_else(|e| panic!("{e}"));
        let status = Command::new("useradd")
            .args(["-m", "-s", "/bin/bash", "-k"])
            .arg(&skeleton)
            .arg("-d")
            .arg(&home)
            .arg(&name)
            .status()
            .unwrap_or_else(|e| panic!("useradd: {e}"));
        assert!(
            status.success(),
            "this test makes OS accounts and needs root and useradd ({status})"
        );
        Self { name, home }
    }

    fn uid(&self) -> String {
        let out = Command::new("id")
            .args(["-u", &self.name])
            .output()
            .unwrap_or_else(|e| panic!("id: {e}"));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        // Whatever still runs as the account first (the hub's own cleanup has run by then).
        let _ = Command::new("pkill")
            .args(["-KILL", "-u", &self.name])
            .status();
        let _ = Command::new("userdel")
            .args(["-r", "-f", &self.name])
            .status();
    }
}

fn config_file(dir: &Path, alice: &Account, bob: &Account) -> String {
    let path = dir.join("config.toml");
    let text = format!(
        r#"[[tokens]]
token = "{ALICE_TOKEN}"
owner = "alice"
user = "{}"

[[tokens]]
token = "{BOB_TOKEN}"
owner = "bob"
user = "{}"
"#,
        alice.name, bob.name
    );
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write config: {e}"));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    path.display().to_string()
}

/// Runs `command` in `id` and returns its output.
async fn run(client: &Client, id: &str, command: &str) -> String {
    let result = exec(client, id, command).await;
    result["output"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_with_accounts_of_their_own_cannot_reach_each_other_or_the_server() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    // Homes the accounts can reach (the temporary directory's parent is private to root).
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    let alice = Account::add("a", dir.path());
    let bob = Account::add("b", dir.path());
    let config = config_file(dir.path(), &alice, &bob);
    let hub = Ptyhub::start_with(env!("CARGO_BIN_EXE_ptyhub"), &["--config", &config]);
    let as_alice = Client::tcp(hub.addr.clone(), ALICE_TOKEN);
    let as_bob = Client::tcp(hub.addr.clone(), BOB_TOKEN);
    let a = create(&as_alice, json!({})).await;
    let b = create(&as_bob, json!({})).await;

    // Each shell is its owner's account, at home.
    assert_eq!(run(&as_alice, &a, "id -u").await, alice.uid());
    assert_eq!(
        run(&as_alice, &a, "pwd; echo $HOME").await,
        format!("{0}\n{0}", alice.home.display())
    );
    assert_eq!(run(&as_bob, &b, "id -un").await, bob.name);
    let shown = get(&as_alice, &format!("/v2/pty/sessions/{a}")).await;
    assert_eq!(data(&shown)["state"], "running");

    // From bob's shell: not alice's log, not her holder's socket, not the server's token or
    // configuration, not the environment of any process of the server or of alice.
    let alice_dir = hub
        .terminal_dir(&a)
        .unwrap_or_else(|| panic!("no directory for {a}"));
    let alice_meta: Value = serde_json::from_str(
        &std::fs::read_to_string(alice_dir.join("meta.json")).unwrap_or_default(),
    )
    .unwrap_or_default();
    assert_eq!(alice_meta["user"], alice.name.as_str(), "{alice_meta}");
    assert_eq!(alice_meta["schema"], 2, "{alice_meta}");
    let alice_socket = alice_meta["socket"].as_str().unwrap_or_default().to_owned();
    let alice_holder = alice_meta["holder_pid"].as_u64().unwrap_or_default();
    let alice_shell = alice_meta["pid"].as_u64().unwrap_or_default();
    let state = hub.state_dir().display().to_string();
    let probes = [
        format!("{}/events.jsonl", alice_dir.display()),
        format!("{state}/home"),
        config.clone(),
        format!("/proc/{alice_holder}/environ"),
        format!("/proc/{alice_shell}/environ"),
        "/proc/$PPID/environ".to_owned(),
    ];
    for path in &probes {
        let answer = run(&as_bob, &b, &format!("cat {path} > /dev/null && echo READ")).await;
        assert!(
            !answer.contains("READ") && answer.contains("Permission denied"),
            "bob read {path}: {answer}"
        );
    }
    let connect = format!(
        "python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print(\"CONNECTED\")' {alice_socket}"
    );
    let answer = run(&as_bob, &b, &format!("{connect} 2>&1")).await;
    assert!(
        !answer.contains("CONNECTED") && answer.contains("Permission"),
        "bob reached alice's holder: {answer}"
    );
    // Nothing of the server's environment reached the shells.
    let env = run(&as_bob, &b, "env").await;
    assert!(
        !env.contains("PTYHUB_TOKEN") && !env.contains("XDG_RUNTIME_DIR"),
        "{env}"
    );

    // The server's own token chooses the account per terminal; the owners of configured tokens
    // cannot, and a bad choice creates nothing.
    let admin = hub.http();
    let chosen = create(&admin, json!({ "id": "as-alice", "user": alice.name })).await;
    assert_eq!(run(&admin, &chosen, "id -un").await, alice.name);
    for (client, body, why) in [
        (
            &as_bob,
            json!({ "id": "b2", "user": alice.name }),
            "bob's terminals are bob's",
        ),
        (
            &admin,
            json!({ "id": "nobody-here", "user": "ptyhub-no-such-user" }),
            "no such account",
        ),
        (
            &admin,
            json!({ "id": "as-alice", "user": bob.name }),
            "as-alice runs as alice",
        ),
    ] {
        let refused = super::post(client, "/v2/pty/sessions", body).await;
        assert_eq!(refused.status, 400, "{why}: {}", refused.body);
        assert_eq!(
            refused.body["error"]["code"], "INVALID_INPUT",
            "{why}: {}",
            refused.body
        );
    }
    assert!(
        !super::live_ids(&admin)
            .await
            .contains(&"nobody-here".to_owned())
    );
    drop(hub);
}
