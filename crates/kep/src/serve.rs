//! `kep serve`: loads the settings, builds the [`Application`] and stops it gracefully on
//! SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use figment::value::Value;
use kep_adapter::AdapterSettings;
use kep_core::limits::Limits;
use kep_core::listener;
use kep_core::settings::EnvNames;
use kep_live::LiveSettings;
use kep_messaging::MessagingSettings;
use kep_serving::{GatewaySettings, ServingSettings};
use serde::{Deserialize, Serialize};

use crate::app::Application;

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
        "tls",
    ],
    aliases: &[
        ("SIMULATOR_DELAY_MS", "messaging.simulator_delay_ms"),
        ("TLS_CERT", "tls.cert_file"),
        ("TLS_KEY", "tls.key_file"),
    ],
};

#[derive(clap::Args)]
pub struct ServeArgs {
    /// A TOML settings file (flags and KEP_* variables override it).
    #[arg(long)]
    config: Option<PathBuf>,
    /// `kep`'s global `--data-dir`.
    #[arg(skip)]
    data_dir: Option<PathBuf>,
    /// A PostgreSQL database (postgres://…) for every service's state instead of SQLite
    /// files under the data dir; several nodes share one [KEP_DATABASE_URL].
    #[arg(long)]
    database_url: Option<String>,
    /// The key the secret-equivalent stored values are sealed with, made there (0600) if
    /// missing; every node of one database needs the same one [KEP_SEAL_KEY_FILE; default
    /// <data-dir>/seal.key].
    #[arg(long)]
    seal_key_file: Option<PathBuf>,
    /// Every listener still on its default address moves to this port plus its offset:
    /// admin +0, live +1, adapter +2, messaging +3, gateway +4, media +5; 0: every one on
    /// a free port (addresses.json says which) [KEP_PORT_BASE; default 8800].
    #[arg(long)]
    port_base: Option<u16>,
    /// Operator API, /healthz, docs [KEP_ADMIN_ADDR; default 127.0.0.1:8800].
    #[arg(long)]
    admin_addr: Option<SocketAddr>,
    /// Live-streaming JSON-RPC and participant WebSocket [KEP_LIVE_ADDR; default 127.0.0.1:8801].
    #[arg(long)]
    live_addr: Option<SocketAddr>,
    /// The UDP address of all live media, WHIP and WHEP [KEP_LIVE_MEDIA_ADDR; default 127.0.0.1:8805].
    #[arg(long)]
    media_addr: Option<SocketAddr>,
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
    /// A TOML file of declared resources applied at start, before /readyz turns ready (as
    /// `kep apply -f` applies it) [KEP_INIT].
    #[arg(long)]
    init: Option<PathBuf>,
    /// Fixed development credentials (operator token dev-operator-token, live service dev,
    /// org login type 1, messaging client dev), printed at start; refused unless every
    /// listener is on a loopback address [KEP_DEV].
    #[arg(long)]
    dev: bool,
    /// Every listener speaks HTTPS with this certificate chain (PEM) [KEP_TLS_CERT].
    #[arg(long)]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM) [KEP_TLS_KEY].
    #[arg(long)]
    tls_key: Option<PathBuf>,
    /// Every listener speaks HTTPS with a certificate of the data dir's own CA
    /// (<data-dir>/tls/ca.pem, which the CLI trusts), made once and reused
    /// [KEP_TLS_SELF_SIGNED].
    #[arg(long)]
    tls_self_signed: bool,
    /// A PEM file of CA certificates that outbound https calls (webhooks, alerts, agent
    /// notices, HTTP carriers) trust beside the system's [KEP_TLS_EXTRA_ROOTS].
    #[arg(long)]
    tls_extra_roots: Option<PathBuf>,
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
    /// `postgres://…`; unset: SQLite files under `data_dir`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_url: Option<String>,
    /// Unset: `<data_dir>/seal.key`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seal_key_file: Option<PathBuf>,
    pub log_format: LogFormat,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub only: Option<NameList>,
    /// Moves the listeners still on their default addresses (`--port-base`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port_base: Option<u16>,
    /// Declared resources applied at start (`--init`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init: Option<PathBuf>,
    /// Development mode (`--dev`).
    pub dev: bool,
    pub admin: AdminSettings,
    pub live: LiveSettings,
    pub adapter: AdapterSettings,
    pub messaging: MessagingSettings,
    pub serving: ServingSettings,
    pub gateway: GatewaySettings,
    pub tls: TlsSettings,
}

/// TLS (CONTRACT §0 "Running kep anywhere").
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TlsSettings {
    /// The certificate chain (PEM) every listener presents, with `key_file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// A certificate of the data dir's own CA instead of given files.
    pub self_signed: bool,
    /// CA certificates (PEM) that outbound https calls trust beside the system's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra_roots: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            data_dir: PathBuf::from("./kep-data"),
            database_url: None,
            seal_key_file: None,
            log_format: LogFormat::Text,
            only: None,
            port_base: None,
            init: None,
            dev: false,
            admin: AdminSettings::default(),
            live: LiveSettings::default(),
            adapter: AdapterSettings::default(),
            messaging: MessagingSettings::default(),
            serving: ServingSettings::default(),
            gateway: GatewaySettings::default(),
            tls: TlsSettings::default(),
        }
    }
}

/// A list of names (`only`, `admin.allowed_hosts`): a list in TOML, a comma-separated
/// string in a variable (`KEP_ONLY`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum NameList {
    List(Vec<String>),
    Csv(String),
}

impl NameList {
    pub fn names(&self) -> Vec<String> {
        match self {
            NameList::List(l) => l.clone(),
            NameList::Csv(s) => s
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
    /// Whether the listener speaks TLS when kep has a certificate; false keeps it plain.
    pub tls: bool,
    /// The operator token [KEP_ADMIN_TOKEN]; generated into <data-dir>/admin-token if unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// How long in-flight work may take to finish after a stop signal.
    pub shutdown_grace_s: u64,
    /// Host names the listener answers to beside IP addresses and `localhost` (DNS
    /// rebinding): the names browsers reach it by [KEP_ADMIN_ALLOWED_HOSTS]; `*`, any.
    pub allowed_hosts: NameList,
    /// The operator API's: the operator token's holder is its one client; calls without
    /// the token count per peer address.
    #[serde(flatten)]
    pub limits: Limits,
}

impl Default for AdminSettings {
    fn default() -> Self {
        AdminSettings {
            addr: SocketAddr::from(([127, 0, 0, 1], 8800)),
            tls: true,
            token: None,
            shutdown_grace_s: 10,
            allowed_hosts: NameList::List(Vec::new()),
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
        if let Some(u) = &self.database_url {
            o.push(("database_url".into(), Value::from(u.clone())));
        }
        if let Some(f) = &self.seal_key_file {
            o.push(("seal_key_file".into(), path(f)));
        }
        if let Some(b) = self.port_base {
            o.push(("port_base".into(), Value::from(b)));
        }
        if let Some(a) = self.admin_addr {
            o.push(("admin.addr".into(), Value::from(a.to_string())));
        }
        if let Some(a) = self.live_addr {
            o.push(("live.addr".into(), Value::from(a.to_string())));
        }
        if let Some(a) = self.media_addr {
            o.push(("live.media_addr".into(), Value::from(a.to_string())));
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
        if let Some(f) = &self.init {
            o.push(("init".into(), path(f)));
        }
        if self.dev {
            o.push(("dev".into(), Value::from(true)));
        }
        if let Some(f) = &self.tls_cert {
            o.push(("tls.cert_file".into(), path(f)));
        }
        if let Some(f) = &self.tls_key {
            o.push(("tls.key_file".into(), path(f)));
        }
        if self.tls_self_signed {
            o.push(("tls.self_signed".into(), Value::from(true)));
        }
        if let Some(f) = &self.tls_extra_roots {
            o.push(("tls.extra_roots".into(), path(f)));
        }
        Ok(o)
    }
}

impl Settings {
    /// `port_base`: each listener still on its default address moves to the base plus its
    /// offset (the defaults' own order, 8800 to 8805); base 0, to a free port each. An
    /// address set to anything else stays where it was set.
    fn apply_port_base(&mut self) -> anyhow::Result<()> {
        let Some(base) = self.port_base else {
            return Ok(());
        };
        if base > u16::MAX - 5 {
            anyhow::bail!("port_base: at most {} (six ports from it)", u16::MAX - 5);
        }
        let defaults = Settings::default();
        let listeners = [
            (&mut self.admin.addr, defaults.admin.addr, 0),
            (&mut self.live.addr, defaults.live.addr, 1),
            (&mut self.adapter.addr, defaults.adapter.addr, 2),
            (&mut self.messaging.addr, defaults.messaging.addr, 3),
            (&mut self.gateway.addr, defaults.gateway.addr, 4),
            (&mut self.live.media_addr, defaults.live.media_addr, 5),
        ];
        for (addr, default, offset) in listeners {
            if *addr == default {
                addr.set_port(if base == 0 { 0 } else { base + offset });
            }
        }
        Ok(())
    }
}

/// Logs to stderr, filtered by `KEP_LOG` (default `info`), coloured only on a terminal.
pub(crate) fn init_tracing(format: LogFormat) {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("KEP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

pub async fn run(mut args: ServeArgs, data_dir: Option<PathBuf>) -> anyhow::Result<()> {
    args.data_dir = data_dir;
    let mut settings: Settings =
        kep_core::settings::load(args.config.as_deref(), ENV, args.overrides()?)
            .map_err(|e| anyhow::anyhow!("settings: {e}"))?;
    settings.apply_port_base()?;
    init_tracing(settings.log_format);
    let grace = Duration::from_secs(settings.admin.shutdown_grace_s);
    let app = Application::build(settings).await?;
    listener::stop_signal().await;
    tracing::info!("stopping: finishing in-flight requests");
    if !app.stop(grace).await {
        tracing::warn!(
            "stopped with work still in flight after {} s",
            grace.as_secs()
        );
    }
    tracing::info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Settings;

    #[test]
    fn a_port_base_moves_the_listeners_left_on_their_defaults() {
        let mut s = Settings {
            port_base: Some(9800),
            ..Settings::default()
        };
        s.live.addr = "127.0.0.1:7000".parse().unwrap();
        s.apply_port_base().unwrap();
        let ports = [
            s.admin.addr.port(),
            s.live.addr.port(),
            s.adapter.addr.port(),
            s.messaging.addr.port(),
            s.gateway.addr.port(),
            s.live.media_addr.port(),
        ];
        assert_eq!(ports, [9800, 7000, 9802, 9803, 9804, 9805]);

        let mut free = Settings {
            port_base: Some(0),
            ..Settings::default()
        };
        free.apply_port_base().unwrap();
        assert_eq!(
            (free.admin.addr.port(), free.live.media_addr.port()),
            (0, 0)
        );

        for (base, fits) in [(u16::MAX - 5, true), (u16::MAX - 4, false)] {
            let mut s = Settings {
                port_base: Some(base),
                ..Settings::default()
            };
            assert_eq!(s.apply_port_base().is_ok(), fits, "{base}");
        }
    }
}
