//! The shipped systemd units (`packaging/systemd/`, docs/operations.md#systemd) pass
//! `systemd-analyze verify` without a single warning about them, and keep what restarts and
//! upgrades rely on: the stop signal for the server alone, and a runtime directory (the
//! holders' sockets) that survives a stop.

#![allow(clippy::print_stderr, reason = "a skipped test says why on stderr")]

use std::path::{Path, PathBuf};
use std::process::Command;

const SYSTEMD_ANALYZE: &str = "/usr/bin/systemd-analyze";

fn unit_path(name: &str) -> PathBuf {
    super::manifest_dir()
        .join("../../packaging/systemd")
        .join(name)
}

/// `unit` with its `ExecStart` binary replaced by the built one (verify needs it to exist),
/// written to `dir` under `name`.
fn with_built_binary(unit: &str, dir: &Path, name: &str) -> PathBuf {
    let built = env!("CARGO_BIN_EXE_ptyhub");
    let text = unit
        .replace("/usr/local/bin/ptyhub", built)
        .replace("%h/.local/bin/ptyhub", built);
    assert!(
        text.contains(&format!("ExecStart={built} serve ")),
        "{text}"
    );
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path
}

/// What `systemd-analyze verify` says about the unit at `path` (the system manager's view, or
/// the user manager's with `is_user`), line by line: only the lines that name it.
fn verify(path: &Path, is_user: bool) -> Vec<String> {
    let runtime = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let mut command = Command::new(SYSTEMD_ANALYZE);
    if is_user {
        // The user manager needs a runtime directory of its own.
        command.arg("--user").env("XDG_RUNTIME_DIR", runtime.path());
    }
    let output = command
        .arg("verify")
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {SYSTEMD_ANALYZE}: {e}"));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "verify failed: {said}");
    said.lines()
        .filter(|line| line.contains(&name) || line.contains("ptyhub"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_systemd_units_verify_without_warnings_and_spare_the_holders() {
    if !Path::new(SYSTEMD_ANALYZE).exists() {
        eprintln!("SKIPPED: no {SYSTEMD_ANALYZE} to verify the units with");
        return;
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    for (name, is_user) in [("ptyhub.service", false), ("ptyhub-user.service", true)] {
        let unit = std::fs::read_to_string(unit_path(name))
            .unwrap_or_else(|e| panic!("packaging/systemd/{name}: {e}"));
        for needed in [
            "KillMode=process",
            "RuntimeDirectory=ptyhub",
            "RuntimeDirectoryPreserve=yes",
            "StateDirectory=ptyhub",
            "Restart=on-failure",
            " serve --state-dir %S/ptyhub --runtime-dir %t/ptyhub",
        ] {
            assert!(unit.contains(needed), "{name} lacks {needed}");
        }
        let copy = with_built_binary(&unit, dir.path(), "ptyhub.service");
        let warnings = verify(&copy, is_user);
        assert!(warnings.is_empty(), "{name}: {warnings:#?}");

        // The check sees warnings at all: the same unit with a wrong setting is flagged.
        let broken = with_built_binary(
            &unit.replace("KillMode=process", "KillMode=processes"),
            dir.path(),
            "ptyhub-broken.service",
        );
        let flagged = verify(&broken, is_user);
        assert!(
            flagged.iter().any(|line| line.contains("kill mode")),
            "{name}: a wrong KillMode went unnoticed: {flagged:#?}"
        );
    }
}
