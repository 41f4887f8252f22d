//! What a packager and a user of a fresh machine get from the binary itself: `--version`
//! naming the commit, shell completions that real shells load, and a man page that `man`
//! renders.

use std::process::{Command, Stdio};

use super::manifest_dir;

fn ptyhub(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_ptyhub"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run ptyhub {args:?}: {e}"));
    assert!(output.status.success(), "ptyhub {args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap_or_else(|e| panic!("ptyhub {args:?}: {e}"))
}

/// Runs `program args` with `stdin`, and returns its stdout; fails the test if it fails.
fn run_with_input(program: &str, args: &[&str], stdin: &str) -> String {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program} (is it installed?): {e}"));
    if let Some(mut pipe) = child.stdin.take() {
        std::io::Write::write_all(&mut pipe, stdin.as_bytes())
            .unwrap_or_else(|e| panic!("{program}: {e}"));
    }
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The subcommands every completion script and the man page must name.
const SUBCOMMANDS: [&str; 6] = ["serve", "terminal", "backend", "mcp", "completions", "man"];

#[test]
fn version_names_the_package_and_the_commit() {
    let version = ptyhub(&["--version"]);
    assert!(
        version.starts_with(&format!("ptyhub {}", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    let head = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(manifest_dir())
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned());
    match head {
        // Built in a git checkout: the commit it was built from, `+dirty` or not.
        Some(head) => assert!(
            version.contains(&format!("({head})")) || version.contains(&format!("({head}+dirty)")),
            "--version says {version:?}, the checkout is at {head}"
        ),
        // A source tarball names the version alone.
        None => assert_eq!(
            version.trim(),
            format!("ptyhub {}", env!("CARGO_PKG_VERSION"))
        ),
    }
}

#[test]
fn bash_loads_the_completions_and_completes_subcommands() {
    let script = ptyhub(&["completions", "bash"]);
    // A real bash sources the script, registers the function and asks it to complete
    // `ptyhub te` and `ptyhub terminal e`, as it would at a prompt.
    let probe = r#"
        source /dev/stdin
        complete -p ptyhub
        COMP_WORDS=(ptyhub te); COMP_CWORD=1; COMP_LINE="ptyhub te"; COMP_POINT=${#COMP_LINE}
        _ptyhub ptyhub te ptyhub
        echo "first: ${COMPREPLY[*]}"
        COMP_WORDS=(ptyhub terminal e); COMP_CWORD=2; COMP_LINE="ptyhub terminal e"
        COMP_POINT=${#COMP_LINE}
        _ptyhub ptyhub e terminal
        echo "second: ${COMPREPLY[*]}"
    "#;
    let out = run_with_input("bash", &["--norc", "--noprofile", "-c", probe], &script);
    assert!(out.contains("-F _ptyhub ptyhub"), "{out}");
    assert!(out.contains("first: terminal"), "{out}");
    let second = out.lines().find(|l| l.starts_with("second:")).unwrap_or("");
    assert!(
        second.contains("exec") && second.contains("export"),
        "{out}"
    );
}

#[test]
fn zsh_and_fish_completions_name_every_subcommand() {
    let zsh = ptyhub(&["completions", "zsh"]);
    assert!(zsh.starts_with("#compdef ptyhub"), "{zsh}");
    // zsh parses it without running it.
    run_with_input("zsh", &["-n"], &zsh);
    let fish = ptyhub(&["completions", "fish"]);
    assert!(fish.contains("complete -c ptyhub"), "{fish}");
    for sub in SUBCOMMANDS {
        assert!(zsh.contains(&format!("'{sub}:")), "zsh lacks {sub}");
        assert!(fish.contains(&format!("-a \"{sub}\"")), "fish lacks {sub}");
    }
    // The holder entry is internal: no shell offers it.
    assert!(!zsh.contains("'holder:") && !fish.contains("-a \"holder\""));
}

#[test]
fn the_man_page_renders_with_every_command_and_flag() {
    let page = ptyhub(&["man"]);
    assert!(
        page.contains("\n.TH ptyhub 1 "),
        "{}",
        &page[..page.len().min(400)]
    );
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let file = dir.path().join("ptyhub.1");
    std::fs::write(&file, &page).unwrap_or_else(|e| panic!("write: {e}"));
    // `man -l` formats it as `man ptyhub` would once installed; warnings fail the test.
    let output = Command::new("man")
        .arg("-l")
        .arg(&file)
        .env("MANWIDTH", "100")
        .env("MANPAGER", "cat")
        .env_remove("MAN_KEEP_FORMATTING")
        .env_remove("MANOPT")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run man (is man-db installed?): {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success() && stderr.is_empty(), "{stderr}");
    let text = String::from_utf8_lossy(&output.stdout);
    for section in [
        "NAME",
        "SYNOPSIS",
        "PTYHUB SERVE",
        "PTYHUB TERMINAL EXEC",
        "PTYHUB BACKEND INSTALL",
        "PTYHUB COMPLETIONS",
        "PTYHUB MAN",
        "VERSION",
    ] {
        assert!(
            text.lines().any(|line| line == section),
            "no {section} section in:\n{text}"
        );
    }
    for flag in ["--state-dir", "--listen", "--ws-ping-secs", "--since-seq"] {
        assert!(text.contains(flag), "the page lacks {flag}");
    }
    assert!(
        !text.contains("PTYHUB HOLDER"),
        "the holder entry is internal"
    );
}
