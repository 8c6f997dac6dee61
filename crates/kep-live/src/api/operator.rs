//! The operator's live-service calls, under `/admin/v1/live` on the admin listener.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use kep_core::http::{AdminJson, Path};
use serde_json::{Value, json};
use utoipa::OpenApi;

use super::rpc::check_targets;
use crate::access::CreateOutcome;
use crate::error::Operator;
use crate::ids::{RoomId, ServiceId};
use crate::{LiveError, LiveService};
use kep_api::live::paths;
use kep_api::live::{
    CreateServiceRequest, DeliveriesQuery, InactivateRequest, KickRequest, RoomInfo, RoomList,
    ServiceList, ServiceSecrets, ServiceSummary, UpdateServiceRequest, Webhook, WebhookDeliveries,
    WebhookDelivery, WebhookRequest,
};

pub(crate) fn router(live: LiveService) -> Router {
    Router::new()
        .route(paths::SERVICES, post(create_service).get(list_services))
        .route(paths::SERVICE, get(get_service).patch(update_service))
        .route(paths::SERVICE_SECRETS, post(rotate_secrets))
        .route(paths::ROOMS, get(list_rooms))
        .route(paths::ROOM, delete(destroy_room))
        .route(paths::ROOM_KICK, post(kick))
        .route(paths::ROOM_INACTIVATE, post(inactivate))
        .route(paths::WEBHOOK, put(set_webhook).get(show_webhook))
        .route(paths::WEBHOOK_SECRET, post(rotate_webhook_secret))
        .route(paths::WEBHOOK_DELIVERIES, get(webhook_deliveries))
        .with_state(live)
}

/// OpenAPI of the live operator calls.
#[derive(OpenApi)]
#[openapi(
    paths(
        create_service,
        list_services,
        get_service,
        update_service,
        rotate_secrets,
        list_rooms,
        destroy_room,
        kick,
        inactivate,
        set_webhook,
        show_webhook,
        rotate_webhook_secret,
        webhook_deliveries
    ),
    components(schemas(
        CreateServiceRequest,
        ServiceSecrets,
        ServiceSummary,
        UpdateServiceRequest,
        RoomList,
        RoomInfo,
        KickRequest,
        InactivateRequest,
        WebhookRequest,
        Webhook,
        WebhookDelivery,
        WebhookDeliveries
    ))
)]
pub struct LiveAdminDoc;

pub(crate) fn valid_service_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

fn check_verifier_url(url: &Option<String>) -> Result<(), LiveError> {
    match url {
        Some(u) if !(u.starts_with("http://") || u.starts_with("https://")) => Err(
            LiveError::invalid_params("externalVerifierUrl", "must be an http:// or https:// URL"),
        ),
        _ => Ok(()),
    }
}

/// `POST /admin/v1/live/services`: creates a live service and shows its secrets once.
#[utoipa::path(post, path = paths::SERVICES, request_body = CreateServiceRequest,
    responses((status = 201, body = ServiceSecrets), (status = 400, body = kep_core::http::ErrorBody),
              (status = 409, body = kep_core::http::ErrorBody)),
    security(("operator" = [])))]
pub(crate) async fn create_service(
    State(live): State<LiveService>,
    AdminJson(req): AdminJson<CreateServiceRequest>,
) -> Result<(StatusCode, Json<ServiceSecrets>), Operator> {
    let service_id = req
        .service_id
        .unwrap_or_else(|| format!("svc-{}", &kep_core::secret::new_uuid()[..8]));
    if !valid_service_id(&service_id) {
        return Err(LiveError::invalid_params(
            "serviceId",
            "1 to 64 letters, digits, '.', '_' or '-'",
        )
        .into());
    }
    check_verifier_url(&req.external_verifier_url)?;
    let given = |field: &str, secret| {
        kep_core::secret::given_or_new(secret).map_err(|why| LiveError::invalid_params(field, why))
    };
    let secrets = (
        given("adminSecret", req.admin_secret)?,
        given("serviceSecret", req.service_secret)?,
    );
    match live
        .0
        .access
        .create(
            ServiceId::from(service_id),
            req.external_verifier_url,
            secrets,
        )
        .await?
    {
        CreateOutcome::Created(secrets) => {
            live.0
                .activity
                .record("service.created", &[&secrets.service_id], Value::Null);
            Ok((StatusCode::CREATED, Json(secrets)))
        }
        CreateOutcome::Taken => {
            Err(LiveError::Conflict("a live service with that serviceId exists".into()).into())
        }
    }
}

/// `GET /admin/v1/live/services`: the service ids, in creation order.
#[utoipa::path(get, path = paths::SERVICES, responses((status = 200, body = Vec<String>)),
    security(("operator" = [])))]
pub(crate) async fn list_services(
    State(live): State<LiveService>,
) -> Result<Json<ServiceList>, Operator> {
    let ids = live.0.access.list().await?;
    Ok(Json(ids.into_iter().map(ServiceId::into_string).collect()))
}

/// `GET /admin/v1/live/services/{id}`
#[utoipa::path(get, path = paths::SERVICE,
    params(("id" = String, Path, description = "serviceId")),
    responses((status = 200, body = ServiceSummary), (status = 404, body = kep_core::http::ErrorBody)),
    security(("operator" = [])))]
pub(crate) async fn get_service(
    State(live): State<LiveService>,
    Path(id): Path<String>,
) -> Result<Json<ServiceSummary>, Operator> {
    let svc = live
        .0
        .access
        .service(&id)
        .ok_or(LiveError::ServiceNotFound)?;
    Ok(Json(ServiceSummary {
        service_id: id,
        external_verifier_url: svc.external_verifier_url,
    }))
}

/// `PATCH /admin/v1/live/services/{id}`: sets or removes the external verifier.
#[utoipa::path(patch, path = paths::SERVICE, request_body = UpdateServiceRequest,
    params(("id" = String, Path, description = "serviceId")),
    responses((status = 200, body = ServiceSummary), (status = 404, body = kep_core::http::ErrorBody)),
    security(("operator" = [])))]
pub(crate) async fn update_service(
    State(live): State<LiveService>,
    Path(id): Path<ServiceId>,
    AdminJson(req): AdminJson<UpdateServiceRequest>,
) -> Result<Json<ServiceSummary>, Operator> {
    check_verifier_url(&req.external_verifier_url)?;
    let url = req.external_verifier_url;
    if !live.0.access.set_verifier(&id, url.clone()).await? {
        return Err(LiveError::ServiceNotFound.into());
    }
    let detail = json!({ "externalVerifierUrl": url });
    live.0
        .activity
        .record("service.updated", &[&id.as_str()], detail);
    Ok(Json(ServiceSummary {
        service_id: id.into_string(),
        external_verifier_url: url,
    }))
}

/// `POST /admin/v1/live/services/{id}/secrets`: new admin and service secrets, shown once.
#[utoipa::path(post, path = paths::SERVICE_SECRETS,
    params(("id" = String, Path, description = "serviceId")),
    responses((status = 200, body = ServiceSecrets), (status = 404, body = kep_core::http::ErrorBody)),
    security(("operator" = [])))]
pub(crate) async fn rotate_secrets(
    State(live): State<LiveService>,
    Path(id): Path<ServiceId>,
) -> Result<Json<ServiceSecrets>, Operator> {
    match live.0.access.rotate(&id).await? {
        Some(secrets) => {
            live.0
                .activity
                .record("service.secrets_rotated", &[&id.as_str()], Value::Null);
            Ok(Json(secrets))
        }
        None => Err(LiveError::ServiceNotFound.into()),
    }
}

/// The service's id as the rooms key it, or 404.
fn known_service(live: &LiveService, id: &str) -> Result<Arc<str>, Operator> {
    match live.0.access.service(id) {
        Some(_) => Ok(Arc::from(id)),
        None => Err(LiveError::ServiceNotFound.into()),
    }
}

/// `GET /admin/v1/live/services/{id}/rooms`: the rooms, by id, with their participants.
#[utoipa::path(get, path = paths::ROOMS,
    params(("id" = String, Path, description = "serviceId")),
    responses((status = 200, body = RoomList), (status = 404, body = kep_core::http::ErrorBody)),
    security(("operator" = [])))]
pub(crate) async fn list_rooms(
    State(live): State<LiveService>,
    Path(id): Path<String>,
) -> Result<Json<RoomList>, Operator> {
    let service = known_service(&live, &id)?;
    let rooms = &live.0.room_methods;
    let mut list = Vec::new();
    for room_id in rooms.list_rooms(&service).await? {
        // A room that closed since it was listed is left out.
        let Ok(participants) = rooms.participants(&service, &room_id).await else {
            continue;
        };
        list.push(RoomInfo {
            room_id: room_id.into_string(),
            participants,
        });
    }
    Ok(Json(RoomList { rooms: list }))
}

/// `DELETE /admin/v1/live/services/{id}/rooms/{room}`: as `Room.DestroyRoom`.
#[utoipa::path(delete, path = paths::ROOM,
    params(("id" = String, Path, description = "serviceId"), ("room" = String, Path, description = "roomId")),
    responses((status = 204), (status = 404, body = kep_core::http::ErrorBody)),
    security(("operator" = [])))]
pub(crate) async fn destroy_room(
    State(live): State<LiveService>,
    Path((id, room)): Path<(String, RoomId)>,
) -> Result<StatusCode, Operator> {
    let service = known_service(&live, &id)?;
    live.0.room_methods.destroy(&service, &room).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /admin/v1/live/services/{id}/rooms/{room}/kick`: as `Room.KickParticipant`, all
/// targets or none.
#[utoipa::path(post, path = paths::ROOM_KICK, request_body = KickRequest,
    params(("id" = String, Path, description = "serviceId"), ("room" = String, Path, description = "roomId")),
    responses((status = 204), (status = 400, body = kep_core::http::ErrorBody),
              (status = 404, body = kep_core::http::ErrorBody)),
    security(("operator" = [])))]
pub(crate) async fn kick(
    State(live): State<LiveService>,
    Path((id, room)): Path<(String, RoomId)>,
    AdminJson(mut req): AdminJson<KickRequest>,
) -> Result<StatusCode, Operator> {
    check_targets(&mut req.targets, live.0.settings.max_targets)?;
    let service = known_service(&live, &id)?;
    live.0
        .room_methods
        .kick(&service, &room, &req.targets)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /admin/v1/live/services/{id}/rooms/{room}/inactivate`: as `Room.InactiveStream`,
/// all targets or none.
#[utoipa::path(post, path = paths::ROOM_INACTIVATE, request_body = InactivateRequest,
    params(("id" = String, Path, description = "serviceId"), ("room" = String, Path, description = "roomId")),
    responses((status = 204), (status = 400, body = kep_core::http::ErrorBody),
              (status = 404, body = kep_core::http::ErrorBody)),
    security(("operator" = [])))]
pub(crate) async fn inactivate(
    State(live): State<LiveService>,
    Path((id, room)): Path<(String, RoomId)>,
    AdminJson(mut req): AdminJson<InactivateRequest>,
) -> Result<StatusCode, Operator> {
    check_targets(&mut req.targets, live.0.settings.max_targets)?;
    let service = known_service(&live, &id)?;
    live.0
        .room_methods
        .inactivate(&service, &room, &req.targets)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A receiver's URL: `http://` or `https://` with a host, at most 2,048 characters.
pub(crate) fn check_webhook_url(url: &str) -> Result<(), LiveError> {
    let fine = url.len() <= 2048
        && reqwest::Url::parse(url)
            .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
    if fine {
        Ok(())
    } else {
        Err(LiveError::invalid_params(
            "url",
            "an http:// or https:// URL with a host, at most 2048 characters",
        ))
    }
}

fn webhook(row: &crate::store::WebhookRow, secret: bool) -> Webhook {
    Webhook {
        url: row.url.clone(),
        enabled: row.enabled,
        secret: secret.then(|| row.secret.clone()),
        disabled_reason: row.disabled_reason.clone(),
    }
}

/// `PUT /admin/v1/live/services/{id}/webhook`: where the service's room events go, signed
/// with its secret (made the first time; shown here).
#[utoipa::path(put, path = paths::WEBHOOK, request_body = WebhookRequest,
    params(("id" = String, Path, description = "serviceId")),
    responses((status = 200, body = Webhook), (status = 400, body = kep_core::http::ErrorBody),
              (status = 404, body = kep_core::http::ErrorBody)),
    security(("operator" = [])))]
pub(crate) async fn set_webhook(
    State(live): State<LiveService>,
    Path(id): Path<ServiceId>,
    AdminJson(req): AdminJson<WebhookRequest>,
) -> Result<Json<Webhook>, Operator> {
    check_webhook_url(&req.url)?;
    known_service(&live, id.as_str())?;
    let row = live.0.webhooks.put(&id, req.url, req.enabled, None).await?;
    let detail = json!({ "url": row.url, "enabled": row.enabled });
    live.0
        .activity
        .record("webhook.set", &[&id.as_str()], detail);
    Ok(Json(webhook(&row, true)))
}

/// `GET /admin/v1/live/services/{id}/webhook` (without its secret).
#[utoipa::path(get, path = paths::WEBHOOK,
    params(("id" = String, Path, description = "serviceId")),
    responses((status = 200, body = Webhook), (status = 404, body = kep_core::http::ErrorBody)),
    security(("operator" = [])))]
pub(crate) async fn show_webhook(
    State(live): State<LiveService>,
    Path(id): Path<String>,
) -> Result<Json<Webhook>, Operator> {
    known_service(&live, &id)?;
    let row = live.0.webhooks.get(&id).ok_or(LiveError::NoWebhook)?;
    Ok(Json(webhook(&row, false)))
}

/// `POST /admin/v1/live/services/{id}/webhook/secret`: a new signing secret, shown once;
/// the old one signs nothing more.
#[utoipa::path(post, path = paths::WEBHOOK_SECRET,
    params(("id" = String, Path, description = "serviceId")),
    responses((status = 200, body = Webhook), (status = 404, body = kep_core::http::ErrorBody),
              (status = 409, body = kep_core::http::ErrorBody, description = "the service has no webhook to sign for")),
    security(("operator" = [])))]
pub(crate) async fn rotate_webhook_secret(
    State(live): State<LiveService>,
    Path(id): Path<ServiceId>,
) -> Result<Json<Webhook>, Operator> {
    known_service(&live, id.as_str())?;
    // The service is there: what it lacks is a webhook to rotate the secret of.
    let old = live.0.webhooks.get(id.as_str()).ok_or_else(|| {
        LiveError::Conflict("the service has no webhook: set one first (PUT …/webhook)".into())
    })?;
    let secret = Some(kep_core::secret::new_secret());
    let row = live
        .0
        .webhooks
        .put(&id, old.url.clone(), old.enabled, secret)
        .await?;
    live.0
        .activity
        .record("webhook.secret_rotated", &[&id.as_str()], Value::Null);
    Ok(Json(webhook(&row, true)))
}

/// `GET /admin/v1/live/services/{id}/webhook/deliveries`: the service's events, newest
/// first, with their attempts and last error.
#[utoipa::path(get, path = paths::WEBHOOK_DELIVERIES,
    params(("id" = String, Path, description = "serviceId"), DeliveriesQuery),
    responses((status = 200, body = WebhookDeliveries), (status = 400, body = kep_core::http::ErrorBody),
              (status = 404, body = kep_core::http::ErrorBody)),
    security(("operator" = [])))]
pub(crate) async fn webhook_deliveries(
    State(live): State<LiveService>,
    Path(id): Path<ServiceId>,
    kep_core::http::Query(q): kep_core::http::Query<DeliveriesQuery>,
) -> Result<Json<WebhookDeliveries>, Operator> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(LiveError::invalid_params("limit", "1 to 1000").into());
    }
    known_service(&live, id.as_str())?;
    let rows = live.0.webhooks.deliveries(&id, limit).await?;
    let deliveries = rows
        .into_iter()
        .map(|r| WebhookDelivery {
            id: r.id,
            event: r.event,
            room_id: r.room_id,
            status: r.status,
            attempts: r.attempts,
            last_error: r.last_error,
            at: r.at,
            delivered_at: r.delivered_at,
            body: serde_json::from_str(&r.body).unwrap_or(Value::Null),
        })
        .collect();
    Ok(Json(WebhookDeliveries { deliveries }))
}
