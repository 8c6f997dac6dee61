//! `kep smsc`: kep-smpp's small SMSC on 127.0.0.1, to try carriers (and benchmark them)
//! without a carrier's: it binds the ESMEs that give its credentials, acknowledges every
//! submit_sm and answers it with the receipt asked for.

use std::net::SocketAddr;
use std::sync::Arc;

use kep_smpp::{MessageState, Smsc, SmscBehaviour};
use serde_json::json;

/// The receipt `kep smsc` sends for each submit.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Receipt {
    /// DELIVRD: the message becomes 200.
    Delivered,
    /// UNDELIV: the message fails.
    Undeliverable,
    /// No receipt: the message waits for one until `messaging.receipt_timeout_s`.
    None,
}

#[derive(clap::Args)]
pub struct SmscArgs {
    /// Where to listen on 127.0.0.1; 0: any free port.
    #[arg(long, default_value_t = 2775)]
    port: u16,
    /// The system_id an ESME binds with.
    #[arg(long, default_value = "kep")]
    system_id: String,
    /// The password an ESME binds with.
    #[arg(long, default_value = "secret")]
    password: String,
    /// The delivery receipt sent for every submit.
    #[arg(long, value_enum, default_value_t = Receipt::Delivered)]
    receipt: Receipt,
    /// No line per submit (benchmarks): only `ready <port>` and the summary.
    #[arg(long)]
    quiet: bool,
}

/// Serves SMPP until SIGTERM or SIGINT: prints `ready <port>` once listening, one JSON line
/// per submit_sm it takes (`message_id`, `source`, `destination`, `text`), and at the end
/// one JSON line of what it took (`submits`, `binds`, `unbinds`).
pub async fn run(args: SmscArgs) -> anyhow::Result<()> {
    let state = match args.receipt {
        Receipt::Delivered => Some(MessageState::Delivered),
        Receipt::Undeliverable => Some(MessageState::Undeliverable),
        Receipt::None => None,
    };
    let behaviour = SmscBehaviour {
        receipt: Arc::new(move |_| state),
        throttle_first: 0,
        system_id: args.system_id,
        password: args.password,
        record: false,
    };
    let smsc = Smsc::start(SocketAddr::from(([127, 0, 0, 1], args.port)), behaviour).await?;
    let mut taken = if args.quiet { None } else { smsc.watch() };
    super::say(format!("ready {}", smsc.port()))?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = term.recv() => break,
            r = tokio::signal::ctrl_c() => { r?; break }
            Some((message_id, submit)) = async { taken.as_mut()?.recv().await } => {
                super::say(json!({
                    "message_id": message_id,
                    "source": submit.source,
                    "destination": submit.destination,
                    "text": submit.text(),
                }))?;
            }
        }
    }
    let took = json!({"submits": smsc.submits(), "binds": smsc.binds(), "unbinds": smsc.unbinds()});
    smsc.stop().await;
    super::say(took)?;
    Ok(())
}
