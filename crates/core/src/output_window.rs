//! Output windows: the part of a command's clean output an answer carries, chosen by the
//! caller (docs/compatibility.md#output-windows).
//!
//! [`OutputWindow`] is a validated [`WindowParams`]: `offset` (the first line to consider),
//! `grep` (a regex, with `context` lines around each match), `head` or `tail` (the first or
//! last N of the lines left), and a character budget (`max_chars`, or `max_tokens` at
//! [`CHARS_PER_TOKEN`] characters a token, the smaller of the two). [`OutputWindow::apply`]
//! cuts plain text lines by them and reports what was left out before, between and after the
//! lines it returned, with the `offset` that continues after them ([`WindowInfo`]).
//!
//! It works on text only: it does not read the event log or know about commands (the timeline
//! and exec hand it a command's clean output).
//!
//! # Flow at a glance
//! 1. The lines are the text split at `\n` (empty text has none).
//! 2. Lines before `offset` are left out; `grep` keeps its matches and their context.
//! 3. `head` keeps the first N of what is left, `tail` the last N.
//! 4. The character budget keeps whole lines from the start (from the end with `tail`); when
//!    not even the first line fits, that line is cut to the budget.
//! 5. Non-adjacent groups of lines are joined with a `--` line, as `grep -C` prints them.

use ptyhub_protocol::api::{Omitted, OmittedSpan, WindowInfo, WindowParams};

use crate::error::TerminalError;

/// Characters counted as one token by the estimate (rounded up).
pub const CHARS_PER_TOKEN: u64 = 4;
/// Longest `grep` pattern accepted, in characters.
pub const GREP_PATTERN_MAX_CHARS: usize = 1000;
/// Largest compiled `grep` program, in bytes (a guard against patterns that expand hugely).
const GREP_COMPILED_MAX_BYTES: usize = 1024 * 1024;
/// Most `context` lines accepted on each side of a match.
pub const CONTEXT_MAX_LINES: u64 = 10_000;
/// What separates non-adjacent groups of lines in a window's text.
const GROUP_SEPARATOR: &str = "--";

/// A token estimate of `chars` characters: `chars / 4`, rounded up.
pub fn estimate_tokens(chars: u64) -> u64 {
    chars.div_ceil(CHARS_PER_TOKEN)
}

/// Whether a window keeps the first or the last lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Keep {
    All,
    Head(u64),
    Tail(u64),
}

/// A validated output window.
#[derive(Clone, Debug)]
pub struct OutputWindow {
    keep: Keep,
    offset: u64,
    max_chars: Option<u64>,
    grep: Option<regex::Regex>,
    context: u64,
}

/// A window cut out of a text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Windowed {
    pub text: String,
    pub info: WindowInfo,
}

/// A count field: absent, or a number not below `min`.
fn count(name: &str, value: Option<i64>, min: i64) -> Result<Option<u64>, TerminalError> {
    match value {
        None => Ok(None),
        Some(n) if n >= min => Ok(u64::try_from(n).ok()),
        Some(n) if min > 0 => Err(TerminalError::invalid(format!(
            "{name} must be a positive number, not {n}"
        ))),
        Some(n) => Err(TerminalError::invalid(format!(
            "{name} must not be negative, not {n}"
        ))),
    }
}

impl OutputWindow {
    /// The whole text, up to `max_chars` characters.
    pub fn first_chars(max_chars: u64) -> Self {
        Self {
            keep: Keep::All,
            offset: 0,
            max_chars: Some(max_chars),
            grep: None,
            context: 0,
        }
    }

    /// Checks `params`: `head`, `tail`, `max_chars` and `max_tokens` at least 1, `offset` and
    /// `context` at least 0 (`context` at most [`CONTEXT_MAX_LINES`], and only with `grep`),
    /// not `head` and `tail` together, and a `grep` that compiles. `None` when no field was
    /// given.
    pub fn from_params(params: &WindowParams) -> Result<Option<Self>, TerminalError> {
        if params.is_empty() {
            return Ok(None);
        }
        let head = count("head", params.head, 1)?;
        let tail = count("tail", params.tail, 1)?;
        let offset = count("offset", params.offset, 0)?.unwrap_or(0);
        let max_chars = count("max_chars", params.max_chars, 1)?;
        let max_tokens = count("max_tokens", params.max_tokens, 1)?;
        let context = count("context", params.context, 0)?.unwrap_or(0);
        let keep = match (head, tail) {
            (Some(_), Some(_)) => {
                return Err(TerminalError::invalid(
                    "head and tail cannot be combined: ask for one, or use offset with head",
                ));
            }
            (Some(n), None) => Keep::Head(n),
            (None, Some(n)) => Keep::Tail(n),
            (None, None) => Keep::All,
        };
        if context > CONTEXT_MAX_LINES {
            return Err(TerminalError::invalid(format!(
                "context must be at most {CONTEXT_MAX_LINES} lines, not {context}"
            )));
        }
        if params.context.is_some() && params.grep.is_none() {
            return Err(TerminalError::invalid("context needs grep"));
        }
        let grep = params.grep.as_deref().map(compile).transpose()?;
        let budget = [
            max_chars,
            max_tokens.map(|t| t.saturating_mul(CHARS_PER_TOKEN)),
        ];
        Ok(Some(Self {
            keep,
            offset,
            max_chars: budget.into_iter().flatten().min(),
            grep,
            context,
        }))
    }

    /// Cuts the window out of `text`.
    pub fn apply(&self, text: &str) -> Windowed {
        let lines: Vec<&str> = if text.is_empty() {
            Vec::new()
        } else {
            text.split('\n').collect()
        };
        let total = lines.len();
        let sizes: Vec<u64> = lines.iter().map(|l| l.chars().count() as u64).collect();
        let start = usize::try_from(self.offset)
            .unwrap_or(usize::MAX)
            .min(total);
        let (mut selected, matches) = self.select(&lines, start);
        let last_selected = selected.last().copied();
        match self.keep {
            Keep::All => {}
            Keep::Head(n) => selected.truncate(usize::try_from(n).unwrap_or(usize::MAX)),
            Keep::Tail(n) => {
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                selected.drain(..selected.len().saturating_sub(n));
            }
        }
        let (kept, cut) = self.fit(&selected, &sizes);
        let text = join(&lines, &kept, cut);
        let chars = |range: &mut dyn Iterator<Item = usize>| {
            range.fold(OmittedSpan::default(), |span, i| OmittedSpan {
                lines: span.lines + 1,
                chars: span.chars + sizes[i] + 1,
            })
        };
        let (before, between, after) = match (kept.first(), kept.last()) {
            (Some(&first), Some(&last)) => {
                let mut between =
                    chars(&mut (first..=last).filter(|i| kept.binary_search(i).is_err()));
                if let Some(cut) = cut {
                    between.lines += 1;
                    between.chars += cut.omitted;
                }
                (
                    chars(&mut (0..first)),
                    between,
                    chars(&mut (last + 1..total)),
                )
            }
            _ => (
                chars(&mut (0..start)),
                OmittedSpan::default(),
                chars(&mut (start..total)),
            ),
        };
        // What the same query would still select after the last line returned.
        let next_offset = match (kept.last(), last_selected) {
            (Some(&last), Some(selected_last)) if selected_last > last => Some(last as u64 + 1),
            (None, Some(_)) => Some(start as u64),
            _ => None,
        };
        let text_chars = text.chars().count() as u64;
        Windowed {
            info: WindowInfo {
                total_lines: total as u64,
                total_chars: text_chars_total(&sizes),
                first_line: kept.first().map_or(start, |&f| f) as u64,
                lines: kept.len() as u64,
                estimated_tokens: estimate_tokens(text_chars),
                matches,
                omitted: Omitted {
                    before,
                    between,
                    after,
                },
                next_offset,
            },
            text,
        }
    }

    /// The lines from `start` that `grep` (with its context) keeps, in order, and the number
    /// of matches (`None` without `grep`).
    fn select(&self, lines: &[&str], start: usize) -> (Vec<usize>, Option<u64>) {
        let Some(grep) = &self.grep else {
            return ((start..lines.len()).collect(), None);
        };
        let context = usize::try_from(self.context).unwrap_or(usize::MAX);
        let mut selected: Vec<usize> = Vec::new();
        let mut matches = 0;
        for (i, line) in lines.iter().enumerate().skip(start) {
            if !grep.is_match(line) {
                continue;
            }
            matches += 1;
            let from = i.saturating_sub(context).max(start);
            let from = selected.last().map_or(from, |&last| from.max(last + 1));
            let to = i.saturating_add(context).min(lines.len() - 1);
            selected.extend(from..=to);
        }
        (selected, Some(matches))
    }

    /// The selected lines that fit the character budget (from the end with `tail`), and how
    /// the one line was cut when not even it fits.
    fn fit(&self, selected: &[usize], sizes: &[u64]) -> (Vec<usize>, Option<Cut>) {
        let Some(budget) = self.max_chars else {
            return (selected.to_vec(), None);
        };
        let is_from_end = matches!(self.keep, Keep::Tail(_));
        let mut kept: Vec<usize> = Vec::new();
        let mut used = 0u64;
        let order: Box<dyn Iterator<Item = &usize>> = if is_from_end {
            Box::new(selected.iter().rev())
        } else {
            Box::new(selected.iter())
        };
        let mut previous: Option<usize> = None;
        for &i in order {
            let joint = match previous {
                None => 0,
                Some(p) if p.abs_diff(i) == 1 => 1,
                Some(_) => 1 + GROUP_SEPARATOR.len() as u64 + 1,
            };
            if used + joint + sizes[i] > budget {
                if kept.is_empty() {
                    // Not even one line fits: its start (its end with `tail`) is cut to size.
                    return (
                        vec![i],
                        Some(Cut {
                            keep: budget,
                            is_from_end,
                            omitted: sizes[i] - budget,
                        }),
                    );
                }
                break;
            }
            used += joint + sizes[i];
            kept.push(i);
            previous = Some(i);
        }
        if is_from_end {
            kept.reverse();
        }
        (kept, None)
    }
}

/// How the only line of a window was cut to the character budget.
#[derive(Clone, Copy, Debug)]
struct Cut {
    /// Characters kept.
    keep: u64,
    /// The line's end is kept rather than its start.
    is_from_end: bool,
    /// Characters left out.
    omitted: u64,
}

fn compile(pattern: &str) -> Result<regex::Regex, TerminalError> {
    if pattern.chars().count() > GREP_PATTERN_MAX_CHARS {
        return Err(TerminalError::invalid(format!(
            "grep must be at most {GREP_PATTERN_MAX_CHARS} characters"
        )));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(GREP_COMPILED_MAX_BYTES)
        .build()
        .map_err(|e| {
            let detail = e.to_string();
            let last = detail.lines().last().unwrap_or_default().trim().to_owned();
            TerminalError::invalid(format!("grep is not a valid regular expression: {last}"))
        })
}

/// Characters of the whole text: every line, and a newline between two.
fn text_chars_total(sizes: &[u64]) -> u64 {
    sizes.iter().sum::<u64>() + (sizes.len() as u64).saturating_sub(1)
}

/// The kept lines as text, `--` between non-adjacent groups.
fn join(lines: &[&str], kept: &[usize], cut: Option<Cut>) -> String {
    if let (Some(cut), [only]) = (cut, kept) {
        let line = lines[*only];
        let keep = usize::try_from(cut.keep).unwrap_or(usize::MAX);
        return if cut.is_from_end {
            let count = line.chars().count();
            line.chars().skip(count.saturating_sub(keep)).collect()
        } else {
            line.chars().take(keep).collect()
        };
    }
    let mut out = String::new();
    let mut previous: Option<usize> = None;
    for &i in kept {
        match previous {
            None => {}
            Some(p) if i == p + 1 => out.push('\n'),
            Some(_) => {
                out.push('\n');
                out.push_str(GROUP_SEPARATOR);
                out.push('\n');
            }
        }
        out.push_str(lines[i]);
        previous = Some(i);
    }
    out
}

#[cfg(test)]
mod tests {
    use ptyhub_protocol::error::ErrorCode;

    use super::*;

    fn window(params: WindowParams) -> OutputWindow {
        match OutputWindow::from_params(&params) {
            Ok(Some(window)) => window,
            other => panic!("not a window: {other:?}"),
        }
    }

    fn numbered(n: usize) -> String {
        (1..=n)
            .map(|i| format!("line {i}"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn refused(params: WindowParams) -> String {
        match OutputWindow::from_params(&params) {
            Err(error) => {
                assert_eq!(error.code(), ErrorCode::InvalidInput);
                error.to_string()
            }
            Ok(other) => panic!("accepted: {other:?}"),
        }
    }

    #[test]
    fn no_parameters_is_no_window() {
        assert!(matches!(
            OutputWindow::from_params(&WindowParams::default()),
            Ok(None)
        ));
    }

    #[test]
    fn head_and_tail_keep_first_and_last_lines_with_omitted_counts() {
        let text = numbered(10);
        let head = window(WindowParams {
            head: Some(3),
            ..WindowParams::default()
        })
        .apply(&text);
        assert_eq!(head.text, "line 1\nline 2\nline 3");
        assert_eq!(head.info.total_lines, 10);
        assert_eq!(head.info.total_chars, text.chars().count() as u64);
        assert_eq!(head.info.first_line, 0);
        assert_eq!(head.info.lines, 3);
        assert_eq!(head.info.omitted.before, OmittedSpan::default());
        assert_eq!(
            head.info.omitted.after,
            OmittedSpan {
                lines: 7,
                chars: 6 * 6 + 7 + 7
            }
        );
        assert_eq!(head.info.next_offset, Some(3));
        let tail = window(WindowParams {
            tail: Some(2),
            ..WindowParams::default()
        })
        .apply(&text);
        assert_eq!(tail.text, "line 9\nline 10");
        assert_eq!(tail.info.first_line, 8);
        assert_eq!(tail.info.omitted.before.lines, 8);
        assert_eq!(tail.info.omitted.after, OmittedSpan::default());
        assert_eq!(tail.info.next_offset, None);
    }

    #[test]
    fn offset_and_next_offset_page_through_everything_once() {
        let text = numbered(10);
        let mut offset = Some(0);
        let mut seen = Vec::new();
        while let Some(at) = offset {
            let page = window(WindowParams {
                head: Some(4),
                offset: Some(i64::try_from(at).unwrap()),
                ..WindowParams::default()
            })
            .apply(&text);
            seen.push(page.text);
            offset = page.info.next_offset;
        }
        assert_eq!(seen.join("\n"), text);
        assert_eq!(seen.len(), 3);
        let past = window(WindowParams {
            offset: Some(50),
            ..WindowParams::default()
        })
        .apply(&text);
        assert_eq!(past.text, "");
        assert_eq!(past.info.lines, 0);
        assert_eq!(past.info.omitted.before.lines, 10);
        assert_eq!(past.info.next_offset, None);
    }

    #[test]
    fn grep_keeps_matches_with_context_and_separates_groups() {
        let text = "a\nerror one\nb\nc\nd\ne\nerror two\nf";
        let found = window(WindowParams {
            grep: Some("^error".to_owned()),
            context: Some(1),
            ..WindowParams::default()
        })
        .apply(text);
        assert_eq!(found.text, "a\nerror one\nb\n--\ne\nerror two\nf");
        assert_eq!(found.info.matches, Some(2));
        assert_eq!(found.info.lines, 6);
        assert_eq!(
            found.info.omitted.between,
            OmittedSpan { lines: 2, chars: 4 }
        );
        // Overlapping context is one group.
        let close = window(WindowParams {
            grep: Some("error".to_owned()),
            context: Some(3),
            ..WindowParams::default()
        })
        .apply(text);
        assert_eq!(close.text, text);
        let none = window(WindowParams {
            grep: Some("nothing".to_owned()),
            ..WindowParams::default()
        })
        .apply(text);
        assert_eq!(none.text, "");
        assert_eq!(none.info.matches, Some(0));
        assert_eq!(none.info.omitted.after.lines, 8);
        assert_eq!(none.info.next_offset, None);
        // head counts the selected lines; the cursor continues the same search.
        let first = window(WindowParams {
            grep: Some("error".to_owned()),
            head: Some(1),
            ..WindowParams::default()
        })
        .apply(text);
        assert_eq!(first.text, "error one");
        assert_eq!(first.info.next_offset, Some(2));
        let second = window(WindowParams {
            grep: Some("error".to_owned()),
            head: Some(1),
            offset: Some(2),
            ..WindowParams::default()
        })
        .apply(text);
        assert_eq!(second.text, "error two");
        assert_eq!(second.info.next_offset, None);
    }

    #[test]
    fn max_chars_and_max_tokens_keep_whole_lines() {
        let text = numbered(10);
        let chars = window(WindowParams {
            max_chars: Some(15),
            ..WindowParams::default()
        })
        .apply(&text);
        assert_eq!(chars.text, "line 1\nline 2");
        assert_eq!(chars.info.next_offset, Some(2));
        // 4 tokens are 16 characters: still two lines; the smaller budget wins.
        let tokens = window(WindowParams {
            max_tokens: Some(4),
            max_chars: Some(100),
            ..WindowParams::default()
        })
        .apply(&text);
        assert_eq!(tokens.text, "line 1\nline 2");
        assert_eq!(tokens.info.estimated_tokens, 4);
        let tail = window(WindowParams {
            tail: Some(5),
            max_chars: Some(13),
            ..WindowParams::default()
        })
        .apply(&text);
        assert_eq!(tail.text, "line 10");
        assert_eq!(tail.info.first_line, 9);
    }

    #[test]
    fn one_line_longer_than_the_budget_is_cut() {
        let text = format!("{}\nnext", "x".repeat(100));
        let cut = window(WindowParams {
            max_chars: Some(10),
            ..WindowParams::default()
        })
        .apply(&text);
        assert_eq!(cut.text, "x".repeat(10));
        assert_eq!(
            cut.info.omitted.between,
            OmittedSpan {
                lines: 1,
                chars: 90
            }
        );
        assert_eq!(cut.info.next_offset, Some(1));
        let end = window(WindowParams {
            tail: Some(1),
            max_chars: Some(2),
            ..WindowParams::default()
        })
        .apply("abc\nwxyz");
        assert_eq!(end.text, "yz");
    }

    #[test]
    fn empty_text_has_no_lines() {
        let empty = window(WindowParams {
            tail: Some(3),
            ..WindowParams::default()
        })
        .apply("");
        assert_eq!(empty.text, "");
        assert_eq!(empty.info.total_lines, 0);
        assert_eq!(empty.info.total_chars, 0);
        assert_eq!(empty.info.next_offset, None);
    }

    #[test]
    fn bad_parameters_are_refused_with_their_reason() {
        assert_eq!(
            refused(WindowParams {
                head: Some(-1),
                ..WindowParams::default()
            }),
            "head must be a positive number, not -1"
        );
        assert_eq!(
            refused(WindowParams {
                tail: Some(0),
                ..WindowParams::default()
            }),
            "tail must be a positive number, not 0"
        );
        assert_eq!(
            refused(WindowParams {
                offset: Some(-3),
                ..WindowParams::default()
            }),
            "offset must not be negative, not -3"
        );
        assert_eq!(
            refused(WindowParams {
                max_chars: Some(0),
                ..WindowParams::default()
            }),
            "max_chars must be a positive number, not 0"
        );
        assert_eq!(
            refused(WindowParams {
                head: Some(1),
                tail: Some(1),
                ..WindowParams::default()
            }),
            "head and tail cannot be combined: ask for one, or use offset with head"
        );
        assert!(
            refused(WindowParams {
                grep: Some("(unclosed".to_owned()),
                ..WindowParams::default()
            })
            .starts_with("grep is not a valid regular expression: ")
        );
        assert_eq!(
            refused(WindowParams {
                context: Some(2),
                ..WindowParams::default()
            }),
            "context needs grep"
        );
        assert_eq!(estimate_tokens(0), 0);
        assert_eq!(estimate_tokens(1), 1);
        assert_eq!(estimate_tokens(8), 2);
        assert_eq!(estimate_tokens(9), 3);
    }
}
