//! Every JSON request body of the REST API (`ptyhub_protocol::api`), read as the server reads
//! one (blank is `{}`), then through the checks core applies before any terminal is involved:
//! exec's and jobs' options, the seconds fields, output windows (applied to text the input
//! also chooses), sizes, ids and names, signal names. Nothing may panic, and a body that
//! parses serializes to JSON that parses again.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ptyhub_core::exec::{ExecOptions, JobOptions, parse_seconds};
use ptyhub_core::output_window::OutputWindow;
use ptyhub_protocol::api::{
    AwaitParams, CreateSessionParams, ExecParams, InputParams, JobParams, ResizeParams, SendParams,
    SignalParams, WaitParams, WindowParams,
};
use ptyhub_protocol::ids::{Name, TermSize, TerminalId};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Parses `body` as `T` the way the server's JSON extractor does; a parsed body must
/// serialize and parse again.
fn body<T: DeserializeOwned + Serialize>(body: &[u8]) -> Option<T> {
    let text: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    };
    let value = serde_json::from_slice::<T>(text).ok()?;
    let json = serde_json::to_vec(&value).unwrap_or_else(|e| panic!("serialize: {e}"));
    if let Err(e) = serde_json::from_slice::<T>(&json) {
        panic!("{} does not read back: {e}", String::from_utf8_lossy(&json));
    }
    Some(value)
}

fn window(params: &WindowParams, text: &str) {
    if let Ok(Some(window)) = OutputWindow::from_params(params) {
        let _ = window.apply(text);
    }
}

fuzz_target!(|data: &[u8]| {
    if let Some(params) = body::<ExecParams>(data) {
        if let Ok(options) = ExecOptions::from_params(&params) {
            let _ = options.shell_text();
            let _ = options.no_change_timeout(None);
        }
        window(&params.window, &params.command);
    }
    if let Some(params) = body::<CreateSessionParams>(data) {
        for name in [&params.agent, &params.session].into_iter().flatten() {
            let _ = Name::parse(name);
        }
        if let Some(id) = &params.id {
            let _ = TerminalId::parse(id);
        }
        let default = TermSize::DEFAULT;
        let _ = TermSize::new(
            params.cols.unwrap_or(default.cols),
            params.rows.unwrap_or(default.rows),
        );
    }
    if let Some(params) = body::<SendParams>(data) {
        let _ = parse_seconds("deadline", params.deadline);
        let _ = parse_seconds("idle_window", params.idle_window);
        window(&params.window, &params.text);
    }
    if let Some(params) = body::<JobParams>(data) {
        let _ = JobOptions::from_params(params);
    }
    if let Some(params) = body::<WaitParams>(data) {
        let _ = parse_seconds("seconds", params.seconds);
    }
    if let Some(params) = body::<AwaitParams>(data) {
        let _ = parse_seconds("seconds", params.seconds);
    }
    if let Some(params) = body::<ResizeParams>(data) {
        let _ = TermSize::new(params.cols, params.rows);
    }
    if let Some(params) = body::<SignalParams>(data) {
        let _ = ptyhub_core::terminal::signal::parse(&params.signal);
    }
    let _ = body::<InputParams>(data);
});
