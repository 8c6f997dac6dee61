//! The adapter's one error enum, mapped once onto each shape it is answered in: the agent
//! API's (the HTTP status, and the same number in `_code` with `_message`) and the operator
//! API's `{"error": {...}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kep_core::http::ApiError;
use kep_core::limits::Refusal;

#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    /// A required header is absent.
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    /// A header is present but not in its documented form (`ID <id>`, `DSID <session>`, …).
    #[error("malformed header {0}: {1}")]
    MalformedHeader(&'static str, String),
    /// A body axum could not take (not multipart, unreadable, too large).
    #[error("{1}")]
    Rejected(StatusCode, String),
    /// A body that breaks the document's rules.
    #[error("{0}")]
    BadRequest(String),
    /// An operator request field that breaks a rule; `field` names it.
    #[error("{field}: {message}")]
    InvalidField { field: String, message: String },
    /// The secret key is not the org's.
    #[error("invalid secret key")]
    Unauthorized,
    /// No such session or file for this org.
    #[error("{0}")]
    NotFound(String),
    /// A call out of order for the session's state.
    #[error("{0}")]
    Conflict(String),
    #[error("file is over {0} bytes")]
    PayloadTooLarge(u64),
    /// Over the org's (or, unauthenticated, the peer's) rate or calls in flight.
    #[error(transparent)]
    TooManyRequests(#[from] Refusal),
    #[error("internal error")]
    Internal(#[from] anyhow::Error),
}

impl From<sqlx::Error> for AdapterError {
    fn from(e: sqlx::Error) -> Self {
        AdapterError::Internal(e.into())
    }
}

impl AdapterError {
    pub fn invalid_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        AdapterError::InvalidField {
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            AdapterError::MissingHeader(_)
            | AdapterError::MalformedHeader(..)
            | AdapterError::BadRequest(_)
            | AdapterError::InvalidField { .. } => StatusCode::BAD_REQUEST,
            AdapterError::Rejected(status, _) => *status,
            AdapterError::Unauthorized => StatusCode::UNAUTHORIZED,
            AdapterError::NotFound(_) => StatusCode::NOT_FOUND,
            AdapterError::Conflict(_) => StatusCode::CONFLICT,
            AdapterError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            AdapterError::TooManyRequests(_) => StatusCode::TOO_MANY_REQUESTS,
            AdapterError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<axum::extract::rejection::BytesRejection> for AdapterError {
    fn from(r: axum::extract::rejection::BytesRejection) -> Self {
        AdapterError::Rejected(r.status(), r.body_text())
    }
}

impl From<axum::extract::multipart::MultipartRejection> for AdapterError {
    fn from(r: axum::extract::multipart::MultipartRejection) -> Self {
        AdapterError::Rejected(r.status(), r.body_text())
    }
}

/// `{_code, _message}` with the status as both.
pub fn status_body(status: StatusCode, message: &str) -> Response {
    let body = kep_api::adapter::Status {
        _code: status.as_u16(),
        _message: message.to_owned(),
    };
    (status, axum::Json(body)).into_response()
}

/// A refusal made before routing (a head too large or malformed), in the `{_code,
/// _message}` shape. It carries no `X-Request-Id`: the request was never read.
pub fn unrouted(status: StatusCode, why: &str) -> serde_json::Value {
    serde_json::json!({ "_code": status.as_u16(), "_message": why })
}

impl IntoResponse for AdapterError {
    fn into_response(self) -> Response {
        if let AdapterError::Internal(e) = &self {
            tracing::error!(error = ?e, "adapter internal error");
        }
        let mut res = status_body(self.status(), &self.to_string());
        if let AdapterError::TooManyRequests(refusal) = &self {
            refusal.set_retry_after(res.headers_mut());
        }
        res
    }
}

impl From<AdapterError> for ApiError {
    fn from(e: AdapterError) -> Self {
        match e {
            AdapterError::InvalidField { field, message } => {
                ApiError::invalid_field(field, message)
            }
            AdapterError::NotFound(m) => ApiError::not_found(m),
            AdapterError::Conflict(m) => ApiError::conflict(m),
            AdapterError::TooManyRequests(refusal) => refusal.into(),
            AdapterError::Internal(e) => ApiError::internal(format!("{e:#}")),
            other => ApiError::new(other.status(), "invalid", other.to_string()),
        }
    }
}

/// An adapter error answered in the operator API's shape: what operator handlers return,
/// so that `?` takes the service's errors and the operator extractors' alike.
#[derive(Debug)]
pub struct Operator(ApiError);

impl IntoResponse for Operator {
    fn into_response(self) -> Response {
        self.0.into_response()
    }
}

impl From<ApiError> for Operator {
    fn from(e: ApiError) -> Self {
        Operator(e)
    }
}

impl From<AdapterError> for Operator {
    fn from(e: AdapterError) -> Self {
        Operator(e.into())
    }
}

impl From<sqlx::Error> for Operator {
    fn from(e: sqlx::Error) -> Self {
        AdapterError::from(e).into()
    }
}

impl From<std::io::Error> for Operator {
    fn from(e: std::io::Error) -> Self {
        AdapterError::Internal(e.into()).into()
    }
}
