//! The CLI described for other programs: shell completions (`ptyhub completions bash|zsh|
//! fish`, through clap_complete) and the man page (`ptyhub man`, roff through clap_mangen),
//! both generated from the one clap definition in `main.rs`, so they never drift from it.
//! Both are printed on stdout for a package or a user to install; this module installs
//! nothing and owns no flags of its own beyond its two subcommands.

#![allow(
    clippy::print_stdout,
    reason = "completions and the man page are this command's output"
)]

use std::io::Write as _;

use anyhow::Context;
use clap::CommandFactory;

/// The shells `ptyhub completions` writes for.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: Shell,
}

/// Prints the completion script of `args.shell` for the `ptyhub` command line `C`.
pub fn completions<C: CommandFactory>(args: &CompletionsArgs) -> anyhow::Result<i32> {
    let shell = match args.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut command = visible(C::command());
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "ptyhub", &mut out);
    write_stdout(&out)
}

/// Prints the man page (section 1) of the `ptyhub` command line `C`: one page with a section
/// per command (`PTYHUB SERVE`, `PTYHUB TERMINAL EXEC`, …) and its options, rather than a page
/// per command that a single `ptyhub man` could not install.
pub fn man<C: CommandFactory>() -> anyhow::Result<i32> {
    let mut command = C::command();
    // Built, so the global flags and the generated help flags appear under every subcommand.
    command.build();
    let page = clap_mangen::Man::new(command.clone());
    let mut out = Vec::new();
    page.render_title(&mut out)?;
    page.render_name_section(&mut out)?;
    page.render_synopsis_section(&mut out)?;
    page.render_description_section(&mut out)?;
    page.render_options_section(&mut out)?;
    for sub in documented(&command) {
        render_subcommand(&mut out, sub, "ptyhub")?;
    }
    page.render_version_section(&mut out)?;
    write_stdout(&out)
}

/// `command` without its hidden subcommands (the holder entry), which completion scripts would
/// otherwise offer.
fn visible(command: clap::Command) -> clap::Command {
    let subcommands: Vec<clap::Command> = command
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set())
        .cloned()
        .collect();
    let shown = clap::Command::new("ptyhub")
        .version(env!("PTYHUB_VERSION"))
        .args(command.get_arguments().cloned())
        .subcommands(subcommands)
        .subcommand_required(command.is_subcommand_required_set());
    match command.get_about() {
        Some(about) => shown.about(about.clone()),
        None => shown,
    }
}

/// The subcommands a person runs: not the hidden holder entry, nor clap's `help`.
fn documented(command: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    command
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set() && sub.get_name() != "help")
}

/// Appends a section for `sub` (and, depth first, its own subcommands) with its options.
fn render_subcommand(out: &mut Vec<u8>, sub: &clap::Command, parent: &str) -> anyhow::Result<()> {
    let name = format!("{parent} {}", sub.get_name());
    writeln!(out, ".SH \"{}\"", name.to_uppercase())?;
    if let Some(about) = sub.get_long_about().or_else(|| sub.get_about()) {
        writeln!(out, "{}", escape(&about.to_string()))?;
    }
    if sub.get_arguments().any(|a| !a.is_hide_set()) {
        let mut options = Vec::new();
        clap_mangen::Man::new(sub.clone())
            .render_options_section(&mut options)
            .with_context(|| format!("cannot render the options of {name}"))?;
        // The options belong to this command's section: a subsection, not a section of the
        // page.
        let options = String::from_utf8_lossy(&options).replacen(".SH OPTIONS", ".SS Options", 1);
        out.extend_from_slice(options.as_bytes());
    }
    for inner in documented(sub) {
        render_subcommand(out, inner, &name)?;
    }
    Ok(())
}

/// Text safe at the start of a roff line (a leading `.` or `'` would be a request).
fn escape(text: &str) -> String {
    text.lines()
        .map(|line| {
            let line = line.replace('\\', "\\e");
            if line.starts_with(['.', '\'']) {
                format!("\\&{line}")
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn write_stdout(bytes: &[u8]) -> anyhow::Result<i32> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(bytes)
        .and_then(|()| stdout.flush())
        .context("cannot write to stdout")?;
    Ok(0)
}
