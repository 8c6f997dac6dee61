//! The gateway's one error enum, mapped once onto the operator error shape
//! `{"error": {"code", "message"}}` that the management API answers in too (CONTRACT §3).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kep_core::http::ApiError;
use kep_core::limits::Refusal;

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// A path outside `/endpoints/{endpoint}/{path}`.
    #[error("{0}")]
    NotFound(String),
    #[error("request body is over {0} bytes")]
    PayloadTooLarge(u64),
    /// An endpoint call without the endpoint's API key (or to an unknown endpoint: names
    /// are not disclosed).
    #[error("no endpoint of this name accepts this API key")]
    Unauthorized,
    #[error("endpoint {0} has no ready instance")]
    NoReadyInstance(String),
    /// The instance could not be reached or broke off its answer.
    #[error("{0}")]
    BadGateway(String),
    #[error("the instance did not answer within {0} s")]
    GatewayTimeout(u64),
    /// A request body that could not be read, or a path that is not one.
    #[error("{0}")]
    BadRequest(String),
    /// Over the endpoint's (or, without its key, the peer's) rate or calls in flight.
    #[error(transparent)]
    TooManyRequests(#[from] Refusal),
    /// Spooling a large body to disk failed.
    #[error("internal error")]
    Internal(#[from] std::io::Error),
}

impl From<GatewayError> for ApiError {
    fn from(e: GatewayError) -> Self {
        let message = e.to_string();
        let (status, code) = match e {
            GatewayError::Internal(e) => return ApiError::internal(e),
            GatewayError::TooManyRequests(refusal) => return ApiError::from(refusal),
            GatewayError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            GatewayError::PayloadTooLarge(_) => {
                (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
            }
            GatewayError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            GatewayError::NoReadyInstance(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "no_ready_instance")
            }
            GatewayError::BadGateway(_) => (StatusCode::BAD_GATEWAY, "bad_gateway"),
            GatewayError::GatewayTimeout(_) => (StatusCode::GATEWAY_TIMEOUT, "gateway_timeout"),
            GatewayError::BadRequest(_) => (StatusCode::BAD_REQUEST, "invalid_body"),
        };
        ApiError::new(status, code, message)
    }
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        let unauthorized = matches!(self, GatewayError::Unauthorized);
        let mut res = ApiError::from(self).into_response();
        if unauthorized {
            res.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        res
    }
}
