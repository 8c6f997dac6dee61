//! The messaging API's one error enum, mapped once onto each shape it is answered in: HTTP
//! status and body `code` go together (CONTRACT §4), the detail under `result` (or
//! `code_detail` where a call's answer names it so), and the operator API's error.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kep_core::http::ApiError;
use kep_core::limits::Refusal;
use serde_json::json;

#[derive(Debug, thiserror::Error)]
pub enum MessagingError {
    /// No, a malformed, an unknown or an expired access token: 401 with body code `400`.
    #[error("invalid token: {0}")]
    Unauthorized(&'static str),
    /// An input that breaks a rule of the document: 400 with code `410`, naming the field.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// A file that breaks a rule (type by its bytes, size, count), or a reference to one
    /// that is unknown or expired: code `420`, HTTP 413 when too large, else 400.
    #[error("{field}: {message}")]
    File {
        field: String,
        message: String,
        too_large: bool,
    },
    /// No such object: the RCS detail's 404, and the operator API's.
    #[error("{0}")]
    NotFound(&'static str),
    /// The operator API's 409: an object of that id exists.
    #[error("{0}")]
    Conflict(&'static str),
    /// A method the path does not take: 405 with code `410` (invalid input) and `Allow`.
    #[error("this API does not take {0}")]
    MethodNotAllowed(axum::http::Method),
    /// Over the client's (or, without a valid token, the peer's) rate or calls in flight:
    /// 429 with code `429`, and `Retry-After`.
    #[error(transparent)]
    TooManyRequests(#[from] Refusal),
    #[error("internal error")]
    Internal(#[from] anyhow::Error),
}

impl From<sqlx::Error> for MessagingError {
    fn from(e: sqlx::Error) -> Self {
        MessagingError::Internal(e.into())
    }
}

impl MessagingError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        MessagingError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn file(field: impl Into<String>, message: impl Into<String>) -> Self {
        MessagingError::File {
            field: field.into(),
            message: message.into(),
            too_large: false,
        }
    }

    /// (HTTP status, body code).
    fn codes(&self) -> (StatusCode, &'static str) {
        match self {
            MessagingError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "400"),
            MessagingError::Invalid { .. } => (StatusCode::BAD_REQUEST, "410"),
            MessagingError::File {
                too_large: true, ..
            } => (StatusCode::PAYLOAD_TOO_LARGE, "420"),
            MessagingError::File { .. } => (StatusCode::BAD_REQUEST, "420"),
            MessagingError::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, "410"),
            MessagingError::NotFound(_) => (StatusCode::NOT_FOUND, "404"),
            MessagingError::Conflict(_) => (StatusCode::CONFLICT, "409"),
            MessagingError::TooManyRequests(_) => (StatusCode::TOO_MANY_REQUESTS, "429"),
            MessagingError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "500"),
        }
    }
}

/// A refusal made before routing (a head too large or malformed): invalid input, code
/// `410`, whatever the HTTP status.
pub fn unrouted(_: StatusCode, why: &str) -> serde_json::Value {
    json!({ "code": "410", "result": { "detail_code": "API_410", "detail_message": why } })
}

/// The shapes a refusal is answered in: where its detail goes, and what `code` it has.
pub enum Shape {
    /// Under `result`, with the result-code table's code; a send's echoes its `cid`.
    Result { cid: Option<String> },
    /// Under `code_detail`, as the XMS detail's answer names it.
    CodeDetail,
    /// The searches': under `code_detail`, with the `status` the seed requires of them.
    Search,
    /// The RCS detail's: under `code_detail`, its `code` the HTTP status (the seed's
    /// HTTP-style codes: 401 for a bad token).
    RcsDetail,
}

impl IntoResponse for MessagingError {
    fn into_response(self) -> Response {
        self.answer(Shape::Result { cid: None })
    }
}

impl MessagingError {
    /// The refusal in `shape`, with `WWW-Authenticate` on a 401 and `Retry-After` on a 429.
    pub fn answer(self, shape: Shape) -> Response {
        if let MessagingError::Internal(e) = &self {
            tracing::error!(error = ?e, "messaging internal error");
        }
        let (status, code) = self.codes();
        let code = match shape {
            Shape::RcsDetail => status.as_str().to_owned(),
            _ => code.to_owned(),
        };
        let message = match &self {
            MessagingError::Internal(_) => "internal error".to_owned(),
            other => other.to_string(),
        };
        let detail = json!({ "detail_code": format!("API_{code}"), "detail_message": message });
        let mut body = json!({ "code": code });
        match shape {
            Shape::Result { cid } => {
                if let Some(cid) = cid {
                    body["cid"] = json!(cid);
                }
                body["result"] = detail;
            }
            Shape::Search => {
                body["status"] = json!(code);
                body["code_detail"] = detail;
            }
            Shape::CodeDetail | Shape::RcsDetail => body["code_detail"] = detail,
        }
        let mut res = (status, axum::Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            res.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer error=\"invalid_token\""),
            );
        }
        if let MessagingError::TooManyRequests(refusal) = &self {
            refusal.set_retry_after(res.headers_mut());
        }
        res
    }

    pub fn search_answer(self) -> Response {
        self.answer(Shape::Search)
    }
}

kep_core::operator_answer!(MessagingError);

impl From<MessagingError> for ApiError {
    fn from(e: MessagingError) -> Self {
        match e {
            MessagingError::Invalid { field, message } => ApiError::invalid_field(field, message),
            MessagingError::NotFound(message) => ApiError::not_found(message),
            MessagingError::Conflict(message) => ApiError::conflict(message),
            MessagingError::TooManyRequests(refusal) => refusal.into(),
            MessagingError::Internal(e) => ApiError::internal(format!("{e:#}")),
            MessagingError::Unauthorized(_) => ApiError::unauthorized(),
            other => {
                let (status, _) = other.codes();
                ApiError::new(status, "invalid_request", other.to_string())
            }
        }
    }
}

/// RFC 6749 §5.2 errors of the token endpoint.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    /// Unknown client or wrong secret (401, `WWW-Authenticate: Basic`).
    #[error("invalid_client")]
    InvalidClient,
    #[error("unsupported_grant_type")]
    UnsupportedGrantType,
    /// A malformed request: `error_description` says what.
    #[error("invalid_request")]
    InvalidRequest(&'static str),
    /// Over the client's (or, unauthenticated, the peer's) rate or calls in flight: 429.
    /// RFC 6749 has no code for it; `temporarily_unavailable` is its code for a server
    /// that cannot take the request now (§4.1.2.1).
    #[error("temporarily_unavailable")]
    TooManyRequests(#[from] Refusal),
    #[error("server_error")]
    Internal(#[from] anyhow::Error),
}

impl From<sqlx::Error> for OAuthError {
    fn from(e: sqlx::Error) -> Self {
        OAuthError::Internal(e.into())
    }
}

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        let status = match &self {
            OAuthError::InvalidClient => StatusCode::UNAUTHORIZED,
            OAuthError::TooManyRequests(_) => StatusCode::TOO_MANY_REQUESTS,
            OAuthError::Internal(e) => {
                tracing::error!(error = ?e, "token endpoint internal error");
                StatusCode::INTERNAL_SERVER_ERROR
            }
            _ => StatusCode::BAD_REQUEST,
        };
        let mut body = json!({ "error": self.to_string() });
        match &self {
            OAuthError::InvalidRequest(why) => body["error_description"] = json!(why),
            OAuthError::TooManyRequests(refusal) => {
                body["error_description"] = json!(refusal.to_string());
            }
            _ => {}
        }
        let mut res = (status, axum::Json(body)).into_response();
        // RFC 6749 §5.2: no caching of token answers.
        res.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if status == StatusCode::UNAUTHORIZED {
            res.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"kep\""),
            );
        }
        if let OAuthError::TooManyRequests(refusal) = &self {
            refusal.set_retry_after(res.headers_mut());
        }
        res
    }
}
