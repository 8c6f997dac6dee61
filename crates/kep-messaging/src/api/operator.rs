//! The operator's messaging calls under `/admin/v1/messaging`: API clients, a read-back of
//! what the carrier was handed, and every client's messages, their timelines and RCS result
//! groups.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use kep_core::http::{AdminJson, ErrorBody, Path, Query};
use utoipa::OpenApi;

use crate::error::Operator;
use crate::ids::{ClientId, MessageUid};
use crate::kinds::{Channel, Status};
use crate::store::{MessageFilter, MessageSummaryRow};
use crate::uids::ServiceZone;
use crate::{MessagingError, MessagingService};
use kep_api::messaging::paths;
use kep_api::messaging::{
    CarrierStatus, ClientSecret, ClientSummary, CreateClient, MessageList, MessageQuery,
    MessageSummary, MessageTimeline, OutboxEntry, ReportGroup, ReportGroupList, ReportGroupQuery,
    TimelineEntry, TimelineEvent,
};

pub(crate) fn router(m: MessagingService) -> Router {
    Router::new()
        .route(paths::CLIENTS, post(create_client).get(list_clients))
        .route(paths::CLIENT, delete(delete_client))
        .route(paths::CLIENT_SECRET, post(rotate_secret))
        .route(paths::OUTBOX, get(outbox))
        .route(paths::CARRIERS, get(carriers))
        .route(paths::MESSAGES, get(messages))
        .route(paths::MESSAGE, get(message))
        .route(paths::REPORT_GROUPS, get(report_groups))
        .with_state(m)
}

/// OpenAPI of the messaging operator calls.
#[derive(OpenApi)]
#[openapi(
    paths(
        create_client,
        list_clients,
        delete_client,
        rotate_secret,
        outbox,
        carriers,
        messages,
        message,
        report_groups
    ),
    components(schemas(
        CreateClient,
        ClientSecret,
        ClientSummary,
        OutboxEntry,
        CarrierStatus,
        MessageList,
        MessageSummary,
        MessageTimeline,
        TimelineEntry,
        TimelineEvent,
        ReportGroupList,
        ReportGroup
    ))
)]
pub struct MessagingAdminDoc;

/// `POST /admin/v1/messaging/clients`: a new API client; its secret is shown once.
#[utoipa::path(post, path = paths::CLIENTS, request_body = CreateClient,
    responses((status = 201, body = ClientSecret), (status = 400, body = ErrorBody),
              (status = 409, body = ErrorBody)), security(("operator" = [])))]
pub(crate) async fn create_client(
    State(m): State<MessagingService>,
    AdminJson(req): AdminJson<CreateClient>,
) -> Result<(StatusCode, Json<ClientSecret>), Operator> {
    if req.name.as_ref().is_some_and(|n| n.chars().count() > 100) {
        return Err(MessagingError::invalid("name", "at most 100 characters").into());
    }
    if req
        .client_id
        .as_deref()
        .is_some_and(|id| !crate::clients::valid_client_id(id))
    {
        return Err(MessagingError::invalid("client_id", "1 to 64 letters and digits").into());
    }
    let secret = kep_core::secret::given_or_new(req.client_secret)
        .map_err(|why| MessagingError::invalid("client_secret", why))?;
    let given_id = req.client_id.map(ClientId::from);
    let (client_id, client_secret) =
        m.0.create_client(given_id, req.name.as_deref(), secret)
            .await?
            .ok_or(MessagingError::Conflict(
                "a client with that client_id exists",
            ))?;
    Ok((
        StatusCode::CREATED,
        Json(ClientSecret {
            client_id: client_id.into_string(),
            client_secret,
        }),
    ))
}

/// `GET /admin/v1/messaging/clients`
#[utoipa::path(get, path = paths::CLIENTS, responses((status = 200, body = Vec<ClientSummary>)),
    security(("operator" = [])))]
pub(crate) async fn list_clients(
    State(m): State<MessagingService>,
) -> Result<Json<Vec<ClientSummary>>, Operator> {
    let clients = m.0.store.clients().await?;
    Ok(Json(
        clients
            .into_iter()
            .map(|c| ClientSummary {
                client_id: c.client_id.into_string(),
                name: c.name,
            })
            .collect(),
    ))
}

/// `DELETE /admin/v1/messaging/clients/{id}`: the client, its tokens and its messages.
#[utoipa::path(delete, path = paths::CLIENT, params(("id" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody)), security(("operator" = [])))]
pub(crate) async fn delete_client(
    State(m): State<MessagingService>,
    Path(id): Path<String>,
) -> Result<StatusCode, Operator> {
    let id = ClientId::from(id);
    if !m.0.delete_client(&id).await? {
        return Err(MessagingError::NotFound("no such client").into());
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /admin/v1/messaging/clients/{id}/secret`: a new secret, shown once; the old one
/// and every token it got stop working.
#[utoipa::path(post, path = paths::CLIENT_SECRET, params(("id" = String, Path)),
    responses((status = 200, body = ClientSecret), (status = 404, body = ErrorBody)), security(("operator" = [])))]
pub(crate) async fn rotate_secret(
    State(m): State<MessagingService>,
    Path(id): Path<String>,
) -> Result<Json<ClientSecret>, Operator> {
    let id = ClientId::from(id);
    let Some(client_secret) = m.0.new_client_secret(&id).await? else {
        return Err(MessagingError::NotFound("no such client").into());
    };
    Ok(Json(ClientSecret {
        client_id: id.into_string(),
        client_secret,
    }))
}

#[derive(serde::Deserialize)]
pub(crate) struct OutboxQuery {
    limit: Option<i64>,
}

/// `GET /admin/v1/messaging/outbox?limit=N`: what left for the carrier, newest first.
#[utoipa::path(get, path = paths::OUTBOX, params(("limit" = Option<i64>, Query, description = "1 to 1000, default 100", minimum = 1, maximum = 1000)),
    responses((status = 200, body = Vec<OutboxEntry>)), security(("operator" = [])))]
pub(crate) async fn outbox(
    State(m): State<MessagingService>,
    Query(q): Query<OutboxQuery>,
) -> Result<Json<Vec<OutboxEntry>>, Operator> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(MessagingError::invalid("limit", "1 to 1000").into());
    }
    let rows = m.0.store.outbox(limit).await?;
    Ok(Json(
        rows.into_iter()
            .map(|r| OutboxEntry {
                id: r.id,
                uid: r.uid.into_string(),
                route: r.route.to_string(),
                phone_number: r.phone_number,
                payload: serde_json::from_str(&r.payload).unwrap_or(serde_json::Value::Null),
                outcome: r.outcome.to_string(),
                at: m.0.zone.format(r.at),
            })
            .collect(),
    ))
}

/// `GET /admin/v1/messaging/carriers`: this node's carriers, in the order they are tried,
/// and how each is doing.
#[utoipa::path(get, path = paths::CARRIERS, responses((status = 200, body = Vec<CarrierStatus>)), security(("operator" = [])))]
pub(crate) async fn carriers(State(m): State<MessagingService>) -> Json<Vec<CarrierStatus>> {
    Json(m.0.dispatcher.carrier().states())
}

/// The page size of the operator's lists: 1 to 500, default 50.
fn list_limit(limit: Option<i64>) -> Result<i64, MessagingError> {
    let limit = limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(MessagingError::invalid("limit", "1 to 500"));
    }
    Ok(limit)
}

fn summary(zone: &ServiceZone, r: MessageSummaryRow) -> MessageSummary {
    MessageSummary {
        uid: r.uid.into_string(),
        client_id: r.client_id.into_string(),
        cid: r.cid,
        channel: r.channel.to_string(),
        message_type: r.message_type.to_string(),
        phone_number: r.phone_number,
        status: r.status.to_string(),
        attempts: r.attempts,
        reg_date: zone.format(r.reg_date),
        res_date: r.res_date.map(|ms| zone.format(ms)),
    }
}

/// `GET /admin/v1/messaging/messages`: every client's messages, newest first, narrowed by
/// the filters given; `before` (the last uid of a page) pages on.
#[utoipa::path(get, path = paths::MESSAGES, params(MessageQuery),
    responses((status = 200, body = MessageList),
              (status = 400, body = ErrorBody, description = "A filter or the limit breaks its rule; `field` names it")),
    security(("operator" = [])))]
pub(crate) async fn messages(
    State(m): State<MessagingService>,
    Query(q): Query<MessageQuery>,
) -> Result<Json<MessageList>, Operator> {
    let status = q
        .status
        .map(|s| {
            Status::parse(&s)
                .ok_or_else(|| MessagingError::invalid("status", "100, 200, 510 or 520"))
        })
        .transpose()?;
    let channel = q
        .channel
        .map(|c| Channel::parse(&c).ok_or_else(|| MessagingError::invalid("channel", "XMS or RCS")))
        .transpose()?;
    let before = q
        .before
        .map(|u| {
            if u.len() == 20 && u.bytes().all(|b| b.is_ascii_digit()) {
                Ok(MessageUid::from(u))
            } else {
                Err(MessagingError::invalid("before", "a uid: 20 digits"))
            }
        })
        .transpose()?;
    let filter = MessageFilter {
        client_id: q.client_id.map(ClientId::from),
        phone_number: q.phone_number,
        status,
        channel,
        before,
        limit: list_limit(q.limit)?,
    };
    let rows = m.0.store.operator_messages(&filter).await?;
    Ok(Json(MessageList {
        messages: rows.into_iter().map(|r| summary(&m.0.zone, r)).collect(),
    }))
}

/// `GET /admin/v1/messaging/messages/{uid}`: any client's message, its accepted body, its
/// results and its timeline: accepted, each hand-over, and finished once final.
#[utoipa::path(get, path = paths::MESSAGE, params(("uid" = String, Path)),
    responses((status = 200, body = MessageTimeline), (status = 404, body = ErrorBody)),
    security(("operator" = [])))]
pub(crate) async fn message(
    State(m): State<MessagingService>,
    Path(uid): Path<String>,
) -> Result<Json<MessageTimeline>, Operator> {
    let Some((d, handovers)) = m.0.store.message_timeline(&MessageUid::from(uid)).await? else {
        return Err(MessagingError::NotFound("no such message").into());
    };
    let zone = &m.0.zone;
    let entry = |at: i64, event: TimelineEvent| TimelineEntry {
        at: zone.format(at),
        event,
        status: None,
        route: None,
        outcome: None,
        carrier: None,
    };
    let mut timeline = vec![TimelineEntry {
        status: Some(Status::Accepted.to_string()),
        ..entry(d.summary.reg_date, TimelineEvent::Accepted)
    }];
    timeline.extend(handovers.into_iter().map(|h| TimelineEntry {
        route: Some(h.route.to_string()),
        outcome: Some(h.outcome.to_string()),
        carrier: Some(h.carrier),
        ..entry(h.at, TimelineEvent::HandedOver)
    }));
    if d.summary.status != Status::Accepted
        && let Some(at) = d.summary.res_date
    {
        timeline.push(TimelineEntry {
            status: Some(d.summary.status.to_string()),
            ..entry(at, TimelineEvent::Finished)
        });
    }
    Ok(Json(MessageTimeline {
        request: serde_json::from_str(&d.request).unwrap_or(serde_json::Value::Null),
        rcs_status: d.rcs_status.map(|s| s.to_string()),
        fallback_status: d.fallback_status.map(|s| s.to_string()),
        sms_status_code: d.sms_status_code.map(|s| s.to_string()),
        error_message: d.error_message,
        report_group_id: d.report_group_id.map(|g| g.into_string()),
        message: summary(zone, d.summary),
        timeline,
    }))
}

/// `GET /admin/v1/messaging/report-groups`: RCS result groups, newest first, with how many
/// results each holds.
#[utoipa::path(get, path = paths::REPORT_GROUPS, params(ReportGroupQuery),
    responses((status = 200, body = ReportGroupList),
              (status = 400, body = ErrorBody, description = "The limit is out of range")),
    security(("operator" = [])))]
pub(crate) async fn report_groups(
    State(m): State<MessagingService>,
    Query(q): Query<ReportGroupQuery>,
) -> Result<Json<ReportGroupList>, Operator> {
    let limit = list_limit(q.limit)?;
    let client_id = q.client_id.map(ClientId::from);
    let rows = m.0.store.report_groups(client_id.as_ref(), limit).await?;
    let zone = &m.0.zone;
    Ok(Json(ReportGroupList {
        report_groups: rows
            .into_iter()
            .map(|g| ReportGroup {
                report_group_id: g.report_group_id.into_string(),
                client_id: g.client_id.into_string(),
                created_at: zone.format(g.created_at),
                lease_until: zone.format(g.lease_until),
                completed_at: g.completed_at.map(|ms| zone.format(ms)),
                results: g.results,
            })
            .collect(),
    }))
}
