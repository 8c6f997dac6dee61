//! `kep events`: the platform's activity as it happens, one JSON line per event.

use kep_client::activity::{Watch, Watched};

use super::Common;

#[derive(clap::Args)]
pub struct EventsArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// Only this service's: live, adapter, messaging, serving.
    #[arg(long)]
    service: Option<String>,
    /// Only this object's and those under it (demo, demo/lobby, ep/deployment).
    #[arg(long)]
    object: Option<String>,
    /// Only this event, or those of a kind of object (room, message.finished).
    #[arg(long)]
    event: Option<String>,
    /// Start after this event id (the kept events before it are skipped).
    #[arg(long)]
    after: Option<u64>,
}

/// Prints the kept events, then each as it comes, until the server ends the stream.
pub async fn run(args: EventsArgs) -> anyhow::Result<()> {
    let watch = Watch {
        service: args.service,
        object: args.object,
        event: args.event,
        after: args.after,
    };
    let mut events = args.common.admin()?.events(&watch).await?;
    while let Some(watched) = events.next().await {
        match watched? {
            Watched::Event(e) => super::say(serde_json::to_string(&e)?)?,
            Watched::Lagged(n) => eprintln!("kep: fell behind: {n} events missed"),
        }
    }
    Ok(())
}
