//! The adversarial suite (docs/reliability.md): load, faults and security cases tried from the
//! outside, each printing the figures it measured as `figure <case>: <what> = <value>` lines
//! (shown with `--nocapture`; `scripts/adversarial.sh` collects them). The cases the rest of
//! the suite already proves are named in docs/reliability.md's table; these modules hold the
//! others. By default they run at a scale that fits CI; `PTYHUB_ADVERSARIAL=long` (what
//! `scripts/adversarial.sh --long` sets) runs them at full scale.
//!
//! The harness compares bytes end to end: a [`Producer`] writes random base64 text to the
//! terminal between two markers and keeps its own copy in a file (`tee`), with the PTY's
//! output processing off (`stty -opost`), so the bytes the log and every client received
//! between the markers must equal that copy, compared by sha256.

mod faults;
mod load;
mod security;

use std::fmt::Display;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use futures_util::StreamExt;
use ptyhub_client::{Client, LiveMessage, LiveSocket};
use sha2::{Digest, Sha256};

use super::get;
use ptyhub_test_support::data;

/// Whether the long tier was asked for.
pub fn is_long() -> bool {
    std::env::var("PTYHUB_ADVERSARIAL").is_ok_and(|tier| tier == "long")
}

/// A server whose terminals' logs keep `printed` bytes of output and more: a watcher that
/// falls behind reads on from the log, and a case that wants every byte at every watcher,
/// however far behind, needs the log to keep what it prints (past that a connection is told
/// `CURSOR_EXPIRED`, as `ws::live_connections_older_than_the_kept_log_are_told_so` proves).
/// An output event is stored as base64 inside a line of JSON, a third again as large.
pub fn start_keeping(printed: usize) -> ptyhub_test_support::Ptyhub {
    let keep = (printed as u64 * 2).max(ptyhub_core::event_log::EVENT_LOG_KEEP_BYTES);
    ptyhub_test_support::Ptyhub::start_with(
        env!("CARGO_BIN_EXE_ptyhub"),
        &["--event-log-keep", &keep.to_string()],
    )
}

/// `ci` in the CI tier, `long` in the long one.
pub fn scaled(ci: usize, long: usize) -> usize {
    if is_long() { long } else { ci }
}

/// Prints one measured figure of a case.
#[allow(
    clippy::print_stdout,
    reason = "the figures are the case's report; the test harness captures them"
)]
pub fn figure(case: &str, what: &str, value: impl Display) {
    println!("figure {case}: {what} = {value}");
}

/// The sha256 of `bytes`, in hex.
pub fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A producer of `bytes` random bytes (as base64 text, lines of 76) typed into a terminal.
pub struct Producer {
    tag: String,
    copy: PathBuf,
    bytes: usize,
    /// The shell pipeline whose output is produced.
    source: String,
}

impl Producer {
    /// A producer whose copy goes to `dir`; `tag` tells its markers apart from others'.
    pub fn new(dir: &Path, tag: &str, bytes: usize) -> Self {
        Self {
            tag: tag.to_owned(),
            copy: dir.join(format!("truth-{tag}")),
            bytes,
            source: format!("head -c {bytes} /dev/urandom | base64"),
        }
    }

    /// A producer at a steady rate: `chunks` of `chunk` random bytes, one every `interval`
    /// seconds.
    pub fn paced(dir: &Path, tag: &str, chunk: usize, chunks: usize, interval: f64) -> Self {
        Self {
            source: format!(
                "for i in $(seq {chunks}); do head -c {chunk} /dev/urandom | base64; sleep {interval}; done"
            ),
            ..Self::new(dir, tag, chunk * chunks)
        }
    }

    /// The command that produces: the markers are quoted apart so that the command's own echo
    /// never contains them.
    pub fn command(&self) -> String {
        format!(
            "stty -opost; printf '<<B''EGIN-{tag}>>'; {source} | tee {copy}; printf '<<E''ND-{tag}>>'; stty opost",
            tag = self.tag,
            source = self.source,
            copy = self.copy.display(),
        )
    }

    /// The producer's own copy of what it wrote.
    pub fn truth(&self) -> Vec<u8> {
        std::fs::read(&self.copy).unwrap_or_else(|e| panic!("{}: {e}", self.copy.display()))
    }

    /// How many bytes the producer has written so far.
    pub fn written(&self) -> usize {
        std::fs::metadata(&self.copy).map_or(0, |m| m.len() as usize)
    }

    fn begin(&self) -> Vec<u8> {
        format!("<<BEGIN-{}>>", self.tag).into_bytes()
    }

    fn end(&self) -> Vec<u8> {
        format!("<<END-{}>>", self.tag).into_bytes()
    }

    /// What `stream` holds between the markers, once both are in it.
    pub fn between<'a>(&self, stream: &'a [u8]) -> Option<&'a [u8]> {
        let begin = self.begin();
        let start = find(stream, &begin)? + begin.len();
        let len = find(&stream[start..], &self.end())?;
        Some(&stream[start..start + len])
    }

    /// Whether the end marker is in the newest `fresh` bytes of `stream` (or just before them).
    fn has_ended(&self, stream: &[u8], fresh: usize) -> bool {
        let end = self.end();
        let from = stream.len().saturating_sub(fresh + end.len());
        find(&stream[from..], &end).is_some()
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Every output byte of a terminal's log, read through the events route page by page.
pub async fn log_bytes(client: &Client, id: &str) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut after = 0;
    loop {
        let page = get(
            client,
            &format!("/v2/pty/sessions/{id}/events?after_seq={after}&limit=1000"),
        )
        .await;
        assert_eq!(page.status, 200, "{}", page.body);
        let page = data(&page);
        output_of_page(page, &mut bytes);
        after = page["next_seq"].as_u64().unwrap_or(after);
        if page["has_more"] != true {
            return bytes;
        }
    }
}

/// Appends the output bytes of a page of the events route to `bytes` (other events, typed
/// input among them, are not output).
pub fn output_of_page(page: &serde_json::Value, bytes: &mut Vec<u8>) {
    for event in page["events"].as_array().into_iter().flatten() {
        if event["type"] != "pty.output" {
            continue;
        }
        if let Some(b64) = event["data_b64"].as_str() {
            bytes.extend(
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .unwrap_or_else(|e| panic!("data_b64: {e}")),
            );
        }
    }
}

/// A watcher on the binary transport: every output byte, raw.
pub async fn watcher(client: &Client, id: &str, query: &str) -> LiveSocket {
    let path = format!("/v2/pty/sessions/{id}/ws?mode=watch&protocol=binary{query}");
    client
        .websocket(&path)
        .await
        .unwrap_or_else(|e| panic!("websocket {path}: {e}"))
}

/// Reads a binary-transport connection until `producer`'s end marker arrived; returns every
/// byte it got.
pub async fn read_to_end(socket: &mut LiveSocket, producer: &Producer) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut last_text = None;
    let timeout = ptyhub_test_support::default_timeout() * 4;
    loop {
        let message = tokio::time::timeout(timeout, socket.next())
            .await
            .unwrap_or_else(|_| {
                panic!("no frame within {timeout:?} ({} bytes so far)", bytes.len())
            });
        match message {
            Some(Ok(LiveMessage::Binary(data))) => {
                bytes.extend_from_slice(&data);
                if producer.has_ended(&bytes, data.len()) {
                    return bytes;
                }
            }
            Some(Ok(LiveMessage::Close(close))) => panic!(
                "the connection was closed ({close:?}) before the producer ended ({} bytes \
                 so far, the last text frame {last_text:?})",
                bytes.len()
            ),
            None => panic!(
                "the connection ended before the producer did ({} bytes so far, the last \
                 text frame {last_text:?})",
                bytes.len()
            ),
            Some(Ok(LiveMessage::Text(text))) => last_text = Some(text.as_str().to_owned()),
            Some(Ok(_)) => {}
            Some(Err(e)) => panic!("websocket: {e}"),
        }
    }
}

/// Checks that `got` holds exactly the producer's bytes between its markers.
pub fn assert_exact(producer: &Producer, truth: &str, got: &[u8], who: &str) {
    let between = producer
        .between(got)
        .unwrap_or_else(|| panic!("{who}: no markers in {} bytes", got.len()));
    if sha256(between) != truth {
        let copy = producer.truth();
        let first = between
            .iter()
            .zip(&copy)
            .position(|(a, b)| a != b)
            .unwrap_or(between.len().min(copy.len()));
        let around = |bytes: &[u8]| {
            let from = first.saturating_sub(40);
            String::from_utf8_lossy(&bytes[from..(first + 40).min(bytes.len())]).into_owned()
        };
        panic!(
            "{who}: {} bytes between the markers differ from the producer's copy of {} \
             ({} bytes asked of it); the first difference at byte {first}: got {:?}, \
             the copy has {:?}",
            between.len(),
            copy.len(),
            producer.bytes,
            around(between),
            around(&copy),
        );
    }
}

/// A process's figure from `/proc/<pid>/status` (`VmRSS`, `VmHWM`, `Threads`), in its unit.
pub fn proc_status(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// How many file descriptors a process has open.
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// A canary in a process of its own (`tests/adversarial/canary.py`), timing round trips
/// until it is told to stop: `["bare"]` on a bare PTY, `["ptyhub", url, token, terminal]`
/// through ptyhub's exec, as an agent would.
pub struct Canary {
    stop: PathBuf,
    child: tokio::process::Child,
}

/// What a canary measured.
pub struct CanaryFigures(serde_json::Value);

impl Canary {
    /// Starts one and waits until it runs.
    pub async fn start(dir: &Path, args: &[&str]) -> Self {
        let stop = dir.join(format!("canary-{}-stop", args.first().unwrap_or(&"")));
        // In a session of its own, as an agent started apart from this test is: the kernel
        // weighs sessions equally (autogroup), and this test's own session reads the floods.
        let child = tokio::process::Command::new("setsid")
            .args(["--wait", "python3"])
            .arg(super::manifest_dir().join("tests/adversarial/canary.py"))
            .arg(&stop)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("python3: {e}"));
        let mut ready = stop.clone().into_os_string();
        ready.push(".ready");
        let ready = PathBuf::from(ready);
        ptyhub_test_support::wait_until("the canary runs", || async {
            ready.exists().then_some(())
        })
        .await;
        Self { stop, child }
    }

    /// Stops it and reads its figures.
    pub async fn finish(self) -> CanaryFigures {
        std::fs::write(&self.stop, b"").unwrap_or_else(|e| panic!("{e}"));
        let output = self
            .child
            .wait_with_output()
            .await
            .unwrap_or_else(|e| panic!("the canary: {e}"));
        assert!(output.status.success(), "the canary failed: {output:?}");
        CanaryFigures(
            serde_json::from_slice(&output.stdout)
                .unwrap_or_else(|e| panic!("the canary's figures ({e}): {output:?}")),
        )
    }
}

impl CanaryFigures {
    /// `n, p50 / p99 / max ms, slowest at s, [[at s, ms] of each over 100 ms]`.
    pub fn summary(&self) -> String {
        let ms = |key: &str| self.0[key].as_f64().unwrap_or(0.0);
        format!(
            "{}, {:.1} / {:.1} / {:.1}, {:.1}, {}",
            self.0["n"],
            ms("p50"),
            ms("p99"),
            ms("max"),
            ms("slowest_at"),
            self.0["over_100_ms"]
        )
    }
}
