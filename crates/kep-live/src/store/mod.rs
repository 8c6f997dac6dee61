//! The live service's storage seam: what it keeps (services, admin tokens, Provision
//! nonces, webhooks and their events) behind one [`Store`] interface, on SQLite or
//! PostgreSQL ([`sql`]). [`open`] is the one place that picks the backend, and hands out
//! the store [`sealed`], which seals and opens the secret-equivalent values.

use std::sync::Arc;

use kep_core::service::Context;

use crate::ids::ServiceId;

mod sealed;
mod sql;

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

/// A service's webhook.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WebhookRow {
    pub service_id: ServiceId,
    pub url: String,
    pub enabled: bool,
    pub secret: String,
    pub disabled_reason: Option<String>,
}

/// A room event to write down for delivery.
#[derive(Debug, Clone)]
pub struct NewWebhookEvent {
    /// Its place in the order of every event, given as it is written down.
    pub seq: i64,
    pub id: String,
    pub service_id: std::sync::Arc<str>,
    pub room_id: String,
    pub event: &'static str,
    /// The JSON body posted, as sent.
    pub body: String,
    pub at: i64,
}

impl WebhookEventRow {
    /// An event just written down.
    pub fn pending(e: NewWebhookEvent) -> Self {
        WebhookEventRow {
            id: e.id,
            service_id: ServiceId::from(e.service_id.to_string()),
            room_id: e.room_id,
            event: e.event.to_owned(),
            body: e.body,
            at: e.at,
            status: "pending".to_owned(),
            attempts: 0,
            last_error: None,
            delivered_at: None,
        }
    }
}

/// How an event's last attempt went: `status` pending (to be tried again), delivered or
/// failed.
#[derive(Debug, Clone)]
pub struct WebhookAttempt {
    pub seq: i64,
    pub status: &'static str,
    pub attempts: i64,
    pub error: Option<String>,
    pub delivered_at: Option<i64>,
}

/// A room event as written down, with how its delivery went.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WebhookEventRow {
    pub id: String,
    pub service_id: ServiceId,
    pub room_id: String,
    pub event: String,
    pub body: String,
    pub at: i64,
    pub status: String,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub delivered_at: Option<i64>,
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
    /// One service, as stored now (what another node changed).
    async fn service(&self, service_id: &ServiceId) -> sqlx::Result<Option<ServiceRow>>;
    /// One admin token, by its hash.
    async fn token(&self, token_hash: &str) -> sqlx::Result<Option<TokenRow>>;
    /// Stores a Provision nonce issued at `issued_at` (unix ms) and drops those issued at or
    /// before `expired_at`, at once.
    async fn insert_nonce(
        &self,
        nonce: &str,
        service_id: &str,
        issued_at: i64,
        expired_at: i64,
    ) -> sqlx::Result<()>;
    /// Uses a nonce up: its service and when it was issued, if it was there.
    async fn take_nonce(&self, nonce: &str) -> sqlx::Result<Option<(String, i64)>>;
    /// The admin tokens still valid at `now`.
    async fn live_tokens(&self, now: i64) -> sqlx::Result<Vec<TokenRow>>;
    /// Stores a new token and drops the expired ones, at once.
    async fn insert_token(&self, row: &TokenRow, now: i64) -> sqlx::Result<()>;

    /// Every service's webhook.
    async fn webhooks(&self) -> sqlx::Result<Vec<WebhookRow>>;
    /// One service's webhook, as stored now (what another node changed).
    async fn webhook(&self, service_id: &ServiceId) -> sqlx::Result<Option<WebhookRow>>;
    /// Sets a service's webhook whole (a known service's).
    async fn put_webhook(&self, row: &WebhookRow, now: i64) -> sqlx::Result<()>;
    /// With several nodes: records that `node` now holds a part of the room (`open`) or no
    /// longer does; whether no other node that is up holds one (the room's first part to
    /// open, or its last to close). Always true on a node of its own.
    async fn room_part(
        &self,
        service_id: &str,
        room_id: &str,
        node: &str,
        open: bool,
    ) -> sqlx::Result<bool>;
    /// Numbers room events (their `seq`, from the counter every node shares) and writes
    /// them down, pending, owned by `node`, in one transaction.
    async fn insert_webhook_events(
        &self,
        events: &mut [NewWebhookEvent],
        node: Option<&str>,
    ) -> sqlx::Result<()>;
    /// Makes `node` the owner of the pending events no node of `up` owns
    /// ([`kep_core::outbox::Outbox::adopt`]); they, oldest first: (service, room, seq).
    async fn adopt_webhook_events(
        &self,
        node: Option<&str>,
        up: &[String],
    ) -> sqlx::Result<Vec<(ServiceId, String, i64)>>;
    async fn webhook_event(&self, seq: i64) -> sqlx::Result<Option<WebhookEventRow>>;
    /// Records attempts' outcomes, in one transaction.
    async fn webhook_attempted(&self, outcomes: &[WebhookAttempt]) -> sqlx::Result<()>;
    /// A service's events, newest first.
    async fn webhook_events(
        &self,
        service_id: &ServiceId,
        limit: i64,
    ) -> sqlx::Result<Vec<WebhookEventRow>>;

    /// Keeps `check` as the seal key's check value unless one is kept already; the one kept.
    async fn seal_check(&self, check: &str) -> sqlx::Result<String>;
    /// Sets a service's value of `column` to `new` if it is still `old`.
    async fn reseal(
        &self,
        column: Column,
        service_id: &ServiceId,
        old: &str,
        new: &str,
    ) -> sqlx::Result<()>;
}

/// The columns that hold what opens something by itself, kept sealed
/// ([`kep_core::seal`]): the Provision check's hash and the join tokens' key of a service,
/// its webhook's signing secret. Each is keyed by `service_id`.
#[derive(Debug, Clone, Copy)]
pub enum Column {
    AdminHa,
    ServiceHs,
    WebhookSecret,
}

impl Column {
    /// Its table and column.
    pub fn name(self) -> (&'static str, &'static str) {
        match self {
            Column::AdminHa => ("live_services", "admin_ha"),
            Column::ServiceHs => ("live_services", "service_hs"),
            Column::WebhookSecret => ("live_webhooks", "secret"),
        }
    }

    /// What a value of the column is sealed at: `<table>.<column>`, then the service's id.
    pub fn place(self, service_id: &str) -> String {
        let (table, column) = self.name();
        format!("{table}.{column}\n{service_id}")
    }
}

/// Opens the service's store (`live.db` under the data dir, or schema `kep_live` of the
/// PostgreSQL `database_url`), migrated, checked against the context's seal key and with
/// any value left in the clear by an earlier kep sealed.
pub async fn open(ctx: &Context) -> anyhow::Result<Arc<dyn Store>> {
    use kep_core::storage::Database;
    let store: Arc<dyn Store> = match ctx
        .database_on("live", &sql::SQLITE, &sql::POSTGRES)
        .await?
    {
        Database::Sqlite(pool) => Arc::new(sql::SqliteStore::new(pool)),
        Database::Postgres(pool) => Arc::new(sql::PgStore::new(pool)),
    };
    sealed::Sealed::over(store, ctx.seal.clone()).await
}
