//! Turning errors and bad requests into the wire's error envelope.
//!
//! Every failure leaves as `{success:false, message, error:{code, retryable}}` with the code's
//! HTTP status ([`ErrorCode::http_status`]); bodies that do not parse, or are too large, are
//! `INVALID_INPUT` with a message that says what was wrong.

use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use ptyhub_core::error::TerminalError;
use ptyhub_protocol::error::{ApiError, ErrorCode};

use crate::wire_error::{Surface, WireError};
use serde::de::DeserializeOwned;

/// An error as a REST route answers it: the [`WireError`] that [`crate::wire_error`] made
/// of it (status and body), or a body that could not be read.
pub struct HttpError(WireError);

impl From<WireError> for HttpError {
    fn from(wire: WireError) -> Self {
        Self(wire)
    }
}

impl From<ApiError> for HttpError {
    fn from(error: ApiError) -> Self {
        WireError::new(error, Surface::RestV2).into()
    }
}

impl From<TerminalError> for HttpError {
    fn from(error: TerminalError) -> Self {
        WireError::new(error, Surface::RestV2).into()
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let Self(wire) = self;
        if wire.status.is_server_error() {
            tracing::warn!(code = %wire.error.code, message = %wire.error.message, "request failed");
        }
        (wire.status, axum::Json(wire.body())).into_response()
    }
}

/// A JSON body whose rejections become `INVALID_INPUT`. An empty body reads as `{}`; the
/// content type is not required (`curl -d` sends a form type by default).
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = HttpError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                let status = rejection.status();
                let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
                    "request body too large".to_owned()
                } else {
                    format!("cannot read the request body: {}", rejection.body_text())
                };
                HttpError(WireError {
                    status: if status.is_client_error() {
                        status
                    } else {
                        StatusCode::BAD_REQUEST
                    },
                    error: ApiError::new(ErrorCode::InvalidInput, message),
                })
            })?;
        let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        serde_json::from_slice(text)
            .map(Self)
            .map_err(|e| HttpError::from(ApiError::invalid(format!("invalid JSON body: {e}"))))
    }
}

/// A query string whose rejections become `INVALID_INPUT`.
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Self(value)),
            Err(rejection) => Err(query_rejection(&rejection)),
        }
    }
}

fn query_rejection(rejection: &QueryRejection) -> HttpError {
    HttpError::from(ApiError::invalid(format!(
        "invalid query: {}",
        rejection.body_text()
    )))
}

/// A fallback for unknown routes.
pub async fn no_route() -> HttpError {
    HttpError(WireError {
        status: StatusCode::NOT_FOUND,
        error: ApiError::new(ErrorCode::InvalidInput, "no such route"),
    })
}
