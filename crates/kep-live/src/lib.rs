//! The live-streaming admin API of seed 000: Provision and the Room methods over JSON-RPC
//! on the live listener, participants over the WebSocket `GET /api/ws`, and the operator's
//! live-service calls on the admin listener.

mod access;
pub mod api;
mod declared;
mod error;
pub mod ids;
mod join_token;
mod media;
mod metrics;
mod provision;
mod rooms;
mod store;
mod webhooks;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kep_core::activity::IdField;
use kep_core::limits::{Limiter, Limits};
use kep_core::listener::App;
use kep_core::platform::with_bearer;
use kep_core::service::{Context, ListenerSettings, Service};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use utoipa::OpenApi as _;

pub use error::LiveError;

/// `[live]` settings (CONTRACT §1); durations in seconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct LiveSettings {
    pub addr: SocketAddr,
    /// Whether the listener speaks TLS when kep has a certificate (`tls.cert_file` or
    /// `tls.self_signed`); false keeps it plain HTTP.
    pub tls: bool,
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
    /// The one UDP address of all media (WHIP and WHEP sessions); port 0 picks one.
    pub media_addr: SocketAddr,
    /// The address put in SDP answers instead of `media_addr`'s, behind NAT.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media_public_ip: Option<std::net::IpAddr>,
    /// Webhook deliveries: attempts per event (the first included) …
    pub webhook_attempts: u32,
    /// … the first wait between them, doubling (with jitter) up to a minute …
    pub webhook_retry_ms: u64,
    /// … and the age past which an event is given up instead of tried again.
    pub webhook_max_age_s: u64,
    /// How long one delivery may take.
    pub webhook_timeout_ms: u64,
    /// Events waiting per room; one more is given up at once.
    pub webhook_queue: usize,
    /// Per service (a Room call's token; a participant's join), else per peer address.
    #[serde(flatten)]
    pub limits: Limits,
}

impl Default for LiveSettings {
    fn default() -> Self {
        LiveSettings {
            addr: SocketAddr::from(([127, 0, 0, 1], 8801)),
            tls: true,
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
            media_addr: SocketAddr::from(([127, 0, 0, 1], 8805)),
            media_public_ip: None,
            webhook_attempts: 30,
            webhook_retry_ms: 500,
            webhook_max_age_s: 3600,
            webhook_timeout_ms: 5000,
            webhook_queue: 100_000,
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
    access: Arc<access::Access>,
    provisioner: provision::Provisioner,
    rooms: Arc<rooms::Rooms>,
    /// The Room methods, on this node's rooms and the other nodes'.
    room_methods: rooms::RoomMethods,
    /// The other nodes: asked where a room's media runs.
    cluster: kep_core::cluster::Cluster,
    media: Arc<media::Media>,
    limiter: Limiter,
    shutdown: CancellationToken,
    sockets: TaskTracker,
    activity: kep_core::activity::ServiceActivity,
    webhooks: Arc<webhooks::Webhooks>,
}

/// What ends with a media session: its datagrams' route, a publisher's stream, and the
/// participant's presence when that was all that kept it in the room.
async fn sessions_ended(
    mut gone: tokio::sync::mpsc::UnboundedReceiver<media::Gone>,
    media: Arc<media::Media>,
    rooms: Arc<rooms::Rooms>,
) {
    while let Some(g) = gone.recv().await {
        media.forget(&g);
        let (service, room) = &g.room;
        let stream = g.publisher.then_some(g.stream_id);
        rooms.media_ended(service, room, &g.participant_id, stream);
    }
}

/// The running live service; cheap to clone.
#[derive(Clone)]
pub struct LiveService(Arc<Live>);

impl LiveService {
    /// The bound media address (UDP).
    pub fn media_addr(&self) -> SocketAddr {
        self.0.media.local_addr()
    }
}

impl Service for LiveService {
    type Settings = LiveSettings;
    const NAME: &'static str = "live";
    const LISTENER: &'static str = "live";
    const OBJECT_IDS: &'static [IdField] = &[
        |i| &mut i.service_id,
        |i| &mut i.room_id,
        |i| &mut i.participant_id,
    ];

    fn listener(settings: &LiveSettings) -> ListenerSettings {
        ListenerSettings {
            addr: settings.addr,
            public_url: settings.public_url.clone(),
            limits: settings.limits,
            tls: settings.tls,
        }
    }

    /// Opens `live.db` and loads the services and tokens. The listener's public URL is
    /// handed out as `api`; shutdown closes participant sockets.
    async fn start(settings: LiveSettings, ctx: &Context) -> anyhow::Result<Self> {
        metrics::register();
        let store = store::open(ctx).await?;
        let access =
            access::Access::load(Arc::clone(&store), ctx.clock.clone(), ctx.cluster.clone())
                .await?;
        let webhooks = Arc::new(
            webhooks::Webhooks::start(
                Arc::clone(&store),
                webhooks::DeliveryPolicy {
                    outbox: webhooks::policy(
                        settings.webhook_attempts,
                        settings.webhook_retry_ms,
                        settings.webhook_queue,
                    ),
                    max_age: Duration::from_secs(settings.webhook_max_age_s),
                    timeout: Duration::from_millis(settings.webhook_timeout_ms),
                },
                ctx,
            )
            .await?,
        );
        let provisioner = provision::Provisioner::new(
            Duration::from_secs(settings.provision_window_s),
            settings.token_ttl_s,
            ctx.public_url.clone(),
            Duration::from_secs(settings.external_verifier_timeout_s),
            ctx.clock.clone(),
            Arc::clone(&store),
        );
        let (media, gone) = media::Media::bind(
            settings.media_addr,
            settings.media_public_ip,
            ctx.tasks.clone(),
            ctx.shutdown.clone(),
        )
        .await?;
        tracing::info!(addr = %media.local_addr(), "media listening (UDP)");
        let media = Arc::new(media);
        let (here, url) = (Arc::downgrade(&media), ctx.public_url.clone());
        ctx.cluster.handle(
            media::WHERE,
            Arc::new(move |ask| {
                let ask: serde_json::Value = serde_json::from_str(&ask).unwrap_or_default();
                let room: media::RoomKey = (
                    Arc::from(ask["service"].as_str().unwrap_or_default()),
                    ask["room"].as_str().unwrap_or_default().into(),
                );
                let answer = match here.upgrade() {
                    Some(media) if media.has_room(&room) => Ok(url.clone()),
                    _ => Err("not here".to_owned()),
                };
                Box::pin(std::future::ready(answer))
            }),
        );
        let activity = ctx.activity.of::<Self>();
        let mut rooms = rooms::Rooms::new(
            Duration::from_secs(settings.empty_room_grace_s),
            ctx.tasks.clone(),
            ctx.shutdown.clone(),
        )
        .with_media(Arc::clone(&media))
        .with_activity(activity.clone())
        .with_webhooks(Arc::clone(&webhooks));
        let relay = rooms::relay_channel(&ctx.cluster);
        if let Some((tx, _)) = &relay {
            rooms = rooms.with_relay(tx.clone(), ctx.cluster.slot());
        }
        let rooms = Arc::new(rooms);
        if let Some((_, events)) = relay {
            let relaying = rooms::relay(Arc::downgrade(&rooms), ctx.cluster.clone(), events);
            ctx.spawn(relaying);
        }
        ctx.spawn(sessions_ended(gone, Arc::clone(&media), Arc::clone(&rooms)));
        Ok(LiveService(Arc::new(Live {
            limiter: Limiter::new(&settings.limits),
            settings,
            access,
            provisioner,
            room_methods: rooms::RoomMethods::new(Arc::clone(&rooms), ctx.cluster.clone()),
            cluster: ctx.cluster.clone(),
            rooms,
            media,
            shutdown: ctx.shutdown.clone(),
            sockets: TaskTracker::new(),
            activity,
            webhooks,
        })))
    }

    /// `POST /api/rpc`, `GET /api/ws`.
    fn app(&self) -> App {
        App::new(api::router(self.clone()), error::unrouted)
    }

    /// The operator routes under `/admin/v1/live`.
    fn admin_router(&self) -> axum::Router {
        api::operator::router(self.clone())
    }

    fn admin_doc() -> utoipa::openapi::OpenApi {
        api::operator::LiveAdminDoc::openapi()
    }

    fn api_doc() -> Option<utoipa::openapi::OpenApi> {
        Some(with_bearer(api::LiveApiDoc::openapi()))
    }

    /// Waits until every participant socket got its close frame.
    fn declares(&self) -> Option<Arc<dyn kep_core::declared::Declares>> {
        Some(Arc::new(declared::Declared(Arc::clone(&self.0))))
    }

    async fn stop(&self) {
        self.0.sockets.close();
        self.0.sockets.wait().await;
    }
}
