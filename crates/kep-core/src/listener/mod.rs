//! Listeners: binding (port 0 included), the address book, the operator token file,
//! serving with graceful shutdown and the limits of [`Limits`], the host names a listener
//! answers to ([`AllowedHosts`]), and the process's stop signals.

mod accept;
mod body;
mod connection;
mod files;
mod front;
mod hosts;
mod stream;
#[cfg(test)]
mod tests;
mod unrouted;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::limits::Limits;
use accept::{Acceptor, Share};
use body::BodyMemory;
pub use connection::Connection;
use connection::ConnectionLimits;
pub use files::{operator_token, write_addresses};
pub use front::{Front, FrontLimits, Handover};
pub use hosts::AllowedHosts;
pub use stream::Stream;
pub use unrouted::{Unrouted, operator_shape};

/// A bound listener and the address it got.
pub struct Bound {
    pub listener: TcpListener,
    pub addr: SocketAddr,
}

/// Why `what` could not bind `addr`; an address in use, most often another kep on the
/// default ports, says how to move them all.
pub fn not_bound(what: &str, addr: SocketAddr, e: std::io::Error) -> anyhow::Error {
    let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
        ": another kep? --port-base or KEP_PORT_BASE moves every listener (0: free ports)"
    } else {
        ""
    };
    anyhow::anyhow!("binding {what} to {addr}: {e}{hint}")
}

pub async fn bind(name: &str, addr: SocketAddr) -> anyhow::Result<Bound> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| not_bound(&format!("the {name} listener"), addr, e))?;
    let addr = listener.local_addr()?;
    Ok(Bound { listener, addr })
}

/// The URL the server hands out for a listener: the configured one, else its own address
/// (`https` when the listener speaks TLS).
pub fn public_url(configured: Option<&str>, addr: SocketAddr, tls: bool) -> String {
    match configured {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => format!("{}://{addr}", if tls { "https" } else { "http" }),
    }
}

/// Serves `app` until `shutdown` fires, then lets in-flight requests finish; HTTP/1.1,
/// HTTP/2 with prior knowledge, and upgrades (the WebSocket). `limits` bounds what clients
/// can hold: at most `max_connections` connections at once (an upgraded one included), a
/// request head of at most `max_header_bytes` within `header_read_timeout_s` (also the
/// longest a connection may sit idle between requests), no pause longer than
/// `body_read_timeout_s` within a body, and `body_memory_bytes` of bodies being received
/// ([`Charged`]). Every request carries its peer's address (`ConnectInfo<SocketAddr>`,
/// read by [`crate::limits::Peer`]).
pub async fn serve(
    bound: Bound,
    app: impl Into<App>,
    limits: Limits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let App {
        router,
        tls,
        front,
        workers,
        unrouted,
        http2_max_frame_bytes,
    } = app.into();
    let timeout = |s: u64| (s > 0).then(|| Duration::from_secs(s));
    // hyper's floor: its buffer must hold the smallest head it reads.
    let max_head = limits.max_header_bytes.max(8192);
    let conn = ConnectionLimits {
        head: timeout(limits.header_read_timeout_s),
        body: timeout(limits.body_read_timeout_s),
        memory: BodyMemory::new(limits.body_memory_bytes),
        max_head: max_head as usize,
    };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(conn.head)
        .max_buf_size(max_head as usize);
    builder
        .http2()
        .max_header_list_size(max_head)
        .max_frame_size(http2_max_frame_bytes);
    let acceptor = Acceptor {
        builder: Arc::new(builder),
        slots: (limits.max_connections > 0)
            .then(|| Arc::new(Semaphore::new(limits.max_connections as usize))),
        tls: tls.map(|tls| tls.acceptor()),
        front,
        router,
        conn,
        unrouted,
        shutdown,
        share: None,
    };
    if workers == 0 {
        acceptor.accept(&bound.listener).await;
        return Ok(());
    }
    // Each worker accepts from the same socket and serves what it accepted on its own
    // thread: a connection never moves between threads, and no thread wakes another.
    let listener = bound.listener.into_std()?;
    let share = Arc::new(Share {
        open: (0..workers).map(|_| AtomicUsize::new(0)).collect(),
        changed: Notify::new(),
    });
    let mut done = Vec::with_capacity(workers);
    for id in 1..=workers {
        let (listener, mut acceptor) = (listener.try_clone()?, acceptor.clone());
        acceptor.share = Some((Arc::clone(&share), id - 1));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        done.push(rx);
        std::thread::Builder::new()
            .name(format!("kep-worker-{id}"))
            .spawn(move || {
                WORKER.set(id);
                runtime.block_on(async move {
                    match TcpListener::from_std(listener) {
                        Ok(listener) => acceptor.accept(&listener).await,
                        Err(e) => tracing::error!(error = %e, "a worker could not listen"),
                    }
                    drop(tx);
                });
            })?;
    }
    for rx in done {
        let _ = rx.await;
    }
    Ok(())
}

thread_local! {
    static WORKER: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Which of a listener's worker threads runs the caller (1, 2 …), or 0 outside them: what
/// a connection to another server made on one worker is kept for (it is registered with
/// that worker's runtime).
pub fn worker() -> usize {
    WORKER.get()
}

/// What a listener serves: its routes, optionally a [`Front`] that reads each connection
/// first, and on how many threads.
pub struct App {
    pub router: Router,
    /// TLS for every connection, before anything else reads it; `None`, plain HTTP.
    pub tls: Option<crate::tls::ServerTls>,
    pub front: Option<Arc<dyn Front>>,
    /// Threads of the listener's own, each running its connections on a runtime of its
    /// own, as nginx's worker processes do; 0: the connections are tasks of the caller's
    /// runtime.
    pub workers: usize,
    /// How its API words a refusal made before routing (a head too large or malformed).
    pub unrouted: Unrouted,
    /// The largest HTTP/2 frame a client may send; `None`, hyper's 16 KiB. Larger frames
    /// cost each connection a buffer that size while one is read, and spare a listener
    /// that takes large bodies over HTTP/2 (the gateway's tensors) a frame every 16 KiB.
    pub http2_max_frame_bytes: Option<u32>,
}

impl App {
    /// `router` on the caller's runtime, its refusals before routing worded by `unrouted`.
    pub fn new(router: Router, unrouted: Unrouted) -> App {
        App {
            unrouted,
            ..App::from(router)
        }
    }
}

/// A router of the operator API's shape.
impl From<Router> for App {
    fn from(router: Router) -> App {
        App {
            router,
            tls: None,
            front: None,
            workers: 0,
            unrouted: operator_shape,
            http2_max_frame_bytes: None,
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
