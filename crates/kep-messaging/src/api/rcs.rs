//! The RCS calls: send, result groups, search and detail.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Caller, json_body, request_field};
use crate::error::Shape;
use crate::ids::{MessageUid, ReportGroupId};
use crate::kinds::{Channel, MessageType, Status};
use crate::search::{Page, service_type_filter, status_filter};
use crate::store::GroupCompletion;
use crate::{MessagingError, MessagingService, rcs};
use kep_api::messaging::paths;
use kep_api::messaging::{
    CodeAnswer, Detail, RcsResult, RcsResultsAnswer, RcsSearch, RcsSearchAnswer, RcsSearchRow,
    SendAnswer,
};

/// `POST /v2/send/rcs`
#[utoipa::path(post, path = paths::SEND_RCS, request_body(content = Object, description = "the document's RCS fields"),
    responses((status = 200, body = SendAnswer), (status = 400, description = "code 410, naming the field"),
              (status = 401, description = "code 400")),
    security(("bearer" = [])))]
pub(crate) async fn send_rcs(
    State(m): State<MessagingService>,
    caller: Result<Caller, MessagingError>,
    headers: HeaderMap,
    req: axum::extract::Request,
) -> Response {
    super::send::<rcs::RcsSend>(m, caller, headers, req).await
}

/// `GET|POST /v2/info/rcs/results`: up to 1000 finished results no open group holds, as a
/// new group to complete.
#[utoipa::path(method(get, post), path = paths::RCS_RESULTS, responses((status = 200, body = RcsResultsAnswer)), security(("bearer" = [])))]
pub(crate) async fn results(
    State(m): State<MessagingService>,
    caller: Caller,
    headers: HeaderMap,
) -> Result<Json<RcsResultsAnswer>, MessagingError> {
    let client_id = &caller.client_id;
    super::auth::check_accept(&headers)?;
    let (report_group_id, rows) = m.0.hand_out_results(client_id).await?;
    let results = rows
        .into_iter()
        .map(|r| RcsResult {
            uid: r.uid.into_string(),
            client_id: r.client_id.into_string(),
            cid: r.cid,
            status: format!("API_{}", r.status),
            rcs_status: r.rcs_status.map(|s| s.to_string()),
            fallback_status: r.fallback_status.map(|s| s.to_string()),
        })
        .collect();
    Ok(Json(RcsResultsAnswer {
        code: "200".into(),
        code_detail: Detail::ok("ok"),
        report_group_id: report_group_id.map(ReportGroupId::into_string),
        results,
    }))
}

/// `PUT /v2/info/rcs/results/complete/{report_group_id}`: the group's results are never
/// handed out again.
#[utoipa::path(put, path = paths::RCS_RESULTS_COMPLETE, params(("report_group_id" = String, Path)),
    responses((status = 200, body = CodeAnswer), (status = 400, description = "code 410: unknown, completed or expired group")),
    security(("bearer" = [])))]
pub(crate) async fn complete(
    State(m): State<MessagingService>,
    caller: Caller,
    headers: HeaderMap,
    Path(group): Path<String>,
) -> Result<Json<CodeAnswer>, MessagingError> {
    let client_id = &caller.client_id;
    super::auth::check_accept(&headers)?;
    let group = ReportGroupId::from(group);
    match m.0.complete_results(client_id, &group).await? {
        // Twice is as once: a client retrying after a lost answer sees success.
        GroupCompletion::Done | GroupCompletion::AlreadyCompleted => Ok(Json(CodeAnswer {
            code: "200".into(),
            code_detail: Detail::ok("completed"),
        })),
        GroupCompletion::Unknown => Err(MessagingError::invalid(
            "report_group_id",
            "no such open group",
        )),
        GroupCompletion::Expired => Err(MessagingError::invalid(
            "report_group_id",
            "its lease ran out; its results are handed out again",
        )),
    }
}

/// One page of an RCS search; a refusal in the searches' shape.
async fn search(
    m: MessagingService,
    caller: Result<Caller, MessagingError>,
    headers: HeaderMap,
    q: Result<RcsSearch, MessagingError>,
) -> Response {
    search_page(m, caller, headers, q)
        .await
        .map_or_else(MessagingError::search_answer, |page| {
            Json(page).into_response()
        })
}

async fn search_page(
    m: MessagingService,
    caller: Result<Caller, MessagingError>,
    headers: HeaderMap,
    q: Result<RcsSearch, MessagingError>,
) -> Result<RcsSearchAnswer, MessagingError> {
    // The caller first: a refusal for the token outranks one for the request.
    let caller = caller?;
    let q = q?;
    let client_id = &caller.client_id;
    super::auth::check_accept(&headers)?;
    let mut filters = Vec::new();
    if let Some(s) = &q.status {
        filters.push(status_filter("status", s, Channel::Rcs)?);
    }
    if let Some(t) = &q.service_type {
        filters.push(service_type_filter(t)?);
    }
    let p = Page {
        start_date: q.start_date.as_deref(),
        end_date: q.end_date.as_deref(),
        client_id: q.client_id.as_deref(),
        size: q.size,
        last_uid: q.last_uid.as_deref(),
    };
    let (rows, next) = m.0.search(client_id, Channel::Rcs, p, filters).await?;
    let zone = &m.0.zone;
    let results: Vec<RcsSearchRow> = rows
        .into_iter()
        .map(|r| {
            let shown = super::ShownFields::of(&r.request);
            RcsSearchRow {
                reg_date: zone.format(r.reg_date),
                status: format!("API_{}", r.status),
                rcs_status: r.rcs_status.map(|s| s.to_string()),
                fallback_status: r.fallback_status.map(|s| s.to_string()),
                error_message: r.error_message,
                tax_cd1: shown.tax_cd1,
                tax_cd2: shown.tax_cd2,
                uid: r.uid.into_string(),
                cid: r.cid,
            }
        })
        .collect();
    Ok(RcsSearchAnswer {
        status: "200".into(),
        code: "200".into(),
        count: results.len() as i64,
        next,
        last_uid: results.last().map(|r| r.uid.clone()),
        code_detail: Detail::ok("ok"),
        results,
    })
}

/// `POST /v2/info/rcs/search`
#[utoipa::path(post, path = paths::RCS_SEARCH, request_body = RcsSearch,
    responses((status = 200, body = RcsSearchAnswer), (status = 400, description = "code 410")), security(("bearer" = [])))]
pub(crate) async fn search_post(
    State(m): State<MessagingService>,
    caller: Result<Caller, MessagingError>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let q = json_body(&headers, body).map(|(q, _): (RcsSearch, Value)| q);
    search(m, caller, headers, q).await
}

/// `GET /v2/info/rcs/search`: the same fields as a query string.
#[utoipa::path(get, path = paths::RCS_SEARCH, params(RcsSearchParams),
    responses((status = 200, body = RcsSearchAnswer), (status = 400, description = "code 410")), security(("bearer" = [])))]
pub(crate) async fn search_get(
    State(m): State<MessagingService>,
    caller: Result<Caller, MessagingError>,
    headers: HeaderMap,
    q: Result<Query<RcsSearch>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = q
        .map(|Query(q)| q)
        .map_err(|e| MessagingError::invalid("query", e.body_text()));
    search(m, caller, headers, q).await
}

/// The query-string form of [`RcsSearch`], for the OpenAPI description.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[expect(dead_code, reason = "describes the query string only")]
pub(crate) struct RcsSearchParams {
    #[param(format = Date)]
    start_date: Option<String>,
    #[param(format = Date)]
    end_date: Option<String>,
    client_id: Option<String>,
    #[param(minimum = 1, maximum = 1000)]
    size: Option<i64>,
    #[param(pattern = "^[0-9]{20}$")]
    last_uid: Option<String>,
    status: Option<String>,
    #[param(pattern = "^(RCSSMS|RCSLMS|RCSMMS|RCSTMPL)$")]
    service_type: Option<String>,
}

/// `GET /v2/info/rcs/search/detail/{uid}`: 200, 401, 404 (and 400 for an `accept` that
/// refuses JSON). Another client's message is a 404 as one that does not exist: a 403
/// would tell the caller the uid is someone's.
#[utoipa::path(get, path = paths::RCS_DETAIL, params(("uid" = String, Path)),
    responses((status = 200, description = "the message"), (status = 400, description = "code 400: an accept that refuses JSON"), (status = 401, description = "code 401"),
              (status = 404, description = "code 404: no message of the caller's has this uid")),
    security(("bearer" = [])))]
pub(crate) async fn detail(
    State(m): State<MessagingService>,
    caller: Result<Caller, MessagingError>,
    headers: HeaderMap,
    Path(uid): Path<String>,
) -> Response {
    match detail_of(&m, caller, &headers, uid).await {
        Ok(result) => (
            StatusCode::OK,
            Json(json!({"code": "200", "code_detail": Detail::ok("ok"), "result": result})),
        )
            .into_response(),
        Err(e) => e.answer(Shape::RcsDetail),
    }
}

async fn detail_of(
    m: &MessagingService,
    caller: Result<Caller, MessagingError>,
    headers: &HeaderMap,
    uid: String,
) -> Result<Value, MessagingError> {
    let caller = caller?;
    super::auth::check_accept(headers)?;
    let uid = MessageUid::from(uid);
    let r =
        m.0.store
            .message(&caller.client_id, Channel::Rcs, &uid)
            .await?
            .ok_or(MessagingError::NotFound("no such message"))?;
    let zone = &m.0.zone;
    let request: Value = serde_json::from_str(&r.request).unwrap_or(Value::Null);
    let date = |ms: Option<i64>| ms.map(|t| zone.format(t));
    let buttons: Vec<String> = request["body"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|b| b["button"].as_array().cloned().unwrap_or_default())
        .map(|b| b.to_string())
        .collect();
    let mut result = json!({
        "uid": r.uid, "client_id": r.client_id, "cid": r.cid, "reg_date": zone.format(r.reg_date),
        "phone_number": r.phone_number, "callback": request_field(&request, "sender_no"),
        "message_base_id": request_field(&request, "template_code"), "message_group_id": r.uid,
        "service_type": r.message_type.as_str(), "body": shown_body(r.message_type, &request),
        "fallback_type": request_field(&request, "fall_back_message_type"),
        "fallback_calback": request_field(&request, "sender_no"),
        "fallback_subject": request_field(&request, "fall_back_title"),
        "fallback_message": request_field(&request, "fall_back_message"),
        "req_date": date(r.req_date), "res_date": date(r.res_date), "sent_date": date(r.sent_date),
        // The seed's "carrier to device reception time": only a message a device received.
        "time_stamp": date(r.res_date.filter(|_| r.status == Status::Delivered)),
        "status": format!("API_{}", r.status), "rcs_status": r.rcs_status.map(|s| s.as_str()),
        "fallback_status": r.fallback_status.map(|s| s.as_str()),
        "error_message": r.error_message, "mno_info": mno_info(&r.phone_number),
        "buttons": buttons, "fallback_yn": request["fall_back_yn"].as_bool().unwrap_or(false),
    });
    // Fields never set are left out, not null (CONTRACT §0).
    if let Some(obj) = result.as_object_mut() {
        obj.retain(|_, v| !v.is_null());
    }
    Ok(result)
}

/// The detail's `body`: the bodies as sent, or for RCSTMPL its template text (the free text,
/// or the cell-type variables as a JSON object).
fn shown_body(message_type: MessageType, request: &Value) -> Option<String> {
    if message_type == MessageType::RcsTmpl {
        return request_field(request, "tmpl_decription")
            .or_else(|| request.get("tmpl_variable").map(Value::to_string));
    }
    request.get("body").map(Value::to_string)
}

/// The simulated carrier of a number: one of the three Korean mobile carriers.
fn mno_info(phone: &str) -> &'static str {
    let digit = phone
        .bytes()
        .last()
        .map(|b| b.wrapping_sub(b'0'))
        .unwrap_or(0);
    ["SKT", "KT", "LGU"][usize::from(digit % 3)]
}
