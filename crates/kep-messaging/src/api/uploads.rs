//! The upload calls.

use axum::Json;
use axum::extract::multipart::{Field, MultipartError, MultipartRejection};
use axum::extract::{Multipart, State};
use axum::http::HeaderMap;

use super::Caller;
use crate::uploads::{MMS_MAX_FILES, MMS_MAX_TOTAL_BYTES, RCS_MAX_BYTES, check_mms_file};
use crate::{MessagingError, MessagingService};
use kep_api::messaging::paths;
use kep_api::messaging::{Detail, MmsUploadAnswer, RcsUploadAnswer};

fn form(m: Result<Multipart, MultipartRejection>) -> Result<Multipart, MessagingError> {
    m.map_err(|e| MessagingError::file("Content-Type", e.body_text()))
}

fn multipart_error(e: MultipartError) -> MessagingError {
    MessagingError::file("multipart", e.to_string())
}

/// Reads one part, stopping as soon as it passes `max` bytes.
async fn read_part(
    field: &mut Field<'_>,
    name: &str,
    max: usize,
) -> Result<Vec<u8>, MessagingError> {
    let mut bytes = Vec::new();
    while let Some(chunk) = field
        .chunk()
        .await
        .map_err(|e| MessagingError::file(name, format!("unreadable part: {e}")))?
    {
        bytes.extend_from_slice(&chunk);
        if bytes.len() > max {
            return Err(MessagingError::File {
                field: name.into(),
                message: format!("over {max} bytes"),
                too_large: true,
            });
        }
    }
    Ok(bytes)
}

/// The parts of an RCS upload: `image` (one), read up to its limit, and `description`.
async fn rcs_parts(
    mut form: Multipart,
) -> Result<(Option<Vec<u8>>, Option<String>), MessagingError> {
    let (mut image, mut description) = (None, None);
    while let Some(mut field) = form.next_field().await.map_err(multipart_error)? {
        match field.name() {
            Some("image") if image.is_some() => {
                return Err(MessagingError::file("image", "one file per upload"));
            }
            Some("image") => image = Some(read_part(&mut field, "image", RCS_MAX_BYTES).await?),
            Some("description") => {
                description = Some(
                    field
                        .text()
                        .await
                        .map_err(|e| MessagingError::invalid("description", e.to_string()))?,
                )
            }
            _ => {}
        }
    }
    Ok((image, description))
}

/// The files of an MMS upload, each checked as it is read: at most 3, 200 KB together.
async fn mms_files(mut form: Multipart) -> Result<Vec<Vec<u8>>, MessagingError> {
    let mut files = Vec::new();
    let mut total = 0usize;
    while let Some(mut field) = form.next_field().await.map_err(multipart_error)? {
        // The table names the part `files`, the seed's example `images`: both count.
        let name = match field.name() {
            Some("files") => "files",
            Some("images") => "images",
            _ => continue,
        };
        if files.len() == MMS_MAX_FILES {
            return Err(MessagingError::file(
                name,
                format!("at most {MMS_MAX_FILES} files"),
            ));
        }
        let bytes = read_part(&mut field, name, MMS_MAX_TOTAL_BYTES - total)
            .await
            .map_err(|e| match e {
                MessagingError::File {
                    too_large: true, ..
                } => MessagingError::File {
                    field: name.into(),
                    message: format!("over {MMS_MAX_TOTAL_BYTES} bytes together"),
                    too_large: true,
                },
                other => other,
            })?;
        check_mms_file(name, &bytes)?;
        total += bytes.len();
        files.push(bytes);
    }
    Ok(files)
}

/// `POST /v2/upload/rcs`: part `image` (JPEG or PNG by its bytes, at most 1 MB) and
/// `description`.
#[utoipa::path(post, path = paths::UPLOAD_RCS, request_body(content_type = "multipart/form-data", description = "parts image, description"),
    responses((status = 200, body = RcsUploadAnswer), (status = 400, description = "code 420 (file) or 410"),
              (status = 413, description = "code 420: over 1 MB")),
    security(("bearer" = [])))]
pub(crate) async fn upload_rcs(
    State(m): State<MessagingService>,
    caller: Caller,
    headers: HeaderMap,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<Json<RcsUploadAnswer>, MessagingError> {
    super::auth::check_accept(&headers)?;
    let (image, description) = rcs_parts(form(multipart)?).await?;
    let row =
        m.0.uploads
            .rcs(&caller.client_id, image, description)
            .await?;
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
#[utoipa::path(post, path = paths::UPLOAD_MMS, request_body(content_type = "multipart/form-data", description = "parts files (or images)"),
    responses((status = 200, body = MmsUploadAnswer), (status = 400, description = "code 420"), (status = 413, description = "code 420: over 200 KB")),
    security(("bearer" = [])))]
pub(crate) async fn upload_mms(
    State(m): State<MessagingService>,
    caller: Caller<true>,
    headers: HeaderMap,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<Json<MmsUploadAnswer>, MessagingError> {
    super::auth::check_accept(&headers)?;
    let files = mms_files(form(multipart)?).await?;
    let content_group_id = m.0.uploads.mms(&caller.client_id, files).await?;
    Ok(Json(MmsUploadAnswer {
        code: "200".into(),
        result: Detail::ok("uploaded"),
        content_group_id: content_group_id.into_string(),
    }))
}
