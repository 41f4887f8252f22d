//! Closing a terminal over REST, as v1 (`DELETE /v1/shell/sessions/{id}`) and v2
//! (`DELETE /v2/pty/sessions/{id}`) both answer it: closing a gone id is not a failure, so it
//! answers 200 with `success: false` and the not-found error (docs/compatibility.md#closing);
//! other failures are returned for the caller to map with its own statuses. The capability
//! check is the caller's; what closing does to the terminal is the registry's.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ptyhub_core::error::TerminalError;
use ptyhub_protocol::api::{CloseResponse, Envelope};
use ptyhub_protocol::error::ApiError;

use crate::AppState;
use crate::auth::Principal;
use crate::wire_error::{Surface, WireError};

/// Closes `principal`'s terminal `id` and answers with `message`, or 200 `success: false` when
/// there is no such terminal.
pub async fn close_answer(
    state: &AppState,
    principal: &Principal,
    id: &str,
    message: &str,
) -> Result<Response, ApiError> {
    match state.registry.close(&principal.owner, id).await {
        Ok(closed) => Ok(Json(Envelope::<CloseResponse>::ok(message, closed)).into_response()),
        Err(error @ TerminalError::NotFound { .. }) => {
            let body = WireError::new(error, Surface::RestV2).body();
            Ok((StatusCode::OK, Json(body)).into_response())
        }
        Err(error) => Err(error.into()),
    }
}
