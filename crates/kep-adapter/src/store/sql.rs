//! The adapter store in SQL, one text for both backends: SQLite (`adapter.db`) and
//! PostgreSQL (schema `kep_adapter`). Parameters are `$1`, `$2` … in the order they first
//! appear, which both read alike; each backend has its own migrations
//! (`migrations/<backend>/`).

use sqlx::QueryBuilder;
use sqlx::migrate::Migrator;
use sqlx::types::Json;

use super::{
    AgentResult, NewOrg, NotificationRow, OrgRow, SessionFilter, SessionNotificationRow,
    SessionRow, Store,
};
use crate::ids::{OrgLoginTypeId, SessionId};

pub static SQLITE: Migrator = sqlx::migrate!("./migrations/sqlite");
pub static POSTGRES: Migrator = sqlx::migrate!("./migrations/postgres");

kep_core::sql_store! {
    impl Store {
    async fn insert_org(
        &self,
        org: &NewOrg<'_>,
        given: Option<OrgLoginTypeId>,
        secret_hash: &str,
        now: i64,
    ) -> sqlx::Result<Option<OrgLoginTypeId>> {
        let mut tx = self.pool.begin().await?;
        // COALESCE: the given id, else the identity's (PostgreSQL) or the rowid's (SQLite).
        let row: Option<(OrgLoginTypeId,)> = sqlx::query_as(if ON_POSTGRES {
            "INSERT INTO org_login_types (id, method, adapter_agent, data_model, secret_hash, created_at, updated_at)
             OVERRIDING SYSTEM VALUE
             VALUES (COALESCE($1, nextval(pg_get_serial_sequence('org_login_types', 'id'))), $2, $3, $4, $5, $6, $6)
             ON CONFLICT (id) DO NOTHING RETURNING id"
        } else {
            "INSERT INTO org_login_types (id, method, adapter_agent, data_model, secret_hash, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $6)
             ON CONFLICT (id) DO NOTHING RETURNING id"
        })
        .bind(given)
        .bind(org.method)
        .bind(org.adapter_agent)
        .bind(org.data_model.as_ref().map(Json))
        .bind(secret_hash)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        if ON_POSTGRES && given.is_some() && row.is_some() {
            // A given id past the identity's: the next generated one comes after it.
            sqlx::query(
                "SELECT setval(pg_get_serial_sequence('org_login_types', 'id'), \
                 (SELECT max(id) FROM org_login_types))",
            )
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(row.map(|r| r.0))
    }

    async fn org(&self, id: OrgLoginTypeId) -> sqlx::Result<Option<OrgRow>> {
        sqlx::query_as("SELECT id, method, adapter_agent, data_model, secret_hash FROM org_login_types WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
    }

    async fn orgs(&self) -> sqlx::Result<Vec<OrgRow>> {
        sqlx::query_as("SELECT id, method, adapter_agent, data_model, secret_hash FROM org_login_types ORDER BY id")
            .fetch_all(&self.pool)
            .await
    }

    async fn update_org(
        &self,
        id: OrgLoginTypeId,
        org: &NewOrg<'_>,
        now: i64,
    ) -> sqlx::Result<bool> {
        let done = sqlx::query(
            "UPDATE org_login_types SET method = $1, adapter_agent = $2, data_model = $3, updated_at = $4 WHERE id = $5",
        )
        .bind(org.method)
        .bind(org.adapter_agent)
        .bind(org.data_model.as_ref().map(Json))
        .bind(now)
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn set_secret(
        &self,
        id: OrgLoginTypeId,
        secret_hash: &str,
        now: i64,
    ) -> sqlx::Result<bool> {
        let done =
            sqlx::query("UPDATE org_login_types SET secret_hash = $1, updated_at = $2 WHERE id = $3")
                .bind(secret_hash)
                .bind(now)
                .bind(id)
                .execute(&self.pool)
                .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn delete_org(&self, id: OrgLoginTypeId) -> sqlx::Result<Option<Vec<SessionId>>> {
        let mut tx = self.pool.begin().await?;
        // A write first: a transaction that reads first cannot take the write lock while
        // another connection writes (SQLite answers BUSY at once).
        let sessions: Vec<(SessionId,)> = sqlx::query_as(
            "DELETE FROM drm_sessions WHERE org_login_type_id = $1 RETURNING session_id",
        )
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
        let done = sqlx::query("DELETE FROM org_login_types WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok((done.rows_affected() == 1).then(|| sessions.into_iter().map(|s| s.0).collect()))
    }

    async fn insert_session(&self, s: &SessionRow, node: Option<&str>) -> sqlx::Result<()> {
        sqlx::query(
            "INSERT INTO drm_sessions (session_id, org_login_type_id, file_id, file_type, \"user\", status,
               created_at, expires_at, updated_at, node_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(&s.session_id)
        .bind(s.org_login_type_id)
        .bind(&s.file_id)
        .bind(s.file_type.as_str())
        .bind(&s.user)
        .bind(s.status.as_str())
        .bind(s.created_at)
        .bind(s.expires_at)
        .bind(s.created_at)
        .bind(node)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn session(&self, session_id: &SessionId) -> sqlx::Result<Option<SessionRow>> {
        sqlx::query_as(
            "SELECT session_id, org_login_type_id, file_id, file_type, \"user\", status, result, reason, extra,
                    file_size, file_sha256, created_at, expires_at
             FROM drm_sessions WHERE session_id = $1",
        )
            .bind(session_id)
            .fetch_optional(&self.pool)
            .await
    }

    async fn record_result(
        &self,
        session_id: &SessionId,
        result: &AgentResult<'_>,
        now: i64,
    ) -> sqlx::Result<bool> {
        let done = sqlx::query(
            "UPDATE drm_sessions SET status = $1, result = $2, reason = $3, extra = $4, updated_at = $5
             WHERE session_id = $6 AND status = 'PENDING' AND expires_at > $7",
        )
        .bind(result.status.as_str())
        .bind(result.result)
        .bind(result.reason)
        .bind(result.extra.map(Json))
        .bind(now)
        .bind(session_id)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn record_release(
        &self,
        session_id: &SessionId,
        size: i64,
        sha256: &str,
        now: i64,
    ) -> sqlx::Result<bool> {
        let done = sqlx::query(
            "UPDATE drm_sessions SET status = 'RELEASED', file_size = $1, file_sha256 = $2, updated_at = $3
             WHERE session_id = $4 AND status = 'GRANTED' AND expires_at > $5",
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

    async fn expire(&self, now: i64) -> sqlx::Result<Vec<(SessionId, OrgLoginTypeId)>> {
        let expired: Vec<(String, i64)> = sqlx::query_as(
            "UPDATE drm_sessions SET status = 'EXPIRED', updated_at = $1
             WHERE status IN ('PENDING', 'GRANTED') AND expires_at <= $2
             RETURNING session_id, org_login_type_id",
        )
        .bind(now)
        .bind(now)
        .fetch_all(&self.pool)
        .await?;
        Ok(expired
            .into_iter()
            .map(|(s, org)| (SessionId::from(s), OrgLoginTypeId(org)))
            .collect())
    }

    async fn record_notification(
        &self,
        session_id: &SessionId,
        attempt: i64,
        at_ms: i64,
        status: Option<u16>,
        error: Option<&str>,
    ) -> sqlx::Result<()> {
        sqlx::query("INSERT INTO drm_notifications (session_id, attempt, at, status, error) VALUES ($1, $2, $3, $4, $5)")
            .bind(session_id)
            .bind(attempt)
            .bind(at_ms)
            .bind(status.map(i64::from))
            .bind(error)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn sessions_by_status(&self) -> sqlx::Result<Vec<(String, i64)>> {
        sqlx::query_as("SELECT status, COUNT(*) FROM drm_sessions GROUP BY status")
            .fetch_all(&self.pool)
            .await
    }

    async fn released_bytes(&self) -> sqlx::Result<i64> {
        // PostgreSQL's SUM of a BIGINT is a NUMERIC: cast back.
        sqlx::query_scalar(
            "SELECT CAST(COALESCE(SUM(file_size), 0) AS BIGINT) FROM drm_sessions WHERE status = 'RELEASED'",
        )
        .fetch_one(&self.pool)
        .await
    }

    async fn notifications(&self, session_id: &SessionId) -> sqlx::Result<Vec<NotificationRow>> {
        sqlx::query_as("SELECT attempt, at, status, error FROM drm_notifications WHERE session_id = $1 ORDER BY attempt")
            .bind(session_id)
            .fetch_all(&self.pool)
            .await
    }

    async fn sessions(
        &self,
        filter: &SessionFilter<'_>,
        now: i64,
    ) -> sqlx::Result<Vec<SessionRow>> {
        // The status compared is the one shown (`Drm::effective_status`); the cursor is a row
        // value, so sessions created in the same second page by id.
        sqlx::query_as(
            "SELECT session_id, org_login_type_id, file_id, file_type, \"user\", status, result, reason, extra,
                    file_size, file_sha256, created_at, expires_at
             FROM drm_sessions
             WHERE ($1 IS NULL OR org_login_type_id = $1)
               AND ($2 IS NULL OR $2 = CASE WHEN status IN ('PENDING', 'GRANTED') AND expires_at <= $3
                                            THEN 'EXPIRED' ELSE status END)
               AND ($4 IS NULL OR (created_at, session_id) <
                                  (SELECT created_at, session_id FROM drm_sessions WHERE session_id = $4))
             ORDER BY created_at DESC, session_id DESC
             LIMIT $5",
        )
        .bind(filter.org_login_type_id)
        .bind(filter.status.map(|s| s.as_str()))
        .bind(now)
        .bind(filter.before)
        .bind(filter.limit)
        .fetch_all(&self.pool)
        .await
    }

    async fn notifications_of(
        &self,
        session_ids: &[SessionId],
    ) -> sqlx::Result<Vec<SessionNotificationRow>> {
        if session_ids.is_empty() {
            return Ok(Vec::new());
        }
        // One statement, with one parameter per id (a page holds at most 500).
        let mut b: QueryBuilder<_> = QueryBuilder::new(
            "SELECT session_id, attempt, at, status, error FROM drm_notifications WHERE session_id IN (",
        );
        let mut ids = b.separated(", ");
        for id in session_ids {
            ids.push_bind(id.as_str());
        }
        b.push(") ORDER BY session_id, attempt");
        b.build_query_as().fetch_all(&self.pool).await
    }

    async fn adopt_unnotified_sessions(
        &self,
        node: Option<&str>,
        up: &[String],
        now: i64,
    ) -> sqlx::Result<Vec<SessionId>> {
        let mut b = QueryBuilder::new("UPDATE drm_sessions SET node_id = ");
        b.push_bind(node).push(" WHERE status = 'PENDING' AND expires_at > ");
        b.push_bind(now).push(
            " AND NOT EXISTS (SELECT 1 FROM drm_notifications n
               WHERE n.session_id = drm_sessions.session_id AND n.status BETWEEN 200 AND 299) AND ",
        );
        kep_core::storage::push_unowned(&mut b, up);
        b.push(" RETURNING session_id, created_at");
        let mut rows: Vec<(SessionId, i64)> = b.build_query_as().fetch_all(&self.pool).await?;
        rows.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        Ok(rows.into_iter().map(|r| r.0).collect())
    }
}
}
