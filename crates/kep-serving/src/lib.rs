//! Model serving (seed 001 part B, CONTRACT §3), in three parts that talk through typed
//! channels: the control plane (management API, validation, the store), the runtime
//! (instance processes, probes, restarts, states) and the gateway (routing, proxying; the
//! `kep-gateway` crate), with the monitor reading all three for metrics and alerts.

pub mod api;
mod control;
mod engine;
mod error;
pub mod ids;
mod kinds;
mod metrics;
mod monitor;
mod runtime;
mod spec;
mod store;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kep_core::activity::IdField;
use kep_core::listener::App;
use kep_core::outbox::Policy;
use kep_core::retry::Backoff;
use kep_core::service::{Context, ListenerSettings, Service};
use serde::{Deserialize, Serialize};
use utoipa::OpenApi as _;

pub use error::ServingError;
pub use kep_api::serving::Resources;
pub use kep_gateway::GatewaySettings;
pub use kep_gateway::meter::prometheus_buckets as latency_buckets_s;
pub use spec::{percentages, traffic_weights};

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
    /// Unset, the number of GPUs instances can be given (`serving.gpus`).
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

/// The running serving service; cheap to clone.
#[derive(Clone)]
pub struct ServingService {
    control: Arc<control::Control>,
    gateway: Arc<kep_gateway::Gateway>,
    monitor: Arc<monitor::Monitor>,
}

impl ServingService {
    /// Sets the gauges of what the service holds (as of the monitor's last sample): called
    /// at each scrape of `/metrics`.
    pub fn observe(&self) {
        self.monitor.observe();
    }
}

impl Service for ServingService {
    /// `[serving]` and `[gateway]`.
    type Settings = (ServingSettings, GatewaySettings);
    const NAME: &'static str = "serving";
    const LISTENER: &'static str = "gateway";
    const OBJECT_IDS: &'static [IdField] = &[
        |i| &mut i.endpoint,
        |i| &mut i.deployment,
        |i| &mut i.instance,
    ];

    fn listener((_, gateway): &Self::Settings) -> ListenerSettings {
        ListenerSettings {
            addr: gateway.addr,
            public_url: gateway.public_url.clone(),
            limits: gateway.limits,
        }
    }

    /// Opens the store, kills what a previous kep left running, routes every endpoint, and
    /// starts every deployment's instances once this node leads serving (at once, on its
    /// own). The gateway's public URL is the base of the endpoint URLs.
    async fn start((mut settings, gateway): Self::Settings, ctx: &Context) -> anyhow::Result<Self> {
        metrics::describe();
        let data_dir = ctx.data_dir.as_path();
        let store = store::open(ctx).await?;
        let root = data_dir.join("serving");
        // Instances a kep killed outright left running; the deployments start afresh.
        let owner = runtime::process::Owner::of_data_dir(data_dir)?;
        let killed = owner.kill_left_behind();
        if killed > 0 {
            tracing::info!(killed, "stopped instance processes left by a previous run");
        }
        // Its containers too: removed, not adopted, as its processes are killed, since the
        // deployments start afresh either way.
        let engine = engine::Engine::new(settings.container_socket.clone());
        let removed = runtime::container::remove_left_behind(&engine, owner.as_str()).await;
        if removed > 0 {
            tracing::info!(
                removed,
                "removed instance containers left by a previous run"
            );
        }
        let (gateway, routes) = kep_gateway::Gateway::start(&gateway, root.join("spool"), ctx);
        let placement = control::Placement::new(ctx.cluster.clone(), routes.clone());
        // The runtime's ready instances reach this node's gateway and every other node's.
        let (runtime_routes, shared) = tokio::sync::mpsc::unbounded_channel();
        ctx.spawn(Arc::clone(&placement.backends).share(shared));
        let (events_tx, events_rx) = tokio::sync::mpsc::unbounded_channel();
        let (listeners, _) = tokio::sync::broadcast::channel(1024);
        ctx.spawn(runtime::record_events(
            store.clone(),
            events_rx,
            listeners.clone(),
            runtime::Recorded {
                activity: ctx.activity.of::<Self>(),
                logs_dir: root.join("logs"),
            },
        ));
        // Resolved once: the quota and the runtime count the same GPUs.
        let gpus = runtime::gpus::discover(settings.gpus.as_deref());
        let from_setting = settings.gpus.is_some();
        tracing::info!(?gpus, from_setting, "GPUs instances can be given");
        settings.quota.gpu.get_or_insert(gpus.len() as u32);
        settings.gpus = Some(gpus.clone());
        let runtime = runtime::start(runtime::RuntimeContext {
            owner,
            gpus: runtime::gpus::GpuPool::new(gpus),
            engine,
            logs_dir: root.join("logs"),
            policy: runtime::RestartPolicy {
                backoff: Backoff {
                    first: Duration::from_millis(settings.restart_backoff_ms),
                    max: Duration::from_secs(settings.restart_backoff_max_s),
                },
                reset_after: Duration::from_secs(settings.restart_backoff_reset_s),
                grace: Duration::from_secs(settings.termination_grace_s),
                drain: Duration::from_millis(settings.termination_drain_ms),
            },
            http: runtime::probe::http_client(),
            routes: runtime_routes,
            events: events_tx,
            clock: ctx.clock.clone(),
            tasks: ctx.tasks.clone(),
        });
        let monitor = monitor::Monitor::start(
            store.clone(),
            runtime.clone(),
            gateway.meters(),
            monitor::MonitorSettings {
                interval: Duration::from_millis(settings.monitor_interval_ms.max(10)),
                alerts: monitor::alerts::AlertPolicy {
                    status_quiet: Duration::from_secs(settings.alert_status_quiet_s),
                    cpu_repeat: Duration::from_secs(settings.alert_cpu_repeat_s),
                },
                delivery: monitor::DeliveryPolicy {
                    outbox: Policy {
                        attempts: settings.alert_attempts,
                        retry: Backoff {
                            first: Duration::from_millis(settings.alert_retry_ms),
                            max: Duration::from_secs(settings.alert_retry_max_s),
                        },
                        queue: settings.alert_queue,
                    },
                    timeout: Duration::from_secs(settings.alert_timeout_s),
                },
                instance_types: settings.instance_types.clone(),
            },
            listeners.subscribe(),
            ctx,
        )
        .await?;
        let control = Arc::new(control::Control::new(
            settings, store, runtime, placement, routes, root, ctx,
        )?);
        control.resume().await?;
        control.serve_nodes(ctx.shutdown.clone()).await;
        Ok(ServingService {
            control,
            gateway,
            monitor,
        })
    }

    /// What the gateway listener serves: `/endpoints/{endpoint}/{path…}`.
    fn app(&self) -> App {
        self.gateway.app()
    }

    /// The management routes under `/admin/v1/serving`.
    fn admin_router(&self) -> axum::Router {
        api::operator::router(self.clone())
    }

    fn admin_doc() -> utoipa::openapi::OpenApi {
        api::operator::ServingAdminDoc::openapi()
    }

    /// Stops every instance (SIGTERM, then SIGKILL after the grace period).
    async fn stop(&self) {
        self.control.stop().await;
    }
}
