//! The operator's messaging calls under `/admin/v1/messaging`: API clients, and a
//! read-back of what the carrier was handed.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use kep_core::http::{AdminJson, ApiError, ErrorBody, Path, Query};
use utoipa::OpenApi;

use crate::MessagingService;
use crate::ids::ClientId;
use kep_api::messaging::paths;
use kep_api::messaging::{ClientSecret, ClientSummary, CreateClient, OutboxEntry};

pub(crate) fn router(m: MessagingService) -> Router {
    Router::new()
        .route(paths::CLIENTS, post(create_client).get(list_clients))
        .route(paths::CLIENT, delete(delete_client))
        .route(paths::CLIENT_SECRET, post(rotate_secret))
        .route(paths::OUTBOX, get(outbox))
        .with_state(m)
}

/// OpenAPI of the messaging operator calls.
#[derive(OpenApi)]
#[openapi(
    paths(create_client, list_clients, delete_client, rotate_secret, outbox),
    components(schemas(CreateClient, ClientSecret, ClientSummary, OutboxEntry))
)]
pub struct MessagingAdminDoc;

/// `POST /admin/v1/messaging/clients`: a new API client; its secret is shown once.
#[utoipa::path(post, path = paths::CLIENTS, request_body = CreateClient,
    responses((status = 201, body = ClientSecret), (status = 400, body = ErrorBody)), security(("operator" = [])))]
pub(crate) async fn create_client(
    State(m): State<MessagingService>,
    AdminJson(req): AdminJson<CreateClient>,
) -> Result<(StatusCode, Json<ClientSecret>), ApiError> {
    if req.name.as_ref().is_some_and(|n| n.chars().count() > 100) {
        return Err(ApiError::invalid_field("name", "at most 100 characters"));
    }
    let (client_id, client_secret) =
        m.0.create_client(req.name.as_deref())
            .await
            .map_err(ApiError::internal)?;
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
) -> Result<Json<Vec<ClientSummary>>, ApiError> {
    let clients = m.0.store.clients().await.map_err(ApiError::internal)?;
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
) -> Result<StatusCode, ApiError> {
    let id = ClientId::from(id);
    if !m.0.delete_client(&id).await.map_err(ApiError::internal)? {
        return Err(ApiError::not_found("no such client"));
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
) -> Result<Json<ClientSecret>, ApiError> {
    let id = ClientId::from(id);
    let Some(client_secret) =
        m.0.new_client_secret(&id)
            .await
            .map_err(ApiError::internal)?
    else {
        return Err(ApiError::not_found("no such client"));
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
) -> Result<Json<Vec<OutboxEntry>>, ApiError> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::invalid_field("limit", "1 to 1000"));
    }
    let rows = m.0.store.outbox(limit).await.map_err(ApiError::internal)?;
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
