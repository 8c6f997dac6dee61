//! HTTP plumbing shared by the operator APIs on the admin listener: their one error shape
//! `{"error": {"code", "message", "field"?}}`, a JSON extractor that answers in that shape,
//! and the operator-token guard with the admin listener's limits.

use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub use kep_api::operator::{ErrorBody, ErrorDetail};

use crate::limits::{Key, Limiter, Peer, Refusal};
use crate::secret::constant_time_eq;

/// An operator API failure; every handler's error converts into this once.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub detail: ErrorDetail,
    /// `Retry-After` of a 429.
    retry_after_s: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            detail: ErrorDetail {
                code: code.into(),
                message: message.into(),
                field: None,
            },
            retry_after_s: None,
        }
    }

    /// A 400 naming the field at fault.
    pub fn invalid_field(field: impl Into<String>, message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::BAD_REQUEST, "invalid_field", message);
        e.detail.field = Some(field.into());
        e
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// A method the path does not take (axum adds `Allow`).
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            message,
        )
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid operator token is required",
        )
    }

    /// An unexpected failure: logged in full, answered without internals.
    pub fn internal(err: impl std::fmt::Display) -> Self {
        tracing::error!(error = %err, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error",
        )
    }
}

/// A request over its client's limits: 429 `too_many_requests`, with `Retry-After`.
impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        let mut e = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_requests",
            refusal.to_string(),
        );
        e.retry_after_s = Some(refusal.retry_after_s());
        e
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut res = (self.status, axum::Json(ErrorBody { error: self.detail })).into_response();
        if let Some(s) = self.retry_after_s {
            res.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(s));
        }
        res
    }
}

/// Declares `Operator`, a service's error `$error` answered in the operator API's shape
/// (`{"error": {...}}`, through `From<$error> for ApiError`): what its operator handlers
/// return, so that `?` takes any error that converts into `$error`.
#[macro_export]
macro_rules! operator_answer {
    ($error:ty) => {
        /// The service's error, answered in the operator API's shape.
        #[derive(Debug)]
        pub struct Operator(pub $error);

        impl<E: Into<$error>> From<E> for Operator {
            fn from(e: E) -> Self {
                Operator(e.into())
            }
        }

        impl ::axum::response::IntoResponse for Operator {
            fn into_response(self) -> ::axum::response::Response {
                ::axum::response::IntoResponse::into_response($crate::http::ApiError::from(self.0))
            }
        }
    };
}

/// Every operator path's answer to a method it does not take: a 405 in the operator
/// shape, as every other operator answer.
pub async fn wrong_method(method: axum::http::Method) -> ApiError {
    ApiError::method_not_allowed(format!("{method} is not a method of this path (see Allow)"))
}

/// `axum::Json`, but a rejected body is answered in the operator API's error shape: a body
/// that is not a JSON object is a 400 (`invalid_body`), an object of the wrong shape a 400
/// naming the field at fault (`invalid_field`), as [`from_json`] answers.
pub struct AdminJson<T>(pub T);

impl<S, T> FromRequest<S> for AdminJson<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<serde_json::Value>::from_request(req, state).await {
            // A struct would also be read from an array (`[null, null]`): only an object is.
            Ok(axum::Json(v)) if !v.is_object() => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                "the body must be a JSON object",
            )),
            Ok(axum::Json(v)) => from_json(v).map(AdminJson),
            Err(rejection) => {
                let status = rejection.status();
                let code = match status {
                    StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
                    StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
                    _ => "invalid_body",
                };
                Err(ApiError::new(status, code, rejection.body_text()))
            }
        }
    }
}

/// `axum::extract::Path`, but a path segment that does not parse (an id out of range, text
/// that is not UTF-8) is a 400 in the operator API's error shape (`invalid_path`).
pub struct Path<T>(pub T);

impl<S, T> FromRequestParts<S> for Path<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(Path(v)),
            Err(r) if r.status().is_server_error() => Err(ApiError::internal(r.body_text())),
            Err(r) => Err(ApiError::new(r.status(), "invalid_path", r.body_text())),
        }
    }
}

/// `axum::extract::Query`, but a query string that does not parse is a 400 in the operator
/// API's error shape (`invalid_query`).
pub struct Query<T>(pub T);

impl<S, T> FromRequestParts<S> for Query<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(Query(v)),
            Err(r) => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_query",
                r.body_text(),
            )),
        }
    }
}

/// Turns a JSON body into `T`; a failure is a 400 naming the field at fault
/// (`data_model.login.oauth2.client_id`). Read as its schema reads it: a number with no
/// fraction (`3.0`) is the integer it is, and a struct is only ever an object
/// ([`crate::json`]).
pub fn from_json<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, ApiError> {
    crate::json::deserialize(value).map_err(|e| {
        let (field, message) = field_error(e);
        ApiError::invalid_field(field, message)
    })
}

/// The field a deserialisation failure is about, and serde's message.
pub fn field_error(e: serde_path_to_error::Error<serde_json::Error>) -> (String, String) {
    let path = e.path().to_string();
    let message = e.into_inner().to_string();
    // serde reports a missing field at its parent: name the field itself.
    let field = match message
        .strip_prefix("missing field `")
        .and_then(|r| r.split('`').next())
    {
        Some(name) if path == "." => name.to_owned(),
        Some(name) => format!("{path}.{name}"),
        None => path,
    };
    (field, message)
}

/// The operator token, as the guard compares it, and the admin listener's limiter.
#[derive(Clone)]
pub struct OperatorGuard {
    token: std::sync::Arc<str>,
    limiter: Limiter,
}

/// The one client of the operator API: whoever holds the operator token.
const OPERATOR: &str = "operator";

/// Whether the request's `Content-Type` is `media` (parameters such as `charset` aside;
/// media types are case-insensitive, RFC 9110 §8.3.1).
pub fn content_type_is(headers: &axum::http::HeaderMap, media: &str) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(media))
}

/// The credentials of an `Authorization` value in `scheme`: the scheme word is matched
/// case-insensitively (RFC 9110 §11.1: `bearer`, `BEARER`), then one or more spaces.
pub fn credentials<'a>(value: &'a str, scheme: &str) -> Option<&'a str> {
    let (word, rest) = value.split_once(' ')?;
    word.eq_ignore_ascii_case(scheme).then(|| rest.trim())
}

/// `router` with every route behind the operator token and the admin listener's limits.
pub fn operator_only(router: axum::Router, token: &str, limiter: Limiter) -> axum::Router {
    router.route_layer(axum::middleware::from_fn_with_state(
        OperatorGuard {
            token: token.into(),
            limiter,
        },
        require_operator,
    ))
}

/// Middleware: `Authorization: Bearer <operator token>` or 401; within the operator's
/// limits, or, without the token, within its peer's, or 429.
pub async fn require_operator(
    State(guard): State<OperatorGuard>,
    Peer(peer): Peer,
    req: Request,
    next: Next,
) -> Response {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| credentials(v, "Bearer"));
    let operator = presented.is_some_and(|p| constant_time_eq(p, &guard.token));
    let key = if operator {
        Key::client(OPERATOR)
    } else {
        Key::peer(peer)
    };
    let admission = match guard.limiter.admit(key) {
        Ok(admission) => admission,
        Err(refusal) => return ApiError::from(refusal).into_response(),
    };
    if !operator {
        let mut res = ApiError::unauthorized().into_response();
        res.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
        return res;
    }
    admission.until_sent(next.run(req).await)
}

/// Every operation of an OpenAPI document, with its path, to be amended.
pub fn operations_mut(
    doc: &mut utoipa::openapi::OpenApi,
) -> impl Iterator<Item = (&str, &mut utoipa::openapi::path::Operation)> {
    doc.paths.paths.iter_mut().flat_map(|(path, item)| {
        [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        .map(move |op| (path.as_str(), op))
    })
}

/// Declares every `{name}` of a path that its operation does not declare as a required
/// string path parameter. utoipa infers them only from a literal path, and the routes' paths
/// are kep-api's constants; an operation that declares one itself (an integer id) keeps it.
pub fn declare_path_parameters(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
    use utoipa::openapi::{Required, schema::Type};
    for (path, op) in operations_mut(doc) {
        let names: Vec<&str> = path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
            .collect();
        if names.is_empty() {
            continue;
        }
        let params = op.parameters.get_or_insert_with(Vec::new);
        for name in names {
            let declared = params
                .iter()
                .any(|p| p.name == name && p.parameter_in == ParameterIn::Path);
            if !declared {
                params.push(
                    ParameterBuilder::new()
                        .name(name)
                        .parameter_in(ParameterIn::Path)
                        .required(Required::True)
                        .schema(Some(utoipa::openapi::Object::with_type(Type::String)))
                        .build(),
                );
            }
        }
    }
}

/// Tags every operation of a document with one tag, `tag_of` its path, in place of the
/// handlers' own, and lists the tags in the document: Swagger UI then groups the calls by
/// it, where untagged ones all went under `default`.
pub fn tag_operations(doc: &mut utoipa::openapi::OpenApi, tag_of: impl Fn(&str) -> String) {
    let mut tags = std::collections::BTreeSet::new();
    for (path, op) in operations_mut(doc) {
        let tag = tag_of(path);
        tags.insert(tag.clone());
        op.tags = Some(vec![tag]);
    }
    doc.tags = Some(
        tags.into_iter()
            .map(|t| utoipa::openapi::tag::TagBuilder::new().name(t).build())
            .collect(),
    );
}

/// The service an operator call belongs to, by its path: `live` for
/// `/admin/v1/live/services`; `platform` for the platform's own (`/admin/v1/events`).
pub fn operator_service(path: &str) -> String {
    match path
        .strip_prefix("/admin/v1/")
        .and_then(|rest| rest.split_once('/'))
    {
        Some((service, _)) if !service.is_empty() => service.to_owned(),
        _ => "platform".to_owned(),
    }
}

/// Adds to an operator API document the answers every call can give and the handlers'
/// annotations leave out: 401 and 429 to every call (the operator-token guard and the admin
/// listener's limits), 400 to every call with path or query parameters (one that does not
/// parse), and to every call with a JSON body 400 (not JSON, or a field of the wrong
/// shape), 413 (over the body limit) and 415 (not `application/json`). All in the operator
/// error shape.
pub fn document_operator_answers(doc: &mut utoipa::openapi::OpenApi) {
    utoipa::Modify::modify(&LimitAnswers(Some("ErrorBody")), doc);
    use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
    let error = |description: &str| {
        RefOr::T(
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build(),
        )
    };
    for (_, op) in operations_mut(doc) {
        let answers = &mut op.responses.responses;
        answers
            .entry("401".into())
            .or_insert_with(|| error("No valid operator token"));
        if op.parameters.as_ref().is_some_and(|p| !p.is_empty()) {
            answers.entry("400".into()).or_insert_with(|| {
                error("A path segment or the query does not parse, or breaks a rule")
            });
        }
        let json_body = op
            .request_body
            .as_ref()
            .is_some_and(|b| b.content.contains_key("application/json"));
        if json_body {
            for (status, description) in [
                ("400", "The body is not JSON, or a field breaks a rule"),
                ("413", "The body is over the size limit"),
                ("415", "Content-Type is not application/json"),
            ] {
                answers
                    .entry(status.into())
                    .or_insert_with(|| error(description));
            }
        }
    }
}

/// An OpenAPI modifier: every call of the document may answer the 429 of its listener's
/// limits ([`crate::limits`]), with `Retry-After`; its body is the named schema, or, with
/// `None`, left for a later modifier to give (an API with a shape per call).
pub struct LimitAnswers(pub Option<&'static str>);

impl utoipa::Modify for LimitAnswers {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::header::HeaderBuilder;
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
        let mut answer = ResponseBuilder::new()
            .description(
                "Over the caller's request rate or requests in flight (the listener's \
                 `rate_limit_per_s`, `concurrency_limit`)",
            )
            .header(
                "Retry-After",
                HeaderBuilder::new()
                    .schema(
                        ObjectBuilder::new()
                            .schema_type(Type::Integer)
                            .minimum(Some(1)),
                    )
                    .description(Some("Seconds to wait before a retry can pass"))
                    .build(),
            );
        if let Some(schema) = self.0 {
            answer = answer.content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name(schema)))
                    .build(),
            );
        }
        let answer = answer.build();
        for (_, op) in operations_mut(doc) {
            op.responses
                .responses
                .entry("429".into())
                .or_insert_with(|| RefOr::T(answer.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use utoipa::OpenApi as _;
    use utoipa::openapi::path::ParameterIn;

    const THING: &str = "/things/{kind}/{id}";

    /// A handler documented on a path constant, declaring `id` itself as an integer.
    #[utoipa::path(get, path = THING, params(("id" = i64, Path)), responses((status = 200)))]
    #[allow(dead_code, reason = "only its document is used")]
    async fn thing() {}

    #[derive(utoipa::OpenApi)]
    #[openapi(paths(thing))]
    struct Doc;

    #[test]
    fn undeclared_path_parameters_are_declared_as_strings_and_declared_ones_kept() {
        let mut doc = Doc::openapi();
        super::declare_path_parameters(&mut doc);
        let op = doc.paths.paths[THING].get.as_ref().unwrap();
        let params = op.parameters.as_ref().unwrap();
        let described: Vec<_> = params
            .iter()
            .map(|p| {
                let schema = serde_json::to_value(&p.schema).unwrap();
                (
                    p.name.as_str(),
                    p.parameter_in == ParameterIn::Path,
                    schema["type"].clone(),
                )
            })
            .collect();
        assert_eq!(
            described,
            [
                ("id", true, serde_json::json!("integer")),
                ("kind", true, serde_json::json!("string"))
            ]
        );
    }

    #[test]
    fn every_operation_is_tagged_by_its_service() {
        let mut doc = Doc::openapi();
        let thing = doc.paths.paths[THING].clone();
        for path in [
            "/admin/v1/live/services",
            "/admin/v1/serving/endpoints/{name}",
            "/admin/v1/events",
        ] {
            doc.paths.paths.insert(path.to_owned(), thing.clone());
        }
        super::tag_operations(&mut doc, super::operator_service);
        let mut tags: Vec<_> = doc
            .paths
            .paths
            .iter()
            .map(|(path, item)| {
                (
                    path.as_str(),
                    item.get.as_ref().unwrap().tags.clone().unwrap(),
                )
            })
            .collect();
        tags.sort();
        assert_eq!(
            tags,
            [
                ("/admin/v1/events", vec!["platform".to_owned()]),
                ("/admin/v1/live/services", vec!["live".to_owned()]),
                (
                    "/admin/v1/serving/endpoints/{name}",
                    vec!["serving".to_owned()]
                ),
                (THING, vec!["platform".to_owned()]),
            ]
        );
        let listed: Vec<_> = doc.tags.unwrap().into_iter().map(|t| t.name).collect();
        assert_eq!(listed, ["live", "platform", "serving"]);
    }
}
