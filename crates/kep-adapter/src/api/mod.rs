//! Wire types and handlers of the adapter API.

mod agent;
pub mod operator;
use kep_api::adapter as wire;

pub use agent::{DrmHeaders, credentials, drm_headers, file_type};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode};
use axum::routing::{get, post};
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use utoipa::OpenApi;

use crate::AdapterService;
use crate::error::status_body;
use kep_api::adapter::paths;

pub(crate) fn router(adapter: AdapterService) -> Router {
    Router::new()
        .route(paths::GET_ORG_LOGIN_TYPE, get(agent::get_org_login_type))
        .route(paths::UPLOAD_RESULT, post(agent::upload_result))
        // The file is streamed to disk under its own limit, not buffered under axum's.
        .route(
            paths::UPLOAD_DECRYPTED,
            post(agent::upload_decrypted).layer(DefaultBodyLimit::disable()),
        )
        .fallback(|| async { status_body(StatusCode::NOT_FOUND, "no such API") })
        .method_not_allowed_fallback(|| async {
            status_body(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
        })
        .with_state(adapter)
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(NewRequestId))
}

/// A fresh `X-Request-Id` for a request that brought none.
#[derive(Clone, Copy)]
struct NewRequestId;

impl MakeRequestId for NewRequestId {
    fn make_request_id<B>(&mut self, _: &Request<B>) -> Option<RequestId> {
        HeaderValue::from_str(&kep_core::secret::new_uuid())
            .ok()
            .map(RequestId::new)
    }
}

/// Every call's 429, in the adapter's shape.
const LIMIT_ANSWERS: kep_core::http::LimitAnswers = kep_core::http::LimitAnswers(Some("Status"));

/// OpenAPI of the adapter listener.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "kep account adapter API",
        description = "Seed 001 part A: the calls of an organisation's adapter agent"
    ),
    paths(
        agent::get_org_login_type,
        agent::upload_result,
        agent::upload_decrypted
    ),
    modifiers(&LIMIT_ANSWERS),
    components(schemas(
        wire::Status,
        wire::OrgLoginTypeAnswer,
        wire::UploadResult,
        wire::FileType
    ))
)]
pub struct AdapterApiDoc;

/// A required header's value.
fn header<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, crate::AdapterError> {
    headers
        .get(name)
        .ok_or(crate::AdapterError::MissingHeader(name))?
        .to_str()
        .map_err(|_| crate::AdapterError::MalformedHeader(name, "not visible ASCII".into()))
}

/// A header of the form `<word> <value>`; the value, trimmed and non-empty.
fn worded<'a>(
    headers: &'a HeaderMap,
    name: &'static str,
    word: &str,
) -> Result<&'a str, crate::AdapterError> {
    let value = header(headers, name)?;
    value
        .strip_prefix(word)
        .and_then(|rest| rest.strip_prefix(' '))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            crate::AdapterError::MalformedHeader(name, format!("expected `{word} <value>`"))
        })
}
