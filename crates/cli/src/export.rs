//! `ptyhub terminal export`: a terminal's recorded history, paged from `GET …/events`, as
//! asciicast v2 or v3 (asciinema 2's and 3's formats, with a marker at each command), raw
//! output bytes, or the log's own lines. Every format leaves out the shell integration's
//! private marks and the bells it caused ([`clean`]), so a recording never holds the
//! terminal's nonce.

mod clean;

use std::io::Write;

use ptyhub_client::{Client, ClientError};
use ptyhub_core::screen::Utf8Decoder;
use ptyhub_protocol::event::{Seq, decode_b64, encode_b64};
use serde_json::{Value, json};

use clean::IntegrationFilter;

/// Events asked for per page (the server's largest page).
const PAGE_EVENTS: usize = 1000;

/// The formats `--format` takes.
pub const FORMATS: [&str; 4] = ["asciicast", "asciicast-v3", "raw", "jsonl"];

pub async fn export(
    client: &Client,
    terminal: &str,
    format: &str,
    out: &mut dyn Write,
) -> Result<(), ClientError> {
    let kind = match format {
        "raw" => Kind::Raw,
        "jsonl" => Kind::Jsonl,
        "asciicast-v3" => Kind::Asciicast(Asciicast::new(3)),
        _ => Kind::Asciicast(Asciicast::new(2)),
    };
    let mut writer = Writer {
        kind,
        filter: IntegrationFilter::default(),
    };
    let mut after = Seq::ZERO;
    loop {
        let page = client
            .terminal(terminal)
            .events(after, Some(PAGE_EVENTS))
            .await?;
        for event in &page.events {
            writer.write(event, out).map_err(write_error)?;
        }
        if !page.has_more || page.next_seq <= after {
            break;
        }
        after = page.next_seq;
    }
    writer.finish(out).map_err(write_error)
}

fn write_error(error: std::io::Error) -> ClientError {
    ClientError::Http(format!("cannot write the export: {error}"))
}

struct Writer {
    kind: Kind,
    filter: IntegrationFilter,
}

enum Kind {
    Raw,
    Jsonl,
    Asciicast(Asciicast),
}

struct Asciicast {
    /// 2: times since the start; 3: intervals since the previous event.
    version: u8,
    /// The first event's time: asciicast times are relative to it.
    start: Option<f64>,
    /// Decodes output statefully (a character split across events stays whole).
    text: Utf8Decoder,
    /// The last event's time since the start, in milliseconds.
    last_ms: u64,
    /// The last written event's time (v3 writes intervals from it).
    written_ms: u64,
}

fn output_bytes(event: &Value) -> Option<Vec<u8>> {
    if event["type"] != "pty.output" {
        return None;
    }
    decode_b64(event["data_b64"].as_str()?).ok()
}

impl Writer {
    fn write(&mut self, event: &Value, out: &mut dyn Write) -> std::io::Result<()> {
        if event["type"] == "command.note" {
            self.filter
                .note(event["origin"].as_str().unwrap_or_default());
        }
        let mut event = std::borrow::Cow::Borrowed(event);
        if event["type"] == "process.start" {
            self.filter.start(&mut event.to_mut()["command"]);
        }
        let clean = output_bytes(&event).map(|bytes| self.filter.filter(&bytes));
        match &mut self.kind {
            Kind::Raw => {
                if let Some(bytes) = clean {
                    out.write_all(&bytes)?;
                }
                Ok(())
            }
            Kind::Jsonl => match clean {
                // Output the filter held back or dropped entirely leaves no line.
                Some(bytes) if bytes.is_empty() => Ok(()),
                Some(bytes) => {
                    let mut event = event.into_owned();
                    event["data_b64"] = Value::from(encode_b64(&bytes));
                    writeln!(out, "{event}")
                }
                None => writeln!(out, "{event}"),
            },
            Kind::Asciicast(cast) => cast.write(&event, clean.as_deref(), out),
        }
    }

    fn finish(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        let rest = self.filter.finish();
        match &mut self.kind {
            Kind::Raw => out.write_all(&rest),
            Kind::Jsonl => Ok(()),
            Kind::Asciicast(cast) => {
                if cast.start.is_none() {
                    cast.header(0.0, 80, 24, out)?;
                }
                let mut text = cast.text.decode(&rest);
                text.push_str(&cast.text.finish());
                if text.is_empty() {
                    return Ok(());
                }
                cast.event(cast.last_ms, "o", &text, out)
            }
        }
    }
}

impl Asciicast {
    fn new(version: u8) -> Self {
        Self {
            version,
            start: None,
            text: Utf8Decoder::default(),
            last_ms: 0,
            written_ms: 0,
        }
    }

    fn header(
        &mut self,
        ts: f64,
        cols: u64,
        rows: u64,
        out: &mut dyn Write,
    ) -> std::io::Result<()> {
        self.start = Some(ts);
        let header = if self.version == 3 {
            json!({
                "version": 3,
                "term": { "cols": cols, "rows": rows },
                "timestamp": ts as u64,
            })
        } else {
            json!({
                "version": 2,
                "width": cols,
                "height": rows,
                "timestamp": ts as u64,
            })
        };
        writeln!(out, "{header}")
    }

    /// One event line at `at_ms` since the start.
    fn event(
        &mut self,
        at_ms: u64,
        code: &str,
        data: &str,
        out: &mut dyn Write,
    ) -> std::io::Result<()> {
        let time = if self.version == 3 {
            at_ms.saturating_sub(self.written_ms)
        } else {
            at_ms
        };
        self.written_ms = at_ms;
        #[allow(
            clippy::cast_precision_loss,
            reason = "milliseconds of a recording are far below 2^52"
        )]
        let seconds = time as f64 / 1000.0;
        writeln!(out, "{}", json!([seconds, code, data]))
    }

    fn write(
        &mut self,
        event: &Value,
        output: Option<&[u8]>,
        out: &mut dyn Write,
    ) -> std::io::Result<()> {
        let ts = event["ts"].as_f64().unwrap_or(0.0);
        let start = match self.start {
            Some(start) => start,
            None => {
                let cols = event["cols"].as_u64().unwrap_or(80);
                let rows = event["rows"].as_u64().unwrap_or(24);
                self.header(ts, cols, rows, out)?;
                ts
            }
        };
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a non-negative number of milliseconds, rounded"
        )]
        let at_ms = (((ts - start).max(0.0)) * 1000.0).round() as u64;
        // Times never go back, even when the clock did.
        let at_ms = at_ms.max(self.last_ms);
        self.last_ms = at_ms;
        if let Some(bytes) = output {
            let text = self.text.decode(bytes);
            if !text.is_empty() {
                self.event(at_ms, "o", &text, out)?;
            }
            return Ok(());
        }
        match event["type"].as_str().unwrap_or_default() {
            "pty.resize" => {
                let size = format!(
                    "{}x{}",
                    event["cols"].as_u64().unwrap_or(80),
                    event["rows"].as_u64().unwrap_or(24)
                );
                self.event(at_ms, "r", &size, out)
            }
            // A marker at each command, labelled with its text (asciinema shows them as
            // chapters and can pause at them).
            "command.note" => {
                let label = event["command"].as_str().unwrap_or_default();
                self.event(at_ms, "m", label, out)
            }
            "process.exit" if self.version == 3 => {
                let status = match event["exit_code"].as_i64() {
                    Some(code) => code.to_string(),
                    None => event["signal"]
                        .as_i64()
                        .map_or_else(|| "0".to_owned(), |signal| (128 + signal).to_string()),
                };
                self.event(at_ms, "x", &status, out)
            }
            _ => Ok(()),
        }
    }
}
