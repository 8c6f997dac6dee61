//! The whole platform built from its settings: the services `only` names, each on its
//! listener, the admin listener with `/metrics`, and the address book. `kep serve` runs
//! it until a stop signal.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use axum::routing::get;
use kep_adapter::AdapterService;
use kep_core::listener;
use kep_core::platform::{Platform, Running};
use kep_core::service::{ListenerSettings, Service as _};
use kep_core::tls::{self, ServerTls};
use kep_live::LiveService;
use kep_messaging::MessagingService;
use kep_serving::ServingService;
use tokio_util::sync::CancellationToken;

use crate::serve::Settings;

/// The services `--only` can name.
const SERVICES: [&str; 4] = [
    LiveService::NAME,
    AdapterService::NAME,
    MessagingService::NAME,
    ServingService::NAME,
];

/// The platform, serving.
pub struct Application {
    running: Running,
}

impl Application {
    /// Binds every listener, starts the services and serves them; the operator token is
    /// generated into the data dir on the first start (and printed once).
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let only = settings.only.as_ref().map(|o| o.names());
        let wanted = |name: &str| only.as_ref().is_none_or(|o| o.iter().any(|s| s == name));
        if let Some(only) = &only
            && let Some(bad) = only.iter().find(|s| !SERVICES.contains(&s.as_str()))
        {
            anyhow::bail!(
                "--only: unknown service {bad:?} (known: {})",
                SERVICES.join(", ")
            );
        }
        if settings.dev {
            crate::init::check_dev(&settings)?;
        }
        let started: Vec<&str> = SERVICES.into_iter().filter(|s| wanted(s)).collect();
        let init = crate::init::Init::read(&settings, &started)?;
        let listeners = [
            Some(&settings.admin.limits),
            wanted(LiveService::NAME).then_some(&settings.live.limits),
            wanted(AdapterService::NAME).then_some(&settings.adapter.limits),
            wanted(MessagingService::NAME).then_some(&settings.messaging.limits),
            wanted(ServingService::NAME).then_some(&settings.gateway.limits),
        ];
        raise_open_files(listeners.iter().flatten().map(|l| l.max_connections));

        if let Some(roots) = &settings.tls.extra_roots {
            let n = kep_core::outbound::use_extra_roots(roots)?;
            tracing::info!(file = %roots.display(), certificates = n, "outbound https trusts these beside the system's roots");
        }
        let data_dir = settings.data_dir.clone();
        if kep_core::private::restrict(&data_dir)
            .with_context(|| format!("creating {}", data_dir.display()))?
        {
            tracing::info!(data_dir = %data_dir.display(), "made the data dir 0700");
        }
        if let Some(url) = &settings.database_url
            && !kep_core::storage::is_postgres(url)
        {
            anyhow::bail!("database_url: a postgres:// URL, or unset for SQLite under data_dir");
        }
        let tls = server_tls(&settings)?;
        let admin = ListenerSettings {
            tls: settings.admin.tls,
            ..ListenerSettings::at(settings.admin.addr, settings.admin.limits)
        };
        let mut platform = Platform::new(&data_dir, admin, tls.clone())
            .await?
            .with_database_url(settings.database_url.clone())
            .with_admin_hosts(listener::AllowedHosts::new(
                settings.admin.allowed_hosts.names(),
            ))
            .with_seal_key_file(settings.seal_key_file.clone());
        // `/readyz` names every service it waits for from its first answer on.
        let ready = platform.readiness();
        for name in &started {
            ready.wait_for(name);
        }
        if let Some(init) = &init {
            init.hold(&ready);
        }
        if let Some(tls) = &tls {
            tls.reload_on_hangup(platform.shutdown_token())?;
        }
        let prometheus = install_prometheus(&platform.shutdown_token())?;
        let messaging_zone = settings.messaging.time_zone.clone();
        let mut observed = Observed::default();
        if wanted(LiveService::NAME) {
            observed.live = Some(platform.start::<LiveService>(settings.live).await?);
        }
        if wanted(AdapterService::NAME) {
            observed.adapter = Some(platform.start::<AdapterService>(settings.adapter).await?);
        }
        if wanted(MessagingService::NAME) {
            observed.messaging = Some(
                platform
                    .start::<MessagingService>(settings.messaging)
                    .await?,
            );
        }
        if wanted(ServingService::NAME) {
            observed.serving = Some(
                platform
                    .start::<ServingService>((settings.serving, settings.gateway))
                    .await?,
            );
        }
        let observed = std::sync::Arc::new(observed);
        let platform = platform.open_router(kep_console::routes(&started, &messaging_zone));
        let platform = platform.open_route(
            "/metrics",
            get(move || async move {
                observed.observe().await;
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    format!("{}{}", prometheus.render(), process_series()),
                )
            }),
        );
        // Only once every listener is bound: a start that fails on a busy port leaves no
        // token of its own behind.
        crate::init::dev_token_file(&data_dir, settings.dev, settings.admin.token.as_deref())?;
        let (token, generated) =
            listener::operator_token(&data_dir, settings.admin.token.as_deref())?;
        if generated {
            // Printed once, at the start that generated it; a JSON line under JSON logs.
            let path = data_dir.join("admin-token");
            match settings.log_format {
                crate::serve::LogFormat::Text => {
                    println!("operator token (also in {}): {token}", path.display());
                }
                crate::serve::LogFormat::Json => println!(
                    "{}",
                    serde_json::json!({ "operator_token": token, "path": path })
                ),
            }
        }

        let running = platform.serve(&token);
        let addresses: BTreeMap<&str, _> = running.addresses().clone();
        listener::write_addresses(&data_dir, &addresses, &running.local_urls())?;
        if let Some(init) = init {
            init.apply(&running, &ready).await?;
        }
        if settings.dev {
            crate::init::print_dev(&token, settings.log_format);
        }
        let console = format!("{}/console", running.url("admin"));
        match settings.log_format {
            crate::serve::LogFormat::Text => println!("console: {console}"),
            crate::serve::LogFormat::Json => {
                println!("{}", serde_json::json!({ "console": console }))
            }
        }
        Ok(Application { running })
    }

    /// Stops as [`Running::stop`] does; false when `grace` ran out first.
    pub async fn stop(self, grace: Duration) -> bool {
        self.running.stop(grace).await
    }
}

/// The listeners' certificate: the given files, or the data dir's own (`tls.self_signed`);
/// `None`, plain HTTP.
fn server_tls(settings: &Settings) -> anyhow::Result<Option<ServerTls>> {
    let t = &settings.tls;
    let files = match (&t.cert_file, &t.key_file, t.self_signed) {
        (None, None, false) => return Ok(None),
        (Some(cert), Some(key), false) => tls::Files {
            cert: cert.clone(),
            key: key.clone(),
        },
        (None, None, true) => {
            tls::self_signed::ensure(&settings.data_dir, &public_hosts(settings))?
        }
        (_, _, true) => {
            anyhow::bail!("tls.self_signed and tls.cert_file/tls.key_file: set one or the other")
        }
        (Some(_), None, _) => {
            anyhow::bail!("tls.cert_file is set without tls.key_file (--tls-key, KEP_TLS_KEY)")
        }
        (None, Some(_), _) => {
            anyhow::bail!("tls.key_file is set without tls.cert_file (--tls-cert, KEP_TLS_CERT)")
        }
    };
    let (tls, described) = ServerTls::load(files)?;
    tracing::info!(subject = %described.subject, names = ?described.names, not_after = %described.not_after, "the listeners speak TLS");
    Ok(Some(tls))
}

/// The hosts a self-signed certificate names beside the local ones: each listener's public
/// URL's, and each address a listener is bound to on its own (not all of them).
fn public_hosts(settings: &Settings) -> Vec<String> {
    let urls = [
        &settings.live.public_url,
        &settings.messaging.public_url,
        &settings.gateway.public_url,
    ];
    let from_urls = urls.into_iter().flatten().filter_map(|url| {
        let uri: axum::http::Uri = url.parse().ok()?;
        Some(uri.host()?.trim_matches(['[', ']']).to_owned())
    });
    let addrs = [
        settings.admin.addr,
        settings.live.addr,
        settings.adapter.addr,
        settings.messaging.addr,
        settings.gateway.addr,
    ];
    let bound = addrs
        .into_iter()
        .filter(|a| !a.ip().is_unspecified() && !a.ip().is_loopback())
        .map(|a| a.ip().to_string());
    let mut hosts: Vec<String> = from_urls.chain(bound).collect();
    hosts.dedup();
    hosts
}

/// The services whose gauges are read at each scrape.
#[derive(Default)]
struct Observed {
    live: Option<LiveService>,
    adapter: Option<AdapterService>,
    messaging: Option<MessagingService>,
    serving: Option<ServingService>,
}

impl Observed {
    async fn observe(&self) {
        if let Some(live) = &self.live {
            live.observe();
        }
        if let Some(adapter) = &self.adapter {
            adapter.observe().await;
        }
        if let Some(messaging) = &self.messaging {
            messaging.observe().await;
        }
        if let Some(serving) = &self.serving {
            serving.observe();
        }
    }
}

/// The process's CPU time, resident memory and open descriptors (Linux's `/proc/self`),
/// named and typed as Prometheus' client libraries do, in its text format: written here,
/// since the recorder's counters are whole numbers and CPU time is not.
fn process_series() -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut series = |name: &str, kind: &str, help: &str, value: f64| {
        let _ = write!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n\n"
        );
    };
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .unwrap_or(4096) as f64;
    // `stat`'s 14th and 15th fields, counted after the command name's closing parenthesis
    // (a name may hold spaces).
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
        && let Some((_, rest)) = stat.rsplit_once(')')
    {
        let fields: Vec<f64> = rest
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|f| f.parse().ok())
            .collect();
        if let [user, system] = fields[..] {
            series(
                "process_cpu_seconds_total",
                "counter",
                "Total user and system CPU time spent in seconds.",
                (user + system) / ticks,
            );
        }
    }
    if let Ok(statm) = std::fs::read_to_string("/proc/self/statm")
        && let Some(Ok(pages)) = statm.split_whitespace().nth(1).map(str::parse::<f64>)
    {
        series(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            pages * page,
        );
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        series(
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            fds.count() as f64,
        );
    }
    out
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
