//! Every error a client sees is shaped here, once: an error of the core
//! ([`ptyhub_core::error::TerminalError`]) or of a transport ([`ApiError`]) becomes the HTTP
//! status and `{success:false, message, error:{code, retryable}}` body of REST v2 and v1, the
//! `error` frame of a WebSocket, or the text of a failed MCP tool call. The surfaces differ
//! only where a compatibility contract says so (docs/compatibility.md#error-codes and
//! #v1-quirks).

use axum::http::StatusCode;
use ptyhub_core::error::TerminalError;
use ptyhub_protocol::error::{ApiError, ErrorBody, ErrorCode};
use ptyhub_protocol::live::{FrameError, ServerFrame};

/// Where an error is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Surface {
    /// REST v2 and the web pages: each code has its own status.
    RestV2,
    /// REST v1: `BUSY`, `TIMEOUT` and `SESSION_NOT_RUNNING` answer 400, as the compatible
    /// API does (a client that retries on 409 would run a command twice).
    RestV1,
    /// A WebSocket `error` frame (then the connection closes).
    WebSocket,
    /// A failed MCP tool call: `CODE: message (retryable: bool)`.
    Mcp,
}

/// An error as one surface answers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError {
    /// The HTTP status (REST; the upgrade refusal of a WebSocket).
    pub status: StatusCode,
    pub error: ApiError,
}

impl WireError {
    /// The one mapping from an error to what `surface` answers.
    pub fn new(error: impl Into<ApiError>, surface: Surface) -> Self {
        let error = error.into();
        let status = match (surface, error.code) {
            (
                Surface::RestV1,
                ErrorCode::Busy | ErrorCode::Timeout | ErrorCode::SessionNotRunning,
            ) => StatusCode::BAD_REQUEST,
            (_, code) => StatusCode::from_u16(code.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        };
        Self { status, error }
    }

    /// The REST body.
    pub fn body(&self) -> ErrorBody {
        self.error.to_body()
    }

    /// The WebSocket `error` frame.
    pub fn frame(&self) -> ServerFrame {
        ServerFrame::error(&self.error)
    }

    /// The answer of a WebSocket `exec` frame whose command did not run.
    pub fn exec_frame(&self, request_id: Option<String>) -> ServerFrame {
        ServerFrame::ExecResult {
            request_id,
            result: None,
            error: Some(FrameError::from(&self.error)),
        }
    }

    /// The text of a failed MCP tool call.
    pub fn tool_text(&self) -> String {
        format!(
            "{}: {} (retryable: {})",
            self.error.code,
            self.error.message,
            self.error.code.is_retryable()
        )
    }
}

impl From<TerminalError> for WireError {
    fn from(error: TerminalError) -> Self {
        Self::new(error, Surface::RestV2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_answers_400_where_v2_answers_the_code_status() {
        let busy = TerminalError::CommandRunning;
        assert_eq!(
            WireError::new(busy.clone(), Surface::RestV2).status,
            StatusCode::CONFLICT
        );
        assert_eq!(
            WireError::new(busy.clone(), Surface::RestV1).status,
            StatusCode::BAD_REQUEST
        );
        let gone = TerminalError::not_found("t-1");
        assert_eq!(
            WireError::new(gone, Surface::RestV1).status,
            StatusCode::NOT_FOUND
        );
        let text = WireError::new(busy, Surface::Mcp).tool_text();
        assert_eq!(
            text,
            "BUSY: Session already has a running command (retryable: true)"
        );
    }
}
