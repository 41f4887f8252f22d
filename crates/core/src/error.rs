//! The one error type of the terminal core. Each variant is a failure a client can meet, with
//! what it needs to say; [`TerminalError::code`] gives its wire code, and the server maps it
//! to every surface (HTTP status, the v1 statuses, WebSocket error frames, MCP results) in one
//! place (`crates/server/src/wire_error.rs`). Messages are the wire's, so a conversion into
//! [`ApiError`] loses nothing.

use ptyhub_protocol::error::{ApiError, ErrorCode};

/// Why a request about a terminal failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TerminalError {
    /// No terminal of this owner has this id (another owner's looks exactly the same).
    #[error("session {id} not found")]
    NotFound { id: String },
    /// The terminal's program exited.
    #[error("session {id} is not running (its program exited)")]
    NotRunning { id: String },
    /// The connection to the terminal's host broke.
    #[error("holder link: {detail}")]
    HostGone { detail: String },
    /// A command runs already (the wording is the compatible API's).
    #[error("Session already has a running command")]
    CommandRunning,
    /// Another `send` waits on this terminal.
    #[error("another send is in progress on this terminal")]
    SendInProgress,
    /// A relay connection is there already.
    #[error("{}", crate::terminal::live::RELAY_BUSY_MESSAGE)]
    RelayBusy,
    /// The host refused input (its queue is full: the program does not read).
    #[error("{reason}")]
    InputRefused { reason: String },
    /// Someone else holds the terminal's keyboard (the input lease).
    #[error(
        "the keyboard is held by {holder} (via {via}): nothing was typed; wait for it (on_lease: \"wait\") or take it over (force)"
    )]
    InputLeased { holder: String, via: &'static str },
    /// No job has this id (`job` as the client wrote it).
    #[error("job {job} not found")]
    JobNotFound { job: String },
    /// No command of the terminal's timeline has this id (as the client wrote it).
    #[error("command {id} not found in this terminal's timeline")]
    CommandNotFound { id: String },
    /// No command runs that could be cancelled.
    #[error("no such running job (it may have ended)")]
    NoRunningJob,
    /// A new shell has not shown its first prompt (its startup files still run); `screen` is
    /// what its screen ends with, which often says why.
    #[error(
        "the shell has not shown its first prompt yet (its startup files still run){}",
        screen_tail(screen)
    )]
    FirstPromptTimeout { screen: String },
    /// A cursor or `since_seq` that is not one of this terminal's positions.
    #[error("{detail}")]
    InvalidCursor { detail: String },
    /// A position older than the history the log keeps.
    #[error("{detail}")]
    CursorExpired { detail: String },
    /// As many attachments as one terminal takes.
    #[error("at most {max} attachments on one terminal")]
    TooManyAttachments { max: usize },
    /// As many live terminals as the server runs, none of which may be closed.
    #[error(
        "at most {max} live terminals, and every one runs a command or has a live connection; close one first"
    )]
    TooManyTerminals { max: usize },
    /// A watcher tried to write.
    #[error("a watcher cannot {what} the terminal (connect with mode=attach)")]
    WatcherCannot { what: &'static str },
    /// The terminal's host could not start it.
    #[error("cannot start the terminal: {reason}")]
    LaunchFailed { reason: String },
    /// No shell to run was found.
    #[error("no shell found")]
    NoShell,
    /// No workspace of this owner has this id (another owner's looks exactly the same).
    #[error("workspace {id} not found")]
    WorkspaceNotFound { id: String },
    /// Live terminals work in the workspace.
    #[error("workspace {id} is in use by {}: close them first", terminals.join(", "))]
    WorkspaceInUse { id: String, terminals: Vec<String> },
    /// The request itself is wrong.
    #[error("{0}")]
    Invalid(String),
    /// An error already shaped for the wire (the protocol crate's validation of ids and sizes).
    #[error(transparent)]
    Wire(ApiError),
    /// Something ptyhub itself failed at (a file it could not read or write).
    #[error("{0}")]
    Internal(String),
}

impl TerminalError {
    /// The wire code clients match on.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::NotFound { .. } => ErrorCode::SessionNotFound,
            Self::NotRunning { .. } | Self::HostGone { .. } => ErrorCode::SessionNotRunning,
            Self::CommandRunning
            | Self::SendInProgress
            | Self::RelayBusy
            | Self::InputRefused { .. } => ErrorCode::Busy,
            Self::InputLeased { .. } => ErrorCode::InputLeased,
            Self::JobNotFound { .. } | Self::NoRunningJob => ErrorCode::JobNotFound,
            Self::CommandNotFound { .. } => ErrorCode::CommandNotFound,
            Self::FirstPromptTimeout { .. } => ErrorCode::Timeout,
            Self::InvalidCursor { .. } => ErrorCode::InvalidCursor,
            Self::CursorExpired { .. } => ErrorCode::CursorExpired,
            Self::TooManyAttachments { .. } | Self::TooManyTerminals { .. } => {
                ErrorCode::LimitExceeded
            }
            Self::WatcherCannot { .. } => ErrorCode::PermissionDenied,
            Self::LaunchFailed { .. } | Self::NoShell => ErrorCode::BackendUnavailable,
            Self::WorkspaceNotFound { .. } => ErrorCode::WorkspaceNotFound,
            Self::WorkspaceInUse { .. } => ErrorCode::WorkspaceInUse,
            Self::Invalid(_) => ErrorCode::InvalidInput,
            Self::Wire(error) => error.code,
            Self::Internal(_) => ErrorCode::Internal,
        }
    }

    /// `CURSOR_EXPIRED`: the log no longer keeps where a cursor points, as `detail` says
    /// (counted for `/metrics`).
    pub fn cursor_expired(detail: impl Into<String>) -> Self {
        crate::stats::global().cursor_expired();
        Self::CursorExpired {
            detail: detail.into(),
        }
    }

    /// No terminal `id` (of this owner).
    pub fn not_found(id: impl std::fmt::Display) -> Self {
        Self::NotFound { id: id.to_string() }
    }

    /// The request is wrong, as `message` says.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid(message.into())
    }

    /// ptyhub failed, as `message` says.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::Internal(message.into())
    }
}

impl From<ApiError> for TerminalError {
    fn from(error: ApiError) -> Self {
        Self::Wire(error)
    }
}

impl From<TerminalError> for ApiError {
    fn from(error: TerminalError) -> Self {
        match error {
            TerminalError::Wire(error) => error,
            other => ApiError::new(other.code(), other.to_string()),
        }
    }
}

/// ": its screen ends with …" for an error's message, or nothing for a blank screen.
fn screen_tail(screen: &str) -> String {
    if screen.trim().is_empty() {
        String::new()
    } else {
        format!("; its screen ends with: {screen}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_errors_pass_through_and_others_keep_their_message() {
        let wire = ApiError::invalid("bad id");
        assert_eq!(ApiError::from(TerminalError::from(wire.clone())), wire);
        let busy = ApiError::from(TerminalError::CommandRunning);
        assert_eq!(busy.code, ErrorCode::Busy);
        assert_eq!(busy.message, "Session already has a running command");
        let gone = ApiError::from(TerminalError::not_found("t-1"));
        assert_eq!(gone.message, "session t-1 not found");
    }
}
