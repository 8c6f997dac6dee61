//! The control plane: every management call's rules, the store, and what it tells the
//! runtime (which instances to run) and the gateway (how to route an endpoint).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use kep_model_server::Engine;
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, mpsc};

use crate::runtime::probe::ProbeSpec;
use crate::runtime::{self, DeploymentKey, Launch, RuntimeHandle};
use crate::store::{self, DeploymentRow, EndpointRow, ImageRow, ModelRow, Store};
use crate::{ServingError, ServingSettings, spec};
use kep_api::serving::{
    Command, Deployment, DeploymentPatch, DeploymentRequest, DeploymentType, Endpoint,
    EndpointRequest, Event, Image, ImageRequest, Mirroring, Model, Probe, Quota, Resources,
    Traffic, TrafficRequest,
};
use kep_gateway::{EndpointRoute, RouteUpdate};

pub const FRAMEWORKS: &[&str] = &["tensorflow", "pytorch", "onnx"];
const DEFAULT_PORT: u16 = 8080;

/// A deployment as stored: the request resolved against the images and models it names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct DeploymentSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    #[serde(rename = "type")]
    kind: DeploymentType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    image: Option<ImageRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model: Option<ModelRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    script: Option<String>,
    /// The script file instances run: the inline text written out, or `serve.rhai` of the
    /// repository cloned at deploy time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    script_path: Option<String>,
    /// The command of a real model server from the PATH (`KEP_ENGINE=native`), with the
    /// model laid out for it under its own folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    native: Option<Native>,
    env: BTreeMap<String, String>,
    port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    readiness: Option<Probe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    liveness: Option<Probe>,
}

/// A real model server's command and the folder the model is laid out in for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Native {
    dir: String,
    argv: Vec<String>,
}

/// The image a deployment was made from, with its command as it was then (as a container
/// runtime pins an image digest).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ImageRef {
    id: String,
    name: String,
    command: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ModelRef {
    id: String,
    name: String,
    framework: String,
    path: String,
}

impl DeploymentSpec {
    /// What its instances run; the description does not matter to them. Model types run
    /// a model server (kep's own `model-server` subcommand) on the registered model, in
    /// the deployment's engine, probed on the protocol's own health call.
    fn launch(&self, server: &ModelServer, cpus: f64) -> Launch {
        let served = |protocol: &str, model: &ModelRef| {
            if let Some(native) = &self.native {
                return Ok(native.argv.clone());
            }
            let mut argv = server.argv.clone();
            argv.extend(
                [
                    "--protocol",
                    protocol,
                    "--name",
                    &model.name,
                    "--model",
                    &model.path,
                    "--engine",
                    server.engine_of(&self.env).name(),
                ]
                .map(str::to_owned),
            );
            // One inference uses the CPUs its instance type gives it, as in a container.
            argv.extend([
                "--threads".to_owned(),
                (cpus.ceil().max(1.0) as usize).to_string(),
            ]);
            Ok(argv)
        };
        let mut env = self.env.clone();
        if self.model.is_some()
            && let Some(lib) = &server.onnxruntime
        {
            env.entry(ORT_DYLIB_PATH.to_owned())
                .or_insert_with(|| lib.to_string_lossy().into_owned());
        }
        let (command, readiness) = match (&self.kind, &self.image, &self.model) {
            (DeploymentType::CustomImage, Some(image), _) => (
                Ok(image.command.clone()),
                self.readiness
                    .as_ref()
                    .map_or_else(ProbeSpec::tcp, ProbeSpec::from),
            ),
            (DeploymentType::TensorflowServing, _, Some(model)) => (
                served("tfserving", model),
                ProbeSpec::http(format!("/v1/models/{}", model.name)),
            ),
            (DeploymentType::Triton, _, Some(model)) => (
                served("kserve", model),
                ProbeSpec::http("/v2/health/ready".into()),
            ),
            (DeploymentType::Cosmos, _, Some(model)) if self.script_path.is_some() => (
                served("cosmos", model).map(|mut argv| {
                    argv.extend([
                        "--script".to_owned(),
                        self.script_path.clone().unwrap_or_default(),
                    ]);
                    argv
                }),
                ProbeSpec::http("/health".into()),
            ),
            (kind, ..) => (
                Err(format!(
                    "ModelServerUnavailable: this build has no model server for `{}` deployments",
                    kind.as_str()
                )),
                ProbeSpec::tcp(),
            ),
        };
        Launch {
            command,
            env,
            readiness,
            liveness: self.liveness.as_ref().map(ProbeSpec::from),
        }
    }

    fn same_launch(&self, other: &DeploymentSpec) -> bool {
        DeploymentSpec {
            description: None,
            ..self.clone()
        } == DeploymentSpec {
            description: None,
            ..other.clone()
        }
    }
}

/// A deployment variable that chooses what runs its model (`tract`, `onnxruntime` or
/// `native`).
const KEP_ENGINE: &str = "KEP_ENGINE";
/// Where a model server finds `libonnxruntime` (the variable `ort` reads).
const ORT_DYLIB_PATH: &str = "ORT_DYLIB_PATH";

/// How model deployments' instances are started.
struct ModelServer {
    /// `serving.model_server`, else this executable's `model-server` subcommand.
    argv: Vec<String>,
    /// `serving.engine`.
    engine: Engine,
    /// `serving.onnxruntime`.
    onnxruntime: Option<PathBuf>,
}

impl ModelServer {
    /// A deployment's engine: its `KEP_ENGINE` variable (checked when it was made), else
    /// the setting.
    fn engine_of(&self, env: &BTreeMap<String, String>) -> Engine {
        self.choice(env).ok().flatten().unwrap_or(self.engine)
    }

    /// What runs a model deployment's instances: `KEP_ENGINE=native` for the type's real
    /// server from the PATH, else an engine of `kep model-server`.
    fn choice(&self, env: &BTreeMap<String, String>) -> Result<Option<Engine>, ServingError> {
        match env.get(KEP_ENGINE).map(String::as_str) {
            Some(NATIVE) => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                ServingError::field(
                    "env",
                    format!("{KEP_ENGINE}: {v:?} is not tract, onnxruntime or {NATIVE}"),
                )
            }),
            None => Ok(Some(self.engine)),
        }
    }
}

/// The `KEP_ENGINE` value that runs the real `tritonserver` or `tensorflow_model_server`.
const NATIVE: &str = "native";

pub struct Control {
    settings: ServingSettings,
    store: Store,
    runtime: RuntimeHandle,
    routes: mpsc::UnboundedSender<RouteUpdate>,
    root: PathBuf,
    gateway_url: String,
    model_server: ModelServer,
    /// Changes are made one at a time, so names, model counts and quota hold across the
    /// check and the write.
    changes: Mutex<()>,
}

fn now_unix() -> i64 {
    runtime::now_ms() / 1000
}

fn rfc3339(unix: i64) -> String {
    jiff::Timestamp::from_second(unix).map_or_else(|_| unix.to_string(), |t| t.to_string())
}

fn parse_spec(row: &DeploymentRow) -> Result<DeploymentSpec, ServingError> {
    serde_json::from_str(&row.spec).map_err(|e| ServingError::Internal(e.into()))
}

fn key(endpoint: &str, deployment: &str) -> DeploymentKey {
    DeploymentKey {
        endpoint: endpoint.to_owned(),
        deployment: deployment.to_owned(),
    }
}

/// Weights as calls follow them: when every weight is 0 (the weighted deployment was
/// deleted), the deployments share equally.
fn effective_weights(rows: &[DeploymentRow]) -> Vec<(String, u32)> {
    let unweighted = rows.iter().all(|d| d.weight == 0);
    rows.iter()
        .map(|d| {
            let w = if unweighted { 1 } else { d.weight as u32 };
            (d.name.clone(), w)
        })
        .collect()
}

impl Control {
    pub fn new(
        settings: ServingSettings,
        store: Store,
        runtime: RuntimeHandle,
        routes: mpsc::UnboundedSender<RouteUpdate>,
        root: PathBuf,
        gateway_url: String,
    ) -> anyhow::Result<Self> {
        if !settings
            .instance_types
            .contains_key(&settings.default_instance_type)
        {
            anyhow::bail!(
                "serving.default_instance_type {:?} is not one of serving.instance_types",
                settings.default_instance_type
            );
        }
        std::fs::create_dir_all(root.join("models"))?;
        let model_server = ModelServer {
            argv: match &settings.model_server {
                Some(argv) if !argv.is_empty() => argv.clone(),
                _ => vec![
                    std::env::current_exe()?.to_string_lossy().into_owned(),
                    "model-server".to_owned(),
                ],
            },
            engine: settings.engine,
            onnxruntime: settings.onnxruntime.clone(),
        };
        // Deployments are checked in this process with the library their instances load.
        #[cfg(feature = "onnxruntime")]
        if let Some(lib) = &settings.onnxruntime {
            kep_model_server::onnxruntime::use_library(lib.clone());
        }
        Ok(Control {
            model_server,
            settings,
            store,
            runtime,
            routes,
            root,
            gateway_url,
            changes: Mutex::new(()),
        })
    }

    /// What a deployment's instances run, on its endpoint's instance type.
    fn launch(&self, spec: &DeploymentSpec, e: &EndpointRow) -> Launch {
        let cpus = self
            .settings
            .instance_types
            .get(&e.instance_type)
            .map_or(1.0, |t| t.cpu);
        spec.launch(&self.model_server, cpus)
    }

    /// At start: routes for every endpoint, instances for every deployment.
    pub async fn resume(&self) -> Result<(), ServingError> {
        for e in self.store.endpoints().await? {
            self.publish_route(&e.name).await?;
            for d in self.store.deployments(Some(&e.name)).await? {
                let spec = parse_spec(&d)?;
                self.runtime.apply(
                    key(&e.name, &d.name),
                    self.launch(&spec, &e),
                    e.instance_count as u32,
                );
            }
        }
        Ok(())
    }

    pub async fn stop(&self) {
        self.runtime.shutdown().await;
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    pub fn models_dir(&self) -> PathBuf {
        self.root.join("models")
    }

    pub fn max_model_bytes(&self) -> u64 {
        self.settings.max_model_bytes
    }

    // Images.

    pub async fn create_image(&self, req: ImageRequest) -> Result<Image, ServingError> {
        spec::check_name("name", &req.name)?;
        let command = match req.command {
            Command::Line(line) => shell_words::split(&line)
                .map_err(|e| ServingError::field("command", format!("command: {e}")))?,
            Command::Words(words) => words,
        };
        if command.first().is_none_or(|c| c.is_empty()) {
            return Err(ServingError::field("command", "the command is empty"));
        }
        let row = ImageRow {
            id: kep_core::secret::new_uuid(),
            name: req.name,
            command: serde_json::to_string(&command)
                .map_err(|e| ServingError::Internal(e.into()))?,
            created_at: now_unix(),
        };
        match self.store.insert_image(&row).await {
            Err(e) if store::is_unique_violation(&e) => Err(ServingError::Conflict(format!(
                "an image named {} exists",
                row.name
            ))),
            Err(e) => Err(e.into()),
            Ok(()) => Ok(image_view(&row)),
        }
    }

    pub async fn images(&self) -> Result<Vec<Image>, ServingError> {
        Ok(self.store.images().await?.iter().map(image_view).collect())
    }

    pub async fn image(&self, name: &str) -> Result<Image, ServingError> {
        let row = self.store.image(name).await?;
        row.as_ref()
            .map(image_view)
            .ok_or_else(|| ServingError::NotFound(format!("no image {name}")))
    }

    pub async fn delete_image(&self, name: &str) -> Result<(), ServingError> {
        if !self.store.delete_image(name).await? {
            return Err(ServingError::NotFound(format!("no image {name}")));
        }
        Ok(())
    }

    // Models.

    pub fn check_model_fields(name: &str, framework: &str) -> Result<(), ServingError> {
        spec::check_name("name", name)?;
        if !FRAMEWORKS.contains(&framework) {
            return Err(ServingError::field(
                "framework",
                format!("framework is one of {}", FRAMEWORKS.join(", ")),
            ));
        }
        Ok(())
    }

    /// Registers an uploaded artifact already written to `path` under the models folder.
    pub async fn register_model(&self, row: ModelRow) -> Result<Model, ServingError> {
        match self.store.insert_model(&row).await {
            Err(e) if store::is_unique_violation(&e) => {
                let _ = tokio::fs::remove_file(&row.path).await;
                Err(ServingError::Conflict(format!(
                    "a model named {} exists",
                    row.name
                )))
            }
            Err(e) => Err(e.into()),
            Ok(()) => Ok(model_view(&row)),
        }
    }

    pub async fn models(&self) -> Result<Vec<Model>, ServingError> {
        Ok(self.store.models().await?.iter().map(model_view).collect())
    }

    pub async fn model(&self, name: &str) -> Result<Model, ServingError> {
        let row = self.store.model(name).await?;
        row.as_ref()
            .map(model_view)
            .ok_or_else(|| ServingError::NotFound(format!("no model {name}")))
    }

    pub async fn delete_model(&self, name: &str) -> Result<(), ServingError> {
        if !self.store.delete_model(name).await? {
            return Err(ServingError::NotFound(format!("no model {name}")));
        }
        Ok(())
    }

    // Endpoints.

    pub async fn create_endpoint(
        &self,
        req: EndpointRequest,
    ) -> Result<(Endpoint, String), ServingError> {
        spec::check_name("name", &req.name)?;
        if let Some(d) = &req.description {
            spec::check_description("description", d)?;
        }
        let instance_type = req
            .instance_type
            .unwrap_or_else(|| self.settings.default_instance_type.clone());
        if !self.settings.instance_types.contains_key(&instance_type) {
            return Err(ServingError::field(
                "instance_type",
                format!(
                    "instance_type is one of {}",
                    self.settings
                        .instance_types
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        let count = req.instance_count.unwrap_or(1);
        if count > self.settings.max_instance_count {
            return Err(ServingError::field(
                "instance_count",
                format!(
                    "instance_count is 0 to {}",
                    self.settings.max_instance_count
                ),
            ));
        }
        let protocol = req
            .protocol
            .as_deref()
            .unwrap_or("http")
            .to_ascii_lowercase();
        if protocol != "http" && protocol != "grpc" {
            return Err(ServingError::field("protocol", "protocol is http or grpc"));
        }
        let api_key = kep_core::secret::new_secret();
        let row = EndpointRow {
            name: req.name,
            description: req.description,
            instance_type,
            instance_count: i64::from(count),
            protocol,
            key_hash: kep_core::secret::sha256_hex(&api_key),
            mirroring: false,
            responder: None,
            created_at: now_unix(),
        };
        let _guard = self.changes.lock().await;
        match self.store.insert_endpoint(&row).await {
            Err(e) if store::is_unique_violation(&e) => {
                return Err(ServingError::Conflict(format!(
                    "an endpoint named {} exists",
                    row.name
                )));
            }
            other => other?,
        }
        self.publish_route(&row.name).await?;
        Ok((self.endpoint_view(&row, &[]), api_key))
    }

    async fn endpoint_row(&self, name: &str) -> Result<EndpointRow, ServingError> {
        self.store
            .endpoint(name)
            .await?
            .ok_or_else(|| ServingError::NotFound(format!("no endpoint {name}")))
    }

    pub async fn endpoint(&self, name: &str) -> Result<Endpoint, ServingError> {
        let row = self.endpoint_row(name).await?;
        let deployments = self.store.deployments(Some(name)).await?;
        Ok(self.endpoint_view(&row, &deployments))
    }

    pub async fn endpoints(&self) -> Result<Vec<Endpoint>, ServingError> {
        let all = self.store.deployments(None).await?;
        Ok(self
            .store
            .endpoints()
            .await?
            .iter()
            .map(|e| {
                let ds: Vec<DeploymentRow> = all
                    .iter()
                    .filter(|d| d.endpoint == e.name)
                    .cloned()
                    .collect();
                self.endpoint_view(e, &ds)
            })
            .collect())
    }

    /// Stops every deployment's instances, then forgets the endpoint.
    pub async fn delete_endpoint(&self, name: &str) -> Result<(), ServingError> {
        let _guard = self.changes.lock().await;
        self.endpoint_row(name).await?;
        let deployments = self.store.deployments(Some(name)).await?;
        // Stopped side by side: each waits out its drain and grace periods.
        futures_util::future::join_all(
            deployments
                .iter()
                .map(|d| self.runtime.remove(key(name, &d.name))),
        )
        .await;
        self.store.delete_endpoint(name).await?;
        self.update_routes(RouteUpdate::EndpointRemoved(name.to_owned()))
            .await;
        Ok(())
    }

    /// A new API key; the old one stops working at once.
    pub async fn reissue_key(&self, name: &str) -> Result<String, ServingError> {
        let _guard = self.changes.lock().await;
        self.endpoint_row(name).await?;
        let api_key = kep_core::secret::new_secret();
        self.store
            .set_key_hash(name, &kep_core::secret::sha256_hex(&api_key))
            .await?;
        self.publish_route(name).await?;
        Ok(api_key)
    }

    fn endpoint_view(&self, row: &EndpointRow, deployments: &[DeploymentRow]) -> Endpoint {
        Endpoint {
            name: row.name.clone(),
            description: row.description.clone(),
            url: format!("{}/endpoints/{}", self.gateway_url, row.name),
            instance_type: row.instance_type.clone(),
            instance_count: row.instance_count as u32,
            protocol: row.protocol.clone(),
            deployments: deployments.iter().map(|d| d.name.clone()).collect(),
            traffic: traffic_view(deployments),
            mirroring: Mirroring {
                enabled: row.mirroring,
                responder: row.responder.clone(),
            },
            created_at: rfc3339(row.created_at),
        }
    }

    /// Tells the gateway how the endpoint routes now.
    async fn publish_route(&self, name: &str) -> Result<(), ServingError> {
        let row = self.endpoint_row(name).await?;
        let deployments = self.store.deployments(Some(name)).await?;
        let mut key_hash = [0u8; 32];
        hex::decode_to_slice(&row.key_hash, &mut key_hash)
            .map_err(|e| ServingError::Internal(e.into()))?;
        self.update_routes(RouteUpdate::Endpoint(EndpointRoute {
            name: row.name.clone(),
            key_hash,
            http2: row.protocol == "grpc",
            deployments: effective_weights(&deployments),
            responder: row.responder.clone().filter(|_| row.mirroring),
        }))
        .await;
        Ok(())
    }

    /// Hands the gateway an update and waits until it is in effect, so that a key or a
    /// split the API has answered for is the one the next call meets.
    async fn update_routes(&self, update: RouteUpdate) {
        let (done, applied) = tokio::sync::oneshot::channel();
        if self.routes.send(update).is_ok() && self.routes.send(RouteUpdate::Applied(done)).is_ok()
        {
            let _ = applied.await;
        }
    }

    // Deployments.

    /// Checks the request's fields and the type's rules, and resolves the image and model.
    async fn resolve(&self, req: DeploymentRequest) -> Result<DeploymentSpec, ServingError> {
        if let Some(d) = &req.description {
            spec::check_description("description", d)?;
        }
        spec::check_env(&req.env)?;
        let custom = req.kind == DeploymentType::CustomImage;
        for (field, probe) in [("readiness", &req.readiness), ("liveness", &req.liveness)] {
            if let Some(p) = probe {
                if !custom {
                    return Err(ServingError::field(
                        field,
                        "health checks are set for custom-image deployments only; the platform manages the others",
                    ));
                }
                spec::check_probe(field, p)?;
            }
        }
        if !custom && req.port.is_some() {
            return Err(ServingError::field(
                "port",
                "port is set for custom-image deployments only",
            ));
        }
        if req.port == Some(0) {
            return Err(ServingError::field("port", "port is 1 to 65535"));
        }
        let forbid = |field: &str, what: &str| {
            ServingError::field(
                field,
                format!("a {} deployment takes no {what}", req.kind.as_str()),
            )
        };
        let image = match (&req.image, custom) {
            (Some(name), true) => {
                let row = self.store.image(name).await?.ok_or_else(|| {
                    ServingError::field("image", format!("no image named {name}"))
                })?;
                Some(ImageRef {
                    command: serde_json::from_str(&row.command)
                        .map_err(|e| ServingError::Internal(e.into()))?,
                    id: row.id,
                    name: row.name,
                })
            }
            (None, true) => {
                return Err(ServingError::field(
                    "image",
                    "a custom-image deployment needs an image",
                ));
            }
            (Some(_), false) => return Err(forbid("image", "image")),
            (None, false) => None,
        };
        let mut native = None;
        let model = match (&req.model, custom) {
            (Some(_), true) => {
                return Err(forbid("model", "separate model: the image holds it"));
            }
            (None, true) => None,
            (None, false) => {
                return Err(ServingError::field(
                    "model",
                    format!("a {} deployment needs a model", req.kind.as_str()),
                ));
            }
            (Some(name), false) => {
                let row = self.store.model(name).await?.ok_or_else(|| {
                    ServingError::field("model", format!("no model named {name}"))
                })?;
                let allowed: &[&str] = match req.kind {
                    DeploymentType::TensorflowServing => &["tensorflow"],
                    _ => FRAMEWORKS,
                };
                if !allowed.contains(&row.framework.as_str()) {
                    return Err(ServingError::field(
                        "model",
                        format!(
                            "a {} deployment serves {} models, not {}",
                            req.kind.as_str(),
                            allowed.join(" or "),
                            row.framework
                        ),
                    ));
                }
                match self.model_server.choice(&req.env)? {
                    Some(engine) => check_model(PathBuf::from(&row.path), engine).await?,
                    None => native = Some(self.native_layout(req.kind, &row).await?),
                }
                Some(ModelRef {
                    id: row.id,
                    name: row.name,
                    framework: row.framework,
                    path: row.path,
                })
            }
        };
        let script = match (&req.script, req.kind) {
            (Some(s), DeploymentType::Cosmos) => {
                if s.trim().is_empty() || s.len() > self.settings.max_script_bytes {
                    return Err(ServingError::field(
                        "script",
                        format!(
                            "the script is 1 to {} bytes",
                            self.settings.max_script_bytes
                        ),
                    ));
                }
                Some(s.clone())
            }
            (None, DeploymentType::Cosmos) => {
                return Err(ServingError::field(
                    "script",
                    "a cosmos deployment needs a serving script (text or repository URL)",
                ));
            }
            (Some(_), _) => return Err(forbid("script", "script")),
            (None, _) => None,
        };
        let script_path = match &script {
            Some(source) => Some(self.script_file(source).await?),
            None => None,
        };
        Ok(DeploymentSpec {
            description: req.description,
            kind: req.kind,
            image,
            model,
            script,
            script_path,
            native,
            env: req.env,
            port: req.port.unwrap_or(DEFAULT_PORT),
            readiness: req.readiness,
            liveness: req.liveness,
        })
    }

    /// The script file for a Cosmos deployment, checked: inline text is written under
    /// `serving/scripts`; a repository URL is cloned there with `git` and its `serve.rhai`
    /// is the script.
    async fn script_file(&self, source: &str) -> Result<String, ServingError> {
        let dir = self.root.join("scripts").join(kep_core::secret::new_uuid());
        tokio::fs::create_dir_all(&dir).await?;
        let source = source.trim();
        let is_repository = ["https://", "http://", "git://", "ssh://", "file://", "git@"]
            .iter()
            .any(|p| source.starts_with(p))
            && !source.contains('\n');
        let path = dir.join("serve.rhai");
        let fetched = if is_repository {
            let clone = dir.join("repository");
            let out = tokio::time::timeout(
                std::time::Duration::from_secs(120),
                tokio::process::Command::new("git")
                    .args(["clone", "--depth", "1", "--quiet", "--", source])
                    .arg(&clone)
                    .env("GIT_TERMINAL_PROMPT", "0")
                    .output(),
            )
            .await;
            match out {
                Ok(Ok(o)) if o.status.success() => {
                    tokio::fs::read_to_string(clone.join("serve.rhai"))
                        .await
                        .map_err(|e| format!("the repository has no serve.rhai at its root: {e}"))
                }
                Ok(Ok(o)) => Err(format!(
                    "git clone {source}: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                )),
                Ok(Err(e)) => Err(format!("git clone {source}: {e}")),
                Err(_) => Err(format!("git clone {source}: no answer within 120 s")),
            }
        } else {
            Ok(source.to_owned())
        };
        let checked =
            fetched.and_then(|text| kep_model_server::cosmos::Script::compile(&text).map(|_| text));
        match checked {
            Ok(text) => {
                tokio::fs::write(&path, text).await?;
                Ok(path.to_string_lossy().into_owned())
            }
            Err(e) => {
                let _ = tokio::fs::remove_dir_all(&dir).await;
                Err(ServingError::field("script", e))
            }
        }
    }

    /// Lays the model out for the type's real server in a folder of its own and returns
    /// the server's argv; the server must be on the PATH now.
    async fn native_layout(
        &self,
        kind: DeploymentType,
        row: &ModelRow,
    ) -> Result<Native, ServingError> {
        use kep_model_server::native;
        let program = match kind {
            DeploymentType::Triton => native::TRITONSERVER,
            DeploymentType::TensorflowServing => native::TENSORFLOW_MODEL_SERVER,
            _ => {
                return Err(ServingError::field(
                    "env",
                    format!(
                        "{KEP_ENGINE}={NATIVE} is for triton and tensorflow-serving deployments"
                    ),
                ));
            }
        };
        if native::on_path(program).is_none() {
            return Err(ServingError::field(
                "env",
                format!("{KEP_ENGINE}={NATIVE}: there is no {program} on kep's PATH"),
            ));
        }
        let tensors = |json: &str| serde_json::from_str(json).unwrap_or_default();
        let signature = (tensors(&row.inputs), tensors(&row.outputs));
        // The folder's parent is the deployment's own, as a cloned script's is.
        let dir = self
            .root
            .join("native")
            .join(kep_core::secret::new_uuid())
            .join("model");
        let (name, model) = (row.name.clone(), PathBuf::from(&row.path));
        let at = dir.clone();
        let made = tokio::task::spawn_blocking(move || match kind {
            DeploymentType::Triton => native::triton(&at, &name, &model, &signature)
                .map_err(|e| ServingError::Internal(e.into())),
            _ => native::tf_serving(&at, &name, &model, &signature)
                .map_err(|e| ServingError::field("model", e)),
        })
        .await
        .map_err(|e| ServingError::Internal(e.into()))?;
        let dir = dir.to_string_lossy().into_owned();
        match made {
            Ok(argv) => Ok(Native { dir, argv }),
            Err(e) => {
                self.forget_workdir(&dir).await;
                Err(e)
            }
        }
    }

    /// Removes the folder a script or a native layout was written in.
    async fn forget_workdir(&self, path: &str) {
        if let Some(dir) = std::path::Path::new(path).parent() {
            let _ = tokio::fs::remove_dir_all(dir).await;
        }
    }

    /// At most two models per endpoint, counting the one `spec` would bring.
    fn check_models(others: &[DeploymentRow], spec: &DeploymentSpec) -> Result<(), ServingError> {
        let Some(model) = &spec.model else {
            return Ok(());
        };
        let mut ids = BTreeSet::new();
        for d in others {
            if let Some(m) = parse_spec(d)?.model {
                ids.insert(m.id);
            }
        }
        ids.insert(model.id.clone());
        if ids.len() > spec::MODELS_PER_ENDPOINT {
            return Err(ServingError::field(
                "model",
                format!(
                    "an endpoint serves at most {} models",
                    spec::MODELS_PER_ENDPOINT
                ),
            ));
        }
        Ok(())
    }

    fn resources(&self, instance_type: &str, count: i64) -> Resources {
        let t = self
            .settings
            .instance_types
            .get(instance_type)
            .copied()
            .unwrap_or_default();
        Resources {
            cpu: t.cpu * count as f64,
            memory_mb: t.memory_mb * count as u64,
            gpu: t.gpu * count as u32,
        }
    }

    async fn used(&self) -> Result<Resources, ServingError> {
        let endpoints = self.store.endpoints().await?;
        let mut used = Resources::default();
        for d in self.store.deployments(None).await? {
            if let Some(e) = endpoints.iter().find(|e| e.name == d.endpoint) {
                let r = self.resources(&e.instance_type, e.instance_count);
                used.cpu += r.cpu;
                used.memory_mb += r.memory_mb;
                used.gpu += r.gpu;
            }
        }
        Ok(used)
    }

    pub async fn quota(&self) -> Result<Quota, ServingError> {
        Ok(Quota {
            total: self.settings.quota,
            used: self.used().await?,
            instance_types: self.settings.instance_types.clone(),
        })
    }

    pub async fn create_deployment(
        &self,
        endpoint: &str,
        req: DeploymentRequest,
    ) -> Result<Deployment, ServingError> {
        spec::check_name("name", &req.name)?;
        let name = req.name.clone();
        let spec = self.resolve(req).await?;
        let _guard = self.changes.lock().await;
        let e = self.endpoint_row(endpoint).await?;
        let existing = self.store.deployments(Some(endpoint)).await?;
        if existing.iter().any(|d| d.name == name) {
            return Err(ServingError::Conflict(format!(
                "endpoint {endpoint} has a deployment named {name}"
            )));
        }
        Self::check_models(&existing, &spec)?;
        let used = self.used().await?;
        let need = self.resources(&e.instance_type, e.instance_count);
        let total = self.settings.quota;
        for (what, used, need, total) in [
            ("cpu", used.cpu, need.cpu, total.cpu),
            (
                "memory_mb",
                used.memory_mb as f64,
                need.memory_mb as f64,
                total.memory_mb as f64,
            ),
            (
                "gpu",
                f64::from(used.gpu),
                f64::from(need.gpu),
                f64::from(total.gpu),
            ),
        ] {
            if need > 0.0 && used + need > total {
                return Err(ServingError::QuotaExceeded(format!(
                    "the workspace quota has {} {what} left; {} × {} needs {need}",
                    total - used,
                    e.instance_count,
                    e.instance_type
                )));
            }
        }
        let now = now_unix();
        let row = DeploymentRow {
            endpoint: endpoint.to_owned(),
            name: name.clone(),
            spec: serde_json::to_string(&spec).map_err(|e| ServingError::Internal(e.into()))?,
            // A lone deployment gets all the traffic; a later one none until traffic is set.
            weight: if existing.is_empty() { 100 } else { 0 },
            created_at: now,
            updated_at: now,
        };
        self.store.insert_deployment(&row).await?;
        self.runtime.apply(
            key(endpoint, &name),
            self.launch(&spec, &e),
            e.instance_count as u32,
        );
        self.publish_route(endpoint).await?;
        drop(_guard);
        self.deployment(endpoint, &name).await
    }

    async fn deployment_row(
        &self,
        endpoint: &str,
        name: &str,
    ) -> Result<DeploymentRow, ServingError> {
        if let Some(row) = self.store.deployment(endpoint, name).await? {
            return Ok(row);
        }
        // Which of the two is missing.
        self.endpoint_row(endpoint).await?;
        Err(ServingError::NotFound(format!(
            "endpoint {endpoint} has no deployment {name}"
        )))
    }

    pub async fn deployment(&self, endpoint: &str, name: &str) -> Result<Deployment, ServingError> {
        let row = self.deployment_row(endpoint, name).await?;
        let live: BTreeSet<String> = self.store.live_sources().await?.into_iter().collect();
        self.deployment_view(&row, &live).await
    }

    pub async fn deployments(&self, endpoint: &str) -> Result<Vec<Deployment>, ServingError> {
        self.endpoint_row(endpoint).await?;
        let live: BTreeSet<String> = self.store.live_sources().await?.into_iter().collect();
        let mut out = Vec::new();
        for row in self.store.deployments(Some(endpoint)).await? {
            out.push(self.deployment_view(&row, &live).await?);
        }
        Ok(out)
    }

    async fn deployment_view(
        &self,
        row: &DeploymentRow,
        live_sources: &BTreeSet<String>,
    ) -> Result<Deployment, ServingError> {
        let spec = parse_spec(row)?;
        let status = self.runtime.status(key(&row.endpoint, &row.name)).await;
        let source_deleted = spec
            .image
            .iter()
            .map(|i| &i.id)
            .chain(spec.model.iter().map(|m| &m.id))
            .any(|id| !live_sources.contains(id));
        Ok(Deployment {
            endpoint: row.endpoint.clone(),
            name: row.name.clone(),
            description: spec.description,
            kind: spec.kind,
            image: spec.image.map(|i| i.name),
            model: spec.model.map(|m| m.name),
            script: spec.script,
            env: spec.env,
            port: spec.port,
            readiness: spec.readiness,
            liveness: spec.liveness,
            state: status
                .as_ref()
                .map_or(runtime::PROGRESSING, |s| s.state)
                .to_owned(),
            weight: row.weight as u32,
            source_deleted,
            instances: status.map(|s| s.instances).unwrap_or_default(),
            created_at: rfc3339(row.created_at),
            updated_at: rfc3339(row.updated_at),
        })
    }

    /// Edits the editable fields; a change its instances see rolls them over.
    pub async fn patch_deployment(
        &self,
        endpoint: &str,
        name: &str,
        patch: DeploymentPatch,
    ) -> Result<Deployment, ServingError> {
        let _guard = self.changes.lock().await;
        let e = self.endpoint_row(endpoint).await?;
        let row = self.deployment_row(endpoint, name).await?;
        let old = parse_spec(&row)?;
        let live: BTreeSet<String> = self.store.live_sources().await?.into_iter().collect();
        if let Some(gone) = old
            .image
            .as_ref()
            .map(|i| ("image", &i.id, &i.name))
            .into_iter()
            .chain(old.model.as_ref().map(|m| ("model", &m.id, &m.name)))
            .find(|(_, id, _)| !live.contains(*id))
        {
            return Err(ServingError::SourceDeleted(format!(
                "the {} {} of deployment {name} has been deleted: register it again and create a new deployment",
                gone.0, gone.2
            )));
        }
        let req = DeploymentRequest {
            name: name.to_owned(),
            description: patch.description.unwrap_or(old.description.clone()),
            kind: old.kind,
            image: patch.image.or(old.image.as_ref().map(|i| i.name.clone())),
            model: patch.model.or(old.model.as_ref().map(|m| m.name.clone())),
            script: patch.script.unwrap_or(old.script.clone()),
            env: patch.env.unwrap_or(old.env.clone()),
            port: patch
                .port
                .or((old.kind == DeploymentType::CustomImage).then_some(old.port)),
            readiness: patch.readiness.unwrap_or(old.readiness.clone()),
            liveness: patch.liveness.unwrap_or(old.liveness.clone()),
        };
        let mut new = self.resolve(req).await?;
        // An unchanged script keeps the file its instances run (a repository is not cloned
        // anew by an edit of something else).
        if new.script == old.script && new.script_path != old.script_path {
            if let Some(fresh) = new.script_path.take() {
                self.forget_workdir(&fresh).await;
            }
            new.script_path = old.script_path.clone();
        }
        // So does an unchanged model served natively.
        if let (Some(o), Some(n)) = (&old.native, &new.native)
            && old.model.as_ref().map(|m| &m.id) == new.model.as_ref().map(|m| &m.id)
        {
            self.forget_workdir(&n.dir).await;
            new.native = Some(o.clone());
        }
        // An unchanged image name keeps the command it was deployed with.
        if let (Some(o), Some(n)) = (&old.image, &mut new.image)
            && o.id == n.id
        {
            n.command = o.command.clone();
        }
        let others: Vec<DeploymentRow> = self
            .store
            .deployments(Some(endpoint))
            .await?
            .into_iter()
            .filter(|d| d.name != name)
            .collect();
        Self::check_models(&others, &new)?;
        let json = serde_json::to_string(&new).map_err(|e| ServingError::Internal(e.into()))?;
        self.store
            .update_deployment(endpoint, name, &json, now_unix())
            .await?;
        if !old.same_launch(&new) {
            self.runtime.apply(
                key(endpoint, name),
                self.launch(&new, &e),
                e.instance_count as u32,
            );
        }
        drop(_guard);
        self.deployment(endpoint, name).await
    }

    pub async fn delete_deployment(&self, endpoint: &str, name: &str) -> Result<(), ServingError> {
        let _guard = self.changes.lock().await;
        let e = self.endpoint_row(endpoint).await?;
        self.deployment_row(endpoint, name).await?;
        if e.mirroring && e.responder.as_deref() == Some(name) {
            return Err(ServingError::Conflict(format!(
                "{name} answers the mirrored calls: turn mirroring off or choose another responder first"
            )));
        }
        self.store.delete_deployment(endpoint, name).await?;
        let rest = self.store.deployments(Some(endpoint)).await?;
        if let [only] = rest.as_slice() {
            self.store
                .set_weights(endpoint, &BTreeMap::from([(only.name.clone(), 100)]))
                .await?;
        }
        self.publish_route(endpoint).await?;
        self.runtime.remove(key(endpoint, name)).await;
        Ok(())
    }

    pub async fn events(
        &self,
        endpoint: &str,
        name: &str,
        limit: i64,
    ) -> Result<Vec<Event>, ServingError> {
        self.deployment_row(endpoint, name).await?;
        Ok(self
            .store
            .events(endpoint, name, limit.clamp(1, 1000))
            .await?
            .into_iter()
            .map(|e| Event {
                id: e.id,
                at: jiff::Timestamp::from_millisecond(e.at_ms)
                    .map_or_else(|_| e.at_ms.to_string(), |t| t.to_string()),
                deployment: e.deployment,
                instance: e.instance,
                kind: e.kind,
                from: e.from_state,
                to: e.to_state,
                reason: e.reason,
            })
            .collect())
    }

    /// The last `tail` bytes of an instance's captured output.
    pub async fn logs(
        &self,
        endpoint: &str,
        name: &str,
        instance: &str,
        tail: u64,
    ) -> Result<Vec<u8>, ServingError> {
        self.deployment_row(endpoint, name).await?;
        let id_ok = instance.strip_prefix(name).is_some_and(|rest| {
            rest.len() == 6
                && rest.starts_with('-')
                && rest[1..]
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        });
        let path = self
            .logs_dir()
            .join(endpoint)
            .join(name)
            .join(format!("{instance}.log"));
        let not_found = || ServingError::NotFound(format!("no instance {instance} in {name}"));
        if !id_ok {
            return Err(not_found());
        }
        let bytes = match tokio::fs::read(&path).await {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_found()),
            Err(e) => return Err(e.into()),
        };
        let start = bytes.len().saturating_sub(tail as usize);
        Ok(bytes[start..].to_vec())
    }

    // Traffic and mirroring.

    pub async fn set_traffic(
        &self,
        endpoint: &str,
        req: TrafficRequest,
    ) -> Result<Traffic, ServingError> {
        let _guard = self.changes.lock().await;
        self.endpoint_row(endpoint).await?;
        let rows = self.store.deployments(Some(endpoint)).await?;
        let names: Vec<String> = rows.iter().map(|d| d.name.clone()).collect();
        if names.is_empty() {
            return Err(ServingError::Conflict(format!(
                "endpoint {endpoint} has no deployment to send traffic to"
            )));
        }
        let weights = spec::traffic_weights(&req, &names)?;
        self.store.set_weights(endpoint, &weights).await?;
        self.publish_route(endpoint).await?;
        Ok(traffic_view(&self.store.deployments(Some(endpoint)).await?))
    }

    pub async fn set_mirroring(
        &self,
        endpoint: &str,
        req: Mirroring,
    ) -> Result<Mirroring, ServingError> {
        let _guard = self.changes.lock().await;
        self.endpoint_row(endpoint).await?;
        if req.enabled {
            let Some(responder) = &req.responder else {
                return Err(ServingError::field(
                    "responder",
                    "with mirroring on, name the deployment that answers",
                ));
            };
            let rows = self.store.deployments(Some(endpoint)).await?;
            if !rows.iter().any(|d| &d.name == responder) {
                return Err(ServingError::field(
                    "responder",
                    format!("endpoint {endpoint} has no deployment {responder}"),
                ));
            }
        }
        let responder = req.responder.as_deref().filter(|_| req.enabled);
        self.store
            .set_mirroring(endpoint, req.enabled, responder)
            .await?;
        self.publish_route(endpoint).await?;
        Ok(Mirroring {
            enabled: req.enabled,
            responder: responder.map(str::to_owned),
        })
    }
}

fn traffic_view(rows: &[DeploymentRow]) -> Traffic {
    let weights: BTreeMap<String, u32> = rows
        .iter()
        .map(|d| (d.name.clone(), d.weight as u32))
        .collect();
    let effective: BTreeMap<String, u32> = effective_weights(rows).into_iter().collect();
    Traffic {
        weights,
        percent: spec::percentages(&effective),
    }
}

fn image_view(row: &ImageRow) -> Image {
    Image {
        name: row.name.clone(),
        command: serde_json::from_str(&row.command).unwrap_or_default(),
        created_at: rfc3339(row.created_at),
    }
}

fn model_view(row: &ModelRow) -> Model {
    let tensors = |json: &str| serde_json::from_str(json).unwrap_or_default();
    Model {
        name: row.name.clone(),
        framework: row.framework.clone(),
        size: row.size as u64,
        sha256: row.sha256.clone(),
        created_at: rfc3339(row.created_at),
        inputs: tensors(&row.inputs),
        outputs: tensors(&row.outputs),
    }
}

/// Reads an uploaded artifact's inputs and outputs, as JSON; a file no engine can read as
/// a model is refused at upload, and so is a frozen GraphDef of a framework other than
/// TensorFlow (CONTRACT §3: other frameworks come as ONNX exports).
pub async fn inspect_model(
    path: PathBuf,
    framework: &str,
) -> Result<(String, String), ServingError> {
    let read = tokio::task::spawn_blocking(move || kep_model_server::model::inspect(&path))
        .await
        .map_err(|e| ServingError::Internal(e.into()))?;
    let ((inputs, outputs), format) =
        read.map_err(|e| ServingError::field("file", e.to_string()))?;
    if format == kep_model_server::model::Format::FrozenGraph && framework != "tensorflow" {
        return Err(ServingError::field(
            "file",
            "a TensorFlow frozen GraphDef is for tensorflow models; other frameworks are uploaded as ONNX exports",
        ));
    }
    let json = |t| serde_json::to_string(t).map_err(|e| ServingError::Internal(e.into()));
    Ok((json(&inputs)?, json(&outputs)?))
}

/// Prepares the model as its instances will, in their engine: what the engine cannot run
/// (an unsupported operator, or ONNX Runtime missing) is refused when the deployment is
/// made, not at its first call.
async fn check_model(path: PathBuf, engine: Engine) -> Result<(), ServingError> {
    tokio::task::spawn_blocking(move || kep_model_server::Model::load(&path, engine).map(drop))
        .await
        .map_err(|e| ServingError::Internal(e.into()))?
        .map_err(|e| ServingError::field("model", e.to_string()))
}
