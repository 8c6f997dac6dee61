//! Wire types of the model-serving management API (CONTRACT §3). An optional field never
//! set is left out of an answer.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

mod model_config;
pub use model_config::{DynamicBatching, ModelConfig};

/// `POST /admin/v1/serving/images`: exactly one of `command` (run as a local process) and
/// `reference` (an OCI image in the container engine's local store).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ImageRequest {
    #[schema(pattern = "^[a-z][a-z0-9-]{0,61}[a-z0-9]$")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Command>,
    /// `repo:tag`, or a digest (`sha256:…`, `repo@sha256:…`), of an image the engine has;
    /// never pulled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
}

/// A command line split as a shell splits words, or the words already split.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Command {
    Line(String),
    Words(Vec<String>),
}

/// A registered image: a command, or an image in the container engine.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Image {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// The engine image's reference: as registered, or as the engine reported an archive
    /// loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The engine's id of the image (`sha256:…`), pinned at registration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// The image's size as the engine reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ImageSource>,
    pub created_at: String,
}

/// Where an engine image came from: registered by reference, or loaded from an uploaded
/// archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ImageSource {
    Reference,
    Archive,
}

/// A registered model artifact.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Model {
    pub name: String,
    /// `tensorflow`, `pytorch` or `onnx`: what the model was trained with.
    pub framework: String,
    pub size: u64,
    pub sha256: String,
    pub created_at: String,
    /// What the model takes and gives, read from the artifact (a SavedModel's
    /// `serving_default` signature's; a TorchScript module's inputs as declared).
    pub inputs: Vec<ModelTensor>,
    pub outputs: Vec<ModelTensor>,
    /// `onnx`, `graphdef`, `savedmodel` or `torchscript`, read from the file's bytes.
    pub format: String,
    /// Every version the artifact has, ascending: a file or a bare SavedModel is version 1.
    pub versions: Vec<i64>,
    /// A SavedModel's signatures (its latest version's), `serving_default` first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signatures: Option<Vec<ModelSignature>>,
}

/// One signature of a SavedModel: what `signature_name` names in TF Serving's calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ModelSignature {
    pub name: String,
    /// TF Serving's `method_name`: `tensorflow/serving/predict`, `…/classify`, `…/regress`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    pub inputs: Vec<ModelTensor>,
    pub outputs: Vec<ModelTensor>,
}

/// A model input or output: KServe v2 datatype names, -1 for a variable dimension.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ModelTensor {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
}

/// `POST /admin/v1/serving/endpoints`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EndpointRequest {
    #[schema(pattern = "^[a-z][a-z0-9-]{0,61}[a-z0-9]$")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 1024)]
    pub description: Option<String>,
    /// One of the configured instance types; fixed after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    /// Instances per deployment; fixed after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_count: Option<u32>,
    /// `http` (default) or `grpc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^([Hh][Tt][Tt][Pp]|[Gg][Rr][Pp][Cc])$")]
    pub protocol: Option<String>,
    /// The API key callers send, generated when absent: 8 to 256 printable ASCII
    /// characters (a CI's fixed key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[ -~]{8,256}$")]
    pub api_key: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Endpoint {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where callers send requests: `{gateway}/endpoints/{name}`.
    pub url: String,
    pub instance_type: String,
    pub instance_count: u32,
    pub protocol: String,
    /// Deployments in creation order.
    pub deployments: Vec<String>,
    pub traffic: Traffic,
    pub mirroring: Mirroring,
    pub created_at: String,
}

/// An endpoint as created: its API key is shown this once.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EndpointCreated {
    #[serde(flatten)]
    pub endpoint: Endpoint,
    pub api_key: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ApiKey {
    pub api_key: String,
}

/// `custom-image`, `tensorflow-serving`, `triton` or `cosmos`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DeploymentType {
    CustomImage,
    TensorflowServing,
    Triton,
    Cosmos,
}

impl DeploymentType {
    pub fn as_str(self) -> &'static str {
        match self {
            DeploymentType::CustomImage => "custom-image",
            DeploymentType::TensorflowServing => "tensorflow-serving",
            DeploymentType::Triton => "triton",
            DeploymentType::Cosmos => "cosmos",
        }
    }
}

/// A readiness or liveness probe: exactly one of `http` and `tcp`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Probe {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpProbe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpProbe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_threshold: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_delay_s: Option<f64>,
}

/// HTTP GET of `path`: a status in the 200 or 300 ranges is healthy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpProbe {
    pub path: String,
}

/// A TCP connection to the instance's port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TcpProbe {}

/// Which of a model's versions a deployment loads, as TF Serving's and Triton's
/// `version_policy`: `{"latest": n}` (the default, `{"latest": 1}`), `{"all": true}` or
/// `{"specific": [v…]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum VersionPolicy {
    Latest(u32),
    All(bool),
    Specific(Vec<i64>),
}

impl Default for VersionPolicy {
    fn default() -> VersionPolicy {
        VersionPolicy::Latest(1)
    }
}

impl VersionPolicy {
    /// Whether the policy can name anything: `latest` of at least one, `all` true, a
    /// non-empty `specific` of versions 0 or more.
    pub fn check(&self) -> Result<(), String> {
        match self {
            VersionPolicy::Latest(0) => Err("latest must be at least 1".into()),
            VersionPolicy::All(false) => Err("all must be true".into()),
            VersionPolicy::Specific(v) if v.is_empty() => {
                Err("specific must name at least one version".into())
            }
            VersionPolicy::Specific(v) if v.iter().any(|n| *n < 0) => {
                Err("versions are numbers of 0 or more".into())
            }
            _ => Ok(()),
        }
    }
}

/// `POST …/deployments`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeploymentRequest {
    #[schema(pattern = "^[a-z][a-z0-9-]{0,61}[a-z0-9]$")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 1024)]
    pub description: Option<String>,
    #[serde(rename = "type")]
    pub kind: DeploymentType,
    /// Image name (`custom-image`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Model name (`tensorflow-serving`, `triton`, `cosmos`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Serving script (`cosmos`): the text, or a git repository URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// Which of the model's versions its instances load (`tensorflow-serving`, `triton`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_policy: Option<VersionPolicy>,
    /// Batching and model instances (`triton`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_config: Option<ModelConfig>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The container port (`custom-image`); 8080 when none is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 65535)]
    pub port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<Probe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness: Option<Probe>,
}

/// `PATCH …/deployments/{d}`: only the editable fields; `null` clears an optional one.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeploymentPatch {
    #[serde(
        default,
        deserialize_with = "patch::deserialize",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub description: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(
        default,
        deserialize_with = "patch::deserialize",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub script: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_policy: Option<VersionPolicy>,
    #[serde(
        default,
        deserialize_with = "patch::deserialize",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<ModelConfig>)]
    pub model_config: Option<Option<ModelConfig>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 65535)]
    pub port: Option<u16>,
    #[serde(
        default,
        deserialize_with = "patch::deserialize",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Probe>)]
    pub readiness: Option<Option<Probe>>,
    #[serde(
        default,
        deserialize_with = "patch::deserialize",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Probe>)]
    pub liveness: Option<Option<Probe>>,
}

/// Absent → `None`; `null` → `Some(None)`; a value → `Some(Some(v))`. Serialised, `Some(None)`
/// is `null`.
mod patch {
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
    where
        D: Deserializer<'de>,
        T: Deserialize<'de>,
    {
        Option::<T>::deserialize(d).map(Some)
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Deployment {
    pub endpoint: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(rename = "type")]
    pub kind: DeploymentType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// Which of the model's versions its instances load; `{"latest": 1}` when none was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_policy: Option<VersionPolicy>,
    /// Batching and model instances, as given (`triton`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_config: Option<ModelConfig>,
    pub env: BTreeMap<String, String>,
    /// The port its instances listen on: a Custom Image's own (8080 unless set); a model
    /// server's is kep's business and not shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness: Option<Probe>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub liveness: Option<Probe>,
    /// `Progressing` or `Available`.
    pub state: String,
    /// This deployment's traffic weight.
    pub weight: u32,
    /// Whether its image or model has been deleted (it can no longer be edited).
    pub source_deleted: bool,
    pub instances: Vec<Instance>,
    pub created_at: String,
    pub updated_at: String,
}

/// One instance (pod) of a deployment.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Instance {
    pub id: String,
    /// `Running`, `Pending`, `Terminating`, `Terminated`, `Failed` or `Unknown`.
    pub state: String,
    /// Whether it receives calls (its readiness probe passes).
    pub ready: bool,
    pub restarts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The host's GPUs its process holds (`CUDA_VISIBLE_DEVICES`), for a GPU instance type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<u32>,
}

/// `PUT …/traffic`: percentages in steps of 5 summing to 100, or a ratio.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TrafficRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<BTreeMap<String, u32>>,
    /// `1:2`: one part per deployment, in `deployments` order (default: creation order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployments: Option<Vec<String>>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Traffic {
    pub weights: BTreeMap<String, u32>,
    /// Each deployment's share of the calls, in percent.
    pub percent: BTreeMap<String, f64>,
}

/// `PUT …/mirroring`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Mirroring {
    pub enabled: bool,
    /// The deployment whose answer the caller gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responder: Option<String>,
}

/// A recorded state transition.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Event {
    pub id: i64,
    pub at: String,
    pub deployment: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// `deployment_state`, `instance_state`, `ready` or `restart`.
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What an instance type or the workspace quota holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Resources {
    pub cpu: f64,
    pub memory_mb: u64,
    pub gpu: u32,
}

/// `GET /admin/v1/serving/quota`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Quota {
    pub total: Resources,
    pub used: Resources,
    pub instance_types: BTreeMap<String, Resources>,
}

/// `PUT`/`GET …/endpoints/{e}/alerts`: the alert channel toggle, its incoming-webhook URL and
/// each condition of the document's alert table (CONTRACT §3). A `PUT` replaces the whole
/// settings; a condition it leaves out is off.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AlertSettings {
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_url: Option<String>,
    /// By name: `qps`, `status_4xx`, `status_5xx`, `state_progressing`, `state_available`,
    /// `cpu_upper`, `cpu_lower`, `memory_upper`, `memory_lower`, `gpu_upper`, `gpu_lower`,
    /// `monitoring_log`.
    #[serde(default)]
    pub conditions: BTreeMap<String, AlertCondition>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AlertCondition {
    pub enabled: bool,
    /// Requests per second for `qps`; percent of the instance type's limit for the CPU,
    /// memory and GPU bounds; none for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
}

/// One alert, as queued, sent or given up on.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Alert {
    pub id: i64,
    pub at: String,
    pub condition: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    /// The `text` of the `{"text": …}` body posted to the webhook.
    pub text: String,
    /// `pending` (queued or between retries), `sent` or `failed`.
    pub status: String,
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_at: Option<String>,
}

/// `GET …/endpoints/{e}/alerts/history`, newest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AlertHistory {
    pub alerts: Vec<Alert>,
}

/// Calls as the gateway saw them: totals since kep started, the rate over the last
/// second and latency percentiles over the last minute.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CallMetrics {
    pub requests: u64,
    /// Requests per second over the last second.
    pub qps: f64,
    /// Answers by status class (`1xx` … `5xx`), the gateway's own errors included.
    pub status: BTreeMap<String, u64>,
    pub in_flight: u64,
    /// Time to the answer's headers, in milliseconds; absent without calls in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<Latency>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

/// Mirrored calls' outcomes: answered (any status) or failed (no answer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct MirrorMetrics {
    pub answered: u64,
    pub failed: u64,
}

/// An instance's process, read from the operating system once a second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InstanceMetrics {
    pub id: String,
    pub state: String,
    pub ready: bool,
    pub restarts: u32,
    /// CPU use in cores (1.0 is one core busy), the process and its children.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_cores: Option<f64>,
    /// CPU use as a percent of the instance type's CPU limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_percent: Option<f64>,
    /// Resident memory of the process and its children.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Resident memory as a percent of the instance type's memory limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_percent: Option<f64>,
    /// GPU compute (SM) use as a percent of the instance type's GPUs, where GPUs are read
    /// (the `nvml` build feature): 100 is every one of its GPUs busy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_percent: Option<f64>,
    /// GPU memory the process and its children hold, where GPUs are read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_bytes: Option<u64>,
    /// GPU memory as a percent of the memory of the instance's GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_percent: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DeploymentMetrics {
    pub name: String,
    pub state: String,
    pub calls: CallMetrics,
    pub mirror: MirrorMetrics,
    pub instances: Vec<InstanceMetrics>,
}

/// `GET …/endpoints/{e}/metrics`: the numbers a user watches, as of `at`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EndpointMetrics {
    pub endpoint: String,
    pub at: String,
    /// Every call to the endpoint, those the gateway answered itself (401, 503 …) included.
    pub calls: CallMetrics,
    pub deployments: Vec<DeploymentMetrics>,
}

/// The paths of the serving routes, as the server routes them (`{name}` marks a path
/// parameter) and the client fills them.
pub mod paths {
    pub const IMAGES: &str = "/admin/v1/serving/images";
    pub const IMAGE: &str = "/admin/v1/serving/images/{name}";
    pub const IMAGE_ARCHIVE: &str = "/admin/v1/serving/images/{name}/archive";
    pub const MODELS: &str = "/admin/v1/serving/models";
    pub const MODEL: &str = "/admin/v1/serving/models/{name}";
    pub const ENDPOINTS: &str = "/admin/v1/serving/endpoints";
    pub const ENDPOINT: &str = "/admin/v1/serving/endpoints/{endpoint}";
    pub const ENDPOINT_API_KEY: &str = "/admin/v1/serving/endpoints/{endpoint}/api-key";
    pub const DEPLOYMENTS: &str = "/admin/v1/serving/endpoints/{endpoint}/deployments";
    pub const DEPLOYMENT: &str = "/admin/v1/serving/endpoints/{endpoint}/deployments/{deployment}";
    pub const DEPLOYMENT_EVENTS: &str =
        "/admin/v1/serving/endpoints/{endpoint}/deployments/{deployment}/events";
    pub const INSTANCE_LOGS: &str =
        "/admin/v1/serving/endpoints/{endpoint}/deployments/{deployment}/instances/{instance}/logs";
    pub const TRAFFIC: &str = "/admin/v1/serving/endpoints/{endpoint}/traffic";
    pub const MIRRORING: &str = "/admin/v1/serving/endpoints/{endpoint}/mirroring";
    pub const ALERTS: &str = "/admin/v1/serving/endpoints/{endpoint}/alerts";
    pub const ALERT_HISTORY: &str = "/admin/v1/serving/endpoints/{endpoint}/alerts/history";
    pub const METRICS: &str = "/admin/v1/serving/endpoints/{endpoint}/metrics";
    pub const QUOTA: &str = "/admin/v1/serving/quota";
}
