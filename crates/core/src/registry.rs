//! The set of terminals the server knows, by owner and id: lookup with exact-owner
//! visibility (an owner's key is part of every lookup, so another owner's terminal answers
//! exactly as an absent one), the live limit (LRU), the idle reaper, listing, closing, event
//! pages, and rediscovery from the state directory after a restart. How a terminal is made is
//! [`crate::creation`]'s.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::TerminalError;
use ptyhub_protocol::api::{CloseResponse, EventsResponse, Retention, TerminalInfo};
use ptyhub_protocol::event::Seq;
use ptyhub_protocol::ids::TerminalId;
use tokio::sync::Mutex;

use crate::backend::{Backends, TerminalLog};
pub use crate::creation::CreateSpec;
use crate::creation::{Placement, Plan};
use crate::event_log::EVENT_LOG_KEEP_BYTES;
use crate::state_dir::{self, StateDir};
use crate::terminal::TerminalHandle;

/// Most events one `events` page returns.
pub const EVENTS_PAGE_MAX: usize = 1000;
/// Most bytes of events one page returns.
const EVENTS_PAGE_MAX_BYTES: usize = 4 * 1024 * 1024;
/// Bytes of log read at a time for a page.
const EVENTS_PAGE_READ_BYTES: usize = 256 * 1024;

/// Where things live and what hosts terminals.
#[derive(Clone)]
pub struct RegistryConfig {
    pub state_dir: StateDir,
    /// Private directory for holder sockets and integration files (short paths).
    pub runtime_dir: PathBuf,
    /// What hosts terminals: each is followed by the backend its `meta.json` names.
    pub backends: Backends,
    pub limits: Limits,
    /// Variables every new terminal's shell gets before the client's own
    /// ([`crate::creation::agent_env`] by default).
    pub agent_env: std::collections::BTreeMap<String, String>,
    /// The account each owner's terminals run as, for owners that have one of their own
    /// (docs/security.md); the others run as the server's.
    pub os_users: std::collections::BTreeMap<String, crate::os_user::OsUser>,
    /// Owners of the configuration's tokens: they cannot choose the account a terminal runs
    /// as (only the server's own principal may).
    pub confined_owners: std::collections::BTreeSet<String>,
}

/// How many terminals may live, for how long unused, and how much history each keeps
/// (defaults in docs/compatibility.md#defaults).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Live terminals at most; creating one more closes the least recently used reclaimable
    /// one (no command running), or fails with `LIMIT_EXCEEDED` when none is.
    pub max_live: usize,
    /// A terminal unused (no request, no output) for this long is closed.
    pub idle_close: Duration,
    /// Bytes of event log each terminal keeps; its holders delete older segments.
    pub event_log_keep: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_live: 20,
            idle_close: Duration::from_secs(3600),
            event_log_keep: EVENT_LOG_KEEP_BYTES,
        }
    }
}

/// A terminal is "active" in the stats when used within this window
/// (docs/compatibility.md#defaults).
const ACTIVE_WINDOW: Duration = Duration::from_secs(300);

/// Counts for `sessions/stats`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    pub total: usize,
    pub active: usize,
    pub idle: usize,
    pub max: usize,
    pub idle_close_secs: u64,
}

struct Entry {
    /// The actor of a live terminal. A closed one has none: its history is on disk, and
    /// nothing of it stays in memory but this entry (a long-running server closes thousands).
    handle: Option<TerminalHandle>,
    dir: PathBuf,
    is_anonymous: bool,
    /// What hosts it (for the census of a closed one).
    backend: ptyhub_protocol::api::BackendKind,
    /// Reclaimed first under the live limit; its directory goes when it closes.
    is_expiring: bool,
    /// The last request that used it.
    last_used: Instant,
    /// Per-terminal default `no_change_timeout` (v1 `sessions/create` and `update`).
    no_change_timeout: Option<Duration>,
}

impl Entry {
    fn new(handle: Option<TerminalHandle>, dir: PathBuf, meta: &state_dir::TerminalMeta) -> Self {
        Self {
            handle,
            dir,
            is_anonymous: meta.anonymous,
            backend: meta.backend,
            is_expiring: meta.retention == Retention::Expiring,
            last_used: Instant::now(),
            no_change_timeout: None,
        }
    }
}

impl Entry {
    fn is_closed(&self) -> bool {
        self.handle.is_none()
    }
}

type Key = (String, TerminalId);

pub struct Registry {
    config: RegistryConfig,
    entries: Mutex<HashMap<Key, Entry>>,
    /// Held while a terminal is being created.
    creating: Mutex<()>,
    /// [`Registry::discover`] has finished (what the server's `/readyz` waits for).
    is_discovered: std::sync::atomic::AtomicBool,
}

impl Registry {
    pub fn new(config: RegistryConfig) -> std::io::Result<Arc<Self>> {
        state_dir::create_socket_dir(&config.runtime_dir)?;
        Ok(Arc::new(Self {
            config,
            entries: Mutex::new(HashMap::new()),
            creating: Mutex::new(()),
            is_discovered: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// Whether discovery of the terminals already in the state directory has finished.
    pub fn is_discovered(&self) -> bool {
        self.is_discovered
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The state directory this registry keeps its terminals in.
    pub fn state_dir(&self) -> &StateDir {
        &self.config.state_dir
    }

    /// Finds every terminal in the state directory and follows it again (live ones reattach
    /// to their holder and rebuild their screen from the log).
    pub async fn discover(&self) -> usize {
        let found = self.config.state_dir.discover();
        let count = found.len();
        let mut orphans = Vec::new();
        {
            let mut entries = self.entries.lock().await;
            for (dir, mut meta) in found {
                let key = (meta.owner.clone(), meta.id.clone());
                let (is_closed, is_anonymous) = (meta.closed, meta.anonymous);
                if is_anonymous && !is_closed {
                    orphans.push(key.clone());
                }
                if is_closed {
                    // A close the previous server did not finish.
                    finish_cgroup(&dir, &mut meta);
                    if meta.retention == Retention::Expiring {
                        remove_terminal_dir(&dir);
                        continue;
                    }
                }
                let entry_meta = meta.clone();
                // A closed terminal is history only: no actor replays it.
                let handle = (!is_closed).then(|| {
                    let backend = self.config.backends.for_kind(meta.backend);
                    TerminalHandle::spawn(dir.clone(), meta, backend)
                });
                entries.insert(key, Entry::new(handle, dir, &entry_meta));
            }
        }
        // An anonymous terminal's connection ended with the previous server: so does it.
        for (owner, id) in orphans {
            if let Err(error) = self.close(&owner, id.as_str()).await {
                tracing::warn!(%id, %error, "cannot close an orphaned anonymous terminal");
            }
        }
        self.is_discovered
            .store(true, std::sync::atomic::Ordering::Release);
        count
    }

    /// A live (not closed) terminal of `owner`.
    pub async fn get(&self, owner: &str, id: &str) -> Result<TerminalHandle, TerminalError> {
        let id = TerminalId::parse(id).map_err(|_| TerminalError::not_found(id))?;
        let mut entries = self.entries.lock().await;
        match entries.get_mut(&(owner.to_owned(), id.clone())) {
            Some(Entry {
                handle: Some(handle),
                last_used,
                ..
            }) => {
                *last_used = Instant::now();
                Ok(handle.clone())
            }
            _ => Err(TerminalError::not_found(&id)),
        }
    }

    /// The terminal's default `no_change_timeout`, if one was set.
    pub async fn no_change_timeout(&self, owner: &str, id: &str) -> Option<Duration> {
        let id = TerminalId::parse(id).ok()?;
        let entries = self.entries.lock().await;
        entries.get(&(owner.to_owned(), id))?.no_change_timeout
    }

    /// Sets the terminal's default `no_change_timeout`.
    pub async fn set_no_change_timeout(
        &self,
        owner: &str,
        id: &str,
        timeout: Option<Duration>,
    ) -> Result<(), TerminalError> {
        let parsed = TerminalId::parse(id).map_err(|_| TerminalError::not_found(id))?;
        let mut entries = self.entries.lock().await;
        match entries.get_mut(&(owner.to_owned(), parsed)) {
            Some(entry) if !entry.is_closed() => {
                entry.no_change_timeout = timeout;
                Ok(())
            }
            _ => Err(TerminalError::not_found(id)),
        }
    }

    /// The backends this server runs with.
    pub fn backends(&self) -> &Backends {
        &self.config.backends
    }

    /// Live terminals (all owners: the limit is the server's).
    pub async fn stats(&self) -> Stats {
        let entries = self.entries.lock().await;
        let live: Vec<&Entry> = entries.values().filter(|e| !e.is_closed()).collect();
        let active = live
            .iter()
            .filter(|e| e.last_used.elapsed() < ACTIVE_WINDOW)
            .count();
        Stats {
            total: live.len(),
            active,
            idle: live.len() - active,
            max: self.config.limits.max_live,
            idle_close_secs: self.config.limits.idle_close.as_secs(),
        }
    }

    /// Every terminal the server knows (all owners, anonymous ones too) by what hosts it and
    /// its state: the program's lifecycle state of a live one (asked of its actor, 1 s at
    /// most; one that does not answer counts as `unknown`), `closed` for a closed one.
    pub async fn census(&self) -> Vec<(ptyhub_protocol::api::BackendKind, &'static str)> {
        /// How long one actor may take to say its state before it counts as `unknown`.
        const INFO_WAIT: Duration = Duration::from_secs(1);
        let found: Vec<_> = {
            let entries = self.entries.lock().await;
            entries
                .values()
                .map(|e| (e.backend, e.handle.clone()))
                .collect()
        };
        let mut census = Vec::with_capacity(found.len());
        for (backend, handle) in found {
            let state = match handle {
                None => "closed",
                Some(handle) => match tokio::time::timeout(INFO_WAIT, handle.info()).await {
                    Ok(Ok(info)) => info.state.as_str(),
                    _ => "unknown",
                },
            };
            census.push((backend, state));
        }
        census
    }

    /// Makes room for one more live terminal: closes the least recently used `expiring`
    /// terminal, else the least recently used one, that runs no command and has no live
    /// connection, or fails with `LIMIT_EXCEEDED`.
    async fn make_room(&self) -> Result<(), TerminalError> {
        let mut candidates: Vec<((bool, Instant), String, TerminalId, TerminalHandle)> = {
            let entries = self.entries.lock().await;
            if entries.values().filter(|e| !e.is_closed()).count() < self.config.limits.max_live {
                return Ok(());
            }
            entries
                .iter()
                .filter(|(_, e)| !e.is_closed())
                .filter_map(|((owner, id), e)| {
                    let handle = e.handle.clone()?;
                    let order = (!e.is_expiring, e.last_used);
                    Some((order, owner.clone(), id.clone(), handle))
                })
                .collect()
        };
        candidates.sort_by_key(|c| c.0);
        for (_, owner, id, handle) in candidates {
            // A live connection (a person watching, an agent's relay) keeps a terminal; so
            // does a host this server cannot speak to (closing would end processes it never
            // followed).
            let is_busy = handle.live_connections() > 0
                || handle
                    .info()
                    .await
                    .is_ok_and(|info| info.running_command.is_some() || info.host_error.is_some());
            if !is_busy {
                tracing::info!(%id, "closing the least recently used terminal to make room");
                return self.close(&owner, id.as_str()).await.map(|_| ());
            }
        }
        Err(TerminalError::TooManyTerminals {
            max: self.config.limits.max_live,
        })
    }

    /// Closes every live terminal unused (no request, no output, no running command, no live
    /// connection) for the idle limit.
    pub async fn close_idle(&self) -> usize {
        let limit = self.config.limits.idle_close;
        let candidates: Vec<(String, TerminalId, TerminalHandle)> = {
            let entries = self.entries.lock().await;
            entries
                .iter()
                .filter(|(_, e)| !e.is_closed() && e.last_used.elapsed() >= limit)
                .filter_map(|((owner, id), e)| Some((owner.clone(), id.clone(), e.handle.clone()?)))
                .collect()
        };
        let now = state_dir::unix_now();
        let mut closed = 0;
        for (owner, id, handle) in candidates {
            // A running command is work in progress, and a terminal someone is connected to
            // is in use: neither is idle. A host this server cannot speak to is not its to end.
            let is_in_use = handle.live_connections() > 0
                || handle.info().await.is_ok_and(|info| {
                    info.running_command.is_some()
                        || info.host_error.is_some()
                        || now.saturating_sub(info.last_activity) < limit.as_secs()
                });
            if !is_in_use && self.close(&owner, id.as_str()).await.is_ok() {
                tracing::info!(%id, "closed an idle terminal");
                closed += 1;
            }
        }
        closed
    }

    /// Closes idle terminals (and trims the heap) in the background for as long as the
    /// registry lives; tunes the allocator for a server first (docs/memory.md).
    pub fn spawn_idle_reaper(self: &Arc<Self>) {
        crate::memory::tune_for_server();
        let weak = Arc::downgrade(self);
        let period = (self.config.limits.idle_close / 4)
            .clamp(Duration::from_millis(100), Duration::from_secs(60));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            loop {
                tick.tick().await;
                let Some(registry) = weak.upgrade() else {
                    break;
                };
                registry.close_idle().await;
                // Floods leave freed buffers behind; give them back to the system.
                crate::memory::trim_heap();
            }
        });
    }

    pub async fn list(&self, owner: &str, include_closed: bool) -> Vec<TerminalInfo> {
        let found: Vec<(Option<TerminalHandle>, PathBuf)> = {
            let entries = self.entries.lock().await;
            entries
                .iter()
                .filter(|((o, _), e)| {
                    o == owner && !e.is_anonymous && (include_closed || !e.is_closed())
                })
                .map(|(_, e)| (e.handle.clone(), e.dir.clone()))
                .collect()
        };
        let mut infos = Vec::with_capacity(found.len());
        for (handle, dir) in found {
            let info = match handle {
                Some(handle) => handle.info().await.ok(),
                None => closed_info(&dir, &self.config.backends.log(&dir)),
            };
            infos.extend(info);
        }
        infos.sort_by(|a, b| (a.created_at, &a.session_id).cmp(&(b.created_at, &b.session_id)));
        infos
    }

    /// Creates a terminal, or returns the live one with the same id. `bool` tells which.
    /// The account `owner`'s new terminal runs as, given the one asked for by name: an owner
    /// with a configured account always gets it (asking for another is refused); otherwise
    /// only the server's own principal may choose one, on a server that can switch accounts.
    fn account_for(
        &self,
        owner: &str,
        asked: Option<&str>,
    ) -> Result<Option<crate::os_user::OsUser>, TerminalError> {
        use crate::os_user::{OsUser, can_switch_users};
        let fixed = self.config.os_users.get(owner);
        match (fixed, asked) {
            (Some(fixed), Some(asked)) if fixed.name != asked => {
                Err(TerminalError::invalid(format!(
                    "owner {owner:?}'s terminals run as {:?}, not {asked:?}",
                    fixed.name
                )))
            }
            (Some(fixed), _) => Ok(Some(fixed.clone())),
            (None, None) => Ok(None),
            (None, Some(_)) if self.config.confined_owners.contains(owner) => {
                Err(TerminalError::invalid(
                    "only the server's own token may choose the account a terminal runs as",
                ))
            }
            (None, Some(_)) if !can_switch_users() => Err(TerminalError::invalid(
                "choosing the account a terminal runs as needs the server to run as root",
            )),
            (None, Some(asked)) => {
                let user = OsUser::lookup(asked).map_err(|e| {
                    TerminalError::invalid(format!(
                        "user {:?}: {e}",
                        ptyhub_protocol::ids::truncate_for_message(asked)
                    ))
                })?;
                // Root is the server's own account: nothing to switch to.
                Ok((user.uid != 0).then_some(user))
            }
        }
    }

    pub async fn create(
        &self,
        owner: &str,
        spec: CreateSpec,
    ) -> Result<(TerminalHandle, bool), TerminalError> {
        let choice = match spec.retention {
            Retention::Expiring => self.config.backends.for_expiring(spec.backend),
            Retention::Persistent => spec.backend,
        };
        let plan = Plan::new(spec, self.config.backends.kind_of(choice))?;
        // Before anything exists: bad limits, an unavailable backend or account create
        // nothing.
        let limits = self
            .config
            .backends
            .cgroups()
            .limits_for(plan.limits.as_ref())?;
        let backend = self.config.backends.choose(choice)?;
        let user = self.account_for(owner, plan.user.as_deref())?;
        let (id, agent, session) = (plan.id.clone(), plan.agent.clone(), plan.session.clone());

        // Creations are serialized among themselves (an id is created once); lookups and
        // lists never wait for a holder to start.
        let _creating = self.creating.lock().await;
        let key = (owner.to_owned(), id.clone());
        let previous = {
            let mut entries = self.entries.lock().await;
            match entries.get_mut(&key) {
                Some(Entry {
                    handle: Some(handle),
                    last_used,
                    dir,
                    ..
                }) => {
                    let runs_as = state_dir::read_meta(dir).ok().and_then(|meta| meta.user);
                    if let Some(asked) = &plan.user
                        && runs_as.as_deref() != user.as_ref().map(|u| u.name.as_str())
                    {
                        return Err(TerminalError::invalid(format!(
                            "terminal {id} runs as {}, not {asked:?}: re-create it with the same user, or none",
                            runs_as.map_or_else(
                                || "the server's account".to_owned(),
                                |u| format!("{u:?}")
                            )
                        )));
                    }
                    *last_used = Instant::now();
                    return Ok((handle.clone(), false));
                }
                Some(entry) => Some(entry.dir.clone()),
                None => None,
            }
        };
        self.make_room().await?;
        // A closed terminal reopened with the same id: a new instance in the same directory.
        let (dir, instance, agent, session, created_at) = match previous {
            Some(previous_dir) => {
                let old = state_dir::read_meta(&previous_dir)
                    .map_err(|e| TerminalError::internal(format!("cannot read meta.json: {e}")))?;
                (
                    previous_dir,
                    old.instance + 1,
                    old.agent,
                    old.session,
                    old.created_at,
                )
            }
            None => {
                let dir = self
                    .config
                    .state_dir
                    .terminal_dir(owner, &agent, &session, &id);
                (dir, 1, agent, session, state_dir::unix_now())
            }
        };
        let meta = plan
            .start(
                owner,
                Placement {
                    dir: dir.clone(),
                    instance,
                    agent,
                    session,
                    created_at,
                },
                &self.config,
                backend.as_ref(),
                user.as_ref(),
                limits,
            )
            .await?;
        let entry = Entry::new(None, dir.clone(), &meta);
        let handle = TerminalHandle::spawn_created(dir, meta, backend);
        self.entries.lock().await.insert(
            key,
            Entry {
                handle: Some(handle.clone()),
                ..entry
            },
        );
        Ok((handle, true))
    }

    /// Ends a terminal's processes and takes it off the live list (history stays on disk).
    pub async fn close(&self, owner: &str, id: &str) -> Result<CloseResponse, TerminalError> {
        let handle = self.get(owner, id).await?;
        let meta = handle.close().await?;
        let key = (owner.to_owned(), meta.id.clone());
        let closed = {
            let mut entries = self.entries.lock().await;
            entries.get_mut(&key).map(|entry| {
                // Closed: the actor ends once the last live connection lets go of it.
                entry.handle = None;
                (entry.dir.clone(), entry.is_expiring)
            })
        };
        if let Some((dir, is_expiring)) = closed {
            // What a dead host left in the cgroup, and an expiring terminal's files: file
            // system work that may wait for processes to die, off the runtime's threads.
            let fallback = meta.clone();
            let finished = tokio::task::spawn_blocking(move || {
                let mut on_disk = state_dir::read_meta(&dir).unwrap_or(fallback);
                finish_cgroup(&dir, &mut on_disk);
                if is_expiring {
                    remove_terminal_dir(&dir);
                }
            })
            .await;
            if let Err(error) = finished {
                tracing::warn!(%error, "cannot finish closing a terminal");
            }
            if is_expiring {
                self.entries.lock().await.remove(&key);
            }
        }
        Ok(CloseResponse {
            session_id: meta.id.to_string(),
            exit_code: meta.exit_code,
            signal: meta.signal,
        })
    }

    /// A page of the event log after `after` (closed terminals included: history stays).
    pub async fn events(
        &self,
        owner: &str,
        id: &str,
        after: Seq,
        limit: usize,
    ) -> Result<EventsResponse, TerminalError> {
        let parsed = TerminalId::parse(id).map_err(|_| TerminalError::not_found(id))?;
        let dir = {
            let entries = self.entries.lock().await;
            entries
                .get(&(owner.to_owned(), parsed.clone()))
                .map(|e| e.dir.clone())
                .ok_or_else(|| TerminalError::not_found(id))?
        };
        let log = self.config.backends.log(&dir);
        read_events_page(&log, &parsed, after, limit.clamp(1, EVENTS_PAGE_MAX))
    }
}

/// A page of raw log lines after `after`, across segments; one older than the oldest kept
/// event starts the page at that event.
fn read_events_page(
    log: &TerminalLog,
    id: &TerminalId,
    after: Seq,
    limit: usize,
) -> Result<EventsResponse, TerminalError> {
    let cannot_read =
        |e: std::io::Error| TerminalError::internal(format!("cannot read the event log: {e}"));
    let mut reader = log.reader(after);
    let mut events = Vec::new();
    let mut bytes = 0;
    let mut next_seq = after;
    let mut has_more = false;
    let mut last_read = Seq::ZERO;
    while !has_more {
        let read = reader
            .read_lines(EVENTS_PAGE_READ_BYTES, None, &mut |seq, line| {
                last_read = seq;
                if events.len() >= limit
                    || bytes + line.len() > EVENTS_PAGE_MAX_BYTES && !events.is_empty()
                {
                    has_more = true;
                } else if !has_more
                    && let Ok(value) = serde_json::from_slice::<serde_json::Value>(line)
                {
                    bytes += line.len();
                    events.push(value);
                    next_seq = seq;
                }
            })
            .map_err(cannot_read)?;
        if read == 0 {
            break;
        }
    }
    let last_seq = log
        .newest_seq()
        .map_err(cannot_read)?
        .unwrap_or(Seq::ZERO)
        .max(last_read);
    Ok(EventsResponse {
        session_id: id.to_string(),
        events,
        next_seq,
        last_seq,
        has_more,
    })
}

/// Ends what is left in a closed terminal's cgroup (a host that died left it; the holder
/// removes it itself otherwise), removes it and records that in `meta.json`.
fn finish_cgroup(dir: &Path, meta: &mut state_dir::TerminalMeta) {
    let Some(record) = meta.cgroup.as_mut().filter(|record| !record.is_removed) else {
        return;
    };
    crate::cgroup::tree::teardown(record);
    if let Err(error) = state_dir::write_meta(dir, meta) {
        tracing::warn!(%error, "cannot write meta.json");
    }
}

/// Removes an `expiring` terminal's directory once it closed.
fn remove_terminal_dir(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => tracing::info!(dir = %dir.display(), "removed an expiring terminal's files"),
        Err(error) => {
            tracing::warn!(%error, dir = %dir.display(), "cannot remove an expiring terminal");
        }
    }
}

/// What a closed terminal is, from its files alone.
fn closed_info(dir: &Path, log: &TerminalLog) -> Option<TerminalInfo> {
    let meta = state_dir::read_meta(dir).ok()?;
    let last_seq = log.newest_seq().ok().flatten().unwrap_or(Seq::ZERO);
    let last_activity = meta.ended_at.unwrap_or(meta.created_at);
    Some(meta.info(last_activity, None, last_seq))
}

#[cfg(test)]
mod tests;
mod workspaces;
