//! For `bench/webhooks.sh`: participants that join and leave rooms over and over (each
//! join and leave a webhook event where the service has its webhook on), and a receiver of
//! webhook events that measures how late each arrives.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::{Service, join_all};

#[derive(clap::Args)]
pub struct ChurnArgs {
    #[command(flatten)]
    service: Service,
    #[arg(long, default_value_t = 100)]
    rooms: usize,
    #[arg(long, default_value_t = 10)]
    per_room: usize,
    #[arg(long, default_value = "churn")]
    prefix: String,
    /// Join and leave this many times; 0: until killed.
    #[arg(long, default_value_t = 1)]
    cycles: usize,
}

/// Joins every participant, then drops them all (they leave), `cycles` times; prints the
/// joins per second of each cycle.
pub async fn churn(args: ChurnArgs) -> anyhow::Result<()> {
    let mut cycle = 0;
    while args.cycles == 0 || cycle < args.cycles {
        let names = (0..args.rooms)
            .flat_map(|r| {
                let prefix = &args.prefix;
                (0..args.per_room).map(move |p| (format!("{prefix}-{r}"), format!("p{p}")))
            })
            .collect::<Vec<_>>();
        let n = names.len();
        let started = Instant::now();
        let participants = join_all(&args.service, names).await?;
        let joined = started.elapsed();
        drop(participants);
        println!(
            "cycle {cycle}: {n} joined in {:.3} s ({:.0} joins/s)",
            joined.as_secs_f64(),
            n as f64 / joined.as_secs_f64()
        );
        cycle += 1;
        // Let the leaves land before the next joins (the same names come back).
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct ReceiveArgs {
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: String,
    /// Ends, printing what it saw, once no event came for this long (after the first).
    #[arg(long, default_value_t = 2000)]
    quiet_ms: u64,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Answers every POST 204 and keeps, for each event, how long after its `at` it arrived.
pub async fn receive(args: ReceiveArgs) -> anyhow::Result<()> {
    let late: Arc<Mutex<Vec<i64>>> = Arc::default();
    let last = Arc::new(Mutex::new(None::<Instant>));
    let (l, t) = (Arc::clone(&late), Arc::clone(&last));
    let app = axum::Router::new().fallback(axum::routing::post(move |body: axum::body::Bytes| {
        let (late, last) = (Arc::clone(&l), Arc::clone(&t));
        async move {
            let at = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|e| e["at"].as_i64());
            if let Some(at) = at {
                late.lock().unwrap().push(now_ms() - at);
                *last.lock().unwrap() = Some(Instant::now());
            }
            axum::http::StatusCode::NO_CONTENT
        }
    }));
    let listener = tokio::net::TcpListener::bind(&args.addr).await?;
    println!("ready {}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    let quiet = Duration::from_millis(args.quiet_ms);
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if last.lock().unwrap().is_some_and(|at| at.elapsed() > quiet) {
            break;
        }
    }
    let mut late = late.lock().unwrap().clone();
    late.sort_unstable();
    let at = |q: f64| late[((late.len() - 1) as f64 * q) as usize];
    println!(
        "{} events; from the change to the receiver: p50 {} ms, p99 {} ms, max {} ms",
        late.len(),
        at(0.5),
        at(0.99),
        at(1.0)
    );
    Ok(())
}
