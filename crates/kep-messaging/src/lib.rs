//! The text-message sending API of seed 002 on the messaging listener: OAuth 2.0 client
//! credentials, XMS sends, a durable delivery pipeline, search and detail; and the
//! operator's clients and outbox read-back on the admin listener.

pub mod api;
pub mod carriers;
mod clients;
mod declared;
mod error;
mod ids;
mod kinds;
mod metrics;
mod oauth;
mod pipeline;
mod rcs;
mod results;
mod search;
mod send;
mod store;
mod text;
mod uids;
mod uploads;
mod xms;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kep_core::activity::{IdField, ServiceActivity};
use kep_core::clock::Clock;
use kep_core::limits::{Limiter, Limits};
use kep_core::listener::App;
use kep_core::platform::with_bearer;
use kep_core::retry::Backoff;
use kep_core::service::{Context, ListenerSettings, Service};
use serde::{Deserialize, Serialize};
use utoipa::OpenApi as _;

pub use error::{MessagingError, OAuthError};

/// How text is counted against its limits (CONTRACT §4): CP949 bytes for XMS, and RCS text's
/// bytes. Public for the fuzz targets.
pub mod counting {
    pub use crate::rcs::rcs_len;
    pub use crate::text::{check_text, cp949_len};
}

/// `[messaging]` settings (CONTRACT §4).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct MessagingSettings {
    pub addr: SocketAddr,
    /// Whether the listener speaks TLS when kep has a certificate (`tls.cert_file` or
    /// `tls.self_signed`); false keeps it plain HTTP.
    pub tls: bool,
    /// How carriers reach this listener: the base of the dlr-url an HTTP carrier is given.
    pub public_url: Option<String>,
    /// Access token lifetime (`expires_in`).
    pub token_ttl_s: u64,
    /// IANA name of the service time zone: dates in bodies, times in answers.
    pub time_zone: String,
    /// The built-in carrier's delay per hand-over (`KEP_SIMULATOR_DELAY_MS`).
    pub simulator_delay_ms: u64,
    /// Messages handed to the carrier at once.
    pub dispatch_concurrency: usize,
    /// A claimed message not finished within this is claimed again (a crash, say).
    pub dispatch_lease_s: u64,
    /// A message whose carriers cannot be reached is tried again this long, then ends 520.
    pub carrier_retry_s: u64,
    pub dispatch_backoff_ms: u64,
    /// An acknowledged hand-over whose delivery receipts do not come by then ends 520.
    pub receipt_timeout_s: u64,
    /// `[[messaging.carriers]]`: tried in order; none: the simulator takes everything.
    pub carriers: Vec<carriers::CarrierSettings>,
    pub body_limit_bytes: usize,
    /// A result group not completed within this goes back to the pool.
    pub results_lease_s: u64,
    /// An uploaded file is usable this long (`expiry_date`), then swept.
    pub upload_ttl_s: u64,
    pub upload_sweep_interval_s: u64,
    /// Per OAuth client (its access token; at the token endpoint, its credentials), else
    /// per peer address.
    #[serde(flatten)]
    pub limits: Limits,
}

impl Default for MessagingSettings {
    fn default() -> Self {
        MessagingSettings {
            addr: SocketAddr::from(([127, 0, 0, 1], 8803)),
            tls: true,
            public_url: None,
            token_ttl_s: 21_600,
            time_zone: "Asia/Seoul".into(),
            simulator_delay_ms: 200,
            // Sleeping hand-overs are cheap; at 200 ms each, 10,000/s needs 2,000 at once.
            dispatch_concurrency: 4096,
            dispatch_lease_s: 30,
            carrier_retry_s: 600,
            dispatch_backoff_ms: 500,
            // SMSCs keep an undelivered message for a day or two (its validity period).
            receipt_timeout_s: 86_400,
            carriers: Vec::new(),
            body_limit_bytes: 1024 * 1024,
            results_lease_s: 300,
            upload_ttl_s: 7 * 24 * 3600,
            upload_sweep_interval_s: 60,
            // Customers' servers send from many connections at once.
            limits: Limits {
                max_connections: 2048,
                ..Limits::default()
            },
        }
    }
}

pub(crate) struct Messaging {
    settings: MessagingSettings,
    store: Arc<dyn store::Store>,
    zone: uids::ServiceZone,
    /// The wall clock of every stored and answered date (the platform's).
    clock: Clock,
    uids: uids::Uids,
    dispatcher: Arc<pipeline::Dispatcher<carriers::Carriers>>,
    writer: pipeline::writer::Writer,
    /// Where HTTP carriers' receipts (their dlr callbacks) go.
    receipts: tokio::sync::mpsc::UnboundedSender<carriers::CarrierReceipt>,
    uploads: Arc<uploads::Uploads>,
    tokens: Arc<oauth::Tokens>,
    limiter: Limiter,
    activity: ServiceActivity,
}

/// The running messaging service; cheap to clone.
#[derive(Clone)]
pub struct MessagingService(Arc<Messaging>);

impl MessagingService {
    /// Sets the gauges of what the service holds now (the messages not yet at a final
    /// status): called at each scrape of `/metrics`.
    pub async fn observe(&self) {
        match self.0.store.queued().await {
            Ok(n) => ::metrics::gauge!(metrics::QUEUE_DEPTH).set(n as f64),
            Err(e) => tracing::warn!(error = %e, "counting the queued messages"),
        }
        self.0.dispatcher.carrier().observe();
    }
}

impl Service for MessagingService {
    type Settings = MessagingSettings;
    const NAME: &'static str = "messaging";
    const LISTENER: &'static str = "messaging";
    const OBJECT_IDS: &'static [IdField] = &[|i| &mut i.client_id, |i| &mut i.uid];

    fn listener(settings: &MessagingSettings) -> ListenerSettings {
        ListenerSettings {
            addr: settings.addr,
            public_url: settings.public_url.clone(),
            limits: settings.limits,
            tls: settings.tls,
        }
    }

    /// Opens `messaging.db` and starts the dispatcher, which first resumes every accepted
    /// message that did not reach a final status.
    async fn start(settings: MessagingSettings, ctx: &Context) -> anyhow::Result<Self> {
        let store = store::open(ctx).await?;
        let zone = uids::ServiceZone::new(&settings.time_zone)?;
        let (receipts, receipts_rx) = tokio::sync::mpsc::unbounded_channel();
        let dlr = carriers::http::DlrSettings {
            base: ctx.public_url.clone(),
            clock: ctx.clock.clone(),
            awaited: Duration::from_secs(settings.receipt_timeout_s),
        };
        let carriers = carriers::Carriers::start(
            &settings.carriers,
            Duration::from_millis(settings.simulator_delay_ms),
            &dlr,
            &receipts,
        )?;
        for (carrier, account) in carriers.smpp_accounts() {
            store.adopt_receipts(carrier, account).await?;
        }
        let names: Vec<String> = carriers.states().into_iter().map(|c| c.name).collect();
        metrics::register(&names);
        metrics::seed(&store.message_counts().await?);
        let policy = pipeline::DispatchPolicy {
            concurrency: settings.dispatch_concurrency,
            lease: Duration::from_secs(settings.dispatch_lease_s),
            retry_for: Duration::from_secs(settings.carrier_retry_s),
            backoff: Backoff::from_first(Duration::from_millis(settings.dispatch_backoff_ms)),
            receipt_timeout: Duration::from_secs(settings.receipt_timeout_s),
            receipts_in_memory: ctx.cluster.node_id().is_none(),
        };
        let claim =
            pipeline::writer::Claim(i64::try_from(policy.lease.as_millis()).unwrap_or(i64::MAX));
        let (accepted, to_dispatch) = tokio::sync::mpsc::unbounded_channel();
        let writer = pipeline::writer::Writer::start(store.clone(), claim, accepted);
        let clock = ctx.clock.clone();
        let dispatcher = pipeline::Dispatcher::new(
            store.clone(),
            writer.clone(),
            carriers,
            policy,
            to_dispatch,
            ctx,
        );
        ctx.spawn(Arc::clone(&dispatcher).run());
        ctx.spawn(Arc::clone(&dispatcher).run_receipts(receipts_rx));
        ctx.spawn(Arc::clone(&dispatcher).sweep_receipts(Duration::from_secs(60)));
        let uploads = Arc::new(uploads::Uploads {
            store: store.clone(),
            clock: clock.clone(),
            dir: ctx.data_dir.join("messaging-files"),
            shared: ctx.cluster.files(Self::NAME),
            ttl_ms: i64::try_from(settings.upload_ttl_s)
                .unwrap_or(i64::MAX / 2)
                .saturating_mul(1000),
        });
        let sweep_every = Duration::from_secs(settings.upload_sweep_interval_s.max(1));
        ctx.spawn(Arc::clone(&uploads).sweep(sweep_every));
        let tokens = oauth::Tokens::new(store.clone(), clock.clone(), ctx.cluster.clone());
        Ok(MessagingService(Arc::new(Messaging {
            limiter: Limiter::new(&settings.limits),
            settings,
            store,
            zone,
            uids: uids::Uids::new(clock.clone(), ctx.cluster.slot()),
            clock,
            dispatcher,
            writer,
            receipts,
            uploads,
            tokens,
            activity: ctx.activity.of::<Self>(),
        })))
    }

    /// `/v2/...`.
    fn app(&self) -> App {
        App::new(api::router(self.clone()), error::unrouted)
    }

    /// The operator routes under `/admin/v1/messaging`.
    fn admin_router(&self) -> axum::Router {
        api::operator::router(self.clone())
    }

    fn admin_doc() -> utoipa::openapi::OpenApi {
        api::operator::MessagingAdminDoc::openapi()
    }

    fn api_doc() -> Option<utoipa::openapi::OpenApi> {
        Some(with_bearer(api::MessagingApiDoc::openapi()))
    }

    /// Unbinds from the SMPP carriers.
    fn declares(&self) -> Option<Arc<dyn kep_core::declared::Declares>> {
        Some(Arc::new(declared::Declared(Arc::clone(&self.0))))
    }

    async fn stop(&self) {
        self.0.dispatcher.carrier().stop().await;
    }
}
