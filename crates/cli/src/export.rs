//! `ptyhub terminal export`: a terminal's recorded history, paged from `GET …/events`, as
//! asciicast v2 (plays back with `asciinema play`), raw output bytes, or the log's own lines.

use std::io::Write;

use base64::Engine as _;
use ptyhub_client::{Client, ClientError};
use ptyhub_core::screen::Utf8Decoder;
use ptyhub_protocol::event::Seq;
use serde_json::{Value, json};

/// Events asked for per page (the server's largest page).
const PAGE_EVENTS: usize = 1000;

pub async fn export(
    client: &Client,
    terminal: &str,
    format: &str,
    out: &mut dyn Write,
) -> Result<(), ClientError> {
    let mut writer = match format {
        "raw" => Writer::Raw,
        "jsonl" => Writer::Jsonl,
        _ => Writer::Asciicast(Asciicast::default()),
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

enum Writer {
    Raw,
    Jsonl,
    Asciicast(Asciicast),
}

#[derive(Default)]
struct Asciicast {
    /// The first event's time: asciicast times are relative to it.
    start: Option<f64>,
    /// Decodes output statefully (a character split across events stays whole).
    text: Utf8Decoder,
    last_at: f64,
}

fn output_bytes(event: &Value) -> Option<Vec<u8>> {
    if event["type"] != "pty.output" {
        return None;
    }
    base64::engine::general_purpose::STANDARD
        .decode(event["data_b64"].as_str()?)
        .ok()
}

impl Writer {
    fn write(&mut self, event: &Value, out: &mut dyn Write) -> std::io::Result<()> {
        match self {
            Self::Raw => {
                if let Some(bytes) = output_bytes(event) {
                    out.write_all(&bytes)?;
                }
                Ok(())
            }
            Self::Jsonl => writeln!(out, "{event}"),
            Self::Asciicast(cast) => cast.write(event, out),
        }
    }

    fn finish(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        if let Self::Asciicast(cast) = self {
            if cast.start.is_none() {
                cast.header(0.0, 80, 24, out)?;
            }
            let rest = cast.text.finish();
            if !rest.is_empty() {
                writeln!(out, "{}", json!([cast.last_at, "o", rest]))?;
            }
        }
        Ok(())
    }
}

impl Asciicast {
    fn header(
        &mut self,
        ts: f64,
        cols: u64,
        rows: u64,
        out: &mut dyn Write,
    ) -> std::io::Result<()> {
        self.start = Some(ts);
        let header = json!({
            "version": 2,
            "width": cols,
            "height": rows,
            "timestamp": ts as u64,
        });
        writeln!(out, "{header}")
    }

    fn write(&mut self, event: &Value, out: &mut dyn Write) -> std::io::Result<()> {
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
        let at = ((ts - start).max(0.0) * 1000.0).round() / 1000.0;
        self.last_at = at;
        if let Some(bytes) = output_bytes(event) {
            let text = self.text.decode(&bytes);
            if !text.is_empty() {
                writeln!(out, "{}", json!([at, "o", text]))?;
            }
        } else if event["type"] == "pty.resize" {
            let size = format!(
                "{}x{}",
                event["cols"].as_u64().unwrap_or(80),
                event["rows"].as_u64().unwrap_or(24)
            );
            writeln!(out, "{}", json!([at, "r", size]))?;
        }
        Ok(())
    }
}
