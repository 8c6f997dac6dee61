//! Model serving (seed 001 part B, CONTRACT §3), in three parts that talk through typed
//! channels: the control plane (management API, validation, the store), the runtime
//! (instance processes, probes, restarts, states) and the gateway (routing, proxying; the
//! `kep-gateway` crate), with the monitor reading all three for metrics and alerts.

pub mod api;
mod control;
mod deployment;
mod engine;
mod error;
pub mod ids;
mod kinds;
#[cfg(test)]
mod layers;
mod metrics;
mod monitor;
mod runtime;
mod settings;
mod store;

use std::sync::Arc;
use std::time::Duration;

use kep_core::activity::IdField;
use kep_core::listener::App;
use kep_core::outbox::Policy;
use kep_core::retry::Backoff;
use kep_core::service::{Context, ListenerSettings, Service};
use utoipa::OpenApi as _;

pub use control::validate::{percentages, traffic_weights};
pub use error::ServingError;
pub use kep_api::serving::Resources;
pub use kep_gateway::GatewaySettings;
pub use kep_gateway::meter::prometheus_buckets as latency_buckets_s;
pub use settings::{QuotaSettings, ServingSettings};

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
            tls: gateway.tls,
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
        tracing::info!(?gpus, from_setting, "GPUs that instances can be given");
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
