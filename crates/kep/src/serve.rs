//! `kep serve`: loads the settings, binds the listeners, starts the services and wires
//! their routes; stops gracefully on SIGINT or SIGTERM.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::routing::get;
use figment::value::Value;
use kep_adapter::{AdapterService, AdapterSettings};
use kep_core::http::operator_only;
use kep_core::limits::{Limiter, Limits};
use kep_core::listener::{self, App, Bound};
use kep_core::settings::EnvNames;
use kep_live::{LiveService, LiveSettings};
use kep_messaging::{MessagingService, MessagingSettings};
use kep_serving::{GatewaySettings, ServingService, ServingSettings};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tower_http::trace::TraceLayer;
use utoipa::OpenApi as _;

/// The services `--only` can name.
const SERVICES: &[&str] = &["live", "adapter", "messaging", "serving"];
/// Sections of the settings that `KEP_<SECTION>_<NAME>` variables reach, and the
/// variables CONTRACT §4 names on their own.
const ENV: EnvNames = EnvNames {
    sections: &[
        "admin",
        "live",
        "adapter",
        "messaging",
        "serving",
        "gateway",
    ],
    aliases: &[("SIMULATOR_DELAY_MS", "messaging.simulator_delay_ms")],
};

#[derive(clap::Args)]
pub struct ServeArgs {
    /// A TOML settings file (flags and KEP_* variables override it).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Where the databases and files live [KEP_DATA_DIR; default ./kep-data].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Operator API, /healthz, docs [KEP_ADMIN_ADDR; default 127.0.0.1:8800].
    #[arg(long)]
    admin_addr: Option<SocketAddr>,
    /// Live-streaming JSON-RPC and participant WebSocket [KEP_LIVE_ADDR; default 127.0.0.1:8801].
    #[arg(long)]
    live_addr: Option<SocketAddr>,
    /// Account adapter API [KEP_ADAPTER_ADDR; default 127.0.0.1:8802].
    #[arg(long)]
    adapter_addr: Option<SocketAddr>,
    /// Text-message sending API [KEP_MESSAGING_ADDR; default 127.0.0.1:8803].
    #[arg(long)]
    messaging_addr: Option<SocketAddr>,
    /// Model-serving endpoint calls [KEP_GATEWAY_ADDR; default 127.0.0.1:8804].
    #[arg(long)]
    gateway_addr: Option<SocketAddr>,
    /// Start only these services (comma-separated: live, adapter, messaging, serving) [KEP_ONLY].
    #[arg(long, value_delimiter = ',')]
    only: Option<Vec<String>>,
    /// text or json [KEP_LOG_FORMAT].
    #[arg(long)]
    log_format: Option<LogFormat>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Every setting of `kep serve` (CONTRACT §0), as the TOML file spells it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    pub data_dir: PathBuf,
    pub log_format: LogFormat,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub only: Option<ServiceNames>,
    pub admin: AdminSettings,
    pub live: LiveSettings,
    pub adapter: AdapterSettings,
    pub messaging: MessagingSettings,
    pub serving: ServingSettings,
    pub gateway: GatewaySettings,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            data_dir: PathBuf::from("./kep-data"),
            log_format: LogFormat::Text,
            only: None,
            admin: AdminSettings::default(),
            live: LiveSettings::default(),
            adapter: AdapterSettings::default(),
            messaging: MessagingSettings::default(),
            serving: ServingSettings::default(),
            gateway: GatewaySettings::default(),
        }
    }
}

/// `only`: a list in TOML, a comma-separated string in `KEP_ONLY`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ServiceNames {
    List(Vec<String>),
    Csv(String),
}

impl ServiceNames {
    fn names(&self) -> Vec<String> {
        match self {
            ServiceNames::List(l) => l.clone(),
            ServiceNames::Csv(s) => s
                .split(',')
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect(),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct AdminSettings {
    pub addr: SocketAddr,
    /// The operator token [KEP_ADMIN_TOKEN]; generated into <data-dir>/admin-token if unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// How long in-flight work may take to finish after a stop signal.
    pub shutdown_grace_s: u64,
    /// The operator API's: the operator token's holder is its one client; calls without
    /// the token count per peer address.
    #[serde(flatten)]
    pub limits: Limits,
}

impl Default for AdminSettings {
    fn default() -> Self {
        AdminSettings {
            addr: SocketAddr::from(([127, 0, 0, 1], 8800)),
            token: None,
            shutdown_grace_s: 10,
            limits: Limits::default(),
        }
    }
}

impl ServeArgs {
    fn overrides(&self) -> anyhow::Result<Vec<(String, Value)>> {
        let mut o: Vec<(String, Value)> = Vec::new();
        let path = |p: &PathBuf| Value::from(p.to_string_lossy().into_owned());
        if let Some(d) = &self.data_dir {
            o.push(("data_dir".into(), path(d)));
        }
        if let Some(a) = self.admin_addr {
            o.push(("admin.addr".into(), Value::from(a.to_string())));
        }
        if let Some(a) = self.live_addr {
            o.push(("live.addr".into(), Value::from(a.to_string())));
        }
        if let Some(a) = self.adapter_addr {
            o.push(("adapter.addr".into(), Value::from(a.to_string())));
        }
        if let Some(a) = self.messaging_addr {
            o.push(("messaging.addr".into(), Value::from(a.to_string())));
        }
        if let Some(a) = self.gateway_addr {
            o.push(("gateway.addr".into(), Value::from(a.to_string())));
        }
        if let Some(only) = &self.only {
            o.push(("only".into(), Value::from(only.clone())));
        }
        if let Some(f) = self.log_format {
            o.push(("log_format".into(), Value::serialize(f)?));
        }
        Ok(o)
    }
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KEP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,tower_http=info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let settings: Settings =
        kep_core::settings::load(args.config.as_deref(), ENV, args.overrides()?)
            .map_err(|e| anyhow::anyhow!("settings: {e}"))?;
    init_tracing(settings.log_format);
    let only = settings.only.as_ref().map(ServiceNames::names);
    let wanted = |name: &str| only.as_ref().is_none_or(|o| o.iter().any(|s| s == name));
    if let Some(only) = &only
        && let Some(bad) = only.iter().find(|s| !SERVICES.contains(&s.as_str()))
    {
        anyhow::bail!(
            "--only: unknown service {bad:?} (known: {})",
            SERVICES.join(", ")
        );
    }

    let listeners = [
        Some(&settings.admin.limits),
        wanted("live").then_some(&settings.live.limits),
        wanted("adapter").then_some(&settings.adapter.limits),
        wanted("messaging").then_some(&settings.messaging.limits),
        wanted("serving").then_some(&settings.gateway.limits),
    ];
    raise_open_files(listeners.iter().flatten().map(|l| l.max_connections));

    let data_dir = settings.data_dir.clone();
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let (token, generated) = listener::operator_token(&data_dir, settings.admin.token.as_deref())?;
    if generated {
        // Printed once, at the start that generated it.
        println!(
            "operator token (also in {}): {token}",
            data_dir.join("admin-token").display()
        );
    }

    let shutdown = CancellationToken::new();
    let prometheus = install_prometheus(&shutdown)?;
    let mut addresses = BTreeMap::new();
    let mut servers = Vec::new();
    let mut admin_routes = Router::new();
    let mut docs = kep_core_docs();

    let admin = listener::bind("admin", settings.admin.addr).await?;
    addresses.insert("admin", admin.addr);

    let mut live_service = None;
    if wanted("live") {
        let bound = listener::bind("live", settings.live.addr).await?;
        let public = listener::public_url(settings.live.public_url.as_deref(), bound.addr);
        let live =
            LiveService::start(settings.live.clone(), &data_dir, public, shutdown.clone()).await?;
        admin_routes = admin_routes.merge(live.admin_router());
        docs.merge(kep_live::api::operator::LiveAdminDoc::openapi());
        addresses.insert("live", bound.addr);
        servers.push(spawn(
            "live",
            bound,
            live.router(),
            settings.live.limits,
            &shutdown,
        ));
        live_service = Some(live);
    }

    if wanted("adapter") {
        let bound = listener::bind("adapter", settings.adapter.addr).await?;
        let adapter = AdapterService::start(settings.adapter.clone(), &data_dir).await?;
        admin_routes = admin_routes.merge(adapter.admin_router());
        docs.merge(kep_adapter::api::operator::AdapterAdminDoc::openapi());
        addresses.insert("adapter", bound.addr);
        servers.push(spawn(
            "adapter",
            bound,
            adapter.router(),
            settings.adapter.limits,
            &shutdown,
        ));
    }

    if wanted("messaging") {
        let bound = listener::bind("messaging", settings.messaging.addr).await?;
        let messaging = MessagingService::start(settings.messaging.clone(), &data_dir).await?;
        admin_routes = admin_routes.merge(messaging.admin_router());
        docs.merge(kep_messaging::api::operator::MessagingAdminDoc::openapi());
        addresses.insert("messaging", bound.addr);
        servers.push(spawn(
            "messaging",
            bound,
            messaging.router(),
            settings.messaging.limits,
            &shutdown,
        ));
    }

    let mut serving_service = None;
    if wanted("serving") {
        let bound = listener::bind("gateway", settings.gateway.addr).await?;
        let public = listener::public_url(settings.gateway.public_url.as_deref(), bound.addr);
        let serving = ServingService::start(
            settings.serving.clone(),
            &settings.gateway,
            &data_dir,
            public,
        )
        .await?;
        admin_routes = admin_routes.merge(serving.admin_router());
        docs.merge(kep_serving::api::operator::ServingAdminDoc::openapi());
        addresses.insert("gateway", bound.addr);
        servers.push(spawn(
            "gateway",
            bound,
            serving.gateway_app(),
            settings.gateway.limits,
            &shutdown,
        ));
        serving_service = Some(serving);
    }

    kep_core::http::document_operator_answers(&mut docs);
    let docs = Arc::new(docs);
    let admin_router = Router::new()
        .merge(operator_only(
            admin_routes,
            &token,
            Limiter::new(&settings.admin.limits),
        ))
        .route(
            "/healthz",
            get(|| async { axum::Json(serde_json::json!({ "status": "ok" })) }),
        )
        .route(
            "/metrics",
            get(move || async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    prometheus.render(),
                )
            }),
        )
        .route(
            "/openapi/admin.json",
            get(move || async move { axum::Json(docs.as_ref().clone()) }),
        )
        .route(
            "/openapi/live.json",
            get(|| async { axum::Json(with_bearer(kep_live::api::LiveApiDoc::openapi())) }),
        )
        .route(
            "/openapi/adapter.json",
            get(|| async { axum::Json(kep_adapter::api::AdapterApiDoc::openapi()) }),
        )
        .route(
            "/openapi/messaging.json",
            get(|| async {
                axum::Json(with_bearer(kep_messaging::api::MessagingApiDoc::openapi()))
            }),
        );
    servers.push(spawn(
        "admin",
        admin,
        admin_router,
        settings.admin.limits,
        &shutdown,
    ));

    listener::write_addresses(&data_dir, &addresses)?;
    for (name, addr) in &addresses {
        tracing::info!(listener = name, %addr, "listening");
    }

    listener::stop_signal().await;
    tracing::info!("stopping: finishing in-flight requests");
    shutdown.cancel();
    let grace = Duration::from_secs(settings.admin.shutdown_grace_s);
    let drained = tokio::time::timeout(grace, async {
        if let Some(live) = &live_service {
            live.drain().await;
        }
        if let Some(serving) = &serving_service {
            serving.stop().await;
        }
        for s in servers {
            let _ = s.await;
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            "stopped with work still in flight after {} s",
            grace.as_secs()
        );
    }
    tracing::info!("stopped");
    Ok(())
}

/// Raises the soft limit on open files to the hard one, as Go's runtime does: every
/// connection is a file, and the listeners' `max_connections` are meant to be what bounds
/// them, not a soft default of 1024. Warns when the listeners may together hold more
/// connections than the process may open files.
fn raise_open_files(max_connections: impl Iterator<Item = u32>) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    // Room for the databases, spool files and the instances' pipes.
    const SPARE: u64 = 256;
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    let limit = if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        hard
    } else {
        soft
    };
    // A listener without a cap (0) is bounded by the limit itself: nothing to compare.
    let caps: Option<Vec<u64>> = max_connections
        .map(|c| (c > 0).then_some(u64::from(c)))
        .collect();
    if let Some(total) = caps.map(|c| c.iter().sum::<u64>())
        && total.saturating_add(SPARE) > limit
    {
        tracing::warn!(
            open_files = limit,
            max_connections = total,
            "the listeners' max_connections together exceed the open files this process may \
             have: in a flood, accepting and opening files fail before a listener's cap is met"
        );
    }
}

/// The `metrics` recorder, rendered in Prometheus' text format on the admin listener's
/// `/metrics`. Request durations are histograms with the buckets the monitor also uses;
/// an instance's gauges go 30 s after the instance does.
fn install_prometheus(
    shutdown: &CancellationToken,
) -> anyhow::Result<metrics_exporter_prometheus::PrometheusHandle> {
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Suffix("_duration_seconds".into()),
            &kep_serving::latency_buckets_s(),
        )?
        .idle_timeout(
            metrics_util::MetricKindMask::GAUGE,
            Some(Duration::from_secs(30)),
        )
        .install_recorder()
        .context("installing the metrics recorder")?;
    let upkeep = handle.clone();
    let shutdown = shutdown.clone();
    // Histograms are drained into their buckets here, not on the calls' path.
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        while shutdown.run_until_cancelled(tick.tick()).await.is_some() {
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// A service document whose calls take `Authorization: Bearer …`, with that scheme named.
fn with_bearer(mut doc: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "bearer",
        SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
    );
    doc
}

/// The operator API's document, before the services add their paths.
fn kep_core_docs() -> utoipa::openapi::OpenApi {
    use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
    let mut doc = utoipa::openapi::OpenApiBuilder::new()
        .info(
            utoipa::openapi::InfoBuilder::new()
                .title("kep operator API")
                .version(env!("CARGO_PKG_VERSION"))
                .build(),
        )
        .build();
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "operator",
        SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
    );
    doc
}

fn spawn(
    name: &'static str,
    bound: Bound,
    app: impl Into<App>,
    limits: Limits,
    shutdown: &CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let mut app = app.into();
    // TraceLayer logs requests at DEBUG: wrap only when that is enabled (KEP_LOG=debug or
    // tower_http=debug), since the layer costs about a tenth of a small request otherwise.
    // A front answers past the router, so it is left out: every request is then logged.
    if tracing::enabled!(target: "tower_http::trace", tracing::Level::DEBUG) {
        app = App {
            router: app.router.layer(TraceLayer::new_for_http()),
            front: None,
            workers: app.workers,
        };
    }
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        if let Err(e) = listener::serve(bound, app, limits, shutdown).await {
            tracing::error!(listener = name, error = %e, "listener failed");
        }
    })
}
