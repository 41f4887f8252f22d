//! REST v2 routes of the `rootfs` backend and workspaces (docs/rest-v2.md#rootfs):
//! `POST /v2/backends/{type}/install` (start or join the install of a backend's root
//! filesystem; answers at once with its progress) and `GET /v2/workspaces`,
//! `GET|DELETE /v2/workspaces/{id}`. Thin, as every v2 handler: the rules are the core's
//! (`ptyhub_core::backend::rootfs_install`, `Registry::delete_workspace`).

use axum::Extension;
use axum::Json;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use ptyhub_core::error::TerminalError;
use ptyhub_protocol::api::{BackendKind, Envelope};
use ptyhub_protocol::rootfs::{InstallProgress, WorkspaceInfo, WorkspacesResponse};

use crate::AppState;
use crate::auth::{Operation, Principal};
use crate::http_error::HttpError;

type Answer<T> = Result<Json<Envelope<T>>, HttpError>;

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v2/backends/{kind}/install", post(install))
        .route("/v2/workspaces", get(list))
        .route("/v2/workspaces/{id}", get(status).delete(delete))
}

#[utoipa::path(post, path = "/v2/backends/{type}/install", tag = "v2", operation_id = "v2_backend_install", params(("type" = String, Path, description = "the backend (rootfs)")), responses((status = 200, description = "the install's progress, inside the {success, message, data} envelope", body = Envelope<InstallProgress>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
pub(super) async fn install(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(kind): Path<String>,
) -> Answer<InstallProgress> {
    // Installing only makes creating possible.
    principal.allow(Operation::Create)?;
    let unknown = || {
        TerminalError::invalid(format!(
            "backend {:?} has nothing to install (rootfs does)",
            ptyhub_protocol::ids::truncate_for_message(&kind)
        ))
    };
    let kind = BackendKind::parse(&kind).ok_or_else(unknown)?;
    let backend = state.registry.backends().for_kind(kind);
    if backend.kind() != kind {
        return Err(TerminalError::invalid(format!("this server has no {kind} backend")).into());
    }
    let progress = backend.install().ok_or_else(unknown)?;
    Ok(Json(Envelope::ok("Install", progress)))
}

#[utoipa::path(get, path = "/v2/workspaces", tag = "v2", operation_id = "v2_workspaces", responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<WorkspacesResponse>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
pub(super) async fn list(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
) -> Answer<WorkspacesResponse> {
    principal.allow(Operation::Read)?;
    let workspaces = state.registry.workspaces(&principal.owner).await;
    Ok(Json(Envelope::ok(
        "Workspaces",
        WorkspacesResponse { workspaces },
    )))
}

#[utoipa::path(get, path = "/v2/workspaces/{id}", tag = "v2", operation_id = "v2_workspace", params(("id" = String, Path, description = "the workspace id")), responses((status = 200, description = "inside the {success, message, data} envelope", body = Envelope<WorkspaceInfo>), (status = "4XX", description = "an error: {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
pub(super) async fn status(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Answer<WorkspaceInfo> {
    principal.allow(Operation::Read)?;
    let info = state.registry.workspace(&principal.owner, &id).await?;
    Ok(Json(Envelope::ok("Workspace", info)))
}

#[utoipa::path(delete, path = "/v2/workspaces/{id}", tag = "v2", operation_id = "v2_workspace_delete", params(("id" = String, Path, description = "the workspace id")), responses((status = 200, description = "deleted, inside the {success, message, data} envelope"), (status = "4XX", description = "an error (WORKSPACE_IN_USE while a live terminal uses it): {success: false, message, error: {code, retryable}}", body = ptyhub_protocol::error::ErrorBody)))]
pub(super) async fn delete(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Answer<serde_json::Value> {
    principal.allow(Operation::Close)?;
    state
        .registry
        .delete_workspace(&principal.owner, &id)
        .await?;
    Ok(Json(Envelope::ok(
        "Workspace deleted",
        serde_json::json!({ "id": id, "deleted": true }),
    )))
}
