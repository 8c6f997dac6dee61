//! `[gateway]`: the listener of endpoint calls and how calls are passed on.

use std::net::SocketAddr;

use kep_core::limits::Limits;
use serde::{Deserialize, Serialize};

/// `[gateway]` settings: the listener of endpoint calls (CONTRACT §0, §3).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct GatewaySettings {
    pub addr: SocketAddr,
    /// Whether the listener speaks TLS when kep has a certificate (`tls.cert_file` or
    /// `tls.self_signed`); false keeps it plain HTTP.
    pub tls: bool,
    /// Base of the endpoint URLs handed out; the listener's own address when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
    /// Proxy body size: a larger request body is 413.
    pub max_body_bytes: u64,
    /// Client body buffer size: a larger body is spooled to disk.
    pub body_buffer_bytes: u64,
    pub connect_timeout_s: u64,
    /// How long an instance may take to start answering.
    pub upstream_timeout_s: u64,
    /// How long an unused kept-alive HTTP/1.1 connection to an instance stays open.
    pub pool_idle_timeout_s: u64,
    /// Whether calls are counted: off, the monitoring numbers of calls stay at zero and the
    /// QPS and status alerts never fire.
    pub metrics: bool,
    /// Plain HTTP/1.1 calls take the hand-written fast path ([`h1`]); off, hyper and the
    /// router serve every call (to rule the fast path out when something looks wrong).
    pub fast_path: bool,
    /// Per endpoint (its API key), else per peer address.
    #[serde(flatten)]
    pub limits: Limits,
}

impl Default for GatewaySettings {
    fn default() -> Self {
        GatewaySettings {
            addr: SocketAddr::from(([127, 0, 0, 1], 8804)),
            tls: true,
            public_url: None,
            max_body_bytes: 20 * 1024 * 1024,
            body_buffer_bytes: 10 * 1024 * 1024,
            connect_timeout_s: 5,
            upstream_timeout_s: 60,
            pool_idle_timeout_s: 90,
            metrics: true,
            fast_path: true,
            // Clients wait on slow models with their connections open.
            limits: Limits {
                max_connections: 2048,
                ..Limits::default()
            },
        }
    }
}
