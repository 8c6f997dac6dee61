//! `kep-bench flood`: hostile clients for `bench/limits.sh`, on raw HTTP/1.1 connections to
//! one listener:
//!
//! - slowloris: a request head sent a byte a second, never finished;
//! - fat heads: 256 KiB of request head sent at once, never finished;
//! - stalled: a `--body-bytes` body sent but for its last byte, then nothing;
//! - bodies: whole `--body-bytes` bodies, one after another, as fast as the server takes
//!   them.
//!
//! Each of the first three reconnects a second after the server lets go of it, so that it
//! holds as many connections as it is given, rather than flooding the accept queue. At the
//! end it prints one JSON line: per kind, the connections opened, those the server closed,
//! and the statuses it answered.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

#[derive(clap::Args)]
pub struct Flood {
    /// The listener, host:port.
    #[arg(long)]
    addr: String,
    /// The request's method and path, as in `POST /api/rpc`.
    #[arg(long, default_value = "POST /")]
    request: String,
    /// Extra request header lines (`Authorization: Bearer …`); repeatable.
    #[arg(long)]
    header: Vec<String>,
    #[arg(long, default_value_t = 0)]
    slowloris: usize,
    #[arg(long, default_value_t = 0)]
    fat_heads: usize,
    #[arg(long, default_value_t = 0)]
    stalled: usize,
    #[arg(long, default_value_t = 0)]
    bodies: usize,
    #[arg(long, default_value_t = 1024 * 1024)]
    body_bytes: usize,
    #[arg(long, default_value_t = 60)]
    seconds: u64,
}

#[derive(Default, serde::Serialize)]
struct Tally {
    opened: u64,
    closed_by_server: u64,
    statuses: BTreeMap<String, u64>,
}

type Tallies = Arc<Mutex<BTreeMap<&'static str, Tally>>>;

fn count(tallies: &Tallies, kind: &'static str, f: impl FnOnce(&mut Tally)) {
    f(tallies.lock().unwrap().entry(kind).or_default());
}

pub async fn flood(args: Flood) -> anyhow::Result<()> {
    let head = {
        let mut h = format!("{} HTTP/1.1\r\nHost: bench\r\n", args.request);
        for line in &args.header {
            h.push_str(line);
            h.push_str("\r\n");
        }
        h
    };
    let body_head = Arc::new(format!(
        "{head}Connection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        args.body_bytes
    ));
    // JSON-looking filler: a string of spaces inside braces is what every body limit sees.
    let body: Arc<Vec<u8>> = Arc::new({
        let mut b = vec![b' '; args.body_bytes];
        if let Some(first) = b.first_mut() {
            *first = b'{';
        }
        if let Some(last) = b.last_mut() {
            *last = b'}';
        }
        b
    });
    let tallies: Tallies = Arc::default();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..args.slowloris {
        let (addr, tallies) = (args.addr.clone(), Arc::clone(&tallies));
        let head = head.clone();
        tasks.spawn(async move {
            // Spread the connects over a second, as a real attacker's would be.
            tokio::time::sleep(Duration::from_millis((i % 1000) as u64)).await;
            loop {
                let Ok(mut tcp) = TcpStream::connect(&addr).await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                count(&tallies, "slowloris", |t| t.opened += 1);
                for b in head.bytes().chain(b"X-Slow: ".iter().copied().cycle()) {
                    if tcp.write_all(&[b]).await.is_err() || closed(&mut tcp).await {
                        break;
                    }
                }
                count(&tallies, "slowloris", |t| t.closed_by_server += 1);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }
    for _ in 0..args.fat_heads {
        let (addr, tallies) = (args.addr.clone(), Arc::clone(&tallies));
        let fat = format!(
            "{head}{}",
            "X-Fat: 0123456789abcdef0123456789abcdef\r\n".repeat(6 * 1024)
        );
        tasks.spawn(async move {
            loop {
                let Ok(mut tcp) = TcpStream::connect(&addr).await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                count(&tallies, "fat heads", |t| t.opened += 1);
                if tcp.write_all(fat.as_bytes()).await.is_ok() {
                    let status = answer(&mut tcp).await;
                    count(&tallies, "fat heads", |t| {
                        *t.statuses.entry(status).or_default() += 1;
                    });
                }
                count(&tallies, "fat heads", |t| t.closed_by_server += 1);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }
    for _ in 0..args.stalled {
        let (addr, tallies) = (args.addr.clone(), Arc::clone(&tallies));
        let (body_head, body) = (Arc::clone(&body_head), Arc::clone(&body));
        tasks.spawn(async move {
            loop {
                let Ok(mut tcp) = TcpStream::connect(&addr).await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                count(&tallies, "stalled", |t| t.opened += 1);
                let sent = async {
                    tcp.write_all(body_head.as_bytes()).await?;
                    tcp.write_all(&body[..body.len().saturating_sub(1)]).await
                };
                if sent.await.is_ok() {
                    let status = answer(&mut tcp).await;
                    count(&tallies, "stalled", |t| {
                        *t.statuses.entry(status).or_default() += 1;
                    });
                }
                count(&tallies, "stalled", |t| t.closed_by_server += 1);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }
    for _ in 0..args.bodies {
        let (addr, tallies) = (args.addr.clone(), Arc::clone(&tallies));
        let (body_head, body) = (Arc::clone(&body_head), Arc::clone(&body));
        tasks.spawn(async move {
            loop {
                let Ok(mut tcp) = TcpStream::connect(&addr).await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let _ = tcp.set_nodelay(true);
                count(&tallies, "bodies", |t| t.opened += 1);
                let sent = async {
                    tcp.write_all(body_head.as_bytes()).await?;
                    tcp.write_all(&body).await
                };
                let status = match sent.await {
                    Ok(()) => answer(&mut tcp).await,
                    Err(_) => "write failed".into(),
                };
                count(&tallies, "bodies", |t| {
                    *t.statuses.entry(status).or_default() += 1;
                });
            }
        });
    }
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    tasks.abort_all();
    let tallies = std::mem::take(&mut *tallies.lock().unwrap());
    println!("{}", serde_json::to_string(&tallies)?);
    Ok(())
}

/// Whether the server has closed the connection, waiting a second for it to say so.
async fn closed(tcp: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    match tokio::time::timeout(Duration::from_secs(1), tcp.read(&mut buf)).await {
        Err(_) => false,
        Ok(Ok(0) | Err(_)) => true,
        // An answer (a 408, a 431) ends the request as well.
        Ok(Ok(_)) => true,
    }
}

/// The status of the server's answer, read to the end of the connection; `closed` when it
/// closed without one.
async fn answer(tcp: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let _ = tcp.read_to_end(&mut got).await;
    let text = String::from_utf8_lossy(&got);
    text.split(' ')
        .nth(1)
        .filter(|_| text.starts_with("HTTP/1.1 "))
        .unwrap_or("closed")
        .to_owned()
}
