//! The live store on SQLite (`live.db`).

use sqlx::SqlitePool;
use sqlx::migrate::Migrator;

use super::{ServiceRow, Store, TokenRow};
use crate::ids::ServiceId;

pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations/sqlite");

pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    pub fn new(pool: SqlitePool) -> Self {
        SqliteStore { pool }
    }
}

#[async_trait::async_trait]
impl Store for SqliteStore {
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
             VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (service_id) DO NOTHING",
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
            "UPDATE live_services SET admin_ha = ?, service_hs = ? WHERE service_id = ?",
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
            sqlx::query("UPDATE live_services SET external_verifier_url = ? WHERE service_id = ?")
                .bind(url)
                .bind(service_id)
                .execute(&self.pool)
                .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn live_tokens(&self, now: i64) -> sqlx::Result<Vec<TokenRow>> {
        sqlx::query_as(
            "SELECT token_hash, service_id, expires_at FROM live_tokens WHERE expires_at > ?",
        )
        .bind(now)
        .fetch_all(&self.pool)
        .await
    }

    async fn insert_token(&self, row: &TokenRow, now: i64) -> sqlx::Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM live_tokens WHERE expires_at <= ?")
            .bind(now)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO live_tokens (token_hash, service_id, expires_at) VALUES (?, ?, ?)",
        )
        .bind(&row.token_hash)
        .bind(&row.service_id)
        .bind(row.expires_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await
    }
}
