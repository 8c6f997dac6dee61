//! For `bench/carriers.sh`: an ESME that submits as fast as one bind's window lets it
//! (kep's own `kep_smpp::Esme`), against the sink `kep smsc` runs.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures_util::StreamExt as _;
use kep_smpp::{Esme, EsmeConfig};

#[derive(clap::Args)]
pub struct SubmitArgs {
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long)]
    port: u16,
    #[arg(long, default_value = "kep")]
    system_id: String,
    #[arg(long, default_value = "secret")]
    password: String,
    #[arg(long, default_value_t = 100_000)]
    messages: usize,
    /// submit_sm awaiting their resp at once, as `[[messaging.carriers]]`'s `window`.
    #[arg(long, default_value_t = 64)]
    window: usize,
    /// How long to wait for the receipts once every submit was acknowledged.
    #[arg(long, default_value_t = 60)]
    receipt_wait_s: u64,
}

/// The text of message `i`: Korean, one UCS-2 short_message (at most 70 characters).
fn text(i: usize) -> String {
    format!("안녕하세요, kep 통신사 벤치마크 메시지 {i}번입니다.")
}

/// Binds one ESME and submits `messages` texts, each awaited by its own future, as many at
/// once as the window takes (the ESME holds the others back); prints one JSON line once
/// every receipt came (or `receipt_wait_s` passed):
/// - `messages`, `seconds` (first submit to the last submit_sm_resp) and `per_s`: submit_sm
///   acknowledged per second;
/// - `receipts`, and `receipts_seconds`: first submit to the last receipt;
/// - `failed`: submits that did not get ESME_ROK (the first error, if any, in `error`);
/// - `cpu_s`: this process's CPU time, bind and wait included.
pub async fn submit(args: SubmitArgs) -> anyhow::Result<()> {
    let (tx, mut receipts) = tokio::sync::mpsc::unbounded_channel();
    let esme = Esme::start(
        EsmeConfig {
            name: "bench".into(),
            host: args.host.clone(),
            port: args.port,
            system_id: args.system_id.clone(),
            password: args.password.clone(),
            window: args.window,
            ..EsmeConfig::default()
        },
        tx,
    );
    anyhow::ensure!(
        esme.wait_bound(Duration::from_secs(10)).await,
        "no bind to {}:{} within 10 s: {:?}",
        args.host,
        args.port,
        esme.stats().last_error
    );
    let texts: Vec<String> = (0..args.messages).map(text).collect();
    let started = Instant::now();
    // Receipts are counted as they come, beside the submits.
    let counting = tokio::spawn(async move {
        let mut n = 0usize;
        let mut last = None;
        while receipts.recv().await.is_some() {
            n += 1;
            last = Some(Instant::now());
        }
        (n, last)
    });
    let results: Vec<Result<Vec<String>, kep_smpp::SubmitError>> =
        futures_util::stream::iter(&texts)
            // Twice the window: the window stays full while answered submits are replaced.
            .map(|t| esme.submit("1588", "821012345678", t))
            .buffer_unordered(args.window.max(1) * 2)
            .collect()
            .await;
    let acknowledged = started.elapsed();
    let failed: Vec<&kep_smpp::SubmitError> =
        results.iter().filter_map(|r| r.as_ref().err()).collect();
    let ok = args.messages - failed.len();
    let deadline = Instant::now() + Duration::from_secs(args.receipt_wait_s);
    while esme.stats().receipts < ok as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    esme.stop().await;
    drop(esme);
    let (receipts, last) = counting.await.context("the receipt counter")?;
    let secs = acknowledged.as_secs_f64();
    println!(
        "{}",
        serde_json::json!({
            "messages": args.messages,
            "seconds": secs,
            "per_s": ok as f64 / secs,
            "receipts": receipts,
            "receipts_seconds": last.map(|l| l.duration_since(started).as_secs_f64()),
            "failed": failed.len(),
            "error": failed.first().map(|e| e.to_string()),
            "cpu_s": cpu_s(),
        })
    );
    Ok(())
}

/// This process's user and system CPU time so far, in seconds (`/proc/self/stat`, in ticks
/// of USER_HZ, which Linux fixes at 100).
fn cpu_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Past the command name, which may hold spaces: field 3 (state) on.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<u64>().ok();
    // utime and stime are fields 14 and 15, so 11 and 12 here.
    Some((ticks(11)? + ticks(12)?) as f64 / 100.0)
}
