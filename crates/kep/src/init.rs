//! What `kep serve` applies at start (CONTRACT §0): `--dev`'s declaration and the `--init`
//! file, read before any listener binds (a file that cannot be read stops the start at
//! once) and applied once the platform serves, while `/readyz` waits for `init`. A
//! declaration refused keeps `/readyz` at 503 with the reason, and the start fails.

use std::net::SocketAddr;

use anyhow::Context as _;
use kep_core::platform::Running;
use kep_core::readiness::Ready;
use serde_json::{Map, Value};

use crate::declaration;
use crate::serve::{LogFormat, Settings};

/// The operator token of `--dev`, unless `KEP_ADMIN_TOKEN` sets one.
pub const DEV_TOKEN: &str = "dev-operator-token";
/// What `/readyz` waits for while the declarations are applied.
const INIT: &str = "init";

/// The declarations to apply at start, by where they come from.
pub struct Init(Vec<(String, Map<String, Value>)>);

impl Init {
    /// `--dev`'s declaration (the sections of the services started) and the `--init` file;
    /// `None` when there is neither.
    pub fn read(settings: &Settings, started: &[&str]) -> anyhow::Result<Option<Init>> {
        let mut declarations = Vec::new();
        if settings.dev {
            let mut dev = declaration::parse(declaration::DEV).expect("the built-in declaration");
            dev.retain(|section, _| started.contains(&section.as_str()));
            declarations.push(("--dev".to_owned(), dev));
        }
        if let Some(file) = &settings.init {
            let read = declaration::read(file).context("init")?;
            declarations.push((file.display().to_string(), read));
        }
        Ok((!declarations.is_empty()).then_some(Init(declarations)))
    }

    /// `/readyz` waits until [`Init::apply`] is done.
    pub fn hold(&self, ready: &Ready) {
        ready.wait_for(INIT);
    }

    /// Applies each declaration, printing what it did as `kep apply` does.
    pub async fn apply(self, running: &Running, ready: &Ready) -> anyhow::Result<()> {
        for (from, declaration) in self.0 {
            match running.declarations().apply(declaration, false).await {
                Ok(objects) => {
                    for o in &objects {
                        tracing::info!(init = %from, "{o}");
                    }
                    print!("{}", declaration::lines(&objects));
                }
                Err(e) => {
                    let reason = format!("init {from}: {e} (nothing of it applied)");
                    ready.failed(reason.clone());
                    anyhow::bail!(reason);
                }
            }
        }
        ready.done(INIT);
        Ok(())
    }
}

/// `--dev` serves on loopback only: each listener's address and the media address.
pub fn check_dev(settings: &Settings) -> anyhow::Result<()> {
    let addrs: [(&str, SocketAddr); 6] = [
        ("admin.addr", settings.admin.addr),
        ("live.addr", settings.live.addr),
        ("live.media_addr", settings.live.media_addr),
        ("adapter.addr", settings.adapter.addr),
        ("messaging.addr", settings.messaging.addr),
        ("gateway.addr", settings.gateway.addr),
    ];
    if let Some((name, addr)) = addrs.iter().find(|(_, a)| !a.ip().is_loopback()) {
        anyhow::bail!(
            "--dev: {name} is {addr}, not a loopback address; dev mode's credentials are \
             public, so it serves this host alone (drop --dev, or bind 127.0.0.1)"
        );
    }
    Ok(())
}

/// The operator token file under `--dev`: the dev token, so that the CLI finds it as it
/// finds a generated one (a token `KEP_ADMIN_TOKEN` sets is the caller's, and not written
/// down). A later start without `--dev` does not inherit the dev token: the file is
/// removed, and a token generated anew.
pub fn dev_token_file(
    data_dir: &std::path::Path,
    dev: bool,
    configured: Option<&str>,
) -> anyhow::Result<()> {
    let path = data_dir.join("admin-token");
    if dev && configured.is_none() {
        kep_core::private::write(&path, DEV_TOKEN.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    } else if std::fs::read_to_string(&path).is_ok_and(|t| t.trim() == DEV_TOKEN) {
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    }
    Ok(())
}

/// Says the dev credentials once the platform serves.
pub fn print_dev(token: &str, format: LogFormat) {
    let credentials = serde_json::json!({
        "operator_token": token,
        "live_service": {"serviceId": "dev", "adminSecret": "dev-admin-secret", "serviceSecret": "dev-service-secret"},
        "org_login_type": {"id": 1, "secret_key": "dev-agent-secret"},
        "messaging_client": {"client_id": "dev", "client_secret": "dev-client-secret"},
    });
    match format {
        LogFormat::Json => println!("{}", serde_json::json!({ "dev": credentials })),
        LogFormat::Text => println!(
            "dev mode (loopback only): operator token {token}; live service dev \
             (adminSecret dev-admin-secret, serviceSecret dev-service-secret); org login \
             type 1 (secret_key dev-agent-secret); messaging client dev (client_secret \
             dev-client-secret)"
        ),
    }
}
