//! The serving service's one error enum, mapped once onto the operator error shape
//! `{"error": {"code", "message", "field"?}}` (the gateway's own enum answers in it too).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kep_core::http::ApiError;

#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    /// A request field breaks a rule of the document; `field` names it.
    #[error("{message}")]
    InvalidField { field: String, message: String },
    #[error("{0}")]
    NotFound(String),
    /// The call does not fit the current state (a name taken, a responder deleted …).
    #[error("{0}")]
    Conflict(String),
    /// A deployment whose image or model has been deleted cannot be edited.
    #[error("{0}")]
    SourceDeleted(String),
    /// The workspace compute quota has no room for the deployment's instances.
    #[error("{0}")]
    QuotaExceeded(String),
    #[error("request body is over {0} bytes")]
    PayloadTooLarge(u64),
    /// The container engine does not answer; the message names the socket(s) tried.
    #[error("{0}")]
    EngineUnavailable(String),
    /// A request body that could not be read.
    #[error("{0}")]
    BadRequest(String),
    /// A change the API does not make in place.
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("internal error")]
    Internal(#[from] anyhow::Error),
}

impl ServingError {
    pub(crate) fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        ServingError::InvalidField {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl From<sqlx::Error> for ServingError {
    fn from(e: sqlx::Error) -> Self {
        ServingError::Internal(e.into())
    }
}

impl From<std::io::Error> for ServingError {
    fn from(e: std::io::Error) -> Self {
        ServingError::Internal(e.into())
    }
}

impl From<ServingError> for ApiError {
    fn from(e: ServingError) -> Self {
        let message = e.to_string();
        let (status, code) = match e {
            ServingError::InvalidField { field, message } => {
                return ApiError::invalid_field(field, message);
            }
            ServingError::Internal(e) => return ApiError::internal(format!("{e:#}")),
            ServingError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ServingError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            ServingError::SourceDeleted(_) => (StatusCode::CONFLICT, "source_deleted"),
            ServingError::QuotaExceeded(_) => (StatusCode::CONFLICT, "quota_exceeded"),
            ServingError::PayloadTooLarge(_) => {
                (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
            }
            ServingError::EngineUnavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "engine_unavailable")
            }
            ServingError::BadRequest(_) => (StatusCode::BAD_REQUEST, "invalid_body"),
            ServingError::MethodNotAllowed(_) => {
                (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
            }
        };
        ApiError::new(status, code, message)
    }
}

impl IntoResponse for ServingError {
    fn into_response(self) -> Response {
        ApiError::from(self).into_response()
    }
}
