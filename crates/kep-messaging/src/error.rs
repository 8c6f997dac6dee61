//! The messaging API's one error enum, mapped once onto its wire shape: HTTP status and
//! body `code` go together (CONTRACT §4), with `result.detail_code` / `detail_message`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
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

impl IntoResponse for MessagingError {
    fn into_response(self) -> Response {
        self.answer("result")
    }
}

impl MessagingError {
    /// The answer in the messaging shape, its detail under `key`: `result` for most calls,
    /// `code_detail` for the XMS detail, whose success answer names it so.
    pub fn answer(self, key: &str) -> Response {
        self.answer_echoing(key, None)
    }

    /// [`MessagingError::answer`] echoing a send's `cid`, so that a client matches the
    /// refusal to its message.
    pub fn answer_echoing(self, key: &str, cid: Option<String>) -> Response {
        self.answer_shaped(key, |body| {
            if let Some(cid) = cid {
                body["cid"] = json!(cid);
            }
        })
    }

    /// The refusal of a search, in the searches' own shape: the `status` the seed requires
    /// of their answers beside `code`, the detail under `code_detail`.
    pub fn search_answer(self) -> Response {
        let (_, code) = self.codes();
        self.answer_shaped("code_detail", |body| body["status"] = json!(code))
    }

    fn answer_shaped(self, key: &str, shape: impl FnOnce(&mut serde_json::Value)) -> Response {
        if let MessagingError::Internal(e) = &self {
            tracing::error!(error = ?e, "messaging internal error");
        }
        let (status, code) = self.codes();
        let message = match &self {
            MessagingError::Internal(_) => "internal error".to_owned(),
            other => other.to_string(),
        };
        let mut body = json!({ "code": code });
        shape(&mut body);
        body[key] = json!({ "detail_code": format!("API_{code}"), "detail_message": message });
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
