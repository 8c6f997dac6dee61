//! Where services keep their state: by default one SQLite file per service under the data
//! dir, in WAL mode; with `database_url` on PostgreSQL, one schema per service
//! (`kep_<name>`) of that database. Either way the service's migrations for that backend
//! (embedded in the binary) run at open.
//!
//! A file per service keeps each service's writes from queueing behind another's: SQLite
//! has one writer per file.

use std::path::Path;
use std::str::FromStr as _;
use std::time::Duration;

use anyhow::Context as _;
use sqlx::ConnectOptions as _;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

/// A service's database, on the backend the settings chose.
#[derive(Clone)]
pub enum Database {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Whether `url` names a PostgreSQL database (`postgres://` or `postgresql://`).
pub fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Connects to the PostgreSQL database at `url` with `kep_<name>` (made if needed) as the
/// search path, and brings that schema up to date.
pub async fn open_postgres(url: &str, name: &str, migrator: &Migrator) -> anyhow::Result<PgPool> {
    let schema = format!("kep_{name}");
    let options = PgConnectOptions::from_str(url)
        .context("database_url")?
        .log_statements(log::LevelFilter::Trace);
    let mut conn = options
        .connect()
        .await
        .with_context(|| format!("connecting to the database for {name}"))?;
    make_schema(&mut conn, &schema).await?;
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .connect_with(options.options([("search_path", schema.as_str())]))
        .await
        .with_context(|| format!("opening schema {schema}"))?;
    migrator
        .run(&pool)
        .await
        .with_context(|| format!("migrating schema {schema}"))?;
    Ok(pool)
}

/// Makes `schema` if there is none. Nodes starting at once would race on `CREATE SCHEMA IF
/// NOT EXISTS` (its check and its insert are not one step), so they take turns.
pub async fn make_schema(conn: &mut sqlx::PgConnection, schema: &str) -> anyhow::Result<()> {
    let mut tx = sqlx::Connection::begin(conn).await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('kep schemas'))")
        .execute(&mut *tx)
        .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE SCHEMA IF NOT EXISTS {schema}"
    )))
    .execute(&mut *tx)
    .await
    .with_context(|| format!("making schema {schema}"))?;
    tx.commit().await?;
    Ok(())
}

/// Opens (creating if needed) `<data_dir>/<name>.db` and brings its schema up to date.
pub async fn open(data_dir: &Path, name: &str, migrator: &Migrator) -> anyhow::Result<SqlitePool> {
    crate::private::dir(data_dir)
        .with_context(|| format!("creating data dir {}", data_dir.display()))?;
    let path = data_dir.join(format!("{name}.db"));
    // Made 0600 before SQLite opens it: SQLite gives its `-wal` and `-shm` the main file's
    // mode, whatever the umask.
    crate::private::options()
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
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

/// Declares a service's store on both backends from one SQL text: `SqliteStore` and
/// `PgStore`, each over a pool of its backend (`new(pool)`), each implementing `$trait` with
/// the same body. Queries number their parameters `$1`, `$2` … in the order they first
/// appear, which SQLite reads as PostgreSQL does; a `QueryBuilder<Db>` takes its backend
/// from `Db`. Items after the impl (helpers, SQL pieces) are declared once per backend,
/// beside `type Db` (`sqlx::Sqlite` or `sqlx::Postgres`) and `const ON_POSTGRES: bool`,
/// for the few places where the two dialects differ. The calling crate depends on
/// `async-trait`.
#[macro_export]
macro_rules! sql_store {
    (impl $trait:path { $($body:tt)* } $($items:item)*) => {
        $crate::sql_store!(@one sqlite, SqliteStore, sqlx::Sqlite, false, $trait { $($body)* } $($items)*);
        $crate::sql_store!(@one postgres, PgStore, sqlx::Postgres, true, $trait { $($body)* } $($items)*);
    };
    (@one $module:ident, $store:ident, $db:ty, $pg:literal, $trait:path { $($body:tt)* } $($items:item)*) => {
        pub use self::$module::$store;

        mod $module {
            #[allow(unused_imports)]
            use super::*;

            type Db = $db;
            /// Not every store has SQL that differs by backend.
            #[allow(dead_code)]
            const ON_POSTGRES: bool = $pg;

            $($items)*

            pub struct $store {
                pool: sqlx::Pool<Db>,
            }

            impl $store {
                pub fn new(pool: sqlx::Pool<Db>) -> Self {
                    $store { pool }
                }
            }

            #[async_trait::async_trait]
            impl $trait for $store {
                $($body)*
            }
        }
    };
}

/// `(node_id IS NULL OR node_id NOT IN (<up>))`: an outbox item (a row with a `node_id`
/// column) that no node of `up` owns; with no nodes listed (one node on its own), every item.
pub fn push_unowned<DB: sqlx::Database>(b: &mut sqlx::QueryBuilder<DB>, up: &[String])
where
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    if up.is_empty() {
        b.push("1 = 1");
        return;
    }
    b.push("(node_id IS NULL OR node_id NOT IN (");
    let mut nodes = b.separated(", ");
    for node in up {
        nodes.push_bind(node.clone());
    }
    nodes.push_unseparated("))");
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_postgres_urls_are_postgres() {
        assert!(super::is_postgres("postgres://u@127.0.0.1:5432/kep"));
        assert!(super::is_postgres("postgresql://u@h/kep"));
        assert!(!super::is_postgres("sqlite://kep.db"));
        assert!(!super::is_postgres("mysql://h/kep"));
    }
}
