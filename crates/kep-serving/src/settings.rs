//! `[serving]`: the settings of the control plane and the runtime.

use std::collections::BTreeMap;

use kep_api::serving::Resources;
use serde::{Deserialize, Serialize};

/// `[serving]` settings: the control plane and the runtime.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct ServingSettings {
    /// Instance types an endpoint may choose, by name.
    pub instance_types: BTreeMap<String, Resources>,
    pub default_instance_type: String,
    /// The workspace compute quota: deployments' instances hold it from creation.
    pub quota: QuotaSettings,
    /// The GPUs (host indices, as NVML and `nvidia-smi` number them) that GPU instances
    /// are given; unset, every GPU NVML sees (the `nvml` build feature), else none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<u32>>,
    /// Most instances an endpoint may ask for per deployment.
    pub max_instance_count: u32,
    /// The largest model file, image archive or engine image registered.
    pub max_model_bytes: u64,
    /// The container engine's socket (a path or `unix://…`): Docker, or Podman's
    /// Docker-compatible API. Unset, the first of `$DOCKER_HOST` (if `unix://`),
    /// `/var/run/docker.sock`, `$XDG_RUNTIME_DIR/podman/podman.sock` and
    /// `/run/podman/podman.sock` that answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_socket: Option<String>,
    pub max_script_bytes: usize,
    /// First restart back-off of a failed instance; doubles up to `restart_backoff_max_s`.
    pub restart_backoff_ms: u64,
    pub restart_backoff_max_s: u64,
    /// A process that ran this long restarts with the first back-off again.
    pub restart_backoff_reset_s: u64,
    /// Time between SIGTERM and SIGKILL when an instance is stopped.
    pub termination_grace_s: u64,
    /// Time between taking an instance out of rotation and its SIGTERM, so calls already
    /// routed to it finish.
    pub termination_drain_ms: u64,
    /// The argv that starts a model server for `tensorflow-serving` and `triton`
    /// deployments; unset, kep's own `model-server` subcommand.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_server: Option<Vec<String>>,
    /// The engine model servers run models in, unless a deployment's `KEP_ENGINE` variable
    /// says otherwise.
    pub engine: kep_model_server::Engine,
    /// The `libonnxruntime` of the onnxruntime engine; unset, the one inside the
    /// `onnxruntime` Python package.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub onnxruntime: Option<std::path::PathBuf>,
    /// The Python that runs SavedModels (with tensorflow-cpu) and TorchScript (with torch);
    /// unset, `KEP_FRAMEWORK_PYTHON`, else `python3` on the PATH.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub framework_python: Option<std::path::PathBuf>,
    /// Whether `triton` instances let their callers register system shared memory regions
    /// (Triton's `--allow-client-shm`): a caller holding the endpoint's key could then make
    /// an instance map any shared memory object kep's user can open.
    pub allow_client_shm: bool,
    /// How often calls, instances and processes are sampled for metrics and alerts.
    pub monitor_interval_ms: u64,
    /// Delivery attempts per alert, the first included.
    pub alert_attempts: u32,
    /// Wait before an alert's second attempt; doubles up to `alert_retry_max_s`.
    pub alert_retry_ms: u64,
    pub alert_retry_max_s: u64,
    /// How long the webhook may take to answer one attempt.
    pub alert_timeout_s: u64,
    /// Alerts waiting per endpoint; one more is recorded as failed.
    pub alert_queue: usize,
    /// A status alert comes again only after this long without such an answer.
    pub alert_status_quiet_s: u64,
    /// How often the CPU upper-bound alert repeats while it holds (12 hours, as the
    /// document says).
    pub alert_cpu_repeat_s: u64,
}

impl Default for ServingSettings {
    fn default() -> Self {
        let t = |cpu, memory_mb, gpu| Resources {
            cpu,
            memory_mb,
            gpu,
        };
        ServingSettings {
            instance_types: BTreeMap::from([
                ("cpu-small".to_owned(), t(1.0, 2048, 0)),
                ("cpu-medium".to_owned(), t(2.0, 4096, 0)),
                ("cpu-large".to_owned(), t(4.0, 8192, 0)),
                ("gpu-small".to_owned(), t(4.0, 16384, 1)),
            ]),
            default_instance_type: "cpu-small".into(),
            quota: QuotaSettings::default(),
            gpus: None,
            max_instance_count: 10,
            max_model_bytes: 4 * 1024 * 1024 * 1024,
            container_socket: None,
            max_script_bytes: 1024 * 1024,
            restart_backoff_ms: 1000,
            restart_backoff_max_s: 60,
            restart_backoff_reset_s: 60,
            termination_grace_s: 5,
            termination_drain_ms: 200,
            model_server: None,
            engine: kep_model_server::Engine::Tract,
            onnxruntime: None,
            framework_python: None,
            allow_client_shm: false,
            monitor_interval_ms: 1000,
            alert_attempts: 6,
            alert_retry_ms: 500,
            alert_retry_max_s: 30,
            alert_timeout_s: 5,
            alert_queue: 1000,
            alert_status_quiet_s: 60,
            alert_cpu_repeat_s: 12 * 3600,
        }
    }
}

/// `serving.quota`: the workspace compute quota.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct QuotaSettings {
    pub cpu: f64,
    pub memory_mb: u64,
    /// Unset, the number of GPUs that instances can be given (`serving.gpus`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
}

impl Default for QuotaSettings {
    fn default() -> Self {
        QuotaSettings {
            cpu: 16.0,
            memory_mb: 65536,
            gpu: None,
        }
    }
}
