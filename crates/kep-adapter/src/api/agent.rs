//! The agent's calls on the adapter listener: `getOrgLoginType`, `uploadResult`,
//! `uploadDecrypted`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::multipart::MultipartRejection;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequestParts, Multipart, State};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use kep_core::limits::{Admission, Key, Peer};

use super::{header, worded};
use crate::ids::{OrgLoginTypeId, SessionId};
use crate::store::OrgRow;
use crate::{AdapterError, AdapterService};
use kep_api::adapter::paths;
use kep_api::adapter::{FileType, OrgLoginTypeAnswer, Status, UploadResult};

fn ok() -> Json<Status> {
    Json(Status {
        _code: 200,
        _message: "ok".into(),
    })
}

/// The `Kep-OrgLoginType` id and the secret key of `Authorization` (`<auth_scheme> <key>`).
pub fn credentials<'a>(
    headers: &'a HeaderMap,
    auth_scheme: &str,
) -> Result<(i64, &'a str), AdapterError> {
    let key = worded(headers, "Authorization", auth_scheme)?;
    let id = worded(headers, "Kep-OrgLoginType", "ID")?;
    // Digits only, as documented: `parse` alone would also take `+2` and `-2`.
    let id = Some(id)
        .filter(|id| id.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| {
            AdapterError::MalformedHeader(
                "Kep-OrgLoginType",
                "the id must be a whole number in digits".into(),
            )
        })?;
    Ok((id, key))
}

/// The calling agent, known before the body is read so that the adapter's limits come
/// first: the org whose secret key `Authorization` carries, or `None` (a 401 once the other
/// headers are checked). A call without an org counts against its peer's address; a missing
/// or malformed `Authorization` or `Kep-OrgLoginType` is refused here, as the first check.
pub(crate) struct Agent {
    org: Option<OrgRow>,
    _in_flight: Admission,
}

impl Agent {
    /// The org, or the 401; the agent itself stays, holding the call in flight until the
    /// handler is done (an upload streams long after this).
    fn org(&mut self) -> Result<OrgRow, AdapterError> {
        self.org.take().ok_or(AdapterError::Unauthorized)
    }
}

impl FromRequestParts<AdapterService> for Agent {
    type Rejection = AdapterError;

    async fn from_request_parts(
        parts: &mut Parts,
        adapter: &AdapterService,
    ) -> Result<Self, AdapterError> {
        let a = &adapter.0;
        let creds = credentials(&parts.headers, &a.settings.auth_scheme);
        let org = match creds {
            Ok((id, key)) => a.orgs.authenticate(OrgLoginTypeId(id), key).await?,
            Err(_) => None,
        };
        let key = match &org {
            Some(org) => Key::client(org.id.to_string()),
            None => Key::peer(Peer::of(&parts.extensions)),
        };
        let in_flight = a.limiter.admit(key)?;
        creds?;
        Ok(Agent {
            org,
            _in_flight: in_flight,
        })
    }
}

/// The headers of a DRM call (`uploadResult`, `uploadDecrypted`) but its file type.
#[derive(Debug)]
pub struct DrmHeaders<'a> {
    pub credentials: (i64, &'a str),
    pub session: &'a str,
    pub file_id: &'a str,
}

/// Reads the credentials, `Kep-AgentSession: DSID <session>` and `Kep-File-Id`, in that
/// order: the first missing or malformed one is the 400.
pub fn drm_headers<'a>(
    headers: &'a HeaderMap,
    auth_scheme: &str,
) -> Result<DrmHeaders<'a>, AdapterError> {
    let credentials = credentials(headers, auth_scheme)?;
    let session = worded(headers, "Kep-AgentSession", "DSID")?;
    let file_id = header(headers, "Kep-File-Id")?.trim();
    if file_id.is_empty() {
        return Err(AdapterError::MalformedHeader(
            "Kep-File-Id",
            "must not be empty".into(),
        ));
    }
    Ok(DrmHeaders {
        credentials,
        session,
        file_id,
    })
}

/// `Kep-File-Type`: `DRM` or `PLAIN`.
pub fn file_type(headers: &HeaderMap) -> Result<FileType, AdapterError> {
    FileType::parse(header(headers, "Kep-File-Type")?.trim()).ok_or_else(|| {
        AdapterError::MalformedHeader("Kep-File-Type", "must be DRM or PLAIN".into())
    })
}

/// `GET /api/trust/login/v0/getOrgLoginType`
#[utoipa::path(get, path = paths::GET_ORG_LOGIN_TYPE,
    params(("Authorization" = String, Header, description = "`Secret <secret key>`"),
           ("Kep-OrgLoginType" = String, Header, description = "`ID <org login type id>`", pattern = "^ID +[0-9]{1,18} *$")),
    responses((status = 200, body = OrgLoginTypeAnswer), (status = 400, body = Status), (status = 401, body = Status)))]
pub(crate) async fn get_org_login_type(
    mut agent: Agent,
) -> Result<Json<OrgLoginTypeAnswer>, AdapterError> {
    let org = agent.org()?;
    Ok(Json(OrgLoginTypeAnswer {
        status: ok().0,
        org: crate::orgs::view(org),
    }))
}

/// `POST /api/trust/drm/v0/uploadResult`
#[utoipa::path(post, path = paths::UPLOAD_RESULT, request_body = UploadResult,
    params(("Authorization" = String, Header, description = "`Secret <secret key>`"),
           ("Kep-OrgLoginType" = String, Header, description = "`ID <org login type id>`", pattern = "^ID +[0-9]{1,18} *$"),
           ("Kep-AgentSession" = String, Header, description = "`DSID <session id>`", pattern = "^DSID +[!-~]"),
           ("Kep-File-Id" = String, Header, description = "the file of the session", pattern = "[!-~]"),
           ("Kep-File-Type" = FileType, Header, description = "the session's file type: `DRM` or `PLAIN`")),
    responses((status = 200, body = Status), (status = 400, body = Status), (status = 401, body = Status),
              (status = 404, body = Status), (status = 409, body = Status)))]
pub(crate) async fn upload_result(
    State(adapter): State<AdapterService>,
    mut agent: Agent,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Status>, AdapterError> {
    let a = &adapter.0;
    let call = drm_headers(&headers, &a.settings.auth_scheme)?;
    let file_type = file_type(&headers)?;
    let org = agent.org()?;
    let body: UploadResult = serde_json::from_slice(&body?)
        .map_err(|e| AdapterError::BadRequest(format!("body: {e}")))?;
    let session = SessionId::from(call.session);
    let view = a.drm.for_agent(org.id, &session, call.file_id).await?;
    a.drm.record_result(&view, file_type, body).await?;
    Ok(ok())
}

/// The multipart body of `uploadDecrypted`, for the OpenAPI description: the part `file`,
/// not empty. Other parts are skipped.
pub(crate) struct ReleasedFileForm;

impl utoipa::PartialSchema for ReleasedFileForm {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        let file = ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
            .min_length(Some(1));
        ObjectBuilder::new()
            .property("file", file)
            .required("file")
            .into()
    }
}

impl utoipa::ToSchema for ReleasedFileForm {}

/// `POST /api/trust/drm/v0/uploadDecrypted`: the released file as the multipart part
/// `file`, streamed to storage.
#[utoipa::path(post, path = paths::UPLOAD_DECRYPTED,
    request_body(content = ReleasedFileForm, content_type = "multipart/form-data", description = "part `file`: the released file"),
    params(("Authorization" = String, Header, description = "`Secret <secret key>`"),
           ("Kep-OrgLoginType" = String, Header, description = "`ID <org login type id>`", pattern = "^ID +[0-9]{1,18} *$"),
           ("Kep-AgentSession" = String, Header, description = "`DSID <session id>`", pattern = "^DSID +[!-~]"),
           ("Kep-File-Id" = String, Header, description = "the file of the session", pattern = "[!-~]")),
    responses((status = 200, body = Status), (status = 400, body = Status), (status = 401, body = Status),
              (status = 404, body = Status), (status = 409, body = Status), (status = 413, body = Status)))]
pub(crate) async fn upload_decrypted(
    State(adapter): State<AdapterService>,
    mut agent: Agent,
    headers: HeaderMap,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<Json<Status>, AdapterError> {
    let a = &adapter.0;
    let call = drm_headers(&headers, &a.settings.auth_scheme)?;
    let org = agent.org()?;
    let session = SessionId::from(call.session);
    let view = a.drm.for_agent(org.id, &session, call.file_id).await?;
    // Refused before a byte of the file is read.
    a.drm.check_release(&view)?;
    let mut multipart = multipart?;
    loop {
        let field = multipart
            .next_field()
            .await
            .map_err(|e| AdapterError::BadRequest(format!("multipart body: {e}")))?;
        match field {
            Some(field) if field.name() == Some("file") => {
                a.drm.release(&session, field).await?;
                return Ok(ok());
            }
            Some(_) => continue,
            None => {
                return Err(AdapterError::BadRequest(
                    "the multipart body has no `file` part".into(),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| (*name, HeaderValue::from_str(value).unwrap()))
            .map(|(name, value)| (axum::http::HeaderName::from_static(name), value))
            .collect()
    }

    /// Found by the `kep_headers` fuzz target: a signed id was read as the org's id.
    #[test]
    fn an_org_id_is_digits_only() {
        for id in ["ID +2", "ID -2"] {
            let h = headers(&[("authorization", "Secret &"), ("kep-orglogintype", id)]);
            let err = credentials(&h, "Secret").unwrap_err();
            assert!(
                matches!(err, AdapterError::MalformedHeader("Kep-OrgLoginType", _)),
                "{id}: {err:?}"
            );
        }
        let h = headers(&[
            ("authorization", "Secret &"),
            ("kep-orglogintype", "ID  2 "),
        ]);
        assert_eq!(credentials(&h, "Secret").unwrap(), (2, "&"));
    }
}
