//! The input lease and presence of one terminal (docs/rest-v2.md#the-input-lease,
//! docs/websocket.md#presence): who holds the keyboard, who is connected, who typed last.
//!
//! The lease is a fact of the terminal's [`Hub`], the meeting point its live connections and
//! its handle already share, so a WebSocket writer and a REST caller see and change the same
//! lease without asking the actor. A connection's lease ends when the connection does; a lease
//! taken over REST has no connection to end with, so it ends at its `expires_at` unless it is
//! released or taken over first. While someone holds the lease, every other writer's input is
//! refused with `INPUT_LEASED` or waits for it to end ([`OnLease`]); what ptyhub types itself
//! (answers to terminal queries, a timeout's ^C) is never held back. This module owns the
//! rules; it does not type anything (the actor does) and knows no transport.
//!
//! Presence changes (a connection joins or leaves, the lease changes hands, typing starts or
//! stops) bump one counter that every connection watches; each connection then builds its own
//! `presence` frame, at most every [`PRESENCE_EVERY`].

use std::time::Duration;

use ptyhub_protocol::api::{LeaseInfo, OnLease};
use ptyhub_protocol::event::{InputSource, InputVia, now_ts};
use ptyhub_protocol::live::{ConnectionMode, LastInput, Presence, PresencePeer};

use tokio::time::Instant;

use super::{Connection, Hub, HubState, LiveFrame, LiveMode, TerminalHandle};
use crate::error::TerminalError;

/// Input counts as "typing" this long after it was typed.
pub const TYPING_SECS: f64 = 2.0;
/// A connection gets a `presence` frame at most this often (changes in between are merged).
pub const PRESENCE_EVERY: Duration = Duration::from_millis(250);
/// How long a lease taken over REST lasts unless its caller says, and at most.
pub const REST_LEASE_TTL_DEFAULT: Duration = Duration::from_secs(300);
pub const REST_LEASE_TTL_MAX: Duration = Duration::from_secs(3600);
/// How long input with `on_lease: "wait"` waits at most when its call has no time of its own.
pub const LEASE_WAIT_DEFAULT: Duration = Duration::from_secs(30);

/// Someone who types: a live connection (its id) or a REST caller (no connection).
#[derive(Clone, Debug)]
pub struct Writer {
    pub source: InputSource,
    pub connection: Option<u64>,
}

impl Writer {
    /// A REST (or MCP, or CLI) caller.
    pub fn caller(source: InputSource) -> Self {
        Self {
            source,
            connection: None,
        }
    }
}

/// The lease as the hub keeps it.
#[derive(Clone, Debug)]
pub(super) struct Lease {
    info: LeaseInfo,
    /// When a lease taken over REST ends by itself.
    expires: Option<Instant>,
}

impl Lease {
    /// Whether `writer` is the lease's holder: its connection, or for a lease taken over REST,
    /// any writer of the same name.
    fn is_held_by(&self, writer: &Writer) -> bool {
        match self.info.connection {
            Some(connection) => writer.connection == Some(connection),
            None => writer.source.by == self.info.by,
        }
    }

    fn is_expired(&self) -> bool {
        self.expires.is_some_and(|at| Instant::now() >= at)
    }

    fn refusal(&self) -> TerminalError {
        TerminalError::InputLeased {
            holder: self.info.by.clone(),
            via: self.info.via.as_str(),
        }
    }
}

/// The last input the actor saw in the log.
#[derive(Clone, Debug)]
pub(super) struct Typed {
    by: Option<String>,
    via: Option<InputVia>,
    at: f64,
}

impl Typed {
    fn is_typing(&self, now: f64) -> bool {
        now - self.at < TYPING_SECS
    }
}

impl HubState {
    /// The lease, once an expired one is dropped (true when it was).
    fn current_lease(&mut self) -> (Option<&Lease>, bool) {
        let is_expired = self.lease.as_ref().is_some_and(Lease::is_expired);
        if is_expired {
            self.lease = None;
        }
        (self.lease.as_ref(), is_expired)
    }
}

fn wire_mode(mode: LiveMode) -> ConnectionMode {
    match mode {
        LiveMode::Relay { .. } => ConnectionMode::Relay,
        LiveMode::Attach => ConnectionMode::Attach,
        LiveMode::Watch => ConnectionMode::Watch,
    }
}

impl Hub {
    /// Tells every connection that presence changed.
    pub(super) fn presence_changed(&self) {
        self.presence.send_modify(|version| *version += 1);
    }

    /// Who holds the keyboard now.
    pub(crate) fn lease(&self) -> Option<LeaseInfo> {
        let (lease, is_expired) = {
            let mut state = self.lock();
            let (lease, is_expired) = state.current_lease();
            (lease.map(|l| l.info.clone()), is_expired)
        };
        if is_expired {
            self.presence_changed();
        }
        lease
    }

    /// Whether `writer` may type now: nobody else holds the keyboard.
    pub(crate) fn admits(&self, writer: &Writer) -> Result<(), TerminalError> {
        let (outcome, is_expired) = {
            let mut state = self.lock();
            let (lease, is_expired) = state.current_lease();
            let outcome = match lease {
                Some(lease) if !lease.is_held_by(writer) => Err(lease.refusal()),
                _ => Ok(()),
            };
            (outcome, is_expired)
        };
        if is_expired {
            self.presence_changed();
        }
        outcome
    }

    /// Waits until `writer` may type, `limit` at most (`OnLease::Refuse`: not at all).
    pub(crate) async fn wait_admitted(
        &self,
        writer: &Writer,
        on_lease: OnLease,
        limit: Duration,
    ) -> Result<(), TerminalError> {
        let until = Instant::now() + limit;
        let mut changes = self.presence.subscribe();
        loop {
            changes.borrow_and_update();
            let refusal = match self.admits(writer) {
                Ok(()) => return Ok(()),
                Err(refusal) => refusal,
            };
            let now = Instant::now();
            if on_lease == OnLease::Refuse || now >= until {
                return Err(refusal);
            }
            // A lease taken over REST may expire with nothing else changing: look again then.
            let expires = self.lock().lease.as_ref().and_then(|l| l.expires);
            let wake = expires.map_or(until, |at| at.min(until));
            let sleep = tokio::time::sleep(wake.saturating_duration_since(now));
            tokio::select! {
                _ = changes.changed() => {}
                () = sleep => {}
            }
        }
    }

    /// `writer` takes the keyboard: when nobody else holds it, or from whoever does with
    /// `force`. A lease without a connection lasts `ttl`.
    pub(crate) fn take_lease(
        &self,
        writer: &Writer,
        force: bool,
        ttl: Option<Duration>,
    ) -> Result<LeaseInfo, TerminalError> {
        let info = {
            let mut state = self.lock();
            let (lease, _) = state.current_lease();
            if let Some(lease) = lease
                && !lease.is_held_by(writer)
                && !force
            {
                return Err(lease.refusal());
            }
            let now = now_ts();
            let ttl = writer.connection.is_none().then(|| {
                ttl.unwrap_or(REST_LEASE_TTL_DEFAULT)
                    .min(REST_LEASE_TTL_MAX)
            });
            let info = LeaseInfo {
                by: writer.source.by.clone(),
                via: writer.source.via,
                connection: writer.connection,
                since: now,
                expires_at: ttl.map(|ttl| now + ttl.as_secs_f64()),
            };
            state.lease = Some(Lease {
                info: info.clone(),
                expires: ttl.map(|ttl| Instant::now() + ttl),
            });
            info
        };
        self.presence_changed();
        Ok(info)
    }

    /// `writer` hands the keyboard back. Refused when someone else holds it and `is_strict`
    /// (a REST caller is told; a connection's release of a lease it lost is no error).
    pub(crate) fn release_lease(
        &self,
        writer: &Writer,
        is_strict: bool,
    ) -> Result<(), TerminalError> {
        let is_released = {
            let mut state = self.lock();
            let (lease, is_expired) = state.current_lease();
            match lease {
                Some(lease) if lease.is_held_by(writer) => {
                    state.lease = None;
                    true
                }
                Some(lease) if is_strict => return Err(lease.refusal()),
                _ => is_expired,
            }
        };
        if is_released {
            self.presence_changed();
        }
        Ok(())
    }

    /// Connection `id` left: a lease it held ends with it.
    pub(super) fn end_lease_of(state: &mut HubState, id: u64) {
        if state
            .lease
            .as_ref()
            .is_some_and(|l| l.info.connection == Some(id))
        {
            state.lease = None;
        }
    }

    /// The actor applied a `pty.input` event: presence changes when typing starts or someone
    /// else types.
    pub(crate) fn note_input(&self, by: Option<String>, via: Option<InputVia>, at: f64) {
        if via == Some(InputVia::Ptyhub) {
            return;
        }
        let is_news = {
            let mut state = self.lock();
            let was_typing = state
                .typed
                .as_ref()
                .is_some_and(|t| t.is_typing(at) && t.by == by && t.via == via);
            state.typed = Some(Typed { by, via, at });
            !was_typing
        };
        if is_news {
            self.presence_changed();
        }
    }

    /// When the last input stops counting as typing; `None` when it already has.
    pub(super) fn typing_ends_at(&self) -> Option<f64> {
        let state = self.lock();
        let typed = state.typed.as_ref()?;
        typed.is_typing(now_ts()).then_some(typed.at + TYPING_SECS)
    }

    /// The `presence` frame for connection `you`.
    pub(super) fn presence_for(&self, you: u64) -> Presence {
        let (presence, is_expired) = {
            let mut state = self.lock();
            let (lease, is_expired) = state.current_lease();
            let lease = lease.map(|l| l.info.clone());
            let now = now_ts();
            let presence = Presence {
                you,
                connections: state
                    .connections
                    .iter()
                    .map(|peer| PresencePeer {
                        id: peer.id,
                        by: peer.by.clone(),
                        mode: wire_mode(peer.mode),
                    })
                    .collect(),
                lease,
                last_input: state.typed.as_ref().map(|typed| LastInput {
                    by: typed.by.clone(),
                    via: typed.via,
                    at: typed.at,
                    is_typing: typed.is_typing(now),
                }),
            };
            (presence, is_expired)
        };
        if is_expired {
            self.presence_changed();
        }
        presence
    }
}

impl Connection {
    /// This connection as a writer.
    pub(super) fn writer(&self) -> Writer {
        Writer {
            source: InputSource {
                by: self.by.clone(),
                via: InputVia::Ws,
            },
            connection: Some(self.id),
        }
    }

    /// Takes the keyboard (the input lease), from whoever holds it with `force`.
    pub fn take_lease(&self, force: bool) -> Result<(), TerminalError> {
        self.require_writer("take the keyboard of")?;
        self.hub.take_lease(&self.writer(), force, None).map(|_| ())
    }

    /// Hands the keyboard back, if this connection holds it.
    pub fn release_lease(&self) -> Result<(), TerminalError> {
        self.require_writer("release the keyboard of")?;
        self.hub.release_lease(&self.writer(), false)
    }

    /// A `presence` frame is due once presence changed, [`PRESENCE_EVERY`] after the last.
    pub(super) fn schedule_presence(&mut self) {
        if !self.wants_presence {
            return;
        }
        let now = tokio::time::Instant::now();
        let earliest = self
            .presence_sent
            .as_ref()
            .map_or(now, |(_, at)| *at + PRESENCE_EVERY);
        self.presence_due.get_or_insert(earliest.max(now));
    }

    /// When to look at presence again: a due frame, or the end of typing a sent frame shows.
    pub(super) fn presence_wake_at(&self) -> Option<tokio::time::Instant> {
        let typing_ends = self
            .presence_sent
            .as_ref()
            .filter(|(sent, _)| sent.last_input.as_ref().is_some_and(|l| l.is_typing))
            .and_then(|_| self.hub.typing_ends_at())
            .map(|ends| {
                // A little after the end, so the wall clock has passed it too.
                let left = (ends - ptyhub_protocol::event::now_ts()).max(0.0) + 0.05;
                tokio::time::Instant::now() + Duration::from_secs_f64(left)
            });
        match (self.presence_due, typing_ends) {
            (Some(due), Some(ends)) => Some(due.min(ends)),
            (due, ends) => due.or(ends),
        }
    }

    /// Queues a `presence` frame if one is due and says something new; true when it did.
    pub(super) fn push_presence_if_due(&mut self) -> bool {
        let now = tokio::time::Instant::now();
        let shows_typing = self
            .presence_sent
            .as_ref()
            .is_some_and(|(sent, _)| sent.last_input.as_ref().is_some_and(|l| l.is_typing));
        let is_typing_over = shows_typing && self.hub.typing_ends_at().is_none();
        if !is_typing_over && self.presence_due.is_none_or(|due| due > now) {
            return false;
        }
        self.presence_due = None;
        let presence = self.hub.presence_for(self.id);
        if self
            .presence_sent
            .as_ref()
            .is_some_and(|(sent, _)| *sent == presence)
        {
            return false;
        }
        self.presence_sent = Some((presence.clone(), now));
        self.pending.push_back(LiveFrame::Presence(presence));
        true
    }
}

impl TerminalHandle {
    /// Who holds the keyboard (the input lease).
    pub fn lease(&self) -> Option<LeaseInfo> {
        self.live.lease()
    }

    /// `writer` takes the keyboard (from whoever holds it with `force`); a lease without a
    /// connection lasts `ttl` ([`REST_LEASE_TTL_DEFAULT`], at most
    /// [`REST_LEASE_TTL_MAX`]).
    pub fn take_lease(
        &self,
        writer: &Writer,
        force: bool,
        ttl: Option<Duration>,
    ) -> Result<LeaseInfo, TerminalError> {
        self.live.take_lease(writer, force, ttl)
    }

    /// `writer` hands the keyboard back; `INPUT_LEASED` when someone else holds it.
    pub fn release_lease(&self, writer: &Writer) -> Result<(), TerminalError> {
        self.live.release_lease(writer, true)
    }

    /// Returns once `writer` may type: at once when nobody else holds the keyboard, else
    /// `INPUT_LEASED` (`OnLease::Refuse`) or once the lease ends within `limit`.
    pub async fn wait_for_keyboard(
        &self,
        writer: &Writer,
        on_lease: OnLease,
        limit: Duration,
    ) -> Result<(), TerminalError> {
        self.live.wait_admitted(writer, on_lease, limit).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(by: &str, connection: Option<u64>) -> Writer {
        Writer {
            source: InputSource {
                by: by.to_owned(),
                via: if connection.is_some() {
                    InputVia::Ws
                } else {
                    InputVia::Rest
                },
            },
            connection,
        }
    }

    #[test]
    fn a_held_lease_refuses_every_other_writer_until_it_is_released() {
        let hub = Hub::default();
        let page = writer("1000/server", Some(1));
        let agent = writer("1000/server", None);
        assert!(hub.admits(&agent).is_ok(), "nobody holds it");
        hub.take_lease(&page, false, None)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(hub.admits(&page).is_ok());
        let refused = hub.admits(&agent).err();
        assert!(
            matches!(&refused, Some(TerminalError::InputLeased { holder, via: "ws" }) if holder == "1000/server"),
            "{refused:?}"
        );
        assert!(
            hub.take_lease(&agent, false, None).is_err(),
            "not without force"
        );
        assert!(
            hub.release_lease(&agent, true).is_err(),
            "not the holder's to release"
        );
        hub.release_lease(&page, true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(hub.admits(&agent).is_ok());
    }

    #[test]
    fn force_takes_over_and_a_leaving_connection_ends_its_lease() {
        let hub = Hub::default();
        let first = writer("alice/a", Some(1));
        let second = writer("bob/b", Some(2));
        hub.take_lease(&first, false, None)
            .unwrap_or_else(|e| panic!("{e}"));
        let taken = hub
            .take_lease(&second, true, None)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(taken.connection, Some(2));
        assert!(hub.admits(&first).is_err());
        assert!(hub.release_lease(&first, false).is_ok(), "a lost lease");
        Hub::end_lease_of(&mut hub.lock(), 2);
        assert!(hub.lease().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_rest_lease_expires_and_a_waiting_writer_then_types() {
        let hub = std::sync::Arc::new(Hub::default());
        let holder = writer("alice/cli", None);
        let other = writer("bob/bot", None);
        let lease = hub
            .take_lease(&holder, false, Some(Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(lease.expires_at.is_some());
        assert!(
            hub.admits(&writer("alice/cli", Some(7))).is_ok(),
            "a REST lease is its name's"
        );
        let refused = hub
            .wait_admitted(&other, OnLease::Wait, Duration::from_secs(1))
            .await;
        assert!(refused.is_err(), "still held after a second");
        hub.wait_admitted(&other, OnLease::Wait, Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(hub.lease().is_none(), "expired");
    }
}
