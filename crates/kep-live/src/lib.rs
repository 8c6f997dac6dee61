//! The live-streaming admin API of seed 000: Provision and the Room methods over JSON-RPC
//! on the live listener, participants over the WebSocket `GET /api/ws`, and the operator's
//! live-service calls on the admin listener.

mod access;
pub mod api;
mod error;
mod provision;
mod rooms;
mod store;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kep_core::limits::{Limiter, Limits};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use error::LiveError;

/// `[live]` settings (CONTRACT §1); durations in seconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct LiveSettings {
    pub addr: SocketAddr,
    /// The `api` of a provision result; defaults to `http://<addr>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
    /// Step 2 of Provision must come this long after the step that issued its nonce.
    pub provision_window_s: u64,
    pub token_ttl_s: u64,
    pub empty_room_grace_s: u64,
    pub reconnect_grace_s: u64,
    /// A participant socket that has not joined by then is closed.
    pub join_timeout_s: u64,
    pub body_limit_bytes: usize,
    /// Most targets in one `Room.KickParticipant` or `Room.InactiveStream` call.
    pub max_targets: usize,
    pub external_verifier_timeout_s: u64,
    /// A participant that does not take its messages within this long is disconnected.
    pub send_timeout_s: u64,
    /// Per service (a Room call's token; a participant's join), else per peer address.
    #[serde(flatten)]
    pub limits: Limits,
}

impl Default for LiveSettings {
    fn default() -> Self {
        LiveSettings {
            addr: SocketAddr::from(([127, 0, 0, 1], 8801)),
            public_url: None,
            provision_window_s: 5,
            token_ttl_s: 3600,
            empty_room_grace_s: 0,
            reconnect_grace_s: 0,
            join_timeout_s: 10,
            body_limit_bytes: 1024 * 1024,
            max_targets: 1000,
            external_verifier_timeout_s: 5,
            send_timeout_s: 10,
            limits: Limits {
                // Participant sockets stay open: 10,000 of them is the benchmark's load.
                max_connections: 12_288,
                ..Limits::default()
            },
        }
    }
}

pub(crate) struct Live {
    settings: LiveSettings,
    access: access::Access,
    provisioner: provision::Provisioner,
    rooms: Arc<rooms::Rooms>,
    limiter: Limiter,
    shutdown: CancellationToken,
    sockets: TaskTracker,
}

/// The running live service; cheap to clone.
#[derive(Clone)]
pub struct LiveService(Arc<Live>);

impl LiveService {
    /// Opens `live.db` under `data_dir` and loads the services and tokens. `public_url` is
    /// the live listener's, handed out as `api`; `shutdown` closes participant sockets.
    pub async fn start(
        settings: LiveSettings,
        data_dir: &Path,
        public_url: String,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Self> {
        let pool = kep_core::storage::open(data_dir, "live", &store::MIGRATOR).await?;
        let access = access::Access::load(store::Store::new(pool)).await?;
        let provisioner = provision::Provisioner::new(
            Duration::from_secs(settings.provision_window_s),
            settings.token_ttl_s,
            public_url,
            Duration::from_secs(settings.external_verifier_timeout_s),
        );
        let rooms = Arc::new(rooms::Rooms::new(Duration::from_secs(
            settings.empty_room_grace_s,
        )));
        Ok(LiveService(Arc::new(Live {
            limiter: Limiter::new(&settings.limits),
            settings,
            access,
            provisioner,
            rooms,
            shutdown,
            sockets: TaskTracker::new(),
        })))
    }

    /// The live listener's routes: `POST /api/rpc`, `GET /api/ws`.
    pub fn router(&self) -> axum::Router {
        api::router(self.clone())
    }

    /// The operator routes under `/admin/v1/live`, to be guarded by the operator token.
    pub fn admin_router(&self) -> axum::Router {
        api::operator::router(self.clone())
    }

    /// After shutdown fired: waits until every participant socket got its close frame.
    pub async fn drain(&self) {
        self.0.sockets.close();
        self.0.sockets.wait().await;
    }
}
