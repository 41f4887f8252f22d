//! The input lease over REST (docs/rest-v2.md#the-input-lease): see who holds a terminal's
//! keyboard, take it, hand it back. Thin: the rules (who may type while someone holds it,
//! force, expiry) are the core's (`ptyhub_core::terminal::live`, its `lease` module); a
//! lease taken here has no connection to end with, so it lasts `ttl_secs`.

use std::time::Duration;

use axum::Extension;
use axum::Json;
use axum::extract::{Path, State};
use ptyhub_core::exec::parse_seconds;
use ptyhub_core::terminal::live::Writer;
use ptyhub_protocol::api::{Envelope, LeaseParams, LeaseResponse};

use crate::AppState;
use crate::auth::{Operation, Principal};
use crate::http_error::{HttpError, JsonBody};

type Answer = Result<Json<Envelope<LeaseResponse>>, HttpError>;

fn answer(
    message: &str,
    session_id: String,
    lease: Option<ptyhub_protocol::api::LeaseInfo>,
) -> Answer {
    Ok(Json(Envelope::ok(
        message,
        LeaseResponse { session_id, lease },
    )))
}

#[utoipa::path(get, path = "/v2/pty/sessions/{id}/lease", tag = "v2", operation_id = "v2_lease_get", params(("id" = String, Path, description = "the terminal id")), responses((status = 200, description = "who holds the keyboard, inside the {success, message, data} envelope", body = Envelope<LeaseResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
pub(super) async fn get(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Answer {
    principal.allow(Operation::Read)?;
    let handle = state.registry.get(&principal.owner, &id).await?;
    answer("Lease read", id, handle.lease())
}

#[utoipa::path(post, path = "/v2/pty/sessions/{id}/lease", tag = "v2", operation_id = "v2_lease_take", params(("id" = String, Path, description = "the terminal id")), request_body = LeaseParams, responses((status = 200, description = "the caller holds the keyboard, inside the {success, message, data} envelope", body = Envelope<LeaseResponse>), (status = "4XX", description = "an error (INPUT_LEASED: someone else holds it): {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
pub(super) async fn take(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    JsonBody(params): JsonBody<LeaseParams>,
) -> Answer {
    principal.allow(Operation::Type)?;
    let ttl: Option<Duration> = parse_seconds("ttl_secs", params.ttl_secs)?;
    let handle = state.registry.get(&principal.owner, &id).await?;
    let lease = handle.take_lease(&Writer::caller(principal.source()), params.force, ttl)?;
    answer("Lease taken", id, Some(lease))
}

#[utoipa::path(delete, path = "/v2/pty/sessions/{id}/lease", tag = "v2", operation_id = "v2_lease_release", params(("id" = String, Path, description = "the terminal id")), responses((status = 200, description = "nobody holds the keyboard any more (lease: null), inside the {success, message, data} envelope", body = Envelope<LeaseResponse>), (status = "4XX", description = "an error (INPUT_LEASED: someone else holds it): {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
pub(super) async fn release(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Answer {
    principal.allow(Operation::Type)?;
    let handle = state.registry.get(&principal.owner, &id).await?;
    handle.release_lease(&Writer::caller(principal.source()))?;
    answer("Lease released", id, handle.lease())
}
