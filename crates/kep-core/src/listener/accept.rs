//! Accepting: a slot under `max_connections` first, then the socket; with worker threads,
//! connections dealt out evenly among them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::connection::{Connection, ConnectionLimits, connection};
use super::front::Front;
use super::stream::Stream;

/// What accepts a listener's connections and serves them.
#[derive(Clone)]
pub(super) struct Acceptor {
    pub(super) builder: Arc<auto::Builder<TokioExecutor>>,
    pub(super) slots: Option<Arc<Semaphore>>,
    pub(super) tls: Option<tokio_rustls::TlsAcceptor>,
    pub(super) front: Option<Arc<dyn Front>>,
    pub(super) router: Router,
    pub(super) conn: ConnectionLimits,
    pub(super) unrouted: super::Unrouted,
    pub(super) shutdown: CancellationToken,
    /// A worker's place among its listener's workers.
    pub(super) share: Option<(Arc<Share>, usize)>,
}

/// The connections each worker of a listener has open. A worker accepts only while it has
/// no more than the fewest: a burst of connections (a load tool's, a client pool's) is
/// dealt out evenly rather than taken by whichever thread woke first.
pub(super) struct Share {
    pub(super) open: Box<[AtomicUsize]>,
    pub(super) changed: Notify,
}

impl Share {
    pub(super) async fn my_turn(&self, me: usize) {
        loop {
            // Registered before the counts are read, so no change between goes unseen.
            let changed = self.changed.notified();
            let fewest = self.open.iter().map(|n| n.load(Ordering::Acquire)).min();
            if fewest.is_none_or(|fewest| self.open[me].load(Ordering::Acquire) <= fewest) {
                return;
            }
            changed.await;
        }
    }

    pub(super) fn add(self: &Arc<Self>, me: usize) -> Opened {
        self.open[me].fetch_add(1, Ordering::AcqRel);
        self.changed.notify_waiters();
        Opened(Arc::clone(self), me)
    }
}

/// A worker's count of one open connection.
pub(super) struct Opened(Arc<Share>, usize);

impl Drop for Opened {
    fn drop(&mut self) {
        self.0.open[self.1].fetch_sub(1, Ordering::AcqRel);
        self.0.changed.notify_waiters();
    }
}

impl Acceptor {
    /// Accepts until `shutdown` fires, then waits for the connections it accepted.
    pub(super) async fn accept(self, listener: &TcpListener) {
        let connections = TaskTracker::new();
        loop {
            if let Some((share, me)) = &self.share {
                tokio::select! {
                    biased;
                    _ = self.shutdown.cancelled() => break,
                    () = share.my_turn(*me) => {}
                }
            }
            // A slot first, so that past the limit connections wait in the accept queue.
            let slot = match &self.slots {
                Some(slots) => tokio::select! {
                    biased;
                    _ = self.shutdown.cancelled() => break,
                    slot = Arc::clone(slots).acquire_owned() => Some(slot.expect("never closed")),
                },
                None => None,
            };
            let (tcp, peer) = tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        accept_failed(e).await;
                        continue;
                    }
                },
            };
            // Events and answers are small writes: Nagle's algorithm would hold them back.
            let _ = tcp.set_nodelay(true);
            let io = Connection {
                stream: Some(Stream::Plain(tcp)),
                slot,
                opened: self.share.as_ref().map(|(share, me)| share.add(*me)),
            };
            connections.spawn(connection(self.clone(), (io, peer)));
        }
        connections.close();
        connections.wait().await;
    }
}

/// A refused or reset connection is the peer's business; anything else (out of file
/// descriptors, say) is logged and retried after a second, as hyper's own server did.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
