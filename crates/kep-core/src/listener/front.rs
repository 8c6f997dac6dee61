//! A listener's own server in front of hyper (the gateway's HTTP/1.1 fast path).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use tokio_util::sync::CancellationToken;

use super::connection::Connection;

/// A listener's own server for the requests it can answer faster than the router (the
/// gateway's plain HTTP/1.1 calls): it serves a connection for as long as it can, then
/// hands it over, with what it read and did not answer, for hyper and the router to serve
/// the rest. It keeps to the listener's limits as hyper does.
pub trait Front: Send + Sync + 'static {
    /// Serves `io` until it is closed (`None`) or handed over.
    fn serve(
        self: Arc<Self>,
        io: Connection,
        limits: FrontLimits,
    ) -> Pin<Box<dyn Future<Output = Option<Handover>> + Send>>;
}

/// The listener's limits, as a [`Front`] must keep them, and the connection's peer.
pub struct FrontLimits {
    /// Who connected: what the router's requests carry as `ConnectInfo`.
    pub peer: SocketAddr,
    /// For a request's head to arrive whole, and for a kept-alive connection to start one.
    pub head_timeout: Option<Duration>,
    /// The longest a request body may send nothing.
    pub body_timeout: Option<Duration>,
    /// The longest request head; a longer one is handed over (hyper answers 431).
    pub max_head: usize,
    /// Fired when the listener stops: finish the request under way, start no other.
    pub shutdown: CancellationToken,
}

/// A connection a [`Front`] hands over, with the bytes it read and did not answer.
pub struct Handover {
    pub io: Connection,
    pub read: Bytes,
}
