//! A cgroup per terminal, against the machine's real cgroups: a fork bomb bounded by its
//! `pids_max` while another terminal answers, a memory hog killed at its `memory_max_bytes`
//! with the `cgroup.oom` event in `events.jsonl`, process counts in the info, bad limits, and
//! the close of a terminal whose holder was killed with SIGKILL. Each test skips, saying why,
//! where the server cannot create cgroups (not root and no delegated subtree); every cgroup a
//! test's server made is removed when its `Ptyhub` is dropped, whatever the test did.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{close, create, exec, exec_raw, get, post, start};
use ptyhub_client::Client;
use ptyhub_test_support::{Ptyhub, data, is_alive, kill_9, wait_until};

/// The server's `cgroups` of `GET /v2/backends`, or `None` (and a printed reason) when it
/// puts terminals in none.
async fn cgroups_or_skip(client: &Client, test: &str) -> Option<Value> {
    let backends = get(client, "/v2/backends").await;
    let cgroups = data(&backends)["cgroups"].clone();
    if cgroups["status"] == "ready" {
        return Some(cgroups);
    }
    #[allow(
        clippy::print_stderr,
        reason = "a skipped test says so in the test output"
    )]
    {
        eprintln!(
            "SKIPPED {test}: this machine gives the server no cgroups ({})",
            cgroups["reason"]
        );
    }
    None
}

/// A figure or a path taken, in the test output (`--nocapture`).
#[allow(
    clippy::print_stderr,
    reason = "the figure is part of what the test reports"
)]
fn report(line: &str) {
    eprintln!("{line}");
}

async fn info(client: &Client, id: &str) -> Value {
    data(&get(client, &format!("/v2/pty/sessions/{id}")).await).clone()
}

/// The cgroup of a closed terminal, from the list with closed ones.
async fn closed_cgroup(client: &Client, id: &str) -> Value {
    let list = get(client, "/v2/pty/sessions?include_closed=true").await;
    data(&list)["sessions"]
        .as_array()
        .and_then(|all| all.iter().find(|t| t["session_id"] == id))
        .map(|t| t["cgroup"].clone())
        .unwrap_or_else(|| panic!("{id} is not listed: {}", list.body))
}

/// Every directory of a terminal's cgroup, as its info names them.
fn cgroup_dirs(cgroup: &Value) -> Vec<String> {
    let mut dirs = vec![cgroup["path"].as_str().unwrap_or_default().to_owned()];
    if let Some(v1) = cgroup["v1_paths"].as_array() {
        dirs.extend(v1.iter().filter_map(Value::as_str).map(str::to_owned));
    }
    dirs
}

/// The pids listed in a cgroup directory's `cgroup.procs`.
fn procs(dir: &str) -> Vec<u32> {
    std::fs::read_to_string(Path::new(dir).join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_stays_in_its_pids_max_while_another_terminal_answers_and_its_close_leaves_nothing()
 {
    let hub = start();
    let client = hub.http();
    let Some(cgroups) = cgroups_or_skip(&client, "the fork bomb test").await else {
        return;
    };
    report(&format!(
        "pids.max enforced through cgroup {}",
        cgroups["pids"]
    ));
    if cgroups["pids"] != "v2" {
        report(
            "NOT EXERCISED here: limits through the cgroup v2 pids and memory controllers (this \
             machine enables none in its v2 tree; the same tests take that path on a host that does)",
        );
    }
    let bomb = create(
        &client,
        json!({ "id": "bomb", "cwd": "/", "limits": { "pids_max": 64 } }),
    )
    .await;
    let calm = create(&client, json!({ "id": "calm", "cwd": "/" })).await;
    let cgroup = info(&client, &bomb).await["cgroup"].clone();
    assert_eq!(cgroup["limits"]["pids_max"], 64, "{cgroup}");
    // The shell is in it from the start.
    let shell = hub
        .metas()
        .into_iter()
        .find(|m| m["id"] == "bomb")
        .and_then(|m| m["pid"].as_u64())
        .unwrap_or_else(|| panic!("no shell pid"));
    let dirs = cgroup_dirs(&cgroup);
    for dir in &dirs {
        assert!(
            procs(dir).contains(&u32::try_from(shell).unwrap_or_default()),
            "the shell is not in {dir}"
        );
    }

    let started = exec_raw(
        &client,
        &bomb,
        json!({ "command": "bomb() { bomb | bomb & }; bomb", "async": true }),
    )
    .await;
    assert_eq!(started.status, 200, "{}", started.body);
    wait_until("the bomb reaches its limit", || {
        let client = client.clone();
        let bomb = bomb.clone();
        async move {
            let count = info(&client, &bomb).await["cgroup"]["processes"].as_u64()?;
            (count >= 48).then_some(())
        }
    })
    .await;
    let mut slowest = Duration::ZERO;
    for i in 0..5 {
        let begun = Instant::now();
        let answer = exec(&client, &calm, &format!("echo calm-{i}")).await;
        slowest = slowest.max(begun.elapsed());
        assert_eq!(answer["output"], format!("calm-{i}"), "{answer}");
    }
    report(&format!(
        "exec beside a fork bomb: slowest of 5 answered in {slowest:?}"
    ));
    assert!(slowest < Duration::from_secs(1), "exec took {slowest:?}");
    let counted = info(&client, &bomb).await["cgroup"]["processes"]
        .as_u64()
        .unwrap_or_default();
    assert!(counted <= 64, "{counted} processes under pids.max 64");

    let inside: Vec<u32> = procs(&dirs[0]);
    close(&client, &bomb).await;
    for dir in &dirs {
        assert!(!Path::new(dir).exists(), "{dir} is still there");
    }
    let alive: Vec<u32> = inside.into_iter().filter(|&pid| is_alive(pid)).collect();
    assert!(alive.is_empty(), "still running after the close: {alive:?}");
    let after = closed_cgroup(&client, &bomb).await;
    assert!(
        after["killed"].as_u64().is_some_and(|killed| killed >= 2),
        "{after}"
    );
    assert_eq!(after["processes"], Value::Null, "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_hog_over_its_memory_max_is_killed_and_the_kill_is_in_the_log() {
    let hub = start();
    let client = hub.http();
    let Some(cgroups) = cgroups_or_skip(&client, "the memory hog test").await else {
        return;
    };
    report(&format!(
        "memory.max enforced through cgroup {}",
        cgroups["memory"]
    ));
    let id = create(
        &client,
        json!({ "id": "hog", "cwd": "/", "limits": { "memory_max_bytes": 64 * 1024 * 1024 } }),
    )
    .await;
    // 512 MiB in one piece, far over the limit: the kernel kills it as it touches the pages.
    let answer = exec(
        &client,
        &id,
        "python3 -c 'b = bytearray(512 * 1024 * 1024); print(len(b))'; echo status=$?",
    )
    .await;
    assert!(
        answer["output"]
            .as_str()
            .is_some_and(|out| out.contains("status=137")),
        "{answer}"
    );
    let dir = hub
        .terminal_dir(&id)
        .unwrap_or_else(|| panic!("no terminal dir"));
    let event = wait_until("a cgroup.oom event in events.jsonl", || {
        let log = std::fs::read_to_string(dir.join("events.jsonl")).unwrap_or_default();
        let found = log
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|event| event["type"] == "cgroup.oom");
        async move { found }
    })
    .await;
    assert!(event["count"].as_u64().is_some_and(|n| n >= 1), "{event}");
    let cgroup = info(&client, &id).await["cgroup"].clone();
    assert!(
        cgroup["oom_kills"].as_u64().is_some_and(|n| n >= 1),
        "{cgroup}"
    );
    // The shell lives on: only the hog was killed.
    assert_eq!(exec(&client, &id, "echo alive").await["output"], "alive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_info_counts_the_terminals_processes() {
    let hub = start();
    let client = hub.http();
    if cgroups_or_skip(&client, "the process count test")
        .await
        .is_none()
    {
        return;
    }
    let id = create(&client, json!({ "id": "counted", "cwd": "/" })).await;
    let count = |client: Client| async move {
        info(&client, "counted").await["cgroup"]["processes"]
            .as_u64()
            .unwrap_or_else(|| panic!("no process count"))
    };
    // Right after create the shell may still run a child of its start-up; then it is alone.
    wait_until("the shell alone in its cgroup", || {
        let client = client.clone();
        async move { (count(client).await == 1).then_some(()) }
    })
    .await;
    exec(&client, &id, "sleep 1000 & sleep 1001 & echo started").await;
    let with_two = count(client.clone()).await;
    assert_eq!(with_two, 3, "the shell and its two sleeps");
    let listed = get(&client, "/v2/pty/sessions").await;
    assert!(
        data(&listed)["sessions"][0]["cgroup"]["processes"]
            .as_u64()
            .is_some(),
        "{}",
        listed.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_limits_are_invalid_input_and_create_nothing() {
    let hub = start();
    let client = hub.http();
    for (id, limits) in [
        ("zero-pids", json!({ "pids_max": 0 })),
        ("zero-memory", json!({ "memory_max_bytes": 0 })),
        ("huge-pids", json!({ "pids_max": 1_u64 << 40 })),
        ("huge-memory", json!({ "memory_max_bytes": u64::MAX })),
        ("tiny-memory", json!({ "memory_max_bytes": 4096 })),
        ("negative", json!({ "pids_max": -1 })),
        ("unknown", json!({ "cpu_max": 2 })),
    ] {
        let answer = post(
            &client,
            "/v2/pty/sessions",
            json!({ "id": id, "cwd": "/", "limits": limits }),
        )
        .await;
        assert_eq!(answer.status, 400, "{id}: {}", answer.body);
        assert_eq!(
            answer.body["error"]["code"], "INVALID_INPUT",
            "{id}: {}",
            answer.body
        );
        assert!(hub.terminal_dir(id).is_none(), "{id} left a directory");
    }
    let backends = get(&client, "/v2/backends").await;
    let cgroups = &data(&backends)["cgroups"];
    if let Some(path) = cgroups["path"].as_str() {
        let left: Vec<String> = std::fs::read_dir(path)
            .map(|dir| {
                dir.flatten()
                    .filter(|e| e.path().is_dir())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            left.is_empty(),
            "cgroups made for refused creates: {left:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_with_sigkill_leaves_nothing_its_cgroup_does_not_end() {
    let hub = start();
    let client = hub.http();
    if cgroups_or_skip(&client, "the dead holder test")
        .await
        .is_none()
    {
        return;
    }
    let id = create(&client, json!({ "id": "orphaned", "cwd": "/" })).await;
    // A process no mark leads to: a cleared environment in a session of its own.
    exec(
        &client,
        &id,
        "setsid env -i sleep 4243 </dev/null >/dev/null 2>&1 & echo started",
    )
    .await;
    let cgroup = info(&client, &id).await["cgroup"].clone();
    let dirs = cgroup_dirs(&cgroup);
    let escapee = wait_until("the escapee runs in the cgroup", || {
        let found = procs(&dirs[0]).into_iter().find(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmd| cmd.contains("4243"))
        });
        async move { found }
    })
    .await;
    let holder = hub
        .metas()
        .into_iter()
        .find(|m| m["id"] == "orphaned")
        .and_then(|m| m["holder_pid"].as_u64())
        .and_then(|pid| u32::try_from(pid).ok())
        .unwrap_or_else(|| panic!("no holder pid"));
    kill_9(holder);
    close(&client, &id).await;
    wait_until("the escapee is gone", || async move {
        (!is_alive(escapee)).then_some(())
    })
    .await;
    for dir in &dirs {
        assert!(!Path::new(dir).exists(), "{dir} is still there");
    }
    let meta = hub
        .metas()
        .into_iter()
        .find(|m| m["id"] == "orphaned")
        .unwrap_or_else(|| panic!("no meta.json"));
    assert_eq!(meta["cgroup"]["is_removed"], true, "{meta}");
    assert_eq!(meta["schema"], 2, "{meta}");
}

/// A server restarted on the state dir finds a running terminal's cgroup in its `meta.json`
/// and still closes everything in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_finds_the_cgroup_and_its_close_removes_it() {
    let mut hub: Ptyhub = start();
    let client = hub.http();
    if cgroups_or_skip(&client, "the restart test").await.is_none() {
        return;
    }
    let id = create(&client, json!({ "id": "kept", "cwd": "/" })).await;
    exec(&client, &id, "sleep 4244 & echo started").await;
    let dirs = cgroup_dirs(&info(&client, &id).await["cgroup"]);
    hub.restart();
    let client = hub.http();
    let again = info(&client, &id).await["cgroup"].clone();
    assert_eq!(cgroup_dirs(&again), dirs, "{again}");
    close(&client, &id).await;
    for dir in &dirs {
        assert!(!Path::new(dir).exists(), "{dir} is still there");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tmux_terminals_server_and_pane_are_in_its_cgroup_and_its_close_removes_it() {
    let hub = start();
    let client = hub.http();
    if cgroups_or_skip(&client, "the tmux cgroup test")
        .await
        .is_none()
    {
        return;
    }
    let backends = get(&client, "/v2/backends").await;
    let tmux_ready = data(&backends)["backends"].as_array().is_some_and(|all| {
        all.iter()
            .any(|b| b["type"] == "tmux" && b["status"] == "ready")
    });
    if !tmux_ready {
        report("SKIPPED the tmux cgroup test: no usable tmux");
        return;
    }
    let id = create(
        &client,
        json!({ "id": "paned", "cwd": "/", "backend": "tmux", "limits": { "pids_max": 32 } }),
    )
    .await;
    let terminal = info(&client, &id).await;
    let socket = terminal["tmux"]["socket"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let server: u32 = std::process::Command::new("tmux")
        .args(["-S", &socket, "display-message", "-p", "#{pid}"])
        .output()
        .ok()
        .and_then(|out| String::from_utf8_lossy(&out.stdout).trim().parse().ok())
        .unwrap_or_else(|| panic!("no tmux server pid"));
    let dirs = cgroup_dirs(&terminal["cgroup"]);
    exec(&client, &id, "sleep 4245 & echo started").await;
    let inside = procs(&dirs[0]);
    assert!(
        inside.contains(&server),
        "the tmux server is not in {}",
        dirs[0]
    );
    let pane = hub
        .metas()
        .into_iter()
        .find(|m| m["id"] == "paned")
        .and_then(|m| m["pid"].as_u64())
        .and_then(|pid| u32::try_from(pid).ok())
        .unwrap_or_else(|| panic!("no pane pid"));
    assert!(
        inside.contains(&pane),
        "the pane's shell is not in {}",
        dirs[0]
    );
    close(&client, &id).await;
    for dir in &dirs {
        assert!(!Path::new(dir).exists(), "{dir} is still there");
    }
    let alive: Vec<u32> = inside.into_iter().filter(|&pid| is_alive(pid)).collect();
    assert!(alive.is_empty(), "still running after the close: {alive:?}");
}

/// A cgroup v2 directory made for one test and delegated to an account, removed (with
/// anything still in it) when dropped.
struct Delegated {
    dir: std::path::PathBuf,
}

impl Drop for Delegated {
    fn drop(&mut self) {
        fn remove(dir: &Path) {
            let _ = std::fs::write(dir.join("cgroup.kill"), "1");
            if let Ok(entries) = std::fs::read_dir(dir) {
                for entry in entries.flatten() {
                    if entry.file_type().is_ok_and(|t| t.is_dir()) {
                        remove(&entry.path());
                    }
                }
            }
            for _ in 0..200 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        remove(&self.dir);
    }
}

/// Where the cgroup v2 tree is mounted, from `/proc/self/mountinfo`.
fn cgroup2_mount() -> Option<std::path::PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mounts.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        after
            .starts_with("cgroup2 ")
            .then(|| before.split(' ').nth(4).map(std::path::PathBuf::from))?
    })
}

/// A server that is not root, started in a cgroup v2 subtree delegated to its account (what
/// systemd's `Delegate=yes` or a container runtime gives), puts each terminal in a cgroup of
/// its own under that subtree: membership, the process count and the close's kill work
/// through cgroup v2 alone, and a limit it cannot write is refused with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_not_root_uses_the_cgroup_subtree_delegated_to_it() {
    use std::os::unix::fs::PermissionsExt;
    let skip = |why: &str| {
        #[allow(clippy::print_stderr, reason = "a skipped test says why")]
        {
            eprintln!(
                "SKIPPED a_server_that_is_not_root_uses_the_cgroup_subtree_delegated_to_it: {why}"
            );
        }
    };
    let is_root = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
    };
    if !is_root {
        return skip("delegating a subtree to another account needs root");
    }
    let Some(unified) = cgroup2_mount() else {
        return skip("no cgroup v2 tree is mounted");
    };
    if std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_err()
    {
        return skip("no setpriv (util-linux)");
    }
    // The account: nobody. The delegation is what a delegating manager does: the directory
    // and its cgroup.procs, cgroup.subtree_control and cgroup.threads belong to the account.
    let account = 65534;
    let delegated = Delegated {
        dir: unified.join(format!("ptyhub-test-delegated-{}", std::process::id())),
    };
    std::fs::create_dir(&delegated.dir).unwrap_or_else(|e| panic!("mkdir: {e}"));
    for file in [
        "",
        "cgroup.procs",
        "cgroup.subtree_control",
        "cgroup.threads",
    ] {
        std::os::unix::fs::chown(delegated.dir.join(file), Some(account), Some(account))
            .unwrap_or_else(|e| panic!("chown {file}: {e}"));
    }
    // The binary where the account can run it, and a start that moves into the subtree and
    // then leaves root for the account, as a service manager starts a delegated service.
    let bin = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    std::fs::set_permissions(bin.path(), std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("{e}"));
    let exe = bin.path().join("ptyhub");
    std::fs::copy(env!("CARGO_BIN_EXE_ptyhub"), &exe).unwrap_or_else(|e| panic!("copy: {e}"));
    let start = bin.path().join("serve-delegated");
    std::fs::write(
        &start,
        format!(
            "#!/bin/sh\nset -e\necho $$ > '{procs}'\nprev=\nfor arg in \"$@\"; do\n  \
             [ \"$prev\" = --state-dir ] && chown -R {account}:{account} \"$arg\"\n  prev=$arg\n\
             done\nchown -R {account}:{account} \"$XDG_RUNTIME_DIR\" \"$HOME\"\n\
             export SHELL=/bin/bash\n\
             exec setpriv --reuid={account} --regid={account} --clear-groups '{exe}' \"$@\"\n",
            procs = delegated.dir.join("cgroup.procs").display(),
            exe = exe.display(),
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(&start, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("{e}"));
    let hub = Ptyhub::start_with(&start.to_string_lossy(), &[]);
    let server = hub.server_pid().unwrap_or_else(|| panic!("no server pid"));
    assert_eq!(
        procs(&delegated.dir.to_string_lossy()),
        [server],
        "the server runs in the delegated subtree"
    );
    let client = hub.http();

    let backends = get(&client, "/v2/backends").await;
    let cgroups = data(&backends)["cgroups"].clone();
    assert_eq!(cgroups["status"], "ready", "{cgroups}");
    let base = cgroups["path"].as_str().unwrap_or_default().to_owned();
    assert!(
        base.starts_with(&*delegated.dir.to_string_lossy()),
        "the terminals' cgroups go under the delegated subtree: {cgroups}"
    );
    report(&format!("delegated cgroups: {cgroups}"));

    let id = create(&client, json!({ "id": "delegated" })).await;
    let ran = exec(
        &client,
        &id,
        "id -u; cat /proc/self/cgroup | grep '^0::'; sleep 4747 &",
    )
    .await;
    let output = ran["output"].as_str().unwrap_or_default().to_owned();
    let cgroup = info(&client, &id).await["cgroup"].clone();
    let path = cgroup["path"].as_str().unwrap_or_default().to_owned();
    assert!(path.starts_with(&base), "{cgroup}");
    assert!(
        output.starts_with(&format!("{account}\n")),
        "the shell runs as the account: {ran}"
    );
    let relative = path
        .trim_start_matches(&*unified.to_string_lossy())
        .to_owned();
    assert!(
        output.contains(&format!("0::{relative}")),
        "the shell is in its terminal's cgroup {relative}: {ran}"
    );
    let members = wait_until("the background sleep joins the cgroup", || async {
        let members = procs(&path);
        (members.len() >= 2).then_some(members)
    })
    .await;
    assert!(
        info(&client, &id).await["cgroup"]["processes"].as_u64() >= Some(2),
        "{cgroup}"
    );

    // A limit needs a controller the account cannot write here: refused, with the reason.
    let limited = post(
        &client,
        "/v2/pty/sessions",
        json!({ "id": "limited", "limits": { "pids_max": 64 } }),
    )
    .await;
    if cgroups["pids"].is_null() {
        assert_eq!(limited.status, 400, "{}", limited.body);
        assert_eq!(
            limited.body["error"]["code"], "INVALID_INPUT",
            "{}",
            limited.body
        );
        assert!(hub.terminal_dir("limited").is_none(), "nothing was created");
    } else {
        assert_eq!(limited.status, 200, "{}", limited.body);
        close(&client, "limited").await;
    }

    // Closing kills the terminal's cgroup and removes it.
    close(&client, &id).await;
    wait_until("every process of the terminal is gone", || async {
        members.iter().all(|&pid| !is_alive(pid)).then_some(())
    })
    .await;
    wait_until("the terminal's cgroup is removed", || async {
        (!Path::new(&path).exists()).then_some(())
    })
    .await;
    drop(hub);
}

/// The directory of the v1 `cpu` hierarchy's cgroup that `/proc/<pid>/task/<tid>/cgroup`
/// names for a thread, or `None` where no v1 `cpu` hierarchy is mounted.
fn v1_cpu_dir(pid: u32, tid: u32) -> Option<std::path::PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let point = mounts.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let mut after = after.split(' ');
        let is_cpu = after.next() == Some("cgroup")
            && after.nth(1)?.split(',').any(|option| option == "cpu");
        let fields: Vec<&str> = before.split(' ').collect();
        (is_cpu && fields.get(3) == Some(&"/")).then(|| fields.get(4).map(|p| p.to_string()))?
    })?;
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/cgroup")).ok()?;
    let path = cgroups.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let controllers = fields.nth(1)?;
        controllers
            .split(',')
            .any(|c| c == "cpu")
            .then(|| fields.next().map(str::to_owned))?
    })?;
    Some(Path::new(&point).join(path.trim_start_matches('/')))
}

/// The id of the server's thread named `name`.
fn thread_named(pid: u32, name: &str) -> Option<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
        .find(|task| {
            std::fs::read_to_string(task.path().join("comm")).is_ok_and(|comm| comm.trim() == name)
        })
        .and_then(|task| task.file_name().to_str()?.parse().ok())
}

/// The screen thread of the server `pid` of `hub`, once an exec has given it a screen to
/// follow: the client, the terminal (to close) and the thread's id.
async fn a_screen_thread(hub: &Ptyhub, pid: u32) -> (Client, String, u32) {
    let client = hub.http();
    let id = create(&client, json!({ "cwd": "/" })).await;
    exec(&client, &id, "echo on the screen").await;
    let screen = wait_until("the screen thread", || async {
        thread_named(pid, "ptyhub-screen")
    })
    .await;
    (client, id, screen)
}

/// Where a v1 `cpu` hierarchy lets one thread of a process join a cgroup, the server's screen
/// thread runs in a cpu cgroup of its own with a normal weight (so it leaves the scheduler
/// group of the server's session, docs/backends.md#priority), its other threads stay where
/// they were, and the server removes the cgroup as it stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_screen_thread_runs_in_a_cpu_cgroup_of_its_own_apart_from_the_servers_other_threads() {
    let mut hub = start();
    let pid = hub.server_pid().unwrap_or_else(|| panic!("no server pid"));
    let main_dir = v1_cpu_dir(pid, pid);
    if main_dir.is_none() || !rustix::process::geteuid().is_root() {
        report("SKIPPED the screen cgroup test: no v1 cpu hierarchy, or not root");
        return;
    }
    let (client, id, screen) = a_screen_thread(&hub, pid).await;
    let dir = v1_cpu_dir(pid, screen).unwrap_or_else(|| panic!("no cpu cgroup for {screen}"));
    let name = ptyhub_core::cgroup::screen_cpu_group_name(hub.state_dir());
    assert!(dir.ends_with(&name), "{} is not {name}", dir.display());
    assert_eq!(
        std::fs::read_to_string(dir.join("cpu.shares"))
            .unwrap_or_default()
            .trim(),
        ptyhub_core::cgroup::SCREEN_CPU_SHARES.to_string(),
        "{}",
        dir.display()
    );
    // Never idle: it holds a screen's lock while it applies a slice.
    if dir.join("cpu.idle").exists() {
        assert_eq!(
            std::fs::read_to_string(dir.join("cpu.idle"))
                .unwrap_or_default()
                .trim(),
            "0",
            "{}",
            dir.display()
        );
    }
    assert_eq!(v1_cpu_dir(pid, pid), main_dir, "the main thread stays");
    let tasks = std::fs::read_to_string(dir.join("tasks")).unwrap_or_default();
    assert_eq!(
        tasks.lines().collect::<Vec<_>>(),
        [screen.to_string()],
        "only the screen thread is in {}",
        dir.display()
    );
    close(&client, &id).await;
    hub.stop_server();
    assert!(!dir.exists(), "{} outlived its server", dir.display());
}

/// The server's screen thread is never idle-only, on any host: it holds a screen's lock while
/// it applies a slice of the log, and under `SCHED_IDLE` a busy machine left it no CPU there
/// while the actor that asked for the screen, and the runtime thread under it, waited
/// (docs/reliability.md). Its policy is the normal one and its nice the programs' (0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_screen_thread_of_the_server_runs_at_the_normal_policy_and_the_programs_nice() {
    let hub = start();
    let pid = hub.server_pid().unwrap_or_else(|| panic!("no server pid"));
    let (client, id, screen) = a_screen_thread(&hub, pid).await;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{screen}/stat"))
        .unwrap_or_else(|e| panic!("stat of the screen thread: {e}"));
    // Fields after the command's closing parenthesis start at field 3: nice is 19, policy 41.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    assert_eq!(fields.get(41 - 3), Some(&"0"), "SCHED_OTHER: {stat}");
    assert_eq!(fields.get(19 - 3), Some(&"0"), "nice 0: {stat}");
    close(&client, &id).await;
}
