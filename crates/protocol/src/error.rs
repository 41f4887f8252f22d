//! The error model shared by every surface (docs/compatibility.md#error-codes).
//!
//! One place maps a code to its HTTP status and `retryable` flag, so REST, WebSocket `error`
//! frames, MCP and the CLI report the same failure the same way. v1 answers a few codes with
//! other statuses (docs/compatibility.md#v1-quirks); that mapping is v1's own.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A machine-readable error code. Clients match on these; they never change meaning.
#[derive(utoipa::ToSchema, Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum ErrorCode {
    /// 404: no such terminal for this owner (another owner's terminal answers the same).
    SessionNotFound,
    /// 409: the terminal's program has ended.
    SessionNotRunning,
    /// 409: reserved; closing a closed terminal answers as docs/compatibility.md#closing says.
    SessionAlreadyClosed,
    /// 404: no such job, or it is no longer running when cancelled.
    JobNotFound,
    /// 404: no command of this terminal's timeline has this id.
    CommandNotFound,
    /// 408, retryable: a new shell showed no prompt in time.
    Timeout,
    /// 409: reserved.
    Cancelled,
    /// 503, retryable: no shell or holder could be started.
    BackendUnavailable,
    /// 410, retryable: a cursor or `since_seq` older than the oldest kept event; take a
    /// snapshot again.
    CursorExpired,
    /// 400: a cursor that is malformed, ahead of the terminal, or from another terminal.
    InvalidCursor,
    /// 501: reserved for a backend without the capability (docs/windows.md#unsupported).
    Unsupported,
    /// 400 (413 for a body over 16 MiB): a malformed body, query or value; an unknown route.
    InvalidInput,
    /// 401: no credential, or a wrong one.
    Unauthenticated,
    /// 403: a missing capability, or a login cookie from a foreign `Origin`.
    PermissionDenied,
    /// 409, retryable: a command, a send or a relay is already there, or the program has left
    /// too much input unread.
    Busy,
    /// 409, retryable: someone else holds the terminal's keyboard (the input lease); the
    /// message names them. Wait for it (`on_lease: "wait"`) or take it with `force`.
    InputLeased,
    /// 429, retryable: the live limit is reached and no terminal can be reclaimed.
    LimitExceeded,
    /// 500: a fault of ptyhub itself.
    Internal,
    /// 404: no such workspace for this owner (another owner's workspace answers the same).
    WorkspaceNotFound,
    /// 409: a live terminal works in the workspace (close it first).
    WorkspaceInUse,
}

impl ErrorCode {
    /// The HTTP status this code is answered with.
    pub fn http_status(self) -> u16 {
        match self {
            Self::SessionNotFound
            | Self::JobNotFound
            | Self::CommandNotFound
            | Self::WorkspaceNotFound => 404,
            Self::SessionNotRunning
            | Self::SessionAlreadyClosed
            | Self::Busy
            | Self::InputLeased
            | Self::WorkspaceInUse => 409,
            Self::Timeout => 408,
            Self::Cancelled => 409,
            Self::BackendUnavailable => 503,
            Self::CursorExpired => 410,
            Self::InvalidCursor | Self::InvalidInput => 400,
            Self::Unsupported => 501,
            Self::Unauthenticated => 401,
            Self::PermissionDenied => 403,
            Self::LimitExceeded => 429,
            Self::Internal => 500,
        }
    }

    /// Whether the same request may succeed if simply tried again later.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Self::Busy
                | Self::InputLeased
                | Self::Timeout
                | Self::BackendUnavailable
                | Self::CursorExpired
                | Self::LimitExceeded
        )
    }

    /// The wire spelling, e.g. `SESSION_NOT_FOUND`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SessionNotFound => "SESSION_NOT_FOUND",
            Self::SessionNotRunning => "SESSION_NOT_RUNNING",
            Self::SessionAlreadyClosed => "SESSION_ALREADY_CLOSED",
            Self::JobNotFound => "JOB_NOT_FOUND",
            Self::CommandNotFound => "COMMAND_NOT_FOUND",
            Self::Timeout => "TIMEOUT",
            Self::Cancelled => "CANCELLED",
            Self::BackendUnavailable => "BACKEND_UNAVAILABLE",
            Self::CursorExpired => "CURSOR_EXPIRED",
            Self::InvalidCursor => "INVALID_CURSOR",
            Self::Unsupported => "UNSUPPORTED",
            Self::InvalidInput => "INVALID_INPUT",
            Self::Unauthenticated => "UNAUTHENTICATED",
            Self::PermissionDenied => "PERMISSION_DENIED",
            Self::Busy => "BUSY",
            Self::InputLeased => "INPUT_LEASED",
            Self::LimitExceeded => "LIMIT_EXCEEDED",
            Self::Internal => "INTERNAL",
            Self::WorkspaceNotFound => "WORKSPACE_NOT_FOUND",
            Self::WorkspaceInUse => "WORKSPACE_IN_USE",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error as a client sees it: a code and a lowercase message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    /// What went wrong, for programs.
    pub code: ErrorCode,
    /// What went wrong, for people: lowercase, no trailing period.
    pub message: String,
}

impl ApiError {
    /// An error with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// `SESSION_NOT_FOUND` for the terminal `id`.
    pub fn not_found(id: impl fmt::Display) -> Self {
        Self::new(
            ErrorCode::SessionNotFound,
            format!("session {id} not found"),
        )
    }

    /// `INVALID_INPUT` with `message`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidInput, message)
    }

    /// `INTERNAL` with `message`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    /// The `{success:false, message, error:{code, retryable}}` body.
    pub fn to_body(&self) -> ErrorBody {
        ErrorBody {
            success: false,
            message: self.message.clone(),
            error: ErrorDetail {
                code: self.code,
                retryable: self.code.is_retryable(),
            },
        }
    }
}

/// The JSON body of every failed request (docs/compatibility.md#envelope).
#[derive(utoipa::ToSchema, Clone, Debug, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Always `false`.
    pub success: bool,
    /// The error's message, for people; clients match on `error.code`, never on this.
    pub message: String,
    /// The machine-readable part.
    pub error: ErrorDetail,
}

/// The `error` object of an [`ErrorBody`].
#[derive(utoipa::ToSchema, Clone, Debug, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// The error's code, e.g. `BUSY`.
    pub code: ErrorCode,
    /// Whether the same request may succeed if simply tried again later (see
    /// [`ErrorCode::is_retryable`]).
    pub retryable: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_serialize_as_their_wire_spelling() {
        let json = serde_json::to_string(&ErrorCode::SessionNotFound).ok();
        assert_eq!(json.as_deref(), Some("\"SESSION_NOT_FOUND\""));
        assert_eq!(ErrorCode::LimitExceeded.as_str(), "LIMIT_EXCEEDED");
        assert_eq!(ErrorCode::LimitExceeded.http_status(), 429);
        assert!(ErrorCode::Busy.is_retryable());
        assert!(!ErrorCode::InvalidInput.is_retryable());
    }
}
