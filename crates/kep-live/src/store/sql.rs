//! The live store in SQL, one text for both backends: SQLite (`live.db`) and PostgreSQL
//! (schema `kep_live`). Parameters are `$1`, `$2` … in the order they appear, which both
//! read alike; each backend has its own migrations (`migrations/<backend>/`).

use sqlx::QueryBuilder;
use sqlx::migrate::Migrator;

use super::{
    Column, NewWebhookEvent, ServiceRow, Store, TokenRow, WebhookAttempt, WebhookEventRow,
    WebhookRow,
};
use crate::ids::ServiceId;

pub static SQLITE: Migrator = sqlx::migrate!("./migrations/sqlite");
pub static POSTGRES: Migrator = sqlx::migrate!("./migrations/postgres");

const EVENT_COLUMNS: &str =
    "id, service_id, room_id, event, body, at, status, attempts, last_error, delivered_at";

kep_core::sql_store! {
    impl Store {
    async fn services(&self) -> sqlx::Result<Vec<ServiceRow>> {
        sqlx::query_as(
            "SELECT service_id, admin_ha, service_hs, admin_uuid, external_verifier_url
             FROM live_services ORDER BY created_at, service_id",
        )
        .fetch_all(&self.pool)
        .await
    }

    async fn insert_service(&self, row: &ServiceRow, now: i64) -> sqlx::Result<bool> {
        let done = sqlx::query(
            "INSERT INTO live_services
               (service_id, admin_ha, service_hs, admin_uuid, external_verifier_url, created_at)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (service_id) DO NOTHING",
        )
        .bind(&row.service_id)
        .bind(&row.admin_ha)
        .bind(&row.service_hs)
        .bind(&row.admin_uuid)
        .bind(&row.external_verifier_url)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn update_secrets(
        &self,
        service_id: &ServiceId,
        ha: &str,
        hs: &str,
    ) -> sqlx::Result<bool> {
        let done = sqlx::query(
            "UPDATE live_services SET admin_ha = $1, service_hs = $2 WHERE service_id = $3",
        )
        .bind(ha)
        .bind(hs)
        .bind(service_id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn update_verifier(
        &self,
        service_id: &ServiceId,
        url: Option<&str>,
    ) -> sqlx::Result<bool> {
        let done =
            sqlx::query("UPDATE live_services SET external_verifier_url = $1 WHERE service_id = $2")
                .bind(url)
                .bind(service_id)
                .execute(&self.pool)
                .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn live_tokens(&self, now: i64) -> sqlx::Result<Vec<TokenRow>> {
        sqlx::query_as(
            "SELECT token_hash, service_id, expires_at FROM live_tokens WHERE expires_at > $1",
        )
        .bind(now)
        .fetch_all(&self.pool)
        .await
    }

    async fn insert_token(&self, row: &TokenRow, now: i64) -> sqlx::Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM live_tokens WHERE expires_at <= $1")
            .bind(now)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO live_tokens (token_hash, service_id, expires_at) VALUES ($1, $2, $3)",
        )
        .bind(&row.token_hash)
        .bind(&row.service_id)
        .bind(row.expires_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await
    }

    async fn seal_check(&self, check: &str) -> sqlx::Result<String> {
        sqlx::query("INSERT INTO live_seal (id, key_check) VALUES (1, $1) ON CONFLICT (id) DO NOTHING")
            .bind(check)
            .execute(&self.pool)
            .await?;
        sqlx::query_scalar("SELECT key_check FROM live_seal WHERE id = 1")
            .fetch_one(&self.pool)
            .await
    }

    async fn reseal(
        &self,
        column: Column,
        service_id: &ServiceId,
        old: &str,
        new: &str,
    ) -> sqlx::Result<()> {
        let (table, column) = column.name();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE {table} SET {column} = $1 WHERE service_id = $2 AND {column} = $3"
        )))
        .bind(new)
        .bind(service_id)
        .bind(old)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn webhooks(&self) -> sqlx::Result<Vec<WebhookRow>> {
        sqlx::query_as(
            "SELECT service_id, url, enabled, secret, disabled_reason FROM live_webhooks",
        )
        .fetch_all(&self.pool)
        .await
    }

    async fn webhook(&self, service_id: &ServiceId) -> sqlx::Result<Option<WebhookRow>> {
        sqlx::query_as(
            "SELECT service_id, url, enabled, secret, disabled_reason FROM live_webhooks
             WHERE service_id = $1",
        )
        .bind(service_id)
        .fetch_optional(&self.pool)
        .await
    }

    async fn put_webhook(&self, row: &WebhookRow, now: i64) -> sqlx::Result<()> {
        sqlx::query(
            "INSERT INTO live_webhooks (service_id, url, enabled, secret, disabled_reason, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (service_id) DO UPDATE SET url = excluded.url, enabled = excluded.enabled,
               secret = excluded.secret, disabled_reason = excluded.disabled_reason,
               updated_at = excluded.updated_at",
        )
        .bind(&row.service_id)
        .bind(&row.url)
        .bind(row.enabled)
        .bind(&row.secret)
        .bind(&row.disabled_reason)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn room_part(
        &self,
        service_id: &str,
        room_id: &str,
        node: &str,
        open: bool,
    ) -> sqlx::Result<bool> {
        // Only several nodes share rooms, and only on PostgreSQL (`live_room_parts`).
        if !ON_POSTGRES {
            return Ok(true);
        }
        let mut tx = self.pool.begin().await?;
        // One room's parts change one at a time: of two parts opening at once, one is first.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
            .bind(format!("kep room {service_id}/{room_id}"))
            .execute(&mut *tx)
            .await?;
        let change = if open {
            "INSERT INTO live_room_parts (service_id, room_id, node_id) VALUES ($1, $2, $3)
             ON CONFLICT DO NOTHING"
        } else {
            // With the parts of nodes that left the cluster.
            "DELETE FROM live_room_parts WHERE (service_id = $1 AND room_id = $2 AND node_id = $3)
               OR node_id NOT IN (SELECT node_id FROM kep_cluster.nodes)"
        };
        sqlx::query(change)
            .bind(service_id)
            .bind(room_id)
            .bind(node)
            .execute(&mut *tx)
            .await?;
        let others: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM live_room_parts p JOIN kep_cluster.nodes n ON n.node_id = p.node_id
             WHERE p.service_id = $1 AND p.room_id = $2 AND p.node_id <> $3
               AND n.seen_at > (extract(epoch from clock_timestamp()) * 1000)::bigint - {}",
            kep_core::cluster::DEAD_AFTER_MS
        )))
        .bind(service_id)
        .bind(room_id)
        .bind(node)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(others == 0)
    }

    async fn insert_webhook_events(
        &self,
        events: &mut [NewWebhookEvent],
        node: Option<&str>,
    ) -> sqlx::Result<()> {
        let mut tx = self.pool.begin().await?;
        // The batch's numbers, taken from the one counter every node shares; its row is
        // held until the batch is in, so numbers are written in the order they were taken.
        let last: i64 = sqlx::query_scalar(
            "UPDATE live_webhook_seq SET last = last + $1 RETURNING last",
        )
        .bind(i64::try_from(events.len()).unwrap_or(i64::MAX))
        .fetch_one(&mut *tx)
        .await?;
        let first = last - i64::try_from(events.len()).unwrap_or(i64::MAX) + 1;
        for (e, seq) in events.iter_mut().zip(first..) {
            e.seq = seq;
        }
        // 7 values a row: well under SQLite's 32,766 per statement.
        for chunk in events.chunks(1024) {
            let mut b: QueryBuilder<_> = QueryBuilder::new(
                "INSERT INTO live_webhook_events (seq, id, service_id, room_id, event, body, at, node_id, status) ",
            );
            b.push_values(chunk, |mut v, e| {
                v.push_bind(e.seq)
                    .push_bind(&e.id)
                    .push_bind(&*e.service_id)
                    .push_bind(&e.room_id)
                    .push_bind(e.event)
                    .push_bind(&e.body)
                    .push_bind(e.at)
                    .push_bind(node)
                    .push("'pending'");
            });
            b.build().execute(&mut *tx).await?;
        }
        tx.commit().await
    }

    async fn insert_nonce(
        &self,
        nonce: &str,
        service_id: &str,
        issued_at: i64,
        expired_at: i64,
    ) -> sqlx::Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM live_nonces WHERE issued_at <= $1")
            .bind(expired_at)
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO live_nonces (nonce, service_id, issued_at) VALUES ($1, $2, $3)")
            .bind(nonce)
            .bind(service_id)
            .bind(issued_at)
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    }

    async fn take_nonce(&self, nonce: &str) -> sqlx::Result<Option<(String, i64)>> {
        sqlx::query_as("DELETE FROM live_nonces WHERE nonce = $1 RETURNING service_id, issued_at")
            .bind(nonce)
            .fetch_optional(&self.pool)
            .await
    }

    async fn service(&self, service_id: &ServiceId) -> sqlx::Result<Option<ServiceRow>> {
        sqlx::query_as(
            "SELECT service_id, admin_ha, service_hs, admin_uuid, external_verifier_url
             FROM live_services WHERE service_id = $1",
        )
        .bind(service_id)
        .fetch_optional(&self.pool)
        .await
    }

    async fn token(&self, token_hash: &str) -> sqlx::Result<Option<TokenRow>> {
        sqlx::query_as(
            "SELECT token_hash, service_id, expires_at FROM live_tokens WHERE token_hash = $1",
        )
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await
    }

    async fn adopt_webhook_events(
        &self,
        node: Option<&str>,
        up: &[String],
    ) -> sqlx::Result<Vec<(ServiceId, String, i64)>> {
        let mut b = QueryBuilder::new("UPDATE live_webhook_events SET node_id = ");
        b.push_bind(node).push(" WHERE status = 'pending' AND ");
        kep_core::storage::push_unowned(&mut b, up);
        b.push(" RETURNING service_id, room_id, seq");
        let mut rows: Vec<(ServiceId, String, i64)> =
            b.build_query_as().fetch_all(&self.pool).await?;
        rows.sort_by_key(|r| r.2);
        Ok(rows)
    }

    async fn webhook_event(&self, seq: i64) -> sqlx::Result<Option<WebhookEventRow>> {
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {EVENT_COLUMNS} FROM live_webhook_events WHERE seq = $1"
        )))
        .bind(seq)
        .fetch_optional(&self.pool)
        .await
    }

    async fn webhook_attempted(&self, outcomes: &[WebhookAttempt]) -> sqlx::Result<()> {
        let mut tx = self.pool.begin().await?;
        for o in outcomes {
            sqlx::query(
                "UPDATE live_webhook_events SET status = $1, attempts = $2, last_error = $3,
                   delivered_at = $4 WHERE seq = $5",
            )
            .bind(o.status)
            .bind(o.attempts)
            .bind(&o.error)
            .bind(o.delivered_at)
            .bind(o.seq)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await
    }

    async fn webhook_events(
        &self,
        service_id: &ServiceId,
        limit: i64,
    ) -> sqlx::Result<Vec<WebhookEventRow>> {
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {EVENT_COLUMNS} FROM live_webhook_events WHERE service_id = $1
             ORDER BY seq DESC LIMIT $2"
        )))
        .bind(service_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
    }
}
}
