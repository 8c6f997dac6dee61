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

use axum::body::Bytes;
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
    let fat = Bytes::from(format!(
        "{head}{}",
        "X-Fat: 0123456789abcdef0123456789abcdef\r\n".repeat(6 * 1024)
    ));
    let body_head = Bytes::from(format!(
        "{head}Connection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        args.body_bytes
    ));
    // JSON-looking filler: a string of spaces inside braces is what every body limit sees.
    let body = Bytes::from({
        let mut b = vec![b' '; args.body_bytes];
        if let Some(first) = b.first_mut() {
            *first = b'{';
        }
        if let Some(last) = b.last_mut() {
            *last = b'}';
        }
        b
    });
    let stalled = body.slice(..body.len().saturating_sub(1));
    let tallies: Tallies = Arc::default();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..args.slowloris {
        let (addr, tallies) = (args.addr.clone(), Arc::clone(&tallies));
        let head = head.clone();
        tasks.spawn(async move {
            // Spread the connects over a second, as a real attacker's would be.
            tokio::time::sleep(Duration::from_millis((i % 1000) as u64)).await;
            loop {
                let mut tcp = connect(&addr, &tallies, "slowloris").await;
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
    let senders = [
        ("fat heads", args.fat_heads, vec![fat], true),
        (
            "stalled",
            args.stalled,
            vec![body_head.clone(), stalled],
            true,
        ),
        ("bodies", args.bodies, vec![body_head, body], false),
    ];
    for (kind, n, parts, held) in senders {
        for _ in 0..n {
            let (addr, tallies, parts) = (args.addr.clone(), Arc::clone(&tallies), parts.clone());
            tasks.spawn(async move {
                loop {
                    let mut tcp = connect(&addr, &tallies, kind).await;
                    let status = send(&mut tcp, &parts).await;
                    count(&tallies, kind, |t| {
                        *t.statuses.entry(status).or_default() += 1;
                    });
                    // What never finishes its request is let go of by the server.
                    if held {
                        count(&tallies, kind, |t| t.closed_by_server += 1);
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            });
        }
    }
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    tasks.abort_all();
    let tallies = std::mem::take(&mut *tallies.lock().unwrap());
    println!("{}", serde_json::to_string(&tallies)?);
    Ok(())
}

/// A connection to `addr`, retried every 100 ms while the listener refuses, and counted.
async fn connect(addr: &str, tallies: &Tallies, kind: &'static str) -> TcpStream {
    loop {
        if let Ok(tcp) = TcpStream::connect(addr).await {
            let _ = tcp.set_nodelay(true);
            count(tallies, kind, |t| t.opened += 1);
            return tcp;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Writes `parts` and reads the answer's status (`write failed` when the server stopped
/// reading and closed first).
async fn send(tcp: &mut TcpStream, parts: &[Bytes]) -> String {
    for part in parts {
        if tcp.write_all(part).await.is_err() {
            return "write failed".into();
        }
    }
    answer(tcp).await
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
