//! Provisioning the `rootfs` backend's root filesystem: which Debian suite and mirror (those
//! apt uses on this machine), running `debootstrap --variant=minbase` and turning its output
//! into [`InstallProgress`], and the layout that makes an install idempotent, resumable and
//! safe between servers (docs/backends.md#provisioning).
//!
//! Layout of the rootfs dir (`<state>/rootfs/` unless configured):
//! ```text
//! install.lock            flock: one install at a time, across servers
//! cache/                  debootstrap's package cache (kept until an install succeeds)
//! <suite>.partial/        the root being built
//! <suite>/                the finished root (renamed from .partial once debootstrap ended)
//! <suite>.ready           JSON marker: suite, mirror, arch, when (written after the rename)
//! ```
//! An interrupted install leaves `.partial` (and the cache): the next one deletes the
//! partial root and runs debootstrap again, which takes every package it already downloaded
//! from the cache. It runs on a thread of its own (debootstrap's output is a blocking read);
//! one install per server at a time, which a second request joins.
//!
//! Flow at a glance:
//! 1. [`Installer::start`] returns the running install, or starts one on a thread;
//! 2. the thread takes `install.lock` (waiting for another server's install), and finishes at
//!    once when the root is ready (or was renamed but not marked);
//! 3. it runs debootstrap into `<suite>.partial` with `--cache-dir`, parsing each `I:` line;
//! 4. it adds `/workspace` to the root, renames it, writes the marker and drops the cache.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use ptyhub_protocol::rootfs::{InstallProgress, InstallState};

use crate::state_dir::unix_now;

/// Packages a bookworm minbase root has (measured: 90), the total shown until debootstrap has
/// named every package it downloads.
const PACKAGES_ESTIMATE: u32 = 90;
/// Most characters of debootstrap's error output kept for the failure's message.
const ERROR_TAIL_CHARS: usize = 2000;

/// Where one root filesystem lives and where it comes from.
#[derive(Clone, Debug)]
pub struct RootfsSource {
    /// The rootfs dir (the layout above).
    pub dir: PathBuf,
    /// The Debian suite (`bookworm`).
    pub suite: String,
    /// The mirror (`http://deb.debian.org/debian`).
    pub mirror: String,
    /// The debootstrap executable.
    pub debootstrap: Option<PathBuf>,
}

impl RootfsSource {
    /// The finished root.
    pub fn tree(&self) -> PathBuf {
        self.dir.join(&self.suite)
    }

    fn partial(&self) -> PathBuf {
        self.dir.join(format!("{}.partial", self.suite))
    }

    fn marker(&self) -> PathBuf {
        self.dir.join(format!("{}.ready", self.suite))
    }

    /// Whether the root is installed: its marker says so and the tree is there.
    pub fn is_ready(&self) -> bool {
        self.marker().is_file() && self.tree().is_dir()
    }
}

/// One install, shared by every request that joins it.
type Shared = Arc<Mutex<InstallProgress>>;

/// The install of one root, as a server runs it.
#[derive(Debug)]
pub struct Installer {
    source: RootfsSource,
    /// The latest install (running or ended).
    latest: Mutex<Option<Shared>>,
}

impl Installer {
    pub fn new(source: RootfsSource) -> Self {
        Self {
            source,
            latest: Mutex::new(None),
        }
    }

    pub fn source(&self) -> &RootfsSource {
        &self.source
    }

    /// The latest install's progress, if this server ran one.
    pub fn progress(&self) -> Option<InstallProgress> {
        let latest = self.latest.lock().ok()?;
        let shared = latest.as_ref()?;
        shared.lock().ok().map(|p| p.clone())
    }

    /// The running install's progress, or a new install's (one that failed or ended is not
    /// joined: asking again runs it again, which answers `done` at once when it is ready).
    pub fn start(&self) -> InstallProgress {
        let Ok(mut latest) = self.latest.lock() else {
            return self.failed_now("the install's state is poisoned");
        };
        if let Some(shared) = latest.as_ref()
            && let Ok(progress) = shared.lock()
            && progress.state == InstallState::Running
        {
            return progress.clone();
        }
        let shared: Shared = Arc::new(Mutex::new(self.fresh(InstallState::Running)));
        *latest = Some(Arc::clone(&shared));
        let source = self.source.clone();
        let thread = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("rootfs-install".to_owned())
            .spawn(move || {
                let outcome = install(&source, &thread);
                if let Ok(mut progress) = thread.lock() {
                    progress.finished_at = Some(unix_now());
                    match outcome {
                        Ok(()) => {
                            progress.state = InstallState::Done;
                            progress.percent = 100;
                            "done".clone_into(&mut progress.phase);
                        }
                        Err(error) => {
                            tracing::warn!(%error, "the root filesystem's install failed");
                            progress.state = InstallState::Failed;
                            progress.error = Some(error);
                        }
                    }
                }
            });
        if let Err(error) = spawned
            && let Ok(mut progress) = shared.lock()
        {
            progress.state = InstallState::Failed;
            progress.error = Some(format!("cannot start the install: {error}"));
            progress.finished_at = Some(unix_now());
        }
        shared
            .lock()
            .map(|p| p.clone())
            .unwrap_or_else(|_| self.failed_now("poisoned"))
    }

    fn fresh(&self, state: InstallState) -> InstallProgress {
        InstallProgress {
            state,
            percent: 0,
            phase: "resolving".to_owned(),
            packages_done: 0,
            packages_total: PACKAGES_ESTIMATE,
            message: String::new(),
            error: None,
            suite: self.source.suite.clone(),
            mirror: self.source.mirror.clone(),
            started_at: unix_now(),
            finished_at: None,
        }
    }

    /// A failed install that never started, for a backend that cannot host here anyway.
    pub fn refused(&self, why: &str) -> InstallProgress {
        self.failed_now(why)
    }

    fn failed_now(&self, why: &str) -> InstallProgress {
        let mut progress = self.fresh(InstallState::Failed);
        progress.error = Some(why.to_owned());
        progress.finished_at = Some(progress.started_at);
        progress
    }
}

/// Runs one install to its end (the thread's body).
fn install(source: &RootfsSource, shared: &Shared) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&source.dir)
        .map_err(|e| format!("cannot create {}: {e}", source.dir.display()))?;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(source.dir.join("install.lock"))
        .map_err(|e| format!("cannot open the install lock: {e}"))?;
    // Another server's install of the same root: wait for it, then find the root ready.
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| format!("cannot lock the install: {e}"))?;
    if source.is_ready() {
        return Ok(());
    }
    if !source.tree().is_dir() {
        run_debootstrap(source, shared)?;
        set_phase(shared, "finishing", 99);
        let partial = source.partial();
        // Where every sandbox mounts its workspace (the root is mounted read-only).
        std::fs::create_dir_all(partial.join("workspace"))
            .map_err(|e| format!("cannot create /workspace in the root: {e}"))?;
        std::fs::rename(&partial, source.tree())
            .map_err(|e| format!("cannot move the finished root into place: {e}"))?;
    }
    let marker = serde_json::json!({
        "suite": source.suite,
        "mirror": source.mirror,
        "variant": "minbase",
        "installed_at": unix_now(),
    });
    crate::state_dir::write_atomic(
        &source.dir,
        &format!("{}.ready", source.suite),
        marker.to_string().as_bytes(),
    )
    .map_err(|e| format!("cannot write the ready marker: {e}"))?;
    let _ = std::fs::remove_dir_all(source.dir.join("cache"));
    Ok(())
}

fn set_phase(shared: &Shared, phase: &str, percent: u8) {
    if let Ok(mut progress) = shared.lock() {
        phase.clone_into(&mut progress.phase);
        progress.percent = progress.percent.max(percent);
    }
}

/// Runs debootstrap into a fresh `.partial` (packages come from the cache when an earlier
/// install downloaded them), feeding its lines to the progress.
fn run_debootstrap(source: &RootfsSource, shared: &Shared) -> Result<(), String> {
    let Some(program) = &source.debootstrap else {
        return Err("no debootstrap on PATH (apt-get install debootstrap)".to_owned());
    };
    if !rustix::process::geteuid().is_root() {
        return Err(
            "installing the root needs a server that runs as root (debootstrap does)".to_owned(),
        );
    }
    let partial = source.partial();
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(|e| {
            format!(
                "cannot remove the unfinished root {}: {e}",
                partial.display()
            )
        })?;
    }
    let cache = source.dir.join("cache");
    std::fs::create_dir_all(&cache).map_err(|e| format!("cannot create the package cache: {e}"))?;
    let mut child = Command::new(program)
        .arg("--variant=minbase")
        .arg(format!("--cache-dir={}", cache.display()))
        .arg(&source.suite)
        .arg(&partial)
        .arg(&source.mirror)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    let stderr = child.stderr.take();
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(stderr) = stderr {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                text.push_str(&line);
                text.push('\n');
                if text.len() > ERROR_TAIL_CHARS * 2 {
                    text.drain(..text.len() - ERROR_TAIL_CHARS);
                }
            }
        }
        text
    });
    let mut tracker = ProgressTracker::default();
    let mut last_error = None;
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("E: ") {
                last_error = Some(line.clone());
            }
            tracker.feed(&line);
            if let Ok(mut progress) = shared.lock() {
                tracker.apply(&mut progress, &line);
            }
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("cannot wait for debootstrap: {e}"))?;
    let stderr = errors.join().unwrap_or_default();
    if status.success() {
        return Ok(());
    }
    let tail: String = stderr.trim().chars().rev().take(ERROR_TAIL_CHARS).collect();
    let tail: String = tail.chars().rev().collect();
    Err(format!(
        "debootstrap failed ({status}): {}",
        last_error.unwrap_or(tail)
    ))
}

/// debootstrap's progress from its `I:` lines. The steps and their share of the percent:
/// resolving 0–2, retrieving (a `Retrieving` or `Validating` line per package) 2–50,
/// extracting 50–60, unpacking 60–80 and configuring 80–98 (an `Extracting`, `Unpacking` or
/// `Configuring` line per package), then 99 while the root is moved into place. The package
/// count is [`PACKAGES_ESTIMATE`] until the download ended, then the packages it named.
#[derive(Debug, Default)]
struct ProgressTracker {
    phase: Phase,
    retrieved: std::collections::BTreeSet<String>,
    done: u32,
    total: Option<u32>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    #[default]
    Resolving,
    Retrieving,
    Extracting,
    Unpacking,
    Configuring,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Self::Resolving => "resolving",
            Self::Retrieving => "retrieving",
            Self::Extracting => "extracting",
            Self::Unpacking => "unpacking",
            Self::Configuring => "configuring",
        }
    }

    /// The percent range of the step.
    fn span(self) -> (u32, u32) {
        match self {
            Self::Resolving => (0, 2),
            Self::Retrieving => (2, 50),
            Self::Extracting => (50, 60),
            Self::Unpacking => (60, 80),
            Self::Configuring => (80, 98),
        }
    }
}

impl ProgressTracker {
    fn feed(&mut self, line: &str) {
        let Some(text) = line.strip_prefix("I: ") else {
            return;
        };
        let mut words = text.split_whitespace();
        let (Some(verb), Some(object)) = (words.next(), words.next()) else {
            return;
        };
        // Summary lines ("Unpacking the base system...", "Configuring required packages...")
        // and the index files (InRelease, Packages) name no package.
        let is_summary = matches!(object, "the" | "required" | "packages" | "core")
            || matches!(object, "InRelease" | "Release" | "Packages" | "Release.gpg");
        let phase = match verb {
            "Retrieving" | "Validating" => Phase::Retrieving,
            "Extracting" => Phase::Extracting,
            "Unpacking" => Phase::Unpacking,
            "Configuring" => Phase::Configuring,
            _ => return,
        };
        if is_summary {
            return;
        }
        if phase > self.phase {
            if self.phase <= Phase::Retrieving && phase > Phase::Retrieving {
                self.total = u32::try_from(self.retrieved.len()).ok().filter(|&n| n > 0);
            }
            self.phase = phase;
            self.done = 0;
        }
        if phase < self.phase {
            return;
        }
        if phase == Phase::Retrieving {
            self.retrieved.insert(object.to_owned());
            self.done = u32::try_from(self.retrieved.len()).unwrap_or(u32::MAX);
        } else {
            self.done = self.done.saturating_add(1);
        }
    }

    fn total(&self) -> u32 {
        self.total
            .unwrap_or_else(|| PACKAGES_ESTIMATE.max(self.done.saturating_add(1)))
    }

    fn percent(&self) -> u8 {
        let (low, high) = self.phase.span();
        let total = self.total().max(1);
        let within = (high - low) * self.done.min(total) / total;
        u8::try_from((low + within).min(98)).unwrap_or(98)
    }

    fn apply(&self, progress: &mut InstallProgress, line: &str) {
        self.phase.name().clone_into(&mut progress.phase);
        progress.percent = progress.percent.max(self.percent());
        progress.packages_done = self.done.min(self.total());
        progress.packages_total = self.total();
        line.trim_start_matches("I: ")
            .clone_into(&mut progress.message);
    }
}

/// The Debian suite and mirror apt uses on this machine: the first `deb` source (one-line
/// `sources.list` files or deb822 `.sources`) whose suite is a release's own (no `-updates`,
/// `-security`, `-backports`) and that is not a security archive; else the release named by
/// `/etc/os-release` from `deb.debian.org`.
pub fn apt_source(etc: &Path) -> (String, String) {
    let mut files = vec![etc.join("apt/sources.list")];
    if let Ok(entries) = std::fs::read_dir(etc.join("apt/sources.list.d")) {
        let mut found: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        found.sort();
        files.extend(found);
    }
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let name = file.to_string_lossy();
        let entries = if name.ends_with(".sources") {
            deb822_entries(&text)
        } else if name.ends_with(".list") {
            one_line_entries(&text)
        } else {
            continue;
        };
        let chosen = entries.into_iter().find(|(uri, suite)| {
            !suite.contains('-') && !uri.contains("security") && suite != "nodistro"
        });
        if let Some((uri, suite)) = chosen {
            return (suite, uri.trim_end_matches('/').to_owned());
        }
    }
    let codename = std::fs::read_to_string(etc.join("os-release"))
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                l.strip_prefix("VERSION_CODENAME=")
                    .map(|v| v.trim_matches('"').to_owned())
            })
        })
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "stable".to_owned());
    (codename, "http://deb.debian.org/debian".to_owned())
}

/// `(uri, suite)` of each `deb` line of a one-line-format file.
fn one_line_entries(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let line = line.split('#').next()?.trim();
            let mut words = line.split_whitespace();
            if words.next()? != "deb" {
                return None;
            }
            let mut uri = words.next()?;
            // `deb [signed-by=…] uri suite …`
            while uri.starts_with('[') {
                if uri.ends_with(']') {
                    uri = words.next()?;
                } else {
                    let _ = words.by_ref().find(|w| w.ends_with(']'))?;
                    uri = words.next()?;
                }
            }
            Some((uri.to_owned(), words.next()?.to_owned()))
        })
        .collect()
}

/// `(uri, suite)` of each enabled `deb` stanza of a deb822 `.sources` file.
fn deb822_entries(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza.lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                key.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| value.trim().to_owned())
            })
        };
        let is_deb = field("Types").is_some_and(|t| t.split_whitespace().any(|t| t == "deb"));
        let is_enabled = field("Enabled").is_none_or(|e| !e.eq_ignore_ascii_case("no"));
        let (Some(uris), Some(suites)) = (field("URIs"), field("Suites")) else {
            continue;
        };
        if !is_deb || !is_enabled {
            continue;
        }
        for uri in uris.split_whitespace() {
            for suite in suites.split_whitespace() {
                found.push((uri.to_owned(), suite.to_owned()));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::{ProgressTracker, apt_source};

    #[test]
    fn the_suite_and_mirror_are_apts() {
        let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let etc = temp.path();
        std::fs::create_dir_all(etc.join("apt/sources.list.d")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            etc.join("apt/sources.list.d/debian.sources"),
            "Types: deb\n# a comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            etc.join("apt/sources.list.d/other.list.disabled"),
            "deb http://elsewhere.example/ x main\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            apt_source(etc),
            (
                "bookworm".to_owned(),
                "http://mirror.example/debian".to_owned()
            )
        );
        std::fs::write(
            etc.join("apt/sources.list"),
            "# old style\ndeb-src http://src.example/debian trixie main\ndeb [arch=amd64 signed-by=/k.gpg] http://one.example/debian/ trixie main\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            apt_source(etc),
            ("trixie".to_owned(), "http://one.example/debian".to_owned())
        );
    }

    #[test]
    fn the_percent_follows_debootstraps_steps() {
        let mut tracker = ProgressTracker::default();
        tracker.feed("I: Retrieving InRelease ");
        tracker.feed("I: Resolving dependencies of required packages...");
        assert_eq!(tracker.percent(), 0);
        for n in 0..45 {
            tracker.feed(&format!("I: Retrieving pkg{n} 1.0"));
            tracker.feed(&format!("I: Validating pkg{n} 1.0"));
        }
        // Half of the estimated 90 packages: half of the retrieving step.
        assert_eq!(tracker.percent(), 26);
        tracker.feed("I: Chosen extractor for .deb packages: dpkg-deb");
        tracker.feed("I: Extracting pkg0...");
        // The download named 45 packages: that is the total from now on.
        assert_eq!(tracker.total(), 45);
        for n in 0..45 {
            tracker.feed(&format!("I: Unpacking pkg{n}..."));
        }
        tracker.feed("I: Unpacking the base system...");
        assert_eq!(tracker.percent(), 80);
        for n in 0..10 {
            tracker.feed(&format!("I: Configuring pkg{n}..."));
        }
        assert_eq!(tracker.percent(), 84);
    }
}
