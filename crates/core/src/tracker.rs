//! Command tracking from the shell-integration marks (see [`crate::shell`]).
//!
//! [`CommandTracker`] is fed every output byte of a terminal in order. A [`MarkScanner`] finds
//! the nonce-bearing OSC 133 marks (and the bracketed-paste mode switches) even when a read
//! splits them; the tracker turns them into the life of each command: submitted (exec wrote
//! it), running (`C`: the shell accepted it; output from here on is the command's own), and
//! finished (`D;<code>`, or the shell exiting). Commands a person types are tracked too, so a
//! terminal is never "idle" while anything runs. Finished commands become console records
//! and entries of the terminal's timeline ([`TimelineEntry`]: ids, texts, `seq` positions,
//! times, exit codes), whose output is read back from the log (`terminal::timeline`).
//!
//! The tracker is told each event's position ([`CommandTracker::at`]) and the `command.note`
//! events of the log ([`CommandTracker::note`]): a replay from the log then rebuilds the same
//! timeline, with the same ids and texts, as the live terminal built.

use std::collections::VecDeque;

pub use ptyhub_protocol::api::ConsoleRecord;

pub use ptyhub_protocol::api::CommandStatus;
use ptyhub_protocol::api::{CommandEntry, CommandOrigin};
use ptyhub_protocol::event::{CommandNote, Seq};
use serde::Serialize;

use crate::plain_text::{PlainText, TRUNCATE_CHARS, truncate_middle};

/// Console records kept per terminal (docs/compatibility.md#console).
pub const CONSOLE_HISTORY_MAX: usize = 100;
/// Finished commands the timeline keeps per terminal (the oldest go first).
pub const TIMELINE_MAX: usize = 10_000;
/// Most output kept in memory for a line the shell never ran (its error message).
const UNSTARTED_OUTPUT_MAX_CHARS: usize = 4096;
/// Most clean text of the running (or last) command kept in memory: its first 256 KiB and
/// its newest 128 to 256 KiB (docs/memory.md). That is more than any truncated answer shows
/// (its first and last 15,000 characters); an answer that needs the whole text reads it back
/// from the log ([`CommandRecord::is_output_cut`]).
pub const LIVE_OUTPUT_MAX_BYTES: usize = 512 * 1024;
/// The most characters a truncated answer (half from each end) can take from the kept text
/// and still be exactly what the whole text gives: the kept head and tail hold at least a
/// quarter of [`LIVE_OUTPUT_MAX_BYTES`] each, at most 4 bytes a character.
pub const LIVE_OUTPUT_ENDS_CHARS: usize = LIVE_OUTPUT_MAX_BYTES / 8;
/// Most text kept of what a submitted line printed before it started (its echo, or the
/// shell's complaint about it).
const BEFORE_START_MAX_BYTES: usize = 64 * 1024;
/// What bash reports for a line it refused (a syntax error).
const REFUSED_EXIT_CODE: i32 = 2;
/// What bash reports for a line abandoned with ^C.
const ABANDONED_EXIT_CODE: i32 = 130;
/// At most this much of what follows a prompt is kept to find the prompt's text.
const PROMPT_MAX_BYTES: usize = 4096;
/// At most this many typed lines wait for the commands they start.
const TYPED_LINES_MAX: usize = 16;
/// An OSC longer than this is not a mark; it is passed through as text.
const MARK_MAX_BYTES: usize = 4096;
const PASTE_ON: &[u8] = b"\x1b[?2004h";
const PASTE_OFF: &[u8] = b"\x1b[?2004l";

/// A shell-integration mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    PromptStart,
    CommandStart,
    CommandEnd { exit_code: Option<i32> },
}

/// What a scan of output bytes yields, in order.
#[derive(Debug, PartialEq, Eq)]
pub enum Token {
    Text(Vec<u8>),
    Mark(Mark),
    BracketedPaste(bool),
    /// The program set the window title (OSC 0 or 2), sanitized.
    Title(String),
}

/// Finds marks carrying `nonce` in a byte stream, across read boundaries.
pub struct MarkScanner {
    nonce: String,
    pending: Vec<u8>,
}

impl MarkScanner {
    pub fn new(nonce: &str) -> Self {
        Self {
            nonce: nonce.to_owned(),
            pending: Vec::new(),
        }
    }

    pub fn scan(&mut self, chunk: &[u8]) -> Vec<Token> {
        let joined;
        let data: &[u8] = if self.pending.is_empty() {
            chunk
        } else {
            let mut buf = std::mem::take(&mut self.pending);
            buf.extend_from_slice(chunk);
            joined = buf;
            &joined
        };
        let mut tokens = Vec::new();
        let mut text_start = 0;
        let mut i = 0;
        while let Some(offset) = memchr::memchr(0x1b, &data[i..]) {
            let esc = i + offset;
            let rest = &data[esc..];
            if rest.len() < 2 {
                self.hold(&mut tokens, data, text_start, esc);
                return tokens;
            }
            match rest[1] {
                b']' => match find_osc_end(&rest[2..]) {
                    OscEnd::Aborted { at } => {
                        // Not a sequence after all (as a terminal sees it): its bytes stay
                        // text, and scanning goes on at what aborted it.
                        i = esc + 2 + at;
                    }
                    OscEnd::Complete { body_len, end_len } => {
                        let end = esc + 2 + body_len + end_len;
                        let body = &rest[2..2 + body_len];
                        if let Some(mark) = self.parse_mark(body) {
                            push_text(&mut tokens, &data[text_start..esc]);
                            tokens.push(Token::Mark(mark));
                            text_start = end;
                        } else if let Some(title) = parse_title(body) {
                            // The bytes stay in the text (the screen and clean text skip them).
                            push_text(&mut tokens, &data[text_start..end]);
                            tokens.push(Token::Title(title));
                            text_start = end;
                        }
                        i = end;
                    }
                    OscEnd::Incomplete if rest.len() < MARK_MAX_BYTES => {
                        self.hold(&mut tokens, data, text_start, esc);
                        return tokens;
                    }
                    OscEnd::Incomplete => i = esc + 1,
                },
                b'[' => {
                    let is_on = rest.starts_with(PASTE_ON);
                    if is_on || rest.starts_with(PASTE_OFF) {
                        push_text(&mut tokens, &data[text_start..esc + PASTE_ON.len()]);
                        tokens.push(Token::BracketedPaste(is_on));
                        text_start = esc + PASTE_ON.len();
                        i = text_start;
                    } else if rest.len() < PASTE_ON.len()
                        && (PASTE_ON.starts_with(rest) || PASTE_OFF.starts_with(rest))
                    {
                        self.hold(&mut tokens, data, text_start, esc);
                        return tokens;
                    } else {
                        i = esc + 1;
                    }
                }
                _ => i = esc + 1,
            }
        }
        push_text(&mut tokens, &data[text_start..]);
        tokens
    }

    /// Emits the text before `from` and keeps the rest for the next chunk.
    fn hold(&mut self, tokens: &mut Vec<Token>, data: &[u8], text_start: usize, from: usize) {
        push_text(tokens, &data[text_start..from]);
        self.pending = data[from..].to_vec();
    }

    fn parse_mark(&self, body: &[u8]) -> Option<Mark> {
        let body = std::str::from_utf8(body).ok()?;
        let mut parts = body.split(';');
        if parts.next()? != "133" {
            return None;
        }
        let kind = parts.next()?;
        let params: Vec<&str> = parts.collect();
        let has_nonce = params
            .iter()
            .any(|p| p.strip_prefix("k=").is_some_and(|k| k == self.nonce));
        if !has_nonce {
            return None;
        }
        match kind {
            "A" => Some(Mark::PromptStart),
            "C" => Some(Mark::CommandStart),
            "D" => Some(Mark::CommandEnd {
                exit_code: params.first().and_then(|p| p.parse().ok()),
            }),
            _ => None,
        }
    }
}

/// Longest title kept, in characters.
const TITLE_MAX_CHARS: usize = 256;

/// The title of an `OSC 0;…` or `OSC 2;…` body, without control characters.
fn parse_title(body: &[u8]) -> Option<String> {
    let text = body
        .strip_prefix(b"0;")
        .or_else(|| body.strip_prefix(b"2;"))?;
    let text = String::from_utf8_lossy(text);
    Some(
        text.chars()
            .filter(|c| !c.is_control())
            .take(TITLE_MAX_CHARS)
            .collect(),
    )
}

fn push_text(tokens: &mut Vec<Token>, text: &[u8]) {
    if !text.is_empty() {
        tokens.push(Token::Text(text.to_vec()));
    }
}

/// How an OSC body ends, as a terminal parses it (also what a recording's filter of the
/// integration's marks must agree on: `ptyhub terminal export`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OscEnd {
    /// Terminated by BEL or `ESC \`: the body's length and the terminator's.
    Complete { body_len: usize, end_len: usize },
    /// Cut off at byte `at` of the body: by an `ESC` that begins another sequence, or by CAN
    /// or SUB. A terminal drops such a string; a stray `ESC ]` in a program's output must
    /// not swallow the shell's next marks.
    Aborted { at: usize },
    /// Not ended yet: more bytes may follow.
    Incomplete,
}

/// How the OSC body at the start of `data` (the bytes after `ESC ]`) ends.
pub fn find_osc_end(data: &[u8]) -> OscEnd {
    /// CAN and SUB cancel a control string.
    const CAN: u8 = 0x18;
    const SUB: u8 = 0x1a;
    for (i, &b) in data.iter().enumerate() {
        match b {
            0x07 => {
                return OscEnd::Complete {
                    body_len: i,
                    end_len: 1,
                };
            }
            0x1b => {
                return match data.get(i + 1) {
                    Some(b'\\') => OscEnd::Complete {
                        body_len: i,
                        end_len: 2,
                    },
                    Some(_) => OscEnd::Aborted { at: i },
                    None => OscEnd::Incomplete,
                };
            }
            CAN | SUB => return OscEnd::Aborted { at: i + 1 },
            _ => {}
        }
    }
    OscEnd::Incomplete
}

/// Where the shell is, as the marks tell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShellPhase {
    /// No prompt seen yet.
    Starting,
    /// At a prompt: a command can be submitted.
    Idle,
    /// A command was written; the shell has not accepted it yet.
    Submitted,
    /// A command is running.
    Running,
    /// The shell exited.
    Exited,
}

/// Where a command's own output begins in the log: in the event `seq`, after its
/// `marks_before + 1`-th `C` mark (an event can hold the marks of several short commands).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputStart {
    pub seq: Seq,
    pub marks_before: u32,
}

/// A finished command of the timeline.
#[derive(Clone, Debug)]
pub struct TimelineEntry {
    pub entry: CommandEntry,
    /// `None` for a line the shell never ran (no `C` mark): its output is kept here instead.
    pub output_start: Option<OutputStart>,
    pub unstarted_output: Option<String>,
}

/// One command: its text, prompt, status, exit code and output.
pub struct CommandRecord {
    pub id: u64,
    /// What the shell was given (exec), empty for a typed line (the console's `command`).
    pub command: String,
    /// The timeline's text: as the caller sent it (exec), or the line as the shell accepted it
    /// without the prompt (typed).
    pub text: String,
    pub origin: CommandOrigin,
    pub cwd: Option<String>,
    pub start_seq: Seq,
    pub started_at: f64,
    pub output_start: Option<OutputStart>,
    /// Raw bytes of its own output so far.
    pub output_bytes: u64,
    pub ps1: String,
    pub status: CommandStatus,
    pub exit_code: Option<i32>,
    /// Set when ptyhub interrupted the command; the final status once it ends.
    pub interrupted_as: Option<CommandStatus>,
    /// Whether it came from exec (rather than typed input).
    pub is_exec: bool,
    output: PlainText,
    /// What the terminal printed between submission and the `C` mark (the echo, or an error
    /// when the shell refused the line).
    before_start: PlainText,
}

impl CommandRecord {
    /// Whether the middle of the output was dropped from memory (it was longer than
    /// [`LIVE_OUTPUT_MAX_BYTES`]); the log still has all of it.
    pub fn is_output_cut(&self) -> bool {
        self.output.is_cut()
    }

    pub fn output(&self) -> String {
        let mut text = self.output.text();
        if text.ends_with('\n') {
            text.pop();
        }
        text
    }
}

/// Changes the actor must react to (waking waiters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrackerEvent {
    Started(u64),
    Finished(u64),
}

pub struct CommandTracker {
    scanner: MarkScanner,
    phase: ShellPhase,
    is_bracketed_paste: bool,
    /// Whether the shell ever turned bracketed paste on (readline does before each prompt).
    has_bracketed_paste: bool,
    current: Option<CommandRecord>,
    console: VecDeque<ConsoleRecord>,
    next_id: u64,
    /// What the terminal showed since the last prompt mark: the prompt, then the echo of
    /// what was typed. The console record's `ps1` is cut from it.
    since_prompt: PlainText,
    /// The first line of the last submission, as echoed after the prompt.
    typed_first_line: String,
    /// Whether the line editor turned bracketed paste off since the last submission.
    has_left_editor: bool,
    /// The last window title a program set.
    title: Option<String>,
    /// The position of the event being fed: its `seq`, its time, and the `C` marks seen in it.
    seq: Seq,
    ts: f64,
    marks_here: u32,
    /// Where in `since_prompt` typing began (line, character): what follows is the echo.
    typing_at: Option<(usize, usize)>,
    /// The last prompt known without an echo (an exec's `ps1`).
    last_prompt: String,
    /// Lines typed at the prompt that no typed command has taken yet, oldest first: the
    /// line's text, or `None` when editing keys left the echo the only witness.
    typed_lines: VecDeque<Option<String>>,
    /// The line being typed at the prompt (`None`: edited, or partly read by a program).
    typing_line: Option<String>,
    timeline: VecDeque<TimelineEntry>,
}

impl CommandTracker {
    pub fn new(nonce: &str) -> Self {
        Self {
            scanner: MarkScanner::new(nonce),
            phase: ShellPhase::Starting,
            is_bracketed_paste: false,
            has_bracketed_paste: false,
            current: None,
            console: VecDeque::new(),
            next_id: 1,
            since_prompt: PlainText::new(),
            typed_first_line: String::new(),
            has_left_editor: false,
            title: None,
            seq: Seq::ZERO,
            ts: 0.0,
            marks_here: 0,
            typing_at: None,
            last_prompt: String::new(),
            typed_lines: VecDeque::new(),
            typing_line: Some(String::new()),
            timeline: VecDeque::new(),
        }
    }

    /// The event fed next is `seq`, logged at `ts` (Unix seconds).
    pub fn at(&mut self, seq: Seq, ts: f64) {
        self.seq = seq;
        self.ts = ts;
        self.marks_here = 0;
    }

    /// Someone types `data` at the terminal: what the line shows from here on is their echo,
    /// and the lines it completes at the prompt are remembered by their text.
    pub fn typing(&mut self, data: &[u8]) {
        if self.phase != ShellPhase::Idle {
            // A program reads what is typed now, or part of it: not a line for the prompt.
            // The next line starts clean after a line end.
            let is_line_end = data.last().is_some_and(|b| matches!(b, b'\r' | b'\n'));
            self.typing_line = is_line_end.then(String::new);
            return;
        }
        if self.typing_at.is_none() {
            let shown = self.since_prompt.text();
            let line = shown.matches('\n').count();
            let col = shown
                .rsplit('\n')
                .next()
                .unwrap_or_default()
                .chars()
                .count();
            self.typing_at = Some((line, col));
        }
        for c in String::from_utf8_lossy(data).chars() {
            match c {
                '\r' | '\n' => {
                    // An empty line runs nothing (and `\r\n` ends one line).
                    let line = self.typing_line.replace(String::new());
                    if line.as_deref().is_none_or(|l| !l.trim().is_empty()) {
                        if self.typed_lines.len() == TYPED_LINES_MAX {
                            self.typed_lines.pop_front();
                        }
                        self.typed_lines.push_back(line);
                    }
                }
                c if c.is_control() => self.typing_line = None,
                c => {
                    if let Some(line) = &mut self.typing_line {
                        line.push(c);
                        if line.len() > PROMPT_MAX_BYTES {
                            self.typing_line = None;
                        }
                    }
                }
            }
        }
    }

    /// The finished commands of the timeline, oldest first.
    pub fn timeline(&self) -> impl DoubleEndedIterator<Item = &TimelineEntry> {
        self.timeline.iter()
    }

    /// Finished command `id`. Ids only grow along the timeline, so the search from the newest
    /// stops at the first older one: a live command's lookup does not walk its history.
    pub fn finished(&self, id: u64) -> Option<&TimelineEntry> {
        self.timeline
            .iter()
            .rev()
            .take_while(|t| t.entry.id >= id)
            .find(|t| t.entry.id == id)
    }

    fn finished_mut(&mut self, id: u64) -> Option<&mut TimelineEntry> {
        self.timeline
            .iter_mut()
            .rev()
            .take_while(|t| t.entry.id >= id)
            .find(|t| t.entry.id == id)
    }

    /// The id the next command gets.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// Applies a `command.note` of the log. A note of a command this tracker submitted itself
    /// (live) only adds what it lacks (the directory); one it has not seen (a replay) submits
    /// the command with the note's id, as the live terminal did. A typed command's note gives
    /// its text and directory. `echoed` is what the shell echoes of a submission.
    pub fn note(&mut self, note: &CommandNote, echoed: impl Fn(&str) -> String) {
        let is_new_exec = note.origin == CommandOrigin::Exec
            && note.id >= self.next_id
            && !matches!(self.phase, ShellPhase::Running | ShellPhase::Submitted);
        if is_new_exec {
            let shell_text = note.shell_text.as_deref().unwrap_or(&note.command);
            self.next_id = note.id;
            self.submit(shell_text, &echoed(shell_text));
        }
        let is_typed = note.origin == CommandOrigin::Typed;
        if let Some(record) = self.current.as_mut().filter(|c| c.id == note.id) {
            if record.cwd.is_none() {
                record.cwd.clone_from(&note.cwd);
            }
            if record.output_start.is_none() {
                // Until it starts, a command begins at its note, live as in a replay.
                record.start_seq = self.seq;
                record.started_at = self.ts;
            }
            if is_new_exec || is_typed {
                record.text.clone_from(&note.command);
            }
        }
        // A short command may have finished before its note came: its entry learns it too.
        if let Some(done) = self.finished_mut(note.id) {
            if done.entry.cwd.is_none() {
                done.entry.cwd.clone_from(&note.cwd);
            }
            if is_typed {
                done.entry.command.clone_from(&note.command);
            }
        }
    }

    /// The running command's (or the last one's) timeline entry as it stands.
    pub fn current_entry(&self) -> Option<(CommandEntry, Option<OutputStart>)> {
        let record = self.current.as_ref()?;
        Some((self.entry_of(record, None), record.output_start))
    }

    fn entry_of(&self, record: &CommandRecord, end: Option<(Seq, f64)>) -> CommandEntry {
        CommandEntry {
            id: record.id,
            command: record.text.clone(),
            origin: record.origin,
            cwd: record.cwd.clone(),
            start_seq: record.start_seq,
            end_seq: end.map(|(seq, _)| seq),
            started_at: record.started_at,
            duration: end
                .map(|(_, ts)| ((ts - record.started_at).max(0.0) * 1000.0).round() / 1000.0),
            exit_code: record.exit_code,
            status: record.status,
            output_bytes: record.output_bytes,
        }
    }

    pub fn phase(&self) -> ShellPhase {
        self.phase
    }

    /// The last window title a program set.
    pub fn title(&self) -> Option<&str> {
        self.title.as_deref()
    }

    /// Whether the shell is reading a line with bracketed paste on right now.
    pub fn is_bracketed_paste(&self) -> bool {
        self.is_bracketed_paste
    }

    /// Whether the shell's line editor uses bracketed paste (it turns it off while a command
    /// runs and on again at the next prompt, so a command typed ahead should still be pasted).
    pub fn has_bracketed_paste(&self) -> bool {
        self.has_bracketed_paste
    }

    /// The running command, or the last one (until the next starts).
    pub fn current(&self) -> Option<&CommandRecord> {
        self.current.as_ref()
    }

    pub fn current_mut(&mut self) -> Option<&mut CommandRecord> {
        self.current.as_mut()
    }

    /// The running command, if one runs.
    pub fn running(&self) -> Option<&CommandRecord> {
        self.current.as_ref().filter(|c| c.status.is_running())
    }

    pub fn console(&self) -> impl Iterator<Item = &ConsoleRecord> {
        self.console.iter()
    }

    /// Records that `command` was written to the shell; returns its id.
    /// Records that `command` was written to the shell as `typed` (its first line is echoed
    /// after the prompt); returns its id.
    pub fn submit(&mut self, command: &str, typed: &str) -> u64 {
        self.has_left_editor = false;
        self.typed_first_line = typed
            .lines()
            .next()
            .unwrap_or_default()
            .trim_end()
            .to_owned();
        let id = self.start_record(command.to_owned(), String::new(), true);
        self.phase = ShellPhase::Submitted;
        id
    }

    /// Gives the submitted command its timeline text (what the caller sent) and directory.
    pub fn describe(&mut self, id: u64, text: &str, cwd: Option<String>) {
        if let Some(record) = self.current.as_mut().filter(|c| c.id == id) {
            text.clone_into(&mut record.text);
            record.cwd = cwd;
        }
    }

    fn start_record(&mut self, command: String, ps1: String, is_exec: bool) -> u64 {
        let id = self.next_id;
        // A `command.note` of a hostile log can name the largest id: the count stops there.
        self.next_id = id.saturating_add(1);
        self.current = Some(CommandRecord {
            id,
            text: command.clone(),
            origin: if is_exec {
                CommandOrigin::Exec
            } else {
                CommandOrigin::Typed
            },
            cwd: None,
            start_seq: self.seq,
            started_at: self.ts,
            output_start: None,
            output_bytes: 0,
            command,
            ps1,
            status: CommandStatus::Running,
            exit_code: None,
            interrupted_as: None,
            is_exec,
            output: PlainText::with_max_bytes(LIVE_OUTPUT_MAX_BYTES),
            before_start: PlainText::with_max_bytes(BEFORE_START_MAX_BYTES),
        });
        id
    }

    /// Feeds output bytes; returns what changed.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<TrackerEvent> {
        let mut events = Vec::new();
        for token in self.scanner.scan(bytes) {
            match token {
                Token::Text(text) => {
                    if matches!(self.phase, ShellPhase::Idle | ShellPhase::Submitted)
                        && self.since_prompt.len() < PROMPT_MAX_BYTES
                    {
                        self.since_prompt.feed(&text);
                    }
                    if let Some(record) = self.current.as_mut().filter(|c| c.status.is_running()) {
                        match self.phase {
                            ShellPhase::Running => {
                                record.output_bytes += text.len() as u64;
                                record.output.feed(&text);
                            }
                            ShellPhase::Submitted => record.before_start.feed(&text),
                            _ => {}
                        }
                    }
                }
                Token::Title(title) => self.title = Some(title),
                Token::BracketedPaste(on) => {
                    self.is_bracketed_paste = on;
                    self.has_bracketed_paste |= on;
                    if self.phase == ShellPhase::Submitted {
                        if !on {
                            self.has_left_editor = true;
                        } else if self.has_left_editor {
                            // The line editor closed and reopened without running anything:
                            // the line was abandoned (^C while it was still being read).
                            events.extend(self.finish_unstarted(ABANDONED_EXIT_CODE));
                        }
                    }
                }
                Token::Mark(Mark::CommandStart) => {
                    let start = OutputStart {
                        seq: self.seq,
                        marks_before: self.marks_here,
                    };
                    self.marks_here += 1;
                    match self.phase {
                        ShellPhase::Submitted => {
                            self.phase = ShellPhase::Running;
                            let ps1 = self.prompt_text();
                            ps1.clone_into(&mut self.last_prompt);
                            if let Some(record) = &mut self.current {
                                record.ps1 = ps1;
                                record.output_start = Some(start);
                                record.start_seq = self.seq;
                                record.started_at = self.ts;
                                events.push(TrackerEvent::Started(record.id));
                            }
                        }
                        ShellPhase::Idle | ShellPhase::Starting => {
                            let text = self.typed_text();
                            let id = self.start_record(String::new(), self.prompt_text(), false);
                            if let Some(record) = &mut self.current {
                                record.text = text;
                                record.output_start = Some(start);
                            }
                            self.phase = ShellPhase::Running;
                            events.push(TrackerEvent::Started(id));
                        }
                        ShellPhase::Running | ShellPhase::Exited => {}
                    }
                }
                Token::Mark(Mark::CommandEnd { exit_code }) => {
                    if matches!(self.phase, ShellPhase::Running | ShellPhase::Submitted) {
                        events.extend(self.finish(exit_code, None));
                    }
                }
                Token::Mark(Mark::PromptStart) => {
                    self.since_prompt = PlainText::new();
                    self.typing_at = None;
                    if self.phase == ShellPhase::Submitted {
                        // The shell went back to its prompt without running anything: a
                        // syntax error, or an empty line.
                        events.extend(self.finish_unstarted(REFUSED_EXIT_CODE));
                    }
                    if self.phase != ShellPhase::Exited {
                        self.phase = ShellPhase::Idle;
                    }
                }
            }
        }
        events
    }

    /// The prompt as shown before the command: the first line since the prompt mark, without
    /// the echo of what was typed.
    fn prompt_text(&self) -> String {
        let shown = self.since_prompt.text();
        let line = shown.split('\n').next().unwrap_or_default().trim_end();
        let typed = self.typed_first_line.as_str();
        line.strip_suffix(typed)
            .filter(|_| !typed.is_empty())
            .unwrap_or(line)
            .to_owned()
    }

    /// The text of a line someone typed, as the shell accepted it: the line as it was typed
    /// when the screen shows it after the prompt, else what was echoed after the point where
    /// typing began, else the line without the last known prompt.
    fn typed_text(&mut self) -> String {
        let shown = self.since_prompt.text();
        if let Some(typed) = self.take_typed_line(&shown) {
            return typed;
        }
        let (line, col) = self.typing_at.unwrap_or((0, 0));
        let line = shown.split('\n').nth(line).unwrap_or_default();
        let prompt = self.last_prompt.as_str();
        let typed: String = if self.typing_at.is_some() {
            line.chars().skip(col).collect()
        } else {
            line.to_owned()
        };
        // Typed before this side had seen the prompt drawn (a busy machine), the position is
        // the line's start, and the prompt is still in front of the text.
        let typed = typed
            .strip_prefix(prompt)
            .filter(|_| !prompt.is_empty())
            .unwrap_or(&typed);
        typed.trim().to_owned()
    }

    /// The oldest remembered typed line that `shown` echoes after its prompt (at the end of a
    /// line, after a blank or alone on it); it and the lines before it are taken. Exact
    /// however the prompt changed or when it was drawn.
    fn take_typed_line(&mut self, shown: &str) -> Option<String> {
        let is_echoed = |typed: &str| {
            shown.split('\n').any(|line| {
                line.trim_end().strip_suffix(typed).is_some_and(|before| {
                    before.is_empty() || before.ends_with(char::is_whitespace)
                })
            })
        };
        let found = self.typed_lines.iter().position(|line| {
            line.as_deref()
                .map(str::trim)
                .is_some_and(|typed| !typed.is_empty() && is_echoed(typed))
        });
        let Some(found) = found else {
            self.typed_lines.clear();
            return None;
        };
        let taken = self.typed_lines.drain(..=found).next_back().flatten();
        taken.map(|typed| typed.trim().to_owned())
    }

    /// Drops the last command's captured output (the terminal was closed; the log keeps it).
    pub fn forget_output(&mut self) {
        if let Some(record) = &mut self.current {
            record.output = PlainText::new();
            record.before_start = PlainText::with_max_bytes(BEFORE_START_MAX_BYTES);
        }
        self.since_prompt = PlainText::new();
    }

    /// The terminal's program ended: a running command ends with it.
    pub fn exited(&mut self, exit_code: Option<i32>, signal: Option<i32>) -> Vec<TrackerEvent> {
        let events = if matches!(self.phase, ShellPhase::Running | ShellPhase::Submitted) {
            let status = signal.map(|_| CommandStatus::Terminated);
            self.finish(exit_code, status).into_iter().collect()
        } else {
            Vec::new()
        };
        self.phase = ShellPhase::Exited;
        events
    }

    /// A new instance of the program started (the terminal was reopened).
    pub fn restarted(&mut self) {
        self.phase = ShellPhase::Starting;
    }

    /// Ends the running command by force (it ignored every interrupt).
    pub fn abandon(&mut self) -> Option<TrackerEvent> {
        let event = self.finish(None, None);
        self.phase = ShellPhase::Idle;
        event
    }

    fn finish(
        &mut self,
        exit_code: Option<i32>,
        status: Option<CommandStatus>,
    ) -> Option<TrackerEvent> {
        let record = self.current.as_mut().filter(|c| c.status.is_running())?;
        match status.or(record.interrupted_as) {
            Some(status) => {
                record.status = status;
                record.exit_code = None;
            }
            None => {
                record.status = CommandStatus::Completed;
                record.exit_code = exit_code;
            }
        }
        self.phase = ShellPhase::Idle;
        let id = record.id;
        self.archive();
        Some(TrackerEvent::Finished(id))
    }

    /// Finishes a submitted command that never started; `exit_code` is what the shell reports
    /// for such a line (an empty line reports 0).
    fn finish_unstarted(&mut self, exit_code: i32) -> Option<TrackerEvent> {
        let record = self.current.as_mut().filter(|c| c.status.is_running())?;
        let echo_lines = record.command.lines().count().max(1);
        let shown = record.before_start.text();
        let rest: Vec<&str> = shown.split('\n').skip(echo_lines).collect();
        let message = rest.join("\n");
        let is_blank = record.command.trim().is_empty();
        record.output = PlainText::new();
        record.output.feed(message.as_bytes());
        record.status = record.interrupted_as.unwrap_or(CommandStatus::Completed);
        record.exit_code = match record.interrupted_as {
            Some(_) => None,
            None if is_blank => Some(0),
            None => Some(exit_code),
        };
        self.phase = ShellPhase::Idle;
        let id = record.id;
        self.archive();
        Some(TrackerEvent::Finished(id))
    }

    fn archive(&mut self) {
        if let Some(record) = &mut self.current {
            // The record stays as the last command until the next starts: no spare capacity.
            record.output.shrink_to_fit();
            record.before_start = PlainText::with_max_bytes(0);
        }
        if let Some(record) = &self.current {
            let unstarted_output = record.output_start.is_none().then(|| {
                record
                    .output()
                    .chars()
                    .take(UNSTARTED_OUTPUT_MAX_CHARS)
                    .collect()
            });
            self.timeline.push_back(TimelineEntry {
                entry: self.entry_of(record, Some((self.seq, self.ts))),
                output_start: record.output_start,
                unstarted_output,
            });
            while self.timeline.len() > TIMELINE_MAX {
                self.timeline.pop_front();
            }
            self.console.push_back(ConsoleRecord {
                ps1: record.ps1.clone(),
                command: record.command.clone(),
                // History stays small: the full text is in the event log.
                output: truncate_middle(&record.output(), TRUNCATE_CHARS),
            });
            while self.console.len() > CONSOLE_HISTORY_MAX {
                self.console.pop_front();
            }
        }
    }
}

#[cfg(test)]
mod tests;
