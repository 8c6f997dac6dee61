//! `kep-bench jasmin` (feature `jasmin`, for `bench/carriers.sh`): a Jasmin started exactly
//! as the messaging tests start theirs, by their fixture (included as it is: RabbitMQ, Redis,
//! `jasmind.py` on `PATH`, the user `kep` whose submits Jasmin routes out through its `loop`
//! connector and receipts `ACCEPTD`), held until SIGTERM or SIGINT.

#[path = "../../../crates/kep-messaging/tests/it/jasmin/mod.rs"]
#[allow(
    unused_imports,
    reason = "the fixture re-exports what the connectors' tests use; this uses Jasmin alone"
)]
mod fixture;

/// Prints `ready <smpp port> <system_id> <password>` once Jasmin takes binds, then waits.
pub async fn jasmin() -> anyhow::Result<()> {
    let mut jasmin = fixture::Jasmin::start().await;
    println!(
        "ready {} {} {}",
        jasmin.smpp_port, jasmin.username, jasmin.password
    );
    eprintln!("jasmin: logs in {}", jasmin.dir().display());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r?,
    }
    // Its Redis and temp dir go with it; RabbitMQ when this process ends.
    jasmin.stop().await;
    Ok(())
}
