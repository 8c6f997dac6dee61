//! The account adapter API of seed 001 part A: `getOrgLoginType`, `uploadResult` and
//! `uploadDecrypted` on the adapter listener, and the platform side the seed does not show
//! (org login types and DRM release requests) on the admin listener.

pub mod api;
mod declared;
mod drm;
mod error;
pub mod ids;
mod metrics;
mod orgs;
mod store;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kep_core::activity::IdField;
use kep_core::limits::{Limiter, Limits};
use kep_core::listener::App;
use kep_core::outbox::Policy;
use kep_core::retry::Backoff;
use kep_core::service::{Context, ListenerSettings, Service};
use serde::{Deserialize, Serialize};
use utoipa::OpenApi as _;

pub use error::AdapterError;

/// `[adapter]` settings (CONTRACT §2); durations in seconds unless `_ms`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct AdapterSettings {
    pub addr: SocketAddr,
    /// Whether the listener speaks TLS when kep has a certificate (`tls.cert_file` or
    /// `tls.self_signed`); false keeps it plain HTTP.
    pub tls: bool,
    /// The scheme word before the secret key in `Authorization`.
    pub auth_scheme: String,
    /// Path on the agent that DRM release requests are POSTed to.
    pub notify_path: String,
    pub notify_attempts: u32,
    /// First back-off between notification attempts; it doubles each time.
    pub notify_backoff_ms: u64,
    pub notify_timeout_s: u64,
    /// A DRM session not finished by then is `EXPIRED`.
    pub session_ttl_s: u64,
    /// Largest file `uploadDecrypted` accepts.
    pub max_file_bytes: u64,
    /// How often expired sessions are marked.
    pub sweep_interval_s: u64,
    /// Per org (its secret key), else per peer address.
    #[serde(flatten)]
    pub limits: Limits,
}

impl Default for AdapterSettings {
    fn default() -> Self {
        AdapterSettings {
            addr: SocketAddr::from(([127, 0, 0, 1], 8802)),
            tls: true,
            auth_scheme: "Secret".into(),
            notify_path: "/drm/notify".into(),
            notify_attempts: 5,
            notify_backoff_ms: 500,
            notify_timeout_s: 5,
            session_ttl_s: 600,
            max_file_bytes: 4 * 1024 * 1024 * 1024,
            sweep_interval_s: 5,
            limits: Limits::default(),
        }
    }
}

pub(crate) struct Adapter {
    settings: AdapterSettings,
    orgs: orgs::Orgs,
    drm: Arc<drm::Drm>,
    limiter: Limiter,
}

/// The running adapter service; cheap to clone.
#[derive(Clone)]
pub struct AdapterService(Arc<Adapter>);

impl AdapterService {
    /// Sets the gauges of what the service holds now (DRM sessions by stored status):
    /// called at each scrape of `/metrics`.
    pub async fn observe(&self) {
        self.0.drm.observe().await;
    }
}

impl Service for AdapterService {
    type Settings = AdapterSettings;
    const NAME: &'static str = "adapter";
    const LISTENER: &'static str = "adapter";
    const OBJECT_IDS: &'static [IdField] = &[|i| &mut i.org_login_type_id, |i| &mut i.session_id];

    fn listener(settings: &AdapterSettings) -> ListenerSettings {
        ListenerSettings {
            addr: settings.addr,
            public_url: None,
            limits: settings.limits,
            tls: settings.tls,
        }
    }

    /// Opens `adapter.db` and the file store under the data dir, and starts the expiry
    /// sweeper.
    async fn start(settings: AdapterSettings, ctx: &Context) -> anyhow::Result<Self> {
        metrics::register();
        let store = store::open(ctx).await?;
        metrics::seed(store.released_bytes().await?);
        let notify = drm::NotifyPolicy {
            path: settings.notify_path.clone(),
            outbox: Policy {
                attempts: settings.notify_attempts,
                retry: Backoff::from_first(Duration::from_millis(settings.notify_backoff_ms)),
                queue: 1,
            },
            timeout: Duration::from_secs(settings.notify_timeout_s),
        };
        let drm = Arc::new(
            drm::Drm::start(
                Arc::clone(&store),
                ctx,
                ctx.data_dir.join("adapter-files"),
                settings.session_ttl_s,
                settings.max_file_bytes,
                &notify,
            )
            .await?,
        );
        let removed = drm.remove_unreleased_files().await?;
        if removed > 0 {
            tracing::info!(files = removed, "removed files of releases a stop cut off");
        }
        ctx.spawn(Arc::clone(&drm).sweep(Duration::from_secs(settings.sweep_interval_s.max(1))));
        Ok(AdapterService(Arc::new(Adapter {
            limiter: Limiter::new(&settings.limits),
            settings,
            orgs: orgs::Orgs::new(store, ctx.clock.clone(), ctx.activity.of::<Self>()),
            drm,
        })))
    }

    /// `/api/trust/...`.
    fn app(&self) -> App {
        App::new(api::router(self.clone()), error::unrouted)
    }

    /// The operator routes under `/admin/v1/adapter`.
    fn admin_router(&self) -> axum::Router {
        api::operator::router(self.clone())
    }

    fn declares(&self) -> Option<Arc<dyn kep_core::declared::Declares>> {
        Some(Arc::new(declared::Declared(Arc::clone(&self.0))))
    }

    fn admin_doc() -> utoipa::openapi::OpenApi {
        api::operator::AdapterAdminDoc::openapi()
    }

    fn api_doc() -> Option<utoipa::openapi::OpenApi> {
        Some(api::AdapterApiDoc::openapi())
    }
}
