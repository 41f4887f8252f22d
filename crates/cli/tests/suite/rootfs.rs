//! The rootfs backend against a real Debian root and a real bubblewrap: the root is
//! provisioned once per machine through `POST /v2/backends/rootfs/install` into a cache
//! outside the clone (`$HOME/.cache/ptyhub-test-rootfs`, or `PTYHUB_TEST_ROOTFS_DIR`), shared
//! by every test's server; then real commands run in it (exec, send, close, network, the
//! persistent home, a server restart). Provisioning itself (progress, join, the CLI) is tested
//! with a stand-in debootstrap, so it takes seconds. A test skips, saying why, only when the
//! machine cannot run bubblewrap or reach the Debian mirror.

#![allow(clippy::print_stderr, reason = "a skipped test says why on stderr")]

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use super::{close, create, exec, get, post};
use ptyhub_client::{Client, Method};
use ptyhub_test_support::{KillOnDrop, Ptyhub, data, is_alive, processes_with_arg, wait_until};

/// How long the first provisioning of the shared root may take (minbase: a few minutes).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(1800);

/// The shared root's directory: outside the clone and outside every test's own `HOME`.
fn shared_rootfs_dir() -> PathBuf {
    std::env::var_os("PTYHUB_TEST_ROOTFS_DIR").map_or_else(
        || {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            PathBuf::from(home).join(".cache/ptyhub-test-rootfs")
        },
        PathBuf::from,
    )
}

fn start_on(rootfs_dir: &std::path::Path, env: &[(&str, &str)]) -> Ptyhub {
    let dir = rootfs_dir.to_string_lossy().into_owned();
    let mut all = vec![("PTYHUB_ROOTFS_DIR", dir.as_str())];
    all.extend_from_slice(env);
    Ptyhub::start_with_env(env!("CARGO_BIN_EXE_ptyhub"), &[], &all)
}

async fn rootfs_entry(client: &Client) -> Value {
    let backends = get(client, "/v2/backends").await;
    data(&backends)["backends"]
        .as_array()
        .and_then(|all| all.iter().find(|b| b["type"] == "rootfs").cloned())
        .unwrap_or_else(|| panic!("no rootfs backend in {}", backends.body))
}

/// A server on the shared root, installed if it is not yet; `None` (the test skips, saying
/// why) when this machine cannot host the backend or reach the mirror.
async fn ready_hub() -> Option<Ptyhub> {
    let hub = start_on(&shared_rootfs_dir(), &[]);
    let client = hub.http();
    let entry = rootfs_entry(&client).await;
    match entry["status"].as_str() {
        Some("ready") => return Some(hub),
        Some("needs_rootfs") => {}
        _ => {
            eprintln!("skipping: the rootfs backend cannot run here: {entry}");
            return None;
        }
    }
    let started = post(&client, "/v2/backends/rootfs/install", json!({})).await;
    assert_eq!(started.status, 200, "{}", started.body);
    let deadline = tokio::time::Instant::now() + INSTALL_TIMEOUT;
    loop {
        let install = rootfs_entry(&client).await["install"].clone();
        match install["state"].as_str() {
            Some("done") => return Some(hub),
            Some("failed") => {
                let error = install["error"].as_str().unwrap_or_default();
                let is_offline = [
                    "Failed getting release file",
                    "Couldn't download",
                    "Temporary failure resolving",
                    "unable to resolve",
                    "Connection refused",
                    "Network is unreachable",
                ]
                .iter()
                .any(|sign| error.contains(sign));
                assert!(is_offline, "the install failed: {install}");
                eprintln!("skipping: the Debian mirror cannot be reached: {error}");
                return None;
            }
            _ => {}
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the install did not end: {install}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn meta_of(hub: &Ptyhub, id: &str) -> Value {
    hub.metas()
        .into_iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("no meta.json for {id}"))
}

async fn send(client: &Client, id: &str, text: &str) -> Value {
    let answer = post(
        client,
        &format!("/v2/pty/sessions/{id}/send"),
        json!({ "text": text, "deadline": 20 }),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    data(&answer).clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rootfs_terminal_runs_its_shell_in_the_debian_root_and_closing_leaves_nothing() {
    let Some(hub) = ready_hub().await else {
        return;
    };
    let client = hub.http();
    let entry = rootfs_entry(&client).await;
    assert_eq!(entry["status"], "ready", "{entry}");
    assert!(
        entry["version"]
            .as_str()
            .is_some_and(|v| v.contains("bubblewrap")),
        "{entry}"
    );

    let id = create(&client, json!({ "id": "box", "backend": "rootfs" })).await;
    let info = data(&get(&client, "/v2/pty/sessions/box").await).clone();
    assert_eq!(info["backend"], "rootfs", "{info}");
    assert_eq!(info["working_dir"], "/workspace", "{info}");
    assert_eq!(info["rootfs"]["network"], "shared", "{info}");
    assert_eq!(info["rootfs"]["workspace"], Value::Null, "{info}");

    let ran = exec(
        &client,
        &id,
        "cat /etc/os-release; echo $HOME $USER $LOGNAME; pwd; (exit 3)",
    )
    .await;
    assert_eq!(ran["exit_code"], 3, "{ran}");
    let output = ran["output"].as_str().unwrap_or_default();
    assert!(output.contains("ID=debian"), "{ran}");
    assert!(output.contains("/root root root\n/workspace"), "{ran}");

    // Nothing of the host's state is inside: not the state dir, not the server's socket.
    let state = hub.state_dir().display().to_string();
    let socket = hub.socket.display().to_string();
    let peek = exec(&client, &id, &format!("ls -d '{state}' || ls '{socket}'")).await;
    assert_ne!(peek["exit_code"], 0, "{peek}");
    assert!(
        peek["output"]
            .as_str()
            .unwrap_or_default()
            .contains("No such file"),
        "{peek}"
    );

    // meta.json records the sandbox (schema 2).
    let meta = meta_of(&hub, "box");
    assert_eq!(meta["schema"], 2, "{meta}");
    assert_eq!(meta["backend"], "rootfs", "{meta}");
    let tree = meta["rootfs"]["tree"].as_str().unwrap_or_default();
    assert!(
        tree.starts_with(&*shared_rootfs_dir().to_string_lossy()),
        "{meta}"
    );
    assert_eq!(meta["rootfs"]["guest_cwd"], "/workspace", "{meta}");
    let guests: Vec<&str> = meta["rootfs"]["binds"]
        .as_array()
        .map(|b| b.iter().filter_map(|b| b["guest"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(guests, ["/workspace", "/root", "/run/ptyhub"], "{meta}");

    // The holder reads the sandboxed shell's facts from outside its pid namespace: a `read`
    // is a wait on the terminal, and `cd` moves the working directory.
    let asked = send(&client, &id, "read -p 'name? ' answer\n").await;
    assert_eq!(asked["wait_reason"], "stdin_read", "{asked}");
    let answered = send(&client, &id, "bob\n").await;
    assert_eq!(answered["is_at_prompt"], true, "{answered}");
    let echoed = exec(&client, &id, "echo \"$answer\"; cd /root").await;
    assert_eq!(echoed["output"], "bob", "{echoed}");
    wait_until("the working directory follows cd inside", || async {
        let info = data(&get(&client, "/v2/pty/sessions/box").await).clone();
        (info["working_dir"] == "/root").then_some(())
    })
    .await;

    // A signal reaches the sandboxed foreground program.
    let started = post(
        &client,
        &format!("/v2/pty/sessions/{id}/exec"),
        json!({ "command": "sleep 4343", "async": true }),
    )
    .await;
    assert_eq!(started.status, 200, "{}", started.body);
    let _guard = KillOnDrop {
        args: vec!["4343".to_owned(), "4344".to_owned()],
    };
    wait_until("sleep runs", || async {
        (!processes_with_arg("4343").is_empty()).then_some(())
    })
    .await;
    let signaled = post(
        &client,
        &format!("/v2/pty/sessions/{id}/signal"),
        json!({ "signal": "INT" }),
    )
    .await;
    assert_eq!(signaled.status, 200, "{}", signaled.body);
    wait_until("the interrupted sleep is gone", || async {
        processes_with_arg("4343").is_empty().then_some(())
    })
    .await;
    // The shell's next prompt ends the command (until then an exec is `BUSY`).
    wait_until("the interrupted command ended", || async {
        let info = data(&get(&client, "/v2/pty/sessions/box").await).clone();
        info["running_command"].is_null().then_some(())
    })
    .await;

    // Closing ends every process, bwrap and what runs in the background inside included.
    exec(&client, &id, "sleep 4344 &").await;
    let meta = meta_of(&hub, "box");
    let pid = |key: &str| {
        meta[key]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .unwrap_or_else(|| panic!("no {key} in {meta}"))
    };
    let (holder, shell) = (pid("holder_pid"), pid("pid"));
    let background = wait_until("the background sleep runs", || async {
        let found = processes_with_arg("4344");
        (!found.is_empty()).then_some(found)
    })
    .await;
    let sandbox: Vec<u32> = ptyhub_test_support::descendants(holder);
    assert!(sandbox.contains(&shell), "the shell runs under its holder");
    close(&client, &id).await;
    wait_until("every process of the terminal is gone", || async {
        let left: Vec<u32> = sandbox
            .iter()
            .chain(&background)
            .chain([&holder])
            .copied()
            .filter(|&p| is_alive(p))
            .collect();
        left.is_empty().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rootfs_terminal_resizes_with_sigwinch_inside_and_a_person_attaches_to_it() {
    let Some(hub) = ready_hub().await else {
        return;
    };
    let client = hub.http();
    let id = create(&client, json!({ "id": "seen", "backend": "rootfs" })).await;

    // A resize reaches the sandboxed foreground program as SIGWINCH, with the new size.
    let waiting = {
        let client = client.clone();
        let id = id.clone();
        tokio::spawn(async move {
            post(
                &client,
                &format!("/v2/pty/sessions/{id}/exec"),
                json!({
                    "command": "(trap 'stty size; exit 7' WINCH; echo ar''med; while :; do sleep 0.1; done)",
                    "timeout": 30,
                }),
            )
            .await
        })
    };
    wait_until("the trap is set inside", || async {
        let screen = get(&client, &format!("/v2/pty/sessions/{id}/screen")).await;
        data(&screen)["screen"]
            .to_string()
            .contains("armed")
            .then_some(())
    })
    .await;
    let resized = post(
        &client,
        &format!("/v2/pty/sessions/{id}/resize"),
        json!({ "cols": 91, "rows": 27 }),
    )
    .await;
    assert_eq!(resized.status, 200, "{}", resized.body);
    let ran = waiting.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ran.status, 200, "{}", ran.body);
    assert_eq!(data(&ran)["exit_code"], 7, "{}", ran.body);
    assert!(
        data(&ran)["output"]
            .as_str()
            .is_some_and(|o| o.contains("27 91")),
        "{}",
        ran.body
    );

    // A person attaches from a terminal of their own (a tmux pane): keys reach the shell in
    // the sandbox, its output reaches the pane, the sandbox follows the pane's size, and a
    // detach leaves it running.
    let home = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let pane = super::attach::pane(&hub, home.path());
    pane.wait_for("pane$").await;
    pane.type_line(&format!(
        "{} terminal attach {id}",
        env!("CARGO_BIN_EXE_ptyhub")
    ));
    pane.wait_for("Ctrl-] to detach").await;
    pane.type_line("echo in-$((6 * 7))-$(hostname)-$(stty size | tr ' ' x)");
    pane.wait_for("in-42-sandbox-30x100").await;
    pane.send_keys(&["C-]"]);
    pane.wait_for("[ptyhub: detached").await;
    let info = data(&get(&client, &format!("/v2/pty/sessions/{id}")).await).clone();
    assert_eq!(info["state"], "running", "{info}");
    assert_eq!(
        (info["cols"].clone(), info["rows"].clone()),
        (json!(100), json!(30))
    );
    close(&client, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_root_takes_writes_into_the_terminals_own_layer_which_goes_with_it() {
    let Some(hub) = ready_hub().await else {
        return;
    };
    if !is_root() {
        #[allow(clippy::print_stderr, reason = "a skipped test says why")]
        {
            eprintln!("skipping: a writable root needs a server that runs as root");
        }
        return;
    }
    let client = hub.http();
    let writer = create(&client, json!({ "id": "writer", "backend": "rootfs" })).await;
    let other = create(&client, json!({ "id": "other", "backend": "rootfs" })).await;
    let info = data(&get(&client, "/v2/pty/sessions/writer").await).clone();
    assert_eq!(info["rootfs"]["writable_root"], true, "{info}");

    // Writes anywhere in the root, as a package install makes them.
    let wrote = exec(
        &client,
        &writer,
        "echo mine > /usr/local/bin/only-here && chmod +x /usr/local/bin/only-here && \
         mkdir -p /opt/tool && touch /etc/written && rm /etc/issue && cat /usr/local/bin/only-here",
    )
    .await;
    assert_eq!(wrote["exit_code"], 0, "{wrote}");
    assert_eq!(wrote["output"], "mine", "{wrote}");
    // apt downloads as root (no capabilities to switch to its own account), and the
    // directories under the layer look as the root's do.
    let apt = exec(
        &client,
        &writer,
        "apt-config dump APT::Sandbox::User; stat -c %a /etc /etc/apt /etc/apt/apt.conf.d",
    )
    .await;
    assert_eq!(
        apt["output"], "APT::Sandbox::User \"root\";\n755\n755\n755",
        "{apt}"
    );

    // A real package install from the Debian mirror, as an agent does.
    let installed = post(
        &client,
        &format!("/v2/pty/sessions/{writer}/exec"),
        json!({
            // apt polls the keyboard while it downloads (raw mode, no echo), which is a
            // program reading its input; a script's apt reads nothing.
            "command": "apt-get update -qq </dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq </dev/null >/dev/null 2>&1; echo '{\"a\":41}' | jq -c '.a + 1'",
            "timeout": 600,
        }),
    )
    .await;
    assert_eq!(installed.status, 200, "{}", installed.body);
    let output = data(&installed)["output"].as_str().unwrap_or_default();
    if output.ends_with("42") {
        let other_jq = exec(&client, &other, "command -v jq || echo no-jq").await;
        assert_eq!(other_jq["output"], "no-jq", "{other_jq}");
    } else {
        assert!(
            output.contains("Temporary failure resolving") || output.contains("Could not"),
            "the install failed: {}",
            installed.body
        );
        #[allow(clippy::print_stderr, reason = "a skipped part says why")]
        {
            eprintln!("skipping the apt-get install: the Debian mirror cannot be reached");
        }
    }

    // Another terminal sees the shared root as it was, and so does the host.
    let looked = exec(
        &client,
        &other,
        "ls /usr/local/bin/only-here /etc/written; cat /etc/issue >/dev/null && echo issue-kept",
    )
    .await;
    let output = looked["output"].as_str().unwrap_or_default();
    for missing in ["/usr/local/bin/only-here", "/etc/written"] {
        assert!(
            output.contains(&format!("cannot access '{missing}'")),
            "{looked}"
        );
    }
    assert!(output.contains("issue-kept"), "{looked}");
    let tree = PathBuf::from(
        meta_of(&hub, "writer")["rootfs"]["tree"]
            .as_str()
            .unwrap_or_default(),
    );
    assert!(!tree.join("usr/local/bin/only-here").exists());
    assert!(!tree.join("etc/written").exists());
    assert!(tree.join("etc/issue").exists());

    // The layer goes once the terminal's processes are gone.
    let layer = meta_of(&hub, "writer")["rootfs"]["layer"]
        .as_str()
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no layer in meta.json"));
    assert!(layer.join("upper/usr/local/bin/only-here").exists());
    close(&client, &writer).await;
    wait_until("the writer's layer is removed", || async {
        (!layer.exists()).then_some(())
    })
    .await;
    close(&client, &other).await;

    // A holder killed with SIGKILL cannot remove it: the close that ends what it left does.
    let killed = create(&client, json!({ "id": "killed", "backend": "rootfs" })).await;
    exec(&client, &killed, "touch /etc/killed-was-here").await;
    let meta = meta_of(&hub, "killed");
    let layer = PathBuf::from(meta["rootfs"]["layer"].as_str().unwrap_or_default());
    assert!(layer.join("upper/etc/killed-was-here").exists());
    let holder = meta["holder_pid"]
        .as_u64()
        .and_then(|p| u32::try_from(p).ok())
        .unwrap_or_else(|| panic!("no holder_pid in {meta}"));
    ptyhub_test_support::kill_9(holder);
    wait_until("the server sees the holder gone", || async {
        let info = data(&get(&client, "/v2/pty/sessions/killed").await).clone();
        (info["state"] != "running").then_some(())
    })
    .await;
    close(&client, &killed).await;
    wait_until("the killed holder's layer is removed", || async {
        (!layer.exists()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_none_is_only_loopback_and_the_home_outlives_its_terminal() {
    let Some(hub) = ready_hub().await else {
        return;
    };
    let client = hub.http();
    let first = create(
        &client,
        json!({ "id": "offline", "backend": "rootfs", "network": "none" }),
    )
    .await;
    let info = data(&get(&client, "/v2/pty/sessions/offline").await).clone();
    assert_eq!(info["rootfs"]["network"], "none", "{info}");
    let links = exec(
        &client,
        &first,
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
    )
    .await;
    assert_eq!(links["output"], "lo", "{links}");
    let mark = format!("kept-{}", std::process::id());
    exec(&client, &first, &format!("echo {mark} > /root/keep-test")).await;
    close(&client, &first).await;

    let second = create(&client, json!({ "id": "online", "backend": "rootfs" })).await;
    let read = exec(&client, &second, "cat /root/keep-test; rm /root/keep-test").await;
    assert_eq!(read["output"], mark, "{read}");
    // The home was seeded from the root's /etc/skel.
    let skel = exec(&client, &second, "test -f /root/.bashrc && echo seeded").await;
    assert_eq!(skel["output"], "seeded", "{skel}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_reattaches_a_rootfs_terminal() {
    let Some(mut hub) = ready_hub().await else {
        return;
    };
    let id = create(
        &hub.http(),
        json!({ "id": "survivor", "backend": "rootfs" }),
    )
    .await;
    exec(&hub.http(), &id, "export KEPT=yes; cd /tmp").await;
    hub.restart();
    let client = hub.http();
    let ran = exec(&client, &id, "echo $KEPT; pwd; (exit 4)").await;
    assert_eq!(ran["output"], "yes\n/tmp", "{ran}");
    assert_eq!(ran["exit_code"], 4, "{ran}");
    let info = data(&get(&client, "/v2/pty/sessions/survivor").await).clone();
    assert_eq!(info["backend"], "rootfs", "{info}");
    assert_eq!(info["state"], "running", "{info}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspaces_are_made_on_first_use_and_deleted_only_when_free() {
    let Some(hub) = ready_hub().await else {
        return;
    };
    let client = hub.http();
    let listed = get(&client, "/v2/workspaces").await;
    assert_eq!(data(&listed)["workspaces"], json!([]), "{}", listed.body);

    let one = create(
        &client,
        json!({ "id": "ws-one", "backend": "rootfs", "workspace": "alpha" }),
    )
    .await;
    exec(
        &client,
        &one,
        "echo shared > /workspace/note; mkdir -p /workspace/src",
    )
    .await;
    let two = create(
        &client,
        json!({ "id": "ws-two", "backend": "rootfs", "workspace": "alpha", "cwd": "/workspace/src" }),
    )
    .await;
    let seen = exec(&client, &two, "pwd; cat ../note").await;
    assert_eq!(seen["output"], "/workspace/src\nshared", "{seen}");

    let listed = get(&client, "/v2/workspaces").await;
    let all = data(&listed)["workspaces"].clone();
    assert_eq!(all.as_array().map(Vec::len), Some(1), "{all}");
    assert_eq!(all[0]["id"], "alpha", "{all}");
    assert_eq!(all[0]["terminals"], json!(["ws-one", "ws-two"]), "{all}");
    let one_info = get(&client, "/v2/workspaces/alpha").await;
    assert_eq!(one_info.status, 200, "{}", one_info.body);

    // In use: refused, and nothing is deleted.
    let delete = |client: Client| async move {
        client
            .send(Method::DELETE, "/v2/workspaces/alpha", None)
            .await
            .unwrap_or_else(|e| panic!("delete: {e}"))
    };
    let refused = delete(client.clone()).await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert_eq!(
        refused.body["error"]["code"], "WORKSPACE_IN_USE",
        "{}",
        refused.body
    );
    close(&client, &one).await;
    let still = delete(client.clone()).await;
    assert_eq!(still.status, 409, "{}", still.body);
    close(&client, &two).await;
    let deleted = delete(client.clone()).await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    let gone = get(&client, "/v2/workspaces/alpha").await;
    assert_eq!(gone.status, 404, "{}", gone.body);
    assert_eq!(
        gone.body["error"]["code"], "WORKSPACE_NOT_FOUND",
        "{}",
        gone.body
    );
    let listed = get(&client, "/v2/workspaces").await;
    assert_eq!(data(&listed)["workspaces"], json!([]), "{}", listed.body);
}

/// Whether the tests run as root (the owner of `/proc/self` is the process's user).
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_owners_workspace_answers_like_a_missing_one() {
    let Some(_ready) = ready_hub().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[[tokens]]\ntoken = \"bot-token-0123456789\"\nowner = \"bot\"\ncapabilities = [\"terminal.create\", \"terminal.read\", \"terminal.write\"]\n",
    )
    .unwrap_or_else(|e| panic!("config: {e}"));
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    let rootfs = shared_rootfs_dir().to_string_lossy().into_owned();
    let hub = Ptyhub::start_with_env(
        env!("CARGO_BIN_EXE_ptyhub"),
        &["--config", &config.to_string_lossy()],
        &[("PTYHUB_ROOTFS_DIR", &rootfs)],
    );
    let admin = hub.http();
    let id = create(
        &admin,
        json!({ "id": "admins", "backend": "rootfs", "workspace": "secret" }),
    )
    .await;
    exec(&admin, &id, "true").await;
    let bot = Client::tcp(hub.addr.clone(), "bot-token-0123456789");
    let theirs = get(&bot, "/v2/workspaces/secret").await;
    let missing = get(&bot, "/v2/workspaces/nothing").await;
    assert_eq!(theirs.status, 404, "{}", theirs.body);
    assert_eq!(
        theirs.body["error"], missing.body["error"],
        "{}",
        theirs.body
    );
    assert_eq!(
        theirs.body["message"], "workspace secret not found",
        "{}",
        theirs.body
    );
    let listed = get(&bot, "/v2/workspaces").await;
    assert_eq!(data(&listed)["workspaces"], json!([]), "{}", listed.body);
    // The bot's workspace of the same name is its own, empty one.
    let mine = create(
        &bot,
        json!({ "id": "bots", "backend": "rootfs", "workspace": "secret" }),
    )
    .await;
    let empty = exec(&bot, &mine, "ls -A /workspace | wc -l").await;
    assert_eq!(empty["output"], "0", "{empty}");
}

/// Every refusal of bad rootfs input creates nothing: no terminal directory, no workspace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_rootfs_input_is_a_clear_error_and_creates_nothing() {
    let empty = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let hub = start_on(empty.path(), &[]);
    let client = hub.http();
    let cases = [
        (
            json!({ "id": "b1", "workspace": "alpha" }),
            400,
            "INVALID_INPUT",
        ),
        (
            json!({ "id": "b2", "backend": "native", "network": "none" }),
            400,
            "INVALID_INPUT",
        ),
        (
            json!({ "id": "b3", "backend": "chroot" }),
            400,
            "INVALID_INPUT",
        ),
        (
            json!({ "id": "b4", "backend": "rootfs", "workspace": "../up" }),
            400,
            "INVALID_INPUT",
        ),
        (
            json!({ "id": "b5", "backend": "rootfs", "workspace": "Upper" }),
            400,
            "INVALID_INPUT",
        ),
        (
            json!({ "id": "b6", "backend": "rootfs", "network": "host" }),
            400,
            "INVALID_INPUT",
        ),
        (
            json!({ "id": "b7", "backend": "rootfs", "cwd": "/etc" }),
            400,
            "INVALID_INPUT",
        ),
        (
            json!({ "id": "b8", "backend": "rootfs", "cwd": "/workspace/../etc" }),
            400,
            "INVALID_INPUT",
        ),
        (
            json!({ "id": "b9", "backend": "rootfs", "shell": "zsh" }),
            400,
            "INVALID_INPUT",
        ),
        // A root that is not installed yet.
        (
            json!({ "id": "b10", "backend": "rootfs", "workspace": "fine" }),
            503,
            "BACKEND_UNAVAILABLE",
        ),
    ];
    for (body, status, code) in cases {
        let answer = post(&client, "/v2/pty/sessions", body.clone()).await;
        assert_eq!(answer.status, status, "{body}: {}", answer.body);
        assert_eq!(
            answer.body["error"]["code"], code,
            "{body}: {}",
            answer.body
        );
    }
    let unavailable = post(
        &client,
        "/v2/pty/sessions",
        json!({ "id": "b11", "backend": "rootfs" }),
    )
    .await;
    let message = unavailable.body["message"].as_str().unwrap_or_default();
    assert!(message.contains("needs_rootfs"), "{}", unavailable.body);
    assert!(hub.metas().is_empty(), "no terminal was created");
    assert!(
        !hub.state_dir().join("home").exists(),
        "no terminal directory"
    );
    assert!(!hub.state_dir().join("workspaces").exists(), "no workspace");
    let entry = rootfs_entry(&client).await;
    assert_eq!(entry["status"], "needs_rootfs", "{entry}");
}

/// A stand-in for debootstrap: prints debootstrap's kind of lines, waits for `go` in the
/// rootfs dir, then makes the target (its fourth argument) and ends.
const FAKE_DEBOOTSTRAP: &str = r#"#!/bin/sh
dir=$(dirname "$4")
echo "I: Retrieving InRelease "
echo "I: Resolving dependencies of required packages..."
for p in a b c d e; do echo "I: Retrieving $p 1.0"; echo "I: Validating $p 1.0"; done
while [ ! -e "$dir/go" ]; do sleep 0.05; done
for p in a b c d e; do echo "I: Extracting $p..."; done
for p in a b c d e; do echo "I: Unpacking $p..."; echo "I: Configuring $p..."; done
mkdir -p "$4/etc/skel"
echo "I: Base system installed successfully."
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_install_reports_progress_a_second_one_joins_it_and_the_cli_waits_for_it() {
    if !is_root() {
        eprintln!("skipping: installing a root needs a server that runs as root");
        return;
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let script = dir.path().join("debootstrap");
    std::fs::write(&script, FAKE_DEBOOTSTRAP).unwrap_or_else(|e| panic!("script: {e}"));
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    let rootfs = dir.path().join("rootfs");
    let hub = start_on(
        &rootfs,
        &[("PTYHUB_DEBOOTSTRAP", &script.to_string_lossy())],
    );
    let client = hub.http();
    let entry = rootfs_entry(&client).await;
    if entry["status"] == "failed" {
        eprintln!("skipping: the rootfs backend cannot run here: {entry}");
        return;
    }
    assert_eq!(entry["status"], "needs_rootfs", "{entry}");

    let first = post(&client, "/v2/backends/rootfs/install", json!({})).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(data(&first)["state"], "running", "{}", first.body);
    let retrieving = wait_until("the download's progress shows", || async {
        let install = rootfs_entry(&client).await["install"].clone();
        (install["packages_done"] == 5).then_some(install)
    })
    .await;
    assert_eq!(retrieving["phase"], "retrieving", "{retrieving}");
    let percent = retrieving["percent"].as_u64().unwrap_or_default();
    assert!(percent > 2 && percent < 50, "{retrieving}");
    // A second request joins the running install.
    let second = post(&client, "/v2/backends/rootfs/install", json!({})).await;
    assert_eq!(
        data(&second)["started_at"],
        data(&first)["started_at"],
        "{}",
        second.body
    );
    assert_eq!(data(&second)["state"], "running", "{}", second.body);

    // The CLI joins it too and waits for its end.
    let socket = hub.socket.clone();
    let exe = env!("CARGO_BIN_EXE_ptyhub");
    let cli = tokio::task::spawn_blocking(move || {
        std::process::Command::new(exe)
            .arg("--socket")
            .arg(&socket)
            .args(["backend", "install", "rootfs"])
            .stdin(std::process::Stdio::null())
            .output()
    });
    std::fs::write(rootfs.join("go"), "").unwrap_or_else(|e| panic!("go: {e}"));
    let output = cli
        .await
        .unwrap_or_else(|e| panic!("cli task: {e}"))
        .unwrap_or_else(|e| panic!("cli: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("retrieving") || stdout.contains("100%"),
        "{stdout}"
    );
    assert!(stdout.contains("rootfs: installed"), "{stdout}");

    let entry = rootfs_entry(&client).await;
    assert_eq!(entry["status"], "ready", "{entry}");
    assert_eq!(entry["install"]["state"], "done", "{entry}");
    assert_eq!(entry["install"]["percent"], 100, "{entry}");
    let names: Vec<String> = std::fs::read_dir(&rootfs)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let suite = entry["install"]["suite"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(names.contains(&format!("{suite}.ready")), "{names:?}");
    assert!(!names.contains(&format!("{suite}.partial")), "{names:?}");
    assert!(
        rootfs.join(&suite).join("workspace").is_dir(),
        "/workspace is in the root"
    );
    // Installing again is idempotent: done at once.
    let again = post(&client, "/v2/backends/rootfs/install", json!({})).await;
    let again = data(&again).clone();
    let finished = if again["state"] == "done" {
        again
    } else {
        wait_until("the repeated install ends", || async {
            let install = rootfs_entry(&client).await["install"].clone();
            (install["state"] == "done").then_some(install)
        })
        .await
    };
    assert_eq!(finished["state"], "done", "{finished}");
}
