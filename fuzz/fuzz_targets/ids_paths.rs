//! Ids and paths (`ptyhub_protocol::ids`, segment names of the event log, `exec_dir`): an
//! accepted terminal id or name is one plain path component, serde and `parse` agree, segment
//! names read back as they were written, and the `cd` line of an `exec_dir` unquotes, as a
//! POSIX shell reads it, to exactly the directory (no text of the name escapes its quotes).

#![no_main]

use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use ptyhub_core::event_log::{parse_segment_name, parse_seq_prefix, segment_file_name};
use ptyhub_core::exec::ExecDir;
use ptyhub_protocol::event::Seq;
use ptyhub_protocol::ids::{Name, TERMINAL_ID_MAX_LEN, TerminalId, truncate_for_message};

/// A directory the target creates `exec_dir` candidates in, once per process.
fn scratch() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}")))
        .path()
}

/// Whether `raw` joined to a directory is that directory's child named `raw`.
fn is_one_component(raw: &str) -> bool {
    let root = Path::new("/root-of-test");
    let joined = root.join(raw);
    let mut components = joined
        .strip_prefix(root)
        .map(Path::components)
        .into_iter()
        .flatten();
    matches!(components.next(), Some(Component::Normal(name)) if name == raw)
        && components.next().is_none()
}

/// The text of a `cd -- '<dir>'` line as a POSIX shell reads its one argument after `--`.
fn unquote_cd_line(line: &str) -> Option<String> {
    let mut rest = line.strip_prefix("cd -- ")?.chars().peekable();
    let mut out = String::new();
    while let Some(c) = rest.next() {
        match c {
            '\'' => loop {
                match rest.next()? {
                    '\'' => break,
                    other => out.push(other),
                }
            },
            '\\' => out.push(rest.next()?),
            _ => return None,
        }
    }
    Some(out)
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let raw: &str = &text;

    let id = TerminalId::parse(raw);
    if id.is_ok() {
        assert!(raw.len() <= TERMINAL_ID_MAX_LEN);
        assert!(is_one_component(raw), "{raw:?}");
        assert!(!raw.starts_with('.') && !raw.starts_with('-'), "{raw:?}");
    }
    let json = serde_json::to_string(raw).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        serde_json::from_str::<TerminalId>(&json).ok(),
        id.clone().ok()
    );
    let name = Name::parse(raw);
    if let Ok(name) = &name {
        assert!(
            raw.len() <= Name::MAX_LEN && is_one_component(raw),
            "{raw:?}"
        );
        if let Ok(id) = TerminalId::for_agent(name, name) {
            assert!(is_one_component(id.as_str()));
        }
    }
    assert_eq!(serde_json::from_str::<Name>(&json).ok(), name.ok());
    assert!(truncate_for_message(raw).chars().count() <= 81);

    // Segment names and the seq prefix of a log line.
    if let Some(seq) = parse_segment_name(raw) {
        assert_eq!(segment_file_name(seq), raw);
    }
    if data.len() >= 8 {
        let seq = Seq(u64::from_le_bytes([
            data[0], data[1], data[2], data[3], data[4], data[5], data[6], data[7],
        ]));
        assert_eq!(parse_segment_name(&segment_file_name(seq)), Some(seq));
    }
    if let Some(seq) = parse_seq_prefix(data) {
        // Any u64 reads, up to `u64::MAX` (20 digits), and nothing that is not a line's start.
        assert!(data.starts_with(b"{\"seq\":"), "{seq:?}");
    }

    // An exec_dir whose last component is the input: its cd line names exactly it.
    let component: String = raw
        .chars()
        .filter(|&c| c != '/' && c != '\0')
        .take(200)
        .collect();
    if component.is_empty() || component == "." || component == ".." {
        return;
    }
    let dir: PathBuf = scratch().join(&component);
    if std::fs::create_dir(&dir).is_err() && !dir.is_dir() {
        return;
    }
    let Some(dir_text) = dir.to_str() else {
        return;
    };
    if let Ok(exec_dir) = ExecDir::parse(dir_text) {
        assert_eq!(
            unquote_cd_line(&exec_dir.cd_line()).as_deref(),
            Some(dir_text)
        );
    }
    let _ = std::fs::remove_dir(&dir);
});
