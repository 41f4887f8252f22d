//! Wire and event-log types of ptyhub.
//!
//! This crate owns every shape that crosses a process boundary: the lines of a terminal's
//! `events.jsonl` ([`event`]), the holder ↔ server protocol ([`holder`]), the REST payloads
//! ([`api`]) and the error model ([`error`]). It has no runtime and no I/O, so the holder, the
//! server, the client and the tests agree on one definition of each.

#![deny(missing_docs)]

pub mod api;
pub mod error;
pub mod event;
pub mod holder;
pub mod ids;
pub mod live;
pub mod rootfs;

pub use error::{ApiError, ErrorCode};
pub use event::{Event, EventKind, Seq};
pub use ids::{TermSize, TerminalId};
