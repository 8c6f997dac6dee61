//! The live service's storage seam: what it keeps (services and admin tokens) behind one
//! [`Store`] interface, so a second backend slots in beside [`sqlite`] without touching
//! the domain code. [`open`] is the one place that picks the backend.

use std::sync::Arc;

use kep_core::service::Context;

use crate::ids::ServiceId;

mod sqlite;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ServiceRow {
    pub service_id: ServiceId,
    pub admin_ha: String,
    pub service_hs: String,
    pub admin_uuid: String,
    pub external_verifier_url: Option<String>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TokenRow {
    pub token_hash: String,
    pub service_id: ServiceId,
    pub expires_at: i64,
}

#[async_trait::async_trait]
pub trait Store: Send + Sync {
    /// Every service, in creation order.
    async fn services(&self) -> sqlx::Result<Vec<ServiceRow>>;
    /// Inserts a new service; `Ok(false)` when the id is taken.
    async fn insert_service(&self, row: &ServiceRow, now: i64) -> sqlx::Result<bool>;
    /// `Ok(false)` for an unknown service.
    async fn update_secrets(
        &self,
        service_id: &ServiceId,
        ha: &str,
        hs: &str,
    ) -> sqlx::Result<bool>;
    /// `Ok(false)` for an unknown service.
    async fn update_verifier(
        &self,
        service_id: &ServiceId,
        url: Option<&str>,
    ) -> sqlx::Result<bool>;
    /// The admin tokens still valid at `now`.
    async fn live_tokens(&self, now: i64) -> sqlx::Result<Vec<TokenRow>>;
    /// Stores a new token and drops the expired ones, at once.
    async fn insert_token(&self, row: &TokenRow, now: i64) -> sqlx::Result<()>;
}

/// Opens the service's store (`live.db` under the data dir), migrated.
pub async fn open(ctx: &Context) -> anyhow::Result<Arc<dyn Store>> {
    let pool = ctx.database("live", &sqlite::MIGRATOR).await?;
    Ok(Arc::new(sqlite::SqliteStore::new(pool)))
}
