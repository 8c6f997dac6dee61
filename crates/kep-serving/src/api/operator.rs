//! The management API under `/admin/v1/serving` (CONTRACT §3).

use axum::extract::{DefaultBodyLimit, Multipart, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use futures_util::TryStreamExt as _;
use kep_core::http::{AdminJson, ApiError, ErrorBody, Path, Query, from_json};
use serde::Deserialize;
use serde_json::Value;
use utoipa::{IntoParams, OpenApi};

use crate::control::{Control, validate};
use crate::{ServingError, ServingService};
use kep_api::serving::paths;
use kep_api::serving::{
    Alert, AlertCondition, AlertHistory, AlertSettings, ApiKey, CallMetrics, Deployment,
    DeploymentMetrics, DeploymentPatch, DeploymentRequest, Endpoint, EndpointCreated,
    EndpointMetrics, EndpointRequest, Event, Image, ImageRequest, ImageSource, InstanceMetrics,
    Latency, MirrorMetrics, Mirroring, Model, ModelSignature, ModelTensor, Quota, Traffic,
    TrafficRequest, VersionPolicy,
};

type Result<T> = std::result::Result<T, ApiError>;

pub(crate) fn router(serving: ServingService) -> Router {
    Router::new()
        .route(paths::IMAGES, post(create_image).get(list_images))
        .route(paths::IMAGE, get(show_image).delete(delete_image))
        .route(
            paths::IMAGE_ARCHIVE,
            // The archive is streamed to the engine under its own limit.
            post(load_image_archive).layer(DefaultBodyLimit::disable()),
        )
        .route(
            paths::MODELS,
            // The artifact is streamed to disk under its own limit.
            post(upload_model)
                .layer(DefaultBodyLimit::disable())
                .get(list_models),
        )
        .route(paths::MODEL, get(show_model).delete(delete_model))
        .route(paths::ENDPOINTS, post(create_endpoint).get(list_endpoints))
        .route(
            paths::ENDPOINT,
            get(show_endpoint)
                .delete(delete_endpoint)
                .fallback(endpoint_in_place),
        )
        .route(paths::ENDPOINT_API_KEY, post(reissue_key))
        .route(
            paths::DEPLOYMENTS,
            post(create_deployment).get(list_deployments),
        )
        .route(
            paths::DEPLOYMENT,
            get(show_deployment)
                .patch(patch_deployment)
                .delete(delete_deployment),
        )
        .route(paths::DEPLOYMENT_EVENTS, get(deployment_events))
        .route(paths::INSTANCE_LOGS, get(instance_logs))
        .route(paths::TRAFFIC, put(set_traffic).get(show_traffic))
        .route(paths::MIRRORING, put(set_mirroring).get(show_mirroring))
        .route(paths::ALERTS, put(set_alerts).get(show_alerts))
        .route(paths::ALERT_HISTORY, get(alert_history))
        .route(paths::METRICS, get(endpoint_metrics))
        .route(paths::QUOTA, get(show_quota))
        .with_state(serving)
}

/// OpenAPI of the model-serving management calls.
#[derive(OpenApi)]
#[openapi(
    paths(
        create_image,
        list_images,
        show_image,
        delete_image,
        load_image_archive,
        upload_model,
        list_models,
        show_model,
        delete_model,
        create_endpoint,
        list_endpoints,
        show_endpoint,
        delete_endpoint,
        reissue_key,
        create_deployment,
        list_deployments,
        show_deployment,
        patch_deployment,
        delete_deployment,
        deployment_events,
        instance_logs,
        set_traffic,
        show_traffic,
        set_mirroring,
        show_mirroring,
        set_alerts,
        show_alerts,
        alert_history,
        endpoint_metrics,
        show_quota
    ),
    components(schemas(
        ImageRequest,
        Image,
        ImageSource,
        Model,
        ModelTensor,
        ModelSignature,
        VersionPolicy,
        EndpointRequest,
        Endpoint,
        EndpointCreated,
        ApiKey,
        DeploymentRequest,
        DeploymentPatch,
        Deployment,
        Event,
        TrafficRequest,
        Traffic,
        Mirroring,
        AlertSettings,
        AlertCondition,
        Alert,
        AlertHistory,
        EndpointMetrics,
        DeploymentMetrics,
        InstanceMetrics,
        CallMetrics,
        Latency,
        MirrorMetrics,
        Quota
    ))
)]
pub struct ServingAdminDoc;

fn control(s: &ServingService) -> &Control {
    &s.control
}

/// A `reference` must name an image in the container engine's local store (never pulled);
/// 503 when the engine does not answer.
#[utoipa::path(post, path = paths::IMAGES, request_body = ImageRequest,
    responses((status = 201, body = Image), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(("operator" = [])))]
async fn create_image(
    State(s): State<ServingService>,
    AdminJson(body): AdminJson<Value>,
) -> Result<(StatusCode, Json<Image>)> {
    let image = control(&s).create_image(from_json(body)?).await?;
    Ok((StatusCode::CREATED, Json(image)))
}

#[utoipa::path(get, path = paths::IMAGES, responses((status = 200, body = Vec<Image>)), security(("operator" = [])))]
async fn list_images(State(s): State<ServingService>) -> Result<Json<Vec<Image>>> {
    Ok(Json(control(&s).images().await?))
}

#[utoipa::path(get, path = paths::IMAGE,
    responses((status = 200, body = Image), (status = 404, body = ErrorBody)), security(("operator" = [])))]
async fn show_image(
    State(s): State<ServingService>,
    Path(name): Path<String>,
) -> Result<Json<Image>> {
    Ok(Json(control(&s).image(&name.into()).await?))
}

/// Deployments made from it keep running, but can no longer be edited.
#[utoipa::path(delete, path = paths::IMAGE,
    responses((status = 204), (status = 404, body = ErrorBody)), security(("operator" = [])))]
async fn delete_image(
    State(s): State<ServingService>,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    control(&s).delete_image(&name.into()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The body is an image archive as `docker save` or `podman save` writes it (or an OCI
/// layout tar), streamed to the container engine; what it loaded is registered as `name`.
/// 503 when the engine does not answer.
#[utoipa::path(post, path = paths::IMAGE_ARCHIVE, request_body(content_type = "application/x-tar", content = String),
    responses((status = 201, body = Image), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 503, body = ErrorBody)),
    security(("operator" = [])))]
async fn load_image_archive(
    State(s): State<ServingService>,
    Path(name): Path<String>,
    headers: axum::http::HeaderMap,
    body: axum::body::Body,
) -> Result<(StatusCode, Json<Image>)> {
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let image = control(&s)
        .load_image_archive(name, length, body.into_data_stream())
        .await?;
    Ok((StatusCode::CREATED, Json(image)))
}

/// Multipart `name`, `framework` (`tensorflow`, `pytorch` or `onnx`) and `file`; the file
/// is streamed to disk. A TorchScript file also takes `inputs`: a JSON list of `{name,
/// datatype, shape}` (TorchScript records no datatypes or shapes).
#[utoipa::path(post, path = paths::MODELS, request_body(content_type = "multipart/form-data", content = String),
    responses((status = 201, body = Model), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody)),
    security(("operator" = [])))]
async fn upload_model(
    State(s): State<ServingService>,
    multipart: std::result::Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> Result<(StatusCode, Json<Model>)> {
    let bad = |e: &dyn std::fmt::Display| ServingError::BadRequest(format!("multipart: {e}"));
    let mut multipart =
        multipart.map_err(|e| ApiError::new(e.status(), "invalid_body", e.body_text()))?;
    let mut upload = control(&s).model_upload();
    let (mut name, mut framework, mut inputs) = (None, None, None);
    let read: std::result::Result<(), ServingError> = async {
        while let Some(field) = multipart.next_field().await.map_err(|e| bad(&e))? {
            match field.name() {
                Some("name") => name = Some(field.text().await.map_err(|e| bad(&e))?),
                Some("framework") => framework = Some(field.text().await.map_err(|e| bad(&e))?),
                Some("inputs") => inputs = Some(field.text().await.map_err(|e| bad(&e))?),
                Some("file") => upload.write_file(field.map_err(|e| bad(&e))).await?,
                _ => {}
            }
        }
        Ok(())
    }
    .await;
    let model = match read {
        Ok(()) => upload.finish(name, framework, inputs).await?,
        Err(e) => {
            upload.discard().await;
            return Err(e.into());
        }
    };
    Ok((StatusCode::CREATED, Json(model)))
}

#[utoipa::path(get, path = paths::MODELS, responses((status = 200, body = Vec<Model>)), security(("operator" = [])))]
async fn list_models(State(s): State<ServingService>) -> Result<Json<Vec<Model>>> {
    Ok(Json(control(&s).models().await?))
}

#[utoipa::path(get, path = paths::MODEL,
    responses((status = 200, body = Model), (status = 404, body = ErrorBody)), security(("operator" = [])))]
async fn show_model(
    State(s): State<ServingService>,
    Path(name): Path<String>,
) -> Result<Json<Model>> {
    Ok(Json(control(&s).model(&name.into()).await?))
}

#[utoipa::path(delete, path = paths::MODEL,
    responses((status = 204), (status = 404, body = ErrorBody)), security(("operator" = [])))]
async fn delete_model(
    State(s): State<ServingService>,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    control(&s).delete_model(&name.into()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The API key is shown in this answer only.
#[utoipa::path(post, path = paths::ENDPOINTS, request_body = EndpointRequest,
    responses((status = 201, body = EndpointCreated), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("operator" = [])))]
async fn create_endpoint(
    State(s): State<ServingService>,
    AdminJson(body): AdminJson<Value>,
) -> Result<(StatusCode, Json<EndpointCreated>)> {
    let (endpoint, api_key) = control(&s).create_endpoint(from_json(body)?).await?;
    Ok((
        StatusCode::CREATED,
        Json(EndpointCreated { endpoint, api_key }),
    ))
}

#[utoipa::path(get, path = paths::ENDPOINTS, responses((status = 200, body = Vec<Endpoint>)), security(("operator" = [])))]
async fn list_endpoints(State(s): State<ServingService>) -> Result<Json<Vec<Endpoint>>> {
    Ok(Json(control(&s).endpoints().await?))
}

#[utoipa::path(get, path = paths::ENDPOINT,
    responses((status = 200, body = Endpoint), (status = 404, body = ErrorBody)), security(("operator" = [])))]
async fn show_endpoint(
    State(s): State<ServingService>,
    Path(e): Path<String>,
) -> Result<Json<Endpoint>> {
    Ok(Json(control(&s).endpoint(&e.into()).await?))
}

/// An endpoint is not changed in place (`PATCH`, `PUT`): 405, saying what never changes and
/// where what may change does.
async fn endpoint_in_place(method: axum::http::Method) -> ServingError {
    ServingError::MethodNotAllowed(format!(
        "{method}: an endpoint is not changed in place; instance_type and instance_count never \
         change (make another endpoint), and traffic, mirroring and alerts change at their own \
         paths"
    ))
}

/// Stops every deployment's instances and forgets the endpoint.
#[utoipa::path(delete, path = paths::ENDPOINT,
    responses((status = 204), (status = 404, body = ErrorBody)), security(("operator" = [])))]
async fn delete_endpoint(
    State(s): State<ServingService>,
    Path(e): Path<String>,
) -> Result<StatusCode> {
    control(&s).delete_endpoint(&e.into()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A new API key; the old one stops working at once.
#[utoipa::path(post, path = paths::ENDPOINT_API_KEY,
    responses((status = 200, body = ApiKey), (status = 404, body = ErrorBody)), security(("operator" = [])))]
async fn reissue_key(
    State(s): State<ServingService>,
    Path(e): Path<String>,
) -> Result<Json<ApiKey>> {
    Ok(Json(ApiKey {
        api_key: control(&s).reissue_key(&e.into()).await?,
    }))
}

#[utoipa::path(post, path = paths::DEPLOYMENTS, request_body = DeploymentRequest,
    responses((status = 201, body = Deployment), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("operator" = [])))]
async fn create_deployment(
    State(s): State<ServingService>,
    Path(e): Path<String>,
    AdminJson(body): AdminJson<Value>,
) -> Result<(StatusCode, Json<Deployment>)> {
    let d = control(&s)
        .create_deployment(&e.into(), from_json(body)?)
        .await?;
    Ok((StatusCode::CREATED, Json(d)))
}

#[utoipa::path(get, path = paths::DEPLOYMENTS,
    responses((status = 200, body = Vec<Deployment>), (status = 404, body = ErrorBody)), security(("operator" = [])))]
async fn list_deployments(
    State(s): State<ServingService>,
    Path(e): Path<String>,
) -> Result<Json<Vec<Deployment>>> {
    Ok(Json(control(&s).deployments(&e.into()).await?))
}

#[utoipa::path(get, path = paths::DEPLOYMENT,
    responses((status = 200, body = Deployment), (status = 404, body = ErrorBody)), security(("operator" = [])))]
async fn show_deployment(
    State(s): State<ServingService>,
    Path((e, d)): Path<(String, String)>,
) -> Result<Json<Deployment>> {
    Ok(Json(control(&s).deployment(&e.into(), &d.into()).await?))
}

/// Only the editable fields; the name, the type and the instance configuration are fixed.
#[utoipa::path(patch, path = paths::DEPLOYMENT, request_body = DeploymentPatch,
    responses((status = 200, body = Deployment), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("operator" = [])))]
async fn patch_deployment(
    State(s): State<ServingService>,
    Path((e, d)): Path<(String, String)>,
    AdminJson(body): AdminJson<Value>,
) -> Result<Json<Deployment>> {
    validate::patch_fields(&body)?;
    let patch: DeploymentPatch = from_json(body)?;
    Ok(Json(
        control(&s)
            .patch_deployment(&e.into(), &d.into(), patch)
            .await?,
    ))
}

#[utoipa::path(delete, path = paths::DEPLOYMENT,
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)), security(("operator" = [])))]
async fn delete_deployment(
    State(s): State<ServingService>,
    Path((e, d)): Path<(String, String)>,
) -> Result<StatusCode> {
    control(&s).delete_deployment(&e.into(), &d.into()).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, IntoParams)]
struct EventsQuery {
    /// At most this many, newest first (default 100).
    limit: Option<i64>,
}

#[utoipa::path(get, path = paths::DEPLOYMENT_EVENTS, params(EventsQuery),
    responses((status = 200, body = Vec<Event>), (status = 404, body = ErrorBody)), security(("operator" = [])))]
async fn deployment_events(
    State(s): State<ServingService>,
    Path((e, d)): Path<(String, String)>,
    Query(q): Query<EventsQuery>,
) -> Result<Json<Vec<Event>>> {
    Ok(Json(
        control(&s)
            .events(&e.into(), &d.into(), q.limit.unwrap_or(100))
            .await?,
    ))
}

#[derive(Deserialize, IntoParams)]
struct LogsQuery {
    /// The last this many bytes (default 65536).
    tail_bytes: Option<u64>,
}

/// What the instance wrote to stdout and stderr, across its restarts.
#[utoipa::path(get, path = paths::INSTANCE_LOGS, params(LogsQuery),
    responses((status = 200, content_type = "text/plain", body = String), (status = 404, body = ErrorBody)), security(("operator" = [])))]
async fn instance_logs(
    State(s): State<ServingService>,
    Path((e, d, i)): Path<(String, String, String)>,
    Query(q): Query<LogsQuery>,
) -> Result<impl IntoResponse> {
    let bytes = control(&s)
        .logs(
            &e.into(),
            &d.into(),
            &i.into(),
            q.tail_bytes.unwrap_or(65536),
        )
        .await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], bytes))
}

/// `{"weights": {"d1": 30, "d2": 70}}` (steps of 5, summing to 100) or
/// `{"ratio": "1:2", "deployments": ["d1", "d2"]}`.
#[utoipa::path(put, path = paths::TRAFFIC, request_body = TrafficRequest,
    responses((status = 200, body = Traffic), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "the endpoint has no deployment to send traffic to", body = ErrorBody)),
    security(("operator" = [])))]
async fn set_traffic(
    State(s): State<ServingService>,
    Path(e): Path<String>,
    AdminJson(body): AdminJson<Value>,
) -> Result<Json<Traffic>> {
    Ok(Json(
        control(&s).set_traffic(&e.into(), from_json(body)?).await?,
    ))
}

#[utoipa::path(get, path = paths::TRAFFIC,
    responses((status = 200, body = Traffic), (status = 404, body = ErrorBody)), security(("operator" = [])))]
async fn show_traffic(
    State(s): State<ServingService>,
    Path(e): Path<String>,
) -> Result<Json<Traffic>> {
    Ok(Json(control(&s).endpoint(&e.into()).await?.traffic))
}

/// With mirroring on, every deployment gets each call and the responder's answer is returned.
#[utoipa::path(put, path = paths::MIRRORING, request_body = Mirroring,
    responses((status = 200, body = Mirroring), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)), security(("operator" = [])))]
async fn set_mirroring(
    State(s): State<ServingService>,
    Path(e): Path<String>,
    AdminJson(body): AdminJson<Value>,
) -> Result<Json<Mirroring>> {
    Ok(Json(
        control(&s)
            .set_mirroring(&e.into(), from_json(body)?)
            .await?,
    ))
}

#[utoipa::path(get, path = paths::MIRRORING,
    responses((status = 200, body = Mirroring), (status = 404, body = ErrorBody)), security(("operator" = [])))]
async fn show_mirroring(
    State(s): State<ServingService>,
    Path(e): Path<String>,
) -> Result<Json<Mirroring>> {
    Ok(Json(control(&s).endpoint(&e.into()).await?.mirroring))
}

/// Replaces the endpoint's alert settings: the channel toggle, the webhook URL and each
/// condition (a condition left out is off).
#[utoipa::path(put, path = paths::ALERTS, request_body = AlertSettings,
    responses((status = 200, body = AlertSettings), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("operator" = [])))]
async fn set_alerts(
    State(s): State<ServingService>,
    Path(e): Path<String>,
    AdminJson(body): AdminJson<Value>,
) -> Result<Json<AlertSettings>> {
    let settings = from_json(body)?;
    Ok(Json(
        s.monitor.set_alert_settings(&e.into(), settings).await?,
    ))
}

/// The endpoint's alert settings, every condition listed.
#[utoipa::path(get, path = paths::ALERTS,
    responses((status = 200, body = AlertSettings), (status = 404, body = ErrorBody)), security(("operator" = [])))]
async fn show_alerts(
    State(s): State<ServingService>,
    Path(e): Path<String>,
) -> Result<Json<AlertSettings>> {
    Ok(Json(s.monitor.alert_settings(&e.into()).await?))
}

/// The alerts raised for the endpoint, sent, pending or failed, newest first.
#[utoipa::path(get, path = paths::ALERT_HISTORY, params(EventsQuery),
    responses((status = 200, body = AlertHistory), (status = 404, body = ErrorBody)), security(("operator" = [])))]
async fn alert_history(
    State(s): State<ServingService>,
    Path(e): Path<String>,
    Query(q): Query<EventsQuery>,
) -> Result<Json<AlertHistory>> {
    let limit = q.limit.unwrap_or(100);
    Ok(Json(AlertHistory {
        alerts: s.monitor.alert_history(&e.into(), limit).await?,
    }))
}

/// The endpoint's calls, deployments and instances as of the last sample (once a second).
#[utoipa::path(get, path = paths::METRICS,
    responses((status = 200, body = EndpointMetrics), (status = 404, body = ErrorBody)), security(("operator" = [])))]
async fn endpoint_metrics(
    State(s): State<ServingService>,
    Path(e): Path<String>,
) -> Result<Json<EndpointMetrics>> {
    Ok(Json(s.monitor.metrics(&e.into()).await?))
}

#[utoipa::path(get, path = paths::QUOTA, responses((status = 200, body = Quota)), security(("operator" = [])))]
async fn show_quota(State(s): State<ServingService>) -> Result<Json<Quota>> {
    Ok(Json(control(&s).quota().await?))
}
