//! One lifecycle for every service: started from a [`Context`], it hands the platform its
//! listener's app, its operator routes and its OpenAPI documents, and stops when asked.
//! [`crate::platform::Platform`] wires any set of services this way, so `kep serve` and
//! every service's tests start them alike.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;

use axum::Router;
use sqlx::migrate::Migrator;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::activity::{Activity, IdField};
use crate::clock::Clock;
use crate::limits::Limits;
use crate::listener::App;

/// How many activity events a platform keeps for watchers that connect later.
pub const ACTIVITY_BACKLOG: usize = 1000;

/// What a service is started from: the same for every service.
#[derive(Clone)]
pub struct Context {
    /// Where its database and files live.
    pub data_dir: PathBuf,
    /// Fires when the platform stops: background loops end, sockets close.
    pub shutdown: CancellationToken,
    /// Every background task of the service; the platform waits for them when it stops.
    pub tasks: TaskTracker,
    /// The base URL its own listener is reached at (its `public_url` setting, or the address
    /// it was bound to).
    pub public_url: String,
    /// The wall clock it stores and answers dates by.
    pub clock: Clock,
    /// Where it records its state changes (`Activity::of` the service).
    pub activity: Activity,
    /// Its database, when not SQLite under the data dir: a `postgres://` URL.
    pub database_url: Option<String>,
    /// The other nodes on that database, to tell what changed here.
    pub cluster: crate::cluster::Cluster,
    /// What it seals the stored values that open something by themselves with.
    pub seal: crate::seal::Sealer,
}

impl Context {
    /// A context outside any platform (a unit test's): its own shutdown token and task
    /// tracker, the system clock, files under `data_dir`, a seal key kept nowhere.
    pub fn standalone(data_dir: &std::path::Path) -> Self {
        Context {
            data_dir: data_dir.to_owned(),
            shutdown: CancellationToken::new(),
            tasks: TaskTracker::new(),
            public_url: String::new(),
            clock: Clock::system(),
            activity: Activity::new(Clock::system(), ACTIVITY_BACKLOG),
            database_url: None,
            cluster: crate::cluster::Cluster::single(),
            seal: crate::seal::Sealer::ephemeral(),
        }
    }

    /// Opens the service's database on the backend of the settings, migrated with that
    /// backend's migrations.
    pub async fn database_on(
        &self,
        name: &str,
        sqlite: &Migrator,
        postgres: &Migrator,
    ) -> anyhow::Result<crate::storage::Database> {
        use crate::storage::{Database, open, open_postgres};
        Ok(match &self.database_url {
            Some(url) => Database::Postgres(open_postgres(url, name, postgres).await?),
            None => Database::Sqlite(open(&self.data_dir, name, sqlite).await?),
        })
    }

    /// Runs a background loop until it ends or the platform stops.
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let shutdown = self.shutdown.clone();
        self.tasks.spawn(async move {
            shutdown.run_until_cancelled(task).await;
        });
    }
}

/// Where a service's own listener binds, with its limits.
pub struct ListenerSettings {
    pub addr: SocketAddr,
    /// The URL the listener is reached at, when not its bound address (a proxy in front).
    pub public_url: Option<String>,
    pub limits: Limits,
    /// Whether it speaks TLS when the platform has a certificate (`<listener>.tls`).
    pub tls: bool,
}

impl ListenerSettings {
    /// A listener at `addr` within `limits`, at its own address, TLS where the platform has it.
    pub fn at(addr: SocketAddr, limits: Limits) -> Self {
        ListenerSettings {
            addr,
            public_url: None,
            limits,
            tls: true,
        }
    }
}

/// A service of the platform, started, served and stopped as every other one.
pub trait Service: Clone + Send + Sync + Sized + 'static {
    /// Its section of the settings.
    type Settings: Send + 'static;
    /// The name `--only` knows it by.
    const NAME: &'static str;
    /// Its listener's name (in `addresses.json`, the logs and the settings).
    const LISTENER: &'static str;
    /// Where the ids of its objects go in an activity event, its top object's first: an
    /// event names its object by as many as it needs.
    const OBJECT_IDS: &'static [IdField];

    fn listener(settings: &Self::Settings) -> ListenerSettings;

    /// Opens its store, resumes its durable work and starts its background tasks.
    fn start(
        settings: Self::Settings,
        ctx: &Context,
    ) -> impl Future<Output = anyhow::Result<Self>> + Send;

    /// What its own listener serves.
    fn app(&self) -> App;

    /// Its operator routes (under `/admin/v1/<name>`), which the platform guards with the
    /// operator token.
    fn admin_router(&self) -> Router;

    /// The paths of [`Service::admin_router`], merged into the operator API's document.
    fn admin_doc() -> utoipa::openapi::OpenApi;

    /// Its listener's own document, served as `/openapi/<name>.json` on the admin listener.
    fn api_doc() -> Option<utoipa::openapi::OpenApi> {
        None
    }

    /// Its part of declared resources (`kep apply`, `kep serve --init`), if it has one.
    fn declares(&self) -> Option<std::sync::Arc<dyn crate::declared::Declares>> {
        None
    }

    /// After shutdown fired: finishes what must not be cut off (participant sockets get
    /// their close frame, instances their SIGTERM).
    fn stop(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}
