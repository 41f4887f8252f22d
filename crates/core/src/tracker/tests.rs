//! Tests of the mark scanner and the command tracker: marks split across reads, forged and
//! stray sequences, typed, refused and abandoned lines, and the timeline's records.

use super::*;

const N: &str = "n0nce";

fn mark(kind: &str) -> Vec<u8> {
    format!("\x1b]133;{kind};k={N}\x07").into_bytes()
}

#[test]
fn marks_split_at_every_byte_are_found() {
    let stream = [b"out".to_vec(), mark("D;7"), b"after".to_vec()].concat();
    for cut in 0..stream.len() {
        let mut scanner = MarkScanner::new(N);
        let mut tokens = scanner.scan(&stream[..cut]);
        tokens.extend(scanner.scan(&stream[cut..]));
        let marks: Vec<_> = tokens
            .iter()
            .filter_map(|t| match t {
                Token::Mark(m) => Some(*m),
                _ => None,
            })
            .collect();
        assert_eq!(
            marks,
            vec![Mark::CommandEnd { exit_code: Some(7) }],
            "cut at {cut}"
        );
        let text: Vec<u8> = tokens
            .iter()
            .filter_map(|t| match t {
                Token::Text(b) => Some(b.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(text, b"outafter".to_vec(), "cut at {cut}");
    }
}

/// Regression: after `printf '\033]0;'` every later exec was BUSY, even after a restart:
/// the unterminated OSC swallowed the shell's next marks.
#[test]
fn a_stray_unterminated_osc_does_not_swallow_the_next_marks() {
    let mut tracker = CommandTracker::new(N);
    tracker.feed(&mark("A"));
    let id = tracker.submit("printf x", "printf x");
    tracker.feed(&mark("C"));
    // The stray sequence, then (in a later read) the shell's marks.
    tracker.feed(b"\x1b]0;");
    let events = tracker.feed(&[mark("D;0"), mark("A")].concat());
    assert_eq!(events, vec![TrackerEvent::Finished(id)]);
    assert_eq!(tracker.phase(), ShellPhase::Idle);
    // CAN cancels an OSC too, and what follows is scanned.
    let id = tracker.submit("printf y", "printf y");
    let events = tracker.feed(
        &[
            mark("C"),
            b"\x1b]2;half\x18out\r\n".to_vec(),
            mark("D;3"),
            mark("A"),
        ]
        .concat(),
    );
    assert_eq!(
        events,
        vec![TrackerEvent::Started(id), TrackerEvent::Finished(id)]
    );
    assert_eq!(tracker.current().and_then(|r| r.exit_code), Some(3));
}

#[test]
fn marks_without_the_nonce_are_plain_output() {
    let mut tracker = CommandTracker::new(N);
    tracker.feed(&mark("A"));
    let id = tracker.submit("cat log", "cat log");
    tracker.feed(&mark("C"));
    tracker.feed(b"\x1b]133;D;0;k=forged\x07still running\r\n");
    assert!(tracker.running().is_some());
    let events = tracker.feed(&[mark("D;0"), mark("A")].concat());
    assert_eq!(events, vec![TrackerEvent::Finished(id)]);
    let record = tracker
        .current()
        .map(|r| (r.status, r.exit_code, r.output()));
    assert_eq!(
        record,
        Some((
            CommandStatus::Completed,
            Some(0),
            "still running".to_owned()
        ))
    );
}

#[test]
fn a_typed_command_is_tracked_and_archived() {
    let mut tracker = CommandTracker::new(N);
    tracker.feed(&mark("A"));
    tracker.feed(b"$ sleep 1\r\n");
    tracker.feed(&mark("C"));
    assert!(tracker.running().is_some());
    tracker.feed(&[mark("D;130"), mark("A")].concat());
    assert_eq!(tracker.phase(), ShellPhase::Idle);
    assert_eq!(tracker.console().count(), 1);
}

#[test]
fn ps1_is_the_prompt_without_the_echo() {
    let mut tracker = CommandTracker::new(N);
    tracker.feed(&mark("A"));
    tracker.submit("echo hi", "echo hi");
    tracker.feed(b"\x1b[?2004hroot@vm:/tmp# ");
    tracker.feed(b"\x1b[7mecho hi\x1b[27m\r\x1b[14Cecho hi\r\n");
    tracker.feed(&[mark("C"), b"hi\r\n".to_vec(), mark("D;0"), mark("A")].concat());
    let ps1 = tracker.console().next().map(|r| r.ps1.clone());
    assert_eq!(ps1.as_deref(), Some("root@vm:/tmp# "));
}

#[test]
fn a_line_abandoned_with_ctrl_c_before_it_ran_finishes() {
    let mut tracker = CommandTracker::new(N);
    tracker.feed(&mark("A"));
    tracker.feed(b"\x1b[?2004h$ ");
    let id = tracker.submit("sleep 30", "sleep 30");
    tracker.feed(b"sleep 3^C\x1b[?2004l\r\r\n");
    let events = tracker.feed(b"\x1b[?2004h$ ");
    assert_eq!(events, vec![TrackerEvent::Finished(id)]);
    assert_eq!(tracker.current().and_then(|r| r.exit_code), Some(130));
    assert_eq!(tracker.phase(), ShellPhase::Idle);
}

#[test]
fn a_typed_line_is_a_timeline_record_with_its_text_and_positions() {
    let mut tracker = CommandTracker::new(N);
    tracker.at(Seq(1), 10.0);
    tracker.feed(&[mark("A"), b"\x1b[?2004hroot@vm:/tmp# ".to_vec()].concat());
    tracker.typing(b"ls -x\x7fl\r");
    tracker.at(Seq(2), 11.0);
    tracker.feed(b"ls -x\x08l\r\n");
    tracker.at(Seq(3), 11.5);
    tracker.feed(&[mark("C"), b"a b\r\n".to_vec()].concat());
    tracker.at(Seq(4), 12.25);
    tracker.feed(&[mark("D;0"), mark("A")].concat());
    let entries: Vec<_> = tracker.timeline().cloned().collect();
    assert_eq!(entries.len(), 1);
    let entry = &entries[0].entry;
    assert_eq!(entry.id, 1);
    assert_eq!(entry.command, "ls -l");
    assert_eq!(entry.origin, CommandOrigin::Typed);
    assert_eq!((entry.start_seq, entry.end_seq), (Seq(3), Some(Seq(4))));
    assert_eq!(entry.duration, Some(0.75));
    assert_eq!(entry.exit_code, Some(0));
    assert_eq!(entry.output_bytes, 5);
    assert_eq!(
        entries[0].output_start,
        Some(OutputStart {
            seq: Seq(3),
            marks_before: 0
        })
    );
    // The console record keeps its old shape: no command for a typed line.
    let console: Vec<_> = tracker.console().cloned().collect();
    assert_eq!(console[0].command, "");
}

/// Typed before the prompt was applied (a busy machine): the text is still the typed line, not
/// the prompt in front of it.
#[test]
fn a_line_typed_before_its_prompt_was_seen_is_recorded_without_the_prompt() {
    let mut tracker = CommandTracker::new(N);
    let prompt = [mark("A"), b"\x1b[?2004hroot@vm:/tmp# ".to_vec()].concat();
    tracker.feed(&prompt);
    // An exec first, so the prompt is known; its end mark is applied, its next prompt not yet
    // when the line is typed.
    tracker.submit("true", "true");
    tracker.feed(&[b"true\r\n".to_vec(), mark("C"), mark("D;0")].concat());
    tracker.typing(b"echo typed\r");
    tracker.feed(&[prompt.clone(), b"echo typed\r\n".to_vec()].concat());
    tracker.feed(&[mark("C"), b"typed\r\n".to_vec(), mark("D;0"), mark("A")].concat());
    let entries: Vec<_> = tracker.timeline().cloned().collect();
    assert_eq!(
        entries.last().map(|e| e.entry.command.as_str()),
        Some("echo typed")
    );
}

/// Typed after an exec changed the directory but before the new prompt was seen: the text is
/// the typed line, not the new prompt in front of it; a line a program read, or one that ran
/// nothing, never names a later command.
#[test]
fn a_line_typed_before_a_changed_prompt_was_seen_is_recorded_as_typed() {
    let prompt = |dir: &str| {
        [
            mark("A"),
            format!("\x1b[?2004hroot@vm:{dir}# ").into_bytes(),
        ]
        .concat()
    };
    let mut tracker = CommandTracker::new(N);
    tracker.feed(&prompt("/tmp"));
    tracker.submit("cd /usr", "cd /usr");
    tracker.feed(&[b"cd /usr\r\n".to_vec(), mark("C"), mark("D;0")].concat());
    tracker.typing(b"echo typed-$((40+2))\r");
    tracker.feed(&mark("A"));
    tracker.feed(b"\x1b[?2004hroot@vm:/usr# echo typed-$((40+2))\r\n");
    tracker.feed(&[mark("C"), b"typed-42\r\n".to_vec(), mark("D;0")].concat());
    let last = |t: &CommandTracker| t.timeline().last().map(|e| e.entry.command.clone());
    assert_eq!(last(&tracker).as_deref(), Some("echo typed-$((40+2))"));

    // A line typed to a running program, and a blank line, are not taken for the next one.
    tracker.feed(&prompt("/usr"));
    tracker.typing(b"   \r");
    tracker.feed(&[b"\r\n".to_vec(), prompt("/usr")].concat());
    tracker.typing(b"read x\r");
    tracker.feed(&[b"read x\r\n".to_vec(), mark("C")].concat());
    tracker.typing(b"ls\r");
    tracker.feed(&[b"ls\r\n".to_vec(), mark("D;0"), prompt("/usr")].concat());
    tracker.typing(b"echo ls\r");
    tracker.feed(&[b"echo ls\r\n".to_vec(), mark("C"), mark("D;0")].concat());
    assert_eq!(last(&tracker).as_deref(), Some("echo ls"));
}

/// Finished commands are found by id, the oldest as the newest, and a note of a new command
/// finds none of them (its search stops at the first older id).
#[test]
fn finished_commands_are_found_by_id_however_long_the_history() {
    let mut tracker = CommandTracker::new(N);
    tracker.feed(&mark("A"));
    for i in 0..50 {
        let command = format!("echo {i}");
        tracker.submit(&command, &command);
        tracker.feed(&[mark("C"), mark(&format!("D;{}", i % 3)), mark("A")].concat());
    }
    assert_eq!(
        tracker.finished(1).map(|t| t.entry.exit_code),
        Some(Some(0))
    );
    assert_eq!(
        tracker.finished(50).map(|t| t.entry.exit_code),
        Some(Some(1))
    );
    assert!(tracker.finished(51).is_none());
    // A typed line that finished before its note came: its entry learns the note.
    tracker.typing(b"ls\r");
    tracker.feed(&[b"ls\r\n".to_vec(), mark("C"), mark("D;0"), mark("A")].concat());
    let note = |id, origin, command: &str, cwd: &str| CommandNote {
        id,
        origin,
        command: command.to_owned(),
        shell_text: None,
        cwd: Some(cwd.to_owned()),
    };
    tracker.note(
        &note(51, CommandOrigin::Typed, "ls", "/home"),
        str::to_owned,
    );
    let entry = tracker.finished(51).map(|t| t.entry.clone());
    assert_eq!(entry.and_then(|e| e.cwd).as_deref(), Some("/home"));
    tracker.note(&note(52, CommandOrigin::Exec, "pwd", "/srv"), str::to_owned);
    assert!(
        tracker
            .timeline()
            .all(|t| t.entry.cwd.as_deref() != Some("/srv"))
    );
    assert_eq!(tracker.current().map(|r| r.id), Some(52));
}

/// A replay that meets the notes the live tracker had the holder log rebuilds the same
/// timeline and console: same ids, texts, directories and exit codes.
#[test]
fn a_replay_of_notes_rebuilds_the_same_records() {
    let shell_text = "cd -- '/srv' && {\nls\n}";
    let run = [mark("C"), b"x\r\n".to_vec(), mark("D;4"), mark("A")].concat();
    let mut live = CommandTracker::new(N);
    live.feed(&mark("A"));
    let id = live.submit(shell_text, shell_text);
    live.describe(id, "ls", Some("/srv".to_owned()));
    live.feed(&run);
    let mut replay = CommandTracker::new(N);
    replay.feed(&mark("A"));
    let note = CommandNote {
        id,
        origin: CommandOrigin::Exec,
        command: "ls".to_owned(),
        shell_text: Some(shell_text.to_owned()),
        cwd: Some("/srv".to_owned()),
    };
    replay.note(&note, str::to_owned);
    replay.feed(&run);
    let summary = |t: &CommandTracker| -> Vec<_> {
        t.timeline()
            .map(|e| {
                (
                    e.entry.id,
                    e.entry.command.clone(),
                    e.entry.cwd.clone(),
                    e.entry.exit_code,
                )
            })
            .collect()
    };
    assert_eq!(summary(&replay), summary(&live));
    assert_eq!(
        summary(&replay),
        vec![(1, "ls".to_owned(), Some("/srv".to_owned()), Some(4))]
    );
    let console = |t: &CommandTracker| t.console().cloned().collect::<Vec<_>>();
    assert_eq!(console(&replay), console(&live));
    // The live tracker's own note, coming back from the log, submits nothing again.
    live.note(&note, str::to_owned);
    assert_eq!(live.phase(), ShellPhase::Idle);
    // A note from further on in the count sets it: ids after a rotated-away start hold.
    let later = CommandNote { id: 9, ..note };
    replay.note(&later, str::to_owned);
    assert_eq!(replay.current().map(|r| r.id), Some(9));
    assert_eq!(replay.next_id(), 10);
}

#[test]
fn a_line_the_shell_refuses_finishes_with_its_message() {
    let mut tracker = CommandTracker::new(N);
    tracker.feed(&mark("A"));
    tracker.submit("echo )", "echo )");
    tracker.feed(b"echo )\r\nbash: syntax error near unexpected token `)'\r\n");
    tracker.feed(&mark("A"));
    let record = tracker.current().map(|r| (r.exit_code, r.output()));
    assert_eq!(
        record,
        Some((
            Some(2),
            "bash: syntax error near unexpected token `)'".to_owned()
        ))
    );
}

/// Found by the `tracker_feed` fuzz target: a `command.note` with the largest id overflowed
/// the count of the next id.
#[test]
fn a_note_with_the_largest_id_does_not_overflow_the_count() {
    let mut tracker = CommandTracker::new(N);
    tracker.feed(&mark("A"));
    let note = CommandNote {
        id: u64::MAX,
        origin: CommandOrigin::Exec,
        command: "ls".to_owned(),
        shell_text: None,
        cwd: None,
    };
    tracker.note(&note, str::to_owned);
    assert_eq!(tracker.current().map(|r| r.id), Some(u64::MAX));
    assert_eq!(tracker.next_id(), u64::MAX);
    tracker.feed(&[mark("C"), mark("D;0"), mark("A")].concat());
    let finished: Vec<_> = tracker.timeline().map(|e| e.entry.id).collect();
    assert_eq!(finished, vec![u64::MAX]);
}
