//! Load helpers that `bench/*.sh` drive against a real `kep serve`.

mod flood;
mod infer;
// Not in a test build: the fixture's own tests would come with it.
#[cfg(all(feature = "jasmin", not(test)))]
mod jasmin;
mod media;

use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use kep_api::live::{EventKind, ServerMessage};
use kep_client::live::{LiveClient, Participant};

mod smpp;
mod soak;
mod webhooks;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(clap::Args, Clone)]
struct Service {
    /// The live listener, http://…
    #[arg(long)]
    live: String,
    #[arg(long)]
    service_id: String,
    #[arg(long)]
    service_secret: String,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve fixed bytes on POST /api/rpc: the ceiling a real handler is compared with.
    Ceiling {
        #[arg(long)]
        addr: String,
        /// File holding the exact response body.
        #[arg(long)]
        body: std::path::PathBuf,
    },
    /// A model-serving instance stand-in for `bench/serving.sh`: answers every request (any
    /// method, any path) with the same small JSON body, on 127.0.0.1:$PORT as kep starts it.
    Upstream {
        /// Where to listen; default 127.0.0.1:$PORT.
        #[arg(long)]
        addr: Option<String>,
    },
    /// Join `rooms` × `per_room` participants (each publishing one stream) and hold them
    /// until stdin closes or the process is killed; prints "ready" once all joined.
    Hold {
        #[command(flatten)]
        service: Service,
        #[arg(long, default_value_t = 1)]
        rooms: usize,
        #[arg(long, default_value_t = 100)]
        per_room: usize,
        #[arg(long, default_value = "bench")]
        prefix: String,
    },
    /// Hostile clients of one listener for `bench/limits.sh`: slowloris heads, stalled and
    /// whole large bodies.
    Flood(flood::Flood),
    /// One model's inferences through the gateway over KServe v2 REST or Triton's gRPC.
    Infer(infer::InferArgs),
    /// A WHIP publisher and steps of WHEP subscribers (str0m peers): what kep forwards per
    /// core, loss, RSS per subscriber, join to first frame.
    Media(media::MediaArgs),
    /// Join `participants` to one room, call Room.DestroyRoom, and report the time from the
    /// call until each participant got RoomDestroyed.
    Destroy {
        #[command(flatten)]
        service: Service,
        #[arg(long)]
        token: String,
        #[arg(long, default_value_t = 1000)]
        participants: usize,
        #[arg(long, default_value = "destroy-me")]
        room: String,
    },
    /// Mixed traffic against every service at a steady rate, sampling kep's memory,
    /// descriptors and latencies; fails on an error or on growth.
    Soak(soak::SoakArgs),
    /// Participants joining and leaving rooms, cycle after cycle.
    Churn(webhooks::ChurnArgs),
    /// A webhook receiver that measures how late each event arrives.
    Receive(webhooks::ReceiveArgs),
    /// One ESME bind (kep's `kep_smpp::Esme`) submitting N Korean SMS as fast as its window
    /// lets it; prints submit_sm/s once every receipt came.
    EsmeSubmit(smpp::SubmitArgs),
    /// Jasmin as the messaging tests' fixture starts it (feature `jasmin`), until killed;
    /// prints `ready <smpp port> <system_id> <password>`.
    #[cfg(all(feature = "jasmin", not(test)))]
    Jasmin,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Cmd::Ceiling { addr, body } => ceiling(&addr, body).await,
        Cmd::Upstream { addr } => upstream(addr).await,
        Cmd::Hold {
            service,
            rooms,
            per_room,
            prefix,
        } => hold(service, rooms, per_room, &prefix).await,
        Cmd::Destroy {
            service,
            token,
            participants,
            room,
        } => destroy(service, &token, participants, &room).await,
        Cmd::Soak(args) => soak::soak(args).await,
        Cmd::Flood(args) => flood::flood(args).await,
        Cmd::Infer(args) => infer::run(args).await,
        Cmd::Media(args) => media::media(args).await,
        Cmd::Churn(args) => webhooks::churn(args).await,
        Cmd::Receive(args) => webhooks::receive(args).await,
        Cmd::EsmeSubmit(args) => smpp::submit(args).await,
        #[cfg(all(feature = "jasmin", not(test)))]
        Cmd::Jasmin => jasmin::jasmin().await,
    }
}

async fn ceiling(addr: &str, body: std::path::PathBuf) -> anyhow::Result<()> {
    let bytes = axum::body::Bytes::from(std::fs::read(body)?);
    let app = axum::Router::new().route(
        "/api/rpc",
        axum::routing::post(move || {
            let bytes = bytes.clone();
            async move {
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    bytes,
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("ready {}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}

async fn upstream(addr: Option<String>) -> anyhow::Result<()> {
    let addr = match addr {
        Some(a) => a,
        None => format!(
            "127.0.0.1:{}",
            std::env::var("PORT").context("--addr or PORT is needed")?
        ),
    };
    const ANSWER: &[u8] = br#"{"model":"bench","outputs":[[0.25,0.5,0.25]],"ok":true}"#;
    // The body is read whole (as a real model server does) so the connection stays usable.
    let app = axum::Router::new()
        .fallback(|_body: axum::body::Bytes| async {
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                axum::body::Bytes::from_static(ANSWER),
            )
        })
        // The gateway's bodies go up to 20 MB (bench/limits.sh sends them).
        .layer(axum::extract::DefaultBodyLimit::disable());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("ready {}", listener.local_addr()?);
    use axum::serve::ListenerExt as _;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).await?;
    Ok(())
}

/// Joins many participants, a bounded number at a time so the server's accept queue holds.
async fn join_all(
    service: &Service,
    names: Vec<(String, String)>,
) -> anyhow::Result<Vec<Participant>> {
    use futures_util::StreamExt as _;
    let joined: Vec<anyhow::Result<Participant>> = futures_util::stream::iter(names)
        .map(|(room, pid)| {
            let s = service.clone();
            async move {
                Participant::join(&s.live, &s.service_id, &s.service_secret, &room, Some(&pid))
                    .await
                    .with_context(|| format!("joining {room}/{pid}"))
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    joined.into_iter().collect()
}

async fn hold(service: Service, rooms: usize, per_room: usize, prefix: &str) -> anyhow::Result<()> {
    let names = (0..rooms)
        .flat_map(|r| (0..per_room).map(move |p| (format!("{prefix}-{r}"), format!("p{p}"))))
        .collect();
    let started = Instant::now();
    let mut participants = join_all(&service, names).await?;
    if rooms == 1 {
        for p in &mut participants {
            p.publish().await?;
        }
    }
    println!(
        "ready {} participants in {:.1} s",
        participants.len(),
        started.elapsed().as_secs_f64()
    );
    // Drain every socket so the server never blocks on a full send buffer.
    let tasks: Vec<_> = participants
        .into_iter()
        .map(|mut p| tokio::spawn(async move { while let Ok(Ok(_)) = p.next().await {} }))
        .collect();
    tokio::signal::ctrl_c().await?;
    drop(tasks);
    Ok(())
}

async fn destroy(service: Service, token: &str, n: usize, room: &str) -> anyhow::Result<()> {
    let names = (0..n).map(|p| (room.to_owned(), format!("d{p}"))).collect();
    let participants = join_all(&service, names).await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for mut p in participants {
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                match p.next().await {
                    Ok(Ok(ServerMessage::Event(e))) if e.event == EventKind::RoomDestroyed => {
                        let _ = tx.send(Instant::now());
                        return;
                    }
                    Ok(Ok(_)) => continue,
                    _ => return,
                }
            }
        }));
    }
    drop(tx);
    // Let the join events of the last arrivals drain first.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let client = LiveClient::new(&service.live).with_token(token);
    let t0 = Instant::now();
    client.destroy_room(room).await?;
    let call = t0.elapsed();
    let mut lat = Vec::with_capacity(n);
    while let Some(at) = rx.recv().await {
        lat.push(at.duration_since(t0));
    }
    lat.sort();
    anyhow::ensure!(
        lat.len() == n,
        "only {} of {n} participants got RoomDestroyed",
        lat.len()
    );
    let pct = |q: f64| {
        lat[((lat.len() as f64 * q).ceil() as usize).saturating_sub(1)].as_secs_f64() * 1000.0
    };
    println!(
        "destroy {n} participants: call {:.2} ms; RoomDestroyed p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        call.as_secs_f64() * 1000.0,
        pct(0.50),
        pct(0.99),
        pct(1.0)
    );
    Ok(())
}
