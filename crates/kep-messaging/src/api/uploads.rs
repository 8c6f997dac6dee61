//! The upload calls.

use axum::Json;
use axum::extract::multipart::MultipartRejection;
use axum::extract::{Multipart, State};
use axum::http::HeaderMap;

use super::Caller;
use crate::{MessagingError, MessagingService, oauth};
use kep_api::messaging::{Detail, MmsUploadAnswer, RcsUploadAnswer};

fn form(m: Result<Multipart, MultipartRejection>) -> Result<Multipart, MessagingError> {
    m.map_err(|e| MessagingError::file("Content-Type", e.body_text()))
}

/// `POST /v2/upload/rcs`: part `image` (JPEG or PNG by its bytes, at most 1 MB) and
/// `description`.
#[utoipa::path(post, path = "/v2/upload/rcs", request_body(content_type = "multipart/form-data", description = "parts image, description"),
    responses((status = 200, body = RcsUploadAnswer), (status = 400, description = "code 420 (file) or 410"),
              (status = 413, description = "code 420: over 1 MB")),
    security(("bearer" = [])))]
pub(crate) async fn upload_rcs(
    State(m): State<MessagingService>,
    caller: Caller,
    headers: HeaderMap,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<Json<RcsUploadAnswer>, MessagingError> {
    oauth::check_accept(&headers)?;
    let row = m.0.uploads.rcs(&caller.client_id, form(multipart)?).await?;
    Ok(Json(RcsUploadAnswer {
        code: "200".into(),
        result: Detail::ok("uploaded"),
        url: format!("maapfile://{}", row.file_id),
        expiry_date: m.0.zone.format(row.expires_at),
        file_id: row.file_id.into_string(),
    }))
}

/// `POST /v2/upload/message/mms/files`: parts `files` (or `images`): at most 3 JPEGs, 200 KB
/// together. The token may come without the word `Bearer`, as the seed's example sends it.
#[utoipa::path(post, path = "/v2/upload/message/mms/files", request_body(content_type = "multipart/form-data", description = "parts files (or images)"),
    responses((status = 200, body = MmsUploadAnswer), (status = 400, description = "code 420"), (status = 413, description = "code 420: over 200 KB")),
    security(("bearer" = [])))]
pub(crate) async fn upload_mms(
    State(m): State<MessagingService>,
    caller: Caller<true>,
    headers: HeaderMap,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<Json<MmsUploadAnswer>, MessagingError> {
    oauth::check_accept(&headers)?;
    let content_group_id = m.0.uploads.mms(&caller.client_id, form(multipart)?).await?;
    Ok(Json(MmsUploadAnswer {
        code: "200".into(),
        result: Detail::ok("uploaded"),
        content_group_id: content_group_id.into_string(),
    }))
}
