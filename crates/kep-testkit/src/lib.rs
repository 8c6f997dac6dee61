//! What the services' integration tests share, so each `tests/it/common.rs` holds only its
//! own service's calls: a platform on port 0 ([`spawn_platform`]), waiting until something
//! has happened ([`eventually`]), a request held in flight ([`held`]), and the limits
//! scenarios every service's limits test runs ([`limits`]).

use kep_core::clock::Clock;
use kep_core::limits::Limits;
use kep_core::platform::{Platform, Running};
use kep_core::service::{ListenerSettings, Service};
use tokio_util::sync::CancellationToken;

pub mod limits;
pub mod tls;
mod waiting;

pub use waiting::{Held, eventually, held};

/// The operator token of every test platform.
pub const OPERATOR_TOKEN: &str = "test-operator-token";

/// Where a test platform runs: its data dir, its wall clock and its database.
pub struct Setup {
    pub dir: tempfile::TempDir,
    pub clock: Clock,
    /// PostgreSQL where the tests run on one (`KEP_TEST_DATABASE_URL`), else `None`: SQLite
    /// in `dir`.
    pub database_url: Option<String>,
}

impl Setup {
    /// A fresh data dir, a database of the test's own, and a manual clock.
    pub async fn fresh() -> Self {
        Setup::on(database_for_a_test().await)
    }

    /// A fresh data dir and a manual clock, on `database_url` (one several nodes share).
    /// The clock stands still on a whole second (so a test knows where second-granular
    /// expiries fall) until the test moves it on.
    pub fn on(database_url: Option<String>) -> Self {
        let start = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap();
        Setup {
            dir: tempfile::tempdir().unwrap(),
            clock: Clock::manual(start),
            database_url,
        }
    }
}

/// One service started on a platform that serves it: its listeners on port 0 of 127.0.0.1.
pub struct Spawned<S> {
    pub service: S,
    pub running: Running,
    pub clock: Clock,
    pub shutdown: CancellationToken,
    pub database_url: Option<String>,
    pub dir: tempfile::TempDir,
}

impl<S> Spawned<S> {
    /// The base URL of one of its listeners (`admin`, or the service's own).
    pub fn url(&self, listener: &str) -> String {
        self.running.url(listener)
    }
}

/// Starts service `S` with `settings` where `setup` says, and serves it with
/// [`OPERATOR_TOKEN`] on the admin listener.
pub async fn spawn_platform<S: Service>(setup: Setup, settings: S::Settings) -> Spawned<S> {
    let Setup {
        dir,
        clock,
        database_url,
    } = setup;
    let admin = ListenerSettings::at("127.0.0.1:0".parse().unwrap(), Limits::default());
    let mut platform = Platform::new(dir.path(), admin, None)
        .await
        .unwrap()
        .with_clock(clock.clone())
        .with_database_url(database_url.clone());
    let shutdown = platform.shutdown_token();
    let service = platform.start::<S>(settings).await.unwrap();
    let running = platform.serve(OPERATOR_TOKEN);
    Spawned {
        service,
        running,
        clock,
        shutdown,
        database_url,
        dir,
    }
}

/// A PostgreSQL database of the test's own on the server `KEP_TEST_DATABASE_URL` names;
/// `None` where it is unset (the test then runs on SQLite).
pub async fn database_for_a_test() -> Option<String> {
    use sqlx::ConnectOptions as _;
    use std::str::FromStr as _;
    let server = std::env::var("KEP_TEST_DATABASE_URL").ok()?;
    let name = format!("kep_test_{}", kep_core::secret::new_uuid().replace('-', ""));
    let mut conn = sqlx::postgres::PgConnectOptions::from_str(&server)
        .expect("KEP_TEST_DATABASE_URL")
        .connect()
        .await
        .expect("the test database server");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .expect("a database of the test's own");
    let (base, _) = server.rsplit_once('/').expect("a database in the URL");
    Some(format!("{base}/{name}"))
}
