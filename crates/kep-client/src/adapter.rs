//! The adapter API: the operator's org login types and DRM requests, and the agent's calls.

use std::path::Path;

use kep_api::adapter::{
    CreateOrgLoginType, DrmRequest, DrmRequestCreated, DrmSession, DrmSessionList, DrmSessionQuery,
    FileType, OrgLoginType, OrgLoginTypeAnswer, OrgLoginTypeRequest, OrgLoginTypeSecret, Status,
    UploadResult,
};
use reqwest::multipart::{Form, Part};

use crate::{AdminClient, ClientError, path};
use kep_api::adapter::paths;

impl AdminClient {
    /// `POST /admin/v1/adapter/org-login-types`
    pub async fn create_org(
        &self,
        req: impl Into<CreateOrgLoginType>,
    ) -> Result<OrgLoginTypeSecret, ClientError> {
        let req = req.into();
        self.send(self.http.post(self.url(paths::ORG_LOGIN_TYPES)).json(&req))
            .await
    }

    /// `GET /admin/v1/adapter/org-login-types`: every org login type, by id.
    pub async fn orgs(&self) -> Result<Vec<OrgLoginType>, ClientError> {
        self.send(self.http.get(self.url(paths::ORG_LOGIN_TYPES)))
            .await
    }

    /// `GET /admin/v1/adapter/org-login-types/{id}`
    pub async fn org(&self, id: i64) -> Result<OrgLoginType, ClientError> {
        self.send(
            self.http
                .get(self.url(&path(paths::ORG_LOGIN_TYPE, &[&id.to_string()]))),
        )
        .await
    }

    /// `PUT /admin/v1/adapter/org-login-types/{id}`
    pub async fn update_org(
        &self,
        id: i64,
        req: &OrgLoginTypeRequest,
    ) -> Result<OrgLoginType, ClientError> {
        self.send(
            self.http
                .put(self.url(&path(paths::ORG_LOGIN_TYPE, &[&id.to_string()])))
                .json(req),
        )
        .await
    }

    /// `DELETE /admin/v1/adapter/org-login-types/{id}`
    pub async fn delete_org(&self, id: i64) -> Result<(), ClientError> {
        self.send_empty(
            self.http
                .delete(self.url(&path(paths::ORG_LOGIN_TYPE, &[&id.to_string()]))),
        )
        .await
    }

    /// `POST /admin/v1/adapter/org-login-types/{id}/secret-key`
    pub async fn rotate_org_key(&self, id: i64) -> Result<OrgLoginTypeSecret, ClientError> {
        self.send(
            self.http
                .post(self.url(&path(paths::ORG_LOGIN_TYPE_SECRET_KEY, &[&id.to_string()]))),
        )
        .await
    }

    /// `POST /admin/v1/adapter/drm-requests`
    pub async fn drm_request(&self, req: &DrmRequest) -> Result<DrmRequestCreated, ClientError> {
        self.send(self.http.post(self.url(paths::DRM_REQUESTS)).json(req))
            .await
    }

    /// `GET /admin/v1/adapter/drm-requests`: newest first.
    pub async fn drm_sessions(
        &self,
        query: &DrmSessionQuery,
    ) -> Result<DrmSessionList, ClientError> {
        self.send(self.http.get(self.url(paths::DRM_REQUESTS)).query(query))
            .await
    }

    /// `GET /admin/v1/adapter/drm-requests/{session}`
    pub async fn drm_session(&self, session: &str) -> Result<DrmSession, ClientError> {
        self.send(
            self.http
                .get(self.url(&path(paths::DRM_REQUEST, &[session]))),
        )
        .await
    }

    /// `GET /admin/v1/adapter/drm-requests/{session}/file`, streamed.
    pub async fn drm_file(&self, session: &str) -> Result<reqwest::Response, ClientError> {
        self.send_raw(
            self.http
                .get(self.url(&path(paths::DRM_REQUEST_FILE, &[session]))),
        )
        .await
    }
}

/// An organisation's adapter agent calling the adapter listener.
#[derive(Clone)]
pub struct AgentClient {
    http: reqwest::Client,
    base: String,
    org_id: i64,
    authorization: String,
}

impl AgentClient {
    /// `scheme` is the word before the secret key (`Secret` unless the server says otherwise).
    pub fn new(base: &str, org_id: i64, scheme: &str, secret_key: &str) -> Self {
        AgentClient {
            http: crate::tls::http(),
            base: base.trim_end_matches('/').to_owned(),
            org_id,
            authorization: format!("{scheme} {secret_key}"),
        }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .header("Authorization", &self.authorization)
            .header("Kep-OrgLoginType", format!("ID {}", self.org_id))
    }

    async fn answer<T: serde::de::DeserializeOwned>(
        req: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        Ok(crate::checked(req.send().await?).await?.json().await?)
    }

    /// `GET /api/trust/login/v0/getOrgLoginType`
    pub async fn get_org_login_type(&self) -> Result<OrgLoginTypeAnswer, ClientError> {
        Self::answer(self.request(reqwest::Method::GET, paths::GET_ORG_LOGIN_TYPE)).await
    }

    /// `POST /api/trust/drm/v0/uploadResult`
    pub async fn upload_result(
        &self,
        session: &str,
        file_id: &str,
        file_type: FileType,
        body: &UploadResult,
    ) -> Result<Status, ClientError> {
        let req = self
            .request(reqwest::Method::POST, paths::UPLOAD_RESULT)
            .header("Kep-AgentSession", format!("DSID {session}"))
            .header("Kep-File-Id", file_id)
            .header("Kep-File-Type", file_type.as_str())
            .json(body);
        Self::answer(req).await
    }

    /// `POST /api/trust/drm/v0/uploadDecrypted` with `part` as the `file` part.
    pub async fn upload_decrypted(
        &self,
        session: &str,
        file_id: &str,
        part: Part,
    ) -> Result<Status, ClientError> {
        let req = self
            .request(reqwest::Method::POST, paths::UPLOAD_DECRYPTED)
            .header("Kep-AgentSession", format!("DSID {session}"))
            .header("Kep-File-Id", file_id)
            .multipart(Form::new().part("file", part));
        Self::answer(req).await
    }

    /// `uploadDecrypted` of a file on disk, streamed from it.
    pub async fn upload_decrypted_file(
        &self,
        session: &str,
        file_id: &str,
        path: &Path,
    ) -> Result<Status, ClientError> {
        let (stream, len) = crate::file_body(path).await?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "file".into());
        self.upload_decrypted(
            session,
            file_id,
            Part::stream_with_length(stream, len).file_name(name),
        )
        .await
    }
}
