//! The error model shared by every surface (DESIGN.md "errors"; seed 003's codes).
//!
//! One place maps a code to its HTTP status and `retryable` flag, so REST, the CLI and (later)
//! MCP report the same failure the same way.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A machine-readable error code. Clients match on these; they never change meaning.
#[derive(utoipa::ToSchema, Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum ErrorCode {
    SessionNotFound,
    SessionNotRunning,
    SessionAlreadyClosed,
    JobNotFound,
    Timeout,
    Cancelled,
    BackendUnavailable,
    CursorExpired,
    InvalidCursor,
    Unsupported,
    InvalidInput,
    Unauthenticated,
    PermissionDenied,
    Busy,
    LimitExceeded,
    Internal,
}

impl ErrorCode {
    /// The HTTP status this code is answered with.
    pub fn http_status(self) -> u16 {
        match self {
            Self::SessionNotFound | Self::JobNotFound => 404,
            Self::SessionNotRunning | Self::SessionAlreadyClosed | Self::Busy => 409,
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
            Self::LimitExceeded => "LIMIT_EXCEEDED",
            Self::Internal => "INTERNAL",
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
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub fn not_found(id: impl fmt::Display) -> Self {
        Self::new(
            ErrorCode::SessionNotFound,
            format!("session {id} not found"),
        )
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidInput, message)
    }

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

/// The JSON body of every failed request.
#[derive(utoipa::ToSchema, Clone, Debug, Serialize, Deserialize)]
pub struct ErrorBody {
    pub success: bool,
    pub message: String,
    pub error: ErrorDetail,
}

#[derive(utoipa::ToSchema, Clone, Debug, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: ErrorCode,
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
