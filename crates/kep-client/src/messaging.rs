//! The text-message API: the operator's clients, and a customer's calls with its token.

use std::path::Path;

use kep_api::messaging::{
    ClientSecret, CodeAnswer, CreateClient, MessageList, MessageQuery, MessageTimeline,
    MmsUploadAnswer, RcsResultsAnswer, RcsSearch, RcsSearchAnswer, RcsUploadAnswer,
    ReportGroupList, ReportGroupQuery, SendAnswer, TokenAnswer, XmsSearch, XmsSearchAnswer,
};
use reqwest::multipart::{Form, Part};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{AdminClient, ClientError, checked, path};
use kep_api::messaging::paths;

impl AdminClient {
    /// `POST /admin/v1/messaging/clients`
    pub async fn create_messaging_client(
        &self,
        client: &CreateClient,
    ) -> Result<ClientSecret, ClientError> {
        self.send(self.http.post(self.url(paths::CLIENTS)).json(client))
            .await
    }

    /// `GET /admin/v1/messaging/outbox?limit=N`: what left for the carrier, newest first.
    pub async fn messaging_outbox(
        &self,
        limit: u32,
    ) -> Result<Vec<kep_api::messaging::OutboxEntry>, ClientError> {
        self.send(
            self.http
                .get(self.url(paths::OUTBOX))
                .query(&[("limit", limit)]),
        )
        .await
    }

    /// `GET /admin/v1/messaging/carriers`: the carriers, in the order they are tried.
    pub async fn messaging_carriers(
        &self,
    ) -> Result<Vec<kep_api::messaging::CarrierStatus>, ClientError> {
        self.send(self.http.get(self.url(paths::CARRIERS))).await
    }

    /// `GET /admin/v1/messaging/messages`: every client's messages, newest first, as `q`
    /// filters them.
    pub async fn messages(&self, q: &MessageQuery) -> Result<MessageList, ClientError> {
        self.send(self.http.get(self.url(paths::MESSAGES)).query(q))
            .await
    }

    /// `GET /admin/v1/messaging/messages/{uid}`: a message and its timeline.
    pub async fn message(&self, uid: &str) -> Result<MessageTimeline, ClientError> {
        self.send(self.http.get(self.url(&path(paths::MESSAGE, &[uid]))))
            .await
    }

    /// `GET /admin/v1/messaging/report-groups`: RCS result groups, newest first; `None` for
    /// every client's, and for the server's default limit.
    pub async fn report_groups(
        &self,
        client_id: Option<&str>,
        limit: Option<i64>,
    ) -> Result<ReportGroupList, ClientError> {
        let q = ReportGroupQuery {
            client_id: client_id.map(str::to_owned),
            limit,
        };
        self.send(self.http.get(self.url(paths::REPORT_GROUPS)).query(&q))
            .await
    }
}

/// A customer's server calling the messaging listener.
#[derive(Clone)]
pub struct MessagingClient {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl MessagingClient {
    /// `POST /v2/oauth/token` with HTTP Basic client authentication.
    pub async fn token(
        base: &str,
        client_id: &str,
        client_secret: &str,
    ) -> Result<TokenAnswer, ClientError> {
        let res = crate::tls::http()
            .post(format!("{}{}", base.trim_end_matches('/'), paths::TOKEN))
            .basic_auth(client_id, Some(client_secret))
            .form(&[("grant_type", "client_credentials")])
            .send()
            .await?;
        Ok(checked(res).await?.json().await?)
    }

    pub fn new(base: &str, token: impl Into<String>) -> Self {
        MessagingClient {
            http: crate::tls::http(),
            base: base.trim_end_matches('/').to_owned(),
            token: token.into(),
        }
    }

    async fn call<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        Ok(checked(
            req.bearer_auth(&self.token)
                .header("accept", "*/*")
                .send()
                .await?,
        )
        .await?
        .json()
        .await?)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `POST /v2/send/xms`
    pub async fn send_xms(&self, body: &Value) -> Result<SendAnswer, ClientError> {
        self.call(self.http.post(self.url(paths::SEND_XMS)).json(body))
            .await
    }

    /// `POST /v2/send/rcs`
    pub async fn send_rcs(&self, body: &Value) -> Result<SendAnswer, ClientError> {
        self.call(self.http.post(self.url(paths::SEND_RCS)).json(body))
            .await
    }

    async fn file_part(path: &Path) -> Result<Part, ClientError> {
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|e| ClientError::Protocol(format!("{}: {e}", path.display())))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "file".into());
        Ok(Part::bytes(bytes).file_name(name))
    }

    /// `POST /v2/upload/rcs`
    pub async fn upload_rcs(
        &self,
        path: &Path,
        description: &str,
    ) -> Result<RcsUploadAnswer, ClientError> {
        let form = Form::new()
            .part("image", Self::file_part(path).await?)
            .text("description", description.to_owned());
        self.call(self.http.post(self.url(paths::UPLOAD_RCS)).multipart(form))
            .await
    }

    /// `POST /v2/upload/message/mms/files`
    pub async fn upload_mms(
        &self,
        paths: &[std::path::PathBuf],
    ) -> Result<MmsUploadAnswer, ClientError> {
        let mut form = Form::new();
        for p in paths {
            form = form.part("files", Self::file_part(p).await?);
        }
        self.call(self.http.post(self.url(paths::UPLOAD_MMS)).multipart(form))
            .await
    }

    /// `GET /v2/info/rcs/results`
    pub async fn rcs_results(&self) -> Result<RcsResultsAnswer, ClientError> {
        self.call(self.http.get(self.url(paths::RCS_RESULTS))).await
    }

    /// `PUT /v2/info/rcs/results/complete/{report_group_id}`
    pub async fn complete(&self, report_group_id: &str) -> Result<CodeAnswer, ClientError> {
        self.call(
            self.http
                .put(self.url(&path(paths::RCS_RESULTS_COMPLETE, &[report_group_id]))),
        )
        .await
    }

    /// `POST /v2/info/message/search`
    pub async fn search_xms(&self, q: &XmsSearch) -> Result<XmsSearchAnswer, ClientError> {
        self.call(self.http.post(self.url(paths::XMS_SEARCH)).json(q))
            .await
    }

    /// `POST /v2/info/rcs/search`
    pub async fn search_rcs(&self, q: &RcsSearch) -> Result<RcsSearchAnswer, ClientError> {
        self.call(self.http.post(self.url(paths::RCS_SEARCH)).json(q))
            .await
    }

    /// `GET /v2/info/{message|rcs}/search/detail/{uid}`
    pub async fn detail(&self, uid: &str, rcs: bool) -> Result<Value, ClientError> {
        let detail = if rcs {
            paths::RCS_DETAIL
        } else {
            paths::XMS_DETAIL
        };
        self.call(self.http.get(self.url(&path(detail, &[uid]))))
            .await
    }
}
