//! Wire types and handlers of the messaging API.

mod auth;
mod dlr;
pub mod operator;
mod rcs;
mod uploads;
use kep_api::messaging as wire;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use kep_core::limits::{Admission, Key, Peer};
use serde::de::DeserializeOwned;
use serde_json::Value;
use utoipa::OpenApi;

use crate::error::Shape;
use crate::ids::{ClientId, MessageUid};
use crate::kinds::Channel;
use crate::search::{Page, status_filter};
use crate::send::Sendable;
use crate::store::SearchFilter;
use crate::{MessagingError, MessagingService, OAuthError, xms};
use kep_api::messaging::paths;
use kep_api::messaging::{
    Detail, SendAnswer, TokenAnswer, XmsDetailAnswer, XmsSearch, XmsSearchAnswer, XmsSearchRow,
};

/// Upload bodies stop here; the parts' own limits (1 MB, 200 KB) are checked as they arrive,
/// so a file over its limit is told apart (413) from a body that is simply too big.
const UPLOAD_BODY_LIMIT: usize = 4 * 1024 * 1024;

pub(crate) fn router(m: MessagingService) -> Router {
    Router::new()
        .route(paths::TOKEN, post(token))
        .route(paths::SEND_XMS, post(send_xms))
        .route(paths::SEND_RCS, post(rcs::send_rcs))
        .route(
            paths::UPLOAD_RCS,
            post(uploads::upload_rcs)
                .layer(axum::extract::DefaultBodyLimit::max(UPLOAD_BODY_LIMIT)),
        )
        .route(
            paths::UPLOAD_MMS,
            post(uploads::upload_mms)
                .layer(axum::extract::DefaultBodyLimit::max(UPLOAD_BODY_LIMIT)),
        )
        .route(paths::RCS_RESULTS, get(rcs::results).post(rcs::results))
        .route(
            paths::RCS_RESULTS_COMPLETE,
            axum::routing::put(rcs::complete),
        )
        .route(
            paths::RCS_SEARCH,
            get(rcs::search_get).post(rcs::search_post),
        )
        .route(paths::RCS_DETAIL, get(rcs::detail))
        .route(paths::XMS_SEARCH, post(search_xms))
        .route(paths::XMS_DETAIL, get(xms_detail))
        .route(
            crate::carriers::http::DLR_PATH,
            get(dlr::carrier_dlr).post(dlr::carrier_dlr),
        )
        // A path of no API is invalid input, in the table's codes and the detail's shape.
        .fallback(|| async {
            MessagingError::invalid("path", "no such API").answer(Shape::CodeDetail)
        })
        .method_not_allowed_fallback(wrong_method)
        .layer(axum::extract::DefaultBodyLimit::max(
            m.0.settings.body_limit_bytes,
        ))
        .with_state(m)
}

/// A method a path does not take, answered in the shape of that path's refusals (axum adds
/// `Allow`).
async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let path = uri.path();
    let e = MessagingError::MethodNotAllowed(method);
    if path.starts_with(paths::RCS_DETAIL.trim_end_matches("{uid}")) {
        return e.answer(Shape::RcsDetail);
    }
    if path.starts_with(paths::XMS_DETAIL.trim_end_matches("{uid}")) {
        return e.answer(Shape::CodeDetail);
    }
    if path == paths::XMS_SEARCH || path == paths::RCS_SEARCH {
        return e.answer(Shape::Search);
    }
    e.into_response()
}

/// OpenAPI of the messaging listener.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "kep text-message sending API",
        description = "Seed 002: OAuth 2.0, XMS sends, search"
    ),
    paths(
        token,
        send_xms,
        search_xms,
        xms_detail,
        rcs::send_rcs,
        rcs::results,
        rcs::complete,
        rcs::search_post,
        rcs::search_get,
        rcs::detail,
        uploads::upload_rcs,
        uploads::upload_mms,
        dlr::carrier_dlr
    ),
    modifiers(&LIMIT_ANSWERS, &ErrorAnswers),
    components(schemas(
        wire::ErrorAnswer,
        wire::DetailErrorAnswer,
        wire::SearchErrorAnswer,
        wire::OAuthErrorAnswer,
        TokenAnswer,
        SendAnswer,
        XmsSearch,
        XmsSearchAnswer,
        XmsSearchRow,
        XmsDetailAnswer,
        Detail
    ))
)]
pub struct MessagingApiDoc;

/// Every call's 429; its body is the call's refusal shape, given by [`ErrorAnswers`].
const LIMIT_ANSWERS: kep_core::http::LimitAnswers = kep_core::http::LimitAnswers(None);

/// Gives every refusal in the document its body schema, and adds the refusals every call
/// can give: 401 without a valid token, 400 (`410`) for an `Accept` that excludes JSON.
struct ErrorAnswers;

impl utoipa::Modify for ErrorAnswers {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
        for (path, op) in kep_core::http::operations_mut(doc) {
            let (schema, bearer) = match path {
                // A carrier's callback: a token of its own; its answers are text (but a 429).
                crate::carriers::http::DLR_PATH => ("ErrorAnswer", false),
                paths::TOKEN => ("OAuthErrorAnswer", false),
                // HTTP-style codes; its 400 for `Accept` is documented with the call.
                paths::RCS_DETAIL => ("DetailErrorAnswer", false),
                // The table's codes, with `code_detail` as its answer has it.
                paths::XMS_DETAIL => ("DetailErrorAnswer", true),
                paths::XMS_SEARCH | paths::RCS_SEARCH => ("SearchErrorAnswer", true),
                _ => ("ErrorAnswer", true),
            };
            let answers = &mut op.responses.responses;
            if path != paths::TOKEN && path != crate::carriers::http::DLR_PATH {
                answers.entry("401".into()).or_insert_with(|| {
                    RefOr::T(
                        ResponseBuilder::new()
                            .description("code 400: no valid token")
                            .build(),
                    )
                });
            }
            if bearer {
                answers.entry("400".into()).or_insert_with(|| {
                    RefOr::T(
                        ResponseBuilder::new()
                            .description("code 410: `Accept` excludes JSON")
                            .build(),
                    )
                });
            }
            for (status, answer) in answers.iter_mut() {
                if status.starts_with('2') {
                    continue;
                }
                if let RefOr::T(answer) = answer
                    && answer.content.is_empty()
                {
                    answer.content.insert(
                        "application/json".into(),
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name(schema)))
                            .build(),
                    );
                }
            }
        }
    }
}

/// A JSON body into `T`; malformed JSON or a mistyped field is a 410 naming it. Read as its
/// schema reads it: a number with no fraction is the integer it is, a struct only an object.
pub(crate) fn json_body<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(T, Value), MessagingError> {
    if !kep_core::http::content_type_is(headers, "application/json") {
        return Err(MessagingError::invalid(
            "Content-Type",
            "must be application/json",
        ));
    }
    let body = body.map_err(|e| MessagingError::invalid("body", e.body_text()))?;
    let mut value: Value = serde_json::from_slice(&body)
        .map_err(|e| MessagingError::invalid("body", format!("not JSON: {e}")))?;
    // `5.0` is the integer 5, as JSON Schema reads it (and as it is stored).
    kep_core::json::whole_numbers(&mut value);
    if !value.is_object() {
        return Err(MessagingError::invalid("body", "must be a JSON object"));
    }
    let parsed = kep_core::json::from_value(&value).map_err(|e| {
        let (field, message) = kep_core::http::field_error(e);
        MessagingError::invalid(field, message)
    })?;
    Ok((parsed, value))
}

/// `POST /v2/oauth/token`: client credentials; the client authenticates by HTTP Basic
/// (base64 `id:secret`), by `Basic <id> <secret>`, or by form fields.
#[utoipa::path(post, path = paths::TOKEN,
    request_body(content_type = "application/x-www-form-urlencoded", description = "grant_type=client_credentials"),
    responses((status = 200, body = TokenAnswer), (status = 400, description = "RFC 6749 §5.2 error"),
              (status = 401, description = "invalid_client")))]
pub(crate) async fn token(
    State(m): State<MessagingService>,
    Peer(peer): Peer,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OAuthError> {
    let form: Vec<(String, String)> = form_urlencoded::parse(&body).into_owned().collect();
    // The credentials may be in the form, so the limits come once the body is read.
    let client = authenticate(&m, &headers, &form).await;
    let key = match &client {
        Ok(client_id) => Key::client(client_id.as_str()),
        Err(_) => Key::peer(peer),
    };
    let _in_flight = m.0.limiter.admit(key)?;
    let issued =
        m.0.tokens
            .issue(client?, m.0.settings.token_ttl_s, auth::grant_type(&form))
            .await?;
    let answer = TokenAnswer {
        access_token: issued.access_token,
        token_type: "Bearer".into(),
        expires_in: issued.expires_in,
    };
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(answer)).into_response())
}

/// The client whose credentials a token request carries (the form must name a grant type).
async fn authenticate(
    m: &MessagingService,
    headers: &HeaderMap,
    form: &[(String, String)],
) -> Result<ClientId, OAuthError> {
    if auth::grant_type(form).is_none() {
        return Err(OAuthError::InvalidRequest("grant_type is required"));
    }
    let (client_id, secret) = auth::client_credentials(headers, form)?;
    m.0.tokens.authenticate(&client_id, &secret).await
}

/// `POST /v2/send/xms`: validated, stored durably, then answered; delivery follows.
#[utoipa::path(post, path = paths::SEND_XMS, request_body(content = Object, description = "the document's XMS fields"),
    responses((status = 200, body = SendAnswer), (status = 400, description = "code 410, naming the field"),
              (status = 401, description = "code 400")),
    security(("bearer" = [])))]
pub(crate) async fn send_xms(
    State(m): State<MessagingService>,
    caller: Result<Caller, MessagingError>,
    headers: HeaderMap,
    req: axum::extract::Request,
) -> Response {
    send::<xms::XmsSend>(m, caller, headers, req).await
}

/// The caller of a message call: the client of its access token, known before the body is
/// read so that the limits come first. A call without a valid token counts against its
/// peer's address, then is refused (401). `BARE_OK` also takes the token without the word
/// `Bearer` (the seed's MMS upload example sends it so).
pub(crate) struct Caller<const BARE_OK: bool = false> {
    pub client_id: ClientId,
    _in_flight: Admission,
}

impl<const BARE_OK: bool> FromRequestParts<MessagingService> for Caller<BARE_OK> {
    type Rejection = MessagingError;

    async fn from_request_parts(
        parts: &mut Parts,
        m: &MessagingService,
    ) -> Result<Self, MessagingError> {
        let client = match auth::bearer(&parts.headers, BARE_OK) {
            Ok(token) => m.0.tokens.authorize(token).await,
            Err(e) => Err(e),
        };
        let key = match &client {
            Ok(client_id) => Key::client(client_id.as_str()),
            Err(_) => Key::peer(Peer::of(&parts.extensions)),
        };
        let in_flight = m.0.limiter.admit(key)?;
        Ok(Caller {
            client_id: client?,
            _in_flight: in_flight,
        })
    }
}

/// Every send of the caller: `accept`, the body, its rules and files, then the durable
/// store. A refusal echoes the body's `cid`, when it had one; one over a limit is answered
/// before the body is read, which is what the limit spares.
pub(crate) async fn send<T: Sendable>(
    m: MessagingService,
    caller: Result<Caller, MessagingError>,
    headers: HeaderMap,
    req: axum::extract::Request,
) -> Response {
    // Within the listener's body limit (the router's `DefaultBodyLimit` travels with `req`).
    let body = match caller {
        Err(e @ MessagingError::TooManyRequests(_)) => return e.into_response(),
        _ => Bytes::from_request(req, &()).await,
    };
    // Read for the cid only when refused (a `Bytes` clone shares the body).
    let read = body.as_ref().ok().cloned();
    let cid_of = |bytes: Option<Bytes>| {
        #[derive(serde::Deserialize)]
        struct Cid {
            cid: Option<Value>,
        }
        let cid = serde_json::from_slice::<Cid>(&bytes?).ok()?.cid?;
        cid.as_str().map(str::to_owned)
    };
    // The admission stays bound to the end: the send is in flight until it is stored.
    let caller = match caller {
        Ok(caller) => caller,
        Err(e) => return e.answer(Shape::Result { cid: cid_of(read) }),
    };
    let accepted = async {
        auth::check_accept(&headers)?;
        let (send, raw): (T, Value) = json_body(&headers, body)?;
        m.0.send(caller.client_id.clone(), &send, raw).await
    };
    match accepted.await {
        Ok((uid, cid)) => Json(SendAnswer {
            code: "200".into(),
            uid: uid.into_string(),
            cid,
            result: Detail::ok("accepted"),
        })
        .into_response(),
        Err(e) => e.answer(Shape::Result { cid: cid_of(read) }),
    }
}

/// `POST /v2/info/message/search`: one page of the caller's XMS messages, oldest first.
#[utoipa::path(post, path = paths::XMS_SEARCH, request_body = Option<XmsSearch>,
    responses((status = 200, body = XmsSearchAnswer), (status = 400, description = "code 410"), (status = 401, description = "code 400")),
    security(("bearer" = [])))]
pub(crate) async fn search_xms(
    State(m): State<MessagingService>,
    caller: Result<Caller, MessagingError>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    search_xms_page(m, caller, headers, body)
        .await
        .unwrap_or_else(MessagingError::search_answer)
}

async fn search_xms_page(
    m: MessagingService,
    caller: Result<Caller, MessagingError>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, MessagingError> {
    let caller = caller?;
    let client_id = &caller.client_id;
    auth::check_accept(&headers)?;
    // Every field is optional: no body at all (or JSON's `null`) is today's search.
    let q: XmsSearch = match &body {
        Ok(bytes) if matches!(bytes.trim_ascii(), b"" | b"null") => XmsSearch::default(),
        _ => json_body(&headers, body)?.0,
    };
    for (field, value) in [("etc1", &q.etc1), ("etc2", &q.etc2)] {
        if let Some(v) = value {
            crate::text::check_chars(field, v, 50)?;
        }
    }
    let status = q.status_code.as_deref();
    let status = status.map(|s| status_filter("status_code", s, Channel::Xms));
    let filters = [
        status.transpose()?,
        q.etc1.clone().map(SearchFilter::Etc1),
        q.etc2.clone().map(SearchFilter::Etc2),
    ];
    let filters = filters.into_iter().flatten().collect();
    let p = Page {
        start_date: q.start_date.as_deref(),
        end_date: q.end_date.as_deref(),
        client_id: q.client_id.as_deref(),
        size: q.size,
        last_uid: q.last_uid.as_deref(),
    };
    let (results, found, last_uid) = m.0.xms_page(client_id, p, filters).await?;
    let size = q.size.unwrap_or(100);
    let results = serde_json::value::RawValue::from_string(results)
        .map_err(|e| MessagingError::Internal(e.into()))?;
    // The same shape as `XmsSearchAnswer`, with the rows as SQLite wrote them.
    Ok(Json(XmsPage {
        status: "200",
        code: "200",
        count: found.min(size),
        next: found > size,
        last_uid,
        code_detail: Detail::ok("ok"),
        results,
    })
    .into_response())
}

#[derive(serde::Serialize)]
struct XmsPage {
    status: &'static str,
    code: &'static str,
    count: i64,
    next: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_uid: Option<MessageUid>,
    code_detail: Detail,
    results: Box<serde_json::value::RawValue>,
}

pub(crate) fn request_field(request: &Value, key: &str) -> Option<String> {
    request.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// The fields of a stored request that an RCS search row shows; the rest is skipped
/// unparsed.
#[derive(serde::Deserialize, Default)]
pub(crate) struct ShownFields {
    tax_cd1: Option<String>,
    tax_cd2: Option<String>,
}

impl ShownFields {
    pub(crate) fn of(request: &str) -> Self {
        serde_json::from_str(request).unwrap_or_default()
    }
}

/// `GET /v2/info/message/search/detail/{uid}`: refusals in the codes of the result-code
/// table (an unknown uid, or another client's, is invalid input: 410) and, like the
/// answer, with `code_detail`.
#[utoipa::path(get, path = paths::XMS_DETAIL, params(("uid" = String, Path)),
    responses((status = 200, body = XmsDetailAnswer), (status = 400, description = "code 410: no message of the caller's has this uid"), (status = 401, description = "code 400")),
    security(("bearer" = [])))]
pub(crate) async fn xms_detail(
    State(m): State<MessagingService>,
    caller: Result<Caller, MessagingError>,
    headers: HeaderMap,
    Path(uid): Path<String>,
) -> Response {
    match xms_detail_of(&m, caller, &headers, &uid).await {
        Ok(answer) => Json(answer).into_response(),
        Err(e) => e.answer(Shape::CodeDetail),
    }
}

async fn xms_detail_of(
    m: &MessagingService,
    caller: Result<Caller, MessagingError>,
    headers: &HeaderMap,
    uid: &str,
) -> Result<XmsDetailAnswer, MessagingError> {
    let caller = caller?;
    let client_id = &caller.client_id;
    auth::check_accept(headers)?;
    let r =
        m.0.store
            .message(client_id, Channel::Xms, &MessageUid::from(uid))
            .await?
            .ok_or_else(|| MessagingError::invalid("uid", "no such message"))?;
    let zone = &m.0.zone;
    let request: Value = serde_json::from_str(&r.request).unwrap_or(Value::Null);
    let mut result = serde_json::Map::new();
    let mut put = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            result.insert(k.to_owned(), Value::String(v));
        }
    };
    put("uid", Some(r.uid.to_string()));
    put("cid", Some(r.cid.clone()));
    put("reg_date", Some(zone.format(r.reg_date)));
    put("message_type", Some(r.message_type.to_string()));
    put("status_code", Some(format!("API_{}", r.status)));
    put("phone_number", Some(r.phone_number.clone()));
    put("req_date", r.req_date.map(|t| zone.format(t)));
    put("sent_date", r.sent_date.map(|t| zone.format(t)));
    put("res_date", r.res_date.map(|t| zone.format(t)));
    put("error_message", r.error_message.clone());
    put("sms_status_code", r.sms_status_code.map(|c| c.to_string()));
    for key in [
        "sender_no",
        "message",
        "title",
        "nat_cd",
        "content_group_id",
    ] {
        put(key, request_field(&request, key));
    }
    Ok(XmsDetailAnswer {
        code: "200".into(),
        code_detail: Detail::ok("ok"),
        result,
    })
}
