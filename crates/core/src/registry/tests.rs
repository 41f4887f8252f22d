//! The registry on the fake backend: creation, exact-owner visibility, the live limit,
//! a failed launch, discovery after a restart and event pages, with no process started.

use std::sync::Arc;
use std::time::Duration;

use ptyhub_protocol::error::ErrorCode;
use ptyhub_protocol::event::Seq;
use ptyhub_protocol::ids::TerminalId;

use super::{CreateSpec, Limits, Registry, RegistryConfig};
use crate::backend::fake::FakeBackend;
use crate::state_dir::{StateDir, TerminalState};

struct Setup {
    _root: tempfile::TempDir,
    state: StateDir,
    runtime: std::path::PathBuf,
    backend: FakeBackend,
}

fn setup() -> Setup {
    let root = tempfile::tempdir().expect("a temporary directory");
    let state = StateDir::open(root.path().join("state")).expect("the state dir");
    Setup {
        state,
        runtime: root.path().join("run"),
        _root: root,
        backend: FakeBackend::default(),
    }
}

fn registry(setup: &Setup, max_live: usize) -> Arc<Registry> {
    Registry::new(RegistryConfig {
        agent_env: crate::creation::agent_env(),
        state_dir: setup.state.clone(),
        runtime_dir: setup.runtime.clone(),
        backends: crate::backend::Backends::single(Arc::new(setup.backend.clone())),
        limits: Limits {
            max_live,
            ..Limits::default()
        },
        os_users: Default::default(),
        confined_owners: Default::default(),
    })
    .expect("a registry")
}

fn spec(id: &str) -> CreateSpec {
    CreateSpec {
        id: Some(TerminalId::parse(id).expect("an id")),
        cwd: Some("/".to_owned()),
        shell: Some("sh".to_owned()),
        ..CreateSpec::default()
    }
}

#[tokio::test]
async fn a_terminal_is_seen_by_its_owner_only_and_created_once() {
    let s = setup();
    let registry = registry(&s, 20);
    let (handle, is_new) = registry.create("ann", spec("t1")).await.expect("created");
    assert!(is_new);
    let info = handle.info().await.expect("info");
    assert_eq!(
        (info.state, info.owner.as_str()),
        (TerminalState::Running, "ann")
    );

    let foreign = registry
        .get("bob", "t1")
        .await
        .map_err(|e| (e.code(), e.to_string()));
    let absent = registry.get("bob", "t9").await.map_err(|e| e.code());
    assert_eq!(foreign.as_ref().map_err(|e| e.0).err(), absent.err());
    assert_eq!(
        foreign.err().map(|e| e.1).as_deref(),
        Some("session t1 not found")
    );
    assert!(registry.list("bob", true).await.is_empty());
    assert_eq!(registry.list("ann", false).await.len(), 1);

    let (_, is_new) = registry.create("ann", spec("t1")).await.expect("found");
    assert!(!is_new, "the same id is the same terminal");
    // Another owner's terminal of the same id is another terminal.
    let (_, is_new) = registry.create("bob", spec("t1")).await.expect("created");
    assert!(is_new);
}

#[tokio::test]
async fn a_failed_launch_is_backend_unavailable_and_leaves_a_closed_error_record() {
    let s = setup();
    s.backend.refuse_launches();
    let registry = registry(&s, 20);
    let refused = registry.create("ann", spec("t1")).await.err();
    assert_eq!(
        refused.map(|e| e.code()),
        Some(ErrorCode::BackendUnavailable)
    );
    assert!(registry.get("ann", "t1").await.is_err());
    assert!(registry.list("ann", true).await.is_empty());
    let found = s.state.discover();
    assert_eq!(found.len(), 1);
    let (_, meta) = &found[0];
    assert_eq!(meta.state, TerminalState::Error);
    assert!(meta.closed);
}

#[tokio::test]
async fn the_live_limit_closes_the_least_recently_used_idle_terminal_but_never_a_busy_one() {
    let s = setup();
    let registry = registry(&s, 1);
    let (first, _) = registry.create("ann", spec("t1")).await.expect("created");
    registry
        .create("ann", spec("t2"))
        .await
        .expect("room was made");
    assert!(first.info().await.is_ok_and(|info| info.closed));
    let live: Vec<String> = registry
        .list("ann", false)
        .await
        .into_iter()
        .map(|info| info.session_id)
        .collect();
    assert_eq!(live, ["t2"]);

    // t2 runs a command (one a person typed: the shell's `C` mark): nothing can be closed
    // to make room.
    let meta = s
        .state
        .discover()
        .into_iter()
        .find(|(_, meta)| meta.id.as_str() == "t2")
        .expect("t2 on disk");
    let host = s.backend.host(&meta.0).expect("t2's host");
    let nonce = meta.1.integration_nonce;
    host.output(format!("\x1b]133;A;k={nonce}\x07$ \x1b]133;C;k={nonce}\x07").as_bytes());
    let second = registry.get("ann", "t2").await.expect("t2");
    tokio::time::timeout(Duration::from_secs(5), async {
        while !second
            .info()
            .await
            .is_ok_and(|info| info.running_command.is_some())
        {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("t2 runs a command");
    let refused = registry.create("ann", spec("t3")).await.err();
    assert_eq!(refused.map(|e| e.code()), Some(ErrorCode::LimitExceeded));
    assert!(registry.get("ann", "t2").await.is_ok());
}

#[tokio::test]
async fn a_restarted_registry_finds_its_terminals_and_their_history() {
    let s = setup();
    let first = registry(&s, 20);
    let (handle, _) = first.create("ann", spec("t1")).await.expect("created");
    let before = handle.info().await.expect("info").last_seq;
    drop(handle);
    drop(first);

    let second = registry(&s, 20);
    assert_eq!(second.discover().await, 1);
    let handle = second.get("ann", "t1").await.expect("found again");
    let mut applied = handle.seq();
    applied
        .wait_for(|seq| *seq >= before)
        .await
        .expect("replayed");
    let page = second
        .events("ann", "t1", Seq::ZERO, 10)
        .await
        .expect("a page");
    assert!(!page.events.is_empty());
    assert_eq!(page.events[0]["type"], "process.start");

    second.close("ann", "t1").await.expect("closed");
    assert!(second.get("ann", "t1").await.is_err());
    let kept = second
        .events("ann", "t1", Seq::ZERO, 10)
        .await
        .expect("history stays");
    assert_eq!(
        kept.events.len(),
        page.events.len() + 1,
        "the exit is logged"
    );
    assert_eq!(second.list("ann", true).await.len(), 1);
}

#[tokio::test]
async fn a_closed_terminal_leaves_no_actor_behind() {
    let s = setup();
    let registry = registry(&s, 20);
    for i in 0..20 {
        let id = format!("t{i}");
        let (handle, _) = registry.create("ann", spec(&id)).await.expect("created");
        let mut applied = handle.seq();
        registry.close("ann", &id).await.expect("closed");
        drop(handle);
        // The actor owns the sending side of `seq`: it is gone once that side is dropped.
        let ended = tokio::time::timeout(Duration::from_secs(30), async {
            while applied.changed().await.is_ok() {}
        })
        .await;
        assert!(
            ended.is_ok(),
            "the actor of closed terminal {id} still runs"
        );
        assert!(registry.get("ann", &id).await.is_err());
    }
    assert_eq!(registry.list("ann", true).await.len(), 20);
    assert!(registry.list("ann", false).await.is_empty());
}

#[tokio::test]
async fn an_expiring_terminal_is_reclaimed_before_an_older_persistent_one_and_its_files_go() {
    let s = setup();
    let registry = registry(&s, 2);
    registry.create("ann", spec("kept")).await.expect("created");
    let expiring = CreateSpec {
        retention: ptyhub_protocol::api::Retention::Expiring,
        ..spec("brief")
    };
    registry.create("ann", expiring).await.expect("created");
    let brief_dir = s
        .state
        .discover()
        .into_iter()
        .find(|(_, meta)| meta.id.as_str() == "brief")
        .map(|(dir, _)| dir)
        .expect("brief on disk");
    registry
        .create("ann", spec("third"))
        .await
        .expect("room was made");
    let mut live: Vec<String> = registry
        .list("ann", true)
        .await
        .into_iter()
        .map(|info| info.session_id)
        .collect();
    live.sort();
    assert_eq!(
        live,
        ["kept", "third"],
        "the expiring one is gone, listed or not"
    );
    assert!(!brief_dir.exists(), "its directory is removed");
}
