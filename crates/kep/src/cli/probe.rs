//! `kep probe ready`: whether the server is ready (`GET /readyz`), for a container's health
//! check without curl: exit 0 when ready, 1 when starting, failed or unreachable.

use std::time::Duration;

use super::Common;

#[derive(clap::Args)]
pub struct ProbeArgs {
    #[command(flatten)]
    pub(super) common: Common,
    #[command(subcommand)]
    probe: Probe,
}

#[derive(clap::Subcommand)]
enum Probe {
    /// Exit 0 once every service has started and the init file is applied; else say what
    /// the server waits for and exit 1.
    Ready {
        /// How long to wait for an answer, in seconds.
        #[arg(long, default_value_t = 5)]
        timeout_s: u64,
    },
}

pub async fn run(args: ProbeArgs) -> anyhow::Result<()> {
    let Probe::Ready { timeout_s } = args.probe;
    let base = args.common.admin_url();
    let r = kep_client::readiness::readiness(&base, Duration::from_secs(timeout_s))
        .await
        .map_err(|e| anyhow::anyhow!("not ready: no answer from {base}: {e}"))?;
    if r.status == "ready" {
        return super::say("ready");
    }
    let mut why = format!("not ready: {}", r.status);
    if !r.waiting.is_empty() {
        why.push_str(&format!(", waiting for {}", r.waiting.join(", ")));
    }
    if let Some(reason) = r.reason {
        why.push_str(&format!(": {reason}"));
    }
    anyhow::bail!(why)
}
