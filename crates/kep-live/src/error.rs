//! The live service's one error enum, mapped once onto each shape it is answered in: the
//! JSON-RPC error object, the participants' `{"type":"error"}` frame, a WHIP/WHEP refusal
//! and the operator API's `{"error": {...}}`.

use crate::ids::RoomId;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kep_api::live::ServerMessage;
use kep_core::http::ApiError;
use kep_core::limits::Refusal;
use serde_json::{Value, json};

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The body is not JSON.
    #[error("Parse error")]
    Parse(String),
    /// JSON, but not a JSON-RPC 2.0 request (wrong `jsonrpc`, no `method`, no `id`, an empty batch).
    #[error("Invalid Request")]
    InvalidRequest(String),
    /// A method the API does not have.
    #[error("Method not found")]
    MethodNotFound(String),
    /// A missing or mistyped parameter; `field` is its path (`targets[1].streamId`).
    #[error("Invalid params")]
    InvalidParams { field: String, reason: String },
    /// Provisioning failed (with the fresh nonce), or a Room call has no valid token.
    #[error("Unauthorized")]
    Unauthorized { nonce: Option<String> },
    /// An SDP offer kep cannot answer (HTTP 400 on WHIP and WHEP).
    #[error("Invalid params")]
    InvalidOffer(String),
    /// A valid join token that does not allow this (another room; no `publish`).
    #[error("Forbidden")]
    Forbidden(String),
    /// A join token that is malformed, not signed by its service, or expired.
    #[error("Unauthorized")]
    InvalidToken(String),
    /// No such room in the caller's service.
    #[error("Not found")]
    RoomNotFound { room_id: RoomId },
    /// Some targets of a Kick or Inactivate call do not exist; nothing was done.
    #[error("Not found")]
    TargetsNotFound { missing: Vec<Value> },
    /// No media session of the caller's has this id (WHIP/WHEP `DELETE`).
    #[error("Not found")]
    SessionNotFound,
    /// A participant named a stream it does not own.
    #[error("Not found")]
    StreamNotFound { stream_id: i64 },
    /// The body is over the size limit (HTTP 413).
    #[error("Invalid Request")]
    PayloadTooLarge { limit: usize },
    /// The body is not declared as the type the call takes (HTTP 415): JSON for a
    /// JSON-RPC call, SDP for an offer, an SDP fragment for a trickle.
    #[error("Invalid Request")]
    UnsupportedMediaType(&'static str),
    /// A `PATCH` that restarts ICE (`If-Match: *`): kep takes trickled candidates but no
    /// ICE restart, which RFC 9725 §4.3.1 answers with HTTP 422.
    #[error("Invalid Request")]
    IceRestartNotSupported,
    /// Not a POST (HTTP 405).
    #[error("Invalid Request")]
    MethodNotAllowed,
    /// The operator API names a live service that does not exist.
    #[error("Not found")]
    ServiceNotFound,
    /// The operator API names the webhook of a service that has none.
    #[error("Not found")]
    NoWebhook,
    /// An operator call that does not fit the current state (a serviceId taken …).
    #[error("Invalid Request")]
    Conflict(String),
    /// Over the caller's rate or requests in flight (HTTP 429, `Retry-After`); the code is
    /// the one JSON-RPC servers commonly give a limit (EIP-1474's "Limit exceeded").
    #[error("Limit exceeded")]
    TooManyRequests(#[from] Refusal),
    #[error("Internal error")]
    Internal(#[from] anyhow::Error),
}

/// A refusal made before routing (a head too large or malformed): a JSON-RPC -32600 with
/// no id, as for a body that is no request.
pub fn unrouted(_: StatusCode, why: &str) -> Value {
    LiveError::InvalidRequest(why.to_owned()).to_answer()
}

impl From<sqlx::Error> for LiveError {
    fn from(e: sqlx::Error) -> Self {
        LiveError::Internal(e.into())
    }
}

impl LiveError {
    pub fn invalid_params(field: impl Into<String>, reason: impl Into<String>) -> Self {
        LiveError::InvalidParams {
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub fn code(&self) -> i64 {
        match self {
            LiveError::Parse(_) => -32700,
            LiveError::InvalidRequest(_)
            | LiveError::PayloadTooLarge { .. }
            | LiveError::UnsupportedMediaType(_)
            | LiveError::IceRestartNotSupported
            | LiveError::Conflict(_)
            | LiveError::MethodNotAllowed => -32600,
            LiveError::MethodNotFound(_) => -32601,
            LiveError::InvalidParams { .. } | LiveError::InvalidOffer(_) => -32602,
            LiveError::Unauthorized { .. }
            | LiveError::InvalidToken(_)
            | LiveError::Forbidden(_) => -11002,
            LiveError::RoomNotFound { .. }
            | LiveError::TargetsNotFound { .. }
            | LiveError::StreamNotFound { .. }
            | LiveError::SessionNotFound
            | LiveError::ServiceNotFound
            | LiveError::NoWebhook => -11004,
            LiveError::TooManyRequests(_) => -32005,
            LiveError::Internal(_) => -32603,
        }
    }

    /// The JSON-RPC `error.data`, where the error has one.
    pub fn data(&self) -> Option<Value> {
        match self {
            LiveError::Parse(reason)
            | LiveError::InvalidRequest(reason)
            | LiveError::InvalidToken(reason)
            | LiveError::InvalidOffer(reason)
            | LiveError::Conflict(reason)
            | LiveError::Forbidden(reason) => Some(json!({ "reason": reason })),
            LiveError::MethodNotFound(method) => Some(json!({ "method": method })),
            LiveError::InvalidParams { field, reason } => {
                Some(json!({ "field": field, "reason": reason }))
            }
            LiveError::Unauthorized { nonce } => nonce.as_ref().map(|n| json!({ "nonce": n })),
            LiveError::RoomNotFound { room_id } => Some(json!({ "roomId": room_id })),
            LiveError::TargetsNotFound { missing } => Some(json!({ "missing": missing })),
            LiveError::StreamNotFound { stream_id } => Some(json!({ "streamId": stream_id })),
            LiveError::SessionNotFound => Some(json!({ "reason": "no such session" })),
            LiveError::ServiceNotFound => Some(json!({ "reason": "no such live service" })),
            LiveError::NoWebhook => Some(json!({ "reason": "the service has no webhook" })),
            LiveError::PayloadTooLarge { limit } => {
                Some(json!({ "reason": format!("the body is over {limit} bytes") }))
            }
            LiveError::UnsupportedMediaType(wanted) => {
                Some(json!({ "reason": format!("Content-Type must be {wanted}") }))
            }
            LiveError::IceRestartNotSupported => Some(json!({
                "reason": "ICE restarts are not supported: end the session and start a new one"
            })),
            LiveError::MethodNotAllowed => Some(json!({ "reason": "a JSON-RPC call is a POST" })),
            LiveError::TooManyRequests(refusal) => Some(json!({
                "reason": refusal.to_string(),
                "retryAfter": refusal.retry_after_s(),
            })),
            LiveError::Internal(_) => None,
        }
    }

    /// 200 for every JSON-RPC answer; only the transport-level refusals differ.
    pub fn http_status(&self) -> StatusCode {
        match self {
            LiveError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            LiveError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            LiveError::IceRestartNotSupported => StatusCode::UNPROCESSABLE_ENTITY,
            LiveError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            LiveError::TooManyRequests(_) => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::OK,
        }
    }

    /// The refusal whose `Retry-After` goes with the answer, for a 429.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            LiveError::TooManyRequests(refusal) => Some(refusal),
            _ => None,
        }
    }

    /// A JSON-RPC answer with this error and no id: the body of a refusal outside a call
    /// (before routing; WHIP and WHEP).
    pub fn to_answer(&self) -> Value {
        json!({ "jsonrpc": "2.0", "id": null, "error": self.to_error_object() })
    }

    /// The JSON-RPC `error` object.
    pub fn to_error_object(&self) -> Value {
        if let LiveError::Internal(e) = self {
            tracing::error!(error = ?e, "internal error");
        }
        let mut obj = json!({ "code": self.code(), "message": self.to_string() });
        if let Some(data) = self.data() {
            obj["data"] = data;
        }
        obj
    }
}

/// WHIP and WHEP: the JSON-RPC answer with an HTTP status of its own.
impl LiveError {
    pub fn media_answer(self) -> Response {
        let status = self.media_status();
        let mut res = (status, axum::Json(self.to_answer())).into_response();
        if let Some(refusal) = self.refusal() {
            refusal.set_retry_after(res.headers_mut());
        }
        if status == StatusCode::UNAUTHORIZED {
            res.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        res
    }

    fn media_status(&self) -> StatusCode {
        match self {
            LiveError::InvalidOffer(_)
            | LiveError::InvalidParams { .. }
            | LiveError::InvalidRequest(_)
            | LiveError::Parse(_) => StatusCode::BAD_REQUEST,
            LiveError::InvalidToken(_) | LiveError::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            LiveError::Forbidden(_) => StatusCode::FORBIDDEN,
            LiveError::RoomNotFound { .. }
            | LiveError::StreamNotFound { .. }
            | LiveError::TargetsNotFound { .. }
            | LiveError::SessionNotFound
            | LiveError::ServiceNotFound
            | LiveError::NoWebhook
            | LiveError::MethodNotFound(_) => StatusCode::NOT_FOUND,
            LiveError::Conflict(_) => StatusCode::CONFLICT,
            LiveError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            other => other.http_status(),
        }
    }

    /// The participants' error frame.
    pub fn frame(&self) -> ServerMessage {
        ServerMessage::Error {
            code: self.code(),
            message: self.to_string(),
            data: self.data(),
        }
    }
}

// Operator handlers answer the service's errors in the operator shape.
kep_core::operator_answer!(LiveError);

impl From<LiveError> for ApiError {
    fn from(e: LiveError) -> Self {
        let not_found = |message: &str| ApiError::not_found(message);
        match e {
            LiveError::InvalidParams { field, reason } => ApiError::invalid_field(field, reason),
            LiveError::ServiceNotFound => not_found("no such live service"),
            LiveError::NoWebhook => not_found("the service has no webhook"),
            LiveError::RoomNotFound { .. } => not_found("no such room"),
            LiveError::TargetsNotFound { missing } => ApiError::not_found(format!(
                "not in the room, so nothing was done: {}",
                Value::Array(missing)
            )),
            LiveError::Conflict(message) => ApiError::conflict(message),
            LiveError::TooManyRequests(refusal) => refusal.into(),
            LiveError::Internal(e) => ApiError::internal(format!("{e:#}")),
            // What only a participant or a JSON-RPC caller meets, should it ever reach here:
            // the status it has on WHIP, and its reason.
            other => {
                let status = other.media_status();
                let code = match status {
                    StatusCode::UNAUTHORIZED => "unauthorized",
                    StatusCode::FORBIDDEN => "forbidden",
                    StatusCode::NOT_FOUND => "not_found",
                    _ => "invalid_request",
                };
                let reason = other
                    .data()
                    .and_then(|d| d["reason"].as_str().map(str::to_owned));
                ApiError::new(status, code, reason.unwrap_or_else(|| other.to_string()))
            }
        }
    }
}
