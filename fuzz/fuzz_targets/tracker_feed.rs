//! Shell-integration marks and the command tracker (`ptyhub_core::tracker`): output bytes
//! with forged, torn and oversized OSC 133 marks, titles and bracketed-paste switches, cut
//! into reads anywhere and mixed with everything else the actor tells a tracker (submissions,
//! `command.note` events as a hostile log may carry them, exits, restarts). Nothing may panic
//! or hang, and a scanner fed in pieces finds the marks it finds fed at once.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use ptyhub_core::tracker::{CommandTracker, MarkScanner, Token};
use ptyhub_protocol::api::CommandOrigin;
use ptyhub_protocol::event::{CommandNote, Seq};

/// The nonce the marks of this run carry (the seeds use it too).
const NONCE: &str = "fz";

#[derive(Arbitrary, Debug)]
enum Step {
    Feed(Vec<u8>),
    At {
        seq: u64,
        ts: f64,
    },
    Typing,
    Submit {
        command: String,
        typed: String,
    },
    Describe {
        id: u64,
        text: String,
        cwd: Option<String>,
    },
    Note {
        id: u64,
        is_exec: bool,
        command: String,
        shell_text: Option<String>,
        cwd: Option<String>,
    },
    Exited {
        exit_code: Option<i32>,
        signal: Option<i32>,
    },
    Restarted,
    Abandon,
    ForgetOutput,
}

#[derive(Arbitrary, Debug)]
struct Input {
    steps: Vec<Step>,
}

/// The tokens with adjacent text joined (where a read ends is not part of the meaning).
fn joined(tokens: Vec<Token>) -> Vec<Token> {
    let mut out: Vec<Token> = Vec::new();
    for token in tokens {
        match (out.last_mut(), token) {
            (Some(Token::Text(prev)), Token::Text(text)) => prev.extend_from_slice(&text),
            (_, token) => out.push(token),
        }
    }
    out
}

fuzz_target!(|input: Input| {
    let mut tracker = CommandTracker::new(NONCE);
    let mut whole = Vec::new();
    let mut pieces = MarkScanner::new(NONCE);
    let mut in_pieces = Vec::new();
    for step in input.steps {
        match step {
            Step::Feed(bytes) => {
                let _ = tracker.feed(&bytes);
                in_pieces.extend(pieces.scan(&bytes));
                whole.extend_from_slice(&bytes);
            }
            Step::At { seq, ts } => tracker.at(Seq(seq), ts),
            Step::Typing => tracker.typing(),
            Step::Submit { command, typed } => {
                let _ = tracker.submit(&command, &typed);
            }
            Step::Describe { id, text, cwd } => tracker.describe(id, &text, cwd),
            Step::Note {
                id,
                is_exec,
                command,
                shell_text,
                cwd,
            } => {
                let note = CommandNote {
                    id,
                    origin: if is_exec {
                        CommandOrigin::Exec
                    } else {
                        CommandOrigin::Typed
                    },
                    command,
                    shell_text,
                    cwd,
                };
                tracker.note(&note, str::to_owned);
            }
            Step::Exited { exit_code, signal } => {
                let _ = tracker.exited(exit_code, signal);
            }
            Step::Restarted => tracker.restarted(),
            Step::Abandon => {
                let _ = tracker.abandon();
            }
            Step::ForgetOutput => tracker.forget_output(),
        }
        let _ = tracker.current_entry();
        let _ = tracker.phase();
    }
    let _ = tracker.timeline().count();
    let _ = tracker.console().count();
    if let Some(record) = tracker.current() {
        let _ = record.output();
    }

    // Marks are found whatever the reads were (text still held at the end is not compared).
    let marks = |tokens: Vec<Token>| -> Vec<Token> {
        joined(tokens)
            .into_iter()
            .filter(|t| !matches!(t, Token::Text(_)))
            .collect()
    };
    let at_once = MarkScanner::new(NONCE).scan(&whole);
    assert_eq!(marks(in_pieces), marks(at_once));
});
