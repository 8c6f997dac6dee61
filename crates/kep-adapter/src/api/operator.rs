//! The platform side the seed does not show, under `/admin/v1/adapter` on the admin
//! listener: org login types and DRM release requests.

use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use kep_core::http::{AdminJson, ErrorBody, Path, Query, from_json};
use serde_json::Value;
use utoipa::OpenApi;

use crate::error::Operator;
use crate::ids::{OrgLoginTypeId, SessionId};
use crate::store::SessionFilter;
use crate::{AdapterError, AdapterService, orgs};
use kep_api::adapter::paths;
use kep_api::adapter::{
    CreateOrgLoginType, DrmRequest, DrmRequestCreated, DrmSession, DrmSessionList, DrmSessionQuery,
    OrgLoginType, OrgLoginTypeRequest, OrgLoginTypeSecret, SessionStatus,
};

pub(crate) fn router(adapter: AdapterService) -> Router {
    Router::new()
        .route(paths::ORG_LOGIN_TYPES, post(create_org).get(list_orgs))
        .route(
            paths::ORG_LOGIN_TYPE,
            get(show_org).put(update_org).delete(delete_org),
        )
        .route(paths::ORG_LOGIN_TYPE_SECRET_KEY, post(rotate_key))
        .route(
            paths::DRM_REQUESTS,
            post(create_drm_request).get(list_drm_requests),
        )
        .route(paths::DRM_REQUEST, get(show_drm_request))
        .route(paths::DRM_REQUEST_FILE, get(released_file))
        .with_state(adapter)
}

/// OpenAPI of the adapter's operator calls.
#[derive(OpenApi)]
#[openapi(
    paths(
        create_org,
        list_orgs,
        show_org,
        update_org,
        delete_org,
        rotate_key,
        create_drm_request,
        list_drm_requests,
        show_drm_request,
        released_file
    ),
    components(schemas(
        OrgLoginTypeRequest,
        CreateOrgLoginType,
        OrgLoginTypeSecret,
        OrgLoginType,
        DrmRequest,
        DrmRequestCreated,
        DrmSession,
        DrmSessionList
    ))
)]
pub struct AdapterAdminDoc;

/// `POST /admin/v1/adapter/org-login-types`: registers an org login type; its secret key
/// is shown once.
#[utoipa::path(post, path = paths::ORG_LOGIN_TYPES, request_body = CreateOrgLoginType,
    responses((status = 201, body = OrgLoginTypeSecret), (status = 400, body = ErrorBody),
              (status = 409, body = ErrorBody)), security(("operator" = [])))]
pub(crate) async fn create_org(
    State(adapter): State<AdapterService>,
    AdminJson(body): AdminJson<Value>,
) -> Result<(StatusCode, Json<OrgLoginTypeSecret>), Operator> {
    // Read apart: a flattened struct's errors lose their field's path (`data_model.…`).
    #[derive(serde::Deserialize)]
    struct Given {
        id: Option<i64>,
        secret_key: Option<String>,
    }
    let org = orgs::validate(from_json(body.clone())?)?;
    let Given { id, secret_key } = from_json(body)?;
    if id.is_some_and(|id| id < 1) {
        return Err(AdapterError::invalid_field("id", "1 or more").into());
    }
    let secret_key = kep_core::secret::given_or_new(secret_key)
        .map_err(|why| AdapterError::invalid_field("secret_key", why))?;
    let created = adapter
        .0
        .orgs
        .create(&org, id.map(OrgLoginTypeId), secret_key)
        .await?
        .ok_or_else(|| AdapterError::Conflict("an org login type with that id exists".into()))?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// `GET /admin/v1/adapter/org-login-types`
#[utoipa::path(get, path = paths::ORG_LOGIN_TYPES, responses((status = 200, body = Vec<OrgLoginType>)),
    security(("operator" = [])))]
pub(crate) async fn list_orgs(
    State(adapter): State<AdapterService>,
) -> Result<Json<Vec<OrgLoginType>>, Operator> {
    Ok(Json(adapter.0.orgs.list().await?))
}

fn no_such_org() -> AdapterError {
    AdapterError::NotFound("no such org login type".into())
}

/// `GET /admin/v1/adapter/org-login-types/{id}`
#[utoipa::path(get, path = paths::ORG_LOGIN_TYPE, params(("id" = i64, Path)),
    responses((status = 200, body = OrgLoginType), (status = 404, body = ErrorBody)), security(("operator" = [])))]
pub(crate) async fn show_org(
    State(adapter): State<AdapterService>,
    Path(id): Path<OrgLoginTypeId>,
) -> Result<Json<OrgLoginType>, Operator> {
    let org = adapter.0.orgs.show(id).await?;
    Ok(Json(org.ok_or_else(no_such_org)?))
}

/// `PUT /admin/v1/adapter/org-login-types/{id}`: replaces method, agent and data model.
#[utoipa::path(put, path = paths::ORG_LOGIN_TYPE, params(("id" = i64, Path)), request_body = OrgLoginTypeRequest,
    responses((status = 200, body = OrgLoginType), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("operator" = [])))]
pub(crate) async fn update_org(
    State(adapter): State<AdapterService>,
    Path(id): Path<OrgLoginTypeId>,
    AdminJson(body): AdminJson<Value>,
) -> Result<Json<OrgLoginType>, Operator> {
    let req = orgs::validate(from_json(body)?)?;
    let org = adapter.0.orgs.update(id, &req).await?;
    Ok(Json(org.ok_or_else(no_such_org)?))
}

/// `DELETE /admin/v1/adapter/org-login-types/{id}`: the org, its sessions and their files.
#[utoipa::path(delete, path = paths::ORG_LOGIN_TYPE, params(("id" = i64, Path)),
    responses((status = 204), (status = 404, body = ErrorBody)), security(("operator" = [])))]
pub(crate) async fn delete_org(
    State(adapter): State<AdapterService>,
    Path(id): Path<OrgLoginTypeId>,
) -> Result<StatusCode, Operator> {
    let sessions = adapter.0.orgs.delete(id).await?;
    adapter
        .0
        .drm
        .forget_files(&sessions.ok_or_else(no_such_org)?)
        .await;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /admin/v1/adapter/org-login-types/{id}/secret-key`: a new secret key, shown once;
/// the old one stops working.
#[utoipa::path(post, path = paths::ORG_LOGIN_TYPE_SECRET_KEY, params(("id" = i64, Path)),
    responses((status = 200, body = OrgLoginTypeSecret), (status = 404, body = ErrorBody)), security(("operator" = [])))]
pub(crate) async fn rotate_key(
    State(adapter): State<AdapterService>,
    Path(id): Path<OrgLoginTypeId>,
) -> Result<Json<OrgLoginTypeSecret>, Operator> {
    let rotated = adapter.0.orgs.rotate_key(id).await?;
    Ok(Json(rotated.ok_or_else(no_such_org)?))
}

/// `POST /admin/v1/adapter/drm-requests`: opens a `PENDING` session and notifies the org's
/// agent.
#[utoipa::path(post, path = paths::DRM_REQUESTS, request_body = DrmRequest,
    responses((status = 201, body = DrmRequestCreated), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("operator" = [])))]
pub(crate) async fn create_drm_request(
    State(adapter): State<AdapterService>,
    AdminJson(body): AdminJson<Value>,
) -> Result<(StatusCode, Json<DrmRequestCreated>), Operator> {
    let req: DrmRequest = from_json(body)?;
    // It travels to the agent and back as the `Kep-File-Id` header, which the agent's calls
    // have trimmed: visible ASCII, spaces only between.
    let id = &req.file_id;
    if id.is_empty()
        || id.len() > 1024
        || id.trim() != id
        || !id.chars().all(|c| c == ' ' || c.is_ascii_graphic())
    {
        return Err(AdapterError::invalid_field(
            "file_id",
            "1 to 1024 visible ASCII characters, spaces only between them",
        )
        .into());
    }
    adapter
        .0
        .orgs
        .show(OrgLoginTypeId(req.org_login_type_id))
        .await?
        .ok_or_else(no_such_org)?;
    let notice = adapter.0.drm.request(req).await?;
    Ok((
        StatusCode::CREATED,
        Json(DrmRequestCreated {
            session_id: notice.session_id,
            status: SessionStatus::Pending,
        }),
    ))
}

/// `GET /admin/v1/adapter/drm-requests`: sessions newest first, each as
/// `GET …/drm-requests/{session}` shows it.
#[utoipa::path(get, path = paths::DRM_REQUESTS, params(DrmSessionQuery),
    responses((status = 200, body = DrmSessionList), (status = 400, body = ErrorBody)), security(("operator" = [])))]
pub(crate) async fn list_drm_requests(
    State(adapter): State<AdapterService>,
    Query(q): Query<DrmSessionQuery>,
) -> Result<Json<DrmSessionList>, Operator> {
    let status = q
        .status
        .as_deref()
        .map(|s| {
            SessionStatus::parse(s).ok_or_else(|| {
                AdapterError::invalid_field(
                    "status",
                    "one of PENDING, GRANTED, DENIED, RELEASED, EXPIRED",
                )
            })
        })
        .transpose()?;
    let limit = q.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(AdapterError::invalid_field("limit", "1 to 500").into());
    }
    let before = q.before.map(SessionId::from);
    let filter = SessionFilter {
        org_login_type_id: q.org_login_type_id.map(OrgLoginTypeId),
        status,
        before: before.as_ref(),
        limit,
    };
    let sessions = adapter.0.drm.list(&filter).await?;
    Ok(Json(DrmSessionList { sessions }))
}

/// `GET /admin/v1/adapter/drm-requests/{session}`: status, result and the agent
/// notification history.
#[utoipa::path(get, path = paths::DRM_REQUEST, params(("session" = String, Path)),
    responses((status = 200, body = DrmSession), (status = 404, body = ErrorBody)), security(("operator" = [])))]
pub(crate) async fn show_drm_request(
    State(adapter): State<AdapterService>,
    Path(session): Path<SessionId>,
) -> Result<Json<DrmSession>, Operator> {
    let s = adapter
        .0
        .drm
        .show(&session)
        .await?
        .ok_or_else(|| AdapterError::NotFound("no such DRM session".into()))?;
    Ok(Json(s))
}

/// `GET /admin/v1/adapter/drm-requests/{session}/file`: the released file, streamed.
#[utoipa::path(get, path = paths::DRM_REQUEST_FILE, params(("session" = String, Path)),
    responses((status = 200, content_type = "application/octet-stream"), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody)),
    security(("operator" = [])))]
pub(crate) async fn released_file(
    State(adapter): State<AdapterService>,
    Path(session): Path<SessionId>,
) -> Result<Response, Operator> {
    let drm = &adapter.0.drm;
    let Some((path, file)) = drm.released_file(&session).await? else {
        return match drm.show(&session).await? {
            None => Err(AdapterError::NotFound("no such DRM session".into()).into()),
            Some(s) => Err(AdapterError::Conflict(format!(
                "no released file: the session is {}",
                s.status.as_str()
            ))
            .into()),
        };
    };
    let handle = tokio::fs::File::open(&path).await?;
    let body = Body::from_stream(tokio_util::io::ReaderStream::with_capacity(
        handle,
        64 * 1024,
    ));
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_LENGTH, file.size.to_string()),
            (
                header::HeaderName::from_static("x-kep-file-sha256"),
                file.sha256,
            ),
        ],
        body,
    )
        .into_response())
}
