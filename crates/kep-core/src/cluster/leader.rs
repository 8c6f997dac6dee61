//! One node at a time leads a role: the one holding the role's PostgreSQL advisory lock, on
//! a connection of its own. A node that dies loses its connection and so the lock at once;
//! another node takes it within [`TRY_EVERY`]. A leader that cannot reach the database
//! stops leading, since another node may then hold the lock.

use std::time::Duration;

use sqlx::{Connection as _, PgConnection};
use tokio::sync::watch;

use super::{Cluster, Shared};

/// How often a node that does not lead tries the lock.
const TRY_EVERY: Duration = Duration::from_millis(500);
/// How often a leader checks that its connection, and so its lock, still holds.
const CHECK_EVERY: Duration = Duration::from_secs(1);

impl Cluster {
    /// Whether this node leads `role`, kept current until the node stops. A node on its
    /// own always leads.
    pub fn elect(&self, role: &str) -> watch::Receiver<bool> {
        let Some(s) = &self.0 else {
            return watch::channel(true).1;
        };
        let (tx, rx) = watch::channel(false);
        let (shared, role) = (s.clone(), role.to_owned());
        s.tasks.spawn(async move {
            loop {
                let stop = shared.stop.clone();
                let led = stop.run_until_cancelled(shared.lead(&role, &tx)).await;
                tx.send_replace(false);
                match led {
                    None => return,
                    Some(Err(e)) => tracing::warn!(role, error = %e, "leading lost its connection"),
                    Some(Ok(())) => {}
                }
                if stop
                    .run_until_cancelled(tokio::time::sleep(TRY_EVERY))
                    .await
                    .is_none()
                {
                    return;
                }
            }
        });
        rx
    }

    /// The node that leads `role` now, if it is up.
    pub async fn leader(&self, role: &str) -> sqlx::Result<Option<String>> {
        let Some(s) = &self.0 else {
            return Ok(None);
        };
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT l.node_id FROM leaders l JOIN nodes n ON n.node_id = l.node_id \
             WHERE l.role = $1 AND n.seen_at > {} - $2",
            super::NOW_MS
        )))
        .bind(role)
        .bind(super::DEAD_AFTER_MS)
        .fetch_optional(&s.pool)
        .await
    }
}

impl Shared {
    /// Waits for the lock, leads while it holds; returns (or fails) when it no longer does.
    /// Dropped on shutdown: the connection closes, and the lock goes with it.
    async fn lead(&self, role: &str, leading: &watch::Sender<bool>) -> sqlx::Result<()> {
        let lock = format!("kep leader {role}");
        let mut conn = self.pool.acquire().await?.detach();
        loop {
            let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext($1))")
                .bind(&lock)
                .fetch_one(&mut conn)
                .await?;
            if got {
                break;
            }
            tokio::time::sleep(TRY_EVERY).await;
        }
        sqlx::query(
            "INSERT INTO leaders (role, node_id) VALUES ($1, $2) \
             ON CONFLICT (role) DO UPDATE SET node_id = excluded.node_id",
        )
        .bind(role)
        .bind(&self.node_id)
        .execute(&mut conn)
        .await?;
        tracing::info!(role, node = %self.node_id, "leading");
        leading.send_replace(true);
        hold(&mut conn).await
    }
}

/// Returns the error that ends the connection, and with it the lock.
async fn hold(conn: &mut PgConnection) -> sqlx::Result<()> {
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        conn.ping().await?;
    }
}

/// A lock every node honours, held until dropped: a PostgreSQL advisory lock on a
/// connection of its own, which closes (and so lets the lock go) when dropped, even if the
/// node dies holding it. On a node of its own it holds nothing.
pub struct ClusterLock {
    _conn: Option<PgConnection>,
}

impl Cluster {
    /// Waits for `name`'s lock: one node at a time holds it (for changes whose checks must
    /// hold across nodes until they are written).
    pub async fn lock(&self, name: &str) -> sqlx::Result<ClusterLock> {
        let Some(s) = &self.0 else {
            return Ok(ClusterLock { _conn: None });
        };
        let mut conn = s.pool.acquire().await?.detach();
        sqlx::query("SELECT pg_advisory_lock(hashtext($1))")
            .bind(format!("kep lock {name}"))
            .execute(&mut conn)
            .await?;
        Ok(ClusterLock { _conn: Some(conn) })
    }
}
