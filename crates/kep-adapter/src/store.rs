//! Persistence of org login types, DRM sessions and notification attempts in `adapter.db`.

use sqlx::SqlitePool;
use sqlx::migrate::Migrator;

pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OrgRow {
    pub id: i64,
    pub method: String,
    pub adapter_agent: String,
    pub data_model: Option<String>,
    pub secret_hash: String,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SessionRow {
    pub session_id: String,
    pub org_login_type_id: i64,
    pub file_id: String,
    pub file_type: String,
    pub user: Option<String>,
    pub status: String,
    pub result: Option<String>,
    pub reason: Option<String>,
    pub extra: Option<String>,
    pub file_size: Option<i64>,
    pub file_sha256: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct NotificationRow {
    pub attempt: i64,
    pub at: i64,
    pub status: Option<i64>,
    pub error: Option<String>,
}

#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
}

impl Store {
    pub fn new(pool: SqlitePool) -> Self {
        Store { pool }
    }

    pub async fn insert_org(
        &self,
        method: &str,
        agent: &str,
        data_model: Option<&str>,
        secret_hash: &str,
        now: i64,
    ) -> sqlx::Result<i64> {
        let row: (i64,) = sqlx::query_as(
            "INSERT INTO org_login_types (method, adapter_agent, data_model, secret_hash, created_at, updated_at)
             VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
        )
        .bind(method)
        .bind(agent)
        .bind(data_model)
        .bind(secret_hash)
        .bind(now)
        .bind(now)
        .fetch_one(&self.pool)
        .await?;
        Ok(row.0)
    }

    pub async fn org(&self, id: i64) -> sqlx::Result<Option<OrgRow>> {
        sqlx::query_as("SELECT id, method, adapter_agent, data_model, secret_hash FROM org_login_types WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
    }

    pub async fn orgs(&self) -> sqlx::Result<Vec<OrgRow>> {
        sqlx::query_as("SELECT id, method, adapter_agent, data_model, secret_hash FROM org_login_types ORDER BY id")
            .fetch_all(&self.pool)
            .await
    }

    pub async fn update_org(
        &self,
        id: i64,
        method: &str,
        agent: &str,
        data_model: Option<&str>,
        now: i64,
    ) -> sqlx::Result<bool> {
        let done = sqlx::query(
            "UPDATE org_login_types SET method = ?, adapter_agent = ?, data_model = ?, updated_at = ? WHERE id = ?",
        )
        .bind(method)
        .bind(agent)
        .bind(data_model)
        .bind(now)
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn set_secret(&self, id: i64, secret_hash: &str, now: i64) -> sqlx::Result<bool> {
        let done =
            sqlx::query("UPDATE org_login_types SET secret_hash = ?, updated_at = ? WHERE id = ?")
                .bind(secret_hash)
                .bind(now)
                .bind(id)
                .execute(&self.pool)
                .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Deletes the org and its sessions; the ids of those sessions, so their files can go.
    pub async fn delete_org(&self, id: i64) -> sqlx::Result<Option<Vec<String>>> {
        let mut tx = self.pool.begin().await?;
        // A write first: a transaction that reads first cannot take the write lock while
        // another connection writes (SQLite answers BUSY at once).
        let sessions: Vec<(String,)> = sqlx::query_as(
            "DELETE FROM drm_sessions WHERE org_login_type_id = ? RETURNING session_id",
        )
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
        let done = sqlx::query("DELETE FROM org_login_types WHERE id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok((done.rows_affected() == 1).then(|| sessions.into_iter().map(|s| s.0).collect()))
    }

    pub async fn insert_session(&self, s: &SessionRow) -> sqlx::Result<()> {
        sqlx::query(
            "INSERT INTO drm_sessions (session_id, org_login_type_id, file_id, file_type, user, status,
               created_at, expires_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&s.session_id)
        .bind(s.org_login_type_id)
        .bind(&s.file_id)
        .bind(&s.file_type)
        .bind(&s.user)
        .bind(&s.status)
        .bind(s.created_at)
        .bind(s.expires_at)
        .bind(s.created_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn session(&self, session_id: &str) -> sqlx::Result<Option<SessionRow>> {
        sqlx::query_as(
            "SELECT session_id, org_login_type_id, file_id, file_type, user, status, result, reason, extra,
                    file_size, file_sha256, created_at, expires_at
             FROM drm_sessions WHERE session_id = ?",
        )
            .bind(session_id)
            .fetch_optional(&self.pool)
            .await
    }

    /// Records the agent's result if the session is still `PENDING` and unexpired.
    pub async fn record_result(
        &self,
        session_id: &str,
        status: &str,
        result: &str,
        reason: &str,
        extra: Option<&str>,
        now: i64,
    ) -> sqlx::Result<bool> {
        let done = sqlx::query(
            "UPDATE drm_sessions SET status = ?, result = ?, reason = ?, extra = ?, updated_at = ?
             WHERE session_id = ? AND status = 'PENDING' AND expires_at > ?",
        )
        .bind(status)
        .bind(result)
        .bind(reason)
        .bind(extra)
        .bind(now)
        .bind(session_id)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Marks the file released if the session is still `GRANTED` and unexpired.
    pub async fn record_release(
        &self,
        session_id: &str,
        size: i64,
        sha256: &str,
        now: i64,
    ) -> sqlx::Result<bool> {
        let done = sqlx::query(
            "UPDATE drm_sessions SET status = 'RELEASED', file_size = ?, file_sha256 = ?, updated_at = ?
             WHERE session_id = ? AND status = 'GRANTED' AND expires_at > ?",
        )
        .bind(size)
        .bind(sha256)
        .bind(now)
        .bind(session_id)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Sessions still open past their expiry become `EXPIRED`.
    pub async fn expire(&self, now: i64) -> sqlx::Result<u64> {
        let done = sqlx::query(
            "UPDATE drm_sessions SET status = 'EXPIRED', updated_at = ?
             WHERE status IN ('PENDING', 'GRANTED') AND expires_at <= ?",
        )
        .bind(now)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    pub async fn record_notification(
        &self,
        session_id: &str,
        attempt: i64,
        at_ms: i64,
        status: Option<u16>,
        error: Option<&str>,
    ) -> sqlx::Result<()> {
        sqlx::query("INSERT INTO drm_notifications (session_id, attempt, at, status, error) VALUES (?, ?, ?, ?, ?)")
            .bind(session_id)
            .bind(attempt)
            .bind(at_ms)
            .bind(status.map(i64::from))
            .bind(error)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn notifications(&self, session_id: &str) -> sqlx::Result<Vec<NotificationRow>> {
        sqlx::query_as("SELECT attempt, at, status, error FROM drm_notifications WHERE session_id = ? ORDER BY attempt")
            .bind(session_id)
            .fetch_all(&self.pool)
            .await
    }
}
