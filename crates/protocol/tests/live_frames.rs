//! The live-connection frames against their fixtures (`tests/fixtures/live/{server,client}/`):
//! a representative value of every frame serializes to its fixture and each fixture parses
//! back to it, every variant serde knows has a fixture, and the web page (`terminal.js`,
//! run in Node by `tests/web/live_frames.test.mjs`) sends and handles frames of exactly these
//! shapes. A frame whose shape drifts fails here before a client notices.

#![allow(clippy::panic, reason = "tests fail by panicking")]

use std::collections::BTreeSet;
use std::path::PathBuf;

use ptyhub_protocol::api::LeaseInfo;
use ptyhub_protocol::api::{BackendKind, CommandResult, CommandStatus, ExecParams};
use ptyhub_protocol::error::ErrorCode;
use ptyhub_protocol::event::InputVia;
use ptyhub_protocol::event::Seq;
use ptyhub_protocol::live::{
    ClientFrame, ConnectionMode, FrameError, LastInput, LiveTransport, Presence, PresencePeer,
    ResizeData, ServerFrame,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// This package's directory, asked of cargo when the test runs: a test binary reused from a
/// build in another checkout (one `CARGO_TARGET_DIR` shared by several) would otherwise read
/// that checkout's files.
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

fn fixtures(side: &str) -> PathBuf {
    manifest_dir().join(format!("tests/fixtures/live/{side}"))
}

/// One sample per fixture file: `<type>.json` is the usual shape, `<type>.<case>.json` another
/// shape of the same frame.
fn server_samples() -> Vec<(&'static str, ServerFrame)> {
    vec![
        (
            "session_id",
            ServerFrame::SessionId {
                session_id: "work-1".to_owned(),
            },
        ),
        (
            "ready",
            ServerFrame::Ready {
                session_id: Some("work-1".to_owned()),
                transport: LiveTransport::Json,
                backend: BackendKind::Native,
                resumed: false,
                mode: ConnectionMode::Attach,
                seq: Seq(12),
                cols: 120,
                rows: 40,
            },
        ),
        (
            "ready.anonymous",
            ServerFrame::Ready {
                session_id: None,
                transport: LiveTransport::Binary,
                backend: BackendKind::Native,
                resumed: false,
                mode: ConnectionMode::Relay,
                seq: Seq(0),
                cols: 80,
                rows: 24,
            },
        ),
        (
            "restore_output",
            ServerFrame::RestoreOutput {
                data: "$ echo hi\r\nhi\r\n".to_owned(),
                seq: Seq(7),
            },
        ),
        (
            "terminal_restored",
            ServerFrame::TerminalRestored {
                session_id: "work-1".to_owned(),
                seq: Seq(7),
            },
        ),
        (
            "output",
            ServerFrame::Output {
                data: "a€".to_owned(),
                seq: Seq(13),
            },
        ),
        (
            "resize",
            ServerFrame::Resize {
                cols: 100,
                rows: 30,
                seq: Seq(14),
            },
        ),
        ("lagged", ServerFrame::Lagged { seq: Seq(15) }),
        (
            "exit",
            ServerFrame::Exit {
                exit_code: Some(0),
                signal: None,
                seq: Seq(16),
            },
        ),
        (
            "exit.signal",
            ServerFrame::Exit {
                exit_code: None,
                signal: Some(9),
                seq: Seq(16),
            },
        ),
        (
            "pong",
            ServerFrame::Pong {
                timestamp: Some(json!(1_700_000_000_000_u64)),
            },
        ),
        ("pong.no_timestamp", ServerFrame::Pong { timestamp: None }),
        ("relay_replaced", ServerFrame::RelayReplaced),
        (
            "server_stopping",
            ServerFrame::ServerStopping {
                reason: "server restarting".to_owned(),
                seq: Some(Seq(16)),
            },
        ),
        (
            "server_stopping.nothing_sent",
            ServerFrame::ServerStopping {
                reason: "server restarting".to_owned(),
                seq: None,
            },
        ),
        (
            "presence",
            ServerFrame::Presence(Presence {
                you: 2,
                connections: vec![
                    PresencePeer {
                        id: 1,
                        by: "1000/server".to_owned(),
                        mode: ConnectionMode::Attach,
                    },
                    PresencePeer {
                        id: 2,
                        by: "alice/ci-bot".to_owned(),
                        mode: ConnectionMode::Watch,
                    },
                ],
                lease: Some(LeaseInfo {
                    by: "1000/server".to_owned(),
                    via: InputVia::Ws,
                    connection: Some(1),
                    since: 1_735_689_601.5,
                    expires_at: None,
                }),
                last_input: Some(LastInput {
                    by: Some("1000/server".to_owned()),
                    via: Some(InputVia::Ws),
                    at: 1_735_689_602.25,
                    is_typing: true,
                }),
            }),
        ),
        (
            "presence.alone",
            ServerFrame::Presence(Presence {
                you: 0,
                connections: vec![PresencePeer {
                    id: 0,
                    by: "1000/local".to_owned(),
                    mode: ConnectionMode::Relay,
                }],
                lease: None,
                last_input: None,
            }),
        ),
        (
            "exec_result",
            ServerFrame::ExecResult {
                request_id: Some("step-7".to_owned()),
                result: Some(Box::new(CommandResult {
                    session_id: "work-1".to_owned(),
                    command: Some("make test".to_owned()),
                    status: CommandStatus::Completed,
                    output: Some("ok".to_owned()),
                    console: None,
                    exit_code: Some(0),
                    command_id: Some(4),
                    window: None,
                    wait_reason: None,
                    running: None,
                })),
                error: None,
            },
        ),
        (
            "exec_result.refused",
            ServerFrame::ExecResult {
                request_id: Some("step-8".to_owned()),
                result: None,
                error: Some(FrameError {
                    code: ErrorCode::Busy,
                    message: "Session already has a running command".to_owned(),
                }),
            },
        ),
        (
            "error",
            ServerFrame::Error {
                data: "Session already has an active WebSocket connection".to_owned(),
                code: ErrorCode::Busy,
            },
        ),
    ]
}

fn client_samples() -> Vec<(&'static str, ClientFrame)> {
    vec![
        (
            "input",
            ClientFrame::Input {
                data: "ls\n".to_owned(),
            },
        ),
        ("resize", ClientFrame::resize(120, 40)),
        (
            "resize.data",
            ClientFrame::Resize {
                cols: None,
                rows: None,
                data: Some(ResizeData {
                    cols: 120,
                    rows: 40,
                }),
            },
        ),
        (
            "ping",
            ClientFrame::Ping {
                timestamp: Some(json!(1_700_000_000_000_u64)),
            },
        ),
        ("ping.no_timestamp", ClientFrame::Ping { timestamp: None }),
        ("lease_take", ClientFrame::LeaseTake { force: false }),
        ("lease_take.force", ClientFrame::LeaseTake { force: true }),
        ("lease_release", ClientFrame::LeaseRelease),
        (
            "exec",
            ClientFrame::Exec {
                request_id: Some("step-7".to_owned()),
                params: Box::new(ExecParams {
                    command: "make test".to_owned(),
                    timeout: Some(30.0),
                    ..ExecParams::default()
                }),
            },
        ),
    ]
}

/// The `type` names serde accepts for `T`, from its own "unknown variant" message, so a
/// variant added without a fixture is noticed even if nobody adds a sample for it.
fn variant_names<T: DeserializeOwned + std::fmt::Debug>() -> BTreeSet<String> {
    let error = match serde_json::from_str::<T>(r#"{"type":"\u0000no such frame"}"#) {
        Ok(frame) => panic!("a made-up type parsed: {frame:?}"),
        Err(error) => error.to_string(),
    };
    let (_, expected) = error
        .split_once("expected one of ")
        .or_else(|| error.split_once("expected "))
        .unwrap_or_else(|| panic!("serde's message changed: {error}"));
    expected
        .split(", ")
        .filter_map(|name| name.split('`').nth(1))
        .map(str::to_owned)
        .collect()
}

fn fixture_files(side: &str) -> BTreeSet<String> {
    std::fs::read_dir(fixtures(side))
        .unwrap_or_else(|e| panic!("cannot list the {side} fixtures: {e}"))
        .map(|entry| {
            let entry = entry.unwrap_or_else(|e| panic!("cannot list the {side} fixtures: {e}"));
            let name = entry.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".json")
                .unwrap_or_else(|| panic!("{side}/{name} is not a .json fixture"))
                .to_owned()
        })
        .collect()
}

fn read_fixture(side: &str, name: &str) -> Value {
    let path = fixtures(side).join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn check_side<T>(side: &str, samples: &[(&'static str, T)])
where
    T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let files = fixture_files(side);
    let sampled: BTreeSet<String> = samples.iter().map(|(n, _)| (*n).to_owned()).collect();
    assert_eq!(
        files, sampled,
        "every {side} fixture has a sample and every sample a fixture"
    );
    let variants = variant_names::<T>();
    for name in &sampled {
        let kind = name.split('.').next().unwrap_or(name);
        assert!(
            variants.contains(kind),
            "{side}/{name}.json: serde knows no `{kind}` (known: {variants:?})"
        );
    }
    for variant in variants {
        assert!(
            files.contains(&variant),
            "the {side} frame `{variant}` has no fixture {side}/{variant}.json"
        );
    }
    for (name, sample) in samples {
        let fixture = read_fixture(side, name);
        let written = serde_json::to_value(sample).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            written, fixture,
            "{side}/{name}.json: the frame's shape drifted"
        );
        let kind = name.split('.').next().unwrap_or(name);
        assert_eq!(fixture["type"], kind, "{side}/{name}.json: its type");
        let parsed: T = serde_json::from_value(fixture.clone())
            .unwrap_or_else(|e| panic!("{side}/{name}.json does not parse: {e}"));
        assert_eq!(&parsed, sample, "{side}/{name}.json parses back");
        let text = serde_json::to_string(sample).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            text.starts_with(&format!("{{\"type\":\"{kind}\"")),
            "{name}: `type` comes first on the wire: {text}"
        );
    }
}

#[test]
fn every_server_frame_matches_its_fixture() {
    check_side("server", &server_samples());
}

#[test]
fn every_client_frame_matches_its_fixture() {
    check_side("client", &client_samples());
}

#[test]
fn client_frames_of_another_shape_are_refused() {
    for text in [
        r#"{"type":"input"}"#,
        r#"{"type":"input","data":"x","extra":1}"#,
        r#"{"type":"resize","cols":"wide","rows":40}"#,
        r#"{"type":"output","data":"x","seq":1}"#,
        r#"{"data":"x"}"#,
        r#""input""#,
    ] {
        assert!(
            serde_json::from_str::<ClientFrame>(text).is_err(),
            "{text} parsed as a client frame"
        );
    }
}

/// A ping's timestamp comes back in the pong as it was sent, whatever JSON it is: a number
/// with more digits than a double holds parses to the nearest double, so the pong's text of
/// it parses to that same value again (the fuzz target `live_frames` found one that did not).
#[test]
fn a_pings_timestamp_comes_back_exactly() {
    for timestamp in [
        "1764755000123",
        "1764755000.123456",
        "5.555555555555555e+83",
        "555555555555555555555555555555555555555555555555555555555555555555555555555555555551",
        "0.1",
        "-2.5e-300",
        r#"{"a":[1e22,2.5,"x"]}"#,
    ] {
        let sent = ClientFrame::from_text(&format!(r#"{{"type":"ping","timestamp":{timestamp}}}"#))
            .unwrap_or_else(|e| panic!("{timestamp}: {e:?}"));
        let ClientFrame::Ping { timestamp: echoed } = sent.clone() else {
            panic!("{timestamp}: not a ping: {sent:?}");
        };
        let pong = ServerFrame::Pong { timestamp: echoed }.to_text();
        let read: Value = serde_json::from_str(&pong).unwrap_or_else(|e| panic!("{pong}: {e}"));
        let expected: Value =
            serde_json::from_str(timestamp).unwrap_or_else(|e| panic!("{timestamp}: {e}"));
        assert_eq!(
            read["timestamp"], expected,
            "{timestamp} came back as {pong}"
        );
        assert_eq!(
            ClientFrame::from_text(&sent.to_text()).ok(),
            Some(sent),
            "{timestamp}"
        );
    }
}

/// The web page's frames, checked by running the page's own code in Node against the
/// fixtures (no browser needed). Skipped, with a note, where Node is not installed.
#[test]
fn the_web_page_sends_and_handles_the_fixture_shapes() {
    let node = std::env::var("PTYHUB_NODE").unwrap_or_else(|_| "node".to_owned());
    let script = manifest_dir().join("tests/web/live_frames.test.mjs");
    let page = manifest_dir().join("../server/assets/terminal.js");
    let output = match std::process::Command::new(&node)
        .arg("--test")
        .arg(&script)
        .env("PTYHUB_FIXTURES", fixtures(""))
        .env("PTYHUB_PAGE", &page)
        .output()
    {
        Ok(output) => output,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            #[allow(
                clippy::print_stderr,
                reason = "a skipped test says so in the test output"
            )]
            {
                eprintln!("SKIPPED: no {node} to run {}", script.display());
            }
            return;
        }
        Err(error) => panic!("cannot run {node}: {error}"),
    };
    assert!(
        output.status.success(),
        "{} failed\nstdout: {}\nstderr: {}",
        script.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
