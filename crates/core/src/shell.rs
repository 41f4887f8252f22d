//! Shell integration: the hooks injected into a terminal's shell so that ptyhub knows exactly
//! when a command starts and ends, and with which exit code
//! (docs/compatibility.md#exec-completion).
//!
//! Every mark is an OSC 133 sequence carrying the terminal's secret nonce (`k=<nonce>`), so
//! output that merely contains `ESC ] 133 ; D` (a `cat` of a log, a nested shell) is ignored:
//! - `A;k=N` — a prompt starts (the shell is idle);
//! - `C;k=N` — a command line was accepted and starts running;
//! - `D;<exit code>;k=N` — that command finished.
//!
//! bash gets a generated `--rcfile` (PROMPT_COMMAND at index 0 and a backup at a high index, so
//! a user assigning `PROMPT_COMMAND=...` keeps the marks; PS0 re-installed at every prompt);
//! zsh gets a generated `ZDOTDIR` with `precmd`/`preexec` hooks; any other shell is driven as
//! POSIX `sh` with a `PS1` that reports `$?` and a `C` mark sent in front of each command.
//! bash and zsh also toggle bracketed paste on and off once at start-up when their line editor
//! uses it, so that ptyhub waits for the editor before the first command even when the first
//! prompt mark comes long before it (a slow `PROMPT_COMMAND` or `precmd` hook).
//! The generated files are 0600 and remove themselves once sourced; a bash started by the
//! native holder gets no file at all: it reads its integration from a descriptor
//! ([`RC_DESCRIPTOR`]) the holder fills in memory, so nothing is written to disk for it and
//! its start runs no other process (a `rm` or a command substitution each cost a fork, a
//! sizeable part of a shell's start).

use std::io;
use std::path::{Path, PathBuf};

/// What `sh` is sent in front of each command: it prints the `C` mark.
const SH_MARK_CALL: &str = "__ptyhub_c;";

/// The descriptor a shell started by the native holder reads its integration from
/// ([`ShellLaunch::rc_text`]); the integration closes it once read.
pub const RC_DESCRIPTOR: i32 = 3;

/// Which integration a terminal's shell got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShellKind {
    Bash,
    Zsh,
    Sh,
}

impl ShellKind {
    /// Picks the integration from the program's file name.
    pub fn of(program: &str) -> Self {
        let name = Path::new(program)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(program);
        match name {
            "bash" => Self::Bash,
            "zsh" => Self::Zsh,
            _ => Self::Sh,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bash => "bash",
            Self::Zsh => "zsh",
            Self::Sh => "sh",
        }
    }

    pub fn parse(name: &str) -> Self {
        match name {
            "bash" => Self::Bash,
            "zsh" => Self::Zsh,
            _ => Self::Sh,
        }
    }

    /// What the terminal echoes of `command` after the prompt once it is submitted.
    pub fn echoed(self, command: &str) -> String {
        match self {
            Self::Bash | Self::Zsh => command.to_owned(),
            Self::Sh => sh_line(command.trim_end_matches(['\n', '\r'])),
        }
    }

    /// The bytes that submit `command` at an idle prompt.
    ///
    /// bash and zsh get the command as one bracketed paste (multi-line scripts and heredocs
    /// arrive as one unit) after clearing whatever was typed on the line; `sh` gets a `C` mark
    /// call in front of the command, since it has no hook that runs before a command.
    ///
    /// A line editor without bracketed paste (bash up to 5.0, `enable-bracketed-paste off` in
    /// an inputrc, zsh without `zle_bracketed_paste`) reads a command of several lines one
    /// line at a time and runs each before it reads the next: the first line's end mark would
    /// end the command, and the rest would run unseen. Such a command is sent as one `{ … }`
    /// group instead, as `sh` gets it (`sh_line`): the shell reads the group to its end
    /// (continuation lines, no prompt in between) before it runs any of it.
    pub fn submission(self, command: &str, bracketed_paste: bool, clear_line: bool) -> Vec<u8> {
        let command = command.trim_end_matches(['\n', '\r']);
        let mut out = Vec::with_capacity(command.len() + 16);
        match self {
            Self::Bash | Self::Zsh => {
                if clear_line {
                    // ^E^U: go to the end of the line and discard it (emacs keymap).
                    out.extend_from_slice(b"\x05\x15");
                }
                if bracketed_paste {
                    out.extend_from_slice(b"\x1b[200~");
                    out.extend_from_slice(command.replace("\x1b[201~", "").as_bytes());
                    out.extend_from_slice(b"\x1b[201~\r");
                } else if command.contains('\n') {
                    out.extend_from_slice(format!("{{\n{command}\n}}").as_bytes());
                    out.push(b'\r');
                } else {
                    out.extend_from_slice(command.as_bytes());
                    out.push(b'\r');
                }
            }
            Self::Sh => {
                out.extend_from_slice(sh_line(command).as_bytes());
                out.push(b'\n');
            }
        }
        out
    }
}

/// What `sh` is given for `command`: the `C` mark call, then the command. A command of several
/// lines is one brace group, so the shell reads all of it before it runs any (it would
/// otherwise run the first line alone, show its prompt, and only then read the rest: the
/// first prompt would end the command).
fn sh_line(command: &str) -> String {
    if command.contains('\n') {
        format!("{SH_MARK_CALL}{{\n{command}\n}}")
    } else {
        format!("{SH_MARK_CALL}{command}")
    }
}

/// How to start an integrated shell.
#[derive(Clone, Debug)]
pub struct ShellLaunch {
    pub kind: ShellKind,
    pub program: String,
    pub args: Vec<String>,
    /// Variables to add to the shell's environment.
    pub env: Vec<(String, String)>,
    /// Files to remove if the shell never starts (they remove themselves otherwise).
    pub files: Vec<PathBuf>,
    /// The integration the program must be given as [`RC_DESCRIPTOR`], a file in memory (it
    /// reads itself from there); no file is written for it.
    pub rc_text: Option<String>,
}

/// Writes the integration files for a shell into `scratch` (a private directory) and returns
/// how to start it. `nonce` must be letters and digits only. `by_descriptor`: whoever starts
/// the shell gives it [`ShellLaunch::rc_text`] as a descriptor (the native holder does), so a
/// bash or sh integration is written nowhere, reads itself through it and starts no process.
pub fn prepare(
    program: &str,
    nonce: &str,
    scratch: &Path,
    by_descriptor: bool,
) -> io::Result<ShellLaunch> {
    prepare_with(program, nonce, scratch, false, by_descriptor)
}

/// How a bash integration file is read, and so how it goes away and asks the line editor.
#[derive(Clone, Copy)]
enum RcRead<'a> {
    /// By its path; it removes itself (the given command) and asks through a command
    /// substitution.
    Path { removal: &'a str },
    /// Through [`RC_DESCRIPTOR`], a file in memory: it asks through that file and closes the
    /// descriptor, with builtins only.
    Descriptor,
}

/// [`prepare`] in a directory of the terminal's own (`owns_scratch`: a shell that runs as
/// another account gets one it may read), which the integration removes whole once read.
pub fn prepare_in(
    program: &str,
    nonce: &str,
    scratch: &Path,
    owns_scratch: bool,
) -> io::Result<ShellLaunch> {
    prepare_with(program, nonce, scratch, owns_scratch, false)
}

fn prepare_with(
    program: &str,
    nonce: &str,
    scratch: &Path,
    owns_scratch: bool,
    by_descriptor: bool,
) -> io::Result<ShellLaunch> {
    let kind = ShellKind::of(program);
    let mut launch = ShellLaunch {
        kind,
        program: program.to_owned(),
        args: Vec::new(),
        env: Vec::new(),
        files: Vec::new(),
        rc_text: None,
    };
    match kind {
        ShellKind::Bash => {
            let read = if by_descriptor {
                RcRead::Descriptor
            } else if owns_scratch {
                RcRead::Path {
                    removal: r#"builtin command rm -rf -- "${BASH_SOURCE[0]%/*}" 2>/dev/null"#,
                }
            } else {
                RcRead::Path {
                    removal: r#"builtin command rm -f -- "${BASH_SOURCE[0]}" 2>/dev/null"#,
                }
            };
            let text = bash_rc(nonce, read);
            let rc_arg = if by_descriptor {
                launch.rc_text = Some(text);
                format!("/dev/fd/{RC_DESCRIPTOR}")
            } else {
                let rc = scratch.join(format!("bashrc-{nonce}"));
                crate::state_dir::write_scratch(scratch, &file_name(&rc), text.as_bytes())?;
                launch.files.push(rc.clone());
                path_string(&rc)?
            };
            launch.args = vec!["--rcfile".to_owned(), rc_arg, "-i".to_owned()];
        }
        ShellKind::Zsh => {
            let dir = if owns_scratch {
                scratch.to_path_buf()
            } else {
                scratch.join(format!("zdotdir-{nonce}"))
            };
            crate::state_dir::create_private_dir(&dir)?;
            crate::state_dir::write_scratch(&dir, ".zshrc", zsh_rc(nonce).as_bytes())?;
            launch.args = vec!["-i".to_owned()];
            launch.env.push(("ZDOTDIR".to_owned(), path_string(&dir)?));
            launch.files.push(dir);
        }
        ShellKind::Sh if by_descriptor => {
            // The file in memory, as bash's: the shell opens it by its descriptor's path and
            // the integration closes the descriptor (nothing to remove, no process for it).
            let close = format!("exec {RC_DESCRIPTOR}<&-");
            launch.rc_text = Some(sh_rc(nonce, &close));
            launch.args = vec!["-i".to_owned()];
            launch
                .env
                .push(("ENV".to_owned(), format!("/dev/fd/{RC_DESCRIPTOR}")));
        }
        ShellKind::Sh => {
            let rc = scratch.join(format!("shrc-{nonce}"));
            let removal = if owns_scratch {
                r#"command rm -rf -- "${ENV%/*}" 2>/dev/null"#
            } else {
                r#"command rm -f -- "$ENV" 2>/dev/null"#
            };
            crate::state_dir::write_scratch(
                scratch,
                &file_name(&rc),
                sh_rc(nonce, removal).as_bytes(),
            )?;
            launch.args = vec!["-i".to_owned()];
            launch.env.push(("ENV".to_owned(), path_string(&rc)?));
            launch.files.push(rc);
        }
    }
    Ok(launch)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned()
}

fn path_string(path: &Path) -> io::Result<String> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| io::Error::other("runtime path is not UTF-8"))
}

fn bash_rc(nonce: &str, read: RcRead<'_>) -> String {
    let removal = match read {
        RcRead::Path { removal } => removal,
        // Nothing on disk to remove.
        RcRead::Descriptor => "",
    };
    // The first prompt mark comes before the rest of PROMPT_COMMAND and PS1, which can be
    // slow; ptyhub only waits for the line editor once it saw that the editor uses bracketed
    // paste, so say so now (mode on, then off again: the screen is unchanged).
    let hint = r"builtin printf '\e[?2004h\e[?2004l'";
    let editor_hint = match read {
        RcRead::Path { .. } => format!(
            r"if [[ -o emacs || -o vi ]] && [[ $(bind -v 2>/dev/null) == *'enable-bracketed-paste on'* ]]; then
  {hint}
fi"
        ),
        // The editor's settings are written into the integration's own file in memory (bash
        // has read it whole before it runs any of it) and read back, then its descriptor is
        // closed.
        RcRead::Descriptor => format!(
            r"if [[ -o emacs || -o vi ]] && bind -v >/proc/self/fd/{RC_DESCRIPTOR} 2>/dev/null; then
  while IFS= read -r __ptyhub_l; do
    [[ $__ptyhub_l == 'set enable-bracketed-paste on' ]] && {{ {hint}; break; }}
  done </proc/self/fd/{RC_DESCRIPTOR}
  unset __ptyhub_l
fi
exec {RC_DESCRIPTOR}<&-"
        ),
    };
    format!(
        r#"# ptyhub shell integration (gone once read)
{removal}
[ -r /etc/bash.bashrc ] && . /etc/bash.bashrc
[ -r "$HOME/.bashrc" ] && . "$HOME/.bashrc"
__ptyhub_k='{nonce}'
__ptyhub_r=0
__ptyhub_a=0
__ptyhub_ps0='\e]133;C;k={nonce}\a${{__ptyhub_nil[__ptyhub_r=1,__ptyhub_a=0]-}}'
__ptyhub_o=0
# Called first (index 0) and again as the backup (index 63, with an argument), which has
# nothing left to do when the first ran. PS0 sets r and clears a together, so a command's end
# mark and the next prompt's go out in one write.
__ptyhub_precmd() {{
  local ec=$?
  if [[ -n $1 ]]; then
    (( __ptyhub_o )) && {{ __ptyhub_o=0; return $ec; }}
  else
    __ptyhub_o=1
  fi
  if (( __ptyhub_r )); then
    __ptyhub_r=0 __ptyhub_a=1
    builtin printf '\e]133;D;%s;k=%s\a\e]133;A;k=%s\a' "$ec" "$__ptyhub_k" "$__ptyhub_k"
  elif (( ! __ptyhub_a )); then
    __ptyhub_a=1
    builtin printf '\e]133;A;k=%s\a' "$__ptyhub_k"
  fi
  [[ $PS0 == *__ptyhub_r=1* ]] || PS0+=$__ptyhub_ps0
  [[ ${{PROMPT_COMMAND[63]}} == '__ptyhub_precmd 63' ]] || PROMPT_COMMAND[63]='__ptyhub_precmd 63'
  return $ec
}}
PS0="${{PS0}}${{__ptyhub_ps0}}"
# Pasted commands are echoed once, not highlighted and redrawn.
bind 'set enable-active-region off' 2>/dev/null
PROMPT_COMMAND=(__ptyhub_precmd "${{PROMPT_COMMAND[@]}}")
PROMPT_COMMAND[63]='__ptyhub_precmd 63'
{editor_hint}
"#
    )
}

fn zsh_rc(nonce: &str) -> String {
    format!(
        r#"# ptyhub shell integration (gone once read)
# zsh's own rm (the zsh/files module) where it has one: no process for it.
if zmodload -F zsh/files b:zf_rm 2>/dev/null; then
  zf_rm -rf -- "$ZDOTDIR" 2>/dev/null
  zmodload -u zsh/files 2>/dev/null
else
  builtin command rm -rf -- "$ZDOTDIR" 2>/dev/null
fi
unset ZDOTDIR
[[ -r "$HOME/.zshrc" ]] && . "$HOME/.zshrc"
__ptyhub_k='{nonce}'
__ptyhub_r=0
__ptyhub_precmd() {{
  local ec=$?
  if (( __ptyhub_r )); then __ptyhub_r=0; builtin printf '\e]133;D;%s;k=%s\a' "$ec" "$__ptyhub_k"; fi
  builtin printf '\e]133;A;k=%s\a' "$__ptyhub_k"
  return $ec
}}
__ptyhub_preexec() {{
  __ptyhub_r=1
  builtin printf '\e]133;C;k=%s\a' "$__ptyhub_k"
}}
# zsh pads a line that ends without a newline before each prompt, ahead of every precmd hook,
# which would land inside the command's output; prompts behave as in bash instead.
unsetopt PROMPT_SP
precmd_functions=(__ptyhub_precmd ${{precmd_functions[@]}})
preexec_functions=(__ptyhub_preexec ${{preexec_functions[@]}})
# As in bash: the first prompt mark comes before the other precmd hooks, which can be slow, so
# ptyhub is told now that the line editor uses bracketed paste (on, then off again).
if [[ -o zle ]] && (( ${{#zle_bracketed_paste}} )); then builtin printf '\e[?2004h\e[?2004l'; fi
"#
    )
}

/// A POSIX sh's integration. Its prompt holds the marks' bytes themselves, so that each prompt
/// costs only the expansion of `$?` (a `$(printf …)` in it forked a subshell at every prompt).
fn sh_rc(nonce: &str, removal: &str) -> String {
    format!(
        r#"# ptyhub shell integration (gone once read)
{removal}
unset ENV
__ptyhub_k='{nonce}'
__ptyhub_c() {{ printf '\033]133;C;k=%s\007' "$__ptyhub_k"; }}
PS1='{esc}]133;D;$?;k={nonce}{bel}{esc}]133;A;k={nonce}{bel}$ '
"#,
        esc = '\x1b',
        bel = '\x07',
    )
}

// Which shell a terminal runs.

/// The shell to run: the one asked for (on `PATH` or absolute), else the user's login shell
/// (unless it only refuses logins, as a service account's `nologin` does), else `bash`, else
/// `sh`.
pub fn resolve_shell(shell: Option<&str>) -> Result<String, crate::error::TerminalError> {
    if let Some(shell) = shell {
        return find_program(shell).ok_or_else(|| {
            crate::error::TerminalError::invalid(format!(
                "shell {shell:?} is not an executable program"
            ))
        });
    }
    login_shell()
        .filter(|s| !refuses_logins(s))
        .and_then(|s| find_program(&s))
        .or_else(|| find_program("bash"))
        .or_else(|| find_program("sh"))
        .ok_or(crate::error::TerminalError::NoShell)
}

/// The shell a terminal gets when the client names none.
pub fn default_shell() -> Option<String> {
    resolve_shell(None).ok()
}

fn find_program(name: &str) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let is_exec = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.contains('/') {
        let path = Path::new(name);
        return (path.is_absolute() && is_exec(path)).then(|| name.to_owned());
    }
    if name.is_empty() {
        return None;
    }
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".to_owned());
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| is_exec(p))
        .map(|p| p.to_string_lossy().into_owned())
}

/// Whether a login shell is one that only refuses the login (a service account's):
/// `nologin`, `false`, `true`, `sync` or `shutdown`, wherever they live.
fn refuses_logins(shell: &str) -> bool {
    let name = shell.rsplit('/').next().unwrap_or(shell);
    matches!(
        name,
        "nologin" | "false" | "true" | "sync" | "shutdown" | "halt"
    )
}

fn login_shell() -> Option<String> {
    let uid = rustix::process::getuid().as_raw().to_string();
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 7 && fields[2] == uid && !fields[6].is_empty())
            .then(|| fields[6].to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_shell_that_refuses_logins_is_no_terminals_shell() {
        assert!(refuses_logins("/usr/sbin/nologin"));
        assert!(refuses_logins("/bin/false"));
        assert!(!refuses_logins("/bin/bash"));
        assert!(!refuses_logins("/usr/bin/zsh"));
    }

    #[test]
    fn kinds_follow_the_program_name() {
        assert_eq!(ShellKind::of("/bin/bash"), ShellKind::Bash);
        assert_eq!(ShellKind::of("zsh"), ShellKind::Zsh);
        assert_eq!(ShellKind::of("/usr/bin/dash"), ShellKind::Sh);
        let multi = ShellKind::Sh.submission("echo a\necho b\n", false, true);
        assert_eq!(multi, b"__ptyhub_c;{\necho a\necho b\n}\n");
        assert_eq!(
            ShellKind::Sh.echoed("echo a\necho b"),
            "__ptyhub_c;{\necho a\necho b\n}"
        );
        assert_eq!(
            ShellKind::Sh.submission("true", false, true),
            b"__ptyhub_c;true\n"
        );
    }

    /// Regression: without bracketed paste a command of several lines is one group, so the
    /// shell cannot run its first line alone; a one-line command is typed as it is.
    #[test]
    fn without_bracketed_paste_a_multi_line_command_is_one_group() {
        for kind in [ShellKind::Bash, ShellKind::Zsh] {
            let bytes = kind.submission("echo a\necho b\n", false, false);
            assert_eq!(bytes, b"{\necho a\necho b\n}\r".to_vec());
            assert_eq!(
                kind.submission("true\n", false, true),
                b"\x05\x15true\r".to_vec()
            );
            let pasted = kind.submission("echo a\necho b", true, false);
            assert_eq!(pasted, b"\x1b[200~echo a\necho b\x1b[201~\r".to_vec());
        }
    }

    #[test]
    fn a_paste_cannot_be_ended_early_by_the_command() {
        let bytes = ShellKind::Bash.submission("echo \x1b[201~x\n", true, true);
        assert_eq!(bytes, b"\x05\x15\x1b[200~echo x\x1b[201~\r".to_vec());
    }
}
