//! The actor against the fake backend: no process is started, time is paused where timers
//! matter, and every request the actor makes is checked.

use std::sync::Arc;
use std::time::Duration;

use ptyhub_protocol::api::{CommandResult, CommandStatus};
use ptyhub_protocol::error::ErrorCode;
use ptyhub_protocol::holder::{HolderRequest, HolderStatus};

use super::{ExecRequest, OutputExtent, TerminalHandle};
use crate::backend::fake::{FAKE_SHELL_PID, FakeBackend, FakeHost};
use crate::state_dir;

const NONCE: &str = "n0nce";

fn mark(kind: &str) -> Vec<u8> {
    format!("\x1b]133;{kind};k={NONCE}\x07").into_bytes()
}

/// What bash with the integration prints when it is ready for a command.
fn prompt() -> Vec<u8> {
    [mark("A"), b"$ ".to_vec(), b"\x1b[?2004h".to_vec()].concat()
}

/// What bash prints when it starts a command: the paste is echoed, the editor closes, `C`.
fn started(command: &str) -> Vec<u8> {
    [
        format!("{command}\r\n").into_bytes(),
        b"\x1b[?2004l".to_vec(),
        mark("C"),
    ]
    .concat()
}

/// What bash prints when it runs a command and comes back: [`started`], the output, `D` with
/// the exit code, and the next prompt.
fn run(command: &str, output: &str, exit_code: i32) -> Vec<u8> {
    [
        started(command),
        output.as_bytes().to_vec(),
        mark(&format!("D;{exit_code}")),
        prompt(),
    ]
    .concat()
}

struct Terminal {
    _dir: tempfile::TempDir,
    fake: FakeHost,
    handle: TerminalHandle,
}

/// A running terminal on the fake backend whose log already holds `history`.
fn start(history: &[&[u8]]) -> Terminal {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let backend = FakeBackend::default();
    let fake = backend.host(dir.path()).expect("the fake's log");
    for bytes in history {
        fake.output(bytes);
    }
    let meta = fake.meta(NONCE);
    state_dir::write_meta(dir.path(), &meta).expect("meta.json");
    let handle = TerminalHandle::spawn(dir.path().to_path_buf(), meta, Arc::new(backend));
    Terminal {
        _dir: dir,
        fake,
        handle,
    }
}

/// A terminal at its prompt, and the id of `command`, submitted to it.
async fn submitted_at_prompt(command: &str) -> (Terminal, u64) {
    let t = start(&[&prompt()]);
    let id = t.handle.exec(exec(command)).await.expect("submitted");
    (t, id)
}

/// Command `id`'s result once it ended (or `limit` passed: then as it stands).
async fn ended(t: &Terminal, id: u64, limit: Option<Duration>) -> CommandResult {
    t.handle
        .wait_command(Some(id), limit)
        .await
        .expect("a result")
}

fn exec(command: &str) -> ExecRequest {
    ExecRequest {
        command: command.to_owned(),
        ..ExecRequest::default()
    }
}

/// Lets the actor handle everything queued.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

fn pasted(command: &str) -> Vec<u8> {
    [b"\x1b[200~", command.as_bytes(), b"\x1b[201~\r"].concat()
}

#[tokio::test]
async fn exec_on_a_new_shell_waits_for_the_prompt_then_submits_once() {
    let t = start(&[]);
    let handle = t.handle.clone();
    let submitted = tokio::spawn(async move { handle.exec(exec("echo hi")).await });
    settle().await;
    assert!(
        t.fake.typed().is_empty(),
        "nothing is typed before the prompt"
    );
    t.fake.output(&prompt());
    let id = submitted.await.expect("the exec task").expect("submitted");
    let typed = t.fake.typed();
    assert_eq!(typed.len(), 1, "typed once: {typed:?}");
    assert!(typed[0].ends_with(&pasted("echo hi")), "{typed:?}");

    t.fake.output(&run("echo hi", "hi\r\n", 0));
    let result = ended(&t, id, Some(Duration::from_secs(5))).await;
    assert_eq!(result.status, CommandStatus::Completed);
    assert_eq!(result.exit_code, Some(0));
    assert_eq!(result.output.as_deref(), Some("hi"));
}

#[tokio::test]
async fn a_second_exec_while_one_runs_is_busy_and_types_nothing() {
    let t = start(&[&prompt()]);
    t.handle.exec(exec("sleep 9")).await.expect("submitted");
    let second = t.handle.exec(exec("echo no")).await;
    assert_eq!(second.map_err(|e| e.code()), Err(ErrorCode::Busy));
    assert_eq!(t.fake.typed().len(), 1);
}

#[tokio::test]
async fn history_is_replayed_before_a_command_is_submitted() {
    // The log holds a finished command and a prompt: the actor replays it first, so its
    // exec is not parked and the earlier command is in the console record.
    let t = start(&[&prompt(), &run("ls", "a b\r\n", 0)]);
    let id = t.handle.exec(exec("true")).await.expect("submitted");
    let result = t.handle.command_result(Some(id)).await.expect("a result");
    assert_eq!(result.status, CommandStatus::Running);
    let console = result.console.unwrap_or_default();
    assert_eq!(console.len(), 1, "{console:?}");
    assert_eq!(console[0].output, "a b");
    assert_eq!(t.fake.connects(), 1);
}

/// A caller waiting for a new shell's line editor wakes as soon as the first prompt comes,
/// not at the next turn of a timer: time is paused, so only timers move it.
#[tokio::test(start_paused = true)]
async fn a_wait_for_the_editor_wakes_with_the_first_prompt() {
    let t = start(&[]);
    let handle = t.handle.clone();
    let waiting = tokio::spawn(async move { handle.wait_for_editor(None).await });
    // The waiter has asked and found the shell starting.
    tokio::time::sleep(Duration::from_millis(3)).await;
    assert!(!waiting.is_finished());
    let before = tokio::time::Instant::now();
    t.fake.output(&prompt());
    waiting.await.expect("joined").expect("the editor is ready");
    assert!(
        before.elapsed() < Duration::from_millis(1),
        "{:?}",
        before.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn no_change_timeout_presses_ctrl_c_then_kills_then_gives_up() {
    let t = start(&[&prompt()]);
    let request = ExecRequest {
        no_change_timeout: Some(Duration::from_secs(5)),
        ..exec("sleep 100")
    };
    let id = t.handle.exec(request).await.expect("submitted");
    t.fake.output(&started("sleep 100"));
    settle().await;
    tokio::time::sleep(Duration::from_millis(4900)).await;
    settle().await;
    assert_eq!(t.fake.typed().len(), 1, "no ^C before the timeout");

    tokio::time::sleep(Duration::from_millis(200)).await;
    settle().await;
    assert_eq!(t.fake.typed().last().map(Vec::as_slice), Some(&b"\x03"[..]));
    assert!(
        !t.fake
            .requests()
            .iter()
            .any(|r| matches!(r, HolderRequest::Signal { .. }))
    );

    // The command ignores ^C: after the grace its group is killed, the shell spared.
    tokio::time::sleep(super::INTERRUPT_GRACE).await;
    settle().await;
    let kill = t.fake.requests().into_iter().find_map(|r| match r {
        HolderRequest::Signal { signal, spare_pgid } => Some((signal, spare_pgid)),
        _ => None,
    });
    assert_eq!(
        kill,
        Some((super::ESCALATION_SIGNAL.as_raw(), Some(FAKE_SHELL_PID)))
    );

    // Nothing ends it: the terminal stops tracking it and is usable again.
    tokio::time::sleep(super::INTERRUPT_GRACE).await;
    let result = ended(&t, id, None).await;
    assert_eq!(result.status, CommandStatus::NoChangeTimeout);
    t.fake.output(&prompt());
    settle().await;
    assert!(t.handle.exec(exec("echo again")).await.is_ok());
}

/// The `SignalStartedSince` requests the actor made (a cancel's SIGTERM to what the command
/// started).
fn started_since_signals(t: &Terminal) -> usize {
    t.fake
        .requests()
        .iter()
        .filter(|r| matches!(r, HolderRequest::SignalStartedSince { .. }))
        .count()
}

#[tokio::test(start_paused = true)]
async fn a_cancel_before_the_shell_started_the_command_interrupts_it_once_it_starts() {
    // Pressed while the line editor still reads the command (a bracketed paste half read),
    // ^C would flush the rest of it from the tty and leave the editor inside the paste,
    // where the next command's bytes would join it.
    let (t, id) = submitted_at_prompt("trap '' INT; sleep 60").await;
    assert_eq!(t.handle.cancel(Some(id)).await.ok(), Some(id));
    settle().await;
    assert_eq!(t.fake.typed().len(), 1, "no ^C before the command starts");
    assert_eq!(started_since_signals(&t), 0);

    t.fake.output(&started("trap '' INT; sleep 60"));
    settle().await;
    assert_eq!(t.fake.typed().last().map(Vec::as_slice), Some(&b"\x03"[..]));
    assert_eq!(started_since_signals(&t), 1, "what it started gets SIGTERM");
    t.fake.output(&[mark("D;143"), prompt()].concat());
    let result = ended(&t, id, Some(Duration::from_secs(5))).await;
    assert!(!result.status.is_running(), "{result:?}");
}

#[tokio::test(start_paused = true)]
async fn an_exec_after_a_prompt_the_tty_discarded_is_typed_after_the_paste_wait() {
    // The cancel's SIGTERM ends the command before the kernel takes its ^C, whose flush then
    // discards what the shell wrote since: its end mark and its prompt (with the paste's
    // switch on) never reach the terminal, and its line editor reads.
    let (t, id) = submitted_at_prompt("trap '' INT; sleep 60").await;
    t.fake.output(&started("trap '' INT; sleep 60"));
    settle().await;
    assert_eq!(t.handle.cancel(Some(id)).await.ok(), Some(id));
    settle().await;
    assert_eq!(t.fake.typed().last().map(Vec::as_slice), Some(&b"\x03"[..]));
    // No end comes: the kill after the grace, and the end of tracking a grace later.
    tokio::time::sleep(super::INTERRUPT_GRACE * 2 + Duration::from_millis(100)).await;
    let result = ended(&t, id, None).await;
    assert_eq!(result.status, CommandStatus::Terminated);

    let handle = t.handle.clone();
    let next = tokio::spawn(async move { handle.exec(exec("echo alive")).await });
    settle().await;
    tokio::time::sleep(super::PASTE_WAIT + Duration::from_millis(100)).await;
    settle().await;
    let typed = t.fake.typed();
    assert!(
        typed
            .last()
            .is_some_and(|last| last.ends_with(&pasted("echo alive"))),
        "{typed:?}"
    );
    assert!(next.await.expect("the exec task").is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_command_the_shell_never_starts_is_interrupted_after_the_grace() {
    let t = start(&[&prompt()]);
    let id = t.handle.exec(exec("cat <<EOF")).await.expect("submitted");
    t.handle.cancel(Some(id)).await.expect("cancelled");
    settle().await;
    tokio::time::sleep(super::INTERRUPT_GRACE - Duration::from_millis(100)).await;
    settle().await;
    assert_eq!(t.fake.typed().len(), 1, "the start is waited for");
    tokio::time::sleep(Duration::from_millis(200)).await;
    settle().await;
    assert_eq!(t.fake.typed().last().map(Vec::as_slice), Some(&b"\x03"[..]));
    assert_eq!(started_since_signals(&t), 1);
}

#[tokio::test(start_paused = true)]
async fn hard_timeout_fires_even_while_output_flows() {
    let t = start(&[&prompt()]);
    let request = ExecRequest {
        hard_timeout: Some(Duration::from_secs(2)),
        no_change_timeout: Some(Duration::from_secs(60)),
        ..exec("yes")
    };
    let id = t.handle.exec(request).await.expect("submitted");
    t.fake
        .output(&[b"yes\r\n".to_vec(), b"\x1b[?2004l".to_vec(), mark("C")].concat());
    for _ in 0..25 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        t.fake.output(b"y\r\n");
    }
    settle().await;
    assert_eq!(t.fake.typed().last().map(Vec::as_slice), Some(&b"\x03"[..]));
    // The ^C works: bash reports 130 and comes back; a timed-out command has no exit code.
    t.fake
        .output(&[b"^C".to_vec(), mark("D;130"), prompt()].concat());
    let result = ended(&t, id, None).await;
    assert_eq!(result.status, CommandStatus::HardTimeout);
    assert_eq!(result.exit_code, None);
    assert!(
        t.fake
            .requests()
            .iter()
            .all(|r| !matches!(r, HolderRequest::Signal { .. }))
    );
}

#[tokio::test]
async fn closing_while_a_command_runs_ends_it_and_keeps_the_terminal_closed() {
    let t = start(&[&prompt()]);
    let id = t.handle.exec(exec("sleep 100")).await.expect("submitted");
    t.fake.output(&started("sleep 100"));
    let meta = t.handle.close().await.expect("closed");
    assert!(meta.closed);
    assert!(t.fake.requests().contains(&HolderRequest::Terminate));
    let result = ended(&t, id, None).await;
    assert_eq!(result.status, CommandStatus::Terminated);
    let refused = t.handle.exec(exec("echo late")).await;
    assert_eq!(
        refused.map_err(|e| e.code()),
        Err(ErrorCode::SessionNotRunning)
    );
}

#[tokio::test(start_paused = true)]
async fn a_close_the_host_never_finishes_kills_it_after_the_timeout() {
    let t = start(&[&prompt()]);
    t.fake.ignore_terminate();
    let handle = t.handle.clone();
    let closing = tokio::spawn(async move { handle.close().await });
    settle().await;
    assert_eq!(t.fake.kills(), 0);
    tokio::time::sleep(super::CLOSE_TIMEOUT + Duration::from_millis(10)).await;
    let meta = closing.await.expect("the close task").expect("closed");
    assert!(meta.closed);
    assert_eq!(t.fake.kills(), 1);
}

#[tokio::test]
async fn process_facts_and_signals_come_from_the_backend() {
    let t = start(&[&prompt()]);
    t.fake.set_status(HolderStatus {
        child_pid: Some(FAKE_SHELL_PID),
        foreground_pgid: Some(77),
        foreground_program: Some("python3".to_owned()),
        is_reading: true,
        is_canonical: true,
        is_echo: false,
        process_count: Some(3),
        ..HolderStatus::default()
    });
    let facts = t.handle.foreground().await.expect("asked").expect("facts");
    assert_eq!(facts.pgid, 77);
    assert_eq!(facts.program.as_deref(), Some("python3"));
    assert!(facts.is_reading && facts.is_password && !facts.is_shell);
    assert_eq!(facts.process_count, Some(3));

    let signaled = t.handle.signal_foreground(2).await.expect("signaled");
    assert_eq!(signaled.pgid, 77);
    assert!(!signaled.is_shell);
    assert!(t.fake.requests().contains(&HolderRequest::Signal {
        signal: 2,
        spare_pgid: None
    }));

    // Once the program exited, nothing is asked of the host and a signal is refused.
    t.fake.exit(Some(0));
    settle().await;
    assert_eq!(t.handle.foreground().await.ok().flatten(), None);
    let refused = t.handle.signal_foreground(2).await.map_err(|e| e.code());
    assert_eq!(refused, Err(ErrorCode::SessionNotRunning));
}

#[tokio::test]
async fn a_watcher_that_falls_behind_is_told_and_catches_up_from_the_log_without_a_gap() {
    use super::live::{ConnectOptions, LiveFrame, LiveMode};
    let t = start(&[&prompt()]);
    let options = ConnectOptions {
        mode: LiveMode::Watch,
        restore: false,
        replay_bytes: 0,
        since_seq: None,
        by: "1000/server".to_owned(),
        wants_presence: false,
    };
    let (mut watcher, _ready) = t.handle.connect(options).await.expect("connected");
    // The watcher reads what there is and is live.
    let caught_up = tokio::time::timeout(Duration::from_millis(500), watcher.next()).await;
    assert!(caught_up.is_err(), "nothing new yet: {caught_up:?}");
    t.fake.output(b"first\r\n");
    let first = watcher.next().await;
    assert!(
        matches!(&first, Some(LiveFrame::Output { data, .. }) if &data[..] == b"first\r\n"),
        "{first:?}"
    );
    falls_behind_and_catches_up(&t, &mut watcher).await;
}

#[tokio::test]
async fn a_watcher_still_reading_the_log_when_it_falls_behind_is_told_too() {
    use super::live::{ConnectOptions, LiveFrame, LiveMode};
    let t = start(&[&prompt()]);
    let options = ConnectOptions {
        mode: LiveMode::Watch,
        restore: false,
        replay_bytes: 0,
        since_seq: None,
        by: "1000/server".to_owned(),
        wants_presence: false,
    };
    let (mut watcher, _ready) = t.handle.connect(options).await.expect("connected");
    // Output before the watcher's first read: it takes it from the log, and has not yet
    // looked at the live stream when the flood comes.
    let first_seq = t.fake.output(b"first\r\n");
    let mut applied = t.handle.seq();
    applied
        .wait_for(|seq| *seq >= first_seq)
        .await
        .expect("applied");
    let first = watcher.next().await;
    assert!(
        matches!(&first, Some(LiveFrame::Output { data, .. }) if &data[..] == b"first\r\n"),
        "{first:?}"
    );
    falls_behind_and_catches_up(&t, &mut watcher).await;
}

/// 4 MiB more than the live buffer keeps while the watcher reads nothing, then the watcher
/// reads: it is told it lagged and gets every byte once, in order.
async fn falls_behind_and_catches_up(t: &Terminal, watcher: &mut super::live::Connection) {
    use super::live::LiveFrame;
    let mut expected = Vec::new();
    let mut last = ptyhub_protocol::event::Seq::ZERO;
    let chunks = (super::live::LIVE_BYTES_BUFFERED + 4 * 1024 * 1024) / (64 * 1024);
    for i in 0..chunks {
        let chunk = vec![b'a' + (i % 26) as u8; 64 * 1024];
        expected.extend_from_slice(&chunk);
        last = t.fake.output(&chunk);
    }
    let mut applied = t.handle.seq();
    applied.wait_for(|seq| *seq >= last).await.expect("applied");

    let mut received = Vec::new();
    let mut lagged = 0;
    while received.len() < expected.len() {
        match watcher.next().await.expect("a frame") {
            LiveFrame::Output { data, .. } => received.extend_from_slice(&data),
            LiveFrame::Lagged { .. } => lagged += 1,
            other => panic!("unexpected frame {other:?}"),
        }
    }
    assert!(lagged >= 1, "the watcher is told it fell behind");
    assert!(received == expected, "every byte once, in order");
}

/// The fake driven by a real recording (`crates/core/tests/ref/`): an actor that connects to a
/// terminal with that history rebuilds the console records the reference expectations pin for
/// a restored server, and sees the program's exit.
#[tokio::test]
async fn a_real_recording_replays_to_the_console_the_reference_expects() {
    let case = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(
            || std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")),
            std::path::PathBuf::from,
        )
        .join("tests/ref/bash-heredoc");
    let read_json = |name: &str| -> serde_json::Value {
        let text = std::fs::read_to_string(case.join(name)).expect("a recording file");
        serde_json::from_str(&text).expect("JSON")
    };
    let recorded = read_json("terminal.json");
    let expected = read_json("expected.json");
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::copy(case.join("events.jsonl"), dir.path().join("events.jsonl")).expect("copied");
    let backend = FakeBackend::default();
    let host = backend.host(dir.path()).expect("the fake's log");
    let meta = host.meta(recorded["nonce"].as_str().expect("a nonce"));
    state_dir::write_meta(dir.path(), &meta).expect("meta.json");
    let handle = TerminalHandle::spawn(dir.path().to_path_buf(), meta, Arc::new(backend));

    let result = handle.command_result(None).await.expect("a result");
    let console: Vec<serde_json::Value> = result
        .console
        .unwrap_or_default()
        .iter()
        .map(|record| {
            serde_json::json!({ "command": record.command, "output": record.output, "ps1": record.ps1 })
        })
        .collect();
    assert_eq!(
        serde_json::Value::Array(console),
        expected["restored"]["console"]
    );
    assert!(handle.probe().await.expect("a probe").is_exited);
}

/// A command that asks a question ends the wait with `stdin_read` and its output so far; one
/// that only runs quietly does not, and one that ends reports its result.
#[tokio::test]
async fn a_command_waiting_for_input_ends_the_wait_early() {
    use super::input_wait::wait_command_or_input;
    use ptyhub_protocol::api::WaitReason;
    let t = start(&[&prompt()]);
    let id = t.handle.exec(exec("./install")).await.expect("submitted");
    let handle = &t.handle;
    let wait_as = |limit, with_console| async move {
        wait_command_or_input(
            handle,
            Some(id),
            Some(limit),
            OutputExtent::Whole,
            with_console,
        )
        .await
        .expect("waited")
    };
    let wait = |limit| wait_as(limit, false);
    t.fake.output(
        &[
            b"./install\r\n".to_vec(),
            b"\x1b[?2004l".to_vec(),
            mark("C"),
            b"Continue? [Y/n] ".to_vec(),
        ]
        .concat(),
    );
    t.fake.set_status(HolderStatus {
        child_pid: Some(FAKE_SHELL_PID),
        foreground_pgid: Some(77),
        foreground_program: Some("install".to_owned()),
        is_reading: false,
        ..HolderStatus::default()
    });
    // Running, not reading: the wait runs to its limit.
    let quiet = wait(Duration::from_millis(300)).await;
    assert_eq!(quiet.wait_reason, None);
    assert_eq!(quiet.result.status, CommandStatus::Running);

    t.fake.set_status(HolderStatus {
        child_pid: Some(FAKE_SHELL_PID),
        foreground_pgid: Some(77),
        foreground_program: Some("install".to_owned()),
        is_reading: true,
        is_canonical: true,
        is_echo: true,
        input_queued: Some(0),
        ..HolderStatus::default()
    });
    let asked = wait(Duration::from_secs(30)).await;
    assert_eq!(asked.wait_reason, Some(WaitReason::StdinRead));
    assert_eq!(asked.result.status, CommandStatus::Running);
    assert_eq!(asked.output_so_far.as_deref(), Some("Continue? [Y/n] "));

    t.fake
        .output(&[b"y\r\ndone\r\n".to_vec(), mark("D;0"), prompt()].concat());
    let ended = wait(Duration::from_secs(30)).await;
    assert_eq!(ended.wait_reason, None);
    assert_eq!(ended.result.exit_code, Some(0));
    // The console history only for a caller that asked for it.
    assert_eq!(ended.result.console, None);
    let with_console = wait_as(Duration::from_secs(30), true).await;
    assert_eq!(
        with_console.result.console.map(|records| records.len()),
        Some(1)
    );
}

#[tokio::test]
async fn a_long_output_is_answered_whole_although_memory_keeps_only_its_ends() {
    let t = start(&[&prompt()]);
    let id = t.handle.exec(exec("big")).await.expect("submitted");
    let lines: Vec<String> = (0..150_000).map(|i| format!("line {i}")).collect();
    t.fake
        .output(&[b"big\r\n".to_vec(), b"\x1b[?2004l".to_vec(), mark("C")].concat());
    for chunk in lines.chunks(5000) {
        t.fake
            .output(format!("{}\r\n", chunk.join("\r\n")).as_bytes());
    }
    t.fake.output(&[mark("D;0"), prompt()].concat());
    let whole = lines.join("\n");
    assert!(whole.len() > 2 * crate::tracker::LIVE_OUTPUT_MAX_BYTES);
    let result = ended(&t, id, Some(Duration::from_secs(30))).await;
    assert_eq!(result.status, CommandStatus::Completed);
    assert!(
        result.output.as_deref() == Some(whole.as_str()),
        "the whole output"
    );
    let now = t.handle.command_result(None).await.expect("a result");
    assert!(now.output.as_deref() == Some(whole.as_str()));
    // A truncated answer takes the kept ends without reading the log, and is the same.
    let ends = t
        .handle
        .command_result_for(Some(id), super::OutputExtent::Ends)
        .await
        .expect("a result")
        .output
        .unwrap_or_default();
    assert!(ends.len() < whole.len(), "memory keeps only the ends");
    let truncate = |text: &str| {
        crate::plain_text::truncate_middle(text, crate::tracker::LIVE_OUTPUT_ENDS_CHARS)
    };
    assert!(truncate(&ends) == truncate(&whole));
    let screen = t.handle.screen().await.expect("the screen");
    assert!(screen.output == whole);
    // The console record is the output's first and last 15,000 characters, as before.
    let console = now.console.unwrap_or_default();
    assert_eq!(
        console.last().map(|c| c.output.clone()),
        Some(crate::plain_text::truncate_middle(
            &whole,
            crate::plain_text::TRUNCATE_CHARS
        ))
    );
}

/// A client can hold a cursor the actor has not applied yet (a replay reads the log, which is
/// ahead of the actor until the holder serves what it logged): it waits for the actor, and
/// only a cursor beyond the log is refused, at once.
#[tokio::test]
async fn a_cursor_the_log_holds_waits_for_the_actor_and_one_beyond_it_is_refused() {
    use super::live::{ConnectOptions, LiveMode};
    use ptyhub_protocol::event::{EventKind, Seq};
    let t = start(&[&prompt()]);
    let options = |since: Seq| ConnectOptions {
        mode: LiveMode::Watch,
        restore: false,
        replay_bytes: 0,
        since_seq: Some(since),
        by: "1000/server".to_owned(),
        wants_presence: false,
    };
    // The actor has read the log's history; what follows reaches it only when served.
    let mut applied = t.handle.seq();
    applied
        .wait_for(|seq| *seq >= Seq(1))
        .await
        .expect("applied");
    let logged = t.fake.log_only(EventKind::Output {
        data: b"logged\r\n".to_vec(),
    });
    let seq = logged.seq;
    let beyond = t.handle.connect(options(Seq(seq.0 + 1))).await;
    assert!(
        matches!(
            beyond,
            Err(crate::error::TerminalError::InvalidCursor { .. })
        ),
        "{:?}",
        beyond.map(|(_, ready)| ready.seq)
    );
    let connecting = tokio::spawn({
        let handle = t.handle.clone();
        async move { handle.connect(options(seq)).await }
    });
    settle().await;
    assert!(
        !connecting.is_finished(),
        "connected before the actor had the event"
    );
    t.fake.serve(logged);
    let connected = connecting.await.expect("the connect task");
    let (_watcher, ready) = connected.expect("a cursor the log holds is accepted");
    assert_eq!(ready.seq, seq);
}
