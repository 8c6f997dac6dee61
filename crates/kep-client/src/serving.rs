//! The model-serving management API on the admin listener (CONTRACT §3).
//!
//! Requests and answers are the server's own wire types.

use std::path::Path;

pub use kep_api::serving::{
    Alert, AlertCondition, AlertHistory, AlertSettings, ApiKey, CallMetrics, Command, Deployment,
    DeploymentMetrics, DeploymentPatch, DeploymentRequest, DeploymentType, Endpoint,
    EndpointCreated, EndpointMetrics, EndpointRequest, Event, Image, ImageRequest, ImageSource,
    InstanceMetrics, Latency, MirrorMetrics, Mirroring, Model, ModelSignature, ModelTensor, Probe,
    Quota, Traffic, TrafficRequest, VersionPolicy,
};
use reqwest::multipart::{Form, Part};

use crate::{AdminClient, ClientError, path as path_of};
use kep_api::serving::paths;

impl AdminClient {
    /// `POST /admin/v1/serving/images`
    pub async fn create_image(&self, req: &ImageRequest) -> Result<Image, ClientError> {
        self.send(self.http.post(self.url(paths::IMAGES)).json(req))
            .await
    }

    /// `POST /admin/v1/serving/images/{name}/archive`: the archive (`docker save`, `podman
    /// save`) is streamed from `path`, not read whole.
    pub async fn load_image_archive(&self, name: &str, path: &Path) -> Result<Image, ClientError> {
        let (body, len) = crate::file_body(path).await?;
        self.send(
            self.http
                .post(self.url(&path_of(paths::IMAGE_ARCHIVE, &[name])))
                .header(reqwest::header::CONTENT_TYPE, "application/x-tar")
                .header(reqwest::header::CONTENT_LENGTH, len)
                .body(body),
        )
        .await
    }

    /// `GET /admin/v1/serving/images`
    pub async fn images(&self) -> Result<Vec<Image>, ClientError> {
        self.send(self.http.get(self.url(paths::IMAGES))).await
    }

    /// `GET /admin/v1/serving/images/{name}`
    pub async fn image(&self, name: &str) -> Result<Image, ClientError> {
        self.send(self.http.get(self.url(&path_of(paths::IMAGE, &[name]))))
            .await
    }

    /// `DELETE /admin/v1/serving/images/{name}`
    pub async fn delete_image(&self, name: &str) -> Result<(), ClientError> {
        self.send_empty(self.http.delete(self.url(&path_of(paths::IMAGE, &[name]))))
            .await
    }

    /// `POST /admin/v1/serving/models`: the file is streamed from `path`, not read whole.
    pub async fn upload_model(
        &self,
        name: &str,
        framework: &str,
        path: &Path,
    ) -> Result<Model, ClientError> {
        self.upload_model_declared(name, framework, path, None)
            .await
    }

    /// `POST /admin/v1/serving/models` with the `inputs` a TorchScript file needs declared.
    pub async fn upload_model_declared(
        &self,
        name: &str,
        framework: &str,
        path: &Path,
        inputs: Option<&[ModelTensor]>,
    ) -> Result<Model, ClientError> {
        let (body, len) = crate::file_body(path).await?;
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into());
        let form = Form::new()
            .text("name", name.to_owned())
            .text("framework", framework.to_owned())
            .part(
                "file",
                Part::stream_with_length(body, len).file_name(file_name),
            );
        let form = match inputs {
            Some(inputs) => form.text(
                "inputs",
                serde_json::to_string(inputs).expect("tensors are JSON"),
            ),
            None => form,
        };
        self.send(self.http.post(self.url(paths::MODELS)).multipart(form))
            .await
    }

    /// `GET /admin/v1/serving/models`
    pub async fn models(&self) -> Result<Vec<Model>, ClientError> {
        self.send(self.http.get(self.url(paths::MODELS))).await
    }

    /// `GET /admin/v1/serving/models/{name}`
    pub async fn model(&self, name: &str) -> Result<Model, ClientError> {
        self.send(self.http.get(self.url(&path_of(paths::MODEL, &[name]))))
            .await
    }

    /// `DELETE /admin/v1/serving/models/{name}`
    pub async fn delete_model(&self, name: &str) -> Result<(), ClientError> {
        self.send_empty(self.http.delete(self.url(&path_of(paths::MODEL, &[name]))))
            .await
    }

    /// `POST /admin/v1/serving/endpoints`: the answer holds the API key, shown this once.
    pub async fn create_endpoint(
        &self,
        req: &EndpointRequest,
    ) -> Result<EndpointCreated, ClientError> {
        self.send(self.http.post(self.url(paths::ENDPOINTS)).json(req))
            .await
    }

    /// `GET /admin/v1/serving/endpoints`
    pub async fn endpoints(&self) -> Result<Vec<Endpoint>, ClientError> {
        self.send(self.http.get(self.url(paths::ENDPOINTS))).await
    }

    /// `GET /admin/v1/serving/endpoints/{e}`
    pub async fn endpoint(&self, endpoint: &str) -> Result<Endpoint, ClientError> {
        self.send(
            self.http
                .get(self.url(&path_of(paths::ENDPOINT, &[endpoint]))),
        )
        .await
    }

    /// `DELETE /admin/v1/serving/endpoints/{e}`
    pub async fn delete_endpoint(&self, endpoint: &str) -> Result<(), ClientError> {
        self.send_empty(
            self.http
                .delete(self.url(&path_of(paths::ENDPOINT, &[endpoint]))),
        )
        .await
    }

    /// `POST /admin/v1/serving/endpoints/{e}/api-key`: the old key stops working.
    pub async fn reissue_api_key(&self, endpoint: &str) -> Result<ApiKey, ClientError> {
        self.send(
            self.http
                .post(self.url(&path_of(paths::ENDPOINT_API_KEY, &[endpoint]))),
        )
        .await
    }

    /// `POST /admin/v1/serving/endpoints/{e}/deployments`
    pub async fn create_deployment(
        &self,
        endpoint: &str,
        req: &DeploymentRequest,
    ) -> Result<Deployment, ClientError> {
        self.send(
            self.http
                .post(self.url(&path_of(paths::DEPLOYMENTS, &[endpoint])))
                .json(req),
        )
        .await
    }

    /// `GET /admin/v1/serving/endpoints/{e}/deployments`
    pub async fn deployments(&self, endpoint: &str) -> Result<Vec<Deployment>, ClientError> {
        self.send(
            self.http
                .get(self.url(&path_of(paths::DEPLOYMENTS, &[endpoint]))),
        )
        .await
    }

    /// `GET /admin/v1/serving/endpoints/{e}/deployments/{d}`
    pub async fn deployment(
        &self,
        endpoint: &str,
        deployment: &str,
    ) -> Result<Deployment, ClientError> {
        self.send(
            self.http
                .get(self.url(&path_of(paths::DEPLOYMENT, &[endpoint, deployment]))),
        )
        .await
    }

    /// `PATCH /admin/v1/serving/endpoints/{e}/deployments/{d}`
    pub async fn patch_deployment(
        &self,
        endpoint: &str,
        deployment: &str,
        patch: &DeploymentPatch,
    ) -> Result<Deployment, ClientError> {
        self.send(
            self.http
                .patch(self.url(&path_of(paths::DEPLOYMENT, &[endpoint, deployment])))
                .json(patch),
        )
        .await
    }

    /// `DELETE /admin/v1/serving/endpoints/{e}/deployments/{d}`
    pub async fn delete_deployment(
        &self,
        endpoint: &str,
        deployment: &str,
    ) -> Result<(), ClientError> {
        self.send_empty(
            self.http
                .delete(self.url(&path_of(paths::DEPLOYMENT, &[endpoint, deployment]))),
        )
        .await
    }

    /// `GET …/deployments/{d}/events`: newest first, at most `limit` (server default 100).
    pub async fn deployment_events(
        &self,
        endpoint: &str,
        deployment: &str,
        limit: Option<i64>,
    ) -> Result<Vec<Event>, ClientError> {
        let mut req = self
            .http
            .get(self.url(&path_of(paths::DEPLOYMENT_EVENTS, &[endpoint, deployment])));
        if let Some(limit) = limit {
            req = req.query(&[("limit", limit)]);
        }
        self.send(req).await
    }

    /// `GET …/deployments/{d}/instances/{i}/logs`: the last `tail_bytes` (server default
    /// 64 KiB) of what the instance wrote, as it wrote them.
    pub async fn instance_logs(
        &self,
        endpoint: &str,
        deployment: &str,
        instance: &str,
        tail_bytes: Option<u64>,
    ) -> Result<Vec<u8>, ClientError> {
        let mut req = self.http.get(self.url(&path_of(
            paths::INSTANCE_LOGS,
            &[endpoint, deployment, instance],
        )));
        if let Some(tail) = tail_bytes {
            req = req.query(&[("tail_bytes", tail)]);
        }
        Ok(self.send_raw(req).await?.bytes().await?.to_vec())
    }

    /// `PUT /admin/v1/serving/endpoints/{e}/traffic`
    pub async fn set_traffic(
        &self,
        endpoint: &str,
        req: &TrafficRequest,
    ) -> Result<Traffic, ClientError> {
        self.send(
            self.http
                .put(self.url(&path_of(paths::TRAFFIC, &[endpoint])))
                .json(req),
        )
        .await
    }

    /// `GET /admin/v1/serving/endpoints/{e}/traffic`
    pub async fn traffic(&self, endpoint: &str) -> Result<Traffic, ClientError> {
        self.send(
            self.http
                .get(self.url(&path_of(paths::TRAFFIC, &[endpoint]))),
        )
        .await
    }

    /// `PUT /admin/v1/serving/endpoints/{e}/mirroring`
    pub async fn set_mirroring(
        &self,
        endpoint: &str,
        req: &Mirroring,
    ) -> Result<Mirroring, ClientError> {
        self.send(
            self.http
                .put(self.url(&path_of(paths::MIRRORING, &[endpoint])))
                .json(req),
        )
        .await
    }

    /// `GET /admin/v1/serving/endpoints/{e}/mirroring`
    pub async fn mirroring(&self, endpoint: &str) -> Result<Mirroring, ClientError> {
        self.send(
            self.http
                .get(self.url(&path_of(paths::MIRRORING, &[endpoint]))),
        )
        .await
    }

    /// `GET /admin/v1/serving/endpoints/{e}/alerts`
    pub async fn alerts(&self, endpoint: &str) -> Result<AlertSettings, ClientError> {
        self.send(
            self.http
                .get(self.url(&path_of(paths::ALERTS, &[endpoint]))),
        )
        .await
    }

    /// `PUT /admin/v1/serving/endpoints/{e}/alerts`: replaces the whole settings; a condition
    /// left out is off.
    pub async fn set_alerts(
        &self,
        endpoint: &str,
        settings: &AlertSettings,
    ) -> Result<AlertSettings, ClientError> {
        self.send(
            self.http
                .put(self.url(&path_of(paths::ALERTS, &[endpoint])))
                .json(settings),
        )
        .await
    }

    /// `GET /admin/v1/serving/endpoints/{e}/alerts/history`: newest first, at most `limit`
    /// (server default 100, at most 1000).
    pub async fn alert_history(
        &self,
        endpoint: &str,
        limit: Option<u32>,
    ) -> Result<AlertHistory, ClientError> {
        let mut req = self
            .http
            .get(self.url(&path_of(paths::ALERT_HISTORY, &[endpoint])));
        if let Some(limit) = limit {
            req = req.query(&[("limit", limit)]);
        }
        self.send(req).await
    }

    /// `GET /admin/v1/serving/endpoints/{e}/metrics`
    pub async fn endpoint_metrics(&self, endpoint: &str) -> Result<EndpointMetrics, ClientError> {
        self.send(
            self.http
                .get(self.url(&path_of(paths::METRICS, &[endpoint]))),
        )
        .await
    }

    /// `GET /admin/v1/serving/quota`
    pub async fn serving_quota(&self) -> Result<Quota, ClientError> {
        self.send(self.http.get(self.url(paths::QUOTA))).await
    }
}
