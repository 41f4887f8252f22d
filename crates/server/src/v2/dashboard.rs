//! `GET /v2/pty/events`: one stream of server-sent events with what a person watching the
//! owner's terminals needs at a glance, for the dashboard at `/` (docs/web.md). It owns the
//! stream's framing and the facts it derives per terminal; what each fact means is core's (the
//! timeline, the foreground facts, the screen).
//!
//! Flow at a glance (one connection):
//! 1. Every [`TICK`], list the owner's terminals (closed ones on request) and order them by
//!    owner, agent, session and id.
//! 2. For each terminal whose log moved since the last tick, read the end of its timeline (the
//!    running command and since when, the last finished command's exit code); for each one
//!    running a command, ask whether that command waits for input (and whether it is a
//!    password prompt). Terminals whose log did not move reuse what was read before, so a
//!    thousand quiet terminals cost a thousand cheap `info` calls and nothing else.
//! 3. Count them per filter (`running`, `waiting`, `failed`), take the asked page of the
//!    asked filter, and send a `page` event when the page differs from the last one sent.
//! 4. For the terminals on the page whose log moved, send a `preview` event: the bottom rows of
//!    the screen and whether a full-screen program holds it.

use std::collections::HashMap;
use std::time::Duration;

use axum::response::Response;
use axum::response::sse::Event;
use ptyhub_core::registry::Registry;
use ptyhub_protocol::api::{CommandEntry, TerminalInfo, TerminalState};
use ptyhub_protocol::event::Seq;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// How often the stream looks again.
const TICK: Duration = Duration::from_secs(1);
/// Events buffered for a slow reader; the stream waits beyond it (a tick is then skipped).
const EVENTS_QUEUED: usize = 16;
/// Terminals per page by default, and at most.
const PAGE_DEFAULT: usize = 50;
const PAGE_MAX: usize = 200;
/// Rows of the screen a preview holds (the bottom ones, trailing empty rows left out).
const PREVIEW_ROWS: usize = 8;
/// Columns of each preview row.
const PREVIEW_COLS: usize = 100;
/// Timeline entries read per request when catching up with a terminal.
const TIMELINE_PAGE: usize = 1000;

#[derive(Deserialize, utoipa::ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DashboardQuery {
    /// `all` (default), `running`, `waiting` or `failed`.
    #[serde(default)]
    filter: Option<String>,
    /// The page's first terminal, from 0, in the dashboard's order.
    #[serde(default)]
    offset: usize,
    /// Terminals per page (default 50, at most 200).
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    include_closed: bool,
}

/// One terminal on the dashboard.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct DashboardTerminal {
    #[serde(flatten)]
    info: TerminalInfo,
    /// Unix seconds when the running command started; null when none runs.
    running_since: Option<f64>,
    /// The running command waits for input on the terminal.
    is_waiting: bool,
    /// It waits at a prompt that does not echo (a password).
    is_password_prompt: bool,
    /// The program that waits, when one does.
    waiting_program: Option<String>,
    /// The last finished command: `{id, command, exit_code, duration}`.
    last_command: Option<LastCommand>,
    /// A running terminal with no command running.
    is_idle: bool,
    /// It exited with a code other than 0, or its last command did.
    is_failed: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
struct LastCommand {
    id: u64,
    command: String,
    exit_code: Option<i32>,
    duration: Option<f64>,
}

/// The `page` event.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DashboardPage {
    filter: String,
    offset: usize,
    limit: usize,
    /// Terminals that pass the filter.
    total: usize,
    /// Terminals per filter: `all`, `running`, `waiting`, `failed`.
    counts: HashMap<&'static str, usize>,
    terminals: Vec<DashboardTerminal>,
}

/// The `preview` event.
#[derive(Serialize)]
struct Preview<'a> {
    session_id: &'a str,
    lines: Vec<String>,
    is_full_screen: bool,
    last_seq: Seq,
}

/// What the stream remembers of a terminal between ticks.
#[derive(Default)]
struct Known {
    /// The log position the facts below were read at.
    seq: Option<Seq>,
    /// Timeline entries up to this id have been read.
    after: u64,
    running: Option<CommandEntry>,
    last: Option<LastCommand>,
    /// The log position of the last preview sent.
    previewed: Option<Seq>,
}

pub fn events(
    registry: std::sync::Arc<Registry>,
    owner: String,
    query: DashboardQuery,
    stopping: crate::stopping::Stopping,
) -> Response {
    let (tx, rx) = mpsc::channel::<Event>(EVENTS_QUEUED);
    let filter = match query.filter.as_deref() {
        Some(name @ ("running" | "waiting" | "failed")) => name.to_owned(),
        _ => "all".to_owned(),
    };
    let limit = query.limit.unwrap_or(PAGE_DEFAULT).clamp(1, PAGE_MAX);
    tokio::spawn(async move {
        let mut known: HashMap<String, Known> = HashMap::new();
        let mut last_sent = String::new();
        let mut tick = tokio::time::interval(TICK);
        loop {
            tick.tick().await;
            if tx.is_closed() {
                return;
            }
            let mut infos = registry.list(&owner, query.include_closed).await;
            infos.sort_by(|a, b| {
                (&a.owner, &a.agent, &a.session, &a.session_id).cmp(&(
                    &b.owner,
                    &b.agent,
                    &b.session,
                    &b.session_id,
                ))
            });
            known.retain(|id, _| infos.iter().any(|info| &info.session_id == id));
            let mut cards = Vec::with_capacity(infos.len());
            for info in infos {
                let entry = known.entry(info.session_id.clone()).or_default();
                cards.push(card(&registry, &owner, info, entry).await);
            }
            let mut counts = HashMap::new();
            counts.insert("all", cards.len());
            counts.insert(
                "running",
                cards.iter().filter(|c| c.running_since.is_some()).count(),
            );
            counts.insert("waiting", cards.iter().filter(|c| c.is_waiting).count());
            counts.insert("failed", cards.iter().filter(|c| c.is_failed).count());
            let chosen: Vec<DashboardTerminal> = cards
                .into_iter()
                .filter(|c| match filter.as_str() {
                    "running" => c.running_since.is_some(),
                    "waiting" => c.is_waiting,
                    "failed" => c.is_failed,
                    _ => true,
                })
                .collect();
            let total = chosen.len();
            let terminals: Vec<DashboardTerminal> =
                chosen.into_iter().skip(query.offset).take(limit).collect();
            let page = DashboardPage {
                filter: filter.clone(),
                offset: query.offset,
                limit,
                total,
                counts,
                terminals,
            };
            let data = serde_json::to_string(&page).unwrap_or_default();
            if data != last_sent {
                if tx
                    .send(Event::default().event("page").data(data.clone()))
                    .await
                    .is_err()
                {
                    return;
                }
                last_sent = data;
            }
            for terminal in &page.terminals {
                let Some(entry) = known.get_mut(&terminal.info.session_id) else {
                    continue;
                };
                if entry.previewed == Some(terminal.info.last_seq) {
                    continue;
                }
                entry.previewed = Some(terminal.info.last_seq);
                let Some(preview) = preview(&registry, &owner, &terminal.info).await else {
                    continue;
                };
                if tx
                    .send(Event::default().event("preview").data(preview))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    });
    crate::stream::event_stream(rx, stopping)
}

/// Step 2: the facts of one terminal, read again only when its log moved.
async fn card(
    registry: &Registry,
    owner: &str,
    info: TerminalInfo,
    known: &mut Known,
) -> DashboardTerminal {
    let is_live = !info.closed && info.state == TerminalState::Running;
    let handle = if is_live {
        registry.get(owner, &info.session_id).await.ok()
    } else {
        None
    };
    if known.seq != Some(info.last_seq)
        && let Some(handle) = &handle
    {
        known.seq = Some(info.last_seq);
        // A running command is read again until it ends.
        let mut after = known
            .running
            .as_ref()
            .map_or(known.after, |c| c.id.saturating_sub(1));
        known.running = None;
        while let Ok((_, entries, has_more)) = handle.commands(after, TIMELINE_PAGE).await {
            for entry in entries {
                after = entry.id;
                if entry.end_seq.is_none() {
                    known.running = Some(entry);
                } else {
                    known.running = None;
                    known.last = Some(LastCommand {
                        id: entry.id,
                        command: entry.command,
                        exit_code: entry.exit_code,
                        duration: entry.duration,
                    });
                }
            }
            if !has_more {
                break;
            }
        }
        known.after = after;
    }
    let running_since = if info.running_command.is_some() {
        known.running.as_ref().map(|c| c.started_at)
    } else {
        None
    };
    let foreground = match (&handle, running_since) {
        (Some(handle), Some(_)) => handle.foreground().await.ok().flatten(),
        _ => None,
    };
    // Asked only while a command runs, so a shell that reads is that command (a builtin
    // `read`), not the prompt.
    let is_waiting = foreground.as_ref().is_some_and(|f| f.is_reading);
    let is_failed = info.exit_code.is_some_and(|code| code != 0)
        || info.signal.is_some()
        || known
            .last
            .as_ref()
            .is_some_and(|c| c.exit_code.is_some_and(|code| code != 0));
    DashboardTerminal {
        running_since,
        is_waiting,
        is_password_prompt: is_waiting && foreground.as_ref().is_some_and(|f| f.is_password),
        waiting_program: foreground
            .as_ref()
            .filter(|_| is_waiting)
            .and_then(|f| f.program.clone()),
        last_command: known.last.clone(),
        is_idle: is_live && info.running_command.is_none(),
        is_failed,
        info,
    }
}

/// Step 4: the bottom rows of a live terminal's screen, as a `preview` event's data.
async fn preview(registry: &Registry, owner: &str, info: &TerminalInfo) -> Option<String> {
    if info.closed || info.state != TerminalState::Running {
        return None;
    }
    let handle = registry.get(owner, &info.session_id).await.ok()?;
    let screen = handle.screen().await.ok()?;
    let used = screen
        .screen
        .iter()
        .rposition(|row| !row.trim().is_empty())
        .map_or(0, |last| last + 1);
    let lines = screen.screen[used.saturating_sub(PREVIEW_ROWS)..used]
        .iter()
        .map(|row| {
            row.chars()
                .take(PREVIEW_COLS)
                .collect::<String>()
                .trim_end()
                .to_owned()
        })
        .collect();
    serde_json::to_string(&Preview {
        session_id: &info.session_id,
        lines,
        is_full_screen: screen.is_alternate_screen,
        last_seq: info.last_seq,
    })
    .ok()
}
