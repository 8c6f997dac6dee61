//! The serving service's one error enum, mapped once onto the operator error shape
//! `{"error": {"code", "message", "field"?}}`, which the gateway answers in too.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kep_core::http::ApiError;
use kep_core::limits::Refusal;

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
    /// An endpoint call without the endpoint's API key.
    #[error("no endpoint of this name accepts this API key")]
    Unauthorized,
    #[error("endpoint {0} has no ready instance")]
    NoReadyInstance(String),
    /// The instance could not be reached or broke off its answer.
    #[error("{0}")]
    BadGateway(String),
    #[error("the instance did not answer within {0} s")]
    GatewayTimeout(u64),
    /// A request body that could not be read.
    #[error("{0}")]
    BadRequest(String),
    /// Over the endpoint's (or, without its key, the peer's) rate or calls in flight.
    #[error(transparent)]
    TooManyRequests(#[from] Refusal),
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
            ServingError::TooManyRequests(refusal) => return ApiError::from(refusal),
            ServingError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ServingError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            ServingError::SourceDeleted(_) => (StatusCode::CONFLICT, "source_deleted"),
            ServingError::QuotaExceeded(_) => (StatusCode::CONFLICT, "quota_exceeded"),
            ServingError::PayloadTooLarge(_) => {
                (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
            }
            ServingError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ServingError::NoReadyInstance(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "no_ready_instance")
            }
            ServingError::BadGateway(_) => (StatusCode::BAD_GATEWAY, "bad_gateway"),
            ServingError::GatewayTimeout(_) => (StatusCode::GATEWAY_TIMEOUT, "gateway_timeout"),
            ServingError::BadRequest(_) => (StatusCode::BAD_REQUEST, "invalid_body"),
        };
        ApiError::new(status, code, message)
    }
}

impl IntoResponse for ServingError {
    fn into_response(self) -> Response {
        let unauthorized = matches!(self, ServingError::Unauthorized);
        let mut res = ApiError::from(self).into_response();
        if unauthorized {
            res.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        res
    }
}
