//! The adapter's storage seam: org login types, DRM sessions and notification attempts
//! behind one [`Store`] interface, so a second backend slots in beside [`sqlite`] without
//! touching the domain code. [`open`] is the one place that picks the backend.

use std::sync::Arc;

use kep_api::adapter::{FileType, SessionStatus};
use kep_core::service::Context;
use sqlx::types::Json;

use crate::ids::{OrgLoginTypeId, SessionId};
use data_model::DataModel;

pub(crate) mod data_model;
mod sql;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OrgRow {
    pub id: OrgLoginTypeId,
    pub method: String,
    pub adapter_agent: String,
    pub data_model: Option<Json<DataModel>>,
    pub secret_hash: String,
}

/// What an org login type is made of, as it is written.
pub struct NewOrg<'a> {
    pub method: &'a str,
    pub adapter_agent: &'a str,
    pub data_model: Option<DataModel>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SessionRow {
    pub session_id: SessionId,
    pub org_login_type_id: OrgLoginTypeId,
    pub file_id: String,
    #[sqlx(try_from = "String")]
    pub file_type: FileType,
    pub user: Option<String>,
    #[sqlx(try_from = "String")]
    pub status: SessionStatus,
    pub result: Option<String>,
    pub reason: Option<String>,
    pub extra: Option<Json<serde_json::Value>>,
    pub file_size: Option<i64>,
    pub file_sha256: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
}

/// The agent's `uploadResult`, as it is recorded.
pub struct AgentResult<'a> {
    pub status: SessionStatus,
    pub result: &'a str,
    pub reason: &'a str,
    pub extra: Option<&'a serde_json::Value>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct NotificationRow {
    pub attempt: i64,
    pub at: i64,
    pub status: Option<i64>,
    pub error: Option<String>,
}

/// A notification attempt with its session, as a listing reads them.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SessionNotificationRow {
    pub session_id: SessionId,
    #[sqlx(flatten)]
    pub notification: NotificationRow,
}

/// Which sessions a listing wants, newest first (by `created_at`, then session id).
pub struct SessionFilter<'a> {
    pub org_login_type_id: Option<OrgLoginTypeId>,
    /// As shown: an open session past its expiry counts as `EXPIRED`.
    pub status: Option<SessionStatus>,
    /// Only those after this session in that order; none when it does not exist.
    pub before: Option<&'a SessionId>,
    pub limit: i64,
}

#[async_trait::async_trait]
pub trait Store: Send + Sync {
    /// A new org of id `given`, or the next free one; `None` when `given` is taken.
    async fn insert_org(
        &self,
        org: &NewOrg<'_>,
        given: Option<OrgLoginTypeId>,
        secret_hash: &str,
        now: i64,
    ) -> sqlx::Result<Option<OrgLoginTypeId>>;
    async fn org(&self, id: OrgLoginTypeId) -> sqlx::Result<Option<OrgRow>>;
    /// Every org login type, by id.
    async fn orgs(&self) -> sqlx::Result<Vec<OrgRow>>;
    /// `Ok(false)` for an unknown org login type.
    async fn update_org(
        &self,
        id: OrgLoginTypeId,
        org: &NewOrg<'_>,
        now: i64,
    ) -> sqlx::Result<bool>;
    /// `Ok(false)` for an unknown org login type.
    async fn set_secret(
        &self,
        id: OrgLoginTypeId,
        secret_hash: &str,
        now: i64,
    ) -> sqlx::Result<bool>;
    /// Deletes the org and its sessions at once; the ids of those sessions, so their files
    /// can go. `None` for an unknown org login type.
    async fn delete_org(&self, id: OrgLoginTypeId) -> sqlx::Result<Option<Vec<SessionId>>>;

    /// A new session, whose agent `node` notifies.
    async fn insert_session(&self, s: &SessionRow, node: Option<&str>) -> sqlx::Result<()>;
    async fn session(&self, session_id: &SessionId) -> sqlx::Result<Option<SessionRow>>;
    /// Records the agent's result if the session is still `PENDING` and unexpired.
    async fn record_result(
        &self,
        session_id: &SessionId,
        result: &AgentResult<'_>,
        now: i64,
    ) -> sqlx::Result<bool>;
    /// Marks the file released if the session is still `GRANTED` and unexpired.
    async fn record_release(
        &self,
        session_id: &SessionId,
        size: i64,
        sha256: &str,
        now: i64,
    ) -> sqlx::Result<bool>;
    /// Marks the sessions past their expiry `EXPIRED`: which ones, of which org.
    async fn expire(&self, now: i64) -> sqlx::Result<Vec<(SessionId, OrgLoginTypeId)>>;

    async fn record_notification(
        &self,
        session_id: &SessionId,
        attempt: i64,
        at_ms: i64,
        status: Option<u16>,
        error: Option<&str>,
    ) -> sqlx::Result<()>;
    /// Sessions still `PENDING` at `now` whose agent has not answered 2xx and that no node
    /// of `up` notifies, now `node`'s to notify ([`kep_core::outbox::Outbox::adopt`]),
    /// oldest first.
    async fn adopt_unnotified_sessions(
        &self,
        node: Option<&str>,
        up: &[String],
        now: i64,
    ) -> sqlx::Result<Vec<SessionId>>;
    /// A session's notification attempts, in order.
    async fn notifications(&self, session_id: &SessionId) -> sqlx::Result<Vec<NotificationRow>>;
    /// The sessions `filter` picks at `now`, in its order.
    async fn sessions(&self, filter: &SessionFilter<'_>, now: i64)
    -> sqlx::Result<Vec<SessionRow>>;
    /// The notification attempts of these sessions, by session, each session's in order.
    async fn notifications_of(
        &self,
        session_ids: &[SessionId],
    ) -> sqlx::Result<Vec<SessionNotificationRow>>;
    /// How many sessions there are in each stored status.
    async fn sessions_by_status(&self) -> sqlx::Result<Vec<(String, i64)>>;
    /// The bytes of every released file the sessions stored record (a scan: read once, at
    /// start).
    async fn released_bytes(&self) -> sqlx::Result<i64>;
}

/// Opens the adapter's store (`adapter.db` under the data dir, or schema `kep_adapter` of
/// the PostgreSQL `database_url`), migrated.
pub async fn open(ctx: &Context) -> anyhow::Result<Arc<dyn Store>> {
    use kep_core::storage::Database;
    Ok(
        match ctx
            .database_on("adapter", &sql::SQLITE, &sql::POSTGRES)
            .await?
        {
            Database::Sqlite(pool) => Arc::new(sql::SqliteStore::new(pool)),
            Database::Postgres(pool) => Arc::new(sql::PgStore::new(pool)),
        },
    )
}
