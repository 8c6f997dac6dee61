//! The embedded database: one SQLite file per service under the data dir, in WAL mode, with
//! the service's migrations (embedded in the binary) run at open.
//!
//! A file per service keeps each service's writes from queueing behind another's: SQLite
//! has one writer per file.

use std::path::Path;
use std::str::FromStr as _;
use std::time::Duration;

use anyhow::Context as _;
use sqlx::ConnectOptions as _;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

/// Opens (creating if needed) `<data_dir>/<name>.db` and brings its schema up to date.
pub async fn open(data_dir: &Path, name: &str, migrator: &Migrator) -> anyhow::Result<SqlitePool> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating data dir {}", data_dir.display()))?;
    let path = data_dir.join(format!("{name}.db"));
    let options = SqliteConnectOptions::from_str("sqlite://")?
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        // With WAL, NORMAL loses nothing when the process dies, only on power loss.
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(5))
        .foreign_keys(true)
        // Every statement at debug would drown what a user turns debug on for.
        .log_statements(log::LevelFilter::Trace);
    let pool = SqlitePoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await
        .with_context(|| format!("opening {}", path.display()))?;
    migrator
        .run(&pool)
        .await
        .with_context(|| format!("migrating {}", path.display()))?;
    Ok(pool)
}
